"""Command synthesis (SCHEMA.md 6.1-6.11 and quirks 11.2, 11.3, 11.7).

Every test renders one of the small synthetic recipes in
``tests/fixtures/tree/models/test-org`` and compares exact argv / env values.
"""

from __future__ import annotations

import copy

import pytest

from vllm_fleet.render import resolve
from vllm_fleet.rendermodel import Request

NIXL_P = '{"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_load_failure_policy":"fail"}'
NIXL_D = '{"kv_connector":"NixlConnector","kv_role":"kv_consumer","kv_load_failure_policy":"fail"}'
FULL_DECODE = '{"cudagraph_mode":"FULL_DECODE_ONLY"}'
MOONCAKE = '{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both"}'
MULTI_P = ('{"kv_connector":"MultiConnector","kv_role":"kv_both","kv_connector_extra_config":'
           '{"connectors":[{"kv_connector":"NixlConnector","kv_role":"kv_producer",'
           '"kv_load_failure_policy":"fail"},{"kv_connector":"MooncakeStoreConnector",'
           '"kv_role":"kv_both","kv_connector_extra_config":{"load_async":true,"lookup_async":true}}]}}')
MULTI_D = MULTI_P.replace('"kv_role":"kv_producer"', '"kv_role":"kv_consumer"')
SIMPLE_KV = ('{"kv_connector":"SimpleCPUOffloadConnector","kv_role":"kv_both",'
             '"kv_connector_extra_config":{"cpu_bytes_to_use_per_rank":236223201280,"lazy_offload":false}}')
OFFLOAD_CPU = ('{"kv_connector":"OffloadingConnector","kv_role":"kv_both","kv_connector_extra_config":'
               '{"cpu_bytes_to_use":549755813888,"blocks_per_chunk":4}}')
IFACE = [("GLOO_SOCKET_IFNAME", "$IFACE_NAME"), ("NCCL_SOCKET_IFNAME", "$IFACE_NAME")]

ORDER = "test-org/Order-Model"
FALLBACK = "test-org/Fallback-Model"
TP = "test-org/Tp-Model"
MOE = "test-org/Moe-Model"
DEP = "test-org/Dep-Model"
FEAT = "test-org/Feature-Model"
KV = "test-org/Kv-Model"
PD = "test-org/Pd-Model"
PDDEP = "test-org/Pd-Dep-Model"
OMNI = "test-org/Omni-Model"


def args(proc):
    """argv without the leading ``vllm serve <model>``."""
    assert proc.argv[:2] == ["vllm", "serve"]
    return proc.argv[3:]


def roles(rendering):
    return [(p.role, p.rank) for p in rendering.processes]


# ---------------------------------------------------------------------------------
# 6.1 argument order


def test_argument_order_every_step(proc):
    p = proc(ORDER, hardware="h200", strategy="single_node_tp",
             features=["tool_calling", "reasoning"], advanced_args=["--max-model-len", "4096"])
    assert p.argv == [
        "vllm", "serve", "test-org/Order-Model",
        "--trust-remote-code", "--base-flag", "base",          # 1 model.base_args
        "--variant-flag", "v",                                  # 2 variant.extra_args
        "--variant-exact", "h200",                              # 2 variant HO exact id
        "--tensor-parallel-size", "1",                          # 3 strategy block
        "--so-extra", "1", "--so-vllm", "1",                    # 4 strategy_overrides
        "--recipe-gen", "hopper", "--variant-gen", "hopper",    # 5b, 5c
        "--max-model-len", "4096",                              # 6 advanced
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",  # 7 features ...
        "--reasoning-parser", "deepseek_r1",                    # ... in caller order
    ]


def test_variant_parallel_flag_is_overridden_by_strategy_block(proc):
    # the variant's "--tensor-parallel-size 4" sits before the strategy block: the
    # auto-fit TP (1 on H200 for 100 GB) wins and takes the later position
    p = proc(ORDER, hardware="h200", strategy="single_node_tp")
    assert p.argv.count("--tensor-parallel-size") == 1
    i = p.argv.index("--tensor-parallel-size")
    assert p.argv[i + 1] == "1"
    assert p.argv.index("--variant-exact") < i < p.argv.index("--so-extra")


def test_feature_order_follows_enabled_features(proc):
    p = proc(ORDER, hardware="h200", strategy="single_node_tp", features=["reasoning", "tool_calling"])
    assert args(p)[-5:] == ["--reasoning-parser", "deepseek_r1", "--enable-auto-tool-choice",
                            "--tool-call-parser", "hermes"]


def test_advanced_args_override_earlier_flags_last_wins(proc):
    p = proc(ORDER, hardware="h200", strategy="single_node_tp",
             advanced_args=["--base-flag", "advanced", "--tensor-parallel-size", "2"])
    assert args(p) == ["--trust-remote-code", "--variant-flag", "v", "--variant-exact", "h200",
                       "--so-extra", "1", "--so-vllm", "1", "--recipe-gen", "hopper",
                       "--variant-gen", "hopper", "--base-flag", "advanced",
                       "--tensor-parallel-size", "2"]


def test_unknown_variant_falls_back_to_default_and_unknown_strategy_is_single_node(proc):
    p = proc(FALLBACK, variant="nope", hardware="h200", strategy=None)
    # unknown strategy -> {} -> single node, --tensor-parallel-size gpuCount (not auto-fit)
    assert args(p) == ["--tensor-parallel-size", "8", "--nvidia-fallback", "1", "--variant-nvidia", "1"]


def test_unknown_hardware_means_one_gpu(proc):
    p = proc(MOE, hardware="nope", strategy="single_node_tep")
    assert args(p) == ["--trust-remote-code", "--enable-expert-parallel", "--tensor-parallel-size", "1"]


# ---------------------------------------------------------------------------------
# 6.4 hardware-keyed override precedence


def test_strategy_gen_override_replaces_recipe_and_variant_gen_overrides(render):
    r = render(ORDER, hardware="h200", strategy="multi_node_tp", node_count=2)
    head = r.find("head")
    assert args(head) == [
        "--trust-remote-code", "--base-flag", "base", "--variant-flag", "v", "--variant-exact", "h200",
        "--tensor-parallel-size", "16", "--nnodes", "2", "--node-rank", "0", "--master-addr", "$HEAD_IP",
        "--so-gen", "hopper",        # strategy gen HO replaces --recipe-gen / --variant-gen
        "--so-exact", "h200",        # exact-id HO is additive, after it
    ]
    assert list(head.env.items()) == [
        ("BASE_ENV", "base"), ("SHARED_ENV", "from-variant"), ("YAML12_FLAG", "yes"),
        ("VARIANT_ENV", "v"), ("VARIANT_EXACT_ENV", "h200"), *IFACE,
        ("SO_GEN_ENV", "1"), ("SO_EXACT_ENV", "1")]


def test_no_gen_override_on_other_generation(render):
    head = render(ORDER, hardware="b200", strategy="multi_node_tp", node_count=2).find("head")
    assert args(head) == [
        "--trust-remote-code", "--base-flag", "base", "--variant-flag", "v",
        "--tensor-parallel-size", "16", "--nnodes", "2", "--node-rank", "0", "--master-addr", "$HEAD_IP"]


def test_amd_generation_key(render):
    head = render(ORDER, hardware="mi300x", strategy="multi_node_tp", node_count=2).find("head")
    assert args(head)[-2:] == ["--recipe-gen", "amd"]


def test_nvidia_fallback_when_generation_key_absent(proc):
    p = proc(FALLBACK, hardware="h200", strategy="single_node_tp")
    assert args(p) == ["--tensor-parallel-size", "1", "--nvidia-fallback", "1", "--variant-nvidia", "1"]
    assert p.env == {"NVIDIA_FALLBACK": "1"}


def test_recipe_hardware_overrides_ignore_exact_gpu_ids(proc):
    p = proc(FALLBACK, hardware="h100", strategy="single_node_tp")
    assert "--never-exact-id" not in p.argv
    assert args(p) == ["--tensor-parallel-size", "1", "--nvidia-fallback", "1", "--variant-nvidia", "1"]


def test_empty_map_at_generation_key_still_wins_over_nvidia(proc):
    p = proc(FALLBACK, hardware="b200", strategy="single_node_tp")
    # recipe HO `blackwell: {}` hides `nvidia`; the variant (no blackwell key) falls back
    assert args(p) == ["--tensor-parallel-size", "1", "--variant-nvidia", "1"]
    assert p.env == {}


@pytest.mark.parametrize("hw", ["mi300x", "ascend_950pr"])
def test_no_nvidia_fallback_off_nvidia(proc, hw):
    p = proc(FALLBACK, hardware=hw, strategy="single_node_tp")
    assert args(p) == ["--tensor-parallel-size", "1"]
    assert p.env == {}


def test_strategy_nvidia_override_replaces_recipe_and_variant(proc):
    p = proc(FALLBACK, hardware="h200", strategy="single_node_tep")
    assert args(p) == ["--enable-expert-parallel", "--tensor-parallel-size", "8", "--so-nvidia", "1"]
    assert p.env == {}
    amd = proc(FALLBACK, hardware="mi300x", strategy="single_node_tep")
    assert args(amd) == ["--enable-expert-parallel", "--tensor-parallel-size", "8"]


def test_empty_strategy_gen_override_replaces_with_nothing(proc):
    p = proc(FALLBACK, hardware="h200", strategy="single_node_dep")
    assert args(p) == ["--enable-expert-parallel", "--data-parallel-size", "8"]
    assert p.env == {}


# ---------------------------------------------------------------------------------
# 6.7 env merge


def test_env_merge_order_later_wins_first_position_kept(proc):
    p = proc(ORDER, hardware="h200", strategy="single_node_tp")
    assert list(p.env.items()) == [
        ("BASE_ENV", "base"),
        ("SHARED_ENV", "from-recipe-gen"),   # base -> variant -> so.env -> recipe gen HO
        ("YAML12_FLAG", "yes"),
        ("VARIANT_ENV", "v"),
        ("VARIANT_EXACT_ENV", "h200"),
        ("SO_ENV", "1"),
        ("SO_EXTRA_ENV", "1"),
        ("RECIPE_GEN_ENV", "hopper"),
        ("VARIANT_GEN_ENV", "hopper"),
    ]


def test_env_without_hardware_layers(proc):
    p = proc(ORDER, hardware="b200", strategy="single_node_tp")
    assert list(p.env.items()) == [
        ("BASE_ENV", "base"), ("SHARED_ENV", "from-so-env"), ("YAML12_FLAG", "yes"),
        ("VARIANT_ENV", "v"), ("SO_ENV", "1"), ("SO_EXTRA_ENV", "1")]


# ---------------------------------------------------------------------------------
# 6.2 TP auto-fit and clamping (single_node_tp)


@pytest.mark.parametrize("variant, hw, tp", [
    ("default", "h200", "1"),        # 100 GB <= 141 GB per GPU
    ("default", "gb200", "1"),
    ("default", "arc_pro_b60", "4"),  # 100 GB > 24 GB per GPU -> gpu_count
    ("big", "h200", "8"),            # 150 GB > 141 GB -> whole node, never 2 or 4
    ("big", "b200", "1"),            # 180 GB per GPU
    ("big", "gb200", "1"),           # 192 GB per GPU
    ("novram", "h200", "8"),         # no vram_minimum_gb -> gpu_count
    ("default", "mi300x", "2"),      # strategy_overrides tp map, generation key `amd`
    ("default", "xeon6", "8"),       # strategy_overrides tp map, exact id; cpu: not clamped to 4
    ("tp16", "h200", "8"),           # variant tp number clamped to gpu_count
    ("tp16", "gb200", "4"),
    ("tp16", "arc_pro_b60", "4"),    # xpu is clamped
    ("tp16", "xeon6", "16"),         # cpu is not
    ("tpmap", "h200", "2"),          # exact id
    ("tpmap", "b200", "8"),          # generation 16, clamped
    ("tpmap", "gb200", "4"),
    ("tpmap", "xeon6", "3"),         # lower-case brand `intel`
    ("tpmap", "arc_pro_b60", "3"),
    ("tpmap", "mi300x", "1"),        # `default` (variant tp beats strategy_overrides tp)
])
def test_single_node_tp_size(proc, variant, hw, tp):
    p = proc(TP, variant=variant, hardware=hw, strategy="single_node_tp")
    assert args(p) == ["--tensor-parallel-size", tp]


@pytest.mark.parametrize("variant, hw, n", [("tp16", "h200", "8"), ("default", "xeon6", "4"),
                                            ("tpmap", "h200", "8")])
def test_tp_fit_applies_to_single_node_tp_only(proc, variant, hw, n):
    p = proc(TP, variant=variant, hardware=hw, strategy="single_node_tep")
    assert args(p) == ["--enable-expert-parallel", "--tensor-parallel-size", n]


# ---------------------------------------------------------------------------------
# 6.2 / 6.3 multi-node shapes


@pytest.mark.parametrize("strategy", ["multi_node_tp", "multi_node_tep"])
def test_multi_node_tp_and_tep(render, strategy):
    r = render(MOE, hardware="h200", strategy=strategy, node_count=3)
    assert r.deploy_type == "multi_node"
    assert roles(r) == [("head", 0), ("worker", 1), ("worker", 2)]
    ep = ["--enable-expert-parallel"] if strategy == "multi_node_tep" else []
    for p in r.processes:
        tail = ["--headless"] if p.rank else []
        assert args(p) == ["--trust-remote-code", *ep, "--tensor-parallel-size", "24", "--nnodes", "3",
                           "--node-rank", str(p.rank), "--master-addr", "$HEAD_IP", *tail]
        assert list(p.env.items()) == IFACE   # identical env on head and workers


def test_multi_node_tp_pp(render):
    r = render(MOE, hardware="h200", strategy="multi_node_tp_pp", node_count=3)
    assert [args(p) for p in r.processes] == [
        ["--trust-remote-code", "--tensor-parallel-size", "8", "--pipeline-parallel-size", "3",
         "--nnodes", "3", "--node-rank", str(rank), "--master-addr", "$HEAD_IP"]
        + (["--headless"] if rank else [])
        for rank in range(3)]


def test_multi_node_tp_dp(render):
    r = render(MOE, hardware="gb200", strategy="multi_node_tp_dp", node_count=3)
    assert [args(p) for p in r.processes] == [
        ["--trust-remote-code", "--tensor-parallel-size", "4", "--data-parallel-size", "3",
         "--data-parallel-size-local", "1", "--data-parallel-address", "$HEAD_IP"]
        + (["--data-parallel-start-rank", str(rank)] if rank else [])
        for rank in range(3)]
    assert not any("--headless" in p.argv or "--nnodes" in p.argv for p in r.processes)


def test_multi_node_dep(render):
    r = render(MOE, hardware="h200", strategy="multi_node_dep", node_count=3)
    assert [args(p) for p in r.processes] == [
        ["--trust-remote-code", "--enable-expert-parallel", "--data-parallel-hybrid-lb",
         "--data-parallel-size", "24", "--data-parallel-size-local", "8",
         "--data-parallel-address", "$HEAD_IP"]
        + (["--data-parallel-start-rank", str(8 * rank)] if rank else [])
        for rank in range(3)]
    assert not any("--headless" in p.argv or "--data-parallel-rpc-port" in p.argv for p in r.processes)


def test_multi_node_dep_local_size_from_strategy_vllm_args(render):
    r = render(DEP, hardware="h200", strategy="multi_node_dep", node_count=2)
    head, worker = r.processes
    assert args(head) == ["--enable-expert-parallel", "--data-parallel-hybrid-lb",
                          "--data-parallel-size", "16", "--data-parallel-address", "$HEAD_IP",
                          "--data-parallel-size-local", "4"]
    # start rank = r x dpLocal (4), while --data-parallel-size stays totalGpus (16)
    assert args(worker) == ["--enable-expert-parallel", "--data-parallel-hybrid-lb",
                            "--data-parallel-size", "16", "--data-parallel-address", "$HEAD_IP",
                            "--data-parallel-start-rank", "4", "--data-parallel-size-local", "4"]


def test_multi_node_dep_local_size_last_occurrence_exact_id_wins(render):
    r = render(DEP, hardware="gb200", strategy="multi_node_dep", node_count=4)
    worker3 = r.find("worker", 3)
    assert args(worker3) == ["--enable-expert-parallel", "--data-parallel-hybrid-lb",
                             "--data-parallel-size", "16", "--data-parallel-address", "$HEAD_IP",
                             "--data-parallel-start-rank", "6", "--data-parallel-size-local", "2"]


def test_multi_node_dep_local_size_from_strategy_gen_override(render):
    worker = render(DEP, hardware="mi300x", strategy="multi_node_dep", node_count=2).find("worker", 1)
    assert args(worker) == ["--enable-expert-parallel", "--data-parallel-hybrid-lb",
                            "--data-parallel-size", "16", "--data-parallel-address", "$HEAD_IP",
                            "--data-parallel-start-rank", "2", "--data-parallel-size-local", "2",
                            "--amd-dep", "1"]


@pytest.mark.parametrize("strategy, block", [
    ("multi_node_tp", ["--tensor-parallel-size", "8"]),          # gpuCount, not the TP auto-fit
    ("multi_node_tep", ["--enable-expert-parallel", "--tensor-parallel-size", "8"]),
    ("multi_node_dep", ["--enable-expert-parallel", "--data-parallel-hybrid-lb",
                        "--data-parallel-size", "8"]),
    ("multi_node_tp_pp", ["--tensor-parallel-size", "8"]),
    ("multi_node_tp_dp", ["--tensor-parallel-size", "8"]),
])
def test_multi_node_at_one_node_is_single_node_shape(render, strategy, block):
    r = render(MOE, hardware="h200", strategy=strategy, node_count=1)
    assert r.deploy_type == "multi_node"
    assert roles(r) == [("single", 0)]
    assert args(r.processes[0]) == ["--trust-remote-code", *block]
    assert list(r.processes[0].env.items()) == IFACE


def test_worker_docker_argv_matches_worker_argv(render):
    worker = render(MOE, hardware="h200", strategy="multi_node_tp", node_count=2).find("worker", 1)
    assert worker.docker_argv()[-len(worker.argv) + 2:] == worker.argv[2:]
    assert worker.docker_argv()[-1] == "--headless"


# ---------------------------------------------------------------------------------
# 6.5 features and modes

SPEC = "--speculative-config"


def spec_value(p):
    return p.argv[p.argv.index(SPEC) + 1] if SPEC in p.argv else None


def test_boolean_features_and_brand_override(proc):
    p = proc(FEAT, hardware="h200", strategy="single_node_tp", features=["tool_calling", "reasoning"])
    assert args(p) == ["--tensor-parallel-size", "1", "--enable-auto-tool-choice", "--tool-call-parser",
                       "hermes", "--reasoning-parser", "nvidia-parser"]
    assert args(proc(FEAT, hardware="mi300x", strategy="single_node_tp", features=["reasoning"]))[-1] == "amd-parser"
    assert args(proc(FEAT, hardware="xeon6", strategy="single_node_tp", features=["reasoning"]))[-1] == "generic"


@pytest.mark.parametrize("hw, tokens", [
    ("h200", 4),            # mode hardware_overrides: exact id
    ("h100", 3),            # > generation
    ("b200", 2),            # > lower-case brand
    ("ascend_950pr", 5),    # > default
])
def test_mode_hardware_override_precedence(proc, hw, tokens):
    p = proc(FEAT, hardware=hw, strategy="single_node_tp", features=["spec_decoding"])
    assert spec_value(p) == '{"method":"mtp","num_speculative_tokens":%d}' % tokens


def test_feature_mode_from_caller(proc):
    p = proc(FEAT, hardware="h200", strategy="single_node_tp", features=["spec_decoding"],
             feature_modes={"spec_decoding": "eagle3"})
    assert args(p) == ["--tensor-parallel-size", "1", SPEC, '{"method":"eagle3","num_speculative_tokens":3}']


def test_caller_mode_not_allowed_for_variant_falls_to_feature_default_mode(proc):
    # dspark is limited to the fp8 variant -> next candidate: feature default_mode (mtp)
    p = proc(FEAT, hardware="h200", strategy="single_node_tp", features=["spec_decoding"],
             feature_modes={"spec_decoding": "dspark"})
    assert spec_value(p) == '{"method":"mtp","num_speculative_tokens":4}'


def test_variant_default_modes_beat_feature_default_mode(proc):
    p = proc(FEAT, variant="fp8", hardware="h200", strategy="single_node_tp", features=["spec_decoding"])
    assert spec_value(p) == '{"method":"dspark"}'


def test_caller_mode_beats_variant_default_modes(proc):
    p = proc(FEAT, variant="fp8", hardware="h200", strategy="single_node_tp", features=["spec_decoding"],
             feature_modes={"spec_decoding": "eagle3"})
    assert spec_value(p) == '{"method":"eagle3","num_speculative_tokens":3}'


def test_mode_hardware_gate_by_generation_falls_to_first_allowed_mode(proc):
    # mtp is `amd: unsupported`, so on MI300X the first allowed mode (eagle3) is used
    p = proc(FEAT, hardware="mi300x", strategy="single_node_tp", features=["spec_decoding"])
    assert spec_value(p) == '{"method":"eagle3","num_speculative_tokens":3}'


def test_mode_hardware_gate_by_exact_id(proc):
    # eagle3 is `gb200: unsupported`: the caller's choice is skipped, default_mode mtp (brand key)
    p = proc(FEAT, hardware="gb200", strategy="single_node_tp", features=["spec_decoding"],
             feature_modes={"spec_decoding": "eagle3"})
    assert spec_value(p) == '{"method":"mtp","num_speculative_tokens":2}'


def test_no_allowed_mode_emits_nothing(proc):
    p = proc(FEAT, variant="int4", hardware="mi300x", strategy="single_node_tp",
             features=["spec_decoding"], feature_modes={"spec_decoding": "eagle3"})
    assert args(p) == ["--tensor-parallel-size", "1"]


def test_feature_strategies_allowlist(proc):
    assert args(proc(FEAT, hardware="h200", strategy="single_node_tp", features=["text_only"]))[-1] == \
        "--language-model-only"
    p = proc(FEAT, hardware="h200", strategy="single_node_tep", features=["text_only"])
    assert args(p) == ["--enable-expert-parallel", "--tensor-parallel-size", "8"]


def test_unknown_enabled_feature_is_skipped(proc):
    p = proc(FEAT, hardware="h200", strategy="single_node_tp", features=["nope", "tool_calling"])
    assert args(p) == ["--tensor-parallel-size", "1", "--enable-auto-tool-choice", "--tool-call-parser",
                       "hermes"]


def test_feature_level_hardware_gate_is_ignored(proc, recipe_copy):
    # quirk 11.8: only mode-level `hardware:` gates are read
    recipe = recipe_copy(FEAT)
    recipe["features"]["tool_calling"]["hardware"] = {"h200": "unsupported", "hopper": "unsupported"}
    p = proc(FEAT, recipe=recipe, hardware="h200", strategy="single_node_tp", features=["tool_calling"])
    assert args(p)[2:] == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]


def test_features_none_means_no_feature_args(proc):
    # synthesis itself never reads opt_in_features: the caller passes the enabled list
    assert args(proc(FEAT, hardware="h200", strategy="single_node_tp")) == ["--tensor-parallel-size", "1"]


# ---------------------------------------------------------------------------------
# 6.9 KV offload gating


def test_kv_option_appended_last_after_features(proc):
    p = proc(ORDER, hardware="b200", strategy="single_node_tp", features=["reasoning"], kv_offload="simple")
    assert args(p)[-4:] == ["--reasoning-parser", "deepseek_r1", "--kv-transfer-config", SIMPLE_KV]
    assert "companions" not in p.extras


def test_kv_option_unsupported_in_recipe_is_dropped(proc):
    p = proc(KV, hardware="h200", strategy="single_node_tp", kv_offload="simple")
    assert "--kv-transfer-config" not in p.argv


def test_kv_option_requires_opt_in_needs_verified(proc):
    assert "--kv-transfer-config" not in proc(ORDER, hardware="h200", strategy="single_node_tp",
                                              kv_offload="offloading_cpu").argv
    p = proc(KV, hardware="h200", strategy="single_node_tp", kv_offload="offloading_cpu")
    assert args(p) == ["--tensor-parallel-size", "1", "--kv-transfer-config", OFFLOAD_CPU]


def test_kv_option_env_is_a_string(proc):
    p = proc(KV, hardware="mi300x", strategy="single_node_tep", features=["tool_calling"],
             kv_offload="offloading_fs")
    assert p.env == {"PYTHONHASHSEED": "0"}
    assert isinstance(p.env["PYTHONHASHSEED"], str)
    assert args(p)[:4] == ["--enable-expert-parallel", "--tensor-parallel-size", "8",
                           "--enable-auto-tool-choice"]
    assert args(p)[4] == "--kv-transfer-config" and "TieringOffloadingSpec" in args(p)[5]


def test_kv_option_brand_allowlist(proc):
    p = proc(KV, hardware="xeon6", strategy="single_node_tp", kv_offload="offloading_cpu")
    assert "--kv-transfer-config" not in p.argv and p.env == {}


def test_kv_option_strategy_allowlist(render):
    single = render(ORDER, hardware="b200", strategy="single_node_tep", kv_offload="lmcache").processes[0]
    assert single.argv[-2] == "--kv-transfer-config" and "LMCacheMPConnector" in single.argv[-1]
    multi = render(ORDER, hardware="b200", strategy="multi_node_tp", node_count=2, kv_offload="lmcache")
    assert all("--kv-transfer-config" not in p.argv for p in multi.processes)
    assert all("companions" not in p.extras for p in multi.processes)


def test_kv_option_never_applies_to_pd(render):
    r = render(KV, hardware="h200", strategy="pd_cluster", kv_offload="offloading_cpu")
    assert r.find("prefill").argv[-4:] == ["--kv-transfer-config", NIXL_P, "--tensor-parallel-size", "4"]


def test_lmcache_companion_on_single_node(proc, catalog):
    p = proc(ORDER, hardware="b200", strategy="single_node_tp", kv_offload="lmcache")
    option = catalog.taxonomy["kv_offload"]["lmcache"]
    [companion] = p.extras["companions"]
    assert companion["feature"] == "kv_offload:lmcache"
    assert companion["label"] == "LMCache Server"
    assert companion["description"] == (option["companion"]["description"]
                                        + ' Requires: uv pip install "lmcache==0.5.1"')
    # exact text incl. trailing whitespace: see test_lmcache_companion_command_is_trimmed
    assert companion["command"].rstrip() == option["companion"]["command"].rstrip()
    assert companion["command"].startswith("# --port must match")


def test_companion_only_on_single_node_shaped_results(render, catalog):
    taxonomy = copy.deepcopy(catalog.taxonomy)
    taxonomy["kv_offload"]["everywhere"] = {
        "args": ["--kv-transfer-config", "{}"],
        "companion": {"label": "Helper", "description": "d", "command": "helper --serve"}}
    two = render(ORDER, taxonomy=taxonomy, hardware="b200", strategy="multi_node_tp", node_count=2,
                 kv_offload="everywhere")
    assert [p.argv[-2:] for p in two.processes] == [["--kv-transfer-config", "{}"]] * 2
    assert all("companions" not in p.extras for p in two.processes)
    one = render(ORDER, taxonomy=taxonomy, hardware="b200", strategy="multi_node_tp", node_count=1,
                 kv_offload="everywhere")
    assert one.processes[0].extras["companions"][0]["command"] == "helper --serve"


# ---------------------------------------------------------------------------------
# 6.8 prefill / decode


def router_args(r):
    return r.find("router").argv


def test_pd_legacy_colocated(render):
    r = render(PD, hardware="h200", strategy="pd_cluster", node_count=1)   # pdNodes null
    assert r.deploy_type == "pd_cluster"
    assert roles(r) == [("prefill", 0), ("decode", 0), ("router", None)]
    prefill, decode = r.find("prefill"), r.find("decode")
    assert args(prefill) == ["--trust-remote-code", "--port", "8001", "--kv-transfer-config", NIXL_P,
                             "--tensor-parallel-size", "4", "--prefill-extra", "1", "--recipe-gen", "hopper"]
    assert args(decode) == ["--trust-remote-code", "--port", "8002", "--kv-transfer-config", NIXL_D,
                            "--compilation-config", FULL_DECODE, "--tensor-parallel-size", "4",
                            "--decode-vllm", "1", "--recipe-gen", "hopper"]
    # NCCL_*/UCX_NET_DEVICES/VLLM_USE_NCCL_SYMM_MEM filtered off gb200/gb300, whatever the source
    assert list(prefill.env.items()) == [
        ("VLLM_NIXL_SIDE_CHANNEL_PORT", "5557"), ("VLLM_NIXL_SIDE_CHANNEL_HOST", "$PREFILL_NODE_1"),
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3"), ("PD_SO_ENV", "1"), ("PREFILL_SO_ENV", "1")]
    assert list(decode.env.items()) == [
        ("VLLM_NIXL_SIDE_CHANNEL_PORT", "5558"), ("VLLM_NIXL_SIDE_CHANNEL_HOST", "$DECODE_NODE_1"),
        ("CUDA_VISIBLE_DEVICES", "4,5,6,7"), ("PD_SO_ENV", "1")]
    assert (prefill.port, decode.port) == (8001, 8002)
    assert prefill.docker_argv()[6:8] == ["-p", "8001:8001"]
    assert decode.docker_argv()[6:8] == ["-p", "8002:8002"]


def test_pd_top_level_strategy_override_args_ignored_for_roles(render):
    r = render(PD, hardware="h200", strategy="pd_cluster")
    assert not any(a.startswith("--ignored") for p in r.processes for a in p.argv)


def test_pd_router(render):
    router = render(PD, hardware="h200", strategy="pd_cluster").find("router")
    assert router.command == (
        "vllm-router --policy round_robin \\\n"
        "    --vllm-pd-disaggregation \\\n"
        "    --prefill http://$PREFILL_NODE_1:8001 \\\n"
        "    --decode http://$DECODE_NODE_1:8002 \\\n"
        "    --host $ROUTER_HOST \\\n"
        "    --port $ROUTER_PORT \\\n"
        "    --intra-node-data-parallel-size 1")
    assert router.install == "uv pip install vllm-router"
    assert router.config == {"policy": "round_robin"}
    assert router.docker is None


def test_pd_env_kept_on_gb200(render):
    r = render(PD, hardware="gb200", strategy="pd_cluster")
    prefill, decode = r.find("prefill"), r.find("decode")
    assert args(prefill) == ["--trust-remote-code", "--port", "8001", "--kv-transfer-config", NIXL_P,
                             "--tensor-parallel-size", "2", "--prefill-extra", "1",
                             "--pd-gen", "blackwell",                  # strategy gen HO
                             "--moe-backend", "gb200-prefill"]         # role exact-id HO, last
    assert list(prefill.env.items()) == [
        ("NCCL_CUMEM_ENABLE", "1"), ("NCCL_MNNVL_ENABLE", "1"), ("NCCL_NVLS_ENABLE", "1"),
        ("UCX_NET_DEVICES", "all"), ("VLLM_NIXL_SIDE_CHANNEL_PORT", "5557"),
        ("VLLM_NIXL_SIDE_CHANNEL_HOST", "$PREFILL_NODE_1"), ("CUDA_VISIBLE_DEVICES", "0,1"),
        ("VLLM_USE_NCCL_SYMM_MEM", "1"), ("PD_SO_ENV", "1"), ("PREFILL_SO_ENV", "1"), ("UCX_TLS", "rc")]
    assert list(decode.env.items()) == [
        ("VLLM_NIXL_SIDE_CHANNEL_PORT", "5558"), ("VLLM_NIXL_SIDE_CHANNEL_HOST", "$DECODE_NODE_1"),
        ("CUDA_VISIBLE_DEVICES", "2,3"), ("VLLM_USE_NCCL_SYMM_MEM", "1"), ("PD_SO_ENV", "1")]


def test_pd_colocated_single_gpu_sets_no_cuda_visible_devices(render, catalog):
    taxonomy = copy.deepcopy(catalog.taxonomy)
    taxonomy["hardware_profiles"]["one_gpu"] = {"brand": "NVIDIA", "generation": "hopper",
                                                "gpu_count": 1, "vram_gb": 141}
    r = render(PD, taxonomy=taxonomy, hardware="one_gpu", strategy="pd_cluster")
    assert "CUDA_VISIBLE_DEVICES" not in r.find("prefill").env
    assert args(r.find("prefill"))[5:7] == ["--tensor-parallel-size", "1"]   # max(1, floor(1/2))


def test_pd_legacy_two_nodes_one_node_per_role(render):
    r = render(PD, hardware="h200", strategy="pd_cluster", node_count=2)
    prefill = r.find("prefill")
    assert args(prefill)[5:7] == ["--tensor-parallel-size", "8"]
    assert "--nnodes" not in prefill.argv
    assert prefill.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert "GLOO_SOCKET_IFNAME" not in prefill.env


def test_pd_tp_pool_multi_node_worker_is_headless(render):
    r = render(PD, hardware="h200", strategy="pd_cluster",
               pd_nodes={"prefill": {"nodes": 2, "rank": 1}, "decode": 1})
    prefill, decode = r.find("prefill"), r.find("decode")
    assert prefill.rank == 1
    assert args(prefill) == ["--trust-remote-code", "--port", "8001", "--kv-transfer-config", NIXL_P,
                             "--tensor-parallel-size", "16", "--nnodes", "2", "--node-rank", "1",
                             "--master-addr", "$PREFILL_NODE_1", "--headless",
                             "--prefill-extra", "1", "--recipe-gen", "hopper"]
    assert list(prefill.env.items()) == [
        ("VLLM_NIXL_SIDE_CHANNEL_PORT", "5557"),
        ("VLLM_NIXL_SIDE_CHANNEL_HOST", "$PREFILL_NODE_1"),      # TP pool: no rename
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"), *IFACE, ("PD_SO_ENV", "1"), ("PREFILL_SO_ENV", "1")]
    assert args(decode)[7:9] == ["--tensor-parallel-size", "8"]
    assert "GLOO_SOCKET_IFNAME" not in decode.env
    assert router_args(r).count("--prefill") == 1


def test_pd_tep_pool(render):
    r = render(PD, hardware="h200", strategy="pd_cluster",
               pd_nodes={"prefill": {"nodes": 1, "parallelism": "tep"}, "decode": 1})
    assert args(r.find("prefill"))[5:8] == ["--tensor-parallel-size", "8", "--enable-expert-parallel"]
    assert r.find("prefill").extras["pd_role"]["parallelism"] == "tep"


def test_pd_dep_pools_rank_one(render):
    r = render(PDDEP, hardware="h200", strategy="pd_cluster",
               pd_nodes={"prefill": {"nodes": 2, "rank": 1}, "decode": {"nodes": 2, "rank": 1}})
    prefill, decode = r.find("prefill"), r.find("decode")
    assert args(prefill) == ["--port", "8001", "--kv-transfer-config", NIXL_P,
                             "--data-parallel-size", "16", "--data-parallel-size-local", "8",
                             "--data-parallel-start-rank", "8", "--data-parallel-address", "$PREFILL_NODE_1",
                             "--data-parallel-rpc-port", "$PREFILL_DP_RPC_PORT", "--data-parallel-hybrid-lb",
                             "--enable-expert-parallel"]
    # decode: tp 2 from strategy_overrides -> dpLocal = floor(8 / 2) = 4
    assert args(decode) == ["--port", "8002", "--kv-transfer-config", NIXL_D, "--compilation-config",
                            FULL_DECODE, "--tensor-parallel-size", "2", "--data-parallel-size", "8",
                            "--data-parallel-size-local", "4", "--data-parallel-start-rank", "4",
                            "--data-parallel-address", "$DECODE_NODE_1",
                            "--data-parallel-rpc-port", "$DECODE_DP_RPC_PORT", "--data-parallel-hybrid-lb",
                            "--enable-expert-parallel"]
    # DEP rank > 0: env values equal to $PREFILL_NODE_1 become $PREFILL_NODE_<rank+1>
    # (PREFILL_PEER, a decode placeholder, is left to test_pd_dep_rename_only_own_role)
    env = [(k, v) for k, v in prefill.env.items() if k != "PREFILL_PEER"]
    assert env == [
        ("VLLM_NIXL_SIDE_CHANNEL_PORT", "5557"), ("VLLM_NIXL_SIDE_CHANNEL_HOST", "$PREFILL_NODE_2"),
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"), *IFACE, ("PREFILL_SELF", "$PREFILL_NODE_2")]
    assert decode.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "$DECODE_NODE_2"
    assert router_args(r) == [
        "vllm-router", "--policy", "round_robin", "--vllm-pd-disaggregation",
        "--prefill", "http://$PREFILL_NODE_1:8001", "--prefill", "http://$PREFILL_NODE_2:8001",
        "--decode", "http://$DECODE_NODE_1:8002", "--decode", "http://$DECODE_NODE_2:8002",
        "--host", "$ROUTER_HOST", "--port", "$ROUTER_PORT",
        "--intra-node-data-parallel-size", "8"]        # max(dpLocal prefill 8, decode 4, 1)


def test_pd_dep_rank_clamped_in_args_but_not_in_env(render):
    r = render(PDDEP, hardware="h200", strategy="pd_cluster",
               pd_nodes={"prefill": {"nodes": 2, "rank": 5}, "decode": 1})
    prefill, decode = r.find("prefill"), r.find("decode")
    assert prefill.argv[prefill.argv.index("--data-parallel-start-rank") + 1] == "8"
    assert prefill.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "$PREFILL_NODE_6"
    assert prefill.env["PREFILL_SELF"] == "$PREFILL_NODE_6"
    # one-node DEP pool: no hybrid-lb, size = 1 x dpLocal
    assert args(decode)[6:] == ["--tensor-parallel-size", "2", "--data-parallel-size", "4",
                                "--data-parallel-size-local", "4", "--data-parallel-start-rank", "0",
                                "--data-parallel-address", "$DECODE_NODE_1",
                                "--data-parallel-rpc-port", "$DECODE_DP_RPC_PORT", "--enable-expert-parallel"]


def test_pd_colocated_dep_uses_full_node_dp_local_quirk_11_2(render):
    prefill = render(PDDEP, hardware="h200", strategy="pd_cluster").find("prefill")
    assert prefill.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert args(prefill) == ["--port", "8001", "--kv-transfer-config", NIXL_P,
                             "--data-parallel-size", "8", "--data-parallel-size-local", "8",
                             "--data-parallel-start-rank", "0", "--data-parallel-address", "$PREFILL_NODE_1",
                             "--data-parallel-rpc-port", "$PREFILL_DP_RPC_PORT", "--enable-expert-parallel"]


def test_pd_pool_mode_snapping_router_uses_unsnapped_quirk_11_3(render):
    r = render(PDDEP, hardware="h200", strategy="pd_cluster",
               pd_nodes={"prefill": {"nodes": 2, "parallelism": "tp"},
                         "decode": {"nodes": 2, "parallelism": "tp"}})
    prefill = r.find("prefill")
    # pool_modes [dep]: the requested tp pool renders DEP args ...
    assert args(prefill)[4:] == ["--data-parallel-size", "16", "--data-parallel-size-local", "8",
                                 "--data-parallel-start-rank", "0", "--data-parallel-address",
                                 "$PREFILL_NODE_1", "--data-parallel-rpc-port", "$PREFILL_DP_RPC_PORT",
                                 "--data-parallel-hybrid-lb", "--enable-expert-parallel"]
    # ... but the router and the role metadata use the unsnapped tp
    assert router_args(r)[4:] == ["--prefill", "http://$PREFILL_NODE_1:8001",
                                  "--decode", "http://$DECODE_NODE_1:8002",
                                  "--host", "$ROUTER_HOST", "--port", "$ROUTER_PORT",
                                  "--intra-node-data-parallel-size", "1"]
    assert prefill.extras["pd_role"]["parallelism"] == "tp"


def test_pd_snapping_to_first_offered_mode(render):
    # Pd-Model offers tp/tep pools only: a dep request is rendered as a TP pool
    r = render(PD, hardware="h200", strategy="pd_cluster",
               pd_nodes={"prefill": {"nodes": 1, "parallelism": "dep"}, "decode": 1})
    assert args(r.find("prefill"))[5:7] == ["--tensor-parallel-size", "8"]
    assert "--data-parallel-size" not in r.find("prefill").argv
    assert router_args(r)[-1] == "8"        # router still sized from the unsnapped dep pool


def test_pd_router_intra_node_override(render, recipe_copy):
    recipe = recipe_copy(PDDEP)
    recipe["strategy_overrides"]["pd_cluster"]["router"] = {"intra_node_data_parallel_size": 1}
    r = render(PDDEP, recipe=recipe, hardware="h200", strategy="pd_cluster",
               pd_nodes={"prefill": 1, "decode": 1})
    assert router_args(r)[-2:] == ["--intra-node-data-parallel-size", "1"]


# ---------------------------------------------------------------------------------
# 6.9 Mooncake composition


def test_mooncake_distributed_single_instance_default(render, catalog):
    r = render(MOE, hardware="h200", strategy="single_node_tp", features=["tool_calling"],
               kv_offload="kv_store_distributed_mooncake")
    assert r.deploy_type == "kv_store_lb"
    assert roles(r) == [("instance", 0), ("mooncake_master", None)]     # 1 instance: no router
    inst = r.find("instance")
    assert args(inst) == ["--trust-remote-code", "--tensor-parallel-size", "1", "--enable-auto-tool-choice",
                          "--tool-call-parser", "hermes", "--kv-transfer-config", MOONCAKE]
    assert list(inst.env.items()) == [("MOONCAKE_CONFIG_PATH", "$MOONCAKE_CONFIG_PATH"),
                                      ("PYTHONHASHSEED", 0)]
    assert type(inst.env["PYTHONHASHSEED"]) is int                     # quirk 11.7
    assert inst.extras["instances"] == 1 and inst.extras["current_instance"] == 0
    store = catalog.strategies["kv_store_distributed_mooncake"]
    assert r.find("mooncake_master").command == store["mooncake_master"]["command"]
    assert inst.extras["mooncake_config"] == store["mooncake_vllm_config"]["template"]
    assert inst.extras["vllm_install"] == "uv pip install 'mooncake-transfer-engine>=0.3.10'"


def test_mooncake_docker_mounts_config_path_and_prints_integer(render):
    inst = render(MOE, hardware="h200", strategy="single_node_tp",
                  kv_offload="kv_store_distributed_mooncake").find("instance")
    d = inst.docker_argv()
    assert d[:14] == ["docker", "run", "--gpus", "all", "--privileged", "--ipc=host", "-p", "8000:8000",
                      "-v", "~/.cache/huggingface:/root/.cache/huggingface",
                      "-v", "$MOONCAKE_CONFIG_PATH:$MOONCAKE_CONFIG_PATH:ro",
                      "-e", "MOONCAKE_CONFIG_PATH=$MOONCAKE_CONFIG_PATH"]
    assert d[14:16] == ["-e", "PYTHONHASHSEED=0"]


def test_mooncake_centralized_default_two_instances(render, catalog):
    r = render(MOE, hardware="mi300x", strategy="single_node_tp",
               kv_offload="kv_store_centralized_mooncake")
    assert roles(r) == [("instance", 0), ("mooncake_master", None), ("mooncake_store", None),
                        ("router", None)]
    store = catalog.strategies["kv_store_centralized_mooncake"]
    master = r.find("mooncake_master")
    assert master.command == store["mooncake_master"]["command"]       # verbatim, '#' lines included
    assert master.command.startswith("# Reachable by every instance and the store")
    assert master.argv[0] == "mooncake_master" and master.argv[-1] == "-logtostderr"
    mstore = r.find("mooncake_store")
    assert mstore.command == "python3 -m mooncake.mooncake_store_service --config $MOONCAKE_STORE_CONFIG_PATH"
    assert mstore.config == store["mooncake_store_config"]["config"]
    router = r.find("router")
    assert router.command == (
        "vllm-router --policy cache_aware \\\n"
        "    --backend-url http://$VLLM_INSTANCE_1:8000 \\\n"
        "    --backend-url http://$VLLM_INSTANCE_2:8000 \\\n"
        "    --host $ROUTER_HOST \\\n    --port $ROUTER_PORT \\\n    --cache-threshold 0.5 \\\n"
        "    --balance-abs-threshold 4 \\\n    --balance-rel-threshold 1.1")
    assert router.install == "uv pip install vllm-router"
    assert r.find("instance").extras["vllm_install"] == \
        "uv pip install 'mooncake-transfer-engine-non-cuda>=0.3.10'"


def test_mooncake_one_instance_requested_has_no_router(render):
    r = render(MOE, hardware="h200", strategy="single_node_tp", kv_instances=1,
               kv_offload="kv_store_centralized_mooncake")
    assert [p.role for p in r.processes] == ["instance", "mooncake_master", "mooncake_store"]


def test_mooncake_multi_node_instances_use_instance_address(render):
    r = render(MOE, hardware="h200", strategy="multi_node_tp", node_count=2,
               kv_instances={"count": 3, "current": 1}, kv_offload="kv_store_centralized_mooncake")
    assert roles(r) == [("instance_head", 0), ("instance_worker", 1), ("mooncake_master", None),
                        ("mooncake_store", None), ("router", None)]
    head, worker = r.find("instance_head"), r.find("instance_worker")
    assert args(head) == ["--trust-remote-code", "--tensor-parallel-size", "16", "--nnodes", "2",
                          "--node-rank", "0", "--master-addr", "$VLLM_INSTANCE_2",
                          "--kv-transfer-config", MOONCAKE]
    assert args(worker) == ["--trust-remote-code", "--tensor-parallel-size", "16", "--nnodes", "2",
                            "--node-rank", "1", "--master-addr", "$VLLM_INSTANCE_2", "--headless",
                            "--kv-transfer-config", MOONCAKE]
    assert list(head.env.items()) == [*IFACE, ("MOONCAKE_CONFIG_PATH", "$MOONCAKE_CONFIG_PATH"),
                                      ("PYTHONHASHSEED", 0)]
    assert r.find("router").argv.count("--backend-url") == 3


def test_mooncake_multi_node_dep_instance_address(render):
    r = render(MOE, hardware="h200", strategy="multi_node_dep", node_count=2,
               kv_instances={"count": 2, "current": 0}, kv_offload="kv_store_distributed_mooncake")
    worker = r.find("instance_worker")
    assert worker.argv[worker.argv.index("--data-parallel-address") + 1] == "$VLLM_INSTANCE_1"


def test_mooncake_single_instance_multi_node_uses_head_ip(render):
    r = render(MOE, hardware="h200", strategy="multi_node_tp", node_count=2,
               kv_offload="kv_store_distributed_mooncake")
    assert r.find("instance_head").argv[r.find("instance_head").argv.index("--master-addr") + 1] == "$HEAD_IP"
    assert "router" not in [p.role for p in r.processes]


def test_mooncake_skips_features_with_a_companion(render, recipe_copy):
    recipe = recipe_copy(MOE)
    recipe["features"]["tool_calling"]["companion"] = {"command": "helper --serve"}
    plain = render(MOE, recipe=recipe, hardware="h200", strategy="single_node_tp", features=["tool_calling"])
    assert "--enable-auto-tool-choice" in plain.processes[0].argv
    mc = render(MOE, recipe=recipe, hardware="h200", strategy="single_node_tp", features=["tool_calling"],
                kv_offload="kv_store_distributed_mooncake")
    assert "--enable-auto-tool-choice" not in mc.find("instance").argv


def test_mooncake_with_pd_multiconnector_replaces_nixl(render, catalog):
    r = render(PD, hardware="h200", strategy="pd_cluster", kv_offload="kv_store_centralized_mooncake")
    assert r.deploy_type == "pd_cluster"
    assert [p.role for p in r.processes] == ["prefill", "decode", "router", "mooncake_master",
                                             "mooncake_store"]
    prefill, decode = r.find("prefill"), r.find("decode")
    assert args(prefill) == ["--trust-remote-code", "--port", "8001", "--tensor-parallel-size", "4",
                             "--prefill-extra", "1", "--recipe-gen", "hopper", "--kv-transfer-config", MULTI_P]
    assert args(decode) == ["--trust-remote-code", "--port", "8002", "--compilation-config", FULL_DECODE,
                            "--tensor-parallel-size", "4", "--decode-vllm", "1", "--recipe-gen", "hopper",
                            "--kv-transfer-config", MULTI_D]
    assert list(prefill.env.items()) == [
        ("VLLM_NIXL_SIDE_CHANNEL_PORT", "5557"), ("VLLM_NIXL_SIDE_CHANNEL_HOST", "$PREFILL_NODE_1"),
        ("MOONCAKE_CONFIG_PATH", "$MOONCAKE_CONFIG_PATH"), ("PYTHONHASHSEED", 0),
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3"), ("PD_SO_ENV", "1"), ("PREFILL_SO_ENV", "1")]
    store = catalog.strategies["kv_store_centralized_mooncake"]
    assert r.meta["mooncake"] == {"config": store["mooncake_vllm_config"]["template"],
                                  "install": "uv pip install 'mooncake-transfer-engine>=0.3.10'"}
    assert prefill.extras["mooncake_config"] == store["mooncake_vllm_config"]["template"]
    assert r.find("router").argv[:4] == ["vllm-router", "--policy", "round_robin", "--vllm-pd-disaggregation"]


# ---------------------------------------------------------------------------------
# 6.10 omni


def test_omni_default_variant_skips_variant_args_and_env(render):
    r = render(OMNI, hardware="h200", omni_task="t2i")
    assert r.deploy_type == "omni"
    [p] = r.processes
    assert p.role == "omni" and p.kind == "omni"
    assert p.argv == ["vllm", "serve", "test-org/Omni-Model", "--trust-remote-code", "--recipe-hopper", "1",
                      "--port", "8092", "--omni"]
    assert list(p.env.items()) == [("OMNI_BASE", "1"), ("RECIPE_HOPPER", "1")]
    assert p.command == ("vllm serve test-org/Omni-Model \\\n  --trust-remote-code \\\n"
                         "  --recipe-hopper 1 \\\n  --port 8092 \\\n  --omni")


def test_omni_task_model_and_arg_order(render):
    [p] = render(OMNI, variant="large", hardware="h200", omni_task="speech").processes
    assert p.extras["model_id"] == "test-org/Omni-Speech"       # task model_id > variant > model
    assert p.argv == ["vllm", "serve", "test-org/Omni-Speech",
                      "--trust-remote-code",                 # base_args
                      "--large-flag", "1",                   # variant extra_args (not default)
                      "--task-type", "speech",               # task extra_args
                      "--task-h200", "1",                    # task per-GPU extra_args
                      "--recipe-hopper", "1",                # recipe gen HO
                      "--large-hopper",                      # variant gen HO
                      "--large-h200",                        # variant exact HO
                      "--port", "8092", "--omni"]            # --omni last
    assert list(p.env.items()) == [("OMNI_BASE", "1"), ("LARGE_ENV", "1"), ("RECIPE_HOPPER", "1"),
                                   ("LARGE_H200", "1")]


def test_omni_variant_model_id_and_task_by_id(render):
    [p] = render(OMNI, variant="large", hardware="mi300x", omni_task="t2i").processes
    assert p.argv == ["vllm", "serve", "test-org/Omni-Model-Large", "--trust-remote-code", "--large-flag", "1",
                      "--port", "8092", "--omni"]
    [q] = render(OMNI, hardware="mi300x", omni_task="t2s").processes     # task id also matches
    assert q.argv[2] == "test-org/Omni-Speech" and q.argv[3:7] == ["--trust-remote-code", "--task-type",
                                                                   "speech", "--port"]


def test_omni_docker_publishes_8000(render):
    [p] = render(OMNI, hardware="h200", omni_task="t2i").processes
    assert p.port == 8092
    d = p.docker_argv()
    assert d[6:8] == ["-p", "8000:8000"]
    assert d[-5:] == ["--recipe-hopper", "1", "--port", "8092", "--omni"]
    assert p.docker_command().startswith("docker run --gpus all \\\n  --privileged --ipc=host -p 8000:8000")


def test_omni_path_ignores_features_and_strategy_tp(render):
    [p] = render(OMNI, hardware="mi300x", omni_task="t2i", features=["tool_calling"]).processes
    assert p.argv == ["vllm", "serve", "test-org/Omni-Model", "--trust-remote-code", "--port", "8092", "--omni"]


# ---------------------------------------------------------------------------------
# more corners


def test_empty_string_args_are_dropped_before_dedupe(proc):
    p = proc(FALLBACK, hardware="mi300x", strategy="single_node_tp", advanced_args=["--x", "", "y"])
    assert args(p) == ["--tensor-parallel-size", "1", "--x", "y"]


def test_variant_tp_map_without_match_falls_to_strategy_override_tp(proc, recipe_copy):
    recipe = recipe_copy(TP)
    del recipe["variants"]["tpmap"]["tp"]["default"]
    p = proc(TP, recipe=recipe, variant="tpmap", hardware="mi300x", strategy="single_node_tp")
    assert args(p) == ["--tensor-parallel-size", "2"]          # strategy_overrides tp `amd`


def test_dep_local_size_scan_order_vllm_args_then_extra_args(render, recipe_copy):
    # dpLocal = value after the LAST --data-parallel-size-local scanning vllm_args, extra_args,
    # gen HO, exact HO; the argv itself keeps vllm_args' value (emitted after extra_args)
    recipe = recipe_copy(DEP)
    recipe["strategy_overrides"]["multi_node_dep"]["extra_args"] = ["--data-parallel-size-local", "2"]
    worker = render(DEP, recipe=recipe, hardware="h200", strategy="multi_node_dep",
                    node_count=2).find("worker", 1)
    assert args(worker)[-4:] == ["--data-parallel-start-rank", "2", "--data-parallel-size-local", "4"]


def test_generation_array_uses_first_element_for_overrides(proc, catalog):
    taxonomy = copy.deepcopy(catalog.taxonomy)
    taxonomy["hardware_profiles"]["hybrid"] = {"brand": "NVIDIA", "generation": ["hopper", "blackwell"],
                                               "gpu_count": 8, "vram_gb": 1128}
    taxonomy["hardware_profiles"]["legacy"] = {"brand": "NVIDIA", "gpu_generation": "hopper",
                                               "gpu_count": 8, "vram_gb": 1128}
    for hw in ("hybrid", "legacy"):
        p = proc(ORDER, taxonomy=taxonomy, hardware=hw, strategy="single_node_tp")
        assert args(p)[-4:] == ["--recipe-gen", "hopper", "--variant-gen", "hopper"]


def test_non_pd_strategies_never_filter_nccl_env(proc, recipe_copy):
    recipe = recipe_copy(MOE)
    recipe["strategy_overrides"] = {"multi_node_tp": {"env": {"NCCL_CUMEM_ENABLE": "1",
                                                              "UCX_NET_DEVICES": "all"}}}
    p = proc(MOE, recipe=recipe, hardware="h200", strategy="multi_node_tp", node_count=1)
    assert list(p.env.items()) == [*IFACE, ("NCCL_CUMEM_ENABLE", "1"), ("UCX_NET_DEVICES", "all")]


def test_kv_option_env_precedes_strategy_override_env(proc, recipe_copy):
    recipe = recipe_copy(KV)
    recipe["strategy_overrides"] = {"single_node_tp": {"env": {"PYTHONHASHSEED": "42", "OTHER": "1"}}}
    p = proc(KV, recipe=recipe, hardware="h200", strategy="single_node_tp", kv_offload="offloading_fs")
    assert list(p.env.items()) == [("PYTHONHASHSEED", "42"), ("OTHER", "1")]


def test_mooncake_instances_default_to_two_without_yaml_default(catalog):
    strategies = copy.deepcopy(catalog.strategies)
    del strategies["kv_store_distributed_mooncake"]["default_instances"]
    r = resolve(catalog.recipes[MOE], Request(MOE, hardware="h200", strategy="single_node_tp",
                                              kv_offload="kv_store_distributed_mooncake"),
                strategies, catalog.taxonomy)
    assert r.find("router").argv.count("--backend-url") == 2


def test_pd_role_parallel_flag_override(render, recipe_copy):
    recipe = recipe_copy(PD)
    recipe["strategy_overrides"]["pd_cluster"]["decode"]["parallel_flag"] = "--pipeline-parallel-size"
    decode = render(PD, recipe=recipe, hardware="h200", strategy="pd_cluster",
                    pd_nodes={"prefill": 1, "decode": 1}).find("decode")
    assert args(decode)[7:9] == ["--pipeline-parallel-size", "8"]


def test_pd_parallelism_from_pd_nodes_beats_strategy_overrides(render):
    r = render(PDDEP, hardware="h200", strategy="pd_cluster",
               pd_nodes={"prefill": {"nodes": 1, "parallelism": "dep"}, "decode": 1})
    assert r.find("prefill").extras["pd_role"]["parallelism"] == "dep"
    assert r.find("decode").extras["pd_role"]["parallelism"] == "dep"     # from strategy_overrides


def test_omni_serve_binary(render, recipe_copy):
    recipe = recipe_copy(OMNI)
    recipe["omni"]["serve_binary"] = "vllm-omni serve"
    [p] = render(OMNI, recipe=recipe, hardware="mi300x", omni_task="t2i").processes
    assert p.command.startswith("vllm-omni serve test-org/Omni-Model \\\n")


def test_served_model_falls_back_to_unknown(proc, recipe_copy):
    recipe = recipe_copy(FALLBACK)
    del recipe["model"]["model_id"]
    assert proc(FALLBACK, recipe=recipe, hardware="mi300x", strategy="single_node_tp").argv[:3] == [
        "vllm", "serve", "unknown"]


def test_pd_pool_modes_include_supported_opt_in_strategies(render, recipe_copy):
    recipe = recipe_copy(PD)
    recipe["strategy_hardware"] = {"multi_node_dep": {"h200": "supported"}}
    req = dict(strategy="pd_cluster", pd_nodes={"prefill": {"nodes": 1, "parallelism": "dep"}, "decode": 1})
    on_h200 = render(PD, recipe=recipe, hardware="h200", **req).find("prefill")
    assert "--data-parallel-size-local" in on_h200.argv          # dep offered via the opt-in
    on_gb200 = render(PD, recipe=recipe, hardware="gb200", **req).find("prefill")
    assert "--data-parallel-size-local" not in on_gb200.argv     # not opted in there: snapped to tp


def test_mooncake_is_not_gated_by_brand_in_synthesis(render):
    r = render(MOE, hardware="xeon6", strategy="single_node_tp", kv_offload="kv_store_distributed_mooncake")
    assert r.deploy_type == "kv_store_lb"
    assert r.find("instance").argv[-2:] == ["--kv-transfer-config", MOONCAKE]


# ---------------------------------------------------------------------------------
# rules decided where SCHEMA.md is ambiguous or silent (see each test)


def test_pd_env_rename_uses_unsnapped_mode_tp_snapped_to_dep(render):
    prefill = render(PDDEP, hardware="h200", strategy="pd_cluster",
                     pd_nodes={"prefill": {"nodes": 2, "rank": 1, "parallelism": "tp"},
                               "decode": 1}).find("prefill")
    assert "--data-parallel-size-local" in prefill.argv            # args are snapped to dep
    assert prefill.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "$PREFILL_NODE_1"


def test_pd_env_rename_uses_unsnapped_mode_dep_snapped_to_tp(render):
    prefill = render(PD, hardware="h200", strategy="pd_cluster",
                     pd_nodes={"prefill": {"nodes": 2, "rank": 1, "parallelism": "dep"},
                               "decode": 1}).find("prefill")
    assert "--headless" in prefill.argv                             # args are snapped to tp
    assert prefill.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "$PREFILL_NODE_2"


def test_pd_dep_rename_only_own_role(render):
    prefill = render(PDDEP, hardware="h200", strategy="pd_cluster",
                     pd_nodes={"prefill": {"nodes": 2, "rank": 1}, "decode": 1}).find("prefill")
    assert prefill.env["PREFILL_PEER"] == "$DECODE_NODE_1"


# Decision: Mooncake "composes" with P/D too (the corpus flags such renderings
# `mooncake_pd_composition`), so companion features are skipped for P/D roles as well.
def test_pd_with_mooncake_drops_companion_features(render, recipe_copy):
    recipe = recipe_copy(PD)
    recipe["features"] = {"helper": {"args": ["--helper-flag"], "companion": {"command": "helper --serve"}}}
    plain = render(PD, recipe=recipe, hardware="h200", strategy="pd_cluster", features=["helper"])
    assert "--helper-flag" in plain.find("prefill").argv
    r = render(PD, recipe=recipe, hardware="h200", strategy="pd_cluster", features=["helper"],
               kv_offload="kv_store_distributed_mooncake")
    assert "--helper-flag" not in r.find("prefill").argv


def test_lmcache_companion_command_is_trimmed(proc, catalog):
    p = proc(ORDER, hardware="b200", strategy="single_node_tp", kv_offload="lmcache")
    expected = catalog.taxonomy["kv_offload"]["lmcache"]["companion"]["command"].rstrip()
    assert p.extras["companions"][0]["command"] == expected
