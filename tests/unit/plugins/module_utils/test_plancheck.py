"""The plan's shape is checked once, in Python, against the plan's own types (plancheck.py over
hostplan.py), and every role that reads the plan runs that check in its argument validation:
no role's argument_specs carries a generated copy of the plan's spec."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vllm_fleet import plancheck
from vllm_fleet.hostplan import HostPlan, PlannedProcess

ROOT = Path(__file__).resolve().parents[4]
ROLES = ROOT / "roles"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """The example inventory's H200 cluster as `vllm-fleet plan` prints it (what Molecule hands the roles)."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    out = subprocess.run([sys.executable, "-m", "vllm_fleet.cli", "plan", "-i", str(ROOT / "inventories" / "example"),
                          "--limit", "h200_cluster", "--hardware", "h200"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_the_planners_plans_pass(plans):
    assert plans and all(plancheck.problems(p) == [] for p in plans.values())


def test_each_wrong_field_is_named(plans):
    plan = copy.deepcopy(next(iter(plans.values())))
    plan["processes"][0]["argv"] = "vllm serve m"          # a shell string, not argv
    plan["processes"][0]["port"] = "8000"
    del plan["processes"][0]["name"]
    del plan["layout"]
    plan["gpu_count"] = True                                # bool is not an int
    plan["vram_gb_per_gpu"] = 141                           # an int is a number
    plan["misspelt"] = 1
    assert plancheck.problems(plan) == [
        "vllm_fleet_plan.gpu_count: expected an integer, got bool True",
        "vllm_fleet_plan.processes[0].name: missing",
        "vllm_fleet_plan.processes[0].argv: expected a list, got str 'vllm serve m'",
        "vllm_fleet_plan.processes[0].port: expected an integer, got str '8000'",
        "vllm_fleet_plan.layout: missing",
        "vllm_fleet_plan: unknown key(s) misspelt (a plan of another vllm-fleet version?)",
    ]
    assert plancheck.problems("not a plan") == ["vllm_fleet_plan: expected a mapping, got str 'not a plan'"]
    # Optional fields may be None or left out
    fine = copy.deepcopy(next(iter(plans.values())))
    fine["drain"] = None
    fine.pop("gpus_idle", None)
    fine["processes"][0].pop("gpus", None)
    assert plancheck.problems(fine) == []


def test_every_annotation_of_the_plan_is_checked():
    """A field with an annotation the check does not know fails here, not at a role."""
    empty = {name: None for name in list(plancheck._HOST)}
    plancheck.problems(empty)
    plancheck.problems(dict(empty, processes=[{name: None for name in plancheck._PROCESS}]))
    assert set(plancheck._HOST) == set(HostPlan.__dataclass_fields__)
    assert set(plancheck._PROCESS) == set(PlannedProcess.__dataclass_fields__)


def _specs():
    for path in sorted(ROLES.glob("*/meta/argument_specs.yml")):
        yield path.parts[-3], yaml.safe_load(path.read_text())["argument_specs"]


def test_no_role_spec_carries_the_plans_fields_and_each_runs_the_check():
    declaring = set()
    for role, specs in _specs():
        for entry, spec in specs.items():
            options = spec.get("options") or {}
            if "vllm_fleet_plan" not in options:
                continue
            declaring.add(role)
            assert options["vllm_fleet_plan"] == {"type": "dict", "required": True,
                                                  "description": options["vllm_fleet_plan"]["description"]}, \
                f"{role} {entry}: vllm_fleet_plan is declared as a dict, its fields are hostplan.py's"
            assert options.get(f"{role}_plan_checked", {}).get("type") == "bool", \
                f"{role} {entry}: declares vllm_fleet_plan without {role}_plan_checked (the check)"
    assert len(declaring) >= 7
    for role in declaring:
        values = yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text())
        assert values[f"{role}_plan_checked"] == "{{ vllm_fleet_plan | vllm_fleet_checked_plan }}", role


PLAY = """\
- name: Hand a role a plan
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: The role, with nothing to gate
      ansible.builtin.include_role:
        name: vllm_fleet_health
      vars:
        vllm_fleet_plan: %s
        vllm_fleet_processes: []
    - name: After the role
      ansible.builtin.debug:
        msg: reached
"""


def _run(tmp_path, plan):
    (tmp_path / "play.yml").write_text(PLAY % json.dumps(plan))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_DEPRECATION_WARNINGS="0",
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "play.yml")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


def test_a_role_refuses_a_broken_plan_naming_the_field_and_takes_a_good_one(plans, tmp_path):
    good = next(iter(plans.values()))
    ran = _run(tmp_path, good)
    assert ran.returncode == 0 and "reached" in ran.stdout, ran.stdout[-3000:]
    broken = copy.deepcopy(good)
    broken["processes"][0]["argv"] = "vllm serve m"
    del broken["layout"]
    refused = _run(tmp_path, broken)
    assert refused.returncode != 0 and "reached" not in refused.stdout
    text = " ".join(refused.stdout.split())
    assert "vllm_fleet_plan is not a host plan of this vllm-fleet" in text, refused.stdout[-3000:]
    assert "vllm_fleet_plan.processes[0].argv: expected a list, got str" in text and "vllm_fleet_plan.layout: missing" in text
    assert "Traceback" not in refused.stdout + refused.stderr


def test_the_playbooks_check_a_plan_once_where_they_take_it():
    """The bundle's playbooks check the plan where they take it (the plan action's; a recorded
    one rollback.yml goes back to) and include the roles without their argument validation: one
    check per host and run instead of one per role included. A role used on its own (Molecule,
    an operator's playbook; the test above) still checks it."""
    books = sorted((ROOT / "playbooks").rglob("*.yml"))
    includes, takes = 0, []
    for path in books:
        def walk(node):
            nonlocal includes
            if isinstance(node, dict):
                for key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
                    if key in node:
                        includes += 1
                        assert node[key].get("rolespec_validate") is False, (path.name, node.get("name"))
                facts = node.get("ansible.builtin.set_fact")
                if isinstance(facts, dict) and "vllm_fleet_plan" in facts:
                    takes.append((path.name, node.get("name"), facts["vllm_fleet_plan"]))
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)
        walk(yaml.safe_load(path.read_text()))
    assert includes >= 20 and sorted(name for name, _, _ in takes) == ["_plan.yml", "rollback.yml"], (includes, takes)
    for name, task, expr in takes:
        assert str(expr).rstrip().endswith("| vllm_fleet_checked_plan(as_plan=true) }}"), (name, task, expr)


def test_the_check_where_a_plan_is_taken_hands_it_on_or_names_each_wrong_field(plans):
    sys.path.insert(0, str(ROOT / "plugins" / "filter"))
    try:
        from vllm_fleet_checked_plan import checked_plan
    finally:
        sys.path.pop(0)
    from ansible.errors import AnsibleFilterError

    good = next(iter(plans.values()))
    assert checked_plan(good, as_plan=True) is good and checked_plan(good) is True
    broken = copy.deepcopy(good)
    del broken["layout"]
    with pytest.raises(AnsibleFilterError, match=r"vllm_fleet_plan\.layout: missing"):
        checked_plan(broken, as_plan=True)
