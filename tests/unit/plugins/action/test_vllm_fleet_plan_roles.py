"""What the controller knows of the roles, and hands the engine's contract as arguments: the
role tunables and their host paths, read from every role's ``meta/argument_specs.yml`` and
``defaults/main.yml`` by the plan action (plugins/action/vllm_fleet_plan.py), and the same
options as ``vllm-fleet plan`` gets them from ``ansible-doc``. The engine reads no role file
(tests/unit/plugins/module_utils/test_engine_boundary.py)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from vllm_fleet import cli, contract

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def action():
    sys.path.insert(0, str(ROOT / "plugins" / "action"))
    import vllm_fleet_plan   # noqa: E402 - the plugin module itself

    return vllm_fleet_plan


def test_the_systemd_roles_parameters_are_refused_in_an_inventory(action):
    """roles/vllm_fleet_systemd's variables are internal (the runtimes' roles pass them): an
    inventory that sets one is refused, naming host and variable, though the role declares it."""
    _, declared = action.role_declarations(str(ROOT / "roles"))
    assert "vllm_fleet_systemd_user" in declared and contract.internal("vllm_fleet_systemd_user")
    values, found = contract.check("h1", {"vllm_fleet_systemd_user": "root", "vllm_fleet_systemd_unit_dir": "/tmp",
                                          "vllm_fleet_uv_user": "root"}, declared)
    assert values == {}
    assert [p.split(": ")[:2] for p in found] == [["h1", "vllm_fleet_systemd_unit_dir"],
                                                  ["h1", "vllm_fleet_systemd_user"]], found
    assert all("set the runtime's own variables (vllm_fleet_uv_*, vllm_fleet_services_*)" in p for p in found)
    # never offered as a did-you-mean either
    typo = contract.check("h1", {"vllm_fleet_sytemd_user": "root"}, declared)[1]
    assert typo and "vllm_fleet_systemd" not in "".join(typo), typo
    # the playbooks' own facts are still passed over (the plan action meets them on later calls)
    assert contract.check("h1", {"vllm_fleet_plan": {}, "vllm_fleet_run": {}}, declared) == ({}, [])


def test_path_tunables_come_from_the_roles_argument_specs(action):
    specs, declared = action.role_declarations(str(ROOT / "roles"))
    kinds = action.path_tunables(specs)
    assert kinds["vllm_fleet_uv_writable_paths"] == "dir" and kinds["vllm_fleet_services_wheelhouse"] == "dir"
    assert "vllm_fleet_drain_tasks" not in kinds          # a task file on the controller
    # the roots the layout is made of are the contract's own (variables.py), not a role's
    assert not {"vllm_fleet_uv_root", "vllm_fleet_uv_state_dir", "vllm_fleet_uv_hf_cache", "vllm_fleet_uv_user_home",
                "vllm_fleet_services_root", "vllm_fleet_services_user_home"} & set(specs)
    bad = contract.check("h1", {"vllm_fleet_uv_root": "/etc", "vllm_fleet_uv_writable_paths": ["/srv/x", "/"]},
                         declared, kinds)[1]
    assert any(p.startswith("h1: vllm_fleet_uv_root: '/etc' is a system directory") for p in bad), bad
    assert any(p.startswith("h1: vllm_fleet_uv_writable_paths[1]: ") for p in bad)
    assert not contract.check("h1", {"vllm_fleet_uv_root": "/opt/vf", "vllm_fleet_uv_user_home": "/srv/vf-home"},
                              declared, kinds)[1]


def test_retired_path_variables_are_refused_naming_where_the_files_live(action):
    """The unit and env directories are the layout's alone now: an inventory that still sets one
    of the old per-runtime variables is refused (not silently ignored), saying where they are."""
    _, declared = action.role_declarations(str(ROOT / "roles"))
    values, found = contract.check("h1", {"vllm_fleet_uv_env_dir": "/srv/env", "vllm_fleet_services_unit_dir": "/srv/u",
                                          "vllm_fleet_services_state_dir": "/srv/w", "vllm_fleet_uv_unit_dir": None},
                                   declared)
    assert values == {}
    assert sorted(p.split(": ")[:2] for p in found) == [["h1", "vllm_fleet_services_state_dir"],
                                                        ["h1", "vllm_fleet_services_unit_dir"],
                                                        ["h1", "vllm_fleet_uv_env_dir"]], found
    by = {p.split(": ")[1]: p for p in found}
    assert "no longer a setting" in by["vllm_fleet_uv_env_dir"] and "/etc/vllm-fleet" in by["vllm_fleet_uv_env_dir"]
    assert "/etc/systemd/system" in by["vllm_fleet_services_unit_dir"]
    assert "vllm_fleet_uv_state_dir" in by["vllm_fleet_services_state_dir"]


def test_the_cli_knows_the_role_options_the_action_reads(monkeypatch):
    """`vllm-fleet plan` asks ansible-doc for the roles' options (the engine reads no role file):
    every argument_specs option the action reads, and nothing else. The roles' defaults-only
    names (role parameters the playbooks pass, such as vllm_fleet_docker_processes) are the
    action's alone."""
    here = Path(sys.executable).parent
    if not (here / "ansible-doc").exists() and not shutil.which("ansible-doc"):
        pytest.skip("platform: ansible-doc not installed (the unit session installs ansible-core)")
    monkeypatch.setenv("PATH", f"{here}{os.pathsep}{os.environ.get('PATH', '')}")
    options = {}
    for path in (ROOT / "roles").glob("*/meta/argument_specs.yml"):
        for entry in (yaml.safe_load(path.read_text())["argument_specs"] or {}).values():
            options.update((n, spec) for n, spec in (entry.get("options") or {}).items() if n.startswith(contract.PREFIX))
    got = cli.role_options(ROOT / "roles")
    assert options and set(got) == set(options)
    # with what the plan action's check reads of each (_check_tunables, contract.SPEC_KEYS)
    for name, spec in options.items():
        assert {k: got[name].get(k) for k in contract.SPEC_KEYS} == {k: spec.get(k) for k in contract.SPEC_KEYS}, name


def test_role_tunables_are_validated_as_the_role_validates_them_and_a_shape_given_for_a_string_is_named(action):
    """_check_tunables: Ansible's own validator over the role's spec (types, elements, choices;
    its conversions, as -e key=value strings need them), and a mapping or a list given for a string
    refused instead of turned into its text (which Ansible's validator would plan)."""
    specs, _ = action.role_declarations(str(ROOT / "roles"))
    check = action._check_tunables
    assert check("h1", {"vllm_fleet_uv_user": "svc", "vllm_fleet_uv_restart_sec": "45",
                        "vllm_fleet_uv_extra_install_args": ["--no-cache"]}, specs) == []
    assert check("h1", {"vllm_fleet_uv_user": {"not": "right"}}, specs) == [
        "h1: vllm_fleet_uv_user: expected a string, got '{\"not\": \"right\"}'"]
    assert check("h1", {"vllm_fleet_uv_extra_install_args": ["--x", ["y"]]}, specs)[0].startswith(
        "h1: vllm_fleet_uv_extra_install_args: expected a list of strings, got")
    [request] = check("h1", {"vllm_fleet_health_request": "sometimes"}, specs)
    assert request.startswith("h1: vllm_fleet_health_request: ") and "auto, completion, embedding, none" in request, request
    # the docker runtime's variables are the contract's (variables.py), not a role's
    assert not [name for name in specs if name.startswith("vllm_fleet_docker_")], sorted(specs)
