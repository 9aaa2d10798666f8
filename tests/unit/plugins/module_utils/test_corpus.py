"""render-batch records: one output line per input line, same order (SCHEMA.md 9 outputs)."""

from __future__ import annotations

import json

from vllm_fleet.corpus import BatchRenderer, render_lines

MOE = "test-org/Moe-Model"


def inputs(**kw):
    base = {"hf_id": MOE, "variant": "default", "hardware": "h200", "strategy": "single_node_tp",
            "node_count": 1, "features": [], "feature_modes": {}, "advanced_args": [], "pd_nodes": None,
            "kv_offload": None, "kv_instances": None}
    base.update(kw)
    return base


def line(role="single", node_rank=0, **kw):
    return json.dumps({"inputs": inputs(**kw), "role": role, "node_rank": node_rank})


def run(catalog, lines):
    return [json.loads(out) for out in render_lines(catalog, lines)]


def test_one_output_per_input_in_order_with_error_objects(catalog):
    lines = [
        line(),
        "not json",
        "[1, 2]",
        "",
        line(hf_id="nope/x"),
        line(role="router", node_rank=None),
        line(strategy="multi_node_tp", node_count=2, role="worker", node_rank=1),
        json.dumps({"role": "single"}),
    ]
    out = run(catalog, lines)
    assert len(out) == len(lines)
    assert out[0]["argv"] == ["vllm", "serve", MOE, "--trust-remote-code", "--tensor-parallel-size", "1"]
    assert out[1]["error"].startswith("invalid JSON: ")
    assert out[2] == {"error": "expected a JSON object per line"}
    assert out[3] == {"error": "empty line"}
    assert out[4] == {"error": "unknown recipe 'nope/x'"}
    assert out[5] == {"error": "no process with role 'router' rank None (rendering has: single[0])"}
    assert out[6]["argv"][-1] == "--headless"
    assert out[7] == {"error": "inputs.hf_id: expected the recipe id"}


def test_single_record_outputs(catalog):
    [out] = run(catalog, [line(features=["tool_calling"])])
    assert list(out) == ["deploy_type", "docker_image", "docker_brand_key", "argv", "env", "command", "port",
                         "docker_argv"]
    assert out["deploy_type"] == "single_node"
    assert out["docker_image"] == "vllm/vllm-openai:latest" and out["docker_brand_key"] == "nvidia"
    assert out["command"] == ("vllm serve test-org/Moe-Model \\\n  --trust-remote-code \\\n"
                              "  --tensor-parallel-size 1 \\\n  --enable-auto-tool-choice \\\n"
                              "  --tool-call-parser hermes")
    assert out["port"] == 8000 and out["env"] == {}


def test_worker_records_have_no_command_head_records_do(catalog):
    head, worker = run(catalog, [line(strategy="multi_node_dep", node_count=2, role="head", node_rank=0),
                                 line(strategy="multi_node_dep", node_count=2, role="worker", node_rank=1)])
    assert "command" in head and "command" not in worker
    assert worker["argv"][-2:] == ["--data-parallel-start-rank", "8"]
    assert head["env"] == worker["env"] == {"GLOO_SOCKET_IFNAME": "$IFACE_NAME",
                                            "NCCL_SOCKET_IFNAME": "$IFACE_NAME"}


def test_cuda_map_record(catalog):
    [out] = run(catalog, [line(hf_id="test-org/Docker-Model")])
    assert list(out)[:4] == ["deploy_type", "docker_image", "docker_brand_key", "docker_cuda_map"]
    assert out["docker_cuda_map"] == {"cu129": "test/vllm:cu129", "cu130": "test/vllm:cu130"}


def test_pd_router_and_mooncake_records(catalog):
    pd = dict(strategy="pd_cluster", hf_id="test-org/Pd-Model")
    router, prefill = run(catalog, [line(role="router", node_rank=None, **pd),
                                    line(role="prefill", node_rank=0, **pd)])
    assert list(router) == ["deploy_type", "command", "install", "router_config"]
    assert router["router_config"] == {"policy": "round_robin"}
    assert prefill["port"] == 8001 and "command" in prefill
    mc = dict(kv_offload="kv_store_centralized_mooncake")
    inst, master, store, mrouter, mprefill = run(catalog, [
        line(role="instance", **mc), line(role="mooncake_master", node_rank=None, **mc),
        line(role="mooncake_store", node_rank=None, **mc), line(role="router", node_rank=None, **mc),
        line(role="prefill", **pd, **mc)])
    assert inst["deploy_type"] == "kv_store_lb" and "command" not in inst
    assert inst["env"] == {"MOONCAKE_CONFIG_PATH": "$MOONCAKE_CONFIG_PATH", "PYTHONHASHSEED": 0}
    assert list(master) == ["deploy_type", "command"]
    assert list(store) == ["deploy_type", "command", "config"]
    assert mrouter["router_port"] == 30080 and "router_config" not in mrouter
    assert "command" not in mprefill                      # PD roles under Mooncake


def test_omni_record(catalog):
    rec = json.dumps({"inputs": {"hf_id": "test-org/Omni-Model", "variant": "default", "hardware": "h200",
                                 "strategy": None, "omni_task": "t2i", "node_count": 1},
                      "role": "omni", "node_rank": 0})
    [out] = run(catalog, [rec])
    assert list(out) == ["deploy_type", "docker_image", "docker_brand_key", "command", "env", "model_id",
                         "docker_command"]
    assert out["model_id"] == "test-org/Omni-Model"
    assert out["command"].endswith("--port 8092 \\\n  --omni")


def test_batch_renderer_reuses_consecutive_calls(catalog):
    batch = BatchRenderer(catalog)
    rec = {"inputs": inputs(strategy="multi_node_tp", node_count=2), "role": "head", "node_rank": 0}
    first, _ = batch.rendering(rec["inputs"])
    again, _ = batch.rendering(dict(rec["inputs"]))
    assert first is again
    other, _ = batch.rendering(inputs())
    assert other is not first
