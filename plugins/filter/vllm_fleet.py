# -*- coding: utf-8 -*-
"""Filters that turn argv lists and env maps into systemd syntax (argv stays argv), and pin
requirements; the rollout's filters (order, failures, revisions, the run report) are in
vllm_fleet_rollout.py."""

from __future__ import annotations

import re

# The engine (plugins/module_utils/vllm_fleet) is the installed `vllm_fleet` package (`pip install -e .`).
# Imported plainly: every playbook starts with the plan action (playbooks/_plan.yml), whose one
# import guard (plugins/action/vllm_fleet_plan.py) says what to install when it is missing.
from vllm_fleet.readiness import settings_problem
from vllm_fleet.topology import ranges as gpu_ranges


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

_SAFE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+\Z")


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
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", str(key)):
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
        if not re.match(r"^[a-z][a-z0-9_]*\Z", name) or not re.match(r"^[A-Z_][A-Z0-9_]*\Z", str(cred["env"])):
            raise ValueError(f"invalid credential {cred!r}")
        out[str(cred["env"])] = f"%d/{name}"
    return out


_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)\Z")


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


def process_line(proc):
    """One planned process as ``--check --diff`` shows it: its name, GPU set (when it has one),
    port and command (argv joined for reading; never run)."""
    where = [f"GPU {gpu_ranges(proc['gpus'])}"] if proc.get("gpus") is not None else []
    if proc.get("serves_http") and proc.get("port"):
        where.append(f"port {proc['port']}")
    return f"{proc['name']} ({', '.join(where)}): " + " ".join(proc["argv"]) if where else \
        f"{proc['name']}: " + " ".join(proc["argv"])


class FilterModule:
    def filters(self):
        return {
            "vllm_fleet_pin_requirements": pin_requirements,
            "vllm_fleet_systemd_exec": systemd_exec,
            "vllm_fleet_systemd_env_line": systemd_env_line,
            "vllm_fleet_credential_env": credential_env,
            # GPU numbers as ranges ([1, 2, 3, 5] -> "1-3,5"), the planner's wording
            "vllm_fleet_gpu_ranges": gpu_ranges,
            "vllm_fleet_process_line": process_line,
            # the plan lacks its accelerator's settings (an older plan): the problem, or None
            "vllm_fleet_settings_problem": settings_problem,
        }
