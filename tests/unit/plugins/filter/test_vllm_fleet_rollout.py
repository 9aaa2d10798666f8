"""Rollout filters (plugins/filter/vllm_fleet_rollout.py): order, failed nodes and batches,
revision numbers, status rows, the run report."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
_spec = importlib.util.spec_from_file_location("vllm_fleet_rollout_filter_plugin", ROOT / "plugins" / "filter" / "vllm_fleet_rollout.py")
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)


def test_rollout_reads_plans_from_hostvars_and_skips_hosts_without_one():
    def plan(dep, batch, instance, rank):
        return {"vllm_fleet_plan": {"deployment": dep, "batch": batch, "instance": instance, "node_rank": rank}}
    hostvars = {"w1": plan("a", 0, 0, 1), "h1": plan("a", 0, 0, 0), "h2": plan("a", 1, 1, 0),
                "router": {"vllm_fleet_plan": {"deployment": "a", "batch": None}}, "idle": {}}
    out = filters.rollout(hostvars, ["w1", "h1", "h2", "router", "idle"])
    assert out == {"order": ["h1", "w1", "h2"], "serial": [2, 1]}
    assert filters.rollout({}, []) == {"order": [], "serial": [1]}


def test_failed_nodes_from_recorded_failures_and_departed_hosts():
    hostvars = {"a": {"vllm_fleet_deploy_failure": "Start workers: boom "}, "b": {}, "c": {}}
    assert filters.failed_nodes(hostvars, ["a", "b"], ["a", "b"]) == {"a": "Start workers: boom"}
    assert filters.failed_nodes(hostvars, ["b", "c"], ["b"]) == {
        "c": "not in the play any more (unreachable, or failed earlier)"}
    assert filters.failed_nodes(hostvars, ["b", "c"], ["b", "c"]) == {}


def test_rollout_leaves_out_instances_that_are_all_current():
    def plan(instance, hosts, rank, current):
        return {"vllm_fleet_current": current, "vllm_fleet_plan": {
            "deployment": "d", "batch": 0, "instance": instance, "node_rank": rank, "instance_hosts": hosts}}
    hostvars = {"a": plan(0, ["a", "b"], 0, True), "b": plan(0, ["a", "b"], 1, True),
                "c": plan(1, ["c", "d"], 0, True), "d": plan(1, ["c", "d"], 1, False)}
    assert filters.rollout(hostvars, list(hostvars)) == {"order": ["c", "d"], "serial": [2]}
    assert filters.all_current(hostvars, ["a", "b"]) and not filters.all_current(hostvars, ["c", "d"])
    assert not filters.all_current(hostvars, []) and not filters.all_current(hostvars, ["zz"])


def _read(*numbers, deployment="roll"):
    return {"deployments": {deployment: {"revisions": [{"number": n} for n in numbers]}}}


REVISION_HOSTVARS = {
    "a": {"vllm_fleet_plan": {"deployment": "roll"}, "have": _read(1, 2, 3)},
    "b": {"vllm_fleet_plan": {"deployment": "roll"}, "have": _read(1, 3)},       # unchanged at 2
    "r": {"vllm_fleet_plan": {"deployment": "roll"}, "have": _read(1)},          # the router, never changed
    "x": {"vllm_fleet_plan": {"deployment": "other"}, "have": _read(7, deployment="other")},
    "n": {},
}


def test_next_revision_counts_changes_of_the_whole_deployment():
    hosts = list(REVISION_HOSTVARS)
    assert filters.next_revision(REVISION_HOSTVARS, hosts, "roll", "have") == 4
    assert filters.next_revision(REVISION_HOSTVARS, ["r"], "roll", "have") == 2
    assert filters.next_revision(REVISION_HOSTVARS, hosts, "new", "have") == 1


def test_rollback_target_previous_named_and_missing():
    hosts = list(REVISION_HOSTVARS)
    assert filters.rollback_target(REVISION_HOSTVARS, hosts, "roll", "previous", "have") == {"number": 2, "error": ""}
    assert filters.rollback_target(REVISION_HOSTVARS, hosts, "roll", "1", "have") == {"number": 1, "error": ""}
    missing = filters.rollback_target(REVISION_HOSTVARS, hosts, "roll", "9", "have")
    assert missing["number"] is None and missing["error"] == "deployment roll has no revision 9 (recorded revisions: 1, 2, 3)"
    first = filters.rollback_target(REVISION_HOSTVARS, ["r"], "roll", "previous", "have")
    assert first == {"number": None, "error": "deployment roll has no previous revision (recorded revisions: 1)"}


def test_status_processes_come_from_the_records_and_name_drift_and_orphans():
    proc = {"name": "vllm-fleet-a", "role": "single", "runtime": "docker"}
    recorded = {"a": {"current": 4, "record": {"hash": "h4", "time": "t", "note": "n",
                                                "plan": {"recipe": "org/m", "processes": [proc]}}},
                "old": {"current": 2, "record": {"hash": "o2", "plan": {"recipe": "org/o", "processes": [proc]}}}}
    rows = filters.status_processes(recorded, {"deployment": "a", "hash": "h4", "processes": [proc]})
    assert [(r["deployment"], r["revision"], r["inventory"]) for r in rows] == [("a", 4, "current"), ("old", 2, "orphan")]
    changed = filters.status_processes(recorded, {"deployment": "a", "hash": "h5", "processes": [proc]})
    assert changed[0]["inventory"] == "changed" and changed[0]["recipe"] == "org/m"
    fresh = filters.status_processes({}, {"deployment": "b", "hash": "x", "recipe": "org/b", "processes": [proc]})
    assert [(r["deployment"], r["revision"], r["inventory"]) for r in fresh] == [("b", None, "not deployed")]


def _engine(unit, batch, **facts):
    return {"vllm_fleet_plan": {"deployment": "roll", "instance_name": unit, "batch": batch}, **facts}


def test_rollout_report_floor_and_downtime_from_the_measured_times():
    # i0 canary out 10..40; i1 and i2 in one batch, overlapping 50..80 and 55..90; i3 current
    hostvars = {
        "a": _engine("i0", 0, vllm_fleet_outcome="updated", vllm_fleet_out_at=10.0, vllm_fleet_back_at=40.0),
        "b": _engine("i1", 1, vllm_fleet_outcome="updated", vllm_fleet_out_at="50.0", vllm_fleet_back_at="80.0"),
        "c": _engine("i2", 1, vllm_fleet_outcome="updated", vllm_fleet_out_at=55.0, vllm_fleet_back_at=90.25),
        "d": _engine("i3", 1, vllm_fleet_current=True),
        "r": {"vllm_fleet_plan": {"deployment": "roll", "instance_name": None, "batch": None}},   # the router
        "n": {},
    }
    dep = filters.rollout_report(hostvars, list(hostvars))["roll"]
    assert dep["instances"] == 4 and dep["outcomes"] == {"updated": 3, "unchanged": 1}
    assert dep["serving_before"] == 4 and dep["new"] == 0
    assert dep["floor"] == 2                       # i1 and i2 out at once
    assert dep["downtime"] == {"i0": 30.0, "i1": 30.0, "i2": 35.2}
    assert dep["downtime_median"] == 30.0 and dep["downtime_max"] == 35.2
    # one after the other (an end at the very time of the next start) is one out at a time
    hostvars["c"] = _engine("i2", 1, vllm_fleet_outcome="updated", vllm_fleet_out_at=80.0, vllm_fleet_back_at=85.0)
    assert filters.rollout_report(hostvars, list(hostvars))["roll"]["floor"] == 3


def test_rollout_report_counts_an_instance_by_its_worst_node_and_not_back_as_out_to_the_end():
    hostvars = {
        # a two-node instance: the worker failed, the head was rolled back; back only on the head
        "h": _engine("i0", 0, vllm_fleet_outcome="rolled back", vllm_fleet_out_at=1.0, vllm_fleet_back_at=9.0,
                     vllm_fleet_restore_at=4.0),
        "w": _engine("i0", 0, vllm_fleet_outcome="failed", vllm_fleet_out_at=1.5),
        "s": _engine("i1", 1, vllm_fleet_outcome="not reached"),
        "x": _engine("i2", 0, vllm_fleet_out_at=2.0),                    # left the play (unreachable)
        "f": _engine("i3", 0, vllm_fleet_first_deploy=True, vllm_fleet_outcome="updated",
                     vllm_fleet_out_at=1.0, vllm_fleet_back_at=3.0),     # new: not serving before
    }
    dep = filters.rollout_report(hostvars, list(hostvars), alive=["h", "w", "s", "f"])["roll"]
    assert dep["outcomes"] == {"failed": 2, "not reached": 1, "updated": 1}
    assert dep["new"] == 1 and dep["serving_before"] == 3
    assert dep["downtime"] == {"i0": None, "i2": None}
    assert dep["floor"] == 1 and dep["downtime_median"] is None
    assert dep["restored"] == {}          # i0 failed on its worker, so it is not counted as restored
    hostvars["w"] = _engine("i0", 0, vllm_fleet_outcome="rolled back", vllm_fleet_out_at=1.5, vllm_fleet_back_at=8.0,
                            vllm_fleet_restore_at=3.0)
    dep = filters.rollout_report(hostvars, list(hostvars), alive=["h", "w", "s", "f"])["roll"]
    assert dep["restored"] == {"i0": 6.0} and dep["downtime"]["i0"] == 8.0
    assert filters.rollout_report({}, []) == {}


def test_rollout_report_is_registered():
    assert filters.FilterModule().filters()["vllm_fleet_rollout_report"] is filters.rollout_report


def test_switch_steps_batch_the_changed_replicas_and_take_other_engines_together():
    new = [{"name": f"r{i}", "replica": i, "hash": "new"} for i in range(8)]
    old = {"processes": [{"name": f"r{i}", "hash": "old"} for i in range(8)]}
    # every replica changed: a canary of one, then 25 % (2) at a time, in order
    steps = filters.switch_steps(new, old)
    assert [[p["name"] for p in step] for step in steps] == [["r0"], ["r1", "r2"], ["r3", "r4"], ["r5", "r6"], ["r7"]]
    assert [len(s) for s in filters.switch_steps(new, old, batch=1)] == [1] * 8
    assert [len(s) for s in filters.switch_steps(new, old, batch=[1, "50%"])] == [1, 4, 3]
    # replicas that run as planned are left alone, unless the state read found them stale
    same = {"processes": [dict(p) for p in new[:6]] + old["processes"][6:]}
    assert [[p["name"] for p in s] for s in filters.switch_steps(new, same)] == [["r6"], ["r7"]]
    assert [[p["name"] for p in s] for s in filters.switch_steps(new, same, stale=["r2"])] == [["r2"], ["r6"], ["r7"]]
    # nothing changed (fewer replicas: only the dropped ones stop): one empty step
    assert filters.switch_steps(new[:2], {"processes": new}) == [[]]
    # a first deploy, and hosts without replicas (co-located P/D): every engine at once
    assert filters.switch_steps(new, None) == [new]
    pd = [{"name": "prefill0", "hash": "a"}, {"name": "decode0", "hash": "b"}]
    assert filters.switch_steps(pd, {"processes": []}) == [pd]


def test_retired_are_the_recorded_engines_the_new_plan_no_longer_has():
    def proc(name, phase="engine", port=8000):
        return {"name": name, "phase": phase, "port": port}

    old = {"processes": [proc("m"), proc("m-r1", port=8001), proc("m-router", "router", 9000), proc("m-master", "services")]}
    new = {"processes": [proc("m-r0"), proc("m-r1", port=8001), proc("m-router", "router", 9000)]}
    # one server becoming replicas: the old server goes; replicas kept and non-engines are not retired
    assert filters.retired(old, new) == [proc("m")]
    # fewer replicas
    assert [p["name"] for p in filters.retired(new, {"processes": [proc("m-r0")]})] == ["m-r1"]
    # an old engine whose name the new plan gives a non-engine still leaves as an engine
    assert filters.retired({"processes": [proc("x")]}, {"processes": [proc("x", "router")]}) == [proc("x")]
    # a first deploy (nothing recorded, or an undefined/odd value), and a record without processes
    for previous in (None, "", [], {}, {"processes": None}):
        assert filters.retired(previous, new) == []
    assert filters.retired(old, None) == [proc("m"), proc("m-r1", port=8001)]
    # old records without a phase are not engines
    assert filters.retired({"processes": [{"name": "y"}]}, new) == []
    assert filters.FilterModule().filters()["vllm_fleet_retired"] is filters.retired


def test_drained_are_the_processes_with_a_drain_target():
    procs = [{"name": "a", "drain": {"url": "u"}}, {"name": "b"}, {"name": "c", "drain": None}, {"name": "d", "drain": {}}]
    assert filters.drained(procs) == [procs[0]]
    assert filters.drained([]) == [] and filters.drained(None) == []
    assert filters.FilterModule().filters()["vllm_fleet_drained"] is filters.drained
