#!/usr/bin/env bash
# Ensure a Docker engine answers on this machine (CI runs as root, PID 1 is not systemd).
#  - installs Debian's docker.io if dockerd is missing (one apt-get update)
#  - starts dockerd in the background if no daemon answers
#    (log: /var/log/dockerd.log, pidfile: /var/run/docker.pid)
#  - waits (bounded, DOCKER_WAIT_S, default 60 s) for `docker info`
# Idempotent: an engine that already answers is left alone.
set -euo pipefail
# shellcheck source=tests/testbed/progress.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/progress.sh"   # with_progress: a line every 20 s

LOG=${DOCKERD_LOG:-/var/log/dockerd.log}
PIDFILE=${DOCKERD_PIDFILE:-/var/run/docker.pid}
WAIT_S=${DOCKER_WAIT_S:-60}
export DEBIAN_FRONTEND=noninteractive

t0=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
log() { echo "[docker-engine] $*"; }

# Each test host runs systemd as PID 1, and every systemd takes inotify instances from root's
# per-user pool (Debian's default 128 is gone at about 25 hosts: the next host's systemd exits
# 255 at boot, with no log). Raise the pool for fleets of 32+ hosts (idempotent).
raise_sysctl() {
    local key=$1 want=$2 have
    have=$(sysctl -n "$key" 2>/dev/null || echo 0)
    if (( have < want )); then
        sysctl -qw "$key=$want" && log "$key $have -> $want" || log "WARNING: could not raise $key ($have)"
    fi
}
raise_sysctl fs.inotify.max_user_instances 8192
raise_sysctl fs.inotify.max_user_watches 1048576

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

# 1. install (client and/or daemon) if missing
if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    ti=$(date +%s.%N)
    log "dockerd missing: installing docker.io from Debian"
    apt-get update -qq
    with_progress docker-engine -- apt-get install -y -qq --no-install-recommends docker.io iptables >/dev/null
    log "installed docker.io in $(elapsed "$ti") s"
fi

# 1b. rsync: the controller sends staged model snapshots with it (the stage phase's first round)
if ! command -v rsync >/dev/null 2>&1; then
    log "rsync missing: installing it from Debian"
    apt-get update -qq
    with_progress docker-engine -- apt-get install -y -qq --no-install-recommends rsync >/dev/null
fi

# 2. already running? leave it alone
if engine_answers; then
    log "engine already answers ($(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?')); nothing to do ($(elapsed "$t0") s)"
    exit 0
fi

# 3. a daemon process that exists but does not answer yet (e.g. just started by
#    someone else): do not start a second one, just wait for it.
started=0
if [[ -s $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    log "dockerd pid $(cat "$PIDFILE") exists but does not answer yet; waiting for it"
else
    rm -f "$PIDFILE"
    ts=$(date +%s.%N)
    mkdir -p "$(dirname "$LOG")"
    # setsid: detach from this shell's process group so it survives the script.
    # no inherited descriptors (callers hold lock files on fds 8/9): dockerd would keep them
    setsid dockerd --pidfile "$PIDFILE" >>"$LOG" 2>&1 </dev/null 8>&- 9>&- &
    started=1
    log "started dockerd (pid $!), log $LOG"
fi

# 4. bounded wait
deadline=$(( $(date +%s) + WAIT_S ))
until engine_answers; do
    if (( $(date +%s) >= deadline )); then
        log "ERROR: docker info did not answer within ${WAIT_S} s; last log lines:"
        tail -n 30 "$LOG" >&2 || true
        exit 1
    fi
    sleep 0.5
done
if (( started )); then
    log "engine answers after $(elapsed "$ts") s since dockerd start"
fi
log "server $(docker version --format '{{.Server.Version}}') / client $(docker version --format '{{.Client.Version}}'); cgroup driver $(docker info --format '{{.CgroupDriver}} v{{.CgroupVersion}}'); total $(elapsed "$t0") s"
