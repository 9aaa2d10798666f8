"""The plan action (real ansible-playbook, the harness of test_vllm_fleet_plan_contract.py) on
two holes of the input boundary (issue 26):

* NAMES: one registry of names per machine. Deployments that share a machine (ansible_host,
  compared case-insensitively) must not derive one container / unit / path name: a deployment
  named like another's replica (``ernie-r1`` beside ``ernie`` with 2 replicas), kept previous
  revision (``x-prev``), plan marker (``y.plan``), unit env file (``vllm-fleet-u.env``); and no
  uv deployment may be named like the bundle's shared uv tools venv (``tools``). Each is refused
  naming the host, vllm_fleet_deployment, both deployments and the colliding name; the controls
  (distinct names on one machine, the same names on other machines, a docker ``tools``) plan.
* LOST_GPU: a host that lost a GPU (the fake nvidia-smi reports 7 of an H200's 8) is planned by
  status and teardown (``fit_checks: false``) whatever its layout: a GPU set naming GPU 7, a
  fixed replica count, a 2-node TP instance, auto; deploy (``fit_checks: true``) refuses each.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Tuple

import pytest

from tests.unit.plugins.action import test_vllm_fleet_plan_contract as harness
from tests.unit.plugins.action.test_vllm_fleet_plan_contract import (
    ANSIBLE_PLAYBOOK, ERNIE, Run, _assert_no_crash, _host_block, _inventory, _plans)

pytestmark = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not found")

# the harness's playbook, with the GPU count of the fake nvidia-smi per host (case_gpu_count), its
# driver (case_driver / case_cuda: the fake's own by default; a uv host of vLLM 0.32.0, a CUDA 13
# build, needs an R580 driver, which the planner checks) and the plan's fit checks from -e
# fit_checks (deploy: true; status / teardown: false)
PLAYBOOK = harness.PLAYBOOK.replace(
    "      when: case_gpu | default(false)\n",
    "      environment:\n        FAKE_GPU_COUNT: \"{{ case_gpu_count | default(8) }}\"\n"
    "        FAKE_NVIDIA_DRIVER: \"{{ case_driver | default('570.133.20') }}\"\n"
    "        FAKE_CUDA_VERSION: \"{{ case_cuda | default('12.8') }}\"\n"
    "      when: case_gpu | default(false)\n").replace(
    "        all_hosts: true\n",
    "        all_hosts: true\n        fit_checks: \"{{ fit_checks | default(true) }}\"\n")
assert PLAYBOOK.count("FAKE_GPU_COUNT") == 1 and PLAYBOOK.count("fit_checks:") == 1

_GPU = {"vllm_fleet_recipe": ERNIE, "case_gpu": True}   # h200 from the fake nvidia-smi's facts


def _play(tmp, inventory: str, *extra: str) -> Run:
    return harness._play(tmp, inventory, *extra, playbook=PLAYBOOK)


def _dep(name: str, machine: str, port: int, gpus: str, **more: Any) -> Dict[str, Any]:
    return {**_GPU, "vllm_fleet_deployment": name, "ansible_host": machine, "vllm_fleet_port": port,
            "vllm_fleet_gpus": gpus, "vllm_fleet_replicas_per_host": 1, **more}


_UV = {"vllm_fleet_runtime": "uv", "vllm_fleet_vllm_version": "0.32.0", "case_driver": "580.95.05", "case_cuda": "13.0"}

# (id, [(host, vars)], the host the message names, the colliding name it must give)
NAMES: List[Tuple[str, List[Tuple[str, Dict[str, Any]]], str, str]] = [
    ("replica-name",
     [("n-ernie", _dep("ernie", "10.8.0.1", 8000, "0-1", vllm_fleet_replicas_per_host=2)),
      ("n-ernie-r1", _dep("ernie-r1", "10.8.0.1", 9000, "2"))],
     "n-ernie-r1", "vllm-fleet-ernie-r1"),
    ("kept-previous",
     [("n-x", _dep("x", "10.8.0.2", 8000, "0")), ("n-x-prev", _dep("x-prev", "10.8.0.2", 9000, "1"))],
     "n-x-prev", "vllm-fleet-x-prev"),
    ("plan-marker",
     [("n-y", _dep("y", "10.8.0.3", 8000, "0")), ("n-y-plan", _dep("y.plan", "10.8.0.3", 9000, "1"))],
     "n-y-plan", "/y.plan"),
    ("unit-env-file",
     [("n-u", _dep("u", "10.8.0.4", 8000, "0", **_UV)),
      ("n-u-env", _dep("vllm-fleet-u.env", "10.8.0.4", 9000, "1"))],
     "n-u-env", "/etc/vllm-fleet/vllm-fleet-u.env"),
    ("machine-case",            # one machine written two ways (DNS names are case-insensitive)
     [("n-c", _dep("c", "gpu-node-01", 8000, "0")), ("n-c-prev", _dep("c-prev", "GPU-NODE-01", 9000, "1"))],
     "n-c-prev", "vllm-fleet-c-prev"),
]
# a uv deployment named like the bundle's own directory (/opt/vllm-fleet/tools: the uv tools venv)
RESERVED = ("n-tools", _dep("tools", "10.8.0.5", 8000, "0", **_UV), "/opt/vllm-fleet/tools")

# must plan: distinct names on one machine; the same names on other machines; a docker `tools`
CONTROLS: List[Tuple[str, Dict[str, Any]]] = [
    ("o-ernie", _dep("ernie", "10.8.1.1", 8000, "0-1", vllm_fleet_replicas_per_host=2)),
    ("o-ernie-b", _dep("ernie-b", "10.8.1.1", 9000, "2")),
    ("o-ernie-r1", _dep("ernie-r1", "10.8.1.2", 8000, "0")),
    ("o-x", _dep("x", "10.8.1.3", 8000, "0")),
    ("o-x-prev", _dep("x-prev", "10.8.1.4", 8000, "0")),
    ("o-y", _dep("y", "10.8.1.5", 8000, "0")),
    ("o-y-plan", _dep("y.plan", "10.8.1.6", 8000, "0")),
    ("o-tools", _dep("tools", "10.8.1.7", 8000, "0")),
]


@pytest.fixture(scope="module")
def names_run(tmp_path_factory) -> Run:
    blocks = [_host_block(h, v) for _, hosts, _, _ in NAMES for h, v in hosts]
    blocks.append(_host_block(RESERVED[0], RESERVED[1]))
    return _play(tmp_path_factory.mktemp("names"), _inventory(blocks, {}))


@pytest.fixture(scope="module")
def controls_run(tmp_path_factory) -> Run:
    return _play(tmp_path_factory.mktemp("names-ok"), _inventory([_host_block(h, v) for h, v in CONTROLS], {}))


@pytest.mark.parametrize("case", NAMES, ids=lambda c: c[0])
def test_two_deployments_deriving_one_name_on_a_machine_are_refused(names_run, case):
    _, hosts, named, name = case
    run = names_run
    assert run.rc != 0, run.out[-3000:]
    assert "plan failed" not in run.out, run.out[-3000:]      # each deployment plans alone
    # (Ansible shows the failure twice: its [ERROR] line and the task result)
    lines = sorted({line.strip() for line in run.out.splitlines()
                    if line.strip().startswith(f"{named}: vllm_fleet_deployment: ")})
    assert len(lines) == 1, run.out[-4000:]
    (other_host, other_vars), = [(h, v) for h, v in hosts if h != named]
    for word in (f"host {other_host}", f"host {named}", repr(other_vars["vllm_fleet_deployment"]),
                 repr(dict(hosts)[named]["vllm_fleet_deployment"]), name):
        assert word in lines[0], (word, lines[0])
    _assert_no_crash(run)


def test_a_uv_deployment_named_like_the_bundles_own_directory_is_refused(names_run):
    host, _, path = RESERVED
    assert names_run.names(host, "vllm_fleet_deployment"), names_run.out[-4000:]
    assert re.search(rf"{host}: vllm_fleet_deployment: deployment 'tools' would use {re.escape(path)} .*"
                     r"shared uv tools venv", names_run.out), names_run.out[-4000:]


def test_distinct_names_and_other_machines_plan(controls_run):
    run = controls_run
    assert run.rc == 0, run.out[-4000:]
    _assert_no_crash(run)
    plans = _plans(run)
    assert set(plans) == {h for h, _ in CONTROLS}
    assert [p["name"] for p in plans["o-ernie"]["processes"]] == ["vllm-fleet-ernie-r0", "vllm-fleet-ernie-r1"]
    assert [p["name"] for p in plans["o-ernie-r1"]["processes"]] == ["vllm-fleet-ernie-r1"]
    assert [p["name"] for p in plans["o-x-prev"]["processes"]] == ["vllm-fleet-x-prev"]


# ------------------------------------------------------------------------------------------
# LOST_GPU: h200 hosts whose fake nvidia-smi reports 7 GPUs; (host, vars, variable deploy names)

_LOST = dict(_GPU, case_gpu_count=7)
_TP2 = dict(_LOST, vllm_fleet_deployment="l-tp", vllm_fleet_strategy="multi_node_tp", vllm_fleet_nodes=2,
            vllm_fleet_iface="eth0")
LOST_GPU: List[Tuple[str, Dict[str, Any], str]] = [
    ("l-gpus", dict(_LOST, vllm_fleet_deployment="l-gpus", vllm_fleet_gpus="0-7", vllm_fleet_replicas_per_host=1),
     "vllm_fleet_gpus"),
    ("l-fixed", dict(_LOST, vllm_fleet_deployment="l-fixed", vllm_fleet_replicas_per_host=4,
                     vllm_fleet_extra_args=["--tensor-parallel-size", "2"]), "vllm_fleet_replicas_per_host"),
    ("l-tp-0", dict(_TP2, ansible_host="10.7.0.1"), "vllm_fleet_extra_args"),
    ("l-tp-1", dict(_TP2, ansible_host="10.7.0.2"), "vllm_fleet_extra_args"),
    ("l-auto", dict(_LOST, vllm_fleet_deployment="l-auto"), "vllm_fleet_hardware"),
]


@pytest.fixture(scope="module")
def lost_gpu_inventory() -> str:
    return _inventory([_host_block(h, v) for h, v, _ in LOST_GPU], {})


def test_a_host_that_lost_a_gpu_is_planned_for_status_and_teardown(tmp_path, lost_gpu_inventory):
    run = _play(tmp_path, lost_gpu_inventory, "-e", "fit_checks=false")
    assert run.rc == 0, run.out[-4000:]
    _assert_no_crash(run)
    plans = _plans(run)
    names = {h: [p["name"] for p in plan["processes"]] for h, plan in plans.items()}
    # the inventory's layout, not today's 7 GPUs: the deployed containers are the ones shown / removed
    assert plans["l-gpus"]["processes"][0]["gpus"] == list(range(8))
    assert names["l-fixed"] == [f"vllm-fleet-l-fixed-r{i}" for i in range(4)]
    assert plans["l-fixed"]["processes"][3]["gpus"] == [6, 7]
    assert names["l-tp-0"] == ["vllm-fleet-l-tp-head0"] and names["l-tp-1"] == ["vllm-fleet-l-tp-worker1"]
    assert names["l-auto"] == [f"vllm-fleet-l-auto-r{i}" for i in range(8)]   # the h200 profile's 8, as deployed


def test_deploy_refuses_a_host_that_lost_a_gpu(tmp_path, lost_gpu_inventory):
    run = _play(tmp_path, lost_gpu_inventory)
    assert run.rc != 0, run.out[-3000:]
    _assert_no_crash(run)
    for host, _, var in LOST_GPU:
        assert run.names(host, var), f"{host}: {var}\n{run.out[-4000:]}"
        assert re.search(rf"{host}: vllm_fleet_hardware h200 means 8 GPUs per node, but 7 were detected", run.out)
