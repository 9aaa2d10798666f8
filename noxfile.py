"""Test and benchmark sessions for vllm-fleet.

`python3 -m nox` runs the default sessions (what CI runs through .ci/run):
  unit         pytest over tests/unit (engine, validator, CLI), no ../shared needed
  conformance  every record of ../shared/conformance/cases.jsonl.gz through the
               render-batch code path; 100 % exact agreement required
Other sessions:
  bench        corpus render benchmark: wall time and peak memory (prints figures)
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
SHARED = ROOT.parent / "shared"
nox.options.sessions = ["unit", "conformance"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True


def _install(session: nox.Session) -> None:
    session.install("-e", ".", "pytest>=8")


@nox.session(python=False if os.environ.get("VLLM_FLEET_NOX_NO_VENV") else None)
def unit(session: nox.Session) -> None:
    """Unit tests (mirror plugins/): engine rules, validator, loader, CLI."""
    if session.venv_backend != "none":
        _install(session)
    session.run("python", "-m", "pytest", "tests/unit", "-q", "-p", "no:cacheprovider",
                *session.posargs)


@nox.session
def conformance(session: nox.Session) -> None:
    """Render the whole upstream golden corpus; any mismatch fails."""
    cases = SHARED / "conformance" / "cases.jsonl.gz"
    if not cases.exists():
        session.error(f"conformance corpus not found at {cases}")
    _install(session)
    session.run("python", "tests/conformance/run_corpus.py", "--cases", str(cases),
                "--recipes", str(SHARED / "conformance" / "recipes"), *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Corpus render benchmark (target: under 20 s on 2 cores)."""
    _install(session)
    session.run("python", "tests/benchmarks/bench_render.py", "--cli", *session.posargs)
