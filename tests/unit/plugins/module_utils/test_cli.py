"""The ``vllm-fleet`` CLI: render / render-batch / list, one-line errors with exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_fleet import cli

REPO = Path(__file__).resolve().parents[4]
TREE = REPO / "tests" / "fixtures" / "tree"


def run_cli(capsys, *argv):
    rc = cli.main([argv[0], "--recipes", str(TREE), *argv[1:]])
    out, err = capsys.readouterr()
    return rc, out, err


def render_json(capsys, *argv):
    rc, out, err = run_cli(capsys, "render", *argv)
    assert (rc, err) == (0, "")
    return json.loads(out)


def subprocess_cli(*argv, stdin=None):
    env = dict(os.environ, PYTHONPATH=str(REPO / "plugins" / "module_utils"))
    return subprocess.run([sys.executable, "-m", "vllm_fleet.cli", *argv], input=stdin, env=env,
                          capture_output=True, text=True, timeout=60, cwd=str(REPO))


# -- render ------------------------------------------------------------------------------------

def test_render_json_keys_and_defaults(capsys):
    view = render_json(capsys, "--model", "test-org/Order-Model")
    assert list(view) == ["hf_id", "hardware", "strategy", "variant", "node_count", "features", "deploy_type",
                          "env", "docker_image", "command", "argv", "docker_command", "docker_argv", "processes"]
    assert (view["hf_id"], view["hardware"], view["strategy"], view["variant"], view["node_count"]) == (
        "test-org/Order-Model", "h200", "single_node_tp", "default", 1)
    assert view["features"] == ["tool_calling", "reasoning"]
    assert view["deploy_type"] == "single_node"
    assert view["argv"][:3] == ["vllm", "serve", "test-org/Order-Model"]
    assert view["docker_argv"][:2] == ["docker", "run"]
    [proc] = view["processes"]
    assert list(proc)[:3] == ["role", "rank", "kind"]
    assert (proc["role"], proc["rank"], proc["kind"], proc["port"]) == ("single", 0, "vllm", 8000)
    assert {"argv", "env", "command", "docker_argv", "docker_command", "docker_image",
            "docker_brand_key"} <= set(proc)


def test_render_choices_are_passed_through(capsys):
    view = render_json(capsys, "--model", "test-org/Feature-Model", "--hardware", "h200", "--strategy",
                       "single_node_tp", "--features", "spec_decoding", "--mode", "spec_decoding=eagle3",
                       "--extra-arg=--max-model-len", "--extra-arg", "4096")
    assert view["argv"][3:] == ["--tensor-parallel-size", "1", "--max-model-len", "4096", "--speculative-config",
                                '{"method":"eagle3","num_speculative_tokens":3}']


def test_render_rank_selects_one_node(capsys):
    view = render_json(capsys, "--model", "test-org/Moe-Model", "--hardware", "h200", "--strategy",
                       "multi_node_tp", "--nodes", "2", "--rank", "1")
    assert [(p["role"], p["rank"]) for p in view["processes"]] == [("worker", 1)]
    assert view["argv"][3:] == ["--trust-remote-code", "--tensor-parallel-size", "16", "--nnodes", "2",
                                "--node-rank", "1", "--master-addr", "$HEAD_IP", "--headless",
                                "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]


def test_render_pd_json(capsys):
    view = render_json(capsys, "--model", "test-org/Pd-Dep-Model", "--hardware", "h200", "--strategy",
                       "pd_cluster", "--pd-nodes", '{"prefill": {"nodes": 2, "rank": 1}, "decode": 1}')
    assert [(p["role"], p["rank"]) for p in view["processes"]] == [("prefill", 1), ("decode", 0),
                                                                   ("router", None)]
    router = view["processes"][2]
    assert router["kind"] == "router" and router["install"] == "uv pip install vllm-router"
    assert view["processes"][0]["pd_role"]["parallelism"] == "dep"


def test_render_shell_format(capsys):
    rc, out, err = run_cli(capsys, "render", "--model", "test-org/Fallback-Model", "--hardware", "h200",
                           "--format", "shell")
    assert rc == 0
    assert out == ("# single (rank 0)\nexport NVIDIA_FALLBACK=1\nvllm serve test-org/Fallback-Model \\\n"
                   "  --tensor-parallel-size 1 \\\n  --nvidia-fallback 1 \\\n  --variant-nvidia 1\n")


def test_list(capsys):
    # `what` goes before --recipes (nargs="+" would take it as one more source)
    rc = cli.main(["list", "recipes", "--recipes", str(TREE)])
    out = capsys.readouterr().out
    assert rc == 0
    row = next(ln for ln in out.splitlines() if ln.startswith("test-org/Select-Model"))
    assert row.split() == ["test-org/Select-Model", "default,big,nvfp4,nvfp4_any,mxfp4_amd,pinned", "h200",
                           "single_node_tp,multi_node_tp,multi_node_dep,pd_cluster"]
    assert "(omni)" in next(ln for ln in out.splitlines() if ln.startswith("test-org/Omni-Model"))
    assert cli.main(["list", "hardware", "--recipes", str(TREE)]) == 0
    out = capsys.readouterr().out
    assert next(ln for ln in out.splitlines() if ln.startswith("rtx_pro_6000")).split()[-1] == "no"


# -- errors: exit 2, exactly one line, no traceback ------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--model", "nope/x"],
     "unknown recipe 'nope/x'; 12 recipes loaded (see 'vllm-fleet list')"),
    (["--model", "test-org/Order"],
     "unknown recipe 'test-org/Order'; similar: test-org/Order-Model"),
    (["--model", "test-org/Select-Model", "--hardware", "zz"],
     "unknown hardware 'zz'; valid: h100, h200, b200, gb200, gb300, rtx_pro_6000, mi300x, trillium, xeon6, "
     "arc_pro_b60, ascend_950pr"),
    (["--model", "test-org/Select-Model", "--hardware", "h200", "--strategy", "zz"],
     "unknown strategy 'zz'; valid: multi_node_dep, multi_node_tep, multi_node_tp, multi_node_tp_dp, "
     "multi_node_tp_pp, pd_cluster, single_node_dep, single_node_tep, single_node_tp"),
    (["--model", "test-org/Select-Model", "--variant", "zz"],
     "unknown variant 'zz' for test-org/Select-Model; valid: default, big, nvfp4, nvfp4_any, mxfp4_amd, pinned"),
    (["--model", "test-org/Feature-Model", "--features", "tool_calling,zz"],
     "unknown feature 'zz' for test-org/Feature-Model; valid: tool_calling, reasoning, spec_decoding, text_only"),
    (["--model", "test-org/Feature-Model", "--mode", "spec_decoding=zz"],
     "unknown mode of feature 'spec_decoding' 'zz' for test-org/Feature-Model; valid: eagle3, mtp, dspark"),
    (["--model", "test-org/Select-Model", "--variant", "nvfp4", "--hardware", "h200"],
     "variant 'nvfp4' of test-org/Select-Model cannot run on 'h200'; valid hardware: b200, gb200, rtx_pro_6000"),
    (["--model", "test-org/Select-Model", "--hardware", "h200", "--strategy", "multi_node_dep", "--nodes", "2"],
     "strategy 'multi_node_dep' needs at least 32 GPUs on 'h200' (4 nodes of 8); got --nodes 2"),
    (["--model", "test-org/Select-Model", "--hardware", "h100", "--strategy", "multi_node_tp"],
     "strategy 'multi_node_tp' is not offered for test-org/Select-Model on 'h100'; valid: single_node_tp, "
     "multi_node_dep, pd_cluster"),
    (["--model", "test-org/Moe-Model", "--hardware", "h200", "--strategy", "pd_cluster", "--pd-nodes", "{x"],
     "--pd-nodes '{x': expected a number or JSON"),
    (["--model", "test-org/Moe-Model", "--mode", "novalue"],
     "--mode 'novalue': expected FEATURE=MODE"),
    (["--model", "test-org/Moe-Model", "--hardware", "h200", "--strategy", "single_node_tp", "--rank", "3"],
     "--rank 3: this rendering has ranks [0]"),
    (["--model", "test-org/Moe-Model", "--kv-offload", "zz"],
     "unknown kv offload option 'zz'; valid: simple, offloading_cpu, offloading_fs, lmcache, "
     "kv_store_centralized_mooncake, kv_store_distributed_mooncake"),
])
def test_render_errors_are_one_line_exit_2(capsys, argv, message):
    rc, out, err = run_cli(capsys, "render", *argv)
    assert rc == 2
    assert out == ""
    assert err == f"vllm-fleet: error: {message}\n"


def test_malformed_yaml_error(capsys, tmp_path):
    bad = tmp_path / "models" / "test-org" / "Bad.yaml"
    bad.parent.mkdir(parents=True)
    bad.write_text("meta:\n  title: [unclosed\nmodel: {}\n", encoding="utf-8")
    rc = cli.main(["render", "--recipes", str(TREE), str(tmp_path), "--model", "test-org/Bad"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.startswith(f"vllm-fleet: error: {bad}: line 3 column ")
    assert err.count("\n") == 1


def test_missing_recipe_tree(capsys, tmp_path):
    rc = cli.main(["render", "--recipes", str(tmp_path / "nope"), "--model", "a/b"])
    assert rc == 2
    assert capsys.readouterr().err == f"vllm-fleet: error: {tmp_path / 'nope'}: no such recipe tree or file\n"


def test_error_in_a_real_process_has_no_traceback():
    res = subprocess_cli("render", "--recipes", str(TREE), "--model", "test-org/Select-Model",
                         "--hardware", "h200", "--strategy", "multi_node_dep", "--nodes", "1")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == ("vllm-fleet: error: strategy 'multi_node_dep' needs at least 32 GPUs on 'h200' "
                          "(4 nodes of 8); got --nodes 1\n")


# -- render-batch --------------------------------------------------------------------------------

def test_render_batch_subprocess():
    rec = {"inputs": {"hf_id": "test-org/Moe-Model", "variant": "default", "hardware": "h200",
                      "strategy": "multi_node_dep", "node_count": 2, "features": [], "feature_modes": {},
                      "advanced_args": [], "pd_nodes": None, "kv_offload": None, "kv_instances": None},
           "role": "worker", "node_rank": 1}
    head = dict(rec, role="head", node_rank=0)
    stdin = "\n".join([json.dumps(head), "garbage", json.dumps(dict(rec, inputs={"hf_id": "no/such"})),
                       json.dumps(rec)]) + "\n"
    res = subprocess_cli("render-batch", "--recipes", str(TREE), stdin=stdin)
    assert res.returncode == 0 and res.stderr == ""
    lines = res.stdout.splitlines()
    assert len(lines) == 4
    out = [json.loads(x) for x in lines]
    assert out[0]["argv"][-2:] == ["--data-parallel-address", "$HEAD_IP"] and "command" in out[0]
    assert out[1]["error"].startswith("invalid JSON")
    assert out[2] == {"error": "unknown recipe 'no/such'"}
    assert out[3]["argv"][-2:] == ["--data-parallel-start-rank", "8"] and "command" not in out[3]


def _with_ansible_inventory(monkeypatch):
    import os
    import shutil

    here = Path(sys.executable).parent
    if not (here / "ansible-inventory").exists() and not shutil.which("ansible-inventory"):
        pytest.skip("platform: ansible-inventory not installed (the unit session installs ansible-core)")
    monkeypatch.setenv("PATH", f"{here}{os.pathsep}{os.environ.get('PATH', '')}")


def test_plan_command_prints_every_hosts_plan_of_an_inventory_group(monkeypatch, capsys):
    _with_ansible_inventory(monkeypatch)
    root = Path(__file__).resolve().parents[4]
    monkeypatch.chdir(root)
    rc = cli.main(["plan", "-i", "inventories/example", "--limit", "dsv3_pd", "--hardware", "h200", "--iface", "eth0"])
    assert rc == 0
    plans = json.loads(capsys.readouterr().out)
    assert sorted(plans) == ["h200-21", "h200-22", "h200-23", "router-01"]
    assert [p["role"] for p in plans["router-01"]["processes"]] == ["router"]
    assert plans["h200-23"]["processes"][0]["name"] == "vllm-fleet-dsv3-pd-decode0"


def test_plan_command_without_flags_marks_the_nic_only_facts_give(monkeypatch, capsys):
    """The issue's own command: the example pins its hardware; the NIC (network facts at deploy
    time) is shown as a marker, said on stderr, and --iface puts the real name in its place."""
    _with_ansible_inventory(monkeypatch)
    root = Path(__file__).resolve().parents[4]
    monkeypatch.chdir(root)
    assert cli.main(["plan", "--inventory", "inventories/example", "--limit", "dsv3_pd"]) == 0
    captured = capsys.readouterr()
    plans = json.loads(captured.out)
    assert sorted(plans) == ["h200-21", "h200-22", "h200-23", "router-01"]
    prefill = plans["h200-21"]["processes"][0]
    assert prefill["env"]["GLOO_SOCKET_IFNAME"] == "<NIC of 10.20.1.21>"
    assert "h200-21 (<NIC of 10.20.1.21>)" in captured.err and "router-01" not in captured.err
    assert cli.main(["plan", "--inventory", "inventories/example", "--limit", "dsv3_pd", "--iface", "ens7"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["h200-21"]["processes"][0]["env"]["GLOO_SOCKET_IFNAME"] == "ens7"
    assert "<NIC of" not in captured.out + captured.err


def test_plan_command_layers_several_inventories(monkeypatch, capsys, tmp_path):
    _with_ansible_inventory(monkeypatch)
    root = Path(__file__).resolve().parents[4]
    base, extra = tmp_path / "base.yml", tmp_path / "extra.yml"
    base.write_text("all:\n  hosts:\n    cpu-1: {vllm_fleet_recipe: sentence-transformers/all-MiniLM-L6-v2, "
                    "vllm_fleet_hardware: xeon6, vllm_fleet_port: 18000, ansible_host: 192.0.2.9}\n")
    extra.write_text("all:\n  hosts:\n    cpu-1: {vllm_fleet_port: 18001}\n")
    argv = ["plan", "--recipes", str(root / "recipes"), "-i", str(base), "--limit", "cpu-1"]
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["cpu-1"]["processes"][0]["port"] == 18000
    assert cli.main(argv + ["-i", str(extra)]) == 0
    assert json.loads(capsys.readouterr().out)["cpu-1"]["processes"][0]["port"] == 18001


def test_plan_command_needs_no_hardware_for_a_services_only_host(monkeypatch, capsys, tmp_path):
    _with_ansible_inventory(monkeypatch)
    root = Path(__file__).resolve().parents[4]
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  vars: {vllm_fleet_recipe: deepseek-ai/DeepSeek-V3, vllm_fleet_deployment: kv,\n"
                   "         vllm_fleet_kv_offload: kv_store_centralized_mooncake}\n  hosts:\n"
                   "    kv-1: {vllm_fleet_role: [master, store, router], vllm_fleet_address: 127.0.0.1}\n"
                   "    gpu-1: {ansible_host: 192.0.2.1, vllm_fleet_hardware: h200}\n"
                   "    gpu-2: {ansible_host: 192.0.2.2}\n")
    assert cli.main(["plan", "--recipes", str(root / "recipes"), "-i", str(inv)]) == 2
    err = capsys.readouterr().err
    assert "gpu-2: vllm_fleet_hardware: not set" in err and "kv-1" not in err
    inv.write_text(inv.read_text().replace("gpu-2: {ansible_host: 192.0.2.2}",
                                           "gpu-2: {ansible_host: 192.0.2.2, vllm_fleet_hardware: h200}"))
    assert cli.main(["plan", "--recipes", str(root / "recipes"), "-i", str(inv)]) == 0
    plans = json.loads(capsys.readouterr().out)
    assert [p["kind"] for p in plans["kv-1"]["processes"]] == ["mooncake_master", "mooncake_store", "router"]


def test_plan_command_refuses_a_broken_inventory(monkeypatch, capsys, tmp_path):
    _with_ansible_inventory(monkeypatch)
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    gpu-1: {vllm_fleet_recipie: a/b, vllm_fleet_port: 0}\n")
    assert cli.main(["plan", "-i", str(inv)]) == 2
    err = capsys.readouterr().err
    assert "gpu-1: vllm_fleet_recipie: unknown variable; did you mean vllm_fleet_recipe?" in err
    assert "gpu-1: vllm_fleet_port: 0 is out of range" in err
