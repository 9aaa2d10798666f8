"""The health gate's action plugin on real Ansible (ansible-playbook, local connection).

It runs the module in windows and prints one progress line per window while /health is not
200 yet; the overall bound is the task's timeout whatever the window; the result is the
module's, with polls summed over the windows. The server is a real HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ansible")

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "tests" / "unit" / "plugins" / "modules"))
from test_vllm_fleet_health import API_KEY, Server  # noqa: E402

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Gate
      vllm_fleet_health:
        url: "{{ url }}"
        served_model_name: minilm
        request: embedding
        timeout: "{{ timeout }}"
        interval: 0.3
        window: "{{ window }}"
        api_key: "{{ key }}"
      register: gate
      ignore_errors: true
    - name: Show
      ansible.builtin.debug:
        msg: "RESULT {{ gate | to_json }}"
"""


def ansible_playbook(tmp_path, **extra_vars):
    book = tmp_path / "gate.yml"
    book.write_text(PLAYBOOK)
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\nlocalhost_warning = False\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(cfg), ANSIBLE_LIBRARY=str(ROOT / "plugins" / "modules"),
               ANSIBLE_MODULE_UTILS=str(ROOT / "plugins" / "module_utils"),
               ANSIBLE_ACTION_PLUGINS=str(ROOT / "plugins" / "action"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_HOME=str(tmp_path / "home"))
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-c", "local",
            str(book), "-e", json.dumps(extra_vars)]
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    seconds = time.monotonic() - start
    line = next((l for l in proc.stdout.splitlines() if '"msg": "RESULT ' in l or "msg: RESULT " in l), None)
    assert line, proc.stdout + proc.stderr
    result = json.loads(line.split("RESULT ", 1)[1].rstrip('"').replace('\\"', '"'))
    return result, proc.stderr, proc.stdout, seconds


def test_progress_line_per_window_then_success(tmp_path):
    srv = Server(after_polls=10)   # 0.3 s polls in 1 s windows: at least 3 windows
    try:
        result, err, out, _ = ansible_playbook(tmp_path, url=srv.url, timeout=60, window=1, key=API_KEY)
    finally:
        srv.close()
    assert not result.get("failed"), result
    progress = [l for l in err.splitlines() if "waiting " in l and f"of 60 for {srv.url}/health" in l]
    assert len(progress) >= 2, err
    assert progress[0].startswith(f"[localhost] {srv.url}: waiting ") and "(last answer: HTTP 503)" in progress[0]
    assert result["windows"] == len(progress) + 1
    # the whole wait: every earlier window (1 s each) counts
    assert result["health_seconds"] >= result["windows"] - 1 and result["waiting"] is False
    assert result["polls"] == 11   # summed over the windows: 10 answered 503, then 200
    assert result["response"] == {"endpoint": "/v1/embeddings", "dimension": 384}
    assert API_KEY not in out + err


def test_overall_timeout_holds_across_windows(tmp_path):
    srv = Server(healthy_after=600)
    try:
        result, err, _, seconds = ansible_playbook(tmp_path, url=srv.url, timeout=4, window=1, key=API_KEY)
    finally:
        srv.close()
    assert result["failed"] is True
    assert f"{srv.url}/health did not answer 200 within 4 s (last answer: HTTP 503)" in result["msg"]
    assert 3 <= result["windows"] <= 5
    assert seconds < 30
