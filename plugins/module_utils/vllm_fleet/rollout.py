"""Rollout order: drain targets (the router that lists each engine), batches and the fleet's
rollout summary."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Tuple

from .hostplan import HostPlan
from .planargv import flag_values_list


ROUTER_POOLS = (("regular", "--worker-urls"), ("prefill", "--prefill"), ("decode", "--decode"))


def _pools(argv: List[str]) -> Dict[str, List[str]]:
    """A router's workers by pool, as its argv gives them (a prefill URL may be followed by its
    bootstrap port, which is not a worker)."""
    out: Dict[str, List[str]] = {}
    argv = [str(a) for a in argv]
    for pool, flag in ROUTER_POOLS:
        urls = []
        for i, tok in enumerate(argv):          # every occurrence (P/D repeats --prefill / --decode)
            if tok == flag:
                urls += [v for v in flag_values_list(argv[i:], flag) if v.startswith(("http://", "https://"))]
        if urls:
            out[pool] = list(dict.fromkeys(urls))
    return out


def drain_targets(out: Dict[str, HostPlan]) -> None:
    """Give every serving engine process that a router of its deployment lists as a worker the
    router to drain it from (``drain``: router host, port, the worker URL the router knows), and
    every router the workers its gate expects it to list and route to (``workers``: pools of
    URLs, the served model name and the kind of request the workers answer)."""
    routers = [(host, proc, _pools(proc.argv)) for host, entry in out.items() for proc in entry.processes
               if proc.kind == "router"]
    engines = {}
    for entry in out.values():
        for proc in entry.processes:
            if proc.kind not in ("vllm", "omni") or not proc.serves_http:
                continue
            url = f"http://{entry.address}:{proc.port}"
            engines[url] = proc
            for router_host, router, pools in routers:
                if url in pools.get("regular", []):
                    proc.drain = entry.drain = {"router_host": router_host, "router_port": router.port, "url": url}
    for _, router, pools in routers:
        if not pools:
            continue
        known = [engines[url] for urls in pools.values() for url in urls if url in engines]
        first = known[0] if known else None
        router.workers = {"pools": pools,
                          "model": first.served_model_name if first else None,
                          "request": (first.health.get("request") or "completion") if first else "completion"}


def membership_changes(processes: Any, change: str) -> List[Dict[str, Any]]:
    """Take ``processes`` out of (``change`` "remove": a drain) or put them back into ("add":
    an undrain) the router that lists them (their ``drain`` target): one change per process."""
    return [{"name": p["name"], "router_host": p["drain"]["router_host"], "router_port": p["drain"]["router_port"],
             change: [p["drain"]["url"]]} for p in processes or [] if p.get("drain")]


def router_reconcile(routers: Any, host: str) -> List[Dict[str, Any]]:
    """Bring each running plain router of ``host`` to its planned workers (``membership``): the
    plan's URLs added where missing, every other listed URL removed."""
    return [{"name": r["name"], "router_host": host, "router_port": r["port"], "add": list(r["membership"]["urls"]),
             "only": list(r["membership"]["urls"])} for r in routers or [] if r.get("membership")]


def membership_calls(changes: Any, reads: Any) -> List[Dict[str, Any]]:
    """The router API calls (``/add_worker`` or ``/remove_worker`` of ``url``) that each change
    needs, given what its router listed (``reads``: the results of GET /list_workers, in the
    order of ``changes``). A router that did not answer gets no call: it is not started yet (a
    first deploy starts it after its engines, with every worker in its argv), and its gate
    judges it."""
    out: List[Dict[str, Any]] = []
    for change, read in zip(changes or [], reads or []):
        if not isinstance(read, Mapping) or read.get("status") != 200:
            continue
        listed = [str(u) for u in ((read.get("json") or {}).get("urls") or [])]
        where = {"name": change["name"], "router_host": change["router_host"], "router_port": change["router_port"]}
        out += [{**where, "call": "add_worker", "url": url} for url in change.get("add") or [] if url not in listed]
        only = change.get("only")
        out += [{**where, "call": "remove_worker", "url": url} for url in listed
                if url in (change.get("remove") or []) or (only is not None and url not in only)]
    return out


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
