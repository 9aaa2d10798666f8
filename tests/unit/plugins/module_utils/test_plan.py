"""Placement: instances, ranks, placeholders, operator additions, plan-time errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_fleet import loader
from vllm_fleet.plan import HostInput, PlanError, plan, plan_fleet
from vllm_fleet.planmodel import COMPILE_CACHE_ROOT, plan_hash
from vllm_fleet.planargv import flag_values_list, substitute
from vllm_fleet.rollout import rollout

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
    # the recipe's command, with vLLM's graceful stop (vllm_fleet_drain_timeout) after the model;
    # by default (vllm_fleet_model_source hub) the model is the staged snapshot, served offline
    # under the recipe's model id
    staged = "/var/lib/vllm-fleet/models/baidu--ERNIE-4.5-VL-28B-A3B-PT--main"
    assert proc["argv"] == ["vllm", "serve", staged, "--shutdown-timeout", "120", "--trust-remote-code",
                            "--tensor-parallel-size", "1", "--mm-encoder-tp-mode", "data", "--served-model-name", SEED]
    assert out["a"]["stage"]["source"] == "hub" and out["a"]["stage"]["dir"] == staged
    assert proc["stop_timeout"] == 150 and out["a"]["drain_timeout"] == 120
    # without staging (none): exactly the recipe's command, the server resolves the model itself
    unstaged = plan(cat, [host("a", model_source="none")])["a"]
    assert unstaged["processes"][0]["argv"] == ["vllm", "serve", SEED, "--shutdown-timeout", "120", "--trust-remote-code",
                                                "--tensor-parallel-size", "1", "--mm-encoder-tp-mode", "data"]
    assert unstaged.get("stage") is None and "HF_HUB_OFFLINE" not in unstaged["processes"][0]["env"]
    # its compile cache on the host: per deployment and vLLM build (here the image)
    cache = "/var/lib/vllm-fleet/compile-cache/ernie-4-5-vl-28b-a3b-pt-h200/" + plan_hash(
        {"runtime": "docker", "image": "vllm/vllm-openai:latest", "version": None, "brand": "nvidia"})[:12]
    assert proc["env"] == {"HF_HUB_OFFLINE": "1", "VLLM_CACHE_ROOT": cache} and proc["compile_cache"] == cache
    assert out["b"]["processes"][0]["compile_cache"] == cache
    assert proc["image"] == "vllm/vllm-openai:latest"
    assert proc["port"] == 8000 and proc["serves_http"] is True
    assert out["a"]["accelerator"] == "cuda" and out["a"]["strategy"] == "single_node_tp"
    # two instances of one deployment: named apart (unique across the fleet)
    assert out["a"]["processes"][0]["name"] == "vllm-fleet-ernie-4-5-vl-28b-a3b-pt-h200-i0"
    assert out["b"]["processes"][0]["name"] == "vllm-fleet-ernie-4-5-vl-28b-a3b-pt-h200-i1"


def test_compile_cache_is_one_per_deployment_and_vllm_build(cat):
    def cache(**settings):
        return plan(cat, [host("a", **settings)])["a"]["processes"][0]

    base = cache()
    assert base["compile_cache"].startswith(f"{COMPILE_CACHE_ROOT}/ernie-4-5-vl-28b-a3b-pt-h200/")
    # the same build: the same directory at every plan (a restart reuses it); settings that do
    # not change the build leave it alone
    assert cache()["compile_cache"] == base["compile_cache"]
    assert cache(extra_args=["--max-model-len", "4096"])["compile_cache"] == base["compile_cache"]
    # a new vLLM build (another image, another pinned version) starts from an empty one
    assert cache(image_tag="v0.32.0")["compile_cache"] != base["compile_cache"]
    uv1, uv2 = cache(runtime="uv", vllm_version="0.32.0"), cache(runtime="uv", vllm_version="0.33.0")
    assert len({uv1["compile_cache"], uv2["compile_cache"], base["compile_cache"]}) == 3
    assert uv1["env"]["VLLM_CACHE_ROOT"] == uv1["compile_cache"]
    # its own deployment's: two deployments never share one
    assert cache(deployment="other")["compile_cache"].startswith(f"{COMPILE_CACHE_ROOT}/other/")
    # the operator's VLLM_CACHE_ROOT wins: the roles then manage no directory (left out of the plan)
    own = cache(env={"VLLM_CACHE_ROOT": "/scratch/vllm"})
    assert own["env"]["VLLM_CACHE_ROOT"] == "/scratch/vllm" and "compile_cache" not in own


def test_rocm_hosts_get_the_rocm_image(cat):
    out = plan(cat, [host("m", hw="mi300x")])
    assert out["m"]["accelerator"] == "rocm"
    assert out["m"]["processes"][0]["image"] == "vllm/vllm-openai-rocm:latest"


def test_multi_node_instances_ranks_and_placeholders(cat):
    hosts = [host(f"n{i}", address=f"10.9.0.{i + 1}", iface=f"ens{i}", strategy="multi_node_tp", nodes=2,
                  model_source="none") for i in range(4)]
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
                                                "VLLM_HOST_IP": "10.9.0.2",
                                                "VLLM_CACHE_ROOT": out["n1"]["processes"][0]["compile_cache"]}
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
    h = HostInput(name="a", settings={"recipe": SEED}, gpu={"brand": "cpu", "cpu_model": "Intel(R) Xeon(R) Processor"})
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
    out = plan(cat, [host("a", secrets=["HF_TOKEN", "VLLM_API_KEY"])])
    proc = out["a"]["processes"][0]
    assert proc["secret_env"] == ["HF_TOKEN", "VLLM_API_KEY"] and proc["credentials"] == []   # docker
    assert "HF_TOKEN" not in proc["env"] and out["a"]["secret_files"] == []


def test_uv_units_get_the_hf_token_as_a_file(cat):
    out = plan(cat, [host("a", secrets=["HF_TOKEN", "VLLM_API_KEY"], runtime="uv", vllm_version="0.32.0")])
    proc = out["a"]["processes"][0]
    # the API key goes in the environment (vLLM reads only that); the HF token as a file
    assert proc["secret_env"] == ["VLLM_API_KEY"] and "HF_TOKEN" not in proc["env"]
    assert proc["credentials"] == [{"secret": "HF_TOKEN", "name": "hf_token", "env": "HF_TOKEN_PATH",
                                    "var": "vllm_fleet_hf_token", "path": f"/etc/vllm-fleet/{out['a']['deployment']}/secrets/hf_token"}]
    assert out["a"]["secret_files"] == proc["credentials"]


def test_a_host_without_secrets_has_no_secret_files(cat):
    out = plan(cat, [host("a")])
    assert out["a"]["secret_files"] == [] and out["a"]["processes"][0]["credentials"] == []


def test_unresolved_placeholder_names_host_and_variable(cat):
    hosts = [host("a", address=None, iface=None, strategy="multi_node_tp", nodes=2),
             host("b", address="10.0.0.2", iface=None, strategy="multi_node_tp", nodes=2)]
    with pytest.raises(PlanError) as err:
        plan(cat, hosts)
    text = str(err.value)
    assert "a: vllm_fleet_address: no address (multi-node rendezvous" in text
    assert "placeholder $IFACE_NAME" in text and "vllm_fleet_iface" in text


def test_substitute_longest_name_and_boundaries():
    text, missing = substitute("$HEAD_IP:$HEAD_IPX/$IFACE_NAME", {"HEAD_IP": "1.2.3.4", "IFACE_NAME": "eth0"})
    assert text == "1.2.3.4:$HEAD_IPX/eth0" and missing == ["HEAD_IPX"]


# ---------------------------------------------------------------------------------
# P/D, Mooncake, rollout order

DS = "deepseek-ai/DeepSeek-V3"


def ds(name, address, roles=(), gpu=True, **settings):
    base = {"recipe": DS}
    base.update(settings)
    return HostInput(name=name, settings=base, address=address, iface="eth0",
                     gpu={"hardware": "h200", "count": 8} if gpu else {"brand": "none"},
                     roles=list(roles))


def flag(argv, name):
    return argv[argv.index(name) + 1]


def pd_hosts(**settings):
    settings.setdefault("strategy", "pd_cluster")
    return [ds("p1", "10.0.0.1", ["prefill"], **settings), ds("p2", "10.0.0.2", ["prefill"], **settings),
            ds("d1", "10.0.0.3", ["decode"], **settings),
            ds("r", "10.0.0.9", ["router"], gpu=False, **settings)]


def test_pd_pools_ranks_and_router_endpoints(cat):
    out = plan(cat, pd_hosts(pd_nodes={"prefill": {"parallelism": "dep"}}))
    p1, p2 = out["p1"]["processes"][0], out["p2"]["processes"][0]
    d1, router = out["d1"]["processes"][0], out["r"]["processes"][0]
    assert [flag(p["argv"], "--data-parallel-start-rank") for p in (p1, p2)] == ["0", "8"]
    assert flag(p2["argv"], "--data-parallel-address") == "10.0.0.1"
    assert flag(p2["argv"], "--data-parallel-rpc-port") == "29550"
    assert flag(p1["argv"], "--data-parallel-size") == "16" and "--data-parallel-hybrid-lb" in p1["argv"]
    assert p1["port"] == p2["port"] == 8001 and d1["port"] == 8002
    # the NIXL side channel binds on each node's own address; NICs per node
    assert [p["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] for p in (p1, p2, d1)] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert p2["env"]["GLOO_SOCKET_IFNAME"] == "eth0" and p2["env"]["VLLM_HOST_IP"] == "10.0.0.2"
    assert flag(d1["argv"], "--tensor-parallel-size") == "8" and "GLOO_SOCKET_IFNAME" not in d1["env"]
    assert router["argv"] == ["vllm-router", "--policy", "round_robin", "--vllm-pd-disaggregation",
                              "--prefill", "http://10.0.0.1:8001", "--prefill", "http://10.0.0.2:8001",
                              "--decode", "http://10.0.0.3:8002", "--host", "0.0.0.0", "--port", "8000",
                              "--intra-node-data-parallel-size", "8",
                              # its metrics where Prometheus scrapes them (planargv.router_metrics)
                              "--prometheus-host", "0.0.0.0", "--prometheus-port", "29000"]
    assert router["runtime"] == "service" and router["packages"] == ["vllm-router"]
    assert out["r"]["accelerator"] == "none" and out["r"]["phases"] == ["router"] and out["r"]["batch"] is None
    assert out["p2"]["instance_hosts"] == ["p1", "p2", "d1"] and out["p2"]["node_rank"] == 1
    assert rollout(out) == {"order": ["d1", "p1", "p2"], "serial": [3]}


def test_pd_tp_pool_workers_are_headless_and_router_defaults_to_the_prefill_head(cat):
    hosts = [h for h in pd_hosts(router_port=9000) if h.name != "r"]
    out = plan(cat, hosts)
    p1, p2 = out["p1"]["processes"], out["p2"]["processes"]
    assert "--headless" in p2[0]["argv"] and not p2[0]["serves_http"]
    assert flag(p2[0]["argv"], "--master-addr") == "10.0.0.1" and flag(p2[0]["argv"], "--node-rank") == "1"
    assert [p["kind"] for p in p1] == ["vllm", "router"]
    assert p1[1]["argv"][4:8] == ["--prefill", "http://10.0.0.1:8001", "--decode", "http://10.0.0.3:8002"]
    assert flag(p1[1]["argv"], "--port") == "9000" and out["p1"]["phases"] == ["engine", "router"]


def test_pd_colocated_on_one_host(cat):
    out = plan(cat, [ds("solo", "10.0.0.5", strategy="pd_cluster")])
    procs = out["solo"]["processes"]
    assert [p["role"] for p in procs] == ["prefill", "decode", "router"]
    assert procs[0]["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and procs[1]["env"]["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert "http://10.0.0.5:8001" in procs[2]["argv"] and "http://10.0.0.5:8002" in procs[2]["argv"]
    assert len({p["name"] for p in procs}) == 3


def test_pd_inventory_errors(cat):
    with pytest.raises(PlanError, match="set vllm_fleet_role prefill or decode"):
        plan(cat, [ds("a", "10.0.0.1", strategy="pd_cluster"), ds("b", "10.0.0.2", strategy="pd_cluster")])
    with pytest.raises(PlanError, match=r"vllm_fleet_pd_nodes.prefill asks for 3 nodes .* has 2 host"):
        plan(cat, pd_hosts(pd_nodes={"prefill": 3}))
    with pytest.raises(PlanError, match=r"no host with vllm_fleet_role decode"):
        plan(cat, [h for h in pd_hosts() if h.name != "d1"])
    with pytest.raises(PlanError, match=r"a: vllm_fleet_role 'prefill' does not apply to strategy 'single_node_tp'"):
        plan(cat, [ds("a", "10.0.0.1", ["prefill"], strategy="single_node_tp")])
    with pytest.raises(PlanError, match=r"a: vllm_fleet_role: unknown role\(s\) 'leader'"):
        plan(cat, [ds("a", "10.0.0.1", ["leader"], strategy="single_node_tp")])


def kv_hosts(kv="kv_store_centralized_mooncake", **settings):
    settings.setdefault("strategy", "single_node_tp")
    return [ds("a", "10.0.1.1", kv_offload=kv, **settings), ds("b", "10.0.1.2", kv_offload=kv, **settings),
            ds("m", "10.0.1.9", ["master", "store", "router"], gpu=False, kv_offload=kv, **settings)]


def test_mooncake_centralized_services_configs_and_router(cat):
    import json
    out = plan(cat, kv_hosts(mooncake_config={"protocol": "tcp"}, mooncake_store_config={"global_segment_size": "1GB"}))
    a, b, m = out["a"], out["b"], out["m"]
    assert a["processes"][0]["name"] != b["processes"][0]["name"]
    config = json.loads(a["files"][0]["content"])
    assert a["files"][0]["path"] == "/etc/vllm-fleet/deepseek-v3-h200/mooncake.json"
    assert config["master_server_address"] == "10.0.1.9:50051" and config["protocol"] == "tcp"
    assert config["global_segment_size"] == 0 and config["device_name"] == ""
    assert a["processes"][0]["env"]["MOONCAKE_CONFIG_PATH"] == a["files"][0]["path"]
    assert a["processes"][0]["env"]["PYTHONHASHSEED"] == "0"
    assert a["processes"][0]["mounts"] == ["/etc/vllm-fleet/deepseek-v3-h200"]
    assert a["processes"][0]["packages"] == ["mooncake-transfer-engine>=0.3.10"]
    assert [p["kind"] for p in m["processes"]] == ["mooncake_master", "mooncake_store", "router"]
    master, store, router = m["processes"]
    assert master["argv"][0] == "mooncake_master" and master["port"] == 50051 and master["phase"] == "services"
    assert master["health"] == {"kind": "http", "port": 9003}
    assert json.loads(m["files"][0]["content"])["local_hostname"] == "10.0.1.9"
    assert store["argv"] == ["python3", "-m", "mooncake.mooncake_store_service", "--config",
                             "/etc/vllm-fleet/deepseek-v3-h200/mooncake-store.json"]
    assert json.loads(m["files"][0]["content"])["global_segment_size"] == "1GB"
    assert json.loads(m["files"][0]["content"])["protocol"] == "tcp"
    assert master["packages"] == ["mooncake-transfer-engine-non-cuda>=0.3.10"]  # no GPU on m
    assert router["argv"][:6] == ["vllm-router", "--policy", "cache_aware", "--worker-urls",
                                  "http://10.0.1.1:8000", "http://10.0.1.2:8000"]
    assert flag(router["argv"], "--port") == "30080" and m["phases"] == ["services", "router"]
    assert (a["instance_name"], b["instance_name"], a["instance_hosts"]) == ("i0", "i1", ["a"])


def test_mooncake_defaults_and_errors(cat):
    hosts = [h for h in kv_hosts("kv_store_distributed_mooncake") if h.name != "m"]
    out = plan(cat, hosts)
    kinds = [p["kind"] for p in out["a"]["processes"]]
    assert kinds == ["vllm", "mooncake_master", "router"]  # master and router default to instance 1's head
    with pytest.raises(PlanError, match="runs no store service"):
        plan(cat, kv_hosts("kv_store_distributed_mooncake"))
    with pytest.raises(PlanError, match="vllm_fleet_kv_instances is 3 but the inventory"):
        plan(cat, kv_hosts(kv_instances=3))
    with pytest.raises(PlanError, match="one instance has no router"):
        plan(cat, [hosts[0], ds("r", "10.0.1.8", ["router"], gpu=False, kv_offload="kv_store_distributed_mooncake",
                                strategy="single_node_tp")])


def test_mooncake_multi_node_instances_rendezvous_at_their_heads(cat):
    hosts = [ds(f"n{i}", f"10.0.2.{i + 1}", kv_offload="kv_store_distributed_mooncake",
                strategy="multi_node_tp", nodes=2) for i in range(4)]
    out = plan(cat, hosts)
    assert flag(out["n1"]["processes"][0]["argv"], "--master-addr") == "10.0.2.1"
    assert flag(out["n3"]["processes"][0]["argv"], "--master-addr") == "10.0.2.3"
    router = next(p for p in out["n0"]["processes"] if p["kind"] == "router")
    assert router["argv"][3:6] == ["--worker-urls", "http://10.0.2.1:8000", "http://10.0.2.3:8000"]


def test_rollout_batches_by_instance(cat):
    hosts = [host(f"n{i}", address=f"10.9.0.{i + 1}", strategy="multi_node_tp", nodes=2, rollout_batch=1)
             for i in range(6)]
    hosts[0].node_rank, hosts[1].node_rank = 1, 0
    out = plan(cat, hosts)
    assert [out[f"n{i}"]["batch"] for i in range(6)] == [0, 0, 1, 1, 2, 2]
    assert rollout(out) == {"order": ["n1", "n0", "n2", "n3", "n4", "n5"], "serial": [2, 2, 2]}
    names = {out[f"n{i}"]["processes"][0]["name"] for i in range(6)}
    assert len(names) == 6  # instances never share a process name
    # default: a canary instance, then batches of 25 % of the instances
    assert rollout(plan(cat, [host("x"), host("y")])) == {"order": ["x", "y"], "serial": [1, 1]}
    eight = plan(cat, [host(f"h{i}") for i in range(8)])
    assert rollout(eight)["serial"] == [1, 2, 2, 2, 1]
    assert rollout(plan(cat, [host("x", rollout_batch="100%"), host("y", rollout_batch="100%")]))["serial"] == [2]
    assert rollout(plan(cat, [host(f"h{i}", rollout_batch=[2, "50%"]) for i in range(6)]))["serial"] == [2, 3, 1]


@pytest.mark.parametrize("strategy,source,model", [
    ("multi_node_tp", "recipes", DS), ("multi_node_tep", "recipes", DS), ("multi_node_tp_pp", "recipes", DS),
    ("multi_node_dep", "recipes", DS), ("multi_node_tp_dp", "fixtures", "test-org/Moe-Model")])
def test_every_multi_node_strategy_gets_ranks_and_the_head_address(strategy, source, model):
    tree = ROOT / "recipes" if source == "recipes" else ROOT / "tests" / "fixtures" / "tree"
    catalog = loader.load([tree])
    hw = "h200" if source == "recipes" else next(iter(catalog.profiles))
    hosts = [HostInput(name=f"n{i}", settings={"recipe": model, "hardware": hw, "strategy": strategy, "nodes": 2},
                       address=f"10.7.0.{i + 1}", iface=f"ib{i}", gpu={"hardware": hw}) for i in range(2)]
    out = plan(catalog, hosts)
    for rank in range(2):
        proc = out[f"n{rank}"]["processes"][0]
        argv, env = proc["argv"], proc["env"]
        assert not [t for t in argv if "$" in t] and not [v for v in env.values() if "$" in v]
        address = _value(argv, "--master-addr") or _value(argv, "--data-parallel-address")
        assert address == "10.7.0.1"
        if "--node-rank" in argv:
            assert _value(argv, "--node-rank") == str(rank) and ("--headless" in argv) == (rank > 0)
        else:
            local = int(_value(argv, "--data-parallel-size-local"))
            assert int(_value(argv, "--data-parallel-start-rank") or 0) == rank * local
            assert proc["serves_http"]  # DP ranks each run an API server on their node
        assert env["VLLM_HOST_IP"] == f"10.7.0.{rank + 1}" and env["NCCL_SOCKET_IFNAME"] == f"ib{rank}"
        assert out[f"n{rank}"]["node_rank"] == rank


def _value(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def test_host_env_may_differ_per_host_and_wins(cat):
    hosts = [host(f"n{i}", address=f"10.9.0.{i + 1}", strategy="multi_node_tp", nodes=2,
                  env={"A": "deployment"}, host_env={"VLLM_CPU_OMP_THREADS_BIND": str(i), "A": f"host{i}"})
             for i in range(2)]
    out = plan(cat, hosts)
    assert [out[f"n{i}"]["processes"][0]["env"]["VLLM_CPU_OMP_THREADS_BIND"] for i in range(2)] == ["0", "1"]
    assert out["n1"]["processes"][0]["env"]["A"] == "host1"


def test_process_names_come_from_one_function():
    from vllm_fleet.planmodel import process_name

    assert process_name("minilm") == "vllm-fleet-minilm"
    assert process_name("dsv3-pd", "prefill0") == "vllm-fleet-dsv3-pd-prefill0"
    for bad in ("..", "a/b", "x\ny", "", "A"):
        with pytest.raises(PlanError, match="not a safe name"):
            process_name(bad)
    with pytest.raises(PlanError):
        process_name("ok", "../etc")


def test_listen_binds_the_server_and_moves_the_probes(cat):
    out = plan(cat, [host("a", listen="localhost", model_source="none"),
                     host("b", address="10.0.0.2", listen="10.0.0.2", model_source="none"), host("d", model_source="none")])
    out.update(plan(cat, [host("c", secrets=["VLLM_API_KEY"], model_source="none")]))
    a, b, c, d = (out[h]["processes"][0] for h in "abcd")
    assert a["argv"][-2:] == ["--host", "127.0.0.1"] and a["probe_host"] == "127.0.0.1" and a["bind"] == "127.0.0.1"
    assert b["argv"][-2:] == ["--host", "10.0.0.2"] and b["probe_host"] == "10.0.0.2"
    assert "--host" not in d["argv"] and d["bind"] is None and d["probe_host"] == "127.0.0.1"
    # beyond localhost with no API key: named for the run summary's warning
    assert out["a"]["exposed"] == [] and out["c"]["exposed"] == []
    assert out["b"]["exposed"] == [b["name"]] and out["d"]["exposed"] == [d["name"]]


def test_extra_args_host_moves_the_probes_too(cat):
    proc = plan(cat, [host("a", extra_args=["--host", "10.1.2.3"])])["a"]["processes"][0]
    assert proc["probe_host"] == "10.1.2.3"


def test_listen_on_an_address_the_host_does_not_have_is_refused(cat):
    from dataclasses import replace
    bad = replace(host("a", address="10.0.0.2", listen="10.0.0.9"), addresses=["10.0.0.2", "172.17.0.5"])
    with pytest.raises(PlanError) as err:
        plan(cat, [bad])
    assert "a: vllm_fleet_listen: 10.0.0.9 is not an address of this host (it has 10.0.0.2, 172.17.0.5)" in str(err.value)
    ok = replace(host("a", address="10.0.0.2", listen="172.17.0.5"), addresses=["10.0.0.2", "172.17.0.5"])
    assert plan(cat, [ok])["a"]["processes"][0]["probe_host"] == "172.17.0.5"


# --- GPU sets (vllm_fleet_gpus): several deployments on one machine ---------------------------
def on(machine, name, deployment, port, gpus=None, hw="h200", **settings):
    # one server per host unless a test asks for replicas (the default, auto, fills the host:
    # see the replica tests below)
    settings.setdefault("replicas_per_host", 1)
    base = {"recipe": SEED, "hardware": hw, "deployment": deployment, "port": port, **settings}
    if gpus is not None:
        base["gpus"] = gpus
    brand = "amd" if hw == "mi300x" else "nvidia"
    return HostInput(name=name, settings=base, address="10.0.0.1", iface="eth0", machine=machine,
                     gpu={"hardware": hw, "count": 8, "brand": brand})


def test_two_deployments_share_a_machine_on_disjoint_gpus(cat):
    plans, problems = plan_fleet(cat, [on("m1", "ernie-a", "ernie", 8000, [0, 1, 2, 3]),
                                       on("m1", "ernie-b", "other", 8001, [4, 5, 6, 7])])
    assert problems == []
    a, b = (plans[h]["processes"][0] for h in ("ernie-a", "ernie-b"))
    assert (a["gpus"], b["gpus"]) == ([0, 1, 2, 3], [4, 5, 6, 7])
    # NVIDIA containers get the set as device_ids (numbered from 0 inside): no variable
    assert "CUDA_VISIBLE_DEVICES" not in a["env"]
    # the recipe's own command on each: only the second one's port differs
    seed = plan(cat, [host("x")])["x"]["processes"][0]["argv"]
    assert a["argv"] == seed and b["argv"] == seed + ["--port", "8001"]


def test_an_overlapping_gpu_is_refused_naming_both_deployments_and_the_gpu(cat):
    _, problems = plan_fleet(cat, [on("m1", "ernie-a", "ernie", 8000, [0, 1, 2, 3]), on("m1", "ernie-b", "other", 8001, [4, 5, 6, 7]),
                                   on("m1", "third", "third", 8002, [3])])
    assert problems == ["third: vllm_fleet_gpus: GPU 3 of machine m1 would serve two deployments: 'ernie' "
                        "(host ernie-a, GPUs 0-3) and 'third' (host third, GPU 3); give each deployment its own "
                        "vllm_fleet_gpus"]
    # unset means every GPU: it overlaps any set on the machine
    _, problems = plan_fleet(cat, [on("m1", "ernie-a", "ernie", 8000), on("m1", "ernie-b", "other", 8001, [7])])
    assert len(problems) == 1 and "GPU 7 of machine m1" in problems[0] and \
        "every GPU (vllm_fleet_gpus unset)" in problems[0], problems
    # other machines do not share GPUs
    _, problems = plan_fleet(cat, [on("m1", "ernie-a", "ernie", 8000), on("m2", "ernie-b", "other", 8000)])
    assert problems == []


def test_gpu_sets_checked_against_the_host_the_command_and_the_env(cat):
    with pytest.raises(PlanError, match=r"ernie-a: vllm_fleet_gpus: GPU 8, 9 does not exist: the host has 8 GPUs \(0-7\)"):
        plan(cat, [on("m1", "ernie-a", "ernie", 8000, [7, 8, 9])])
    with pytest.raises(PlanError, match=r"the command needs 2 GPUs per node .* but vllm_fleet_gpus gives it 1"):
        plan(cat, [on("m1", "ernie-a", "ernie", 8000, [0], extra_args=["--tensor-parallel-size", "2"])])
    with pytest.raises(PlanError, match=r"vllm_fleet_env: CUDA_VISIBLE_DEVICES contradicts vllm_fleet_gpus"):
        plan(cat, [on("m1", "ernie-a", "ernie", 8000, [0], env={"CUDA_VISIBLE_DEVICES": "1"})])
    with pytest.raises(PlanError, match=r"d1: vllm_fleet_gpus: does not apply to P/D deployments"):
        hosts = pd_hosts()
        hosts[2].settings["gpus"] = [0, 1]
        plan(cat, hosts)


def test_units_and_rocm_containers_see_their_gpus_through_the_variable(cat):
    uv = plan(cat, [on("m1", "a", "ernie", 8000, [2, 3], runtime="uv", vllm_version="0.32.0")])["a"]["processes"][0]
    assert uv["env"]["CUDA_VISIBLE_DEVICES"] == "2,3" and uv["gpus"] == [2, 3]
    rocm = plan(cat, [on("m1", "a", "ernie", 8000, [5], hw="mi300x")])["a"]["processes"][0]
    assert rocm["env"]["HIP_VISIBLE_DEVICES"] == "5" and rocm["gpus"] == [5]
    # a plan without a GPU set has no gpus key: plans (and hashes) of existing deployments stay as they were
    assert "gpus" not in plan(cat, [host("x")])["x"]["processes"][0]


def test_gpu_ranges():
    from vllm_fleet.topology import ranges as gpu_ranges
    assert gpu_ranges([0, 1, 2, 3, 6, 8, 9]) == "0-3,6,8-9" and gpu_ranges([4]) == "4"


def _facts(count, gib_each=141.0, hw="h200", brand="nvidia"):
    return {"hardware": hw, "count": count, "brand": brand, "names": ["NVIDIA H200"] * count,
            "total_memory_gib": gib_each * count}


def test_gpu_count_and_memory_are_checked_against_the_facts_for_every_host(cat):
    # fewer GPUs than the profile: refused naming host, hardware and counts; every host at once
    short = [host("a"), host("b"), host("c")]
    short[0].gpu, short[1].gpu, short[2].gpu = _facts(8), _facts(0, brand="none"), _facts(4)
    with pytest.raises(PlanError) as exc:
        plan(cat, short)
    assert exc.value.problems == [
        "b: vllm_fleet_hardware h200 means 8 GPUs per node, but 0 were detected",
        "c: vllm_fleet_hardware h200 means 8 GPUs per node, but 4 were detected (NVIDIA H200)"]
    # the 424b variant (1120 GB, TP 8): 8 x 141 GiB = 1211 GB fits; 4 visible (count check off) do not
    ok = host("a", variant="424b")
    ok.gpu = _facts(8)
    assert plan(cat, [ok])["a"]["vram_minimum_gb"] == 1120
    half = HostInput(name="h", settings={"recipe": SEED, "hardware": "h200", "variant": "424b"},
                     address=None, iface="eth0", gpu=_facts(4), check_gpus=False)
    with pytest.raises(PlanError, match=r"\nh: variant 424b of baidu/ERNIE-4.5-VL-28B-A3B-PT needs 1120 GB of GPU "
                                        r"memory; 1 node\(s\) with 564 GiB each do not have it"):
        plan(cat, [half])
    # GiB vs GB: 1043 GiB is 1119.9 GB (refused), 1044 GiB is 1121.0 GB (fits)
    for gib, fits in ((1043.0, False), (1044.0, True)):
        h = HostInput(name="h", settings={"recipe": SEED, "hardware": "h200", "variant": "424b"}, address=None,
                      iface="eth0", gpu=dict(_facts(8), total_memory_gib=gib))
        if fits:
            plan(cat, [h])
        else:
            with pytest.raises(PlanError, match="needs 1120 GB"):
                plan(cat, [h])
    # a GPU set gets its share of the memory: the default variant (67 GB) on 1 of 8 GPUs fits
    one = on("m1", "one", "ernie", 8000, [3])
    one.gpu = _facts(8)
    assert plan(cat, [one])["one"]["processes"][0]["gpus"] == [3]
    small = on("m1", "one", "ernie", 8000, [3])
    small.gpu = _facts(8, gib_each=40.0)
    with pytest.raises(PlanError, match=r"one: variant default .* needs 67 GB of GPU memory; 1 node\(s\) with 40 GiB "
                                        r"each on vllm_fleet_gpus 3 do not have it"):
        plan(cat, [small])
    # both checks can be turned off per host; facts that were not read are not judged
    off = HostInput(name="h", settings={"recipe": SEED, "hardware": "h200"}, address=None,
                    iface="eth0", gpu=_facts(4, gib_each=1.0), check_gpus=False, check_vram=False)
    assert plan(cat, [off])["h"]["gpu_count"] == 8
    unread = HostInput(name="h", settings={"recipe": SEED, "hardware": "h200"}, address=None, iface="eth0", gpu={})
    assert plan(cat, [unread])["h"]["hardware"] == "h200"


def test_gpus_no_server_uses_are_named_per_machine(cat):
    # the seed's TP 1 command alone on an 8-GPU host: GPU 0 serves, 1-7 idle
    plans, problems = plan_fleet(cat, [on("m1", "a", "ernie", 8000)])
    assert problems == [] and plans["a"]["gpus_idle"] == [1, 2, 3, 4, 5, 6, 7]
    # two deployments on GPU sets of one machine: what neither takes; both covering it: nothing
    plans, _ = plan_fleet(cat, [on("m1", "lo", "lo", 8000, [0, 1]), on("m1", "hi", "hi", 8001, [4, 5, 6, 7])])
    assert plans["lo"]["gpus_idle"] == plans["hi"]["gpus_idle"] == [2, 3]
    plans, _ = plan_fleet(cat, [on("m1", "lo", "lo", 8000, [0, 1, 2, 3]), on("m1", "hi", "hi", 8001, [4, 5, 6, 7])])
    assert "gpus_idle" not in plans["lo"] and "gpus_idle" not in plans["hi"]
    # TP 8 takes the whole host; a CPU host and facts without a count are not judged
    plans, _ = plan_fleet(cat, [on("m1", "a", "ernie", 8000, extra_args=["--tensor-parallel-size", "8"])])
    assert "gpus_idle" not in plans["a"]
    unread = HostInput(name="u", settings={"recipe": SEED, "hardware": "h200"}, address="10.0.0.1", iface="eth0", gpu={})
    assert "gpus_idle" not in plan_fleet(cat, [unread])[0]["u"]


def _replicas(host_plan):
    return [(p["name"], p.get("gpus"), p["port"], p["argv"]) for p in host_plan["processes"]]


def test_auto_replicas_put_one_seed_server_on_every_gpu_of_an_h200_host(cat):
    seed = plan(cat, [host("x")])["x"]["processes"][0]["argv"]
    for hw in ("h200", "mi300x"):
        plans, problems = plan_fleet(cat, [on("m1", "a", "ernie", 8000, hw=hw, replicas_per_host="auto")])
        assert problems == [] and "gpus_idle" not in plans["a"]
        got = _replicas(plans["a"])
        assert [g[0] for g in got] == [f"vllm-fleet-ernie-r{i}" for i in range(8)]
        assert [g[1] for g in got] == [[i] for i in range(8)]          # disjoint, in order
        assert [g[2] for g in got] == list(range(8000, 8008))
        assert [g[3] for g in got] == [seed + ["--port", str(8000 + i)] for i in range(8)]
        envs = [p["env"] for p in plans["a"]["processes"]]
        if hw == "mi300x":   # ROCm containers see their GPU through the variable
            assert [e["HIP_VISIBLE_DEVICES"] for e in envs] == [str(i) for i in range(8)]
        else:                # NVIDIA containers get device_ids (numbered from 0 inside)
            assert not any("CUDA_VISIBLE_DEVICES" in e for e in envs)
    # every replica is one health-gated, drained, recorded process of the host's plan
    assert plans["a"]["health"]["port"] == 8000 and len({p["hash"] for p in plans["a"]["processes"]}) == 8


def test_replicas_split_a_gpu_set_by_the_command_and_a_router_lists_every_one(cat):
    tp2 = on("m1", "a", "ernie", 8000, [2, 3, 4, 5, 6, 7], replicas_per_host="auto",
             extra_args=["--tensor-parallel-size", "2"])
    router = HostInput(name="r", settings={"recipe": SEED, "hardware": "h200", "deployment": "ernie", "port": 8000,
                                           "extra_args": ["--tensor-parallel-size", "2"],
                                           "replicas_per_host": "auto", "gpus": [2, 3, 4, 5, 6, 7]},
                       address="10.0.0.9", iface="eth0", machine="m9", roles=["router"])
    plans, problems = plan_fleet(cat, [tp2, router])
    assert problems == [], problems
    assert [(g[1], g[2]) for g in _replicas(plans["a"])] == [([2, 3], 8000), ([4, 5], 8001), ([6, 7], 8002)]
    argv = plans["r"]["processes"][0]["argv"]
    assert flag_values_list(argv, "--worker-urls") == [f"http://10.0.0.1:{p}" for p in (8000, 8001, 8002)]
    assert all(p["drain"]["router_host"] == "r" for p in plans["a"]["processes"])
    # an explicit number: that many, from vllm_fleet_port up; one replica = the plan as before
    plans, _ = plan_fleet(cat, [on("m1", "a", "ernie", 9000, replicas_per_host=3)])
    assert [(g[0], g[1], g[2]) for g in _replicas(plans["a"])] == [
        ("vllm-fleet-ernie-r0", [0], 9000), ("vllm-fleet-ernie-r1", [1], 9001), ("vllm-fleet-ernie-r2", [2], 9002)]
    assert plans["a"]["gpus_idle"] == [3, 4, 5, 6, 7]
    single = plan_fleet(cat, [on("m1", "a", "ernie", 8000, replicas_per_host=1)])[0]["a"]
    unset = on("m1", "a", "ernie", 8000)
    del unset.settings["replicas_per_host"]
    unset.gpu = {"hardware": "h200", "count": 1, "brand": "nvidia"}   # auto on one GPU: one server
    unset.check_gpus = False   # (the h200 profile means 8)
    single_gpu = plan_fleet(cat, [unset])[0]["a"]
    assert single["processes"] == single_gpu["processes"] and single["hash"] == single_gpu["hash"]
    tp8 = plan_fleet(cat, [on("m1", "a", "ernie", 8000, replicas_per_host="auto",
                              extra_args=["--tensor-parallel-size", "8"])])[0]["a"]
    assert [p["name"] for p in tp8["processes"]] == ["vllm-fleet-ernie"] and "gpus" not in tp8["processes"][0]


def test_replicas_that_do_not_fit_or_do_not_apply_are_refused_naming_host_and_variable(cat):
    cases = [
        (on("m1", "a", "ernie", 8000, replicas_per_host=9),
         "a: vllm_fleet_replicas_per_host: 9 replicas x 1 GPU(s) each (tensor x pipeline x data parallel of the "
         "command) need 9 GPUs, but the host has 8; lower it or use auto"),
        (on("m1", "a", "ernie", 8000, [0, 1], replicas_per_host=2, extra_args=["--tensor-parallel-size", "2"]),
         "a: vllm_fleet_replicas_per_host: 2 replicas x 2 GPU(s) each (tensor x pipeline x data parallel of the "
         "command) need 4 GPUs, but vllm_fleet_gpus gives 2 (0-1); lower it or use auto"),
        (on("m1", "a", "ernie", 65535, replicas_per_host=2),
         "a: vllm_fleet_replicas_per_host: 2 replicas from port 65535 run past 65535; lower vllm_fleet_port"),
    ]
    for h, message in cases:
        with pytest.raises(PlanError) as exc:
            plan(cat, [h])
        assert exc.value.problems == [message]
    cpu = HostInput(name="c", settings={"recipe": SEED, "hardware": "h200", "replicas_per_host": 2},
                    address=None, iface="eth0", gpu={"brand": "cpu"})
    with pytest.raises(PlanError, match=r"c: vllm_fleet_replicas_per_host: 2 replicas need GPUs or CPU cores to "
                                        r"split, but the host's facts give neither \(cpu\)"):
        plan(cat, [cpu])
    hosts = pd_hosts()
    hosts[2].settings["replicas_per_host"] = 2
    with pytest.raises(PlanError, match=r"d1: vllm_fleet_replicas_per_host: 2 replicas do not apply to P/D"):
        plan(cat, hosts)
    # a second deployment on the machine: the replicas' GPUs and ports count against it
    _, problems = plan_fleet(cat, [on("m1", "a", "ernie", 8000, [0, 1, 2, 3], replicas_per_host="auto"),
                                   on("m1", "b", "other", 8003, [3, 4])])
    assert any("GPU 3 of machine m1 would serve two deployments: 'ernie' (host a, GPUs 0-3)" in p for p in problems)
    assert any("port 8003 on machine m1 is used twice: vllm-fleet-ernie-r3" in p for p in problems), problems


def test_auto_is_the_default_and_fills_the_host(cat):
    """No vllm_fleet_replicas_per_host: auto. The seed (TP 1) on an 8-GPU host is 8 servers; a
    host whose facts give no GPUs (not read, or a CPU host on one NUMA node) keeps one."""
    plain = HostInput(name="a", settings={"recipe": SEED, "hardware": "h200"}, address="10.0.0.1", iface="eth0",
                      gpu={"hardware": "h200", "count": 8, "brand": "nvidia"})
    plans, problems = plan_fleet(cat, [plain])
    assert problems == [] and [p["gpus"] for p in plans["a"]["processes"]] == [[i] for i in range(8)]
    assert [p["port"] for p in plans["a"]["processes"]] == list(range(8000, 8008))
    unread = HostInput(name="u", settings={"recipe": SEED, "hardware": "h200"}, address=None, iface="eth0", gpu={})
    assert [p["name"] for p in plan(cat, [unread])["u"]["processes"]] == ["vllm-fleet-ernie-4-5-vl-28b-a3b-pt-h200"]


def _pairs_topology():
    """8 PCIe GPUs, NVLink-bridged 0-4, 1-5, 2-6, 3-7; 0-3 on NUMA 0, 4-7 on NUMA 1."""
    links = [["X" if i == j else "NV4" if abs(i - j) == 4 else "PIX" if i // 4 == j // 4 else "SYS"
              for j in range(8)] for i in range(8)]
    return {"links": links, "numa": [0, 0, 0, 0, 1, 1, 1, 1]}


def test_replica_gpu_sets_follow_the_topology(cat):
    tp2 = on("m1", "a", "ernie", 8000, replicas_per_host="auto", extra_args=["--tensor-parallel-size", "2"])
    tp2.gpu["topology"] = _pairs_topology()
    plans, problems = plan_fleet(cat, [tp2])
    assert problems == [], problems
    assert [(p["gpus"], p["port"]) for p in plans["a"]["processes"]] == [
        ([0, 4], 8000), ([1, 5], 8001), ([2, 6], 8002), ([3, 7], 8003)]
    # NVSwitch (every pair NV18): consecutive pairs, as without topology
    flat = on("m1", "a", "ernie", 8000, replicas_per_host="auto", extra_args=["--tensor-parallel-size", "2"])
    flat.gpu["topology"] = {"links": [["X" if i == j else "NV18" for j in range(8)] for i in range(8)],
                            "numa": [0] * 8}
    plans, _ = plan_fleet(cat, [flat])
    assert [p["gpus"] for p in plans["a"]["processes"]] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_rocm_replicas_get_their_own_render_node_when_the_facts_map_them(cat):
    mi = on("m1", "a", "ernie", 8000, hw="mi300x", replicas_per_host="auto")
    mi.gpu["render_nodes"] = [f"/dev/dri/renderD{128 + i}" for i in range(8)]
    plans, problems = plan_fleet(cat, [mi])
    assert problems == [], problems
    procs = plans["a"]["processes"]
    assert [p["devices"] for p in procs] == [["/dev/kfd", f"/dev/dri/renderD{128 + i}"] for i in range(8)]
    # the container sees only its GPU (numbered 0 inside): no HIP_VISIBLE_DEVICES
    assert not any("HIP_VISIBLE_DEVICES" in p["env"] for p in procs)
    assert len({p["hash"] for p in procs}) == 8
    # the uv runtime: units see every device, the variable picks the GPU
    uv = on("m1", "a", "ernie", 8000, hw="mi300x", replicas_per_host=2, runtime="uv", vllm_version="0.11.0")
    uv.gpu["render_nodes"] = mi.gpu["render_nodes"]
    procs = plan_fleet(cat, [uv])[0]["a"]["processes"]
    assert [p["env"]["HIP_VISIBLE_DEVICES"] for p in procs] == ["0", "1"] and "devices" not in procs[0]


def _cpu_host(name="c", numa=None, **settings):
    numa = numa or {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}
    base = {"recipe": "sentence-transformers/all-MiniLM-L6-v2", "hardware": "xeon6", **settings}
    return HostInput(name=name, settings=base, address="10.0.0.5", iface="eth0",
                     gpu={"brand": "cpu", "hardware": "xeon6", "count": 0,
                          "cpus": sorted(c for cs in numa.values() for c in cs), "numa_nodes": numa})


def test_cpu_replicas_each_get_their_own_cores(cat):
    # auto: one replica per NUMA node, bound to its node's cores (docker cpuset + vLLM's OMP bind)
    plans, problems = plan_fleet(cat, [_cpu_host()])
    assert problems == [], problems
    procs = plans["c"]["processes"]
    assert [(p["name"][-3:], p["port"], p["cpus"], p["env"]["VLLM_CPU_OMP_THREADS_BIND"]) for p in procs] == [
        ("-r0", 8000, [0, 1, 2, 3], "0-3"), ("-r1", 8001, [4, 5, 6, 7], "4-7")]
    assert [p["argv"][-2:] for p in procs] == [["--port", "8000"], ["--port", "8001"]]
    # an explicit number on one NUMA node of 2 cores (the testbed's hosts): a core each
    two = _cpu_host(numa={"0": [0, 1]}, replicas_per_host=2)
    procs = plan_fleet(cat, [two])[0]["c"]["processes"]
    assert [(p["cpus"], p["env"]["VLLM_CPU_OMP_THREADS_BIND"]) for p in procs] == [([0], "0"), ([1], "1")]
    # one NUMA node and auto: one server, unbound, exactly the plan without replicas
    one = plan_fleet(cat, [_cpu_host(numa={"0": [0, 1]})])[0]["c"]["processes"]
    assert len(one) == 1 and "cpus" not in one[0] and "VLLM_CPU_OMP_THREADS_BIND" not in one[0]["env"]


def test_cpu_replicas_that_cannot_be_bound_are_refused_naming_host_and_variable(cat):
    with pytest.raises(PlanError) as exc:
        plan(cat, [_cpu_host(numa={"0": [0, 1]}, replicas_per_host=3)])
    assert exc.value.problems[0].startswith("c: vllm_fleet_replicas_per_host: 3 replicas x 1 rank(s) each: ")
    with pytest.raises(PlanError) as exc:
        plan(cat, [_cpu_host(replicas_per_host=2, env={"VLLM_CPU_OMP_THREADS_BIND": "0-7"})])
    assert exc.value.problems == ["c: vllm_fleet_env: VLLM_CPU_OMP_THREADS_BIND contradicts "
                                  "vllm_fleet_replicas_per_host 2 (each replica is bound to its own cores); "
                                  "drop one of them"]

    # two deployments' CPU replicas on one machine would share cores
    a, b = _cpu_host("a", deployment="one", replicas_per_host=2), _cpu_host("b", deployment="two", replicas_per_host=2)
    a.machine = b.machine = "m1"
    _, problems = plan_fleet(cat, [a, b])
    assert ("b: vllm_fleet_replicas_per_host: cores 0-7 of machine m1 would be bound by two deployments: 'one' "
            "(host a) and 'two' (host b); give one deployment another machine or vllm_fleet_replicas_per_host: 1"
            in problems), problems


def test_instances_and_pd_pools_take_hosts_in_rank_order_by_one_rule():
    """_instances (multi-node instances) and the P/D pools order hosts by the one rule of
    _ordered_pool: explicit vllm_fleet_node_rank wins, the others fill the free ranks in order."""
    from vllm_fleet.placement import _instances, _ordered_pool

    def hosts(*ranks):
        return [HostInput(name=f"h{i}", settings={}, node_rank=r) for i, r in enumerate(ranks)]

    groups, problems = _instances(hosts(None, 0, None, 1), 2)
    assert problems == [] and [[h.name for h in g] for g in groups] == [["h1", "h0"], ["h2", "h3"]]
    problems = []
    assert [h.name for h in _ordered_pool(hosts(None, 1, None), "prefill pool", problems)] == ["h0", "h1", "h2"]
    assert problems == []
    # ranks taken twice or out of range: a problem naming the host; the instance is left out
    groups, problems = _instances(hosts(0, 0), 2)
    assert groups == [] and problems == ["h0: vllm_fleet_node_rank values [0, 0] in the instance (h0, h1) "
                                         "must be distinct and in 0..1"]
    problems = []
    assert _ordered_pool(hosts(None, 3), "decode pool", problems) is None
    assert problems == ["h1: vllm_fleet_node_rank values [3] in the decode pool (h0, h1) must be distinct and in 0..1"]


# ---- graceful stop: --shutdown-timeout from vllm_fleet_drain_timeout --------------------------

def _engine(out, name="a"):
    return out[name]["processes"][0]


def test_graceful_stop_follows_the_drain_timeout_and_the_runtime_waits_longer(cat):
    proc = _engine(plan(cat, [host("a", drain_timeout=300)]))
    assert proc["argv"][3:5] == ["--shutdown-timeout", "300"] and proc["stop_timeout"] == 330


@pytest.mark.parametrize("given", [["--shutdown-timeout", "40"], ["--shutdown_timeout=40"], ["--shutdown-timeout=40"]])
def test_graceful_stop_set_by_the_operator_is_never_doubled(cat, given):
    proc = _engine(plan(cat, [host("a", extra_args=given)]))
    assert sum(a.replace("_", "-").startswith("--shutdown-timeout") for a in proc["argv"]) == 1, proc["argv"]
    # the runtime still waits beyond the longer of the two
    assert proc["stop_timeout"] == 150


def test_no_graceful_stop_before_vllm_0_18_nor_with_a_drain_timeout_of_0(cat):
    old = _engine(plan(cat, [host("a", runtime="uv", vllm_version="0.11.0")]))
    assert "--shutdown-timeout" not in old["argv"] and "stop_timeout" not in old
    off = _engine(plan(cat, [host("a", drain_timeout=0)]))
    assert "--shutdown-timeout" not in off["argv"] and "stop_timeout" not in off
    new = _engine(plan(cat, [host("a", runtime="uv", vllm_version="0.32.0")]))
    assert new["argv"][3:5] == ["--shutdown-timeout", "120"]


def test_routers_and_services_get_no_graceful_stop_flag(cat):
    out = plan(cat, pd_hosts(pd_nodes={"prefill": {"parallelism": "dep"}}))   # both prefill nodes serve
    router = out["r"]["processes"][0]
    assert router["kind"] == "router" and "--shutdown-timeout" not in router["argv"] and "stop_timeout" not in router
    assert "--shutdown-timeout" in _engine(out, "p1")["argv"]
    # the router's gate: its planned workers by pool (every --prefill of the argv), the served
    # name and the request kind
    pools = {"prefill": ["http://10.0.0.1:8001", "http://10.0.0.2:8001"], "decode": ["http://10.0.0.3:8002"]}
    assert router["workers"] == {"pools": pools, "model": _engine(out, "p1")["served_model_name"],
                                 "request": "completion"}
    assert "workers" not in _engine(out, "p1")


def test_an_accelerator_without_a_role_is_refused_by_the_planner(tmp_path):
    """Hardware whose accelerator has no role (TPU, XPU) is refused before any host changes,
    every such host named at once (the playbooks have no assert of their own for it)."""
    import shutil

    import yaml as _yaml

    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    path = tmp_path / "recipes" / "models" / "sentence-transformers" / "all-MiniLM-L6-v2.yaml"
    recipe = _yaml.safe_load(path.read_text())
    recipe["meta"]["hardware"]["trillium"] = "verified"
    path.write_text(_yaml.safe_dump(recipe))
    tpu = loader.load([tmp_path / "recipes"])
    minilm = "sentence-transformers/all-MiniLM-L6-v2"
    hosts = [HostInput(name=n, settings={"recipe": minilm, "hardware": "trillium", "deployment": "t"},
                       gpu={"hardware": "trillium", "count": 8}) for n in ("t1", "t2")]
    with pytest.raises(PlanError) as err:
        plan(tpu, hosts)
    said = str(err.value)
    for name in ("t1", "t2"):
        assert f"{name}: vllm_fleet_hardware: trillium (tpu) is not deployable by vllm-fleet yet" in said, said
