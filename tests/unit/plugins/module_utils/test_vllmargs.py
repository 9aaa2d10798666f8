"""vllm_fleet/vllmargs.py: vLLM's argument grammar, and the readers built on it (planargv, dedupe)."""

from __future__ import annotations

import pytest

from vllm_fleet import vllmargs as va
from vllm_fleet.contract import check
from vllm_fleet.planargv import customize, gpus_per_node
from vllm_fleet.shell import dedupe


@pytest.mark.parametrize("token, flag", [
    ("--max_model_len", "--max-model-len"), ("--max_model_len=4096", "--max-model-len"),
    ("--api_key", "--api-key"), ("-tp", "--tensor-parallel-size"), ("-dpl=2", "--data-parallel-size-local"),
    ("--json_arg.key_one", "--json-arg.key_one"),   # underscores become dashes only up to the first "."
    ("-rpc_port", "-rpc_port"),                      # not a vLLM alias: as written
])
def test_canonical_names(token, flag):
    assert va.flag_name(token) == flag


@pytest.mark.parametrize("token", ["4096", "-1", "-0.5", "1e-3", "abc", ""])
def test_values_are_not_flags(token):
    assert va.flag_name(token) is None


def test_flag_values_any_spelling_in_order():
    argv = ["--port", "1", "--port=2", "--port_x", "9", "-tp", "3"]
    assert va.flag_values(argv, "--port") == ["1", "2"]
    assert va.flag_values(argv, "--port-x") == ["9"]
    assert va.int_flag(argv + ["--tensor_parallel_size=5"], "--tensor-parallel-size", 1) == 5
    assert va.int_flag(["--port", "+80"], "--port", 7) == 7   # only plain digits count


@pytest.mark.parametrize("argv, nodes, need", [
    (["--tensor_parallel_size", "16"], 1, 16),
    (["-tp=4", "--pipeline_parallel_size=2"], 1, 8),
    (["-tp", "2", "--data_parallel_size", "4"], 2, 4),
    (["--tensor-parallel-size", "2", "-dpl", "3"], 1, 6),
])
def test_gpus_per_node_reads_every_spelling(argv, nodes, need):
    assert gpus_per_node(argv, nodes) == need


@pytest.mark.parametrize("token, full", [
    ("--api-ke", "--api-key"), ("--hf_t", "--hf-token"), ("--tensor-parallel", "--tensor-parallel-size"),
    ("-t", "--tensor-parallel-size"), ("--por", "--port"),
])
def test_abbreviations_of_read_flags(token, full):
    assert va.abbreviates(token) == full


@pytest.mark.parametrize("token", ["--port", "--data-parallel-size", "-tp", "-n", "--max-model-len", "--seed", "4"])
def test_full_flags_are_not_abbreviations(token):
    assert va.abbreviates(token) is None


@pytest.mark.parametrize("token, packed", [
    ("--max-model-len 4096", True), ("  --api-key  x", True), ("--x\tv", True),
    ('--hf-overrides={"a": 1}', False), ("--port=80", False), ("a value with spaces", False),
])
def test_packed_items(token, packed):
    assert va.packed(token) is packed


def test_customize_dedupes_by_vllm_identity():
    argv = ["vllm", "serve", "m", "--tensor-parallel-size", "8", "--max-model-len", "100"]
    out = customize(argv, {"extra_args": ["-tp", "4", "--max_model_len=200"]}, "single")
    assert out == ["vllm", "serve", "m", "-tp", "4", "--max_model_len=200"]
    # upstream rendering keeps its exact-string identity
    assert dedupe(["--x", "1", "--x=2"]) == ["--x", "1", "--x=2"]


@pytest.mark.parametrize("args, needle", [
    (["--api_key", "SECRETVALUE"], "vllm_fleet_api_key"),
    (["--hf_token=SECRETVALUE"], "vllm_fleet_hf_token"),
    (["--api-key SECRETVALUE"], "one item"),
    (["--Api_Key", "SECRETVALUE"], "vllm_fleet_api_key"),
    (["--port", "abc"], "not a whole number"),
    (["--port=80"], "vllm_fleet_privileged_ports"),
    (["-pp", "0"], "out of range"),
    (["--max-model-len 4096"], "one argument per list item"),
])
def test_contract_refuses_extra_args(args, needle):
    _, problems = check("h", {"vllm_fleet_extra_args": args})
    assert problems and all(p.startswith("h: vllm_fleet_extra_args[") for p in problems), problems
    assert any(needle in p for p in problems), problems
    assert not any("SECRETVALUE" in p for p in problems)


@pytest.mark.parametrize("variables", [
    {"vllm_fleet_extra_args": ["--max_model_len", "4096", "--seed", "-1", '--hf-overrides={"a": 1}']},
    {"vllm_fleet_port": 1024, "vllm_fleet_extra_args": ["--port", "1024"]},
    {"vllm_fleet_port": 80, "vllm_fleet_router_port": 443, "vllm_fleet_privileged_ports": True,
     "vllm_fleet_extra_args": ["--port=80"]},
])
def test_contract_near_misses_pass(variables):
    assert check("h", variables)[1] == []


@pytest.mark.parametrize("name", ["vllm_fleet_port", "vllm_fleet_router_port"])
def test_privileged_port_variables_need_the_opt_in(name):
    problems = check("h", {name: 1023})[1]
    assert problems and problems[0].startswith(f"h: {name}: 1023 is below 1024"), problems
    assert check("h", {name: 1023, "vllm_fleet_privileged_ports": "true"})[1] == []


# ------------------------------------------------------------------------------------------
# the plan: NET_BIND_SERVICE only with the opt-in and only for a process on a port below 1024

def _plan(**settings):
    from pathlib import Path

    from vllm_fleet import loader
    from vllm_fleet.plan import HostInput, plan
    root = Path(__file__).resolve().parents[4]
    cat = loader.load([root / "recipes"])
    base = {"recipe": "baidu/ERNIE-4.5-VL-28B-A3B-PT", "hardware": "h200"}
    base.update(settings)
    return plan(cat, [HostInput(name="a", settings=base, address="10.0.0.1", iface="eth0",
                                gpu={"hardware": "h200", "count": 8})])["a"]


@pytest.mark.parametrize("settings, port", [
    ({"port": 80, "privileged_ports": True}, 80),
    ({"extra_args": ["--port=443"], "privileged_ports": True, "runtime": "uv", "vllm_version": "0.32.0"}, 443),
])
def test_privileged_port_grants_exactly_net_bind_service(settings, port):
    proc = _plan(**settings)["processes"][0]
    assert proc["port"] == port and proc["capabilities"] == ["NET_BIND_SERVICE"]


@pytest.mark.parametrize("settings", [{}, {"privileged_ports": True}, {"privileged_ports": True, "port": 1024}])
def test_no_capability_otherwise(settings):
    entry = _plan(**settings)
    assert all("capabilities" not in p for p in entry["processes"])
    if "port" not in settings:   # the opt-in alone changes nothing: same plan hash as without it
        assert entry["hash"] == _plan()["hash"]
