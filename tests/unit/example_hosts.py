"""inventories/example as the planner's input, the way deploy.yml builds it (group vars under host
vars, the GPU facts each group's hosts would report): shared by the tests that plan it."""

from __future__ import annotations

from pathlib import Path

import yaml

from vllm_fleet.plan import HostInput

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventories" / "example"
HOSTS = yaml.safe_load((EXAMPLE / "hosts.yml").read_text())["all"]["children"]
# what the GPU facts module would report on each group's GPU hosts
DETECTED = {"mi300x_cluster": "mi300x", "cpu_embeddings": "xeon6"}


def hosts_of(group):
    group_vars = yaml.safe_load((EXAMPLE / "group_vars" / f"{group}.yml").read_text())
    out = []
    for name, hv in HOSTS[group]["hosts"].items():
        merged = {**group_vars, **hv}
        settings = {k[len("vllm_fleet_"):]: v for k, v in merged.items() if k.startswith("vllm_fleet_")}
        roles = merged.get("vllm_fleet_role") or []
        roles = [roles] if isinstance(roles, str) else list(roles)
        gpu_host = not roles or bool(set(roles) & {"prefill", "decode", "instance"})
        gpu = {"hardware": DETECTED.get(group, "h200")} if gpu_host else {"brand": "none"}
        out.append(HostInput(name, settings, hv["ansible_host"], "eth0", gpu,
                             node_rank=merged.get("vllm_fleet_node_rank"), roles=roles))
    return out
