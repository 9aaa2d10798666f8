"""inventories/example plans cleanly for every group (the worked examples of docs/inventory.md stay true)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_fleet import loader
from example_hosts import HOSTS, hosts_of   # tests/unit/example_hosts.py
from vllm_fleet.plan import plan
from vllm_fleet.rollout import rollout

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cat():
    return loader.load([ROOT / "recipes"])


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
