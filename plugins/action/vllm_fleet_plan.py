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
    from vllm_fleet import contract, loader, monitoring
    from vllm_fleet.coerce import plain
    from vllm_fleet.placement import is_engine_host
    from vllm_fleet.plan import (PlanError, deployment_of, host_input, host_layout_of, limit_cuts, plan, plan_fleet,
                                  plan_hash, without_facts)
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
                                    h.instance, h.node_rank, h.roles, h.check_gpus, h.check_vram, h.fit_layout)
                                   for h in group]])
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
        specs, declared, path_kinds = _role_specs()
        checked, problems = {}, []
        for name in names:
            raw, evaluated = {}, hostvars[name]
            for key in [k for k in evaluated.keys() if str(k).startswith(contract.PREFIX)]:
                try:
                    raw[key] = plain(evaluated[key])
                except Exception as exc:  # an undefined or broken template in the inventory
                    problems.append(f"{name}: {key}: cannot be evaluated: {to_text(exc).splitlines()[0]}")
            values, found = contract.check(name, raw, declared, path_kinds)
            problems += found
            problems += _check_tunables(name, {k: v for k, v in raw.items() if k not in contract.BY_NAME}, specs)
            checked[name] = values
        problems += _group_conflicts(self._layers, names)
        return checked, problems

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        hostvars = task_vars["hostvars"]
        me = task_vars["inventory_hostname"]
        self._layers = _Layers(hostvars)   # where each host's variables come from, read once per run
        checked, problems = self._read(args["hosts"], hostvars)
        if args.get("contract_only"):
            problems += _inputs_problems(args["hosts"], self._layers, self._loader)
        if problems:
            _fail("vllm-fleet: the inventory breaks the contract (nothing was changed):", problems)
        if args.get("contract_only"):
            result.update(changed=False, msg=f"{len(checked)} host(s) checked against the inventory contract",
                          # each host's run options, and its roots (teardown, without a plan too)
                          run={name: dict(contract.run_options(values), layout=host_layout_of(values),
                                          monitoring_paths=monitoring.paths(values.get(
                                              "vllm_fleet_monitoring_dir", contract.BY_NAME["vllm_fleet_monitoring_dir"].default)))
                               for name, values in checked.items()})
            return result
        digest_key = _digest_key(checked)
        inputs = [host_input(h, checked[h], hostvars[h], digest_key) for h in args["hosts"]
                  if checked[h].get("vllm_fleet_recipe")]
        if not boolean(args.get("fit_checks", True), strict=False):   # status, teardown
            # nor the layout fitted to today's GPUs: a host that lost one still shows / tears down
            inputs = [replace(h, fit_layout=False) for h in inputs]
        if args.get("all_hosts"):
            # every deployment of the play at once (run_once): O(hosts) hostvars reads in all,
            # instead of O(hosts) per host. A limit (-l, vllm_fleet_target) chooses which hosts
            # change, never the shape: each deployment the play touches is planned over all of its
            # inventory hosts (those outside the play without facts: their plans only fix names,
            # ranks, pools and ports), and a limit that cuts an instance or a cluster is refused.
            in_play = set(task_vars["ansible_play_hosts_all"])
            outside = [h for h in task_vars["groups"]["all"] if h not in in_play]
            peers, peer_problems, engines_outside = self._peers(inputs, outside, hostvars, digest_key)
            if engines_outside:   # before planning: those engines' hardware is not known here
                _fail("vllm-fleet: the limit (-l / vllm_fleet_target) cuts what must change together (nothing was "
                      "changed):", engines_outside)
            if peer_problems:
                _fail("vllm-fleet: the inventory breaks the contract (nothing was changed), on hosts outside the "
                      "limit of deployments this run plans:", peer_problems)
            try:
                order = {name: i for i, name in enumerate(task_vars["groups"]["all"])}   # inventory order
                everyone = sorted(inputs + peers, key=lambda h: order.get(h.name, -1))
                plans, errors = plan_fleet(loader.load(args["recipe_sources"]), everyone)
            except loader.LoadError as exc:
                raise AnsibleActionFail(f"vllm_fleet_recipe_sources: {exc}") from exc
            if errors:
                _fail(None, errors)
            cut = limit_cuts(plans, [h.name for h in inputs])
            if cut:
                _fail("vllm-fleet: the limit (-l / vllm_fleet_target) cuts what must change together (nothing was "
                      "changed):", cut)
            plans = {h.name: plans[h.name] for h in inputs}
            result.update(changed=False, plans=plans,
                          msg=f"{len(plans)} host(s) in {len({p['deployment'] for p in plans.values()})} deployment(s)"
                              + (f"; planned with {len(peers)} host(s) outside the limit" if peers else ""))
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

    def _peers(self, inputs, outside, hostvars, digest_key):
        """Inventory hosts outside the play that belong to a deployment the play plans: their
        planning input (no facts: fit checks off), the problems among them (contract, or a
        deployment that only their GPU facts would name), and the cuts of a limit that holds only
        a deployment's service hosts (router, Mooncake master/store): its engines, all outside,
        leave their hardware to GPU facts no limited host detected."""
        touched = {deployment_of(h) for h in inputs}
        # the hardware each touched deployment runs on (one per deployment: mixed is refused),
        # for its hosts outside the limit that leave it to their GPU facts
        hardware = {}
        for host in inputs:
            hardware.setdefault(deployment_of(host), set()).add(host.settings.get("hardware") or host.gpu.get("hardware"))
        # recipes of touched deployments named from the detected hardware (no vllm_fleet_deployment)
        implicit = {h.settings.get("recipe") for h in inputs if not h.settings.get("deployment")}
        candidates = [h for h in outside if plain(hostvars[h].get("vllm_fleet_recipe")) is not None]
        if not touched or not candidates:
            return [], [], []
        checked, problems = self._read(candidates, hostvars)
        bad = {line.split(":", 1)[0] for line in problems}
        peers, mine = [], []
        for name in candidates:
            values = checked[name]
            recipe = values.get("vllm_fleet_recipe")
            if not recipe:
                continue
            if not values.get("vllm_fleet_deployment") and not values.get("vllm_fleet_hardware"):
                if recipe in implicit:
                    mine.append(f"{name}: vllm_fleet_deployment: outside the limit, with recipe {recipe} and neither "
                                f"vllm_fleet_deployment nor vllm_fleet_hardware: only its GPU facts name its deployment, "
                                f"so a limited run cannot tell whether it belongs to one this run changes; set "
                                f"vllm_fleet_deployment (or vllm_fleet_hardware) for these hosts, or run without -l")
                continue
            peer = without_facts(host_input(name, values, hostvars[name], digest_key))
            if deployment_of(peer) not in touched:
                continue
            detected = hardware[deployment_of(peer)] - {None}
            if not peer.settings.get("hardware") and len(detected) == 1:
                peer = replace(peer, gpu={"hardware": next(iter(detected))})
            if name in bad:
                mine += [line for line in problems if line.startswith(name + ":")]
            else:
                peers.append(peer)
        unknown = {}   # deployment -> its engine hosts outside the limit whose hardware nobody read
        for peer in peers:
            if is_engine_host(peer) and not (peer.settings.get("hardware") or peer.gpu.get("hardware")):
                unknown.setdefault(deployment_of(peer), []).append(peer.name)
        cuts = []
        for deployment, engines in unknown.items():
            limited = [h.name for h in inputs if deployment_of(h) == deployment]
            cuts.append(f"{limited[0]}: vllm_fleet_deployment: the limit cuts {deployment!r}, a deployment whose engine "
                        f"hosts are all outside it: {', '.join(engines)} (add them: -l {','.join(limited + engines)})")
        return peers, mine, cuts


def _fail(header, problems):
    """Stop the task with one line per problem, each said once (a problem several hosts or
    processes share is found once per each), in the order found."""
    lines = list(dict.fromkeys(line for problem in problems for line in str(problem).splitlines()))
    raise AnsibleActionFail("\n".join(([header] if header else []) + lines))


# ---- the roles' declarations: read here, on Ansible's side (the engine reads no role) ---------
def role_declarations(roles_dir):
    """Role tunables: ({variable: argument spec} from every role's meta/argument_specs.yml,
    every name the roles declare in argument_specs or defaults, and the bundle's internal
    names). Reading YAML only: the argument specs are applied by Ansible's own validator
    (_check_tunables); the contract gets the names as its check's ``extra_known``."""
    import yaml

    specs = {}
    declared = set(contract.INTERNAL)
    for role in sorted(os.listdir(roles_dir)) if os.path.isdir(roles_dir) else []:
        for rel in ("meta/argument_specs.yml", "defaults/main.yml"):
            path = os.path.join(roles_dir, role, rel)
            if not os.path.exists(path):
                continue
            with open(path, encoding="utf-8") as handle:
                data = yaml.safe_load(handle) or {}
            if rel == "defaults/main.yml":
                declared.update(k for k in data if str(k).startswith(contract.PREFIX))
                continue
            for entry in (data.get("argument_specs") or {}).values():
                for option, spec in ((entry or {}).get("options") or {}).items():
                    declared.add(option)
                    if option not in contract.BY_NAME and not contract.internal(option):
                        specs.setdefault(option, {k: v for k, v in spec.items() if k in contract.SPEC_KEYS})
    return specs, frozenset(declared)


# Path tunables (argument_specs `type: path`, or a list of them) that name a directory the bundle
# owns: created, chmodded, removed from by teardown. The others (unit and env directories, the
# sandbox's writable paths) only follow the table rule.
ROOT_PATH_SUFFIXES = ("_root", "_state_dir", "_hf_cache", "_hf_cache_shared", "_home")
# path tunables that are files on the controller (an operator's task file), not host paths
CONTROLLER_PATH_SUFFIXES = ("_tasks",)


def path_tunables(specs):
    """{tunable: "root" | "dir"} for every role tunable declared as a host path (argument_specs
    `type: path`, or a list of paths) in role_declarations' specs: the contract's check applies
    its host-path rule (vllm_fleet.pathrules) to them as its ``path_kinds``."""
    return {name: ("root" if name.endswith(ROOT_PATH_SUFFIXES) else "dir") for name, spec in specs.items()
            if (spec.get("type") == "path" or (spec.get("type") == "list" and spec.get("elements") == "path"))
            and not name.endswith(CONTROLLER_PATH_SUFFIXES)}


_SPECS = None


def _role_specs():
    """(specs, declared names, path kinds) of the bundle's roles, read once per process."""
    global _SPECS
    if _SPECS is None:
        specs, declared = role_declarations(ROLES_DIR)
        _SPECS = specs, declared, path_tunables(specs)
    return _SPECS


def _check_tunables(host, values, specs):
    """Role tunables set in an inventory (``values``), validated as the role itself validates them:
    Ansible's own argument-spec validator over the role's spec (``specs``: variable -> its argument
    spec). One message per problem, naming host and variable."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    problems = []
    for name, value in sorted(values.items()):
        if value is None or name not in specs:
            continue
        spec = {k: v for k, v in specs[name].items() if k in contract.SPEC_KEYS}
        # Ansible's validator turns a mapping or a list given for a string into its text: here
        # that is a mistake to name, not a value to plan
        texts = [value] if spec.get("type") == "str" else \
            list(value) if spec.get("type") == "list" and spec.get("elements") == "str" and isinstance(value, list) else []
        if [v for v in texts if isinstance(v, (Mapping, list, tuple))]:
            problems.append(f"{host}: {name}: expected {'a string' if spec['type'] == 'str' else 'a list of strings'}, "
                            f"got {contract.shown(value)}")
            continue
        outcome = ArgumentSpecValidator({name: spec}).validate({name: value})
        problems += [f"{host}: {name}: {error}" for error in outcome.error_messages]
    return problems


class _Layers:
    """Where a host's variables come from in the inventory: the host's own, and each of its
    groups' (inline and group_vars), with the group's ancestors and priority. Read through
    Ansible's own objects; None where those internals are not there (other Ansible versions)."""

    def __init__(self, hostvars):
        try:
            from ansible.vars.plugins import get_vars_from_inventory_sources

            self.inventory = hostvars._inventory
            self.loader = hostvars._loader
            self._source_vars = get_vars_from_inventory_sources
        except (AttributeError, ImportError):  # pragma: no cover - other Ansible internals
            self.inventory = None
        self._groups = {}

    def _read(self, entity):
        data = dict(self._source_vars(self.loader, self.inventory._sources, [entity], "inventory"))
        data.update(entity.get_vars())
        return data

    def host(self, name):
        """(the host's own variables, [(group, its variables, its ancestors' names, priority)])."""
        host = self.inventory.get_host(name) if self.inventory is not None else None
        if host is None:
            return {}, []
        groups = []
        for group in host.get_groups():
            if group.name == "all":
                continue
            if group.name not in self._groups:
                self._groups[group.name] = (self._read(group), {g.name for g in group.get_ancestors()},
                                            group.priority)
            data, ancestors, priority = self._groups[group.name]
            groups.append((group.name, data, ancestors, priority))
        return self._read(host), groups


def _group_conflicts(layers, names):
    """Ansible merges the variables of a host's groups silently: a child group overrides its
    parents (layering: intended), but of two groups that are not each other's ancestor, the
    later by priority and name wins. A host in two such groups that give one ``vllm_fleet_*``
    variable different values is refused, naming host, groups, variable and both values; host
    variables and a deeper group's value settle it."""
    problems = []
    for name in names:
        own, groups = layers.host(name)
        setters = {}
        for group, data, ancestors, priority in groups:
            for key, value in data.items():
                spec = contract.BY_NAME.get(key)
                if spec is not None and spec.scope != "run" and key not in own:
                    setters.setdefault(key, []).append((group, value, ancestors, priority))
        for key, found in sorted(setters.items()):
            # the groups whose value is not overridden by a descendant that sets it too
            top = [f for f in found if not any(f[0] in other[2] for other in found)]
            best = max(f[3] for f in top)
            top = [f for f in top if f[3] == best]
            values = {json.dumps(plain(f[1]), sort_keys=True, default=str) for f in top}
            if len(values) > 1:
                shown = "; ".join(f"{g} sets {_shown(key, v)}" for g, v, _, _ in sorted(top, key=lambda f: f[0]))
                problems.append(f"{name}: {key}: the host is in groups that set it differently ({shown}) and neither "
                                f"group is the other's parent, so Ansible would silently keep one; set it once for the "
                                f"host (host vars, a common parent group, or a child group of both)")
    return problems


def _shown(key, value):
    """A group's value in a message: a secret's never, any other through the contract's one
    quoting (secret-looking parts masked, then shortened)."""
    return "a value (not shown)" if contract.BY_NAME[key].scope == "secret" else contract.shown(plain(value))


# Variables the playbooks and roles set for themselves (set_fact, register, vars, loop_var,
# a role's vars/): never inputs. Read from the bundle's YAML once per process, so a name added
# there is covered without a list to keep.
_SET_BY_BUNDLE = None


def set_by_bundle(root=os.path.dirname(ROLES_DIR)):
    """{name: where the bundle sets it} for every vllm_fleet_* variable the playbooks and roles
    set themselves, less the names an operator may set (the contract's, the roles' defaults)."""
    import glob

    import yaml

    found = {}

    def walk(node, where):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("ansible.builtin.set_fact", "set_fact", "vars") and isinstance(value, dict):
                    for name in value:
                        found.setdefault(name, where)
                elif key == "register" and isinstance(value, str):
                    found.setdefault(value, where)
                elif key == "loop_control" and isinstance(value, dict) and isinstance(value.get("loop_var"), str):
                    found.setdefault(value["loop_var"], where)
                walk(value, where)
        elif isinstance(node, list):
            for item in node:
                walk(item, where)

    tunable = set(contract.BY_NAME)
    files = sorted(glob.glob(os.path.join(root, "playbooks", "**", "*.yml"), recursive=True)) + \
        sorted(glob.glob(os.path.join(root, "roles", "*", "tasks", "*.yml"))) + \
        sorted(glob.glob(os.path.join(root, "roles", "*", "handlers", "*.yml")))
    for path in files:
        with open(path, encoding="utf-8") as handle:
            walk(yaml.safe_load(handle), os.path.relpath(path, root))
    for path in sorted(glob.glob(os.path.join(root, "roles", "*", "vars", "*.yml"))):
        with open(path, encoding="utf-8") as handle:
            for name in yaml.safe_load(handle) or {}:
                found.setdefault(name, os.path.relpath(path, root))
    for path in glob.glob(os.path.join(root, "roles", "*", "defaults", "*.yml")):
        with open(path, encoding="utf-8") as handle:
            tunable.update(yaml.safe_load(handle) or {})
    return {k: v for k, v in found.items()
            if str(k).startswith(contract.PREFIX) and k not in tunable and not k.startswith(contract.RESERVED_PREFIXES)}


def _internal_names():
    global _SET_BY_BUNDLE
    if _SET_BY_BUNDLE is None:
        _SET_BY_BUNDLE = set_by_bundle()
        _SET_BY_BUNDLE.update({k: "the bundle" for k in contract.INTERNAL if k not in _SET_BY_BUNDLE})
    return _SET_BY_BUNDLE


def _extra_vars(ansible_loader):
    """The run's -e variables as Ansible read them, and the problems of their key=value text
    (Ansible splits `-e key=value` at spaces and drops the words without '=')."""
    from ansible import context
    from ansible.parsing.splitter import split_args
    from ansible.utils.vars import load_extra_vars

    problems = []
    for text in context.CLIARGS.get("extra_vars") or ():
        text = to_text(text).strip()
        if not text or text[0] in "@[{":
            continue
        words = split_args(text)
        dropped = [w for w in words if "=" not in w]
        named = [w.split("=", 1)[0] for w in words if "=" in w and w.startswith(contract.PREFIX)]
        if dropped and named:
            problems.append(f"-e: {named[0]}: the value has spaces, and Ansible's key=value reading keeps only "
                            f"the first word (it dropped {len(dropped)} word(s)); quote it for Ansible too, as "
                            f"JSON: -e '{{\"{named[0]}\": \"...\"}}'")
    return dict(load_extra_vars(ansible_loader)), problems


def _inputs_problems(names, layers, ansible_loader):
    """Variables the bundle sets itself (the plan, the checked run options, a check's switch,
    every fact and register of the playbooks) given as inputs: from -e (which beats everything
    the playbooks set) or from the inventory. One line each, naming host (or -e) and variable."""
    internal = _internal_names()
    extra, problems = _extra_vars(ansible_loader)
    for key in sorted(k for k in extra if k in internal):
        problems.append(f"-e: {key}: set by the bundle itself ({internal[key]}), not an input: -e would replace "
                        f"what the run computes; remove it")
    for name in names:
        own, groups = layers.host(name)
        for key in sorted(k for k in own if k in internal):
            problems.append(f"{name}: {key}: set by the bundle itself ({internal[key]}), not an input: remove it from "
                            f"the host's variables")
        for group, data, _, _ in groups:
            for key in sorted(k for k in data if k in internal):
                problems.append(f"{name}: {key}: set by the bundle itself ({internal[key]}), not an input: remove it "
                                f"from group {group}")
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
