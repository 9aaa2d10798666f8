# -*- coding: utf-8 -*-
"""The host's CPU: its model from ``/proc/cpuinfo``, the CPU lists of sysfs (the NUMA nodes'
``/sys/devices/system/node/nodeN/cpulist``), and the Intel Xeon rows of the taxonomy mapping
(what a host without a GPU maps to).

Pure and stdlib only; modules import it as ``ansible.module_utils.vllm_fleet_gpu_host`` (the facts
module ``vllm_fleet_gpu_facts`` reads the files, this file reads their text).

Sources:
  parse_cpu_model   ``/proc/cpuinfo`` (CPUINFO): the first ``model name`` line
  parse_cpulist     a sysfs cpulist (``0-47,96-143``) under NUMA_NODE_DIR
map_cpu maps the model name to ``xeon6`` or ``xeon5`` (CPU_RULES); probe_cpus gives the CPUs the
module may run on and their NUMA nodes, through the reader functions it is given."""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

CPUINFO = "/proc/cpuinfo"
# CPU cores and NUMA nodes (every host)
NUMA_NODE_DIR = "/sys/devices/system/node"

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


# ----------------------------------------------------------------------------------------------
# parsers (pure)
# ----------------------------------------------------------------------------------------------

def parse_cpu_model(text):
    """The first 'model name' of /proc/cpuinfo (None on CPUs that do not print one)."""
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "model name" and value.strip():
            return " ".join(value.split())
    return None


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

def map_cpu(model):
    for pattern, hw in CPU_RULES:
        if re.search(pattern, model or "", re.I):
            return hw
    return None


# ----------------------------------------------------------------------------------------------
# NUMA nodes (the caller's reader, directory lister and affinity are injected)
# ----------------------------------------------------------------------------------------------

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
