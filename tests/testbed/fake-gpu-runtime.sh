#!/usr/bin/env bash
# FAKE GPU plumbing for the docker engine of this GPU-less machine, so the docker runtime role's
# GPU options work for real against the engine (the test hosts of fleet.py use this engine):
#
#   up      1. copies the FAKE tests/fakes/bin/nvidia-container-runtime-hook into $HOOK_DIR and,
#              unless `docker run --gpus all` already works, restarts dockerd with $HOOK_DIR first
#              on its PATH: Docker 20.10 registers its built-in "nvidia" device driver only when
#              that binary is on dockerd's PATH at start (then --gpus / device_requests with
#              driver nvidia are accepted; the hook runs as a no-op OCI prestart hook).
#           2. creates FAKE ROCm device nodes /dev/kfd and /dev/dri/renderD128 (char 1:3, i.e.
#              clones of /dev/null) when absent, recording what it made in $STATE_FILE.
#           3. verifies `docker run --rm --gpus all` and `docker run --rm --device /dev/kfd
#              --device /dev/dri` (image vllm-fleet/base:bookworm, --network none).
#   down    removes only the nodes/dirs `up` recorded, restarts dockerd without $HOOK_DIR on its
#           PATH if it has it, then removes $HOOK_DIR.
#   status  prints what is in place.
#
# dockerd is restarted only by its PID (pidfile /var/run/docker.pid) and started again with
# tests/testbed/docker-engine.sh. A restart stops running containers, so it is refused while any
# container runs, unless FORCE_RESTART=1. Run `up` before starting test fleets.
#
# Env: FAKE_GPU_RUNTIME_ROOT (default /opt/vllm-fleet-testbed/fake-gpu-runtime),
#      DOCKERD_PIDFILE (default /var/run/docker.pid), FORCE_RESTART=1, VERIFY_IMAGE.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
ROOT=${FAKE_GPU_RUNTIME_ROOT:-/opt/vllm-fleet-testbed/fake-gpu-runtime}
HOOK_DIR=$ROOT/bin
STATE_FILE=$ROOT/created-nodes
HOOK_SRC=$REPO/tests/fakes/bin/nvidia-container-runtime-hook
PIDFILE=${DOCKERD_PIDFILE:-/var/run/docker.pid}
IMAGE=${VERIFY_IMAGE:-vllm-fleet/base:bookworm}

T0=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
log() { echo "[fake-gpu-runtime] $*"; }
die() { echo "[fake-gpu-runtime] ERROR: $*" >&2; exit 1; }

dockerd_pid() { [[ -s $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && cat "$PIDFILE"; }
dockerd_path() { tr '\0' '\n' <"/proc/$1/environ" | sed -n 's/^PATH=//p'; }
gpus_work() { docker run --rm --network none --gpus all "$IMAGE" true >/dev/null 2>&1; }

# restart_dockerd NEW_PATH: stop dockerd by its PID, start it again with PATH=NEW_PATH.
restart_dockerd() {
    local new_path=$1 pid
    pid=$(dockerd_pid) || die "no dockerd pid in $PIDFILE: start the engine with $HERE/docker-engine.sh"
    local running; running=$(docker ps -q | wc -l)
    if (( running > 0 )) && [[ ${FORCE_RESTART:-0} != 1 ]]; then
        docker ps --format '  {{.Names}} ({{.Image}})' >&2
        die "$running container(s) running; restarting dockerd would stop them. Stop them or set FORCE_RESTART=1"
    fi
    local t; t=$(date +%s.%N)
    log "restarting dockerd (pid $pid) with PATH=$new_path"
    kill -TERM "$pid"
    local i
    for i in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && die "dockerd pid $pid did not exit within 60 s"
    PATH=$new_path bash "$HERE/docker-engine.sh" | sed 's/^/  /'
    log "dockerd restarted in $(elapsed "$t") s (pid $(dockerd_pid))"
}

mknod_fake() {  # PATH: a char 1:3 node, recorded
    local p=$1
    if [[ -e $p ]]; then log "$p exists ($(stat -c '%F %t:%T' "$p")); left alone"; return 0; fi
    mknod -m 0666 "$p" c 1 3
    echo "node $p" >>"$STATE_FILE"
    log "created FAKE $p (char 1:3, a /dev/null clone)"
}

cmd_up() {
    mkdir -p "$HOOK_DIR"
    [[ -x $HOOK_SRC ]] || die "$HOOK_SRC missing"
    if ! cmp -s "$HOOK_SRC" "$HOOK_DIR/nvidia-container-runtime-hook"; then
        install -m 0755 "$HOOK_SRC" "$HOOK_DIR/nvidia-container-runtime-hook"
        log "installed FAKE hook $HOOK_DIR/nvidia-container-runtime-hook"
    fi
    timeout 10 docker info >/dev/null 2>&1 || bash "$HERE/docker-engine.sh"
    docker image inspect "$IMAGE" >/dev/null 2>&1 || die "$IMAGE missing: run $HERE/build-images.sh"
    if gpus_work; then
        log "docker --gpus already works (nvidia device driver registered); dockerd left alone"
    else
        local pid; pid=$(dockerd_pid) || die "no dockerd pid in $PIDFILE"
        local old_path; old_path=$(dockerd_path "$pid")
        restart_dockerd "$HOOK_DIR:${old_path:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"
        gpus_work || die "docker run --gpus all still fails after the restart: $(docker run --rm --network none --gpus all "$IMAGE" true 2>&1 | tail -n1)"
    fi
    touch "$STATE_FILE"
    mknod_fake /dev/kfd
    if [[ ! -e /dev/dri ]]; then mkdir -m 0755 /dev/dri; echo "dir /dev/dri" >>"$STATE_FILE"; log "created /dev/dri"; fi
    mknod_fake /dev/dri/renderD128
    verify
    log "up in $(elapsed "$T0") s"
}

verify() {
    local t out; t=$(date +%s.%N)
    out=$(docker run --rm --network none --gpus all "$IMAGE" sh -c 'echo "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"') \
        || die "docker run --gpus all failed"
    log "verify: docker run --rm --gpus all -> ok ($out) $(elapsed "$t") s"
    t=$(date +%s.%N)
    out=$(docker run --rm --network none --device /dev/kfd --device /dev/dri "$IMAGE" \
          sh -c 'ls -l /dev/kfd /dev/dri/renderD128 | awk "{print \$1, \$NF}" | tr "\n" " "') \
        || die "docker run --device /dev/kfd --device /dev/dri failed"
    log "verify: docker run --rm --device /dev/kfd --device /dev/dri -> ok ($out) $(elapsed "$t") s"
}

cmd_down() {
    if [[ -f $STATE_FILE ]]; then
        local kind p
        # Nodes first, then dirs (reverse order of creation).
        tac "$STATE_FILE" | while read -r kind p; do
            case $kind in
                node) if [[ -c $p && $(stat -c '%t:%T' "$p") == 1:3 ]]; then rm -f "$p"; log "removed FAKE $p"
                      else log "$p is not our FAKE node any more; left alone"; fi ;;
                dir)  rmdir "$p" 2>/dev/null && log "removed $p" || log "$p not empty or gone; left alone" ;;
            esac
        done
        rm -f "$STATE_FILE"
    fi
    local pid; pid=$(dockerd_pid || true)
    if [[ -n $pid ]] && dockerd_path "$pid" | tr ':' '\n' | grep -qxF "$HOOK_DIR"; then
        local clean; clean=$(dockerd_path "$pid" | tr ':' '\n' | grep -vxF "$HOOK_DIR" | paste -sd:)
        restart_dockerd "$clean"
    fi
    rm -rf "$HOOK_DIR"; rmdir "$ROOT" 2>/dev/null || true
    log "down in $(elapsed "$T0") s"
}

cmd_status() {
    local pid; pid=$(dockerd_pid || true)
    echo "dockerd pid: ${pid:-none}; hook dir on its PATH: $([[ -n $pid ]] && dockerd_path "$pid" | tr ':' '\n' | grep -qxF "$HOOK_DIR" && echo yes || echo no)"
    echo "docker --gpus all: $(gpus_work && echo works || echo fails)"
    ls -l /dev/kfd /dev/dri/renderD128 2>&1 | sed 's/^/  /'
    [[ -f $STATE_FILE ]] && { echo "created by up:"; sed 's/^/  /' "$STATE_FILE"; } || true
}

case ${1:-} in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
