"""Checks across the inventory hosts that are one machine (ansible_host): overlapping GPU sets
and CPU cores of two deployments, GPUs no deployment uses, ports, the names each deployment
derives on the machine."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from .topology import ranges as gpu_ranges
from .planargv import flag_values, gpus_per_node
from .planmodel import RESERVED, host_names


# What a take function of _machine_pairs gives for a host plan it leaves out.
SKIP = object()


def machine_of(machines: Mapping[str, str], host: str) -> str:
    """The machine a host is, as the checks compare it: its ``ansible_host`` (else its name),
    case-insensitively and without a trailing dot (DNS names: ``GPU-NODE-01`` and
    ``gpu-node-01.`` are ``gpu-node-01``)."""
    return str(machines.get(host, host)).rstrip(".").lower()


def _gpu_servers(host_plan: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    """The vLLM servers of a host plan that run on GPUs (none for CPU / service-only hosts):
    what the GPU-set overlap check and the idle-GPU count look at."""
    if host_plan.get("accelerator") not in ("cuda", "rocm"):
        return []
    return [p for p in host_plan.get("processes") or [] if p.get("kind") in ("vllm", "omni")]


def _machine_pairs(plans: Mapping[str, Mapping[str, Any]], machines: Mapping[str, str], take):
    """Every two host plans on one machine (same ``ansible_host``), with what ``take`` reads of
    each (host plans it gives ``SKIP`` for are left out): ``(machine, host, host_plan, value,
    other_host, other_deployment, other_value)``."""
    seen: Dict[str, List[Tuple[str, str, Any]]] = {}
    for host, host_plan in plans.items():
        value = take(host_plan)
        if value is SKIP:
            continue
        machine = machine_of(machines, host)
        for other in seen.get(machine, []):
            yield (machine, host, host_plan, value) + other
        seen.setdefault(machine, []).append((host, host_plan["deployment"], value))


def _gpu_set_of(host_plan: Mapping[str, Any]) -> Any:
    """The GPUs a host plan's servers take (None: every GPU); SKIP for hosts without GPU servers."""
    engines = _gpu_servers(host_plan)
    if not engines:
        return SKIP
    sets = [p.get("gpus") for p in engines]
    return None if any(g is None for g in sets) else sorted({g for one in sets for g in one})


def check_gpus(plans: Mapping[str, Mapping[str, Any]], machines: Mapping[str, str]) -> List[str]:
    """Deployments that share a machine (same ``ansible_host``) must run on disjoint GPUs
    (vllm_fleet_gpus; unset = every GPU): an overlap is refused, naming both hosts, deployments
    and the GPUs."""
    problems: List[str] = []
    for machine, host, host_plan, gpus, other_host, other_dep, other_gpus in _machine_pairs(plans, machines,
                                                                                             _gpu_set_of):
        if gpus is None or other_gpus is None:
            common = other_gpus if gpus is None else gpus   # None: both take every GPU
        else:
            common = sorted(set(gpus) & set(other_gpus))
            if not common:
                continue
        problems.append(f"{host}: vllm_fleet_gpus: {_gpus_said(common, 'every GPU')} of machine {machine} would "
                        f"serve two deployments: {other_dep!r} (host {other_host}, {_gpus_said(other_gpus)}) and "
                        f"{host_plan['deployment']!r} (host {host}, {_gpus_said(gpus)}); give each deployment "
                        f"its own vllm_fleet_gpus")
    return problems


def check_cores(plans: Mapping[str, Mapping[str, Any]], machines: Mapping[str, str]) -> List[str]:
    """CPU replicas of two deployments on one machine bound to the same cores: refused, naming
    both hosts, deployments and the cores (each deployment splits the machine's cores from the
    first one on)."""
    def cores(host_plan: Mapping[str, Any]) -> Any:
        bound = {c for p in host_plan.get("processes") or [] for c in p.get("cpus") or []}
        return bound or SKIP

    problems: List[str] = []
    for machine, host, host_plan, mine, other_host, other_dep, other in _machine_pairs(plans, machines, cores):
        common = sorted(mine & other)
        if common and other_dep != host_plan["deployment"]:
            problems.append(f"{host}: vllm_fleet_replicas_per_host: cores {gpu_ranges(common)} of machine {machine} "
                            f"would be bound by two deployments: {other_dep!r} (host {other_host}) and "
                            f"{host_plan['deployment']!r} (host {host}); give one deployment another machine "
                            f"or vllm_fleet_replicas_per_host: 1")
    return problems


def mark_idle_gpus(plans: Dict[str, Dict[str, Any]], machines: Mapping[str, str], count_of: Mapping[str, int]) -> None:
    """Give the engine host plans of each GPU machine the GPUs no planned server of the run
    uses (``gpus_idle``; the run summary reports them): the seed's TP 1 command alone on an
    8-GPU host leaves 7. A server without a GPU set takes the first TP x PP x DP GPUs (what
    vLLM does with every GPU visible). Machines whose GPU count the facts do not give, or
    where several servers of one host share its GPUs among themselves (P/D), are left out.
    ``count_of``: each host's GPU count from its facts."""
    used: Dict[str, Set[int]] = {}
    members: Dict[str, List[str]] = {}
    unknown: Set[str] = set()
    for host, host_plan in plans.items():
        engines = _gpu_servers(host_plan)
        if host not in count_of or not engines:
            continue
        machine = machine_of(machines, host)
        members.setdefault(machine, []).append(host)
        take = used.setdefault(machine, set())
        for proc in engines:
            if proc.get("gpus") is not None:
                take.update(proc["gpus"])
            elif len(engines) == 1:
                take.update(range(min(gpus_per_node(proc["argv"], int(host_plan.get("node_count") or 1)),
                                      count_of[host])))
            else:
                unknown.add(machine)
    for machine, names in members.items():
        # a failed GPU (the plans' gpu_health) is no GPU another deployment can use
        failed = {int(g) for name in names for g in ((plans[name].get("gpu_health") or {}).get("failed") or {})}
        idle = [g for g in range(count_of[names[0]]) if g not in used[machine] and g not in failed]
        if idle and machine not in unknown:
            for name in names:
                plans[name]["gpus_idle"] = idle


def check_machines(plans: Mapping[str, Mapping[str, Any]], machines: Mapping[str, str]) -> List[str]:
    """Two processes on one machine (same ``ansible_host``) listening on one port: refused,
    naming both hosts, deployments and processes."""
    seen: Dict[Tuple[str, int], Tuple[str, str, str]] = {}
    problems: List[str] = []
    for host, host_plan in sorted(plans.items()):
        machine = machine_of(machines, host)
        for proc in host_plan.get("processes") or []:
            ports = []
            if proc.get("port") and (proc.get("serves_http") or proc.get("kind") == "mooncake_master"):
                ports.append(int(proc["port"]))
            if proc.get("kind") == "mooncake_master":
                ports.append(int((proc.get("health") or {}).get("port") or 0))
            if proc.get("kind") == "router":
                # its Prometheus metrics (planargv.router_metrics): a second one on the port fails to start
                ports += [int(p) for p in flag_values(proc.get("argv") or [], "--prometheus-port") if p.isdigit()]
            for port in [p for p in ports if p]:
                other = seen.get((machine, port))
                # (the same deployment on two inventory hosts of one machine clashes too: same
                # container / unit name and port)
                if other is not None and (other[0], other[2]) != (host, proc["name"]):
                    problems.append(
                        f"{host}: vllm_fleet_port: port {port} on machine {machine} is used twice: "
                        f"{other[2]} (deployment {other[1]!r}, host {other[0]}) and {proc['name']} "
                        f"(deployment {host_plan['deployment']!r}, host {host}); give one deployment another "
                        f"vllm_fleet_port / vllm_fleet_router_port / vllm_fleet_router_metrics_port or another "
                        f"machine")
                seen.setdefault((machine, port), (host, host_plan["deployment"], proc["name"]))
    return problems


def check_names(plans: Mapping[str, Mapping[str, Any]], machines: Mapping[str, str]) -> List[str]:
    """One registry of names per machine: every container, unit, file and directory name the
    host plans derive there (planmodel.host_names: replicas, ranks, kept previous revisions,
    markers, records, services, config and venv directories). Two deployments on one machine
    deriving one name (``ernie-r1`` beside ``ernie``'s replica 1, ``x-prev`` beside ``x``'s kept
    revision, ``y.plan`` beside ``y``'s marker) would share a container or path, and one's update
    or teardown would remove the other's: refused, naming both hosts and deployments, the
    machine and the names. A name the bundle keeps for itself (planmodel.RESERVED: the shared
    uv tools venv, ...) is refused for any deployment. Names are compared exactly (containers,
    units and Linux paths are case-sensitive; deployment names are lowercase by the contract),
    machines case-insensitively (machine_of)."""
    owner: Dict[Tuple[str, str, str], Tuple[str, str, str]] = {}
    clashes: Dict[Tuple[str, str], List[str]] = {}
    problems: List[str] = []
    for host, host_plan in plans.items():
        machine = machine_of(machines, host)
        dep = host_plan["deployment"]
        for kind, name, what in host_names(host_plan):
            if (kind, name) in RESERVED:
                line = (f"{host}: vllm_fleet_deployment: deployment {dep!r} would use {name} ({what}), which is "
                        f"{RESERVED[(kind, name)]}; teardown would remove it with the deployment: choose "
                        f"another vllm_fleet_deployment")
                if line not in problems:
                    problems.append(line)
            first = owner.setdefault((machine, kind, name), (host, dep, what))
            if first[1] != dep:
                said = f"{name} ({what} of {dep!r}; {first[2]} of {first[1]!r})"
                found = clashes.setdefault((first[0], host), [])
                if said not in found:
                    found.append(said)
    for (first_host, host), names in clashes.items():
        dep, other = plans[host]["deployment"], plans[first_host]["deployment"]
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        problems.append(f"{host}: vllm_fleet_deployment: deployments {other!r} (host {first_host}) and {dep!r} "
                        f"(host {host}) on machine {machines.get(host, host)} derive the same "
                        f"name{'s' if len(names) > 1 else ''}: {shown}; one's update or teardown would take or "
                        f"remove the other's: rename one (vllm_fleet_deployment) or give it another machine")
    return problems


def _gpus_said(gpus: Optional[Sequence[int]], unset: str = "every GPU (vllm_fleet_gpus unset)") -> str:
    if gpus is None:
        return unset
    return f"GPU{'s' if len(gpus) > 1 else ''} {gpu_ranges(gpus)}"
