"""Unit tests for the host-side facts module ``plugins/modules/vllm_fleet_gpu_facts.py`` and its
parsers and mapping in ``plugins/module_utils`` (``vllm_fleet_gpu_nvidia``, ``vllm_fleet_gpu_amd``,
``vllm_fleet_gpu_host``, ``vllm_fleet_gpu_taxonomy``).

* parsers: canned real-format output of ``nvidia-smi`` (query CSV, table header, ``-q``,
  ``topo -m``), ``amd-smi`` (static JSON of ROCm 6 and 7, version, topology, ``list -e``),
  ``rocm-smi``, ``/proc/cpuinfo``, the KFD topology and the NUMA cpulists (inline, or under
  ``tests/fixtures/gpu``), and the FAKE tools' output of each;
* the mapping table: every taxonomy id the module can detect, and the ordering / look-alike
  traps (GH200 vs H200, GB200 vs B200, RTX 6000 Ada vs RTX PRO 6000, MI308X vs MI300X, ...);
* the unknown-GPU error text, explicit ``hardware``, ``require_gpu``, the CPU path;
* end to end: the module run as Ansible runs it (``python3 module.py args.json``) with the fake
  GPU tools of ``tests/fakes/bin`` on PATH (skipped without ansible-core).

The pure tests need neither ansible-core nor a GPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vllm_fleet_gpu_amd import (AMD_SMI_LIST, AMD_SMI_LIST_ENUM, AMD_SMI_NUMA, AMD_SMI_STATIC, AMD_SMI_TOPOLOGY,
                                AMD_SMI_VERSION, KFD_NODE_PROPERTIES, ROCM_SMI_QUERY, ROCM_VERSION_FILE, map_amd,
                                parse_amd_smi_list, parse_amd_smi_numa, parse_amd_smi_static, parse_amd_smi_topology,
                                parse_amd_smi_version, parse_kfd_render_minor, parse_rocm_smi)
from vllm_fleet_gpu_host import map_cpu, parse_cpu_model, parse_cpulist, probe_cpus
from vllm_fleet_gpu_nvidia import (NVIDIA_QUERY, NVIDIA_RULES, NVIDIA_TOPO, map_nvidia, parse_cuda_version,
                                   parse_nvidia_driver_version, parse_nvidia_query, parse_nvidia_topo)
from vllm_fleet_gpu_taxonomy import HARDWARE_IDS, HardwareError, detect_hardware, resolve

ROOT = Path(__file__).resolve().parents[4]
MODULE_PATH = ROOT / "plugins" / "modules" / "vllm_fleet_gpu_facts.py"
FIXTURES = ROOT / "tests" / "fixtures" / "gpu"
FAKES = ROOT / "tests" / "fakes" / "bin"
TAXONOMY = ROOT / "recipes" / "taxonomy.yaml"


# the module imports its parsers as Ansible ships them (ansible.module_utils.vllm_fleet_gpu_nvidia,
# ...): in-process tests/unit/conftest.py maps those names to the repository's files (the tests
# import the parsers by their file names); a module run as a script (the e2e cases below) gets the
# same mapping from RUN_MODULE (in import order)
MODULE_UTILS = ROOT / "plugins" / "module_utils"
RUN_MODULE = ("import runpy, sys; sys.path.insert(0, sys.argv[1])\n"
              "for name in ('vllm_fleet_smi', 'vllm_fleet_gpu_health', 'vllm_fleet_gpu_values', 'vllm_fleet_gpu_nvidia',\n"
              "             'vllm_fleet_gpu_amd', 'vllm_fleet_gpu_host', 'vllm_fleet_gpu_taxonomy'):\n"
              "    sys.modules['ansible.module_utils.' + name] = __import__(name)\n"
              "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def _load_module():
    spec = importlib.util.spec_from_file_location("vllm_fleet_gpu_facts", MODULE_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gf = _load_module()


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# ------------------------------------------------------------------------------ taxonomy


def test_the_id_list_is_the_taxonomy_profile_list():
    profiles = yaml.safe_load(TAXONOMY.read_text(encoding="utf-8"))["hardware_profiles"]
    assert list(HARDWARE_IDS) == list(profiles)


# ------------------------------------------------------------------------------ nvidia-smi

# `nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id
#  --format=csv,noheader,nounits` on an HGX H100 (driver 550)
H100_QUERY = "".join(
    f"{i}, NVIDIA H100 80GB HBM3, 81559, 550.90.07, 00000000:{bus}:00.0\n"
    for i, bus in enumerate(["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]))


def test_nvidia_query_csv():
    gpus = parse_nvidia_query(H100_QUERY)
    assert len(gpus) == 8
    assert gpus[0] == {"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559,
                       "driver_version": "550.90.07", "bus_id": "00000000:18:00.0"}
    assert [g["index"] for g in gpus] == list(range(8))


def test_nvidia_query_with_header_units_and_unified_memory():
    """DGX Spark: header line and units kept, memory.total is [N/A] (unified memory)."""
    (gpu,) = parse_nvidia_query(fixture("nvidia-query-gb10.csv"))
    assert gpu["name"] == "NVIDIA GB10" and gpu["memory_mib"] is None
    assert gpu["driver_version"] == "580.95.05" and gpu["bus_id"] == "0000000F:01:00.0"
    (gpu,) = parse_nvidia_query("0, NVIDIA H200, 143771 MiB, 570.133.20, 00000000:18:00.0\n")
    assert gpu["memory_mib"] == 143771


@pytest.mark.parametrize("text", [
    "", "No devices were found\n",
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
    "that the latest NVIDIA driver is installed and running.\n",
    'Field "pci.bus_id" is not a valid field to query.\n\n',
])
def test_nvidia_query_without_gpus(text):
    assert parse_nvidia_query(text) == []


def test_cuda_version_from_the_table_header_and_q():
    assert parse_cuda_version(fixture("nvidia-smi-table-580-rtx-pro-6000x2.txt")) == "13.0"
    assert parse_cuda_version(fixture("nvidia-smi-q-535-h100.txt")) == "12.2"
    assert parse_nvidia_driver_version(fixture("nvidia-smi-q-535-h100.txt")) == "535.161.08"
    assert parse_cuda_version(fixture("nvidia-smi-q-vgpu-no-cuda.txt")) is None
    old = "| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |"
    assert parse_cuda_version(old) == "12.2"
    assert parse_cuda_version("") is None


def _run_fake(tool, profile, argv, **extra_env):
    env = dict(os.environ, FAKE_GPU_PROFILE=profile, **extra_env)
    return subprocess.run([sys.executable, str(FAKES / tool)] + argv, capture_output=True, text=True,
                          env=env, check=True).stdout


def test_the_fake_nvidia_smi_output_parses():
    gpus = parse_nvidia_query(_run_fake("nvidia-smi", "b200x8", NVIDIA_QUERY))
    assert [g["name"] for g in gpus] == ["NVIDIA B200"] * 8
    assert gpus[0]["memory_mib"] == 183359


# ------------------------------------------------------------------------------ amd-smi / rocm-smi


def test_amd_smi_static_rocm6_list():
    gpus = parse_amd_smi_static(fixture("amd-smi-static-mi300x-rocm6.json"))
    assert len(gpus) == 2
    assert gpus[1] == {"index": 1, "name": "AMD Instinct MI300X", "device_id": "0x74a1",
                       "gfx_target": "gfx942", "memory_mib": 196592, "driver_version": "6.10.5",
                       "bus_id": "0000:22:00.0"}


def test_amd_smi_static_rocm7_gpu_data():
    (gpu,) = parse_amd_smi_static(fixture("amd-smi-static-mi355x-rocm7.json"))
    assert (gpu["name"], gpu["device_id"], gpu["gfx_target"], gpu["memory_mib"]) == \
        ("AMD Instinct MI355X", "0x75a3", "gfx950", 294896)
    assert gpu["driver_version"] == "6.14.14"


def test_amd_smi_static_old_vf_string_sizes():
    (gpu,) = parse_amd_smi_static(fixture("amd-smi-static-mi300x-vf-rocm61.json"))
    assert gpu["device_id"] == "0x74b5" and gpu["gfx_target"] is None
    assert gpu["memory_mib"] == 196592 and gpu["driver_version"] == "6.7.0"


def test_amd_smi_static_tolerates_errors_warnings_and_int_ids():
    text = ("WARNING: User is missing the following required groups: render\n"
            + json.dumps([{"gpu": 0, "asic": {"market_name": "N/A", "device_id": 29857,
                                              "target_graphics_version": "gfx942"},
                           "vram": "AMDSMI_STATUS_NOT_SUPPORTED", "driver": "N/A"}]))
    (gpu,) = parse_amd_smi_static(text)
    assert gpu["name"] is None and gpu["device_id"] == "0x74a1" and gpu["memory_mib"] is None
    assert parse_amd_smi_static("") == [] and parse_amd_smi_static("not json") == []
    assert parse_amd_smi_static('{"gpu_data": []}') == []


def test_amd_smi_version_shapes():
    fake_shape = json.dumps([{"tool": "AMDSMI Tool", "version": "25.2.0+fb3b3f4",
                              "amdsmi_library_version": "25.2.0", "rocm_version": "6.4.0",
                              "amdgpu_version": "6.12.12", "amd_hsmp_driver_version": "N/A"}])
    assert parse_amd_smi_version(fake_shape) == {"rocm_version": "6.4.0", "driver_version": "6.12.12"}
    as_object = '{"tool": "AMDSMI Tool", "version": "26.2.1", "rocm_version": "7.2.0"}'
    assert parse_amd_smi_version(as_object) == {"rocm_version": "7.2.0", "driver_version": None}
    human = ("AMDSMI Tool: 24.6.3+9578815 | AMDSMI Library version: 24.6.3.0 | ROCm version: 6.2.1 | "
             "amdgpu version: 6.8.5 | amd_hsmp version: N/A\n")
    assert parse_amd_smi_version(human) == {"rocm_version": "6.2.1", "driver_version": "6.8.5"}
    older = json.dumps([{"tool": "AMDSMI Tool", "version": "24.5.1", "amdsmi_library_version": "24.5.1",
                         "rocm_version": "N/A"}])
    assert parse_amd_smi_version(older)["rocm_version"] is None


def test_the_fake_amd_smi_rocm7_output_parses():
    """The fake's mi355x8 profile answers in the ROCm 7 {"gpu_data": [...]} layout."""
    gpus = parse_amd_smi_static(_run_fake("amd-smi", "mi355x8", AMD_SMI_STATIC[0]))
    assert len(gpus) == 8 and map_amd(gpus[0]["name"], gpus[0]["device_id"], gpus[0]["gfx_target"]) == "mi355x"
    assert (gpus[0]["gfx_target"], gpus[0]["memory_mib"], gpus[0]["driver_version"]) == ("gfx950", 294896, "6.16.6")


def test_the_fake_rocm_smi_output_parses(tmp_path):
    """The fake switches to rocm-smi behaviour on its own name (a symlink)."""
    (tmp_path / "rocm-smi").symlink_to(FAKES / "amd-smi")
    env = dict(os.environ, FAKE_GPU_PROFILE="mi325x8")
    out = subprocess.run([sys.executable, str(tmp_path / "rocm-smi")] + ROCM_SMI_QUERY[0],
                         capture_output=True, text=True, env=env, check=True).stdout
    gpus, driver = parse_rocm_smi(out)
    assert len(gpus) == 8 and driver == "6.12.12" and gpus[7]["memory_mib"] == 262128
    assert map_amd(gpus[0]["name"], gpus[0]["device_id"], gpus[0]["gfx_target"]) == "mi325x"


def test_rocm_smi_json():
    gpus, driver = parse_rocm_smi(fixture("rocm-smi-mi325x.json"))
    assert driver == "6.10.5"
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0]["name"] == "AMD Instinct MI325X" and gpus[0]["device_id"] == "0x74a5"
    assert gpus[0]["gfx_target"] == "gfx942" and gpus[0]["memory_mib"] == 262128


def test_rocm_smi_json_older_keys_and_noise():
    """Lower-case 'Card series'/'Card model', 'N/A' series, a warning line before the JSON,
    card10 sorting after card2."""
    doc = {"card%d" % i: {"Card series": "N/A", "Card model": "0x74a1", "GFX Version": "gfx942",
                          "VRAM Total Memory (B)": str(196592 * 1048576)} for i in (0, 2, 10)}
    gpus, driver = parse_rocm_smi("WARNING: AMD GPU device(s) is/are in a low-power state\n" + json.dumps(doc))
    assert driver is None and [g["index"] for g in gpus] == [0, 2, 10]
    assert gpus[0]["name"] is None and gpus[0]["device_id"] == "0x74a1"
    assert parse_rocm_smi("WARNING: No AMD GPUs specified\n") == ([], None)


# ------------------------------------------------------------------------------ /proc/cpuinfo

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 173
model name\t: Intel(R) Xeon(R) 6980P
stepping\t: 1

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) 6980P
"""


def test_cpuinfo_model_name():
    assert parse_cpu_model(CPUINFO) == "Intel(R) Xeon(R) 6980P"
    arm = "processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n"
    assert parse_cpu_model(arm) is None and parse_cpu_model(None) is None


# ------------------------------------------------------------------------------ mapping table

# (marketing name as nvidia-smi prints it, GPU count, MiB per GPU, expected id)
NVIDIA_TABLE = [
    ("NVIDIA H100 80GB HBM3", 8, 81559, "h100"),
    ("NVIDIA H100 PCIe", 2, 81559, "h100"),
    ("NVIDIA H100 NVL", 8, 95830, "h100"),
    ("NVIDIA H200", 8, 143771, "h200"),
    ("NVIDIA H200 NVL", 4, 143771, "h200"),
    ("NVIDIA B200", 8, 183359, "b200"),
    ("NVIDIA GB200", 4, 189471, "gb200"),
    ("NVIDIA B300 SXM6 AC", 8, 275040, "b300"),
    ("NVIDIA GB300", 4, 284208, "gb300"),
    ("NVIDIA GB300", 1, 258048, "dgx_station_gb300"),
    ("NVIDIA GB10", 1, None, "dgx_spark_gb10"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 1, 97887, "rtx_pro_6000"),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 2, 97887, "rtx_pro_6000_2x"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 8, 97887, "rtx_pro_6000_8x"),
    ("NVIDIA RTX PRO 5000 72GB Blackwell", 1, 73440, "rtx_pro_5000"),
    ("NVIDIA RTX PRO 5000 72GB Blackwell", 4, 73440, "rtx_pro_5000_4x"),
    ("NVIDIA GeForce RTX 5090", 1, 32607, "rtx_5090"),
    ("NVIDIA GeForce RTX 5090", 2, 32607, "rtx_5090_2x"),
    ("NVIDIA GeForce RTX 4090", 2, 24564, "rtx_4090_2x"),
    # look-alikes and ordering traps
    ("NVIDIA GH200 480GB", 1, 97871, None),           # Grace Hopper: not an H200
    ("NVIDIA H20", 8, 97871, None),                   # prefix of H200
    ("NVIDIA H800", 8, 81559, None),
    ("NVIDIA A100-SXM4-80GB", 8, 81920, None),
    ("NVIDIA B100", 8, 183359, None),
    ("NVIDIA RTX 6000 Ada Generation", 1, 49140, None),  # not an RTX PRO 6000
    ("Quadro RTX 6000", 2, 24576, None),
    ("NVIDIA RTX 5000 Ada Generation", 1, 32760, None),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 4, 97887, None),  # no x4 profile
    ("NVIDIA RTX PRO 5000 Blackwell", 1, 48935, None),   # the 48 GB RTX PRO 5000
    ("NVIDIA GeForce RTX 5090 Laptop GPU", 1, 24463, None),
    ("NVIDIA GeForce RTX 4090", 1, 24564, None),          # only the x2 profile exists
    ("NVIDIA GeForce RTX 4090 Laptop GPU", 2, 16376, None),
]


@pytest.mark.parametrize("name,count,mib,expected", NVIDIA_TABLE)
def test_nvidia_mapping(name, count, mib, expected):
    assert map_nvidia(name, count, mib)[0] == expected


def test_nvidia_rules_before_their_look_alikes():
    """Even without word boundaries the specific names come first in the rule list."""
    order = [pattern for pattern, _, _ in NVIDIA_RULES]
    for first, later in [(r"\bGB300\b", r"\bB300\b"), (r"\bGB200\b", r"\bB200\b"),
                         (r"\bH200\b", r"\bH100\b")]:
        assert order.index(first) < order.index(later)


# (market name, device id, gfx target, expected id)
AMD_TABLE = [
    ("AMD Instinct MI300X", "0x74a1", "gfx942", "mi300x"),
    ("AMD Instinct MI300X VF", "0x74b5", None, "mi300x"),
    ("AMD Instinct MI325X", "0x74a5", "gfx942", "mi325x"),
    ("AMD Instinct MI325X VF", "0x74b9", "gfx942", "mi325x"),
    ("AMD Instinct MI355X", "0x75a3", "gfx950", "mi355x"),
    ("AMD Instinct MI355X VF", "0x75B3", "gfx950", "mi355x"),
    (None, "0x74a1", "gfx942", "mi300x"),                # market name N/A: the device id decides
    ("AMD Instinct MI325X", None, "gfx942", "mi325x"),   # no device id: market name fallback
    ("AMD Instinct MI355X", "0x1234", None, "mi355x"),
    # traps
    ("AMD Instinct MI300A", "0x74a0", "gfx942", None),
    ("AMD Instinct MI308X", "0x74a2", "gfx942", None),
    ("AMD Instinct MI350X", "0x75a0", "gfx950", None),
    ("AMD Instinct MI300X", "0x74a1", "gfx950", None),   # contradictory: never guess
    ("AMD Instinct MI355X", None, "gfx942", None),
    ("AMD Instinct MI250X", "0x740c", "gfx90a", None),
    ("AMD Radeon RX 7900 XTX", "0x744c", "gfx1100", None),
]


@pytest.mark.parametrize("name,device,gfx,expected", AMD_TABLE)
def test_amd_mapping(name, device, gfx, expected):
    assert map_amd(name, device, gfx) == expected


CPU_TABLE = [
    ("Intel(R) Xeon(R) 6980P", "xeon6"),
    ("Intel(R) Xeon(R) 6787P", "xeon6"),
    ("Intel(R) Xeon(R) 6780E", "xeon6"),
    ("Intel(R) Xeon(R) 6975P-C", "xeon6"),
    ("Intel Xeon 6 6952P Processor", "xeon6"),
    ("INTEL(R) XEON(R) PLATINUM 8592+", "xeon5"),
    ("Intel(R) Xeon(R) Platinum 8581C CPU @ 2.30GHz", "xeon5"),
    ("INTEL(R) XEON(R) PLATINUM 8568Y+", "xeon5"),
    ("Intel(R) Xeon(R) Gold 6548Y+", "xeon5"),
    ("Intel(R) Xeon(R) Gold 5520+", "xeon5"),
    ("Intel(R) Xeon(R) Silver 4514Y", "xeon5"),
    ("Intel(R) Xeon(R) Bronze 3508U", "xeon5"),
    # other generations and vendors
    ("Intel(R) Xeon(R) Platinum 8480+", None),           # 4th gen (Sapphire Rapids)
    ("Intel(R) Xeon(R) Gold 6448Y", None),
    ("Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz", None),
    ("Intel(R) Xeon(R) Gold 6248R CPU @ 3.00GHz", None),
    ("Intel(R) Xeon(R) CPU E5-2690 v4 @ 2.60GHz", None),
    ("Intel(R) Xeon(R) Processor", None),                # generic cloud vCPU name
    ("AMD EPYC 9654 96-Core Processor", None),
    (None, None),
]


@pytest.mark.parametrize("model,expected", CPU_TABLE)
def test_cpu_mapping(model, expected):
    assert map_cpu(model) == expected


UNDETECTABLE = {"trillium", "ironwood", "arc_pro_b60", "arc_pro_b70", "ascend_950pr"}


def test_every_gpu_and_cpu_id_is_detectable():
    covered = ({row[-1] for row in NVIDIA_TABLE} | {row[-1] for row in AMD_TABLE}
               | {row[-1] for row in CPU_TABLE}) - {None}
    assert covered == set(HARDWARE_IDS) - UNDETECTABLE


# ------------------------------------------------------------------------------ detection errors

ALL_IDS = ", ".join(HARDWARE_IDS)


def nvidia_facts(name, count, mib=81920):
    facts = gf.empty_facts()
    facts.update(brand="nvidia", names=[name] * count, memory_mib=[mib] * count, count=count)
    return facts


def test_unknown_gpu_message():
    with pytest.raises(HardwareError) as err:
        detect_hardware(nvidia_facts("NVIDIA A100-SXM4-80GB", 8))
    assert str(err.value) == ("unknown GPU 'NVIDIA A100-SXM4-80GB' x8 on this host: set "
                              "vllm_fleet_hardware to one of: " + ALL_IDS)
    assert str(err.value).startswith("unknown GPU 'NVIDIA A100-SXM4-80GB' x8 on this host: "
                                     "set vllm_fleet_hardware to one of: h100, h200, b200, gb200")


def test_unknown_count_and_small_variant_say_why():
    with pytest.raises(HardwareError, match=r"^unknown GPU 'NVIDIA GeForce RTX 4090' x1 on this host "
                                               r"\(taxonomy profiles for this GPU: rtx_4090_2x = x2\): "
                                               r"set vllm_fleet_hardware to one of: h100,"):
        detect_hardware(nvidia_facts("NVIDIA GeForce RTX 4090", 1, 24564))
    with pytest.raises(HardwareError, match=r"x4 on this host \(taxonomy profiles for this GPU: "
                                               r"rtx_pro_6000 = x1, rtx_pro_6000_2x = x2, rtx_pro_6000_8x = x8\)"):
        detect_hardware(nvidia_facts("NVIDIA RTX PRO 6000 Blackwell Server Edition", 4, 97887))
    with pytest.raises(HardwareError, match=r"\(48935 MiB per GPU: a smaller variant than "
                                               r"rtx_pro_5000, rtx_pro_5000_4x\)"):
        detect_hardware(nvidia_facts("NVIDIA RTX PRO 5000 Blackwell", 1, 48935))


def test_mixed_gpus_fail_and_one_model_counts_together():
    facts = nvidia_facts("NVIDIA H100 80GB HBM3", 4)
    facts["names"] += ["NVIDIA H200"] * 4
    facts["memory_mib"] += [143771] * 4
    with pytest.raises(HardwareError, match=r"^mixed GPUs on this host \('NVIDIA H100 80GB HBM3' x4, "
                                               r"'NVIDIA H200' x4\): set vllm_fleet_hardware"):
        detect_hardware(facts)
    facts = nvidia_facts("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 1, 97887)
    facts["names"].append("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition")
    facts["memory_mib"].append(97887)
    # two different names, each x1 -> rtx_pro_6000 both: the same id, not "mixed"
    assert detect_hardware(facts) == "rtx_pro_6000"


def test_unknown_amd_gpu():
    facts = gf.empty_facts()
    facts.update(brand="amd", names=["AMD Instinct MI300A"] * 4, count=4, device_id="0x74a0",
                 gfx_target="gfx942")
    with pytest.raises(HardwareError, match=r"^unknown GPU 'AMD Instinct MI300A' x4 on this host: "):
        detect_hardware(facts)
    facts.update(names=[""] * 2, count=2)
    with pytest.raises(HardwareError, match=r"^unknown GPU 'unnamed AMD GPU 0x74a0' x2"):
        detect_hardware(facts)


def test_cpu_hosts():
    facts = gf.empty_facts()
    facts.update(brand="cpu", cpu_model="INTEL(R) XEON(R) PLATINUM 8592+")
    assert detect_hardware(facts) == "xeon5"
    facts["cpu_model"] = "AMD EPYC 9654 96-Core Processor"
    assert detect_hardware(facts) is None
    facts, warnings = resolve(facts)
    assert (facts["brand"], facts["hardware"], facts["detected"], warnings) == ("cpu", None, False, [])


# ------------------------------------------------------------------------------ probe + resolve


class Host:
    """Scripted host: tools -> {argv tuple after the tool path: (rc, out, err)}; files -> text;
    dirs -> names in a directory; cpus -> the CPUs the module may run on (default 0-3, no NUMA
    sysfs)."""

    def __init__(self, tools=None, files=None, dirs=None, cpus=(0, 1, 2, 3)):
        self.tools = tools or {}
        self.files = files or {}
        self.dirs = dirs or {}
        self.cpus = cpus
        self.calls = []

    def which(self, tool):
        return "/usr/bin/" + tool if tool in self.tools else None

    def run(self, argv):
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
        self.calls.append(argv)
        tool = os.path.basename(argv[0])
        return self.tools[tool].get(tuple(argv[1:]), (2, "", "unexpected arguments"))

    def read_text(self, path):
        return self.files.get(path)

    def list_dir(self, path):
        return self.dirs.get(path)

    def probe(self):
        return gf.probe(self.run, self.which, self.read_text, self.list_dir, lambda: set(self.cpus))


NO_DRIVER = (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "")
TABLE = fixture("nvidia-smi-table-580-rtx-pro-6000x2.txt")


# `nvidia-smi topo -m` of a workstation with two GPUs under one PCIe host bridge, NVLink-free
TOPO_2_NODE = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
               "GPU0\t X \tNODE\t0-63\t0\t\tN/A\nGPU1\tNODE\t X \t0-63\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n")


def test_probe_nvidia():
    query = ("0, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 97887, 580.82.07, 00000000:01:00.0\n"
             "1, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 97887, 580.82.07, 00000000:C1:00.0\n")
    host = Host({"nvidia-smi": {tuple(NVIDIA_QUERY): (0, query, ""), (): (0, TABLE, ""),
                                ("topo", "-m"): (0, TOPO_2_NODE, "")}},
                {"/proc/cpuinfo": CPUINFO, "/sys/devices/system/node/node0/cpulist": "0-3\n"},
                {"/sys/devices/system/node": ["possible", "node0", "online", "has_cpu"]})
    facts, warnings = resolve(host.probe())
    assert warnings == []
    assert host.calls == [["/usr/bin/nvidia-smi", "--query-gpu=index,name,memory.total,driver_version,pci.bus_id",
                           "--format=csv,noheader,nounits"], ["/usr/bin/nvidia-smi"],
                          ["/usr/bin/nvidia-smi", "topo", "-m"]]
    assert facts == {
        "brand": "nvidia", "hardware": "rtx_pro_6000_2x", "detected": True,
        "detected_hardware": "rtx_pro_6000_2x", "count": 2,
        "names": ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition"] * 2,
        "memory_mib": [97887, 97887], "total_memory_gib": 191.2, "driver_version": "580.82.07",
        "cuda_version": "13.0", "rocm_version": None, "gfx_target": None, "device_id": None,
        "bus_ids": ["00000000:01:00.0", "00000000:C1:00.0"], "cpu_model": "Intel(R) Xeon(R) 6980P",
        "source": "nvidia-smi", "probe_notes": [], "cpus": [0, 1, 2, 3], "numa_nodes": {"0": [0, 1, 2, 3]},
        "topology": {"links": [["X", "NODE"], ["NODE", "X"]], "numa": [0, 0]},
    }


def test_probe_nvidia_cuda_from_q_when_the_table_has_none():
    host = Host({"nvidia-smi": {tuple(NVIDIA_QUERY): (0, H100_QUERY, ""), (): (0, "garbled\n", ""),
                                ("-q",): (0, fixture("nvidia-smi-q-535-h100.txt"), "")}})
    facts = host.probe()
    assert facts["cuda_version"] == "12.2" and facts["driver_version"] == "550.90.07"
    assert facts["cpu_model"] is None and resolve(facts)[0]["hardware"] == "h100"


def test_probe_falls_through_a_dead_nvidia_smi_to_amd_smi():
    version = json.dumps([{"tool": "AMDSMI Tool", "rocm_version": "6.4.0", "amdgpu_version": "6.12.12"}])
    host = Host({
        "nvidia-smi": {tuple(NVIDIA_QUERY): NO_DRIVER},
        "amd-smi": {tuple(AMD_SMI_STATIC[0]): (0, fixture("amd-smi-static-mi300x-rocm6.json"), ""),
                    tuple(AMD_SMI_VERSION): (0, version, "")},
    })
    facts, _ = resolve(host.probe())
    assert (facts["brand"], facts["hardware"], facts["count"], facts["source"]) == ("amd", "mi300x", 2, "amd-smi")
    assert (facts["gfx_target"], facts["device_id"], facts["rocm_version"], facts["driver_version"]) == \
        ("gfx942", "0x74a1", "6.4.0", "6.10.5")
    assert facts["total_memory_gib"] == 384.0 and "_gpus" not in facts
    assert facts["probe_notes"] == ["nvidia-smi (/usr/bin/nvidia-smi): no GPU (rc=9) NVIDIA-SMI has failed "
                                    "because it couldn't communicate with the NVIDIA driver."]


def test_probe_amd_smi_retries_with_fewer_sections():
    host = Host({"amd-smi": {
        tuple(AMD_SMI_STATIC[0]): (2, "", "amd-smi: error: unrecognized arguments: --bus\n"),
        tuple(AMD_SMI_STATIC[1]): (255, "", "AmdSmiLibraryException: Error code:\n"
                                               "\t2 | AMDSMI_STATUS_NOT_SUPPORTED\n"),
        tuple(AMD_SMI_STATIC[2]): (0, fixture("amd-smi-static-mi300x-vf-rocm61.json"), ""),
        tuple(AMD_SMI_VERSION): (0, "AMDSMI Tool: 24.5.1 | AMDSMI Library version: 24.5.1\n", ""),
    }}, {ROCM_VERSION_FILE: "6.1.2-119\n"})
    facts, _ = resolve(host.probe())
    assert facts["hardware"] == "mi300x" and facts["device_id"] == "0x74b5"
    # 3 static variants and version; then topology, list -e and list (all unanswered: no keys)
    assert [c[1:] for c in host.calls[4:]] == [AMD_SMI_TOPOLOGY, AMD_SMI_LIST_ENUM, AMD_SMI_LIST]
    assert "topology" not in facts and "render_nodes" not in facts
    assert facts["rocm_version"] == "6.1.2"  # amd-smi did not say: /opt/rocm/.info/version


def test_probe_amd_smi_without_gpu_does_not_retry():
    host = Host({"amd-smi": {tuple(AMD_SMI_STATIC[0]): (
        1, "", "AMD-SMI: Unable to detect any GPU devices, check amdgpu version and module status\n")}},
        {"/proc/cpuinfo": CPUINFO})
    facts, _ = resolve(host.probe())
    assert len(host.calls) == 1
    assert (facts["brand"], facts["hardware"], facts["detected"], facts["source"]) == \
        ("cpu", "xeon6", True, "/proc/cpuinfo")
    assert facts["probe_notes"] == ["nvidia-smi: not found",
                                    "amd-smi (/usr/bin/amd-smi): no GPU (rc=1) AMD-SMI: Unable to detect "
                                    "any GPU devices, check amdgpu version and module status",
                                    "rocm-smi: not found"]


def test_probe_rocm_smi():
    host = Host({"rocm-smi": {tuple(ROCM_SMI_QUERY[0]): (0, fixture("rocm-smi-mi325x.json"), "")}},
                {ROCM_VERSION_FILE: "6.3.1-48\n"})
    facts, _ = resolve(host.probe())
    assert (facts["hardware"], facts["count"], facts["source"], facts["driver_version"], facts["rocm_version"]) == \
        ("mi325x", 2, "rocm-smi", "6.10.5", "6.3.1")


def test_probe_rocm_smi_retries_but_not_without_gpus():
    host = Host({"rocm-smi": {
        tuple(ROCM_SMI_QUERY[0]): (2, "rocm-smi: error: unrecognized arguments: --showid\n", ""),
        tuple(ROCM_SMI_QUERY[1]): (0, fixture("rocm-smi-mi325x.json"), ""),
    }})
    assert resolve(host.probe())[0]["hardware"] == "mi325x" and len(host.calls) == 2
    banner = "=" * 40 + " ROCm System Management Interface " + "=" * 40
    host = Host({"rocm-smi": {tuple(ROCM_SMI_QUERY[0]): (
        1, "\n\n%s\nWARNING: No AMD GPUs specified\n%s\n" % (banner, "=" * 40), "")}})
    facts = host.probe()
    assert len(host.calls) == 1 and facts["brand"] == "none"
    assert facts["probe_notes"][-1] == "rocm-smi (/usr/bin/rocm-smi): no GPU (rc=1) WARNING: No AMD GPUs specified"


def test_probe_nothing_at_all():
    facts, warnings = resolve(Host().probe())
    assert (facts["brand"], facts["hardware"], facts["count"], facts["source"]) == ("none", None, 0, None)
    assert facts["total_memory_gib"] is None and warnings == []


def test_require_gpu():
    host = Host({"nvidia-smi": {tuple(NVIDIA_QUERY): NO_DRIVER}}, {"/proc/cpuinfo": CPUINFO})
    with pytest.raises(HardwareError, match=r"^no NVIDIA or AMD GPU found on this host \(require_gpu is set\): "
                                               r"nvidia-smi \(/usr/bin/nvidia-smi\): no GPU \(rc=9\)"):
        resolve(host.probe(), require_gpu=True)
    with pytest.raises(HardwareError):  # an explicit id does not stand in for a GPU
        resolve(host.probe(), hardware="h100", require_gpu=True)
    host = Host({"nvidia-smi": {tuple(NVIDIA_QUERY): (0, H100_QUERY, ""), (): (0, TABLE, "")}})
    assert resolve(host.probe(), require_gpu=True)[0]["hardware"] == "h100"


def test_explicit_hardware_never_guesses_or_fails():
    a100 = "".join(f"{i}, NVIDIA A100-SXM4-80GB, 81920, 550.90.07, 00000000:0{i}:00.0\n" for i in range(8))
    host = Host({"nvidia-smi": {tuple(NVIDIA_QUERY): (0, a100, ""), (): (0, TABLE, "")}})
    with pytest.raises(HardwareError, match="unknown GPU 'NVIDIA A100-SXM4-80GB' x8"):
        resolve(host.probe())
    facts, warnings = resolve(host.probe(), hardware="h100")
    assert (facts["hardware"], facts["detected"], facts["detected_hardware"]) == ("h100", False, None)
    assert warnings == ["using hardware 'h100' as given; the probe could not map this host: "
                        "unknown GPU 'NVIDIA A100-SXM4-80GB' x8 on this host"]


def test_explicit_hardware_that_disagrees_or_is_not_builtin_warns():
    host = Host({"nvidia-smi": {tuple(NVIDIA_QUERY): (0, H100_QUERY, ""), (): (0, TABLE, "")}})
    facts, warnings = resolve(host.probe(), hardware="h200")
    assert (facts["hardware"], facts["detected"], facts["detected_hardware"]) == ("h200", False, "h100")
    assert warnings == ["hardware is set to 'h200' but this host looks like 'h100' (8 x NVIDIA H100 80GB HBM3)"]
    facts, warnings = resolve(host.probe(), hardware="h100")
    assert warnings == [] and facts["hardware"] == "h100" and facts["detected"] is False
    facts, warnings = resolve(Host().probe(), hardware="my_private_box")
    assert facts["hardware"] == "my_private_box" and "not a built-in taxonomy id" in warnings[0]


def test_the_module_never_uses_a_shell():
    source = MODULE_PATH.read_text(encoding="utf-8")
    assert "use_unsafe_shell" not in source and "shell=True" not in source
    assert "supports_check_mode=True" in source


# ------------------------------------------------------------------------------ GPU topology

PAIRS_LINKS = [["X", "PIX", "NODE", "NODE", "NV4", "SYS", "SYS", "SYS"],
               ["PIX", "X", "NODE", "NODE", "SYS", "NV4", "SYS", "SYS"],
               ["NODE", "NODE", "X", "PIX", "SYS", "SYS", "NV4", "SYS"],
               ["NODE", "NODE", "PIX", "X", "SYS", "SYS", "SYS", "NV4"],
               ["NV4", "SYS", "SYS", "SYS", "X", "PIX", "NODE", "NODE"],
               ["SYS", "NV4", "SYS", "SYS", "PIX", "X", "NODE", "NODE"],
               ["SYS", "SYS", "NV4", "SYS", "NODE", "NODE", "X", "PIX"],
               ["SYS", "SYS", "SYS", "NV4", "NODE", "NODE", "PIX", "X"]]
HALVES = [0, 0, 0, 0, 1, 1, 1, 1]


def test_nvidia_topo_pcie_box_with_nvlink_bridges_nics_and_ansi_header():
    """Driver 550 on a 2-socket PCIe box: underlined header, ' X ' cells, two NIC rows and
    columns, the empty cell before GPU NUMA ID, the NIC legend."""
    text = fixture("nvidia-smi-topo-m-550-pcie-nvlink-pairs.txt")
    assert "\x1b[4m" in text and "NIC1\t" in text
    assert parse_nvidia_topo(text) == {"links": PAIRS_LINKS, "numa": HALVES}
    # the same matrix copied without tabs (whitespace between the cells) reads the same
    assert parse_nvidia_topo(text.replace("\t", "  ")) == {"links": PAIRS_LINKS, "numa": HALVES}


def test_nvidia_topo_old_driver_without_numa_column_and_soc():
    """Drivers before 450 printed no NUMA Affinity column and called SYS 'SOC'."""
    old = ("\tGPU0\tGPU1\tGPU2\tCPU Affinity\nGPU0\t X \tPHB\tSOC\t0-11\nGPU1\tPHB\t X \tSOC\t0-11\n"
           "GPU2\tSOC\tSOC\t X \t12-23\n\nLegend:\n\n  X   = Self\n  SOC  = Connection traversing PCIe as well "
           "as the SMP link between CPU sockets(e.g. QPI)\n")
    assert parse_nvidia_topo(old) == {"links": [["X", "PHB", "SYS"], ["PHB", "X", "SYS"], ["SYS", "SYS", "X"]],
                                         "numa": [None, None, None]}
    one = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-23\tN/A\t\tN/A\n"
    assert parse_nvidia_topo(one) == {"links": [["X"]], "numa": [None]}


@pytest.mark.parametrize("profile,env,links,numa", [
    ("h200x8", {}, [["X" if i == j else "NV18" for j in range(8)] for i in range(8)], HALVES),
    ("h200x8", {"FAKE_GPU_TOPOLOGY": "pairs"}, PAIRS_LINKS, HALVES),
    ("gb200x4", {}, [["X" if i == j else "NV18" for j in range(4)] for i in range(4)], [0, 0, 1, 1]),
    ("b200x8", {"FAKE_GPU_TOPOLOGY": "pairs", "FAKE_GPU_COUNT": "4"},
     [["X", "PIX", "NV4", "SYS"], ["PIX", "X", "SYS", "NV4"], ["NV4", "SYS", "X", "PIX"], ["SYS", "NV4", "PIX", "X"]],
     [0, 0, 1, 1]),
])
def test_the_fake_nvidia_smi_topology_parses(profile, env, links, numa):
    assert parse_nvidia_topo(_run_fake("nvidia-smi", profile, NVIDIA_TOPO, **env)) == \
        {"links": links, "numa": numa}


def test_the_fake_reads_the_topology_knob_from_the_profile_file(tmp_path):
    profile = tmp_path / "vllm-fleet-fake-gpu"
    profile.write_text("h200x8 topology=pairs\n")
    out = _run_fake("nvidia-smi", "", NVIDIA_TOPO, FAKE_GPU_PROFILE_FILE=str(profile), FAKE_GPU_TOPOLOGY="")
    assert parse_nvidia_topo(out)["links"] == PAIRS_LINKS
    # the environment wins over the file
    out = _run_fake("nvidia-smi", "", NVIDIA_TOPO, FAKE_GPU_PROFILE_FILE=str(profile),
                    FAKE_GPU_TOPOLOGY="nvswitch")
    assert parse_nvidia_topo(out)["links"][0] == ["X"] + ["NV18"] * 7
    bad = subprocess.run([sys.executable, str(FAKES / "nvidia-smi"), "topo", "-m"], capture_output=True, text=True,
                         env=dict(os.environ, FAKE_GPU_PROFILE="h200x8", FAKE_GPU_TOPOLOGY="ring"))
    assert bad.returncode == 2 and "unknown topology 'ring'" in bad.stderr


@pytest.mark.parametrize("text", [
    "", "No devices were found\n", NO_DRIVER[1],
    "\tGPU0\tGPU1\tCPU Affinity\n",                                          # header only
    "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\n",                      # a row missing
    "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU1\tPIX\t X \t0-7\n",  # not symmetric
    "\tGPU0\tGPU1\tCPU Affinity\nGPU0\tNV4\tNV4\t0-7\nGPU1\tNV4\tNV4\t0-7\n",   # no X on the diagonal
    "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tFAST\t0-7\nGPU1\tFAST\t X \t0-7\n",  # not a link word
    "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \nGPU1\tNV4\t X \t0-7\n",           # a short row
    "\tGPU0\tGPU2\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU2\tNV4\t X \t0-7\n",  # GPUs not numbered 0..n-1
    "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU0\tNV4\t X \t0-7\n",  # a row twice
])
def test_nvidia_topo_that_is_not_a_complete_matrix_gives_none(text):
    assert parse_nvidia_topo(text) is None


def test_amd_smi_topology_rocm62_links():
    """4 x MI210, Infinity Fabric Link bridges between 0-1 and 2-3, PCIe otherwise."""
    topology = parse_amd_smi_topology(fixture("amd-smi-topology-mi210x4-rocm62.json"))
    assert topology == {"links": [["X", "XGMI", "PCIE", "PCIE"], ["XGMI", "X", "PCIE", "PCIE"],
                                  ["PCIE", "PCIE", "X", "XGMI"], ["PCIE", "PCIE", "XGMI", "X"]],
                        "numa": [None] * 4}


def test_amd_smi_topology_rocm61_tables_and_unknown_links():
    """ROCm 6.0/6.1 printed one table per field, keyed gpu_N; N/A becomes UNKNOWN."""
    doc = [{"gpu": 0, "bdf": "0000:0c:00.0", "weight": {"gpu_0": 0, "gpu_1": 15},
            "link_type": {"gpu_0": "SELF", "gpu_1": "XGMI"}},
           {"gpu": 1, "bdf": "0000:22:00.0", "weight": {"gpu_0": 15, "gpu_1": 0},
            "link_type": {"gpu_0": "N/A", "gpu_1": "SELF"}}]
    assert parse_amd_smi_topology(json.dumps(doc))["links"] == [["X", "XGMI"], ["UNKNOWN", "X"]]


@pytest.mark.parametrize("profile", ["mi300x8", "mi355x8"])
def test_the_fake_amd_smi_topology_parses_in_both_layouts(profile):
    out = _run_fake("amd-smi", profile, AMD_SMI_TOPOLOGY)
    assert out.lstrip().startswith("{" if profile == "mi355x8" else "[")
    assert parse_amd_smi_topology(out) == {
        "links": [["X" if i == j else "XGMI" for j in range(8)] for i in range(8)], "numa": [None] * 8}
    assert parse_amd_smi_numa(_run_fake("amd-smi", profile, AMD_SMI_NUMA)) == dict(enumerate(HALVES))


@pytest.mark.parametrize("doc", [
    "", "not json", {"gpu_data": []}, [{"gpu": 0}],
    [{"gpu": 0, "links": [{"gpu": 0, "link_type": "SELF"}, {"gpu": 1}]},
     {"gpu": 1, "links": [{"gpu": 0, "link_type": "XGMI"}, {"gpu": 1, "link_type": "SELF"}]}],   # no link_type
    [{"gpu": 0, "links": [{"gpu": 0, "link_type": "SELF"}]},
     {"gpu": 1, "links": [{"gpu": 0, "link_type": "XGMI"}, {"gpu": 1, "link_type": "SELF"}]}],   # a peer missing
    [{"gpu": 0, "links": [{"gpu": 0, "link_type": "XGMI"}, {"gpu": 1, "link_type": "XGMI"}]},
     {"gpu": 1, "links": [{"gpu": 0, "link_type": "XGMI"}, {"gpu": 1, "link_type": "SELF"}]}],   # not SELF
    [{"gpu": 0, "links": []}, {"gpu": 0, "links": []}],                                          # a GPU twice
    [{"gpu": 1, "links": [{"gpu": 1, "link_type": "SELF"}]}],                                  # not from 0
])
def test_amd_smi_topology_that_is_not_a_complete_matrix_gives_none(doc):
    assert parse_amd_smi_topology(doc if isinstance(doc, str) else json.dumps(doc)) is None


def test_amd_smi_numa_prefers_the_affinity():
    doc = {"gpu_data": [{"gpu": 0, "numa": {"node": 0, "affinity": 1}},
                        {"gpu": 1, "numa": {"node": 1, "affinity": "N/A"}},
                        {"gpu": 2, "numa": {"node": "N/A", "affinity": -1}},
                        {"gpu": 3, "numa": "N/A"}]}
    assert parse_amd_smi_numa(json.dumps(doc)) == {0: 1, 1: 1, 2: None, 3: None}


# ------------------------------------------------------------------------------ AMD render nodes

def test_amd_smi_list_enumeration_and_plain():
    """`list -e` (ROCm 6.4+) names the render node; without -e only the KFD node id is there."""
    enum = [{"gpu": 0, "bdf": "0000:0c:00.0", "uuid": "x", "kfd_id": 18421, "node_id": 2, "partition_id": 0,
             "render": "renderD128", "card": "card0", "hsa_id": 2, "hip_id": 0, "hip_uuid": "GPU-x"},
            {"gpu": 1, "bdf": "0000:0c:00.1", "uuid": "y", "kfd_id": 48116, "node_id": 3, "partition_id": 1,
             "render": "N/A", "card": "N/A", "hsa_id": 3, "hip_id": 1, "hip_uuid": "GPU-y"}]
    assert parse_amd_smi_list(json.dumps({"gpu_data": enum})) == {
        0: {"render": "/dev/dri/renderD128", "node_id": 2}, 1: {"render": None, "node_id": 3}}
    plain = [{k: v for k, v in e.items() if k in ("gpu", "bdf", "uuid", "kfd_id", "node_id", "partition_id")}
             for e in enum]
    assert parse_amd_smi_list(json.dumps(plain)) == {0: {"render": None, "node_id": 2},
                                                       1: {"render": None, "node_id": 3}}
    assert parse_amd_smi_list('[{"gpu": 0, "render": 129}, {"gpu": 1, "render": "/dev/dri/renderD130"}]') == {
        0: {"render": "/dev/dri/renderD129", "node_id": None}, 1: {"render": "/dev/dri/renderD130", "node_id": None}}
    assert parse_amd_smi_list("") == {} and parse_amd_smi_list("amd-smi: error") == {}


KFD_GPU_NODE = """cpu_cores_count 0
simd_count 1216
mem_banks_count 1
caches_count 544
io_links_count 1
p2p_links_count 7
cpu_core_id_base 0
simd_id_base 2147487744
max_waves_per_simd 8
lds_size_in_kb 64
gds_size_in_kb 0
num_gws 64
wave_front_size 64
array_count 32
simd_arrays_per_engine 1
cu_per_simd_array 10
simd_per_cu 4
max_slots_scratch_cu 32
gfx_target_version 90402
vendor_id 4098
device_id 29857
location_id 3072
domain 0
drm_render_minor 130
hive_id 8510523456329837311
num_sdma_engines 2
"""


def test_kfd_render_minor():
    assert parse_kfd_render_minor(KFD_GPU_NODE) == 130
    cpu_node = KFD_GPU_NODE.replace("drm_render_minor 130", "drm_render_minor 0")
    assert parse_kfd_render_minor(cpu_node) is None
    assert parse_kfd_render_minor(None) is None and parse_kfd_render_minor("garbage") is None


AMD_VERSION_JSON = json.dumps([{"tool": "AMDSMI Tool", "rocm_version": "6.4.0", "amdgpu_version": "6.12.12"}])


def _amd_host(extra, files=None):
    tools = {tuple(AMD_SMI_STATIC[0]): (0, fixture("amd-smi-static-mi300x-rocm6.json"), ""),
             tuple(AMD_SMI_VERSION): (0, AMD_VERSION_JSON, "")}
    tools.update(extra)
    return Host({"amd-smi": tools}, files)


LIST_PLAIN = json.dumps([{"gpu": i, "bdf": "0000:%02x:00.0" % (0x0c + 0x16 * i), "uuid": "u%d" % i,
                          "kfd_id": 1000 + i, "node_id": 2 + i, "partition_id": 0} for i in range(2)])


def test_probe_amd_render_nodes_from_list_e_and_topology_with_numa():
    enum = json.dumps([dict(e, render="renderD%d" % (128 + e["gpu"])) for e in json.loads(LIST_PLAIN)])
    topo = json.dumps([{"gpu": i, "links": [{"gpu": j, "link_type": "SELF" if i == j else "XGMI"} for j in range(2)]}
                       for i in range(2)])
    numa = json.dumps([{"gpu": 0, "numa": {"node": 0, "affinity": 0}}, {"gpu": 1, "numa": {"node": 1, "affinity": 1}}])
    host = _amd_host({tuple(AMD_SMI_TOPOLOGY): (0, topo, ""), tuple(AMD_SMI_NUMA): (0, numa, ""),
                      tuple(AMD_SMI_LIST_ENUM): (0, enum, "")})
    facts, _ = resolve(host.probe())
    assert facts["render_nodes"] == ["/dev/dri/renderD128", "/dev/dri/renderD129"]
    assert facts["topology"] == {"links": [["X", "XGMI"], ["XGMI", "X"]], "numa": [0, 1]}
    assert [c[1:] for c in host.calls[2:]] == [AMD_SMI_TOPOLOGY, AMD_SMI_NUMA, AMD_SMI_LIST_ENUM]


def test_probe_amd_render_nodes_from_the_kfd_topology_before_rocm_64():
    refused = (2, "", "amd-smi: error: unrecognized arguments: -e\n")
    files = {KFD_NODE_PROPERTIES % 2: KFD_GPU_NODE.replace("130", "128"),
             KFD_NODE_PROPERTIES % 3: KFD_GPU_NODE.replace("130", "129")}
    host = _amd_host({tuple(AMD_SMI_LIST_ENUM): refused, tuple(AMD_SMI_LIST): (0, LIST_PLAIN, "")}, files)
    facts, _ = resolve(host.probe())
    assert facts["render_nodes"] == ["/dev/dri/renderD128", "/dev/dri/renderD129"]
    assert "topology" not in facts  # `amd-smi topology` did not answer: no key, no error
    # one GPU's node unreadable: no render nodes at all (never a partial map)
    host = _amd_host({tuple(AMD_SMI_LIST_ENUM): refused, tuple(AMD_SMI_LIST): (0, LIST_PLAIN, "")},
                     {KFD_NODE_PROPERTIES % 2: KFD_GPU_NODE})
    assert "render_nodes" not in resolve(host.probe())[0]
    # two GPUs on one render node (partitions of amd-smi 25.3 in CPX mode): not a per-GPU map
    same = json.dumps([dict(e, render="renderD128") for e in json.loads(LIST_PLAIN)])
    host = _amd_host({tuple(AMD_SMI_LIST_ENUM): (0, same, "")})
    assert "render_nodes" not in resolve(host.probe())[0]


def test_probe_amd_fills_a_missing_render_from_the_kfd_topology():
    """`list -e` answers N/A for one GPU: the KFD node of that GPU fills it in."""
    enum = json.loads(LIST_PLAIN)
    enum[0]["render"], enum[1]["render"] = "renderD128", "N/A"
    host = _amd_host({tuple(AMD_SMI_LIST_ENUM): (0, json.dumps(enum), "")},
                     {KFD_NODE_PROPERTIES % 3: KFD_GPU_NODE.replace("130", "129")})
    facts, _ = resolve(host.probe())
    assert facts["render_nodes"] == ["/dev/dri/renderD128", "/dev/dri/renderD129"]
    assert AMD_SMI_LIST not in [c[1:] for c in host.calls]


def test_the_fake_amd_smi_list_e_maps_render_nodes_and_older_releases_refuse_it():
    for profile in ("mi300x8", "mi355x8"):
        listed = parse_amd_smi_list(_run_fake("amd-smi", profile, AMD_SMI_LIST_ENUM))
        assert [listed[i]["render"] for i in range(8)] == ["/dev/dri/renderD%d" % (128 + i) for i in range(8)]
    old = subprocess.run([sys.executable, str(FAKES / "amd-smi")] + AMD_SMI_LIST_ENUM, capture_output=True,
                         text=True, env=dict(os.environ, FAKE_GPU_PROFILE="mi300x8", FAKE_ROCM_VERSION="6.3.1"))
    assert old.returncode == 2 and "unrecognized arguments: -e" in old.stderr
    plain = parse_amd_smi_list(_run_fake("amd-smi", "mi300x8", AMD_SMI_LIST, FAKE_ROCM_VERSION="6.3.1"))
    assert plain[7] == {"render": None, "node_id": 9}


def test_probe_nvidia_topology_that_does_not_fit_is_left_out():
    base = {tuple(NVIDIA_QUERY): (0, H100_QUERY, ""), (): (0, TABLE, "")}
    for answer in (NO_DRIVER, (0, TOPO_2_NODE, ""), (0, "garbled\n", "")):   # fails, 2 GPUs of 8, unreadable
        tools = dict(base)
        tools[tuple(NVIDIA_TOPO)] = answer
        facts, _ = resolve(Host({"nvidia-smi": tools}).probe())
        assert facts["hardware"] == "h100" and facts["count"] == 8 and "topology" not in facts


# ------------------------------------------------------------------------------ CPUs and NUMA nodes

def test_cpulist():
    assert parse_cpulist("0-47,96-143\n") == list(range(48)) + list(range(96, 144))
    assert parse_cpulist("3") == [3] and parse_cpulist("\n") == [] and parse_cpulist(None) is None
    assert parse_cpulist("0-3,x") is None and parse_cpulist("5-2") is None


NODE = "/sys/devices/system/node"


def test_probe_cpus_two_sockets_restricted_to_the_affinity():
    files = {NODE + "/node0/cpulist": "0-3,8-11\n", NODE + "/node1/cpulist": "4-7,12-15\n",
             NODE + "/node2/cpulist": "\n"}                    # a memory-only node (CXL, HBM)
    dirs = {NODE: ["node1", "node0", "node2", "possible", "online", "has_cpu", "power", "uevent"]}
    cpus, nodes = probe_cpus(files.get, dirs.get, lambda: set(range(16)))
    assert cpus == list(range(16)) and nodes == {"0": [0, 1, 2, 3, 8, 9, 10, 11], "1": [4, 5, 6, 7, 12, 13, 14, 15]}
    assert list(nodes) == ["0", "1"]
    # a cpuset of 0-5: node 1 keeps what it may use
    cpus, nodes = probe_cpus(files.get, dirs.get, lambda: {5, 0, 1, 2, 3, 4})
    assert cpus == [0, 1, 2, 3, 4, 5] and nodes == {"0": [0, 1, 2, 3], "1": [4, 5]}
    # a cpuset inside node 0 only: node 1 is left out
    assert probe_cpus(files.get, dirs.get, lambda: {8, 9}) == ([8, 9], {"0": [8, 9]})


def test_probe_cpus_without_numa_sysfs():
    assert probe_cpus({}.get, {}.get, lambda: range(4)) == ([0, 1, 2, 3], {"0": [0, 1, 2, 3]})
    unreadable = {NODE: ["node0"]}
    assert probe_cpus({NODE + "/node0/cpulist": "garbage"}.get, unreadable.get, lambda: {0, 1}) == \
        ([0, 1], {"0": [0, 1]})


def test_probe_reports_cpus_on_cpu_hosts_too():
    files = {"/proc/cpuinfo": CPUINFO, NODE + "/node0/cpulist": "0-1", NODE + "/node1/cpulist": "2-3"}
    facts, _ = resolve(Host(files=files, dirs={NODE: ["node0", "node1"]}).probe())
    assert (facts["brand"], facts["hardware"]) == ("cpu", "xeon6")
    assert facts["cpus"] == [0, 1, 2, 3] and facts["numa_nodes"] == {"0": [0, 1], "1": [2, 3]}
    assert "topology" not in facts and "render_nodes" not in facts


def test_the_real_affinity_and_listing():
    """The defaults the module uses on a host: this machine's affinity and sysfs."""
    cpus, nodes = probe_cpus(gf._read_text, gf._list_dir, gf._affinity)
    assert cpus == sorted(os.sched_getaffinity(0))
    assert nodes and all(key.isdigit() and cs and set(cs) <= set(cpus) for key, cs in nodes.items())
    if not os.path.isdir("/sys/devices/system/node"):
        assert nodes == {"0": cpus}
    assert gf._list_dir("/nonexistent/dir") is None


# ------------------------------------------------------------------------------ end to end


def _python_bin(tmp_path: Path) -> Path:
    """A directory with just `python3` (the fakes are `#!/usr/bin/env python3` scripts)."""
    bindir = tmp_path / "python-bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(sys.executable)
    return bindir


def _bin_with(tmp_path: Path, name: str, tools: dict) -> Path:
    bindir = tmp_path / name
    bindir.mkdir()
    for tool, target in tools.items():
        dest = bindir / tool
        if isinstance(target, Path):
            dest.symlink_to(target)
        else:
            dest.write_text(target, encoding="utf-8")
            dest.chmod(0o755)
    return bindir


FAKE_A100 = """#!/usr/bin/env python3
import sys
if any(a.startswith("--query-gpu") for a in sys.argv[1:]):
    for i in range(8):
        print(f"{i}, NVIDIA A100-SXM4-80GB, 81920, 550.90.07, 00000000:0{i}:00.0")
else:
    print("| NVIDIA-SMI 550.90.07   Driver Version: 550.90.07   CUDA Version: 12.4 |")
"""

# name -> (bin dirs, FAKE_GPU_PROFILE, module args[, the profile file's text])
E2E = {
    "h200x8": (["fakes"], "h200x8", {"require_gpu": True, "_ansible_check_mode": True}),
    "h200x8-pairs": (["fakes"], "", {}, "h200x8 topology=pairs\n"),
    "mi300x8": (["fakes"], "mi300x8", {}),
    "mi355x8": (["fakes"], "mi355x8", {}),
    "none": (["fakes"], "none", {"amd_smi_path": "/nonexistent/amd-smi"}),
    "unknown-gpu": (["a100"], "", {}),
    "explicit-hardware": (["fakes"], "h200x8", {"hardware": "h100"}),
    # GPU health: the fakes' sickness knobs (tests/fakes/README.md)
    "h200x8-healthy": (["fakes"], "", {"health": True}, "h200x8\n"),
    "h200x8-sick": (["fakes"], "", {"health": True},
                    "h200x8 sick=3:ecc_uncorrectable,4:thermal,6:remap_pending xid=5:79\n"),
    "mi300x8-sick": (["fakes"], "", {"health": True}, "mi300x8 sick=1:ras_uncorrectable,2:xgmi_down\n"),
}


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    """Every end-to-end case, run concurrently (each is a python3 + ansible import)."""
    pytest.importorskip("ansible")
    tmp = tmp_path_factory.mktemp("gpu-facts")
    dirs = {
        "fakes": FAKES,
        "a100": _bin_with(tmp, "a100", {"nvidia-smi": FAKE_A100}),
    }
    python_bin = _python_bin(tmp)
    procs = {}
    for name, (bins, profile, args, *profile_file) in E2E.items():
        args_file = tmp / f"{name}.json"
        args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}), encoding="utf-8")
        # the fakes read no /etc/vllm-fleet-fake-gpu of this machine
        (tmp / f"{name}.profile").write_text(profile_file[0] if profile_file else "", encoding="utf-8")
        env = {"PATH": os.pathsep.join([str(dirs[b]) for b in bins] + [str(python_bin)]),
               "FAKE_GPU_PROFILE": profile, "FAKE_GPU_PROFILE_FILE": str(tmp / f"{name}.profile"),
               "HOME": str(tmp), "LANG": "C.UTF-8"}
        procs[name] = subprocess.Popen([sys.executable, "-c", RUN_MODULE, str(MODULE_UTILS), str(MODULE_PATH),
                                        str(args_file)], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=60)
        try:
            results[name] = json.loads(out)
        except ValueError:
            raise AssertionError(f"{name}: module printed no JSON (rc={proc.returncode}):\n{out}\n{err}")
        results[name]["_rc"] = proc.returncode
    return results


def test_e2e_h200x8(e2e):
    result = e2e["h200x8"]
    facts = result["ansible_facts"]["vllm_fleet_gpu"]
    assert result["changed"] is False and not result.get("failed") and result["_rc"] == 0
    assert (facts["brand"], facts["hardware"], facts["count"], facts["detected"]) == ("nvidia", "h200", 8, True)
    assert facts["names"] == ["NVIDIA H200"] * 8 and facts["memory_mib"] == [143771] * 8
    assert (facts["driver_version"], facts["cuda_version"], facts["source"]) == ("570.133.20", "12.8", "nvidia-smi")
    assert facts["total_memory_gib"] == 1123.2 and len(facts["bus_ids"]) == 8
    # NVSwitch: every pair NV18, GPUs 0-3 on NUMA node 0, 4-7 on 1; no render nodes on NVIDIA
    assert facts["topology"] == {"links": [["X" if i == j else "NV18" for j in range(8)] for i in range(8)],
                                 "numa": HALVES}
    assert "render_nodes" not in facts
    # the module's own CPUs (it inherits this process's affinity) and their NUMA nodes
    assert facts["cpus"] == sorted(os.sched_getaffinity(0))
    assert facts["numa_nodes"] and all(cs and set(cs) <= set(facts["cpus"]) for cs in facts["numa_nodes"].values())


def test_e2e_h200x8_nvlink_pairs_from_the_profile_file(e2e):
    facts = e2e["h200x8-pairs"]["ansible_facts"]["vllm_fleet_gpu"]
    assert (facts["hardware"], facts["count"]) == ("h200", 8)
    assert facts["topology"] == {"links": PAIRS_LINKS, "numa": HALVES}


@pytest.mark.parametrize("name,rocm", [("mi300x8", "6.4.0"), ("mi355x8", "7.0.2")])
def test_e2e_amd_topology_and_render_nodes(e2e, name, rocm):
    facts = e2e[name]["ansible_facts"]["vllm_fleet_gpu"]
    assert (facts["brand"], facts["count"], facts["rocm_version"]) == ("amd", 8, rocm)
    assert facts["topology"] == {"links": [["X" if i == j else "XGMI" for j in range(8)] for i in range(8)],
                                 "numa": HALVES}
    assert facts["render_nodes"] == ["/dev/dri/renderD%d" % (128 + i) for i in range(8)]


def test_e2e_mi300x8(e2e):
    result = e2e["mi300x8"]
    facts = result["ansible_facts"]["vllm_fleet_gpu"]
    assert result["changed"] is False and not result.get("failed")
    assert (facts["brand"], facts["hardware"], facts["count"], facts["source"]) == ("amd", "mi300x", 8, "amd-smi")
    assert (facts["gfx_target"], facts["device_id"], facts["rocm_version"], facts["driver_version"]) == \
        ("gfx942", "0x74a1", "6.4.0", "6.12.12")
    assert facts["memory_mib"] == [196592] * 8 and facts["cuda_version"] is None
    assert facts["bus_ids"][:2] == ["0000:05:00.0", "0000:26:00.0"] and len(facts["bus_ids"]) == 8
    assert facts["probe_notes"][0].startswith("nvidia-smi (") and "(rc=9)" in facts["probe_notes"][0]


def _states(e2e, name):
    health = e2e[name]["ansible_facts"]["vllm_fleet_gpu"]["health"]
    return health, {g["index"]: (g["state"], " / ".join(g["evidence"])) for g in health["gpus"]}


def test_e2e_health_of_healthy_gpus(e2e):
    health, states = _states(e2e, "h200x8-healthy")
    assert health["read"] == ["nvidia-smi -q -x", "dmesg"] and health["notes"] == []
    assert states == {i: ("healthy", "") for i in range(8)}
    modes = e2e["h200x8-healthy"]["ansible_facts"]["vllm_fleet_gpu"]["modes"]
    assert [m["index"] for m in modes] == list(range(8)) and modes[0]["persistence_mode"] == "Enabled"
    # without health=true nothing of it is read
    assert "health" not in e2e["h200x8"]["ansible_facts"]["vllm_fleet_gpu"]


def test_e2e_health_names_each_sick_gpu_and_its_evidence(e2e):
    _, states = _states(e2e, "h200x8-sick")
    assert states[3][0] == "failed" and "uncorrectable" in states[3][1]
    assert states[5][0] == "failed" and "XID 79" in states[5][1]
    assert states[6][0] == "failed" and "pending" in states[6][1]
    assert states[4][0] == "degraded" and "slowdown" in states[4][1]
    assert {i for i, (state, _) in states.items() if state == "healthy"} == {0, 1, 2, 7}


def test_e2e_health_of_amd_gpus(e2e):
    health, states = _states(e2e, "mi300x8-sick")
    assert health["read"] == ["amd-smi metric --ecc --json", "amd-smi xgmi --link-status --json"]
    assert states[1][0] == "failed" and "uncorrectable" in states[1][1]
    assert states[2][0] == "failed" and "XGMI" in states[2][1]
    assert {i for i, (state, _) in states.items() if state == "healthy"} == {0, 3, 4, 5, 6, 7}


def test_e2e_cpu_only(e2e):
    result = e2e["none"]
    facts = result["ansible_facts"]["vllm_fleet_gpu"]
    assert not result.get("failed") and result["changed"] is False
    assert facts["brand"] in ("cpu", "none") and facts["count"] == 0
    assert facts["hardware"] in (None, "xeon5", "xeon6")  # whatever CPU runs the tests
    assert [n.split(" ")[0] for n in facts["probe_notes"]] == ["nvidia-smi", "amd-smi:", "rocm-smi"]
    assert facts["probe_notes"][1] == "amd-smi: not found"
    assert any("amd_smi_path /nonexistent/amd-smi is not an executable file" in json.dumps(w)
               for w in result.get("warnings", []))


def test_e2e_unknown_gpu_fails_with_the_id_list(e2e):
    result = e2e["unknown-gpu"]
    assert result["failed"] is True
    assert result["msg"] == "unknown GPU 'NVIDIA A100-SXM4-80GB' x8 on this host: set vllm_fleet_hardware " \
                            "to one of: " + ALL_IDS


def test_e2e_explicit_hardware(e2e):
    result = e2e["explicit-hardware"]
    facts = result["ansible_facts"]["vllm_fleet_gpu"]
    assert result["changed"] is False and not result.get("failed")
    assert (facts["hardware"], facts["detected"], facts["detected_hardware"]) == ("h100", False, "h200")
    # ansible-core >= 2.19 returns warnings as structured objects, older releases as strings
    assert any("looks like 'h200'" in json.dumps(w) for w in result.get("warnings", []))


# ---- host facts in the same call (the preamble's one remote read) ------------------------------

def _run_module(tmp_path, **args):
    sys.path.insert(0, str(Path(__file__).parent))
    from module_runner import module_argv

    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run(module_argv(MODULE_PATH, path), capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": f"{FAKES}:{os.environ['PATH']}", "FAKE_GPU_PROFILE": "h200x8"})
    return json.loads(proc.stdout)


def test_host_facts_come_with_the_gpu_facts_named_as_setup_names_them(tmp_path):
    """host_facts [min, network]: what the planner reads of setup's facts (addresses, interfaces,
    the Python, the service manager) beside vllm_fleet_gpu, from the FAKE nvidia-smi's H200 x 8."""
    out = _run_module(tmp_path, host_facts=["min", "network"])
    facts = out["ansible_facts"]
    assert out.get("failed") is not True, out
    assert facts["vllm_fleet_gpu"]["count"] == 8 and facts["vllm_fleet_gpu"]["hardware"] == "h200"
    assert "lo" in facts["ansible_interfaces"] and facts["ansible_all_ipv4_addresses"] is not None
    assert facts["ansible_python"]["executable"] == sys.executable
    assert facts["ansible_service_mgr"] and "ansible_distribution" in facts
    assert "ansible_mounts" not in facts and "ansible_local" in facts   # the min subset only; no facts.d read
    # without host_facts: the GPU facts alone, as before
    alone = _run_module(tmp_path)["ansible_facts"]
    assert list(alone) == ["vllm_fleet_gpu"]
    # a subset setup does not know is refused naming the option
    bad = _run_module(tmp_path, host_facts=["min", "nosuch"])
    assert bad["failed"] is True and bad["msg"].startswith("host_facts: ") and "nosuch" in bad["msg"]
