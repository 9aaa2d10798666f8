"""Replicas on a CPU host, with the REAL model: the CPU recipe (all-MiniLM-L6-v2, the locally
built vllm-cpu image) as 2 replicas on one CPU test host (vllm_fleet_replicas_per_host: 2), each
bound to its own core (docker cpuset + VLLM_CPU_OMP_THREADS_BIND), behind the deployment's REAL
vllm-router on a second host. Both answer embeddings and the router lists both.

Rolling replicas one at a time under a client load through the router (0 failed requests) is
tested with light stand-ins in test_rolling_update.py (the same replica, drain and router code;
a rolling update of real vLLM servers behind vllm-router is measured by `nox -s bench_rollout`):
here it cost 216 s of CI for no path the stand-ins miss.

The testbed's hosts see this machine's cores (2 here, one NUMA node): a core each.
"""

from __future__ import annotations

import json

import pytest

from helpers import MINILM, MINILM_DIR, docker_inspect, host_exec, host_http, playbook, served

pytestmark = pytest.mark.e2e

ARGV = ["vllm", "serve", MINILM_DIR, "--runner", "pooling", "--tensor-parallel-size", "1",
        "--served-model-name", "minilm"]
GROUPS = {"cpurep": {"hosts": {"cpurep-a": "none", "cpurep-r": "none"},
                     "vars": {"vllm_fleet_deployment": "minilm-rep"}}}
COMMON = {
    **MINILM,
    "vllm_fleet_runtime": "docker",
    "vllm_fleet_docker_pull": "never",
    "vllm_fleet_cpu_shm_size": "1g",
    "vllm_fleet_health_timeout": 400,
    "vllm_fleet_health_interval": 1,
    "vllm_fleet_services_wheelhouse": "/srv/wheels",
    # no torch.compile warm-up (minutes on one core, at every start of a replica)
    "vllm_fleet_extra_args": ["--enforce-eager"],
}
HOST_VARS = {"cpurep-a": {"vllm_fleet_replicas_per_host": 2}, "cpurep-r": {"vllm_fleet_role": "router"}}
NAMES = ("vllm-fleet-minilm-rep-r0", "vllm-fleet-minilm-rep-r1")


@pytest.fixture(scope="module")
def cpurep(make_fleet):
    made = make_fleet("cpurep", GROUPS, COMMON)
    hv = made.inventory[-1].rsplit("/", 1)[0] + "/host_vars.yml"
    with open(hv, "w") as fh:
        fh.write(json.dumps({"all": {"hosts": HOST_VARS}}, indent=2) + "\n")
    made.inventory.append(hv)
    yield made
    playbook("teardown.yml", made.inventory, "-l", "cpurep")


def _allowed_cores(container: dict) -> str:
    """The cores the replica's vLLM process may run on, read from the kernel."""
    status = open(f"/proc/{container['State']['Pid']}/status").read()
    return next(line.split()[1] for line in status.splitlines() if line.startswith("Cpus_allowed_list:"))


def test_two_cpu_replicas_on_their_own_cores_both_answer(cpurep, capsys):
    cores = sorted(__import__("os").sched_getaffinity(0))
    assert len(cores) >= 2, "this test needs 2 cores"
    run = playbook("deploy.yml", cpurep.inventory, "-l", "cpurep")
    assert run.rc == 0, run
    host = cpurep.container("cpurep-a")
    for i, name in enumerate(NAMES):
        c = docker_inspect(name)
        assert c is not None and c["State"]["Running"], (name, run.out[-2000:])
        assert [*c["Config"]["Entrypoint"], *c["Config"]["Cmd"]] == served(ARGV) + ["--enforce-eager", "--port", str(8000 + i)]
        env = dict(e.split("=", 1) for e in c["Config"]["Env"])
        assert env["VLLM_CPU_OMP_THREADS_BIND"] == str(cores[i]), env
        assert c["HostConfig"]["CpusetCpus"] == str(cores[i])
        assert _allowed_cores(c) == str(cores[i])          # the kernel's word, not the plan's
        status, body = host_http(host, "POST", f"http://127.0.0.1:{8000 + i}/v1/embeddings",
                                 {"model": "minilm", "input": ["vllm-fleet", f"replica {i}"]})
        assert status == 200 and [len(d["embedding"]) for d in body["data"]] == [384, 384], body
    out = host_exec(cpurep.container("cpurep-r"), ["python3", "-c", "import urllib.request as u;print(u.urlopen("
                                                   "'http://127.0.0.1:8000/list_workers').read().decode())"])
    address = cpurep.hosts["cpurep-a"]["ip"]
    assert sorted(json.loads(out.stdout)["urls"]) == [f"http://{address}:{p}" for p in (8000, 8001)], out.stdout
    with capsys.disabled():
        print(f"\ncpu replicas: deploy 2 in {run.seconds:.0f} s")
