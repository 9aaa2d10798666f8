"""Every ``-e`` the README and the docs/ pages show is run through real ansible-playbook and the
plan step's contract check, and what the run records is what they say (issue 26: the README's
own example ``-e vllm_fleet_change_note="max-model-len 4096"`` recorded "max-model-len").

Commands come from the pages' code blocks (``ansible-playbook ...`` lines with their
continuations) and from inline code spans ``-e NAME=VALUE``; each is split as a shell splits
it. A ``key=value`` whose value holds whitespace is what Ansible cuts at the first space: the
plan step must refuse it, naming ``-e`` and the variable. Every other ``-e`` must be accepted,
and each run option it sets must be recorded with the value shown.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_vllm_fleet_plan_contract import ANSIBLE_PLAYBOOK, ERNIE, ROOT, _assert_no_crash, _play  # noqa: E402

pytestmark = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not found")

PLAYBOOK = """\
- name: The plan step's contract check, then what the run records as run options
  hosts: all
  gather_facts: false
  tasks:
    - name: Check every host's vllm_fleet_* variables against the inventory contract
      vllm_fleet_plan:
        hosts: "{{ ansible_play_hosts_all }}"
        recipe_sources: ["%(recipes)s"]
        contract_only: true
      run_once: true
      register: checked

    - name: Show the run options
      ansible.builtin.debug:
        msg: "RUN {{ checked.run[inventory_hostname] | to_json | b64encode }}"
"""
INVENTORY = """\
all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  hosts:
    r1:
      vllm_fleet_recipe: %s
      vllm_fleet_hardware: h200
""" % ERNIE


def _extra_sets(text: str) -> List[Tuple[str, List[str]]]:
    """(where, [-e argument, ...]) for each command or inline -e span of a page."""
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("ansible-playbook") and " -e " in line:
                words = shlex.split(line)
                out.append((line, [words[i + 1] for i, w in enumerate(words) if w == "-e"]))
    for span in re.findall(r"`(-e [^`]+)`", text):
        words = shlex.split(span)
        if "..." not in span and len(words) == 2 and words[1].startswith(("vllm_fleet_", "{")):
            out.append((span, [words[1]]))
    return out


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_SETS = [set_ for page in PAGES for set_ in _extra_sets(page.read_text(encoding="utf-8"))]


def _cut_by_ansible(argument: str) -> bool:
    return argument[:1] not in "@[{" and "=" in argument and re.search(r"\s", argument.split("=", 1)[1]) is not None


def _expected(argument: str) -> Dict[str, Any]:
    if argument.startswith("{"):
        return json.loads(argument)
    key, value = argument.split("=", 1)
    return {key: value}


def test_the_readme_shows_extra_vars():
    assert len(README_SETS) >= 4, README_SETS
    assert any(_cut_by_ansible(a) for _, args in README_SETS for a in args)   # the refused form is shown too


@pytest.mark.parametrize("where, arguments", README_SETS, ids=[w[:60] for w, _ in README_SETS])
def test_readme_extra_vars_do_what_it_says(tmp_path, where, arguments):
    extra = [x for a in arguments for x in ("-e", a)]
    run = _play(tmp_path, INVENTORY, *extra, playbook=PLAYBOOK)
    _assert_no_crash(run)
    cut = [a for a in arguments if _cut_by_ansible(a)]
    if cut:
        assert run.rc != 0
        assert f"-e: {cut[0].split('=', 1)[0]}: " in run.out, run.out[-3000:]
        return
    assert run.rc == 0, run.out[-3000:]
    recorded = json.loads(base64.b64decode(re.search(r"RUN ([A-Za-z0-9+/=]+)", run.out).group(1)))
    for argument in arguments:
        for key, value in _expected(argument).items():
            name = key[len("vllm_fleet_"):]
            if name in recorded:   # a run option: recorded as shown (a bool shown as true/false)
                got = recorded[name]
                shown = str(got).lower() if isinstance(got, bool) else str(got)
                # key=value gives a string; a JSON -e its typed value (a bool written true/false)
                want = json.dumps(value) if isinstance(value, bool) else str(value)
                assert shown == want, (where, key, got)
