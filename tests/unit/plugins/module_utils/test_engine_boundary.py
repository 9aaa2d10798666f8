"""The engine is Ansible-free (issue #21 item 5): no engine module imports Ansible, importing
the whole package loads none of it, no engine module names a role file, and no module or
plugin file is over 600 lines."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
ENGINE = ROOT / "plugins" / "module_utils" / "vllm_fleet"
MODULES = sorted(p for p in ENGINE.rglob("*.py") if "__pycache__" not in p.parts)
MAX_LINES = 600


def _name(path: Path) -> str:
    return str(path.relative_to(ENGINE))


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_engine_module_imports_ansible(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [node.lineno for node in ast.walk(tree)
             if (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "ansible" for a in node.names))
             or (isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "ansible")]
    assert not found, f"{_name(path)} imports ansible (lines {found})"


def test_importing_the_engine_loads_no_ansible():
    names = [".".join(p.relative_to(ENGINE.parent).with_suffix("").parts) for p in MODULES]
    names = [n[:-len(".__init__")] if n.endswith(".__init__") else n for n in names]
    code = ("import sys\n" + "".join(f"import {n}\n" for n in names)
            + "print(sorted(m for m in sys.modules if m == 'ansible' or m.startswith('ansible.')))")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ENGINE.parent)
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.strip() == "[]", got.stdout


def _strings(tree: ast.AST):
    """The string constants of a module, less its docstrings."""
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_engine_module_reads_a_role_file(path):
    """The roles' argument_specs and defaults are read on Ansible's side (the plan action),
    and handed to the contract's check as arguments."""
    found = [n.lineno for n in _strings(ast.parse(path.read_text(encoding="utf-8")))
             if "argument_specs" in n.value or "defaults/main" in n.value]
    assert not found, f"{_name(path)} names a role file (lines {found})"


@pytest.mark.parametrize("path", sorted(p for p in (ROOT / "plugins").rglob("*.py") if "__pycache__" not in p.parts),
                         ids=lambda p: str(p.relative_to(ROOT / "plugins")))
def test_no_module_or_plugin_file_is_over_600_lines(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)}: {lines} lines (at most {MAX_LINES}: split it by concern)"
