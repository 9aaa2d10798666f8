"""The e2e suite's module order (tests/e2e/conftest.py MODULE_COST): every module has a cost,
so none is left to the end of a parallel run by accident, and the sort puts the dearest first
while keeping each module's tests together and in their own order."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

E2E = Path(__file__).resolve().parents[2] / "e2e"


def _conftest():
    """tests/e2e/conftest.py, loaded by path; the sys.path entries it adds are taken back."""
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location("e2e_conftest", E2E / "conftest.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path[:] = saved


def test_every_e2e_module_has_a_cost():
    modules = {p.name for p in E2E.glob("test_*.py")}
    costs = _conftest().MODULE_COST
    assert modules - set(costs) == set(), "add these modules to MODULE_COST in tests/e2e/conftest.py"
    assert set(costs) - modules == set(), "MODULE_COST names modules that no longer exist"


def test_modules_sorted_dearest_first_and_kept_whole():
    conftest = _conftest()
    names = ["test_same_build_check.py", "test_rolling_update.py", "test_demo.py"]
    items = [SimpleNamespace(path=E2E / name, nodeid=f"{name}::t{i}") for name in names for i in range(3)]
    conftest.pytest_collection_modifyitems(items)
    assert [i.nodeid for i in items] == [f"{n}::t{i}" for n in
                                         ("test_rolling_update.py", "test_demo.py", "test_same_build_check.py")
                                         for i in range(3)]
