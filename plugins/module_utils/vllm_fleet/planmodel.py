"""The planner's vocabulary: its error, a host's input, slots and the deployment being placed,
names and hashes."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .runtimespec import docker_tunables
from .layout import (COMPILE_CACHE_ROOT, CONFIG_ROOT, HF_CACHE_ROOT, KEPT_SUFFIX, LEGACY_MARKER_SUFFIX,  # noqa: F401 (re-exported)
                     NAME_RE, STAGE_TOOLS_VENV, VENV_ROOT, deployment_layout, host_layout, unit_files)
from .rendermodel import Process, Request


DEFAULT_PORT = 8000

ROCM_BRAND_KEYS = ("amd",)

# The bundle's roots on a host and the names derived under them: layout.py. Every name a host
# plan leads to on its host is listed by host_names() below: add a new one there.
STATE_DIR_PLACEHOLDER = "<vllm_fleet_state_dir>"   # a run option: two machines' names are compared without it

# Names under the bundle's roots that are the bundle's own, on every machine: no deployment may
# derive one (teardown would remove it with the deployment).
RESERVED = {
    ("path", f"{VENV_ROOT}/tools"): "the shared uv tools venv (vllm_fleet_uv)",
    ("path", STAGE_TOOLS_VENV): "the seed hosts' huggingface_hub venv (vllm_fleet_stage_download host)",
    **{("path", f"{HF_CACHE_ROOT}/{entry}"): "part of the uv units' shared Hugging Face cache (HF_HOME)"
       for entry in ("hub", "xet", "assets", "datasets", "modules", "token", "stored_tokens")},
}


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
    # the uv engines' venv (layout.uv_venv): the host's Python (facts; None: not read, as the CLI
    # plans) and vllm_fleet_uv_python (a role tunable the inventory may set)
    python: Optional[str] = None
    uv_python: Optional[str] = None
    # the bundle's roots on the host (layout.host_layout of its path tunables: vllm_fleet_uv_root, ...)
    layout: Dict[str, Any] = field(default_factory=lambda: host_layout({}))
    # the host's docker tunables (runtimespec.docker_tunables of vllm_fleet_docker_*): its docker
    # processes' finished container spec (docker_run)
    docker: Dict[str, Any] = field(default_factory=lambda: docker_tunables({}))
    # False (status, teardown: fit_checks off): the layout comes from the inventory alone, not
    # fitted to today's GPU count, so a host that lost a GPU still shows and tears down: a GPU
    # set naming a GPU the facts no longer list, a fixed replica count beyond today's GPUs and a
    # command needing more GPUs per node than the host reports all plan (deploy refuses them)
    fit_layout: bool = True


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


def process_name(deployment: str, *parts: str) -> str:
    """The one place container and unit names come from: ``vllm-fleet-<deployment>[-part...]``
    (the deployment name was checked against the contract's pattern; parts are the bundle's own
    words). Refuses anything else, so no caller can build a name from an unchecked value."""
    if not NAME_RE.fullmatch(deployment) or ".." in deployment or \
            not all(re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", p) for p in parts):
        raise PlanError([f"vllm_fleet_deployment: {deployment!r} {parts!r} is not a safe name"])
    return "-".join(("vllm-fleet", deployment) + parts)


def host_names(host_plan: Mapping[str, Any]) -> List[Tuple[str, str, str]]:
    """Every name a host plan (``HostPlan.to_dict()``) leads to on its host, as ``(kind, name,
    what)``: each kind is one namespace of the machine (``container``: docker container names;
    ``unit``: systemd units; ``path``: files and directories, at the roles' default roots), in
    which two deployments on one machine must never meet (machines.check_names). Containers
    with their kept previous revision, units with their env files, the deployment's config
    directory, venv directory (uv / services), plan marker, revision records and HF cache: what
    deploy writes and teardown removes (playbooks/tasks/remove_deployment.yml), at the default
    roots (layout.deployment_layout; the records' directory as a placeholder)."""
    dep = str(host_plan["deployment"])
    paths = deployment_layout(host_layout({"vllm_fleet_state_dir": STATE_DIR_PLACEHOLDER}), dep)
    out: List[Tuple[str, str, str]] = []
    units = False
    for proc in host_plan.get("processes") or []:
        name = str(proc["name"])
        if proc.get("runtime") == "docker":
            out += [("container", name, "a container"),
                    ("container", name + KEPT_SUFFIX, f"the kept previous revision of {name}")]
        else:   # uv engines, services: a systemd unit and its env file
            units = True
            out += [("unit", f"{name}.service", "a systemd unit"),
                    ("path", unit_files(paths, name)["env"], f"the env file of unit {name}")]
    out.append(("path", paths["config_dir"], "the config directory"))
    if units:
        out.append(("path", paths["venv_dir"], "the venv directory"))
    out += [("path", paths["legacy_marker"], "the plan marker"),
            ("path", paths["record_dir"], "the revision records"),
            ("path", paths["hf_cache"], "the Hugging Face cache (teardown's purge removes it)"),
            ("path", paths["compile_cache"], "the compile caches (teardown's purge removes them)")]
    return out


def compile_cache_dir(deployment: str, build: Mapping[str, Any]) -> str:
    """The compile cache of one deployment's engines on one vLLM build (``build``: what makes
    the build: the image, or the package and version a venv installs): a new build gets a new
    directory, the same build the same one at every start."""
    return f"{COMPILE_CACHE_ROOT}/{deployment}/{plan_hash(dict(build))[:12]}"


def default_deployment(hf_id: str, hardware: Optional[str]) -> str:
    """Deployment name when the inventory sets none: recipe repo + hardware."""
    return slug(hf_id.split("/")[-1] + ("-" + hardware if hardware else ""))


def plan_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Slot:
    """One process placed on one host."""

    host: HostInput
    proc: Process
    phase: str                      # services | engine | router (the order they start in)
    instance_name: Optional[str]    # the engine's instance: it fails and rolls as one ("i0", "pd"); None for services
    instance_index: Optional[int]
    instance_hosts: List[str]
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
