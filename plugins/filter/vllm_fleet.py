# -*- coding: utf-8 -*-
"""Filters that turn argv lists and env maps into systemd syntax (argv stays argv)."""

from __future__ import annotations

import os
import re
import sys

# The engine's pure-Python rollout order (plugins/module_utils/vllm_fleet/plan.py).
_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _UTILS not in sys.path:
    sys.path.insert(0, _UTILS)

from vllm_fleet.plan import flag_values  # noqa: E402
from vllm_fleet.plan import rollout as _rollout  # noqa: E402

DOCUMENTATION = r"""
---
name: systemd_exec
short_description: Quote an argv list for a systemd ExecStart= line
description:
  - Every element becomes one systemd word; elements with spaces, quotes, backslashes or
    other special characters are double-quoted with C(\\) and C(\") escapes; C($) becomes
    C($$) and C(%) becomes C(%%) so systemd expands neither variables nor specifiers.
options:
  _input:
    description: The argv list.
    type: list
    elements: str
    required: true
"""

_SAFE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def _escape(text: str) -> str:
    return text.replace("%", "%%").replace("$", "$$")


def systemd_word(arg) -> str:
    text = str(arg)
    if text and _SAFE.match(text) and text != ";":
        return _escape(text)
    inner = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + _escape(inner) + '"'


def systemd_exec(argv) -> str:
    """argv list -> ExecStart value."""
    return " ".join(systemd_word(a) for a in argv)


def systemd_env_line(key, value) -> str:
    """KEY="value" for an EnvironmentFile (double-quoted, backslash escapes)."""
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(key)):
        raise ValueError(f"invalid environment variable name {key!r}")
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'{key}="{text}"'


def credential_env(credentials) -> dict:
    """The environment that tells a systemd unit's process where its file-passed secrets are:
    the unit's credentials directory (``%d/<name>``, a LoadCredential= of the root-only host
    file, readable by the service user only while the unit runs)."""
    out = {}
    for cred in credentials or []:
        name = str(cred["name"])
        if not re.match(r"^[a-z][a-z0-9_]*$", name) or not re.match(r"^[A-Z_][A-Z0-9_]*$", str(cred["env"])):
            raise ValueError(f"invalid credential {cred!r}")
        out[str(cred["env"])] = f"%d/{name}"
    return out


def state_argv(process) -> list:
    """argv that prints a planned process's state: docker -> running/exited/..., units -> active/..."""
    name = str(process["name"])
    if process.get("runtime") == "docker":
        return ["docker", "inspect", "-f", "{{.State.Status}}", name]
    return ["systemctl", "is-active", name + ".service"]


def failed_nodes(hostvars, hosts, alive=None) -> dict:
    """Nodes among ``hosts`` that recorded a deploy failure, or left the play (``alive``)."""
    out = {}
    for host in hosts:
        failure = hostvars[host].get("vllm_fleet_deploy_failure") if host in hostvars else None
        if failure:
            out[str(host)] = str(failure).strip()
        elif alive is not None and host not in alive:
            out[str(host)] = "not in the play any more (unreachable, or failed earlier)"
    return out


FAILED_OUTCOMES = ("rolled back", "stopped", "failed")


def batch_failed_share(hostvars, hosts) -> float:
    """Percentage of the instances among ``hosts`` (a rollout batch) that did not reach their new
    revision (any node rolled back, stopped, failed or gone)."""
    instances, failed = set(), set()
    for host in hosts:
        facts = hostvars[host] if host in hostvars else {}
        plan = facts.get("vllm_fleet_plan") or {}
        key = (plan.get("deployment"), plan.get("unit"))
        instances.add(key)
        if facts.get("vllm_fleet_outcome") in FAILED_OUTCOMES or facts.get("vllm_fleet_deploy_failure"):
            failed.add(key)
    return 100.0 * len(failed) / len(instances) if instances else 0.0


def all_current(hostvars, hosts) -> bool:
    """Every one of ``hosts`` already runs its plan, healthy (vllm_fleet_current facts)."""
    return bool(hosts) and all(bool(hostvars[h].get("vllm_fleet_current")) if h in hostvars else False
                               for h in hosts)


def _recorded_numbers(hostvars, hosts, deployment, var) -> dict:
    """Revision numbers of ``deployment`` each of ``hosts`` recorded, from the registered result
    of a vllm_fleet_revision read (``var``); hosts without that result are left out."""
    out = {}
    for host in hosts:
        hv = hostvars[host] if host in hostvars else {}
        plan, read = hv.get("vllm_fleet_plan"), hv.get(var)
        if not plan or not isinstance(read, dict) or plan.get("deployment") != deployment:
            continue
        entry = (read.get("deployments") or {}).get(deployment) or {}
        out[str(host)] = sorted(int(r["number"]) for r in entry.get("revisions") or [])
    return out


def next_revision(hostvars, hosts, deployment, var="vllm_fleet_record_have") -> int:
    """The number of a deployment's next revision: one above the newest any of its hosts
    recorded, so one number names one change of the whole deployment (a host whose plan did
    not change keeps its older revision, which is what it ran at that number)."""
    numbers = [n for ns in _recorded_numbers(hostvars, hosts, deployment, var).values() for n in ns]
    return max(numbers, default=0) + 1


def rollback_target(hostvars, hosts, deployment, wanted, var="vllm_fleet_rollback_have") -> dict:
    """The deployment revision rollback.yml goes back to: ``previous`` (the one before the
    newest any host recorded) or a number some host recorded. Returns {number, error}."""
    known = sorted({n for ns in _recorded_numbers(hostvars, hosts, deployment, var).values() for n in ns})
    listed = ", ".join(map(str, known)) or "none"
    wanted = str(wanted).strip()
    if wanted == "previous":
        if len(known) < 2:
            return {"number": None, "error": f"deployment {deployment} has no previous revision "
                                             f"(recorded revisions: {listed})"}
        return {"number": known[-2], "error": ""}
    if not re.match(r"^[0-9]{1,9}$", wanted) or int(wanted) not in known:
        return {"number": None, "error": f"deployment {deployment} has no revision {wanted} "
                                         f"(recorded revisions: {listed})"}
    return {"number": int(wanted), "error": ""}


def status_processes(recorded, plan=None) -> list:
    """What status.yml reports on a host: every process of every deployment the host recorded
    (its current revision), and today's planned processes of a deployment it never recorded.
    Each: deployment, revision (None: never deployed), recipe, the process, and ``inventory``:
    ``current`` (today's plan is what runs), ``changed`` (deploy.yml would change it),
    ``orphan`` (no longer in the inventory) or ``not deployed``."""
    out = []
    today = (plan or {}).get("deployment")
    for name, entry in sorted((recorded or {}).items()):
        record = entry.get("record") or {}
        rplan = record.get("plan") or {}
        if name != today:
            inventory = "orphan"
        else:
            inventory = "current" if record.get("hash") == (plan or {}).get("hash") else "changed"
        for proc in rplan.get("processes") or []:
            out.append({"deployment": name, "revision": entry.get("current"), "recipe": rplan.get("recipe"),
                        "process": proc, "inventory": inventory})
    if today and today not in (recorded or {}):
        for proc in plan.get("processes") or []:
            out.append({"deployment": today, "revision": None, "recipe": plan.get("recipe"), "process": proc,
                        "inventory": "not deployed"})
    return out


def rollout(hostvars, hosts) -> dict:
    """Engine hosts in rollout order and Ansible's serial list (hosts per batch).

    Instances whose hosts all run their plan already (the re-run fast path) are left out."""
    plans = {}
    for host in hosts:
        plan = hostvars[host].get("vllm_fleet_plan")
        if plan and not all_current(hostvars, plan.get("instance_hosts") or [host]):
            plans[str(host)] = plan
    return _rollout(plans)


_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")


def pin_requirements(requirements, pins) -> list:
    """Requirement strings with a default version: ``name[extras] [spec]`` of a distribution in
    ``pins`` (name -> version, names compared PEP 503-normalized) gets ``==version`` added, unless
    it pins one already (``==`` / ``===``), carries a marker or URL, or is not a plain name."""
    norm = {re.sub(r"[-_.]+", "-", str(k)).lower(): str(v) for k, v in (pins or {}).items() if v}
    out = []
    for req in requirements or []:
        text = str(req).strip()
        m = _REQ_NAME.match(text)
        name = re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else None
        spec = m.group(3).strip() if m else ""
        if (not m or name not in norm or "==" in spec or ";" in spec or "@" in spec
                or (spec and not re.match(r"^(~=|!=|<=|>=|<|>)", spec))):
            out.append(text)
            continue
        out.append(f"{text},=={norm[name]}" if spec else f"{text}=={norm[name]}")
    return out


class FilterModule:
    def filters(self):
        return {
            "vllm_fleet_pin_requirements": pin_requirements,
            "vllm_fleet_state_argv": state_argv,
            "vllm_fleet_flag_values": flag_values,
            "vllm_fleet_failed_nodes": failed_nodes,
            "vllm_fleet_batch_failed_share": batch_failed_share,
            "vllm_fleet_all_current": all_current,
            "vllm_fleet_next_revision": next_revision,
            "vllm_fleet_status_processes": status_processes,
            "vllm_fleet_rollback_target": rollback_target,
            "vllm_fleet_rollout": rollout,
            "vllm_fleet_systemd_exec": systemd_exec,
            "vllm_fleet_systemd_env_line": systemd_env_line,
            "vllm_fleet_credential_env": credential_env,
        }
