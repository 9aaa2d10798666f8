"""vllm_fleet_process_info: real module run (module_utils resolved as Ansible does), a FAKE
docker CLI and a FAKE systemctl on PATH answering like the real ones."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from module_runner import ROOT, module_argv

pytest.importorskip("ansible")

MODULE = ROOT / "plugins" / "modules" / "vllm_fleet_process_info.py"
FAKE_DOCKER = """#!/bin/sh
# FAKE docker CLI: one running container, everything else missing
for last; do :; done
if [ "$1" = inspect ] && [ "$last" = vllm-fleet-a ]; then
  printf '{"Status":"running","Restarting":false,"Pid":900,"ExitCode":0}\\t1\\tfeedbeef\\n'; exit 0
fi
echo "Error response from daemon: No such container: $last" >&2; exit 1
"""
FAKE_SYSTEMCTL = """#!/bin/sh
# FAKE systemctl: one failed unit
for last; do :; done
if [ "$last" = vllm-fleet-u.service ]; then
  printf 'MainPID=0\\nNRestarts=5\\nExecMainStatus=1\\nLoadState=loaded\\nActiveState=failed\\nSubState=failed\\n'
else
  printf 'MainPID=0\\nNRestarts=0\\nExecMainStatus=0\\nLoadState=not-found\\nActiveState=inactive\\nSubState=dead\\n'
fi
"""


def run(tmp_path, processes):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("docker", FAKE_DOCKER), ("systemctl", FAKE_SYSTEMCTL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"processes": processes}}))
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(module_argv(MODULE, args), capture_output=True, text=True, timeout=60, env=env)
    return json.loads(proc.stdout)


def test_states_of_containers_and_units_in_one_vocabulary(tmp_path):
    out = run(tmp_path, [{"name": "vllm-fleet-a", "runtime": "docker", "port": 8000},
                         {"name": "vllm-fleet-b", "runtime": "docker"},
                         {"name": "vllm-fleet-u", "runtime": "uv"},
                         {"name": "vllm-fleet-r", "runtime": "service"}])
    assert out["changed"] is False
    got = [(p["name"], p["state"], p["running"], p["restarts"]) for p in out["processes"]]
    assert got == [("vllm-fleet-a", "running", True, 1), ("vllm-fleet-b", "absent", False, 0),
                   ("vllm-fleet-u", "failed", False, 5), ("vllm-fleet-r", "absent", False, 0)]
    assert out["processes"][0]["plan_hash"] == "feedbeef" and out["processes"][0]["pid"] == 900
    assert out["processes"][2]["exit_code"] == 1 and out["processes"][2]["raw"] == "failed/failed"


def test_a_process_without_a_known_runtime_is_refused_by_index(tmp_path):
    out = run(tmp_path, [{"name": "vllm-fleet-a", "runtime": "docker"}, {"name": "x", "runtime": "k8s"}])
    assert out["failed"] is True
    assert out["msg"].startswith("processes[1]: needs a name and a runtime of docker, uv or service")
    assert "Traceback" not in json.dumps(out)
