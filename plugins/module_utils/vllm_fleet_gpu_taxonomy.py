# -*- coding: utf-8 -*-
"""From gathered GPU facts to a taxonomy hardware id (``recipes/taxonomy.yaml``,
``hardware_profiles``): the id list, the choice among the per-brand mappings
(``vllm_fleet_gpu_nvidia.map_nvidia``, ``vllm_fleet_gpu_amd.map_amd``,
``vllm_fleet_gpu_host.map_cpu``), the unknown / mixed GPU errors, and the facts' final
``hardware`` / ``detected`` with the warnings an explicit ``hardware`` option gets.

Pure and stdlib only; modules import it as ``ansible.module_utils.vllm_fleet_gpu_taxonomy``."""

from __future__ import absolute_import, division, print_function

from ansible.module_utils.vllm_fleet_gpu_amd import map_amd
from ansible.module_utils.vllm_fleet_gpu_host import CPU_IDS, map_cpu
from ansible.module_utils.vllm_fleet_gpu_nvidia import map_nvidia

__metaclass__ = type

# ----------------------------------------------------------------------------------------------
# Taxonomy hardware ids (recipes/taxonomy.yaml, hardware_profiles, in file order)
# ----------------------------------------------------------------------------------------------

HARDWARE_IDS = (
    "h100", "h200", "b200", "gb200", "b300", "gb300", "dgx_station_gb300", "dgx_spark_gb10",
    "rtx_pro_6000", "rtx_pro_6000_2x", "rtx_pro_5000", "rtx_pro_5000_4x", "rtx_pro_6000_8x",
    "rtx_5090", "rtx_4090_2x", "rtx_5090_2x", "mi300x", "mi325x", "mi355x", "trillium", "ironwood",
    "xeon6", "xeon5", "arc_pro_b60", "arc_pro_b70", "ascend_950pr",
)


class HardwareError(Exception):
    """The host's GPUs cannot be mapped to a taxonomy id (message is user-facing)."""


def unknown_gpu_message(name, count, hint=""):
    return ("unknown GPU '%s' x%d on this host%s: set vllm_fleet_hardware to one of: %s"
            % (name, count, hint, ", ".join(HARDWARE_IDS)))


def detect_hardware(facts, gpus=None):
    """Taxonomy id for gathered facts; raises HardwareError for GPUs that do not map.
    CPU-only hosts give the Xeon id or None. `gpus` (AMD): per-GPU dicts with name,
    device_id and gfx_target; by default the facts' first device id / gfx target apply to all."""
    brand = facts.get("brand")
    names = list(facts.get("names") or [])
    if brand not in ("nvidia", "amd"):
        return map_cpu(facts.get("cpu_model")) if brand == "cpu" else None
    groups = []  # [[name, count]] in first-seen order
    for name in names:
        for group in groups:
            if group[0] == name:
                group[1] += 1
                break
        else:
            groups.append([name, 1])
    if not groups:
        return None
    memory = list(facts.get("memory_mib") or []) + [None] * len(names)
    if brand == "amd" and gpus is None:
        gpus = [{"name": n, "device_id": facts.get("device_id"), "gfx_target": facts.get("gfx_target")}
                for n in names]
    found = []
    for name, count in groups:
        if brand == "nvidia":
            mems = [m for n, m in zip(names, memory) if n == name and m is not None]
            hw, hint = map_nvidia(name, count, min(mems) if mems else None)
        else:
            ids = set(map_amd(g.get("name"), g.get("device_id"), g.get("gfx_target"))
                      for g in gpus if (g.get("name") or "") == name)
            hw, hint = (ids.pop() if len(ids) == 1 else None), ""
        if hw is None:
            label = name or ("unnamed AMD GPU %s" % (facts.get("device_id") or "")).strip()
            raise HardwareError(unknown_gpu_message(label, count, hint))
        if hw not in found:
            found.append(hw)
    if len(found) > 1:
        raise HardwareError("mixed GPUs on this host (%s): set vllm_fleet_hardware to one of: %s"
                            % (", ".join("'%s' x%d" % tuple(g) for g in groups), ", ".join(HARDWARE_IDS)))
    return found[0]


def resolve(facts, hardware=None, require_gpu=False):
    """Finish the facts: pick the hardware id. Returns (facts, warnings); raises HardwareError."""
    warnings = []
    if require_gpu and facts["brand"] not in ("nvidia", "amd"):
        raise HardwareError("no NVIDIA or AMD GPU found on this host (require_gpu is set): %s"
                            % "; ".join(facts["probe_notes"] or ["no GPU tool"]))
    try:
        detected = detect_hardware(facts, facts.get("_gpus"))
        problem = None
    except HardwareError as exc:
        detected, problem = None, str(exc)
    facts["detected_hardware"] = detected
    if hardware:
        facts.update(hardware=hardware, detected=False)
        if hardware not in HARDWARE_IDS:
            warnings.append("hardware %r is not a built-in taxonomy id (%s); make sure your "
                            "taxonomy defines it" % (hardware, ", ".join(HARDWARE_IDS)))
        # a TPU/XPU/NPU host only shows its CPU: no point in comparing with that
        cpu_only = facts["brand"] == "cpu" and hardware not in CPU_IDS
        if detected and detected != hardware and not cpu_only:
            warnings.append("hardware is set to %r but this host looks like %r (%s)"
                            % (hardware, detected, describe(facts)))
        elif problem:
            warnings.append("using hardware %r as given; the probe could not map this host: %s"
                            % (hardware, problem.split(": set vllm_fleet_hardware")[0]))
    else:
        if problem:
            raise HardwareError(problem)
        facts.update(hardware=detected, detected=detected is not None)
    facts.pop("_gpus", None)
    return facts, warnings


def describe(facts):
    if facts["brand"] in ("nvidia", "amd"):
        return "%d x %s" % (facts["count"], ", ".join(sorted(set(facts["names"]))))
    return facts.get("cpu_model") or "no GPU"
