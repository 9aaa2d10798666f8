"""vllm_fleet/status.py: status.yml's rows, per-deployment summaries, the processes that fail the
play, the table and the JSON document, from the shapes the play registers (vllm_fleet_process_info
entries, health-loop results with and without ``load``, skipped results)."""

from __future__ import annotations

import json

import pytest

from vllm_fleet import serving, status


def proc(name, phase="engine", unit="i0", replica=None, revision=3, inventory="current", role="single",
         runtime="docker", kind="vllm"):
    return {"deployment": "rreal", "revision": revision, "recipe": "vllm-fleet-test/tiny-llama", "instance_name": unit,
            "inventory": inventory,
            "process": {"name": name, "phase": phase, "role": role, "runtime": runtime, "kind": kind,
                        "replica": replica, "rank": 0 if phase == "engine" else None, "version": "0.32.0",
                        "served_model_name": "tiny" if kind == "vllm" else None}}


RUNNING = {"state": "running", "restarts": 1, "uptime_s": 3725}
LOAD = {"running": 2, "waiting": 1, "kv_cache_pct": 12.5, "generation_tok_s": 40.2, "prompt_tok_s": 80.0,
        "version": "0.32.0", "window_s": 2.0}
SERVING = {"health_seconds": 0.1, "load": LOAD}
DOWN = {"failed": True, "msg": "POST http://10.0.0.1:8001/v1/completions failed (HTTP 500): engine dead"}
SKIPPED = {"skipped": True}


def host_rows(procs, states, healths, host="rreal-a"):
    return status.rows(procs, {"processes": states}, {"results": healths}, host)


def test_a_serving_server_row_carries_its_load_version_uptime_and_restarts():
    [r] = host_rows([proc("vllm-fleet-rreal-r0", replica=0)], [RUNNING], [SERVING])
    assert r["serving"] and r["health"] == "serving" and r["why"] == ""
    assert (r["running"], r["waiting"], r["kv_pct"], r["tok_s"]) == (2, 1, 12.5, 40.2)
    assert (r["version"], r["uptime"], r["uptime_s"], r["restarts"]) == ("0.32.0", "1h02m", 3725, 1)


def test_down_skipped_and_never_deployed_rows():
    rows = host_rows(
        [proc("r1", replica=1), proc("store", phase="services", unit=None, kind="mooncake_store", runtime="service"),
         proc("gone", phase="services", unit=None, kind="mooncake_store", runtime="service"),
         proc("r2", replica=2, revision=None, inventory="not deployed")],
        [RUNNING, RUNNING, {"state": "failed", "restarts": 0, "uptime_s": None},
         {"state": "absent", "restarts": 0, "uptime_s": None}],
        [DOWN, SKIPPED, SKIPPED, SKIPPED])
    down, store, gone, never = rows
    assert not down["serving"] and down["health"] == "down" and "engine dead" in down["why"]
    assert down["running"] == "-" and down["tok_s"] == "-", down        # no load read: dashes, not zeros
    # no HTTP gate: serves when it runs
    assert store["serving"] and store["health"] == "-" and store["why"] == ""
    assert not gone["serving"] and gone["uptime"] == "-"
    assert not never["serving"] and never["rev"] == "-" and never["why"] == "not deployed"
    assert status.not_serving(rows) == [f"rreal-a r1: {down['why']}", "rreal-a gone: failed", "rreal-a r2: not deployed"]


def test_orphans_are_reported_not_counted():
    rows = host_rows([proc("old", inventory="orphan")], [{"state": "stopped", "restarts": 0}], [DOWN])
    assert status.not_serving(rows) == []
    [summary] = status.summary(rows)
    assert summary["orphan"] and summary["line"].startswith("rreal: orphan (no longer in the inventory): 0 of 1")


def test_summary_counts_instances_not_processes():
    """Two replicas on one host, a two-node instance on two hosts, a router: an instance serves
    when every process of it does (one node down takes the whole instance out)."""
    rows = (host_rows([proc("r0", replica=0), proc("r1", replica=1)], [RUNNING, RUNNING], [SERVING, SERVING], "a")
            + host_rows([proc("m-head", unit="i1")], [RUNNING], [SERVING], "b")
            + host_rows([proc("m-worker", unit="i1", role="worker")], [RUNNING], [DOWN], "c")
            + host_rows([proc("router", phase="router", unit=None, kind="router")], [RUNNING],
                        [{"health_seconds": 0.2}], "r"))
    [d] = status.summary(rows)
    assert (d["instances"], d["instances_serving"], d["capacity_pct"]) == (3, 2, 67)
    assert (d["routers"], d["routers_serving"]) == (1, 1)
    assert d["revisions"] == {"3": 5}
    assert (d["running"], d["waiting"], d["generation_tok_s"]) == (6, 3, 120.6)
    assert d["line"] == ("rreal: 2 of 3 instance(s) serving (capacity 67 %), router(s) 1 of 1 serving; rev 3 x5; "
                         "6 running; 3 waiting; 120.6 generated tok/s")


def test_revision_spread_is_shown():
    rows = host_rows([proc("r0", replica=0), proc("r1", replica=1, revision=4)], [RUNNING, RUNNING],
                     [SERVING, SERVING])
    assert "rev 3 x1, rev 4 x1" in status.summary(rows)[0]["line"]


def test_table_has_every_column_in_order_and_the_down_and_deployment_lines():
    rows = host_rows([proc("vllm-fleet-rreal-r0", replica=0), proc("vllm-fleet-rreal-r1", replica=1)],
                     [RUNNING, RUNNING], [SERVING, DOWN])
    text = status.table(rows)
    lines = text.splitlines()
    assert lines[0].split() == [c.upper() for c in status.COLUMNS]
    assert lines[1].split() == ["rreal-a", "rreal", "3", "vllm-fleet-test/tiny-llama", "vllm-fleet-rreal-r0", "single",
                                "docker", "running", "serving", "tiny", "current", "0.32.0", "1h02m", "1", "2", "1",
                                "12.5", "40.2"]
    assert lines[2].split()[8:] == ["down", "tiny", "current", "0.32.0", "1h02m", "1", "-", "-", "-", "-"]
    assert lines[3].startswith("down: rreal-a vllm-fleet-rreal-r1: POST")
    assert lines[4] == ("deployment rreal: 1 of 2 instance(s) serving (capacity 50 %); rev 3 x2; 2 running; 1 waiting; "
                        "40.2 generated tok/s")


def test_document_is_json_and_says_what_fails():
    rows = host_rows([proc("r0", replica=0)], [RUNNING], [DOWN])
    hostvars = {"rreal-a": {"vllm_fleet_gpu": {"health": {"read": True, "gpus": []}}}, "rreal-r": {}}
    doc = json.loads(json.dumps(status.document(rows, hostvars, ["rreal-a", "rreal-r"])))
    assert doc["serving"] is False and doc["not_serving"] == [f"rreal-a r0: {DOWN['msg']}"]
    assert doc["deployments"][0]["instances"] == 1 and doc["processes"][0]["process"] == "r0"
    assert doc["gpu_health"] == {"rreal-a": {"read": True, "gpus": []}}
    ok = status.document(host_rows([proc("r0", replica=0)], [RUNNING], [SERVING]))
    assert ok["serving"] is True and ok["not_serving"] == []


def test_rows_refuse_misaligned_readings():
    with pytest.raises(ValueError, match="rreal-a: 1 processes, 0 states, 1 health results"):
        host_rows([proc("r0")], [], [SERVING])


@pytest.mark.parametrize("seconds,text", [(None, "-"), (0, "0s"), (59, "59s"), (61, "1m01s"), (3600, "1h00m"),
                                          (90000, "1d1h")])
def test_duration(seconds, text):
    assert status.duration(seconds) == text


# vLLM 0.32's exposition: one label set per engine of a data-parallel server
TEXT = """# HELP vllm:num_requests_running Number of requests in model execution batches.
vllm:num_requests_running{engine="0",model_name="tiny"} 1.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0625
vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.125
vllm:generation_tokens_total{engine="0",model_name="tiny"} 2000.0
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 10.0
"""


def test_load_from_two_metrics_reads():
    later = TEXT.replace("} 2000.0", "} 2100.0").replace("} 10.0", "} 30.0")
    assert serving.load(TEXT, later, 2.0) == {"running": 1, "waiting": 0, "kv_cache_pct": 12.5,
                                              "generation_tok_s": 50.0, "prompt_tok_s": 10.0}
    # a restart between the reads (the counter went back), no window, no metrics: unknown, not 0
    restarted = TEXT.replace("} 2000.0", "} 5.0")
    assert serving.load(TEXT, restarted, 2.0)["generation_tok_s"] is None
    assert serving.load(TEXT, TEXT, 0)["generation_tok_s"] is None
    assert serving.load("", "<html>502</html>", 2.0) == {"running": None, "waiting": None, "kv_cache_pct": None,
                                                        "generation_tok_s": None, "prompt_tok_s": None}


def test_version_answer():
    assert serving.version(200, '{"version": "0.32.0"}') == "0.32.0"
    assert serving.version(404, '{"version": "0.32.0"}') is None
    assert serving.version(200, "not json") is None and serving.version(200, "[]") is None


def test_the_playbook_calls_the_filters_as_written_in_status_yml():
    """status.yml: ``procs | vllm_fleet_status_rows(state, health, inventory_hostname)``, then the
    rows through the table, not-serving and document filters, with Jinja's own argument order."""
    import importlib.util
    from pathlib import Path

    import jinja2

    root = Path(__file__).resolve().parents[4]
    spec = importlib.util.spec_from_file_location("vllm_fleet_rollout_filter_plugin_s",
                                                  root / "plugins" / "filter" / "vllm_fleet_rollout.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    env = jinja2.Environment()
    env.filters.update(plugin.FilterModule().filters())
    text = (root / "playbooks" / "status.yml").read_text()
    for expression in ("vllm_fleet_status_procs | vllm_fleet_status_rows(vllm_fleet_status_state, "
                       "vllm_fleet_status_health, inventory_hostname)",
                       "vllm_fleet_status_all | vllm_fleet_status_not_serving",
                       "vllm_fleet_status_all | vllm_fleet_status_document(hostvars, ansible_play_hosts)"):
        assert expression in " ".join(text.split()), expression
    made = env.from_string("{{ vllm_fleet_status_procs | vllm_fleet_status_rows(vllm_fleet_status_state, "
                           "vllm_fleet_status_health, inventory_hostname) | vllm_fleet_status_table }}").render(
        vllm_fleet_status_procs=[proc("r0", replica=0)], vllm_fleet_status_state={"processes": [RUNNING]},
        vllm_fleet_status_health={"results": [SERVING]}, inventory_hostname="rreal-a")
    assert "rreal-a  rreal" in made and "deployment rreal: 1 of 1 instance(s) serving" in made


def test_never_deployed_processes_are_named_as_such_in_the_summary():
    rows = host_rows([proc("r0", replica=0), proc("r1", replica=1, revision=None, inventory="not deployed")],
                     [RUNNING, {"state": "absent", "restarts": 0}], [SERVING, SKIPPED])
    assert "; rev 3 x1, 1 never deployed;" in status.summary(rows)[0]["line"]
