"""Filters: systemd quoting, flag values, requirement pins."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[4]
_spec = importlib.util.spec_from_file_location("vllm_fleet_filter_plugin", ROOT / "plugins" / "filter" / "vllm_fleet.py")
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)


def test_systemd_exec_quotes_and_escapes():
    assert filters.systemd_exec(["vllm", "serve", "m", "--x", '{"a": 1}', "50%", "$HOME"]) == \
        'vllm serve m --x "{\\"a\\": 1}" 50%% "$$HOME"'


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


def test_without_the_engine_package_the_first_plugin_of_every_playbook_says_what_to_install():
    """The controller plugins import the installed vllm_fleet package (no sys.path insert). One
    import guard: the plan action's, the first task of every playbook (playbooks/_plan.yml), so a
    Python without the package gets an ImportError naming the fix before any filter is used."""
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
    out = subprocess.run([sys.executable, "-c", blocker, str(ROOT / "plugins" / "action" / "vllm_fleet_plan.py")],
                         capture_output=True, text=True, check=True).stdout
    assert "vllm_fleet is not installed for" in out and "pip install -e ." in out, out
    plugins = sorted((ROOT / "plugins").glob("*/*.py"))
    guards = [p.name for p in plugins if "is not installed for" in p.read_text()]
    assert guards == ["vllm_fleet_plan.py"]
    assert not [p.name for p in plugins if "sys.path.insert" in p.read_text()]
    # every playbook an operator runs starts with the preamble, whose first task is the plan action
    first_task = yaml.safe_load((ROOT / "playbooks" / "_plan.yml").read_text())[0]["tasks"][0]
    assert "vllm_fleet_plan" in first_task
    for book in sorted((ROOT / "playbooks").glob("[!_]*.yml")):
        first = yaml.safe_load(book.read_text())[0]
        assert first.get("ansible.builtin.import_playbook") == "_plan.yml", book.name
