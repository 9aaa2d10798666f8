"""Unit tests for ``vllm_fleet.schema`` (the recipe-tree validator).

The fixture trees live in ``tests/fixtures/schema``:

* ``base``: small taxonomy, three strategies, one kv_store and two valid recipes
  that use the unusual-but-valid corners of the upstream schema;
* ``broken``: recipes, a strategy and a kv_store with known problems (models
  only reference ``base``'s taxonomy, so it is stacked on top of ``base``);
* ``overlay``: a partial taxonomy (one extra profile), a strategy override and a
  recipe override;
* ``models-only``: a private tree with nothing but ``models/``.

Run with ``PYTHONPATH=plugins/module_utils python3 -m pytest tests/unit``.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from vllm_fleet import schema
from vllm_fleet.yamlio import load_yaml

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "schema"
BASE = FIXTURES / "base"
BROKEN = FIXTURES / "broken"
OVERLAY = FIXTURES / "overlay"
MODELS_ONLY = FIXTURES / "models-only"
SHARED = Path(__file__).resolve().parents[5] / "shared" / "conformance" / "recipes"


def load(path: Path) -> Any:
    return load_yaml(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def taxonomy() -> Dict[str, Any]:
    return load(BASE / "taxonomy.yaml")


@pytest.fixture(scope="module")
def strategies() -> Dict[str, Any]:
    docs = [load(p) for p in sorted((BASE / "strategies").glob("*.yaml"))]
    docs += [load(p) for p in sorted((BASE / "kv_store").glob("*.yaml"))]
    return {d["name"]: d for d in docs}


@pytest.fixture(scope="module")
def broken() -> List[schema.Problem]:
    return schema.validate_trees([BASE, BROKEN])


def minimal_recipe() -> Dict[str, Any]:
    """Smallest recipe that validates cleanly against the base fixtures."""
    return {
        "meta": {"title": "Mini", "tasks": ["text"], "date_updated": datetime.date(2026, 1, 1)},
        "model": {"model_id": "acme/Mini", "base_args": [], "base_env": {}},
        "variants": {"default": {"precision": "bf16", "vram_minimum_gb": 8}},
        "features": {
            "tool_calling": {"args": ["--enable-auto-tool-choice"]},
            "spec_decoding": {"modes": {"mtp": {"args": ["--speculative-config", "{}"]}}},
        },
        "opt_in_features": ["spec_decoding"],
        "compatible_strategies": ["single_node_tp", "pd_cluster"],
        "strategy_overrides": {},
        "hardware_overrides": {},
    }


def with_value(recipe: Dict[str, Any], dotted: str, value: Any) -> Dict[str, Any]:
    """Copy of ``recipe`` with ``value`` set at a dotted path (maps created as needed)."""
    result = copy.deepcopy(recipe)
    *parents, last = dotted.split(".")
    node = result
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return result


def find(problems: List[schema.Problem], file_end: str, path: str) -> List[schema.Problem]:
    return [p for p in problems if p.file.endswith(file_end) and p.path == path]


def errors(problems: List[schema.Problem]) -> List[schema.Problem]:
    return [p for p in problems if p.severity == "error"]


# --------------------------------------------------------------------------- #
# Problem and format_problems
# --------------------------------------------------------------------------- #


def test_problem_str_and_immutability() -> None:
    problem = schema.Problem("models/a/b.yaml", "variants.fp8.tp.h200", "expected integer, got string")
    assert str(problem) == "models/a/b.yaml: variants.fp8.tp.h200: expected integer, got string"
    assert problem.severity == "error"
    with pytest.raises(dataclasses.FrozenInstanceError):
        problem.path = "x"  # type: ignore[misc]


def test_format_problems_sorts_by_file_then_path() -> None:
    problems = [
        schema.Problem("b.yaml", "meta", "m1"),
        schema.Problem("a.yaml", "features.x.args[10]", "m2", "warning"),
        schema.Problem("a.yaml", "features.x.args[2]", "m3"),
    ]
    assert schema.format_problems(problems).splitlines() == [
        "a.yaml: features.x.args[2]: error: m3",
        "a.yaml: features.x.args[10]: warning: m2",
        "b.yaml: meta: error: m1",
    ]
    assert schema.format_problems([]) == ""


# --------------------------------------------------------------------------- #
# Valid trees
# --------------------------------------------------------------------------- #


def test_base_tree_is_clean() -> None:
    assert schema.validate_trees([BASE]) == []


def test_minimal_recipe_is_clean(taxonomy: Dict[str, Any], strategies: Dict[str, Any]) -> None:
    assert schema.validate_recipe(minimal_recipe(), "mini.yaml", taxonomy, strategies) == []


@pytest.mark.parametrize(
    "dotted, value",
    [
        ("meta.hardware", {"h100": "supported", "b200": "verified", "rtx_5090": "unsupported"}),
        ("meta.difficulty", "hard"),
        ("features.text_only", {"args": ["--x"], "hardware": {"rtx_5090": "unsupported"}}),
        ("model.docker_image", "docker pull vllm/vllm-openai-rocm:nightly"),
        ("model.docker_image", {"cu129": "img:a", "cu130": "img:b"}),
        ("model.docker_image", {"nvidia": {"cu130": "img:b"}, "amd": "img:c"}),
        ("compatible_strategies", []),
        ("hardware_notes", {"rtx_5090": {"title": "t", "body": "b", "link": {"href": "h", "label": "l"}}}),
        ("dependencies", [{"command": "pip install x", "note": "n", "optional": True}]),
        ("meta.platforms", [{"id": "modal", "blurb": "b", "install": "i", "script": "s"}]),
        ("model.base_env", {"PYTHONHASHSEED": 0, "RATIO": 0.5, "MODE": "spawn"}),
        ("model.install", {"docker": None, "pip": {"command": "uv pip install vllm"}}),
        ("model.install", {"docker": {"note": "n"}, "pip": True}),
        ("variants.default.tp", {"h100": 4, "blackwell": 2, "amd": 8, "nvidia": 8, "default": 1}),
        ("variants.default.hardware_overrides", {"mi300x": {"docker_image": "img"}, "hopper": {}}),
        ("strategy_overrides.pd_cluster", {"prefill": {"nodes": {"default": 2, "b300": 1}}}),
        ("strategy_min_gpus", 8),
        ("strategy_min_gpus", {"single_node_tp": 8, "h100": {"multi_node_tp": 16}, "b200": 16}),
        ("strategy_hardware", {"multi_node_tp": {"hopper": "unsupported", "b200": "supported"}}),
        ("omni", {"tasks": ["t2i"], "task_axes": [{"id": "x", "options": [{"id": "y"}]}]}),
        ("kv_offload_support", {"offloading_cpu": "verified", "kv_store_distributed_mooncake": "unsupported"}),
    ],
)
def test_unusual_but_valid_values(
    taxonomy: Dict[str, Any], strategies: Dict[str, Any], dotted: str, value: Any
) -> None:
    recipe = with_value(minimal_recipe(), dotted, value)
    if dotted == "omni":
        recipe["meta"]["tasks"] = ["omni"]
    assert errors(schema.validate_recipe(recipe, "r.yaml", taxonomy, strategies)) == []


def test_feature_with_only_hardware_overrides_is_valid(
    taxonomy: Dict[str, Any], strategies: Dict[str, Any]
) -> None:
    recipe = with_value(minimal_recipe(), "features.encoder_parallel",
                        {"description": "d", "hardware_overrides": {"nvidia": {"args": ["--x"]}}})
    assert schema.validate_recipe(recipe, "r.yaml", taxonomy, strategies) == []


# --------------------------------------------------------------------------- #
# Problems found in the broken fixtures (one run reports all of them)
# --------------------------------------------------------------------------- #

EXPECTED: List[Tuple[str, str, str, str]] = [
    # unknown keys
    ("unknown-keys.yaml", "extra_arg", "unknown key 'extra_arg' (allowed: compatible_strategies,", "error"),
    ("unknown-keys.yaml", "meta.titel", "unknown key 'titel'", "error"),
    ("unknown-keys.yaml", "model.docker", "(allowed: active_parameters,", "error"),
    ("unknown-keys.yaml", "variants.default.extra_arg",
     "unknown key 'extra_arg' (allowed: default_modes, description, docker_image, extra_args, extra_env,", "error"),
    ("unknown-keys.yaml", "variants.default.hardware_overrides.h100.extra_arg",
     "(allowed: docker_image, extra_args, extra_env)", "error"),
    ("unknown-keys.yaml", "features.tool_calling.arg", "unknown key 'arg'", "error"),
    ("unknown-keys.yaml", "features.spec_decoding.modes.mtp.hw", "unknown key 'hw'", "error"),
    ("unknown-keys.yaml", "strategy_overrides.pd_cluster.prefill.nodez", "unknown key 'nodez'", "error"),
    ("unknown-keys.yaml", "strategy_overrides.pd_cluster.routr", "unknown key 'routr'", "error"),
    ("unknown-keys.yaml", "hardware_overrides.amd.extra_envs",
     "(allowed: extra_args, extra_env, install_note)", "error"),
    ("unknown-keys.yaml", "omni.taskz", "unknown key 'taskz'", "error"),
    ("unknown-keys.yaml", "omni.tasks[0].endpint", "unknown key 'endpint'", "error"),
    # types
    ("types.yaml", "features.tool_calling.args", "expected list of strings, got string", "error"),
    ("types.yaml", "features.reasoning.args[2]", "expected string, got integer", "error"),
    ("types.yaml", "opt_in_features", "expected list of strings, got string", "error"),
    ("types.yaml", "compatible_strategies", "expected list of strings, got string", "error"),
    ("types.yaml", "meta.tasks", "expected list of strings, got string", "error"),
    ("types.yaml", "meta.date_added", "expected date (unquoted YYYY-MM-DD), got string", "error"),
    ("types.yaml", "model.context_length", "expected integer, got string", "error"),
    ("types.yaml", "model.min_vllm_version", "expected string, got number", "error"),
    ("types.yaml", "model.nightly_required", "expected boolean, got string", "error"),
    ("types.yaml", "model.docker_image", "got list", "error"),
    ("types.yaml", "model.install.docker", "expected boolean or null or map, got string", "error"),
    ("types.yaml", "model.base_env.VLLM_FLAG", "expected string or number, got boolean", "error"),
    ("types.yaml", "model.base_env.BAD-NAME", "invalid environment variable name 'BAD-NAME'", "error"),
    ("types.yaml", "variants.default.vram_minimum_gb", "expected number, got string", "error"),
    ("types.yaml", "variants.default.tp", "expected integer or map, got string", "error"),
    ("types.yaml", "variants.default.extra_env", "expected map, got list", "error"),
    ("types.yaml", "strategy_overrides.pd_cluster.prefill.nodes", "expected integer or map, got string", "error"),
    # enums
    ("enums.yaml", "meta.difficulty", "expected one of beginner, intermediate, advanced, hard, got 'expert'",
     "error"),
    ("enums.yaml", "meta.tasks[0]", "unknown task 'video' (known: omni, text)", "error"),
    ("enums.yaml", "meta.hardware.h100", "expected one of verified, supported, unsupported, got 'verifed'",
     "error"),
    ("enums.yaml", "model.architecture", "expected one of dense, moe, got 'hybrid'", "error"),
    ("enums.yaml", "variants.default.precision", "got 'fp16'", "error"),
    ("enums.yaml", "strategy_hardware.pd_cluster.h100", "expected one of unsupported, supported, got 'maybe'",
     "error"),
    ("enums.yaml", "kv_offload_support.offloading_cpu", "expected one of verified, unsupported", "error"),
    ("enums.yaml", "strategy_overrides.pd_cluster.prefill.parallelism", "expected one of tp, tep, dep", "error"),
    ("enums.yaml", "strategy_overrides.pd_cluster.pool_modes[0]", "got 'tp_dp'", "error"),
    ("enums.yaml", "dependencies[0].install_modes[0]", "expected one of pip, docker, got 'conda'", "error"),
    # references
    ("refs.yaml", "variants", "missing variant 'default'", "error"),
    ("refs.yaml", "meta.default_hardware", "unknown hardware 'h300' (known: b200, b300, h100, mi300x, rtx_5090)",
     "error"),
    ("refs.yaml", "meta.hardware.h300", "unknown hardware 'h300' is not a taxonomy profile", "warning"),
    ("refs.yaml", "variants.fp8.supported_hardware[1]", "unknown hardware 'h300'", "error"),
    ("refs.yaml", "variants.fp8.tp.h300",
     "unknown hardware 'h300' (known: amd, b200, b300, blackwell, default, h100, hopper, mi300x, nvidia, "
     "rtx_5090)", "error"),
    ("refs.yaml", "variants.fp8.hardware_overrides.volta", "unknown hardware 'volta'", "error"),
    ("refs.yaml", "variants.fp8.hardware_overrides.hopper.docker_image", "only read under an exact GPU id",
     "warning"),
    ("refs.yaml", "variants.fp8.precision_hardware.brand", "unknown brand 'Nvidia' (known: AMD, NVIDIA)", "error"),
    ("refs.yaml", "variants.fp8.precision_hardware.generation", "unknown generation 'volta'", "error"),
    ("refs.yaml", "variants.fp8.default_modes.spec_decoding", "unknown mode 'medusa' for feature 'spec_decoding'",
     "error"),
    ("refs.yaml", "variants.fp8.default_modes.tool_calling", "feature 'tool_calling' has no modes", "error"),
    ("refs.yaml", "variants.fp8.default_modes.missing_feature", "unknown feature 'missing_feature'", "error"),
    ("refs.yaml", "features.tool_calling.strategies[1]", "unknown strategy 'single_node_pp'", "error"),
    ("refs.yaml", "features.spec_decoding.default_mode", "unknown mode 'medusa' (known: mtp)", "error"),
    ("refs.yaml", "features.spec_decoding.modes.mtp.variants[1]", "unknown variant 'int4' (known: fp8)", "error"),
    ("refs.yaml", "features.both", "feature has both 'args' and 'modes'", "error"),
    ("refs.yaml", "features.bare_default_mode.default_mode", "default_mode set on a feature without 'modes'",
     "error"),
    ("refs.yaml", "opt_in_features[1]", "unknown feature 'nope'", "error"),
    ("refs.yaml", "hardware_opt_in_features.b200[0]", "unknown feature 'nope'", "error"),
    ("refs.yaml", "hardware_opt_in_features.h300", "unknown hardware 'h300'", "error"),
    ("refs.yaml", "compatible_strategies[1]", "unknown strategy 'single_node_pp' (known: multi_node_tp,", "error"),
    ("refs.yaml", "default_strategy", "a kv_store deployment, not a serving strategy", "error"),
    ("refs.yaml", "strategy_hardware.single_node_pp", "unknown strategy 'single_node_pp'", "error"),
    ("refs.yaml", "strategy_hardware.multi_node_tp.h300", "unknown hardware 'h300'", "error"),
    ("refs.yaml", "strategy_min_gpus.bogus", "unknown strategy or hardware 'bogus'", "error"),
    ("refs.yaml", "strategy_overrides.single_node_pp", "unknown strategy 'single_node_pp'", "error"),
    ("refs.yaml", "strategy_overrides.multi_node_tp.tp", "only read for single_node_tp", "warning"),
    ("refs.yaml", "strategy_overrides.multi_node_tp.prefill", "only read for pd_cluster strategies", "warning"),
    ("refs.yaml", "strategy_overrides.pd_cluster.decode.hardware_overrides.hopper", "not a GPU id", "warning"),
    ("refs.yaml", "hardware_overrides.h100", "is an exact GPU id, but this map is only looked up by generation",
     "warning"),
    ("refs.yaml", "hardware_overrides.volta", "unknown hardware 'volta' (known: amd, blackwell, hopper, nvidia)",
     "error"),
    ("refs.yaml", "kv_offload_support.lmcache", "unknown kv offload option 'lmcache'", "error"),
    # YAML-level problems
    ("malformed.yaml", "(document)", "invalid YAML at line 5, column 13", "error"),
    ("list-top.yaml", "(document)", "expected a map at the top level, got list", "error"),
    ("empty.yaml", "(document)", "got an empty document", "error"),
    ("traps.yaml", "model.base_env.VLLM_FLAG",
     "line 8: plain scalar 'on' reads as string 'on' in YAML 1.2 (upstream js-yaml) but as boolean true "
     "in YAML 1.1", "warning"),
    ("traps.yaml", "model.base_env.UMASK", "'0777' reads as integer 777 in YAML 1.2", "warning"),
    ("traps.yaml", "model.base_env.TIMEOUT", "but as integer 90 in YAML 1.1", "warning"),
    ("traps.yaml", "variants.default.precision", "duplicate key 'precision' (lines 13 and 15)", "error"),
    ("models/stray.yaml", "(document)", "recipes must live at models/<org>/<repo>.yaml", "error"),
    ("ext.yml", "(document)", "must end in .yaml", "warning"),
    # strategy and kv_store files
    ("bad_strategy.yaml", "deploy_type", "expected one of single_node, multi_node, pd_cluster, got 'single-node'",
     "error"),
    ("bad_strategy.yaml", "vllm_args", "expected list of strings, got string", "error"),
    ("bad_strategy.yaml", "hardware_match.min_gpu", "unknown key 'min_gpu'", "error"),
    ("bad_store.yaml", "deploy_type", "got 'multi_node'", "error"),
    ("bad_store.yaml", "router.port", "expected integer, got string", "error"),
    ("bad_store.yaml", "vllm.instal", "unknown key 'instal' (allowed: env, install, port, vllm_args)", "error"),
]


@pytest.mark.parametrize("file_end, path, fragment, severity", EXPECTED,
                         ids=[f"{e[0]}:{e[1]}" for e in EXPECTED])
def test_broken_fixture_problem(
    broken: List[schema.Problem], file_end: str, path: str, fragment: str, severity: str
) -> None:
    hits = find(broken, file_end, path)
    assert any(fragment in p.message and p.severity == severity for p in hits), (
        f"no {severity} containing {fragment!r} at {path}; got: {[str(p) for p in hits]}")


def test_broken_run_reports_every_file(broken: List[schema.Problem]) -> None:
    files = {Path(p.file).name for p in broken}
    expected = {"unknown-keys.yaml", "types.yaml", "enums.yaml", "refs.yaml", "malformed.yaml",
                "list-top.yaml", "empty.yaml", "traps.yaml", "stray.yaml", "ext.yml",
                "bad_strategy.yaml", "bad_store.yaml"}
    assert files == expected


def test_broken_run_has_no_unexpected_errors(broken: List[schema.Problem]) -> None:
    listed = {(f, p) for f, p, _, _ in EXPECTED}
    unexpected = [str(p) for p in errors(broken)
                  if not any(p.file.endswith(f) and p.path == path for f, path in listed)]
    assert unexpected == []


def test_malformed_yaml_gives_exactly_one_problem(broken: List[schema.Problem]) -> None:
    hits = [p for p in broken if p.file.endswith("malformed.yaml")]
    assert len(hits) == 1
    assert "line 5" in hits[0].message


def test_default_strategy_not_offered_is_a_warning(
    taxonomy: Dict[str, Any], strategies: Dict[str, Any]
) -> None:
    recipe = with_value(minimal_recipe(), "default_strategy", "multi_node_tp")
    problems = schema.validate_recipe(recipe, "r.yaml", taxonomy, strategies)
    assert [(p.path, p.severity) for p in problems] == [("default_strategy", "warning")]


def test_omni_axes_must_match_task_axes(taxonomy: Dict[str, Any], strategies: Dict[str, Any]) -> None:
    recipe = minimal_recipe()
    recipe["meta"]["tasks"] = ["omni"]
    recipe["omni"] = {
        "task_axes": [{"id": "stage", "options": [{"id": "one"}]}],
        "tasks": [{"id": "t2v", "axes": {"stage": "two", "size": "big"}}],
    }
    problems = schema.validate_recipe(recipe, "r.yaml", taxonomy, strategies)
    assert {(p.path, p.message.split(" (")[0]) for p in problems} == {
        ("omni.tasks[0].axes.stage", "unknown option 'two' for axis 'stage'"),
        ("omni.tasks[0].axes.size", "unknown axis 'size'"),
    }


def test_omni_task_needs_id_and_omni_task_listed(
    taxonomy: Dict[str, Any], strategies: Dict[str, Any]
) -> None:
    recipe = with_value(minimal_recipe(), "omni", {"tasks": [{"label": "no id"}]})
    problems = schema.validate_recipe(recipe, "r.yaml", taxonomy, strategies)
    assert ("omni.tasks[0]", "missing required key 'id'", "error") in {
        (p.path, p.message, p.severity) for p in problems}
    assert any(p.path == "omni" and p.severity == "warning" for p in problems)


# --------------------------------------------------------------------------- #
# Stacked roots
# --------------------------------------------------------------------------- #


def test_overlay_extends_taxonomy_and_overrides() -> None:
    assert schema.validate_trees([BASE, OVERLAY]) == []


def test_overlay_alone_misses_base_profiles() -> None:
    problems = schema.validate_trees([OVERLAY])
    assert [(p.path, p.severity) for p in errors(problems)] == [
        ("variants.default.supported_hardware[1]", "error")]
    assert "known: gh200" in errors(problems)[0].message


def test_models_only_root_uses_earlier_roots() -> None:
    assert schema.validate_trees([BASE, MODELS_ONLY]) == []
    assert schema.validate_trees([str(BASE), str(MODELS_ONLY)]) == []


def test_missing_taxonomy_and_strategies_are_reported() -> None:
    problems = schema.validate_trees([MODELS_ONLY])
    assert sorted(p.path for p in problems) == ["strategies", "taxonomy.yaml"]
    assert all(p.severity == "error" for p in problems)
    assert "no readable taxonomy.yaml in any root" in find(problems, "models-only", "taxonomy.yaml")[0].message


def test_missing_root_is_reported(tmp_path: Path) -> None:
    problems = schema.validate_trees([BASE, tmp_path / "nope"])
    assert [(Path(p.file).name, p.message) for p in problems] == [("nope", "recipe root is not a directory")]


def test_duplicate_strategy_name_in_one_root(tmp_path: Path) -> None:
    (tmp_path / "strategies").mkdir()
    text = (BASE / "strategies" / "single_node_tp.yaml").read_text()
    (tmp_path / "strategies" / "a.yaml").write_text(text)
    (tmp_path / "strategies" / "b.yaml").write_text(text)
    problems = schema.validate_trees([BASE, tmp_path])
    assert [(Path(p.file).name, p.path) for p in problems] == [("b.yaml", "name")]
    assert "duplicate strategy name 'single_node_tp'" in problems[0].message


def test_kv_store_name_colliding_with_strategy(tmp_path: Path) -> None:
    (tmp_path / "kv_store").mkdir()
    text = (BASE / "kv_store" / "kv_store_distributed_mooncake.yaml").read_text()
    (tmp_path / "kv_store" / "clash.yaml").write_text(
        text.replace("name: kv_store_distributed_mooncake", "name: pd_cluster"))
    problems = schema.validate_trees([BASE, tmp_path])
    assert [(Path(p.file).name, p.path) for p in problems] == [("clash.yaml", "name")]
    assert "collides with a strategy" in problems[0].message


def test_strategy_override_in_later_root_is_not_a_duplicate() -> None:
    assert not any("duplicate" in p.message for p in schema.validate_trees([BASE, OVERLAY]))


# --------------------------------------------------------------------------- #
# Single-document validators
# --------------------------------------------------------------------------- #


def test_validate_recipe_without_taxonomy_skips_references() -> None:
    recipe = with_value(minimal_recipe(), "variants.default.supported_hardware", ["anything"])
    recipe["compatible_strategies"] = ["whatever"]
    assert schema.validate_recipe(recipe, "r.yaml", None, None) == []


def test_validate_recipe_accepts_strategy_names(taxonomy: Dict[str, Any]) -> None:
    recipe = minimal_recipe()
    problems = schema.validate_recipe(recipe, "r.yaml", taxonomy, ["single_node_tp"])
    assert [p.path for p in problems] == ["compatible_strategies[1]"]


def test_validate_recipe_rejects_non_mapping() -> None:
    problems = schema.validate_recipe(["x"], "r.yaml", None, None)
    assert [str(p) for p in problems] == ["r.yaml: (document): expected a map at the top level, got list"]


def test_validate_recipe_needs_model_id(taxonomy: Dict[str, Any], strategies: Dict[str, Any]) -> None:
    recipe = minimal_recipe()
    del recipe["model"]["model_id"]
    problems = schema.validate_recipe(recipe, "r.yaml", taxonomy, strategies)
    assert [(p.path, p.message) for p in problems] == [("model", "missing required key 'model_id'")]


def test_validate_strategy_and_kv_store(strategies: Dict[str, Any]) -> None:
    for name, doc in strategies.items():
        validate = schema.validate_kv_store if name.startswith("kv_store") else schema.validate_strategy
        assert validate(doc, name) == []
    bad = dict(strategies["single_node_tp"], parallelism="tp_ep", extra=1)
    problems = schema.validate_strategy(bad, "s.yaml")
    assert {p.path for p in problems} == {"parallelism", "extra"}
    assert schema.validate_kv_store({"name": "x"}, "k.yaml")[0].message == "missing required key 'deploy_type'"


def test_validate_taxonomy(taxonomy: Dict[str, Any]) -> None:
    assert schema.validate_taxonomy(taxonomy, "taxonomy.yaml") == []
    bad = copy.deepcopy(taxonomy)
    bad["hardware_profiles"]["h100"]["vram"] = 80
    del bad["hardware_profiles"]["b200"]["generation"]
    bad["kv_offload"]["offloading_cpu"]["brands"] = ["Nvidia"]
    bad["kv_offload"]["offloading_cpu"]["group"] = "nope"
    bad["kv_offload"]["simple"]["strategies"] = ["single_node_tp", "zzz"]
    problems = schema.validate_taxonomy(bad, "taxonomy.yaml", ["single_node_tp"])
    assert {p.path for p in problems} == {
        "hardware_profiles.h100.vram",
        "hardware_profiles.b200",
        "kv_offload.offloading_cpu.brands[0]",
        "kv_offload.offloading_cpu.group",
        "kv_offload.simple.strategies[1]",
        "strategies[1]",
        "strategies[2]",
    }


# --------------------------------------------------------------------------- #
# Module hygiene and the shared upstream tree
# --------------------------------------------------------------------------- #


def test_module_does_not_import_ansible() -> None:
    source = Path(schema.__file__).read_text(encoding="utf-8")
    assert "import ansible" not in source and "from ansible" not in source


@pytest.mark.skipif(not SHARED.is_dir(), reason="platform: no ../shared/conformance/recipes beside the checkout (.ci/run has it)")
def test_shared_upstream_tree_validates() -> None:
    assert len(list((SHARED / "models").glob("*/*.yaml"))) == 147
    start = time.perf_counter()
    problems = schema.validate_trees([SHARED])
    elapsed = time.perf_counter() - start
    assert errors(problems) == [], schema.format_problems(errors(problems))
    # Only warnings about meta.hardware ids that the taxonomy does not define (a100, mi350x).
    assert all(p.path.startswith("meta.hardware.") for p in problems)
    assert elapsed < 2.0
