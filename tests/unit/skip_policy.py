"""pytest plugin: with ``--fail-on-skip``, a skipped test fails the run unless it was skipped for
a platform reason.

A platform reason is one this machine cannot satisfy from the repository, and the skip says
so: its reason starts with ``platform:`` (e.g. ``platform: no ../shared/conformance/recipes
beside the checkout``). Every other skip -- ``pytest.importorskip`` of a package the session
should have installed, a forgotten ``skip`` marker -- is listed and makes the exit status 1.
Without the option, skips are only listed with their reasons. The ``unit`` nox session passes
``--fail-on-skip``; tests/unit/conftest.py loads this plugin.
"""

from __future__ import annotations

import pytest

PLATFORM_PREFIX = "platform:"


def pytest_addoption(parser):
    parser.addoption("--fail-on-skip", action="store_true", default=False,
                     help=f"fail the run when a test is skipped for a reason not starting with '{PLATFORM_PREFIX}'")


def pytest_configure(config):
    config.pluginmanager.register(SkipPolicy(config), "vllm_fleet_skip_policy")


def _reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason


class SkipPolicy:
    def __init__(self, config):
        self.config = config
        self.strict = config.getoption("--fail-on-skip")
        self.skips: list[tuple[str, str]] = []

    def _record(self, report) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skips.append((report.nodeid, _reason(report)))

    def pytest_collectreport(self, report):
        # module-level skips (pytest.importorskip at import time) are collection reports
        self._record(report)

    def pytest_runtest_logreport(self, report):
        self._record(report)

    def bad(self):
        return [(node, reason) for node, reason in self.skips if not reason.strip().startswith(PLATFORM_PREFIX)]

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session, exitstatus):
        if self.strict and self.bad() and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if not self.skips:
            return
        bad = self.bad()
        terminalreporter.section("skipped tests and their reasons")
        for node, reason in self.skips:
            tag = "platform" if (node, reason) not in bad else ("NOT ALLOWED" if self.strict else "skipped")
            terminalreporter.write_line(f"{tag:11s} {node}: {reason}")
        if bad and self.strict:
            terminalreporter.write_line(
                f"{len(bad)} test(s) skipped without a '{PLATFORM_PREFIX}' reason: the run fails "
                f"(--fail-on-skip; install what they import, or fix the skip)")
