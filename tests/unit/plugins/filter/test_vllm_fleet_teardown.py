"""Teardown's path guard: only clean paths strictly below the bundle's roots pass."""

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
ROOTS = ["/opt/vllm-fleet", "/etc/vllm-fleet", "/etc/systemd/system", "/var/lib/vllm-fleet"]


@pytest.mark.parametrize("path", ["/opt/vllm-fleet/minilm", "/etc/vllm-fleet/minilm/mooncake.json",
                                  "/var/lib/vllm-fleet/state/minilm.plan"])
def test_owned_paths_pass_unchanged(path):
    assert paths.owned_path(path, ROOTS) == path


@pytest.mark.parametrize("path", [
    "/opt/vllm-fleet/..", "/opt/vllm-fleet/.", "/opt/vllm-fleet/../..", "/opt/vllm-fleet", "/opt/vllm-fleet/",
    "/etc", "/opt", "/", "", "opt/vllm-fleet/x", "/opt/vllm-fleet/a/../../etc", "/opt/vllm-fleetX/y",
    "/opt/vllm-fleet/a\nb", "/opt/vllm-fleet//x", "/etc/passwd",
])
def test_everything_else_is_refused(path):
    with pytest.raises(AnsibleFilterError, match="refuses to remove"):
        paths.owned_path(path, ROOTS)


def test_a_root_of_slash_grants_nothing():
    with pytest.raises(AnsibleFilterError):
        paths.owned_path("/etc/shadow", ["/"])


def test_unit_files_need_the_bundle_prefix():
    assert paths.owned_path("/etc/systemd/system/vllm-fleet-a.service", ROOTS, prefix="vllm-fleet-")
    with pytest.raises(AnsibleFilterError, match="does not start with"):
        paths.owned_path("/etc/systemd/system/sshd.service", ROOTS, prefix="vllm-fleet-")


def test_the_filter_is_registered():
    assert paths.FilterModule().filters()["vllm_fleet_owned_path"] is paths.owned_path


def _record(processes, paths=()):
    return {"current": 1, "revisions": [], "record": {"plan": {"processes": processes}, "paths": list(paths)}}


def test_teardown_targets_join_the_plan_and_the_hosts_records():
    plan = {"deployment": "minilm", "processes": [{"name": "vllm-fleet-minilm", "runtime": "docker"}]}
    recorded = {
        # an older revision of the same deployment ran a unit too
        "minilm": _record([{"name": "vllm-fleet-minilm", "runtime": "docker"},
                           {"name": "vllm-fleet-minilm-router", "runtime": "service"}], ["/opt/vllm-fleet/minilm"]),
        # renamed away from the inventory: an orphan
        "old-name": _record([{"name": "vllm-fleet-old-name", "runtime": "uv"}], ["/etc/vllm-fleet/old-name/x.json"]),
    }
    targets = paths.teardown_targets(plan, recorded)
    assert targets == [{"deployment": "minilm", "containers": ["vllm-fleet-minilm", "vllm-fleet-minilm-prev"],
                        "units": ["vllm-fleet-minilm-router"], "paths": ["/opt/vllm-fleet/minilm"], "orphan": False,
                        "processes": [{"name": "vllm-fleet-minilm-router", "runtime": "service"},
                                      {"name": "vllm-fleet-minilm", "runtime": "docker"}]}]
    with_orphans = paths.teardown_targets(plan, recorded, orphans=True)
    assert [t["deployment"] for t in with_orphans] == ["minilm", "old-name"]
    assert with_orphans[1] == {"deployment": "old-name", "containers": [], "units": ["vllm-fleet-old-name"],
                               "paths": ["/etc/vllm-fleet/old-name/x.json"], "orphan": True,
                               "processes": [{"name": "vllm-fleet-old-name", "runtime": "uv"}]}
    # a host without a plan (its group left the inventory): only its records, and only on request
    assert paths.teardown_targets(None, recorded) == []
    assert [t["deployment"] for t in paths.teardown_targets(None, recorded, orphans=True)] == ["minilm", "old-name"]
