"""A node lost in the middle of a multi-node instance's update (its host container killed):
that instance ends back on its previous revision on the nodes that are left (never half on
the new one), the run stops before the next instance and fails naming the lost node, and the
other instance is never touched.

Two instances of multi_node_tp over 2 nodes (FAKE H200 hosts, the stand-in GPU image in light
mode: the REAL vLLM argv check, then a small stand-in server), rollout batch 1. The worker host
of instance 0 is killed (SIGKILL) the moment its head's running container was kept as
<name>-prev, i.e. after drain and before the new revision starts anywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from helpers import ROOT, docker_inspect, playbook

pytestmark = pytest.mark.e2e

GROUPS = {"loss_cluster": {"hosts": {"loss-a": "h200x8", "loss-b": "h200x8", "loss-c": "h200x8", "loss-d": "h200x8"},
                           "vars": {"vllm_fleet_deployment": "loss", "vllm_fleet_strategy": "multi_node_tp",
                                    "vllm_fleet_nodes": 2, "vllm_fleet_rollout_batch": 1}}}
COMMON = {
    "vllm_fleet_recipe": "deepseek-ai/DeepSeek-V3",
    "vllm_fleet_runtime": "docker",
    "vllm_fleet_docker_pull": "never",
    # light mode without the argv check (a lost node is the point; vLLM's own parser checks the argv in
    # test_seed_gpu, test_fleet_multinode and the bad revision of test_rolling_update): no
    # import of the real vLLM, ~10 CPU-s and ~400 MB less per server
    "vllm_fleet_env": {"VLLM_STANDIN_SERVE": "light", "VLLM_STANDIN_CHECK": "0"},
    "vllm_fleet_health_request": "none",
    "vllm_fleet_health_timeout": 120,
}
HEAD0, WORKER0 = "vllm-fleet-loss-i0-head0", "vllm-fleet-loss-i0-worker1"
OTHERS = ("vllm-fleet-loss-i1-head0", "vllm-fleet-loss-i1-worker1")
GOOD = ["--max-model-len", "4096"]


@pytest.fixture(scope="module")
def loss(make_fleet):
    made = make_fleet("loss", GROUPS, COMMON)
    run = playbook("deploy.yml", made.inventory, "-l", "loss_cluster")
    assert run.rc == 0, run
    return made


def test_a_node_lost_mid_update_leaves_its_instance_on_the_previous_revision(loss):
    before = {name: docker_inspect(name) for name in (HEAD0, WORKER0) + OTHERS}
    assert all(c and c["State"]["Running"] for c in before.values()), before
    argv = ["ansible-playbook", *sum((["-i", i] for i in loss.inventory), []),
            str(ROOT / "playbooks" / "deploy.yml"), "-l", "loss_cluster",
            "-e", json.dumps({"vllm_fleet_extra_args": GOOD})]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed_at = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if docker_inspect(HEAD0 + "-prev") is not None:      # drained, kept: about to switch
            subprocess.run(["docker", "kill", loss.container("loss-b")], check=True, capture_output=True)
            killed_at = time.monotonic()
            break
        time.sleep(0.2)
    out, _ = proc.communicate(timeout=600)
    print(out)
    assert killed_at is not None, "the head's running revision was never kept (no switch seen)\n" + out[-3000:]
    assert proc.returncode != 0, out[-3000:]
    assert "loss-b" in out and ("rolled back" in out or "stopped" in out), out[-3000:]
    # the head is back on exactly what ran before (never half on the new revision)
    head = docker_inspect(HEAD0)
    assert head is not None and head["State"]["Running"], head and head["State"]
    assert head["Config"]["Cmd"] == before[HEAD0]["Config"]["Cmd"] and head["Image"] == before[HEAD0]["Image"]
    assert docker_inspect(HEAD0 + "-prev") is None
    # the other instance was never touched: the rollout stopped after the failed batch
    for name in OTHERS:
        c = docker_inspect(name)
        assert c["Id"] == before[name]["Id"] and c["State"]["StartedAt"] == before[name]["State"]["StartedAt"], name
    assert "not reached" in out, out[-3000:]
