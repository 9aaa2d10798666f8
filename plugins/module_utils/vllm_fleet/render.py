"""Command synthesis: recipe + choices -> the processes to launch.

Behaviour follows upstream's command builder rule for rule (see docs in README and
tests/unit).  Everything here is pure data in, data out: no I/O, no Ansible.

The main entry point is :func:`resolve`, returning a :class:`Rendering` that lists every
process of the deployment (single server, head + workers, prefill/decode pool members,
router, Mooncake master/store) with argv, env, port, docker image and docker argv.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import docker as dk
from .shell import dedupe, shell_command, vllm_shell
from .vllmargs import flag_values, whole

PD_ROLES = ("prefill", "decode")
PD_PORTS = {"prefill": 8001, "decode": 8002}
PD_FILTERED_ENV = ("VLLM_USE_NCCL_SYMM_MEM", "NCCL_CUMEM_ENABLE", "NCCL_MNNVL_ENABLE",
                   "NCCL_NVLS_ENABLE", "UCX_NET_DEVICES")
PD_FULL_FABRIC = ("gb200", "gb300")
IFACE_ENV = {"GLOO_SOCKET_IFNAME": "$IFACE_NAME", "NCCL_SOCKET_IFNAME": "$IFACE_NAME"}
DEFAULT_PORT = 8000
KV_STORE_DEPLOY = "kv_store_lb"


class RenderError(ValueError):
    """A choice that cannot be rendered (unknown recipe, variant, ...)."""


def truthy(value: Any) -> bool:
    """JavaScript truthiness (empty maps and lists are true, 0 and "" are false)."""
    if value is None or value is False:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value != 0 and not (isinstance(value, float) and math.isnan(value))
    if isinstance(value, str):
        return value != ""
    return True


def as_list(value: Any) -> List[Any]:
    return list(value) if isinstance(value, list) else []


def as_map(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


class Hardware:
    """A taxonomy hardware profile, normalised (generation read once)."""

    def __init__(self, hw_id: Optional[str], profile: Dict[str, Any]):
        self.hw_id = hw_id
        self.profile = profile
        self.brand: Optional[str] = profile.get("brand")
        self.gen: Optional[str] = dk.generation(profile)
        raw = profile.get("generation", profile.get("gpu_generation"))
        if isinstance(raw, list):
            self.gens = [g for g in raw if isinstance(g, str)]
        else:
            self.gens = [raw] if isinstance(raw, str) else []
        self.gpu_count: int = profile.get("gpu_count") or 1
        self.vram_gb: Optional[float] = profile.get("vram_gb")
        self._keys = [k for k in (hw_id, self.gen, (self.brand or "").lower() or None, "default")
                      if k is not None]

    def gen_lookup(self, mapping: Mapping[str, Any]) -> Any:
        """Generation key, else ``nvidia`` on NVIDIA profiles (first truthy hit)."""
        if not isinstance(mapping, dict):
            return None
        hit = mapping.get(self.gen) if self.gen is not None else None
        if truthy(hit):
            return hit
        if self.brand == "NVIDIA":
            hit = mapping.get("nvidia")
            if truthy(hit):
                return hit
        return None

    def ranked_lookup(self, mapping: Mapping[str, Any]) -> Any:
        """Exact id > generation > lower-case brand > ``default``."""
        if not isinstance(mapping, dict):
            return None
        for key in self._keys:
            if key in mapping and mapping[key] is not None:
                return mapping[key]
        return None


class Process:
    """One thing to run on one host.

    vLLM processes carry their docker image choice; the upstream-style docker argv and
    the shell forms are computed on first use (they are only printed or compared).
    """

    def __init__(self, role: str, rank: Optional[int], argv: List[str],
                 env: Optional[Dict[str, Any]] = None, port: Optional[int] = None,
                 kind: str = "vllm", command: Optional[str] = None,
                 install: Optional[str] = None, config: Optional[Dict[str, Any]] = None,
                 docker: Optional[Dict[str, Any]] = None):
        self.role = role
        self.rank = rank
        self.argv = argv
        self.env = env if env is not None else {}
        self.port = port
        self.kind = kind
        self._command = command
        self.install = install
        self.config = config
        self.docker = docker  # image, brand_key, [cuda_map], profile, published port
        self.extras: Dict[str, Any] = {}
        self._docker_argv: Optional[List[str]] = None

    def __repr__(self) -> str:
        return f"Process({self.role!r}, rank={self.rank!r}, argv={self.argv!r})"

    @property
    def command(self) -> str:
        """Shell form, for humans only."""
        if self._command is None:
            self._command = vllm_shell(self.argv)
        return self._command

    @property
    def image(self) -> Optional[str]:
        return self.docker["image"] if self.docker else None

    def docker_argv(self) -> Optional[List[str]]:
        """Upstream's ``docker run`` argv (GPU flags, --privileged, -e per env entry)."""
        if not self.docker:
            return None
        if self._docker_argv is None:
            d = self.docker
            self._docker_argv = dk.docker_argv(d["profile"], d["image"], self.argv, self.env,
                                               d["published"])
        return self._docker_argv

    def docker_command(self) -> Optional[str]:
        if not self.docker:
            return None
        d = self.docker
        return dk.docker_command(d["profile"], d["image"], self.argv, self.env, d["published"])


@dataclass
class Rendering:
    deploy_type: str
    processes: List[Process]
    meta: Dict[str, Any] = field(default_factory=dict)

    def find(self, role: str, rank: Optional[int] = None) -> Optional[Process]:
        for proc in self.processes:
            if proc.role == role and (rank is None or proc.rank is None or proc.rank == rank):
                return proc
        return None


@dataclass
class Request:
    """The operator's choices for one rendering (upstream ``resolveCommand`` inputs)."""

    hf_id: str
    variant: str = "default"
    hardware: Optional[str] = None
    strategy: Optional[str] = None
    node_count: int = 1
    features: Optional[List[str]] = None
    feature_modes: Dict[str, str] = field(default_factory=dict)
    advanced_args: List[str] = field(default_factory=list)
    pd_nodes: Any = None
    kv_offload: Optional[str] = None
    kv_instances: Any = None
    omni_task: Optional[str] = None


class Context:
    """Everything one rendering needs, resolved once."""

    def __init__(self, recipe: Mapping[str, Any], req: Request, strategies: Mapping[str, Any],
                 taxonomy: Mapping[str, Any]):
        self.recipe = recipe
        self.req = req
        self.strategies = strategies
        self.taxonomy = taxonomy
        variants = as_map(recipe.get("variants"))
        self.variant_key = req.variant if req.variant in variants else "default"
        self.variant = as_map(variants.get(self.variant_key))
        self.model = as_map(recipe.get("model"))
        profiles = as_map(taxonomy.get("hardware_profiles"))
        self.hw = Hardware(req.hardware, as_map(profiles.get(req.hardware)) if req.hardware else {})
        self.strategy_name = req.strategy
        self.strategy = as_map(strategies.get(req.strategy)) if req.strategy else {}
        self.so_all = as_map(recipe.get("strategy_overrides"))
        self.node_count = req.node_count if isinstance(req.node_count, int) else 1
        self.model_id = (self.variant.get("model_id") or self.model.get("model_id") or "unknown")
        self.docker = dk.docker_meta(recipe, self.variant, req.hardware, self.hw.profile)

    @property
    def gpu_count(self) -> int:
        return self.hw.gpu_count

    @property
    def total_gpus(self) -> int:
        return self.gpu_count * max(1, self.node_count)

    def so(self, name: Optional[str] = None) -> Dict[str, Any]:
        return as_map(self.so_all.get(name or self.strategy_name))

    # -- hardware override layers -------------------------------------------------
    def hw_layers(self, strategy_name: Optional[str], role: Optional[str]) -> List[Dict[str, Any]]:
        """Hardware override blocks in application order (args and env alike)."""
        so = self.so(strategy_name)
        layers: List[Dict[str, Any]] = []
        so_gen = self.hw.gen_lookup(as_map(so.get("hardware_overrides")))
        if so_gen is not None:
            layers.append(as_map(so_gen))
        else:
            for source in (self.recipe.get("hardware_overrides"),
                           self.variant.get("hardware_overrides")):
                hit = self.hw.gen_lookup(as_map(source))
                if hit is not None:
                    layers.append(as_map(hit))
        exact = as_map(so.get("hardware_overrides")).get(self.hw.hw_id) if self.hw.hw_id else None
        if exact is not None:
            layers.append(as_map(exact))
        if role:
            role_exact = as_map(as_map(so.get(role)).get("hardware_overrides")).get(self.hw.hw_id)
            if role_exact is not None and self.hw.hw_id:
                layers.append(as_map(role_exact))
        return layers

    def variant_exact(self) -> Dict[str, Any]:
        if not self.hw.hw_id:
            return {}
        return as_map(as_map(self.variant.get("hardware_overrides")).get(self.hw.hw_id))


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
# one vllm process (non-PD)


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


def vllm_process(ctx: Context, role: str, rank: Optional[int], argv: List[str],
                 env: Dict[str, Any], port: int, docker_port: Optional[int] = None) -> Process:
    """A vLLM server process; ``docker_port`` is the port upstream's docker line publishes."""
    docker = dict(ctx.docker)
    docker["profile"] = ctx.hw.profile
    docker["published"] = port if docker_port is None else docker_port
    return Process(role=role, rank=rank, argv=argv, env=env, port=port, docker=docker)


def is_multi(ctx: Context) -> bool:
    return (ctx.strategy.get("deploy_type") == "multi_node") and ctx.node_count > 1


def serving_processes(ctx: Context, addr: str, roles: Tuple[str, str, str], kv_opt, store
                      ) -> List[Process]:
    env = serving_env(ctx, kv_opt, store)
    single_role, head_role, worker_role = roles
    if not is_multi(ctx):
        argv = serving_args(ctx, [0], addr, kv_opt, store)[0]
        return [vllm_process(ctx, single_role, 0, argv, env, DEFAULT_PORT)]
    argvs = serving_args(ctx, range(ctx.node_count), addr, kv_opt, store)
    return [vllm_process(ctx, head_role if rank == 0 else worker_role, rank, argv, dict(env),
                         DEFAULT_PORT)
            for rank, argv in enumerate(argvs)]


# ---------------------------------------------------------------------------------
# prefill / decode


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


# ---------------------------------------------------------------------------------
# Mooncake KV store


def kv_instance_count(ctx: Context, store: Mapping[str, Any]) -> Tuple[int, int]:
    raw = ctx.req.kv_instances
    if isinstance(raw, dict):
        count, current = raw.get("count"), raw.get("current") or 0
    else:
        count, current = raw, 0
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        count = store.get("default_instances") or 2
    current = current if isinstance(current, int) and not isinstance(current, bool) else 0
    return int(count), min(max(current, 0), int(count) - 1)


def mooncake_install(ctx: Context, store: Mapping[str, Any]) -> Optional[str]:
    install = as_map(as_map(store.get("vllm")).get("install"))
    return install.get(ctx.docker["brand_key"])


def mooncake_meta(ctx: Context, store: Mapping[str, Any]) -> Dict[str, Any]:
    return {"config": as_map(store.get("mooncake_vllm_config")).get("template"),
            "install": mooncake_install(ctx, store)}


def command_argv(text: str) -> List[str]:
    """argv of a shell-form recipe command (comment lines and continuations removed)."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    return shlex.split(" ".join(ln.rstrip().rstrip("\\") for ln in lines))


def mooncake_processes(ctx: Context, store: Mapping[str, Any]) -> List[Process]:
    procs: List[Process] = []
    master = as_map(store.get("mooncake_master")).get("command")
    if isinstance(master, str):
        procs.append(Process(role="mooncake_master", rank=None, argv=command_argv(master),
                             kind="mooncake_master", command=master))
    store_cfg = store.get("mooncake_store_config")
    if isinstance(store_cfg, dict) and isinstance(store_cfg.get("command"), str):
        procs.append(Process(role="mooncake_store", rank=None,
                             argv=command_argv(store_cfg["command"]), kind="mooncake_store",
                             command=store_cfg["command"], config=store_cfg.get("config")))
    return procs


def mooncake_router(ctx: Context, store: Mapping[str, Any], count: int) -> Process:
    router = as_map(store.get("router"))
    argv = ["vllm-router", "--policy", str(router.get("policy") or "cache_aware")]
    for i in range(count):
        argv += ["--backend-url", f"http://$VLLM_INSTANCE_{i + 1}:{DEFAULT_PORT}"]
    argv += ["--host", "$ROUTER_HOST", "--port", "$ROUTER_PORT", "--cache-threshold", "0.5",
             "--balance-abs-threshold", "4", "--balance-rel-threshold", "1.1"]
    proc = Process(role="router", rank=None, argv=argv, kind="router",
                   command=shell_command(" ".join(argv[:3]), argv[3:], indent="    ", quoted=False),
                   install=router.get("install"))
    proc.extras["router_port"] = router.get("port")
    return proc


def render_kv_store(ctx: Context, store: Mapping[str, Any]) -> Rendering:
    count, current = kv_instance_count(ctx, store)
    addr = f"$VLLM_INSTANCE_{current + 1}" if count >= 2 else "$HEAD_IP"
    procs = serving_processes(ctx, addr, ("instance", "instance_head", "instance_worker"),
                              None, store)
    meta = mooncake_meta(ctx, store)
    for proc in procs:
        proc.extras.update({"serving_strategy": ctx.strategy_name, "instances": count,
                            "current_instance": current, "mooncake_config": meta["config"],
                            "vllm_install": meta["install"]})
    procs += mooncake_processes(ctx, store)
    if count > 1:
        procs.append(mooncake_router(ctx, store, count))
    return Rendering(KV_STORE_DEPLOY, procs, {"mooncake": meta, "instances": count,
                                              "current_instance": current})


# ---------------------------------------------------------------------------------
# omni


def omni_task(recipe: Mapping[str, Any], task_id: Optional[str]) -> Dict[str, Any]:
    tasks = as_list(as_map(recipe.get("omni")).get("tasks"))
    norm = [({"id": t} if isinstance(t, str) else as_map(t)) for t in tasks]
    for task in norm:
        if task_id is None or task.get("key") == task_id or task.get("id") == task_id:
            return task
    return norm[0] if norm and task_id is None else {}


def render_omni(ctx: Context) -> Rendering:
    recipe = ctx.recipe
    omni = as_map(recipe.get("omni"))
    task = omni_task(recipe, ctx.req.omni_task)
    is_default = ctx.variant_key == "default"
    model_id = task.get("model_id") or ctx.variant.get("model_id") or ctx.model.get("model_id") or "unknown"
    task_hw = as_map(as_map(task.get("hardware_overrides")).get(ctx.hw.hw_id)) if ctx.hw.hw_id else {}
    env: Dict[str, Any] = dict(as_map(ctx.model.get("base_env")))
    if not is_default:
        env.update(as_map(ctx.variant.get("extra_env")))
    recipe_ho = ctx.hw.gen_lookup(as_map(recipe.get("hardware_overrides")))
    variant_ho = ctx.hw.gen_lookup(as_map(ctx.variant.get("hardware_overrides")))
    exact = ctx.variant_exact()
    for layer in (recipe_ho, variant_ho, exact):
        env.update(as_map(as_map(layer).get("extra_env")))
    args = as_list(ctx.model.get("base_args"))
    if not is_default:
        args += as_list(ctx.variant.get("extra_args"))
    args += as_list(task.get("extra_args")) + as_list(task_hw.get("extra_args"))
    for layer in (recipe_ho, variant_ho, exact):
        args += as_list(as_map(layer).get("extra_args"))
    port = omni.get("port")
    if port:
        args += ["--port", str(port)]
    args.append("--omni")
    binary = str(omni.get("serve_binary") or "vllm serve").split()
    argv = binary + [model_id] + dedupe(str(a) for a in args)
    http_port = port or DEFAULT_PORT
    # upstream publishes 8000 whatever omni.port says; the process itself listens on port
    proc = vllm_process(ctx, "omni", 0, argv, env, http_port, docker_port=DEFAULT_PORT)
    proc.kind = "omni"
    proc._command = vllm_shell(argv, len(binary))
    proc.extras["model_id"] = model_id
    return Rendering("omni", [proc])


# ---------------------------------------------------------------------------------
# entry point


def resolve(recipe: Mapping[str, Any], req: Request, strategies: Mapping[str, Any],
            taxonomy: Mapping[str, Any]) -> Rendering:
    """Render every process of one deployment choice (no validation of the choice)."""
    ctx = Context(recipe, req, strategies, taxonomy)
    if req.omni_task is not None or (not req.strategy and as_map(recipe.get("omni"))):
        return render_omni(ctx)
    store = kv_store(ctx)
    deploy = ctx.strategy.get("deploy_type") or "single_node"
    if deploy == "pd_cluster":
        return render_pd(ctx, store)
    if store is not None:
        return render_kv_store(ctx, store)
    kv_opt = kv_option(ctx)
    procs = serving_processes(ctx, "$HEAD_IP", ("single", "head", "worker"), kv_opt, None)
    if kv_opt is not None and len(procs) == 1:
        companion = as_map(kv_opt[1].get("companion"))
        if companion.get("command"):
            desc = companion.get("description") or ""
            if kv_opt[1].get("install"):
                desc = f"{desc} Requires: {kv_opt[1]['install']}"
            procs[0].extras["companions"] = [{
                "feature": f"kv_offload:{kv_opt[0]}", "label": companion.get("label"),
                "description": desc, "command": str(companion["command"]).rstrip()}]
    return Rendering(deploy, procs)
