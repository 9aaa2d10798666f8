# -*- coding: utf-8 -*-
"""vllm-fleet's stdout callback: Ansible's default output, plus a line for long tasks."""

from __future__ import annotations

DOCUMENTATION = """
    name: vllm_fleet
    type: stdout
    short_description: default output, plus a progress line while a task runs long
    description:
      - Ansible's default stdout callback (same task lines, results and recap), plus one
        line every O(heartbeat) seconds for a task that is still running on some hosts
        (image pulls, venv installs, long module calls), with the hosts and the elapsed time,
        so a run never stays silent for long.
      - "A task result carrying C(vllm_fleet_document) (status.yml's JSON document) is printed
        as that document, one line of JSON. With C(-e vllm_fleet_status_format=json) the
        whole output goes to stderr and stdout carries the document alone (a pipe to C(jq)
        or a cron job reads it as is)."
      - The health gate (vllm_fleet_health) prints its own progress lines (what it awaits and
        the server's last log line), so it is left out.
    extends_documentation_fragment:
      - default_callback
      - result_format_callback
    requirements:
      - set as stdout callback in ansible.cfg (the project's ansible.cfg does)
    options:
      heartbeat:
        description: Seconds a task may run silently before a progress line (0 turns them off).
        type: float
        default: 25
        env:
          - name: VLLM_FLEET_HEARTBEAT
        ini:
          - section: vllm_fleet
            key: heartbeat
"""

import json
import sys
import threading
import time

from ansible.plugins.callback.default import CallbackModule as DefaultCallback

# tasks that report their own progress
SELF_REPORTING = {"vllm_fleet_health"}
# a result key whose value is printed as a JSON document, and the extra var that makes stdout
# carry that document alone
DOCUMENT_KEY = "vllm_fleet_document"
DOCUMENT_SWITCH = ("vllm_fleet_status_format", "json")


def _result_dict(result):
    """The task result's dict (ansible-core 2.19's ``result``, 2.17's ``_result``)."""
    got = getattr(result, "result", None)
    return got if isinstance(got, dict) else getattr(result, "_result", {}) or {}


def _host_task(result):
    """(host name, task) of a task result (ansible-core 2.17 and 2.19 shapes)."""
    host = getattr(result, "host", None) or getattr(result, "_host")
    task = getattr(result, "task", None) or getattr(result, "_task")
    return host.get_name(), task


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "vllm_fleet"

    def __init__(self):
        super().__init__()
        self._running = {}      # task uuid -> {"name": str, "hosts": {host: start}, "said": t}
        self._lock = threading.Lock()
        self._thread = None
        self._stop = threading.Event()
        self._stdout = None     # the real stdout, while the rest of the output goes to stderr

    # --- bookkeeping --------------------------------------------------------------------------
    def _interval(self):
        try:
            return float(self.get_option("heartbeat"))
        except (KeyError, TypeError, ValueError):
            return 25.0

    def _track(self, host, task):
        if task.action.rsplit(".", 1)[-1] in SELF_REPORTING or self._interval() <= 0:
            return
        now = time.monotonic()
        with self._lock:
            entry = self._running.setdefault(task._uuid, {"name": task.get_name().strip(), "hosts": {},
                                                          "said": now})
            entry["hosts"][host] = now
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="vllm-fleet-heartbeat", daemon=True)
            self._thread.start()

    def _untrack(self, result):
        try:
            host, task = _host_task(result)
        except AttributeError:
            return
        with self._lock:
            entry = self._running.get(task._uuid)
            if entry:
                entry["hosts"].pop(host, None)
                if not entry["hosts"]:
                    del self._running[task._uuid]

    def _forget_all(self):
        with self._lock:
            self._running.clear()

    def due_lines(self, now):
        """Progress lines due at `now` (and mark them said)."""
        interval = self._interval()
        lines = []
        with self._lock:
            for entry in self._running.values():
                if not entry["hosts"] or now - entry["said"] < interval:
                    continue
                started = min(entry["hosts"].values())
                if now - started < interval:
                    continue
                entry["said"] = now
                hosts = sorted(entry["hosts"])
                shown = ", ".join(hosts[:6]) + (f" +{len(hosts) - 6} more" if len(hosts) > 6 else "")
                lines.append(f"  ... {entry['name']}: still running on {shown} ({now - started:.0f} s)")
        return lines

    def _beat(self):
        while not self._stop.wait(1.0):
            for line in self.due_lines(time.monotonic()):
                self._display.display(line)

    # --- events -------------------------------------------------------------------------------
    def v2_playbook_on_play_start(self, play):
        self._forget_all()
        if self._stdout is None:
            try:
                extra = play.get_variable_manager().extra_vars or {}
            except AttributeError:
                extra = {}
            name, value = DOCUMENT_SWITCH
            if str(extra.get(name, "")) == value:
                # from here on Ansible's lines go to stderr; stdout gets the document alone
                self._stdout, sys.stdout = sys.stdout, sys.stderr
        super().v2_playbook_on_play_start(play)

    def v2_playbook_on_task_start(self, task, is_conditional):
        # linear strategy: a new task starts when every host finished the previous one
        self._forget_all()
        super().v2_playbook_on_task_start(task, is_conditional)

    def v2_runner_on_start(self, host, task):
        self._track(host.get_name(), task)
        super().v2_runner_on_start(host, task)

    def v2_runner_on_ok(self, result, *args, **kwargs):
        self._untrack(result)
        found = _result_dict(result)
        if DOCUMENT_KEY in found:
            text = json.dumps(found[DOCUMENT_KEY], sort_keys=True, default=str)
            out = self._stdout or sys.stdout
            out.write(text + "\n")
            out.flush()
            if self._stdout is not None:
                self._display.display(f"ok: [{_host_task(result)[0]}] => the JSON document ({len(text)} bytes) is on stdout")
            return
        super().v2_runner_on_ok(result, *args, **kwargs)

    def v2_runner_on_failed(self, result, *args, **kwargs):
        self._untrack(result)
        super().v2_runner_on_failed(result, *args, **kwargs)

    def v2_runner_on_skipped(self, result, *args, **kwargs):
        self._untrack(result)
        super().v2_runner_on_skipped(result, *args, **kwargs)

    def v2_runner_on_unreachable(self, result, *args, **kwargs):
        self._untrack(result)
        super().v2_runner_on_unreachable(result, *args, **kwargs)

    def v2_playbook_on_stats(self, stats):
        self._stop.set()
        self._forget_all()
        super().v2_playbook_on_stats(stats)
        if self._stdout is not None:
            sys.stdout, self._stdout = self._stdout, None
