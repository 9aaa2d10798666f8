"""The recipe schema (SCHEMA.md section 2) and its cross references (features, modes,
variants, strategies, omni tasks); ``validate_recipe``."""


from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Set


from .spec import (
    BOOL, Custom, DATE, ENV_VALUE, Enum, Fields, GATE, GEN, GEN_OR_GPU, GPU, LOOKUP, ListOf,
    META_GPU, MapOf, NODES, NODE_COUNT, NUM, OneOf, POS_INT, Problem, ROLE_GPU, Ref, SCALAR, STR,
    Spec, StrategiesArg, Type, _Ctx, _build_vocab, _check_key_type, _index, _join, _kind, _names,
    _top_level_map, brand_ref, env_name, generation_ref, hardware, kv_option_ref, strategy_ref,
    task_ref,
)

# --------------------------------------------------------------------------- #
# Recipe schema (SCHEMA.md section 2)
# --------------------------------------------------------------------------- #

# loader-level variables no recipe may set (the inventory contract refuses them too)
ARGS = ListOf(STR)
ENV = MapOf(ENV_VALUE, keys=env_name)
PRECISIONS = ("bf16", "fp8", "nvfp4", "int4", "mxfp4", "int8", "int2/4/8", "mxfp8", "fp4")
BRAND_KEYS = ("nvidia", "amd", "tpu", "intel")
CUDA_KEYS = ("cu129", "cu130")
SUPPORT = Enum("unsupported", "supported")


def _positive_int_or_map(site: str) -> Spec:
    """A positive integer, or a hardware-keyed map of positive integers."""
    return OneOf(integer=POS_INT, map=MapOf(POS_INT, keys=hardware(site)))


_CUDA_MAP = Fields({k: STR for k in CUDA_KEYS})
_BRAND_MAP = Fields({"nvidia": OneOf(string=STR, map=_CUDA_MAP), "amd": STR, "tpu": STR, "intel": STR})


def _check_docker_image(ctx: _Ctx, path: str, value: Any) -> None:
    """String, brand map ``{nvidia, amd, tpu, intel}`` or bare CUDA map."""
    if isinstance(value, str):
        if not value.strip():
            ctx.error(path, "expected a docker image, got an empty string")
    elif isinstance(value, dict):
        keys = set(value)
        is_cuda = bool(keys) and keys <= set(CUDA_KEYS)
        (_CUDA_MAP if is_cuda else _BRAND_MAP).check(ctx, path, value)
    else:
        ctx.error(path, f"expected string, brand map ({', '.join(BRAND_KEYS)}) or CUDA map "
                        f"({', '.join(CUDA_KEYS)}), got {_kind(value)}")


DOCKER_IMAGE = Custom(_check_docker_image, "docker image")


_GPU_MIN_GPUS = OneOf(integer=POS_INT, map=MapOf(POS_INT, keys=strategy_ref))


def _check_min_gpus(ctx: _Ctx, path: str, value: Any) -> None:
    """``strategy_min_gpus``: a number, or a map by strategy id and/or GPU id."""
    if not isinstance(value, dict):
        POS_INT.check(ctx, path, value)
        return
    strategies = ctx.vocab.strategies
    profiles = ctx.vocab.profiles
    for key, item in value.items():
        if not _check_key_type(ctx, path, key):
            continue
        sub = _join(path, key)
        if profiles is not None and key in profiles:
            _GPU_MIN_GPUS.check(ctx, sub, item)
            continue
        if strategies is not None and key not in strategies and profiles is not None:
            ctx.error(sub, f"unknown strategy or hardware '{key}' (strategies: {_names(strategies)}; "
                           f"hardware: {_names(profiles)})")
        POS_INT.check(ctx, sub, item)


_META = Fields({
    "title": STR,
    "slug": STR,
    "provider": STR,
    "description": STR,
    "date_added": DATE,
    "date_updated": DATE,
    "difficulty": Enum("beginner", "intermediate", "advanced", "hard"),
    "tasks": ListOf(Ref(task_ref)),
    "performance_headline": STR,
    "related_recipes": ListOf(STR),
    "hardware": MapOf(Enum("verified", "supported", "unsupported"), keys=hardware(META_GPU)),
    "default_hardware": Ref(hardware(GPU)),
    "platforms": ListOf(Fields({"id": STR, "blurb": STR, "install": STR, "script": STR})),
})

# `command` under install.docker appears in newer upstream recipes (the seed has it)
_INSTALL_CHANNEL_DOCKER = OneOf(boolean=BOOL, null=Type("null"), map=Fields({"command": STR, "note": STR}))
_INSTALL_CHANNEL_PIP = OneOf(boolean=BOOL, null=Type("null"), map=Fields({"command": STR, "note": STR}))

_MODEL = Fields({
    "model_id": STR,
    "parameter_count": STR,
    "active_parameters": STR,
    "architecture": Enum("dense", "moe"),
    "context_length": Type("integer", minimum=0),
    "min_vllm_version": STR,
    "base_args": ARGS,
    "base_env": ENV,
    "docker_image": DOCKER_IMAGE,
    "docker_source": Fields({"mount_path": STR}),
    "nightly_required": BOOL,
    "supports_dcp": BOOL,
    "flashinfer_autotune": BOOL,
    "install": Fields({"docker": _INSTALL_CHANNEL_DOCKER, "pip": _INSTALL_CHANNEL_PIP}),
}, required=("model_id",))

_VARIANT = Fields({
    "label": STR,
    "description": STR,
    "model_id": STR,
    "precision": Enum(*PRECISIONS),
    "precision_hardware": Fields({"brand": Ref(brand_ref), "generation": Ref(generation_ref)}),
    "supported_hardware": ListOf(Ref(hardware(GPU))),
    "vram_minimum_gb": NUM,
    "min_vllm_version": STR,
    "tp": _positive_int_or_map(LOOKUP),
    "extra_args": ARGS,
    "extra_env": ENV,
    "docker_image": DOCKER_IMAGE,
    "default_modes": MapOf(STR),
    "hardware_overrides": MapOf(
        Fields({"extra_args": ARGS, "extra_env": ENV, "docker_image": STR}),
        keys=hardware(GEN_OR_GPU),
    ),
})

_HARDWARE_GATE = MapOf(SUPPORT, keys=hardware(GATE))

_MODE = Fields({
    "label": STR,
    "description": STR,
    "args": ARGS,
    "variants": ListOf(STR),
    "hardware": _HARDWARE_GATE,
    "hardware_overrides": MapOf(Fields({"args": ARGS}), keys=hardware(LOOKUP)),
})

_FEATURE = Fields({
    "label": STR,
    "description": STR,
    "args": ARGS,
    "modes": MapOf(_MODE),
    "default_mode": STR,
    "strategies": ListOf(Ref(strategy_ref)),
    "hardware": _HARDWARE_GATE,
    "hardware_overrides": MapOf(Fields({"args": ARGS}), keys=hardware(GEN)),
    "companion": Fields({"label": STR, "description": STR, "command": STR}),
})

_HW_ENV_ARGS = Fields({"extra_args": ARGS, "extra_env": ENV})

_PD_ROLE = Fields({
    "parallelism": Enum("tp", "tep", "dep"),
    "tp": POS_INT,
    "nodes": OneOf(integer=NODE_COUNT, map=MapOf(NODE_COUNT, keys=hardware(NODES))),
    "vllm_args": ARGS,
    "extra_args": ARGS,
    "env": ENV,
    "parallel_flag": STR,
    "hardware_overrides": MapOf(_HW_ENV_ARGS, keys=hardware(ROLE_GPU)),
})

_STRATEGY_OVERRIDE = Fields({
    "tp": _positive_int_or_map(LOOKUP),
    "extra_args": ARGS,
    "vllm_args": ARGS,
    "env": ENV,
    "extra_env": ENV,
    "hardware_overrides": MapOf(_HW_ENV_ARGS, keys=hardware(GEN_OR_GPU)),
    "prefill": _PD_ROLE,
    "decode": _PD_ROLE,
    "router": Fields({"intra_node_data_parallel_size": POS_INT}),
    "pool_modes": ListOf(Enum("tp", "tep", "dep")),
})

_OMNI_TASK = Fields({
    "id": STR,
    "key": STR,
    "label": STR,
    "description": STR,
    "endpoint": STR,
    "model_id": STR,
    "vram_minimum_gb": NUM,
    "extra_args": ARGS,
    "curl": STR,
    "axes": MapOf(STR),
    "hardware_overrides": MapOf(
        Fields({"extra_args": ARGS, "curl": STR, "vram_minimum_gb": NUM}),
        keys=hardware(LOOKUP),
    ),
}, required=("id",))

_OMNI = Fields({
    "tasks": ListOf(OneOf(string=STR, map=_OMNI_TASK)),
    "port": POS_INT,
    "serve_binary": STR,
    "task_label": STR,
    "task_hint": STR,
    "variant_label": STR,
    "variant_hint": STR,
    "task_axes": ListOf(Fields({
        "id": STR,
        "label": STR,
        "options": ListOf(Fields({"id": STR, "label": STR}, required=("id",))),
    }, required=("id",))),
})

_RECIPE = Fields({
    "meta": _META,
    "model": _MODEL,
    "variants": MapOf(_VARIANT),
    "features": MapOf(_FEATURE),
    "opt_in_features": ListOf(STR),
    "hardware_opt_in_features": MapOf(ListOf(STR), keys=hardware(GPU)),
    "compatible_strategies": ListOf(Ref(strategy_ref)),
    "default_strategy": Ref(strategy_ref),
    "strategy_hardware": MapOf(
        MapOf(SUPPORT, keys=hardware(LOOKUP)), keys=strategy_ref
    ),
    "strategy_min_gpus": Custom(_check_min_gpus, "integer or map"),
    "strategy_overrides": MapOf(_STRATEGY_OVERRIDE, keys=strategy_ref),
    "hardware_overrides": MapOf(
        Fields({"extra_args": ARGS, "extra_env": ENV, "install_note": STR}),
        keys=hardware(GEN),
    ),
    "kv_offload_support": MapOf(Enum("verified", "unsupported"), keys=kv_option_ref),
    "kv_cache_strategy_hardware": MapOf(MapOf(SCALAR)),
    "guide": STR,
    "dependencies": ListOf(Fields({
        "command": STR,
        "note": STR,
        "brand": STR,
        "optional": BOOL,
        "install_modes": ListOf(Enum("pip", "docker")),
    })),
    "hardware_notes": MapOf(
        Fields({"title": STR, "body": STR, "link": Fields({"href": STR, "label": STR})}),
        keys=hardware(GPU),
    ),
    "omni": _OMNI,
}, required=("model", "variants"))


# --------------------------------------------------------------------------- #
# Recipe cross references (features, modes, variants, strategies)
# --------------------------------------------------------------------------- #


def _dict(value: Any) -> Dict[Any, Any]:
    """The value if it is a map, else an empty map (for cross checks on ill-typed data)."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> List[Any]:
    """The value if it is a list, else an empty list."""
    return value if isinstance(value, list) else []


def _check_feature_refs(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """Feature names in opt-in lists; args vs modes; default_mode; mode variants."""
    features = _dict(data.get("features"))
    variants = _dict(data.get("variants"))
    known = _names(str(k) for k in features)
    for i, name in enumerate(_list(data.get("opt_in_features"))):
        if isinstance(name, str) and name not in features:
            ctx.error(_index("opt_in_features", i), f"unknown feature '{name}' (known: {known})")
    for gpu, names in _dict(data.get("hardware_opt_in_features")).items():
        for i, name in enumerate(_list(names)):
            if isinstance(name, str) and name not in features:
                path = _index(_join("hardware_opt_in_features", gpu), i)
                ctx.error(path, f"unknown feature '{name}' (known: {known})")
    for fname, feature in features.items():
        if isinstance(feature, dict):
            _check_one_feature(ctx, _join("features", fname), feature, variants)


def _check_one_feature(
    ctx: _Ctx, path: str, feature: Mapping[str, Any], variants: Mapping[str, Any]
) -> None:
    """One feature: ``args`` xor ``modes``, ``default_mode`` and mode ``variants``."""
    has_args, has_modes = "args" in feature, "modes" in feature
    if has_args and has_modes:
        ctx.error(path, "feature has both 'args' and 'modes' (expected one of them)")
    if not (has_args or has_modes or feature.get("hardware_overrides")):
        ctx.warn(path, "feature has no 'args', 'modes' or 'hardware_overrides'; enabling it adds nothing")
    modes = _dict(feature.get("modes"))
    default_mode = feature.get("default_mode")
    if isinstance(default_mode, str):
        if not has_modes:
            ctx.error(_join(path, "default_mode"), "default_mode set on a feature without 'modes'")
        elif default_mode not in modes:
            ctx.error(_join(path, "default_mode"),
                      f"unknown mode '{default_mode}' (known: {_names(str(m) for m in modes)})")
    for mname, mode in modes.items():
        for i, vname in enumerate(_list(_dict(mode).get("variants"))):
            if isinstance(vname, str) and vname not in variants:
                ctx.error(_index(_join(_join(path, f"modes.{mname}"), "variants"), i),
                          f"unknown variant '{vname}' (known: {_names(str(v) for v in variants)})")


def _check_variant_refs(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """``variants.default`` exists; ``default_modes`` name modal features and their modes."""
    variants = data.get("variants")
    if not isinstance(variants, dict):
        return
    if "default" not in variants:
        ctx.error("variants", f"missing variant 'default' (every recipe needs one; found: "
                              f"{_names(str(v) for v in variants)})")
    features = _dict(data.get("features"))
    profiles = ctx.vocab.profiles or frozenset()
    for vname, variant in variants.items():
        vpath = _join("variants", vname)
        for fname, mode in _dict(_dict(variant).get("default_modes")).items():
            path = _join(_join(vpath, "default_modes"), fname)
            _check_default_mode(ctx, path, features, fname, mode)
        for key, block in _dict(_dict(variant).get("hardware_overrides")).items():
            if isinstance(block, dict) and "docker_image" in block and profiles and key not in profiles:
                ctx.warn(_join(_join(vpath, f"hardware_overrides.{key}"), "docker_image"),
                         "docker_image is only read under an exact GPU id, not under a generation key")


def _check_default_mode(ctx: _Ctx, path: str, features: Mapping[str, Any], fname: Any, mode: Any) -> None:
    """``variants.<v>.default_modes.<feature>: <mode>`` must name a modal feature and its mode."""
    if fname not in features:
        ctx.error(path, f"unknown feature '{fname}' (known: {_names(str(f) for f in features)})")
        return
    modes = _dict(features[fname]).get("modes")
    if not isinstance(modes, dict):
        ctx.error(path, f"feature '{fname}' has no modes")
    elif isinstance(mode, str) and mode not in modes:
        known = _names(str(m) for m in modes)
        ctx.error(path, f"unknown mode '{mode}' for feature '{fname}' (known: {known})")


def _offered_strategies(data: Mapping[str, Any]) -> Set[str]:
    """Strategies listed as compatible or opted in via ``strategy_hardware``."""
    offered = {s for s in _list(data.get("compatible_strategies")) if isinstance(s, str)}
    for name, per_hw in _dict(data.get("strategy_hardware")).items():
        if "supported" in _dict(per_hw).values():
            offered.add(name)
    return offered


_PD_ONLY_KEYS = ("prefill", "decode", "router", "pool_modes")


def _check_strategy_refs(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """Overrides and defaults that only take effect for certain strategies."""
    offered = _offered_strategies(data)
    deploy_types = ctx.vocab.strategies or {}
    default = data.get("default_strategy")
    if default in deploy_types and offered and default not in offered:
        ctx.warn("default_strategy", f"'{default}' is not offered by compatible_strategies or "
                                     f"strategy_hardware, so it never applies")
    for name, override in _dict(data.get("strategy_overrides")).items():
        if not isinstance(override, dict):
            continue
        path = _join("strategy_overrides", name)
        if name in deploy_types and name not in offered:
            ctx.warn(path, f"overrides for '{name}', which compatible_strategies and strategy_hardware "
                           f"do not offer")
        if "tp" in override and name != "single_node_tp":
            ctx.warn(_join(path, "tp"), "tp is only read for single_node_tp")
        deploy = deploy_types.get(name)
        if deploy is not None and deploy != "pd_cluster":
            for key in _PD_ONLY_KEYS:
                if key in override:
                    ctx.warn(_join(path, key), f"'{key}' is only read for pd_cluster strategies "
                                               f"('{name}' is {deploy})")


def _check_omni_refs(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """Omni block vs ``meta.tasks``; task ``axes`` vs ``omni.task_axes``."""
    omni = data.get("omni")
    tasks = _list(_dict(data.get("meta")).get("tasks"))
    if isinstance(omni, dict) and "omni" not in tasks:
        ctx.warn("omni", "recipe has an omni block but meta.tasks does not list 'omni'")
    if omni is None and "omni" in tasks:
        ctx.warn("meta.tasks", "meta.tasks lists 'omni' but the recipe has no omni block")
    axes: Dict[str, Set[str]] = {}
    for axis in _list(_dict(omni).get("task_axes")):
        if isinstance(axis, dict) and isinstance(axis.get("id"), str):
            axes[axis["id"]] = {o.get("id") for o in _list(axis.get("options")) if isinstance(o, dict)}
    for i, task in enumerate(_list(_dict(omni).get("tasks"))):
        for axis, option in _dict(_dict(task).get("axes")).items():
            path = _join(_index("omni.tasks", i), f"axes.{axis}")
            if axis not in axes:
                ctx.error(path, f"unknown axis '{axis}' (known from omni.task_axes: {_names(axes)})")
            elif isinstance(option, str) and option not in axes[axis]:
                ctx.error(path, f"unknown option '{option}' for axis '{axis}' (known: "
                                f"{_names(o for o in axes[axis] if isinstance(o, str))})")


def _recipe_problems(data: Any, ctx: _Ctx) -> List[Problem]:
    """Schema and cross-reference checks of one recipe."""
    if _top_level_map(ctx, data):
        _RECIPE.check(ctx, "", data)
        _check_variant_refs(ctx, data)
        _check_feature_refs(ctx, data)
        _check_strategy_refs(ctx, data)
        _check_omni_refs(ctx, data)
    return ctx.problems


def validate_recipe(
    data: Any,
    file: str,
    taxonomy: Optional[Mapping[str, Any]] = None,
    strategies: StrategiesArg = None,
    loaded: bool = False,
) -> List[Problem]:
    """Validate one loaded recipe.

    ``taxonomy`` is the (merged) taxonomy mapping; ``strategies`` maps strategy
    names to their definitions (kv_store deployments, ``deploy_type:
    kv_store_lb``, may be included) or is an iterable of strategy names.  Checks
    that need a missing piece are skipped.
    """
    return _recipe_problems(data, _Ctx(str(file), _build_vocab(taxonomy, strategies), loaded=loaded))
