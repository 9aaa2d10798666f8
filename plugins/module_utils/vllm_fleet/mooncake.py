"""The Mooncake KV store's pieces of a rendering: how many vLLM instances, the master and store
processes, the cache-aware router in front of the instances, and the config and install text."""

from __future__ import annotations

import shlex
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .coerce import as_map
from .rendermodel import DEFAULT_PORT, Context, Process
from .shell import shell_command


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
