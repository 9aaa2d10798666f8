#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Is this host ready for its accelerator? (vllm_fleet_cuda, vllm_fleet_rocm: one task, one read)"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_fleet_accelerator_ready
short_description: Refuse a host that is not ready for its accelerator (CUDA, ROCm), in one read
description:
  - One remote read of what the accelerator roles check, then the rules of
    C(vllm_fleet.readiness) over the readings, the GPU facts and the host's plan. Fails, naming
    the host and each problem with what to do, when the host is not ready; warnings (a GPU without
    persistence mode) are printed and do not fail.
  - "C(cuda): the plan carries the CUDA settings; nvidia-smi answers; for docker engines the
    engine's nvidia runtime, a CDI spec or the NVIDIA container runtime hook; on an NVSwitch system
    (8+ GPUs all-to-all NVLink, or a GPU fabric state) an active nvidia-fabricmanager; no GPU the
    plan uses in MIG mode (unless O(allow_mig)) or a non-default compute mode."
  - "C(rocm): the plan carries the ROCm settings; the amdgpu module is loaded (O(check_amdgpu));
    /dev/kfd, /dev/dri and the render nodes the plan hands out exist; for uv engines the groups
    render and video exist and hold O(uv_user) or O(uv_user_groups) adds it; no engine asks for
    AITER on GPUs other than gfx942 / gfx950."
  - Never changes anything.
options:
  host:
    description: The host's inventory name (each message starts with it).
    type: str
    required: true
  accelerator:
    description: The accelerator the plan was made for.
    type: str
    choices: [cuda, rocm]
    required: true
  plan:
    description: "The host's plan (C(vllm_fleet_plan)): deployment, accelerator_setup, processes."
    type: dict
    required: true
  gpu:
    description: The GPU facts (C(vllm_fleet_gpu_facts)); empty where they were not read.
    type: dict
    default: {}
  check_fabricmanager:
    description: CUDA, NVSwitch systems only. Refuse the host unless nvidia-fabricmanager is active.
    type: bool
    default: true
  allow_mig:
    description: CUDA. Serve on GPUs whose MIG mode is Enabled.
    type: bool
    default: false
  check_amdgpu:
    description: ROCm. Refuse the host unless C(/sys/module/amdgpu) exists.
    type: bool
    default: true
  uv_user:
    description: ROCm, uv engines. The engines' user (empty or root needs no device group).
    type: str
    default: vllm-fleet
  uv_user_groups:
    description: ROCm, uv engines. The groups the uv role adds the user to where the host has them.
    type: list
    elements: str
    default: [video, render]
author: vllm-fleet
"""

EXAMPLES = r"""
- name: Check the host's CUDA readiness
  vllm_fleet_accelerator_ready:
    host: "{{ inventory_hostname }}"
    accelerator: cuda
    plan: "{{ vllm_fleet_plan }}"
    gpu: "{{ vllm_fleet_gpu | default({}) }}"
"""

RETURN = r"""
probe:
  description: What was read on the host (driver answer, docker runtimes, CDI specs, hook, fabric
    manager state; ROCm device nodes, amdgpu module, groups).
  returned: always
  type: dict
advice:
  description: What does not refuse the host but should be fixed (also printed as warnings).
  returned: always
  type: list
  elements: str
problems:
  description: Why the host is refused (empty when it is ready).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_fleet import readiness


def main():
    module = AnsibleModule(
        argument_spec=dict(
            host=dict(type="str", required=True),
            accelerator=dict(type="str", required=True, choices=["cuda", "rocm"]),
            plan=dict(type="dict", required=True),
            gpu=dict(type="dict", default={}),
            check_fabricmanager=dict(type="bool", default=True),
            allow_mig=dict(type="bool", default=False),
            check_amdgpu=dict(type="bool", default=True),
            uv_user=dict(type="str", default="vllm-fleet"),
            uv_user_groups=dict(type="list", elements="str", default=["video", "render"]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    plan, gpu = p["plan"], p["gpu"] or {}
    missing = readiness.settings_problem(plan, p["accelerator"])
    if missing:   # an older plan: nothing else is worth reading
        module.fail_json(msg=f"{p['host']}: {missing}", problems=[missing], probe={})

    def run(argv):
        try:
            return module.run_command(argv, handle_exceptions=False)
        except OSError as exc:   # a tool that is not installed
            return 127, "", str(exc)

    if p["accelerator"] == "cuda":
        probe = readiness.probe_cuda(run, plan, gpu, p["check_fabricmanager"])
        problems, warnings = readiness.cuda_findings(probe, plan, gpu, p["allow_mig"])
    else:
        probe = readiness.probe_rocm(plan, p["check_amdgpu"])
        problems, warnings = readiness.rocm_findings(probe, plan, gpu, p["uv_user"], p["uv_user_groups"])
    for w in warnings:
        module.warn(f"{p['host']}: {w}")
    if problems:
        module.fail_json(msg=f"{p['host']}: " + " ".join(problems), problems=problems, advice=warnings, probe=probe)
    module.exit_json(changed=False, probe=probe, problems=[], advice=warnings)


if __name__ == "__main__":
    main()
