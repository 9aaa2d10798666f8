"""The skip policy (tests/unit/skip_policy.py) on a real pytest run of small test files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

TESTS = '''
import pytest

def test_passes():
    pass

@pytest.mark.skipif(True, reason="platform: no GPU on this machine")
def test_platform_skip():
    pass
'''
BAD_MARKER = TESTS + '''
@pytest.mark.skip(reason="flaky, look later")
def test_forgotten():
    pass
'''
BAD_IMPORT = '''
import pytest
pytest.importorskip("a_package_nobody_installed_for_vllm_fleet")

def test_never_collected():
    pass
'''


def pytest_run(tmp_path, files, *args):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = dict(os.environ, PYTHONPATH=str(HERE))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "skip_policy", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path), *args],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    return proc.returncode, proc.stdout + proc.stderr


def test_platform_skips_pass_and_are_listed(tmp_path):
    rc, out = pytest_run(tmp_path, {"test_a.py": TESTS}, "--fail-on-skip")
    assert rc == 0, out
    assert "platform    test_a.py::test_platform_skip: platform: no GPU on this machine" in out


def test_other_skip_fails_the_run(tmp_path):
    rc, out = pytest_run(tmp_path, {"test_a.py": BAD_MARKER}, "--fail-on-skip")
    assert rc == 1, out
    assert "NOT ALLOWED test_a.py::test_forgotten: flaky, look later" in out
    assert "1 test(s) skipped without a 'platform:' reason" in out


def test_module_level_importorskip_fails_the_run(tmp_path):
    rc, out = pytest_run(tmp_path, {"test_a.py": TESTS, "test_b.py": BAD_IMPORT}, "--fail-on-skip")
    assert rc == 1, out
    assert "NOT ALLOWED test_b.py: could not import 'a_package_nobody_installed_for_vllm_fleet'" in out


def test_without_the_option_skips_are_only_listed(tmp_path):
    rc, out = pytest_run(tmp_path, {"test_a.py": BAD_MARKER})
    assert rc == 0, out
    assert "skipped     test_a.py::test_forgotten: flaky, look later" in out
