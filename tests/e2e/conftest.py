"""Fixtures for the end-to-end suite: test fleets from tests/testbed/fleet.py.

A fleet is a set of SSH-reachable systemd containers (FAKE GPU tools only); the tests add
their own inventory of groups and group vars on top of the fleet's connection inventory.
Prerequisites (idempotent): bash tests/testbed/setup.sh
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict, List

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "testbed"))

import fleet as testbed  # noqa: E402


class Fleet:
    def __init__(self, info: dict, groups_file: Path):
        self.info = info
        self.inventory: List[str] = [info["inventory"], str(groups_file)]
        self.hosts: Dict[str, dict] = {h["name"]: h for h in info["hosts"]}

    def container(self, host: str) -> str:
        return self.hosts[host]["container"]


def write_groups(path: Path, groups: dict, common: dict) -> None:
    """Groups inventory (JSON is valid YAML): the deployments under test."""
    all_vars = {
        "vllm_fleet_recipe_sources": [str(ROOT / "recipes")],
        # test fleets have no Hub: nothing is staged unless a test says where from (its group's
        # vllm_fleet_model_source wins over this); the stand-ins never read weights
        "vllm_fleet_model_source": "none",
        # vLLM containers are siblings on this machine's engine: share the host's netns
        "vllm_fleet_docker_network_mode": "container:{{ vllm_fleet_testbed_container }}",
        **common,
    }
    doc = {"all": {"vars": all_vars, "children": {
        name: {"hosts": {h: {} for h in g["hosts"]}, "vars": g.get("vars", {})}
        for name, g in groups.items()}}}
    path.write_text(json.dumps(doc, indent=2) + "\n")


@pytest.fixture(scope="module")
def make_fleet(request):
    made: List[str] = []

    def make(name: str, groups: dict, common: dict) -> Fleet:
        specs = [f"{host}:{profile}" for g in groups.values() for host, profile in g["hosts"].items()]
        info = testbed.up(f"e2e-{name}", specs, docker_socket=True, replace=True)
        made.append(info["name"])
        groups_file = Path(info["state_dir"]) / "groups.yml"
        write_groups(groups_file, groups, common)
        return Fleet(info, groups_file)

    yield make
    for name in made:
        testbed.down(name, remove_siblings=True)


# Longest modules first (seconds per module, setup to teardown, summed from `--durations=0` of
# a clean-clone .ci/run here, 2 workers on 2 cores, 2026-12-07: 78 tests in 3,145 s; the suite is
# CPU-bound, so a module takes about twice its time alone (test_gpu_health.py: twice its 87 s alone
# after its trim; test_seed_gpu.py: an estimate after its H200 server went light); update them when a module grows): with
# pytest-xdist's --dist loadfile (noxfile.py) each worker takes the next module when it is done,
# so the longest ones must not be left for the end. A module not listed runs last
# (tests/unit/e2e/test_e2e_order.py asks for every module).
MODULE_COST = {
    "test_rolling_update.py": 1439, "test_rolling_real.py": 1203, "test_cpu_serving.py": 597,
    "test_demo.py": 539, "test_fleet_multinode.py": 483, "test_seed_gpu.py": 250, "test_gpu_health.py": 180,
    "test_stage.py": 373, "test_pd_real.py": 219, "test_multinode_cpu.py": 177, "test_node_loss.py": 114,
    "test_inventory_contract.py": 113, "test_gpu_sets.py": 106, "test_name_collisions.py": 69,
    "test_check_mode.py": 39, "test_image_digest.py": 31, "test_same_build_check.py": 3,
}


def pytest_collection_modifyitems(items):
    """Order the collected tests by module cost (stable: a module's own order is kept)."""
    items.sort(key=lambda item: -MODULE_COST.get(item.path.name, 0))
