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
                                      {"name": "vllm-fleet-minilm", "runtime": "docker",
                                       "containers": ["vllm-fleet-minilm", "vllm-fleet-minilm-prev"]}]}]
    with_orphans = paths.teardown_targets(plan, recorded, orphans=True)
    assert [t["deployment"] for t in with_orphans] == ["minilm", "old-name"]
    assert with_orphans[1] == {"deployment": "old-name", "containers": [], "units": ["vllm-fleet-old-name"],
                               "paths": ["/etc/vllm-fleet/old-name/x.json"], "orphan": True,
                               "processes": [{"name": "vllm-fleet-old-name", "runtime": "uv"}]}
    # a host without a plan (its group left the inventory): only its records, and only on request
    assert paths.teardown_targets(None, recorded) == []
    assert [t["deployment"] for t in paths.teardown_targets(None, recorded, orphans=True)] == ["minilm", "old-name"]


def test_teardown_targets_add_each_deployments_own_paths_from_the_hosts_layout():
    """The paths come from layout.deployment_layout over the host's roots (vllm_fleet_run.layout),
    for an orphan too; caches only with the purge; a root tunable moves them."""
    from vllm_fleet.layout import host_layout

    recorded = {"old-name": _record([{"name": "vllm-fleet-old-name", "runtime": "uv"}], ["/etc/vllm-fleet/old-name/x.json"])}
    layout = host_layout({"vllm_fleet_uv_root": "/srv/venvs", "vllm_fleet_state_dir": "/srv/state"})
    [target] = paths.teardown_targets(None, recorded, True, layout)
    assert target["paths"] == ["/srv/venvs/old-name", "/opt/vllm-fleet/old-name", "/etc/vllm-fleet/old-name",
                               "/srv/state/old-name.plan", "/etc/vllm-fleet/old-name/x.json"]
    [purged] = paths.teardown_targets(None, recorded, True, layout, True)
    assert purged["paths"][-3:-1] == ["/var/lib/vllm-fleet/hf-cache/old-name",
                                      "/var/lib/vllm-fleet/compile-cache/old-name"]
    # a container deployment: no venv directory
    plan = {"deployment": "minilm", "processes": [{"name": "vllm-fleet-minilm", "runtime": "docker"}]}
    [own] = paths.teardown_targets(plan, {}, False, host_layout({}))
    assert own["paths"] == ["/etc/vllm-fleet/minilm", "/var/lib/vllm-fleet/state/minilm.plan"]
    # every one of them passes the path guard against the host's roots
    for path in target["paths"] + purged["paths"] + own["paths"]:
        assert paths.owned_path(path, layout["roots"] + ["/opt/vllm-fleet"]) == path
