"""Teardown's guard against the issue-26 path rules: a system directory (or a root out of
normal form) never counts as one of the bundle's roots, and a path a host's record names
outside the roots is refused before anything removes it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("ansible")
from ansible.errors import AnsibleFilterError  # noqa: E402

ROOT = Path(__file__).resolve().parents[4]
_spec = importlib.util.spec_from_file_location("vllm_fleet_teardown", ROOT / "plugins" / "filter" / "vllm_fleet_teardown.py")
paths = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(paths)
ROOTS = ["/opt/vllm-fleet", "/etc/vllm-fleet", "/var/lib/vllm-fleet", "/var/lib/vllm-fleet/state"]


@pytest.mark.parametrize("root, path", [
    ("/etc", "/etc/ernie"),                 # a state_dir of /etc: the deployment's "record dir"
    ("/var/lib", "/var/lib/dpkg"),
    ("/usr", "/usr/bin/python3"),
    ("/etc/systemd", "/etc/systemd/system.conf"),
    ("/var", "/var/log/syslog"),
    ("/var/lib/vllm-fleet/../..", "/etc/passwd"),
    ("/var//lib", "/var/lib/dpkg/status"),
    ("relative", "/relative/x"),
])
def test_a_system_or_unclean_root_grants_nothing(root, path):
    with pytest.raises(AnsibleFilterError, match="refuses to remove"):
        paths.owned_path(path, [root])


@pytest.mark.parametrize("root", ["/var/lib/vllm-fleet/state/", "/usr/local/vllm-fleet", "/srv/vllm-fleet"])
def test_a_root_of_its_own_still_works(root):
    assert paths.owned_path(root.rstrip("/") + "/ernie.plan", [root]) == root.rstrip("/") + "/ernie.plan"


def test_a_record_naming_paths_outside_the_roots_removes_nothing_there():
    recorded = {"ernie": {"record": {"plan": {"processes": [{"name": "vllm-ernie", "runtime": "docker"}]},
                                     "paths": ["/etc/passwd", "/opt/vllm-fleet/ernie", "/opt/vllm-fleet/../../etc",
                                               "/var/lib/vllm-fleet/state/ernie.plan"]}}}
    targets = paths.teardown_targets({"deployment": "ernie", "processes": []}, recorded)
    assert [t["deployment"] for t in targets] == ["ernie"]
    allowed, refused = [], []
    for path in targets[0]["paths"]:
        try:
            allowed.append(paths.owned_path(path, ROOTS))
        except AnsibleFilterError:
            refused.append(path)
    assert sorted(allowed) == ["/opt/vllm-fleet/ernie", "/var/lib/vllm-fleet/state/ernie.plan"]
    assert sorted(refused) == ["/etc/passwd", "/opt/vllm-fleet/../../etc"]


@pytest.mark.parametrize("path", ["/opt/vllm-fleet/tools", "/var/lib/vllm-fleet/hf-cache/hub",
                                  "/var/lib/vllm-fleet/hf-cache/token"])
def test_the_bundles_own_paths_are_never_removed_for_a_deployment(path):
    # a record made before the name registry (a uv deployment named "tools") may name them
    with pytest.raises(AnsibleFilterError, match="it is the bundle's own"):
        paths.owned_path(path, ROOTS)
    paths.owned_path(path + "-x", ROOTS)             # a deployment beside them: still removed
    paths.owned_path(path.rsplit("/", 1)[0] + "/tools2", ROOTS)
