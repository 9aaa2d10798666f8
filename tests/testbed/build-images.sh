#!/usr/bin/env bash
# Build the testbed's local Docker images WITHOUT any registry (no `docker pull` here):
#   vllm-fleet/base:bookworm     debootstrap minbase + python3            CMD sleep infinity
#   vllm-fleet/systemd:bookworm  + openssh-server sudo systemd dbus ...   CMD /sbin/init
#   vllm-fleet/host:bookworm     systemd + sshd for Ansible (key-only root, UsePAM no, PATH with
#                                the fakes dir /usr/local/fakes/bin for non-interactive ssh too),
#                                python3-docker, python3-venv, procps             CMD /sbin/init
#                                + what vLLM on CPU needs at run time on a host of the uv
#                                runtime: g++ (torch inductor compiles kernels), python3-dev,
#                                libnuma1 (vllm._C), openssl (inductor's cache checksums)
#                                + what the P/D and Mooncake side processes need (wheels from
#                                tests/testbed/aux-wheels.sh): libibverbs1 (mooncake_master,
#                                mooncake_client and the mooncake engine.so/store.so all link
#                                libibverbs.so.1, even for protocol tcp: "error while loading
#                                shared libraries: libibverbs.so.1"), libcurl4 (same binaries;
#                                also pulled by curl); vllm-router needs nothing beyond glibc
#                                (the test-host image of tests/testbed/fleet.py)
#   vllm-fleet/vllm-base:bookworm  base + g++ python3-dev libnuma1 libgomp1 openssl: the base of
#                                the vLLM serving images (tests/testbed/build-serving-images.sh).
#                                Without libnuma1, vllm._C does not load; without g++, torch
#                                inductor fails at warm-up ("InvalidCxxCompiler"); without the
#                                openssl binary it fails too (`openssl sha512` in codecache.py).
# The vLLM serving images (real CPU vLLM + FAKE GPU stand-ins) are built by
# tests/testbed/build-serving-images.sh on top of vllm-fleet/base.
# Rootfs tarballs are cached under $CACHE_DIR (default /var/cache/vllm-fleet) so a rerun,
# or FORCE=1, only re-imports (seconds). FRESH=1 also redoes debootstrap.
#
# Env:
#   FORCE=1        rebuild (re-import) images even if they exist
#   FRESH=1        ignore cached rootfs tarballs (implies FORCE=1)
#   IMAGES="base systemd host vllm-base"   which images to build (default all four)
#   DEBIAN_MIRROR  default http://deb.debian.org/debian
#   SKIP_VERIFY=1  skip the smoke run of the images
#   VERIFY_WAIT_S  bound for systemd to come up in the verify container (default 60)
# Needs: a running engine (tests/testbed/docker-engine.sh), root.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/testbed/progress.sh
source "$HERE/progress.sh"   # with_progress: a line every 20 s while a long step runs
CACHE_DIR=${CACHE_DIR:-/var/cache/vllm-fleet}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
FRESH=${FRESH:-0}
FORCE=${FORCE:-0}
[[ $FRESH == 1 ]] && FORCE=1
IMAGES=${IMAGES:-"base systemd host vllm-base"}
VERIFY_WAIT_S=${VERIFY_WAIT_S:-60}
export DEBIAN_FRONTEND=noninteractive

T0=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
log() { echo "[build-images] $*"; }

# Which packages each image gets (beyond --variant=minbase).
declare -A INCLUDE=(
    [base]="python3"
    [systemd]="python3,openssh-server,sudo,systemd,systemd-sysv,dbus,iproute2,ca-certificates,curl"
    [host]="python3,openssh-server,sudo,systemd,systemd-sysv,dbus,iproute2,ca-certificates,curl,python3-docker,python3-venv,procps,g++,python3-dev,libnuma1,openssl,libibverbs1,libcurl4,rsync"
    [vllm-base]="python3,g++,python3-dev,libnuma1,libgomp1,openssl"
)
# PATH of the test hosts: the FAKE GPU tools (tests/fakes/bin, bind-mounted read-only at
# /usr/local/fakes/bin by tests/testbed/fleet.py) come first, for every way in.
FAKES_DIR=/usr/local/fakes/bin
HOST_PATH=$FAKES_DIR:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
declare -A CMD=(
    [base]='CMD ["sleep","infinity"]'
    [systemd]='CMD ["/sbin/init"]'
    [host]='CMD ["/sbin/init"]'
    [vllm-base]='CMD ["sleep","infinity"]'
)
# Extra image config lines per image (docker import -c).
declare -A EXTRA_CHANGES=(
    [host]="ENV PATH=$HOST_PATH"
)

command -v docker >/dev/null || { echo "docker missing: run $HERE/docker-engine.sh first" >&2; exit 1; }
timeout 10 docker info >/dev/null 2>&1 || { echo "no docker engine answers: run $HERE/docker-engine.sh first" >&2; exit 1; }

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

need_debootstrap() {
    command -v debootstrap >/dev/null 2>&1 && return 0
    local t; t=$(date +%s.%N)
    log "installing debootstrap"
    apt-get update -qq
    with_progress build-images -- apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends debootstrap >/dev/null
    log "installed debootstrap in $(elapsed "$t") s"
}

# File name of the rootfs tarball of image $1. The key changes when the package list or the
# mirror/suite changes; for host, the customisation code is part of the key too (edit it and
# the rootfs is redone). The image is labelled with it: an image whose label differs is rebuilt.
rootfs_name() {
    local name=$1 inc=${INCLUDE[$1]} custom=""
    [[ $name == host ]] && custom="|$HOST_PATH|$(declare -f customize_systemd customize_host)"
    local key; key=$(printf '%s|%s|%s|minbase%s' "$SUITE" "$MIRROR" "$inc" "$custom" | sha256sum | cut -c1-12)
    echo "rootfs-$name-$SUITE-$key.tar"
}

# Build (or reuse) the rootfs tarball for image $1; prints the tarball path on stdout.
rootfs_tarball() {
    local name=$1 inc=${INCLUDE[$1]}
    local tarball; tarball=$CACHE_DIR/$(rootfs_name "$name")
    if [[ -s $tarball && $FRESH != 1 ]]; then
        log "rootfs cache hit: $tarball ($(du -h "$tarball" | cut -f1))" >&2
        echo "$tarball"; return 0
    fi
    need_debootstrap >&2
    mkdir -p "$CACHE_DIR/debs"
    local work; work=$(mktemp -d "$CACHE_DIR/work-$name.XXXXXX")
    local t; t=$(date +%s.%N)
    log "debootstrap $name ($inc) ..." >&2
    # --cache-dir keeps the downloaded .debs so the second image / FRESH rebuild downloads less.
    # (a progress line every 20 s: elapsed and debootstrap's last log line, e.g. "I: Unpacking ...")
    if ! with_progress build-images --out "$work/debootstrap.log" -- \
            debootstrap --variant=minbase --include="$inc" --cache-dir="$CACHE_DIR/debs" \
            "$SUITE" "$work/rootfs" "$MIRROR"; then
        echo "debootstrap failed; tail of $work/debootstrap.log:" >&2
        tail -n 30 "$work/debootstrap.log" >&2
        tail -n 30 "$work/rootfs/debootstrap/debootstrap.log" >&2 2>/dev/null || true
        exit 1
    fi
    log "debootstrap $name took $(elapsed "$t") s ($(grep -c '^I: Validating' "$work/debootstrap.log" || true) packages)" >&2
    local r=$work/rootfs
    # Clean apt caches/lists and per-machine identity before import.
    rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/cache/apt/*.bin "$r"/var/lib/apt/lists/* \
           "$r"/var/log/*.log "$r"/var/log/apt/* "$r"/tmp/* "$r"/var/tmp/*
    : >"$r/etc/machine-id"          # systemd fills it at boot (empty file = "initialise")
    rm -f "$r/var/lib/dbus/machine-id"
    echo "vllm-fleet" >"$r/etc/hostname"
    case $name in
        systemd) customize_systemd "$r" ;;
        host) customize_systemd "$r"; customize_host "$r" ;;
    esac
    t=$(date +%s.%N)
    tar --numeric-owner --xattrs -C "$r" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$work"
    # Drop tarballs of older package lists for this image.
    find "$CACHE_DIR" -maxdepth 1 -name "rootfs-$name-$SUITE-*.tar" ! -path "$tarball" -delete
    log "rootfs tarball $tarball ($(du -h "$tarball" | cut -f1)) in $(elapsed "$t") s" >&2
    echo "$tarball"
}

customize_systemd() {
    local r=$1
    # Units that make no sense (or fail) in a container.
    local u
    for u in getty.target console-getty.service systemd-udevd.service systemd-udev-trigger.service \
             systemd-modules-load.service sys-kernel-config.mount sys-kernel-debug.mount \
             sys-kernel-tracing.mount systemd-remount-fs.service apt-daily.timer \
             apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
        ln -sf /dev/null "$r/etc/systemd/system/$u"
    done
    # sshd: allow root login by key (tests put keys in /root/.ssh); host keys were
    # generated by the package install and are shared by every container of this image.
    mkdir -p "$r/etc/ssh/sshd_config.d" "$r/root/.ssh"
    chmod 700 "$r/root/.ssh"
    printf 'PermitRootLogin prohibit-password\nUseDNS no\n' >"$r/etc/ssh/sshd_config.d/vllm-fleet-test.conf"
}

# The Ansible test host (tests/testbed/fleet.py): sshd for Ansible with many parallel
# connections, root by key only; the fakes dir first on PATH for login shells, non-interactive
# ssh commands (sshd SetEnv: with UsePAM no, /etc/environment is not read by sshd), sudo and
# docker exec (image ENV).
customize_host() {
    local r=$1
    cat >"$r/etc/ssh/sshd_config.d/vllm-fleet-test.conf" <<EOF2
# vllm-fleet testbed host (tests/testbed/build-images.sh). First value wins: this file is
# included at the top of sshd_config.
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxStartups 200:30:400
MaxSessions 100
UseDNS no
SetEnv PATH=$HOST_PATH
EOF2
    printf 'PATH="%s"\n' "$HOST_PATH" >"$r/etc/environment"
    cat >"$r/etc/profile.d/00-vllm-fleet-fakes.sh" <<'EOF2'
# vllm-fleet testbed: FAKE GPU tools (tests/fakes/bin, mounted read-only) first on PATH.
case ":$PATH:" in *:/usr/local/fakes/bin:*) ;; *) PATH=/usr/local/fakes/bin:$PATH; export PATH ;; esac
EOF2
    printf 'Defaults secure_path="%s"\n' "$HOST_PATH" >"$r/etc/sudoers.d/vllm-fleet-fakes"
    chmod 0440 "$r/etc/sudoers.d/vllm-fleet-fakes"
    mkdir -p "$r$FAKES_DIR"
}

build_one() {
    local name=$1 ref=vllm-fleet/$1:$SUITE
    if image_exists "$ref" && [[ $FORCE != 1 ]]; then
        local have; have=$(docker image inspect -f '{{index .Config.Labels "org.vllm-fleet.rootfs"}}' "$ref")
        if [[ $have == "$(rootfs_name "$name")" ]]; then
            log "$ref up to date ($have, $(docker image inspect -f '{{.Size}}' "$ref" | awk '{printf "%.0f MB", $1/1e6}')); skip (FORCE=1 to rebuild)"
            return 0
        fi
        log "$ref is from ${have:-an unknown rootfs}, want $(rootfs_name "$name"): rebuilding"
    fi
    local old; old=$(docker image inspect -f '{{.Id}}' "$ref" 2>/dev/null || true)
    local t; t=$(date +%s.%N)
    local tarball; tarball=$(rootfs_tarball "$name")
    local ti; ti=$(date +%s.%N)
    docker import \
        -c "${CMD[$name]}" \
        ${EXTRA_CHANGES[$name]:+-c "${EXTRA_CHANGES[$name]}"} \
        -c "LABEL org.vllm-fleet.testbed=1 org.vllm-fleet.rootfs=$(basename "$tarball")" \
        -m "vllm-fleet testbed $name ($SUITE, debootstrap minbase)" \
        "$tarball" "$ref" >/dev/null
    # The replaced image is now untagged: drop it unless a container still uses it.
    if [[ -n $old && $old != "$(docker image inspect -f '{{.Id}}' "$ref")" ]]; then
        docker rmi "$old" >/dev/null 2>&1 || log "old image $old still in use; left in place"
    fi
    log "$ref imported in $(elapsed "$ti") s; built in $(elapsed "$t") s; size $(docker image inspect -f '{{.Size}}' "$ref" | awk '{printf "%.0f MB", $1/1e6}')"
}

VERIFY_NAMES=()
cleanup() {
    local n
    for n in "${VERIFY_NAMES[@]}"; do docker rm -f "$n" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

verify_base() {
    local ref=vllm-fleet/base:$SUITE name=vllm-fleet-verify-base-$$-$RANDOM
    VERIFY_NAMES+=("$name")
    local t; t=$(date +%s.%N)
    local out; out=$(docker run --name "$name" --network none "$ref" python3 -c 'import sys; print(sys.version.split()[0])')
    docker rm -f "$name" >/dev/null
    log "verify $ref: python3 $out ($(elapsed "$t") s)"
}

verify_vllm-base() {
    local ref=vllm-fleet/vllm-base:$SUITE name=vllm-fleet-verify-vllm-base-$$-$RANDOM
    VERIFY_NAMES+=("$name")
    local t; t=$(date +%s.%N)
    local out; out=$(docker run --name "$name" --network none "$ref" sh -c \
        'echo "python3 $(python3 -c "import sys, sysconfig, os; print(sys.version.split()[0], os.path.exists(sysconfig.get_paths()[\"include\"] + \"/Python.h\") and \"+Python.h\")")"; g++ --version | head -n1; ldconfig -p | grep -o "libnuma.so.1" | head -n1; openssl version')
    docker rm -f "$name" >/dev/null
    log "verify $ref: $(echo $out) ($(elapsed "$t") s)"
}
verify_systemd() { verify_boot systemd; }
verify_host() { verify_boot host; }

# Boot image $1 with systemd as PID 1 (the flags of TESTBED.md); host also checks sshd config,
# the Docker SDK, venv and the PATH a non-interactive ssh command gets.
verify_boot() {
    local img=$1
    local ref=vllm-fleet/$img:$SUITE name=vllm-fleet-verify-$img-$$-$RANDOM
    VERIFY_NAMES+=("$name")
    local t; t=$(date +%s.%N)
    docker run -d --name "$name" --network none \
        --cap-add SYS_ADMIN --security-opt seccomp=unconfined --cgroupns=host \
        -v /sys/fs/cgroup:/sys/fs/cgroup:rw --tmpfs /run --tmpfs /run/lock \
        "$ref" /sbin/init >/dev/null
    local state="" deadline=$(( $(date +%s) + VERIFY_WAIT_S ))
    while :; do
        state=$(docker exec "$name" systemctl is-system-running 2>/dev/null || true)
        [[ $state == running || $state == degraded ]] && break
        if (( $(date +%s) >= deadline )); then
            log "ERROR: $ref: systemd state '$state' after ${VERIFY_WAIT_S} s"
            docker logs "$name" 2>&1 | tail -n 30 >&2
            docker exec "$name" systemctl --failed --no-pager >&2 2>&1 || true
            docker rm -f "$name" >/dev/null
            exit 1
        fi
        sleep 0.5
    done
    local took; took=$(elapsed "$t")
    if [[ $state == degraded ]]; then
        log "WARN: degraded; failed units:"; docker exec "$name" systemctl --failed --no-pager --plain || true
    fi
    local sshd; sshd=$(docker exec "$name" systemctl is-active ssh 2>/dev/null || true)
    local extra=""
    if [[ $img == host ]]; then
        extra=$(docker exec "$name" sh -c '
            sshd -T 2>/dev/null | grep -iE "^(usepam|strictmodes|maxstartups|permitrootlogin|setenv) " | tr "\n" " "
            python3 -c "import docker, venv, ensurepip; print(\"python3-docker\", docker.__version__, end=\"; \")"
            for l in libibverbs.so.1 libcurl.so.4 libnuma.so.1; do ldconfig -p | grep -q "[[:space:]]$l (" || { echo "MISSING $l"; exit 1; }; done
            echo "ss $(command -v ss) sudo $(command -v sudo) curl $(command -v curl); libibverbs.so.1 libcurl.so.4 libnuma.so.1 present"') || {
            log "ERROR: $ref: host checks failed: $extra"; docker rm -f "$name" >/dev/null; exit 1; }
        grep -q "usepam no" <<<"$extra" && grep -q "/usr/local/fakes/bin" <<<"$extra" || {
            log "ERROR: $ref: sshd config not applied: $extra"; docker rm -f "$name" >/dev/null; exit 1; }
        extra="; $extra"
    fi
    docker rm -f "$name" >/dev/null
    log "verify $ref: systemd '$state' after $took s; ssh.service $sshd$extra; container $name removed"
}

mkdir -p "$CACHE_DIR"
# One build at a time per cache dir (parallel CI jobs / sessions on one machine).
exec 9>"$CACHE_DIR/.build-images.lock"
if ! flock -n 9; then
    log "another build-images.sh holds $CACHE_DIR/.build-images.lock; waiting (max 900 s)"
    flock -w 900 9 || { echo "another build-images.sh still holds $CACHE_DIR/.build-images.lock" >&2; exit 1; }
fi
for img in $IMAGES; do
    [[ -n ${INCLUDE[$img]:-} ]] || { echo "unknown image '$img'" >&2; exit 2; }
    build_one "$img"
done
if [[ ${SKIP_VERIFY:-0} != 1 ]]; then
    for img in $IMAGES; do "verify_$img"; done
fi
log "done in $(elapsed "$T0") s; cache $(du -sh "$CACHE_DIR" | cut -f1) in $CACHE_DIR"
