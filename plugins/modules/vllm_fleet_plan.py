#!/usr/bin/python
# -*- coding: utf-8 -*-
# The work happens on the controller in plugins/action/vllm_fleet_plan.py; this file
# carries the documentation, as Ansible expects for action plugins.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_fleet_plan
short_description: Plan a vLLM recipe deployment for the hosts of a group
description:
  - Runs on the controller. Collects the C(vllm_fleet_*) settings, addresses and GPU facts
    of every host in O(hosts), groups them into deployments (C(vllm_fleet_deployment),
    default recipe name + hardware), renders the recipe with the vllm-fleet engine and
    returns this host's processes (argv, env, image, port, health target) with every
    placeholder resolved.
  - Fails, naming the host and the variable, when the inventory is inconsistent or a
    choice is invalid; nothing is changed on any host.
  - In diff mode the exact command of the host is shown as the diff.
options:
  hosts:
    description: Hosts taking part (normally C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  recipe_sources:
    description: Recipe trees or API JSON files, stacked left to right.
    type: list
    elements: path
    required: true
  all_hosts:
    description:
      - Plan every deployment of O(hosts) and return them all as RV(plans) instead of setting
        this host's C(vllm_fleet_plan) fact. Meant for C(run_once), then each host takes its
        entry; large fleets then read the hosts' variables once instead of once per host.
    type: bool
    default: false
  fit_checks:
    description:
      - Check each host's GPU count against its hardware profile and the instance's GPU memory
        against the variant's C(vram_minimum_gb), from the host's GPU facts (per host, also
        C(vllm_fleet_preflight_check_gpus) / C(vllm_fleet_preflight_check_vram)), and fit the
        layout to the GPUs the facts report (a C(vllm_fleet_gpus) set, a fixed replica count, the
        GPUs per node a command needs). Off for status and teardown, which must work on a host
        that lost a GPU, so the layout then comes from the inventory (C(auto) replicas over the
        hardware profile's GPUs, as deploy required them).
    type: bool
    default: true
author: vllm-fleet
notes:
  - Runs on the controller only; hosts need nothing installed for it.
"""

EXAMPLES = r"""
- name: Plan this host's processes
  vllm_fleet_plan:
    hosts: "{{ ansible_play_hosts_all }}"
    recipe_sources: ["{{ playbook_dir }}/../recipes"]
"""

RETURN = r"""
ansible_facts:
  description: C(vllm_fleet_plan), this host's plan.
  returned: success
  type: dict
  contains:
    vllm_fleet_plan:
      description: >-
        deployment, recipe, variant, hardware, strategy, deploy_type, node_count, runtime,
        accelerator, accelerator_setup (name, unit, uv), instance, instance_hosts, head, node_rank, command
        (shell form, for humans), health, hash and processes (name, role, rank, argv, env,
        secret_env, image, port, serves_http, served_model_name, model_path, hash; engines: their
        container block (docker) or unit block (uv) of accelerator settings).
      type: dict
      returned: success
plans:
  description: With O(all_hosts), every planned host's plan (same shape as C(vllm_fleet_plan)).
  returned: when all_hosts is true
  type: dict
"""
