"""``vllm-fleet-collections``: install the Ansible collections of requirements.yml without Galaxy.

They are extracted from the ``ansible`` wheel on PyPI (downloaded once into a cache,
``$VLLM_FLEET_CACHE/wheels``, default /var/cache/vllm-fleet/wheels, or ~/.cache/vllm-fleet/wheels
when that is not writable) into ``.ansible/collections`` of the checkout, the path ansible.cfg
names. Idempotent (a stamp file names the wheel); stdlib + PyYAML only; no Ansible import.

The checkout is the one this package was installed from (``pip install -e '.[deploy]'``), else
the current directory if it holds requirements.yml and ansible.cfg.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

import yaml

ANSIBLE_WHEEL = "ansible==12.3.0"  # bundles community.docker 4.8.x, ansible.posix


def checkout(start: Optional[Path] = None) -> Path:
    """The repository root: where requirements.yml and ansible.cfg are."""
    candidates = [p for p in Path(__file__).resolve().parents] + [Path(start or Path.cwd()).resolve()]
    for parent in candidates:
        if (parent / "requirements.yml").is_file() and (parent / "ansible.cfg").is_file():
            return parent
    raise SystemExit("vllm-fleet-collections: no checkout found (requirements.yml + ansible.cfg); "
                     "run it from the repository root")


def cache_dir() -> Path:
    base = os.environ.get("VLLM_FLEET_CACHE")
    for candidate in ([Path(base)] if base else [Path("/var/cache/vllm-fleet"), Path.home() / ".cache" / "vllm-fleet"]):
        try:
            (candidate / "wheels").mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(candidate / "wheels", os.W_OK):
            return candidate / "wheels"
    raise SystemExit("vllm-fleet-collections: no writable cache dir (set VLLM_FLEET_CACHE)")


def wanted(root: Path) -> List[str]:
    return [c["name"] for c in yaml.safe_load((root / "requirements.yml").read_text())["collections"]]


def extract(wheel: Path, names: Iterable[str], dest: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        for name in names:
            ns, coll = name.split(".")
            prefix = f"ansible_collections/{ns}/{coll}/"
            members = [m for m in zf.namelist() if m.startswith(prefix)]
            if not members:
                raise SystemExit(f"{name} is not in {wheel.name}")
            target = dest / "ansible_collections" / ns / coll
            if target.exists():
                shutil.rmtree(target)
            for member in members:
                zf.extract(member, dest)


def install(root: Path, wheel_spec: str = ANSIBLE_WHEEL) -> str:
    dest = root / ".ansible" / "collections"
    names = wanted(root)
    stamp = dest / f".from-{wheel_spec}"
    if stamp.exists() and all((dest / "ansible_collections" / Path(*n.split("."))).is_dir() for n in names):
        return f"collections already installed in {dest}"
    cache = cache_dir()
    version = wheel_spec.split("==")[1]
    wheels = sorted(cache.glob(f"ansible-{version}-*.whl"))
    if not wheels:
        print(f"downloading {wheel_spec} (the wheel only, about 50 MB) into {cache}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "-d", str(cache), wheel_spec], check=True)
        wheels = sorted(cache.glob(f"ansible-{version}-*.whl"))
    extract(wheels[-1], names, dest)
    stamp.touch()
    return f"installed {', '.join(names)} into {dest}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="vllm-fleet-collections", description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, help="the checkout (default: found as described)")
    args = ap.parse_args(argv)
    root = args.root.resolve() if args.root else checkout()
    print(install(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
