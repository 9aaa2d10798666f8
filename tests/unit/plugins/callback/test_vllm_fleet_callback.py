"""The project's stdout callback on real Ansible: default output plus heartbeat lines."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ansible")

ROOT = Path(__file__).resolve().parents[4]

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Quick task
      ansible.builtin.debug:
        msg: quick
    - name: Slow task
      ansible.builtin.command: sleep {{ sleep_s }}
      changed_when: false
"""


def run(tmp_path, heartbeat):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts.ini").write_text("h1 ansible_connection=local sleep_s=7\n"
                                        "h2 ansible_connection=local sleep_s=3\n")
    # the project's ansible.cfg settings that matter here: the callback and where it lives
    (tmp_path / "ansible.cfg").write_text(
        f"[defaults]\nstdout_callback = vllm_fleet\ncallback_plugins = {ROOT / 'plugins' / 'callback'}\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, VLLM_FLEET_HEARTBEAT=str(heartbeat),
               ANSIBLE_HOME=str(tmp_path / "home"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "hosts.ini", "play.yml"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_heartbeat_names_the_task_the_hosts_still_on_it_and_the_time(tmp_path):
    out = run(tmp_path, heartbeat=2)
    beats = re.findall(r"^  \.\.\. Slow task: still running on (.+) \((\d+) s\)$", out, re.M)
    assert len(beats) >= 2, out
    assert beats[0][0] in ("h1, h2", "h1")
    assert beats[-1][0] == "h1"            # h2 finished after 3 s
    assert all(int(s) >= 2 for _, s in beats)
    assert [int(s) for _, s in beats] == sorted(int(s) for _, s in beats)
    assert "Quick task: still running" not in out
    # the default callback's output is all there
    assert "TASK [Slow task]" in out and re.search(r"^h1\s+: ok=2\s+changed=0", out, re.M), out


def test_heartbeat_zero_is_the_default_output(tmp_path):
    out = run(tmp_path, heartbeat=0)
    assert "still running" not in out and "PLAY RECAP" in out


DOCUMENT_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Some task
      ansible.builtin.debug:
        msg: a line Ansible prints
    - name: Print the document
      ansible.builtin.debug:
        var: vllm_fleet_document
      run_once: true
      vars:
        vllm_fleet_document: {serving: false, rows: [{host: h1, state: running}]}
    - name: Fail after it
      ansible.builtin.fail:
        msg: 1 planned process(es) not serving
      run_once: true
"""


def run_document(tmp_path, *extra):
    (tmp_path / "play.yml").write_text(DOCUMENT_PLAYBOOK)
    (tmp_path / "hosts.ini").write_text("h1 ansible_connection=local\n")
    (tmp_path / "ansible.cfg").write_text(
        f"[defaults]\nstdout_callback = vllm_fleet\ncallback_plugins = {ROOT / 'plugins' / 'callback'}\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_HOME=str(tmp_path / "home"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "hosts.ini", "play.yml",
                           *extra], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)


def test_json_format_puts_the_document_alone_on_stdout_and_the_rest_on_stderr(tmp_path):
    import json
    proc = run_document(tmp_path, "-e", '{"vllm_fleet_status_format": "json"}')
    assert proc.returncode == 2, proc.stdout + proc.stderr       # the play's own failure stays its exit status
    assert json.loads(proc.stdout) == {"serving": False, "rows": [{"host": "h1", "state": "running"}]}, proc.stdout
    assert proc.stdout.count("\n") == 1
    assert "a line Ansible prints" in proc.stderr and "PLAY RECAP" in proc.stderr
    assert "not serving" in proc.stderr and "is on stdout" in proc.stderr


def test_without_json_format_the_document_is_one_json_line_among_the_usual_output(tmp_path):
    import json
    proc = run_document(tmp_path)
    assert proc.returncode == 2
    doc = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [json.loads(line) for line in doc] == [{"serving": False, "rows": [{"host": "h1", "state": "running"}]}]
    assert "PLAY RECAP" in proc.stdout
