"""The finished runtime spec of a planned process: ``docker_run``, what roles/vllm_fleet_docker
hands community.docker.docker_container as it is, and ``systemd_run``, what
roles/vllm_fleet_systemd's templates print into a unit and its env file as it is.

The planner (plan.py) gives every docker process a ``docker_run`` block made here from the
process (argv, env, the accelerator's ``container`` block, mounts, model path, compile cache),
the deployment's layout (its HF cache) and the host's docker tunables (``vllm_fleet_docker_*``,
declared once with their types and defaults in variables.py, where the contract checks them;
read once per host by :func:`docker_tunables`).
The role merges nothing and computes nothing: it resolves what only the host or the vault
knows at run time, the secrets' values (``secret_env``: env name -> the inventory variable of
the one secret table) and the device groups' GIDs (``groups``: names).

The block is not hashed (a plan's hash covers argv, env, image, ...: what it is made from), so
plans recorded before it are read as they were; a recorded revision without it (rolled back
to) gets it from today's tunables (:func:`finish_plan`).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional

from . import secret_table
from .coerce import plain
from .layout import unit_files, venv_commands
from .vllmargs import flag_values
from .variables import VARIABLES

# the container's HF cache (the image runs as root)
HF_MOUNT = "/root/.cache/huggingface"

# key -> (inventory variable, default): the contract's docker_* variables (variables.py); hf_cache's
# None: the deployment's layout hf_cache
DOCKER_TUNABLES: Dict[str, Any] = {v.name[len("docker_"):]: (v.full, v.default) for v in VARIABLES
                                   if v.name.startswith("docker_")}

_LABEL_OPT = re.compile(r"^label[=:]")
# a chat template named relative to the working directory (not absolute, not inline Jinja)
_RELATIVE_TEMPLATE = re.compile(r"^[^/{].*[.]jinja\Z")


def docker_tunables(values: Mapping[str, Any]) -> Dict[str, Any]:
    """A host's docker tunables from its variables (``values``: inventory variable -> value; a
    variable unset or null takes the default). The contract checked their values before."""
    out = {}
    for key, (var, default) in DOCKER_TUNABLES.items():
        value = values.get(var)
        out[key] = plain(default if value is None else value)
    return out


def _unique(items: Any) -> List[Any]:
    return list(dict.fromkeys(items))


def docker_run(proc: Mapping[str, Any], deployment: str, recipe: str, layout: Mapping[str, Any],
               tunables: Mapping[str, Any]) -> Dict[str, Any]:
    """The docker_container parameters of one planned docker process (``proc``: its plan dict)."""
    t = dict(docker_tunables({}), **tunables)
    block = proc.get("container") or {}
    argv = list(proc["argv"])
    shared = t["hf_cache_shared"] or None
    hf_cache = t["hf_cache"] or layout["hf_cache"]
    model_path = proc.get("model_path") or ""
    compile_cache = proc.get("compile_cache")
    mounts = list(proc.get("mounts") or [])
    volumes = ([f"{shared}:{HF_MOUNT}:ro"] if shared else [f"{hf_cache}:{HF_MOUNT}"]) \
        + ([f"{model_path}:{model_path}:ro"] if model_path.startswith("/") else []) \
        + ([f"{compile_cache}:{compile_cache}"] if compile_cache else []) \
        + [f"{m}:{m}:ro" for m in mounts] + list(t["extra_volumes"])
    opts = list(block.get("security_opts") or []) + list(t["security_opts"])
    # docker adds label=disable itself to containers with host IPC/PID or privileged (unless a
    # label option is given): asked for explicitly, the strict comparison sees what the engine has
    if (t["ipc_mode"] == "host" or t["privileged"]) and not any(_LABEL_OPT.match(o) for o in opts):
        opts.append("label=disable")
    labels = dict(t["labels"])
    labels.update({"vllm-fleet.deployment": deployment, "vllm-fleet.recipe": recipe,
                   "vllm-fleet.role": proc.get("role") or "", "vllm-fleet.plan-hash": proc.get("hash") or ""})
    env = dict(block.get("env") or {})
    env.update(proc.get("env") or {})
    port = proc.get("port")
    return {
        "name": proc["name"], "image": proc.get("image"), "pull": t["pull"],
        "entrypoint": argv[:2], "command": argv[2:],
        "env": env,
        # env name -> the inventory variable holding its value (the one secret table)
        "secret_env": {name: secret_table.BY_ENV[name].var for name in proc.get("secret_env") or []},
        "ipc_mode": t["ipc_mode"], "network_mode": t["network_mode"],
        "published_ports": [f"{port}:{port}"] if t["network_mode"] == "bridge" and port else [],
        "volumes": volumes,
        # the host directories it needs: created (the deployment's HF cache, the compile cache),
        # or present already (a shared HF cache, mounted read-only: it must be filled first)
        "dirs": ([] if shared else [hf_cache]) + ([compile_cache] if compile_cache else []),
        "dirs_present": [shared] if shared else [],
        # NVIDIA: all GPUs, or a GPU set's device_ids; ROCm: /dev/kfd + /dev/dri, or a GPU set's
        # own render nodes; a CPU replica: its own cores
        "device_requests": list(block.get("device_requests") or []),
        "devices": list(block.get("devices") or []),
        "cpuset_cpus": block.get("cpuset_cpus") or None,
        "shm_size": block.get("shm_size") or None,
        # names: docker resolves group names inside the image, so the role hands it the host's GIDs
        "groups": list(block.get("groups") or []),
        "security_opts": _unique(opts),
        "cap_drop": [] if t["privileged"] else list(t["cap_drop"]),
        # NET_BIND_SERVICE for a server on a port below 1024 (vllm_fleet_privileged_ports)
        "capabilities": _unique(list(t["cap_add"]) + list(proc.get("capabilities") or [])),
        "privileged": bool(t["privileged"]),
        "restart_policy": t["restart_policy"],
        # a vLLM server stopping gracefully (--shutdown-timeout) gets that long and a margin
        "stop_timeout": int(proc.get("stop_timeout") or t["stop_timeout"]),
        "labels": labels,
    }


# a service unit's PATH after its venv's bin/ (vllm-router, mooncake_master: their console scripts)
SERVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def systemd_run(proc: Mapping[str, Any], layout: Mapping[str, Any], venv: Any,
                unit_default: Any) -> Dict[str, Any]:
    """The finished unit of one planned systemd process (a uv engine, runtime uv, or a service:
    vllm-router, Mooncake), what roles/vllm_fleet_systemd's templates print as it is:
    ``exec_start`` (argv[0] from the venv's bin/ unless absolute: the uv engines' venv ``venv``,
    the services' layout.services_venv; a plain router: its command without the workers, which
    the unit appends from its .workers file), ``env`` (the unit block's env, the accelerator's,
    under the process's own; a service: PATH with its venv first, under both), ``fixed_env``
    (written after env, so it wins: a uv engine's HF_HOME, the deployment's HF cache) and
    ``groups`` (the unit block's, by name: the host keeps those it has), ``files`` (its unit, env
    and worker-list files: layout.unit_files), ``workdir`` (its working directory), ``home`` (the
    service user's home: a uv engine's or a service's), ``hidden`` (the env files' directory,
    an empty tmpfs in the sandboxed unit's view) and ``requires`` (the chat templates its argv
    names relative to the working directory, as paths there: the uv preflight checks they exist;
    recipes name them inside the official image's /vllm-workspace). ``unit_default``: the unit
    block of a uv engine that has none (a revision recorded before processes carried it)."""
    service = proc.get("runtime") == "service"
    root = layout["services_venv"] if service else venv
    block = proc.get("unit")
    if block is None:
        block = {} if service else (unit_default or {})
    argv = list((proc.get("membership") or {}).get("argv") or proc["argv"])
    env: Dict[str, Any] = {"PATH": f"{root}/bin:{SERVICE_PATH}"} if service else {}
    env.update(block.get("env") or {})
    env.update(proc.get("env") or {})
    templates = [] if service else [v for v in flag_values(proc["argv"], "--chat-template")
                                    if _RELATIVE_TEMPLATE.match(v)]
    return {"exec_start": ([argv[0]] if argv[0].startswith("/") else [f"{root}/bin/{argv[0]}"]) + argv[1:],
            "env": env, "fixed_env": {} if service else {"HF_HOME": layout["hf_cache_shared"]},
            "groups": list(block.get("groups") or []), "files": unit_files(layout, proc["name"]),
            "workdir": layout["workdir"], "home": layout["services_home" if service else "uv_home"],
            "hidden": layout["env_dir"], "requires": _unique(f"{layout['workdir']}/{v}" for v in templates)}


def attach(processes: List[Any], deployment: str, recipe: str, layout: Mapping[str, Any],
           tunables: Mapping[str, Any], venv: Any = None, unit_default: Any = None) -> None:
    """Give each docker process (hostplan.PlannedProcess, its hash set) its ``docker_run``, each
    uv engine and service its ``systemd_run`` (``venv``: the uv engines' venv path;
    ``unit_default``: the accelerator's unit block)."""
    for proc in processes:
        if proc.runtime == "docker":
            proc.docker_run = docker_run(proc.to_dict(), deployment, recipe, layout, tunables)
        elif proc.runtime in ("uv", "service"):
            proc.systemd_run = systemd_run(proc.to_dict(), layout, venv, unit_default)


def finish_plan(plan: Mapping[str, Any], tunables: Mapping[str, Any],
                today: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """A recorded plan (a revision rolled back to, a uv revision put back) made whole for today's
    roles: the controller's half of reading old records (records.todays_plan, on the host, gives
    old keys today's names). What a plan recorded before today's fields lacks comes from today:
    ``today`` (this host's plan of this run) gives the accelerator_setup block and the layout
    entries it lacks (the same host, the same roots); a venv gets its commands; a docker process
    its ``docker_run`` from today's docker tunables (``tunables``: the host's inventory variables),
    a uv engine or service its ``systemd_run`` (or the entries its recorded one lacks) from the
    recorded process, layout, venv and accelerator unit block. What was recorded is kept as it ran."""
    out = dict(plan)
    if today:
        if out.get("accelerator_setup") is None and today.get("accelerator_setup") is not None:
            out["accelerator_setup"] = today["accelerator_setup"]
        out["layout"] = dict(today.get("layout") or {}, **(out.get("layout") or {}))
    if out.get("venv"):
        out["venv"] = dict(venv_commands(out["venv"]), **out["venv"])
    venv = (out.get("venv") or {}).get("path")
    unit_default = (out.get("accelerator_setup") or {}).get("unit")
    processes = []
    for p in out.get("processes") or []:
        if p.get("runtime") == "docker" and not p.get("docker_run"):
            p = dict(p, docker_run=docker_run(p, out["deployment"], out["recipe"], out["layout"],
                                              docker_tunables(tunables)))
        elif p.get("runtime") in ("uv", "service"):
            # what was recorded wins; what it lacks (all of it, or the entries added since) is made now
            p = dict(p, systemd_run=dict(systemd_run(p, out["layout"], venv, unit_default), **(p.get("systemd_run") or {})))
        processes.append(p)
    out["processes"] = processes
    return out
