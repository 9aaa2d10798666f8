"""``vllm-fleet-collections`` (vllm_fleet/install.py): the collections of requirements.yml out of
the ``ansible`` wheel, into the checkout's .ansible/collections, without Galaxy.

A small FAKE wheel (a zip with the same layout) sits in the cache, so no download happens.
"""

from __future__ import annotations

import tomllib
import zipfile
from pathlib import Path

import pytest

from vllm_fleet import install

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "ansible.cfg").write_text("[defaults]\n")
    (root / "requirements.yml").write_text("collections:\n  - name: community.docker\n  - name: ansible.posix\n")
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    with zipfile.ZipFile(cache / "wheels" / "ansible-12.3.0-py3-none-any.whl", "w") as zf:
        zf.writestr("ansible_collections/community/docker/MANIFEST.json", '{"version": "4.8.2"}')
        zf.writestr("ansible_collections/community/docker/plugins/modules/docker_container.py", "# fake\n")
        zf.writestr("ansible_collections/ansible/posix/MANIFEST.json", "{}")
        zf.writestr("ansible_collections/community/general/MANIFEST.json", "{}")   # not wanted
    monkeypatch.setenv("VLLM_FLEET_CACHE", str(cache))
    return root


def test_installs_only_the_wanted_collections_then_is_a_no_op(checkout):
    assert install.install(checkout) == \
        f"installed community.docker, ansible.posix into {checkout / '.ansible' / 'collections'}"
    dest = checkout / ".ansible" / "collections" / "ansible_collections"
    assert (dest / "community" / "docker" / "plugins" / "modules" / "docker_container.py").is_file()
    assert (dest / "ansible" / "posix" / "MANIFEST.json").is_file()
    assert not (dest / "community" / "general").exists()
    assert install.install(checkout).startswith("collections already installed in ")
    # a collection removed by hand is put back
    (dest / "ansible" / "posix" / "MANIFEST.json").unlink()
    (dest / "ansible" / "posix").rmdir()
    assert install.install(checkout).startswith("installed ")


def test_a_collection_missing_from_the_wheel_is_an_error(checkout):
    (checkout / "requirements.yml").write_text("collections:\n  - name: nope.nothing\n")
    with pytest.raises(SystemExit, match="nope.nothing is not in ansible-12.3.0"):
        install.install(checkout)


def test_the_checkout_is_found_from_the_package_or_the_working_directory(tmp_path, checkout):
    # this package lives in the repository (editable install): found from its own path
    assert install.checkout(tmp_path) == ROOT
    assert install.main(["--root", str(checkout)]) == 0


def test_the_console_script_is_declared():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["scripts"]["vllm-fleet-collections"] == "vllm_fleet.install:main"
    # the operator's install: ansible-playbook, the Docker SDK and the hub client the
    # default model source (hub) downloads with on the controller
    deploy = meta["project"]["optional-dependencies"]["deploy"]
    assert deploy == ["ansible-core>=2.17,<2.20", "docker>=7", "huggingface_hub>=0.20"]
