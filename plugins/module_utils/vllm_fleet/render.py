"""Command synthesis: recipe + choices -> the processes to launch.

Behaviour follows upstream's command builder rule for rule (see docs in README and
tests/unit).  Everything here is pure data in, data out: no I/O, no Ansible.

The entry point is :func:`resolve`, returning a :class:`~.rendermodel.Rendering` that lists
every process of the deployment (single server, head + workers, prefill/decode pool members,
router, Mooncake master/store) with argv, env, port, docker image and docker argv.  This module
renders single- and multi-node servers, KV-store instances and omni tasks itself; the parts
live in rendermodel.py (the types), serveargs.py (argv and env), pdcluster.py (prefill/decode)
and mooncake.py (the KV store's services).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from .coerce import as_list, as_map
from .mooncake import kv_instance_count, mooncake_meta, mooncake_processes, mooncake_router
from .pdcluster import render_pd
from .rendermodel import DEFAULT_PORT, Context, Process, Rendering, Request, vllm_process
from .serveargs import KV_STORE_DEPLOY, kv_option, kv_store, serving_args, serving_env
from .shell import dedupe, vllm_shell


class RenderError(ValueError):
    """A choice that cannot be rendered (unknown recipe, variant, ...)."""


# ---------------------------------------------------------------------------------
# single- and multi-node servers, KV-store instances


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
