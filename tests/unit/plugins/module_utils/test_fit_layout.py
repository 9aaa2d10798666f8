"""A host that lost a GPU (facts: 7 of an H200's 8) is planned by status and teardown
(HostInput.fit_layout False, what the plan action sets for fit_checks: false) from the
inventory's layout, whatever it is; deploy (fit_layout True) refuses it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from vllm_fleet import loader
from vllm_fleet.plan import HostInput, plan_fleet

ROOT = Path(__file__).resolve().parents[4]
SEED = "baidu/ERNIE-4.5-VL-28B-A3B-PT"


@pytest.fixture(scope="module")
def cat():
    return loader.load([ROOT / "recipes"])


def lost(name, count=7, check_gpus=True, address="10.0.0.1", **settings):
    return HostInput(name=name, settings={"recipe": SEED, "hardware": "h200", "deployment": name.split(".")[0],
                                          **settings},
                     address=address, iface="eth0", machine=name, check_gpus=check_gpus,
                     gpu={"hardware": "h200", "count": count, "brand": "nvidia", "names": ["NVIDIA H200"] * count,
                          "total_memory_gib": 141.0 * count})


def _names(plans, host):
    return [p["name"] for p in plans[host]["processes"]]


LAYOUTS = {
    "gpus": ([lost("g", gpus=list(range(8)), replicas_per_host=1)], "g: vllm_fleet_gpus: GPU 7 does not exist"),
    "fixed": ([lost("f", replicas_per_host=4, extra_args=["--tensor-parallel-size", "2"])],
              "f: vllm_fleet_replicas_per_host: 4 replicas x 2 GPU(s) each"),
    "tp2": ([lost("t.0", strategy="multi_node_tp", nodes=2),
             lost("t.1", strategy="multi_node_tp", nodes=2, address="10.0.0.2")],
            "t.0: vllm_fleet_extra_args: the command needs 8 GPUs per node"),
    "auto": ([lost("a")], "a: vllm_fleet_hardware h200 means 8 GPUs per node, but 7 were detected"),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_deploy_refuses_and_status_plans_every_layout(cat, layout):
    hosts, refusal = LAYOUTS[layout]
    _, problems = plan_fleet(cat, hosts)
    assert len(problems) == 1 and refusal in problems[0], problems
    plans, problems = plan_fleet(cat, [replace(h, fit_layout=False) for h in hosts])
    assert problems == [] and set(plans) == {h.name for h in hosts}


def test_status_plans_the_layout_deploy_made(cat):
    def status(*hosts):
        return plan_fleet(cat, [replace(h, fit_layout=False) for h in hosts])[0]
    assert status(*LAYOUTS["gpus"][0])["g"]["processes"][0]["gpus"] == list(range(8))
    fixed = status(*LAYOUTS["fixed"][0])
    assert _names(fixed, "f") == [f"vllm-fleet-f-r{i}" for i in range(4)]
    assert [p["gpus"] for p in fixed["f"]["processes"]] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    tp = status(*LAYOUTS["tp2"][0])
    assert (_names(tp, "t.0"), _names(tp, "t.1")) == (["vllm-fleet-t-head0"], ["vllm-fleet-t-worker1"])
    # auto: the profile's 8 GPUs, as deploy required them ...
    assert _names(status(lost("a")), "a") == [f"vllm-fleet-a-r{i}" for i in range(8)]
    # ... unless the GPU count check is off: deploy then laid out the host's own GPUs, as status does
    assert _names(status(lost("a", count=4, check_gpus=False)), "a") == [f"vllm-fleet-a-r{i}" for i in range(4)]
    # a replica count that no GPU count fixes (3 x TP 2 on a 4-GPU set) is still refused
    _, problems = plan_fleet(cat, [replace(lost("s", gpus=[0, 1, 2, 3], replicas_per_host=3,
                                                extra_args=["--tensor-parallel-size", "2"]), fit_layout=False)])
    assert len(problems) == 1 and "s: vllm_fleet_replicas_per_host: 3 replicas x 2 GPU(s)" in problems[0]
