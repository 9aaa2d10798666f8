"""vllm_fleet_gpu_health: what failed and degraded GPUs (the GPU facts' health) do to a plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_fleet import loader
from vllm_fleet.plan import HostInput, PlanError, plan, plan_fleet

ROOT = Path(__file__).resolve().parents[4]
SEED = "baidu/ERNIE-4.5-VL-28B-A3B-PT"
DS = "deepseek-ai/DeepSeek-V3"
ECC = "uncorrectable ECC errors: 2 volatile (dram)"
XID = "XID 79 in the kernel log: GPU has fallen off the bus"


@pytest.fixture(scope="module")
def cat():
    return loader.load([ROOT / "recipes"])


def health(failed=(), degraded=(), count=8):
    gpus = []
    for i in range(count):
        state = "failed" if i in failed else "degraded" if i in degraded else "healthy"
        evidence = [ECC if i == 3 else XID] if i in failed else ["hw_thermal_slowdown active"] if i in degraded else []
        gpus.append({"index": i, "state": state, "evidence": evidence})
    return {"gpus": gpus, "read": ["nvidia-smi -q -x", "dmesg"], "notes": []}


def seed(name="h", failed=(), degraded=(), fit=True, **settings):
    base = {"recipe": SEED, "hardware": "h200"}
    base.update(settings)
    return HostInput(name=name, settings=base, address="10.0.0.1", iface="eth0", fit_layout=fit,
                     gpu={"brand": "nvidia", "hardware": "h200", "count": 8,
                          "health": health(failed, degraded)})


def servers(host_plan):
    return [(p["name"], p.get("gpus"), p["port"]) for p in host_plan["processes"]]


def test_refuse_is_the_default_and_names_host_gpu_and_evidence(cat):
    with pytest.raises(PlanError) as err:
        plan(cat, [seed(failed=[3])])
    text = str(err.value)
    assert f"h: vllm_fleet_gpu_health: GPU 3 failed its health check ({ECC})" in text
    assert "vllm-fleet-ernie-4-5-vl-28b-a3b-pt-h200-r3 would use it" in text
    assert "vllm_fleet_gpu_health: exclude" in text


def test_exclude_packs_the_healthy_gpus_and_records_what_it_left_out(cat):
    out = plan(cat, [seed(failed=[3], gpu_health="exclude")])["h"]
    got = servers(out)
    assert [gpus for _, gpus, _ in got] == [[0], [1], [2], [4], [5], [6], [7]]
    assert [name.rsplit("-", 1)[1] for name, _, _ in got] == [f"r{i}" for i in range(7)]
    assert [port for _, _, port in got] == list(range(8000, 8007))
    assert out["gpu_health"] == {"policy": "exclude", "failed": {"3": [ECC]}, "excluded": [3],
                                 "excluded_ranges": "3", "degraded": {}}



def test_a_failed_gpu_is_not_offered_as_idle(cat):
    # one TP 1 server on a healthy GPU leaves the others idle, but not the failed one
    plans, problems = plan_fleet(cat, [seed(failed=[3], gpu_health="exclude", replicas_per_host=1)])
    assert problems == [] and plans["h"]["gpus_idle"] == [1, 2, 4, 5, 6, 7]
    plans, _ = plan_fleet(cat, [seed(replicas_per_host=1)])
    assert plans["h"]["gpus_idle"] == [1, 2, 3, 4, 5, 6, 7]


def test_exclude_gives_a_lone_server_healthy_gpus_under_its_own_name(cat):
    out = plan(cat, [seed(failed=[0], gpu_health="exclude", replicas_per_host=1)])["h"]
    (name, gpus, port), = servers(out)
    assert gpus == [1] and port == 8000 and not name.endswith("-r0")
    healthy = plan(cat, [seed(gpu_health="exclude", replicas_per_host=1)])["h"]
    assert servers(healthy)[0][1] is None and servers(healthy)[0][0] == name   # no failed GPU: as before


def test_exclude_refuses_a_fixed_set_naming_a_failed_gpu(cat):
    with pytest.raises(PlanError) as err:
        plan(cat, [seed(failed=[3], gpu_health="exclude", gpus=[0, 1, 2, 3], replicas_per_host=1)])
    assert f"h: vllm_fleet_gpus: GPU 3 failed its health check ({ECC})" in str(err.value)


def test_exclude_refuses_a_count_the_healthy_gpus_cannot_hold(cat):
    with pytest.raises(PlanError) as err:
        plan(cat, [seed(failed=[3, 5], gpu_health="exclude", replicas_per_host=8)])
    assert "8 replicas x 1 GPU(s)" in str(err.value) and "GPU 3,5 failed its health check" in str(err.value)


def test_exclude_does_not_move_a_multi_node_server(cat):
    hosts = [HostInput(name=n, settings={"recipe": DS, "hardware": "h200", "strategy": "multi_node_tp",
                                         "gpu_health": "exclude"},
                       address=a, iface="eth0",
                       gpu={"brand": "nvidia", "hardware": "h200", "count": 8,
                            "health": health(failed=[2] if n == "b" else [])})
             for n, a in (("a", "10.0.0.1"), ("b", "10.0.0.2"))]
    with pytest.raises(PlanError) as err:
        plan(cat, hosts)
    assert "b: vllm_fleet_gpu_health: GPU 2 failed its health check" in str(err.value)
    assert "exclude moves single-node servers only" in str(err.value)


def test_warn_plans_on_and_records(cat):
    out = plan(cat, [seed(failed=[3], gpu_health="warn")])["h"]
    assert len(out["processes"]) == 8
    assert out["gpu_health"]["failed"] == {"3": [ECC]} and out["gpu_health"]["excluded"] == []


def test_off_ignores_health(cat):
    out = plan(cat, [seed(failed=[3], gpu_health="off")])["h"]
    assert len(out["processes"]) == 8 and "gpu_health" not in out


def test_status_and_teardown_plan_a_sick_host(cat):
    out = plan(cat, [seed(failed=[3], fit=False)])["h"]
    assert len(out["processes"]) == 8 and out["gpu_health"]["failed"] == {"3": [ECC]}


def test_degraded_gpus_are_recorded_not_refused(cat):
    out = plan(cat, [seed(degraded=[4])])["h"]
    assert len(out["processes"]) == 8
    assert out["gpu_health"]["degraded"] == {"4": ["hw_thermal_slowdown active"]} and out["gpu_health"]["failed"] == {}


def test_healthy_hosts_plan_as_before(cat):
    sick_free = plan(cat, [seed()])["h"]
    no_facts = plan(cat, [HostInput(name="h", settings={"recipe": SEED, "hardware": "h200"}, address="10.0.0.1",
                                    iface="eth0", gpu={"brand": "nvidia", "hardware": "h200", "count": 8})])["h"]
    assert "gpu_health" not in sick_free and sick_free["hash"] == no_facts["hash"]


def test_health_that_could_not_be_read_is_said_not_passed_over(cat):
    host = seed()
    host.gpu["health"] = {"gpus": [], "read": [], "notes": ["nvidia-smi -q -x: rc=9 no GPU in the XML", "dmesg: rc=1"]}
    out = plan(cat, [host])["h"]
    assert len(out["processes"]) == 8
    assert out["gpu_health"]["unread"] == "nvidia-smi -q -x: rc=9 no GPU in the XML; dmesg: rc=1"
    host.settings["gpu_health"] = "off"
    assert "gpu_health" not in plan(cat, [host])["h"]
