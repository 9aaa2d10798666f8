#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Is this host already running exactly its plan, healthy? (the re-run fast path)"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_fleet_state
short_description: Tell whether a host already runs exactly its planned processes, healthy
description:
  - Reads the deployment's revision records on the host (the one read of them in a deploy;
    RV(deployments) is what C(vllm_fleet_revision state=read) returns, for the rollout's restore
    and the next revision's number), the state of every planned process (docker container status
    and plan-hash label, or the systemd unit's ActiveState) and, for processes with an HTTP health
    endpoint, one C(GET /health) with a short timeout.
  - RV(current) is true only when the current record's plan hash (on a host an older vllm-fleet
    deployed, its C(<deployment>.plan) marker) matches the plan, every process runs with the
    planned hash and every endpoint answers 200. deploy.yml then skips preflight, prepare,
    start and the health gate for instances whose hosts are all current, which is what makes
    an unchanged re-run cheap.
  - Never changes anything.
options:
  processes:
    description: The host plan's processes (name, runtime, hash, serves_http, port, health).
    type: list
    elements: dict
    required: true
  deployment:
    description: The deployment's name (its records are C(<state_dir>/<deployment>/rev-<N>.json)).
    type: str
    required: true
  state_dir:
    description: Root of the revision records.
    type: path
    default: /var/lib/vllm-fleet/state
  plan_hash:
    description: This host plan's hash.
    type: str
    required: true
  host:
    description: Address the health probes connect to, from the host itself.
    type: str
    default: 127.0.0.1
  timeout:
    description: Seconds per health probe.
    type: float
    default: 3
author: vllm-fleet
"""

EXAMPLES = r"""
- name: Read what is deployed
  vllm_fleet_state:
    processes: "{{ vllm_fleet_plan.processes }}"
    deployment: "{{ vllm_fleet_plan.deployment }}"
    plan_hash: "{{ vllm_fleet_plan.hash }}"
"""

RETURN = r"""
current:
  description: The host runs its plan, every process up with the planned hash, endpoints healthy.
  returned: always
  type: bool
reasons:
  description: Why the host is not current (empty when it is).
  returned: always
  type: list
  elements: str
stale:
  description: The planned processes that do not run as planned (not running, another plan
    hash, endpoint not healthy); the rollout switches replicas that are stale or changed.
  returned: always
  type: list
  elements: str
deployments:
  description: >-
    The deployment's records on the host, as C(vllm_fleet_revision state=read) returns them:
    current (number), revisions (number, hash, time, note) and record (the current revision).
    Empty when nothing is recorded.
  returned: always
  type: dict
"""

import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_fleet.layout import NAME_RE
from ansible.module_utils.vllm_fleet.records import deployed_hash, read_all
from ansible.module_utils.vllm_fleet_process import state as process_state


def healthy(url, timeout):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - the host's own port
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def main():
    module = AnsibleModule(
        argument_spec=dict(
            processes=dict(type="list", elements="dict", required=True),
            deployment=dict(type="str", required=True),
            state_dir=dict(type="path", default="/var/lib/vllm-fleet/state"),
            plan_hash=dict(type="str", required=True),
            host=dict(type="str", default="127.0.0.1"),
            timeout=dict(type="float", default=3),
        ),
        supports_check_mode=True,
    )
    p = module.params
    name = p["deployment"]
    if not NAME_RE.match(name) or ".." in name:
        module.fail_json(msg=f"deployment name {name!r} is not a safe name")
    reasons = []
    stale = []
    found = read_all(p["state_dir"], name)
    deployed = deployed_hash(p["state_dir"], name, found.get(name))
    if deployed != p["plan_hash"]:
        reasons.append(f"{name}: {'nothing recorded' if deployed is None else 'another plan recorded'}")
    for proc in p["processes"]:
        name, runtime = proc["name"], proc.get("runtime")
        seen = process_state(module.run_command, runtime, name)
        if not seen["running"]:
            reasons.append(f"{name}: {seen['state']}")
            stale.append(name)
            continue
        if runtime == "docker" and seen["plan_hash"] != proc.get("hash"):
            reasons.append(f"{name}: runs plan {seen['plan_hash']}, planned {proc.get('hash')}")
            stale.append(name)
            continue
        health = proc.get("health") or {}
        port = health.get("port") or (proc.get("port") if proc.get("serves_http") else None)
        if port and (proc.get("serves_http") or health.get("kind") == "http"):
            # where the process listens (the plan's probe_host, vllm_fleet_listen), else host
            url = f"http://{proc.get('probe_host') or p['host']}:{port}/health"
            if not healthy(url, p["timeout"]):
                reasons.append(f"{name}: {url} does not answer 200")
                stale.append(name)
    module.exit_json(changed=False, current=not reasons, reasons=reasons, stale=stale, deployments=found)


if __name__ == "__main__":
    main()
