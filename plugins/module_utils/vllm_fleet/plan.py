"""Placement: one deployment over a group of hosts -> what each host must run.

Input: the deployment's settings (recipe and choices, identical on every host of the
deployment) and the hosts in inventory order with their address, NIC and GPU facts.
Output: a per-host plan (processes with argv, env, image, port, health target) with
every placeholder resolved, plus the problems that must stop the rollout before any
host is changed.  Pure Python: the Ansible action plugin is a thin wrapper.

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

import hashlib
import hmac
import json
import re
from dataclasses import dataclass, field, replace
import shlex
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from . import accelerator, schema, select
from .contract import NAME_RE, SECRETS, settings_of
from .docker import env_text
from .hostplan import HostPlan, PlannedProcess
from .loader import Catalog
from .render import PD_ROLES, Process, RenderError, Request, as_list, as_map, resolve
from .shell import dedupe, vllm_shell
from .topology import cpu_sets, gpu_groups, ranges as gpu_ranges

PLACEHOLDER = re.compile(r"\$([A-Z][A-Z0-9_]*)(?![A-Z0-9_])")
DEFAULT_PORT = 8000
RUNTIMES = ("docker", "uv")
VENDOR_BY_BRAND_KEY = {"nvidia": "cuda", "amd": "rocm", "tpu": "tpu", "intel": "cpu"}
ROCM_BRAND_KEYS = ("amd",)
# Flags vLLM removed, with the first release that rejects them (checked against the
# pinned version; "latest"/"nightly" images are treated as the newest release).
REMOVED_FLAGS: Dict[str, str] = {
    "--disable-log-requests": "0.12.0",
}

SETTING_KEYS = (
    "recipe", "variant", "strategy", "hardware", "features", "feature_modes", "nodes",
    "pd_nodes", "kv_offload", "kv_instances", "runtime", "vllm_version", "image",
    "image_tag", "port", "served_model_name", "extra_args", "model_path", "env",
    "placeholders", "deployment", "secrets", "mooncake_config", "mooncake_store_config", "mooncake_package",
    "router_port", "router_version", "rollout_batch", "secret_digest",
)
ROLE_NAMES = ("prefill", "decode", "router", "instance", "master", "store")
CONFIG_ROOT = "/etc/vllm-fleet"
# Secrets handed to a uv unit as a root-only file instead of an environment value (systemd's
# LoadCredential=; the process is told the file's path): HF_TOKEN -> HF_TOKEN_PATH, which
# huggingface_hub reads. Containers still get HF_TOKEN in their environment: a bind-mounted
# file cannot be exercised on the testbed, whose containers are siblings on this machine's
# engine (bind sources resolve here, not on the test host that wrote the file).
SECRET_FILES = {"HF_TOKEN": {"name": "hf_token", "env": "HF_TOKEN_PATH", "var": "vllm_fleet_hf_token"}}
# Placeholder defaults (an operator's vllm_fleet_placeholders win).
PLACEHOLDER_DEFAULTS = {
    "ROUTER_HOST": "0.0.0.0",
    "PREFILL_DP_RPC_PORT": "29550",
    "DECODE_DP_RPC_PORT": "29560",
    "MOONCAKE_DEVICE_NAME": "",
    "MOONCAKE_STORE_DEVICE_NAME": "",
}
DEFAULT_ROUTER_PORT = 8000
# The recipes' Mooncake router line uses --backend-url, which vllm-router (0.1.x, the PyPI
# package the recipe installs) rejects; its equivalent is one --worker-urls list.
ROUTER_FLAG_RENAMES = {"--backend-url": "--worker-urls"}


class PlanError(ValueError):
    """Problems found while planning; each line names the host and the field."""

    def __init__(self, problems: Sequence[str]):
        super().__init__("\n".join(problems))
        self.problems = list(problems)


@dataclass
class HostInput:
    name: str
    settings: Dict[str, Any]
    address: Optional[str] = None
    iface: Optional[str] = None
    gpu: Dict[str, Any] = field(default_factory=dict)
    instance: Optional[str] = None
    node_rank: Optional[int] = None
    roles: List[str] = field(default_factory=list)
    machine: Optional[str] = None   # the machine the host is (ansible_host): port clashes are per machine
    addresses: List[str] = field(default_factory=list)   # the host's IPv4 addresses (facts), when known
    # the GPU-count and GPU-memory checks against the host's facts (vllm_fleet_preflight_check_*)
    check_gpus: bool = True
    check_vram: bool = True


def version_tuple(text: Any) -> Optional[Tuple[int, ...]]:
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", str(text or ""))
    if not match:
        return None
    return tuple(int(g or 0) for g in match.groups())


def image_version(image: Optional[str]) -> Optional[str]:
    """The vLLM version an image tag pins (``...:v0.25.0`` -> ``0.25.0``), else None."""
    if not image or ":" not in image:
        return None
    tag = image.rsplit(":", 1)[1]
    return tag.lstrip("v") if version_tuple(tag) else None


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:48]


def substitute(text: str, values: Mapping[str, str]) -> Tuple[str, List[str]]:
    """Replace ``$NAME`` placeholders (not followed by [A-Z0-9_]); return leftovers."""
    missing: List[str] = []

    def repl(match: "re.Match[str]") -> str:
        name = match.group(1)
        if name in values:
            return str(values[name])
        missing.append(name)
        return match.group(0)

    return PLACEHOLDER.sub(repl, text), missing


def process_name(deployment: str, *parts: str) -> str:
    """The one place container and unit names come from: ``vllm-fleet-<deployment>[-part...]``
    (the deployment name was checked against the contract's pattern; parts are the bundle's own
    words). Refuses anything else, so no caller can build a name from an unchecked value."""
    if not NAME_RE.match(deployment) or ".." in deployment or \
            not all(re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", p) for p in parts):
        raise PlanError([f"vllm_fleet_deployment: {deployment!r} {parts!r} is not a safe name"])
    return "-".join(("vllm-fleet", deployment) + parts)


def default_deployment(hf_id: str, hardware: Optional[str]) -> str:
    """Deployment name when the inventory sets none: recipe repo + hardware."""
    return slug(hf_id.split("/")[-1] + ("-" + hardware if hardware else ""))


def plan_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def secret_digest(key: bytes, secrets: Mapping[str, str]) -> str:
    """Keyed digest (HMAC-SHA256) of the secret values: a rotated secret changes the plan hash,
    and the hash (stored on hosts, in container labels) reveals nothing about the values."""
    body = json.dumps(dict(sorted(secrets.items())), sort_keys=True).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()[:16]


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


def gpus_per_node(argv: Sequence[str], nodes: int) -> int:
    """GPUs one node of a rendered vLLM command uses: TP x PP x DP over the instance's nodes
    (``--data-parallel-size-local`` counts when given)."""
    tp = _alias_int(argv, ("--tensor-parallel-size", "-tp"), 1)
    pp = _alias_int(argv, ("--pipeline-parallel-size", "-pp"), 1)
    local = _alias_int(argv, ("--data-parallel-size-local", "-dpl"), 0)
    if local:
        return tp * local * max(1, pp // max(nodes, 1))
    dp = _alias_int(argv, ("--data-parallel-size", "-dp"), 1)
    total = tp * pp * dp
    return -(-total // max(nodes, 1))


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
    secrets = {env: checked[var] for var, env in SECRETS.items() if checked.get(var)}
    settings["secrets"] = sorted(secrets)
    settings["secret_digest"] = secret_digest(digest_key, secrets) if secrets else None
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
                     check_vram=checked.get("vllm_fleet_preflight_check_vram") is not False)


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
            problems.append(f"vllm-fleet plan failed for deployment {name!r}:\n{exc}")
    machines = {h.name: h.machine or h.name for h in hosts}
    problems += check_machines(plans, machines)
    problems += check_gpus(plans, machines)
    problems += check_cores(plans, machines)
    mark_idle_gpus(plans, machines, {h.name: int(h.gpu["count"]) for h in hosts if h.gpu.get("count")})
    return plans, problems


def _gpu_servers(host_plan: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    """The vLLM servers of a host plan that run on GPUs (none for CPU / service-only hosts):
    what the GPU-set overlap check and the idle-GPU count look at."""
    if host_plan.get("vendor") not in ("cuda", "rocm"):
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
        machine = machines.get(host, host)
        for other in seen.get(machine, []):
            yield (machine, host, host_plan, value) + other
        seen.setdefault(machine, []).append((host, host_plan["deployment"], value))


SKIP = object()


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
        machine = machines.get(host, host)
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
        idle = [g for g in range(count_of[names[0]]) if g not in used[machine]]
        if idle and machine not in unknown:
            for name in names:
                plans[name]["gpus_idle"] = idle


def check_machines(plans: Mapping[str, Mapping[str, Any]], machines: Mapping[str, str]) -> List[str]:
    """Two processes on one machine (same ``ansible_host``) listening on one port: refused,
    naming both hosts, deployments and processes."""
    seen: Dict[Tuple[str, int], Tuple[str, str, str]] = {}
    problems: List[str] = []
    for host, host_plan in sorted(plans.items()):
        machine = machines.get(host, host)
        for proc in host_plan.get("processes") or []:
            ports = []
            if proc.get("port") and (proc.get("serves_http") or proc.get("kind") == "mooncake_master"):
                ports.append(int(proc["port"]))
            if proc.get("kind") == "mooncake_master":
                ports.append(int((proc.get("health") or {}).get("port") or 0))
            for port in [p for p in ports if p]:
                other = seen.get((machine, port))
                # (the same deployment on two inventory hosts of one machine clashes too: same
                # container / unit name and port)
                if other is not None and (other[0], other[2]) != (host, proc["name"]):
                    problems.append(
                        f"{host}: vllm_fleet_port: port {port} on machine {machine} is used twice: "
                        f"{other[2]} (deployment {other[1]!r}, host {other[0]}) and {proc['name']} "
                        f"(deployment {host_plan['deployment']!r}, host {host}); give one deployment another "
                        f"vllm_fleet_port / vllm_fleet_router_port or another machine")
                seen.setdefault((machine, port), (host, host_plan["deployment"], proc["name"]))
    return problems


def _differs(hosts: Sequence[HostInput], key: str) -> Optional[str]:
    values = [json.dumps(h.settings.get(key), sort_keys=True, default=str) for h in hosts]
    if len(set(values)) > 1:
        odd = next(h for h, v in zip(hosts, values) if v != values[0])
        detail = ", ".join(f"{h.name}={h.settings.get(key)!r}" for h in hosts[:6])
        return (f"{odd.name}: vllm_fleet_{key} differs inside deployment "
                f"{hosts[0].settings.get('deployment')!r}: {detail}")
    return None


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
        ranks = [h.node_rank for h in group if h.node_rank is not None]
        if len(set(ranks)) != len(ranks) or any(not 0 <= r < nodes for r in ranks):
            problems.append(f"{_bad_rank(group, nodes).name}: vllm_fleet_node_rank values {sorted(ranks)} "
                            f"in instance of "
                            f"{', '.join(h.name for h in group)} must be distinct and in 0..{nodes - 1}")
            continue
        slots: List[Optional[HostInput]] = [None] * nodes
        for host in group:
            if host.node_rank is not None:
                slots[host.node_rank] = host
        free = iter(h for h in group if h.node_rank is None)
        ordered.append([slot if slot is not None else next(free) for slot in slots])
    return ordered, problems


def _health_kind(recipe: Mapping[str, Any], argv: Sequence[str]) -> str:
    tasks = as_list(as_map(recipe.get("meta")).get("tasks"))
    if "embedding" in tasks or "pooling" in argv or "embed" in argv:
        return "embedding"
    return "completion"


def listen_address(listen: Optional[str]) -> Optional[str]:
    """The ``--host`` a vllm_fleet_listen value asks for (None: vLLM's default, every interface)."""
    if not listen or listen == "all":
        return None
    return "127.0.0.1" if listen == "localhost" else str(listen)


def _customize(argv: List[str], settings: Mapping[str, Any], role: str, listen: Optional[str] = None) -> List[str]:
    """Operator additions, appended so they win the last-wins dedupe."""
    out = list(argv)
    extra: List[str] = []
    bind = listen_address(listen)
    if bind and "--headless" not in out:
        extra += ["--host", bind]
    model_path = settings.get("model_path")
    if model_path:
        out[2] = str(model_path)
        extra += ["--served-model-name", str(settings.get("served_model_name") or argv[2])]
    elif settings.get("served_model_name"):
        extra += ["--served-model-name", str(settings["served_model_name"])]
    port = settings.get("port")
    if port and role in ("single", "head") and int(port) != DEFAULT_PORT:
        extra += ["--port", str(int(port))]
    extra += [str(a) for a in as_list(settings.get("extra_args"))]
    if not extra:
        return out
    return out[:3] + dedupe(out[3:] + extra)


def flag_values(argv: Sequence[str], flag: str) -> List[str]:
    """Values an argv gives a flag (``--flag V`` and ``--flag=V``), in order."""
    out: List[str] = []
    argv = [str(a) for a in argv]
    for i, tok in enumerate(argv):
        if tok == flag and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif tok.startswith(flag + "="):
            out.append(tok.split("=", 1)[1])
    return out


def _alias_int(argv: Sequence[str], flags: Sequence[str], default: int) -> int:
    """The last numeric value any of ``flags`` (one option's aliases, e.g. ``--tensor-parallel-size``
    and ``-tp``) is given: vLLM's parser keeps the last, whichever spelling it used."""
    value = default
    argv = [str(a) for a in argv]
    for i, tok in enumerate(argv):
        for flag in flags:
            given = argv[i + 1] if tok == flag and i + 1 < len(argv) else \
                tok.split("=", 1)[1] if tok.startswith(flag + "=") else None
            if given is not None and given.isdigit():
                value = int(given)
    return value


def _bad_rank(hosts: Sequence[HostInput], size: int) -> HostInput:
    """The first host whose vllm_fleet_node_rank is out of 0..size-1 or taken twice."""
    ranks = [h.node_rank for h in hosts]
    return next((h for h in hosts if h.node_rank is not None and
                 (not 0 <= h.node_rank < size or ranks.count(h.node_rank) > 1)), hosts[0])


def _int_flag(argv: Sequence[str], flag: str, default: int) -> int:
    """The flag's last numeric value (last wins, as in vLLM's parser), else ``default``."""
    numbers = [v for v in flag_values(argv, flag) if v.isdigit()]
    return int(numbers[-1]) if numbers else default


def _check_versions(recipe: Mapping[str, Any], variant: Mapping[str, Any], version: Optional[str],
                    argv: Sequence[str], where: str) -> List[str]:
    problems = []
    need = variant.get("min_vllm_version") or as_map(recipe.get("model")).get("min_vllm_version")
    have = version_tuple(version)
    if have and need and version_tuple(need) and have < version_tuple(need):
        problems.append(f"{where}: vllm_fleet_vllm_version {version} is older than the recipe's "
                        f"min_vllm_version {need}")
    for flag, removed in REMOVED_FLAGS.items():
        if flag in argv and (have is None or have >= version_tuple(removed)):
            shown = version or "latest"
            problems.append(f"{where}: vllm_fleet_extra_args: flag {flag} was removed in vLLM {removed} "
                            f"and vLLM {shown} "
                            f"rejects it: drop it from vllm_fleet_extra_args (or pin an older vllm_fleet_vllm_version)")
    return problems


@dataclass
class Slot:
    """One process placed on one host."""

    host: HostInput
    proc: Process
    phase: str                      # services | engine | router (the order they start in)
    unit: Optional[str]             # engine failure/rollout unit ("i0", "pd"); None for services
    unit_index: Optional[int]
    unit_hosts: List[str]
    head: HostInput
    rank: int
    values: Dict[str, str]          # placeholder values for this process
    name: str
    # a replica (vllm_fleet_replicas_per_host > 1): its index, GPU set (GPU hosts) or CPU sets
    # (CPU hosts: one set of cores per tensor/pipeline rank), and port
    replica: Optional[int] = None
    gpus: Optional[List[int]] = None
    cpus: Optional[List[List[int]]] = None
    port: Optional[int] = None


@dataclass
class Deployment:
    """What every process of one deployment shares."""

    settings: Dict[str, Any]
    recipe: Dict[str, Any]
    variant: Dict[str, Any]
    req: Request
    deploy_type: str
    profile: Dict[str, Any]
    name: str
    runtime: str
    store: Optional[Dict[str, Any]]
    values: Dict[str, str]
    problems: List[str]

    def config_path(self, file: str) -> str:
        return f"{CONFIG_ROOT}/{self.name}/{file}"


def _engine_host(host: HostInput) -> bool:
    return not host.roles or bool(set(host.roles) & {"prefill", "decode", "instance"})


def _with_role(hosts: Sequence[HostInput], role: str) -> List[HostInput]:
    return [h for h in hosts if role in h.roles]


def _ordered_pool(hosts: List[HostInput], what: str, problems: List[str]) -> List[HostInput]:
    """Inventory order; explicit vllm_fleet_node_rank values win (distinct, in range)."""
    ranks = [h.node_rank for h in hosts if h.node_rank is not None]
    if len(set(ranks)) != len(ranks) or any(not 0 <= r < len(hosts) for r in ranks):
        problems.append(f"{_bad_rank(hosts, len(hosts)).name}: vllm_fleet_node_rank values {sorted(ranks)} "
                        f"in the {what} "
                        f"({', '.join(h.name for h in hosts)}) must be distinct and in 0..{len(hosts) - 1}")
        return hosts
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
    engine_hosts = [h for h in hosts if _engine_host(h)]
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
                            f"(GPU facts: {host.gpu.get('vendor') or 'none'} "
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
        select.complete(recipe, req, cat.strategies, cat.taxonomy)
    except RenderError as exc:
        field = getattr(exc, "field", None)   # select.ChoiceError: the choice at fault
        raise PlanError([f"{hosts[0].name}: {'vllm_fleet_' + field + ': ' if field else ''}{exc}"]) from exc
    deploy_type = select.deploy_type(cat.strategies, req.strategy)
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
    if not NAME_RE.match(name) or ".." in name:
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
    if port is not None and given and given[-1] != str(port):
        problems.append(f"{hosts[0].name}: vllm_fleet_extra_args: --port {given[-1]} contradicts "
                        f"vllm_fleet_port {port}; set the port in one place")
    if problems:
        raise PlanError(problems)
    dep = Deployment(settings=settings, recipe=recipe, variant=variant, req=req,
                     deploy_type=deploy_type, profile=cat.profiles[hardware], name=name,
                     runtime=runtime, store=store, values={}, problems=problems)
    if deploy_type == "pd_cluster":
        _no_replicas(dep, hosts, "P/D deployments (their pools split the host's GPUs themselves)")
        slots = _place_pd(cat, dep, list(hosts))
    elif store is not None:
        _no_replicas(dep, hosts, f"{req.kv_offload} deployments (not supported there yet)")
        slots = _place_kv(cat, dep, list(hosts))
    else:
        slots = _place_plain(cat, dep, list(hosts), deploy_type)
    if problems and not slots:
        raise PlanError(problems)
    out = _host_plans(dep, slots)
    if problems:
        raise PlanError(problems)
    return out


# ---------------------------------------------------------------------------------
# placement per deployment shape


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


def _place_plain(cat: Catalog, dep: Deployment, hosts: List[HostInput], deploy_type: str) -> List[Slot]:
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
        _no_replicas(dep, members, f"multi-node strategy {dep.req.strategy!r} (an instance spans whole hosts)")
    router_host = _single_role_host(dep, hosts, "router", None)
    if router_host is not None:
        slots += _services(dep, hosts, [], router_host, router_host, _front_door(dep, groups, rendering, slots))
    return slots


def _no_replicas(dep: Deployment, hosts: Sequence[HostInput], why: str) -> None:
    """Replicas per host apply to single-node deployments only: `auto` means one there, a
    number above 1 is refused."""
    for host in hosts:
        want = host.settings.get("replicas_per_host")
        if want not in (None, "auto", 1):
            dep.problems.append(f"{host.name}: vllm_fleet_replicas_per_host: {want} replicas do not apply to "
                                f"{why}; leave it unset (or auto)")


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
    if want == 1:
        return [slot]
    where = f"{host.name}: vllm_fleet_replicas_per_host"
    argv = _customize(list(slot.proc.argv), dep.settings, slot.proc.role, host.settings.get("listen"))
    need = max(1, gpus_per_node(argv, 1))
    vendor, have = host.gpu.get("vendor"), int(host.gpu.get("count") or 0)
    if vendor in ("nvidia", "amd") and have:
        pool = [int(g) for g in host.settings.get("gpus") or range(have)]
        if [g for g in pool if g >= have]:
            return [slot]   # _gpu_set names the GPUs that do not exist
        count = len(pool) // need if want == "auto" else int(want)
        if count * need > len(pool):
            has = (f"vllm_fleet_gpus gives {len(pool)} ({gpu_ranges(pool)})" if host.settings.get("gpus") is not None
                   else f"the host has {have}")
            dep.problems.append(f"{where}: {count} replicas x {need} GPU(s) each (tensor x pipeline x data parallel "
                                f"of the command) need {count * need} GPUs, but {has}; lower it or use auto")
            return [slot]
        if count <= 1:
            return [slot]
        sets: List[Dict[str, Any]] = [{"gpus": g} for g in gpu_groups(pool, need, count, host.gpu.get("topology"))]
    elif vendor == "cpu" and host.gpu.get("cpus"):
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
            reported = vendor or "no GPU facts"
            dep.problems.append(f"{where}: {want} replicas need GPUs or CPU cores to split, but the host's facts "
                                f"give neither ({reported}); leave it unset")
        return [slot]
    given = flag_values(argv, "--port")
    base = int(dep.settings.get("port") or (given[-1] if given and given[-1].isdigit() else 0) or DEFAULT_PORT)
    if base + count - 1 > 65535:
        dep.problems.append(f"{where}: {count} replicas from port {base} run past 65535; lower vllm_fleet_port")
        return [slot]
    return [replace(slot, name=f"{slot.name}-r{i}", replica=i, port=base + i, **one) for i, one in enumerate(sets)]


def _front_door(dep: Deployment, groups: List[List[HostInput]], rendering, slots: Sequence[Slot] = ()) -> Process:
    """vllm-router in front of a plain deployment's instances (``vllm_fleet_role: router`` on a
    host): one --worker-urls list of every instance head (every replica of it), round robin."""
    _need_address([g[0] for g in groups], dep.problems, "router backend")
    proc = next(p for p in rendering.processes if p.kind == "vllm")
    given = flag_values(as_list(dep.settings.get("extra_args")), "--port")
    port = int(dep.settings.get("port") or (given[-1] if given and given[-1].isdigit() else 0)
               or proc.port or DEFAULT_PORT)
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


def _place_pd(cat: Catalog, dep: Deployment, hosts: List[HostInput]) -> List[Slot]:
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
    pools = {role: _ordered_pool(pools[role], f"{role} pool", problems) for role in PD_ROLES}
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


def _place_kv(cat: Catalog, dep: Deployment, hosts: List[HostInput]) -> List[Slot]:
    problems = dep.problems
    store = dep.store or {}
    serving = select.deploy_type(cat.strategies, dep.req.strategy)
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


# ---------------------------------------------------------------------------------
# per-process and per-host plans


def _package_lines(install: Optional[str]) -> List[str]:
    """Requirement strings of an upstream install line (``uv pip install 'pkg>=1'``)."""
    if not install:
        return []
    words = shlex.split(install)
    if "install" not in words:
        return []
    return [w for w in words[words.index("install") + 1:] if not w.startswith("-")]


def _mooncake_packages(dep: Deployment, brand_key: str) -> List[str]:
    chosen = dep.settings.get("mooncake_package")
    if chosen:
        return [str(p) for p in (chosen if isinstance(chosen, list) else [chosen])]
    install = as_map(as_map((dep.store or {}).get("vllm")).get("install"))
    return _package_lines(install.get(brand_key))


def _router_argv(argv: List[str]) -> List[str]:
    """Renamed router flags (ROUTER_FLAG_RENAMES), each given once with all its values at the
    position of its first use (vllm-router's list flags keep only their last occurrence)."""
    values: Dict[str, List[str]] = {}
    out: List[str] = []
    i = 0
    while i < len(argv):
        new = ROUTER_FLAG_RENAMES.get(argv[i])
        if new and i + 1 < len(argv):
            if new not in values:
                values[new] = []
                out.append(new)
            values[new].append(argv[i + 1])
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return [tok for flag in out for tok in [flag] + values.get(flag, [])]


def _config_json(dep: Deployment, template: Any, where: str, resolved, store: bool = False) -> str:
    """A Mooncake JSON config: the recipe's template, placeholders filled, operator keys on top
    (vllm_fleet_mooncake_config for every file, vllm_fleet_mooncake_store_config for the store's)."""
    config = dict(as_map(template))
    config.update(as_map(dep.settings.get("mooncake_config")))
    if store:
        config.update(as_map(dep.settings.get("mooncake_store_config")))
    out = {key: (resolved(env_text(v), where) if isinstance(v, str) else v) for key, v in config.items()}
    return json.dumps(out, indent=2) + "\n"


def _process(dep: Deployment, slot: Slot, files: Dict[str, Dict[str, Any]], engine_host: bool) -> PlannedProcess:
    """One planned process: placeholders resolved (a missing value is a problem naming host and
    variable), then built by :func:`_engine_process` (vLLM) or :func:`_service_process`."""
    host, proc, settings = slot.host, slot.proc, dep.settings
    values = dict(PLACEHOLDER_DEFAULTS)
    values.update(dep.values)
    values.update(slot.values)
    values.update({str(k): str(v) for k, v in as_map(settings.get("placeholders")).items()})

    def resolved(text: str, where: str) -> str:
        out, missing = substitute(text, values)
        for name in missing:
            var = "vllm_fleet_iface" if name == "IFACE_NAME" else f"vllm_fleet_placeholders.{name}"
            dep.problems.append(f"{host.name}: {var}: placeholder ${name} in {where} has no value "
                                f"(set vllm_fleet_placeholders.{name}"
                                f"{' or vllm_fleet_iface' if name == 'IFACE_NAME' else ''})")
        return out

    argv = [resolved(str(tok), f"the {proc.role} command") for tok in proc.argv]
    env = {key: resolved(env_text(value), f"env {key} of {proc.role}") for key, value in proc.env.items()}
    if proc.kind in ("vllm", "omni"):
        planned = _engine_process(dep, slot, files, argv, env, values, resolved)
    else:
        planned = _service_process(dep, slot, files, argv, env, values, resolved, engine_host)
    hashed = {"argv": planned.argv, "env": planned.env, "image": planned.image, "port": planned.port,
              "packages": planned.packages}
    if planned.secret_env or planned.credentials:
        hashed["secrets"] = settings.get("secret_digest")
    for key in ("gpus", "devices", "cpus"):
        if getattr(planned, key) is not None:
            hashed[key] = getattr(planned, key)
    planned.hash = plan_hash(hashed)
    return planned


def _engine_process(dep: Deployment, slot: Slot, files: Dict[str, Dict[str, Any]], argv: List[str],
                    env: Dict[str, str], values: Mapping[str, str], resolved) -> PlannedProcess:
    """A vLLM server (vllm / omni): the operator's env and flags, GPU count and version checks,
    the image, Mooncake's config file, where it binds and is probed."""
    host, proc, settings, problems = slot.host, slot.proc, dep.settings, dep.problems
    multi = any(tok in ("--nnodes", "--data-parallel-address", "--master-addr") for tok in proc.argv)
    if multi and host.address:
        env.setdefault("VLLM_HOST_IP", host.address)
    if "VLLM_NIXL_SIDE_CHANNEL_HOST" in env and host.address:
        # the side channel is a bind address: this node's own (the recipe's comment says so)
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = host.address
    for key, value in as_map(settings.get("env")).items():
        env[str(key)] = str(value)
    # per host (CPU/NUMA binding, local cache dirs): may differ inside a deployment
    for key, value in as_map(host.settings.get("host_env")).items():
        env[str(key)] = str(value)
    argv = _customize(argv, settings, proc.role, host.settings.get("listen"))
    docker = proc.docker or {}
    gpus = _gpu_set(dep, host, env)
    if slot.replica is not None:   # a replica: its share of the host's GPUs or cores, its own port
        gpus = list(slot.gpus) if slot.gpus is not None else gpus
        argv = argv[:3] + dedupe(argv[3:] + ["--port", str(slot.port)])
    if slot.cpus is not None:
        # vLLM's CPU backend pins its OpenMP threads (and their memory) to these cores, one
        # set per tensor/pipeline rank separated by |; the container gets them as its cpuset
        env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(gpu_ranges(rank) for rank in slot.cpus)
    have = int(host.gpu.get("count") or 0)
    if have and host.gpu.get("vendor") in ("nvidia", "amd") and dep.deploy_type != "pd_cluster":
        need = gpus_per_node(argv, len(slot.unit_hosts))
        usable = len(gpus) if gpus is not None else have
        if need > usable:
            given = f"vllm_fleet_gpus gives it {usable}" if gpus is not None else f"the host has {have}"
            problems.append(f"{host.name}: vllm_fleet_extra_args: the command needs {need} GPUs per node "
                            f"(tensor x pipeline x data parallel over {len(slot.unit_hosts)} node(s)) but "
                            f"{given}; lower the parallel sizes or choose another "
                            f"vllm_fleet_variant / vllm_fleet_strategy / vllm_fleet_nodes")
    devices = None
    render = [str(n) for n in as_list(host.gpu.get("render_nodes"))]
    if (gpus is not None and dep.runtime == "docker" and docker.get("brand_key") in ROCM_BRAND_KEYS
            and len(render) == have and all(g < len(render) for g in gpus)):
        # ROCm containers with a GPU set get /dev/kfd and the set's own render nodes (the GPU
        # facts map each GPU to its node): the runtime sees only those, numbered from 0 inside,
        # as NVIDIA containers do with device_ids
        devices = ["/dev/kfd"] + [render[g] for g in gpus]
    elif gpus is not None and (dep.runtime == "uv" or docker.get("brand_key") in ROCM_BRAND_KEYS):
        # units see the GPUs through the runtime's variable; ROCm containers whose render nodes
        # the facts do not map get every render node (/dev/dri) and the variable
        env[_visible_devices(docker)] = ",".join(map(str, gpus))
    image = settings.get("image") or docker.get("image")
    if settings.get("image_tag") and image:
        image = image.rsplit(":", 1)[0] + ":" + str(settings["image_tag"]).lstrip(":")
    version = settings.get("vllm_version") or (image_version(image) if dep.runtime == "docker" else None)
    problems.extend(_check_versions(dep.recipe, dep.variant, version, argv, host.name))
    if dep.store and dep.store.get("min_vllm_version"):
        need = dep.store["min_vllm_version"]
        if version_tuple(version) and version_tuple(version) < version_tuple(need):
            problems.append(f"{host.name}: vllm_fleet_vllm_version {version} is older than "
                            f"{dep.req.kv_offload}'s min_vllm_version {need}")
    mounts = []
    if "MOONCAKE_CONFIG_PATH" in proc.env:
        path = values["MOONCAKE_CONFIG_PATH"]
        template = as_map((dep.store or {}).get("mooncake_vllm_config")).get("template")
        files[path] = {"path": path, "mode": "0644",
                       "content": _config_json(dep, template, "the Mooncake vLLM config", resolved)}
        mounts.append(path.rsplit("/", 1)[0])
    secrets = sorted(str(k) for k in as_list(settings.get("secrets")))
    return PlannedProcess(
        name=slot.name, kind=proc.kind, role=proc.role, rank=proc.rank, phase=slot.phase,
        runtime=dep.runtime, version=version, argv=argv, env=env,
        port=_int_flag(argv, "--port", proc.port or DEFAULT_PORT),
        serves_http="--headless" not in argv,
        health={"kind": "vllm", "request": _health_kind(dep.recipe, argv)},
        bind=_bind(argv), probe_host=_probe_host(argv), image=image,
        served_model_name=settings.get("served_model_name") or proc.argv[2],
        model_path=settings.get("model_path"),
        packages=_mooncake_packages(dep, docker.get("brand_key") or "nvidia") if dep.store else [],
        mounts=mounts,
        secret_env=[k for k in secrets if k not in SECRET_FILES or dep.runtime != "uv"],
        credentials=[credential(dep.name, k) for k in secrets if k in SECRET_FILES and dep.runtime == "uv"],
        gpus=gpus, replica=slot.replica, devices=devices,
        cpus=sorted(c for rank in slot.cpus for c in rank) if slot.cpus is not None else None)


def _visible_devices(docker: Mapping[str, Any]) -> str:
    return "HIP_VISIBLE_DEVICES" if docker.get("brand_key") in ROCM_BRAND_KEYS else "CUDA_VISIBLE_DEVICES"


def _gpu_set(dep: Deployment, host: HostInput, env: Mapping[str, str]) -> Optional[List[int]]:
    """The host's vllm_fleet_gpus, checked against what the host reports (when its GPU facts
    were read), the deployment shape and the environment; None: every GPU."""
    gpus = host.settings.get("gpus")
    if gpus is None:
        return None
    gpus = [int(g) for g in gpus]
    where = f"{host.name}: vllm_fleet_gpus"
    if dep.deploy_type == "pd_cluster":
        dep.problems.append(f"{where}: does not apply to P/D deployments (their pools split the host's GPUs "
                            f"themselves); leave it unset")
        return None
    have = int(host.gpu.get("count") or 0)
    if host.gpu.get("vendor") is not None and host.gpu.get("vendor") not in ("nvidia", "amd"):
        dep.problems.append(f"{where}: this host reports no GPUs (GPU facts: {host.gpu.get('vendor')}); "
                            f"leave it unset")
    elif have and max(gpus) >= have:
        missing = [g for g in gpus if g >= have]
        dep.problems.append(f"{where}: GPU {', '.join(map(str, missing))} does not exist: the host has {have} "
                            f"GPUs (0-{have - 1})")
    for key in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        if key in env:
            dep.problems.append(f"{host.name}: vllm_fleet_env: {key} contradicts vllm_fleet_gpus; "
                                f"choose the GPUs in one place (vllm_fleet_gpus)")
    return gpus


def _gpus_said(gpus: Optional[Sequence[int]], unset: str = "every GPU (vllm_fleet_gpus unset)") -> str:
    if gpus is None:
        return unset
    return f"GPU{'s' if len(gpus) > 1 else ''} {gpu_ranges(gpus)}"


def _service_process(dep: Deployment, slot: Slot, files: Dict[str, Dict[str, Any]], argv: List[str],
                     env: Dict[str, str], values: Mapping[str, str], resolved, engine_host: bool) -> PlannedProcess:
    """A cluster service under systemd: vllm-router, mooncake_master, mooncake_store (its config
    file), with its pip packages and how its readiness is probed."""
    host, proc, settings = slot.host, slot.proc, dep.settings
    brand = "amd" if (dep.profile.get("brand") or "").lower() == "amd" else "nvidia"
    if proc.kind == "router":
        argv = _router_argv(argv)
        version = settings.get("router_version")
        packages = ["vllm-router" + (f"=={version}" if version else "")]
        port: Optional[int] = _int_flag(argv, "--port", int(values["ROUTER_PORT"]))
        health: Dict[str, Any] = {"kind": "router"}
    else:
        # a services-only host has no GPU: it gets Mooncake's non-CUDA build
        packages = _mooncake_packages(dep, brand if engine_host else "amd")
        port = None
        health = {"kind": "alive"}
        if proc.kind == "mooncake_master":
            # the RPC port is what clients use; readiness is the admin server's /health
            port = _int_flag(argv, "-rpc_port", 50051)
            health = {"kind": "http", "port": _int_flag(argv, "-metrics_port", 9003)}
        if proc.kind == "mooncake_store":
            path = values["MOONCAKE_STORE_CONFIG_PATH"]
            # the store service refuses a config without local_hostname (the recipe has none):
            # it is the address this store registers with the master
            template = dict(as_map(proc.config))
            template.setdefault("local_hostname", host.address or "")
            files[path] = {"path": path, "mode": "0644",
                           "content": _config_json(dep, template, "the Mooncake store config",
                                                   resolved, store=True)}
    router = proc.kind == "router"
    return PlannedProcess(
        name=slot.name, kind=proc.kind, role=proc.role, rank=proc.rank, phase=slot.phase,
        runtime="service", version=None, argv=argv, env=env, port=port, serves_http=router,
        health=health, bind=_bind(argv) if router else None,
        probe_host=_probe_host(argv) if router else "127.0.0.1", packages=packages)


_ANY_ADDRESS = (None, "0.0.0.0", "::", "[::]")
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def _bind(argv: Sequence[str]) -> Optional[str]:
    """The address a server's argv binds (``--host``, last wins); None: every interface."""
    given = flag_values(argv, "--host")
    return None if not given or given[-1] in _ANY_ADDRESS else given[-1]


def _probe_host(argv: Sequence[str]) -> str:
    """Where the host's own probes (health gate, state, drain) reach a server: loopback unless
    the server binds one other address (then that one, bracketed when IPv6)."""
    bind = _bind(argv)
    if bind is None or bind in _LOOPBACK:
        return "[::1]" if bind in ("::1", "[::1]") else "127.0.0.1"
    return f"[{bind}]" if ":" in bind and not bind.startswith("[") else bind


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
                match = re.match(r"^https?://\[?([^\]/]+?)\]?:(\d+)", str(tok))
                if not match:
                    continue
                found = servers.get((match.group(1), int(match.group(2))))
                if found is None:
                    continue
                host, proc = found
                if proc.bind is not None and proc.bind != match.group(1):
                    dep.problems.append(
                        f"{host}: vllm_fleet_listen: the server listens on {proc.bind} only, but the router "
                        f"on {router_host} reaches it at {match.group(0)}; listen on all or on {match.group(1)}")


def credential(deployment: str, secret: str) -> Dict[str, str]:
    """Where a file-passed secret lives on the host (``/etc/vllm-fleet/<deployment>/secrets/``,
    root only) and how the process finds it: ``env`` names the path variable, ``name`` the
    systemd credential (``%d/<name>``, LoadCredential= of ``path``)."""
    spec = SECRET_FILES[secret]
    return {"secret": secret, "name": spec["name"], "env": spec["env"], "var": spec["var"],
            "path": f"{CONFIG_ROOT}/{deployment}/secrets/{spec['name']}"}


def _host_plans(dep: Deployment, slots: List[Slot]) -> Dict[str, Dict[str, Any]]:
    """Each host's plan (as the dicts the playbooks read), from the placed slots."""
    req, profile = dep.req, dep.profile
    units = sorted({s.unit_index for s in slots if s.unit_index is not None})
    batch_of = rollout_batches(len(units), dep.settings.get("rollout_batch"))
    by_host: Dict[str, List[Slot]] = {}
    for slot in slots:
        by_host.setdefault(slot.host.name, []).append(slot)
    out: Dict[str, HostPlan] = {}
    for host_name, mine in by_host.items():
        files: Dict[str, Dict[str, Any]] = {}
        engine_host = any(s.phase == "engine" for s in mine)
        processes = [_process(dep, slot, files, engine_host) for slot in mine]
        engine = next((s for s in mine if s.phase == "engine"), None)
        first = processes[mine.index(engine or mine[0])]
        vendor = "none"
        if engine is not None:
            vendor = VENDOR_BY_BRAND_KEY.get((engine.proc.docker or {}).get("brand_key"), "cuda")
            if profile.get("generation") == "xpu":
                vendor = "xpu"
        gpus = int(profile.get("gpu_count") or 1)
        entry = HostPlan(
            deployment=dep.name, recipe=req.hf_id, variant=req.variant, hardware=req.hardware,
            strategy=req.strategy, kv_offload=req.kv_offload, deploy_type=dep.deploy_type,
            node_count=len(engine.unit_hosts) if engine and engine.unit != "pd" else 1,
            features=req.features, runtime=dep.runtime if engine is not None else "service",
            vendor=vendor, brand=profile.get("brand"), gpu_count=gpus,
            vram_gb_per_gpu=(profile.get("vram_gb") or 0) / gpus,
            vram_minimum_gb=dep.variant.get("vram_minimum_gb"),
            min_vllm_version=dep.variant.get("min_vllm_version") or
            as_map(dep.recipe.get("model")).get("min_vllm_version"),
            vllm_version=first.version,
            instance=engine.unit_index if engine is not None else None,
            unit=engine.unit if engine is not None else None,
            instance_hosts=engine.unit_hosts if engine is not None else [host_name],
            head=engine.head.name if engine is not None else host_name,
            node_rank=engine.rank if engine is not None else 0,
            batch=batch_of[units.index(engine.unit_index)] if engine is not None else None,
            max_fail_percentage=int(dep.settings.get("max_fail_percentage") or 0),
            phases=sorted({s.phase for s in mine}, key=("services", "engine", "router").index),
            command="\n".join(vllm_shell(p.argv) if p.kind in ("vllm", "omni") else " ".join(p.argv)
                              for p in processes),
            health={"enabled": bool(first.serves_http), "port": first.port,
                    "served_model_name": first.served_model_name,
                    "kind": first.health.get("request", "none")},
            processes=processes,
            files=sorted(files.values(), key=lambda f: f["path"]),
            config_dir=f"{CONFIG_ROOT}/{dep.name}",
            # engines that answer beyond localhost with no API key (the run summary warns)
            exposed=[p.name for p in processes if p.kind in ("vllm", "omni") and p.serves_http
                     and (p.bind or "0.0.0.0") not in _LOOPBACK and "VLLM_API_KEY" not in p.secret_env],
            secret_files=sorted({c["path"]: c for p in processes for c in p.credentials}.values(),
                                key=lambda c: c["path"]),
            address=mine[0].host.address)
        accelerator.attach(entry, mine[0].host.settings, plan_hash)   # container / unit / uv blocks
        entry.hash = plan_hash(entry.hashed())
        out[host_name] = entry
        if engine is not None and vendor in ("cuda", "rocm"):
            _check_fit(entry, engine.host, processes, dep.problems)
    _drain_targets(out)
    _check_reachable(dep, out)
    return {name: entry.to_dict() for name, entry in out.items()}


# GPU facts give memory in GiB (2**30 bytes, as nvidia-smi / amd-smi count it); recipes give
# vram_minimum_gb in GB (10**9 bytes): 1 GiB = 1.073741824 GB.
GB_PER_GIB = 2 ** 30 / 10 ** 9


def _check_fit(entry: HostPlan, host: HostInput, processes: Sequence[PlannedProcess], problems: List[str]) -> None:
    """An engine host's GPUs against its plan: as many as the hardware profile says, and the
    instance's memory (this host's, times the nodes of the instance) at least the variant's
    vram_minimum_gb. Only where the host's GPU facts were read and report a count."""
    if host.gpu.get("count") is None:
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


def _drain_targets(out: Dict[str, HostPlan]) -> None:
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


def flag_values_list(argv: Sequence[str], flag: str) -> List[str]:
    """The values of a list flag (``--flag A B C``, up to the next ``--option``)."""
    argv = [str(a) for a in argv]
    if flag not in argv:
        return []
    out = []
    for tok in argv[argv.index(flag) + 1:]:
        if tok.startswith("--"):
            break
        out.append(tok)
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
