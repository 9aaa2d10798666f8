"""The planner's driver check (cudacompat.py) through the real plan step: the fake nvidia-smi's
facts (driver 570.133.20, CUDA 12.8 by default; case_driver / case_cuda set another) against the
vLLM build a host would run. A uv host pinned to vLLM 0.32.0 (a CUDA 13.0 build) is refused
before any change on an R570 driver, naming host, variable, the driver found and the one needed;
on an R580 driver it plans."""

from __future__ import annotations

from tests.unit.plugins.action.test_vllm_fleet_plan_contract import ERNIE, _assert_no_crash, _host_block, _inventory, _plans
from tests.unit.plugins.action.test_vllm_fleet_plan_names import _play

UV = {"vllm_fleet_recipe": ERNIE, "case_gpu": True, "vllm_fleet_runtime": "uv", "vllm_fleet_vllm_version": "0.32.0",
      "vllm_fleet_replicas_per_host": 1}


def test_an_old_driver_is_refused_before_any_change(tmp_path):
    run = _play(tmp_path / "old", _inventory([_host_block("drv-old", dict(UV, vllm_fleet_deployment="drv-old"))], {}))
    assert run.rc != 0
    said = " ".join(run.out.split())
    assert ("drv-old: vllm_fleet_vllm_version: driver 570.133.20 supports CUDA 12.8; vLLM 0.32.0 is built for "
            "CUDA 13.0, which needs driver >= 580.65.06") in said, run.out[-3000:]
    _assert_no_crash(run)


def test_a_new_enough_driver_plans(tmp_path):
    host = dict(UV, vllm_fleet_deployment="drv-new", case_driver="580.95.05", case_cuda="13.0")
    run = _play(tmp_path / "new", _inventory([_host_block("drv-new", host)], {}))
    assert run.rc == 0, run.out[-3000:]
    assert _plans(run)["drv-new"]["vllm_version"] == "0.32.0"
