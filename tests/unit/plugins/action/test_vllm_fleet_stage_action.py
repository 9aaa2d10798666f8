"""plugins/action/vllm_fleet_stage.py: a download on the controller prints progress lines while it
runs (real ansible-playbook, real huggingface_hub, the testbed's local Hub mirror sending at a
limited rate so the download lasts a few seconds); other states print none."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ansible")
pytest.importorskip("huggingface_hub")

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from helpers import hub_mirror  # noqa: E402

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Stage
      vllm_fleet_stage:
        state: "{{ state }}"
        path: "{{ dest }}"
        manifest_path: "{{ dest }}.manifest.json"
        model: org/m
        revision: "{{ revision }}"
        progress: 1
        attempts: 1
      register: got
    - name: Show
      ansible.builtin.debug:
        msg: "RESULT {{ got | to_json }}"
"""
LINE = re.compile(r"^\[localhost\] org/m@(\w+): downloading, ([0-9.]+) (B|kB|MB) so far in (\d+) s \(([0-9.]+) (B|kB|MB)/s\)$")


def run_playbook(tmp_path, endpoint, **extra):
    book = tmp_path / "stage.yml"
    book.write_text(PLAYBOOK)
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\nlocalhost_warning = False\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(cfg), ANSIBLE_LIBRARY=str(ROOT / "plugins" / "modules"),
               ANSIBLE_MODULE_UTILS=str(ROOT / "plugins" / "module_utils"),
               ANSIBLE_ACTION_PLUGINS=str(ROOT / "plugins" / "action"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_HOME=str(tmp_path / "home"), HF_ENDPOINT=endpoint, HF_HUB_DISABLE_TELEMETRY="1",
               HF_HOME=str(tmp_path / "hf-home"))
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-c", "local",
            str(book), "-e", json.dumps(extra)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    line = next((l for l in proc.stdout.splitlines() if '"msg": "RESULT ' in l or "msg: RESULT " in l), None)
    assert proc.returncode == 0 and line, proc.stdout + proc.stderr
    return json.loads(line.split("RESULT ", 1)[1].rstrip('"').replace('\\"', '"')), proc.stderr


def test_a_download_prints_progress_lines_then_its_result(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "config.json").write_text("{}\n")
    # 24 MiB at 8 MiB/s: about 3 s; huggingface_hub writes its partial file 10 MiB at a time
    (repo / "weights.bin").write_bytes(os.urandom(24 << 20))
    with hub_mirror([("org/m", repo)], tmp_path, rate_mib=8) as hub:
        commit = hub["commit"]["org/m"]
        result, err = run_playbook(tmp_path, hub["endpoint"], state="download", dest=str(tmp_path / "dest"),
                                   revision=commit)
    lines = [LINE.match(l) for l in err.splitlines() if "downloading," in l]
    assert len(lines) >= 2 and all(lines), err
    assert result["progress_lines"] == len(lines) and result["commit"] == commit and result["files"] == 2
    seconds = [int(m.group(4)) for m in lines]
    assert seconds == sorted(seconds) and seconds[-1] >= 1, err
    scale = {"B": 1, "kB": 1e3, "MB": 1e6}
    got = [float(m.group(2)) * scale[m.group(3)] for m in lines]
    assert got == sorted(got) and got[-1] >= 10 << 20, err       # the partial file grew on disk
    assert (tmp_path / "dest" / "weights.bin").read_bytes() == (repo / "weights.bin").read_bytes()


def test_other_states_print_no_progress(tmp_path):
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "a.bin").write_bytes(b"x" * 10)
    result, err = run_playbook(tmp_path, "http://127.0.0.1:9", state="manifest", dest=str(tmp_path / "dest"), revision="main")
    assert "downloading," not in err and "progress_lines" not in result and result["files"] == 1
