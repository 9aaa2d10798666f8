"""Two deployments on one machine whose names lie next to each other (issue 26): ``names-mini``
with 2 replicas (containers ``vllm-fleet-names-mini-r0`` / ``-r1``, their kept ``-r0-prev`` /
``-r1-prev``, records ``<state>/names-mini/``: one record per deployment, no ``.plan`` marker) and
``names-mini-r2`` (container ``vllm-fleet-names-mini-r2``, records ``<state>/names-mini-r2/``).

Why this pair: it sits on a real boundary of the per-machine name registry (machines.check_names).
``names-mini-r2`` is exactly the name ``names-mini``'s third replica would take: with 3 replicas
the plan refuses the pair (the old code planned it, and the two deployments would have shared one
container, each update or teardown taking the other's); with 2 it is legitimately distinct and
must plan, deploy and serve. Teardown then removes by exact names, so tearing down
``names-mini`` (teardown.yml limited to its group, as docs/operations.md documents) must leave every
container and record of ``names-mini-r2`` in place, although its names start with
``vllm-fleet-names-mini-r`` and ``names-mini``. One FAKE H200 x8 test host, the stand-in GPU
image in light mode, two inventory hosts with the machine's one address (as test_gpu_sets.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import docker_inspect, host_exec, host_http, playbook

pytestmark = pytest.mark.e2e

GROUPS = {"names": {"hosts": {"names-m": "h200x8"}}}
COMMON = {
    "vllm_fleet_recipe": "baidu/ERNIE-4.5-VL-28B-A3B-PT",
    "vllm_fleet_runtime": "docker",
    "vllm_fleet_replicas_per_host": 1,
    "vllm_fleet_docker_pull": "never",
    # light mode without the argv check (names are the point; vLLM's own parser checks the argv in
    # test_seed_gpu, test_fleet_multinode and the bad revision of test_rolling_update): no
    # import of the real vLLM, ~10 CPU-s and ~400 MB less per server
    "vllm_fleet_env": {"VLLM_STANDIN_SERVE": "light", "VLLM_STANDIN_CHECK": "0"},
    "vllm_fleet_health_request": "none",
    "vllm_fleet_health_timeout": 120,
}
STATE = "/var/lib/vllm-fleet/state"
# group -> inventory host, deployment, its own vars; all on the machine of test host names-m
MINI = ("names_mini", "names-mini-h", "names-mini",
        {"vllm_fleet_gpus": [0, 1], "vllm_fleet_replicas_per_host": 2, "vllm_fleet_port": 8000})
MINI_R2 = ("names_mini_r2", "names-mini-r2-h", "names-mini-r2", {"vllm_fleet_gpus": [2], "vllm_fleet_port": 8002})
# the container name -> port of each deployment
CONTAINERS = {"names-mini": {"vllm-fleet-names-mini-r0": 8000, "vllm-fleet-names-mini-r1": 8001},
              "names-mini-r2": {"vllm-fleet-names-mini-r2": 8002}}


@pytest.fixture(scope="module")
def machine(make_fleet):
    made = make_fleet("names", GROUPS, COMMON)
    base = made.hosts["names-m"]
    doc = {"all": {"children": {
        group: {"hosts": {host: {"ansible_host": base["ip"], "vllm_fleet_testbed_container": base["container"],
                                 "vllm_fleet_deployment": dep, **more}}}
        for group, host, dep, more in (MINI, MINI_R2)}}}
    extra = Path(made.inventory[-1]).with_name("names.yml")
    extra.write_text(json.dumps(doc, indent=2) + "\n")
    made.inventory.append(str(extra))
    return made   # make_fleet removes the hosts and their sibling containers


def _exists(machine, path: str) -> bool:
    return host_exec(machine.container("names-m"), ["test", "-e", path]).returncode == 0


def _records(machine, dep: str) -> list:
    found = host_exec(machine.container("names-m"), ["sh", "-c", f"ls {STATE}/{dep}/ 2>/dev/null"])
    return sorted(n for n in found.stdout.split() if n.startswith("rev-"))


def test_the_third_replica_of_one_is_refused_beside_the_other(machine):
    """The boundary itself: names-mini with 3 replicas would run vllm-fleet-names-mini-r2."""
    three = Path(machine.inventory[-1]).with_name("names-three.yml")   # names-mini's host only (a later source wins)
    three.write_text(json.dumps({"all": {"hosts": {MINI[1]: {"vllm_fleet_replicas_per_host": 3,
                                                             "vllm_fleet_gpus": [0, 1, 3]}}}}) + "\n")
    run = playbook("deploy.yml", [*machine.inventory, str(three)], "-l", f"{MINI[0]}:{MINI_R2[0]}")
    assert run.rc != 0
    assert ("names-mini-r2-h: vllm_fleet_deployment: deployments 'names-mini' (host names-mini-h) and "
            "'names-mini-r2' (host names-mini-r2-h)" in run.out and "vllm-fleet-names-mini-r2 " in run.out), \
        run.out[-3000:]
    assert "Traceback" not in run.out
    for names in CONTAINERS.values():
        assert all(docker_inspect(name) is None for name in names)   # refused before any change


def test_both_deployments_serve_and_are_recorded(machine):
    run = playbook("deploy.yml", machine.inventory, "-l", f"{MINI[0]}:{MINI_R2[0]}")
    assert run.rc == 0, run
    for dep, names in CONTAINERS.items():
        for name, port in names.items():
            c = docker_inspect(name)
            assert c is not None and c["State"]["Running"], (name, run.out[-2000:])
            status, body = host_http(machine.container("names-m"), "GET", f"http://127.0.0.1:{port}/v1/models")
            assert status == 200, (name, body)
        assert _records(machine, dep) and not _exists(machine, f"{STATE}/{dep}.plan"), dep
    assert docker_inspect("vllm-fleet-names-mini") is None   # replicas only: no unnumbered container


def test_tearing_one_down_leaves_the_other_intact(machine):
    kept = {name: docker_inspect(name)["Id"] for name in CONTAINERS["names-mini-r2"]}
    records = _records(machine, "names-mini-r2")
    down = playbook("teardown.yml", machine.inventory, "-l", MINI[0])
    assert down.rc == 0, down
    for name in CONTAINERS["names-mini"]:
        assert docker_inspect(name) is None and docker_inspect(name + "-prev") is None, name
    assert not _exists(machine, f"{STATE}/names-mini.plan") and not _exists(machine, f"{STATE}/names-mini")
    # names-mini-r2: the same containers, still serving, its records as they were
    for name, port in CONTAINERS["names-mini-r2"].items():
        c = docker_inspect(name)
        assert c is not None and c["Id"] == kept[name] and c["State"]["Running"], name
        status, body = host_http(machine.container("names-m"), "GET", f"http://127.0.0.1:{port}/v1/models")
        assert status == 200, body
    assert _records(machine, "names-mini-r2") == records and records
