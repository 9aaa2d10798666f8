"""A host's accelerator readiness (vllm_fleet_cuda, vllm_fleet_rocm): the rules, pure.

The module ``vllm_fleet_accelerator_ready`` reads the host once (``probe_cuda`` / ``probe_rocm``,
given the module's command runner and the file system) and these rules turn the readings, the
GPU facts (``vllm_fleet_gpu_facts``, read in the planning play) and the host's plan into the
problems that refuse the host and the warnings that do not. Nothing here imports Ansible.

Each problem is one sentence that says what is wrong and what to do; the module prefixes the
host's name.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .hostplan import ENGINE_KINDS

WORDS = {"cuda": "CUDA", "rocm": "ROCm", "cpu": "CPU", "xpu": "XPU", "tpu": "TPU"}
CDI_GLOBS = ("/etc/cdi/nvidia*.yaml", "/etc/cdi/nvidia*.json", "/var/run/cdi/nvidia*.yaml", "/var/run/cdi/nvidia*.json")
NVIDIA_HOOKS = ("nvidia-container-runtime-hook", "nvidia-container-runtime", "nvidia-ctk")
AITER_GFX = ("gfx942", "gfx950")
TRUE_WORDS = ("1", "true", "True", "TRUE")

Run = Callable[[List[str]], Tuple[int, str, str]]


def engines(plan: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    return [p for p in plan.get("processes") or [] if p.get("kind") in ENGINE_KINDS]


def settings_problem(plan: Mapping[str, Any], accelerator: str) -> Optional[str]:
    """The plan carries the settings the runtime roles read (a plan an older vllm-fleet recorded does not)."""
    setup = plan.get("accelerator_setup")
    ok = (isinstance(setup, Mapping) and setup.get("name") == accelerator
          and all("container" in e for e in engines(plan) if e.get("runtime") == "docker")
          and all("unit" in e for e in engines(plan) if e.get("runtime") == "uv"))
    if ok:
        return None
    return (f"the plan of {plan.get('deployment', '?')} carries no {WORDS.get(accelerator, accelerator)} settings "
            "(the accelerator_setup block, each engine's container / unit block): it was made by an older "
            "vllm-fleet. Deploy with deploy.yml (today's inventory) instead of rolling back to that revision.")


def needs_container_runtime(plan: Mapping[str, Any]) -> bool:
    return any(e.get("runtime") == "docker" for e in engines(plan))


def modes_used(plan: Mapping[str, Any], gpu: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    """The GPU facts' per-GPU modes of the GPUs the plan's engines use (an engine without a GPU set uses all)."""
    modes = [m for m in (gpu.get("modes") or []) if isinstance(m, Mapping)]
    eng = engines(plan)
    sets = [e["gpus"] for e in eng if e.get("gpus") is not None]
    if len(sets) < len(eng):
        return modes
    used = {i for s in sets for i in s}
    return [m for m in modes if m.get("index") in used]


def nvswitch(gpu: Mapping[str, Any]) -> bool:
    """8+ GPUs every pair of which is an NVLink word (NV18 ...), or a GPU fabric state in the facts."""
    links = ((gpu.get("topology") or {}) if isinstance(gpu.get("topology"), Mapping) else {}).get("links") or []
    all_nvlink = len(links) >= 8 and all(w == "X" or str(w).startswith("NV") for row in links for w in row)
    fabric = [((m.get("fabric") or {}) if isinstance(m.get("fabric"), Mapping) else {}).get("state", "N/A")
              for m in (gpu.get("modes") or []) if isinstance(m, Mapping)]
    return all_nvlink or any(s not in ("N/A", "", None) for s in fabric)


def probe_cuda(run: Run, plan: Mapping[str, Any], gpu: Mapping[str, Any], check_fabricmanager: bool) -> Dict[str, Any]:
    """One read of what the CUDA checks need: the driver, the container runtime (docker engines
    only), the fabric manager (NVSwitch systems only)."""
    out: Dict[str, Any] = {}
    rc, so, se = run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    out["driver"] = {"rc": rc, "output": (se or so or "").strip()[:300]}
    if needs_container_runtime(plan):
        rc, so, se = run(["docker", "info", "--format", "{{json .Runtimes}}"])
        try:
            runtimes = json.loads(so) if rc == 0 and so.strip().startswith("{") else None
        except ValueError:
            runtimes = None
        out["docker"] = {"runtimes": sorted(runtimes) if isinstance(runtimes, dict) else None,
                         "answer": (so or se or "no answer").strip()[:300]}
        out["cdi"] = sorted(p for g in CDI_GLOBS for p in glob.glob(g))
        out["hook"] = next((p for p in map(shutil.which, NVIDIA_HOOKS) if p), None)
    if check_fabricmanager and gpu.get("brand") == "nvidia" and nvswitch(gpu):
        rc, so, se = run(["systemctl", "is-active", "nvidia-fabricmanager"])
        out["fabricmanager"] = (so or "").strip() or (se or "").strip() or "not known"
    return out


def cuda_findings(probe: Mapping[str, Any], plan: Mapping[str, Any], gpu: Mapping[str, Any],
                  allow_mig: bool) -> Tuple[List[str], List[str]]:
    problems: List[str] = []
    warnings: List[str] = []
    driver = probe.get("driver") or {}
    if driver.get("rc") != 0:
        problems.append(f"nvidia-smi failed: {driver.get('output') or 'no output'} "
                        "(the NVIDIA driver is not loaded or not installed)")
    docker = probe.get("docker")
    if docker is not None and "nvidia" not in (docker.get("runtimes") or []) and not probe.get("cdi") \
            and not probe.get("hook"):
        problems.append(
            f"docker cannot hand NVIDIA GPUs to containers: the engine has no nvidia runtime (docker info: "
            f"{docker.get('answer')}), there is no CDI spec (/etc/cdi/nvidia.yaml, /etc/cdi/nvidia.json, "
            "/var/run/cdi/nvidia*.yaml) and no nvidia-container-runtime-hook on PATH. Install "
            "nvidia-container-toolkit and run `nvidia-ctk runtime configure --runtime=docker` "
            "(or `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`).")
    if gpu.get("brand") != "nvidia":
        return problems, warnings
    fm = probe.get("fabricmanager")
    if fm is not None and fm != "active":
        links = ((gpu.get("topology") or {}).get("links") or [])
        word = links[0][1] if links and len(links[0]) > 1 else "fabric state " + next(
            (str((m.get("fabric") or {}).get("state")) for m in gpu.get("modes") or [] if isinstance(m, Mapping)), "?")
        problems.append(
            f"NVSwitch system ({gpu.get('count', '?')} GPUs, {word} links) but nvidia-fabricmanager is {fm}: "
            "without it CUDA cannot initialise the GPUs. Install and start it (systemctl enable --now "
            f"nvidia-fabricmanager, the package matching driver {gpu.get('driver_version', '?')}), or set "
            "vllm_fleet_cuda_check_fabricmanager false where the fabric is managed elsewhere.")
    used = modes_used(plan, gpu)
    off = [str(m.get("index")) for m in used if m.get("persistence_mode") == "Disabled"]
    if off:
        warnings.append(
            f"persistence mode is Disabled on GPU(s) {', '.join(off)}: the driver tears the GPU state down when "
            "no process holds it (slower starts, lost settings); enable it (nvidia-persistenced, or nvidia-smi -pm 1).")
    for m in used:
        i = m.get("index")
        if not allow_mig and m.get("mig_mode") == "Enabled":
            problems.append(
                f"GPU {i} is in MIG mode (mig_mode Enabled) and the plan uses it (vllm-fleet hands out whole GPUs): "
                f"disable MIG (nvidia-smi -i {i} -mig 0, then reset the GPU), leave the GPU out (vllm_fleet_gpus), "
                "or set vllm_fleet_cuda_allow_mig true.")
        if m.get("compute_mode", "Default") not in ("Default", "N/A", None):
            problems.append(f"GPU {i} is in compute mode {m.get('compute_mode')}, vLLM needs Default (several "
                            f"processes open each GPU): nvidia-smi -i {i} -c DEFAULT.")
    return problems, warnings


def rocm_nodes(plan: Mapping[str, Any]) -> List[str]:
    nodes = ["/dev/kfd", "/dev/dri"] + [d for e in engines(plan) for d in (e.get("devices") or [])]
    return list(dict.fromkeys(nodes))


def probe_rocm(plan: Mapping[str, Any], check_amdgpu: bool, exists: Callable[[str], bool] = os.path.exists,
               groups: Optional[Callable[[], Dict[str, List[str]]]] = None) -> Dict[str, Any]:
    out: Dict[str, Any] = {"nodes": {n: exists(n) for n in rocm_nodes(plan)}}
    if check_amdgpu:
        out["amdgpu"] = exists("/sys/module/amdgpu")
    if any(e.get("runtime") == "uv" for e in engines(plan)):
        out["groups"] = (groups or host_groups)()
    return out


def host_groups() -> Dict[str, List[str]]:
    """The host's groups and their members (NSS, as getent group reads them)."""
    import grp
    return {g.gr_name: list(g.gr_mem) for g in grp.getgrall()}


def _engine_env(e: Mapping[str, Any]) -> Dict[str, Any]:
    block = e.get("container") or e.get("unit") or {}
    return {**(block.get("env") or {}), **(e.get("env") or {})}


def rocm_findings(probe: Mapping[str, Any], plan: Mapping[str, Any], gpu: Mapping[str, Any],
                  uv_user: Optional[str], uv_user_groups: Sequence[str]) -> Tuple[List[str], List[str]]:
    problems: List[str] = []
    if probe.get("amdgpu") is False:
        problems.append("the amdgpu kernel module is not loaded (no /sys/module/amdgpu): install the AMD GPU "
                        "driver (amdgpu-dkms) and load it (modprobe amdgpu)")
    for node, present in (probe.get("nodes") or {}).items():
        if not present:
            what = " (a render node the plan hands out)" if node.startswith("/dev/dri/render") else ""
            problems.append(f"{node} is missing{what}: the amdgpu driver (ROCm) is not loaded or the GPU is absent")
    groups = probe.get("groups")
    if groups is not None and uv_user not in ("", "root", None):
        for g in ("render", "video"):
            if g not in groups:
                problems.append(f"the uv engines' user {uv_user} needs group {g} (/dev/kfd and /dev/dri/renderD* "
                                f"belong to render, /dev/dri/card* to video): the host has no group {g} (the amdgpu "
                                "driver packages create it)")
            elif g not in uv_user_groups and uv_user not in groups[g]:
                problems.append(f"the uv engines' user {uv_user} needs group {g} (/dev/kfd and /dev/dri/renderD* "
                                f"belong to render, /dev/dri/card* to video): the user is not in it and "
                                f"vllm_fleet_uv_user_groups ({', '.join(uv_user_groups)}) does not add it")
    gfx = gpu.get("gfx_target") or ""
    if gfx not in ("",) + AITER_GFX:
        for e in engines(plan):
            aiter = str(_engine_env(e).get("VLLM_ROCM_USE_AITER", ""))
            if aiter in TRUE_WORDS:
                problems.append(
                    f"{e.get('name')} sets VLLM_ROCM_USE_AITER={aiter}, but this host's GPUs are {gfx}: AITER's "
                    "kernels are built for gfx942 / gfx950 (MI300X, MI325X, MI355X); set vllm_fleet_rocm_aiter: false "
                    "(and drop VLLM_ROCM_USE_AITER from vllm_fleet_rocm_env / vllm_fleet_env)")
    return problems, []
