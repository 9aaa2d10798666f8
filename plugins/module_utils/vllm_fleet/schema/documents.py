"""Schemas of the other documents of a tree: strategies, kv_store deployments and the
taxonomy (SCHEMA.md 3-5, appendix A)."""


from __future__ import annotations

from dataclasses import replace
from typing import Any, List, Mapping


from .recipe import ARGS, BRAND_KEYS, ENV, _dict
from .spec import (
    BOOL, Enum, Fields, INT, ListOf, MapOf, NUM, OneOf, POS_INT, Problem, Ref, SCALAR, STR,
    StrategiesArg, _Ctx, _Vocab, _build_vocab, _join, _top_level_map, brand_ref, kv_group_ref,
    strategy_ref,
)

# --------------------------------------------------------------------------- #
# Strategies, kv_store and taxonomy schemas (SCHEMA.md 3-5, appendix A)
# --------------------------------------------------------------------------- #

_STRATEGY_ROLE = Fields({
    "vllm_args": ARGS,
    "env": ENV,
    "parallelism": Enum("tp", "tep", "dep"),
    "tp": POS_INT,
    "parallel_flag": STR,
})

_DEPLOY_TYPES = ("single_node", "multi_node", "pd_cluster")

_STRATEGY = Fields({
    "name": STR,
    "deploy_type": Enum(*_DEPLOY_TYPES),
    "display_name": STR,
    "short_label": STR,  # newer upstream (SCHEMA.md section 10)
    "description": STR,
    "orientation": STR,
    "hardware_match": Fields({
        "architecture": Enum("dense", "moe"),
        "min_gpus": POS_INT,
        "max_gpus": POS_INT,
        "multi_node": BOOL,
    }),
    "vllm_args": ARGS,
    "parallel_flag": STR,
    "parallelism": Enum("tp_pp", "tp_dp"),
    "env": ENV,
    "prefill": _STRATEGY_ROLE,
    "decode": _STRATEGY_ROLE,
    "router": Fields({"policy": STR}),
}, required=("name", "deploy_type"))

_KV_STORE = Fields({
    "name": STR,
    "deploy_type": Enum("kv_store_lb"),
    "display_name": STR,
    "label": STR,
    "description": STR,
    "order": INT,
    "default_instances": POS_INT,
    "min_vllm_version": STR,
    "router": Fields({"policy": STR, "install": STR, "port": POS_INT}),
    "vllm": Fields({
        "vllm_args": ARGS,
        "env": ENV,
        "install": Fields({k: STR for k in BRAND_KEYS}),
        "port": POS_INT,
    }),
    "pd": Fields({"prefill": Fields({"args": ARGS}), "decode": Fields({"args": ARGS})}),
    "mooncake_master": Fields({"command": STR, "description": STR}),
    "mooncake_store_config": Fields({
        "command": STR,
        "description": STR,
        "note": STR,
        "config": MapOf(SCALAR),
    }),
    "mooncake_vllm_config": Fields({"mode": STR, "note": STR, "template": MapOf(SCALAR)}),
}, required=("name", "deploy_type"))

_GENERATION = OneOf(string=STR, list=ListOf(STR))

_PROFILE = Fields({
    "brand": STR,
    "generation": _GENERATION,
    "gpu_generation": _GENERATION,  # legacy spelling still read upstream
    "display_name": STR,
    "description": STR,
    "gpu_count": POS_INT,
    "vram_gb": NUM,
    "multi_node": BOOL,
    "scalable": BOOL,
    "restricted": BOOL,
    "compute_arch": STR,  # newer upstream (SCHEMA.md section 10)
}, required=("brand", "gpu_count"))

_KV_OPTION = Fields({
    "display_name": STR,
    "label": STR,
    "description": STR,
    "group": Ref(kv_group_ref),
    "order": INT,
    "requires_opt_in": BOOL,
    "brands": ListOf(Ref(brand_ref)),
    "strategies": ListOf(Ref(strategy_ref)),
    "args": ARGS,
    "env": ENV,
    "install": STR,
    "docs_url": STR,
    "companion": Fields({"label": STR, "description": STR, "command": STR}, required=("command",)),
})

_TAXONOMY = Fields({
    "hardware_profiles": MapOf(_PROFILE),
    "tasks": ListOf(Fields({"id": STR, "display_name": STR, "description": STR}, required=("id",))),
    "strategies": ListOf(Ref(strategy_ref)),
    "kv_offload": MapOf(_KV_OPTION),
    "kv_offload_groups": MapOf(Fields({
        "display_name": STR,
        "label": STR,
        "description": STR,
        "docs_url": STR,
        "order": INT,
        "sub_row_label": STR,
        "tooltip": STR,
    })),
})


def _check_profiles(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """Each hardware profile needs a generation (or the legacy gpu_generation)."""
    for pid, profile in _dict(data.get("hardware_profiles")).items():
        if isinstance(profile, dict) and "generation" not in profile and "gpu_generation" not in profile:
            ctx.error(_join("hardware_profiles", pid), "missing required key 'generation'")


def _check_strategy_shape(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """Blocks that only one deploy_type reads."""
    deploy = data.get("deploy_type")
    if deploy not in _DEPLOY_TYPES:
        return  # already reported by the enum check
    if deploy != "pd_cluster":
        for key in ("prefill", "decode", "router"):
            if key in data:
                ctx.warn(key, f"'{key}' is only read for deploy_type pd_cluster (this is {deploy})")
    if "parallelism" in data and deploy != "multi_node":
        ctx.warn("parallelism", f"'parallelism' is only read for deploy_type multi_node (this is {deploy})")


def validate_strategy(data: Any, file: str) -> List[Problem]:
    """Validate one ``strategies/*.yaml`` document."""
    ctx = _Ctx(str(file), _Vocab())
    if _top_level_map(ctx, data):
        _STRATEGY.check(ctx, "", data)
        _check_strategy_shape(ctx, data)
    return ctx.problems


def validate_kv_store(data: Any, file: str) -> List[Problem]:
    """Validate one ``kv_store/*.yaml`` document."""
    ctx = _Ctx(str(file), _Vocab())
    if _top_level_map(ctx, data):
        _KV_STORE.check(ctx, "", data)
    return ctx.problems


def _taxonomy_problems(data: Any, ctx: _Ctx) -> List[Problem]:
    """Schema checks of one taxonomy document."""
    if _top_level_map(ctx, data):
        _TAXONOMY.check(ctx, "", data)
        _check_profiles(ctx, data)
    return ctx.problems


def validate_taxonomy(data: Any, file: str, strategies: StrategiesArg = None) -> List[Problem]:
    """Validate one ``taxonomy.yaml`` document.

    Brands, kv_offload groups and (when ``strategies`` is given) strategy names
    are checked against the document itself.
    """
    vocab = _build_vocab(data if isinstance(data, dict) else None, strategies)
    if strategies is None:
        vocab = replace(vocab, strategies=None)
    return _taxonomy_problems(data, _Ctx(str(file), vocab))
