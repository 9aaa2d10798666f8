"""Shared pytest setup for the unit tests.

* puts ``plugins/module_utils`` on ``sys.path`` so ``import vllm_fleet`` works without
  installing the package, and gives the modules' ``ansible.module_utils.*`` imports those files;
* offers the small recipe tree in ``tests/fixtures/tree`` (upstream layout: trimmed
  taxonomy, the nine strategies, the two kv_store deployments and a few synthetic
  recipes under ``models/test-org``) as a session-scoped ``catalog``;
* offers ``render`` / ``proc`` helpers that build a :class:`Request` from keywords;
* loads the skip policy (tests/unit/skip_policy.py): with ``--fail-on-skip`` (the ``unit``
  nox session passes it) a test skipped for a reason not starting with ``platform:`` fails
  the run.

Nothing here reads ``/work/shared``: the unit tests run from the repository alone.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULE_UTILS = REPO / "plugins" / "module_utils"
if str(MODULE_UTILS) not in sys.path:
    sys.path.insert(0, str(MODULE_UTILS))

FIXTURES = REPO / "tests" / "fixtures"
TREE = FIXTURES / "tree"
OVERLAY = FIXTURES / "overlay"
API_JSON = FIXTURES / "api" / "test-org" / "Api-Model.json"

# the modules import their module_utils as Ansible ships them (ansible.module_utils.<name>): here
# those names are the repository's files, for tests that load a module file directly
for _name in ("vllm_fleet_smi", "vllm_fleet_gpu_health", "vllm_fleet_gpu_values",   # in import order
              "vllm_fleet_gpu_nvidia", "vllm_fleet_gpu_amd", "vllm_fleet_gpu_host", "vllm_fleet_gpu_taxonomy",
              "vllm_fleet_process", "vllm_fleet_container"):
    sys.modules.setdefault("ansible.module_utils." + _name, __import__(_name))

from skip_policy import pytest_addoption, pytest_configure  # noqa: E402,F401 - plugin hooks
from vllm_fleet import loader  # noqa: E402
from vllm_fleet.render import resolve  # noqa: E402
from vllm_fleet.rendermodel import Request  # noqa: E402


@pytest.fixture(scope="session")
def _catalog():
    return loader.load([TREE])


@pytest.fixture
def catalog(_catalog):
    """The fixture tree, loaded once; tests must not mutate it (use ``recipe_copy``)."""
    return _catalog


@pytest.fixture
def recipe_copy(catalog):
    """A deep copy of one fixture recipe, for tests that tweak a single key."""

    def get(hf_id: str):
        return copy.deepcopy(catalog.recipes[hf_id])

    return get


@pytest.fixture
def render(catalog):
    """``render(hf_id, recipe=None, taxonomy=None, **request_fields) -> Rendering``."""

    def run(hf_id: str, recipe=None, taxonomy=None, **fields):
        req = Request(hf_id=hf_id, **fields)
        return resolve(recipe if recipe is not None else catalog.recipes[hf_id], req,
                       catalog.strategies, taxonomy if taxonomy is not None else catalog.taxonomy)

    return run


@pytest.fixture
def proc(render):
    """The only (or the first) process of a rendering."""

    def run(hf_id: str, **fields):
        return render(hf_id, **fields).processes[0]

    return run
