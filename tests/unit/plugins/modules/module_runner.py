"""Run a module file the way Ansible's AnsiballZ wrapper would see it: with this project's
plugins/module_utils importable as ``ansible.module_utils.*`` (ansible.cfg: module_utils =
plugins/module_utils), and the ANSIBLE_MODULE_ARGS file as its only argument."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
_RUNNER = ("import runpy, sys, ansible.module_utils as mu; mu.__path__.append(sys.argv[1]); "
           "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def module_argv(module, args_file) -> list:
    """argv that runs ``module`` (a path) with its args file."""
    return [sys.executable, "-c", _RUNNER, str(ROOT / "plugins" / "module_utils"), str(module), str(args_file)]


def import_module_file(module):
    """Import a module file in-process, its ``ansible.module_utils.*`` imports resolved the same way."""
    import importlib.util

    import ansible.module_utils as mu
    utils = str(ROOT / "plugins" / "module_utils")
    if utils not in mu.__path__:
        mu.__path__.append(utils)
    spec = importlib.util.spec_from_file_location(Path(module).stem, module)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
