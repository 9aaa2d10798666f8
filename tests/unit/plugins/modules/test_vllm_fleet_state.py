"""The re-run fast path module, run the way Ansible runs it (python3 module.py args.json).

Process states need a docker engine or systemd (covered by the e2e fleet re-runs); here: the
marker and the health probe against a real HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from module_runner import module_argv

ROOT = Path(__file__).resolve().parents[4]
MODULE = ROOT / "plugins" / "modules" / "vllm_fleet_state.py"
pytest.importorskip("ansible")


def run(tmp_path, **args):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run(module_argv(MODULE, path), capture_output=True, text=True, timeout=60)
    return json.loads(proc.stdout)


def test_marker_decides_when_nothing_runs(tmp_path):
    marker = tmp_path / "dep.plan"
    out = run(tmp_path, processes=[], marker=str(marker), plan_hash="abc")
    assert out["current"] is False and "missing" in out["reasons"][0]
    marker.write_text("abc\n")
    assert run(tmp_path, processes=[], marker=str(marker), plan_hash="abc")["current"] is True
    out = run(tmp_path, processes=[], marker=str(marker), plan_hash="def")
    assert out["current"] is False and "another plan" in out["reasons"][0]
    assert out["changed"] is False


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):  # noqa: N802 - http.server API
        self.send_response(self.status if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_unhealthy_endpoint_is_a_reason(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        marker = tmp_path / "dep.plan"
        marker.write_text("abc")
        # a unit that does not exist here: not running, reported by name
        proc = {"name": "vllm-fleet-nope", "runtime": "service", "serves_http": True, "port": port,
                "health": {"kind": "router"}}
        out = run(tmp_path, processes=[proc], marker=str(marker), plan_hash="abc")
        assert out["current"] is False and out["reasons"][0].startswith("vllm-fleet-nope: ")
    finally:
        server.shutdown()
