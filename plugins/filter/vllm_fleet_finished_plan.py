# -*- coding: utf-8 -*-
"""A recorded plan made whole for today's roles: the finished runtime specs a plan recorded
before the plan carried them lacks."""

from __future__ import annotations

from vllm_fleet.runtimespec import finish_plan

DOCUMENTATION = r"""
---
name: finished_plan
short_description: Give a recorded plan's processes the finished runtime specs they lack
description:
  - A plan recorded before the plan carried C(docker_run) (the finished container of a docker
    process, C(vllm_fleet.runtimespec)) gets it made from the recorded process and layout and
    today's docker tunables (the host's C(vllm_fleet_docker_*) variables); one recorded before its
    uv engines and services carried C(systemd_run) (their finished unit) gets that from the
    recorded process, layout, venv and accelerator unit block (a recorded one lacking today's
    entries gets them); what it lacks of the layout and the accelerator setup comes from
    O(today). What was recorded is kept as it ran. rollback.yml and the uv runtime's restore
    pass every recorded plan through it: the controller's one place for old records (the host's
    reader, C(vllm_fleet.records.todays_plan), renames old keys).
options:
  _input:
    description: The recorded host plan.
    type: dict
    required: true
  tunables:
    description: The host's C(vllm_fleet_docker_*) variables (unset ones take the defaults).
    type: dict
    required: true
  today:
    description:
      - This host's plan of this run. A recorded plan takes from it what it was recorded without
        (the C(accelerator_setup) block, layout entries); what was recorded is kept.
    type: dict
    required: false
"""


def finished_plan(plan, tunables, today=None):
    return finish_plan(plan, dict(tunables), dict(today) if today else None)


class FilterModule:
    def filters(self):
        return {"vllm_fleet_finished_plan": finished_plan}
