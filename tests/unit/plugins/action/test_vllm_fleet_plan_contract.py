"""Table-driven test of the plan action (``plugins/action/vllm_fleet_plan.py``) against bad inventories.

Issue 8, "Done when": every bad inventory input is refused on the controller, before any host
changes, with a message naming the host and the variable, and no input produces a Python
traceback. The inputs are REAL Ansible hostvars: each table below becomes a YAML inventory
(hosts with ``ansible_connection: local``; nothing is contacted, nothing changes) and one
``ansible-playbook`` run of a tiny playbook that does what ``playbooks/_plan.yml`` does: the
contract check (``contract_only``, ``run_once``), then the plan of every deployment
(``all_hosts``, ``run_once``), with the real ``vllm_fleet_gpu_facts`` module and the fake
``nvidia-smi`` of ``tests/fakes/bin`` for the hosts whose GPU count matters.

Six short runs in all, so the file stays fast (about 20 s):

* ``CONTRACT``: one host per case (the contract refuses them all in the first task);
* ``PLAN``: one deployment per case (every host passes the contract; the plan reports each
  deployment's errors);
* ``CROSS``: checks across deployments (two deployments on one machine on one port);
* ``CONTROL``: valid inventories that must plan (so the refusals above cannot be vacuous);
* ``-e vllm_fleet_port=8000`` (a string for every host: planned) and ``-e vllm_fleet_port=0`` (refused).

Each refused case asserts: the run failed, a line ``HOST: VARIABLE...`` names the case's host
and variable, no traceback anywhere in the output and, for secrets, that the case's sentinel
value never appears in it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

pytest.importorskip("ansible")
yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[4]
FAKES = ROOT / "tests" / "fakes" / "bin"
ERNIE = "baidu/ERNIE-4.5-VL-28B-A3B-PT"
DSV3 = "deepseek-ai/DeepSeek-V3"
DIGEST = "sha256:" + "0123456789abcdef" * 4
SENTINEL = "SeNtInEl-7Qx9"   # + case id: a secret value that must never be printed


def _ansible_playbook() -> Optional[str]:
    beside = Path(sys.executable).parent / "ansible-playbook"
    return str(beside) if beside.exists() else shutil.which("ansible-playbook")


ANSIBLE_PLAYBOOK = _ansible_playbook()
pytestmark = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not found")


@dataclass
class Case:
    id: str
    vars: Dict[str, Any]
    var: Any                          # the variable(s) the message must name (str or tuple)
    raw: str = ""                     # extra YAML lines for the host (values PyYAML cannot write: `yes`)
    secret: bool = False              # SENTINEL + id is in the vars and must never be printed
    base: bool = True                 # start from the recipe + hardware of a valid host
    also: str = ""                    # a regex the output must match too (e.g. the did-you-mean)
    where: str = ""                   # host that the message names (default: the case's host)
    token: str = ""                   # the secret value when it cannot be SENTINEL + id (too long)

    @property
    def host(self) -> str:
        return "k-" + self.id

    @property
    def sentinel(self) -> str:
        return self.token or SENTINEL + self.id

    @property
    def names(self) -> Tuple[str, ...]:
        return self.var if isinstance(self.var, tuple) else (self.var,)


S = "{secret}"   # replaced by the case's sentinel value


def _fill(value: Any, secret: str) -> Any:
    if isinstance(value, str):
        return value.replace(S, secret)
    if isinstance(value, list):
        return [_fill(v, secret) for v in value]
    if isinstance(value, dict):
        return {_fill(k, secret): _fill(v, secret) for k, v in value.items()}
    return value


# ------------------------------------------------------------------------------------------
# CONTRACT: refused by the inventory contract (or the roles' argument_specs) in the first task.

_UV = {"vllm_fleet_runtime": "uv"}
CONTRACT: List[Case] = [
    # unknown names, with a did-you-mean
    Case("recipie", {"vllm_fleet_recipie": ERNIE}, "vllm_fleet_recipie", also=r"did you mean vllm_fleet_recipe\?"),
    Case("hf-tokens", {"vllm_fleet_hf_tokens": S}, "vllm_fleet_hf_tokens", secret=True,
         also=r"did you mean vllm_fleet_hf_token\?"),
    Case("extra-arg", {"vllm_fleet_extra_arg": ["--max-model-len", "4096"]}, "vllm_fleet_extra_arg",
         also=r"did you mean vllm_fleet_extra_args\?"),
    Case("only-misspelled", {"vllm_fleet_recipie": ERNIE, "vllm_fleet_hardwre": "h200"},
         ("vllm_fleet_recipie", "vllm_fleet_hardwre"), base=False),
    Case("only-one-misspelled", {"vllm_fleet_reciep": ERNIE}, "vllm_fleet_reciep", base=False),
    Case("unknown-name", {"vllm_fleet_frobnicate": 1}, "vllm_fleet_frobnicate"),
    Case("tunable-typo", {"vllm_fleet_docker_pul": "always"}, "vllm_fleet_docker_pul",
         also=r"did you mean vllm_fleet_docker_pull\?"),
    # wrong types: never coerced or dropped
    Case("extra-args-string", {"vllm_fleet_extra_args": "--max-model-len 4096"}, "vllm_fleet_extra_args"),
    Case("extra-args-mapping", {"vllm_fleet_extra_args": {"--max-model-len": 4096}}, "vllm_fleet_extra_args"),
    Case("extra-args-nested", {"vllm_fleet_extra_args": [["--max-model-len", "4096"]]}, "vllm_fleet_extra_args"),
    Case("extra-args-newline", {"vllm_fleet_extra_args": ["--max-model-len\n4096"]}, "vllm_fleet_extra_args"),
    Case("env-list", {"vllm_fleet_env": ["VLLM_LOGGING_LEVEL=DEBUG"]}, "vllm_fleet_env"),
    Case("env-string", {"vllm_fleet_env": "VLLM_LOGGING_LEVEL=DEBUG"}, "vllm_fleet_env"),
    Case("env-value-mapping", {"vllm_fleet_env": {"VLLM_LOGGING_LEVEL": {"level": "DEBUG"}}}, "vllm_fleet_env"),
    Case("env-value-newline", {"vllm_fleet_env": {"VLLM_LOGGING_LEVEL": "DEBUG\nExecStartPre=/bin/sh"}},
         "vllm_fleet_env"),
    Case("host-env-list", {"vllm_fleet_host_env": ["OMP_NUM_THREADS=8"]}, "vllm_fleet_host_env"),
    Case("feature-modes-list", {"vllm_fleet_feature_modes": ["mtp"]}, "vllm_fleet_feature_modes"),
    Case("feature-modes-nested", {"vllm_fleet_feature_modes": {"spec_decoding": ["mtp"]}},
         "vllm_fleet_feature_modes"),
    Case("features-string", {"vllm_fleet_features": "encoder_parallel"}, "vllm_fleet_features"),
    Case("features-bad-item", {"vllm_fleet_features": ["encoder parallel"]}, "vllm_fleet_features"),
    Case("nodes-bool", {"vllm_fleet_nodes": True}, "vllm_fleet_nodes"),
    Case("kv-instances-yes", {}, "vllm_fleet_kv_instances", raw="vllm_fleet_kv_instances: yes"),
    Case("rollout-batch-false", {"vllm_fleet_rollout_batch": False}, "vllm_fleet_rollout_batch"),
    Case("node-rank-bool", {"vllm_fleet_node_rank": True}, "vllm_fleet_node_rank"),
    Case("max-fail-bool", {"vllm_fleet_max_fail_percentage": True}, "vllm_fleet_max_fail_percentage"),
    Case("max-fail-percent-string", {"vllm_fleet_max_fail_percentage": "50%"}, "vllm_fleet_max_fail_percentage"),
    Case("nodes-float", {"vllm_fleet_nodes": 1.5}, "vllm_fleet_nodes"),
    Case("recipe-list", {"vllm_fleet_recipe": [ERNIE]}, "vllm_fleet_recipe", base=False),
    Case("recipe-no-org", {"vllm_fleet_recipe": "ERNIE-4.5-VL-28B-A3B-PT"}, "vllm_fleet_recipe", base=False),
    Case("recipe-traversal", {"vllm_fleet_recipe": "../../etc/passwd"}, "vllm_fleet_recipe", base=False),
    Case("runtime-podman", {"vllm_fleet_runtime": "podman"}, "vllm_fleet_runtime"),
    Case("gpu-health-skip", {"vllm_fleet_gpu_health": "skip"}, "vllm_fleet_gpu_health", also="refuse"),
    Case("gpu-health-bool", {"vllm_fleet_gpu_health": False}, "vllm_fleet_gpu_health"),
    Case("served-name-space", {"vllm_fleet_served_model_name": "ernie vl"}, "vllm_fleet_served_model_name"),
    Case("model-path-relative", {"vllm_fleet_model_path": "models/ernie"}, "vllm_fleet_model_path"),
    Case("model-path-dotdot", {"vllm_fleet_model_path": "/opt/models/../../etc"}, "vllm_fleet_model_path"),
    Case("placeholders-lowercase", {"vllm_fleet_placeholders": {"router_host": "0.0.0.0"}},
         "vllm_fleet_placeholders"),
    Case("placeholders-list", {"vllm_fleet_placeholders": ["ROUTER_HOST=0.0.0.0"]}, "vllm_fleet_placeholders"),
    Case("role-unknown", {"vllm_fleet_role": "worker"}, "vllm_fleet_role"),
    Case("role-empty", {"vllm_fleet_role": []}, "vllm_fleet_role"),
    Case("force-maybe", {"vllm_fleet_force": "maybe"}, "vllm_fleet_force"),
    Case("address-space", {"vllm_fleet_address": "10.0.0.1 10.0.0.2"}, "vllm_fleet_address"),
    Case("iface-too-long", {"vllm_fleet_iface": "eth0-much-too-long-for-linux"}, "vllm_fleet_iface"),
    Case("instance-dotdot", {"vllm_fleet_instance": "../i0"}, "vllm_fleet_instance"),
    Case("state-dir-relative", {"vllm_fleet_state_dir": "state"}, "vllm_fleet_state_dir"),
    Case("router-version-latest", {"vllm_fleet_router_version": "latest"}, "vllm_fleet_router_version"),
    Case("mooncake-package-shell", {"vllm_fleet_mooncake_package": "mooncake; curl x | sh"},
         "vllm_fleet_mooncake_package"),
    Case("pd-nodes-list", {"vllm_fleet_pd_nodes": ["prefill", "decode"]}, "vllm_fleet_pd_nodes"),
    Case("mooncake-config-string", {"vllm_fleet_mooncake_config": "protocol=rdma"}, "vllm_fleet_mooncake_config"),
    # ranges
    Case("port-0", {"vllm_fleet_port": 0}, "vllm_fleet_port"),
    Case("listen-word", {"vllm_fleet_listen": "public"}, "vllm_fleet_listen"),
    Case("listen-bad-ipv4", {"vllm_fleet_listen": "10.0.0.256"}, "vllm_fleet_listen"),
    Case("listen-list", {"vllm_fleet_listen": ["127.0.0.1"]}, "vllm_fleet_listen"),
    Case("port-minus-1", {"vllm_fleet_port": -1}, "vllm_fleet_port"),
    Case("port-70000", {"vllm_fleet_port": 70000}, "vllm_fleet_port"),
    Case("port-abc", {"vllm_fleet_port": "abc"}, "vllm_fleet_port"),
    Case("port-yes", {}, "vllm_fleet_port", raw="vllm_fleet_port: yes"),
    Case("port-float", {"vllm_fleet_port": 8000.5}, "vllm_fleet_port"),
    Case("port-list", {"vllm_fleet_port": [8000]}, "vllm_fleet_port"),
    Case("port-string-70000", {"vllm_fleet_port": "70000"}, "vllm_fleet_port"),
    Case("port-template-70000", {"vllm_fleet_port": "{{ 69999 + 1 }}"}, "vllm_fleet_port"),
    Case("port-undefined-template", {"vllm_fleet_port": "{{ no_such_variable_anywhere }}"}, "vllm_fleet_port"),
    Case("router-port-0", {"vllm_fleet_router_port": 0}, "vllm_fleet_router_port"),
    Case("router-port-65536", {"vllm_fleet_router_port": 65536}, "vllm_fleet_router_port"),
    Case("nodes-0", {"vllm_fleet_nodes": 0}, "vllm_fleet_nodes"),
    Case("nodes-negative", {"vllm_fleet_nodes": -2}, "vllm_fleet_nodes"),
    Case("nodes-string-0", {"vllm_fleet_nodes": "0"}, "vllm_fleet_nodes"),
    Case("node-rank-negative", {"vllm_fleet_node_rank": -1}, "vllm_fleet_node_rank"),
    Case("node-rank-abc", {"vllm_fleet_node_rank": "abc"}, "vllm_fleet_node_rank"),
    Case("node-rank-4096", {"vllm_fleet_node_rank": 4096}, "vllm_fleet_node_rank"),
    Case("rollout-batch-0", {"vllm_fleet_rollout_batch": 0}, "vllm_fleet_rollout_batch"),
    Case("rollout-batch-negative", {"vllm_fleet_rollout_batch": -1}, "vllm_fleet_rollout_batch"),
    Case("kv-instances-0", {"vllm_fleet_kv_instances": 0}, "vllm_fleet_kv_instances"),
    Case("kv-instances-negative", {"vllm_fleet_kv_instances": -3}, "vllm_fleet_kv_instances"),
    Case("max-fail-101", {"vllm_fleet_max_fail_percentage": 101}, "vllm_fleet_max_fail_percentage"),
    Case("max-fail-negative", {"vllm_fleet_max_fail_percentage": -1}, "vllm_fleet_max_fail_percentage"),
    # uv: an exact vLLM version
    Case("uv-version-range", {**_UV, "vllm_fleet_vllm_version": ">=0.11"}, "vllm_fleet_vllm_version"),
    Case("uv-version-latest", {**_UV, "vllm_fleet_vllm_version": "latest"}, "vllm_fleet_vllm_version"),
    Case("uv-version-minor", {**_UV, "vllm_fleet_vllm_version": "0.11"}, "vllm_fleet_vllm_version"),
    Case("uv-version-float", {**_UV}, "vllm_fleet_vllm_version", raw="vllm_fleet_vllm_version: 0.11"),
    Case("uv-version-missing", {**_UV}, "vllm_fleet_vllm_version"),
    Case("uv-version-shell", {**_UV, "vllm_fleet_vllm_version": "0.11.0; rm -rf /"}, "vllm_fleet_vllm_version"),
    # docker image references
    Case("image-shell", {"vllm_fleet_image": "vllm/vllm-openai:latest; rm -rf /"}, "vllm_fleet_image"),
    Case("image-uppercase", {"vllm_fleet_image": "vllm/VLLM-openai:latest"}, "vllm_fleet_image"),
    Case("image-registry-only", {"vllm_fleet_image": "registry.example.com:5000/"}, "vllm_fleet_image"),
    Case("image-short-digest", {"vllm_fleet_image": "vllm/vllm-openai@sha256:abc123"}, "vllm_fleet_image"),
    Case("image-empty-tag", {"vllm_fleet_image": "vllm/vllm-openai:"}, "vllm_fleet_image"),
    Case("image-md5-digest", {"vllm_fleet_image": "vllm/vllm-openai@md5:" + "0" * 32}, "vllm_fleet_image"),
    Case("image-space", {"vllm_fleet_image": "vllm/vllm-openai latest"}, "vllm_fleet_image"),
    Case("image-option", {"vllm_fleet_image": "--privileged"}, "vllm_fleet_image"),
    Case("image-list", {"vllm_fleet_image": ["vllm/vllm-openai:latest"]}, "vllm_fleet_image"),
    Case("image-tag-option", {"vllm_fleet_image_tag": "v0.32.0 --privileged"}, "vllm_fleet_image_tag"),
    Case("image-tag-on-digest", {"vllm_fleet_image": "vllm/vllm-openai@" + DIGEST, "vllm_fleet_image_tag": "v0.32.0"},
         "vllm_fleet_image_tag"),
    # deployment names: directories, unit names and templates derive from them
    Case("name-dotdot", {"vllm_fleet_deployment": ".."}, "vllm_fleet_deployment"),
    Case("name-dot", {"vllm_fleet_deployment": "."}, "vllm_fleet_deployment"),
    Case("name-dotdot-dotdot", {"vllm_fleet_deployment": "../.."}, "vllm_fleet_deployment"),
    Case("name-slash", {"vllm_fleet_deployment": "a/b"}, "vllm_fleet_deployment"),
    Case("name-newline", {"vllm_fleet_deployment": "ernie\nExecStartPre=/bin/rm -rf /"}, "vllm_fleet_deployment"),
    Case("name-uppercase", {"vllm_fleet_deployment": "Ernie"}, "vllm_fleet_deployment"),
    Case("name-too-long", {"vllm_fleet_deployment": "e" * 64}, "vllm_fleet_deployment"),
    Case("name-empty", {"vllm_fleet_deployment": ""}, "vllm_fleet_deployment"),
    Case("name-dash-first", {"vllm_fleet_deployment": "-rf"}, "vllm_fleet_deployment"),
    Case("name-inner-dotdot", {"vllm_fleet_deployment": "a..b"}, "vllm_fleet_deployment"),
    Case("name-number", {"vllm_fleet_deployment": 42}, "vllm_fleet_deployment"),
    # environment names
    Case("env-bad-name", {"vllm_fleet_env": {"BAD NAME": "1"}}, "vllm_fleet_env"),
    Case("env-digit-name", {"vllm_fleet_env": {"1ST": "1"}}, "vllm_fleet_env"),
    Case("env-ld-preload", {"vllm_fleet_env": {"LD_PRELOAD": "evil.so"}}, "vllm_fleet_env"),   # relative
    Case("env-pythonpath", {"vllm_fleet_env": {"PYTHONPATH": "/tmp"}}, "vllm_fleet_env"),
    Case("host-env-ld-audit", {"vllm_fleet_host_env": {"LD_AUDIT": "/tmp/evil.so"}}, "vllm_fleet_host_env"),
    # secrets: refused where they would leak, with a pointer to the secret variables
    Case("arg-api-key", {"vllm_fleet_extra_args": ["--api-key", S]}, "vllm_fleet_extra_args", secret=True,
         also="vllm_fleet_api_key"),
    Case("arg-api-key-eq", {"vllm_fleet_extra_args": ["--api-key=" + S]}, "vllm_fleet_extra_args", secret=True,
         also="vllm_fleet_api_key"),
    Case("arg-hf-token", {"vllm_fleet_extra_args": ["--hf-token", S]}, "vllm_fleet_extra_args", secret=True,
         also="vllm_fleet_hf_token"),
    Case("arg-hf-token-eq", {"vllm_fleet_extra_args": ["--hf-token=" + S]}, "vllm_fleet_extra_args", secret=True,
         also="vllm_fleet_hf_token"),
    Case("arg-other-password", {"vllm_fleet_extra_args": ["--kv-store-password", S]}, "vllm_fleet_extra_args",
         secret=True),
    Case("env-hf-token", {"vllm_fleet_env": {"HF_TOKEN": S}}, "vllm_fleet_env", secret=True,
         also="vllm_fleet_hf_token"),
    Case("env-hub-token", {"vllm_fleet_env": {"HUGGING_FACE_HUB_TOKEN": S}}, "vllm_fleet_env", secret=True,
         also="vllm_fleet_hf_token"),
    Case("env-vllm-api-key", {"vllm_fleet_env": {"VLLM_API_KEY": S}}, "vllm_fleet_env", secret=True,
         also="vllm_fleet_api_key"),
    Case("env-any-token", {"vllm_fleet_env": {"WANDB_TOKEN": S}}, "vllm_fleet_env", secret=True),
    Case("env-any-key", {"vllm_fleet_env": {"OPENAI_API_KEY": S}}, "vllm_fleet_env", secret=True),
    Case("env-lowercase-token", {"vllm_fleet_env": {"hf_token": S}}, "vllm_fleet_env", secret=True),
    Case("host-env-token", {"vllm_fleet_host_env": {"HF_TOKEN": S}}, "vllm_fleet_host_env", secret=True),
    Case("hf-token-space", {"vllm_fleet_hf_token": "hf_" + S + " trailing"}, "vllm_fleet_hf_token", secret=True),
    Case("api-key-list", {"vllm_fleet_api_key": [S]}, "vllm_fleet_api_key", secret=True),
    Case("digest-key-short", {"vllm_fleet_secret_digest_key": S}, "vllm_fleet_secret_digest_key", secret=True,
         token="Qz8vK3wq"),
    Case("digest-key-space", {"vllm_fleet_secret_digest_key": S + " " + S}, "vllm_fleet_secret_digest_key",
         secret=True),
    # role tunables, validated with the roles' own argument_specs
    Case("docker-pull-sometimes", {"vllm_fleet_docker_pull": "sometimes"}, "vllm_fleet_docker_pull"),
    Case("docker-restart-never", {"vllm_fleet_docker_restart_policy": "never"}, "vllm_fleet_docker_restart_policy"),
    Case("docker-privileged-maybe", {"vllm_fleet_docker_privileged": "maybe"}, "vllm_fleet_docker_privileged"),
    Case("docker-labels-list", {"vllm_fleet_docker_labels": ["a=b"]}, "vllm_fleet_docker_labels"),
    Case("health-timeout-soon", {"vllm_fleet_health_timeout": "soon"}, "vllm_fleet_health_timeout"),
    Case("health-request-chat", {"vllm_fleet_health_request": "chat"}, "vllm_fleet_health_request"),
    Case("services-restart-sec-x", {"vllm_fleet_services_restart_sec": "x"}, "vllm_fleet_services_restart_sec"),
    Case("preflight-check-perhaps", {"vllm_fleet_preflight_check_gpus": "perhaps"},
         "vllm_fleet_preflight_check_gpus"),
    Case("uv-sandbox-list", {"vllm_fleet_uv_sandbox": ["yes"]}, "vllm_fleet_uv_sandbox"),
    # the shared systemd role's parameters are the bundle's own (its callers pass them)
    Case("systemd-user", {"vllm_fleet_systemd_user": "root"}, "vllm_fleet_systemd_user",
         also=r"set the runtime's own variables"),
    Case("gpus-backwards", {"vllm_fleet_gpus": "3-1"}, "vllm_fleet_gpus", also="runs backwards"),
    Case("gpus-twice", {"vllm_fleet_gpus": [1, 1]}, "vllm_fleet_gpus", also="GPU 1 is listed twice"),
    Case("gpus-words", {"vllm_fleet_gpus": "first four"}, "vllm_fleet_gpus"),
    Case("gpus-empty", {"vllm_fleet_gpus": []}, "vllm_fleet_gpus"),
    Case("gpus-mapping", {"vllm_fleet_gpus": {"0": True}}, "vllm_fleet_gpus"),
    # SLO, bench and monitoring options
    Case("slo-unknown-key", {"vllm_fleet_slo": {"p99_latency": 5}}, "vllm_fleet_slo.p99_latency",
         also="unknown SLO key"),
    Case("slo-negative", {"vllm_fleet_slo": {"p99_ttft_ms": -1}}, "vllm_fleet_slo.p99_ttft_ms"),
    Case("slo-text", {"vllm_fleet_slo": {"min_output_tok_s": "fast"}}, "vllm_fleet_slo.min_output_tok_s"),
    Case("slo-error-rate", {"vllm_fleet_slo": {"max_error_rate": 5}}, "vllm_fleet_slo.max_error_rate"),
    Case("slo-list", {"vllm_fleet_slo": ["p99_ttft_ms"]}, "vllm_fleet_slo"),
    Case("slo-regression-negative", {"vllm_fleet_slo_max_regression": -5}, "vllm_fleet_slo_max_regression"),
    Case("bench-prompts-0", {"vllm_fleet_bench_prompts": 0}, "vllm_fleet_bench_prompts"),
    Case("bench-rate-word", {"vllm_fleet_bench_request_rate": "fast"}, "vllm_fleet_bench_request_rate"),
    Case("bench-target-word", {"vllm_fleet_bench_target": "gpus"}, "vllm_fleet_bench_target"),
    Case("bench-dir-dotdot", {"vllm_fleet_bench_dir": "../elsewhere"}, "vllm_fleet_bench_dir"),
    Case("monitoring-listen-port", {"vllm_fleet_monitoring_listen": "127.0.0.1:99999"}, "vllm_fleet_monitoring_listen"),
    Case("monitoring-interval", {"vllm_fleet_monitoring_interval": "often"}, "vllm_fleet_monitoring_interval"),
    Case("monitoring-debs-relative", {"vllm_fleet_monitoring_debs": "debs"}, "vllm_fleet_monitoring_debs"),
]
# a host in two deployment groups (Ansible would silently keep one group's variables)
TWO_GROUPS = Case("two-groups", {}, "vllm_fleet_deployment", base=False)
CONTRACT_OK = ["k-ok-plain", "k-ok-digest", "k-ok-port-string", "k-ok-no-recipe"]


# ------------------------------------------------------------------------------------------
# PLAN: every host passes the contract; the plan refuses the deployment.
# A case is one deployment (vllm_fleet_deployment "p-<id>"), of one host or of `hosts`.

@dataclass
class PlanCase(Case):
    hosts: List[Dict[str, Any]] = field(default_factory=list)   # more hosts: vars each (names p-<id>-<n>)
    gpu: bool = False                                             # run vllm_fleet_gpu_facts (fake h200x8)

    @property
    def host(self) -> str:
        return "p-" + self.id


_PD = {"vllm_fleet_recipe": DSV3, "vllm_fleet_hardware": "h200", "vllm_fleet_strategy": "pd_cluster",
       "vllm_fleet_pd_nodes": {"prefill": {"parallelism": "dep"}, "decode": {"parallelism": "tp"}}}
_PD_HOSTS = [{"vllm_fleet_role": "prefill"}, {"vllm_fleet_role": "decode"}, {"vllm_fleet_role": "router"}]
_MC = {"vllm_fleet_recipe": DSV3, "vllm_fleet_hardware": "h200", "vllm_fleet_strategy": "single_node_tp",
       "vllm_fleet_kv_offload": "kv_store_centralized_mooncake"}
_MC_HOSTS = [{}, {"vllm_fleet_role": ["master", "store", "router"]}]
_TP_PP = ["--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"]

PLAN: List[PlanCase] = [
    PlanCase("listen-vs-extra-args", {"vllm_fleet_listen": "localhost", "vllm_fleet_extra_args": ["--host", "0.0.0.0"]},
             "vllm_fleet_extra_args"),
    # a server that listens on localhost only, behind a router on another host, is unreachable
    PlanCase("listen-localhost-behind-router", {**_MC, "vllm_fleet_listen": "localhost",
                                                "vllm_fleet_address": "10.9.0.1"}, "vllm_fleet_listen",
             base=False, hosts=[{"vllm_fleet_address": "10.9.0.2"},
                                {"vllm_fleet_role": ["master", "store", "router"], "vllm_fleet_address": "10.9.0.3"}]),
    PlanCase("port-vs-extra-args", {"vllm_fleet_port": 8001, "vllm_fleet_extra_args": ["--port", "8002"]},
             "vllm_fleet_extra_args"),
    PlanCase("port-vs-extra-args-eq", {"vllm_fleet_port": "8001", "vllm_fleet_extra_args": ["--port=8002"]},
             "vllm_fleet_extra_args"),
    PlanCase("tp-pp-over-gpus", {"vllm_fleet_extra_args": _TP_PP}, "vllm_fleet_extra_args", gpu=True),
    PlanCase("tp-dp-over-gpus", {"vllm_fleet_extra_args": ["--tensor-parallel-size", "4", "-dp", "4"]},
             "vllm_fleet_extra_args", gpu=True),
    # -tp after the recipe's --tensor-parallel-size 1: vLLM keeps the last, whichever spelling
    PlanCase("tp-alias-over-gpus", {"vllm_fleet_extra_args": ["-tp", "16"]}, "vllm_fleet_extra_args", gpu=True),
    PlanCase("gpus-beyond-the-host", {"vllm_fleet_gpus": "6-9"}, "vllm_fleet_gpus", gpu=True,
             also="GPU 8, 9 does not exist"),
    PlanCase("tp-over-the-gpu-set", {"vllm_fleet_gpus": [0], "vllm_fleet_extra_args": ["-tp", "2"]},
             "vllm_fleet_extra_args", gpu=True, also="vllm_fleet_gpus gives it 1"),
    PlanCase("variant-over-gpus", {"vllm_fleet_variant": "424b", "vllm_fleet_extra_args": ["-pp", "2"]},
             "vllm_fleet_extra_args", gpu=True),
    PlanCase("pd-port", {**_PD, "vllm_fleet_port": 8000, "vllm_fleet_role": "prefill"}, "vllm_fleet_port",
             base=False, hosts=_PD_HOSTS[1:]),
    PlanCase("mooncake-port", {**_MC, "vllm_fleet_port": 8100}, "vllm_fleet_port", base=False, hosts=_MC_HOSTS),
    PlanCase("unknown-recipe", {"vllm_fleet_recipe": "nobody/NoSuchModel"}, "vllm_fleet_recipe"),
    PlanCase("unknown-variant", {"vllm_fleet_variant": "huge"}, "vllm_fleet_variant"),
    PlanCase("unknown-strategy", {"vllm_fleet_strategy": "single_node_magic"}, "vllm_fleet_strategy"),
    PlanCase("unknown-feature", {"vllm_fleet_features": ["no_such_feature"]}, "vllm_fleet_features"),
    PlanCase("unknown-feature-mode", {"vllm_fleet_feature_modes": {"no_such_feature": "fast"}},
             "vllm_fleet_feature_modes"),
    PlanCase("feature-without-modes", {"vllm_fleet_feature_modes": {"encoder_parallel": "fast"}},
             "vllm_fleet_feature_modes"),
    PlanCase("strategy-not-offered", {"vllm_fleet_strategy": "pd_cluster", "vllm_fleet_role": "prefill"},
             "vllm_fleet_strategy", hosts=[{"vllm_fleet_role": "decode"}]),
    PlanCase("single-node-on-2-nodes", {"vllm_fleet_strategy": "single_node_tp", "vllm_fleet_nodes": 2},
             "vllm_fleet_nodes"),
    PlanCase("variant-on-cpu", {"vllm_fleet_variant": "424b", "vllm_fleet_hardware": "xeon6"}, "vllm_fleet_variant"),
    PlanCase("pd-two-routers", dict(_PD, vllm_fleet_role="prefill"), "vllm_fleet_role", base=False,
             where="p-pd-two-routers-3", hosts=_PD_HOSTS[1:] + [{"vllm_fleet_role": "router"}]),
    PlanCase("pd-no-decode", dict(_PD, vllm_fleet_role="prefill"), "vllm_fleet_role", base=False,
             hosts=[{"vllm_fleet_role": "router"}]),
    PlanCase("pd-roles-unset", dict(_PD), "vllm_fleet_role", base=False, hosts=[{}]),
    PlanCase("pd-nodes-vs-pool", dict(_PD, vllm_fleet_role="prefill",
                                      vllm_fleet_pd_nodes={"prefill": {"nodes": 3}, "decode": {"parallelism": "tp"}}),
             "vllm_fleet_pd_nodes", base=False, hosts=_PD_HOSTS[1:]),
    PlanCase("mooncake-two-masters", dict(_MC), "vllm_fleet_role", base=False, where="p-mooncake-two-masters-2",
             hosts=[{"vllm_fleet_role": "master"}, {"vllm_fleet_role": ["master", "store", "router"]}]),
    PlanCase("mooncake-services-only", dict(_MC, vllm_fleet_role=["master", "store", "router"]), "vllm_fleet_role",
             base=False),
    PlanCase("unknown-hardware", {"vllm_fleet_hardware": "h300"}, "vllm_fleet_hardware"),
    PlanCase("unknown-kv-offload", {"vllm_fleet_kv_offload": "kv_store_nowhere"}, "vllm_fleet_kv_offload"),
    PlanCase("role-without-pd", {"vllm_fleet_role": "prefill"}, "vllm_fleet_role"),
    PlanCase("removed-flag", {"vllm_fleet_extra_args": ["--disable-log-requests"]}, "vllm_fleet_extra_args"),
    PlanCase("nodes-over-hosts", {"vllm_fleet_strategy": "multi_node_tp", "vllm_fleet_nodes": 3},
             "vllm_fleet_nodes", hosts=[{}]),
    PlanCase("node-rank-out-of-instance", {"vllm_fleet_strategy": "multi_node_tp", "vllm_fleet_nodes": 2,
                                           "vllm_fleet_node_rank": 5}, "vllm_fleet_node_rank", hosts=[{}]),
    PlanCase("node-rank-twice", {"vllm_fleet_strategy": "multi_node_tp", "vllm_fleet_nodes": 2,
                                 "vllm_fleet_node_rank": 1}, "vllm_fleet_node_rank",
             hosts=[{"vllm_fleet_node_rank": 1}]),
    PlanCase("instance-too-small", {"vllm_fleet_strategy": "multi_node_tp", "vllm_fleet_nodes": 2,
                                    "vllm_fleet_instance": "i0"}, "vllm_fleet_instance",
             hosts=[{"vllm_fleet_instance": "i1"}]),
    PlanCase("kv-instances-mismatch", {**_MC, "vllm_fleet_kv_instances": 3}, "vllm_fleet_kv_instances",
             base=False, hosts=[{}, {"vllm_fleet_role": ["master", "store", "router"]}]),
    PlanCase("differs-in-deployment", {"vllm_fleet_served_model_name": "a"}, "vllm_fleet_served_model_name",
             hosts=[{"vllm_fleet_served_model_name": "b"}]),
    PlanCase("mixed-hardware", {}, "vllm_fleet_hardware", hosts=[{"vllm_fleet_hardware": "h100"}]),
    PlanCase("uv-older-than-recipe", {**_UV, "vllm_fleet_vllm_version": "0.10.0"}, "vllm_fleet_vllm_version"),
]
PLAN_OK = ["p-ok-plain"]


# ------------------------------------------------------------------------------------------
# CROSS: deployments that plan alone but clash with each other on one machine.

CROSS: List[Tuple[str, List[Tuple[str, Dict[str, Any]]], str, str]] = [
    # (id, [(host, vars)], the host the message names, variable)
    ("same-machine-default-port",
     [("x-a1", {"vllm_fleet_deployment": "x-a", "ansible_host": "10.9.0.1"}),
      ("x-b1", {"vllm_fleet_deployment": "x-b", "ansible_host": "10.9.0.1"})],
     "x-b1", "vllm_fleet_port"),
    ("same-machine-same-port",       # -e style string on one side, a number on the other
     [("x-c1", {"vllm_fleet_deployment": "x-c", "ansible_host": "10.9.0.2", "vllm_fleet_port": "8100"}),
      ("x-d1", {"vllm_fleet_deployment": "x-d", "ansible_host": "10.9.0.2", "vllm_fleet_port": 8100})],
     "x-d1", "vllm_fleet_port"),
    ("router-on-a-server-port",
     [("x-e1", {"vllm_fleet_deployment": "x-e", "ansible_host": "10.9.0.3"}),
      ("x-f1", {**_PD, "vllm_fleet_deployment": "x-f", "vllm_fleet_role": "prefill", "ansible_host": "10.9.1.1"}),
      ("x-f2", {**_PD, "vllm_fleet_deployment": "x-f", "vllm_fleet_role": "decode", "ansible_host": "10.9.1.2"}),
      ("x-f3", {**_PD, "vllm_fleet_deployment": "x-f", "vllm_fleet_role": "router", "ansible_host": "10.9.0.3"})],
     "x-f3", "vllm_fleet_port"),
    ("one-deployment-twice-on-a-machine",   # two inventory names for one machine (an alias)
     [("x-i1", {"vllm_fleet_deployment": "x-i", "ansible_host": "10.9.0.4"}),
      ("x-i2", {"vllm_fleet_deployment": "x-i", "ansible_host": "10.9.0.4"})],
     "x-i2", "vllm_fleet_port"),
    ("router-port-on-a-server-port",
     [("x-j1", {"vllm_fleet_deployment": "x-j", "ansible_host": "10.9.0.5", "vllm_fleet_port": 9000}),
      ("x-k1", {**_PD, "vllm_fleet_deployment": "x-k", "vllm_fleet_role": "prefill", "ansible_host": "10.9.1.3",
                "vllm_fleet_router_port": "9000"}),
      ("x-k2", {**_PD, "vllm_fleet_deployment": "x-k", "vllm_fleet_role": "decode", "ansible_host": "10.9.1.4",
                "vllm_fleet_router_port": "9000"}),
      ("x-k3", {**_PD, "vllm_fleet_deployment": "x-k", "vllm_fleet_role": "router", "ansible_host": "10.9.0.5",
                "vllm_fleet_router_port": "9000"})],
     "x-k3", "vllm_fleet_port"),
]
CROSS_OK = ["x-g1", "x-h1"]   # same port, different machines


# ------------------------------------------------------------------------------------------
# harness

PLAYBOOK = """\
# what playbooks/_plan.yml does, minus the facts of hosts that are never contacted
- name: Check the inventory and plan every deployment
  hosts: all
  any_errors_fatal: true
  gather_facts: false
  tasks:
    - name: Check every host's vllm_fleet_* variables against the inventory contract
      vllm_fleet_plan:
        hosts: "{{ ansible_play_hosts_all }}"
        recipe_sources: ["%(recipes)s"]
        contract_only: true
      run_once: true

    - name: Skip hosts that deploy nothing
      ansible.builtin.meta: end_host
      when: vllm_fleet_recipe is not defined

    - name: Read the GPU facts (fake nvidia-smi)
      vllm_fleet_gpu_facts:
        hardware: "{{ vllm_fleet_hardware | default(omit) }}"
      when: case_gpu | default(false)

    - name: Plan every deployment
      vllm_fleet_plan:
        hosts: "{{ ansible_play_hosts }}"
        recipe_sources: ["%(recipes)s"]
        all_hosts: true
      run_once: true
      register: planned

    - name: Show the plans
      ansible.builtin.debug:
        msg: "PLANS {{ planned.plans | to_json | b64encode }}"
      run_once: true
"""

TRACEBACK = re.compile(r"Traceback \(most recent call last\)|exception occurred during task execution|"
                       r"The full traceback|Unexpected (?:Exception|failure)|^\w+Error: ", re.M)
# Ansible 2.19 shows an exception escaping an action plugin as "Task failed: <str(exc)>" (no traceback
# without -vvv): every failure must be one of the plan action's own messages instead.
OWN_FAILURE = re.compile(r"vllm-fleet: the inventory breaks the contract|vllm-fleet plan failed for deployment |"
                         r"vllm-fleet: the limit \(-l / vllm_fleet_target\) cuts |"
                         r"[\w.-]+: vllm_fleet_\w+")


def _assert_no_crash(run: "Run") -> None:
    assert not TRACEBACK.search(run.out), run.out[-4000:]
    for first in re.findall(r"\[ERROR\]: (?:Task failed: )?(.*)", run.out):
        assert OWN_FAILURE.match(first), f"not a refusal of the plan action: {first}"


@dataclass
class Run:
    rc: int
    out: str
    seconds: float

    def names(self, host: str, var: str) -> bool:
        pattern = rf"(?<![\w.-]){re.escape(host)}: {re.escape(var)}(?![A-Za-z0-9_])"
        return re.search(pattern, self.out) is not None

    def mentions(self, host: str) -> bool:
        return re.search(rf"(?<![\w.-]){re.escape(host)}: vllm_fleet_", self.out) is not None


def _host_block(name: str, variables: Dict[str, Any], raw: str = "") -> str:
    body = yaml.safe_dump(variables, default_flow_style=False, sort_keys=True, width=1000) if variables else ""
    lines = body.splitlines() if variables else []   # blank lines are newlines inside quoted scalars
    if raw:
        lines += raw.splitlines()
    text = f"    {name}:\n"
    text += "".join(f"      {line}\n" for line in lines) if lines else ""
    return text if lines else f"    {name}: {{}}\n"


def _inventory(hosts: List[str], groups: Dict[str, Tuple[Dict[str, Any], List[str]]]) -> str:
    """hosts: pre-rendered host blocks of `all`; groups: name -> (vars, member host names)."""
    out = ["all:", "  vars:", "    ansible_connection: local",
           '    ansible_python_interpreter: "{{ ansible_playbook_python }}"', "  hosts:"]
    out += [block.rstrip("\n") for block in hosts]
    if groups:
        out.append("  children:")
        for name, (variables, members) in groups.items():
            out.append(f"    {name}:")
            if variables:
                out.append("      vars:")
                body = yaml.safe_dump(variables, default_flow_style=False, sort_keys=True, width=1000)
                out += [f"        {line}" for line in body.splitlines()]
            out.append("      hosts:")
            out += [f"        {member}:" for member in members]
    return "\n".join(out) + "\n"


def _play(tmp: Path, inventory: str, *extra: str, playbook: str = PLAYBOOK) -> Run:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "inventory.yml").write_text(inventory, encoding="utf-8")
    (tmp / "play.yml").write_text(playbook % {"recipes": ROOT / "recipes"}, encoding="utf-8")
    env = dict(os.environ)
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-local"), ANSIBLE_REMOTE_TEMP=str(tmp / "ansible-remote"),
               ANSIBLE_DEPRECATION_WARNINGS="0", XDG_STATE_HOME=str(tmp / "state"),
               FAKE_GPU_PROFILE="h200x8", PATH=f"{FAKES}{os.pathsep}{env.get('PATH', '')}")
    env.pop("FAKE_GPU_COUNT", None)
    start = time.monotonic()
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp / "inventory.yml"), str(tmp / "play.yml"), *extra],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300)
    return Run(proc.returncode, proc.stdout, time.monotonic() - start)


def _case_vars(case: Case, base: Dict[str, Any]) -> Dict[str, Any]:
    merged = dict(base) if case.base else {}
    merged.update(_fill(case.vars, case.sentinel))
    return merged


_BASE = {"vllm_fleet_recipe": ERNIE, "vllm_fleet_hardware": "h200"}


@pytest.fixture(scope="module")
def contract_run(tmp_path_factory) -> Run:
    blocks = [_host_block(c.host, _case_vars(c, _BASE), c.raw) for c in CONTRACT]
    blocks += [
        _host_block("k-ok-plain", dict(_BASE, vllm_fleet_deployment="k-ok-plain")),
        _host_block("k-ok-digest", dict(_BASE, vllm_fleet_image="vllm/vllm-openai@" + DIGEST)),
        _host_block("k-ok-port-string", dict(_BASE, vllm_fleet_port="8000")),
        _host_block("k-ok-no-recipe", {}),
    ]
    groups = {
        "grp_a": ({"vllm_fleet_recipe": ERNIE, "vllm_fleet_deployment": "grp-a"}, [TWO_GROUPS.host]),
        "grp_b": ({"vllm_fleet_recipe": ERNIE, "vllm_fleet_deployment": "grp-b"}, [TWO_GROUPS.host]),
    }
    return _play(tmp_path_factory.mktemp("contract"), _inventory(blocks, groups))


def _plan_hosts(case: PlanCase) -> List[Tuple[str, Dict[str, Any]]]:
    first = _case_vars(case, _BASE)
    first.setdefault("vllm_fleet_deployment", case.host)
    if case.gpu:   # the hardware and GPU count come from the facts module (fake nvidia-smi)
        first.pop("vllm_fleet_hardware", None)
        first["case_gpu"] = True
    out = [(case.host, first)]
    for n, extra in enumerate(case.hosts, start=1):
        more = {k: v for k, v in first.items() if k not in ("vllm_fleet_role", "vllm_fleet_node_rank")}
        more.update(extra)
        out.append((f"{case.host}-{n}", more))
    return out


@pytest.fixture(scope="module")
def plan_run(tmp_path_factory) -> Run:
    blocks = [_host_block(name, variables, case.raw if name == case.host else "")
              for case in PLAN for name, variables in _plan_hosts(case)]
    blocks.append(_host_block("p-ok-plain", dict(_BASE, vllm_fleet_deployment="p-ok-plain")))
    return _play(tmp_path_factory.mktemp("plan"), _inventory(blocks, {}))


@pytest.fixture(scope="module")
def cross_run(tmp_path_factory) -> Run:
    blocks = []
    for _, hosts, _, _ in CROSS:
        for name, variables in hosts:
            blocks.append(_host_block(name, dict(_BASE, **variables)))
    blocks.append(_host_block("x-g1", dict(_BASE, vllm_fleet_deployment="x-g", ansible_host="10.9.2.1")))
    blocks.append(_host_block("x-h1", dict(_BASE, vllm_fleet_deployment="x-h", ansible_host="10.9.2.2")))
    return _play(tmp_path_factory.mktemp("cross"), _inventory(blocks, {}))


CONTROL_SECRET = SENTINEL + "control"


@pytest.fixture(scope="module")
def control_run(tmp_path_factory) -> Run:
    blocks = [
        _host_block("ok-plain", dict(_BASE, vllm_fleet_deployment="ok-plain")),
        _host_block("ok-digest", dict(_BASE, vllm_fleet_deployment="ok-digest",
                                      vllm_fleet_image="vllm/vllm-openai@" + DIGEST)),
        _host_block("ok-tag-digest", dict(_BASE, vllm_fleet_deployment="ok-tag-digest",
                                          vllm_fleet_image="vllm/vllm-openai:v0.32.0@" + DIGEST)),
        _host_block("ok-port-string", dict(_BASE, vllm_fleet_deployment="ok-port-string", vllm_fleet_port="8001",
                                           vllm_fleet_extra_args=["--port", "8001"])),
        _host_block("ok-secrets", dict(_BASE, vllm_fleet_deployment="ok-secrets", vllm_fleet_hf_token=CONTROL_SECRET,
                                       vllm_fleet_api_key=CONTROL_SECRET + "k",
                                       vllm_fleet_env={"VLLM_LOGGING_LEVEL": "DEBUG"})),
        _host_block("ok-gpu", {"vllm_fleet_recipe": ERNIE, "vllm_fleet_deployment": "ok-gpu", "case_gpu": True,
                               "vllm_fleet_extra_args": ["--tensor-parallel-size", "4",
                                                         "--pipeline-parallel-size", "2"]}),
        _host_block("ok-uv", dict(_BASE, vllm_fleet_deployment="ok-uv", vllm_fleet_runtime="uv",
                                  vllm_fleet_vllm_version="0.32.0")),
        _host_block("ok-nothing", {}),
    ]
    return _play(tmp_path_factory.mktemp("control"), _inventory(blocks, {}))


def _plans(run: Run) -> Dict[str, Any]:
    match = re.search(r"PLANS ([A-Za-z0-9+/=]+)", run.out)   # base64: one word, never folded
    assert match, run.out[-3000:]
    return json.loads(base64.b64decode(match.group(1)))


def _excerpt(run: Run, host: str) -> str:
    lines = [line for line in run.out.splitlines() if host in line]
    return "\n".join(lines[:10]) or run.out[-4000:]


# ------------------------------------------------------------------------------------------
# the tests


def test_enough_distinct_bad_inputs():
    ids = [c.id for c in CONTRACT] + [TWO_GROUPS.id] + [c.id for c in PLAN] + [c[0] for c in CROSS]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 80


@pytest.mark.parametrize("case", CONTRACT + [TWO_GROUPS], ids=lambda c: c.id)
def test_contract_refuses(contract_run, case):
    run = contract_run
    assert run.rc != 0, run.out[-3000:]
    assert "the inventory breaks the contract (nothing was changed)" in run.out
    for var in case.names:
        assert run.names(case.host, var), f"no line '{case.host}: {var}...':\n{_excerpt(run, case.host)}"
    if case.also:
        assert re.search(case.also, _excerpt(run, case.host)), _excerpt(run, case.host)
    _assert_no_crash(run)
    assert case.sentinel not in run.out


def test_contract_run_stops_before_any_plan(contract_run):
    assert "Plan every deployment" not in contract_run.out
    assert "GPU facts" not in contract_run.out


@pytest.mark.parametrize("host", CONTRACT_OK)
def test_contract_valid_hosts_are_not_named(contract_run, host):
    assert not contract_run.mentions(host), _excerpt(contract_run, host)


@pytest.mark.parametrize("case", PLAN, ids=lambda c: c.id)
def test_plan_refuses(plan_run, case):
    run = plan_run
    assert run.rc != 0, run.out[-3000:]
    # every host passed the contract: the plan step ran, and reported this deployment
    assert "the inventory breaks the contract" not in run.out, run.out[-3000:]
    assert f"vllm-fleet plan failed for deployment {case.host!r}" in run.out, run.out[-4000:]
    hosts = [case.where] if case.where else [case.host] + [f"{case.host}-{n}" for n in range(1, len(case.hosts) + 1)]
    for var in case.names:
        assert any(run.names(host, var) for host in hosts), \
            f"no line '{'/'.join(hosts)}: {var}...':\n{_excerpt(run, case.host)}"
    _assert_no_crash(run)


def test_plan_valid_deployment_is_not_named(plan_run):
    assert "deployment 'p-ok-plain'" not in plan_run.out
    assert not plan_run.mentions("p-ok-plain")


@pytest.mark.parametrize("case", CROSS, ids=lambda c: c[0])
def test_cross_deployment_refuses(cross_run, case):
    _, hosts, named, var = case
    run = cross_run
    assert run.rc != 0, run.out[-3000:]
    assert "plan failed" not in run.out, run.out[-3000:]
    assert run.names(named, var), run.out[-4000:]
    others = [h for h, _ in hosts if h != named]
    assert any(re.search(rf"{re.escape(named)}: {var}: .*host {re.escape(o)}\b", run.out) for o in others), \
        run.out[-4000:]
    _assert_no_crash(run)


@pytest.mark.parametrize("host", CROSS_OK)
def test_cross_same_port_on_other_machines_is_fine(cross_run, host):
    assert not re.search(rf"\bhost {re.escape(host)}\)", cross_run.out)
    assert not cross_run.mentions(host)


def test_valid_inventories_plan(control_run):
    run = control_run
    assert run.rc == 0, run.out[-4000:]
    _assert_no_crash(run)
    plans = _plans(run)
    assert set(plans) == {"ok-plain", "ok-digest", "ok-tag-digest", "ok-port-string", "ok-secrets", "ok-gpu", "ok-uv"}
    first = {host: plan["processes"][0] for host, plan in plans.items()}
    assert first["ok-plain"]["port"] == 8000
    assert first["ok-digest"]["image"] == "vllm/vllm-openai@" + DIGEST
    assert first["ok-tag-digest"]["image"] == "vllm/vllm-openai:v0.32.0@" + DIGEST
    assert first["ok-port-string"]["port"] == 8001
    assert plans["ok-gpu"]["hardware"] == "h200"      # detected by the real module from the fake nvidia-smi
    assert first["ok-secrets"]["secret_env"] == ["HF_TOKEN", "VLLM_API_KEY"]   # docker: both in the env
    assert first["ok-secrets"]["credentials"] == [] and plans["ok-secrets"]["secret_files"] == []
    assert CONTROL_SECRET not in run.out and CONTROL_SECRET not in json.dumps(plans)   # only the names travel
    assert plans["ok-uv"]["runtime"] == "uv"


def test_extra_vars_string_port_plans(tmp_path):
    """`-e vllm_fleet_port=8000` gives every host the string "8000": accepted as the port."""
    blocks = [_host_block("e-one", dict(_BASE, vllm_fleet_deployment="e-one"))]
    run = _play(tmp_path, _inventory(blocks, {}), "-e", "vllm_fleet_port=8000")
    assert run.rc == 0, run.out[-4000:]
    assert _plans(run)["e-one"]["processes"][0]["port"] == 8000
    run = _play(tmp_path / "bad", _inventory(blocks, {}), "-e", "vllm_fleet_port=0")
    assert run.rc != 0 and run.names("e-one", "vllm_fleet_port"), run.out[-4000:]
    _assert_no_crash(run)
