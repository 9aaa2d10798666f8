# -*- coding: utf-8 -*-
"""Controller side of the health gate: the wait in windows, with a progress line per window.

A module cannot print while it runs; this action plugin runs the ``vllm_fleet_health`` module
(plugins/modules/vllm_fleet_health.py, which carries the documentation) in windows of
``window`` seconds (default 20), so a long wait for ``/health`` prints one line per window at
default verbosity, on stderr (stdout stays the stdout callback's, e.g. JSON):

    [cpu-docker] vllm-fleet-minilm-docker: waiting 40 s of 900 for http://127.0.0.1:8000/health
        (last answer: connection refused), running; log: INFO ... Starting vLLM API server

The overall bound stays the module's ``timeout``: each call gets the seconds already waited
(measured here, on the controller's monotonic clock, SSH time included) and fails itself, with
the log tail, when the bound is reached. The result is the module's last one, with ``polls``
summed over the calls and ``windows`` (how many calls it took) added.
"""

from __future__ import annotations

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

DEFAULT_WINDOW = 20.0   # < 30 s between two progress lines, SSH round trip included


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp  # tmp no longer has any effect
        args = dict(self._task.args)
        window = float(args.get("window") or DEFAULT_WINDOW)
        timeout = float(args.get("timeout") or 900)
        args["window"] = window
        label = args.get("process_name") or args.get("url", "?")
        host = (task_vars or {}).get("inventory_hostname", "?")
        start = time.monotonic()
        polls = windows = 0
        while True:
            args["waited"] = round(time.monotonic() - start, 1)
            out = self._execute_module(module_name="vllm_fleet_health", module_args=args,
                                       task_vars=task_vars)
            windows += 1
            polls += int(out.get("polls") or 0)
            if not out.get("waiting") or out.get("failed"):
                break
            display.display(progress_line(host, label, time.monotonic() - start, timeout, out), stderr=True)
        self._remove_tmp_path(self._connection._shell.tmpdir)
        out["polls"] = polls
        out["windows"] = windows
        result.update(out)
        return result


def progress_line(host, label, elapsed, timeout, out):
    """One line: who, how long of the bound, what is awaited, the last answer, state, log line."""
    line = (f"[{host}] {label}: waiting {elapsed:.0f} s of {timeout:.0f} for {out.get('awaiting', '?')} "
            f"(last answer: {_short(out.get('last_answer'), 80)})")
    if out.get("state") and out["state"] != "not watched":
        line += f", {out['state']}"
    if out.get("log_line"):
        line += f"; log: {_short(out['log_line'], 160)}"
    return line


def _short(text, limit):
    text = " ".join(str(text or "-").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
