"""Placement: the slots (host, role, rank, port, GPU set) of one deployment's processes.

Multi-node engines: the hosts are split into *instances* of N hosts in inventory order;
an explicit ``vllm_fleet_instance`` (name) and ``vllm_fleet_node_rank`` on a host win.
Rank 0 is the head; ``$HEAD_IP`` is the head's rendezvous address, ``$IFACE_NAME`` the
NIC that carries each host's own address, ``VLLM_HOST_IP`` each host's address.

P/D (``pd_cluster``): hosts carry ``vllm_fleet_role`` prefill / decode (pool order = inventory
order, explicit ranks win) and one router host (default: the first prefill host); a single
host with no role runs both pools co-located plus the router.  Mooncake (``vllm_fleet_kv_offload``
naming a kv_store entry): hosts without a role form the instances; ``master`` / ``store`` /
``router`` roles place the services (defaults: master and store on the first instance's
head, router on the master host).  Every engine unit (an instance, or the whole P/D
cluster) is a failure unit: it starts, fails and rolls out as one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import choices, gpuhealth
from .loader import Catalog
from .coerce import as_list, as_map
from .pdcluster import PD_ROLES
from .render import resolve
from .rendermodel import Process
from .topology import cpu_sets, gpu_groups, ranges as gpu_ranges
from .planmodel import DEFAULT_PORT, Deployment, HostInput, Slot, process_name
from .planargv import customize, gpus_per_node, int_flag


DEFAULT_ROUTER_PORT = 8000


def _instances(hosts: Sequence[HostInput], nodes: int) -> Tuple[List[List[HostInput]], List[str]]:
    """Split hosts into instances of ``nodes`` hosts; explicit instance/rank win."""
    problems: List[str] = []
    named: Dict[str, List[HostInput]] = {}
    loose: List[HostInput] = []
    for host in hosts:
        (named.setdefault(host.instance, []) if host.instance else loose).append(host)
    groups = list(named.values())
    if len(loose) % nodes:
        problems.append(
            f"{loose[0].name}: vllm_fleet_nodes: {len(loose)} hosts ({', '.join(h.name for h in loose)}) "
            f"cannot form instances of "
            f"{nodes} nodes: set vllm_fleet_nodes, add/remove hosts, or set vllm_fleet_instance per host")
    else:
        groups += [loose[i:i + nodes] for i in range(0, len(loose), nodes)]
    ordered: List[List[HostInput]] = []
    for group in groups:
        if len(group) != nodes:
            problems.append(f"{group[0].name}: vllm_fleet_instance: instance {group[0].instance!r} "
                            f"has {len(group)} hosts "
                            f"({', '.join(h.name for h in group)}); the strategy needs {nodes}")
            continue
        ranked = _ordered_pool(group, "instance", problems)
        if ranked is not None:
            ordered.append(ranked)
    return ordered, problems


def _bad_rank(hosts: Sequence[HostInput], size: int) -> HostInput:
    """The first host whose vllm_fleet_node_rank is out of 0..size-1 or taken twice."""
    ranks = [h.node_rank for h in hosts]
    return next((h for h in hosts if h.node_rank is not None and
                 (not 0 <= h.node_rank < size or ranks.count(h.node_rank) > 1)), hosts[0])


def is_engine_host(host: HostInput) -> bool:
    return not host.roles or bool(set(host.roles) & {"prefill", "decode", "instance"})


def _with_role(hosts: Sequence[HostInput], role: str) -> List[HostInput]:
    return [h for h in hosts if role in h.roles]


def _ordered_pool(hosts: Sequence[HostInput], what: str, problems: List[str]) -> Optional[List[HostInput]]:
    """The hosts of an instance or a P/D pool in rank order: explicit vllm_fleet_node_rank values
    win, the others fill the free ranks in inventory order. None (and a problem) when the
    explicit ranks are not distinct and in 0..len(hosts)-1."""
    ranks = [h.node_rank for h in hosts if h.node_rank is not None]
    if len(set(ranks)) != len(ranks) or any(not 0 <= r < len(hosts) for r in ranks):
        problems.append(f"{_bad_rank(hosts, len(hosts)).name}: vllm_fleet_node_rank values {sorted(ranks)} "
                        f"in the {what} "
                        f"({', '.join(h.name for h in hosts)}) must be distinct and in 0..{len(hosts) - 1}")
        return None
    slots: List[Optional[HostInput]] = [None] * len(hosts)
    for host in hosts:
        if host.node_rank is not None:
            slots[host.node_rank] = host
    free = iter(h for h in hosts if h.node_rank is None)
    return [slot if slot is not None else next(free) for slot in slots]


def _need_address(hosts: Sequence[HostInput], problems: List[str], why: str) -> None:
    for host in hosts:
        if not host.address:
            problems.append(f"{host.name}: vllm_fleet_address: no address ({why}; "
                            f"set vllm_fleet_address or ansible_host)")


def _single_role_host(dep: Deployment, hosts: Sequence[HostInput], role: str,
                      default: Optional[HostInput]) -> Optional[HostInput]:
    chosen = _with_role(hosts, role)
    if len(chosen) > 1:
        dep.problems.append(f"{chosen[1].name}: vllm_fleet_role: {len(chosen)} hosts of deployment {dep.name!r} "
                            f"have vllm_fleet_role {role} ({', '.join(h.name for h in chosen)}); exactly one may")
    return chosen[0] if chosen else default


def _node_values(host: HostInput, head: HostInput, multi: bool) -> Dict[str, str]:
    values: Dict[str, str] = {}
    if multi:
        values["HEAD_IP"] = head.address or ""
    if host.iface:
        values["IFACE_NAME"] = host.iface
    return values


def _place_engines(dep: Deployment, groups: List[List[HostInput]], roles_prefix: str,
                   render_for) -> List[Slot]:
    """Instances of the serving strategy: one unit per group, rank = position in the group."""
    slots: List[Slot] = []
    for index, group in enumerate(groups):
        rendering = render_for(index)
        procs = [p for p in rendering.processes if p.kind == "vllm"]
        multi = len(group) > 1
        if multi:
            _need_address(group, dep.problems, "multi-node rendezvous")
        head = group[0]
        for rank, host in enumerate(group):
            proc = procs[rank] if len(procs) > 1 else procs[0]
            name = process_name(dep.name) + roles_prefix.format(index=index)
            if multi:
                name += f"-{proc.role.replace('instance_', '')}{proc.rank}"
            slots.append(Slot(host, proc, "engine", f"i{index}", index, [h.name for h in group],
                              head, proc.rank if multi else 0, _node_values(host, head, multi), name))
    return slots


def place_plain(cat: Catalog, dep: Deployment, hosts: List[HostInput], deploy_type: str) -> List[Slot]:
    nodes = dep.req.node_count if deploy_type == "multi_node" else 1
    members = [h for h in hosts if not h.roles or "instance" in h.roles]
    groups, problems = _instances(members, nodes)
    dep.problems.extend(problems)
    if problems:
        return []
    rendering = resolve(dep.recipe, dep.req, cat.strategies, cat.taxonomy)
    # instances of one deployment are named apart (-i0, -i1, ...) as soon as there are several:
    # names stay unique across the fleet (logs, metrics, a shared container engine)
    prefix = "-i{index}" if len(groups) > 1 else ""
    slots = _place_engines(dep, groups, prefix, lambda index: rendering)
    if nodes == 1:
        slots = [replica for slot in slots for replica in _replicas(dep, slot)]
    else:
        no_replicas(dep, members, f"multi-node strategy {dep.req.strategy!r} (an instance spans whole hosts)")
    router_host = _single_role_host(dep, hosts, "router", None)
    if router_host is not None:
        slots += _services(dep, hosts, [], router_host, router_host, _front_door(dep, groups, rendering, slots))
    return slots


def no_replicas(dep: Deployment, hosts: Sequence[HostInput], why: str) -> None:
    """Replicas per host apply to single-node deployments only: `auto` means one there, a
    number above 1 is refused."""
    for host in hosts:
        want = host.settings.get("replicas_per_host")
        if want not in (None, "auto", 1):
            dep.problems.append(f"{host.name}: vllm_fleet_replicas_per_host: {want} replicas do not apply to "
                                f"{why}; leave it unset (or auto)")


def _server_port(dep: Deployment, argv: Sequence[str], default: int = DEFAULT_PORT) -> int:
    """The port a server of the deployment listens on: vllm_fleet_port, else the last numeric
    --port of ``argv``, else ``default``."""
    return int(dep.settings.get("port") or int_flag(argv, "--port", 0) or default)


def _replicas(dep: Deployment, slot: Slot) -> List[Slot]:
    """One single-node server's slot as its host's replicas (vllm_fleet_replicas_per_host, default
    ``auto``). GPU hosts: the host's GPUs (vllm_fleet_gpus, else all) split into sets of the GPUs one
    server of the command uses (tensor x pipeline x data parallel), following the GPU topology
    the facts report (NVLink / XGMI peers, one NUMA node per set; consecutive without it);
    ``auto`` = as many as the GPUs hold. CPU hosts: the usable cores split into one set per
    replica and rank, inside NUMA nodes; ``auto`` = one replica per NUMA node (per TP x PP nodes).
    Replica i gets the port vllm_fleet_port + i and the name ``<server>-r<i>``. One replica: the
    slot unchanged (same name, no GPU/CPU set of its own, same plan hash as before replicas)."""
    host = slot.host
    want = host.settings.get("replicas_per_host")
    want = "auto" if want is None else want
    sick = gpuhealth.excluded(host)   # vllm_fleet_gpu_health: exclude
    if want == 1 and not sick:
        return [slot]
    where = f"{host.name}: vllm_fleet_replicas_per_host"
    argv = customize(list(slot.proc.argv), dep.settings, slot.proc.role, host.settings.get("listen"))
    need = max(1, gpus_per_node(argv, 1))
    brand, have = host.gpu.get("brand"), int(host.gpu.get("count") or 0)
    if brand in ("nvidia", "amd") and have:
        given = host.settings.get("gpus")
        pool = [int(g) for g in given or range(have)]
        for gpu in (g for g in pool if g in sick and given is not None):
            dep.problems.append(f"{host.name}: vllm_fleet_gpus: GPU {gpu} failed its health check "
                                f"({gpuhealth.said(sick[gpu])}); vllm_fleet_gpu_health: exclude leaves failed GPUs "
                                f"out, but this fixed set names it: choose healthy GPUs")
        pool = [g for g in pool if g not in sick]
        if not host.fit_layout and given is None:
            # status / teardown: the inventory's layout, whatever GPUs the host reports today:
            # a fixed count's GPUs; auto: the profile's GPUs, as deploy required them (unless
            # vllm_fleet_preflight_check_gpus is off: then the host's own count, as deployed)
            size = int(want) * need if want != "auto" else \
                int(dep.profile.get("gpu_count") or 0) if host.check_gpus else 0
            pool = list(range(max(have, size)))
        if host.fit_layout and [g for g in pool if g >= have]:
            return [slot]   # _gpu_set names the GPUs that do not exist
        count = len(pool) // need if want == "auto" else int(want)
        if count * need > len(pool) or (sick and count == 0):
            has = (f"vllm_fleet_gpus gives {len(pool)} ({gpu_ranges(pool)})" if host.settings.get("gpus") is not None
                   else f"the host has {have}")
            if sick:
                has += f" of which GPU {gpu_ranges(sorted(sick))} failed its health check (left out: exclude)"
            dep.problems.append(f"{where}: {max(count, 1)} replicas x {need} GPU(s) each (tensor x pipeline x data "
                                f"parallel of the command) need {max(count, 1) * need} GPUs, but {has}; lower it or "
                                f"use auto")
            return [slot]
        if count <= 1:
            # one server: with failed GPUs left out, it gets its healthy set under its own name
            if sick and count == 1:
                return [replace(slot, gpus=gpu_groups(pool, need, 1, host.gpu.get("topology"))[0])]
            return [slot]
        sets: List[Dict[str, Any]] = [{"gpus": g} for g in gpu_groups(pool, need, count, host.gpu.get("topology"))]
    elif brand == "cpu" and host.gpu.get("cpus"):
        cpus = [int(c) for c in host.gpu["cpus"]]
        numa = {str(k): [int(c) for c in v] for k, v in as_map(host.gpu.get("numa_nodes")).items()} or {"0": cpus}
        count = max(1, len(numa) // need) if want == "auto" else int(want)
        if count <= 1:
            return [slot]
        for key, env in (("env", as_map(dep.settings.get("env"))), ("host_env", as_map(host.settings.get("host_env")))):
            if "VLLM_CPU_OMP_THREADS_BIND" in env:
                dep.problems.append(f"{host.name}: vllm_fleet_{key}: VLLM_CPU_OMP_THREADS_BIND contradicts "
                                    f"vllm_fleet_replicas_per_host {want} (each replica is bound to its own cores); "
                                    f"drop one of them")
                return [slot]
        try:
            cores = cpu_sets(cpus, numa, count * need)
        except ValueError as exc:
            dep.problems.append(f"{where}: {count} replicas x {need} rank(s) each: {exc}; lower it or use auto")
            return [slot]
        sets = [{"cpus": cores[i * need:(i + 1) * need]} for i in range(count)]
    else:
        if want != "auto":
            reported = brand or "no GPU facts"
            dep.problems.append(f"{where}: {want} replicas need GPUs or CPU cores to split, but the host's facts "
                                f"give neither ({reported}); leave it unset")
        return [slot]
    base = _server_port(dep, argv)
    if base + count - 1 > 65535:
        dep.problems.append(f"{where}: {count} replicas from port {base} run past 65535; lower vllm_fleet_port")
        return [slot]
    return [replace(slot, name=f"{slot.name}-r{i}", replica=i, port=base + i, **one) for i, one in enumerate(sets)]


def _front_door(dep: Deployment, groups: List[List[HostInput]], rendering, slots: Sequence[Slot] = ()) -> Process:
    """vllm-router in front of a plain deployment's instances (``vllm_fleet_role: router`` on a
    host): one --worker-urls list of every instance head (every replica of it), round robin."""
    _need_address([g[0] for g in groups], dep.problems, "router backend")
    proc = next(p for p in rendering.processes if p.kind == "vllm")
    port = _server_port(dep, as_list(dep.settings.get("extra_args")), proc.port or DEFAULT_PORT)
    replica_ports: Dict[str, List[int]] = {}
    for slot in slots:
        if slot.replica is not None and slot.port is not None:
            replica_ports.setdefault(slot.host.name, []).append(slot.port)
    urls = [f"http://{g[0].address}:{p}" for g in groups for p in replica_ports.get(g[0].name, [port])]
    return Process("router", 0, ["vllm-router", "--host", "$ROUTER_HOST", "--port", "$ROUTER_PORT",
                                 "--worker-urls", *urls, "--policy", "round_robin"], kind="router")


def _pool_spec(dep: Deployment, role: str, count: int, host: str = "") -> Dict[str, Any]:
    raw = dep.settings.get("pd_nodes")
    spec = as_map(raw).get(role) if isinstance(raw, dict) else None
    nodes = spec.get("nodes") if isinstance(spec, dict) else spec
    if nodes is not None and nodes != count:
        dep.problems.append(f"{host + ': ' if host else ''}vllm_fleet_pd_nodes.{role} asks for {nodes} nodes "
                            f"but the inventory of "
                            f"deployment {dep.name!r} has {count} host(s) with vllm_fleet_role {role}")
    out: Dict[str, Any] = {"nodes": count, "rank": 0}
    if isinstance(spec, dict) and spec.get("parallelism"):
        out["parallelism"] = spec["parallelism"]
    return out


def place_pd(cat: Catalog, dep: Deployment, hosts: List[HostInput]) -> List[Slot]:
    problems = dep.problems
    pools = {role: _with_role(hosts, role) for role in PD_ROLES}
    colocated = False
    if not pools["prefill"] and not pools["decode"]:
        bare = [h for h in hosts if not h.roles]
        if len(bare) == 1:
            pools = {role: bare for role in PD_ROLES}
        else:
            problems.append(f"{hosts[0].name}: vllm_fleet_role: P/D deployment {dep.name!r}: set vllm_fleet_role "
                            f"prefill or decode on each GPU host ({', '.join(h.name for h in hosts)}); only a single "
                            f"host may run both pools co-located")
            return []
    for host in hosts:
        if not host.roles and host not in pools["prefill"]:
            problems.append(f"{host.name}: vllm_fleet_role: not set in P/D deployment {dep.name!r} "
                            f"(prefill, decode, router, master or store)")
    for role in PD_ROLES:
        if not pools[role]:
            problems.append(f"{hosts[0].name}: vllm_fleet_role: P/D deployment {dep.name!r} has no host with "
                            f"vllm_fleet_role {role}")
    shared = [h for h in pools["prefill"] if h in pools["decode"]]
    if shared:
        colocated = True
        if len(pools["prefill"]) > 1 or len(pools["decode"]) > 1:
            problems.append(f"{shared[0].name}: vllm_fleet_role: prefill and decode on the same host is the co-located "
                            f"layout (half the GPUs each); it needs exactly one host in each pool")
    if problems:
        return []
    pools = {role: _ordered_pool(pools[role], f"{role} pool", problems) or pools[role] for role in PD_ROLES}
    engine = [h for role in PD_ROLES for h in pools[role]]
    engine = [h for i, h in enumerate(engine) if h not in engine[:i]]
    if not colocated:
        _need_address(engine, problems, "P/D pool endpoints")
    specs = None if colocated else {role: _pool_spec(dep, role, len(pools[role]), pools[role][0].name)
                                           for role in PD_ROLES}
    values = dep.values
    for role in PD_ROLES:
        for i, host in enumerate(pools[role]):
            values[f"{role.upper()}_NODE_{i + 1}"] = host.address or ("127.0.0.1" if colocated else "")

    def render(role_ranks: Dict[str, int]):
        pd = None
        if specs is not None:
            pd = {role: dict(specs[role], rank=role_ranks.get(role, 0)) for role in PD_ROLES}
        req = replace(dep.req, pd_nodes=pd, node_count=1 if colocated else max(len(engine), 2))
        return resolve(dep.recipe, req, cat.strategies, cat.taxonomy)

    first = render({})
    slots: List[Slot] = []
    names = [h.name for h in engine]
    for role in PD_ROLES:
        pool = pools[role]
        for i, host in enumerate(pool):
            rendering = first if i == 0 else render({role: i})
            proc = next(p for p in rendering.processes if p.role == role)
            vals = _node_values(host, pool[0], len(pool) > 1)
            slots.append(Slot(host, proc, "engine", "pd", 0, names, pool[0], i, vals,
                              process_name(dep.name, f"{role}{i}")))
    router = next(p for p in first.processes if p.kind == "router")
    router_host = _single_role_host(dep, hosts, "router", pools["prefill"][0])
    slots += _services(dep, hosts, first.processes, pools["prefill"][0], router_host, router)
    return slots


def place_kv(cat: Catalog, dep: Deployment, hosts: List[HostInput]) -> List[Slot]:
    problems = dep.problems
    serving = choices.deploy_type(cat.strategies, dep.req.strategy)
    nodes = dep.req.node_count if serving == "multi_node" else 1
    members = [h for h in hosts if not h.roles or "instance" in h.roles]
    groups, errs = _instances(members, nodes)
    problems.extend(errs)
    if errs or not groups:
        return []
    count = len(groups)
    raw = dep.settings.get("kv_instances")
    wanted = raw.get("count") if isinstance(raw, dict) else raw
    if wanted not in (None, "") and int(wanted) != count:
        problems.append(f"{members[0].name}: vllm_fleet_kv_instances is {wanted} but the inventory of deployment "
                        f"{dep.name!r} forms {count} instance(s) of {nodes} node(s) "
                        f"({', '.join(h.name for h in members)})")
        return []
    heads = [g[0] for g in groups]
    if count > 1:
        _need_address(heads, problems, "router backend")
    for i, head in enumerate(heads):
        dep.values[f"VLLM_INSTANCE_{i + 1}"] = head.address or ""
    renderings = [resolve(dep.recipe, replace(dep.req, kv_instances={"count": count, "current": i}),
                          cat.strategies, cat.taxonomy) for i in range(count)]
    prefix = "-i{index}" if count > 1 else ""
    slots = _place_engines(dep, groups, prefix, lambda index: renderings[index])
    router = next((p for p in renderings[0].processes if p.kind == "router"), None)
    master_host = _single_role_host(dep, hosts, "master", heads[0])
    router_host = _single_role_host(dep, hosts, "router", master_host) if router else None
    if router is None and _with_role(hosts, "router"):
        problems.append(f"{_with_role(hosts, 'router')[0].name}: vllm_fleet_role router: a Mooncake deployment "
                        f"with one instance has no router")
    slots += _services(dep, hosts, renderings[0].processes, master_host, router_host, router)
    return slots


def _services(dep: Deployment, hosts: List[HostInput], processes: List[Process],
              master_host: HostInput, router_host: Optional[HostInput],
              router: Optional[Process]) -> List[Slot]:
    """Router, mooncake_master and store service slots, plus the values they define."""
    slots: List[Slot] = []
    values = dep.values
    values.setdefault("ROUTER_PORT", str(dep.settings.get("router_port") or
                                         as_map((dep.store or {}).get("router")).get("port") or DEFAULT_ROUTER_PORT))
    master = next((p for p in processes if p.kind == "mooncake_master"), None)
    store = next((p for p in processes if p.kind == "mooncake_store"), None)
    if master is not None:
        _need_address([master_host], dep.problems, "Mooncake master")
        values["MOONCAKE_MASTER_IP"] = master_host.address or ""
        values["MOONCAKE_CONFIG_PATH"] = dep.config_path("mooncake.json")
        values["MOONCAKE_STORE_CONFIG_PATH"] = dep.config_path("mooncake-store.json")
        slots.append(Slot(master_host, master, "services", None, None, [master_host.name], master_host, 0,
                          {}, process_name(dep.name, "mooncake-master")))
    if store is not None:
        store_hosts = _with_role(hosts, "store") or [master_host]
        for i, host in enumerate(store_hosts):
            slots.append(Slot(host, store, "services", None, None, [host.name], host, i, {},
                              process_name(dep.name, "mooncake-store")))
    elif _with_role(hosts, "store"):
        dep.problems.append(f"{_with_role(hosts, 'store')[0].name}: vllm_fleet_role store: "
                            f"{dep.req.kv_offload or 'this deployment'} runs no store service")
    if master is None and _with_role(hosts, "master"):
        dep.problems.append(f"{_with_role(hosts, 'master')[0].name}: vllm_fleet_role master: "
                            f"this deployment runs no mooncake_master")
    if router is not None and router_host is not None:
        _need_address([router_host], dep.problems, "router")
        slots.append(Slot(router_host, router, "router", None, None, [router_host.name], router_host, 0, {},
                          process_name(dep.name, "router")))
    return slots
