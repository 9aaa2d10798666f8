"""inventories/example plans cleanly for every group (the README's worked example stays true)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vllm_fleet import loader
from vllm_fleet.plan import HostInput, plan
from vllm_fleet.rollout import rollout

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "inventories" / "example"
HOSTS = yaml.safe_load((EXAMPLE / "hosts.yml").read_text())["all"]["children"]
# what the GPU facts module would report on each group's GPU hosts
DETECTED = {"mi300x_cluster": "mi300x", "cpu_embeddings": "xeon6"}


@pytest.fixture(scope="module")
def cat():
    return loader.load([ROOT / "recipes"])


def hosts_of(group):
    group_vars = yaml.safe_load((EXAMPLE / "group_vars" / f"{group}.yml").read_text())
    out = []
    for name, hv in HOSTS[group]["hosts"].items():
        merged = {**group_vars, **hv}
        settings = {k[len("vllm_fleet_"):]: v for k, v in merged.items() if k.startswith("vllm_fleet_")}
        roles = merged.get("vllm_fleet_role") or []
        roles = [roles] if isinstance(roles, str) else list(roles)
        gpu_host = not roles or bool(set(roles) & {"prefill", "decode", "instance"})
        gpu = {"hardware": DETECTED.get(group, "h200")} if gpu_host else {"vendor": "none"}
        out.append(HostInput(name, settings, hv["ansible_host"], "eth0", gpu,
                             node_rank=merged.get("vllm_fleet_node_rank"), roles=roles))
    return out


@pytest.mark.parametrize("group", sorted(HOSTS))
def test_every_example_group_plans(cat, group):
    out = plan(cat, hosts_of(group))
    assert set(out) == set(HOSTS[group]["hosts"])
    for host_plan in out.values():
        for proc in host_plan["processes"]:
            assert not any("$" in tok for tok in proc["argv"]), proc["argv"]


def test_worked_example_multinode_ranks_and_batches(cat):
    out = plan(cat, hosts_of("dsv3_multinode"))
    assert [out[h]["node_rank"] for h in ("h200-11", "h200-12", "h200-13", "h200-14")] == [0, 1, 0, 1]
    worker = out["h200-12"]["processes"][0]["argv"]
    assert worker[worker.index("--master-addr") + 1] == "10.20.0.11" and "--headless" in worker
    assert rollout(out) == {"order": ["h200-11", "h200-12", "h200-13", "h200-14"], "serial": [2, 2]}


def test_worked_example_pd_and_mooncake_services(cat):
    pd = plan(cat, hosts_of("dsv3_pd"))
    assert pd["router-01"]["processes"][0]["argv"][:8] == [
        "vllm-router", "--policy", "round_robin", "--vllm-pd-disaggregation",
        "--prefill", "http://10.20.1.21:8001", "--prefill", "http://10.20.1.22:8001"]
    mc = plan(cat, hosts_of("dsv3_mooncake"))
    assert [p["kind"] for p in mc["kv-01"]["processes"]] == ["mooncake_master", "mooncake_store", "router"]
