"""cudacompat.py: the vLLM build's CUDA against the host's NVIDIA driver, and the planner's use of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_fleet import cudacompat, loader
from vllm_fleet.plan import HostInput, PlanError, plan

ROOT = Path(__file__).resolve().parents[4]
SEED = "baidu/ERNIE-4.5-VL-28B-A3B-PT"


@pytest.mark.parametrize("version,image,cuda", [
    ("0.6.6", None, "12.1"),
    ("0.8.5", None, "12.1"),             # 12.4 era not sourced: the lower value
    ("0.9.0", None, "12.8"),
    ("0.11.0", "vllm/vllm-openai:v0.11.0", "12.8"),
    ("0.11.1", None, "12.9"),
    ("0.19.1", None, "12.9"),
    ("0.20.0", "vllm/vllm-openai:v0.20.0", "13.0"),
    ("0.32.0", None, "13.0"),             # newer than the table: its last row
    ("0.20.0-cu129", "vllm/vllm-openai:v0.20.0-cu129", "12.9"),   # the tag's suffix wins
    ("0.19.1", "vllm/vllm-openai:v0.19.1-cu130", "13.0"),
    ("0.25.1+cu129", None, "12.9"),
    (None, "vllm/vllm-openai:latest", None),
    (None, None, None),
    ("0.1.7", None, None),                # older than the table
    (None, "registry.local:5000/vllm/vllm-openai:latest", None),
])
def test_build_cuda(version, image, cuda):
    assert cudacompat.build_cuda(version, image) == cuda


@pytest.mark.parametrize("cuda,driver", [
    ("12.0", "525.60.13"), ("12.8", "570.26"), ("12.9", "575.51.03"), ("13.0", "580.65.06"),
    ("12.7", "570.26"),   # between rows: the next row
    ("13.1", None),
])
def test_min_driver(cuda, driver):
    assert cudacompat.min_driver(cuda) == driver


def test_tables_are_ordered():
    firsts = [row[0] for row in cudacompat.VLLM_CUDA]
    assert firsts == sorted(firsts)
    drivers = [tuple(map(int, d.split("."))) for _, d in cudacompat.CUDA_DRIVER]
    assert drivers == sorted(drivers)
    for _, cuda in cudacompat.VLLM_CUDA:
        assert cudacompat.min_driver(cuda), cuda


def test_check_refuses_a_cuda_13_build_on_an_r570_driver():
    why = cudacompat.check("0.20.0", "vllm/vllm-openai:v0.20.0", "570.133.20", "12.8")
    assert why == ("driver 570.133.20 supports CUDA 12.8; vLLM 0.20.0 (vllm/vllm-openai:v0.20.0) is built for "
                   "CUDA 13.0, which needs driver >= 580.65.06: upgrade the driver or pin an older "
                   "vllm_fleet_vllm_version")


def test_check_refuses_below_the_majors_floor():
    why = cudacompat.check("0.11.0", None, "520.61.05", "11.8")
    assert why.startswith("driver 520.61.05 supports CUDA 11.8; vLLM 0.11.0 is built for CUDA 12.8, "
                          "which needs driver >= 570.26 (at least 525.60.13, CUDA 12 minor version compatibility)")


@pytest.mark.parametrize("version,image,driver,cuda", [
    ("0.11.0", "vllm/vllm-openai:v0.11.0", "570.133.20", "12.8"),   # the fakes' default: exactly its CUDA
    ("0.19.1", None, "570.133.20", "12.8"),     # 12.9 build on R570: minor version compatibility
    ("0.11.0", None, "535.104.05", "12.2"),     # 12.8 build on R535: same
    ("0.20.0", None, "580.65.06", "13.0"),      # boundary: the floor itself
    ("0.20.0-cu129", "vllm/vllm-openai:v0.20.0-cu129", "570.133.20", "12.8"),
    (None, "vllm/vllm-openai:latest", "470.82.01", "11.4"),   # unknown build: not judged
    ("0.20.0", None, None, None),                # driver not read: not judged
])
def test_check_passes(version, image, driver, cuda):
    assert cudacompat.check(version, image, driver, cuda) is None


def test_check_boundary_just_below_the_floor():
    assert cudacompat.check("0.20.0", None, "580.65.05", "13.0") is not None


@pytest.fixture(scope="module")
def cat():
    return loader.load([ROOT / "recipes"])


def host(name, driver="570.133.20", cuda="12.8", **settings):
    base = {"recipe": SEED, "hardware": "h200"}
    base.update(settings)
    return HostInput(name=name, settings=base, address=None, iface="eth0",
                     gpu={"hardware": "h200", "brand": "nvidia", "count": 8, "driver_version": driver,
                          "cuda_version": cuda})


def test_plan_refuses_a_host_whose_driver_cannot_run_the_build(cat):
    with pytest.raises(PlanError) as exc:
        plan(cat, [host("a", image_tag="v0.20.0"), host("b", driver="580.95.05", cuda="13.0", image_tag="v0.20.0")])
    text = str(exc.value)
    assert "a: vllm_fleet_vllm_version: driver 570.133.20 supports CUDA 12.8; vLLM 0.20.0" in text
    assert "which needs driver >= 580.65.06" in text
    assert "b: vllm_fleet_vllm_version" not in text


def test_plan_passes_the_fakes_default_driver(cat):
    pinned = plan(cat, [host("a", image_tag="v0.11.0")])
    assert pinned["a"]["processes"][0]["image"] == "vllm/vllm-openai:v0.11.0"
    latest = plan(cat, [host("b", driver="470.82.01", cuda="11.4")])   # the latest tag: not judged
    assert latest["b"]["processes"][0]["image"] == "vllm/vllm-openai:latest"


def test_plan_does_not_judge_status_plans(cat):
    old = host("a", driver="470.82.01", cuda="11.4", image_tag="v0.11.0")
    old.fit_layout = False
    assert plan(cat, [old])["a"]["processes"][0]["image"] == "vllm/vllm-openai:v0.11.0"


def test_plan_judges_a_uv_pin(cat):
    with pytest.raises(PlanError, match=r"a: vllm_fleet_vllm_version: driver 570.133.20 supports CUDA 12.8; "
                                        r"vLLM 0.22.0 is built for CUDA 13.0"):
        plan(cat, [host("a", runtime="uv", vllm_version="0.22.0")])


@pytest.mark.parametrize("version,image,rocm,refused", [
    ("0.14.0", None, "6.2.4", True),
    ("0.14.0", None, "6.3.0", False),      # boundary
    ("0.18.0", "vllm/vllm-openai-rocm:v0.18.0", "6.4.0", False),   # the fake mi300x8
    ("0.13.0", None, "6.0.0", False),      # below the 6.3 row: the 5.7 floor
    ("0.13.0", None, "5.6.1", True),
    (None, "vllm/vllm-openai-rocm:latest", "5.0", False),   # unknown release
    ("0.18.0", None, None, False),          # ROCm not read
])
def test_rocm_check(version, image, rocm, refused):
    why = cudacompat.rocm_check(version, image, rocm)
    assert (why is not None) == refused, why
    if refused:
        assert why.startswith(f"the host has ROCm {rocm}; ") and "upgrade ROCm or pin an older" in why


def test_plan_refuses_a_rocm_host_older_than_the_release(cat):
    h = HostInput(name="m", settings={"recipe": SEED, "hardware": "mi300x", "image_tag": "v0.18.0"}, address=None,
                  iface="eth0", gpu={"hardware": "mi300x", "brand": "amd", "count": 8, "rocm_version": "6.2.1"})
    with pytest.raises(PlanError, match=r"m: vllm_fleet_vllm_version: the host has ROCm 6.2.1; vLLM 0.18.0 "
                                        r"\(vllm/vllm-openai-rocm:v0.18.0\) supports ROCm >= 6.3"):
        plan(cat, [h])
    h.gpu["rocm_version"] = "6.4.0"
    assert plan(cat, [h])["m"]["accelerator"] == "rocm"
