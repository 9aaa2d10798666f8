#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The planned containers' host side: prepare them; keep, drop or put back their previous revision."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_fleet_container
short_description: Prepare the planned containers' host side; keep, drop or restore their previous revision
description:
  - C(state=prepared) creates the host directories the containers mount (C(dirs), mode 0755),
    requires C(dirs_present) (a shared cache mounted read-only), pulls the images as C(pull)
    says (C(never), C(missing), C(always)) with C(docker pull) and reads each image's id;
    RV(identity) is the sorted ids joined with commas. A missing image fails, naming it and the
    pull policy. In check mode nothing is created or pulled.
  - C(state=kept) (before a changed process starts) stops each container whose
    C(vllm-fleet.plan-hash) label is not its process's hash and renames it to
    C(<name><suffix>), removing an older kept one first; for a process that serves HTTP it then
    waits until the port is free. Containers of the same revision and absent ones are left alone.
  - C(state=committed) (the new revision serves) removes each kept C(<name><suffix>).
  - C(state=restored) (the new revision failed) removes the new container of each process that
    has a kept revision or carries the process's hash, renames the kept one back and starts it.
    A container still on the previous revision is left alone; a retired engine comes with hash
    C(retired), which no container carries.
  - One remote run per rollout step for all of the host's containers; every docker call is an
    argv (module_utils vllm_fleet_container).
options:
  processes:
    description: The step's processes (C(name), C(hash), C(port), C(serves_http), C(docker_run.stop_timeout));
      required unless state is prepared.
    type: list
    elements: dict
    default: []
  state:
    description: What to do.
    type: str
    choices: [prepared, kept, committed, restored]
    required: true
  suffix:
    description: The kept revision's name suffix (the plan's layout.kept_suffix); required unless state is prepared.
    type: str
  dirs:
    description: Host directories to create (state=prepared).
    type: list
    elements: path
    default: []
  dirs_present:
    description: Host directories that must exist already (state=prepared).
    type: list
    elements: path
    default: []
  images:
    description: The images the containers run (state=prepared).
    type: list
    elements: str
    default: []
  pull:
    description: When to pull them (vllm_fleet_docker_pull; state=prepared).
    type: str
    choices: [never, missing, always]
    default: missing
  stop_timeout:
    description: Seconds docker waits for a container to exit on SIGTERM, for a process whose finished
      spec has no C(docker_run.stop_timeout) (a revision recorded before the plan carried it).
    type: int
    default: 30
author: vllm-fleet
"""

EXAMPLES = r"""
- name: Keep the running revision to fall back to
  vllm_fleet_container:
    processes: "{{ vllm_fleet_docker_processes }}"
    state: kept
    suffix: "{{ vllm_fleet_plan.layout.kept_suffix }}"
"""

RETURN = r"""
identity:
  description: The images' ids, sorted and joined with commas (state=prepared).
  returned: when state is prepared
  type: str
actions:
  description: What was done (or would be, in check mode), one line per container.
  returned: always
  type: list
  elements: str
kept:
  description: The containers stopped and kept (state=kept).
  returned: when state is kept
  type: list
  elements: str
restored:
  description: The containers started again from their kept revision (state=restored).
  returned: when state is restored
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_fleet_container import ContainerError, commit, keep, prepare, restore


def main():
    module = AnsibleModule(
        argument_spec=dict(
            processes=dict(type="list", elements="dict", default=[]),
            state=dict(type="str", choices=["prepared", "kept", "committed", "restored"], required=True),
            suffix=dict(type="str"),
            stop_timeout=dict(type="int", default=30),
            dirs=dict(type="list", elements="path", default=[]),
            dirs_present=dict(type="list", elements="path", default=[]),
            images=dict(type="list", elements="str", default=[]),
            pull=dict(type="str", choices=["never", "missing", "always"], default="missing"),
        ),
        required_if=[("state", "kept", ["suffix"]), ("state", "committed", ["suffix"]),
                     ("state", "restored", ["suffix"])],
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] != "prepared" and (not p["suffix"] or "/" in p["suffix"]):
        module.fail_json(msg=f"suffix {p['suffix']!r} is not a container name suffix")
    for proc in p["processes"]:
        if not isinstance(proc, dict) or not proc.get("name"):
            module.fail_json(msg=f"processes: every item needs a name, got {proc!r}"[:300])

    def run(argv):
        return module.run_command(argv)

    try:
        if p["state"] == "prepared":
            out = prepare(run, p["dirs"], p["dirs_present"], p["images"], p["pull"], check=module.check_mode)
        elif p["state"] == "kept":
            out = keep(run, p["processes"], p["suffix"], p["stop_timeout"], check=module.check_mode)
        elif p["state"] == "committed":
            out = commit(run, p["processes"], p["suffix"], check=module.check_mode)
        else:
            out = restore(run, p["processes"], p["suffix"], check=module.check_mode)
    except ContainerError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**out)


if __name__ == "__main__":
    main()
