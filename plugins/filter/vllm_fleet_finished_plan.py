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
    recorded process, layout, venv and accelerator unit block. A recorded one is kept as it ran.
    rollback.yml and the uv runtime's restore pass every recorded plan through it.
options:
  _input:
    description: The recorded host plan.
    type: dict
    required: true
  tunables:
    description: The host's C(vllm_fleet_docker_*) variables (unset ones take the defaults).
    type: dict
    required: true
"""


def finished_plan(plan, tunables):
    return finish_plan(plan, dict(tunables))


class FilterModule:
    def filters(self):
        return {"vllm_fleet_finished_plan": finished_plan}
