# -*- coding: utf-8 -*-
"""Aggregate callback for tests/benchmarks/bench_deploy.py: per-task and per-host timings.

Enabled only by the benchmark (ANSIBLE_CALLBACK_PLUGINS=tests/benchmarks/callback_plugins,
ANSIBLE_CALLBACKS_ENABLED=bench_deploy_timing); writes one JSON document to the file named by
$BENCH_DEPLOY_TIMING at the end of the run:

  {"start": t0, "end": t1,
   "tasks": [{"name", "play", "start", "end",             # controller clock (time.time())
              "hosts": {host: {"status", "changed", "seconds"}}}, ...]}

`end` of a task is the start of the next task (or the end of the run): with the linear
strategy that is the task's wall time across all hosts. `seconds` of a host is its worker's
time from v2_runner_on_start to its result (fork, templating, connection, module, result).
"""
from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: bench_deploy_timing
type: aggregate
short_description: per-task and per-host timings for the deploy benchmark (JSON file)
description: Writes task and host timings to the file named by $BENCH_DEPLOY_TIMING.
requirements: [enable in the callbacks_enabled setting]
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_deploy_timing"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._t0 = time.time()
        self._tasks = []
        self._by_uuid = {}
        self._running = {}
        self._play = None

    def v2_playbook_on_play_start(self, play):
        self._play = play.get_name()
        self._close(time.time())

    def _close(self, now):
        if self._tasks and self._tasks[-1]["end"] is None:
            self._tasks[-1]["end"] = now

    def _task_start(self, task):
        now = time.time()
        self._close(now)
        entry = {"name": task.get_name(), "play": self._play, "action": task.action,
                 "start": now, "end": None, "hosts": {}}
        self._tasks.append(entry)
        self._by_uuid[task._uuid] = entry

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task_start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._task_start(task)

    def v2_runner_on_start(self, host, task):
        self._running[(host.get_name(), task._uuid)] = time.time()

    def _result(self, result, status):
        now = time.time()
        host, task = result._host.get_name(), result._task
        entry = self._by_uuid.get(task._uuid)
        if entry is None:                         # e.g. a task of an include seen first here
            self._task_start(task)
            entry = self._by_uuid[task._uuid]
        started = self._running.pop((host, task._uuid), None)
        entry["hosts"][host] = {"status": status, "changed": bool(result._result.get("changed")),
                                "seconds": round(now - started, 4) if started else None}

    def v2_runner_on_ok(self, result):
        self._result(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._result(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._result(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        now = time.time()
        self._close(now)
        path = os.environ.get("BENCH_DEPLOY_TIMING")
        if path:
            with open(path, "w") as fh:
                json.dump({"start": self._t0, "end": now, "tasks": self._tasks}, fh)
