"""module_utils/vllm_fleet_gpu_health.py: parsers of nvidia-smi -q -x, kernel-log XIDs, amd-smi ECC
and XGMI JSON, and the per-GPU verdict; on public samples (tests/fixtures/gpu_health) and on the
FAKE tools' output (tests/fakes/bin) with each sickness knob."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import vllm_fleet_gpu_health as gh
import vllm_fleet_smi as smi

ROOT = Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests" / "fixtures" / "gpu_health"
FAKES = ROOT / "tests" / "fakes" / "bin"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def fake(tool, profile, argv, **env):
    full = dict(os.environ, FAKE_GPU_PROFILE=profile, FAKE_GPU_PROFILE_FILE="/nonexistent")
    full.update(env)
    for key in ("FAKE_GPU_SICK", "FAKE_GPU_XID", "FAKE_GPU_COUNT", "FAKE_GPU_TOPOLOGY"):
        if key not in env:
            full.pop(key, None)
    return subprocess.run([sys.executable, str(FAKES / tool)] + argv, capture_output=True, text=True,
                          env=full, check=True).stdout


def states(result):
    return {entry["index"]: entry["state"] for entry in result}


# ------------------------------------------------------------------------------ public samples


def test_a100_535_all_zero_is_healthy_and_mig_remapped_rows_na():
    (gpu,) = gh.parse_nvidia_query_xml(fixture("nvidia-smi-q-x.telegraf-a100-sxm4-535.xml"))
    assert gpu["bus_id"] == "00000000:01:00.0" and gpu["name"] == "NVIDIA A100-SXM4-80GB"
    assert gpu["ecc_mode"] == "Enabled" and gpu["mig_mode"] == "Enabled" and gpu["persistence_mode"] == "Disabled"
    assert gpu["ecc"]["volatile"]["uncorrectable"] == 0 and gpu["ecc"]["aggregate"]["correctable"] == 0
    assert gpu["remapped_rows"] == {"correctable": None, "uncorrectable": None, "pending": None, "failure": None}
    assert gpu["clocks_event_reasons"] == []
    assert gh.verdict(nvidia=[gpu]) == [{"index": 0, "state": "healthy", "evidence": []}]


def test_570_sample_split_sram_counters_na():
    (gpu,) = gh.parse_nvidia_query_xml(fixture("nvidia-smi-q-x.telegraf-rtx3060-570.xml"))
    assert gpu["ecc_mode"] is None and gpu["ecc"]["volatile"]["uncorrectable"] is None
    assert gpu["remapped_rows"]["pending"] is None and gpu["remapped_rows"]["correctable"] is None
    assert gpu["clocks_event_reasons"] == ["gpu_idle"]
    assert states(gh.verdict(nvidia=[gpu])) == {0: "healthy"}


def test_418_sample_old_single_double_bit_and_throttle_reasons():
    (gpu,) = gh.parse_nvidia_query_xml(fixture("nvidia-smi-q-x.telegraf-quadro-p400-418.xml"))
    assert gpu["ecc"]["volatile"]["uncorrectable"] is None and gpu["retired_pages"]["pending"] is None
    assert gpu["clocks_event_reasons"] == ["gpu_idle"]
    assert states(gh.verdict(nvidia=[gpu])) == {0: "healthy"}


def test_old_layout_with_errors_counts_the_totals():
    xml = ("<nvidia_smi_log><gpu id='0000:03:00.0'><ecc_errors><volatile><single_bit><device_memory>4"
           "</device_memory><total>4</total></single_bit><double_bit><device_memory>1</device_memory>"
           "<register_file>0</register_file><total>1</total></double_bit></volatile></ecc_errors>"
           "<retired_pages><pending_retirement>Yes</pending_retirement></retired_pages>"
           "<clocks_throttle_reasons><clocks_throttle_reason_hw_slowdown>Active</clocks_throttle_reason_hw_slowdown>"
           "</clocks_throttle_reasons></gpu></nvidia_smi_log>")
    (entry,) = gh.verdict(nvidia=gh.parse_nvidia_query_xml(xml))
    assert entry["state"] == "failed"
    assert entry["evidence"] == ["uncorrectable ECC errors: 1 volatile (device memory)",
                                 "page retirement pending: the GPU needs a reset",
                                 "correctable ECC errors: 4 volatile (device memory)",
                                 "clocks slowed down: hw_slowdown active"]


def test_dmesg_sample_xid_119():
    events = gh.parse_xid_lines(fixture("dmesg-xid-119.gpud.log"), {"00000000:9B:00.0": 4})
    assert [e["xid"] for e in events] == [119] * 5 and {e["gpu"] for e in events} == {4}
    assert events[0]["line"].startswith("[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119")
    assert gh.verdict(xids=events) == [{"index": 4, "state": "failed",
                                        "evidence": ["XID 119 in the kernel log: GSP RPC timeout"]}]


def test_amd_ecc_sample_all_zero_is_healthy():
    (gpu,) = gh.parse_amd_smi_ecc_json(fixture("amd-smi-metric-ecc.amdsmi-changelog.json"))
    assert (gpu["index"], gpu["correctable"], gpu["uncorrectable"], gpu["deferred"]) == (0, 0, 0, 0)
    assert set(gpu["blocks"]) == {"UMC", "SDMA", "GFX", "MMHUB", "PCIE_BIF", "HDP", "XGMI_WAFL"}
    assert states(gh.verdict(amd_ecc=[gpu])) == {0: "healthy"}


def test_amd_xgmi_sample_links_down():
    links = gh.parse_amd_smi_xgmi(fixture("amd-smi-xgmi-link-status.amdsmi-changelog.json"))
    assert links[0] == {"index": 0, "bdf": "0000:08:00.0", "up": 5, "down": 2, "disabled": 1}
    assert gh.verdict(xgmi=links)[1] == {"index": 1, "state": "failed", "evidence": ["XGMI links down: 2"]}


# ------------------------------------------------------------------------------ odd input


@pytest.mark.parametrize("text", ["", None, "NVIDIA-SMI has failed because it couldn't communicate",
                                  "<nvidia_smi_log><gpu/></nvidia_smi_log>",
                                  "<nvidia_smi_log><gpu id='x'><ecc_errors>N/A</ecc_errors><remapped_rows>"
                                  "<remapped_row_pending>Not Supported</remapped_row_pending></remapped_rows>"
                                  "<ecc_mode><current_ecc>[N/A]</current_ecc></ecc_mode></gpu></nvidia_smi_log>"])
def test_nvidia_odd_input_does_not_crash(text):
    for gpu in gh.parse_nvidia_query_xml(text):
        assert gpu["ecc_mode"] is None and gpu["remapped_rows"]["pending"] is None
        assert gpu["clocks_event_reasons"] is None
    assert all(e["state"] == "healthy" for e in gh.verdict(nvidia=gh.parse_nvidia_query_xml(text)))


@pytest.mark.parametrize("text", ["", None, "not json", "{}", "[1, 2]", '{"gpu_data": "N/A"}',
                                  '[{"gpu": 0, "ecc": "N/A", "ecc_blocks": "N/A"}]'])
def test_amd_odd_input_does_not_crash(text):
    for gpu in gh.parse_amd_smi_ecc_json(text):
        assert gpu["uncorrectable"] is None
    assert gh.parse_amd_smi_xgmi(text) == []


def test_amd_ecc_blocks_only_and_gpu_data_layout():
    doc = ('WARNING: something\n{"gpu_data": [{"gpu": 3, "ecc_blocks": {"UMC": {"correctable_count": 2, '
           '"uncorrectable_count": "N/A", "deferred_count": 1}, "GFX": {"correctable_count": 1}}}]}')
    (gpu,) = gh.parse_amd_smi_ecc_json(doc)
    assert (gpu["index"], gpu["correctable"], gpu["uncorrectable"], gpu["deferred"]) == (3, 3, None, 1)
    (entry,) = gh.verdict(amd_ecc=[gpu])
    assert entry["state"] == "degraded"
    assert entry["evidence"] == ["correctable ECC errors: 3 (GFX, UMC)", "deferred ECC errors: 1 (UMC)"]


def test_xid_unknown_bus_has_gpu_none_and_no_verdict():
    log = ("[  12.5] NVRM: Xid (PCI:0000:c6:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
           "[  13.0] NVRM: Xid (0000:03:00): 14, Channel 00000001\n"
           "[  14.0] NVRM: Xid (PCI:0008:01:00): 48, pid=1, name=x, An uncorrectable double bit error\n")
    events = gh.parse_xid_lines(log, ["00000000:18:00.0", "00000008:01:00.0"])
    assert [(e["gpu"], e["xid"]) for e in events] == [(None, 79), (None, 14), (1, 48)]
    assert gh.verdict(xids=events, count=2) == [
        {"index": 0, "state": "healthy", "evidence": []},
        {"index": 1, "state": "failed", "evidence": ["XID 48 in the kernel log: double bit ECC error"]}]


def test_xid_table_ignore_degrade_and_recovery_action():
    bus = {"00000000:18:00.0": 0}
    line = "NVRM: Xid (PCI:0000:18:00): %s"
    assert gh.verdict(xids=gh.parse_xid_lines(line % "63, Row Remapper: New row marked", bus))[0]["state"] == "healthy"
    assert gh.verdict(xids=gh.parse_xid_lines(line % "94, Contained: SM", bus))[0]["state"] == "degraded"
    reset = line % "154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
    assert gh.verdict(xids=gh.parse_xid_lines(reset, bus))[0]["state"] == "failed"
    cleared = line % "154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"
    assert gh.verdict(xids=gh.parse_xid_lines(cleared, bus))[0]["state"] == "healthy"


# ------------------------------------------------------------------------------ the fakes


def test_fake_nvidia_xml_healthy_matches_the_csv_identity():
    gpus = gh.parse_nvidia_query_xml(fake("nvidia-smi", "h200x8", ["-q", "-x"]))
    ids = fake("nvidia-smi", "h200x8", ["--query-gpu=pci.bus_id,uuid", "--format=csv,noheader"]).splitlines()
    assert [f"{g['bus_id']}, {g['uuid']}" for g in gpus] == ids
    assert {g["name"] for g in gpus} == {"NVIDIA H200"}
    assert all(g["persistence_mode"] == "Enabled" and g["ecc_mode"] == "Enabled" for g in gpus)
    assert {g["fabric"]["state"] for g in gpus} == {"Completed"}
    assert set(states(gh.verdict(nvidia=gpus)).values()) == {"healthy"}


SICK = [
    ("ecc_uncorrectable", "failed", ["uncorrectable ECC errors: 2 volatile (dram), 2 aggregate (dram)"]),
    ("ecc_correctable", "degraded", ["correctable ECC errors: 37 volatile (dram)"]),
    ("remap_failure", "failed", ["row remapping failed (no spare rows left)"]),
    ("remap_pending", "failed", ["row remapping pending: the GPU needs a reset"]),
    ("retired_pending", "failed", ["page retirement pending: the GPU needs a reset"]),
    ("thermal", "degraded", ["clocks slowed down: hw_slowdown active", "clocks slowed down: hw_thermal_slowdown active",
                             "clocks slowed down: sw_thermal_slowdown active"]),
]


@pytest.mark.parametrize("kind,state,evidence", SICK)
def test_fake_nvidia_sick_gpu(kind, state, evidence):
    gpus = gh.parse_nvidia_query_xml(fake("nvidia-smi", "b200x8", ["-q", "-x"], FAKE_GPU_SICK=f"5:{kind}"))
    result = gh.verdict(nvidia=gpus)
    assert result[5] == {"index": 5, "state": state, "evidence": evidence}
    assert all(e["state"] == "healthy" and not e["evidence"] for e in result if e["index"] != 5)


def test_fake_nvidia_sick_file_knob_and_several(tmp_path):
    profile = tmp_path / "profile"
    profile.write_text("gb200x4 sick=3:ecc_uncorrectable,1:thermal,1:remap_pending\n")
    out = fake("nvidia-smi", "", ["-q", "-x"], FAKE_GPU_PROFILE_FILE=str(profile))
    assert states(gh.verdict(nvidia=gh.parse_nvidia_query_xml(out))) == {0: "healthy", 1: "failed", 2: "healthy",
                                                                        3: "failed"}
    table = fake("nvidia-smi", "", [], FAKE_GPU_PROFILE_FILE=str(profile))
    assert [line.split("|")[3].strip() for line in table.splitlines() if "NVIDIA GB200" in line] == ["0", "0", "0", "2"]


def test_fake_nvidia_xml_selects_with_i_and_refuses_bad_sick_items():
    (gpu,) = gh.parse_nvidia_query_xml(fake("nvidia-smi", "h100x8", ["-q", "-x", "-i", "3"]))
    assert gpu["bus_id"] == "00000000:5D:00.0"
    bad = subprocess.run([sys.executable, str(FAKES / "nvidia-smi"), "-q", "-x"], capture_output=True, text=True,
                         env=dict(os.environ, FAKE_GPU_PROFILE="h100x8", FAKE_GPU_SICK="3:flaky"))
    assert bad.returncode == 2 and "bad sick item" in bad.stderr


@pytest.mark.parametrize("profile", ["h200x8", "gb200x4"])
def test_fake_dmesg_xid_lands_on_the_gpu_of_that_bus(profile):
    gpus = gh.parse_nvidia_query_xml(fake("nvidia-smi", profile, ["-q", "-x"]))
    log = fake("dmesg", profile, ["-T"], FAKE_GPU_XID="3:79,1:94,3:63")
    events = gh.parse_xid_lines(log, gh.bus_index(gpus))
    assert [(e["gpu"], e["xid"]) for e in events] == [(3, 79), (1, 94), (3, 63)]
    assert "GPU has fallen off the bus." in events[0]["line"]
    result = gh.verdict(nvidia=gpus, xids=events)
    assert result[3] == {"index": 3, "state": "failed",
                         "evidence": ["XID 79 in the kernel log: GPU has fallen off the bus"]}
    assert result[1]["state"] == "degraded"
    assert all(e["state"] == "healthy" for e in result if e["index"] not in (1, 3))


def test_fake_dmesg_without_xids_and_on_amd():
    assert gh.parse_xid_lines(fake("dmesg", "h100x8", []), []) == []
    assert "amdgpu" in fake("dmesg", "mi300x8", ["--level=err,warn"], FAKE_GPU_XID="1:79")


@pytest.mark.parametrize("profile", ["mi300x8", "mi355x8"])
def test_fake_amd_healthy_in_both_json_layouts(profile):
    ecc = gh.parse_amd_smi_ecc_json(fake("amd-smi", profile, ["metric", "--ecc", "--ecc-blocks", "--json"]))
    links = gh.parse_amd_smi_xgmi(fake("amd-smi", profile, ["xgmi", "-l", "--json"]))
    assert [g["index"] for g in ecc] == list(range(8)) and [g["up"] for g in links] == [7] * 8
    assert set(states(gh.verdict(amd_ecc=ecc, xgmi=links)).values()) == {"healthy"}


@pytest.mark.parametrize("kind,state,evidence", [
    ("ras_uncorrectable", "failed", ["uncorrectable ECC errors: 1 (UMC)"]),
    ("ras_correctable", "degraded", ["correctable ECC errors: 5 (UMC)"]),
    ("xgmi_down", "failed", ["XGMI links down: 1"]),
])
@pytest.mark.parametrize("profile", ["mi325x8", "mi355x8"])
def test_fake_amd_sick_gpu(profile, kind, state, evidence):
    env = {"FAKE_GPU_SICK": f"1:{kind}"}
    ecc = gh.parse_amd_smi_ecc_json(fake("amd-smi", profile, ["metric", "-e", "-k", "--json"], **env))
    links = gh.parse_amd_smi_xgmi(fake("amd-smi", profile, ["xgmi", "--link-status", "--json"], **env))
    result = gh.verdict(amd_ecc=ecc, xgmi=links)
    assert result[1] == {"index": 1, "state": state, "evidence": evidence}
    assert all(e["state"] == "healthy" for e in result if e["index"] != 1)


def test_fake_amd_metric_without_flags_keeps_its_sections():
    (gpu,) = smi.amd_items(smi.load_json(fake("amd-smi", "mi300x8", ["metric", "-g", "0", "--json"])))
    assert {"usage", "power", "temperature", "mem_usage", "ecc", "ecc_blocks"} <= set(gpu)
    (gpu,) = smi.amd_items(smi.load_json(fake("amd-smi", "mi300x8", ["metric", "-m", "-g", "0", "--json"])))
    assert set(gpu) == {"gpu", "mem_usage"}
