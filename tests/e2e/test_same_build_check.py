"""The same-vLLM-build check deploy.yml runs between prepare and start, on real Ansible.

The test fleets share one docker engine (so images never differ between test hosts): the
check's task file runs here against two local hosts whose runtime identities are set the
way the docker / uv roles' prepare step publishes them.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from helpers import ROOT

pytestmark = pytest.mark.e2e

PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.set_fact:
        vllm_fleet_plan: {deployment: dsv3, instance_name: i0, runtime: docker, instance_hosts: [node-a, node-b]}
        vllm_fleet_docker_identity: "{{ identity }}"
    - ansible.builtin.include_role:
        name: vllm_fleet_preflight
        tasks_from: same_build
"""


def run(tmp_path, identities):
    inventory = {"all": {"hosts": {h: {"ansible_connection": "local", "ansible_python_interpreter": "python3",
                                       "identity": i} for h, i in identities.items()}}}
    (tmp_path / "inv.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(PLAY)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(["ansible-playbook", "-i", str(tmp_path / "inv.json"), str(tmp_path / "play.yml")],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)


def test_same_build_passes(tmp_path):
    proc = run(tmp_path, {"node-a": "sha256:aaa", "node-b": "sha256:aaa"})
    assert proc.returncode == 0, proc.stdout


def test_different_builds_fail_both_nodes_naming_each_build(tmp_path):
    proc = run(tmp_path, {"node-a": "sha256:aaa", "node-b": "sha256:bbb"})
    assert proc.returncode != 0, proc.stdout
    assert "node-a: the nodes of instance i0 of dsv3 would run different vLLM builds" in proc.stdout
    assert "sha256:aaa" in proc.stdout and "sha256:bbb" in proc.stdout
    assert "failed=1" in proc.stdout.split("PLAY RECAP")[1].split("node-b")[1].splitlines()[0]
