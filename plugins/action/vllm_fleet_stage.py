# -*- coding: utf-8 -*-
"""Controller side of ``vllm_fleet_stage``: a download prints progress lines while it runs.

A module cannot print while it runs, and a large model's download takes minutes (56 GB at
500 MB/s: about 2 minutes; 650 GB: over 20). When the module downloads on the controller itself
(``state: download``, delegated to a host reached with the ``local`` connection), this action
plugin watches the download directory from a thread of its own and prints one line every
``progress`` seconds (default 20; the module's other states and remote hosts run as they are),
at default verbosity, on stderr like the health gate's lines:

    [localhost] deepseek-ai/DeepSeek-V3@main: downloading, 38.2 GB so far in 80 s (477.5 MB/s)

The figure is what is on disk under the download directory (huggingface_hub's partial files
included), so a resumed download starts from what it already had. The result is the module's.
"""

from __future__ import annotations

import os
import threading
import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

DEFAULT_PROGRESS = 20.0


def bytes_under(root: str) -> int:
    """Bytes of the regular files under ``root`` (links not followed; missing: 0)."""
    total = 0
    for base, _dirs, files in os.walk(root):
        for name in files:
            try:
                st = os.lstat(os.path.join(base, name))
            except OSError:
                continue
            if not os.path.islink(os.path.join(base, name)):
                total += st.st_size
    return total


def human(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1000.0
    return f"{n:.1f} TB"


def progress_line(host: str, label: str, got: int, start_bytes: int, elapsed: float) -> str:
    rate = (got - start_bytes) / elapsed if elapsed > 0 else 0.0
    line = f"[{host}] {label}: downloading, {human(got)} so far in {elapsed:.0f} s ({human(rate)}/s)"
    if start_bytes:
        line += f"; {human(start_bytes)} were there before (resumed)"
    return line


class Watch:
    """Prints a progress line every ``interval`` seconds until stopped (a daemon thread)."""

    def __init__(self, host: str, label: str, root: str, interval: float):
        self.host, self.label, self.root, self.interval = host, label, root, interval
        self.done = threading.Event()
        self.start_bytes = bytes_under(root)
        self.started = time.monotonic()
        self.lines = 0
        self.thread = threading.Thread(target=self._run, name="vllm_fleet_stage progress", daemon=True)

    def _run(self) -> None:
        while not self.done.wait(self.interval):
            display.display(progress_line(self.host, self.label, bytes_under(self.root), self.start_bytes,
                                          time.monotonic() - self.started), stderr=True)
            self.lines += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(timeout=10)
        return False


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp  # tmp no longer has any effect
        args = dict(self._task.args)
        interval = float(args.pop("progress", None) or DEFAULT_PROGRESS)
        local = getattr(self._connection, "transport", None) == "local"
        if args.get("state") == "download" and local and args.get("path"):
            host = self._task.delegate_to or (task_vars or {}).get("inventory_hostname", "?")
            label = f"{args.get('model', '?')}@{args.get('revision') or 'main'}"
            with Watch(host, label, str(args["path"]), interval) as watch:
                out = self._execute_module(module_name="vllm_fleet_stage", module_args=args, task_vars=task_vars)
            out["progress_lines"] = watch.lines
        else:
            out = self._execute_module(module_name="vllm_fleet_stage", module_args=args, task_vars=task_vars)
        self._remove_tmp_path(self._connection._shell.tmpdir)
        result.update(out)
        return result
