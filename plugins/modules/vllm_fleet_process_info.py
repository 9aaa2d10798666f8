#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The state of planned processes (containers or systemd units), in one vocabulary."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_fleet_process_info
short_description: Read the state of vllm-fleet processes (docker containers, systemd units)
description:
  - For each process (name and runtime, as in a host plan), reads the container's or the
    unit's state through module_utils vllm_fleet_process, the one probe every vllm-fleet module
    uses, and reports it in one vocabulary for both runtimes - C(running), C(starting),
    C(restarting), C(stopping), C(stopped), C(failed), C(absent), C(unknown) - with the restart
    count, main PID, the container's plan-hash label and the runtime's own word.
  - Used by status.yml (the table's state column), preflight's port check (is the listener on
    a planned port this deployment's own process) and the health role (processes without
    HTTP must be running).
  - Never changes anything.
options:
  processes:
    description: Processes to read; each needs C(name) and C(runtime) (docker, uv or service).
      Other keys are ignored (a whole host plan's process list can be passed).
    type: list
    elements: dict
    required: true
author: vllm-fleet
"""

EXAMPLES = r"""
- name: Read the state of this host's planned processes
  vllm_fleet_process_info:
    processes: "{{ vllm_fleet_plan.processes }}"
  register: vllm_fleet_seen

- name: Fail unless every one runs
  ansible.builtin.assert:
    that: vllm_fleet_seen.processes | rejectattr('running') | list | length == 0
"""

RETURN = r"""
processes:
  description: One entry per process, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The container or unit name.
      type: str
    runtime:
      description: docker, uv or service.
      type: str
    state:
      description: running, starting, restarting, stopping, stopped, failed, absent or unknown.
      type: str
    running:
      description: C(state) is running.
      type: bool
    alive:
      description: C(state) is running, starting or restarting (the process holds or is about to hold its port).
      type: bool
    restarts:
      description: Restarts counted by docker or systemd (NRestarts).
      type: int
    pid:
      description: Main PID, when running.
      type: int
    plan_hash:
      description: The container's vllm-fleet.plan-hash label (units carry none).
      type: str
    exit_code:
      description: The last exit code, where the runtime reports one.
      type: int
    uptime_s:
      description: Seconds since the process started (docker State.StartedAt; systemd
        ExecMainStartTimestampMonotonic), while running; null otherwise.
      type: int
    raw:
      description: The runtime's own word (docker status; systemd ActiveState/SubState), for messages.
      type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_fleet_process import state as process_state


def main():
    module = AnsibleModule(
        argument_spec=dict(processes=dict(type="list", elements="dict", required=True)),
        supports_check_mode=True,
    )
    out = []
    for index, proc in enumerate(module.params["processes"]):
        name, runtime = proc.get("name"), proc.get("runtime")
        if not isinstance(name, str) or not name or runtime not in ("docker", "uv", "service"):
            module.fail_json(msg=f"processes[{index}]: needs a name and a runtime of docker, uv or service "
                                 f"(got name={name!r}, runtime={runtime!r})")
        out.append({"name": name, "runtime": runtime, **process_state(module.run_command, runtime, name)})
    module.exit_json(changed=False, processes=out)


if __name__ == "__main__":
    main()
