# -*- coding: utf-8 -*-
"""The one answer to "is this process alive": a docker container or a systemd unit by name.

Used by the modules vllm_fleet_state (the re-run fast path), vllm_fleet_health (the gate
watches the process it waits for) and vllm_fleet_process_info (status, preflight's port owner,
the health role's check of processes without HTTP). Modules import it as
``ansible.module_utils.vllm_fleet_process`` (ansible.cfg: module_utils = plugins/module_utils).

One vocabulary for both runtimes (the docker and systemd words it maps are in the table below):

  running     serving (docker: running; systemd: active, reloading)
  starting    systemd activating (docker has no such state: a started container is running)
  restarting  docker restarting; systemd activating in sub-state auto-restart
  stopping    docker removing; systemd deactivating
  stopped     exited with code 0, created and never started, paused; systemd inactive
  failed      exited with a non-zero code, dead; systemd failed
  absent      no such container / unit
  unknown     the runtime did not answer (no docker engine, no systemd)
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone

STATES = ("running", "starting", "restarting", "stopping", "stopped", "failed", "absent", "unknown")
ALIVE = ("running", "starting", "restarting")   # a process that holds (or is about to hold) its port
PLAN_LABEL = "vllm-fleet.plan-hash"

_DOCKER_FORMAT = '{{json .State}}\t{{.RestartCount}}\t{{index .Config.Labels "' + PLAN_LABEL + '"}}'
_SYSTEMD_PROPS = "LoadState,ActiveState,SubState,NRestarts,MainPID,ExecMainStatus,ExecMainStartTimestampMonotonic"


def _result(state, raw, restarts=0, pid=None, plan_hash=None, exit_code=None, uptime=None):
    return {"state": state, "running": state == "running", "alive": state in ALIVE, "restarts": int(restarts or 0),
            "pid": pid or None, "plan_hash": plan_hash or None, "exit_code": exit_code, "raw": raw,
            "uptime_s": int(uptime) if uptime is not None and state == "running" and uptime >= 0 else None}


def docker_uptime(started_at, now=None):
    """Seconds since docker's State.StartedAt ("2026-12-05T07:01:02.123456789Z"), or None."""
    text = str(started_at or "")
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)$", text)
    if not m or text.startswith("0001-"):
        return None
    started = datetime.fromisoformat(m.group(1) + ("+00:00" if m.group(2) == "Z" else m.group(2)))
    return (now if now is not None else time.time()) - started.timestamp()


def unit_uptime(monotonic_usec, now=None):
    """Seconds since systemd's ExecMainStartTimestampMonotonic (microseconds of CLOCK_MONOTONIC), or None."""
    text = str(monotonic_usec or "")
    if not text.isdigit() or text == "0":
        return None
    return (now if now is not None else time.clock_gettime(time.CLOCK_MONOTONIC)) - int(text) / 1e6


def docker_state(run_command, name):
    """State of container ``name`` (``run_command(argv) -> (rc, stdout, stderr)``)."""
    rc, out, err = run_command(["docker", "inspect", "--type", "container", "-f", _DOCKER_FORMAT, name])
    if rc != 0:
        text = (err or out or "").lower()
        if "no such" in text:
            return _result("absent", "absent")
        return _result("unknown", (err or out or "docker inspect failed").strip()[:200])
    parts = out.strip().split("\t")
    try:
        st = json.loads(parts[0])
    except (ValueError, IndexError):
        return _result("unknown", out.strip()[:200])
    status = str(st.get("Status") or "")
    code = st.get("ExitCode")
    if status == "running":
        state = "restarting" if st.get("Restarting") else "running"
    elif status == "restarting":
        state = "restarting"
    elif status == "removing":
        state = "stopping"
    elif status == "dead" or (status == "exited" and code not in (0, None)):
        state = "failed"
    elif status in ("exited", "created", "paused"):
        state = "stopped"
    else:
        state = "unknown"
    restarts = parts[1] if len(parts) > 1 and parts[1].strip().isdigit() else 0
    label = parts[2].strip() if len(parts) > 2 and parts[2].strip() not in ("", "<no value>") else None
    return _result(state, status, restarts, st.get("Pid") or None, label, code, docker_uptime(st.get("StartedAt")))


def unit_state(run_command, name):
    """State of systemd unit ``name`` (without ``.service``)."""
    rc, out, err = run_command(["systemctl", "show", "-p", _SYSTEMD_PROPS, name + ".service"])
    props = dict(line.partition("=")[::2] for line in (out or "").splitlines() if "=" in line)
    if rc != 0 or "ActiveState" not in props:
        return _result("unknown", (err or out or "systemctl show failed").strip()[:200])
    active, sub = props.get("ActiveState", ""), props.get("SubState", "")
    if props.get("LoadState") == "not-found":
        state = "absent"
    elif active in ("active", "reloading"):
        state = "running"
    elif active == "activating":
        state = "restarting" if sub == "auto-restart" else "starting"
    elif active == "deactivating":
        state = "stopping"
    elif active == "failed":
        state = "failed"
    elif active == "inactive":
        state = "stopped"
    else:
        state = "unknown"
    restarts = props.get("NRestarts", "0")
    pid = int(props["MainPID"]) if props.get("MainPID", "0").isdigit() and props["MainPID"] != "0" else None
    code = int(props["ExecMainStatus"]) if props.get("ExecMainStatus", "").isdigit() else None
    return _result(state, f"{active}/{sub}", restarts if restarts.isdigit() else 0, pid, None, code,
                   unit_uptime(props.get("ExecMainStartTimestampMonotonic")))


def state(run_command, runtime, name):
    """``{state, running, alive, restarts, pid, plan_hash, exit_code, raw, uptime_s}`` of the process
    ``name`` of ``runtime`` (docker: a container; uv / service: a systemd unit). ``plan_hash``
    is the container's vllm-fleet.plan-hash label (units carry none); ``raw`` is the runtime's
    own word (for messages)."""
    if runtime == "docker":
        return docker_state(run_command, name)
    if runtime in ("uv", "service"):
        return unit_state(run_command, name)
    raise ValueError(f"unknown runtime {runtime!r} for process {name!r}")
