"""Filters: systemd quoting, flag values, requirement pins."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
_spec = importlib.util.spec_from_file_location("vllm_fleet_filter_plugin", ROOT / "plugins" / "filter" / "vllm_fleet.py")
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)


def test_systemd_exec_quotes_and_escapes():
    assert filters.systemd_exec(["vllm", "serve", "m", "--x", '{"a": 1}', "50%", "$HOME"]) == \
        'vllm serve m --x "{\\"a\\": 1}" 50%% "$$HOME"'


def test_flag_values_both_forms():
    argv = ["vllm", "serve", "m", "--chat-template", "examples/a.jinja", "--x", "1", "--chat-template=/t.jinja"]
    assert filters.flag_values(argv, "--chat-template") == ["examples/a.jinja", "/t.jinja"]
    assert filters.flag_values(argv, "--port") == []


def test_process_line_names_the_gpu_set_and_port_of_each_process():
    replica = {"name": "vllm-fleet-seed-r3", "gpus": [3], "port": 8003, "serves_http": True,
               "argv": ["vllm", "serve", "m", "--port", "8003"]}
    assert filters.process_line(replica) == "vllm-fleet-seed-r3 (GPU 3, port 8003): vllm serve m --port 8003"
    worker = {"name": "w", "port": 8000, "serves_http": False, "argv": ["vllm", "serve", "m", "--headless"]}
    assert filters.process_line(worker) == "w: vllm serve m --headless"


def test_pin_requirements_adds_the_default_version_only_where_the_plan_pins_none():
    pins = {"vllm-router": "0.1.17", "mooncake_transfer_engine": "0.3.13.post1"}
    assert filters.pin_requirements(
        ["vllm-router", "Mooncake.Transfer-Engine>=0.3.10", "vllm-router==0.2.0", "other",
         "mooncake-transfer-engine ; sys_platform == 'linux'", "vllm_router[x] >=0.1"], pins) == \
        ["vllm-router==0.1.17", "Mooncake.Transfer-Engine>=0.3.10,==0.3.13.post1", "vllm-router==0.2.0", "other",
         "mooncake-transfer-engine ; sys_platform == 'linux'", "vllm_router[x] >=0.1,==0.1.17"]
    assert filters.pin_requirements(["vllm-router"], {"vllm-router": None}) == ["vllm-router"]
    assert filters.pin_requirements([], pins) == []


def test_without_the_engine_package_every_controller_plugin_says_what_to_install():
    """The filters and the plan action import the installed vllm_fleet package (no sys.path
    insert); a Python without it gets an ImportError naming the fix, which Ansible prints as
    the reason it skipped the plugin."""
    import subprocess
    import sys

    blocker = (
        "import importlib.abc, importlib.util, sys\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'vllm_fleet' or name.startswith('vllm_fleet.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, Block())\n"
        "spec = importlib.util.spec_from_file_location('p', sys.argv[1])\n"
        "try:\n"
        "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    print('imported')\n")
    for plugin in ("filter/vllm_fleet.py", "filter/vllm_fleet_rollout.py", "action/vllm_fleet_plan.py"):
        out = subprocess.run([sys.executable, "-c", blocker, str(ROOT / "plugins" / plugin)],
                             capture_output=True, text=True, check=True).stdout
        assert "vllm_fleet is not installed for" in out and "pip install -e ." in out, (plugin, out)
    text = "".join((ROOT / "plugins" / p).read_text() for p in ("filter/vllm_fleet.py", "filter/vllm_fleet_rollout.py", "action/vllm_fleet_plan.py"))
    assert "sys.path.insert" not in text
