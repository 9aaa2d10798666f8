"""vllm_fleet_stage, run the way Ansible runs a module: a manifest written (create -> repeat ->
modify), a host's check (already staged, short of disk), a copy verified or refused, and the Hub
download's failure message after its retries."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("ansible")

from module_runner import ROOT, module_argv

MODULE = ROOT / "plugins" / "modules" / "vllm_fleet_stage.py"


def run(tmp_path, env=None, **args):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run(module_argv(MODULE, path), capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **(env or {})))
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def snap(tmp_path) -> Path:
    root = tmp_path / "snap"
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text("{}")
    (root / "sub" / "w.safetensors").write_bytes(b"w" * 4096)
    return root


def test_manifest_is_written_once_and_rewritten_when_the_snapshot_changes(tmp_path, snap):
    dest = tmp_path / "m.json"
    first = run(tmp_path, state="manifest", path=str(snap), manifest_path=str(dest))
    assert first["changed"] and first["files"] == 2 and first["bytes"] == 4098
    assert json.loads(dest.read_text())["files"]["sub/w.safetensors"]["size"] == 4096
    assert run(tmp_path, state="manifest", path=str(snap), manifest_path=str(dest))["changed"] is False
    (snap / "config.json").write_text('{"a": 1}')
    again = run(tmp_path, state="manifest", path=str(snap), manifest_path=str(dest))
    assert again["changed"] and again["bytes"] == 4104


def test_verify_records_the_copy_and_check_then_finds_it_staged(tmp_path, snap):
    manifest = run(tmp_path, state="manifest", path=str(snap), manifest_path=str(tmp_path / "c.json"))["manifest"]
    recorded = tmp_path / "host.manifest.json"
    fresh = run(tmp_path, state="check", path=str(snap), manifest_path=str(recorded), manifest=manifest, host="h1")
    assert fresh["staged"] is False and fresh["present"] == 4098 and fresh["need"] == 409   # the 10 % margin only
    ok = run(tmp_path, state="verify", path=str(snap), manifest_path=str(recorded), manifest=manifest, host="h1")
    assert ok["changed"] and not ok.get("failed")
    assert run(tmp_path, state="check", path=str(snap), manifest_path=str(recorded), manifest=manifest)["staged"]
    # a file written since (same size, new mtime) is no longer the verified copy
    (snap / "sub" / "w.safetensors").write_bytes(b"x" * 4096)
    assert run(tmp_path, state="check", path=str(snap), manifest_path=str(recorded), manifest=manifest)["staged"] is False
    bad = run(tmp_path, state="verify", path=str(snap), manifest_path=str(recorded), manifest=manifest, host="h1")
    assert bad["failed"] and bad["problems"] == ["sub/w.safetensors: sha256 differs from the manifest"]
    assert bad["msg"].startswith(f"h1: {snap}: the copy differs from the manifest")


def test_check_refuses_a_host_short_of_disk_naming_host_path_needed_and_free(tmp_path, snap):
    manifest = run(tmp_path, state="manifest", path=str(snap), manifest_path=str(tmp_path / "c.json"))["manifest"]
    huge = dict(manifest, files={"w": {"size": 1 << 60, "sha256": "0" * 64}}, bytes=1 << 60)
    out = run(tmp_path, state="check", path=str(tmp_path / "store" / "k"), manifest_path=str(tmp_path / "k.json"),
              manifest=huge, host="gpu-7")
    assert out["failed"]
    assert out["msg"].startswith(f"gpu-7: {tmp_path / 'store' / 'k'}: not enough free disk for the model snapshot: needs ")
    assert f"{tmp_path} has " in out["msg"] and out["need"] > out["free"]


def test_a_manifest_with_an_escaping_name_is_refused(tmp_path, snap):
    out = run(tmp_path, state="verify", path=str(snap), manifest_path=str(tmp_path / "x.json"), host="h",
              manifest={"version": 1, "files": {"../etc/passwd": {"size": 1, "sha256": "0" * 64}}})
    assert out["failed"] and "h: the manifest given: entry '../etc/passwd'" in out["msg"]


def test_download_failure_names_model_endpoint_and_every_attempt(tmp_path):
    pytest.importorskip("huggingface_hub")
    out = run(tmp_path, env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_ETAG_TIMEOUT": "1",
                             "HF_HUB_DOWNLOAD_TIMEOUT": "1"},
              state="download", model="org/m", revision="main", path=str(tmp_path / "dl"),
              manifest_path=str(tmp_path / "dl.json"), attempts=1)
    assert out["failed"]
    assert out["msg"].startswith("this host: vllm_fleet_model_source hub: downloading org/m@main from http://127.0.0.1:9 "
                                 "failed 1 times: attempt 1: ")


def test_a_seed_download_from_the_endpoint_given_is_recorded_as_a_verified_copy(tmp_path, snap):
    """A download on the host that keeps it (record, the seed of vllm_fleet_stage_download host) from
    the endpoint given as a parameter (not the environment's): its manifest is recorded with the
    files' mtimes, so `held` and `check` find the host holding it without hashing."""
    pytest.importorskip("huggingface_hub")
    import sys
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    from helpers import hub_mirror
    dest, record = tmp_path / "store" / "org--m--main", tmp_path / "store" / "org--m--main.manifest.json"
    with hub_mirror([("org/m", snap)], tmp_path) as hub:
        out = run(tmp_path, env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")},
                  state="download", model="org/m", revision="main", path=str(dest), manifest_path=str(record),
                  endpoint=hub["endpoint"], record=True, host="seed-1", attempts=1)
        assert not out.get("failed"), out
        assert out["commit"] == hub["commit"]["org/m"] and out["files"] == 2 and out["changed"] is True
    recorded = json.loads(record.read_text())
    assert sorted(recorded["local_mtime_ns"]) == ["config.json", "sub/w.safetensors"]
    held = run(tmp_path, state="held", path=str(dest), manifest_path=str(record))
    assert held["staged"] is True and held["manifest"] == out["manifest"]
    check = run(tmp_path, state="check", path=str(dest), manifest_path=str(record), manifest=out["manifest"])
    assert check["staged"] is True and check["need"] == 0


def test_list_gives_files_and_sizes_and_refuses_a_missing_directory(tmp_path, snap):
    out = run(tmp_path, state="list", path=str(snap), host="h2")
    assert out["listing"] == {"config.json": 2, "sub/w.safetensors": 4096} and out["files"] == 2
    gone = run(tmp_path, state="list", path=str(tmp_path / "nfs" / "m"), host="h2")
    assert gone["failed"] and gone["msg"].startswith(f"h2: vllm_fleet_model_path {tmp_path / 'nfs' / 'm'}: no such directory")


def test_held_answers_from_the_hosts_own_record_without_hashing(tmp_path, snap):
    recorded = tmp_path / "host.manifest.json"
    nothing = run(tmp_path, state="held", path=str(snap), manifest_path=str(recorded))
    assert nothing["staged"] is False and "manifest" not in nothing and not nothing.get("failed")
    manifest = run(tmp_path, state="manifest", path=str(snap), manifest_path=str(tmp_path / "c.json"))["manifest"]
    run(tmp_path, state="verify", path=str(snap), manifest_path=str(recorded), manifest=manifest, host="h1")
    held = run(tmp_path, state="held", path=str(snap), manifest_path=str(recorded))
    assert held["staged"] is True and held["manifest"] == manifest and held["bytes"] == 4098 and held["files"] == 2
    # a file touched since (new mtime) or gone: not held (check and verify decide again)
    os.utime(snap / "config.json", ns=(1, 1))
    assert run(tmp_path, state="held", path=str(snap), manifest_path=str(recorded))["staged"] is False
    run(tmp_path, state="verify", path=str(snap), manifest_path=str(recorded), manifest=manifest, host="h1")
    (snap / "sub" / "w.safetensors").unlink()
    assert run(tmp_path, state="held", path=str(snap), manifest_path=str(recorded))["staged"] is False
    recorded.write_text("not json")
    assert run(tmp_path, state="held", path=str(snap), manifest_path=str(recorded))["staged"] is False
