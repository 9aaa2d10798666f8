"""The one secret table: who gets which secret, the plan's secret_vars, and digests that make a
rotation redeploy exactly the processes that use the rotated secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_fleet import contract, loader, secret_table
from vllm_fleet.plan import HostInput, plan

ROOT = Path(__file__).resolve().parents[4]
DS = "deepseek-ai/DeepSeek-V3"
SEED = "baidu/ERNIE-4.5-VL-28B-A3B-PT"
KEY = b"k" * 32
SENTINEL = "redis-pw-SENTINEL-7c1e"


@pytest.fixture(scope="module")
def cat():
    return loader.load([ROOT / "recipes"])


def with_secrets(settings, values):
    settings = dict(settings, secrets=sorted(values), secret_digests=secret_table.digests(KEY, values))
    return settings


def kv_hosts(values, runtime="docker"):
    base = {"recipe": DS, "strategy": "single_node_tp", "kv_offload": "kv_store_centralized_mooncake",
            "runtime": runtime, "vllm_version": "0.32.0"}
    hosts = []
    for name, address, roles, gpu in (("a", "10.0.1.1", [], True), ("b", "10.0.1.2", [], True),
                                      ("m", "10.0.1.9", ["master", "store", "router"], False)):
        hosts.append(HostInput(name=name, settings=with_secrets(base, values), address=address, iface="eth0",
                               gpu={"hardware": "h200", "count": 8} if gpu else {"brand": "none"}, roles=roles))
    return hosts


def seed_host(values, runtime="docker"):
    settings = with_secrets({"recipe": SEED, "hardware": "h200", "runtime": runtime, "vllm_version": "0.32.0"},
                            values)
    return [HostInput(name="s", settings=settings, address="10.0.2.1", iface="eth0",
                      gpu={"hardware": "h200", "count": 8})]


def by_kind(host_plan):
    return {p["kind"]: p for p in host_plan["processes"]}


def test_the_table_is_the_contracts_and_the_pointers_source():
    for secret in secret_table.TABLE:
        var = contract.BY_NAME[secret.var]
        assert var.scope == "secret" and var.meaning == secret.meaning
        assert contract.SECRET_POINTER[secret.env] == secret.var
        assert contract.SECRET_ENV_RE.fullmatch(secret.env), secret.env   # the env rule refuses it from vllm_fleet_env
        assert secret.var in secret_table.CHANNELS and secret.var in contract.SECRET_CHANNELS


@pytest.mark.parametrize("kind, mooncake, wanted", [
    ("vllm", False, ["HF_TOKEN", "VLLM_API_KEY"]),
    ("omni", False, ["HF_TOKEN", "VLLM_API_KEY"]),
    ("vllm", True, ["HF_TOKEN", "MC_REDIS_PASSWORD", "VLLM_API_KEY"]),
    ("mooncake_master", True, ["MC_REDIS_PASSWORD"]),
    ("mooncake_store", True, ["MC_REDIS_PASSWORD"]),
    ("router", True, []),
])
def test_who_gets_which_secret(kind, mooncake, wanted):
    assert secret_table.for_process(["HF_TOKEN", "MC_REDIS_PASSWORD", "VLLM_API_KEY", "NOT_IN_TABLE"],
                                    kind, mooncake) == wanted


def test_digests_are_keyed_per_audience_and_reveal_nothing():
    values = {"HF_TOKEN": "hf_x", "VLLM_API_KEY": "k", "MC_REDIS_PASSWORD": SENTINEL}
    out = secret_table.digests(KEY, values)
    assert sorted(out) == ["HF_TOKEN,MC_REDIS_PASSWORD,VLLM_API_KEY", "HF_TOKEN,VLLM_API_KEY", "MC_REDIS_PASSWORD"]
    # an engine's digest is the one vllm-fleet always computed over its secrets: no redeploy on upgrade
    assert out["HF_TOKEN,VLLM_API_KEY"] == secret_table.digest(KEY, {"HF_TOKEN": "hf_x", "VLLM_API_KEY": "k"})
    assert secret_table.digests(b"other" * 8, values) != out
    assert SENTINEL not in json.dumps(out)


def test_a_mooncake_deployment_hands_the_redis_password_to_its_master_store_and_engines(cat):
    out = plan(cat, kv_hosts({"MC_REDIS_PASSWORD": SENTINEL, "VLLM_API_KEY": "k"}))
    engine = by_kind(out["a"])["vllm"]
    master, store, router = (by_kind(out["m"])[k] for k in ("mooncake_master", "mooncake_store", "router"))
    assert engine["secret_env"] == ["MC_REDIS_PASSWORD", "VLLM_API_KEY"]
    assert master["secret_env"] == store["secret_env"] == ["MC_REDIS_PASSWORD"] and router["secret_env"] == []
    assert out["m"]["secret_vars"] == {"MC_REDIS_PASSWORD": "vllm_fleet_mooncake_redis_password"}
    assert out["a"]["secret_vars"] == {"MC_REDIS_PASSWORD": "vllm_fleet_mooncake_redis_password",
                                       "VLLM_API_KEY": "vllm_fleet_api_key"}
    text = json.dumps(out)
    assert SENTINEL not in text and "MC_REDIS_PASSWORD" not in json.dumps([f["content"] for f in out["m"]["files"]])


def test_a_uv_mooncake_engine_gets_the_token_as_a_file_and_the_password_in_its_env_file(cat):
    out = plan(cat, kv_hosts({"MC_REDIS_PASSWORD": SENTINEL, "HF_TOKEN": "hf_x"}, runtime="uv"))
    engine = by_kind(out["a"])["vllm"]
    assert engine["secret_env"] == ["MC_REDIS_PASSWORD"]
    assert [c["secret"] for c in engine["credentials"]] == ["HF_TOKEN"]
    assert out["a"]["secret_vars"] == {"HF_TOKEN": "vllm_fleet_hf_token",
                                       "MC_REDIS_PASSWORD": "vllm_fleet_mooncake_redis_password"}


def test_rotating_the_redis_password_redeploys_what_uses_it_and_nothing_else(cat):
    before_kv = plan(cat, kv_hosts({"MC_REDIS_PASSWORD": "one", "VLLM_API_KEY": "k"}))
    after_kv = plan(cat, kv_hosts({"MC_REDIS_PASSWORD": "two", "VLLM_API_KEY": "k"}))
    for host, kind in (("a", "vllm"), ("m", "mooncake_master"), ("m", "mooncake_store")):
        assert by_kind(before_kv[host])[kind]["hash"] != by_kind(after_kv[host])[kind]["hash"], (host, kind)
    assert by_kind(before_kv["m"])["router"]["hash"] == by_kind(after_kv["m"])["router"]["hash"]
    # a deployment without Mooncake: the password (set fleet-wide, say) is not its secret
    seed = [plan(cat, seed_host(values))["s"] for values in
            ({"VLLM_API_KEY": "k"}, {"VLLM_API_KEY": "k", "MC_REDIS_PASSWORD": "one"},
             {"VLLM_API_KEY": "k", "MC_REDIS_PASSWORD": "two"})]
    assert seed[0]["hash"] == seed[1]["hash"] == seed[2]["hash"]
    assert seed[1]["secret_vars"] == {"VLLM_API_KEY": "vllm_fleet_api_key"}
    # and rotating the API key changes the engine, not the Mooncake services
    rotated = plan(cat, kv_hosts({"MC_REDIS_PASSWORD": "one", "VLLM_API_KEY": "k2"}))
    assert by_kind(rotated["a"])["vllm"]["hash"] != by_kind(before_kv["a"])["vllm"]["hash"]
    assert by_kind(rotated["m"])["mooncake_master"]["hash"] == by_kind(before_kv["m"])["mooncake_master"]["hash"]
