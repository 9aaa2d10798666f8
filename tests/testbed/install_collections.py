#!/usr/bin/env python3
"""Install the collections of requirements.yml without Galaxy.

They are extracted from the `ansible` wheel on PyPI (downloaded once into a cache) into
.ansible/collections, the path ansible.cfg names.  Idempotent; stdlib + PyYAML only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_WHEEL = "ansible==12.3.0"  # bundles community.docker 4.8.x, ansible.posix
DEST = ROOT / ".ansible" / "collections"


def extract(wheel: Path, names, dest: Path) -> None:
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


def main() -> int:
    wanted = [c["name"] for c in yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]]
    stamp = DEST / f".from-{ANSIBLE_WHEEL}"
    if stamp.exists() and all((DEST / "ansible_collections" / Path(*n.split("."))).is_dir() for n in wanted):
        print(f"collections already installed in {DEST}")
        return 0
    cache = Path(os.environ.get("VLLM_FLEET_CACHE", "/var/cache/vllm-fleet")) / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    version = ANSIBLE_WHEEL.split("==")[1]
    wheels = sorted(cache.glob(f"ansible-{version}-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "-d", str(cache), ANSIBLE_WHEEL], check=True)
        wheels = sorted(cache.glob(f"ansible-{version}-*.whl"))
    extract(wheels[-1], wanted, DEST)
    stamp.touch()
    print(f"installed {', '.join(wanted)} into {DEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
