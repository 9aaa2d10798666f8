"""vllm_fleet_accelerator_ready (the cuda / rocm roles' one task) and its rules (vllm_fleet.readiness).

The module runs the way Ansible runs it, with the FAKE nvidia-smi (tests/fakes/bin) first on PATH;
the docker engine's answer is given to the rules directly (a unit run has no engine). The roles'
Molecule scenarios run every refusal and pass case through the role on a real host container.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from module_runner import module_argv

from vllm_fleet import readiness

ROOT = Path(__file__).resolve().parents[4]
MODULE = ROOT / "plugins" / "modules" / "vllm_fleet_accelerator_ready.py"
FAKES = ROOT / "tests" / "fakes" / "bin"
pytest.importorskip("ansible")

MODE = {"persistence_mode": "Enabled", "mig_mode": "Disabled", "compute_mode": "Default",
        "fabric": {"state": "N/A", "status": "N/A"}}
PCIE = {"brand": "nvidia", "count": 2, "driver_version": "570.133.20", "topology": {"links": [["X", "PIX"], ["PIX", "X"]]},
        "modes": [dict(MODE, index=0), dict(MODE, index=1)]}
NVSWITCH = dict(PCIE, count=8, topology={"links": [["X"] + ["NV18"] * 7] * 8})


def plan(runtime="uv", accelerator="cuda", gpus=None, **engine):
    block = "container" if runtime == "docker" else "unit"
    return {"deployment": "d1", "accelerator_setup": {"name": accelerator},
            "processes": [dict({"name": "d1-e0", "kind": "vllm", "runtime": runtime, block: {"env": {}},
                                "gpus": gpus}, **engine),
                          {"name": "d1-router", "kind": "router", "runtime": "docker"}]}


def run(tmp_path, env=None, **args):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict({"host": "h1"}, **args)}))
    proc = subprocess.run(module_argv(MODULE, path), capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{FAKES}:{os.environ['PATH']}", **(env or {})})
    return json.loads(proc.stdout)


def test_a_ready_cuda_host_passes_in_one_read(tmp_path):
    out = run(tmp_path, {"FAKE_GPU_PROFILE": "h200x8"}, accelerator="cuda", plan=plan(gpus=[0, 1]), gpu=PCIE)
    assert not out.get("failed"), out
    assert out["problems"] == [] and out["probe"]["driver"]["rc"] == 0
    assert "docker" not in out["probe"]          # uv engines: no container runtime asked
    assert "fabricmanager" not in out["probe"]   # a PCIe box: no fabric manager asked


def test_a_dead_driver_and_an_older_plan_are_refused_naming_the_host(tmp_path):
    out = run(tmp_path, {"FAKE_GPU_PROFILE": "none"}, accelerator="cuda", plan=plan(), gpu=PCIE)
    assert out["failed"] and out["msg"].startswith("h1: nvidia-smi failed:")
    assert "the NVIDIA driver is not loaded or not installed" in out["msg"]
    older = plan()
    del older["accelerator_setup"]
    out = run(tmp_path, {"FAKE_GPU_PROFILE": "h200x8"}, accelerator="cuda", plan=older)
    assert out["failed"] and out["msg"].startswith("h1: the plan of d1 carries no CUDA settings")
    assert out["probe"] == {}   # nothing read for a plan that cannot be deployed


def test_every_problem_is_listed_at_once_and_persistence_only_warns(tmp_path):
    gpu = dict(PCIE, modes=[dict(MODE, index=0, mig_mode="Enabled", persistence_mode="Disabled"),
                            dict(MODE, index=1, compute_mode="Exclusive_Process")])
    out = run(tmp_path, {"FAKE_GPU_PROFILE": "h200x8"}, accelerator="cuda", plan=plan(), gpu=gpu)
    assert out["failed"]
    assert [p.split(" (")[0].split(",")[0] for p in out["problems"]] == [
        "GPU 0 is in MIG mode", "GPU 1 is in compute mode Exclusive_Process"]
    assert [w.split(":")[0] for w in out["advice"]] == ["persistence mode is Disabled on GPU(s) 0"]
    assert "persistence mode is Disabled on GPU(s) 0" in json.dumps(out["warnings"])   # printed too
    out = run(tmp_path, {"FAKE_GPU_PROFILE": "h200x8"}, accelerator="cuda", plan=plan(gpus=[1]), gpu=gpu,
              allow_mig=True)
    assert out["problems"] == ["GPU 1 is in compute mode Exclusive_Process, vLLM needs Default (several processes "
                               "open each GPU): nvidia-smi -i 1 -c DEFAULT."]


def test_an_nvswitch_system_asks_systemd_for_the_fabric_manager(tmp_path):
    out = run(tmp_path, {"FAKE_GPU_PROFILE": "h200x8"}, accelerator="cuda", plan=plan(), gpu=NVSWITCH)
    # this machine runs no nvidia-fabricmanager (systemctl says inactive, or there is no systemd)
    assert out["failed"] and out["probe"]["fabricmanager"] != "active"
    assert "NVSwitch system (8 GPUs, NV18 links) but nvidia-fabricmanager is" in out["msg"]
    out = run(tmp_path, {"FAKE_GPU_PROFILE": "h200x8"}, accelerator="cuda", plan=plan(), gpu=NVSWITCH,
              check_fabricmanager=False)
    assert not out.get("failed") and "fabricmanager" not in out["probe"]


def test_docker_engines_need_a_runtime_a_cdi_spec_or_the_hook():
    p = plan(runtime="docker")
    none = {"driver": {"rc": 0}, "docker": {"runtimes": ["runc"], "answer": '{"runc":{}}'}, "cdi": [], "hook": None}
    problems, _ = readiness.cuda_findings(none, p, PCIE, False)
    assert len(problems) == 1 and "docker cannot hand NVIDIA GPUs to containers" in problems[0]
    assert "nvidia-ctk runtime configure" in problems[0]
    for enough in ({"runtimes": ["nvidia", "runc"]}, {"cdi": ["/etc/cdi/nvidia.yaml"]},
                   {"hook": "/usr/bin/nvidia-container-runtime-hook"}):
        probe = dict(none, docker=dict(none["docker"], **enough)) if "runtimes" in enough else dict(none, **enough)
        assert readiness.cuda_findings(probe, p, PCIE, False) == ([], [])


def test_the_used_gpus_are_the_engines_sets_or_all_of_them():
    gpu = dict(PCIE, modes=[dict(MODE, index=0), dict(MODE, index=1, mig_mode="Enabled")])
    assert readiness.cuda_findings({"driver": {"rc": 0}}, plan(gpus=[0]), gpu, False) == ([], [])
    problems, _ = readiness.cuda_findings({"driver": {"rc": 0}}, plan(gpus=None), gpu, False)
    assert problems and problems[0].startswith("GPU 1 is in MIG mode")


def test_rocm_rules():
    p = plan(runtime="uv", accelerator="rocm", devices=["/dev/dri/renderD130"], env={"VLLM_ROCM_USE_AITER": "1"})
    probe = readiness.probe_rocm(p, True, exists=lambda path: path in ("/dev/kfd", "/dev/dri"),
                                 groups=lambda: {"video": [], "render": []})
    assert probe["nodes"] == {"/dev/kfd": True, "/dev/dri": True, "/dev/dri/renderD130": False}
    problems, _ = readiness.rocm_findings(probe, p, {"gfx_target": "gfx1100"}, "vllm-fleet", ["video"])
    assert [x.split(":")[0] for x in problems] == [
        "the amdgpu kernel module is not loaded (no /sys/module/amdgpu)",
        "/dev/dri/renderD130 is missing (a render node the plan hands out)",
        "the uv engines' user vllm-fleet needs group render (/dev/kfd and /dev/dri/renderD* belong to render, "
        "/dev/dri/card* to video)",
        "d1-e0 sets VLLM_ROCM_USE_AITER=1, but this host's GPUs are gfx1100"]
    assert "vllm_fleet_uv_user_groups (video) does not add it" in problems[2]
    ok = {"nodes": {"/dev/kfd": True}, "amdgpu": True, "groups": {"video": [], "render": ["vllm-fleet"]}}
    assert readiness.rocm_findings(ok, p, {"gfx_target": "gfx942"}, "vllm-fleet", ["video"]) == ([], [])
    assert readiness.rocm_findings({"groups": {}}, p, {}, "root", [])[0] == []


def test_the_settings_check_names_the_accelerator():
    assert readiness.settings_problem(plan(accelerator="cpu"), "cpu") is None
    p = plan(runtime="docker")
    del p["processes"][0]["container"]
    assert "carries no CUDA settings" in readiness.settings_problem(p, "cuda")
    assert "carries no CPU settings" in readiness.settings_problem(plan(accelerator="cuda"), "cpu")
