# -*- coding: utf-8 -*-
"""Controller-side plan: what this host must run, computed from the whole deployment."""

from __future__ import annotations

# Documentation: plugins/modules/vllm_fleet_plan.py (ansible-doc reads it there).

import json
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import replace

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

# The engine (plugins/module_utils/vllm_fleet) is the installed `vllm_fleet` package
# (pyproject.toml; `pip install -e .`): Ansible's module_utils import hook serves modules,
# not controller-side plugins.
try:
    from vllm_fleet import contract, loader
    from vllm_fleet.plan import PlanError, deployment_of, host_input, plan, plan_fleet, plan_hash
except ImportError as exc:  # the one setup mistake here: say what to run, not a traceback
    raise ImportError(f"vllm-fleet: the engine package vllm_fleet is not installed for {sys.executable}: "
                      "run `pip install -e .` in the vllm-fleet checkout") from exc


ROLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")

_CACHE = {}
_LOCK = threading.Lock()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts", "recipe_sources", "all_hosts", "contract_only", "fit_checks"))

    def _plan_group(self, sources, group):
        key = plan_hash([sources, [(h.name, h.settings, h.address, h.iface, h.gpu,
                                    h.instance, h.node_rank, h.roles, h.check_gpus, h.check_vram) for h in group]])
        with _LOCK:
            cached = _CACHE.get(key)
            if cached is None:
                try:
                    cached = plan(loader.load(sources), group)
                except (PlanError, loader.LoadError) as exc:
                    cached = exc
                _CACHE[key] = cached
        return cached

    def _read(self, names, hostvars):
        """Every host's vllm_fleet_* variables, checked against the contract (and the roles'
        argument_specs for role tunables); returns ({host: checked values}, problems)."""
        specs, declared = _role_specs()
        checked, problems = {}, []
        for name in names:
            raw, evaluated = {}, hostvars[name]
            for key in [k for k in evaluated.keys() if str(k).startswith(contract.PREFIX)]:
                try:
                    raw[key] = _plain(evaluated[key])
                except Exception as exc:  # an undefined or broken template in the inventory
                    problems.append(f"{name}: {key}: cannot be evaluated: {to_text(exc).splitlines()[0]}")
            values, found = contract.check(name, raw, declared, contract.path_tunables(specs))
            problems += found
            tunables = {k: v for k, v in raw.items() if k in specs and k not in contract.BY_NAME}
            if tunables:
                problems += _check_tunables(name, tunables, specs)
            checked[name] = values
        problems += _group_conflicts(hostvars, names)
        return checked, problems

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        hostvars = task_vars["hostvars"]
        me = task_vars["inventory_hostname"]
        checked, problems = self._read(args["hosts"], hostvars)
        if problems:
            raise AnsibleActionFail("vllm-fleet: the inventory breaks the contract (nothing was changed):\n"
                                    + "\n".join(problems))
        if args.get("contract_only"):
            result.update(changed=False, msg=f"{len(checked)} host(s) checked against the inventory contract",
                          run={name: contract.run_options(values) for name, values in checked.items()})
            return result
        digest_key = _digest_key(checked)
        inputs = [host_input(h, checked[h], hostvars[h], digest_key) for h in args["hosts"]
                  if checked[h].get("vllm_fleet_recipe")]
        if not boolean(args.get("fit_checks", True), strict=False):   # status, teardown
            inputs = [replace(h, check_gpus=False, check_vram=False) for h in inputs]
        if args.get("all_hosts"):
            # every deployment of the play at once (run_once): O(hosts) hostvars reads in all,
            # instead of O(hosts) per host
            try:
                plans, errors = plan_fleet(loader.load(args["recipe_sources"]), inputs)
            except loader.LoadError as exc:
                raise AnsibleActionFail(f"vllm_fleet_recipe_sources: {exc}") from exc
            if errors:
                raise AnsibleActionFail("\n".join(errors))
            result.update(changed=False, plans=plans,
                          msg=f"{len(plans)} host(s) in {len({p['deployment'] for p in plans.values()})} deployment(s)")
            return result
        mine = next((h for h in inputs if h.name == me), None)
        if mine is None:
            raise AnsibleActionFail(f"{me}: vllm_fleet_recipe: not set for this host")
        group = [h for h in inputs if deployment_of(h) == deployment_of(mine)]
        cached = self._plan_group(args["recipe_sources"], group)
        if isinstance(cached, Exception):
            raise AnsibleActionFail("vllm-fleet plan failed for deployment "
                                    f"{deployment_of(mine)!r}:\n{cached}")
        host_plan = cached[me]
        result.update(changed=False, ansible_facts={"vllm_fleet_plan": host_plan},
                      msg=host_plan["command"])
        if self._task.diff or self._play_context.diff:
            result["diff"] = {"before": "", "after": host_plan["command"] + "\n",
                              "after_header": f"{me}: {host_plan['deployment']} "
                                              f"({host_plan['recipe']}, {host_plan['hardware']}, "
                                              f"{host_plan['strategy']}, rank {host_plan['node_rank']})"}
        return result


def _plain(value):
    """Ansible's (lazy, tagged) containers and strings as plain Python values."""
    if isinstance(value, Mapping):
        return {to_text(k) if isinstance(k, str) else k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return to_text(value)
    return value


_SPECS = None


def _role_specs():
    global _SPECS
    if _SPECS is None:
        _SPECS = contract.role_declarations(ROLES_DIR)
    return _SPECS


def _check_tunables(host, values, specs):
    """Role tunables set in the inventory, validated as the role itself would (Ansible's validator)."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    problems = []
    for name, value in sorted(values.items()):
        if value is None:
            continue
        outcome = ArgumentSpecValidator({name: specs[name]}).validate({name: value})
        for error in outcome.error_messages:
            problems.append(f"{host}: {name}: {error}")
    return problems


def _group_conflicts(hostvars, names):
    """A host in two groups that each choose a recipe/deployment gets one of them silently
    (Ansible merges group variables): refuse it, naming the groups."""
    try:
        from ansible.vars.plugins import get_vars_from_inventory_sources

        inventory = hostvars._inventory
        loader = hostvars._loader
    except (AttributeError, ImportError):  # pragma: no cover - other Ansible internals
        return []
    keys = ("vllm_fleet_recipe", "vllm_fleet_deployment")
    chooses = {}
    problems = []
    for name in names:
        host = inventory.get_host(name)
        if host is None:
            continue
        groups = []
        for group in host.get_groups():
            if group.name == "all":
                continue
            if group.name not in chooses:
                data = dict(get_vars_from_inventory_sources(loader, inventory._sources, [group], "inventory"))
                data.update(group.get_vars())
                chooses[group.name] = {k: data[k] for k in keys if k in data}
            if chooses[group.name]:
                groups.append(group.name)
        distinct = {json.dumps(chooses[g], sort_keys=True, default=str) for g in groups}
        if len(distinct) > 1:
            problems.append(f"{name}: vllm_fleet_recipe/vllm_fleet_deployment: the host is in {len(groups)} "
                            f"deployment groups ({', '.join(sorted(groups))}) that choose different recipes or "
                            f"deployments; Ansible would silently keep one. A host belongs to one deployment: "
                            f"move it, or give each deployment its own inventory host with the machine's ansible_host "
                            f"and its own vllm_fleet_gpus (several deployments on one machine)")
    return problems


def _digest_key(checked):
    """Key of the secrets' keyed digest: vllm_fleet_secret_digest_key when the inventory sets it
    (several controllers), else a random key kept on this controller (created 0600 once)."""
    given = next((v.get("vllm_fleet_secret_digest_key") for v in checked.values()
                  if v.get("vllm_fleet_secret_digest_key")), None)
    if given:
        return given.encode()
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    path = os.path.join(base, "vllm-fleet", "secret-digest.key")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another worker made it first
            pass
        else:
            with os.fdopen(fd, "wb") as handle:
                handle.write(os.urandom(32).hex().encode())
    with open(path, "rb") as handle:
        return handle.read().strip()
