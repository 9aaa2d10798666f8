# -*- coding: utf-8 -*-
"""AMD GPUs from what ``amd-smi`` and the older ``rocm-smi`` print, their render nodes, and the
AMD rows of the taxonomy mapping.

Pure and stdlib only; modules import it as ``ansible.module_utils.vllm_fleet_gpu_amd`` (the facts
module ``vllm_fleet_gpu_facts`` runs the commands and reads the files, this file reads their
output).

Sources (canned samples of each form: ``tests/fixtures/gpu``, its README names the ROCm release
of each, and the FAKE ``tests/fakes/bin/amd-smi`` / ``rocm-smi``, shaped like ROCm 6.4 / 7.0):
  parse_amd_smi_static     ``amd-smi static --asic --vram --driver --bus --json`` (AMD_SMI_STATIC,
                           fewer sections on releases or VFs that refuse one; a bare list up to
                           ROCm 6.4, ``{"gpu_data": [...]}`` from ROCm 7)
  parse_amd_smi_version    ``amd-smi version --json`` (or its human line)
  parse_rocm_smi           ``rocm-smi --showproductname --showid --showmeminfo vram
                           --showdriverversion --json`` (ROCM_SMI_QUERY; ``cardN`` objects)
  parse_amd_smi_topology   ``amd-smi topology --json`` (ROCm 6.2+ ``links`` lists, ROCm 6.0/6.1
                           ``link_type`` tables)
  parse_amd_smi_numa       ``amd-smi static --numa --json``
  parse_amd_smi_list       ``amd-smi list [-e] --json`` (``-e`` names the render node, ROCm >= 6.4)
  parse_kfd_render_minor   ``/sys/class/kfd/kfd/topology/nodes/N/properties`` (KFD_NODE_PROPERTIES)
The ECC and XGMI health of ``amd-smi metric --ecc`` / ``amd-smi xgmi`` is read by
``vllm_fleet_gpu_health``.

map_amd maps a GPU's PCI device id, gfx target or market name to a taxonomy hardware id
(AMD_DEVICE_IDS, AMD_GFX, AMD_NAME_RULES)."""

from __future__ import absolute_import, division, print_function

import re

from ansible.module_utils.vllm_fleet_smi import amd_items as _amd_items, clean as _clean, load_json
from ansible.module_utils.vllm_fleet_gpu_values import ci_get as _ci_get, int_or_none as _int_or_none, to_mib as _to_mib

__metaclass__ = type

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
# GPU topology and device nodes (read only after the GPUs were found; a failure there only
# leaves the key out)
AMD_SMI_TOPOLOGY = ["topology", "--json"]
AMD_SMI_NUMA = ["static", "--numa", "--json"]
# `list -e` (ROCm >= 6.4, amd-smi 25.3) adds RENDER/CARD/HSA_ID/HIP_ID per GPU; older releases
# refuse -e, then the KFD topology in sysfs maps node_id -> drm_render_minor.
AMD_SMI_LIST_ENUM = ["list", "-e", "--json"]
AMD_SMI_LIST = ["list", "--json"]
KFD_NODE_PROPERTIES = "/sys/class/kfd/kfd/topology/nodes/%s/properties"
RENDER_NODE = "/dev/dri/renderD%d"

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


# ----------------------------------------------------------------------------------------------
# parsers (pure)
# ----------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------
# mapping (pure)
# ----------------------------------------------------------------------------------------------

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
