"""The roles' argument_spec of vllm_fleet_plan is generated from hostplan.py (one source): every
role's block is up to date, it covers every key a plan carries, and real plans pass Ansible's own
argument validation (which refuses undeclared suboptions) while broken ones fail naming the key."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml

from vllm_fleet import hostplan, loader
from vllm_fleet.hostplan import HostPlan, PlannedProcess
from example_hosts import HOSTS, hosts_of   # tests/unit/example_hosts.py
from vllm_fleet.plan import plan

ROOT = Path(__file__).resolve().parents[4]
ROLES = ROOT / "roles"


def test_every_role_block_is_up_to_date():
    outdated = hostplan.outdated_specs(str(ROLES))
    assert outdated == [], ("out of date (run: cd plugins/module_utils && python3 -m vllm_fleet.hostplan "
                            f"--update-specs): {outdated}")


def test_every_entry_point_declaring_the_plan_declares_the_generated_spec():
    spec = hostplan.argument_spec()
    seen = []
    for path in sorted(ROLES.glob("*/meta/argument_specs.yml")):
        for entry, data in (yaml.safe_load(path.read_text())["argument_specs"] or {}).items():
            option = ((data or {}).get("options") or {}).get("vllm_fleet_plan")
            if option is not None:
                seen.append(f"{path.parts[-3]}:{entry}")
                assert option == spec, f"{path.parts[-3]} entry point {entry}: vllm_fleet_plan is not the generated spec"
    # the runtime, gate, drain, preflight, services and systemd roles all take the plan
    assert {s.split(":")[0] for s in seen} >= {"vllm_fleet_docker", "vllm_fleet_uv", "vllm_fleet_health",
                                               "vllm_fleet_drain", "vllm_fleet_preflight",
                                               "vllm_fleet_services", "vllm_fleet_systemd"}


def test_spec_covers_every_field_with_a_description():
    spec = hostplan.argument_spec()
    host, proc = spec["options"], spec["options"]["processes"]["options"]
    assert list(host) == [f.name for f in dataclasses.fields(HostPlan)]
    assert list(proc) == [f.name for f in dataclasses.fields(PlannedProcess)]
    undocumented = [f"{cls.__name__}.{f.name}" for cls in (HostPlan, PlannedProcess)
                    for f in dataclasses.fields(cls) if not f.metadata.get("doc")]
    assert undocumented == [], "give these fields a description: _doc('...')"
    # types, required-ness (None allowed / left out), free-form dicts without suboptions
    assert host["node_rank"] == {"type": "int", "required": True, "description": host["node_rank"]["description"]}
    assert host["vram_gb_per_gpu"]["type"] == "float" and host["vram_minimum_gb"]["required"] is False
    assert host["processes"]["type"] == "list" and host["processes"]["elements"] == "dict"
    assert proc["argv"]["elements"] == "str" and proc["argv"]["required"] is True
    for name in ("gpus", "replica", "devices", "cpus", "port", "drain", "image"):
        assert proc[name]["required"] is False, name
    assert host["gpus_idle"] == {"type": "list", "elements": "int", "required": False,
                                 "description": host["gpus_idle"]["description"]}
    for options, name in ((host, "health"), (host, "drain"), (proc, "env"), (proc, "health"), (proc, "drain")):
        assert options[name]["type"] == "dict" and "options" not in options[name], name
    assert host["files"] == {"type": "list", "elements": "dict", "required": True,
                             "description": host["files"]["description"]}


def test_a_new_field_is_picked_up(monkeypatch):
    @dataclasses.dataclass
    class Extended(PlannedProcess):
        accelerator: dict = hostplan._doc("new", default_factory=dict)
        numa: "int | None" = None

    options = hostplan._options(Extended)
    assert options["accelerator"] == {"type": "dict", "required": True, "description": "new"}
    assert options["numa"] == {"type": "int", "required": False, "description": "numa"}


# ---- the generated block in a file ---------------------------------------------------------

SAMPLE = """---
argument_specs:
  main:
    options:
      vllm_fleet_plan:
        type: dict
        required: true
        description: old
      other:
        type: int
  stop:
    options:
      vllm_fleet_plan:
        type: dict
        description: old too
"""


def test_update_puts_the_block_in_place_and_aliases_the_others():
    new = hostplan.updated_specs(SAMPLE, "sample")
    data = yaml.safe_load(new)["argument_specs"]
    assert data["main"]["options"]["vllm_fleet_plan"] == hostplan.argument_spec()
    assert data["stop"]["options"]["vllm_fleet_plan"] == hostplan.argument_spec()
    assert data["main"]["options"]["other"] == {"type": "int"}
    assert "      vllm_fleet_plan: *vllm_fleet_plan\n" in new
    assert new.count(hostplan.SPEC_BEGIN) == 1
    assert hostplan.updated_specs(new, "sample") == new          # idempotent


def test_an_edited_block_is_out_of_date_and_regenerated():
    new = hostplan.updated_specs(SAMPLE, "sample")
    edited = new.replace("description: deployment name", "description: hand-edited", 1)
    assert edited != new
    assert hostplan.updated_specs(edited, "sample") == new


def test_broken_markers_are_a_clear_error():
    new = hostplan.updated_specs(SAMPLE, "sample")
    with pytest.raises(ValueError, match="sample: expected one pair of markers"):
        hostplan.updated_specs(new.replace(hostplan.SPEC_END, ""), "sample")


def test_cli_check_and_update(tmp_path, capsys):
    role = tmp_path / "vllm_fleet_x" / "meta"
    role.mkdir(parents=True)
    (role / "argument_specs.yml").write_text(SAMPLE)
    assert hostplan.main(["--check", "--roles", str(tmp_path)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert hostplan.main(["--update-specs", "--roles", str(tmp_path)]) == 0
    assert hostplan.main(["--check", "--roles", str(tmp_path)]) == 0
    assert hostplan.main([]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["vllm_fleet_plan"] == hostplan.argument_spec()
    with pytest.raises(SystemExit):
        hostplan.main(["--check", "--roles", str(tmp_path / "missing")])


def test_to_dict_keys_unchanged_by_the_descriptions():
    proc = PlannedProcess(name="n", kind="vllm", role="single", rank=0, phase="engine", runtime="docker",
                          version=None, argv=["vllm", "serve", "m"], env={}, port=8000, serves_http=True,
                          health={"kind": "vllm"}, bind=None, probe_host="127.0.0.1")
    assert list(proc.to_dict()) == ["name", "kind", "role", "rank", "phase", "runtime", "version", "argv", "env",
                                    "port", "serves_http", "health", "bind", "probe_host", "image",
                                    "served_model_name", "model_path", "packages", "mounts", "secret_env",
                                    "credentials", "hash", "drain"]
    assert list(proc.to_dict(with_drain=False))[-1] == "hash"


# ---- real plans against Ansible's own validation --------------------------------------------

ansible_arg_spec = pytest.importorskip("ansible.module_utils.common.arg_spec",
                                       reason="platform: ansible-core is not installed")


def validate(host_plan):
    validator = ansible_arg_spec.ArgumentSpecValidator({"vllm_fleet_plan": hostplan.argument_spec()})
    return validator.validate({"vllm_fleet_plan": host_plan}).error_messages


@pytest.fixture(scope="module")
def example_plans():
    cat = loader.load([ROOT / "recipes"])
    plans = {}
    for group in sorted(HOSTS):
        plans.update(plan(cat, hosts_of(group)))
    return plans


def test_every_example_plan_validates(example_plans):
    assert len(example_plans) > 5
    problems = {host: validate(host_plan) for host, host_plan in example_plans.items()}
    assert {h: p for h, p in problems.items() if p} == {}
    # engines, routers and Mooncake services (rank None), multi-node ranks, P/D pools
    procs = [p for hp in example_plans.values() for p in hp["processes"]]
    assert {p["kind"] for p in procs} >= {"vllm", "router", "mooncake_master", "mooncake_store"}
    assert any(p["rank"] is None for p in procs) and any(p["rank"] == 1 for p in procs)


def test_optional_keys_left_out_or_set_validate(example_plans):
    host_plan = copy.deepcopy(next(iter(example_plans.values())))
    proc = host_plan["processes"][0]
    for key in ("gpus", "replica", "devices", "cpus"):
        proc.pop(key, None)
    host_plan.pop("gpus_idle", None)
    assert validate(host_plan) == []
    proc.update(gpus=[0, 1], replica=0, devices=["/dev/kfd", "/dev/dri/renderD128"], cpus=[0, 1, 2])
    host_plan["gpus_idle"] = [7]
    assert validate(host_plan) == []


def test_broken_plans_fail_naming_the_key(example_plans):
    good = next(iter(example_plans.values()))
    extra = copy.deepcopy(good)
    extra["processes"][0]["surprise"] = 1
    assert any("surprise" in m for m in validate(extra))
    missing = copy.deepcopy(good)
    del missing["processes"][0]["argv"]
    assert any("argv" in m for m in validate(missing))
    wrong = copy.deepcopy(good)
    wrong["node_rank"] = "head"
    assert any("node_rank" in m for m in validate(wrong))


# ---- the Molecule scenarios' inventories plan cleanly and their plans validate ----------------

SCENARIO_INVENTORIES = sorted(ROLES.glob("*/molecule/default/inventory/hosts.yml"))


@pytest.mark.parametrize("hosts_yml", SCENARIO_INVENTORIES, ids=lambda p: p.parts[-5])
def test_molecule_scenario_inventories_plan_and_validate(hosts_yml, monkeypatch, capsys):
    import json
    import os
    import shutil
    import sys

    from vllm_fleet import cli

    here = Path(sys.executable).parent
    if not (here / "ansible-inventory").exists() and not shutil.which("ansible-inventory"):
        pytest.skip("platform: ansible-inventory not installed (the unit session installs ansible-core)")
    monkeypatch.setenv("PATH", f"{here}{os.pathsep}{os.environ.get('PATH', '')}")
    layers = [[]] + [[str(p)] for p in sorted(hosts_yml.parent.glob("*.yml")) if p != hosts_yml]
    for layer in layers:
        argv = ["plan", "--recipes", str(ROOT / "recipes"), "-i", str(hosts_yml)]
        for source in layer:
            argv += ["-i", source]
        assert cli.main(argv) == 0, (layer, capsys.readouterr().err)
        plans = json.loads(capsys.readouterr().out)
        assert plans, layer
        for host, host_plan in plans.items():
            assert validate(host_plan) == [], (host, layer)
