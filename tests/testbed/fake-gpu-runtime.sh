#!/usr/bin/env bash
# FAKE GPU plumbing for the docker engine of this GPU-less machine, so the docker runtime role's
# GPU options work for real against the engine (the test hosts of fleet.py use this engine):
#
#   up      1. copies the FAKE tests/fakes/bin/nvidia-container-runtime-hook into $HOOK_DIR and,
#              unless `docker run --gpus all` already works, restarts dockerd with $HOOK_DIR first
#              on its PATH: Docker 20.10 registers its built-in "nvidia" device driver only when
#              that binary is on dockerd's PATH at start (then --gpus / device_requests with
#              driver nvidia are accepted; the hook runs as a no-op OCI prestart hook).
#           2. creates FAKE ROCm device nodes /dev/kfd and /dev/dri/renderD128 ... renderD135
#              (one render node per GPU of the 8-GPU fake profiles, GPU i -> renderD(128+i), as
#              the FAKE amd-smi's `list -e` maps them; char 1:3, i.e. clones of /dev/null) when
#              absent, recording what it made in $STATE_FILE.
#           3. verifies `docker run --rm --gpus all` and `docker run --rm --device /dev/kfd
#              --device /dev/dri` (image vllm-fleet/base:bookworm, --network none).
#   down    removes only the nodes/dirs `up` recorded, restarts dockerd without $HOOK_DIR on its
#           PATH if it has it, then removes $HOOK_DIR.
#   status  prints what is in place.
#
# dockerd is restarted only by its PID (pidfile /var/run/docker.pid) and started again with
# tests/testbed/docker-engine.sh (same PATH otherwise). A plain restart stops running
# containers, so while any container runs it waits up to WAIT_IDLE_S (default 0) for the engine
# to be idle, then refuses, unless FORCE_RESTART=1: that restarts with live-restore (written to
# /etc/docker/daemon.json, loaded with SIGHUP before the restart), so running containers keep
# running; only in-flight `docker exec`/`attach`/`logs -f` streams and API calls made during the
# few seconds of the restart fail. Best: run `up` once, before starting test fleets.
#
# Env: FAKE_GPU_RUNTIME_ROOT (default /opt/vllm-fleet-testbed/fake-gpu-runtime),
#      DOCKERD_PIDFILE (default /var/run/docker.pid), WAIT_IDLE_S, FORCE_RESTART=1, VERIFY_IMAGE.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
ROOT=${FAKE_GPU_RUNTIME_ROOT:-/opt/vllm-fleet-testbed/fake-gpu-runtime}
HOOK_DIR=$ROOT/bin
STATE_FILE=$ROOT/created-nodes
HOOK_SRC=$REPO/tests/fakes/bin/nvidia-container-runtime-hook
PIDFILE=${DOCKERD_PIDFILE:-/var/run/docker.pid}
IMAGE=${VERIFY_IMAGE:-vllm-fleet/base:bookworm}
RENDER_NODES=(/dev/dri/renderD{128..135})

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
    local idle_deadline=$(( $(date +%s) + ${WAIT_IDLE_S:-0} ))
    local waited=0
    while (( running > 0 )) && [[ ${FORCE_RESTART:-0} != 1 ]] && (( $(date +%s) < idle_deadline )); do
        sleep 5; running=$(docker ps -q | wc -l); waited=$((waited + 5))
        (( waited % 20 == 0 )) && log "waiting for the engine to be idle: $running container(s) still running, $waited s"
    done
    if (( running > 0 )); then
        if [[ ${FORCE_RESTART:-0} != 1 ]]; then
            docker ps --format '  {{.Names}} ({{.Image}})' >&2
            die "$running container(s) running; a restart of dockerd would stop them. Stop them, wait (WAIT_IDLE_S=600) or FORCE_RESTART=1 (live-restore keeps them running)"
        fi
        enable_live_restore "$pid"
    fi
    local t; t=$(date +%s.%N)
    log "restarting dockerd (pid $pid) with PATH=$new_path"
    kill -TERM "$pid"
    local _
    for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && die "dockerd pid $pid did not exit within 60 s"
    PATH=$new_path bash "$HERE/docker-engine.sh" | sed 's/^/  /'
    log "dockerd restarted in $(elapsed "$t") s (pid $(dockerd_pid))"
}

# Turn on live-restore in the running daemon (reloadable: SIGHUP re-reads daemon.json).
enable_live_restore() {
    local pid=$1 f=/etc/docker/daemon.json
    [[ $(docker info --format '{{.LiveRestoreEnabled}}') == true ]] && return 0
    if [[ -e $f ]]; then
        python3 - "$f" <<'PY' || die "could not add live-restore to $f"
import json, sys
p = sys.argv[1]; d = json.load(open(p)); d["live-restore"] = True
json.dump(d, open(p, "w"), indent=2)
PY
    else
        mkdir -p /etc/docker; printf '{\n  "live-restore": true\n}\n' >"$f"
        echo "file $f" >>"$STATE_FILE"
    fi
    kill -HUP "$pid"
    local _; for _ in $(seq 1 20); do [[ $(docker info --format '{{.LiveRestoreEnabled}}') == true ]] && break; sleep 0.5; done
    [[ $(docker info --format '{{.LiveRestoreEnabled}}') == true ]] || die "live-restore did not turn on after SIGHUP"
    log "live-restore on (running containers survive the restart)"
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
    touch "$STATE_FILE"
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
    local node
    for node in "${RENDER_NODES[@]}"; do mknod_fake "$node"; done
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
          sh -c 'ls -l /dev/kfd /dev/dri/renderD128 /dev/dri/renderD135 | awk "{print \$1, \$NF}" | tr "\n" " "') \
        || die "docker run --device /dev/kfd --device /dev/dri failed"
    log "verify: docker run --rm --device /dev/kfd --device /dev/dri -> ok ($out) $(elapsed "$t") s"
}

cmd_down() {
    # dockerd first (a restart with FORCE_RESTART=1 may record a daemon.json it wrote).
    local pid; pid=$(dockerd_pid || true)
    if [[ -n $pid ]] && dockerd_path "$pid" | tr ':' '\n' | grep -qxF "$HOOK_DIR"; then
        local clean; clean=$(dockerd_path "$pid" | tr ':' '\n' | grep -vxF "$HOOK_DIR" | paste -sd:)
        mkdir -p "$ROOT"; touch "$STATE_FILE"
        restart_dockerd "$clean"
    fi
    if [[ -f $STATE_FILE ]]; then
        local kind p
        # Reverse order of creation: nodes before their dirs.
        tac "$STATE_FILE" | while read -r kind p; do
            case $kind in
                node) if [[ -c $p && $(stat -c '%t:%T' "$p") == 1:3 ]]; then rm -f "$p"; log "removed FAKE $p"
                      else log "$p is not our FAKE node any more; left alone"; fi ;;
                dir)  rmdir "$p" 2>/dev/null && log "removed $p" || log "$p not empty or gone; left alone" ;;
                file) if [[ $(tr -d ' \n' <"$p" 2>/dev/null) == '{"live-restore":true}' ]]; then rm -f "$p"; log "removed $p (live-restore stays on until dockerd restarts)"
                      else log "$p changed since; left alone"; fi ;;
            esac
        done
        rm -f "$STATE_FILE"
    fi
    rm -rf "$HOOK_DIR"; rmdir "$ROOT" 2>/dev/null || true
    log "down in $(elapsed "$T0") s"
}

cmd_status() {
    local pid; pid=$(dockerd_pid || true)
    echo "dockerd pid: ${pid:-none}; hook dir on its PATH: $([[ -n $pid ]] && dockerd_path "$pid" | tr ':' '\n' | grep -qxF "$HOOK_DIR" && echo yes || echo no)"
    echo "docker --gpus all: $(gpus_work && echo works || echo fails)"
    ls -l /dev/kfd "${RENDER_NODES[@]}" 2>&1 | sed 's/^/  /'
    [[ -f $STATE_FILE ]] && { echo "created by up:"; sed 's/^/  /' "$STATE_FILE"; } || true
}

# One at a time (two `up`s must not both restart dockerd).
mkdir -p "$ROOT"
exec 8>"$(dirname "$ROOT")/.fake-gpu-runtime.lock"
if ! flock -n 8; then
    log "another fake-gpu-runtime.sh is running; waiting (max 900 s)"
    flock -w 900 8 || die "lock $(dirname "$ROOT")/.fake-gpu-runtime.lock still held"
fi

case ${1:-} in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
