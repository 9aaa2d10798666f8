"""deploy.yml reads a host's record once and writes it once: walked statically from
playbooks/deploy.yml through every playbook and task file it imports or includes (the roles
never touch a record: checked too), counting the tasks that call the record modules."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOKS = ROOT / "playbooks"
FOLLOW = ("ansible.builtin.import_playbook", "ansible.builtin.import_tasks", "ansible.builtin.include_tasks")
RECORD_MODULES = ("vllm_fleet_state", "vllm_fleet_revision")


def _tasks(items):
    for item in items or []:
        if not isinstance(item, dict):
            continue
        yield item
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from _tasks(item.get(key))


def _walk(path: Path, seen: set):
    """(file, task) of every task reachable from ``path``."""
    if path in seen:
        return
    seen.add(path)
    for task in _tasks(yaml.safe_load(path.read_text()) or []):
        yield path, task
        for key in FOLLOW:
            target = task.get(key)
            if isinstance(target, str) and "{{" not in target:
                base = PLAYBOOKS if key.endswith("import_playbook") or target.startswith("tasks/") else path.parent
                yield from _walk((base / target).resolve(), seen)


def _record_calls(entry: str):
    calls = []
    for path, task in _walk(PLAYBOOKS / entry, set()):
        for module in RECORD_MODULES:
            if module in task:
                calls.append((path.name, module, (task[module] or {}).get("state", "read")))
    return calls


def test_deploy_reads_each_hosts_record_once_and_writes_it_once():
    calls = _record_calls("deploy.yml")
    files = {name for name, _, _ in calls}
    assert {"_plan.yml", "_stage.yml", "_deploy.yml"} <= {p.name for p, _ in _walk(PLAYBOOKS / "deploy.yml", set())}
    reads = [c for c in calls if c[1] == "vllm_fleet_state" or c[2] == "read"]
    writes = [c for c in calls if c[1] == "vllm_fleet_revision" and c[2] == "recorded"]
    assert reads == [("_deploy.yml", "vllm_fleet_state", "read")], calls
    assert writes == [("_deploy.yml", "vllm_fleet_revision", "recorded")], calls
    assert files == {"_deploy.yml"}, calls


def test_a_role_reads_a_record_only_when_the_run_did_not_hand_it_one():
    """The preflight's port check may need the revision the host runs (an engine the update
    retires may hold a planned port): deploy.yml hands it the run's one read; standalone (Molecule)
    it reads the record itself. No other role touches a record."""
    found = []
    for path in sorted((ROOT / "roles").glob("*/tasks/*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            if any(m in task for m in RECORD_MODULES):
                found.append((path.relative_to(ROOT).as_posix(), task.get("when")))
    assert [f for f, _ in found] == ["roles/vllm_fleet_preflight/tasks/ports_taken.yml"], found
    assert "vllm_fleet_preflight_records is not defined" in found[0][1]
    preflight = [t for _, t in _walk(PLAYBOOKS / "_deploy.yml", set())
                 if (t.get("ansible.builtin.include_role") or {}).get("name") == "vllm_fleet_preflight"
                 and "tasks_from" not in t["ansible.builtin.include_role"]]
    assert len(preflight) == 1 and preflight[0]["vars"]["vllm_fleet_preflight_records"] == "{{ vllm_fleet_deploy_state }}"
