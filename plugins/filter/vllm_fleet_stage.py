# -*- coding: utf-8 -*-
"""The stage playbook's schedule: which snapshot each host receives from whom, round by round."""

from __future__ import annotations


from ansible.errors import AnsibleFilterError

# The engine (plugins/module_utils/vllm_fleet) is the installed `vllm_fleet` package (`pip install -e .`).
# Imported plainly: every playbook starts with the plan action (playbooks/_plan.yml), whose one
# import guard (plugins/action/vllm_fleet_plan.py) says what to install when it is missing.
from vllm_fleet import staging

DOCUMENTATION = r"""
---
name: vllm_fleet_stage_schedule
short_description: The staging schedule of a run (vllm_fleet.staging.fleet_schedule)
description:
  - From every play host's plan (its C(stage) block), the snapshots to stage, the fan-out rounds and what each
    host receives and sends in each round.
options:
  _input:
    description: hostvars.
    type: dict
    required: true
  hosts:
    description: The play's hosts.
    type: list
    required: true
  cache_dir:
    description: The controller directory Hub snapshots are downloaded to.
    type: str
    required: true
  have:
    description: Hosts that already hold a verified copy of their snapshot (they send, never receive).
    type: list
    default: []
  relay:
    description: Hosts send on what they hold (false, the controller sends to every host).
    type: bool
    default: true
  download:
    description: Where a Hub snapshot is downloaded, C(controller) or C(host) (one host of it, the seed).
    type: str
    default: controller
"""


def stage_schedule(hostvars, hosts, cache_dir, have=(), relay=True, download="controller"):
    stages = {h: (hostvars[h].get("vllm_fleet_plan") or {}).get("stage") for h in hosts}
    addresses = {h: str(hostvars[h].get("ansible_host") or h) for h in hosts}
    try:
        return staging.fleet_schedule(stages, str(cache_dir), list(have or ()), bool(relay), str(download), addresses)
    except ValueError as exc:
        raise AnsibleFilterError(f"vllm-fleet staging: {exc}") from None


class FilterModule:
    def filters(self):
        return {"vllm_fleet_stage_schedule": stage_schedule}
