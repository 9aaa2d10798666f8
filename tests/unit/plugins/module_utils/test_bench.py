"""vllm_fleet.bench: the SLO check, the verdicts and regressions, what bench.yml measures and with
which ``vllm bench serve`` arguments, and the report (document, Markdown, PNG plots)."""

from __future__ import annotations

import copy
import json
import math

import pytest

from vllm_fleet import bench

VALID_SLO = {"p99_ttft_ms": 800, "p99_itl_ms": 60, "min_output_tok_s": 50, "max_error_rate": 0}


def result(**over):
    """A result shaped like vLLM 0.32's ``vllm bench serve --save-result`` JSON."""
    doc = {
        "date": "20260101-000000", "backend": "vllm", "model_id": "/m", "tokenizer_id": "/m",
        "num_prompts": 100, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 16,
        "duration": 12.5, "completed": 100, "failed": 0,
        "total_input_tokens": 51200, "total_output_tokens": 12800,
        "request_throughput": 8.0, "request_goodput": None, "output_throughput": 1024.0,
        "total_token_throughput": 5120.0, "max_output_tokens_per_s": 1400.0, "max_concurrent_requests": 16,
        "mean_ttft_ms": 20.1, "median_ttft_ms": 18.0, "std_ttft_ms": 5.0,
        "p50_ttft_ms": 18.0, "p90_ttft_ms": 30.0, "p99_ttft_ms": 35.2,
        "mean_tpot_ms": 8.0, "median_tpot_ms": 7.9, "std_tpot_ms": 1.0,
        "p50_tpot_ms": 7.9, "p90_tpot_ms": 9.5, "p99_tpot_ms": 11.0,
        "mean_itl_ms": 8.0, "median_itl_ms": 7.5, "std_itl_ms": 3.0,
        "p50_itl_ms": 7.5, "p90_itl_ms": 12.0, "p99_itl_ms": 25.0,
        "mean_e2el_ms": 1100.0, "median_e2el_ms": 1050.0, "std_e2el_ms": 100.0,
        "p50_e2el_ms": 1050.0, "p90_e2el_ms": 1250.0, "p99_e2el_ms": 1400.0,
        "input_lens": [512, 512, 512], "output_lens": [128, 128, 128], "ttfts": [0.018, 0.02, 0.035],
        "itls": [[0.007, 0.008]], "generated_texts": ["a", "b", "c"], "errors": ["", "", ""],
    }
    doc.update(over)
    return doc


def by_metric(verdicts):
    return {v["metric"]: v for v in verdicts}


def value_after(args, flag):
    assert args.count(flag) == 1, f"{flag} once in {args}"
    return args[args.index(flag) + 1]


# ---- slo_problems -----------------------------------------------------------------------------

def test_slo_valid_has_no_problems():
    assert bench.slo_problems(VALID_SLO) == []
    assert bench.slo_problems({}) == []
    assert bench.slo_problems({"mean_tpot_ms": 0, "median_e2el_ms": 2.5, "p99.9_itl_ms": 100, "p5_ttft_ms": 1,
                               "min_total_tok_s": 10, "min_requests_s": 0.5, "max_error_rate": 1}) == []


@pytest.mark.parametrize("key,value,why", [
    ("p99_latency_ms", 800, "unknown SLO key"),
    ("ttft", 800, "unknown SLO key"),
    ("p99_ttft", 800, "unknown SLO key"),
    ("p99_ttft_ms", -1, "must be a number >= 0"),
    ("p99_ttft_ms", True, "must be a number >= 0"),
    ("min_output_tok_s", False, "must be a number >= 0"),
    ("p99_ttft_ms", "800", "must be a number >= 0"),
    ("p99_ttft_ms", None, "must be a number >= 0"),
    ("p99_ttft_ms", float("nan"), "must be a number >= 0"),
    ("min_output_tok_s", float("inf"), "must be a number >= 0"),
    ("max_error_rate", 1.5, "fraction"),
    ("max_error_rate", -0.1, "must be a number >= 0"),
    ("p100_ttft_ms", 800, ""),
    ("p0_ttft_ms", 800, ""),
])
def test_slo_one_problem_naming_the_key(key, value, why):
    slo = {**VALID_SLO, key: value}
    problems = bench.slo_problems(slo)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"vllm_fleet_slo.{key}:")
    assert why in problems[0]


def test_slo_problem_per_bad_key_and_where():
    problems = bench.slo_problems({"x": 1, "p99_ttft_ms": -5, "p50_itl_ms": 3}, where="deployments.d.slo")
    assert len(problems) == 2
    assert problems[0].startswith("deployments.d.slo.x:")
    assert problems[1].startswith("deployments.d.slo.p99_ttft_ms:") and "-5" in problems[1]


@pytest.mark.parametrize("slo", [None, [], "p99_ttft_ms: 800", 800, [("p99_ttft_ms", 800)]])
def test_slo_not_a_mapping(slo):
    problems = bench.slo_problems(slo)
    assert len(problems) == 1
    assert problems[0].startswith("vllm_fleet_slo:") and "mapping" in problems[0]


# ---- percentiles ------------------------------------------------------------------------------

def test_percentiles_default():
    assert bench.percentiles() == ["50", "90", "99"]
    assert bench.percentiles(None) == ["50", "90", "99"]
    assert bench.percentiles({}) == ["50", "90", "99"]
    # floors, ceilings, mean / median add none
    assert bench.percentiles({"min_output_tok_s": 5, "max_error_rate": 0, "mean_ttft_ms": 3,
                              "median_itl_ms": 3}) == ["50", "90", "99"]


def test_percentiles_from_slo_sorted_numerically():
    assert bench.percentiles({"p95_ttft_ms": 1, "p99.9_itl_ms": 2}) == ["50", "90", "95", "99", "99.9"]
    # "9" sorts before "50" numerically (not as text), a repeated one appears once
    assert bench.percentiles({"p9_ttft_ms": 1, "p99_itl_ms": 1, "p50_e2el_ms": 1}) == ["9", "50", "90", "99"]


# ---- evaluate -----------------------------------------------------------------------------------

def test_evaluate_met_slo():
    verdicts = bench.evaluate(result(), VALID_SLO)
    assert [v["metric"] for v in verdicts] == sorted(VALID_SLO)
    assert all(v["ok"] for v in verdicts), verdicts
    v = by_metric(verdicts)
    assert v["p99_ttft_ms"] == {"metric": "p99_ttft_ms", "op": "<=", "threshold": 800.0, "measured": 35.2, "ok": True}
    assert v["p99_itl_ms"]["measured"] == 25.0 and v["p99_itl_ms"]["op"] == "<="
    assert v["min_output_tok_s"] == {"metric": "min_output_tok_s", "op": ">=", "threshold": 50.0,
                                     "measured": 1024.0, "ok": True}
    assert v["max_error_rate"]["measured"] == 0.0 and v["max_error_rate"]["op"] == "<="


def test_evaluate_latency_miss():
    (v,) = bench.evaluate(result(), {"p99_ttft_ms": 1})
    assert v == {"metric": "p99_ttft_ms", "op": "<=", "threshold": 1.0, "measured": 35.2, "ok": False}


def test_evaluate_boundaries_are_met():
    v = by_metric(bench.evaluate(result(), {"p99_ttft_ms": 35.2, "min_output_tok_s": 1024}))
    assert v["p99_ttft_ms"]["ok"] and v["min_output_tok_s"]["ok"]


def test_evaluate_floors_use_the_run_figures():
    v = by_metric(bench.evaluate(result(), {"min_output_tok_s": 2000, "min_total_tok_s": 5000,
                                            "min_requests_s": 9}))
    assert v["min_output_tok_s"] == {"metric": "min_output_tok_s", "op": ">=", "threshold": 2000.0,
                                     "measured": 1024.0, "ok": False}
    assert v["min_total_tok_s"]["measured"] == 5120.0 and v["min_total_tok_s"]["ok"] is True
    assert v["min_requests_s"]["measured"] == 8.0 and v["min_requests_s"]["ok"] is False
    assert all(x["op"] == ">=" for x in v.values())


def test_evaluate_error_rate():
    r = result(completed=90, failed=10)
    (v,) = bench.evaluate(r, {"max_error_rate": 0.05})
    assert v["measured"] == pytest.approx(0.1) and v["ok"] is False and v["op"] == "<="
    assert bench.evaluate(r, {"max_error_rate": 0.1})[0]["ok"] is True
    assert bench.evaluate(r, {"max_error_rate": 0})[0]["ok"] is False
    # nothing completed and nothing failed: every request is counted as lost
    (v,) = bench.evaluate(result(completed=0, failed=0), {"max_error_rate": 0.5})
    assert v["measured"] == 1.0 and v["ok"] is False


def test_evaluate_missing_figure_is_a_miss():
    v = by_metric(bench.evaluate(result(), {"p95_ttft_ms": 100000, "p99_ttft_ms": 800}))
    assert v["p95_ttft_ms"] == {"metric": "p95_ttft_ms", "op": "<=", "threshold": 100000.0, "measured": None,
                                "ok": False}
    assert v["p99_ttft_ms"]["ok"] is True
    r = result()
    del r["output_throughput"]
    (v,) = bench.evaluate(r, {"min_output_tok_s": 0})
    assert v["measured"] is None and v["ok"] is False
    # a non-number (or a bool) is not a figure either
    (v,) = bench.evaluate(result(p99_ttft_ms="fast"), {"p99_ttft_ms": 800})
    assert v["measured"] is None and v["ok"] is False
    (v,) = bench.evaluate(result(p99_ttft_ms=True), {"p99_ttft_ms": 800})
    assert v["measured"] is None and v["ok"] is False


# ---- regressions ----------------------------------------------------------------------------------

def test_regression_latency_up():
    (c,) = bench.regressions(result(p99_ttft_ms=120.0), result(p99_ttft_ms=100.0), 10, ["p99_ttft_ms"])
    assert c["metric"] == "p99_ttft_ms" and c["ok"] is False
    assert c["change_pct"] == pytest.approx(20.0)
    assert c["previous"] == 100.0 and c["measured"] == 120.0 and c["max_regression_pct"] == 10.0
    # the same growth within a larger allowance, and a latency that fell, pass
    assert bench.regressions(result(p99_ttft_ms=120.0), result(p99_ttft_ms=100.0), 25, ["p99_ttft_ms"])[0]["ok"]
    (c,) = bench.regressions(result(p99_ttft_ms=50.0), result(p99_ttft_ms=100.0), 0, ["p99_ttft_ms"])
    assert c["ok"] is True and c["change_pct"] == pytest.approx(-50.0)


def test_regression_throughput():
    (c,) = bench.regressions(result(output_throughput=950.0), result(output_throughput=1000.0), 10,
                             ["output_throughput"])
    assert c["ok"] is True and c["change_pct"] == pytest.approx(-5.0)
    (c,) = bench.regressions(result(output_throughput=800.0), result(output_throughput=1000.0), 10,
                             ["output_throughput"])
    assert c["ok"] is False and c["change_pct"] == pytest.approx(-20.0)
    (c,) = bench.regressions(result(output_throughput=2000.0), result(output_throughput=1000.0), 0,
                             ["output_throughput"])
    assert c["ok"] is True and c["change_pct"] == pytest.approx(100.0)
    # a floor key compares the figure it names, higher being better
    (c,) = bench.regressions(result(output_throughput=800.0), result(output_throughput=1000.0), 10,
                             ["min_output_tok_s"])
    assert c["metric"] == "min_output_tok_s" and c["ok"] is False and c["previous"] == 1000.0


def test_regression_exactly_at_the_allowance_is_ok():
    (c,) = bench.regressions(result(p99_itl_ms=11.0), result(p99_itl_ms=10.0), 10, ["p99_itl_ms"])
    assert c["change_pct"] == pytest.approx(10.0) and c["ok"] is True


def test_regression_leaves_out_missing_and_error_rate():
    now, before = result(p95_ttft_ms=10.0), result(failed=50)
    out = bench.regressions(now, before, 10, ["p95_ttft_ms", "p99.9_itl_ms", "max_error_rate", "p99_ttft_ms"])
    assert [c["metric"] for c in out] == ["p99_ttft_ms"]
    # only the previous side has it
    assert bench.regressions(result(), result(p95_ttft_ms=10.0), 10, ["p95_ttft_ms"]) == []
    # a previous figure of 0 (or below) gives no percentage
    assert bench.regressions(result(), result(output_throughput=0), 10, ["output_throughput"]) == []
    # the error rate is the SLO's business only, even when it got worse
    assert bench.regressions(result(completed=50, failed=50), result(), 0, ["max_error_rate"]) == []


# ---- verdict_line -------------------------------------------------------------------------------------

def test_verdict_line_slo():
    (v,) = bench.evaluate(result(), {"p99_ttft_ms": 1})
    line = bench.verdict_line(v)
    assert line.startswith("p99_ttft_ms:")
    assert "measured 35.2" in line and "<= 1" in line
    (v,) = bench.evaluate(result(), {"min_output_tok_s": 2000})
    line = bench.verdict_line(v)
    assert "min_output_tok_s" in line and "measured 1024" in line and ">= 2000" in line
    (v,) = bench.evaluate(result(), {"p95_ttft_ms": 5})
    assert "not reported" in bench.verdict_line(v)


def test_verdict_line_regression():
    (c,) = bench.regressions(result(p99_ttft_ms=120.0), result(p99_ttft_ms=100.0), 10, ["p99_ttft_ms"])
    line = bench.verdict_line(c)
    assert line.startswith("p99_ttft_ms:")
    assert "120 vs 100 before" in line and "+20.0 %" in line and "at most 10 %" in line
    (c,) = bench.regressions(result(output_throughput=800.0), result(output_throughput=1000.0), 10,
                             ["output_throughput"])
    assert "-20.0 %" in bench.verdict_line(c)


# ---- model_of ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv,model", [
    (["vllm", "serve", "/models/x", "--port", "8000"], "/models/x"),
    (["vllm", "serve", "--model", "org/m"], "org/m"),
    (["vllm", "serve", "--port", "8000", "--model=org/m"], "org/m"),
    (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "org/m"], "org/m"),
    (("/opt/venv/bin/vllm", "serve", "org/m"), "org/m"),
    (["vllm", "serve", "--port", "8000"], None),
    (["vllm", "serve"], None),
    (["vllm", "serve", "--model"], None),
    ([], None),
])
def test_model_of(argv, model):
    assert bench.model_of(argv) == model


# ---- targets ------------------------------------------------------------------------------------------

def vproc(name, port, role="server", argv=None, **kw):
    return {"name": name, "kind": "vllm", "role": role, "serves_http": True, "port": port,
            "probe_host": "127.0.0.1", "argv": list(argv or ["vllm", "serve", "/m"]),
            "served_model_name": "tiny", "runtime": "docker", "image": "img", **kw}


def router(name="vllm-fleet-d-router", port=8000, bind=None):
    return {"name": name, "kind": "router", "port": port, "bind": bind,
            "argv": ["vllm-router", "--port", str(port)], "runtime": "docker", "image": "router-img"}


def fleet(router_bind=None, router_address="10.0.0.2", roles=("server", "server")):
    return {
        "a": {"deployment": "d", "address": "10.0.0.1",
              "processes": [vproc("vllm-fleet-d-r0", 8000, roles[0]), vproc("vllm-fleet-d-r1", 8001, roles[1])]},
        "r": {"deployment": "d", "address": router_address, "processes": [router(bind=router_bind)]},
    }


def test_targets_all():
    plans = fleet()
    out = bench.targets(plans, "all")
    assert out["skipped"] == []
    assert list(out["hosts"]) == ["a"]
    r0, r1, rt = out["hosts"]["a"]
    assert r0 == {"name": "vllm-fleet-d-r0", "kind": "instance", "deployment": "d", "host": "a",
                  "url": "http://127.0.0.1:8000", "runner": plans["a"]["processes"][0]}
    assert r1["name"] == "vllm-fleet-d-r1" and r1["url"] == "http://127.0.0.1:8001"
    assert r1["runner"] is plans["a"]["processes"][1]
    assert rt == {"name": "vllm-fleet-d-router", "kind": "router", "deployment": "d", "host": "r",
                  "url": "http://10.0.0.2:8000", "runner": plans["a"]["processes"][0]}
    assert bench.targets(plans) == out   # "all" is the default


def test_targets_instances_and_router():
    plans = fleet()
    inst = bench.targets(plans, "instances")
    assert [t["name"] for t in inst["hosts"]["a"]] == ["vllm-fleet-d-r0", "vllm-fleet-d-r1"]
    assert all(t["kind"] == "instance" for ts in inst["hosts"].values() for t in ts)
    rout = bench.targets(plans, "router")
    assert list(rout["hosts"]) == ["a"]
    (t,) = rout["hosts"]["a"]
    assert t["kind"] == "router" and t["url"] == "http://10.0.0.2:8000" and t["host"] == "r"
    assert t["runner"] is plans["a"]["processes"][0]


def test_targets_router_on_loopback_elsewhere_is_skipped():
    for bind in ("127.0.0.1", "localhost", "::1"):
        out = bench.targets(fleet(router_bind=bind), "all")
        assert [t["kind"] for t in out["hosts"]["a"]] == ["instance", "instance"]
        (why,) = out["skipped"]
        assert why.startswith("r vllm-fleet-d-router:") and bind in why and " a " in f" {why} "
        assert bench.targets(fleet(router_bind=bind), "router")["hosts"] == {}


def test_targets_router_bound_to_an_address_elsewhere():
    out = bench.targets(fleet(router_bind="10.9.9.9"), "router")
    assert out["hosts"]["a"][0]["url"] == "http://10.9.9.9:8000"
    out = bench.targets(fleet(router_bind="0.0.0.0"), "router")
    assert out["hosts"]["a"][0]["url"] == "http://10.0.0.2:8000"


def test_targets_router_on_the_runner_host():
    for bind in (None, "0.0.0.0", "::", "127.0.0.1"):
        plans = {"a": {"deployment": "d", "address": "10.0.0.1",
                       "processes": [vproc("vllm-fleet-d-r0", 8000), router(port=9000, bind=bind)]}}
        out = bench.targets(plans, "all")
        assert out["skipped"] == []
        inst, rt = out["hosts"]["a"]
        assert inst["kind"] == "instance"
        assert rt["kind"] == "router" and rt["host"] == "a" and rt["url"] == "http://127.0.0.1:9000"
    plans["a"]["processes"][1]["bind"] = "10.0.0.1"
    assert bench.targets(plans, "router")["hosts"]["a"][0]["url"] == "http://10.0.0.1:9000"


def test_targets_pd_servers_only_through_the_router():
    plans = fleet(roles=("prefill", "decode"))
    out = bench.targets(plans, "all")
    (rt,) = out["hosts"]["a"]
    assert rt["kind"] == "router" and rt["url"] == "http://10.0.0.2:8000"
    assert rt["runner"] is plans["a"]["processes"][0]   # the prefill server's image runs the client
    assert len(out["skipped"]) == 2
    assert "vllm-fleet-d-r0" in out["skipped"][0] and "prefill" in out["skipped"][0]
    assert "vllm-fleet-d-r1" in out["skipped"][1] and "decode" in out["skipped"][1]
    inst = bench.targets(plans, "instances")
    assert inst["hosts"] == {} and len(inst["skipped"]) == 2


def test_targets_router_without_a_server():
    plans = {"r": {"deployment": "d", "address": "10.0.0.2", "processes": [router()]}}
    out = bench.targets(plans, "all")
    assert out["hosts"] == {}
    (why,) = out["skipped"]
    assert "vllm-fleet-d-router" in why and "no vLLM server of d" in why
    # a server of another deployment does not run this deployment's client
    plans["a"] = {"deployment": "e", "address": "10.0.0.1", "processes": [vproc("vllm-fleet-e", 8000)]}
    out = bench.targets(plans, "router")
    assert out["hosts"] == {} and "no vLLM server of d" in out["skipped"][0]


def test_targets_ipv6():
    out = bench.targets(fleet(router_address="fd00::2"), "router")
    assert out["hosts"]["a"][0]["url"] == "http://[fd00::2]:8000"
    out = bench.targets(fleet(router_address="[fd00::2]"), "router")
    assert out["hosts"]["a"][0]["url"] == "http://[fd00::2]:8000"
    plans = {"a": {"deployment": "d", "address": "fd00::1",
                   "processes": [vproc("vllm-fleet-d", 8000, probe_host="::1")]}}
    assert bench.targets(plans, "instances")["hosts"]["a"][0]["url"] == "http://[::1]:8000"


def test_targets_leaves_out_what_does_not_serve():
    plans = {"a": {"deployment": "d", "address": "10.0.0.1", "processes": [
        vproc("vllm-fleet-d-headless", 8000, serves_http=False),
        vproc("vllm-fleet-d-noport", None),
        {"name": "vllm-fleet-d-lmcache", "kind": "cache", "port": 65432},
        vproc("vllm-fleet-d", 8001, probe_host=None),
    ]}, "empty": None}
    out = bench.targets(plans, "all")
    assert [t["name"] for t in out["hosts"]["a"]] == ["vllm-fleet-d"]
    assert out["hosts"]["a"][0]["url"] == "http://127.0.0.1:8001"   # no probe_host: loopback
    assert out["skipped"] == []


def test_targets_runner_is_the_first_host_in_order():
    plans = {
        "b": {"deployment": "d", "address": "10.0.0.2", "processes": [vproc("vllm-fleet-d-b", 8000)]},
        "a": {"deployment": "d", "address": "10.0.0.1", "processes": [vproc("vllm-fleet-d-a", 8000)]},
        "c": {"deployment": "d", "address": "10.0.0.3", "processes": [router()]},
    }
    out = bench.targets(plans, "all")
    assert list(out["hosts"]) == ["a", "b"]
    assert out["hosts"]["a"][-1]["kind"] == "router" and out["hosts"]["a"][-1]["runner"]["name"] == "vllm-fleet-d-a"
    assert [t["kind"] for t in out["hosts"]["b"]] == ["instance"]


def test_fleet_targets_and_canary_targets():
    plans = fleet()
    hostvars = {"a": {"vllm_fleet_plan": plans["a"]}, "r": {"vllm_fleet_plan": plans["r"]},
                "x": {"other": 1}}
    assert bench.fleet_targets(hostvars, ["a", "r", "x", "missing"]) == bench.targets(plans, "all")
    only_a = bench.fleet_targets(hostvars, ["a"], "all")
    assert [t["kind"] for t in only_a["hosts"]["a"]] == ["instance", "instance"]
    procs = plans["a"]["processes"] + [router(), vproc("h", 8009, serves_http=False)]
    canary = bench.canary_targets(plans["a"], procs)
    assert [(t["name"], t["url"], t["kind"], t["deployment"]) for t in canary] == [
        ("vllm-fleet-d-r0", "http://127.0.0.1:8000", "instance", "d"),
        ("vllm-fleet-d-r1", "http://127.0.0.1:8001", "instance", "d")]
    assert canary[0]["runner"] is procs[0]


# ---- bench_args -----------------------------------------------------------------------------------------

SETTINGS = {"prompts": 7, "input_len": 64, "output_len": 16, "request_rate": 2, "max_concurrency": 4}


def instance_target(**runner):
    return bench.targets({"a": {"deployment": "d", "address": "10.0.0.1",
                                "processes": [vproc("vllm-fleet-d", 8000, **runner)]}}, "instances")["hosts"]["a"][0]


def test_bench_args():
    t = instance_target()
    args = bench.bench_args(t, SETTINGS, "/tmp/out", {"p95_ttft_ms": 100, "p99.9_itl_ms": 50})
    assert args[:2] == ["bench", "serve"]
    assert value_after(args, "--base-url") == "http://127.0.0.1:8000"
    assert value_after(args, "--model") == "/m"
    assert value_after(args, "--served-model-name") == "tiny"
    assert value_after(args, "--dataset-name") == "random"
    assert "--ignore-eos" in args
    assert value_after(args, "--num-prompts") == "7"
    assert value_after(args, "--random-input-len") == "64"
    assert value_after(args, "--random-output-len") == "16"
    assert value_after(args, "--request-rate") == "2"
    assert value_after(args, "--max-concurrency") == "4"
    assert value_after(args, "--metric-percentiles") == "50,90,95,99,99.9"
    assert value_after(args, "--percentile-metrics") == "ttft,tpot,itl,e2el"
    assert "--save-result" in args
    assert value_after(args, "--result-dir") == "/tmp/out"
    assert value_after(args, "--result-filename") == "result.json"
    assert "--trust-remote-code" not in args
    meta = args[args.index("--metadata") + 1:args.index("--metadata") + 4]
    assert meta == ["deployment=d", "target=vllm-fleet-d", "kind=instance"]
    assert all(isinstance(a, str) for a in args)


def test_bench_args_defaults_and_unbounded_concurrency():
    t = instance_target()
    args = bench.bench_args(t, {"prompts": None, "max_concurrency": 0}, "/r")
    assert "--max-concurrency" not in args
    assert value_after(args, "--num-prompts") == "100"
    assert value_after(args, "--random-input-len") == "512"
    assert value_after(args, "--request-rate") == "inf"
    assert value_after(args, "--metric-percentiles") == "50,90,99"
    args = bench.bench_args(t, {}, "/r")
    assert value_after(args, "--max-concurrency") == "16"


def test_bench_args_model_and_flags_from_the_runner():
    t = instance_target(argv=["vllm", "serve", "--model", "org/m", "--trust-remote-code"], served_model_name=None)
    args = bench.bench_args(t, SETTINGS, "/r")
    assert value_after(args, "--model") == "org/m"
    assert "--trust-remote-code" in args
    assert "--served-model-name" not in args
    t = instance_target(argv=["vllm", "serve", "--port", "8000"])
    assert "--model" not in bench.bench_args(t, SETTINGS, "/r")


def test_bench_args_router_uses_its_runner():
    (rt,) = bench.targets(fleet(), "router")["hosts"]["a"]
    args = bench.bench_args(rt, SETTINGS, "/r")
    assert value_after(args, "--base-url") == "http://10.0.0.2:8000"
    assert value_after(args, "--model") == "/m" and value_after(args, "--served-model-name") == "tiny"
    assert "kind=router" in args and "target=vllm-fleet-d-router" in args


def test_bench_args_carry_no_secret():
    secret = "sk-SECRET-123"
    t = instance_target(argv=["vllm", "serve", "/m", "--api-key", secret], secret_env=["VLLM_API_KEY"],
                        env={"VLLM_API_KEY": secret})
    settings = {**SETTINGS, "api_key": secret, "openai_api_key": secret, "timeout": 5}
    args = bench.bench_args(t, settings, "/r", {"p99_ttft_ms": 1})
    assert not any(secret in a for a in args)
    assert not any("api" in a.lower() for a in args), args


# ---- settings_of ----------------------------------------------------------------------------------------

def test_settings_of():
    run = {"bench_prompts": 10, "bench_input_len": None, "bench_max_concurrency": 0, "bench_timeout": 60,
           "bench_request_rate": "5", "prompts": 999, "other": 1}
    assert bench.settings_of(run) == {"prompts": 10, "input_len": 512, "output_len": 128, "request_rate": "5",
                                      "max_concurrency": 0, "timeout": 60}


def test_settings_of_defaults_are_a_copy():
    out = bench.settings_of({})
    assert out == {"prompts": 100, "input_len": 512, "output_len": 128, "request_rate": "inf",
                   "max_concurrency": 16, "timeout": 900}
    out["prompts"] = 1
    assert bench.settings_of({})["prompts"] == 100


# ---- parse_result ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["", "not json", "{\"completed\": 1", "[1, 2]", "{}", "{\"completed\": 3}",
                                  "{\"duration\": 1.0}", "null"])
def test_parse_result_rejects(text):
    with pytest.raises(ValueError) as err:
        bench.parse_result(text, "hostA: vllm-fleet-d")
    assert str(err.value).startswith("hostA: vllm-fleet-d:")


def test_parse_result_accepts_a_result():
    r = result()
    assert bench.parse_result(json.dumps(r), "x") == r


# ---- report ---------------------------------------------------------------------------------------------

def three(r0=None, r1=None, rt=None):
    return [
        {"target": "vllm-fleet-d-router", "kind": "router", "host": "r",
         "result": rt or result(output_throughput=1500.0, p99_ttft_ms=60.0)},
        {"target": "vllm-fleet-d-r1", "kind": "instance", "host": "a",
         "result": r1 or result(output_throughput=900.0, request_throughput=7.0, p99_ttft_ms=50.0, completed=98,
                                failed=2)},
        {"target": "vllm-fleet-d-r0", "kind": "instance", "host": "a",
         "result": r0 or result(output_throughput=1000.0, request_throughput=8.0, p99_ttft_ms=35.2)},
    ]


REPORT_SETTINGS = {"prompts": 100, "input_len": 512, "output_len": 128, "request_rate": "inf",
                   "max_concurrency": 16, "timeout": 900}


def test_report_rows_and_fleet():
    results = three()
    snapshot = copy.deepcopy(results)
    doc = bench.report("d", results, REPORT_SETTINGS, revision=3, when="2026-01-01 00:00:00 UTC")
    assert results == snapshot   # the inputs are left alone
    assert [r["target"] for r in doc["rows"]] == ["vllm-fleet-d-r0", "vllm-fleet-d-r1", "vllm-fleet-d-router",
                                                 "fleet"]
    assert [r["kind"] for r in doc["rows"]] == ["instance", "instance", "router", "fleet"]
    assert [r["host"] for r in doc["rows"]] == ["a", "a", "r", None]
    r0, r1, rt, fl = doc["rows"]
    assert r0["output_throughput"] == 1000.0 and r0["p99_ttft_ms"] == 35.2 and r0["error_rate"] == 0.0
    assert r1["error_rate"] == pytest.approx(0.02)
    # a row keeps the figures, not the per-request lists nor the std
    assert "ttfts" not in r0 and "std_ttft_ms" not in r0 and "generated_texts" not in r0
    assert r0["mean_e2el_ms"] == 1100.0 and r0["duration"] == 12.5
    assert fl["output_throughput"] == pytest.approx(1900.0)     # instances summed (not the router)
    assert fl["request_throughput"] == pytest.approx(15.0)
    assert fl["p99_ttft_ms"] == 50.0                            # the worst instance
    assert fl["completed"] == 198 and fl["failed"] == 2 and fl["error_rate"] == pytest.approx(2 / 200)
    assert doc["deployment"] == "d" and doc["revision"] == 3 and doc["when"] == "2026-01-01 00:00:00 UTC"
    assert doc["settings"] == {k: REPORT_SETTINGS[k] for k in bench.SETTINGS_KEYS}
    assert "timeout" not in doc["settings"]
    assert doc["previous"] is None and doc["slo"] == {}
    assert "slo_ok" not in doc and not any("slo" in r for r in doc["rows"])
    json.dumps(doc)   # report.json


def test_report_without_instances_has_no_fleet_row():
    doc = bench.report("d", three()[:1], REPORT_SETTINGS)
    assert [r["target"] for r in doc["rows"]] == ["vllm-fleet-d-router"]


def test_report_slo_verdicts():
    doc = bench.report("d", three(), REPORT_SETTINGS, slo={"p99_ttft_ms": 40, "max_error_rate": 0.05})
    assert doc["slo_ok"] is False
    assert doc["slo"] == {"p99_ttft_ms": 40, "max_error_rate": 0.05}
    rows = {r["target"]: r for r in doc["rows"]}
    assert "slo" not in rows["fleet"]
    assert all(v["ok"] for v in rows["vllm-fleet-d-r0"]["slo"])
    r1 = by_metric(rows["vllm-fleet-d-r1"]["slo"])
    assert r1["p99_ttft_ms"]["ok"] is False and r1["p99_ttft_ms"]["measured"] == 50.0
    assert r1["max_error_rate"]["ok"] is True and r1["max_error_rate"]["measured"] == pytest.approx(0.02)
    assert by_metric(rows["vllm-fleet-d-router"]["slo"])["p99_ttft_ms"]["ok"] is False
    met = bench.report("d", three(), REPORT_SETTINGS, slo={"p99_ttft_ms": 100})
    assert met["slo_ok"] is True


def test_report_compared_with_previous():
    old = bench.report("d", three()[1:], REPORT_SETTINGS, revision=2, when="earlier")
    old["dir"] = "/reports/d/20260101T000000Z"
    now = three(r0=result(output_throughput=800.0, request_throughput=8.0, p99_ttft_ms=35.2))
    doc = bench.report("d", now, REPORT_SETTINGS, previous=old, max_regression_pct=10, revision=3)
    assert doc["previous"] == {"when": "earlier", "revision": 2, "dir": "/reports/d/20260101T000000Z"}
    rows = {r["target"]: r for r in doc["rows"]}
    assert "compared" not in rows["vllm-fleet-d-router"]   # not in the previous report
    c = by_metric(rows["vllm-fleet-d-r0"]["compared"])
    assert c["output_throughput"]["change_pct"] == pytest.approx(-20.0) and c["output_throughput"]["ok"] is False
    assert c["p99_ttft_ms"]["change_pct"] == pytest.approx(0.0) and c["p99_ttft_ms"]["ok"] is True
    assert "max_error_rate" not in c and "p99_tpot_ms" in c and "request_throughput" in c
    assert all(x["ok"] for x in rows["vllm-fleet-d-r1"]["compared"])
    f = by_metric(rows["fleet"]["compared"])
    assert f["output_throughput"]["previous"] == pytest.approx(1900.0)
    assert f["output_throughput"]["measured"] == pytest.approx(1700.0)


# ---- previous_report ------------------------------------------------------------------------------------

def write_report(base, name, settings, **extra):
    folder = base / "d" / name
    folder.mkdir(parents=True)
    doc = {"deployment": "d", "settings": {k: settings.get(k) for k in bench.SETTINGS_KEYS}, "rows": [],
           "marker": name, **extra}
    (folder / "report.json").write_text(json.dumps(doc))
    return folder


def test_previous_report(tmp_path):
    s1 = dict(REPORT_SETTINGS)
    s2 = {**REPORT_SETTINGS, "prompts": 10}
    first = write_report(tmp_path, "20260101T000000Z", s1)
    second = write_report(tmp_path, "20260102T000000Z", s2)
    got = bench.previous_report(str(tmp_path), "d", s1)
    assert got["marker"] == "20260101T000000Z" and got["dir"] == str(first)
    got = bench.previous_report(str(tmp_path), "d", s2)
    assert got["marker"] == "20260102T000000Z" and got["dir"] == str(second)
    third = write_report(tmp_path, "20260103T000000Z", s1)
    assert bench.previous_report(str(tmp_path), "d", s1)["dir"] == str(third)
    # before: that run and newer ones are left out
    assert bench.previous_report(str(tmp_path), "d", s1, before="20260103T000000Z")["dir"] == str(first)
    assert bench.previous_report(str(tmp_path), "d", s1, before="20260101T000000Z") is None
    # other settings: no comparable report
    assert bench.previous_report(str(tmp_path), "d", {**s1, "output_len": 64}) is None
    # the settings compare as text (an int from one run, a string from another)
    assert bench.previous_report(str(tmp_path), "d", {**s1, "max_concurrency": "16"})["dir"] == str(third)


def test_previous_report_skips_broken_and_missing(tmp_path):
    good = write_report(tmp_path, "20260101T000000Z", REPORT_SETTINGS)
    broken = tmp_path / "d" / "20260105T000000Z"
    broken.mkdir()
    (broken / "report.json").write_text("{not json")
    (tmp_path / "d" / "20260104T000000Z").mkdir()   # no report.json (a run cut short)
    listed = tmp_path / "d" / "20260103T000000Z"
    listed.mkdir()
    (listed / "report.json").write_text("[]")       # JSON, not a report
    assert bench.previous_report(str(tmp_path), "d", REPORT_SETTINGS)["dir"] == str(good)
    assert bench.previous_report(str(tmp_path), "other", REPORT_SETTINGS) is None
    assert bench.previous_report(str(tmp_path / "nowhere"), "d", REPORT_SETTINGS) is None


# ---- markdown --------------------------------------------------------------------------------------------

def test_markdown_full():
    old = bench.report("d", three(), REPORT_SETTINGS, when="earlier", revision=2)
    old["dir"] = "/x"
    now = three(r0=result(output_throughput=800.0, p99_ttft_ms=20.0))
    doc = bench.report("d", now, REPORT_SETTINGS, slo={"p99_ttft_ms": 40}, previous=old, max_regression_pct=10,
                       revision=3, when="2026-01-02 00:00:00 UTC")
    md = bench.markdown(doc, ["throughput.png", "latency.png"])
    assert md.startswith("# Benchmark of d\n")
    assert "2026-01-02 00:00:00 UTC; revision 3" in md
    assert "| target | kind | completed | failed | output tok/s |" in md
    for name in ("vllm-fleet-d-r0", "vllm-fleet-d-r1", "vllm-fleet-d-router", "fleet"):
        assert f"| {name} |" in md
    assert "| vllm-fleet-d-r0 | instance | 100 | 0 | 800 |" in md
    assert "## SLO: MISSED" in md
    assert "- vllm-fleet-d-r1: MISSED: p99_ttft_ms: measured 50, threshold <= 40" in md
    assert "- vllm-fleet-d-r0: ok: p99_ttft_ms: measured 20, threshold <= 40" in md
    assert "## Compared with the previous report (earlier, revision 2)" in md
    assert "| vllm-fleet-d-r0 | output_throughput | 1000 | 800 | -20.0 % | worse |" in md
    assert "| vllm-fleet-d-r0 | p99_ttft_ms | 35.2 | 20 | -43.2 % | better |" in md
    assert "| vllm-fleet-d-r1 | p99_ttft_ms | 50 | 50 | +0.0 % | same |" in md
    assert "![throughput](throughput.png)" in md and "![latency](latency.png)" in md
    assert md.endswith("\n")


def test_markdown_minimal():
    doc = bench.report("d", three(), {**REPORT_SETTINGS, "max_concurrency": 0}, slo={"p99_ttft_ms": 100})
    md = bench.markdown(doc)
    assert "## SLO: met" in md and "MISSED" not in md
    assert "Compared with the previous report" not in md and "## Plots" not in md and "![" not in md
    assert "unbounded" in md and "revision -" in md
    plain = bench.markdown(bench.report("d", three(), REPORT_SETTINGS))
    assert "## SLO" not in plain


def test_markdown_missing_figures_are_dashes():
    r = result()
    for key in ("output_throughput", "p99_ttft_ms", "p99_itl_ms"):
        del r[key]
    doc = bench.report("d", [{"target": "t", "kind": "router", "host": "h", "result": r}], REPORT_SETTINGS)
    row = next(line for line in bench.markdown(doc).splitlines() if line.startswith("| t |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4] == "-" and cells[7] == "-" and cells[10] == "-"
    assert cells[5] == "8"


# ---- plot ------------------------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n"


def _pixels(path):
    image = pytest.importorskip("matplotlib.image")
    return image.imread(str(path))


def _colour_count(pixels, hex_colour):
    import numpy as np
    rgb = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]) / 255.0
    return int((np.abs(pixels[..., :3] - rgb).max(axis=-1) < 0.02).sum())


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    np = pytest.importorskip("numpy")
    doc = bench.report("d", three(), REPORT_SETTINGS)
    names = bench.plot(doc, str(tmp_path))
    assert names == ["throughput.png", "latency.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latency.png", "throughput.png"]
    for name in names:
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG)
        pixels = _pixels(tmp_path / name)
        assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
        assert float(np.std(pixels[..., :3])) > 0

    # the bars are drawn: their colours cover far more of the picture than for a run of zeros
    zero = copy.deepcopy(doc)
    for row in zero["rows"]:
        for key in list(row):
            if key.endswith("_ms") or key.endswith("_throughput"):
                row[key] = 0
    empty = tmp_path / "zero"
    empty.mkdir()
    bench.plot(zero, str(empty))
    tp, tp0 = _pixels(tmp_path / "throughput.png"), _pixels(empty / "throughput.png")
    assert _colour_count(tp, "#4c72b0") > 10 * max(1, _colour_count(tp0, "#4c72b0"))   # targets
    assert _colour_count(tp, "#55a868") > 10 * max(1, _colour_count(tp0, "#55a868"))   # fleet
    lat, lat0 = _pixels(tmp_path / "latency.png"), _pixels(empty / "latency.png")
    assert _colour_count(lat, "#1f77b4") > 3 * max(1, _colour_count(lat0, "#1f77b4"))  # p50 bars


def test_plot_compares_with_the_previous_report(tmp_path):
    pytest.importorskip("matplotlib")
    before = bench.report("d", three(), REPORT_SETTINGS)
    doc = bench.report("d", three(r0=result(output_throughput=500.0)), REPORT_SETTINGS, previous=before)
    names = bench.plot(doc, str(tmp_path))
    assert names == ["throughput.png", "latency.png", "compared.png"]
    pixels = _pixels(tmp_path / "compared.png")
    assert (tmp_path / "compared.png").read_bytes().startswith(PNG)
    assert _colour_count(pixels, "#a0a0a0") > 500 and _colour_count(pixels, "#4c72b0") > 500   # previous, now
    assert "![compared](compared.png)" in bench.markdown(doc, names)
    # only the compared figures, and changes under SAME_PCT are "same"
    metrics = {c["metric"] for r in doc["rows"] for c in r.get("compared", [])}
    assert metrics == set(bench.COMPARED)
    md = bench.markdown(doc, names)
    assert "| vllm-fleet-d-r1 | output_throughput |" in md and md.count("| same |") >= 1


def test_an_embedding_server_is_measured_through_the_embeddings_api():
    runner = {"name": "vllm-fleet-e", "kind": "vllm", "runtime": "uv", "serves_http": True, "port": 8000,
              "argv": ["vllm", "serve", "/models/minilm", "--runner", "pooling"], "served_model_name": "minilm",
              "health": {"request": "embedding"}}
    target = {"name": "vllm-fleet-e", "kind": "instance", "deployment": "e", "url": "http://127.0.0.1:8000",
              "runner": runner}
    args = bench.bench_args(target, {"prompts": 8}, "/tmp/out")
    at = args.index("--backend")
    assert args[at + 1:at + 5] == ["openai-embeddings", "--base-url", "http://127.0.0.1:8000", "--endpoint"]
    assert args[args.index("--endpoint") + 1] == "/v1/embeddings"
    assert "--ignore-eos" not in args and "--random-output-len" not in args
    assert args[args.index("--percentile-metrics") + 1] == "e2el"
    # a pooling result carries no "failed": requests sent less completed
    assert bench.error_rate({"completed": 6, "num_prompts": 8}) == 0.25
    assert bench.error_rate({"completed": 8, "num_prompts": 8}) == 0.0
