"""Several deployments on one machine, each on its own GPUs (vllm_fleet_gpus): a FAKE H200 x8
test host serves the seed recipe twice, on GPUs 0-3 and 4-7 (two inventory hosts with the
machine's one address, the stand-in GPU image in light mode); a third deployment asking for GPU
3 is refused before any change, naming both deployments and the GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import docker_inspect, host_exec, host_http, playbook, served

pytestmark = pytest.mark.e2e

SEED_ARGV = ["vllm", "serve", "baidu/ERNIE-4.5-VL-28B-A3B-PT", "--trust-remote-code",
             "--tensor-parallel-size", "1", "--mm-encoder-tp-mode", "data"]
GROUPS = {"gpuset": {"hosts": {"gpu-m": "h200x8"}}}
COMMON = {
    "vllm_fleet_recipe": "baidu/ERNIE-4.5-VL-28B-A3B-PT",
    "vllm_fleet_runtime": "docker",
    # one server per host (the default, auto, would start one per GPU: the replica tests set it)
    "vllm_fleet_replicas_per_host": 1,
    "vllm_fleet_docker_pull": "never",
    # light mode without the argv check (GPU sets are the point; vLLM's own parser checks the argv in
    # test_seed_gpu, test_fleet_multinode and the bad revision of test_rolling_update): no
    # import of the real vLLM, ~10 CPU-s and ~400 MB less per server
    "vllm_fleet_env": {"VLLM_STANDIN_SERVE": "light", "VLLM_STANDIN_CHECK": "0"},
    "vllm_fleet_health_request": "none",
    "vllm_fleet_health_timeout": 120,
}
# inventory host -> (deployment, GPUs, port); all on the machine of test host gpu-m
SHARED = {"gpu-lo": ("gpuset-lo", "0-3", 8000), "gpu-hi": ("gpuset-hi", [4, 5, 6, 7], 8001)}
THIRD = {"gpu-3": ("gpuset-3", [3], 8002)}


@pytest.fixture(scope="module")
def machine(make_fleet):
    made = make_fleet("gpuset", GROUPS, COMMON)
    base = made.hosts["gpu-m"]

    def alias(spec):
        return {name: {"ansible_host": base["ip"], "vllm_fleet_testbed_container": base["container"],
                       "vllm_fleet_deployment": dep,
                       "vllm_fleet_gpus": gpus, "vllm_fleet_port": port}
                for name, (dep, gpus, port) in spec.items()}
    extra = Path(made.inventory[-1]).with_name("shared.yml")
    # inventory hosts with gpu-m's address: one machine (every run below is limited to them)
    doc = {"all": {"children": {"shared": {"hosts": alias(SHARED)}, "third": {"hosts": alias(THIRD)}}}}
    extra.write_text(json.dumps(doc, indent=2) + "\n")
    made.inventory.append(str(extra))
    return made   # make_fleet removes the hosts and their sibling containers


def test_two_deployments_serve_on_disjoint_gpus_of_one_machine(machine):
    run = playbook("deploy.yml", machine.inventory, "-l", "shared")
    assert run.rc == 0, run
    for name, (dep, gpus, port) in SHARED.items():
        c = docker_inspect(f"vllm-fleet-{dep}")
        assert c is not None and c["State"]["Running"], (dep, run.out[-2000:])
        want = ["0", "1", "2", "3"] if name == "gpu-lo" else ["4", "5", "6", "7"]
        requests = c["HostConfig"]["DeviceRequests"]
        assert [(r["Driver"], r["DeviceIDs"], r.get("Count") or 0) for r in requests] == [("nvidia", want, 0)], requests
        # exactly the recipe's command; only the second one's port differs
        assert [*c["Config"]["Entrypoint"], *c["Config"]["Cmd"]] == served(SEED_ARGV) + ([] if port == 8000 else ["--port", str(port)])
        status, body = host_http(machine.container("gpu-m"), "GET", f"http://127.0.0.1:{port}/v1/models")
        assert status == 200 and body["data"][0]["id"] == "baidu/ERNIE-4.5-VL-28B-A3B-PT", (port, body)
    assert "idle GPUs" not in run.out   # 0-3 and 4-7 cover the machine
    again = playbook("deploy.yml", machine.inventory, "-l", "shared")
    assert again.rc == 0 and again.changed("gpu-lo") == 0 and again.changed("gpu-hi") == 0, again


def test_a_third_deployment_on_a_taken_gpu_is_refused_before_any_change(machine):
    before = {dep: docker_inspect(f"vllm-fleet-{dep}")["Id"] for dep, _, _ in SHARED.values()}
    run = playbook("deploy.yml", machine.inventory, "-l", "shared:third")
    assert run.rc != 0
    assert ("gpu-3: vllm_fleet_gpus: GPU 3 of machine " in run.out and "'gpuset-lo' (host gpu-lo, GPUs 0-3)" in run.out
            and "'gpuset-3' (host gpu-3, GPU 3)" in run.out), run.out[-3000:]
    assert "Traceback" not in run.out
    assert docker_inspect("vllm-fleet-gpuset-3") is None
    assert {dep: docker_inspect(f"vllm-fleet-{dep}")["Id"] for dep, _, _ in SHARED.values()} == before


def test_tp2_replicas_take_the_gpu_pairs_the_topology_prefers(machine):
    """The machine's FAKE nvidia-smi reports a PCIe box whose GPUs are NVLink-bridged 0-4, 1-5,
    2-6, 3-7 (`topology=pairs`): the seed at TP 2 with auto replicas is 4 servers, each on an
    NVLink pair (not the consecutive 0-1, 2-3, ...), ports 8000-8003, all serving."""
    down = playbook("teardown.yml", machine.inventory, "-l", "shared")   # (third was refused: never deployed)
    assert down.rc == 0, down
    gpu_m = machine.container("gpu-m")
    assert host_exec(gpu_m, ["sh", "-c", "echo 'h200x8 topology=pairs' > /etc/vllm-fleet-fake-gpu"]).returncode == 0
    tp2 = {"vllm_fleet_replicas_per_host": "auto", "vllm_fleet_deployment": "gpuset-tp2",
           "vllm_fleet_extra_args": ["--tensor-parallel-size", "2"],
           "vllm_fleet_env": {"VLLM_STANDIN_SERVE": "light", "VLLM_STANDIN_CHECK": "0"}}
    # gpu-m's own variables, in a layer: -e would give the deployment name to the machine's other
    # inventory hosts too, joining them to gpu-m's deployment (a limit plans a deployment whole)
    layer = Path(machine.inventory[-1]).with_name("tp2.yml")
    layer.write_text(json.dumps({"all": {"hosts": {"gpu-m": tp2}}}) + "\n")
    inventory = machine.inventory + [str(layer)]
    try:
        run = playbook("deploy.yml", inventory, "-l", "gpu-m")
        assert run.rc == 0, run
        pairs = [["0", "4"], ["1", "5"], ["2", "6"], ["3", "7"]]
        for i, pair in enumerate(pairs):
            c = docker_inspect(f"vllm-fleet-gpuset-tp2-r{i}")
            assert c is not None and c["State"]["Running"], (i, run.out[-2000:])
            requests = c["HostConfig"]["DeviceRequests"]
            assert [(r["Driver"], r["DeviceIDs"]) for r in requests] == [("nvidia", pair)], (i, requests)
            assert [*c["Config"]["Entrypoint"], *c["Config"]["Cmd"]] == \
                served(SEED_ARGV[:4] + SEED_ARGV[6:]) + ["--tensor-parallel-size", "2", "--port", str(8000 + i)]
            status, body = host_http(gpu_m, "GET", f"http://127.0.0.1:{8000 + i}/v1/models")
            assert status == 200, (i, body)
        assert docker_inspect("vllm-fleet-gpuset-tp2-r4") is None
        assert "idle GPUs" not in run.out
    finally:
        playbook("teardown.yml", inventory, "-l", "gpu-m")
        host_exec(gpu_m, ["sh", "-c", "echo h200x8 > /etc/vllm-fleet-fake-gpu"])
