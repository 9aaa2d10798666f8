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
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import select
from .docker import env_text
from .loader import Catalog
from .render import Process, RenderError, Request, as_list, as_map, resolve
from .shell import dedupe, vllm_shell

PLACEHOLDER = re.compile(r"\$([A-Z][A-Z0-9_]*)(?![A-Z0-9_])")
DEFAULT_PORT = 8000
RUNTIMES = ("docker", "uv")
VENDOR_BY_BRAND_KEY = {"nvidia": "cuda", "amd": "rocm", "tpu": "tpu", "intel": "cpu"}
# Flags vLLM removed, with the first release that rejects them (checked against the
# pinned version; "latest"/"nightly" images are treated as the newest release).
REMOVED_FLAGS: Dict[str, str] = {
    "--disable-log-requests": "0.12.0",
}

SETTING_KEYS = (
    "recipe", "variant", "strategy", "hardware", "features", "feature_modes", "nodes",
    "pd_nodes", "kv_offload", "kv_instances", "runtime", "vllm_version", "image",
    "image_tag", "port", "served_model_name", "extra_args", "model_path", "env",
    "placeholders", "deployment", "secrets",
)


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


def default_deployment(hf_id: str, hardware: Optional[str]) -> str:
    """Deployment name when the inventory sets none: recipe repo + hardware."""
    return slug(hf_id.split("/")[-1] + ("-" + hardware if hardware else ""))


def plan_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _differs(hosts: Sequence[HostInput], key: str) -> Optional[str]:
    values = {json.dumps(h.settings.get(key), sort_keys=True, default=str) for h in hosts}
    if len(values) > 1:
        detail = ", ".join(f"{h.name}={h.settings.get(key)!r}" for h in hosts[:6])
        return f"vllm_fleet_{key} differs inside deployment {hosts[0].settings.get('deployment')!r}: {detail}"
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
            f"{len(loose)} hosts ({', '.join(h.name for h in loose)}) cannot form instances of "
            f"{nodes} nodes: set vllm_fleet_nodes, add/remove hosts, or set vllm_fleet_instance per host")
    else:
        groups += [loose[i:i + nodes] for i in range(0, len(loose), nodes)]
    ordered: List[List[HostInput]] = []
    for group in groups:
        if len(group) != nodes:
            problems.append(f"instance {group[0].instance!r} has {len(group)} hosts "
                            f"({', '.join(h.name for h in group)}); the strategy needs {nodes}")
            continue
        ranks = [h.node_rank for h in group if h.node_rank is not None]
        if len(set(ranks)) != len(ranks) or any(not 0 <= r < nodes for r in ranks):
            problems.append(f"vllm_fleet_node_rank values {sorted(ranks)} in instance of "
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


def _customize(argv: List[str], settings: Mapping[str, Any], role: str) -> List[str]:
    """Operator additions, appended so they win the last-wins dedupe."""
    out = list(argv)
    extra: List[str] = []
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


def _process_port(argv: Sequence[str], default: int) -> int:
    port = default
    for i, tok in enumerate(argv[:-1]):
        if tok == "--port" and str(argv[i + 1]).isdigit():
            port = int(argv[i + 1])
    return port


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
            problems.append(f"{where}: flag {flag} was removed in vLLM {removed} and vLLM {shown} "
                            f"rejects it: drop it from vllm_fleet_extra_args (or pin an older vllm_fleet_vllm_version)")
    return problems


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

    # hardware: explicit per deployment/host, else detected; one value per deployment
    hw_of: Dict[str, Optional[str]] = {}
    for host in hosts:
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
        problems.append("mixed hardware in one deployment: " +
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
        choice = select.complete(recipe, req, cat.strategies, cat.taxonomy)
    except RenderError as exc:
        raise PlanError([f"{hosts[0].name}: {exc}"]) from exc
    deploy = select.deploy_type(cat.strategies, req.strategy)
    if deploy == "pd_cluster" or (req.kv_offload and req.kv_offload in cat.kv_stores()):
        raise PlanError([f"{hosts[0].name}: vllm_fleet_strategy {req.strategy!r}"
                         f"{' with ' + req.kv_offload if req.kv_offload else ''}: P/D and Mooncake "
                         f"deployments are not supported by this version of vllm-fleet yet"])
    nodes = req.node_count if deploy == "multi_node" else 1
    groups, problems = _instances(hosts, nodes)
    if problems:
        raise PlanError(problems)

    variant = as_map(as_map(recipe.get("variants")).get(req.variant))
    profile = cat.profiles[hardware]
    deployment = settings.get("deployment") or default_deployment(hf_id, hardware)
    out: Dict[str, Dict[str, Any]] = {}
    for index, group in enumerate(groups):
        rendering = resolve(recipe, req, cat.strategies, cat.taxonomy)
        procs = [p for p in rendering.processes if p.kind == "vllm"]
        head = group[0]
        for rank, host in enumerate(group):
            proc = procs[rank] if len(procs) > 1 else procs[0]
            entry = _host_plan(cat, recipe, variant, req, rendering.deploy_type, profile, proc,
                               host, head, group, index, deployment, runtime, problems)
            out[host.name] = entry
    if problems:
        raise PlanError(problems)
    return out


def _host_plan(cat: Catalog, recipe, variant, req: Request, deploy_type: str, profile, proc: Process,
               host: HostInput, head: HostInput, group: List[HostInput], index: int,
               deployment: str, runtime: str, problems: List[str]) -> Dict[str, Any]:
    settings = host.settings
    multi = len(group) > 1
    values: Dict[str, str] = {str(k): str(v) for k, v in as_map(settings.get("placeholders")).items()}
    if multi:
        for member in group:
            if not member.address:
                problems.append(f"{member.name}: vllm_fleet_address: no rendezvous address "
                                f"(set vllm_fleet_address or ansible_host)")
        values.setdefault("HEAD_IP", head.address or "")
        if host.iface:
            values.setdefault("IFACE_NAME", host.iface)
    def resolved(text: str, where: str) -> str:
        out, missing = substitute(text, values)
        for name in missing:
            problems.append(f"{host.name}: placeholder ${name} in {where} has no value "
                            f"(set vllm_fleet_placeholders.{name}"
                            f"{' or vllm_fleet_iface' if name == 'IFACE_NAME' else ''})")
        return out

    argv = [resolved(tok, "the command") for tok in proc.argv]
    env = {key: resolved(env_text(value), f"env {key}") for key, value in proc.env.items()}
    if multi and host.address:
        env.setdefault("VLLM_HOST_IP", host.address)
    for key, value in as_map(settings.get("env")).items():
        env[str(key)] = str(value)
    # secrets stay out of the plan: only their env names travel; roles read the values
    secret_env = sorted(str(k) for k in as_list(settings.get("secrets")))
    argv = _customize(argv, settings, proc.role)
    port = _process_port(argv, DEFAULT_PORT)

    docker = proc.docker or {}
    image = settings.get("image") or docker.get("image")
    if settings.get("image_tag") and image:
        image = image.rsplit(":", 1)[0] + ":" + str(settings["image_tag"]).lstrip(":")
    version = settings.get("vllm_version") or (image_version(image) if runtime == "docker" else None)
    problems += _check_versions(recipe, variant, version, argv, host.name)

    vendor = VENDOR_BY_BRAND_KEY.get(docker.get("brand_key"), "cuda")
    if profile.get("generation") == "xpu":
        vendor = "xpu"
    # one name per host is enough: hosts never share a container/unit namespace
    name = f"vllm-fleet-{deployment}" + (f"-{proc.role}{proc.rank}" if multi else "")
    serves = proc.role in ("single", "head")
    served = settings.get("served_model_name") or proc.argv[2]
    process = {
        "name": name,
        "role": proc.role,
        "rank": proc.rank,
        "argv": argv,
        "env": env,
        "secret_env": secret_env,
        "image": image,
        "port": port,
        "serves_http": serves,
        "served_model_name": served,
        "model_path": settings.get("model_path"),
    }
    process["hash"] = plan_hash({k: process[k] for k in ("argv", "env", "image", "port")})
    gpus = int(profile.get("gpu_count") or 1)
    return {
        "deployment": deployment,
        "recipe": req.hf_id,
        "variant": req.variant,
        "hardware": req.hardware,
        "strategy": req.strategy,
        "deploy_type": deploy_type,
        "node_count": len(group),
        "features": req.features,
        "runtime": runtime,
        "vendor": vendor,
        "brand": profile.get("brand"),
        "gpu_count": gpus,
        "vram_gb_per_gpu": (profile.get("vram_gb") or 0) / gpus,
        "vram_minimum_gb": variant.get("vram_minimum_gb"),
        "min_vllm_version": variant.get("min_vllm_version") or as_map(recipe.get("model")).get("min_vllm_version"),
        "vllm_version": version,
        "instance": index,
        "instance_hosts": [h.name for h in group],
        "head": head.name,
        "node_rank": proc.rank if multi else 0,
        "command": vllm_shell(argv),
        "health": {
            "enabled": serves,
            "port": port,
            "served_model_name": served,
            "kind": _health_kind(recipe, argv),
        },
        "processes": [process],
        "hash": plan_hash(process),
    }
