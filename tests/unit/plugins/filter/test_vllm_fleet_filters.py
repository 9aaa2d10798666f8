"""Filters: systemd quoting, process state argv, rollout order from hostvars."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
_spec = importlib.util.spec_from_file_location("vllm_fleet_filter_plugin", ROOT / "plugins" / "filter" / "vllm_fleet.py")
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)


def test_systemd_exec_quotes_and_escapes():
    assert filters.systemd_exec(["vllm", "serve", "m", "--x", '{"a": 1}', "50%", "$HOME"]) == \
        'vllm serve m --x "{\\"a\\": 1}" 50%% "$$HOME"'


def test_state_argv_per_runtime():
    assert filters.state_argv({"name": "c", "runtime": "docker"}) == ["docker", "inspect", "-f", "{{.State.Status}}", "c"]
    assert filters.state_argv({"name": "u", "runtime": "uv"}) == ["systemctl", "is-active", "u.service"]
    assert filters.state_argv({"name": "r", "runtime": "service"}) == ["systemctl", "is-active", "r.service"]


def test_rollout_reads_plans_from_hostvars_and_skips_hosts_without_one():
    def plan(dep, batch, instance, rank):
        return {"vllm_fleet_plan": {"deployment": dep, "batch": batch, "instance": instance, "node_rank": rank}}
    hostvars = {"w1": plan("a", 0, 0, 1), "h1": plan("a", 0, 0, 0), "h2": plan("a", 1, 1, 0),
                "router": {"vllm_fleet_plan": {"deployment": "a", "batch": None}}, "idle": {}}
    out = filters.rollout(hostvars, ["w1", "h1", "h2", "router", "idle"])
    assert out == {"order": ["h1", "w1", "h2"], "serial": [2, 1]}
    assert filters.rollout({}, []) == {"order": [], "serial": [1]}


def test_flag_values_both_forms():
    argv = ["vllm", "serve", "m", "--chat-template", "examples/a.jinja", "--x", "1", "--chat-template=/t.jinja"]
    assert filters.flag_values(argv, "--chat-template") == ["examples/a.jinja", "/t.jinja"]
    assert filters.flag_values(argv, "--port") == []


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


def test_pin_requirements_adds_the_default_version_only_where_the_plan_pins_none():
    pins = {"vllm-router": "0.1.17", "mooncake_transfer_engine": "0.3.13.post1"}
    assert filters.pin_requirements(
        ["vllm-router", "Mooncake.Transfer-Engine>=0.3.10", "vllm-router==0.2.0", "other",
         "mooncake-transfer-engine ; sys_platform == 'linux'", "vllm_router[x] >=0.1"], pins) == \
        ["vllm-router==0.1.17", "Mooncake.Transfer-Engine>=0.3.10,==0.3.13.post1", "vllm-router==0.2.0", "other",
         "mooncake-transfer-engine ; sys_platform == 'linux'", "vllm_router[x] >=0.1,==0.1.17"]
    assert filters.pin_requirements(["vllm-router"], {"vllm-router": None}) == ["vllm-router"]
    assert filters.pin_requirements([], pins) == []


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
    assert first["error"] == "deployment roll has no previous revision (recorded revisions: 1)"


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
