"""Planning: one deployment over a group of hosts -> what each host must run.

Input: the deployment's settings (recipe and choices, identical on every host of the
deployment) and the hosts in inventory order with their address, NIC and GPU facts.
Output: a per-host plan (processes with argv, env, image, port, health target) with
every placeholder resolved, plus the problems that must stop the rollout before any
host is changed.  Pure Python: the Ansible action plugin is a thin wrapper.

This module is the entry (``host_input``, ``plan``, ``plan_fleet``) and the host plans; the
steps live beside it, each importing only those before it:
planmodel (types, names, hashes) -> planargv (argv reading/adjusting) -> machines (checks
across hosts of one machine) -> placement (slots: hosts, ranks, ports, GPU sets) ->
processes (one planned process per slot) -> rollout (drain targets, batches) -> plan.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import accelerator, choices, cudacompat, gpuhealth, runtimespec, schema, secret_table, staging
from .contract import settings_of
from .runtimespec import docker_tunables
from .layout import HOST_TUNABLES, NAME_RE, deployment_layout, host_layout, plan_venv
from .redact import shown
from .hostplan import HostPlan, PlannedProcess
from .loader import Catalog
from .coerce import as_list, as_map
from .render import RenderError
from .rendermodel import Request
from .shell import vllm_shell
from .topology import ranges as gpu_ranges
from .planmodel import Deployment, HostInput, PlanError, Slot, default_deployment, plan_hash
from .planargv import LOOPBACK, flag_values, listen_address
from .vllmargs import whole
from .machines import check_cores, check_gpus, check_machines, check_names, mark_idle_gpus
from .placement import is_engine_host, no_replicas, place_kv, place_pd, place_plain
from .processes import drain_timeout_of, planned_process
from .rollout import drain_targets, rollout_batches


RUNTIMES = ("docker", "uv")

ACCELERATOR_BY_BRAND_KEY = {"nvidia": "cuda", "amd": "rocm", "tpu": "tpu", "intel": "cpu"}

SETTING_KEYS = (
    "recipe", "variant", "strategy", "hardware", "features", "feature_modes", "nodes",
    "pd_nodes", "kv_offload", "kv_instances", "runtime", "vllm_version", "image",
    "image_tag", "port", "served_model_name", "extra_args", "model_path", "env",
    "placeholders", "deployment", "secrets", "mooncake_config", "mooncake_store_config", "mooncake_package",
    "router_port", "router_metrics_port", "router_version", "rollout_batch", "secret_digests", "privileged_ports", "drain_timeout",
    "slo", "slo_max_regression", "model_source", "model_revision", "model_controller_path", "stage_bwlimit",
    "stage_margin", "stage_store",
)

ROLE_NAMES = ("prefill", "decode", "router", "instance", "master", "store")


def validation_problems(cat: Catalog, hf_id: str, strategy: Optional[str], kv_offload: Optional[str]) -> List[str]:
    """Errors (file: key path: message) of what a deployment uses: its recipe, strategy,
    kv_store deployment and the stacked taxonomy."""
    found: List[Any] = list(schema.validate_recipe(cat.recipes[hf_id], cat.sources.get(hf_id, hf_id),
                                                   cat.taxonomy, cat.strategies, loaded=True))
    for name, check in ((strategy, schema.validate_strategy), (kv_offload, schema.validate_kv_store)):
        if name and name in cat.strategies:
            found += check(cat.strategies[name], cat.strategy_sources.get(name, name))
    found += schema.validate_taxonomy(cat.taxonomy, "taxonomy (stacked)", cat.strategies)
    return [str(p) for p in found if p.severity == schema.ERROR]


def _interface_for(facts: Mapping[str, Any], address: Optional[str]) -> Optional[str]:
    """Name of the interface (Ansible network facts) whose IPv4 address is ``address``."""
    if not address:
        return None
    for name in facts.get("interfaces") or []:
        info = facts.get(name.replace("-", "_")) or facts.get(name) or {}
        ipv4 = info.get("ipv4") or {}
        secondary = info.get("ipv4_secondaries") or []
        if address in [ipv4.get("address")] + [s.get("address") for s in secondary]:
            return name
    return None


def host_input(name: str, checked: Mapping[str, Any], hostvars: Mapping[str, Any],
               digest_key: bytes) -> HostInput:
    """One host's planning input: its contract-checked ``vllm_fleet_*`` values, plus what
    Ansible knows of it (``ansible_host``, facts: addresses, interfaces, GPU facts)."""
    settings = settings_of(checked)
    secrets = {s.env: checked[s.var] for s in secret_table.TABLE if checked.get(s.var)}
    settings["secrets"] = sorted(secrets)
    settings["secret_digests"] = secret_table.digests(digest_key, secrets)
    facts = hostvars.get("ansible_facts") or {}
    address = checked.get("vllm_fleet_address") or hostvars.get("ansible_host") or \
        (facts.get("default_ipv4") or {}).get("address")
    return HostInput(name=name, settings=settings, address=str(address) if address else None,
                     iface=checked.get("vllm_fleet_iface") or _interface_for(facts, address),
                     gpu=dict(facts.get("vllm_fleet_gpu") or {}),
                     instance=checked.get("vllm_fleet_instance"),
                     node_rank=checked.get("vllm_fleet_node_rank"),
                     roles=list(checked.get("vllm_fleet_role") or []),
                     machine=str(hostvars.get("ansible_host") or name),
                     addresses=[str(a) for a in facts.get("all_ipv4_addresses") or []],
                     check_gpus=checked.get("vllm_fleet_preflight_check_gpus") is not False,
                     check_vram=checked.get("vllm_fleet_preflight_check_vram") is not False,
                     python=(facts.get("python") or {}).get("executable"),
                     uv_python=hostvars.get("vllm_fleet_uv_python") or None,
                     # the host's path variables (the contract's: its host-path rule checked each)
                     layout=host_layout_of(checked),
                     # the docker runtime's variables: the contract's, checked with the others
                     docker=docker_tunables(checked))


def host_layout_of(checked: Mapping[str, Any]) -> Dict[str, Any]:
    """The bundle's roots on a host (layout.host_layout) from its path variables (``checked``: the
    host's values as the contract checked them: vllm_fleet_state_dir, vllm_fleet_uv_root, ...)."""
    return host_layout({var: checked.get(var) for var, _ in HOST_TUNABLES.values()})


def without_facts(host: HostInput) -> HostInput:
    """A host planned without its facts (the CLI; a host outside the run's limit): no GPU facts
    (fit checks off), and where the NIC would come from network facts a marker
    ``<NIC of ADDRESS>`` (``iface_marked``)."""
    return replace(host, gpu={}, addresses=[],
                   iface=host.iface or f"<NIC of {host.address or host.name}>",
                   check_gpus=False, check_vram=False)


def iface_marked(host: HostInput) -> bool:
    return bool(host.iface) and host.iface.startswith("<NIC of ")

def deployment_of(host: HostInput) -> str:
    """The deployment a host belongs to: vllm_fleet_deployment, else recipe + hardware."""
    return host.settings.get("deployment") or default_deployment(
        host.settings.get("recipe") or "", host.settings.get("hardware") or host.gpu.get("hardware"))


def plan_fleet(cat: Catalog, hosts: Sequence[HostInput]) -> Tuple[Dict[str, Dict[str, Any]], List[str]]:
    """Plan every deployment of ``hosts`` (grouped by :func:`deployment_of`, inventory order),
    then the checks across deployments; returns (plans by host, problems)."""
    deployments: Dict[str, List[HostInput]] = {}
    for host in hosts:
        deployments.setdefault(deployment_of(host), []).append(host)
    plans: Dict[str, Dict[str, Any]] = {}
    problems: List[str] = []
    for name, group in deployments.items():
        try:
            plans.update(plan(cat, group))
        except PlanError as exc:
            derived = "" if group[0].settings.get("deployment") else \
                " (named from the recipe and hardware; vllm_fleet_deployment names it)"
            problems.append(f"vllm-fleet plan failed for deployment {name!r}{derived}:\n{exc}")
    machines = {h.name: h.machine or h.name for h in hosts}
    problems += check_machines(plans, machines)
    problems += check_names(plans, machines)
    problems += check_gpus(plans, machines)
    problems += check_cores(plans, machines)
    mark_idle_gpus(plans, machines, {h.name: int(h.gpu["count"]) for h in hosts if h.gpu.get("count")})
    return plans, problems


def limit_cuts(plans: Mapping[str, Mapping[str, Any]], limited: Sequence[str]) -> List[str]:
    """What a limit (the hosts that change in this run) cuts, one line each: an instance whose
    hosts are not all in it (its ranks start together); a P/D or KV-store cluster (pools and
    services span its hosts) or a router in the limit (its worker list comes from every worker
    host's facts) whose deployment's hosts are not all in it. ``plans``: every host of the
    deployments planned (the limit's and the others of their deployments)."""
    inside = set(limited)
    problems: List[str] = []
    whole_needed: Dict[str, str] = {}
    for name in limited:
        entry = plans[name]
        missing = [h for h in entry.get("instance_hosts") or [] if h not in inside]
        if missing:
            problems.append(f"{name}: vllm_fleet_instance: the limit cuts instance {entry.get('instance_name')} of deployment "
                            f"{entry['deployment']!r}: {', '.join(missing)} outside it; an instance changes whole "
                            f"(add its hosts to the limit: -l {','.join(entry['instance_hosts'])})")
        why = ("a P/D cluster" if entry.get("deploy_type") == "pd_cluster" else
               f"a {entry['kv_offload']} cluster" if entry.get("kv_offload") else
               # a router's worker list comes from its workers' facts (replicas, ports)
               "a router with workers" if "router" in (entry.get("phases") or []) else None)
        if why:
            whole_needed.setdefault(entry["deployment"], why)
    for deployment, why in whole_needed.items():
        members = [n for n, entry in plans.items() if entry["deployment"] == deployment]
        missing = [n for n in members if n not in inside]
        if missing:
            first = next(n for n in members if n in inside)
            problems.append(f"{first}: vllm_fleet_deployment: the limit cuts {deployment!r}, {why} whose hosts change "
                            f"together: {', '.join(missing)} outside it (add them: -l {','.join(members)})")
    return problems


def _differs(hosts: Sequence[HostInput], key: str) -> Optional[str]:
    values = [json.dumps(h.settings.get(key), sort_keys=True, default=str) for h in hosts]
    if len(set(values)) > 1:
        odd = next(h for h, v in zip(hosts, values) if v != values[0])
        detail = ", ".join(f"{h.name}={shown(h.settings.get(key))}" for h in hosts[:6])
        return (f"{odd.name}: vllm_fleet_{key} differs inside deployment "
                f"{hosts[0].settings.get('deployment')!r}: {detail}")
    return None


def plan(cat: Catalog, hosts: Sequence[HostInput]) -> Dict[str, Dict[str, Any]]:
    """Plan one deployment; raises PlanError listing every problem (host + field)."""
    if not hosts:
        raise PlanError(["no hosts in the deployment"])
    problems = [p for p in (_differs(hosts, k) for k in SETTING_KEYS if k != "hardware") if p]
    settings = dict(hosts[0].settings)
    hf_id = settings.get("recipe")
    if not hf_id:
        raise PlanError([f"{h.name}: vllm_fleet_recipe: not set (the recipe id, e.g. "
                         f"baidu/ERNIE-4.5-VL-28B-A3B-PT)" for h in hosts])
    recipe = cat.recipes.get(hf_id)
    if recipe is None:
        raise PlanError([f"{hosts[0].name}: vllm_fleet_recipe: unknown recipe {hf_id!r} "
                         f"(loaded: {', '.join(sorted(cat.recipes)[:20])}...)"])
    runtime = settings.get("runtime") or "docker"
    if runtime not in RUNTIMES:
        problems.append(f"{hosts[0].name}: vllm_fleet_runtime: {runtime!r} is not one of {', '.join(RUNTIMES)}")
    for host in hosts:
        unknown = [r for r in host.roles if r not in ROLE_NAMES]
        if unknown:
            problems.append(f"{host.name}: vllm_fleet_role: unknown role(s) {', '.join(map(repr, unknown))}; "
                            f"valid: {', '.join(ROLE_NAMES)}")
    engine_hosts = [h for h in hosts if is_engine_host(h)]
    if not engine_hosts:
        problems.append(f"{hosts[0].name}: vllm_fleet_role: deployment {settings.get('deployment') or hf_id!r}: "
                        f"no host runs vLLM "
                        f"(every host has a service-only vllm_fleet_role: "
                        f"{', '.join(h.name + '=' + '/'.join(h.roles) for h in hosts)})")
    if problems:
        raise PlanError(problems)

    # hardware: explicit per deployment/host, else detected; one value over the vLLM hosts
    hw_of: Dict[str, Optional[str]] = {}
    for host in engine_hosts:
        hw = host.settings.get("hardware") or host.gpu.get("hardware")
        if not hw:
            problems.append(f"{host.name}: vllm_fleet_hardware: not set and not detected "
                            f"(GPU facts: {host.gpu.get('brand') or 'none'} "
                            f"{', '.join(host.gpu.get('names') or []) or host.gpu.get('cpu_model') or ''}); "
                            f"set it to one of: {', '.join(cat.profiles)}")
        elif hw not in cat.profiles:
            problems.append(f"{host.name}: vllm_fleet_hardware: unknown hardware {hw!r}; valid: {', '.join(cat.profiles)}")
        hw_of[host.name] = hw
    kinds = {hw for hw in hw_of.values() if hw}
    if len(kinds) > 1:
        odd = next(n for n, hw in hw_of.items() if hw and hw != next(h for h in hw_of.values() if h))
        problems.append(f"{odd}: vllm_fleet_hardware: mixed hardware in one deployment: " +
                        ", ".join(f"{n}={hw}" for n, hw in hw_of.items()) +
                        " (split the group, one deployment per hardware)")
    if problems:
        raise PlanError(problems)
    hardware = kinds.pop()

    req = Request(hf_id=hf_id, variant=settings.get("variant") or "default", hardware=hardware,
                  strategy=settings.get("strategy"), node_count=int(settings.get("nodes") or 1),
                  features=settings.get("features"),
                  feature_modes=dict(settings.get("feature_modes") or {}),
                  pd_nodes=settings.get("pd_nodes"), kv_offload=settings.get("kv_offload"),
                  kv_instances=settings.get("kv_instances"))
    try:
        choices.complete(recipe, req, cat.strategies, cat.taxonomy)
    except RenderError as exc:
        field = getattr(exc, "field", None)   # choices.ChoiceError: the choice at fault
        raise PlanError([f"{hosts[0].name}: {'vllm_fleet_' + field + ': ' if field else ''}{exc}"]) from exc
    deploy_type = choices.deploy_type(cat.strategies, req.strategy)
    store = cat.strategies.get(req.kv_offload) if req.kv_offload in cat.kv_stores() else None
    invalid = validation_problems(cat, hf_id, req.strategy, req.kv_offload if store else None)
    if invalid:
        raise PlanError([f"{hosts[0].name}: vllm_fleet_recipe: {hf_id} does not validate: {p}" for p in invalid])
    allowed = ({"prefill", "decode", "router", "master", "store"} if deploy_type == "pd_cluster"
               else {"instance", "master", "store", "router"} if store else {"instance", "router"})
    for host in hosts:
        for role in host.roles:
            if role not in allowed:
                problems.append(f"{host.name}: vllm_fleet_role {role!r} does not apply to strategy "
                                f"{req.strategy!r}{' with ' + req.kv_offload if req.kv_offload else ''} "
                                f"(roles here: {', '.join(sorted(allowed)) or 'none'})")
    if problems:
        raise PlanError(problems)

    variant = as_map(as_map(recipe.get("variants")).get(req.variant))
    name = settings.get("deployment") or default_deployment(hf_id, hardware)
    if not NAME_RE.fullmatch(name) or ".." in name:
        problems.append(f"{hosts[0].name}: vllm_fleet_deployment: {name!r} (derived from the recipe) is not a safe "
                        f"name; set vllm_fleet_deployment to [a-z0-9][a-z0-9_.-]{{0,62}}")
    port = settings.get("port")
    if port is not None and (deploy_type == "pd_cluster" or store is not None):
        problems.append(f"{hosts[0].name}: vllm_fleet_port: does not apply to "
                        f"{'P/D' if deploy_type == 'pd_cluster' else req.kv_offload} deployments (their engines "
                        f"listen on the recipe's ports); the router's port is vllm_fleet_router_port")
    given_host = flag_values(as_list(settings.get("extra_args")), "--host")
    for host in hosts:
        bind = listen_address(host.settings.get("listen"))
        if bind and bind != "127.0.0.1" and host.addresses and bind not in host.addresses:
            problems.append(f"{host.name}: vllm_fleet_listen: {bind} is not an address of this host "
                            f"(it has {', '.join(host.addresses)}); the server could not bind it")
        if bind and given_host and given_host[-1] != bind:
            problems.append(f"{host.name}: vllm_fleet_extra_args: --host {given_host[-1]} contradicts "
                            f"vllm_fleet_listen {host.settings.get('listen')}; set the address in one place")
    given = flag_values(as_list(settings.get("extra_args")), "--port")
    if port is not None and given and whole(given[-1]) != int(port):
        problems.append(f"{hosts[0].name}: vllm_fleet_extra_args: --port {given[-1]} contradicts "
                        f"vllm_fleet_port {port}; set the port in one place")
    if problems:
        raise PlanError(problems)
    # staging (staging.py): a staged copy is what the server reads, offline
    stage, stage_problems = staging.stage_block(settings, str(variant.get("model_id") or hf_id))
    if stage_problems:
        raise PlanError([f"{hosts[0].name}: {p}" for p in stage_problems])
    if stage and stage["source"] in ("hub", "controller"):
        settings = dict(settings, model_path=stage["dir"],
                        env={**as_map(settings.get("env")), "HF_HUB_OFFLINE": "1"})
    dep = Deployment(settings=settings, recipe=recipe, variant=variant, req=req,
                     deploy_type=deploy_type, profile=cat.profiles[hardware], name=name,
                     runtime=runtime, store=store, values={}, problems=problems)
    if deploy_type == "pd_cluster":
        no_replicas(dep, hosts, "P/D deployments (their pools split the host's GPUs themselves)")
        slots = place_pd(cat, dep, list(hosts))
    elif store is not None:
        no_replicas(dep, hosts, f"{req.kv_offload} deployments (not supported there yet)")
        slots = place_kv(cat, dep, list(hosts))
    else:
        slots = place_plain(cat, dep, list(hosts), deploy_type)
    if problems and not slots:
        raise PlanError(problems)
    out = _host_plans(dep, slots, stage)
    if problems:
        raise PlanError(problems)
    return out


# A router's backend URL: http(s)://ADDRESS:PORT[/path], the address bracketed when IPv6.
_URL_RE = re.compile(r"https?://(?:\[([0-9A-Fa-f:.]+)\]|([^\s/:\[\]]+)):([0-9]{1,5})(?:/\S*)?")


def _check_reachable(dep: "Deployment", out: Dict[str, HostPlan]) -> None:
    """Every server a router of the deployment lists (``http://A:P`` in its argv) must listen
    where the router connects: every interface, or exactly A (vllm_fleet_listen)."""
    servers = {(entry.address, proc.port): (host, proc)
               for host, entry in out.items() for proc in entry.processes
               if proc.kind in ("vllm", "omni") and proc.serves_http}
    for router_host, entry in out.items():
        for router in entry.processes:
            if router.kind != "router":
                continue
            for tok in router.argv:
                match = _URL_RE.fullmatch(str(tok))
                if not match:
                    continue
                address = match.group(1) or match.group(2)
                found = servers.get((address, int(match.group(3))))
                if found is None:
                    continue
                host, proc = found
                if proc.bind is not None and proc.bind != address:
                    dep.problems.append(
                        f"{host}: vllm_fleet_listen: the server listens on {proc.bind} only, but the router "
                        f"on {router_host} reaches it at {match.group(0)}; listen on all or on {address}")


def _host_plans(dep: Deployment, slots: List[Slot], stage: Optional[Dict[str, Any]] = None) -> Dict[str, Dict[str, Any]]:
    """Each host's plan (as the dicts the playbooks read), from the placed slots."""
    req, profile = dep.req, dep.profile
    units = sorted({s.instance_index for s in slots if s.instance_index is not None})
    batch_of = rollout_batches(len(units), dep.settings.get("rollout_batch"))
    by_host: Dict[str, List[Slot]] = {}
    for slot in slots:
        by_host.setdefault(slot.host.name, []).append(slot)
    out: Dict[str, HostPlan] = {}
    for host_name, mine in by_host.items():
        files: Dict[str, Dict[str, Any]] = {}
        engine_host = any(s.phase == "engine" for s in mine)
        processes = [planned_process(dep, slot, files, engine_host) for slot in mine]
        engine = next((s for s in mine if s.phase == "engine"), None)
        first = processes[mine.index(engine or mine[0])]
        accelerator_name = "none"
        if engine is not None:
            accelerator_name = ACCELERATOR_BY_BRAND_KEY.get((engine.proc.docker or {}).get("brand_key"), "cuda")
            if profile.get("generation") == "xpu":
                accelerator_name = "xpu"
            if accelerator_name not in accelerator.TABLES:   # before any host changes, every host at once
                dep.problems.append(f"{host_name}: vllm_fleet_hardware: {req.hardware} ({accelerator_name}) is not "
                                    f"deployable by vllm-fleet yet (its accelerators: {', '.join(accelerator.TABLES)})")
        gpus = int(profile.get("gpu_count") or 1)
        layout = deployment_layout(mine[0].host.layout, dep.name)
        entry = HostPlan(
            deployment=dep.name, recipe=req.hf_id, variant=req.variant, hardware=req.hardware,
            strategy=req.strategy, kv_offload=req.kv_offload, deploy_type=dep.deploy_type,
            node_count=len(engine.instance_hosts) if engine and engine.instance_name != "pd" else 1,
            features=req.features, runtime=dep.runtime if engine is not None else "service",
            accelerator=accelerator_name, brand=profile.get("brand"), gpu_count=gpus,
            vram_gb_per_gpu=(profile.get("vram_gb") or 0) / gpus,
            vram_minimum_gb=dep.variant.get("vram_minimum_gb"),
            min_vllm_version=dep.variant.get("min_vllm_version") or
            as_map(dep.recipe.get("model")).get("min_vllm_version"),
            vllm_version=first.version,
            instance=engine.instance_index if engine is not None else None,
            instance_name=engine.instance_name if engine is not None else None,
            instance_hosts=engine.instance_hosts if engine is not None else [host_name],
            head=engine.head.name if engine is not None else host_name,
            node_rank=engine.rank if engine is not None else 0,
            batch=batch_of[units.index(engine.instance_index)] if engine is not None else None,
            max_fail_percentage=int(dep.settings.get("max_fail_percentage") or 0),
            phases=sorted({s.phase for s in mine}, key=("services", "engine", "router").index),
            command="\n".join(vllm_shell(p.argv) if p.kind in ("vllm", "omni") else " ".join(p.argv)
                              for p in processes),
            health={"enabled": bool(first.serves_http), "port": first.port,
                    "served_model_name": first.served_model_name,
                    "kind": first.health.get("request", "none")},
            processes=processes,
            files=sorted(files.values(), key=lambda f: f["path"]),
            config_dir=layout["config_dir"], layout=layout,
            # engines that answer beyond localhost with no API key (the run summary warns)
            exposed=[p.name for p in processes if p.kind in ("vllm", "omni") and p.serves_http
                     and (p.bind or "0.0.0.0") not in LOOPBACK and "VLLM_API_KEY" not in p.secret_env],
            secret_files=sorted({c["path"]: c for p in processes for c in p.credentials}.values(),
                                key=lambda c: c["path"]),
            secret_vars=dict(sorted({env: secret_table.BY_ENV[env].var for p in processes
                                     for env in p.secret_env + [c["secret"] for c in p.credentials]}.items())),
            address=mine[0].host.address,
            drain_timeout=drain_timeout_of(dep.settings.get("drain_timeout")),
            slo=dict(dep.settings.get("slo") or {}), slo_max_regression=dep.settings.get("slo_max_regression"),
            stage=dict(stage, rack=mine[0].host.settings.get("rack")) if stage and engine is not None else None)
        accelerator.attach(entry, mine[0].host.settings, plan_hash)   # container / unit / uv blocks
        host = mine[0].host
        entry.venv = plan_venv(host.layout["uv_root"], dep.name, entry.vllm_version, (entry.accelerator_setup or {}).get("uv"),
                               [vars(p) for p in entry.processes], host.python, host.uv_python)
        entry.hash = plan_hash(entry.hashed())
        runtimespec.attach(entry.processes, dep.name, req.hf_id, layout, host.docker,
                           venv=(entry.venv or {}).get("path"),
                           unit_default=(entry.accelerator_setup or {}).get("unit"))
        out[host_name] = entry
        if engine is not None and accelerator_name in ("cuda", "rocm"):
            _check_fit(entry, engine.host, processes, dep.problems)
            _check_driver(entry, engine.host, processes, dep.problems)
            gpuhealth.check(engine.host, processes, entry.node_count, dep.problems)
            entry.gpu_health = gpuhealth.record(engine.host, processes, entry.node_count)
    drain_targets(out)
    _check_reachable(dep, out)
    return {name: entry.to_dict() for name, entry in out.items()}


def _check_driver(entry: HostPlan, host: HostInput, processes: Sequence[PlannedProcess],
                  problems: List[str]) -> None:
    """A CUDA engine host's NVIDIA driver against the CUDA of the vLLM build it would run, a ROCm
    one's ROCm version against the release's floor (cudacompat.py). Only for deploy and rollback
    (``fit_layout``) and where the GPU facts give the version; a build whose release is unknown
    (``latest``, no pin) is not judged."""
    if not host.fit_layout:
        return
    engine = next((p for p in processes if p.kind in ("vllm", "omni")), None)
    if engine is None:
        return
    image = engine.image if engine.runtime == "docker" else None
    version = engine.version or entry.vllm_version
    if entry.accelerator == "cuda":
        why = cudacompat.check(version, image, host.gpu.get("driver_version"), host.gpu.get("cuda_version"))
    else:
        why = cudacompat.rocm_check(version, image, host.gpu.get("rocm_version"))
    if why:
        problems.append(f"{host.name}: vllm_fleet_vllm_version: {why}")


# GPU facts give memory in GiB (2**30 bytes, as nvidia-smi / amd-smi count it); recipes give
# vram_minimum_gb in GB (10**9 bytes): 1 GiB = 1.073741824 GB.
GB_PER_GIB = 2 ** 30 / 10 ** 9


def _check_fit(entry: HostPlan, host: HostInput, processes: Sequence[PlannedProcess], problems: List[str]) -> None:
    """An engine host's GPUs against its plan: as many as the hardware profile says, and the
    instance's memory (this host's, times the nodes of the instance) at least the variant's
    vram_minimum_gb. Only where the host's GPU facts were read and report a count, and for
    deploy and rollback (``fit_layout``; status and teardown plan a host that lost a GPU)."""
    if host.gpu.get("count") is None or not host.fit_layout:   # status / teardown: not judged
        return
    have = int(host.gpu.get("count") or 0)
    if host.check_gpus and have < entry.gpu_count:
        names = ", ".join(sorted(set(host.gpu.get("names") or [])))
        problems.append(f"{host.name}: vllm_fleet_hardware {entry.hardware} means {entry.gpu_count} GPUs per node, "
                        f"but {have} were detected" + (f" ({names})" if names else ""))
        return
    need = entry.vram_minimum_gb
    if not host.check_vram or need is None or not have or host.gpu.get("total_memory_gib") is None:
        return
    gpus = next((p.gpus for p in processes if p.gpus is not None), None)
    gib = float(host.gpu.get("total_memory_gib") or 0) * (len(gpus) / have if gpus else 1)
    if gib * entry.node_count * GB_PER_GIB < float(need):
        on = f" on vllm_fleet_gpus {gpu_ranges(gpus)}" if gpus else ""
        problems.append(f"{host.name}: variant {entry.variant} of {entry.recipe} needs {need} GB of GPU memory; "
                        f"{entry.node_count} node(s) with {gib:g} GiB each{on} do not have it (set vllm_fleet_nodes "
                        f"or choose a smaller vllm_fleet_variant)")
