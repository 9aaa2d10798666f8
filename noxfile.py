"""Test and benchmark sessions for vllm-fleet.

`python3 -m nox` runs the default sessions (what CI runs through .ci/run):
  unit         pytest over tests/unit (engine, validator, CLI), no ../shared needed
  conformance  every record of ../shared/conformance/cases.jsonl.gz through the
               render-batch code path; 100 % exact agreement required
  lint         ansible-lint (production profile) over playbooks/ and roles/, and
               ansible-doc on every module (their documentation must render)
Other sessions:
  collections  extract the collections of requirements.yml from the `ansible` wheel
               (PyPI) into .ansible/collections; no Galaxy access needed
  bench        corpus render benchmark: wall time and peak memory (prints figures)
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
SHARED = ROOT.parent / "shared"
nox.options.sessions = ["collections", "unit", "conformance", "lint"]
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


MODULES = ["vllm_fleet_gpu_facts", "vllm_fleet_health", "vllm_fleet_plan"]


@nox.session
def lint(session: nox.Session) -> None:
    """ansible-lint production profile; ansible-doc renders every module."""
    session.install("ansible-core>=2.17,<2.20", "ansible-lint>=25")
    session.run("ansible-lint", "--offline", "playbooks", "roles")
    for module in MODULES:
        session.run("ansible-doc", "-M", "plugins/modules", module, silent=True)
    session.run("ansible-doc", "-t", "filter", "vllm_fleet_systemd_exec", silent=True)
    session.log(f"ansible-doc rendered {len(MODULES)} modules and the filter")


@nox.session
def bench(session: nox.Session) -> None:
    """Corpus render benchmark (target: under 20 s on 2 cores)."""
    _install(session)
    session.run("python", "tests/benchmarks/bench_render.py", "--cli", *session.posargs)


ANSIBLE_WHEEL = "ansible==12.3.0"  # bundles community.docker 4.8.x, ansible.posix


def extract_collections(wheel: Path, names, dest: Path) -> None:
    """Unpack ``ansible_collections/<ns>/<name>/`` of the wanted collections."""
    import shutil
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        for name in names:
            ns, coll = name.split(".")
            prefix = f"ansible_collections/{ns}/{coll}/"
            members = [m for m in zf.namelist() if m.startswith(prefix)]
            if not members:
                raise RuntimeError(f"{name} is not in {wheel.name}")
            target = dest / "ansible_collections" / ns / coll
            if target.exists():
                shutil.rmtree(target)
            for member in members:
                zf.extract(member, dest)


@nox.session(python=False)
def collections(session: nox.Session) -> None:
    """Install the collections of requirements.yml without Galaxy."""
    import yaml

    wanted = [c["name"] for c in yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]]
    dest = ROOT / ".ansible" / "collections"
    stamp = dest / f".from-{ANSIBLE_WHEEL}"
    if stamp.exists() and all((dest / "ansible_collections" / Path(*n.split("."))).is_dir() for n in wanted):
        session.log(f"collections already installed in {dest}")
        return
    cache = Path(os.environ.get("VLLM_FLEET_CACHE", "/var/cache/vllm-fleet")) / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob("ansible-12.3.0-*.whl"))
    if not wheels:
        session.run("python3", "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "-d", str(cache), ANSIBLE_WHEEL, external=True)
        wheels = sorted(cache.glob("ansible-12.3.0-*.whl"))
    extract_collections(wheels[-1], wanted, dest)
    stamp.touch()
    session.log(f"installed {', '.join(wanted)} into {dest}")
