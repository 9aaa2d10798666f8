"""The health gate module, run the way Ansible runs it (python3 module.py args.json).

A real HTTP server on 127.0.0.1 plays the vLLM server; a FAKE ``docker`` CLI (a script put
first on PATH) plays the container runtime, so the process watch and the log tail are real
code paths. Covered: the window (``waiting`` results and what they report), the overall
bound across windows (``waited``), the fast failure of a dead process with its log tail,
and the masking of the API key and the HF token in everything the module returns.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from module_runner import import_module_file, module_argv

pytest.importorskip("ansible")

ROOT = Path(__file__).resolve().parents[4]
MODULE = ROOT / "plugins" / "modules" / "vllm_fleet_health.py"
API_KEY = "sk-test-0123456789abcdef"
HF_TOKEN = "hf_SecretTokenForTheUnitTest42"

FAKE_DOCKER = """#!/bin/sh
# FAKE docker CLI for the health module's unit test: state from $FAKE_DOCKER_STATE
case "$1" in
  inspect) set -- $FAKE_DOCKER_STATE   # status restart-count exit-code, as docker inspect's -f fields
           printf '{"Status":"%s","Running":false,"Restarting":false,"Pid":4242,"ExitCode":%s}\t%s\t<no value>\n' "$1" "$3" "$2" ;;
  logs) printf 'INFO starting with api key %s\\nINFO HF_TOKEN=%s loaded\\nINFO Loading weights (last line) key=%s\\n' \
            "$FAKE_SECRET_1" "$FAKE_SECRET_2" "$FAKE_SECRET_1" ;;
  *) exit 2 ;;
esac
"""


class Server:
    """/health answers 503 until `healthy_after` seconds passed (or `after_polls` requests were
    answered 503), then 200; /v1/models and /v1/embeddings answer like a vLLM pooling server
    serving `minilm`."""

    def __init__(self, healthy_after: float = 0.0, after_polls: int = 0, answer=None):
        self.answer = answer or (200, {"data": [{"embedding": [0.1] * 384}]})
        self.t0 = time.monotonic()
        self.healthy_after = healthy_after
        self.after_polls = after_polls
        self.polls = 0
        self.metrics = []     # /metrics answers, one per GET (404 when none is left)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _send(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802 - http.server API
                if self.path == "/health":
                    outer.polls += 1
                    ok = time.monotonic() - outer.t0 >= outer.healthy_after and outer.polls > outer.after_polls
                    self._send(200 if ok else 503, {})
                elif self.path == "/v1/models":
                    self._send(200, {"data": [{"id": "minilm"}]})
                elif self.path == "/version":
                    self._send(200, {"version": "0.32.0"})
                elif self.path == "/metrics" and outer.metrics:
                    text = outer.metrics.pop(0).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    self.wfile.write(text)
                else:
                    self._send(404, {})

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._send(*outer.answer)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    made = []

    def make(healthy_after=0.0, after_polls=0, answer=None):
        made.append(Server(healthy_after, after_polls, answer))
        return made[-1]

    yield make
    for s in made:
        s.close()


@pytest.fixture
def fake_docker(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "docker"
    script.write_text(FAKE_DOCKER)
    script.chmod(0o755)
    return bin_dir


def run(tmp_path, fake_bin=None, state="running 0 0", **args):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, FAKE_DOCKER_STATE=state, FAKE_SECRET_1=API_KEY, FAKE_SECRET_2=HF_TOKEN)
    if fake_bin:
        env["PATH"] = f"{fake_bin}{os.pathsep}{env['PATH']}"
    start = time.monotonic()
    proc = subprocess.run(module_argv(MODULE, path), capture_output=True, text=True,
                          timeout=60, env=env)
    out = json.loads(proc.stdout)
    out["_seconds"] = time.monotonic() - start
    out["_raw"] = proc.stdout + proc.stderr
    return out


def test_window_returns_waiting_with_what_it_awaits(tmp_path, server, fake_docker):
    srv = server(healthy_after=60)
    out = run(tmp_path, fake_docker, url=srv.url, served_model_name="minilm", request="embedding",
              timeout=30, interval=0.2, window=1, runtime="docker", process_name="vllm-fleet-x",
              api_key=API_KEY, hf_token=HF_TOKEN)
    assert not out.get("failed"), out
    assert out["waiting"] is True and out["changed"] is False
    assert out["awaiting"] == f"{srv.url}/health"
    assert out["last_answer"] == "HTTP 503"
    assert out["state"] == "running"
    assert out["log_line"].startswith("INFO Loading weights (last line)")
    assert 0.8 <= out["waited"] < 5 and out["polls"] >= 3
    assert out["_seconds"] < 10


def test_waited_counts_against_the_timeout(tmp_path, server):
    srv = server(healthy_after=60)
    out = run(tmp_path, url=srv.url, served_model_name="minilm", timeout=10, interval=0.2,
              window=5, waited=9)
    assert out["failed"] is True
    assert f"{srv.url}/health did not answer 200 within 10 s (last answer: HTTP 503)" in out["msg"]
    assert out["_seconds"] < 5


def test_success_after_windows_reports_the_whole_wait(tmp_path, server):
    srv = server(healthy_after=0)
    out = run(tmp_path, url=srv.url, served_model_name="minilm", request="embedding", timeout=30,
              interval=0.2, window=1, waited=40.0 - 30 + 12.5)
    assert not out.get("failed") and out["waiting"] is False, out
    assert out["health_seconds"] >= 22.5 and out["models"] == ["minilm"]
    assert out["response"] == {"endpoint": "/v1/embeddings", "dimension": 384}


def test_no_window_waits_in_one_call_as_before(tmp_path, server):
    srv = server(after_polls=5)
    out = run(tmp_path, url=srv.url, served_model_name="minilm", request="none", timeout=20,
              interval=0.3)
    assert not out.get("failed") and out["waiting"] is False, out
    assert out["polls"] == 6 and out["health_seconds"] >= 1.5


def test_dead_process_fails_at_once_with_a_masked_log_tail(tmp_path, server, fake_docker):
    srv = server(healthy_after=60)
    out = run(tmp_path, fake_docker, state="exited 0 1", url=srv.url, served_model_name="minilm",
              timeout=30, interval=0.2, window=10, runtime="docker", process_name="vllm-fleet-x",
              api_key=API_KEY, hf_token=HF_TOKEN)
    assert out["failed"] is True and out["polls"] == 1
    assert "vllm-fleet-x is not running (exited)" in out["msg"]
    assert "INFO starting with api key ********" in out["log_tail"]
    assert "HF_TOKEN=******** loaded" in out["log_tail"]
    assert API_KEY not in out["_raw"] and HF_TOKEN not in out["_raw"]
    assert out["_seconds"] < 10


def test_secrets_are_masked_in_waiting_results(tmp_path, server, fake_docker):
    srv = server(healthy_after=60)
    out = run(tmp_path, fake_docker, url=srv.url, served_model_name="minilm", timeout=30,
              interval=0.2, window=0.5, runtime="docker", process_name="vllm-fleet-x",
              api_key=API_KEY, hf_token=HF_TOKEN)
    assert out["waiting"] is True
    assert out["log_line"].endswith("key=********")
    assert API_KEY not in out["_raw"] and HF_TOKEN not in out["_raw"]


def test_masker_masks_nested_values_longest_secret_first():
    mod = import_module_file(MODULE)
    mask = mod.masker(["abc", "abcdef", None, ""])
    assert mask("x abcdef y abc") == "x ******** y ********"
    assert mod.masked({"a": ["abc", 3, {"b": "zabcdefz"}]}, mask) == {"a": ["********", 3, {"b": "z********z"}]}


def test_serving_needs_a_real_answer_not_only_health_and_models(tmp_path, server):
    """/health 200 and the model listed, but the request answers 200 without a result (or an
    error): not serving, the gate fails naming the request and the answer."""
    for answer in ((200, {"object": "error", "message": "engine dead"}), (503, {"message": "busy"})):
        s = server(answer=answer)
        out = run(tmp_path, url=s.url, served_model_name="minilm", request="embedding", timeout=5, interval=0.2)
        assert out.get("failed") and f"POST {s.url}/v1/embeddings failed (HTTP {answer[0]})" in out["msg"], out
    ok = run(tmp_path, url=server().url, served_model_name="minilm", request="embedding", timeout=5, interval=0.2)
    assert not ok.get("failed") and ok["response"] == {"endpoint": "/v1/embeddings", "dimension": 384}, ok


# vLLM 0.32's exposition (vllm/v1/metrics/loggers.py names; label sets as a 2-engine server)
METRICS_0 = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="minilm"} 2.0
vllm:num_requests_running{engine="1",model_name="minilm"} 1.0
vllm:num_requests_waiting{engine="0",model_name="minilm"} 0.0
vllm:num_requests_waiting{engine="1",model_name="minilm"} 4.0
vllm:kv_cache_usage_perc{engine="0",model_name="minilm"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="minilm"} 0.5
vllm:generation_tokens_total{engine="0",model_name="minilm"} 1000.0
vllm:generation_tokens_total{engine="1",model_name="minilm"} 500.0
vllm:prompt_tokens_total{engine="0",model_name="minilm"} 100.0
"""


def test_observe_reads_the_load_before_the_gate(tmp_path, server):
    s = server()
    s.metrics = [METRICS_0, METRICS_0.replace("} 1000.0", "} 1300.0").replace("} 100.0", "} 160.0")]
    out = run(tmp_path, url=s.url, served_model_name="minilm", request="embedding", timeout=5, interval=0.2, observe=1)
    assert not out.get("failed"), out
    load = out["load"]
    assert load["running"] == 3 and load["waiting"] == 4 and load["kv_cache_pct"] == 50.0, load
    assert load["version"] == "0.32.0" and 1.0 <= load["window_s"] < 3, load
    # 300 generated tokens and 60 prompt tokens over the window
    assert load["generation_tok_s"] == round(300 / load["window_s"], 1) or abs(load["generation_tok_s"] * load["window_s"] - 300) < 30, load
    assert abs(load["prompt_tok_s"] * load["window_s"] - 60) < 6, load


def test_observe_says_why_when_metrics_cannot_be_read_and_the_gate_still_judges(tmp_path, server):
    s = server(answer=(503, {"message": "engine dead"}))
    out = run(tmp_path, url=s.url, served_model_name="minilm", request="embedding", timeout=5, interval=0.2, observe=1)
    assert out.get("failed") and "POST" in out["msg"], out
    assert out["load"] == {"error": f"GET {s.url}/metrics: HTTP 404"}, out
    # without observe there is no load at all
    plain = run(tmp_path, url=server().url, served_model_name="minilm", request="embedding", timeout=5, interval=0.2)
    assert "load" not in plain, plain
