"""Rollout order: drain targets (the router that lists each engine), batches and the fleet's
rollout summary."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Tuple

from .hostplan import HostPlan
from .planargv import flag_values_list


def drain_targets(out: Dict[str, HostPlan]) -> None:
    """Give every serving engine process that a router of its deployment lists as a worker the
    router to drain it from (``drain``: router host, port, the worker URL the router knows)."""
    routers = [(host, proc) for host, entry in out.items() for proc in entry.processes
               if proc.kind == "router" and "--worker-urls" in proc.argv]
    for entry in out.values():
        for proc in entry.processes:
            if proc.kind not in ("vllm", "omni") or not proc.serves_http:
                continue
            url = f"http://{entry.address}:{proc.port}"
            for router_host, router in routers:
                if url in flag_values_list(router.argv, "--worker-urls"):
                    proc.drain = entry.drain = {"router_host": router_host, "router_port": router.port, "url": url}


DEFAULT_BATCHES: Tuple[Any, ...] = (1, "25%")   # a canary instance, then a quarter at a time


def rollout_batches(count: int, spec: Any = None) -> List[int]:
    """Batch number of each of ``count`` instances (in order). ``spec``: a number of instances,
    a percentage of the deployment's instances (``"25%"``), or a list of those whose last entry
    repeats, like Ansible's ``serial``; default: a canary of one, then batches of 25 %."""
    steps = list(spec) if isinstance(spec, (list, tuple)) else [spec] if spec not in (None, "") else list(DEFAULT_BATCHES)
    sizes = []
    for step in steps:
        text = str(step).strip()
        size = -(-count * int(text[:-1]) // 100) if text.endswith("%") else int(text)
        sizes.append(max(1, size))
    out: List[int] = []
    batch = 0
    while len(out) < count:
        size = sizes[min(batch, len(sizes) - 1)]
        out += [batch] * min(size, count - len(out))
        batch += 1
    return out


def rollout(plans: Mapping[str, Mapping[str, Any]]) -> Dict[str, Any]:
    """Order engine hosts for serial batches: batch, deployment, unit, rank (heads first).

    Returns ``order`` (host names) and ``serial`` (hosts per batch, Ansible's list form).
    """
    engine = [(name, p) for name, p in plans.items() if p and p.get("batch") is not None]
    engine.sort(key=lambda item: (item[1]["batch"], item[1]["deployment"], item[1].get("instance") or 0,
                                  item[1].get("node_rank") or 0, item[0]))
    serial: List[int] = []
    last = None
    for _, p in engine:
        if p["batch"] != last:
            serial.append(0)
            last = p["batch"]
        serial[-1] += 1
    return {"order": [name for name, _ in engine], "serial": serial or [1]}
