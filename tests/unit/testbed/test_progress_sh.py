"""tests/testbed/progress.sh: the progress lines of the testbed's long steps (real bash)."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROGRESS = ROOT / "tests" / "testbed" / "progress.sh"


def bash(script: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"set -euo pipefail\nPROGRESS_S=1\nsource {PROGRESS}\n{script}"],
                          capture_output=True, text=True, timeout=timeout)


def test_lines_while_it_runs_with_the_logs_last_line_and_the_value_untouched(tmp_path):
    log = tmp_path / "step.log"
    p = bash(f'v=$(with_progress step --out {log} -- bash -c "echo first; sleep 3.4; echo second; echo value")\n'
             f'echo "value=[$v]"')
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "value=[]"               # CMD's output went to the log, not stdout
    assert log.read_text() == "first\nsecond\nvalue\n"
    lines = re.findall(r"^\[step\] \.\.\. still running, (\d+) s: first$", p.stderr, re.M)
    seconds = [int(s) for s in lines]
    assert len(seconds) >= 2 and seconds == sorted(set(seconds)) and seconds[-1] <= 4, p.stderr


def test_status_is_kept_and_set_e_still_ends_the_script():
    p = bash('with_progress step -- bash -c "sleep 1.5; exit 3" || echo "rc was $?"\n'
             'with_progress step -- bash -c "exit 4"\necho not reached')
    assert "rc was 3" in p.stdout, p.stdout + p.stderr
    assert "not reached" not in p.stdout and p.returncode == 4


def test_ticker_stops_with_the_command_and_with_a_killed_script(tmp_path):
    p = bash("with_progress quick-step-zz -- true\necho done")
    assert p.returncode == 0 and p.stdout == "done\n" and p.stderr == ""
    proc = subprocess.Popen(["bash", "-c", f"PROGRESS_S=1\nsource {PROGRESS}\n"
                             "with_progress killed-step-zz -- sleep 6"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(2.5)
    proc.kill()                                         # the script dies (its `sleep 6` ends by itself)
    proc.wait(timeout=10)
    time.sleep(2.5)
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    # the ticker is a subshell of the script: it shows with the script's command line
    tickers = [line for line in out.splitlines() if "killed-step-zz" in line]
    assert tickers == [], tickers
