# -*- coding: utf-8 -*-
"""GPU health from what the GPU tools and the kernel log print: parsers and one verdict per GPU.

Pure and stdlib only; modules import it as ``ansible.module_utils.vllm_fleet_gpu_health``
(ansible.cfg: module_utils = plugins/module_utils). Every parser takes tool output as text,
never fails on odd input (``N/A``, ``Not Supported``, missing sections read as None) and
numbers GPUs in the order the tool lists them.

Sources:
  parse_nvidia_query_xml   ``nvidia-smi -q -x`` (DTD nvsmi_device_v12, drivers 535 .. 570)
  parse_xid_lines          ``dmesg`` / ``journalctl -k``: ``NVRM: Xid (PCI:0000:18:00): 79, ...``
  parse_amd_smi_ecc_json   ``amd-smi metric --ecc [--ecc-blocks] --json`` (list or gpu_data)
  parse_amd_smi_xgmi       ``amd-smi xgmi --link-status --json``

verdict() rules, first match per finding; a GPU is as bad as its worst finding:

  | finding                                                        | state    |
  | -------------------------------------------------------------- | -------- |
  | NVIDIA uncorrectable ECC: volatile > 0 OR aggregate > 0 (1)    | failed   |
  | remapped_row_failure Yes / > 0 (no spare row left)             | failed   |
  | remapped_row_pending Yes / > 0 (a reset must apply the remap)  | failed   |
  | retired pages pending (pending_blacklist / pending_retirement) | failed   |
  | XID of FAILED_XIDS in the kernel log (table below)             | failed   |
  | XID 154 whose new recovery action is not None                  | failed   |
  | AMD uncorrectable ECC (RAS) count > 0                          | failed   |
  | AMD XGMI link down (U/D/X status D)                            | failed   |
  | NVIDIA correctable ECC, volatile > 0 (2)                       | degraded |
  | active clocks event reason of SLOWDOWN_REASONS (3)             | degraded |
  | XID of DEGRADED_XIDS in the kernel log                         | degraded |
  | AMD correctable or deferred ECC count > 0                      | degraded |

  (1) aggregate counts survive resets (InfoROM): a GPU that ever had an uncorrectable error is
      kept out of placement until an operator clears it; volatile alone would forget it at reboot.
  (2) aggregate correctable counts are lifetime totals of healthy GPUs too: left out.
  (3) sw_power_cap (running at the power limit), gpu_idle, sync_boost and the application /
      display clock settings are normal operation, not health.
Persistence mode, MIG mode, compute mode and the fabric state are facts, never part of the
verdict. XIDs follow NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html):
the codes whose immediate action is a GPU reset or a reboot fail the GPU; 92 and 94 only degrade
it; 63 (remapping event, action IGNORE) is left to the remapped rows it announces.
"""

from __future__ import absolute_import, division, print_function

import re
import xml.etree.ElementTree as ET

from ansible.module_utils.vllm_fleet_smi import amd_items as _amd_items, clean as _clean, load_json

__metaclass__ = type

STATES = ("healthy", "degraded", "failed")

# XID -> what the catalog calls it; the GPU fails (immediate action RESET_GPU, RESTART_BM or a
# reset workflow)
FAILED_XIDS = {
    46: "GPU stopped processing",
    48: "double bit ECC error",
    62: "internal micro-controller halt",
    64: "GPU memory remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    95: "uncontained memory error",
    119: "GSP RPC timeout",
    120: "GSP error",
    136: "link training failed",
    140: "ECC unrecovered error",
    143: "GPU initialization error",
    155: "NVLink SW defined error",
    156: "resource retirement event",
}
# the GPU keeps running: 92 (action IGNORE, investigate), 94 (only the application restarts)
DEGRADED_XIDS = {
    92: "high single-bit ECC error rate",
    94: "contained memory error",
}
RECOVERY_XID = 154  # "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)(?:\.[0-9a-fA-F])?\):\s*(\d+)")
_RECOVERY_NONE = re.compile(r"to 0x0+\s*\(None\)", re.IGNORECASE)


# ----------------------------------------------------------------------------------------------
# small helpers
# ----------------------------------------------------------------------------------------------

def _int(value):
    """An int from 3 / '3' / '3 bank(s)' / {'value': 3}; None when not a count."""
    if isinstance(value, dict):
        return _int(value.get("value"))
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = _clean(value)
    if text is None:
        return None
    match = re.match(r"^(\d+)\b", text)
    return int(match.group(1)) if match else None


def _flag(value):
    """True / False from Yes / No / Active / a count; None when unknown."""
    text = _clean(value)
    if text is None:
        return None
    lowered = text.lower()
    if lowered in ("yes", "true", "active", "enabled"):
        return True
    if lowered in ("no", "false", "not active", "disabled"):
        return False
    count = _int(text)
    return None if count is None else count > 0


def _text(elem, path):
    """The cleaned text of a child element, None when absent or N/A."""
    if elem is None:
        return None
    child = elem.find(path)
    return None if child is None else _clean(child.text)


def _bus_key(bus_id):
    """(domain, bus, device) from '00000000:18:00.0', 'PCI:0000:18:00' or '0000:18:00'."""
    text = _clean(bus_id)
    if text is None:
        return None
    if text.upper().startswith("PCI:"):
        text = text[4:]
    parts = text.split(".")[0].split(":")
    if len(parts) == 2:
        parts = ["0"] + parts
    if len(parts) != 3:
        return None
    try:
        return tuple(int(p, 16) for p in parts)
    except ValueError:
        return None


# ----------------------------------------------------------------------------------------------
# nvidia-smi -q -x
# ----------------------------------------------------------------------------------------------

# ECC counter element -> (kind, part). Drivers >= 550 split SRAM uncorrectable into parity and
# SEC-DED; Ampere/Hopper drivers before that print sram_uncorrectable; Volta and older print
# single_bit / double_bit blocks (handled in _ecc_block).
_ECC_COUNTERS = {
    "sram_correctable": ("correctable", "sram"),
    "dram_correctable": ("correctable", "dram"),
    "sram_uncorrectable": ("uncorrectable", "sram"),
    "sram_uncorrectable_parity": ("uncorrectable", "sram parity"),
    "sram_uncorrectable_secded": ("uncorrectable", "sram secded"),
    "dram_uncorrectable": ("uncorrectable", "dram"),
}


def _ecc_block(elem):
    """{'correctable': n|None, 'uncorrectable': n|None, 'correctable_parts': {...},
    'uncorrectable_parts': {...}} of a <volatile> or <aggregate> element."""
    out = {"correctable": None, "uncorrectable": None, "correctable_parts": {}, "uncorrectable_parts": {}}
    if elem is None:
        return out
    for child in elem:
        if child.tag in _ECC_COUNTERS:
            kind, part = _ECC_COUNTERS[child.tag]
            count = _int(child.text)
            if count is not None:
                out[kind + "_parts"][part] = count
                out[kind] = (out[kind] or 0) + count
        elif child.tag in ("single_bit", "double_bit"):
            kind = "correctable" if child.tag == "single_bit" else "uncorrectable"
            out[kind] = _int(_text(child, "total"))
            for part in child:
                count = _int(part.text)
                if part.tag != "total" and count is not None:
                    out[kind + "_parts"][part.tag.replace("_", " ")] = count
    return out


def _retired_pages(elem):
    if elem is None:
        return {"single_bit": None, "double_bit": None, "pending": None}
    pending = [_flag(_text(elem, tag)) for tag in ("pending_blacklist", "pending_retirement")]
    known = [p for p in pending if p is not None]
    return {"single_bit": _int(_text(elem, "multiple_single_bit_retirement/retired_count")),
            "double_bit": _int(_text(elem, "double_bit_retirement/retired_count")),
            "pending": any(known) if known else None}


def _remapped_rows(elem):
    """Remapped rows; <remapped_rows>N/A</remapped_rows> (MIG mode, pre-Ampere) reads all None."""
    return {"correctable": _int(_text(elem, "remapped_row_corr")),
            "uncorrectable": _int(_text(elem, "remapped_row_unc")),
            "pending": _flag(_text(elem, "remapped_row_pending")),
            "failure": _flag(_text(elem, "remapped_row_failure"))}


def _active_reasons(gpu):
    """Names of the active clocks event reasons ('clocks_throttle_reasons' before driver 535);
    None when the section is absent."""
    for section, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                            ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        elem = gpu.find(section)
        if elem is not None:
            return [child.tag[len(prefix):] if child.tag.startswith(prefix) else child.tag
                    for child in elem if _clean(child.text) and child.text.strip().lower() == "active"]
    return None


def parse_nvidia_query_xml(text):
    """GPUs of ``nvidia-smi -q -x``: [] when the text is not an nvidia_smi_log document."""
    try:
        root = ET.fromstring((text or "").strip().encode("utf-8"))
    except (ET.ParseError, ValueError):
        return []
    gpus = []
    for index, gpu in enumerate(root.iter("gpu")):
        ecc = gpu.find("ecc_errors")
        fabric = gpu.find("fabric")
        gpus.append({
            "index": index,
            "bus_id": _clean(gpu.get("id")) or _text(gpu, "pci/pci_bus_id"),
            "name": _text(gpu, "product_name"),
            "uuid": _text(gpu, "uuid"),
            "persistence_mode": _text(gpu, "persistence_mode"),
            "mig_mode": _text(gpu, "mig_mode/current_mig"),
            "compute_mode": _text(gpu, "compute_mode"),
            "ecc_mode": _text(gpu, "ecc_mode/current_ecc"),
            "ecc": {"volatile": _ecc_block(None if ecc is None else ecc.find("volatile")),
                    "aggregate": _ecc_block(None if ecc is None else ecc.find("aggregate"))},
            "retired_pages": _retired_pages(gpu.find("retired_pages")),
            "remapped_rows": _remapped_rows(gpu.find("remapped_rows")),
            "clocks_event_reasons": _active_reasons(gpu),
            "fabric": {"state": _text(fabric, "state"), "status": _text(fabric, "status")},
        })
    return gpus


def bus_index(gpus):
    """{bus id: index} of parsed GPUs (parse_nvidia_query_xml), for parse_xid_lines."""
    return dict((g["bus_id"], g["index"]) for g in gpus if g.get("bus_id"))


# ----------------------------------------------------------------------------------------------
# kernel log
# ----------------------------------------------------------------------------------------------

def parse_xid_lines(text, bus_to_index):
    """XID events of kernel log text: [{'gpu': index or None, 'xid': n, 'line': str}].

    bus_to_index maps PCI bus ids (any spelling: '00000000:18:00.0', '0000:18:00') to GPU
    indexes, or is a list of bus ids in index order. A bus it does not know gives gpu None."""
    if isinstance(bus_to_index, (list, tuple)):
        bus_to_index = dict((bus, i) for i, bus in enumerate(bus_to_index))
    known = {}
    for bus, index in (bus_to_index or {}).items():
        key = _bus_key(bus)
        if key is not None:
            known[key] = index
    events = []
    for line in (text or "").splitlines():
        match = _XID.search(line)
        if not match:
            continue
        key = tuple(int(match.group(i), 16) for i in (1, 2, 3))
        events.append({"gpu": known.get(key), "xid": int(match.group(4)), "line": line.strip()})
    return events


# ----------------------------------------------------------------------------------------------
# amd-smi
# ----------------------------------------------------------------------------------------------

def parse_amd_smi_ecc_json(text):
    """GPUs of ``amd-smi metric --ecc [--ecc-blocks] --json``: [{'index', 'correctable',
    'uncorrectable', 'deferred', 'blocks': {block: {...}}}]; totals summed from the blocks
    when only ``--ecc-blocks`` was asked."""
    gpus = []
    for position, item in enumerate(_amd_items(load_json(text))):
        ecc = item.get("ecc") if isinstance(item.get("ecc"), dict) else {}
        raw_blocks = item.get("ecc_blocks") if isinstance(item.get("ecc_blocks"), dict) else {}
        blocks = {}
        for name, counts in raw_blocks.items():
            if isinstance(counts, dict):
                blocks[str(name)] = dict((kind, _int(counts.get(kind + "_count")))
                                         for kind in ("correctable", "uncorrectable", "deferred"))
        entry = {"index": _int(item.get("gpu")), "blocks": blocks}
        if entry["index"] is None:
            entry["index"] = position
        for kind in ("correctable", "uncorrectable", "deferred"):
            total = _int(ecc.get("total_%s_count" % kind))
            if total is None and blocks:
                counts = [b[kind] for b in blocks.values() if b[kind] is not None]
                total = sum(counts) if counts else None
            entry[kind] = total
        gpus.append(entry)
    return gpus


def _link_words(value):
    """The status words of one link_status value: 'U', ['U', 'D'], 'U/U', 'SELF', 'N/A'."""
    values = value if isinstance(value, list) else [value]
    words = []
    for item in values:
        words.extend(w.strip().upper() for w in str(item).split("/") if w.strip())
    return words


def _link_rows(doc):
    """Every dict carrying 'link_status' in an amd-smi xgmi document, wherever the release puts it."""
    if isinstance(doc, dict):
        if "link_status" in doc and ("gpu" in doc or "bdf" in doc):
            return [doc]
        rows = []
        for value in doc.values():
            rows.extend(_link_rows(value))
        return rows
    if isinstance(doc, list):
        rows = []
        for value in doc:
            rows.extend(_link_rows(value))
        return rows
    return []


def parse_amd_smi_xgmi(text):
    """Per GPU XGMI link counts of ``amd-smi xgmi --link-status --json``:
    [{'index', 'bdf', 'up', 'down', 'disabled'}].

    Shape from AMD SMI's CLI source (amdsmi_cli/amdsmi_commands.py, ``xgmi``) and changelog:
    one row per GPU, ``{"gpu", "bdf", "link_status": [...]}``, the list holding ``U`` / ``D`` /
    ``X`` (up / down / disabled) per link (ROCm 6.4) or per peer GPU with ``SELF``, ``N/A`` and
    ``U/U`` for several links (ROCm 7.1+); the wrapper around the rows is not documented, so any
    nesting is read. ``SELF`` and ``N/A`` are not counted."""
    gpus = []
    for position, row in enumerate(_link_rows(load_json(text))):
        words = _link_words(row.get("link_status"))
        index = _int(str(row.get("gpu", "")).upper().replace("GPU", ""))
        gpus.append({"index": position if index is None else index, "bdf": _clean(row.get("bdf")),
                     "up": sum(1 for w in words if w in ("U", "UP")),
                     "down": sum(1 for w in words if w in ("D", "DOWN")),
                     "disabled": sum(1 for w in words if w in ("X", "DISABLED"))})
    return gpus


# ----------------------------------------------------------------------------------------------
# verdict
# ----------------------------------------------------------------------------------------------

def _parts(parts):
    named = [name for name, count in sorted(parts.items()) if count]
    return " (%s)" % ", ".join(named) if named else ""


def _nvidia_findings(gpu):
    found = []
    volatile, aggregate = gpu["ecc"]["volatile"], gpu["ecc"]["aggregate"]
    unc = [(volatile, "volatile"), (aggregate, "aggregate")]
    counts = ["%d %s%s" % (block["uncorrectable"], label, _parts(block["uncorrectable_parts"]))
              for block, label in unc if block["uncorrectable"]]
    if counts:
        found.append(("failed", "uncorrectable ECC errors: " + ", ".join(counts)))
    rows = gpu["remapped_rows"]
    if rows["failure"]:
        found.append(("failed", "row remapping failed (no spare rows left)"))
    if rows["pending"]:
        found.append(("failed", "row remapping pending: the GPU needs a reset"))
    if gpu["retired_pages"]["pending"]:
        found.append(("failed", "page retirement pending: the GPU needs a reset"))
    if volatile["correctable"]:
        found.append(("degraded", "correctable ECC errors: %d volatile%s"
                      % (volatile["correctable"], _parts(volatile["correctable_parts"]))))
    for reason in gpu["clocks_event_reasons"] or []:
        if reason in SLOWDOWN_REASONS:
            found.append(("degraded", "clocks slowed down: %s active" % reason))
    return found


def _xid_finding(event):
    xid = event["xid"]
    if xid in FAILED_XIDS:
        return ("failed", "XID %d in the kernel log: %s" % (xid, FAILED_XIDS[xid]))
    if xid in DEGRADED_XIDS:
        return ("degraded", "XID %d in the kernel log: %s" % (xid, DEGRADED_XIDS[xid]))
    if xid == RECOVERY_XID and not _RECOVERY_NONE.search(event["line"]):
        return ("failed", "XID 154 in the kernel log: recovery action required")
    return None


def _amd_findings(ecc):
    found = []
    if ecc["uncorrectable"]:
        blocks = dict((name, b["uncorrectable"]) for name, b in ecc["blocks"].items())
        found.append(("failed", "uncorrectable ECC errors: %d%s" % (ecc["uncorrectable"], _parts(blocks))))
    for kind in ("correctable", "deferred"):
        if ecc[kind]:
            blocks = dict((name, b[kind]) for name, b in ecc["blocks"].items())
            found.append(("degraded", "%s ECC errors: %d%s" % (kind, ecc[kind], _parts(blocks))))
    return found


def verdict(nvidia=None, xids=None, amd_ecc=None, xgmi=None, count=None):
    """One entry per GPU, in index order: {'index', 'state', 'evidence': [str]}.

    Takes the parsers' results (any of them may be None); count adds healthy entries for GPUs
    no parser listed. XID events with gpu None (an unknown bus) name no GPU and are left out."""
    findings = {}
    for index in range(count or 0):
        findings.setdefault(index, [])
    for gpu in nvidia or []:
        findings.setdefault(gpu["index"], []).extend(_nvidia_findings(gpu))
    for event in xids or []:
        if event.get("gpu") is None:
            continue
        finding = _xid_finding(event)
        findings.setdefault(event["gpu"], [])
        if finding and finding not in findings[event["gpu"]]:
            findings[event["gpu"]].append(finding)
    for ecc in amd_ecc or []:
        findings.setdefault(ecc["index"], []).extend(_amd_findings(ecc))
    for links in xgmi or []:
        found = findings.setdefault(links["index"], [])
        if links["down"]:
            found.append(("failed", "XGMI links down: %d" % links["down"]))
    out = []
    for index in sorted(findings):
        states = [state for state, _ in findings[index]]
        state = "failed" if "failed" in states else "degraded" if "degraded" in states else "healthy"
        out.append({"index": index, "state": state, "evidence": [text for _, text in findings[index]]})
    return out
