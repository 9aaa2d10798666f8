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


def test_pin_requirements_adds_the_default_version_only_where_the_plan_pins_none():
    pins = {"vllm-router": "0.1.17", "mooncake_transfer_engine": "0.3.13.post1"}
    assert filters.pin_requirements(
        ["vllm-router", "Mooncake.Transfer-Engine>=0.3.10", "vllm-router==0.2.0", "other",
         "mooncake-transfer-engine ; sys_platform == 'linux'", "vllm_router[x] >=0.1"], pins) == \
        ["vllm-router==0.1.17", "Mooncake.Transfer-Engine>=0.3.10,==0.3.13.post1", "vllm-router==0.2.0", "other",
         "mooncake-transfer-engine ; sys_platform == 'linux'", "vllm_router[x] >=0.1,==0.1.17"]
    assert filters.pin_requirements(["vllm-router"], {"vllm-router": None}) == ["vllm-router"]
    assert filters.pin_requirements([], pins) == []
