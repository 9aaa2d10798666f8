# -*- coding: utf-8 -*-
"""Guards for paths the bundle removes: defence in depth behind the inventory contract."""

from __future__ import annotations

import posixpath
import re

from ansible.errors import AnsibleFilterError

# The engine (plugins/module_utils/vllm_fleet) is the installed `vllm_fleet` package (`pip install -e .`).
# Imported plainly: every playbook starts with the plan action (playbooks/_plan.yml), whose one
# import guard (plugins/action/vllm_fleet_plan.py) says what to install when it is missing.
from vllm_fleet.layout import KEPT_SUFFIX, deployment_layout, removed_paths, unit_files
from vllm_fleet.pathrules import is_system_dir
from vllm_fleet.planmodel import RESERVED

DOCUMENTATION = r"""
---
name: owned_path
short_description: Refuse a path outside the bundle's own roots before anything removes it
description:
  - Returns the path unchanged when it is absolute, free of control characters and of C(.) /
    C(..) components, is none of the bundle's own paths (the shared uv tools venv, the shared
    Hugging Face cache entries, as C(vllm_fleet.planmodel.RESERVED) lists them), and lies strictly below one of
    O(roots) (never a root itself); fails the
    task naming the path otherwise. A root that is not a clean absolute path, or is a system
    directory or a parent of one (C(/), C(/etc), C(/var/lib), and the rest of the one table in
    C(vllm_fleet.pathrules)), is never used as a root. Teardown passes every path it removes through it, so a bad
    value that slipped past the inventory contract cannot delete C(/etc) or C(/opt).
options:
  _input:
    description: The path about to be removed.
    type: str
    required: true
  roots:
    description: The bundle's own directories (for example C(/opt/vllm-fleet), C(/etc/vllm-fleet)).
    type: list
    elements: str
    required: true
  prefix:
    description: When given, the last component of the path must also start with it (unit files).
    type: str
    required: false
"""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def owned_path(path, roots, prefix=None):
    text = str(path)
    if prefix and not posixpath.basename(text).startswith(prefix):
        raise AnsibleFilterError(f"vllm-fleet refuses to remove {text!r}: its name does not start with {prefix!r}")
    parts = text.split("/")
    if not text.startswith("/") or _CONTROL.search(text) or any(p in (".", "..") for p in parts[1:]) \
            or "//" in text:
        raise AnsibleFilterError(f"vllm-fleet refuses to remove {text!r}: not a clean absolute path")
    normal = posixpath.normpath(text)
    reserved = RESERVED.get(("path", normal))
    if reserved:   # the planner refuses deployments that derive it; a record made before may name it
        raise AnsibleFilterError(f"vllm-fleet refuses to remove {text!r}: it is the bundle's own ({reserved}), "
                                 f"not a deployment's")
    for root in roots:
        base = str(root)
        if not base.startswith("/") or _CONTROL.search(base) or "//" in base \
                or any(p in (".", "..") for p in base.split("/")[1:]):
            continue
        base = base.rstrip("/") or "/"
        if is_system_dir(base):
            continue
        if normal.startswith(base + "/") and normal != base:
            return text
    raise AnsibleFilterError(f"vllm-fleet refuses to remove {text!r}: it is not below one of the bundle's "
                             f"roots ({', '.join(map(str, roots))})")


def teardown_targets(plan, recorded, orphans=False, layout=None, purge_cache=False):
    """What teardown removes on a host, per deployment: the deployment of today's plan, every
    revision of it recorded on the host, and (``orphans``) every other recorded deployment.
    Each target: deployment, containers (with their kept ``-prev``), units (reverse start
    order: routers before the Mooncake store, the store before its master), processes (name and
    runtime of each, in that reverse order: what the runtime roles' remove picks its own from; a
    unit's with its unit, env and worker-list ``files``, layout.unit_files),
    paths: the recorded paths plus the deployment's own (``layout``: the host's roots,
    ``vllm_fleet_run.layout``; layout.removed_paths: venvs, config directory, legacy marker,
    and with ``purge_cache`` its caches)."""
    targets = {}

    def add(name, processes, paths):
        entry = targets.setdefault(name, {"deployment": name, "processes": {}, "paths": set()})
        for proc in processes or []:
            entry["processes"].setdefault(proc["name"], proc.get("runtime"))
        entry["paths"].update(paths or [])

    if plan:
        add(plan["deployment"], plan.get("processes"), [])
    for name, entry in sorted((recorded or {}).items()):
        if name in targets or orphans:
            for revision in [entry.get("record") or {}]:
                add(name, (revision.get("plan") or {}).get("processes"), revision.get("paths"))
    out = []
    for name, entry in targets.items():
        procs = list(entry["processes"].items())
        units = [n for n, rt in reversed(procs) if rt in ("uv", "service")]
        own = removed_paths(deployment_layout(layout, name), bool(units), purge_cache) if layout else []
        # docker: each process's containers, its kept previous revision's too
        containers = {n: [n, n + KEPT_SUFFIX] for n, rt in procs if rt == "docker"}
        out.append({
            "deployment": name,
            "containers": [c for pair in containers.values() for c in pair],
            "units": units,
            "processes": [dict({"name": n, "runtime": rt}, **({"containers": containers[n]} if n in containers else {}),
                               **({"files": list(unit_files(layout, n).values())}
                                  if layout and rt in ("uv", "service") else {}))
                          for n, rt in reversed(procs)],
            "paths": own + sorted(entry["paths"] - set(own)),
            "orphan": not plan or name != plan["deployment"],
        })
    return out


class FilterModule:
    def filters(self):
        return {"vllm_fleet_owned_path": owned_path, "vllm_fleet_teardown_targets": teardown_targets}
