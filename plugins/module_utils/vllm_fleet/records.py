"""The revision records of a host (``<state_dir>/<deployment>/rev-<N>.json``): the one reader
and writer of them, for the modules that run on the host (vllm_fleet_revision records, reads,
prunes and removes them; vllm_fleet_state reads the current one to decide whether a host runs
its plan). A record is the whole host plan of one revision, with the paths the deployment
created, the time and the operator's note; the newest is what the host runs.

Old hosts: every read goes through :func:`todays_plan` (plans recorded by an older vllm-fleet
under today's key names), and :func:`deployed_hash` falls back to the ``<deployment>.plan`` marker
an older vllm-fleet wrote beside the records (compatibility in this one place)."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile

from .layout import LEGACY_MARKER_SUFFIX, NAME_RE, VENV_ROOT, deployment_layout, host_layout, plan_venv
from .secret_table import BY_ENV
from .serving import DEFAULT_DRAIN_TIMEOUT


REV = re.compile(r"^rev-([0-9]{1,9})\.json\Z")


def revisions(folder):
    """Revision numbers recorded in a deployment's folder, oldest first."""
    found = []
    for entry in os.listdir(folder) if os.path.isdir(folder) else []:
        match = REV.match(entry)
        if match:
            found.append(int(match.group(1)))
    return sorted(found)


def todays_plan(plan):
    """A recorded plan under today's key names. Plans recorded before the accelerator got one
    word carry the accelerator's name (cuda | rocm | cpu | xpu | tpu | none) as ``vendor`` and
    the host's accelerator setup (name, unit, uv) as ``accelerator``; today these are
    ``accelerator`` and ``accelerator_setup``. Plans recorded before ``secret_vars`` get it from
    their processes' secret names, plans recorded before ``drain_timeout`` the old default, plans
    recorded before ``venv`` the venv the uv role computed then, plans recorded before ``layout`` the
    default roots' paths. Every read of a record comes through here, so
    rollback.yml and a failed rollout's restore hand the roles a plan they accept. The hash is
    the recorded one (it covers the processes and files, which kept their keys)."""
    if not isinstance(plan, dict):
        return plan
    plan = dict(plan)
    if "vendor" in plan:
        if "accelerator" in plan:
            plan["accelerator_setup"] = plan.pop("accelerator")
        plan["accelerator"] = plan.pop("vendor")
    if "secret_vars" not in plan:
        # recorded before the plan named each secret's variable (secret_table): the env names its
        # processes get, through today's table
        names = {env for proc in plan.get("processes") or [] for env in proc.get("secret_env") or []} | \
            {cred.get("secret") for proc in plan.get("processes") or [] for cred in proc.get("credentials") or []}
        plan["secret_vars"] = {env: BY_ENV[env].var for env in sorted(n for n in names if n in BY_ENV)}
    # recorded before the instance had a word of its own: it was ``unit``, which now means a
    # systemd unit only (a process's ``unit`` block is one)
    if isinstance(plan.get("unit"), str) and "instance_name" not in plan:
        plan["instance_name"] = plan.pop("unit")
    # recorded before the plan carried the drain's bound: what the drain role's default was
    plan.setdefault("drain_timeout", DEFAULT_DRAIN_TIMEOUT)
    # recorded before the plan named the uv engines' venv: the one the uv role computed then, with
    # the default vllm_fleet_uv_root and this host's Python (the interpreter Ansible runs this
    # module with, which is the facts' python.executable the role used)
    setup = plan.get("accelerator_setup")
    if "venv" not in plan and plan.get("deployment"):
        venv = plan_venv(VENV_ROOT, plan["deployment"], plan.get("vllm_version"),
                         setup.get("uv") if isinstance(setup, dict) else None, plan.get("processes") or [], sys.executable)
        if venv:
            plan["venv"] = venv
    # recorded before the plan carried its paths: the default roots'
    if "layout" not in plan and NAME_RE.fullmatch(str(plan.get("deployment") or "")):
        plan["layout"] = deployment_layout(host_layout({}), plan["deployment"])
    return plan


def load(folder, number):
    with open(os.path.join(folder, f"rev-{number}.json"), encoding="utf-8") as handle:
        record = json.load(handle)
    if isinstance(record, dict) and "plan" in record:
        record["plan"] = todays_plan(record["plan"])
    return record


def write_private(path, data):
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".rev-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
            handle.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def deployment_folders(state_dir):
    """(name, folder) of every deployment recorded under ``state_dir``, by name."""
    for name in sorted(os.listdir(state_dir)) if os.path.isdir(state_dir) else []:
        folder = os.path.join(state_dir, name)
        if NAME_RE.match(name) and os.path.isdir(folder):
            yield name, folder


def read_all(state_dir, only=None):
    out = {}
    for name, folder in deployment_folders(state_dir):
        if only and name != only:
            continue
        numbers = revisions(folder)
        if not numbers:
            continue
        entries = []
        for number in numbers:
            rec = load(folder, number)
            entries.append({"number": number, "hash": rec.get("hash"), "time": rec.get("time"),
                            "note": rec.get("note", "")})
        out[name] = {"current": numbers[-1], "revisions": entries, "record": load(folder, numbers[-1])}
    return out


def plans_recorded(state_dir, skip=None, skip_numbers=()):
    """Every recorded plan on the host, of every deployment and revision; ``skip``: a deployment
    left out entirely (or, with ``skip_numbers``, only those revisions of it)."""
    out = []
    for name, folder in deployment_folders(state_dir):
        if name == skip and not skip_numbers:
            continue
        for number in revisions(folder):
            if name == skip and number in skip_numbers:
                continue
            plan = load(folder, number).get("plan")
            if isinstance(plan, dict):
                out.append(plan)
    return out


def deployed_hash(state_dir, deployment, found=None):
    """The hash of the plan the host runs for ``deployment``: its current record's, else (a host
    an older vllm-fleet deployed) the legacy marker's; None when neither exists. ``found``: the
    deployment's entry of :func:`read_all`, when already read."""
    entry = found if found is not None else read_all(state_dir, deployment).get(deployment)
    if entry:
        return (entry.get("record") or {}).get("hash")
    try:
        with open(os.path.join(state_dir, deployment + LEGACY_MARKER_SUFFIX), encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None
