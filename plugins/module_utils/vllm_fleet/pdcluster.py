"""Prefill/decode (``pd_cluster``) renderings: the prefill and decode pools (nodes, rank,
parallelism snapped to the modes the recipe offers), each role's vLLM process, the router that
joins them, and the Mooncake processes when the KV store is on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from .coerce import as_list, as_map
from .mooncake import mooncake_meta, mooncake_processes
from .rendermodel import Context, Process, Rendering, vllm_process
from .serveargs import base_args, base_env, features_args
from .shell import dedupe, shell_command

PD_ROLES = ("prefill", "decode")
PD_PORTS = {"prefill": 8001, "decode": 8002}
PD_FILTERED_ENV = ("VLLM_USE_NCCL_SYMM_MEM", "NCCL_CUMEM_ENABLE", "NCCL_MNNVL_ENABLE",
                   "NCCL_NVLS_ENABLE", "UCX_NET_DEVICES")
PD_FULL_FABRIC = ("gb200", "gb300")
IFACE_ENV = {"GLOO_SOCKET_IFNAME": "$IFACE_NAME", "NCCL_SOCKET_IFNAME": "$IFACE_NAME"}


def effective_strategies(ctx: Context) -> List[str]:
    """Listed strategies plus ``supported`` opt-ins from strategy_hardware, in order."""
    listed = [s for s in as_list(ctx.recipe.get("compatible_strategies")) if isinstance(s, str)]
    out = list(listed)
    for name, per_hw in as_map(ctx.recipe.get("strategy_hardware")).items():
        if name not in out and ctx.hw.ranked_lookup(as_map(per_hw)) == "supported":
            out.append(name)
    return out


def pool_modes(ctx: Context) -> List[str]:
    modes: List[str] = []
    for name in effective_strategies(ctx):  # not filtered by hardware support
        if name.endswith("_dep"):
            mode = "dep"
        elif name.endswith("_tep"):
            mode = "tep"
        elif name.endswith(("_tp", "_tp_pp", "_tp_dp")):
            mode = "tp"
        else:
            continue
        if mode not in modes:
            modes.append(mode)
    if not modes:
        modes = ["tp"]
    narrow = ctx.so("pd_cluster").get("pool_modes")
    if isinstance(narrow, list) and narrow:
        kept = [m for m in modes if m in narrow]
        modes = kept or [m for m in narrow]
    return modes


@dataclass
class Pool:
    role: str
    nodes: int
    rank: int
    raw_rank: int
    parallelism: str  # after snapping
    requested: str  # before snapping
    tp: Optional[int]
    dp_local: int
    colocated: bool


def pd_pools(ctx: Context) -> Dict[str, Pool]:
    so = ctx.so("pd_cluster")
    strat = ctx.strategy
    offered = pool_modes(ctx)
    raw = ctx.req.pd_nodes
    pools: Dict[str, Pool] = {}
    for role in PD_ROLES:
        spec: Any
        if raw is None:
            spec = 0 if ctx.node_count <= 1 else 1
        else:
            spec = as_map(raw).get(role) if isinstance(raw, dict) else None
        role_so = as_map(so.get(role))
        role_strat = as_map(strat.get(role))
        if isinstance(spec, dict):
            nodes = spec.get("nodes")
            rank = spec.get("rank") or 0
            requested = spec.get("parallelism")
        else:
            nodes = spec
            rank = 0
            requested = None
        if not isinstance(nodes, int) or isinstance(nodes, bool):
            nodes = 1 if nodes is None and raw is not None else (nodes or 0)
        requested = requested or role_so.get("parallelism") or role_strat.get("parallelism") or "tp"
        snapped = requested if requested in offered else offered[0]
        tp = role_so.get("tp", role_strat.get("tp"))
        tp = tp if isinstance(tp, int) and not isinstance(tp, bool) else None
        dp_local = max(1, ctx.gpu_count // (tp or 1))
        colocated = nodes == 0
        idx = min(max(int(rank), 0), max(nodes, 1) - 1)
        pools[role] = Pool(role, nodes, idx, int(rank), snapped, requested, tp, dp_local, colocated)
    return pools


def pd_parallel_args(ctx: Context, pool: Pool) -> List[str]:
    role = pool.role.upper()
    nodes = max(pool.nodes, 1)
    if pool.parallelism == "dep":
        out: List[str] = []
        if pool.tp is not None:
            out += ["--tensor-parallel-size", str(pool.tp)]
        out += ["--data-parallel-size", str(nodes * pool.dp_local),
                "--data-parallel-size-local", str(pool.dp_local),
                "--data-parallel-start-rank", str(pool.rank * pool.dp_local),
                "--data-parallel-address", f"${role}_NODE_1",
                "--data-parallel-rpc-port", f"${role}_DP_RPC_PORT"]
        if pool.nodes > 1:
            out.append("--data-parallel-hybrid-lb")
        return out + ["--enable-expert-parallel"]
    role_so = as_map(ctx.so("pd_cluster").get(pool.role))
    flag = (role_so.get("parallel_flag") or as_map(ctx.strategy.get(pool.role)).get("parallel_flag")
            or ctx.strategy.get("parallel_flag") or "--tensor-parallel-size")
    pool_gpus = ctx.gpu_count // 2 if pool.colocated else pool.nodes * ctx.gpu_count
    out = [flag, str(max(1, pool_gpus))]
    if pool.parallelism == "tep":
        out.append("--enable-expert-parallel")
    if pool.nodes > 1:
        out += ["--nnodes", str(pool.nodes), "--node-rank", str(pool.rank),
                "--master-addr", f"${role}_NODE_1"]
        if pool.rank > 0:
            out.append("--headless")
    return out


def pd_role_process(ctx: Context, pool: Pool, store) -> Process:
    so = ctx.so("pd_cluster")
    role_so = as_map(so.get(pool.role))
    role_strat = as_map(ctx.strategy.get(pool.role))
    args = base_args(ctx)
    args += as_list(role_strat.get("vllm_args"))
    args += pd_parallel_args(ctx, pool)
    args += as_list(role_so.get("extra_args")) + as_list(role_so.get("vllm_args"))
    layers = ctx.hw_layers("pd_cluster", pool.role)
    for layer in layers:
        args += as_list(layer.get("extra_args"))
    args += as_list(ctx.req.advanced_args)
    args += features_args(ctx, store is not None)
    if store is not None:
        args += as_list(as_map(as_map(store.get("pd")).get(pool.role)).get("args"))
    argv = ["vllm", "serve", ctx.model_id] + dedupe(str(a) for a in args)

    env = base_env(ctx)
    env.update(as_map(role_strat.get("env")))
    if store is not None:
        env.update(as_map(as_map(store.get("vllm")).get("env")))
    gpus = ctx.gpu_count
    if pool.colocated:
        if gpus >= 2:
            half = gpus // 2
            ids = range(0, half) if pool.role == "prefill" else range(half, gpus)
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in ids)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus))
    if pool.nodes >= 2:
        env.update(IFACE_ENV)
    env.update(as_map(so.get("env")))
    env.update(as_map(role_so.get("env")))
    for layer in layers:
        env.update(as_map(layer.get("extra_env")))
    if ctx.hw.hw_id not in PD_FULL_FABRIC:
        for key in PD_FILTERED_ENV:
            env.pop(key, None)
    # like the router and role metadata, the rename follows the requested (unsnapped) mode
    if pool.requested == "dep" and pool.raw_rank > 0:
        own = f"${pool.role.upper()}_NODE_"
        for key, value in list(env.items()):
            if value == own + "1":
                env[key] = f"{own}{pool.raw_rank + 1}"
    proc = vllm_process(ctx, pool.role, pool.rank, argv, env, PD_PORTS[pool.role])
    proc.extras["pd_role"] = {
        "nodes": pool.nodes, "parallelism": pool.requested, "tp": pool.tp,
        "dpLocal": pool.dp_local, "poolGpus": (gpus // 2 if pool.colocated else pool.nodes * gpus),
        "currentNode": pool.rank,
    }
    return proc


def pd_router(ctx: Context, pools: Dict[str, Pool]) -> Process:
    so = ctx.so("pd_cluster")
    policy = as_map(ctx.strategy.get("router")).get("policy") or "round_robin"
    argv = ["vllm-router", "--policy", str(policy), "--vllm-pd-disaggregation"]
    for role in PD_ROLES:
        pool = pools[role]
        count = max(pool.nodes, 1) if pool.requested == "dep" else 1
        for i in range(count):
            argv += [f"--{role}", f"http://${role.upper()}_NODE_{i + 1}:{PD_PORTS[role]}"]
    intra = as_map(so.get("router")).get("intra_node_data_parallel_size")
    if intra is None:
        intra = max([pools[r].dp_local if pools[r].requested == "dep" else 1 for r in PD_ROLES] + [1])
    argv += ["--host", "$ROUTER_HOST", "--port", "$ROUTER_PORT",
             "--intra-node-data-parallel-size", str(intra)]
    return Process(role="router", rank=None, argv=argv, kind="router",
                   command=shell_command(" ".join(argv[:3]), argv[3:], indent="    ", quoted=False),
                   install="uv pip install vllm-router", config={"policy": policy})


def render_pd(ctx: Context, store) -> Rendering:
    pools = pd_pools(ctx)
    procs = [pd_role_process(ctx, pools[r], store) for r in PD_ROLES]
    procs.append(pd_router(ctx, pools))
    meta: Dict[str, Any] = {}
    if store is not None:
        procs += mooncake_processes(ctx, store)
        meta["mooncake"] = mooncake_meta(ctx, store)
        for proc in procs[:2]:
            proc.extras["mooncake_config"] = meta["mooncake"]["config"]
            proc.extras["mooncake_install"] = meta["mooncake"]["install"]
    return Rendering("pd_cluster", procs, meta)
