"""Selection helpers: what a deployer offers and picks (SCHEMA.md 8, 6.4 strategy_min_gpus)."""

from __future__ import annotations

import copy

import pytest

from vllm_fleet import choices
from vllm_fleet.rendermodel import Request
from vllm_fleet.choices import ChoiceError

SEL = "test-org/Select-Model"
FEAT = "test-org/Feature-Model"


@pytest.fixture
def sel(catalog):
    return catalog.recipes[SEL]


def compat(catalog, recipe, variant):
    return choices.compatible_hardware(recipe, recipe["variants"][variant], catalog.taxonomy)


# -- compatible hardware ------------------------------------------------------------

@pytest.mark.parametrize("variant, expected", [
    # h100: not restricted, so offered although undeclared; gb300: `unsupported`;
    # rtx_pro_6000 / trillium / xeon6: restricted but declared (trillium as `supported`);
    # arc_pro_b60 / ascend_950pr: restricted and undeclared
    ("default", ["h100", "h200", "b200", "gb200", "rtx_pro_6000", "mi300x", "trillium", "xeon6"]),
    # non-scalable rtx_pro_6000 (96 GB) needs the variant to fit one node
    ("big", ["h100", "h200", "b200", "gb200", "mi300x", "trillium", "xeon6"]),
    # nvfp4 -> NVIDIA + blackwell
    ("nvfp4", ["b200", "gb200", "rtx_pro_6000"]),
    # precision_hardware replaces the constraint outright ...
    ("nvfp4_any", ["h100", "h200", "b200", "gb200", "rtx_pro_6000"]),
    # ... and can add one
    ("mxfp4_amd", ["mi300x"]),
    # supported_hardware allowlist, taxonomy order kept
    ("pinned", ["gb200", "mi300x", "trillium"]),
])
def test_compatible_hardware(catalog, sel, variant, expected):
    assert compat(catalog, sel, variant) == expected


def test_restricted_profile_offered_once_declared(catalog, recipe_copy):
    recipe = recipe_copy(SEL)
    recipe["meta"]["hardware"]["arc_pro_b60"] = "verified"
    recipe["meta"]["hardware"]["ascend_950pr"] = "verified"
    assert compat(catalog, recipe, "default")[-2:] == ["arc_pro_b60", "ascend_950pr"]
    # non-scalable ascend_950pr (128 GB) only when the variant fits: 200 GB does not
    assert compat(catalog, recipe, "big")[-1] == "arc_pro_b60"


def test_precision_matches_any_generation_of_an_array(catalog, sel):
    taxonomy = copy.deepcopy(catalog.taxonomy)
    taxonomy["hardware_profiles"]["hybrid"] = {"brand": "NVIDIA", "generation": ["hopper", "blackwell"],
                                               "gpu_count": 8, "vram_gb": 1128}
    got = choices.compatible_hardware(sel, sel["variants"]["nvfp4"], taxonomy)
    assert got == ["b200", "gb200", "rtx_pro_6000", "hybrid"]


# -- offered strategies ----------------------------------------------------------------

@pytest.mark.parametrize("hw, expected", [
    ("h200", ["single_node_tp", "multi_node_tp", "multi_node_dep", "pd_cluster"]),  # exact `supported`
    ("h100", ["single_node_tp", "multi_node_dep", "pd_cluster"]),    # multi_node_tp: hopper unsupported
    ("gb200", ["single_node_tp", "multi_node_tp", "pd_cluster"]),    # multi_node_dep: exact unsupported
    ("mi300x", ["single_node_tp", "multi_node_tp", "pd_cluster", "single_node_tep"]),  # opt-in appended
    ("rtx_pro_6000", ["single_node_tp"]),                            # non-scalable: no multi/pd
    ("trillium", ["multi_node_tp", "pd_cluster"]),                   # floor 40 > 8 GPUs for single node
    ("xeon6", ["single_node_tp", "multi_node_tp", "pd_cluster"]),    # multi_node_dep: `default` unsupported
])
def test_offered_strategies(catalog, sel, hw, expected):
    assert choices.offered_strategies(sel, hw, catalog.strategies, catalog.taxonomy) == expected


def test_unreachable_floor_drops_multi_node_strategies(catalog, recipe_copy):
    recipe = recipe_copy(SEL)
    recipe["strategy_min_gpus"]["trillium"] = 129      # > 16 nodes x 8 GPUs
    assert choices.offered_strategies(recipe, "trillium", catalog.strategies, catalog.taxonomy) == []
    recipe["strategy_min_gpus"]["trillium"] = 128
    assert choices.offered_strategies(recipe, "trillium", catalog.strategies, catalog.taxonomy) == [
        "multi_node_tp", "pd_cluster"]


# -- GPU floors --------------------------------------------------------------------------

@pytest.mark.parametrize("strategy, hw, pool_mode, floor", [
    ("single_node_tp", "h200", None, 0),
    ("multi_node_dep", "h200", None, 32),       # per-strategy 32 beats the per-GPU block's 8
    ("pd_cluster", "h200", None, 24),           # per-GPU block 24 beats per-strategy 16
    ("pd_cluster", "h100", None, 16),
    ("single_node_tp", "trillium", None, 40),   # per-GPU number applies to every strategy
    ("pd_cluster", "trillium", None, 40),
    ("pd_cluster", "h100", "dep", 32),          # pool mode also tries multi_node_dep
    ("pd_cluster", "h200", "tp", 24),
])
def test_gpu_floor(sel, strategy, hw, pool_mode, floor):
    assert choices.gpu_floor(sel, strategy, hw, pool_mode) == floor


def test_gpu_floor_plain_number():
    assert choices.gpu_floor({"strategy_min_gpus": 12}, "single_node_tp", "h200") == 12
    assert choices.gpu_floor({}, "multi_node_tp", "h200") == 0


def test_gpu_floor_per_gpu_map_only():
    recipe = {"strategy_min_gpus": {"b200": {"multi_node_tp": 16, "single_node_tep": 4}}}
    assert choices.gpu_floor(recipe, "multi_node_tp", "b200") == 16
    assert choices.gpu_floor(recipe, "multi_node_tp", "h200") == 0
    assert choices.gpu_floor(recipe, "pd_cluster", "b200", pool_mode="tep") == 4   # single_node_tep


@pytest.mark.parametrize("strategy, hw, nodes", [
    ("pd_cluster", "h200", 3), ("multi_node_dep", "h200", 4), ("multi_node_tp", "trillium", 5),
    ("multi_node_tp", "h200", 1), ("single_node_tp", "h200", 1),
])
def test_nodes_for_strategy(catalog, sel, strategy, hw, nodes):
    assert choices.nodes_for(sel, strategy, hw, catalog.strategies, catalog.taxonomy) == nodes


# -- default hardware ----------------------------------------------------------------------

def default_hw(catalog, recipe, variant):
    return choices.default_hardware(recipe, recipe["variants"][variant], catalog.taxonomy)


def test_default_hardware_h200(catalog, sel):
    assert default_hw(catalog, sel, "default") == "h200"
    assert default_hw(catalog, sel, "nvfp4_any") == "h200"      # not Blackwell-constrained


def test_default_hardware_blackwell_constrained(catalog, sel, recipe_copy):
    assert default_hw(catalog, sel, "nvfp4") == "b200"
    recipe = recipe_copy(SEL)
    recipe["meta"]["hardware"]["b200"] = "unsupported"
    assert default_hw(catalog, recipe, "nvfp4") == "gb200"


def test_default_hardware_meta_default_only_if_it_survives(catalog, recipe_copy):
    recipe = recipe_copy(SEL)
    recipe["meta"]["default_hardware"] = "gb200"
    assert default_hw(catalog, recipe, "default") == "gb200"
    assert default_hw(catalog, recipe, "mxfp4_amd") == "mi300x"
    recipe["meta"]["default_hardware"] = "ascend_950pr"           # restricted, undeclared
    assert default_hw(catalog, recipe, "default") == "h200"


@pytest.mark.parametrize("allow, expected", [
    (["mi300x", "trillium", "gb200"], "gb200"),
    (["xeon6", "mi300x", "trillium", "rtx_pro_6000"], "rtx_pro_6000"),   # NVIDIA first
    (["xeon6", "mi300x", "trillium"], "mi300x"),                         # then alphabetical
    (["arc_pro_b60"], None),                                             # nothing compatible
])
def test_default_hardware_nvidia_first_alphabetical(catalog, recipe_copy, allow, expected):
    recipe = recipe_copy(SEL)
    recipe["variants"]["pinned"]["supported_hardware"] = allow
    assert default_hw(catalog, recipe, "pinned") == expected


# -- recommended strategy -----------------------------------------------------------------------

@pytest.mark.parametrize("default, offered, nodes, expected", [
    ("single_node_tep", ["single_node_tp", "single_node_tep", "multi_node_tep"], 1, "single_node_tep"),
    ("single_node_tep", ["single_node_tp", "single_node_tep", "multi_node_tep"], 2, "multi_node_tep"),
    ("single_node_tep", ["single_node_tp", "single_node_tep", "multi_node_tp"], 2, "single_node_tep"),
    ("multi_node_dep", ["single_node_tp"], 1, "single_node_tp"),          # default not offered
    (None, ["single_node_tep", "multi_node_tep", "multi_node_dep"], 2, "multi_node_dep"),
    (None, ["multi_node_tep", "multi_node_dep", "multi_node_tp"], 2, "multi_node_tp"),
    (None, ["single_node_tep", "multi_node_tep"], 2, "multi_node_tep"),
    (None, ["single_node_tep", "single_node_tp", "multi_node_tp"], 1, "single_node_tp"),
    (None, ["pd_cluster", "single_node_dep"], 1, "pd_cluster"),           # first offered
    (None, [], 1, None),
])
def test_recommend_strategy(default, offered, nodes, expected):
    recipe = {"default_strategy": default} if default else {}
    assert choices.recommend_strategy(recipe, offered, nodes) == expected


# -- complete(): defaults and validation ------------------------------------------------------------

def complete(catalog, hf_id, recipe=None, **fields):
    req = Request(hf_id=hf_id, **fields)
    choices.complete(recipe or catalog.recipes[hf_id], req, catalog.strategies, catalog.taxonomy)
    return req


def test_complete_fills_defaults(catalog):
    req = complete(catalog, SEL)
    assert (req.hardware, req.strategy, req.node_count, req.features) == ("h200", "single_node_tp", 1, [])


@pytest.mark.parametrize("variant, hw, features", [
    ("default", "h200", ["tool_calling", "reasoning"]),
    ("default", "gb200", ["reasoning"]),                              # hardware_opt_in_features
    ("fp8", "h200", ["tool_calling", "reasoning", "spec_decoding"]),  # default_modes forces it on
])
def test_complete_default_features(catalog, variant, hw, features):
    assert complete(catalog, FEAT, variant=variant, hardware=hw).features == features


def test_complete_grows_nodes_when_variant_does_not_fit(catalog, recipe_copy):
    recipe = recipe_copy(SEL)
    recipe["variants"]["big"]["vram_minimum_gb"] = 2000
    req = complete(catalog, SEL, recipe=recipe, variant="big", hardware="h200")
    assert (req.strategy, req.node_count) == ("multi_node_tp", 2)       # ceil(2000 / 1128)
    req = complete(catalog, SEL, recipe=recipe, variant="big", hardware="h100")
    assert (req.strategy, req.node_count) == ("multi_node_dep", 4)      # ceil(2000 / 640); tp off on hopper


def test_complete_recommends_multi_node_at_n_nodes(catalog):
    req = complete(catalog, SEL, hardware="h200", strategy=None, node_count=2)
    assert (req.strategy, req.node_count) == ("multi_node_tp", 2)


def test_complete_node_count_grows_to_floor(catalog):
    # trillium offers no single-node strategy (floor 40 GPUs): first offered, ceil(40 / 8) nodes
    req = complete(catalog, SEL, hardware="trillium")
    assert (req.strategy, req.node_count) == ("multi_node_tp", 5)


@pytest.mark.parametrize("fields, message", [
    ({"variant": "nope"},
     "unknown variant 'nope' for test-org/Select-Model; valid: default, big, nvfp4, nvfp4_any, mxfp4_amd, pinned"),
    ({"hardware": "zz"},
     "unknown hardware 'zz'; valid: h100, h200, b200, gb200, gb300, rtx_pro_6000, mi300x, trillium, xeon6, "
     "arc_pro_b60, ascend_950pr"),
    ({"variant": "nvfp4", "hardware": "h200"},
     "variant 'nvfp4' of test-org/Select-Model cannot run on 'h200'; valid hardware: b200, gb200, rtx_pro_6000"),
    ({"variant": "big", "hardware": "rtx_pro_6000"},
     "variant 'big' of test-org/Select-Model cannot run on 'rtx_pro_6000'; valid hardware: h100, h200, b200, "
     "gb200, mi300x, trillium, xeon6"),
    ({"hardware": "h100", "strategy": "multi_node_tp"},
     "strategy 'multi_node_tp' is not offered for test-org/Select-Model on 'h100'; valid: single_node_tp, "
     "multi_node_dep, pd_cluster"),
    ({"hardware": "h200", "strategy": "zz"},
     "unknown strategy 'zz'; valid: multi_node_dep, multi_node_tep, multi_node_tp, multi_node_tp_dp, "
     "multi_node_tp_pp, pd_cluster, single_node_dep, single_node_tep, single_node_tp"),
    ({"hardware": "h200", "strategy": "multi_node_dep", "node_count": 2},
     "strategy 'multi_node_dep' needs at least 32 GPUs on 'h200' (4 nodes of 8); got --nodes 2"),
    ({"hardware": "h200", "strategy": "single_node_tp", "node_count": 2},
     "strategy 'single_node_tp' runs on one node; got --nodes 2"),
    ({"hardware": "h200", "kv_offload": "zz"},
     "unknown kv offload option 'zz'; valid: simple, offloading_cpu, offloading_fs, lmcache, "
     "kv_store_centralized_mooncake, kv_store_distributed_mooncake"),
])
def test_complete_rejects_with_valid_values(catalog, fields, message):
    with pytest.raises(ChoiceError) as info:
        complete(catalog, SEL, **fields)
    assert str(info.value) == message


def test_complete_rejects_unknown_feature_and_mode(catalog):
    with pytest.raises(ChoiceError, match=r"^unknown feature 'nope' for test-org/Feature-Model; valid: "
                                          r"tool_calling, reasoning, spec_decoding, text_only$"):
        complete(catalog, FEAT, hardware="h200", features=["nope"])
    with pytest.raises(ChoiceError, match=r"^unknown mode of feature 'spec_decoding' 'x' for "
                                          r"test-org/Feature-Model; valid: eagle3, mtp, dspark$"):
        complete(catalog, FEAT, hardware="h200", feature_modes={"spec_decoding": "x"})


def test_complete_floor_met(catalog):
    req = complete(catalog, SEL, hardware="h200", strategy="multi_node_dep", node_count=4)
    assert req.node_count == 4


def test_complete_omni_picks_first_task(catalog):
    req = complete(catalog, "test-org/Omni-Model", hardware="h200")
    assert (req.strategy, req.omni_task) == (None, "speech")
    with pytest.raises(ChoiceError, match="unknown omni task 'zz'"):
        complete(catalog, "test-org/Omni-Model", hardware="h200", omni_task="zz")


def test_default_features_function(catalog):
    recipe = catalog.recipes[FEAT]
    assert choices.default_features(recipe, recipe["variants"]["default"], None) == ["tool_calling", "reasoning"]
