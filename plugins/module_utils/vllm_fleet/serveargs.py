"""The argv and env of a ``vllm serve`` process, assembled from the recipe's layers in upstream's
order: model base args, variant, strategy, strategy overrides, hardware override layers, the
operator's advanced args, features and their modes, the KV-offload option; with the parallel
block (TP / PP / DP flags) sized per strategy, node count and rank."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .coerce import as_list, as_map, truthy
from .rendermodel import Context
from .shell import dedupe
from .vllmargs import flag_values, whole

KV_STORE_DEPLOY = "kv_store_lb"


# ---------------------------------------------------------------------------------
# parallel sizing


def declared_tp(ctx: Context, value: Any) -> Optional[int]:
    if isinstance(value, dict):
        value = ctx.hw.ranked_lookup(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


def single_node_tp(ctx: Context) -> int:
    """TP size for single_node_tp: declared (variant, then strategy override) or auto-fit."""
    gpus = ctx.gpu_count
    for source in (ctx.variant.get("tp"), ctx.so("single_node_tp").get("tp")):
        tp = declared_tp(ctx, source)
        if tp is not None and truthy(tp):
            if ctx.hw.gen == "cpu":
                return tp
            return min(tp, gpus)
    need = ctx.variant.get("vram_minimum_gb")
    vram = ctx.hw.vram_gb
    if not need or not vram:
        return gpus
    return 1 if need <= vram / gpus else gpus


def multi_node_block(ctx: Context, rank: int, addr: str) -> List[str]:
    strat = ctx.strategy
    flag = strat.get("parallel_flag") or "--tensor-parallel-size"
    nodes = ctx.node_count
    gpus = ctx.gpu_count
    parallelism = strat.get("parallelism")
    if parallelism == "tp_pp":
        out = ["--tensor-parallel-size", str(gpus), "--pipeline-parallel-size", str(nodes),
               "--nnodes", str(nodes), "--node-rank", str(rank), "--master-addr", addr]
        return out + (["--headless"] if rank > 0 else [])
    if parallelism == "tp_dp":
        out = ["--tensor-parallel-size", str(gpus), "--data-parallel-size", str(nodes),
               "--data-parallel-size-local", "1", "--data-parallel-address", addr]
        return out + (["--data-parallel-start-rank", str(rank)] if rank > 0 else [])
    if flag == "--data-parallel-size":
        dp_local = dep_local_size(ctx)
        out = ["--data-parallel-size", str(ctx.total_gpus), "--data-parallel-size-local",
               str(gpus), "--data-parallel-address", addr]
        return out + (["--data-parallel-start-rank", str(rank * dp_local)] if rank > 0 else [])
    out = [flag, str(ctx.total_gpus), "--nnodes", str(nodes), "--node-rank", str(rank),
           "--master-addr", addr]
    return out + (["--headless"] if rank > 0 else [])


def dep_local_size(ctx: Context) -> int:
    """Last ``--data-parallel-size-local`` in the strategy's overrides, else GPUs per node."""
    so = ctx.so()
    hos = as_map(so.get("hardware_overrides"))
    sources = [so.get("vllm_args"), so.get("extra_args"),
               as_map(ctx.hw.gen_lookup(hos)).get("extra_args"),
               as_map(hos.get(ctx.hw.hw_id)).get("extra_args") if ctx.hw.hw_id else None]
    found: Optional[int] = None
    for args in sources:
        for value in flag_values(as_list(args), "--data-parallel-size-local"):   # any spelling vLLM reads
            found = whole(value) if whole(value) is not None else found
    return found if found is not None else ctx.gpu_count


def parallel_block(ctx: Context, rank: int, addr: str) -> List[str]:
    deploy = ctx.strategy.get("deploy_type") or "single_node"
    if deploy == "multi_node" and ctx.node_count > 1:
        return multi_node_block(ctx, rank, addr)
    flag = ctx.strategy.get("parallel_flag") or "--tensor-parallel-size"
    n = single_node_tp(ctx) if ctx.strategy_name == "single_node_tp" else ctx.gpu_count
    return [flag, str(n)]


# ---------------------------------------------------------------------------------
# features and KV options


def feature_mode_allowed(ctx: Context, mode: Mapping[str, Any]) -> bool:
    allowed_variants = mode.get("variants")
    if isinstance(allowed_variants, list) and allowed_variants and ctx.variant_key not in allowed_variants:
        return False
    gate = as_map(mode.get("hardware"))
    for key in (ctx.hw.gen, ctx.hw.hw_id):
        if key is not None and gate.get(key) == "unsupported":
            return False
    return True


def feature_args(ctx: Context, name: str, feature: Mapping[str, Any]) -> List[str]:
    modes = feature.get("modes")
    if isinstance(modes, dict) and modes:
        candidates = [ctx.req.feature_modes.get(name),
                      as_map(ctx.variant.get("default_modes")).get(name),
                      feature.get("default_mode")]
        chosen = None
        for cand in candidates:
            if cand and cand in modes and feature_mode_allowed(ctx, as_map(modes[cand])):
                chosen = cand
                break
        if chosen is None:
            for key, mode in modes.items():
                if feature_mode_allowed(ctx, as_map(mode)):
                    chosen = key
                    break
        if chosen is None:
            return []
        mode = as_map(modes[chosen])
        override = ctx.hw.ranked_lookup(as_map(mode.get("hardware_overrides")))
        if isinstance(override, dict) and "args" in override and override.get("args") is not None:
            return as_list(override.get("args"))
        return as_list(mode.get("args"))
    override = ctx.hw.gen_lookup(as_map(feature.get("hardware_overrides")))
    if isinstance(override, dict) and override.get("args") is not None:
        return as_list(override.get("args"))
    return as_list(feature.get("args"))


def features_args(ctx: Context, mooncake: bool) -> List[str]:
    features = as_map(ctx.recipe.get("features"))
    out: List[str] = []
    for name in ctx.req.features or []:
        feature = features.get(name)
        if not isinstance(feature, dict):
            continue
        allow = feature.get("strategies")
        if isinstance(allow, list) and allow and ctx.strategy_name not in allow:
            continue
        if mooncake and truthy(as_map(feature.get("companion")).get("command")):
            continue
        out += feature_args(ctx, name, feature)
    return out


def kv_option(ctx: Context) -> Optional[Tuple[str, Dict[str, Any]]]:
    """The taxonomy KV-offload option that applies, or None when gated off."""
    key = ctx.req.kv_offload
    options = as_map(ctx.taxonomy.get("kv_offload"))
    if not key or key not in options:
        return None
    opt = as_map(options[key])
    deploy = ctx.strategy.get("deploy_type")
    if deploy in ("pd_cluster", KV_STORE_DEPLOY):
        return None
    allow = opt.get("strategies")
    if isinstance(allow, list) and allow and ctx.strategy_name not in allow:
        return None
    support = as_map(ctx.recipe.get("kv_offload_support")).get(key)
    if support == "unsupported":
        return None
    if opt.get("requires_opt_in") and support != "verified":
        return None
    brands = opt.get("brands")
    if isinstance(brands, list) and brands and ctx.hw.brand not in brands:
        return None
    return key, opt


def kv_store(ctx: Context) -> Optional[Dict[str, Any]]:
    key = ctx.req.kv_offload
    if not key:
        return None
    entry = ctx.strategies.get(key)
    if isinstance(entry, dict) and entry.get("deploy_type") == KV_STORE_DEPLOY:
        return entry
    return None


# ---------------------------------------------------------------------------------
# the layers every vLLM process starts from, and a server's argv and env (non-PD)


def base_args(ctx: Context) -> List[str]:
    return (as_list(ctx.model.get("base_args")) + as_list(ctx.variant.get("extra_args"))
            + as_list(ctx.variant_exact().get("extra_args")))


def base_env(ctx: Context) -> Dict[str, Any]:
    env: Dict[str, Any] = {}
    env.update(as_map(ctx.model.get("base_env")))
    env.update(as_map(ctx.variant.get("extra_env")))
    env.update(as_map(ctx.variant_exact().get("extra_env")))
    return env


def serving_args(ctx: Context, ranks: Sequence[int], addr: str, kv_opt, store) -> List[List[str]]:
    """argv of each rank: everything but the parallel block is the same for all ranks."""
    so = ctx.so()
    head = base_args(ctx) + as_list(ctx.strategy.get("vllm_args"))
    tail = as_list(so.get("extra_args")) + as_list(so.get("vllm_args"))
    for layer in ctx.hw_layers(ctx.strategy_name, None):
        tail += as_list(layer.get("extra_args"))
    tail += as_list(ctx.req.advanced_args)
    tail += features_args(ctx, store is not None)
    if kv_opt is not None:
        tail += as_list(kv_opt[1].get("args"))
    if store is not None:
        tail += as_list(as_map(store.get("vllm")).get("vllm_args"))
    prefix = ["vllm", "serve", ctx.model_id]
    return [prefix + dedupe([str(a) for a in head + parallel_block(ctx, rank, addr) + tail])
            for rank in ranks]


def serving_env(ctx: Context, kv_opt, store) -> Dict[str, Any]:
    so = ctx.so()
    env = base_env(ctx)
    env.update(as_map(ctx.strategy.get("env")))
    if kv_opt is not None:
        env.update(as_map(kv_opt[1].get("env")))
    if store is not None:
        env.update(as_map(as_map(store.get("vllm")).get("env")))
    env.update(as_map(so.get("env")))
    env.update(as_map(so.get("extra_env")))
    for layer in ctx.hw_layers(ctx.strategy_name, None):
        env.update(as_map(layer.get("extra_env")))
    return env
