#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: vllm-fleet contributors
# Apache License 2.0 (see pyproject.toml)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_fleet_gpu_facts
short_description: Detect a host's GPUs (or Xeon CPU) and map them to a vllm-fleet taxonomy hardware id
description:
  - Runs on the target host and reads, in this order, C(nvidia-smi), C(amd-smi), C(rocm-smi) and
    finally C(/proc/cpuinfo); the first tool that reports at least one GPU wins.
  - Maps what it found to a hardware profile id of the recipe taxonomy (C(recipes/taxonomy.yaml),
    C(hardware_profiles)), for example C(h200), C(gb200), C(rtx_pro_6000_2x), C(mi300x) or C(xeon6).
  - NVIDIA GPUs are matched by marketing name (C(H200) before C(H100), C(GB200) before C(B200),
    C(GB300) before C(B300)); the fixed-size workstation profiles (RTX PRO 6000/5000, RTX 5090,
    RTX 4090) also need the matching GPU count.
  - AMD GPUs are matched by PCI device id and gfx target (MI300X C(0x74a1)/C(0x74b5) gfx942,
    MI325X C(0x74a5)/C(0x74b9) gfx942, MI355X C(0x75a3)/C(0x75b3) gfx950), with the market name as
    a fallback.
  - Without a GPU, an Intel Xeon 6 or 5th gen Xeon Scalable CPU maps to C(xeon6) or C(xeon5).
  - A GPU the module cannot map fails the task with a message naming the GPU and the valid ids,
    unless O(hardware) is given. A CPU-only host with an unknown CPU is not an error (unless
    O(require_gpu) is set); its hardware is then null.
  - Google TPUs, Intel Arc Pro XPUs and Huawei Ascend NPUs are not detected; set O(hardware)
    explicitly for them.
  - Where the GPUs run replicas, it also reads how they are connected (C(nvidia-smi topo -m),
    C(amd-smi topology --json) with C(amd-smi static --numa --json)) and, on AMD, the render node
    of every GPU (C(amd-smi list -e --json), ROCm 6.4 and later; else the C(drm_render_minor) of
    the GPU's KFD node under C(/sys/class/kfd/kfd/topology/nodes)). A tool that fails or prints
    something it cannot read only leaves RV(ansible_facts.vllm_fleet_gpu.topology) or
    RV(ansible_facts.vllm_fleet_gpu.render_nodes) out; it is never an error.
  - On every host it reports the CPUs the module may run on and their NUMA nodes
    (C(/sys/devices/system/node)), what CPU replicas are split along.
  - Never changes anything on the host.
version_added: "0.1.0"
author:
  - vllm-fleet contributors
options:
  hardware:
    description:
      - Explicit taxonomy hardware id for this host (usually C(vllm_fleet_hardware)).
      - When set the module never guesses and never fails on an unknown GPU; it still probes the
        host, reports what it saw, and warns when the probe maps to a different id.
    type: str
  nvidia_smi_path:
    description:
      - Path of C(nvidia-smi). Default is to look it up in E(PATH) (and the sbin directories).
    type: path
  amd_smi_path:
    description:
      - Path of C(amd-smi). Default is to look it up in E(PATH) and C(/opt/rocm/bin).
    type: path
  rocm_smi_path:
    description:
      - Path of the legacy C(rocm-smi). Default is to look it up in E(PATH) and C(/opt/rocm/bin).
    type: path
  require_gpu:
    description:
      - Fail when no NVIDIA or AMD GPU is found (a CPU-only host, or a GPU tool that cannot talk
        to its driver).
    type: bool
    default: false
  health:
    description:
      - Also read the GPUs' health (RV(ansible_facts.vllm_fleet_gpu.health)). Reading the kernel
        log needs root (or C(CAP_SYSLOG)) where C(kernel.dmesg_restrict) is set.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
notes:
  - Commands run as argv lists (no shell). Nothing is installed or changed.
  - C(MB) in C(amd-smi) output is read as MiB, which is what the tool means.
seealso:
  - name: vllm-fleet taxonomy
    description: The hardware profile ids are the keys of C(hardware_profiles) in C(recipes/taxonomy.yaml).
    link: https://github.com/vllm-project/recipes
"""

EXAMPLES = r"""
- name: Detect the GPU hardware of each host
  vllm_fleet_gpu_facts:

- name: Use the inventory's explicit choice when there is one, and insist on a GPU
  vllm_fleet_gpu_facts:
    hardware: "{{ vllm_fleet_hardware | default(omit) }}"
    require_gpu: true

- name: A ROCm install outside PATH
  vllm_fleet_gpu_facts:
    amd_smi_path: /opt/rocm-7.0.2/bin/amd-smi

- name: Show what was found
  ansible.builtin.debug:
    msg: "{{ ansible_facts.vllm_fleet_gpu.hardware }}: {{ ansible_facts.vllm_fleet_gpu.count }} x
      {{ ansible_facts.vllm_fleet_gpu.names | first | default('no GPU') }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    vllm_fleet_gpu:
      description: What the host has and the taxonomy hardware id it maps to.
      returned: always
      type: dict
      contains:
        brand:
          description: Who made the chip. C(nvidia) or C(amd) when a GPU tool reported GPUs, else
            C(cpu) when the CPU model could be read, else C(none).
          type: str
          sample: nvidia
        hardware:
          description: Taxonomy hardware id; the O(hardware) option when given, else the detected
            id; null when nothing matched (CPU-only hosts only, an unknown GPU fails).
          type: str
          sample: h200
        detected:
          description: True when RV(ansible_facts.vllm_fleet_gpu.hardware) was derived from the
            host itself, false when it was given as O(hardware) or nothing matched.
          type: bool
          sample: true
        detected_hardware:
          description: The id the probe maps to, whatever O(hardware) says (null when none).
          type: str
          sample: h200
        count:
          description: Number of GPUs (0 without a GPU).
          type: int
          sample: 8
        names:
          description: Marketing name of every GPU, in tool order.
          type: list
          elements: str
          sample: ["NVIDIA H200", "NVIDIA H200"]
        memory_mib:
          description: Memory of every GPU in MiB (null for a GPU that does not report it, such as
            the unified memory of a GB10).
          type: list
          elements: int
          sample: [143771, 143771]
        total_memory_gib:
          description: Sum of RV(ansible_facts.vllm_fleet_gpu.memory_mib) in GiB, one decimal; null
            when no GPU reports memory.
          type: float
          sample: 1123.2
        driver_version:
          description: NVIDIA driver or amdgpu kernel driver version.
          type: str
          sample: 570.133.20
        cuda_version:
          description: Highest CUDA version the NVIDIA driver supports (C(CUDA Version) of nvidia-smi).
          type: str
          sample: "12.8"
        rocm_version:
          description: ROCm release (from C(amd-smi version), else C(/opt/rocm/.info/version)).
          type: str
          sample: 6.4.0
        gfx_target:
          description: AMD gfx target of the first GPU.
          type: str
          sample: gfx942
        device_id:
          description: PCI device id of the first AMD GPU, lower-case hex.
          type: str
          sample: "0x74a1"
        bus_ids:
          description: PCI bus id of every GPU, when the tool reports it.
          type: list
          elements: str
          sample: ["00000000:18:00.0"]
        cpu_model:
          description: The C(model name) line of C(/proc/cpuinfo) (null when absent).
          type: str
          sample: Intel(R) Xeon(R) 6980P
        source:
          description: Which probe produced the result, C(nvidia-smi), C(amd-smi), C(rocm-smi),
            C(/proc/cpuinfo), or null.
          type: str
          sample: nvidia-smi
        probe_notes:
          description: Why earlier probes were skipped or failed (tool missing, driver not loaded).
          type: list
          elements: str
          sample: ["nvidia-smi: not found"]
        topology:
          description:
            - How the GPUs are connected, indexed by GPU index as the tool numbers them.
            - C(links) is an n x n matrix of link words, C(X) on the diagonal. NVIDIA (C(nvidia-smi
              topo -m)) C(NV4), C(NV18), ... (a bonded set of that many NVLinks), C(PIX), C(PXB),
              C(PHB), C(NODE), C(SYS); AMD (C(amd-smi topology)) C(XGMI), C(PCIE), C(UNKNOWN).
              NIC rows and columns are left out.
            - C(numa) is the NUMA node of every GPU (null where the tool does not say).
          returned: when the GPU tool printed a complete matrix of all RV(ansible_facts.vllm_fleet_gpu.count) GPUs
          type: dict
          sample: {"links": [["X", "NV4"], ["NV4", "X"]], "numa": [0, 1]}
        render_nodes:
          description: The DRM render node of every AMD GPU, indexed by GPU index.
          returned: AMD GPUs, when every GPU maps to its own render node
          type: list
          elements: str
          sample: ["/dev/dri/renderD128", "/dev/dri/renderD129"]
        cpus:
          description: The CPU ids the module may run on (its scheduler affinity), sorted.
          returned: always
          type: list
          elements: int
          sample: [0, 1, 2, 3, 4, 5, 6, 7]
        numa_nodes:
          description: NUMA node (as a string) -> its usable CPU ids (nodes without one left out);
            one node C("0") with every usable CPU where the kernel shows no NUMA nodes.
          returned: always
          type: dict
          sample: {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}
        health:
          description:
            - With O(health), one verdict per GPU (C(healthy), C(degraded), C(failed)) with its
              evidence, the sources that answered (C(read)) and those that did not (C(notes)).
            - NVIDIA from C(nvidia-smi -q -x) (ECC, retired pages, remapped rows, clocks event
              reasons) and the XID lines of the kernel log since boot (C(dmesg), else
              C(journalctl -k -b)); AMD from C(amd-smi metric --ecc --json) and
              C(amd-smi xgmi --link-status --json). The rules are in module_utils
              C(vllm_fleet_gpu_health). C(gpus) is empty when no source answered.
          returned: with O(health), when a GPU tool reported GPUs
          type: dict
          sample: {"gpus": [{"index": 3, "state": "failed", "evidence": ["XID 79 in the kernel log: GPU has fallen off the bus"]}],
                   "read": ["nvidia-smi -q -x", "dmesg"], "notes": []}
        modes:
          description: Persistence mode, MIG mode, compute mode and fabric state of every NVIDIA GPU
            (from C(nvidia-smi -q -x)), by GPU index.
          returned: with O(health), NVIDIA GPUs
          type: list
          elements: dict
          sample: [{"index": 0, "persistence_mode": "Enabled", "mig_mode": "Disabled", "compute_mode": "Default",
                    "fabric": {"state": "Completed", "status": "Success"}}]
"""

import csv
import os
import re

from ansible.module_utils.vllm_fleet_smi import amd_items as _amd_items, clean as _clean, load_json
from ansible.module_utils.vllm_fleet_gpu_health import (
    bus_index, parse_amd_smi_ecc_json, parse_amd_smi_xgmi, parse_nvidia_query_xml, parse_xid_lines, verdict)

# ----------------------------------------------------------------------------------------------
# Taxonomy hardware ids (recipes/taxonomy.yaml, hardware_profiles, in file order)
# ----------------------------------------------------------------------------------------------

HARDWARE_IDS = (
    "h100", "h200", "b200", "gb200", "b300", "gb300", "dgx_station_gb300", "dgx_spark_gb10",
    "rtx_pro_6000", "rtx_pro_6000_2x", "rtx_pro_5000", "rtx_pro_5000_4x", "rtx_pro_6000_8x",
    "rtx_5090", "rtx_4090_2x", "rtx_5090_2x", "mi300x", "mi325x", "mi355x", "trillium", "ironwood",
    "xeon6", "xeon5", "arc_pro_b60", "arc_pro_b70", "ascend_950pr",
)

NVIDIA_QUERY_FIELDS = "index,name,memory.total,driver_version,pci.bus_id"
NVIDIA_QUERY = ["--query-gpu=" + NVIDIA_QUERY_FIELDS, "--format=csv,noheader,nounits"]
# amd-smi fails the whole command when an explicitly requested section is unsupported (a VF,
# an old release without --vram), so fewer sections are tried before giving up.
AMD_SMI_STATIC = (["static", "--asic", "--vram", "--driver", "--bus", "--json"],
                  ["static", "--asic", "--vram", "--driver", "--json"],
                  ["static", "--asic", "--vram", "--json"],
                  ["static", "--asic", "--json"])
AMD_SMI_VERSION = ["version", "--json"]
ROCM_SMI_QUERY = (["--showproductname", "--showid", "--showmeminfo", "vram", "--showdriverversion", "--json"],
                  ["--showproductname", "--showmeminfo", "vram", "--json"],
                  ["--showproductname", "--json"])
# "there is no AMD GPU" answers: no point in retrying with fewer sections
NO_AMD_GPU = re.compile(r"unable to detect any gpu|no amd gpus?\b|amdgpu .*not (?:loaded|found)|"
                        r"driver not (?:loaded|initialized)|driver not found", re.I)
ROCM_OPT_DIRS = ["/opt/rocm/bin"]
ROCM_VERSION_FILE = "/opt/rocm/.info/version"
CPUINFO = "/proc/cpuinfo"
# GPU topology and device nodes (read only after the GPUs were found; a failure there only
# leaves the key out)
NVIDIA_TOPO = ["topo", "-m"]
# GPU health (health=true): NVIDIA's XML log (ECC, retired pages, remapped rows, clocks event
# reasons, modes), the kernel log's XID lines since boot, AMD's ECC/RAS counters and XGMI links
NVIDIA_HEALTH = ["-q", "-x"]
KERNEL_LOG = (("dmesg", []), ("journalctl", ["-k", "-b", "--no-pager", "-q", "-o", "short-monotonic"]))
AMD_SMI_ECC = ["metric", "--ecc", "--json"]
AMD_SMI_XGMI = ["xgmi", "--link-status", "--json"]
AMD_SMI_TOPOLOGY = ["topology", "--json"]
AMD_SMI_NUMA = ["static", "--numa", "--json"]
# `list -e` (ROCm >= 6.4, amd-smi 25.3) adds RENDER/CARD/HSA_ID/HIP_ID per GPU; older releases
# refuse -e, then the KFD topology in sysfs maps node_id -> drm_render_minor.
AMD_SMI_LIST_ENUM = ["list", "-e", "--json"]
AMD_SMI_LIST = ["list", "--json"]
KFD_NODE_PROPERTIES = "/sys/class/kfd/kfd/topology/nodes/%s/properties"
RENDER_NODE = "/dev/dri/renderD%d"
# CPU cores and NUMA nodes (every host)
NUMA_NODE_DIR = "/sys/devices/system/node"

# NVIDIA: (pattern on the marketing name, rule). Order matters for readability only (word
# boundaries already keep GB200 from matching B200 and GH200 from matching H200), but the
# more specific names come first anyway. A rule is either an id, or a dict GPU count -> id
# (key None = any other count). `min_mib` rejects a smaller-memory variant that shares the
# marketing name (RTX PRO 5000 48 GB, RTX 5090 laptop / D v2, RTX 4090 laptop).
NVIDIA_RULES = (
    (r"\bGB300\b", {1: "dgx_station_gb300", None: "gb300"}, None),
    (r"\bB300\b", "b300", None),
    (r"\bGB200\b", "gb200", None),
    (r"\bB200\b", "b200", None),
    (r"\bGB10\b", "dgx_spark_gb10", None),
    (r"\bH200\b", "h200", None),
    (r"\bH100\b", "h100", None),
    (r"\bRTX\s*PRO\s*6000\b", {1: "rtx_pro_6000", 2: "rtx_pro_6000_2x", 8: "rtx_pro_6000_8x"}, 90000),
    (r"\bRTX\s*PRO\s*5000\b", {1: "rtx_pro_5000", 4: "rtx_pro_5000_4x"}, 65536),
    (r"\bRTX\s*5090\b", {1: "rtx_5090", 2: "rtx_5090_2x"}, 30720),
    (r"\bRTX\s*4090\b", {2: "rtx_4090_2x"}, 22528),
)

# AMD: PCI device id -> id (PF and SR-IOV VF ids), expected gfx target per id, name fallback.
AMD_DEVICE_IDS = {
    "0x74a1": "mi300x", "0x74b5": "mi300x",
    "0x74a5": "mi325x", "0x74b9": "mi325x",
    "0x75a3": "mi355x", "0x75b3": "mi355x",
}
AMD_GFX = {"mi300x": "gfx942", "mi325x": "gfx942", "mi355x": "gfx950"}
AMD_NAME_RULES = (
    (r"\bMI355X\b", "mi355x"),
    (r"\bMI325X\b", "mi325x"),
    (r"\bMI300X\b", "mi300x"),
)

# Intel Xeon, on the cpuinfo model name (case-insensitive).
#   Xeon 6 (Granite Rapids / Sierra Forest): no tier word, 6xxx[P|E] ("Intel(R) Xeon(R) 6980P",
#   "6780E", "6975P-C"), or the literal "Xeon 6 ...".
#   5th gen Xeon Scalable (Emerald Rapids): tier word + x5xx ("Platinum 8592+", "Gold 6548Y+",
#   "Gold 5520+", "Silver 4514Y", "Bronze 3508U"); 4th gen is x4xx, 3rd gen x3xx.
CPU_IDS = ("xeon6", "xeon5")
_XEON = r"\bxeon(?:\s*\((?:r|tm)\))?"
CPU_RULES = (
    (_XEON + r"\s+6\s", "xeon6"),
    (_XEON + r"\s+6\d{3}[a-z]{0,2}\b", "xeon6"),
    (_XEON + r"\s+(?:platinum|gold|silver|bronze)\s+[34568]5\d{2}(?:[a-z]{0,2}\b|\+)", "xeon5"),
)


class HardwareError(Exception):
    """The host's GPUs cannot be mapped to a taxonomy id (message is user-facing)."""


# ----------------------------------------------------------------------------------------------
# small helpers (the spellings of 'not available', JSON after warnings, amd-smi's GPU lists:
# module_utils vllm_fleet_smi, shared with the health parsers)
# ----------------------------------------------------------------------------------------------

def _to_mib(value, unit=None):
    """MiB from 81559 / '81559' / '81559 MiB' / {'value': 196592, 'unit': 'MB'} / bytes."""
    if isinstance(value, dict):
        return _to_mib(value.get("value"), value.get("unit") or unit)
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        text = _clean(value)
        if text is None:
            return None
        match = re.match(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$", text)
        if not match:
            return None
        number = float(match.group(1))
        unit = match.group(2) or unit
    scale = {"": 1, "mib": 1, "mb": 1, "m": 1, "gib": 1024, "gb": 1024, "g": 1024,
             "kib": 1.0 / 1024, "kb": 1.0 / 1024, "b": 1.0 / 1048576}
    factor = scale.get((unit or "").strip().lower())
    if factor is None:
        return None
    return int(round(number * factor))


def _hex_id(value):
    """'0x74a1' from '0x74A1', '74a1', 29857 or '0x74a1 (rev 00)'; None otherwise."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return "0x%04x" % value
    text = _clean(value)
    if text is None:
        return None
    match = re.match(r"^(?:0x)?([0-9a-fA-F]{1,8})\b", text)
    if not match:
        return None
    return "0x%04x" % int(match.group(1), 16)


def _gfx(value):
    text = _clean(value)
    if text is None:
        return None
    match = re.search(r"gfx[0-9a-f]+", text.lower())
    return match.group(0) if match else None


def _ci_get(mapping, *keys):
    """First value of `keys` in a dict, comparing keys case-insensitively."""
    if not isinstance(mapping, dict):
        return None
    lowered = dict((str(k).strip().lower(), v) for k, v in mapping.items())
    for key in keys:
        if key.lower() in lowered:
            value = lowered[key.lower()]
            if _clean(value) is not None or isinstance(value, (dict, int, float)):
                return value
    return None


def first_line(*texts):
    """The first informative line of tool output (banners of '=' or '-' skipped)."""
    for text in texts:
        for line in (text or "").splitlines():
            words = re.sub(r"[=+|-]{3,}", " ", line).strip()
            if words and not re.match(r"^ROCm System Management Interface$", words):
                return line.strip()
    return ""


# ----------------------------------------------------------------------------------------------
# parsers (pure)
# ----------------------------------------------------------------------------------------------

def parse_nvidia_query(text):
    """GPUs from `nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id
    --format=csv,noheader,nounits` (a header line and unit suffixes are tolerated)."""
    gpus = []
    rows = csv.reader((text or "").splitlines(), skipinitialspace=True)
    for row in rows:
        row = [c.strip() for c in row]
        if not row or not any(row):
            continue
        if row[0].lower() == "index":  # header line (format without noheader)
            continue
        if len(row) < 2 or not re.match(r"^\d+$", row[0]):
            continue  # not a data row (an error message, a warning)
        row += [""] * (5 - len(row))
        gpus.append({
            "index": int(row[0]),
            "name": row[1],
            "memory_mib": _to_mib(row[2]),
            "driver_version": _clean(row[3]),
            "bus_id": _clean(row[4]),
        })
    return gpus


def parse_cuda_version(text):
    """'CUDA Version: 12.8' from the plain nvidia-smi header, or 'CUDA Version : 12.8' from
    `nvidia-smi -q`; None when absent or 'Not Found'."""
    match = re.search(r"CUDA Version\s*:\s*([0-9]+(?:\.[0-9]+)+)", text or "")
    return match.group(1) if match else None


def parse_nvidia_driver_version(text):
    match = re.search(r"Driver Version\s*:\s*([0-9][0-9.]*)", text or "")
    return match.group(1) if match else None


def parse_amd_smi_static(text):
    """GPUs from `amd-smi static --asic --vram --driver --json`."""
    gpus = []
    for position, item in enumerate(_amd_items(load_json(text))):
        asic = item.get("asic") if isinstance(item.get("asic"), dict) else {}
        vram = item.get("vram") if isinstance(item.get("vram"), dict) else {}
        driver = item.get("driver") if isinstance(item.get("driver"), dict) else {}
        bus = item.get("bus") if isinstance(item.get("bus"), dict) else {}
        size = _ci_get(vram, "size", "vram_size")
        gpus.append({
            "index": item.get("gpu", position),
            "name": _clean(_ci_get(asic, "market_name")),
            "device_id": _hex_id(_ci_get(asic, "device_id")),
            "gfx_target": _gfx(_ci_get(asic, "target_graphics_version")),
            "memory_mib": _to_mib(size, "MB"),
            "driver_version": _clean(_ci_get(driver, "version", "driver_version")),
            "bus_id": _clean(_ci_get(bus, "bdf")),
        })
    return gpus


def parse_amd_smi_version(text):
    """{'rocm_version', 'driver_version'} from `amd-smi version --json` (a one-element list
    or an object) or from its human line 'AMDSMI Tool: ... | ROCm version: 6.4.0 | ...'."""
    doc = load_json(text)
    if isinstance(doc, list):
        doc = next((d for d in doc if isinstance(d, dict)), None)
    if isinstance(doc, dict):
        return {
            "rocm_version": _clean(_ci_get(doc, "rocm_version")),
            "driver_version": _clean(_ci_get(doc, "amdgpu_version", "kernel_version")),
        }
    rocm = re.search(r"ROCm version\s*:\s*([0-9][0-9.]*)", text or "", re.I)
    drv = re.search(r"(?:amdgpu|Kernel) version\s*:\s*([0-9][0-9.]*)", text or "", re.I)
    return {"rocm_version": rocm.group(1) if rocm else None,
            "driver_version": drv.group(1) if drv else None}


def _card_index(key):
    match = re.match(r"^card(\d+)$", str(key).strip(), re.I)
    return int(match.group(1)) if match else None


def parse_rocm_smi(text):
    """(gpus, driver_version) from `rocm-smi --showproductname --showid --showmeminfo vram
    --showdriverversion --json` ({"card0": {...}, ..., "system": {"Driver version": ...}})."""
    doc = load_json(text)
    if not isinstance(doc, dict):
        return [], None
    gpus = []
    cards = sorted((_card_index(k), v) for k, v in doc.items()
                   if _card_index(k) is not None and isinstance(v, dict))
    for index, card in cards:
        name = _clean(_ci_get(card, "Card Series", "Device Name"))
        device = _hex_id(_ci_get(card, "Device ID")) or _hex_id(_ci_get(card, "Card Model"))
        total = _ci_get(card, "VRAM Total Memory (B)")
        gpus.append({
            "index": index,
            "name": name,
            "device_id": device,
            "gfx_target": _gfx(_ci_get(card, "GFX Version")),
            "memory_mib": _to_mib(total, "B") if total is not None else None,
            "driver_version": None,
            "bus_id": _clean(_ci_get(card, "PCI Bus")),
        })
    driver = _clean(_ci_get(doc.get("system") or {}, "Driver version"))
    return gpus, driver


def parse_cpu_model(text):
    """The first 'model name' of /proc/cpuinfo (None on CPUs that do not print one)."""
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "model name" and value.strip():
            return " ".join(value.split())
    return None


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NV_WORD = re.compile(r"^(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$", re.I)
_DEVICE_LABEL = re.compile(r"^(?:GPU|NIC)\d+$")
_GPU_LABEL = re.compile(r"^GPU(\d+)$")
_TOPO_EXTRAS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def _topo_cells(line):
    """The cells of a `nvidia-smi topo -m` line: tab-separated as the tool prints it (empty
    cells kept), or whitespace-separated for a copy without tabs."""
    if "\t" in line:
        return [c.strip() for c in line.split("\t")]
    return line.split()


def _int_or_none(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    text = _clean(value)
    return int(text) if text is not None and re.match(r"^\d+$", text) else None


def parse_nvidia_topo(text):
    """{"links": n x n link words, "numa": NUMA node per GPU or None} from `nvidia-smi topo -m`,
    or None when the output is not a complete GPU matrix.

    The header (``\tGPU0\tGPU1\t...\tNIC0\t...\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID``, with
    ANSI underline escapes on current drivers) names the columns; each ``GPUi`` row has a link
    word per column (``X``, ``NV#``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``; ``SOC`` of
    old drivers is read as ``SYS``), then the CPU and NUMA affinity. NIC rows and columns and
    the legend are ignored."""
    lines = _ANSI.sub("", text or "").splitlines()
    header_at, columns, extras = None, [], []
    for i, line in enumerate(lines):
        tokens = line.split()
        if len(tokens) >= 2 and tokens[0] == "GPU0" and tokens[1].upper() != "X":
            header_at = i
            for token in tokens:
                if not _DEVICE_LABEL.match(token):
                    break
                columns.append(token)
            extras = sorted((name for name in _TOPO_EXTRAS if name in line), key=line.index)
            break
    if header_at is None:
        return None
    gpu_columns = [c for c in columns if c.startswith("GPU")]
    n = len(gpu_columns)
    if gpu_columns != ["GPU%d" % i for i in range(n)]:
        return None
    rows = {}
    for line in lines[header_at + 1:]:
        cells = _topo_cells(line)
        if not cells or not cells[0]:
            if rows:
                break
            continue
        match = _GPU_LABEL.match(cells[0])
        if not match:
            if rows and not _DEVICE_LABEL.match(cells[0]):
                break  # the legend
            continue
        index = int(match.group(1))
        if index in rows or len(cells) < 1 + len(columns):
            return None
        rows[index] = cells[1:]
    if sorted(rows) != list(range(n)):
        return None
    links, numa = [], []
    numa_at = len(columns) + extras.index("NUMA Affinity") if "NUMA Affinity" in extras else None
    for i in range(n):
        row = []
        for column, word in zip(columns, rows[i]):
            if not column.startswith("GPU"):
                continue
            word = word.upper()
            if not _NV_WORD.match(word):
                return None
            row.append("SYS" if word == "SOC" else word)
        links.append(row)
        cells = rows[i]
        numa.append(_int_or_none(cells[numa_at]) if numa_at is not None and numa_at < len(cells) else None)
    for i in range(n):
        for j in range(n):
            if (links[i][j] == "X") != (i == j) or links[i][j] != links[j][i]:
                return None
    return {"links": links, "numa": numa}


_AMD_LINK_WORDS = {"SELF": "X", "X": "X", "XGMI": "XGMI", "PCIE": "PCIE"}


def _gpu_key_index(key):
    match = re.match(r"^gpu_?(\d+)$", str(key).strip(), re.I)
    return int(match.group(1)) if match else None


def parse_amd_smi_topology(text):
    """{"links": n x n link words, "numa": [None] * n} from `amd-smi topology --json`, or None.

    ROCm >= 6.2 prints per GPU ``{"gpu": i, "bdf": ..., "links": [{"gpu": j, "bdf": ...,
    "weight": w, "link_status": ..., "link_type": "SELF" | "XGMI" | "PCIE" | "N/A" | "UNKNOWN",
    "num_hops": h, ...}]}``; ROCm 6.0/6.1 per GPU ``{"gpu": i, "link_type": {"gpu_0": "SELF",
    "gpu_1": "XGMI", ...}, ...}``. Either as a top-level list or under ``gpu_data``. Link words:
    ``X`` (self), ``XGMI``, ``PCIE``, ``UNKNOWN`` (N/A, unidentified). The NUMA nodes come from
    :func:`parse_amd_smi_numa`."""
    items = _amd_items(load_json(text))
    table = {}
    for item in items:
        index = _int_or_none(item.get("gpu"))
        if index is None or index in table:
            return None
        row = {}
        if isinstance(item.get("links"), list):
            for link in item["links"]:
                if not isinstance(link, dict):
                    return None
                peer, word = _int_or_none(link.get("gpu")), link.get("link_type")
                if peer is None or not isinstance(word, str):
                    return None
                row[peer] = word
        elif isinstance(item.get("link_type"), dict):
            for key, word in item["link_type"].items():
                peer = _gpu_key_index(key)
                if peer is None or not isinstance(word, str):
                    return None
                row[peer] = word
        else:
            return None
        table[index] = row
    n = len(table)
    if n == 0 or sorted(table) != list(range(n)):
        return None
    links = []
    for i in range(n):
        if sorted(table[i]) != list(range(n)):
            return None
        row = [_AMD_LINK_WORDS.get(table[i][j].strip().upper(), "UNKNOWN") for j in range(n)]
        if any((row[j] == "X") != (i == j) for j in range(n)):
            return None
        links.append(row)
    return {"links": links, "numa": [None] * n}


def parse_amd_smi_numa(text):
    """{gpu index: NUMA node} from `amd-smi static --numa --json` (``"numa": {"node": n,
    "affinity": a}``; the affinity, the NUMA node of the GPU's PCI device, wins; -1 or N/A: none)."""
    out = {}
    for item in _amd_items(load_json(text)):
        index = _int_or_none(item.get("gpu"))
        numa = item.get("numa") if isinstance(item.get("numa"), dict) else {}
        node = _int_or_none(numa.get("affinity"))
        if node is None:
            node = _int_or_none(numa.get("node"))
        if index is not None:
            out[index] = node
    return out


def _render_path(value):
    """'/dev/dri/renderD128' from 'renderD128', 128 or '/dev/dri/renderD128'; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return RENDER_NODE % value if value >= 128 else None
    text = _clean(value)
    match = re.match(r"^(?:/dev/dri/)?renderD(\d+)$", text or "")
    return RENDER_NODE % int(match.group(1)) if match else None


def parse_amd_smi_list(text):
    """{gpu index: {"render": path or None, "node_id": KFD node or None}} from `amd-smi list
    [-e] --json` (``{"gpu", "bdf", "uuid", "kfd_id", "node_id", "partition_id"}`` per GPU; with
    ``-e`` also ``"render": "renderD128"``, ``"card"``, ``"hsa_id"``, ``"hip_id"``, ...)."""
    out = {}
    for item in _amd_items(load_json(text)):
        index = _int_or_none(item.get("gpu"))
        if index is None:
            continue
        render = None
        for key in ("render", "drm_render", "render_node"):
            render = render or _render_path(item.get(key))
        out[index] = {"render": render, "node_id": _int_or_none(item.get("node_id"))}
    return out


def parse_kfd_render_minor(text):
    """The ``drm_render_minor`` of a KFD topology node's properties file (None for CPU nodes)."""
    match = re.search(r"^\s*drm_render_minor\s+(\d+)\s*$", text or "", re.M)
    minor = int(match.group(1)) if match else 0
    return minor if minor >= 128 else None


def parse_cpulist(text):
    """CPU ids from a sysfs cpulist ('0-47,96-143'); None when unreadable or malformed."""
    if text is None:
        return None
    text = text.strip()
    if not text:
        return []
    out = set()
    for part in text.split(","):
        match = re.match(r"^\s*(\d+)(?:-(\d+))?\s*$", part)
        if not match:
            return None
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) else low
        if high < low:
            return None
        out.update(range(low, high + 1))
    return sorted(out)


# ----------------------------------------------------------------------------------------------
# mapping (pure)
# ----------------------------------------------------------------------------------------------

def _describe_rule(rule):
    if isinstance(rule, dict):
        return ", ".join("%s = x%d" % (hw, n) for n, hw in sorted(
            (n, hw) for n, hw in rule.items() if n is not None))
    return rule


def map_nvidia(name, count, memory_mib=None):
    """(hardware id or None, hint) for `count` GPUs named `name` with `memory_mib` each
    (None = unknown memory, not checked). The hint explains a near miss."""
    for pattern, rule, min_mib in NVIDIA_RULES:
        if not re.search(pattern, name or "", re.I):
            continue
        if min_mib and memory_mib is not None and memory_mib < min_mib:
            ids = sorted(set(rule.values())) if isinstance(rule, dict) else [rule]
            return None, " (%d MiB per GPU: a smaller variant than %s)" % (memory_mib, ", ".join(ids))
        if isinstance(rule, dict):
            hw = rule.get(count, rule.get(None))
            if hw is None:
                return None, " (taxonomy profiles for this GPU: %s)" % _describe_rule(rule)
            return hw, ""
        return rule, ""
    return None, ""


def map_amd(name=None, device_id=None, gfx_target=None):
    """Hardware id of one AMD GPU: PCI device id (+ gfx target check), else market name."""
    gfx = _gfx(gfx_target)
    device = _hex_id(device_id)
    hw = AMD_DEVICE_IDS.get(device) if device else None
    if hw:
        return hw if gfx in (None, AMD_GFX[hw]) else None
    for pattern, hw in AMD_NAME_RULES:
        if re.search(pattern, name or "", re.I):
            return hw if gfx in (None, AMD_GFX[hw]) else None
    return None


def map_cpu(model):
    for pattern, hw in CPU_RULES:
        if re.search(pattern, model or "", re.I):
            return hw
    return None


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


# ----------------------------------------------------------------------------------------------
# probing (runner/which/reader are injected, so this runs without Ansible in tests)
# ----------------------------------------------------------------------------------------------

def empty_facts():
    return {
        "brand": "none", "hardware": None, "detected": False, "detected_hardware": None,
        "count": 0, "names": [], "memory_mib": [], "total_memory_gib": None,
        "driver_version": None, "cuda_version": None, "rocm_version": None,
        "gfx_target": None, "device_id": None, "bus_ids": [], "cpu_model": None,
        "source": None, "probe_notes": [], "cpus": [], "numa_nodes": {},
    }


def _fill_gpus(facts, brand, source, gpus):
    facts.update(brand=brand, source=source, count=len(gpus),
                 names=[g.get("name") or "" for g in gpus],
                 memory_mib=[g.get("memory_mib") for g in gpus],
                 bus_ids=[g["bus_id"] for g in gpus if g.get("bus_id")])
    known = [m for m in facts["memory_mib"] if m is not None]
    facts["total_memory_gib"] = round(sum(known) / 1024.0, 1) if known else None
    facts["driver_version"] = next((g["driver_version"] for g in gpus if g.get("driver_version")), None)
    if brand == "amd":
        facts["gfx_target"] = next((g["gfx_target"] for g in gpus if g.get("gfx_target")), None)
        facts["device_id"] = next((g["device_id"] for g in gpus if g.get("device_id")), None)
        facts["_gpus"] = gpus


def _probe_nvidia(facts, run, path):
    rc, out, err = run([path] + NVIDIA_QUERY)
    gpus = parse_nvidia_query(out) if rc == 0 else []
    if not gpus:
        facts["probe_notes"].append("nvidia-smi (%s): no GPU (rc=%s) %s" % (path, rc, first_line(out, err)))
        return False
    _fill_gpus(facts, "nvidia", "nvidia-smi", gpus)
    rc, out, err = run([path])
    cuda = parse_cuda_version(out) if rc == 0 else None
    if cuda is None:
        rc, out, err = run([path, "-q"])
        cuda = parse_cuda_version(out) if rc == 0 else None
        if facts["driver_version"] is None and rc == 0:
            facts["driver_version"] = parse_nvidia_driver_version(out)
    facts["cuda_version"] = cuda
    rc, out, err = run([path] + NVIDIA_TOPO)
    topology = parse_nvidia_topo(out) if rc == 0 else None
    if topology and len(topology["links"]) == facts["count"]:
        facts["topology"] = topology
    return True


def _first_answer(run, path, variants, parse):
    """Run the argv variants in order until one parses to GPUs; a tool that says there is no
    AMD GPU is not asked again. Returns (parsed, (rc, message of the first attempt))."""
    first, parsed = None, None
    for argv in variants:
        rc, out, err = run([path] + argv)
        first = first or (rc, first_line(err, out))
        parsed = parse(out) if rc == 0 else None
        if (parsed and parsed[0]) or NO_AMD_GPU.search((out or "") + (err or "")):
            break
    return parsed, first


def _probe_amd_smi(facts, run, path, read_text):
    gpus, first = _first_answer(run, path, AMD_SMI_STATIC, lambda out: (parse_amd_smi_static(out),))
    if not gpus or not gpus[0]:
        facts["probe_notes"].append("amd-smi (%s): no GPU (rc=%s) %s" % ((path,) + first))
        return False
    _fill_gpus(facts, "amd", "amd-smi", gpus[0])
    rc, out, err = run([path] + AMD_SMI_VERSION)
    versions = parse_amd_smi_version(out) if rc == 0 else {}
    facts["rocm_version"] = versions.get("rocm_version") or read_rocm_version(read_text)
    facts["driver_version"] = facts["driver_version"] or versions.get("driver_version")
    topology = _amd_topology(run, path, facts["count"])
    if topology:
        facts["topology"] = topology
    render_nodes = _amd_render_nodes(run, path, read_text, facts["count"])
    if render_nodes:
        facts["render_nodes"] = render_nodes
    return True


def _amd_topology(run, path, count):
    """The links of `amd-smi topology --json` and the NUMA node of each GPU (`amd-smi static
    --numa --json`, None where it does not say); None unless the matrix covers `count` GPUs."""
    rc, out, err = run([path] + AMD_SMI_TOPOLOGY)
    topology = parse_amd_smi_topology(out) if rc == 0 else None
    if not topology or len(topology["links"]) != count:
        return None
    rc, out, err = run([path] + AMD_SMI_NUMA)
    numa = parse_amd_smi_numa(out) if rc == 0 else {}
    topology["numa"] = [numa.get(i) for i in range(count)]
    return topology


def _amd_render_nodes(run, path, read_text, count):
    """The render node of every GPU, by GPU index: `amd-smi list -e --json` (ROCm >= 6.4 names
    it), else the `drm_render_minor` of the GPU's KFD topology node (node_id of `amd-smi list`).
    None unless every GPU has its own."""
    rc, out, err = run([path] + AMD_SMI_LIST_ENUM)
    listed = parse_amd_smi_list(out) if rc == 0 else {}
    if not listed or any(not g.get("render") for g in listed.values()):
        if not listed:
            rc, out, err = run([path] + AMD_SMI_LIST)
            listed = parse_amd_smi_list(out) if rc == 0 else {}
        for entry in listed.values():
            if not entry["render"] and entry["node_id"] is not None:
                minor = parse_kfd_render_minor(read_text(KFD_NODE_PROPERTIES % entry["node_id"]))
                entry["render"] = RENDER_NODE % minor if minor else None
    nodes = [(listed.get(i) or {}).get("render") for i in range(count)]
    if count == 0 or not all(nodes) or len(set(nodes)) != count:
        return None
    return nodes


def _probe_rocm_smi(facts, run, path, read_text):
    parsed, first = _first_answer(run, path, ROCM_SMI_QUERY, parse_rocm_smi)
    if not parsed or not parsed[0]:
        facts["probe_notes"].append("rocm-smi (%s): no GPU (rc=%s) %s" % ((path,) + first))
        return False
    gpus, driver = parsed
    _fill_gpus(facts, "amd", "rocm-smi", gpus)
    facts["driver_version"] = driver
    facts["rocm_version"] = read_rocm_version(read_text)
    return True


def read_rocm_version(read_text):
    text = read_text(ROCM_VERSION_FILE)
    match = re.match(r"\s*([0-9]+(?:\.[0-9]+)+)", text or "")
    return match.group(1) if match else None


def probe_cpus(read_text, list_dir, affinity):
    """(cpus, numa_nodes): the sorted CPU ids this process may run on, and NUMA node -> its
    usable CPUs from /sys/devices/system/node/node*/cpulist (nodes without a usable CPU left
    out); without that sysfs, one node "0" with every usable CPU."""
    cpus = sorted(set(int(c) for c in affinity()))
    usable = set(cpus)
    found = []
    for name in list_dir(NUMA_NODE_DIR) or []:
        match = re.match(r"^node(\d+)$", str(name))
        if not match:
            continue
        members = parse_cpulist(read_text("%s/%s/cpulist" % (NUMA_NODE_DIR, name)))
        members = sorted(set(members or []) & usable)
        if members:
            found.append((int(match.group(1)), members))
    numa_nodes = dict((str(node), members) for node, members in sorted(found))
    return cpus, numa_nodes or ({"0": cpus} if cpus else {})


def probe(run, which, read_text, list_dir=None, affinity=None, health=False):
    """Gather facts. run(argv) -> (rc, stdout, stderr); which(tool) -> path or None;
    read_text(path) -> str or None; list_dir(path) -> names or None; affinity() -> CPU ids
    (default: this machine's); health: also read the GPUs' health (probe_health)."""
    facts = empty_facts()
    facts["cpu_model"] = parse_cpu_model(read_text(CPUINFO))
    facts["cpus"], facts["numa_nodes"] = probe_cpus(read_text, list_dir or _list_dir, affinity or _affinity)
    probes = (
        ("nvidia-smi", lambda p: _probe_nvidia(facts, run, p)),
        ("amd-smi", lambda p: _probe_amd_smi(facts, run, p, read_text)),
        ("rocm-smi", lambda p: _probe_rocm_smi(facts, run, p, read_text)),
    )
    for tool, fn in probes:
        path = which(tool)
        if not path:
            facts["probe_notes"].append("%s: not found" % tool)
            continue
        if fn(path):
            if health:
                facts["health"] = probe_health(facts, run, which, path)
            return facts
    if facts["cpu_model"]:
        facts.update(brand="cpu", source=CPUINFO)
    return facts


def _kernel_log(run, which):
    """(text, source) of the kernel log since boot: dmesg, else journalctl -k (None, notes)."""
    notes = []
    for tool, argv in KERNEL_LOG:
        path = which(tool)
        if not path:
            notes.append("%s: not found" % tool)
            continue
        rc, out, err = run([path] + argv)
        if rc == 0:
            return out, tool, notes
        notes.append("%s: rc=%s %s" % (tool, rc, first_line(err, out)))
    return None, None, notes


def probe_health(facts, run, which, path):
    """Per GPU healthy | degraded | failed with its evidence (module_utils vllm_fleet_gpu_health:
    the rules), from the GPU tool at ``path`` and the kernel log; ``read`` lists the sources that
    answered, ``notes`` the ones that did not (a source that cannot be read judges nothing)."""
    read, notes = [], []
    nvidia, xids, amd_ecc, xgmi = None, None, None, None
    if facts["brand"] == "nvidia":
        rc, out, err = run([path] + NVIDIA_HEALTH)
        nvidia = parse_nvidia_query_xml(out) if rc == 0 else []
        if nvidia:
            read.append("nvidia-smi -q -x")
            facts["modes"] = [{"index": g["index"], "persistence_mode": g["persistence_mode"],
                               "mig_mode": g["mig_mode"], "compute_mode": g["compute_mode"],
                               "fabric": g["fabric"]} for g in nvidia]
        else:
            notes.append("nvidia-smi -q -x: rc=%s %s" % (rc, first_line(err, out) or "no GPU in the XML"))
        text, tool, missing = _kernel_log(run, which)
        notes.extend(missing)
        if text is not None:
            read.append(tool)
            xids = parse_xid_lines(text, bus_index(nvidia) if nvidia else facts["bus_ids"])
    elif facts["source"] == "amd-smi":
        for argv, name in ((AMD_SMI_ECC, "ecc"), (AMD_SMI_XGMI, "xgmi")):
            rc, out, err = run([path] + argv)
            parsed = (parse_amd_smi_ecc_json if name == "ecc" else parse_amd_smi_xgmi)(out) if rc == 0 else []
            if parsed:
                read.append("amd-smi " + " ".join(argv))
            else:
                notes.append("amd-smi %s: rc=%s %s" % (" ".join(argv), rc, first_line(err, out)))
            if name == "ecc":
                amd_ecc = parsed
            else:
                xgmi = parsed
    else:
        notes.append("%s: health is read with nvidia-smi or amd-smi" % facts["source"])
    gpus = verdict(nvidia=nvidia, xids=xids, amd_ecc=amd_ecc, xgmi=xgmi, count=facts["count"]) if read else []
    return {"gpus": gpus, "read": read, "notes": notes}


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


# ----------------------------------------------------------------------------------------------
# Ansible entry point
# ----------------------------------------------------------------------------------------------

def _read_text(path):
    try:
        with open(path, "r") as handle:
            return handle.read()
    except (IOError, OSError, UnicodeDecodeError):
        return None


def _list_dir(path):
    try:
        return os.listdir(path)
    except OSError:
        return None


def _affinity():
    try:
        return os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return range(os.cpu_count() or 1)


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec=dict(
            hardware=dict(type="str"),
            nvidia_smi_path=dict(type="path"),
            amd_smi_path=dict(type="path"),
            rocm_smi_path=dict(type="path"),
            require_gpu=dict(type="bool", default=False),
            health=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    explicit = {"nvidia-smi": p["nvidia_smi_path"], "amd-smi": p["amd_smi_path"],
                "rocm-smi": p["rocm_smi_path"]}

    def which(tool):
        path = explicit.get(tool)
        if path:
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
            module.warn("%s_path %s is not an executable file; %s skipped"
                        % (tool.replace("-", "_"), path, tool))
            return None
        return module.get_bin_path(tool, required=False,
                                   opt_dirs=[] if tool == "nvidia-smi" else ROCM_OPT_DIRS)

    def run(argv):
        rc, out, err = module.run_command(argv, check_rc=False,
                                          environ_update={"LC_ALL": "C", "LANG": "C"})
        return rc, out, err

    facts = probe(run, which, _read_text, health=p["health"])
    try:
        facts, warnings = resolve(facts, hardware=p["hardware"], require_gpu=p["require_gpu"])
    except HardwareError as exc:
        facts.pop("_gpus", None)
        module.fail_json(msg=str(exc), ansible_facts={"vllm_fleet_gpu": facts})
    for warning in warnings:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={"vllm_fleet_gpu": facts})


if __name__ == "__main__":
    main()
