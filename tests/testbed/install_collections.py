#!/usr/bin/env python3
"""Install the collections of requirements.yml without Galaxy (the testbed's and nox's entry).

The same as the ``vllm-fleet-collections`` command of ``pip install -e '.[deploy]'``
(plugins/module_utils/vllm_fleet/install.py): the collections are extracted from the ``ansible``
wheel on PyPI (downloaded once into a cache) into .ansible/collections, the path ansible.cfg
names. Idempotent; stdlib + PyYAML only; works without the package installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from vllm_fleet.install import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["--root", str(ROOT)]))
