"""Placement: instances, ranks, placeholders, operator additions, plan-time errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_fleet import loader
from vllm_fleet.plan import HostInput, PlanError, plan, substitute

ROOT = Path(__file__).resolve().parents[4]
SEED = "baidu/ERNIE-4.5-VL-28B-A3B-PT"


@pytest.fixture(scope="module")
def cat():
    return loader.load([ROOT / "recipes"])


def host(name, address=None, iface="eth0", hw="h200", **settings):
    base = {"recipe": SEED, "hardware": hw}
    base.update(settings)
    return HostInput(name=name, settings=base, address=address, iface=iface,
                     gpu={"hardware": hw, "count": 8})


def test_single_node_hosts_each_serve_the_seed_command(cat):
    out = plan(cat, [host("a"), host("b")])
    assert set(out) == {"a", "b"}
    proc = out["a"]["processes"][0]
    assert proc["argv"] == ["vllm", "serve", SEED, "--trust-remote-code", "--tensor-parallel-size", "1",
                            "--mm-encoder-tp-mode", "data"]
    assert proc["env"] == {}
    assert proc["image"] == "vllm/vllm-openai:latest"
    assert proc["port"] == 8000 and proc["serves_http"] is True
    assert out["a"]["vendor"] == "cuda" and out["a"]["strategy"] == "single_node_tp"
    assert out["a"]["processes"][0]["name"] == out["b"]["processes"][0]["name"]


def test_rocm_hosts_get_the_rocm_image(cat):
    out = plan(cat, [host("m", hw="mi300x")])
    assert out["m"]["vendor"] == "rocm"
    assert out["m"]["processes"][0]["image"] == "vllm/vllm-openai-rocm:latest"


def test_multi_node_instances_ranks_and_placeholders(cat):
    hosts = [host(f"n{i}", address=f"10.9.0.{i + 1}", iface=f"ens{i}", strategy="multi_node_tp", nodes=2)
             for i in range(4)]
    out = plan(cat, hosts)
    assert [out[h]["instance"] for h in ("n0", "n1", "n2", "n3")] == [0, 0, 1, 1]
    head, worker = out["n0"]["processes"][0], out["n1"]["processes"][0]
    assert head["argv"][-7:] == ["--nnodes", "2", "--node-rank", "0", "--master-addr", "10.9.0.1",
                                 "--mm-encoder-tp-mode"][:7] or "--master-addr" in head["argv"]
    assert head["argv"][head["argv"].index("--master-addr") + 1] == "10.9.0.1"
    assert worker["argv"][worker["argv"].index("--master-addr") + 1] == "10.9.0.1"
    assert "--headless" in worker["argv"] and "--headless" not in head["argv"]
    assert worker["argv"][worker["argv"].index("--node-rank") + 1] == "1"
    # second instance rendezvous at its own head
    third = out["n2"]["processes"][0]["argv"]
    assert third[third.index("--master-addr") + 1] == "10.9.0.3"
    assert out["n1"]["processes"][0]["env"] == {"GLOO_SOCKET_IFNAME": "ens1", "NCCL_SOCKET_IFNAME": "ens1",
                                                "VLLM_HOST_IP": "10.9.0.2"}
    assert head["serves_http"] and not worker["serves_http"]
    assert out["n1"]["head"] == "n0" and out["n3"]["head"] == "n2"


def test_explicit_rank_wins(cat):
    hosts = [host("a", address="10.0.0.1", strategy="multi_node_tp", nodes=2),
             host("b", address="10.0.0.2", strategy="multi_node_tp", nodes=2)]
    hosts[1].node_rank = 0
    out = plan(cat, hosts)
    assert out["b"]["node_rank"] == 0 and out["a"]["node_rank"] == 1
    argv = out["a"]["processes"][0]["argv"]
    assert argv[argv.index("--master-addr") + 1] == "10.0.0.2"


def test_hosts_not_divisible_into_instances(cat):
    hosts = [host(f"n{i}", address=f"10.0.0.{i}", strategy="multi_node_tp", nodes=2) for i in range(3)]
    with pytest.raises(PlanError, match="cannot form instances of 2 nodes"):
        plan(cat, hosts)


def test_mixed_hardware_is_an_error_naming_hosts(cat):
    with pytest.raises(PlanError, match="mixed hardware.*a=h200.*b=mi300x"):
        plan(cat, [host("a"), host("b", hw="mi300x")])


def test_settings_must_agree_inside_a_deployment(cat):
    with pytest.raises(PlanError, match="vllm_fleet_variant differs"):
        plan(cat, [host("a"), host("b", variant="424b")])


def test_unknown_recipe_and_hardware(cat):
    with pytest.raises(PlanError, match="unknown recipe 'x/y'"):
        plan(cat, [host("a", recipe="x/y")])
    with pytest.raises(PlanError, match="a: vllm_fleet_hardware: unknown hardware 'h300'"):
        plan(cat, [host("a", hw="h300")])


def test_undetected_hardware_tells_what_to_set(cat):
    h = HostInput(name="a", settings={"recipe": SEED}, gpu={"vendor": "cpu", "cpu_model": "Intel(R) Xeon(R) Processor"})
    with pytest.raises(PlanError, match="a: vllm_fleet_hardware: not set and not detected"):
        plan(cat, [h])


def test_operator_additions_win_and_are_appended(cat):
    out = plan(cat, [host("a", port=9001, served_model_name="ernie", extra_args=["--tensor-parallel-size", "2"])])
    argv = out["a"]["processes"][0]["argv"]
    assert argv[-6:] == ["--served-model-name", "ernie", "--port", "9001", "--tensor-parallel-size", "2"]
    assert argv.count("--tensor-parallel-size") == 1
    assert out["a"]["processes"][0]["port"] == 9001
    assert out["a"]["health"]["served_model_name"] == "ernie"


def test_model_path_replaces_the_model_and_keeps_the_served_name(cat):
    out = plan(cat, [host("a", model_path="/models/ernie")])
    argv = out["a"]["processes"][0]["argv"]
    assert argv[2] == "/models/ernie"
    assert argv[-2:] == ["--served-model-name", SEED]


def test_removed_flag_is_refused_for_new_versions(cat):
    with pytest.raises(PlanError, match="--disable-log-requests was removed"):
        plan(cat, [host("a", extra_args=["--disable-log-requests"], vllm_version="0.32.0")])
    out = plan(cat, [host("a", extra_args=["--disable-log-requests"], vllm_version="0.11.0")])
    assert "--disable-log-requests" in out["a"]["processes"][0]["argv"]


def test_min_vllm_version(cat):
    with pytest.raises(PlanError, match="older than the recipe's min_vllm_version 0.11.0"):
        plan(cat, [host("a", vllm_version="0.10.0")])


def test_image_tag_pin_and_version_from_tag(cat):
    out = plan(cat, [host("a", image_tag="v0.32.0")])
    assert out["a"]["processes"][0]["image"] == "vllm/vllm-openai:v0.32.0"
    assert out["a"]["vllm_version"] == "0.32.0"


def test_plan_hash_changes_with_the_command(cat):
    one = plan(cat, [host("a")])["a"]["hash"]
    two = plan(cat, [host("a", extra_args=["--max-model-len", "4096"])])["a"]["hash"]
    assert one != two and one == plan(cat, [host("a")])["a"]["hash"]


def test_secrets_stay_out_of_the_plan(cat):
    out = plan(cat, [host("a", secrets=["HF_TOKEN"])])
    proc = out["a"]["processes"][0]
    assert proc["secret_env"] == ["HF_TOKEN"] and "HF_TOKEN" not in proc["env"]


def test_unresolved_placeholder_names_host_and_variable(cat):
    hosts = [host("a", address=None, iface=None, strategy="multi_node_tp", nodes=2),
             host("b", address="10.0.0.2", iface=None, strategy="multi_node_tp", nodes=2)]
    with pytest.raises(PlanError) as err:
        plan(cat, hosts)
    text = str(err.value)
    assert "a: vllm_fleet_address: no rendezvous address" in text
    assert "placeholder $IFACE_NAME" in text and "vllm_fleet_iface" in text


def test_substitute_longest_name_and_boundaries():
    text, missing = substitute("$HEAD_IP:$HEAD_IPX/$IFACE_NAME", {"HEAD_IP": "1.2.3.4", "IFACE_NAME": "eth0"})
    assert text == "1.2.3.4:$HEAD_IPX/eth0" and missing == ["HEAD_IPX"]


def test_pd_is_refused_clearly_for_now(cat):
    with pytest.raises(PlanError, match="not supported by this version"):
        plan(cat, [host("a", kv_offload="kv_store_centralized_mooncake")])
