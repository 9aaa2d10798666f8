"""One registry of names per machine (machines.check_names, planmodel.host_names): two
deployments on one machine never derive the same container, unit or path, and no deployment
takes a name the bundle keeps for itself. Through plan_fleet, as the plan action calls it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_fleet import loader
from vllm_fleet.machines import check_names, machine_of
from vllm_fleet.plan import HostInput, plan_fleet
from vllm_fleet.planmodel import COMPILE_CACHE_ROOT, HF_CACHE_ROOT, RESERVED, VENV_ROOT
from vllm_fleet.planmodel import STATE_DIR_PLACEHOLDER as STATE_DIR, host_names

ROOT = Path(__file__).resolve().parents[4]
SEED = "baidu/ERNIE-4.5-VL-28B-A3B-PT"


@pytest.fixture(scope="module")
def cat():
    return loader.load([ROOT / "recipes"])


def on(machine, name, deployment, port, replicas=1, **settings):
    base = {"recipe": SEED, "hardware": "h200", "deployment": deployment, "port": port,
            "replicas_per_host": replicas, **settings}
    return HostInput(name=name, settings=base, address="10.0.0.1", iface="eth0", machine=machine,
                     gpu={"hardware": "h200", "count": 8, "brand": "nvidia"})


def uv(machine, name, deployment, port, **settings):
    return on(machine, name, deployment, port, runtime="uv", vllm_version="0.32.0", **settings)


def names_lines(problems):
    return [p for p in problems if ": vllm_fleet_deployment: " in p]


@pytest.mark.parametrize("first, second, name", [
    # another's replica: ernie with 2 replicas runs vllm-fleet-ernie-r0 / -r1
    (on("m1", "h-ernie", "ernie", 8000, replicas=2, gpus=[0, 1]),
     on("m1", "h-r1", "ernie-r1", 9000, gpus=[2]), "vllm-fleet-ernie-r1"),
    # another's kept previous revision (docker keeps vllm-fleet-x as vllm-fleet-x-prev)
    (on("m1", "h-x", "x", 8000, gpus=[0]), on("m1", "h-xp", "x-prev", 9000, gpus=[1]), "vllm-fleet-x-prev"),
    # another's plan marker: <state_dir>/y.plan is y's marker and y.plan's records directory
    (on("m1", "h-y", "y", 8000, gpus=[0]), on("m1", "h-yp", "y.plan", 9000, gpus=[1]), f"{STATE_DIR}/y.plan"),
    # a uv unit's env file: /etc/vllm-fleet/vllm-fleet-u.env is also a config directory's path
    (uv("m1", "h-u", "u", 8000, gpus=[0]), on("m1", "h-ue", "vllm-fleet-u.env", 9000, gpus=[1]),
     "/etc/vllm-fleet/vllm-fleet-u.env"),
    # machines are DNS names: compared case-insensitively
    (on("gpu-node-01", "h-a", "a", 8000, gpus=[0]), on("GPU-NODE-01", "h-ap", "a-prev", 9000, gpus=[1]),
     "vllm-fleet-a-prev"),
])
def test_two_deployments_deriving_one_name_on_a_machine_are_refused(cat, first, second, name):
    _, problems = plan_fleet(cat, [first, second])
    lines = names_lines(problems)
    assert len(lines) == 1, problems
    line = lines[0]
    assert line.startswith(f"{second.name}: vllm_fleet_deployment: deployments ")
    for word in (repr(first.settings["deployment"]), repr(second.settings["deployment"]),
                 f"host {first.name}", f"host {second.name}", f"machine {second.machine}", name):
        assert word in line, (word, line)
    assert problems == lines, problems   # only the names clash (ports and GPUs are apart)


@pytest.mark.parametrize("hosts", [
    # distinct names on one machine: ernie (2 replicas) and ernie-b
    [on("m1", "h-ernie", "ernie", 8000, replicas=2, gpus=[0, 1]), on("m1", "h-b", "ernie-b", 9000, gpus=[2])],
    # the same names on different machines
    [on("m1", "h-ernie", "ernie", 8000, replicas=2, gpus=[0, 1]), on("m2", "h-r1", "ernie-r1", 8000, gpus=[2])],
    [on("m1", "h-x", "x", 8000), on("m2", "h-xp", "x-prev", 8000)],
    # a docker deployment named like the uv tools venv: it has no venv directory
    [on("m1", "h-t", "tools", 8000)],
])
def test_distinct_names_or_machines_plan(cat, hosts):
    plans, problems = plan_fleet(cat, hosts)
    assert problems == [] and set(plans) == {h.name for h in hosts}


def test_a_uv_deployment_named_like_the_tools_venv_is_refused(cat):
    _, problems = plan_fleet(cat, [uv("m1", "h-t", "tools", 8000)])
    assert problems == [f"h-t: vllm_fleet_deployment: deployment 'tools' would use {VENV_ROOT}/tools (the venv "
                        f"directory), which is the shared uv tools venv (vllm_fleet_uv); teardown would remove it "
                        f"with the deployment: choose another vllm_fleet_deployment"]
    # the uv units' shared HF cache (HF_HOME) entries: teardown's purge removes hf-cache/<deployment>
    _, problems = plan_fleet(cat, [on("m1", "h-hub", "hub", 8000)])
    assert len(problems) == 1 and f"{HF_CACHE_ROOT}/hub" in problems[0] and "HF_HOME" in problems[0]


def test_host_names_lists_every_derived_name(cat):
    plans, _ = plan_fleet(cat, [on("m1", "h", "ernie", 8000, replicas=2, gpus=[0, 1])])
    names = {(k, n) for k, n, _ in host_names(plans["h"])}
    assert names == {("container", "vllm-fleet-ernie-r0"), ("container", "vllm-fleet-ernie-r0-prev"),
                     ("container", "vllm-fleet-ernie-r1"), ("container", "vllm-fleet-ernie-r1-prev"),
                     ("path", "/etc/vllm-fleet/ernie"), ("path", f"{STATE_DIR}/ernie.plan"),
                     ("path", f"{STATE_DIR}/ernie"), ("path", f"{HF_CACHE_ROOT}/ernie"),
                     ("path", f"{COMPILE_CACHE_ROOT}/ernie")}
    plans, _ = plan_fleet(cat, [uv("m1", "h", "ernie", 8000)])
    names = {(k, n) for k, n, _ in host_names(plans["h"])}
    assert ("unit", "vllm-fleet-ernie.service") in names and ("path", f"{VENV_ROOT}/ernie") in names
    assert ("path", "/etc/vllm-fleet/vllm-fleet-ernie.env") in names
    assert not [n for n in names if n[0] == "container"]
    assert all(kind == "path" for kind, _ in RESERVED)


def test_machines_compare_case_insensitively_for_every_check(cat):
    assert machine_of({"h": "GPU-Node-01."}, "h") == machine_of({"g": "gpu-node-01"}, "g")
    # the port check: same port on one machine written two ways
    _, problems = plan_fleet(cat, [on("gpu-node-01", "a", "a", 8000, gpus=[0]),
                                   on("GPU-NODE-01", "b", "b", 8000, gpus=[1])])
    assert len(problems) == 1 and problems[0].startswith("b: vllm_fleet_port: port 8000"), problems


def test_check_names_reads_plain_host_plans():
    plans = {"h1": {"deployment": "m", "config_dir": "/etc/vllm-fleet/m",
                    "processes": [{"name": "vllm-fleet-m-router", "runtime": "service"}]},
             "h2": {"deployment": "m-router", "config_dir": "/etc/vllm-fleet/m-router",
                    "processes": [{"name": "vllm-fleet-m-router", "runtime": "service"}]}}
    problems = check_names(plans, {"h1": "box", "h2": "box"})
    assert len(problems) == 1 and "vllm-fleet-m-router.service" in problems[0] and \
        "/etc/vllm-fleet/vllm-fleet-m-router.env" in problems[0]
