"""The re-run fast path module, run the way Ansible runs it (python3 module.py args.json).

Process states need a docker engine or systemd (covered by the e2e fleet re-runs); here: the
revision records (and an older host's marker) and the health probe against a real HTTP server
on 127.0.0.1.
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


def _record(state_dir, dep, number, plan_hash):
    folder = state_dir / dep
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rev-{number}.json").write_text(json.dumps({"deployment": dep, "number": number, "hash": plan_hash,
                                                           "plan": {"hash": plan_hash, "deployment": dep}}))


def test_the_current_record_decides_when_nothing_runs(tmp_path):
    """One record per deployment decides: the newest revision's plan hash against the plan's;
    the module returns the records too (deploy.yml reads them once)."""
    state = tmp_path / "state"
    out = run(tmp_path, processes=[], deployment="dep", state_dir=str(state), plan_hash="abc")
    assert out["current"] is False and out["reasons"] == ["dep: nothing recorded"] and out["deployments"] == {}
    _record(state, "dep", 1, "old")
    _record(state, "dep", 2, "abc")
    out = run(tmp_path, processes=[], deployment="dep", state_dir=str(state), plan_hash="abc")
    assert out["current"] is True and out["changed"] is False
    assert out["deployments"]["dep"]["current"] == 2 and [r["number"] for r in out["deployments"]["dep"]["revisions"]] == [1, 2]
    assert out["deployments"]["dep"]["record"]["plan"]["hash"] == "abc"
    out = run(tmp_path, processes=[], deployment="dep", state_dir=str(state), plan_hash="def")
    assert out["current"] is False and out["reasons"] == ["dep: another plan recorded"]
    # another deployment's records are not this one's
    _record(state, "other", 1, "def")
    assert run(tmp_path, processes=[], deployment="dep", state_dir=str(state), plan_hash="def")["current"] is False


def test_a_host_an_older_vllm_fleet_deployed_is_read_from_its_marker(tmp_path):
    """Before the records held it, deploy.yml wrote <state_dir>/<deployment>.plan: still read
    (records.deployed_hash) when no record exists; a record wins over it."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "dep.plan").write_text("abc\n")
    assert run(tmp_path, processes=[], deployment="dep", state_dir=str(state), plan_hash="abc")["current"] is True
    _record(state, "dep", 1, "new")
    assert run(tmp_path, processes=[], deployment="dep", state_dir=str(state), plan_hash="abc")["current"] is False


def test_an_unsafe_deployment_name_is_refused(tmp_path):
    out = run(tmp_path, processes=[], deployment="../etc", state_dir=str(tmp_path), plan_hash="abc")
    assert out["failed"] and "not a safe name" in out["msg"]


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
        _record(tmp_path / "state", "dep", 1, "abc")
        # a unit that does not exist here: not running, reported by name
        proc = {"name": "vllm-fleet-nope", "runtime": "service", "serves_http": True, "port": port,
                "health": {"kind": "router"}}
        out = run(tmp_path, processes=[proc], deployment="dep", state_dir=str(tmp_path / "state"), plan_hash="abc")
        assert out["current"] is False and out["reasons"][0].startswith("vllm-fleet-nope: ")
    finally:
        server.shutdown()
