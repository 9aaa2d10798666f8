"""GPU health end to end (vllm_fleet_gpu_health): fake H200 x8 hosts whose GPU 1 reports
uncorrectable ECC errors (the nvidia-smi fake's `-q -x`), an XID 79 in the kernel log (the
dmesg fake) or a remapped-rows failure, and a fake MI300X x8 host whose GPU 1 reports a RAS
uncorrectable error (the amd-smi fake's `metric --ecc`): the default refuses before any
container exists; `exclude` deploys two of the seed's replicas per host on healthy GPUs only (0 and 2, past the
failed GPU 1), says so, and does not offer the failed GPU as idle;
status shows the failed GPUs. The stand-in image serves in light mode (the GPU is the fake)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from helpers import docker_inspect, playbook

pytestmark = pytest.mark.e2e

GROUPS = {
    "nv_sick": {"hosts": {"ecc-h": "h200x8:sick=1:ecc_uncorrectable", "xid-h": "h200x8:xid=1:79",
                          "remap-h": "h200x8:sick=1:remap_failure"},
                "vars": {"vllm_fleet_deployment": "gh-nv"}},
    "amd_sick": {"hosts": {"ras-h": "mi300x8:sick=1:ras_uncorrectable"},
                 "vars": {"vllm_fleet_deployment": "gh-amd"}},
}
COMMON = {
    "vllm_fleet_recipe": "baidu/ERNIE-4.5-VL-28B-A3B-PT",
    "vllm_fleet_runtime": "docker",
    "vllm_fleet_docker_pull": "never",
    # light mode without the argv check (the GPUs' health is the point; vLLM's own parser checks the argv in
    # test_seed_gpu, test_fleet_multinode and the bad revision of test_rolling_update): no
    # import of the real vLLM, ~10 CPU-s and ~400 MB less per server
    "vllm_fleet_env": {"VLLM_STANDIN_SERVE": "light", "VLLM_STANDIN_CHECK": "0"},
    "vllm_fleet_health_request": "none",
    "vllm_fleet_health_timeout": 120,
}
# what each host's sick GPU shows (the fakes' evidence, as the verdict words it)
EVIDENCE = {"ecc-h": (1, "uncorrectable ECC errors"), "xid-h": (1, "XID 79 in the kernel log"),
            "remap-h": (1, "row remapping failed"), "ras-h": (1, "uncorrectable")}


def containers(prefix: str):
    out = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}", "--filter", f"name=^{prefix}"],
                         capture_output=True, text=True, check=True).stdout
    return sorted(out.split())


@pytest.fixture(scope="module")
def fleet(make_fleet):
    made = make_fleet("gpuhealth", GROUPS, COMMON)
    layer = Path(made.inventory[-1]).with_name("exclude.yml")
    # two replicas per host (8 servers, not 28: the placement around the failed GPU is the point)
    layer.write_text(json.dumps({"all": {"vars": {"vllm_fleet_gpu_health": "exclude",
                                                  "vllm_fleet_replicas_per_host": 2}}}) + "\n")
    made.exclude = made.inventory + [str(layer)]
    return made   # make_fleet removes the hosts and their sibling containers


def test_a_failed_gpu_stops_the_run_before_any_change(fleet):
    run = playbook("deploy.yml", fleet.inventory)
    assert run.rc != 0
    said = " ".join(run.out.split())
    for host, (gpu, evidence) in EVIDENCE.items():
        line = f"{host}: vllm_fleet_gpu_health: GPU {gpu} failed its health check ("
        assert line in said, (host, run.out[-4000:])
        assert evidence in said.split(line, 1)[1].split(")", 1)[0], (host, evidence)
    assert "Traceback" not in run.out
    assert containers("vllm-fleet-gh-") == []


def test_exclude_places_the_replicas_on_the_healthy_gpus(fleet):
    run = playbook("deploy.yml", fleet.exclude)
    assert run.rc == 0, run
    said = " ".join(run.out.split())
    # gh-nv's instances i0, i1, i2 are ecc-h, xid-h, remap-h: 2 replicas each, on GPUs 0 and 2 (1 failed)
    for index, host in enumerate(("ecc-h", "xid-h", "remap-h")):
        nv = [docker_inspect(f"vllm-fleet-gh-nv-i{index}-r{i}") for i in range(2)]
        assert all(c is not None and c["State"]["Running"] for c in nv), host
        assert [c["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] for c in nv] == [["0"], ["2"]], host
        assert docker_inspect(f"vllm-fleet-gh-nv-i{index}-r2") is None
        gpu, evidence = EVIDENCE[host]
        line = f"GPU health: {host}: GPU {gpu} failed ({evidence}"
        assert line in said and "left out of the plan (vllm_fleet_gpu_health: exclude)" in said.split(line, 1)[1][:200], \
            (host, run.out[-3000:])
    amd = [docker_inspect(f"vllm-fleet-gh-amd-r{i}") for i in range(2)]
    assert all(c is not None and c["State"]["Running"] for c in amd)
    # the MI300X replicas: one render node each, none of them GPU 1's (renderD129)
    assert [sorted(d["PathOnHost"] for d in c["HostConfig"]["Devices"]) for c in amd] == \
        [["/dev/dri/renderD%d" % (128 + g), "/dev/kfd"] for g in (0, 2)]
    assert "GPU health: ras-h: GPU 1 failed (uncorrectable ECC errors" in said
    # a failed GPU is not offered to another deployment: the idle ones are 3-7, never 1
    idle = [line.split(": GPU ", 1)[1].split(" of ", 1)[0] for line in said.split("idle GPUs: ")[1:]]
    assert idle and set(idle) == {"3-7"}, (idle, run.out[-3000:])
    again = playbook("deploy.yml", fleet.exclude)
    assert again.rc == 0 and all(again.changed(h) == 0 for h in EVIDENCE), again


def test_status_shows_the_failed_gpus(fleet):
    run = playbook("status.yml", fleet.exclude)
    assert run.rc == 0, run
    said = " ".join(run.out.split())
    for host, (gpu, evidence) in EVIDENCE.items():
        line = f"GPU health: {host}: 7 of 8 GPUs healthy; GPU {gpu} failed ({evidence}"
        assert line in said, (host, run.out[-3000:])
