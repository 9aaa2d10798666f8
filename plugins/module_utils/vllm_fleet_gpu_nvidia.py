# -*- coding: utf-8 -*-
"""NVIDIA GPUs from what ``nvidia-smi`` prints, and the NVIDIA rows of the taxonomy mapping.

Pure and stdlib only; modules import it as ``ansible.module_utils.vllm_fleet_gpu_nvidia`` (the
facts module ``vllm_fleet_gpu_facts`` runs the commands, this file reads their output).

Sources (canned samples of each form: ``tests/fixtures/gpu``, its README names the driver
release of each, and the FAKE ``tests/fakes/bin/nvidia-smi``, shaped like driver 570):
  parse_nvidia_query            ``nvidia-smi --query-gpu=index,name,memory.total,driver_version,
                                pci.bus_id --format=csv,noheader,nounits`` (NVIDIA_QUERY; a header
                                line and unit suffixes are tolerated: ``--format=csv`` of a DGX Spark)
  parse_cuda_version            the plain ``nvidia-smi`` table header (``CUDA Version: 12.8``) or
                                ``nvidia-smi -q`` (``CUDA Version : 12.2``, ``Not Found`` on vGPU hosts)
  parse_nvidia_driver_version   ``nvidia-smi -q`` (``Driver Version : 535.161.08``)
  parse_nvidia_topo             ``nvidia-smi topo -m`` (NVIDIA_TOPO; drivers 5xx, ANSI-underlined header)
The GPU health of ``nvidia-smi -q -x`` is read by ``vllm_fleet_gpu_health``.

map_nvidia maps a marketing name and GPU count to a taxonomy hardware id (NVIDIA_RULES)."""

from __future__ import absolute_import, division, print_function

import csv
import re

from ansible.module_utils.vllm_fleet_smi import clean as _clean
from ansible.module_utils.vllm_fleet_gpu_values import int_or_none as _int_or_none, to_mib as _to_mib

__metaclass__ = type

NVIDIA_QUERY_FIELDS = "index,name,memory.total,driver_version,pci.bus_id"
NVIDIA_QUERY = ["--query-gpu=" + NVIDIA_QUERY_FIELDS, "--format=csv,noheader,nounits"]
# GPU topology and device nodes (read only after the GPUs were found; a failure there only
# leaves the key out)
NVIDIA_TOPO = ["topo", "-m"]

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
