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
  host_facts:
    description:
      - Also gather the host's facts, as M(ansible.builtin.setup) with this C(gather_subset) does
        (for example C([min, network])), in the same call (one remote round trip for both). Local
        facts (C(/etc/ansible/facts.d)) are not read. Empty (the default) gathers none.
    type: list
    elements: str
    default: []
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

import os
import re

from ansible.module_utils.vllm_fleet_gpu_health import (
    bus_index, parse_amd_smi_ecc_json, parse_amd_smi_xgmi, parse_nvidia_query_xml, parse_xid_lines, verdict)
from ansible.module_utils.vllm_fleet_gpu_values import first_line
from ansible.module_utils.vllm_fleet_gpu_nvidia import (
    NVIDIA_QUERY, NVIDIA_TOPO, parse_cuda_version, parse_nvidia_driver_version, parse_nvidia_query, parse_nvidia_topo)
from ansible.module_utils.vllm_fleet_gpu_amd import (
    AMD_SMI_LIST, AMD_SMI_LIST_ENUM, AMD_SMI_NUMA, AMD_SMI_STATIC, AMD_SMI_TOPOLOGY, AMD_SMI_VERSION, KFD_NODE_PROPERTIES,
    NO_AMD_GPU, RENDER_NODE, ROCM_OPT_DIRS, ROCM_SMI_QUERY, ROCM_VERSION_FILE, parse_amd_smi_list, parse_amd_smi_numa,
    parse_amd_smi_static, parse_amd_smi_topology, parse_amd_smi_version, parse_kfd_render_minor, parse_rocm_smi)
from ansible.module_utils.vllm_fleet_gpu_host import CPUINFO, parse_cpu_model, probe_cpus
from ansible.module_utils.vllm_fleet_gpu_taxonomy import HardwareError, resolve

# What the tools print is read by module_utils, one file per source: vllm_fleet_gpu_nvidia
# (nvidia-smi), vllm_fleet_gpu_amd (amd-smi, rocm-smi, KFD render nodes), vllm_fleet_gpu_host
# (/proc/cpuinfo, NUMA cpulists), vllm_fleet_gpu_health (GPU health); vllm_fleet_gpu_taxonomy
# maps the facts to a hardware id. This module runs the commands, reads the files and reports.

# GPU health (health=true): NVIDIA's XML log (ECC, retired pages, remapped rows, clocks event
# reasons, modes), the kernel log's XID lines since boot, AMD's ECC/RAS counters and XGMI links
NVIDIA_HEALTH = ["-q", "-x"]
KERNEL_LOG = (("dmesg", []), ("journalctl", ["-k", "-b", "--no-pager", "-q", "-o", "short-monotonic"]))
AMD_SMI_ECC = ["metric", "--ecc", "--json"]
AMD_SMI_XGMI = ["xgmi", "--link-status", "--json"]


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
            host_facts=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    host = gather_host_facts(module, module.params["host_facts"]) if module.params["host_facts"] else {}
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
        module.fail_json(msg=str(exc), ansible_facts=dict(host, vllm_fleet_gpu=facts))
    for warning in warnings:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts=dict(host, vllm_fleet_gpu=facts))


def gather_host_facts(module, subset):
    """The host's facts for ``gather_subset`` ``subset``, collected and named exactly as
    ansible.builtin.setup collects and names them (``ansible_`` prefixed; the same minimal set)."""
    from ansible.module_utils.facts import ansible_collector, default_collectors
    from ansible.module_utils.facts.collector import CollectorNotFoundError, CycleFoundInFactDeps, UnresolvedFactDep
    from ansible.module_utils.facts.namespace import PrefixFactNamespace

    minimal = frozenset(["apparmor", "caps", "cmdline", "date_time", "distribution", "dns", "env", "fips", "local",
                         "lsb", "pkg_mgr", "platform", "python", "selinux", "service_mgr", "ssh_pub_keys", "user"])
    try:
        collector = ansible_collector.get_ansible_collector(
            all_collector_classes=default_collectors.collectors,
            namespace=PrefixFactNamespace(namespace_name="ansible", prefix="ansible_"),
            filter_spec=[], gather_subset=subset, gather_timeout=10, minimal_gather_subset=minimal)
    except (TypeError, CollectorNotFoundError, CycleFoundInFactDeps, UnresolvedFactDep) as exc:
        # what setup refuses as a bad subset, refused the same way
        module.fail_json(msg="host_facts: %s" % exc)
    return collector.collect(module=module)


if __name__ == "__main__":
    main()
