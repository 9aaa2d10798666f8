"""The inventory contract: its checks, and the two places it is rendered (docs/inventory.md,
argument_specs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vllm_fleet import contract
from vllm_fleet.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[4]
TYPES = {"str": "str", "int": "int", "port": "int", "bool": "bool", "list": "list", "dict": "dict",
         "str_or_list": "raw"}


def problems(**variables):
    return contract.check("h1", {contract.PREFIX + k: v for k, v in variables.items()})[1]


def test_inventory_page_table_is_the_contract():
    text = (ROOT / "docs" / "inventory.md").read_text()
    begin = text.index(contract.README_BEGIN) + len(contract.README_BEGIN) + 1
    end = text.index(contract.README_END)
    assert text[begin:end] == contract.markdown_table(), \
        ("docs/inventory.md's variable table is stale: "
         "PYTHONPATH=plugins/module_utils python3 -m vllm_fleet.contract --update-readme docs/inventory.md")
    for var in contract.VARIABLES:
        assert f"`{var.full}`" in text[begin:end]


def test_update_readme_rewrites_only_the_table(tmp_path):
    readme = tmp_path / "inventory.md"
    readme.write_text(f"intro\n{contract.README_BEGIN}\nold rows\n{contract.README_END}\noutro\n")
    assert contract.main(["--update-readme", str(readme)]) == 0
    assert readme.read_text() == (f"intro\n{contract.README_BEGIN}\n{contract.markdown_table()}"
                                  f"{contract.README_END}\noutro\n")


def _role_options():
    out = {}
    for path in sorted((ROOT / "roles").glob("*/meta/argument_specs.yml")):
        specs = yaml.safe_load(path.read_text())["argument_specs"]
        for entry in specs.values():
            for name, spec in (entry.get("options") or {}).items():
                out.setdefault((path.parts[-3], name), spec)
    return out


def test_argument_specs_render_the_contract_where_a_role_consumes_a_variable():
    options = _role_options()
    declared = {(role, var.full) for var in contract.VARIABLES for role in var.roles}
    found = {(role, name) for role, name in options if name in contract.BY_NAME}
    assert found == declared, "contract Var.roles and the roles' argument_specs disagree"
    for role, name in sorted(found):
        var, spec = contract.BY_NAME[name], options[(role, name)]
        assert spec["type"] == TYPES[var.kind], (role, name)
        assert spec["description"] == var.meaning, (role, name)
        assert bool(spec.get("no_log")) == (var.scope == "secret"), (role, name)
        assert spec.get("default") == var.default, (role, name)


def test_role_tunables_do_not_shadow_contract_names():
    for role, name in _role_options():
        if name.startswith(contract.PREFIX + role[len("vllm_fleet_"):] + "_"):
            assert name not in contract.BY_NAME


def test_a_valid_host_passes_with_values_normalised():
    values, found = contract.check("h1", {"vllm_fleet_recipe": "baidu/ERNIE-4.5-VL-28B-A3B-PT",
                                          "vllm_fleet_port": "8001", "vllm_fleet_force": "yes",
                                          "vllm_fleet_role": "prefill",
                                          "vllm_fleet_image": "vllm/vllm-openai@sha256:" + "a" * 64})
    assert found == []
    assert values["vllm_fleet_port"] == 8001 and values["vllm_fleet_force"] is True
    assert values["vllm_fleet_role"] == ["prefill"]
    for given, value in (("auto", "auto"), ("AUTO", "auto"), ("4", 4), (8, 8)):
        values, found = contract.check("h1", {"vllm_fleet_replicas_per_host": given})
        assert found == [] and values["vllm_fleet_replicas_per_host"] == value


@pytest.mark.parametrize("variables, where, words", [
    ({"recipie": "a/b"}, "vllm_fleet_recipie", "did you mean vllm_fleet_recipe"),
    ({"port": True}, "vllm_fleet_port", "the boolean True"),
    ({"port": 0}, "vllm_fleet_port", "out of range"),
    ({"nodes": 0}, "vllm_fleet_nodes", "out of range"),
    ({"extra_args": "--max-model-len 4096"}, "vllm_fleet_extra_args", "must be a list"),
    ({"env": ["A=1"]}, "vllm_fleet_env", "must be a mapping"),
    ({"env": {"HF_TOKEN": "x"}}, "vllm_fleet_env.HF_TOKEN", "set vllm_fleet_hf_token"),
    ({"env": {"LD_AUDIT": "/x.so"}}, "vllm_fleet_env.LD_AUDIT", "refused"),
    ({"env": {"LD_PRELOAD": "x.so"}}, "vllm_fleet_env.LD_PRELOAD", "absolute paths only"),
    ({"extra_args": ["--api-key", "x"]}, "vllm_fleet_extra_args[0]", "set vllm_fleet_api_key"),
    ({"deployment": "a/b"}, "vllm_fleet_deployment", "is not"),
    ({"replicas_per_host": "all"}, "vllm_fleet_replicas_per_host", "must be a whole number or auto, got"),
    ({"replicas_per_host": 0}, "vllm_fleet_replicas_per_host", "out of range"),
    ({"deployment": "a..b"}, "vllm_fleet_deployment", "'..'"),
    ({"runtime": "uv", "recipe": "a/b"}, "vllm_fleet_vllm_version", "required with vllm_fleet_runtime uv"),
    ({"runtime": "uv", "recipe": "a/b", "vllm_version": "0.32"}, "vllm_fleet_vllm_version", "exact version"),
])
def test_bad_values_name_host_and_variable(variables, where, words):
    found = problems(**variables)
    assert any(p.startswith(f"h1: {where}: ") and words in p for p in found), found


def test_a_secret_value_is_never_echoed():
    found = problems(api_key="has space SENTINEL", hf_token=["SENTINEL"])
    assert len(found) == 2 and not any("SENTINEL" in p for p in found), found


def test_cli_refuses_zero_nodes(capsys):
    assert cli_main(["render", "--model", "baidu/ERNIE-4.5-VL-28B-A3B-PT", "--nodes", "0"]) == 2
    assert "--nodes 0: the node count must be at least 1" in capsys.readouterr().err


def test_module_prints_the_table():
    out = subprocess.run([sys.executable, "-m", "vllm_fleet.contract", "--markdown"], capture_output=True,
                         text=True, check=True, cwd=ROOT / "plugins" / "module_utils").stdout
    assert out == contract.markdown_table()


def test_run_options_carry_the_contracts_defaults():
    check, run_options, VARIABLES = contract.check, contract.run_options, contract.VARIABLES
    values, problems = check("h", {"vllm_fleet_state_dir": "/srv/state", "vllm_fleet_force": "yes"})
    assert problems == []
    run = run_options(values)
    assert run["state_dir"] == "/srv/state" and run["force"] is True
    assert run_options({}) == {v.name: v.default for v in VARIABLES if v.scope == "run"}
    assert run_options({})["state_dir"] == "/var/lib/vllm-fleet/state" and run_options({})["rollback_to"] == "previous"


def test_shown_says_null_apart_from_the_string_null():
    assert contract.shown(None) == "null (no value)"
    assert contract.shown("null") == "'null'"
