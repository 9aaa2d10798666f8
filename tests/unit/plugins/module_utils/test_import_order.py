"""Every engine module imports on its own, first, in a fresh interpreter: an import cycle
(contract -> ... -> planargv -> ... -> contract) only shows when the cycle's entry is imported
first, which the test session's own import order can hide."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[4] / "plugins" / "module_utils" / "vllm_fleet"


@pytest.mark.parametrize("name", sorted(p.stem for p in ENGINE.glob("*.py") if p.stem not in ("__init__", "cli")))
def test_engine_module_imports_first(name):
    got = subprocess.run([sys.executable, "-c", f"import vllm_fleet.{name}"], capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr[-2000:]
