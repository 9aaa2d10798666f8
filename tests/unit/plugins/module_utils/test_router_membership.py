"""A plain router's workers change through its API, not by a restart: the plan keeps them out of
the router's hash (the restart key its unit carries) and says how its unit reads them; the
drain, undrain and reconcile calls are computed from what the router lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_fleet import loader
from vllm_fleet.plan import HostInput, plan_fleet
from vllm_fleet.planargv import MEMBERSHIP_ENV, router_membership
from vllm_fleet.rollout import membership_calls, membership_changes, router_reconcile

ROOT = Path(__file__).resolve().parents[4]
SEED = "baidu/ERNIE-4.5-VL-28B-A3B-PT"


@pytest.fixture(scope="module")
def cat():
    return loader.load([ROOT / "recipes"])


def test_a_plain_router_has_a_membership_a_pd_router_has_none():
    argv = ["vllm-router", "--host", "0.0.0.0", "--worker-urls", "http://10.0.0.1:8000", "http://10.0.0.1:8001",
            "--policy", "round_robin"]
    got = router_membership(argv)
    assert got == {"flag": "--worker-urls", "urls": ["http://10.0.0.1:8000", "http://10.0.0.1:8001"],
                   "env": MEMBERSHIP_ENV, "argv": ["vllm-router", "--host", "0.0.0.0", "--policy", "round_robin"]}
    # the list last on the line: nothing after it is taken for a worker
    assert router_membership(["vllm-router", "--worker-urls", "http://a:1"])["argv"] == ["vllm-router"]
    # P/D (vllm-router 0.1.17 refuses /add_worker in P/D mode), no list, a list that is not URLs
    assert router_membership(["vllm-router", "--vllm-pd-disaggregation", "--prefill", "http://p:1",
                              "--decode", "http://d:1"]) is None
    assert router_membership(["vllm-router", "--port", "30000"]) is None
    assert router_membership(["vllm-router", "--worker-urls", "$WORKERS"]) is None


def _router_plan(cat, replicas):
    engine = HostInput(name="a", settings={"recipe": SEED, "hardware": "h200", "deployment": "ernie", "port": 8000,
                                           "replicas_per_host": replicas},
                       address="10.0.0.1", iface="eth0", machine="m1",
                       gpu={"hardware": "h200", "count": 8, "brand": "nvidia"})
    router = HostInput(name="r", settings={"recipe": SEED, "hardware": "h200", "deployment": "ernie", "port": 8000,
                                           "replicas_per_host": replicas},
                       address="10.0.0.9", iface="eth0", machine="m9", roles=["router"])
    plans, problems = plan_fleet(cat, [engine, router])
    assert problems == [], problems
    return plans["r"]


def test_a_change_of_workers_changes_the_router_host_plan_but_not_the_router_hash(cat):
    two, three = _router_plan(cat, 2), _router_plan(cat, 3)
    r2, r3 = two["processes"][0], three["processes"][0]
    assert r2["membership"]["urls"] == ["http://10.0.0.1:8000", "http://10.0.0.1:8001"]
    assert r3["membership"]["urls"] == ["http://10.0.0.1:8000", "http://10.0.0.1:8001", "http://10.0.0.1:8002"]
    # the restart key (the unit's plan-hash line) is the same; the host's plan (recorded) is not
    assert r2["hash"] == r3["hash"] and r2["membership"]["argv"] == r3["membership"]["argv"]
    assert two["hash"] != three["hash"]
    # the router's argv still holds every worker: what status shows and the gate expects
    assert r3["argv"][r3["argv"].index("--worker-urls") + 1:][:3] == r3["membership"]["urls"]
    # a change of its flags changes the hash: that restarts it
    other = dict(r3, argv=r3["argv"] + ["--log-level", "debug"])
    assert router_membership(other["argv"])["argv"] != r3["membership"]["argv"]


def test_drain_undrain_and_reconcile_call_the_api_only_for_what_differs():
    procs = [{"name": "r0", "drain": {"router_host": "r", "router_port": 8000, "url": "http://a:8000"}},
             {"name": "r1", "drain": {"router_host": "r", "router_port": 8000, "url": "http://a:8001"}},
             {"name": "x"}]   # not behind a router: no change
    listed = {"status": 200, "json": {"urls": ["http://a:8000"]}}
    drain = membership_changes(procs, "remove")
    assert [c["remove"] for c in drain] == [["http://a:8000"], ["http://a:8001"]]
    assert membership_calls(drain, [listed, listed]) == [
        {"name": "r0", "router_host": "r", "router_port": 8000, "call": "remove_worker", "url": "http://a:8000"}]
    undrain = membership_changes(procs, "add")
    assert [(c["call"], c["url"]) for c in membership_calls(undrain, [listed, listed])] == [("add_worker",
                                                                                             "http://a:8001")]
    # a router that does not answer (not started yet) gets no call; its gate judges it
    assert membership_calls(undrain, [{"status": -1, "msg": "refused"}, {"status": 503}]) == []
    # reconcile: the plan's workers added, every other listed one removed
    routers = [{"name": "rt", "port": 30000, "membership": {"urls": ["http://a:8000", "http://a:8002"]}},
               {"name": "pd", "port": 30001}]
    changes = router_reconcile(routers, "r")
    assert len(changes) == 1 and changes[0]["router_host"] == "r" and changes[0]["router_port"] == 30000
    calls = membership_calls(changes, [{"status": 200, "json": {"urls": ["http://a:8000", "http://a:8001"]}}])
    assert [(c["call"], c["url"]) for c in calls] == [("add_worker", "http://a:8002"), ("remove_worker", "http://a:8001")]
    assert membership_calls(changes, [{"status": 200, "json": {"urls": ["http://a:8002", "http://a:8000"]}}]) == []


def test_router_metrics_are_scrapable_and_given_once():
    from vllm_fleet.planargv import router_metrics
    plain = ["vllm-router", "--policy", "cache_aware", "--host", "0.0.0.0", "--port", "8000", "--worker-urls", "http://a:1"]
    assert router_metrics(plain)[-4:] == ["--prometheus-host", "0.0.0.0", "--prometheus-port", "29000"]
    # bound where the router binds; the operator's / recipe's own flags win and are never doubled
    assert router_metrics(["vllm-router", "--host", "10.0.0.5"], 29001)[-4:] == \
        ["--prometheus-host", "10.0.0.5", "--prometheus-port", "29001"]
    given = ["vllm-router", "--prometheus-port", "9999", "--prometheus-host", "127.0.0.1"]
    assert router_metrics(given, 29001) == given
    # the membership split still finds the workers (the metrics flags follow them)
    assert router_membership(router_metrics(plain))["urls"] == ["http://a:1"]


def test_two_routers_metrics_on_one_machine_are_refused():
    from vllm_fleet.machines import check_machines
    def router(name, port):
        return {"deployment": name, "processes": [{"name": f"vllm-fleet-{name}-router", "kind": "router", "port": port,
                                                   "serves_http": True, "argv": ["vllm-router", "--port", str(port),
                                                                                 "--prometheus-port", "29000"]}]}
    problems = check_machines({"r1": router("a", 8000), "r2": router("b", 8100)}, {"r1": "10.0.0.9", "r2": "10.0.0.9"})
    assert len(problems) == 1 and "port 29000 on machine 10.0.0.9 is used twice" in problems[0], problems
    assert "vllm_fleet_router_metrics_port" in problems[0]
    assert check_machines({"r1": router("a", 8000), "r2": router("b", 8100)}, {"r1": "10.0.0.9", "r2": "10.0.0.8"}) == []
