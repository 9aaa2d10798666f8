"""Loading and stacking recipe sources (SCHEMA.md 1): trees, single files, API JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from vllm_fleet import choices, loader
from vllm_fleet.loader import LoadError
from vllm_fleet.render import resolve
from vllm_fleet.rendermodel import Request

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
TREE = FIXTURES / "tree"
OVERLAY = FIXTURES / "overlay"
API_JSON = FIXTURES / "api" / "test-org" / "Api-Model.json"


# -- one tree ------------------------------------------------------------------------------

def test_tree_contents(catalog):
    assert sorted(catalog.recipes) == [
        "test-org/Dep-Model", "test-org/Docker-Model", "test-org/Fallback-Model", "test-org/Feature-Model",
        "test-org/Kv-Model", "test-org/Moe-Model", "test-org/Omni-Model", "test-org/Order-Model",
        "test-org/Pd-Dep-Model", "test-org/Pd-Model", "test-org/Select-Model", "test-org/Tp-Model"]
    assert catalog.serving_strategies() == [
        "multi_node_dep", "multi_node_tep", "multi_node_tp", "multi_node_tp_dp", "multi_node_tp_pp",
        "pd_cluster", "single_node_dep", "single_node_tep", "single_node_tp"]
    assert catalog.kv_stores() == ["kv_store_centralized_mooncake", "kv_store_distributed_mooncake"]
    assert list(catalog.profiles) == ["h100", "h200", "b200", "gb200", "gb300", "rtx_pro_6000", "mi300x",
                                      "trillium", "xeon6", "arc_pro_b60", "ascend_950pr"]
    assert list(catalog.taxonomy["kv_offload"]) == ["simple", "offloading_cpu", "offloading_fs", "lmcache"]
    assert catalog.sources["test-org/Tp-Model"] == str(TREE / "models" / "test-org" / "Tp-Model.yaml")


def test_yaml_12_typing_in_loaded_recipes(catalog):
    recipe = catalog.recipes["test-org/Order-Model"]
    assert recipe["model"]["base_env"]["YAML12_FLAG"] == "yes"           # not True
    assert recipe["meta"]["date_added"] == "2026-01-02"                  # dates -> YYYY-MM-DD strings
    assert recipe["meta"]["date_updated"] == "2026-01-03"
    env = catalog.strategies["kv_store_centralized_mooncake"]["vllm"]["env"]
    assert env["PYTHONHASHSEED"] == 0 and type(env["PYTHONHASHSEED"]) is int
    assert catalog.taxonomy["kv_offload"]["offloading_fs"]["env"]["PYTHONHASHSEED"] == "0"


def test_yes_reaches_the_docker_env_as_text(catalog):
    r = resolve(catalog.recipes["test-org/Order-Model"],
                Request("test-org/Order-Model", hardware="b200", strategy="single_node_tp"),
                catalog.strategies, catalog.taxonomy)
    assert "YAML12_FLAG=yes" in r.processes[0].docker_argv()


# -- stacking --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stacked():
    return loader.load([TREE, OVERLAY])


def test_later_tree_overrides_recipe_by_id(stacked, catalog):
    assert stacked.recipes["test-org/Order-Model"]["model"]["model_id"] == "test-org/Order-Model-Overlay"
    assert stacked.sources["test-org/Order-Model"] == str(OVERLAY / "models" / "test-org" / "Order-Model.yaml")
    assert stacked.recipes["test-org/Tp-Model"] == catalog.recipes["test-org/Tp-Model"]
    assert len(stacked.recipes) == len(catalog.recipes)


def test_later_tree_overrides_strategy_by_name_not_file_name(stacked):
    assert stacked.strategies["single_node_tp"]["vllm_args"] == ["--overlay-strategy-flag"]
    assert stacked.strategy_sources["single_node_tp"].endswith("zz_tensor_parallel.yaml")
    assert "zz_tensor_parallel" not in stacked.strategies
    assert stacked.strategies["single_node_tep"]["vllm_args"] == ["--enable-expert-parallel"]


def test_later_taxonomy_overrides_profile_by_id(stacked, catalog):
    assert stacked.profiles["h200"]["gpu_count"] == 4
    assert stacked.profiles["h200"]["vram_gb"] == 564
    assert stacked.profiles["h100"] == catalog.profiles["h100"]
    assert list(stacked.profiles)[-1] == "h20"
    assert stacked.taxonomy["kv_offload"] == catalog.taxonomy["kv_offload"]     # untouched key kept


def test_stacked_rendering(stacked):
    def argv(hf_id, strategy):
        req = Request(hf_id, hardware="h200", strategy=strategy)
        return resolve(stacked.recipes[hf_id], req, stacked.strategies, stacked.taxonomy).processes[0].argv
    assert argv("test-org/Order-Model", "single_node_tp") == [
        "vllm", "serve", "test-org/Order-Model-Overlay", "--overlay-strategy-flag", "--tensor-parallel-size", "1"]
    assert argv("test-org/Moe-Model", "single_node_tep") == [
        "vllm", "serve", "test-org/Moe-Model", "--trust-remote-code", "--enable-expert-parallel",
        "--tensor-parallel-size", "4"]


def test_single_recipe_file_source(tmp_path):
    path = tmp_path / "other-org" / "Solo.yaml"
    path.parent.mkdir()
    shutil.copy(TREE / "models" / "test-org" / "Fallback-Model.yaml", path)
    cat = loader.load([TREE, path])
    assert cat.recipes["other-org/Solo"]["model"]["model_id"] == "test-org/Fallback-Model"
    assert cat.sources["other-org/Solo"] == str(path)


# -- API JSON ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def api_doc():
    return json.loads(API_JSON.read_text(encoding="utf-8"))


def test_api_json_becomes_a_recipe(api_doc):
    cat = loader.load([TREE, API_JSON])
    recipe = cat.recipes["test-org/Api-Model"]
    assert "hf_id" not in recipe and "recommended_command" not in recipe
    # the recommendation and its (non-kv_store) alternatives stand in for compatible_strategies
    assert recipe["compatible_strategies"] == ["single_node_tep", "single_node_tp", "multi_node_tep"]
    assert recipe["default_strategy"] == "single_node_tep"
    assert recipe["meta"]["default_hardware"] == "b200"
    assert "json" not in recipe["variants"]["fp8"]
    assert recipe["variants"]["fp8"]["model_id"] == "test-org/Api-Model-FP8"
    assert cat.sources["test-org/Api-Model"] == str(API_JSON)


@pytest.mark.parametrize("sources", [[TREE, API_JSON], [API_JSON, TREE], [API_JSON]])
def test_api_json_reproduces_the_recommendation(api_doc, sources):
    cat = loader.load(sources)
    recipe = cat.recipes["test-org/Api-Model"]
    req = Request("test-org/Api-Model")
    choices.complete(recipe, req, cat.strategies, cat.taxonomy)
    rec = api_doc["recommended_command"]
    assert (req.hardware, req.strategy, req.variant, req.node_count) == (
        rec["hardware"], rec["strategy"], rec["variant"], rec["node_count"])
    r = resolve(recipe, req, cat.strategies, cat.taxonomy)
    p = r.processes[0]
    assert r.deploy_type == rec["deploy_type"]
    assert p.argv == rec["argv"]
    assert p.command == rec["command"]
    assert p.env == rec["env"]
    assert p.image == rec["docker_image"]
    assert p.docker_argv() == rec["docker_argv"]
    assert p.docker_command() == rec["docker_command"]


def test_api_json_alone_brings_its_strategy_and_profile():
    cat = loader.load([API_JSON])
    assert list(cat.strategies) == ["single_node_tep"]
    assert list(cat.profiles) == ["b200"]


def test_api_json_does_not_replace_tree_strategy_or_profile(catalog):
    cat = loader.load([TREE, API_JSON])
    assert cat.strategies["single_node_tep"] == catalog.strategies["single_node_tep"]
    assert cat.strategy_sources["single_node_tep"].endswith("single_node_tep.yaml")
    assert cat.profiles == catalog.profiles


# -- errors ------------------------------------------------------------------------------------

def test_malformed_yaml_names_file_and_line(tmp_path):
    bad = tmp_path / "models" / "x" / "bad.yaml"
    bad.parent.mkdir(parents=True)
    bad.write_text("meta:\n  title: ok\nmodel:\n  base_args: [a, b\n  model_id: x\n", encoding="utf-8")
    with pytest.raises(LoadError) as info:
        loader.load([tmp_path])
    msg = str(info.value)
    assert msg.startswith(f"{bad}: line 5 column 11: malformed YAML: ")
    assert "\n" not in msg


@pytest.mark.parametrize("name, text, message", [
    ("models/x/list.yaml", "- a\n- b\n", "expected a mapping at the top level"),
    ("strategies/s.yaml", "deploy_type: single_node\n", "name: expected the strategy's name (a string)"),
    ("taxonomy.yaml", "- a\n", "expected a mapping at the top level"),
])
def test_structural_errors_name_the_file(tmp_path, name, text, message):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(LoadError) as info:
        loader.load([tmp_path])
    assert str(info.value) == f"{path}: {message}"


def test_missing_source(tmp_path):
    with pytest.raises(LoadError, match="no such recipe tree or file"):
        loader.load([tmp_path / "nope"])


@pytest.mark.parametrize("text, message", [
    ("{not json", "not readable as recipe JSON"),
    ('{"model": {}}', "hf_id: expected the recipe id (API JSON format)"),
])
def test_bad_api_json(tmp_path, text, message):
    path = tmp_path / "x.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(LoadError) as info:
        loader.load([path])
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)


def test_extra_sources_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_FLEET_RECIPES", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    assert loader.default_sources()[-2:] == [str(tmp_path / "a"), str(tmp_path / "b")]


def test_nested_recipe_directory_uses_first_directory_and_stem(tmp_path):
    deep = tmp_path / "models" / "org" / "family" / "Deep.yaml"
    deep.parent.mkdir(parents=True)
    shutil.copy(TREE / "models" / "test-org" / "Fallback-Model.yaml", deep)
    cat = loader.load([TREE, tmp_path])
    assert "org/Deep" in cat.recipes


def test_loader_and_validator_agree_on_which_files_are_recipes(tmp_path):
    from vllm_fleet import schema

    src = TREE / "models" / "test-org" / "Fallback-Model.yaml"
    for rel in ("org/Flat.yaml", "org/family/Deep.yaml", "org/Other.yml", "Stray.yaml"):
        (tmp_path / "models" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, tmp_path / "models" / rel)
    cat = loader.load([TREE, tmp_path])
    loaded = {cat.sources[h] for h in cat.recipes if cat.sources[h].startswith(str(tmp_path))}
    assert loaded == {str(tmp_path / "models" / "org" / "Flat.yaml"), str(tmp_path / "models" / "org" / "family" / "Deep.yaml")}
    problems = schema.validate_trees([TREE, tmp_path])
    ignored = {p.file for p in problems if "ignored" in p.message}
    assert ignored == {str(tmp_path / "models" / "org" / "Other.yml"), str(tmp_path / "models" / "Stray.yaml")}
    # every loaded recipe was validated: none of them is reported as ignored
    assert not loaded & ignored


def test_stacked_taxonomies_merge_the_same_way_for_loader_and_validator(tmp_path):
    from vllm_fleet import schema

    (tmp_path / "taxonomy.yaml").write_text("tasks: [{id: extra_task}, {id: text, display_name: Words}]\n"
                                            "hardware_profiles:\n  h200: {vram_gb: 1}\n")
    cat = loader.load([TREE, tmp_path])
    base = loader.read_yaml(TREE / "taxonomy.yaml")
    ids = [t["id"] for t in cat.taxonomy["tasks"]]
    assert ids == [t["id"] for t in base["tasks"]] + ["extra_task"]   # merged by id, not replaced
    assert cat.taxonomy["tasks"][0] == {"id": "text", "display_name": "Words"}
    assert cat.taxonomy["hardware_profiles"]["h200"] == {"vram_gb": 1}
    assert set(cat.taxonomy["hardware_profiles"]) == set(base["hardware_profiles"]) | {"h200"}
    # the validator stacks with the loader's function and finds files with the loader's rule
    assert schema.merge_taxonomy is loader.merge_taxonomy and schema.tree_files is loader.tree_files
    kinds = [k for k, _, _ in loader.tree_files(TREE)]
    assert kinds[0] == "taxonomy" and kinds == sorted(kinds, key=["taxonomy", "strategy", "kv_store", "recipe"].index)
    assert {k for k in kinds} == {"taxonomy", "strategy", "kv_store", "recipe"}
