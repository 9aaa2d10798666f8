"""What the GPUs' health (the GPU facts' ``health``: one verdict per GPU, read once with the
other GPU facts) does to a host's plan, by its ``vllm_fleet_gpu_health`` policy:

  refuse   a failed GPU that a planned server would use stops the run (deploy, rollback)
  exclude  single-node servers are placed on the healthy GPUs only (placement: _replicas); a
           fixed GPU set naming a failed GPU, and a multi-node or P/D server that would use
           one, are refused
  warn     the plan records it; the run summary warns
  off      the facts module does not read health
Degraded GPUs are recorded (the summary warns) whatever the policy. Status and teardown plan
a host with failed GPUs without judging it (``fit_layout`` off), so a sick host can still be
shown and torn down."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from .hostplan import PlannedProcess
from .planargv import gpus_per_node
from .planmodel import HostInput
from .topology import ranges as gpu_ranges

POLICIES = ("refuse", "exclude", "warn", "off")


def policy(host: HostInput) -> str:
    return str(host.settings.get("gpu_health") or "refuse")


def _states(host: HostInput, state: str) -> Dict[int, List[str]]:
    if policy(host) == "off":
        return {}
    gpus = (host.gpu.get("health") or {}).get("gpus") or []
    return {int(g["index"]): [str(e) for e in g.get("evidence") or []] for g in gpus if g.get("state") == state}


def failed(host: HostInput) -> Dict[int, List[str]]:
    """{GPU index: evidence} of the host's failed GPUs (none when the policy is off)."""
    return _states(host, "failed")


def excluded(host: HostInput) -> Dict[int, List[str]]:
    """The failed GPUs placement leaves out: the policy is exclude."""
    return failed(host) if policy(host) == "exclude" else {}


def said(evidence: Sequence[str]) -> str:
    return "; ".join(evidence) or "failed"


def used(processes: Sequence[PlannedProcess], count: int, node_count: int) -> Dict[int, str]:
    """{GPU index: server name} of the GPUs the host's engine servers use: a server's own set, the
    first TP x PP x DP GPUs of a lone server without one (what vLLM takes with all visible), or
    every GPU where several servers share them (P/D pools on one host)."""
    engines = [p for p in processes if p.kind in ("vllm", "omni")]
    out: Dict[int, str] = {}
    for proc in engines:
        if proc.gpus is not None:
            gpus = list(proc.gpus)
        elif len(engines) == 1:
            gpus = list(range(min(gpus_per_node(proc.argv, node_count), count)))
        else:
            gpus = list(range(count))
        for gpu in gpus:
            out.setdefault(gpu, proc.name)
    return out


def check(host: HostInput, processes: Sequence[PlannedProcess], node_count: int, problems: List[str]) -> None:
    """Refuse a plan that puts a server on a failed GPU (refuse, exclude; deploy and rollback)."""
    bad = failed(host)
    if not bad or not host.fit_layout or policy(host) == "warn":
        return
    count = int(host.gpu.get("count") or 0)
    for gpu, name in sorted(used(processes, count, node_count).items()):
        if gpu not in bad:
            continue
        if policy(host) == "exclude":
            problems.append(f"{host.name}: vllm_fleet_gpu_health: GPU {gpu} failed its health check "
                            f"({said(bad[gpu])}) and {name} would use it: exclude moves single-node servers "
                            f"only; repair the GPU or take the host out of the deployment")
        else:
            problems.append(f"{host.name}: vllm_fleet_gpu_health: GPU {gpu} failed its health check "
                            f"({said(bad[gpu])}) and {name} would use it; repair or reset the GPU, or set "
                            f"vllm_fleet_gpu_health: exclude to place single-node servers on the healthy GPUs")


def record(host: HostInput, processes: Sequence[PlannedProcess], node_count: int) -> Optional[Dict[str, Any]]:
    """The plan's note of the host's GPU health (the run summary and status show it): policy,
    failed GPUs with evidence, which of them the plan leaves out, degraded GPUs, or ``unread``
    (why) when the facts could read no source; None when all are healthy or health was off."""
    bad, weak = failed(host), _states(host, "degraded")
    health = host.gpu.get("health")
    if policy(host) != "off" and isinstance(health, dict) and not health.get("read"):
        # the facts tried and no source answered: nothing was judged, and the summary says so
        return {"policy": policy(host), "failed": {}, "excluded": [], "excluded_ranges": "", "degraded": {},
                "unread": "; ".join(str(n) for n in health.get("notes") or []) or "no source answered"}
    if not bad and not weak:
        return None
    count = int(host.gpu.get("count") or 0)
    in_use = used(processes, count, node_count)
    out = sorted(g for g in excluded(host) if g not in in_use)
    return {"policy": policy(host),
            "failed": {str(g): e for g, e in sorted(bad.items())},
            "excluded": out, "excluded_ranges": gpu_ranges(out) if out else "",
            "degraded": {str(g): e for g, e in sorted(weak.items())}}
