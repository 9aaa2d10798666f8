#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Is this host already running exactly its plan, healthy? (the re-run fast path)"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_fleet_state
short_description: Tell whether a host already runs exactly its planned processes, healthy
description:
  - Reads the marker deploy.yml writes after a host passed every phase (the host plan's
    hash), the state of every planned process (docker container status and plan-hash label,
    or the systemd unit's ActiveState) and, for processes with an HTTP health endpoint, one
    C(GET /health) with a short timeout.
  - RV(current) is true only when the marker matches the plan, every process runs with the
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
  marker:
    description: Path of the marker file holding the hash of the last fully deployed plan.
    type: path
    required: true
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
    marker: /var/lib/vllm-fleet/state/ernie-vl-h200.plan
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
"""

import os
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule
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
            marker=dict(type="path", required=True),
            plan_hash=dict(type="str", required=True),
            host=dict(type="str", default="127.0.0.1"),
            timeout=dict(type="float", default=3),
        ),
        supports_check_mode=True,
    )
    p = module.params
    reasons = []
    stale = []
    try:
        with open(p["marker"], encoding="utf-8") as fh:
            deployed = fh.read().strip()
    except OSError:
        deployed = None
    if deployed != p["plan_hash"]:
        reasons.append(f"marker {p['marker']}: {'missing' if deployed is None else 'another plan'}")
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
    module.exit_json(changed=False, current=not reasons, reasons=reasons, stale=stale,
                     marker_exists=os.path.exists(p["marker"]))


if __name__ == "__main__":
    main()
