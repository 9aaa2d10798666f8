"""The router gate of the health module (``workers``), run the way Ansible runs it.

The workers are the light stand-in servers (tests/fakes/vllm_standin_server.py: real HTTP, real
``vllm:request_success_total`` counters). The router is a FAKE written here (the real
vllm-router runs in the e2e tests): it answers /health, lists the workers it is told to list on
GET /workers in vllm-router's shape, and routes POSTs by a chosen behaviour (round robin, always
the first worker, or failing). Covered: the pass (every worker answered a routed request), a
router that lists a worker the plan does not have, one that misses one, one that lists an
unhealthy worker, one whose requests fail (the first failure fails the gate: no retry), and one
that lists a worker but never routes to it.
"""

from __future__ import annotations

import http.server
import itertools
import json
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from test_vllm_fleet_health import run

pytest.importorskip("ansible")

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "tests" / "fakes"))
import vllm_standin_server as standin  # noqa: E402


def start_worker():
    srv = standin.Server(("127.0.0.1", 0), standin.Handler)
    srv.names, srv.model, srv.api_keys = ["m"], "m", []
    srv.started, srv.lock, srv.running, srv.done, srv.latency = 0.0, threading.Lock(), 0, 0, 0.0
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


class FakeRouter:
    """FAKE vllm-router: GET /workers lists ``listed`` ((type, url, healthy) triples); POSTs go
    to ``targets`` round robin (mode "round_robin"), to the first one ("first"), to the one with
    the fewest requests in flight, the first on a tie ("least_loaded": what vllm-router's
    cache_aware does for a prompt no worker has cached; ``hold`` seconds more in flight), or fail
    with 503 ("fail")."""

    def __init__(self, listed, targets, mode="round_robin", hold=0.0):
        self.listed, self.mode, self.posts, self.hold = listed, mode, 0, hold
        self.load, self.lock = {t: 0 for t in targets}, threading.Lock()
        cycle = itertools.cycle(targets)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _send(self, status, body):
                data = json.dumps(body).encode() if not isinstance(body, bytes) else body
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                if self.path == "/health":
                    self._send(200, {})
                elif self.path == "/workers":
                    self._send(200, {"workers": [{"url": u, "worker_type": t, "is_healthy": h}
                                                 for t, u, h in outer.listed], "total": len(outer.listed)})
                else:
                    self._send(404, {})

            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.posts += 1
                if outer.mode == "fail":
                    self._send(503, {"error": "no healthy worker"})
                    return
                if outer.mode == "least_loaded":
                    with outer.lock:
                        target = min(targets, key=lambda t: outer.load[t])
                        outer.load[target] += 1
                    time.sleep(outer.hold)
                else:
                    target = next(cycle) if outer.mode == "round_robin" else targets[0]
                req = urllib.request.Request(target + self.path, data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=10) as resp:
                        self._send(resp.status, resp.read())
                finally:
                    if outer.mode == "least_loaded":
                        with outer.lock:
                            outer.load[target] -= 1

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def workers():
    made = [start_worker() for _ in range(3)]
    yield [url for _, url in made]
    for srv, _ in made:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def router():
    made = []

    def make(*args, **kwargs):
        made.append(FakeRouter(*args, **kwargs))
        return made[-1]

    yield make
    for r in made:
        r.close()


def gate(tmp_path, router, pools, membership_timeout=1.0):
    return run(tmp_path, url=router.url, request="none", interval=0.2, timeout=10,
               membership_timeout=membership_timeout,
               workers={"pools": pools, "model": "m", "request": "completion"})


def test_passes_when_every_planned_worker_is_listed_and_answers(tmp_path, router, workers):
    a, b = workers[:2]
    r = router([("regular", a, True), ("regular", b, True)], [a, b])
    out = gate(tmp_path, r, {"regular": [a, b]})
    assert not out.get("failed"), out
    assert out["routed"] == {a: 1, b: 1} and r.posts == 2
    assert out["response"] == "2 requests routed to 2 workers"


def test_pd_pools_each_worker_in_its_pool(tmp_path, router, workers):
    p, d = workers[:2]
    r = router([("prefill", p, True), ("decode", d, True)], [p, d])
    out = gate(tmp_path, r, {"prefill": [p], "decode": [d]})
    assert not out.get("failed"), out
    # the same URLs in the wrong pools are not the plan
    r2 = router([("decode", p, True), ("prefill", d, True)], [p, d])
    out = gate(tmp_path, r2, {"prefill": [p], "decode": [d]})
    assert out["failed"] and f"{d} (decode)" in out["msg"].split("; ")[0] and f"{p} (prefill)" in out["msg"].split("; ")[0]
    assert f"not in the plan" in out["msg"] and f"{p} (decode)" in out["msg"].split("; ")[1], out["msg"]


def test_fails_on_a_worker_the_plan_does_not_have(tmp_path, router, workers):
    a, b, c = workers
    r = router([("regular", a, True), ("regular", b, True), ("regular", c, True)], [a, b, c])
    out = gate(tmp_path, r, {"regular": [a, b]})
    assert out["failed"] and f"not in the plan {c} (regular)" in out["msg"], out["msg"]
    assert "missing" not in out["msg"] and r.posts == 0


def test_fails_on_a_missing_worker(tmp_path, router, workers):
    a, b = workers[:2]
    r = router([("regular", a, True)], [a])
    out = gate(tmp_path, r, {"regular": [a, b]})
    assert out["failed"] and f"missing {b} (regular)" in out["msg"] and "after 1 s" in out["msg"], out["msg"]


def test_fails_on_an_unhealthy_worker(tmp_path, router, workers):
    a, b = workers[:2]
    r = router([("regular", a, True), ("regular", b, False)], [a, b])
    out = gate(tmp_path, r, {"regular": [a, b]})
    assert out["failed"] and f"unhealthy {b}" in out["msg"], out["msg"]


def test_first_failed_request_fails_the_gate(tmp_path, router, workers):
    a, b = workers[:2]
    r = router([("regular", a, True), ("regular", b, True)], [a, b], mode="fail")
    out = gate(tmp_path, r, {"regular": [a, b]})
    assert out["failed"] and "request 1 through the router failed" in out["msg"] and "HTTP 503" in out["msg"]
    # one round (as many requests at once as the pool has workers), then nothing: no retry
    assert r.posts == 2, "no request after the first failed round"


def test_fails_when_a_listed_worker_never_gets_a_request(tmp_path, router, workers):
    a, b = workers[:2]
    r = router([("regular", a, True), ("regular", b, True)], [a, b], mode="first")
    out = gate(tmp_path, r, {"regular": [a, b]})
    assert out["failed"] and f"none reached {b}" in out["msg"], out["msg"]
    assert r.posts == 8 and out["routed"] == {a: 8, b: 0}


def test_unreadable_worker_metrics_fail_naming_the_worker(tmp_path, router, workers):
    a = workers[0]
    dead = "http://127.0.0.1:9"          # discard port: nothing answers
    r = router([("regular", a, True), ("regular", dead, True)], [a])
    out = gate(tmp_path, r, {"regular": [a, dead]})
    assert out["failed"] and f"cannot count the requests worker {dead} answers" in out["msg"], out["msg"]


def test_a_least_loaded_router_is_reached_on_every_worker(tmp_path, router, workers):
    """A policy that sends a request to the least loaded worker, the first on a tie, routes
    one-at-a-time requests all to the first worker (CI saw 8 of 8 with vllm-router's cache_aware):
    the gate sends each round's requests before it reads any answer, so each worker gets one, even
    when a request is answered within milliseconds (no hold: the stand-ins of the e2e tests)."""
    a, b, c = workers
    r = router([("regular", a, True), ("regular", b, True), ("regular", c, True)], [a, b, c], mode="least_loaded")
    out = gate(tmp_path, r, {"regular": [a, b, c]})
    assert not out.get("failed"), out
    assert sorted(out["routed"]) == sorted([a, b, c]) and min(out["routed"].values()) >= 1, out
    assert r.posts <= 12 and r.posts % 3 == 0, r.posts   # whole rounds of 3, at most 4
