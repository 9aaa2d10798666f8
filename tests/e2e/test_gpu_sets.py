"""Several deployments on one machine, each on its own GPUs (vllm_fleet_gpus): a FAKE H200 x8
test host serves the seed recipe twice, on GPUs 0-3 and 4-7 (two inventory hosts with the
machine's one address, the stand-in GPU image in light mode); a third deployment asking for GPU
3 is refused before any change, naming both deployments and the GPU. Then the seed alone on the
machine with vllm_fleet_replicas_per_host auto: 8 replicas, one GPU and one port each; scaled down
to 2, the other 6 go with the switch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import docker_inspect, host_http, playbook

pytestmark = pytest.mark.e2e

SEED_ARGV = ["vllm", "serve", "baidu/ERNIE-4.5-VL-28B-A3B-PT", "--trust-remote-code",
             "--tensor-parallel-size", "1", "--mm-encoder-tp-mode", "data"]
GROUPS = {"gpuset": {"hosts": {"gpu-m": "h200x8"}}}
COMMON = {
    "vllm_fleet_recipe": "baidu/ERNIE-4.5-VL-28B-A3B-PT",
    "vllm_fleet_runtime": "docker",
    "vllm_fleet_docker_pull": "never",
    "vllm_fleet_env": {"VLLM_STANDIN_SERVE": "light"},
    "vllm_fleet_health_request": "none",
    "vllm_fleet_health_timeout": 120,
}
# inventory host -> (deployment, GPUs, port); all on the machine of test host gpu-m
SHARED = {"gpu-lo": ("gpuset-lo", "0-3", 8000), "gpu-hi": ("gpuset-hi", [4, 5, 6, 7], 8001)}
THIRD = {"gpu-3": ("gpuset-3", [3], 8002)}
REPLICAS = {"gpu-rep": ("gpuset-rep", None, 8000)}


@pytest.fixture(scope="module")
def machine(make_fleet):
    made = make_fleet("gpuset", GROUPS, COMMON)
    base = made.hosts["gpu-m"]

    def alias(spec):
        return {name: {"ansible_host": base["ip"], "vllm_fleet_testbed_container": base["container"],
                       "vllm_fleet_deployment": dep, "vllm_fleet_port": port,
                       **({"vllm_fleet_gpus": gpus} if gpus is not None else {"vllm_fleet_replicas_per_host": "auto"})}
                for name, (dep, gpus, port) in spec.items()}
    extra = Path(made.inventory[-1]).with_name("shared.yml")
    # inventory hosts with gpu-m's address: one machine (every run below is limited to them)
    doc = {"all": {"children": {"shared": {"hosts": alias(SHARED)}, "third": {"hosts": alias(THIRD)},
                                "replicas": {"hosts": alias(REPLICAS)}}}}
    extra.write_text(json.dumps(doc, indent=2) + "\n")
    made.inventory.append(str(extra))
    yield made
    playbook("teardown.yml", made.inventory, "-l", "shared:third:replicas")


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
        assert [*c["Config"]["Entrypoint"], *c["Config"]["Cmd"]] == SEED_ARGV + ([] if port == 8000 else ["--port", str(port)])
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


def _replicas():
    """The machine's containers of the replica deployment, by name."""
    out = {}
    for i in range(8):
        for suffix in ("", "-prev"):
            c = docker_inspect(f"vllm-fleet-gpuset-rep-r{i}{suffix}")
            if c is not None:
                out[f"r{i}{suffix}"] = c
    return out


def test_auto_replicas_serve_the_seed_once_per_gpu_and_scale_down(machine):
    down = playbook("teardown.yml", machine.inventory, "-l", "shared")   # the GPUs and ports they held
    assert down.rc == 0, down
    check = playbook("deploy.yml", machine.inventory, "-l", "replicas", "--check", "--diff")
    assert check.rc == 0 and _replicas() == {}, check
    for i in range(8):   # the plan shows every replica's GPU set and port
        assert f"vllm-fleet-gpuset-rep-r{i} (GPU {i}, port {8000 + i}): vllm serve" in check.out, check.out[-3000:]
    run = playbook("deploy.yml", machine.inventory, "-l", "replicas")
    assert run.rc == 0, run
    got = _replicas()
    assert sorted(got) == [f"r{i}" for i in range(8)], sorted(got)
    for i in range(8):
        c = got[f"r{i}"]
        assert c["State"]["Running"], i
        requests = c["HostConfig"]["DeviceRequests"]
        assert [(r["Driver"], r["DeviceIDs"], r.get("Count") or 0) for r in requests] == [("nvidia", [str(i)], 0)]
        assert [*c["Config"]["Entrypoint"], *c["Config"]["Cmd"]] == SEED_ARGV + ["--port", str(8000 + i)]
        status, body = host_http(machine.container("gpu-m"), "GET", f"http://127.0.0.1:{8000 + i}/v1/models")
        assert status == 200 and body["data"][0]["id"] == "baidu/ERNIE-4.5-VL-28B-A3B-PT", (i, body)
    assert "idle GPUs" not in run.out   # auto: 8 replicas x TP 1 cover the 8 GPUs
    again = playbook("deploy.yml", machine.inventory, "-l", "replicas")
    assert again.rc == 0 and again.changed("gpu-rep") == 0, again
    # two replicas: r2-r7 stop with the switch and go with the commit; r0, r1 keep their GPU and port
    kept = {k: got[k]["Id"] for k in ("r0", "r1")}
    fewer = playbook("deploy.yml", machine.inventory, "-l", "replicas", "-e", "vllm_fleet_replicas_per_host=2")
    assert fewer.rc == 0, fewer
    got = _replicas()
    assert sorted(got) == ["r0", "r1"] and {k: c["Id"] for k, c in got.items()} == kept, sorted(got)
    assert "idle GPUs: gpu-rep: GPU 2-7 of 8" in fewer.out, fewer.out[-2000:]
    down = playbook("teardown.yml", machine.inventory, "-l", "replicas")
    assert down.rc == 0 and _replicas() == {}, down
