"""deploy.yml's end-of-run summary (playbooks/templates/deploy_summary.j2) on real Ansible.

A local-connection play gives four hosts the facts deploy.yml's plays leave behind (a plan,
vllm_fleet_current, the health gate's report, a recorded failure; one host failed outright),
then a second play runs the same summary task as deploy.yml's last play. Also: deploy.yml's
rollout play targets no group pattern that can be missing (the warning of a re-run).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("ansible")

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "playbooks" / "_deploy.yml"   # deploy.yml = _plan.yml + _deploy.yml


def plan(deployment, runtime, port=8000, model="minilm", exposed=False):
    return {"deployment": deployment, "exposed": [f"vllm-fleet-{deployment}"] if exposed else [], "recipe": "sentence-transformers/all-MiniLM-L6-v2", "hardware": "xeon6",
            "runtime": runtime, "processes": [{"name": f"vllm-fleet-{deployment}", "serves_http": True,
                                               "port": port, "served_model_name": model}]}


HOSTS = {
    "a1": {"vllm_fleet_plan": plan("minilm-docker", "docker"), "vllm_fleet_current": False,
           "vllm_fleet_health_report": {"vllm-fleet-minilm-docker": 61.4}},
    "a2": {"vllm_fleet_plan": plan("minilm-docker", "docker"), "vllm_fleet_current": False,
           "vllm_fleet_health_report": {"vllm-fleet-minilm-docker": 70.2}},
    "b1": {"vllm_fleet_plan": plan("minilm-uv", "uv", 8001, exposed=True), "vllm_fleet_current": True},
    "c1": {"vllm_fleet_plan": plan("tiny", "uv", 8002, "tiny"), "vllm_fleet_current": False,
           "vllm_fleet_deploy_failure": "Health gate: vllm-fleet-tiny is not running (exited)"},
    "d1": {"vllm_fleet_plan": plan("tiny", "uv", 8002, "tiny"), "vllm_fleet_current": False},
    "r1": {"vllm_fleet_plan": {**plan("big", "docker"), "batch": 0, "instance_name": "i0"}, "vllm_fleet_current": False,
           "vllm_fleet_out_at": 1796140000.25, "vllm_fleet_back_at": 1796140061.5, "vllm_fleet_restore_at": 1796140020.0,
           "vllm_fleet_outcome": "rolled back", "vllm_fleet_outcome_detail": "failed node(s): ['r1']",
           # the drain role's report (vllm_fleet.serving.drain_outcome): 2 requests left to the graceful stop
           "vllm_fleet_drain_report": {"vllm-fleet-big": {"seconds": 120.4, "read": True, "left": 2.0,
                                                          "graceful": True, "text": "2 request(s) still in flight"}},
           "vllm_fleet_deploy_failure": "Health gate: /health did not answer 200 within 900 s"},
    "r2": {"vllm_fleet_plan": {**plan("big", "docker"), "batch": 1, "instance_name": "i1"}, "vllm_fleet_current": False,
           "vllm_fleet_rollout_stopped": True},
    "n1": {},   # deploys nothing
}


def summary_task():
    plays = yaml.safe_load(DEPLOY.read_text())
    summary = [p for p in plays if p.get("name") == "Summarize the run"]
    assert len(summary) == 1
    return summary[0]["tasks"]


def run_summary(tmp_path, check=False, hosts=None):
    hosts = HOSTS if hosts is None else hosts
    setup = {"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Facts deploy.yml leaves", "ansible.builtin.set_fact": {"{{ item.key }}": "{{ item.value }}"},
         "loop": "{{ hostfacts[inventory_hostname] | dict2items }}"},
        {"name": "d1 fails", "ansible.builtin.fail": {"msg": "boom"}, "when": "inventory_hostname == 'd1'"},
    ]}
    summary = {"hosts": "all", "gather_facts": False, "tasks": summary_task()}
    book = tmp_path / "summary.yml"
    book.write_text(yaml.safe_dump([setup, summary], sort_keys=False))
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "deploy_summary.j2").write_text(
        (ROOT / "playbooks" / "templates" / "deploy_summary.j2").read_text())
    inv = tmp_path / "hosts.ini"
    inv.write_text("".join(f"{h} ansible_connection=local\n" for h in hosts))
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text(f"[defaults]\ncallback_result_format = json\nfilter_plugins = {ROOT / 'plugins' / 'filter'}\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(cfg), ANSIBLE_NOCOLOR="1", ANSIBLE_PYTHON_INTERPRETER=sys.executable,
               ANSIBLE_HOME=str(tmp_path / "home"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inv), str(book),
            "-e", json.dumps({"hostfacts": hosts})] + (["--check"] if check else [])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    m = re.search(r'ok: \[' + next(iter(hosts)) + r'\] => (\{.*?\n\})', proc.stdout, re.S)
    assert m, proc.stdout + proc.stderr
    return json.loads(m.group(1))["msg"].split("\n"), proc.stdout


def test_summary_lines(tmp_path):
    msg, out = run_summary(tmp_path)
    assert "[WARNING]" not in out
    assert msg == [
        "deployed 2, unchanged 1 (already running their plan), rolled back 1, failed 2, not reached 1; "
        "7 host(s) with a recipe",
        "big (sentence-transformers/all-MiniLM-L6-v2 on xeon6, docker): rolled back on r1",
        "  r1: Health gate: /health did not answer 200 within 900 s; failed node(s): ['r1']",
        "big (sentence-transformers/all-MiniLM-L6-v2 on xeon6, docker): not reached on r2",
        "  r2: the rollout stopped before its batch",
        "  rollout: 2 instance(s): rolled back 1, not reached 1; serving capacity never below 1 of 2; "
        "out of service per instance: i0 61.2 s; drained: i0 120.4 s (2 left, graceful stop); restored: i0 in 41.5 s",
        "minilm-docker (sentence-transformers/all-MiniLM-L6-v2 on xeon6, docker): deployed on a1, a2, "
        "healthy after 70.2 s; serves minilm on port 8000",
        "minilm-uv (sentence-transformers/all-MiniLM-L6-v2 on xeon6, uv): unchanged on b1; serves minilm on port 8001",
        "  security: no vllm_fleet_api_key, and b1 answers beyond localhost (vllm_fleet_listen): anyone who "
        "reaches port 8001 can use the model; set vllm_fleet_api_key (vaulted) or vllm_fleet_listen: localhost",
        "tiny (sentence-transformers/all-MiniLM-L6-v2 on xeon6, uv): failed on c1, d1",
        "  c1: Health gate: vllm-fleet-tiny is not running (exited)",
        "  d1: see the task output above",
    ]


def test_summary_in_check_mode_says_would_deploy(tmp_path):
    msg, _ = run_summary(tmp_path, check=True)
    assert not [line for line in msg if "rollout:" in line]   # nothing was measured
    assert msg[0].startswith("would deploy 2, unchanged 1")
    assert msg[5].startswith("minilm-docker (sentence-transformers/all-MiniLM-L6-v2 on xeon6, docker): would deploy on a1, a2")


def test_rollout_play_never_names_a_missing_group():
    plays = yaml.safe_load(DEPLOY.read_text())
    rollout = next(p for p in plays if p.get("name", "").startswith("Roll out the engines"))
    assert rollout["hosts"] == "{{ 'vllm_fleet_rollout' if 'vllm_fleet_rollout' in groups else 'all:!all' }}"


def test_summary_of_a_big_rollout_gives_median_and_max_and_names_who_is_not_back(tmp_path):
    hosts = {f"e{i}": {"vllm_fleet_plan": {**plan("wide", "docker"), "batch": 0 if i == 0 else 1 + i // 3, "instance_name": f"i{i}"},
                       "vllm_fleet_current": False, "vllm_fleet_outcome": "updated",
                       "vllm_fleet_out_at": 100.0 * i, "vllm_fleet_back_at": 100.0 * i + 40 + i}
             for i in range(6)}
    hosts["e5"].update(vllm_fleet_outcome="rolled back", vllm_fleet_back_at=None)
    msg, _ = run_summary(tmp_path, hosts=hosts)
    assert msg[-1] == ("  rollout: 6 instance(s): updated 5, rolled back 1; serving capacity never below 5 of 6; "
                       "out of service per instance: median 42.0 s, max 44.0 s over 5, not back: i5"), msg


def test_summary_names_the_gpus_no_server_uses(tmp_path):
    def idle(dep, gpus):
        return {"vllm_fleet_plan": {**plan(dep, "docker"), "gpus_idle": gpus}, "vllm_fleet_current": False,
                "vllm_fleet_gpu": {"count": 8}, "vllm_fleet_health_report": {f"vllm-fleet-{dep}": 5.0}}
    hosts = {"g1": idle("seed", [1, 2, 3, 4, 5, 6, 7]), "g2": idle("seed", [1, 2, 3, 4, 5, 6, 7]),
             "g3": idle("seed", [3]), "g4": {"vllm_fleet_plan": plan("seed", "docker"), "vllm_fleet_current": True}}
    msg, _ = run_summary(tmp_path, hosts=hosts)
    assert msg[2:] == [
        "  idle GPUs: g1, g2: GPU 1-7 of 8 run no server of this run; another deployment can use them (vllm_fleet_gpus)",
        "  idle GPUs: g3: GPU 3 of 8 runs no server of this run; another deployment can use it (vllm_fleet_gpus)",
        "seed (sentence-transformers/all-MiniLM-L6-v2 on xeon6, docker): unchanged on g4; serves minilm on port 8000",
    ], msg


def test_summary_says_which_gpus_failed_their_health_check_and_what_the_plan_did(tmp_path):
    def sick(dep, health):
        return {"vllm_fleet_plan": {**plan(dep, "docker"), "gpu_health": health}, "vllm_fleet_current": True}
    ecc = ["uncorrectable ECC errors: 2 volatile (dram)"]
    hosts = {
        "x1": sick("ex", {"policy": "exclude", "failed": {"3": ecc}, "excluded": [3], "excluded_ranges": "3",
                          "degraded": {"5": ["clocks slowed down: hw_thermal_slowdown active"]}}),
        "w1": sick("wa", {"policy": "warn", "failed": {"0": ["XID 79 in the kernel log: GPU has fallen off the bus"]},
                          "excluded": [], "excluded_ranges": "", "degraded": {}}),
        "u1": sick("un", {"policy": "refuse", "failed": {}, "excluded": [], "excluded_ranges": "", "degraded": {},
                          "unread": "dmesg: rc=1"}),
    }
    msg, _ = run_summary(tmp_path, hosts=hosts)
    assert msg[1:] == [
        "ex (sentence-transformers/all-MiniLM-L6-v2 on xeon6, docker): unchanged on x1; serves minilm on port 8000",
        "  GPU health: x1: GPU 3 failed (uncorrectable ECC errors: 2 volatile (dram)): left out of the plan "
        "(vllm_fleet_gpu_health: exclude)",
        "  GPU health: x1: GPU 5 degraded (clocks slowed down: hw_thermal_slowdown active)",
        "un (sentence-transformers/all-MiniLM-L6-v2 on xeon6, docker): unchanged on u1; serves minilm on port 8000",
        "  GPU health: u1: not read (dmesg: rc=1): failed GPUs could not be found or left out",
        "wa (sentence-transformers/all-MiniLM-L6-v2 on xeon6, docker): unchanged on w1; serves minilm on port 8000",
        "  GPU health: w1: GPU 0 failed (XID 79 in the kernel log: GPU has fallen off the bus): placed as if healthy "
        "(vllm_fleet_gpu_health: warn)",
    ], msg
