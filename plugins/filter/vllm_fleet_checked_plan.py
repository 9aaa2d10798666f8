# -*- coding: utf-8 -*-
"""The roles' check of the plan they are handed: its shape against the plan's own types."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

# The engine (plugins/module_utils/vllm_fleet) is the installed `vllm_fleet` package; its one
# import guard is the plan action's (the first task of every playbook).
from vllm_fleet.plancheck import problems

DOCUMENTATION = r"""
---
name: checked_plan
short_description: Refuse a vllm_fleet_plan that is not a plan, naming each wrong field
description:
  - Checks a host plan (the dict the vllm_fleet_plan action sets as C(vllm_fleet_plan)) against
    the plan's own types (C(vllm_fleet.hostplan): HostPlan and PlannedProcess, through
    C(vllm_fleet.plancheck)): every field there with its type, no key the plan does not declare.
    Returns true (or, with O(as_plan), the plan itself); fails naming every wrong field otherwise.
  - Each role that reads the plan sets C(vllm_fleet_<role>_plan_checked) to this filter over
    C(vllm_fleet_plan) (its vars/main.yml) and declares it in its argument_specs, so Ansible's
    argument validation of the role runs it before any task of the role reads the plan (a role
    used on its own, as Molecule and an operator's playbook use it).
  - The bundle's playbooks check a plan once, where they take it (the plan action's, or a
    recorded one that rollback.yml goes back to), with O(as_plan), and include the roles without
    their argument validation (C(rolespec_validate=false)): one check per host and run instead of
    one per role included (nine in a rollout step).
options:
  _input:
    description: The host plan.
    type: dict
    required: true
  as_plan:
    description: Return the plan itself (checked) instead of true.
    type: bool
    default: false
"""


def checked_plan(plan, as_plan=False):
    found = problems(plan)
    if found:
        raise AnsibleFilterError("vllm_fleet_plan is not a host plan of this vllm-fleet (hand the role the "
                                 "vllm_fleet_plan action's, or `vllm-fleet plan`'s): " + "; ".join(found))
    return plan if as_plan else True


class FilterModule:
    def filters(self):
        return {"vllm_fleet_checked_plan": checked_plan}
