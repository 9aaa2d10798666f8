#!/usr/bin/python
# -*- coding: utf-8 -*-
"""What a host runs, recorded on the host: revisions of each deployment's plan."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_fleet_revision
short_description: Record and read the revisions of vLLM deployments on a host
description:
  - O(state=recorded) stores this host's plan of a deployment as a new revision when it differs
    from the current one (by plan hash), with the whole host plan (processes, argv, env without secret
    values, images, ports, config files), the paths the deployment created on the host, the
    time and the operator's note, in C(<state_dir>/<deployment>/rev-<N>.json) (directory 0700,
    files 0600, root only). The newest O(keep) revisions stay; older ones are removed and
    returned as RV(pruned) so their venvs and images can be collected.
  - O(state=read) returns every deployment recorded on the host (RV(deployments)), including
    deployments no longer in the inventory; the records are the source of truth for status, teardown and
    rollback. A plan recorded by an older vllm-fleet is returned under today's key names (its
    C(vendor) as C(accelerator), its C(accelerator) block as C(accelerator_setup)).
  - O(state=absent) removes a deployment's records (after teardown removed what they list).
  - With O(collect), what the revisions leaving (pruned by O(state=recorded), or every revision of the deployment
    O(state=absent) removes) used on the host and no remaining record of any deployment still uses is removed
    and returned as RV(collected) - the staged model snapshots of sources hub and controller (with their
    manifests) and the engines' compile caches. A snapshot a recorded revision still uses is never removed; a
    C(path) source's directory is the operator's and never touched.
  - Secret values never reach a record. The plan carries secret names only, and a plan in
    which any O(redact) value is found fails the module instead of being written.
options:
  state:
    description: What to do.
    type: str
    choices: [recorded, read, absent]
    default: read
  deployment:
    description: The deployment's name (required for recorded and absent; read filters on it when given).
    type: str
  plan:
    description: This host's plan of the deployment (vllm_fleet_plan).
    type: dict
  paths:
    description: Paths this deployment created on the host (venvs, env and unit files, config dirs).
    type: list
    elements: str
    default: []
  note:
    description: The operator's note for the change (vllm_fleet_change_note).
    type: str
    default: ""
  keep:
    description: Revisions kept per deployment.
    type: int
    default: 3
  state_dir:
    description: Root of the records.
    type: path
    default: /var/lib/vllm-fleet/state
  revision:
    description:
      - With O(state=read) and O(deployment), also return as RV(selected) what the host ran at
        deployment revision N, its newest revision numbered N or lower (revision numbers count the
        changes of the whole deployment, see O(number)). A host with none fails the module, naming
        its revisions.
    type: str
  number:
    description:
      - With O(state=recorded), the number of the new revision (deploy.yml passes one above the
        newest any host of the deployment recorded); at least one above this host's current.
    type: int
  collect:
    description: Remove what the leaving revisions alone used (recorded, absent; see RV(collected)).
    type: bool
    default: false
  redact:
    description: Secret values that must not appear in a record (checked, never stored).
    type: list
    elements: str
    default: []
    no_log: true
author: vllm-fleet
"""

EXAMPLES = r"""
- name: Record what this host now runs
  vllm_fleet_revision:
    state: recorded
    deployment: "{{ vllm_fleet_plan.deployment }}"
    plan: "{{ vllm_fleet_plan }}"
    note: "{{ vllm_fleet_change_note | default('') }}"

- name: Read every deployment recorded here
  vllm_fleet_revision:
  register: recorded
"""

RETURN = r"""
revision:
  description: The current revision number of the deployment (recorded).
  returned: state=recorded
  type: int
pruned:
  description: Revisions removed beyond O(keep), each with its number, hash, paths and uses (staged snapshots, compile caches).
  returned: state=recorded
  type: list
  elements: dict
collected:
  description: Paths removed (or, in check mode, that would be) because only the leaving revisions used them.
  returned: state=recorded or state=absent
  type: list
  elements: str
deployments:
  description: >-
    Per deployment: current (number), revisions (number, hash, time, note, newest last) and
    record (the current revision: plan, paths, hash, time, note).
  returned: state=read
  type: dict
selected:
  description: The record of O(revision) (plan, paths, hash, time, note, number).
  returned: state=read with revision
  type: dict
"""

import json
import os
import re
import shutil
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_fleet import staging
from ansible.module_utils.vllm_fleet.layout import NAME_RE
from ansible.module_utils.vllm_fleet.records import load, plans_recorded, read_all, revisions, write_private

def collect(leaving, staying, check_mode):
    """Remove what only the ``leaving`` plans used (staging.collectable); the paths removed."""
    paths = [path for path in staging.collectable(leaving, staying) if os.path.lexists(path)]
    for path in paths if not check_mode else []:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    return paths


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["recorded", "read", "absent"], default="read"),
            deployment=dict(type="str"),
            plan=dict(type="dict"),
            paths=dict(type="list", elements="str", default=[]),
            note=dict(type="str", default=""),
            keep=dict(type="int", default=3),
            state_dir=dict(type="path", default="/var/lib/vllm-fleet/state"),
            redact=dict(type="list", elements="str", default=[], no_log=True),
            revision=dict(type="str"),
            number=dict(type="int"),
            collect=dict(type="bool", default=False),
        ),
        required_if=[("state", "recorded", ("deployment", "plan")), ("state", "absent", ("deployment",))],
        required_by={"revision": ("deployment",)},
        supports_check_mode=True,
    )
    p = module.params
    name = p["deployment"]
    if name is not None and (not NAME_RE.match(name) or ".." in name):
        module.fail_json(msg=f"deployment name {name!r} is not a safe name")
    if p["state"] == "read":
        found = read_all(p["state_dir"], name)
        if p["revision"] is None:
            module.exit_json(changed=False, deployments=found)
        folder = os.path.join(p["state_dir"], name)
        numbers = revisions(folder)
        wanted = p["revision"].strip()
        if not re.match(r"^[0-9]{1,9}\Z", wanted):
            module.fail_json(msg=f"vllm_fleet_rollback_to: {wanted!r} is not a revision number")
        # what this host ran at deployment revision N: its newest revision up to N (a host whose
        # plan did not change at N kept the older one)
        upto = [n for n in numbers if n <= int(wanted)]
        number = upto[-1] if upto else None
        if number is None:
            have = ", ".join(map(str, numbers)) or "none"
            module.fail_json(msg=f"deployment {name} has no revision {wanted} or older on this host "
                                 f"(recorded revisions: {have})")
        module.exit_json(changed=False, deployments=found, selected=load(folder, number))
    folder = os.path.join(p["state_dir"], name)
    if p["state"] == "absent":
        changed = os.path.isdir(folder)
        collected = []
        if changed and p["collect"]:
            leaving = [load(folder, n).get("plan") or {} for n in revisions(folder)]
            collected = collect(leaving, plans_recorded(p["state_dir"], skip=name), module.check_mode)
        if changed and not module.check_mode:
            shutil.rmtree(folder)
        module.exit_json(changed=changed, collected=collected)
    if p["keep"] < 1:
        module.fail_json(msg="keep must be at least 1")
    plan = p["plan"]
    body = json.dumps(plan, sort_keys=True, default=str)
    if any(secret and secret in body for secret in p["redact"]):
        module.fail_json(msg=f"refusing to record deployment {name}: its plan holds a secret value")
    numbers = revisions(folder)
    current = load(folder, numbers[-1]) if numbers else None
    if current is not None and current.get("hash") == plan.get("hash") and \
            sorted(current.get("paths") or []) == sorted(p["paths"]):
        module.exit_json(changed=False, revision=numbers[-1], pruned=[], collected=[])
    number = max((numbers[-1] + 1) if numbers else 1, p["number"] or 0)
    record = {"deployment": name, "number": number, "hash": plan.get("hash"), "plan": plan,
              "paths": sorted(set(p["paths"])), "note": p["note"],
              "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    pruned, leaving = [], []
    keep_from = (numbers + [number])[-p["keep"]:][0]
    for old in numbers:
        if old < keep_from:
            rec = load(folder, old)
            pruned.append({"number": old, "hash": rec.get("hash"), "paths": rec.get("paths") or [],
                           "uses": staging.plan_uses(rec.get("plan") or {})})
            leaving.append(rec.get("plan") or {})
    if not module.check_mode:
        os.makedirs(p["state_dir"], mode=0o700, exist_ok=True)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
        write_private(os.path.join(folder, f"rev-{number}.json"), record)
        for old in pruned:
            os.unlink(os.path.join(folder, f"rev-{old['number']}.json"))
    collected = []
    if p["collect"] and leaving:
        staying = plans_recorded(p["state_dir"], skip=name, skip_numbers={old["number"] for old in pruned})
        if module.check_mode:     # the new record was not written
            staying.append(plan)
        collected = collect(leaving, staying, module.check_mode)
    module.exit_json(changed=True, revision=number, pruned=pruned, collected=collected)


if __name__ == "__main__":
    main()
