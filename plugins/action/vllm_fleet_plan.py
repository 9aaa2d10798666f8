# -*- coding: utf-8 -*-
"""Controller-side plan: what this host must run, computed from the whole deployment."""

from __future__ import annotations

# Documentation: plugins/modules/vllm_fleet_plan.py (ansible-doc reads it there).

import os
import sys
import threading

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

# The engine is plain Python under plugins/module_utils/vllm_fleet (controller side only:
# Ansible's module_utils import hook serves modules, not action plugins).
_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _UTILS not in sys.path:
    sys.path.insert(0, _UTILS)

from vllm_fleet import loader  # noqa: E402
from vllm_fleet.plan import HostInput, PlanError, default_deployment, plan, plan_hash  # noqa: E402

SETTINGS = {
    "recipe": "vllm_fleet_recipe", "variant": "vllm_fleet_variant",
    "strategy": "vllm_fleet_strategy", "hardware": "vllm_fleet_hardware",
    "features": "vllm_fleet_features", "feature_modes": "vllm_fleet_feature_modes",
    "nodes": "vllm_fleet_nodes", "pd_nodes": "vllm_fleet_pd_nodes",
    "kv_offload": "vllm_fleet_kv_offload", "kv_instances": "vllm_fleet_kv_instances",
    "runtime": "vllm_fleet_runtime", "vllm_version": "vllm_fleet_vllm_version",
    "image": "vllm_fleet_image", "image_tag": "vllm_fleet_image_tag", "port": "vllm_fleet_port",
    "served_model_name": "vllm_fleet_served_model_name", "extra_args": "vllm_fleet_extra_args",
    "model_path": "vllm_fleet_model_path", "env": "vllm_fleet_env",
    "placeholders": "vllm_fleet_placeholders", "deployment": "vllm_fleet_deployment",
    "mooncake_config": "vllm_fleet_mooncake_config", "mooncake_package": "vllm_fleet_mooncake_package",
    "mooncake_store_config": "vllm_fleet_mooncake_store_config",
    "router_port": "vllm_fleet_router_port", "router_version": "vllm_fleet_router_version",
    "rollout_batch": "vllm_fleet_rollout_batch",
    "host_env": "vllm_fleet_host_env",   # per host; the others must agree inside a deployment
}
SECRETS = {"vllm_fleet_hf_token": "HF_TOKEN", "vllm_fleet_api_key": "VLLM_API_KEY"}

_CACHE = {}
_LOCK = threading.Lock()


def _interface_for(facts, address):
    """Name of the interface whose IPv4 address is ``address``."""
    if not address:
        return None
    for name in facts.get("interfaces") or []:
        info = facts.get(name.replace("-", "_")) or facts.get(name) or {}
        ipv4 = info.get("ipv4") or {}
        secondary = info.get("ipv4_secondaries") or []
        addresses = [ipv4.get("address")] + [s.get("address") for s in secondary]
        if address in addresses:
            return name
    return None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts", "recipe_sources", "all_hosts"))

    def _host_input(self, name, hostvars):
        hv = hostvars[name]
        settings = {key: hv.get(var) for key, var in SETTINGS.items()}
        settings["secrets"] = sorted(env for var, env in SECRETS.items() if hv.get(var))
        facts = hv.get("ansible_facts") or {}
        address = hv.get("vllm_fleet_address") or hv.get("ansible_host") or \
            (facts.get("default_ipv4") or {}).get("address")
        iface = hv.get("vllm_fleet_iface") or _interface_for(facts, address)
        rank = hv.get("vllm_fleet_node_rank")
        roles = hv.get("vllm_fleet_role") or []
        roles = [roles] if isinstance(roles, str) else [to_text(r) for r in roles]
        return HostInput(name=name, settings=settings, address=to_text(address) if address else None,
                         iface=iface, gpu=dict(facts.get("vllm_fleet_gpu") or {}),
                         instance=hv.get("vllm_fleet_instance"),
                         node_rank=int(rank) if rank not in (None, "") else None, roles=roles)

    @staticmethod
    def _deployment_of(h):
        return h.settings.get("deployment") or default_deployment(
            h.settings.get("recipe") or "", h.settings.get("hardware") or h.gpu.get("hardware"))

    def _plan_group(self, sources, group):
        key = plan_hash([sources, [(h.name, h.settings, h.address, h.iface, h.gpu,
                                    h.instance, h.node_rank, h.roles) for h in group]])
        with _LOCK:
            cached = _CACHE.get(key)
            if cached is None:
                try:
                    cached = plan(loader.load(sources), group)
                except (PlanError, loader.LoadError) as exc:
                    cached = exc
                _CACHE[key] = cached
        return cached

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        hostvars = task_vars["hostvars"]
        me = task_vars["inventory_hostname"]
        inputs = [self._host_input(h, hostvars) for h in args["hosts"]]
        inputs = [h for h in inputs if h.settings.get("recipe")] or inputs
        if args.get("all_hosts"):
            # every deployment of the play at once (run_once): O(hosts) hostvars reads in all,
            # instead of O(hosts) per host
            deployments = {}
            for h in inputs:
                deployments.setdefault(self._deployment_of(h), []).append(h)
            plans, errors = {}, []
            for name, group in deployments.items():
                planned = self._plan_group(args["recipe_sources"], group)
                if isinstance(planned, Exception):
                    errors.append(f"vllm-fleet plan failed for deployment {name!r}:\n{planned}")
                else:
                    plans.update(planned)
            if errors:
                raise AnsibleActionFail("\n".join(errors))
            result.update(changed=False, plans=plans,
                          msg=f"{len(plans)} host(s) in {len(deployments)} deployment(s)")
            return result
        mine = next((h for h in inputs if h.name == me), None)
        if mine is None:
            raise AnsibleActionFail(f"{me}: vllm_fleet_recipe is not set for this host")
        group = [h for h in inputs if self._deployment_of(h) == self._deployment_of(mine)]
        cached = self._plan_group(args["recipe_sources"], group)
        if isinstance(cached, Exception):
            raise AnsibleActionFail("vllm-fleet plan failed for deployment "
                                    f"{self._deployment_of(mine)!r}:\n{cached}")
        host_plan = cached[me]
        result.update(changed=False, ansible_facts={"vllm_fleet_plan": host_plan},
                      msg=host_plan["command"])
        if self._task.diff or self._play_context.diff:
            result["diff"] = {"before": "", "after": host_plan["command"] + "\n",
                              "after_header": f"{me}: {host_plan['deployment']} "
                                              f"({host_plan['recipe']}, {host_plan['hardware']}, "
                                              f"{host_plan['strategy']}, rank {host_plan['node_rank']})"}
        return result
