"""module_utils/vllm_fleet_process.py: docker and systemd answers mapped to one vocabulary
(recorded shapes of `docker inspect -f` and `systemctl show -p` output)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
_spec = importlib.util.spec_from_file_location("vllm_fleet_process", ROOT / "plugins" / "module_utils" / "vllm_fleet_process.py")
vp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vp)


def docker(status, exit_code=0, restarts=0, label="9ab4bab7d51a00a9", restarting=False, pid=4242,
           started="2026-12-05T07:01:02.123456789Z"):
    state = {"Status": status, "Running": status == "running", "Restarting": restarting, "Pid": pid,
             "ExitCode": exit_code, "StartedAt": started}
    out = f"{json.dumps(state)}\t{restarts}\t{label}\n"
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, out, ""
    return run, calls


@pytest.mark.parametrize("status,code,restarting,want", [
    ("running", 0, False, "running"), ("running", 0, True, "restarting"), ("restarting", 1, False, "restarting"),
    ("removing", 0, False, "stopping"), ("exited", 0, False, "stopped"), ("created", 0, False, "stopped"),
    ("paused", 0, False, "stopped"), ("exited", 137, False, "failed"), ("dead", 0, False, "failed"),
    ("weird", 0, False, "unknown")])
def test_docker_states(status, code, restarting, want):
    run, calls = docker(status, code, restarting=restarting)
    seen = vp.state(run, "docker", "vllm-fleet-x")
    assert seen["state"] == want and seen["raw"] == status
    assert seen["running"] is (want == "running") and seen["alive"] is (want in ("running", "restarting"))
    assert calls[0][:4] == ["docker", "inspect", "--type", "container"] and calls[0][-1] == "vllm-fleet-x"


def test_docker_fields_and_missing_container():
    run, _ = docker("running", restarts=3)
    seen = vp.state(run, "docker", "c")
    assert (seen["restarts"], seen["pid"], seen["plan_hash"], seen["exit_code"]) == (3, 4242, "9ab4bab7d51a00a9", 0)
    run, _ = docker("running", label="<no value>")
    assert vp.state(run, "docker", "c")["plan_hash"] is None
    missing = vp.state(lambda argv: (1, "", "Error response from daemon: No such container: c\n"), "docker", "c")
    assert missing["state"] == "absent" and not missing["alive"]
    down = vp.state(lambda argv: (1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.\n"),
                    "docker", "c")
    assert down["state"] == "unknown" and "Cannot connect" in down["raw"]


def systemd(load="loaded", active="active", sub="running", restarts=0, pid=77, status=0):
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, (f"MainPID={pid}\nNRestarts={restarts}\nExecMainStatus={status}\nLoadState={load}\n"
                   f"ActiveState={active}\nSubState={sub}\n"), ""
    return run, calls


@pytest.mark.parametrize("load,active,sub,want", [
    ("loaded", "active", "running", "running"), ("loaded", "reloading", "reload", "running"),
    ("loaded", "activating", "start", "starting"), ("loaded", "activating", "auto-restart", "restarting"),
    ("loaded", "deactivating", "stop-sigterm", "stopping"), ("loaded", "inactive", "dead", "stopped"),
    ("loaded", "failed", "failed", "failed"), ("not-found", "inactive", "dead", "absent")])
def test_systemd_states(load, active, sub, want):
    run, calls = systemd(load, active, sub)
    seen = vp.state(run, "uv", "vllm-fleet-u")
    assert seen["state"] == want and seen["raw"] == f"{active}/{sub}"
    assert calls == [["systemctl", "show", "-p", "LoadState,ActiveState,SubState,NRestarts,MainPID,ExecMainStatus,"
                      "ExecMainStartTimestampMonotonic", "vllm-fleet-u.service"]]


def test_systemd_fields_and_no_systemd():
    run, _ = systemd(restarts=2, pid=0, status=1, active="failed", sub="failed")
    seen = vp.state(run, "service", "r")
    assert (seen["restarts"], seen["pid"], seen["exit_code"], seen["plan_hash"]) == (2, None, 1, None)
    gone = vp.state(lambda argv: (1, "", "System has not been booted with systemd as init system (PID 1).\n"),
                    "uv", "u")
    assert gone["state"] == "unknown" and "systemd" in gone["raw"]


def test_every_state_is_in_the_vocabulary_and_unknown_runtimes_are_refused():
    assert set(vp.ALIVE) < set(vp.STATES)
    with pytest.raises(ValueError, match="unknown runtime 'k8s'"):
        vp.state(lambda argv: (0, "", ""), "k8s", "x")


def test_uptime_from_docker_started_at_and_systemd_monotonic_start():
    import time as _time
    t = 1796454122.0     # 2026-12-05T07:02:02Z
    assert vp.docker_uptime("2026-12-05T07:01:02.123456789Z", now=t) == pytest.approx(60.0)
    assert vp.docker_uptime("2026-12-05T08:01:02+01:00", now=t) == pytest.approx(60.0)
    for never in ("0001-01-01T00:00:00Z", "", None, "yesterday"):
        assert vp.docker_uptime(never, now=t) is None
    assert vp.unit_uptime("5000000", now=65.0) == pytest.approx(60.0)
    assert vp.unit_uptime("0") is None and vp.unit_uptime("") is None
    # the state carries it while running (docker's StartedAt is minutes ago here), never otherwise
    started = _time.strftime("%Y-%m-%dT%H:%M:%S.5Z", _time.gmtime(_time.time() - 125))
    run, _ = docker("running", started=started)
    assert 124 <= vp.state(run, "docker", "c")["uptime_s"] <= 130
    run, _ = docker("exited", started=started)
    assert vp.state(run, "docker", "c")["uptime_s"] is None
    mono = int((_time.clock_gettime(_time.CLOCK_MONOTONIC) - 30) * 1e6)
    seen = vp.state(lambda argv: (0, f"LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=7\n"
                                     f"ExecMainStartTimestampMonotonic={mono}\n", ""), "uv", "u")
    assert 29 <= seen["uptime_s"] <= 35, seen
