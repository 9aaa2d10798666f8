"""Revisions recorded on the host, run the way Ansible runs a module (python3 module.py args.json):
create -> repeat (unchanged) -> modify (new revision) -> prune -> read -> absent."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from module_runner import module_argv
from vllm_fleet.layout import deployment_layout, host_layout

ROOT = Path(__file__).resolve().parents[4]
MODULE = ROOT / "plugins" / "modules" / "vllm_fleet_revision.py"
pytest.importorskip("ansible")


def run(tmp_path, check=False, **args):
    args.setdefault("state_dir", str(tmp_path / "state"))
    if check:
        args["_ansible_check_mode"] = True
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run(module_argv(MODULE, path), capture_output=True, text=True, timeout=60)
    return json.loads(proc.stdout)


def plan(hash_, argv=("vllm", "serve", "m")):
    return {"deployment": "minilm", "hash": hash_,
            "processes": [{"name": "vllm-fleet-minilm", "argv": list(argv), "secret_env": ["VLLM_API_KEY"]}]}


def test_record_repeat_modify_prune_read_absent(tmp_path):
    first = run(tmp_path, state="recorded", deployment="minilm", plan=plan("h1"), note="first",
                paths=["/opt/vllm-fleet/minilm"])
    assert first["changed"] is True and first["revision"] == 1
    folder = tmp_path / "state" / "minilm"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "rev-1.json").stat().st_mode) == 0o600
    again = run(tmp_path, state="recorded", deployment="minilm", plan=plan("h1"), paths=["/opt/vllm-fleet/minilm"])
    assert again["changed"] is False and again["revision"] == 1
    for i, h in enumerate(("h2", "h3", "h4"), start=2):
        out = run(tmp_path, state="recorded", deployment="minilm", plan=plan(h, ("vllm", "serve", h)),
                  note=f"change {i}", paths=["/opt/vllm-fleet/minilm"])
        assert out["changed"] is True and out["revision"] == i
    # keep 3: revision 1 was pruned when 4 came, and returned for garbage collection
    assert out["pruned"] == [{"number": 1, "hash": "h1", "paths": ["/opt/vllm-fleet/minilm"], "uses": []}]
    assert sorted(p.name for p in folder.iterdir()) == ["rev-2.json", "rev-3.json", "rev-4.json"]
    read = run(tmp_path, state="read")
    assert read["changed"] is False
    entry = read["deployments"]["minilm"]
    assert entry["current"] == 4 and [r["number"] for r in entry["revisions"]] == [2, 3, 4]
    assert entry["record"]["plan"]["processes"][0]["argv"] == ["vllm", "serve", "h4"]
    assert entry["revisions"][0]["note"] == "change 2" and entry["record"]["paths"] == ["/opt/vllm-fleet/minilm"]
    gone = run(tmp_path, state="absent", deployment="minilm")
    assert gone["changed"] is True and not folder.exists()
    assert run(tmp_path, state="read")["deployments"] == {}


def test_check_mode_writes_nothing(tmp_path):
    out = run(tmp_path, check=True, state="recorded", deployment="minilm", plan=plan("h1"))
    assert out["changed"] is True and not (tmp_path / "state").exists()


def test_a_secret_value_is_never_written(tmp_path):
    leaky = plan("h1", ("vllm", "serve", "m", "--api-key", "SENTINEL-9"))
    out = run(tmp_path, state="recorded", deployment="minilm", plan=leaky, redact=["SENTINEL-9"])
    assert out.get("failed") and "secret" in out["msg"] and "SENTINEL-9" not in json.dumps(out)
    assert not (tmp_path / "state" / "minilm").exists()


@pytest.mark.parametrize("name", ["..", "a/b", "../etc", "x\ny", "UPPER"])
def test_unsafe_deployment_names_are_refused(tmp_path, name):
    out = run(tmp_path, state="recorded", deployment=name, plan=plan("h1"))
    assert out.get("failed") and "not a safe name" in out["msg"]
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir())


def test_deployment_numbers_and_what_a_host_ran_at_a_revision(tmp_path):
    # deployment revisions 1, 3, 4 on this host: it did not change at 2 (another host did)
    run(tmp_path, state="recorded", deployment="minilm", plan=plan("h1", ("vllm", "serve", "h1")))
    out = run(tmp_path, state="recorded", deployment="minilm", plan=plan("h3", ("vllm", "serve", "h3")), number=3)
    assert out["revision"] == 3
    run(tmp_path, state="recorded", deployment="minilm", plan=plan("h4", ("vllm", "serve", "h4")), number=2)
    assert run(tmp_path, state="read")["deployments"]["minilm"]["current"] == 4   # never below current + 1
    at2 = run(tmp_path, state="read", deployment="minilm", revision="2")
    assert at2["selected"]["number"] == 1 and at2["selected"]["hash"] == "h1"     # what it ran at revision 2
    assert run(tmp_path, state="read", deployment="minilm", revision="3")["selected"]["hash"] == "h3"
    early = run(tmp_path, state="read", deployment="minilm", revision="0")
    assert early.get("failed") and "no revision 0 or older" in early["msg"] and "recorded revisions: 1, 3, 4" in early["msg"]
    bad = run(tmp_path, state="read", deployment="minilm", revision="previous")
    assert bad.get("failed") and "is not a revision number" in bad["msg"]


# ---- records written before the plan's keys were renamed --------------------------------------

API_KEY = {"VLLM_API_KEY": "vllm_fleet_api_key"}
# a record from before the plan carried its paths gets the default roots' (layout.py)
OLD_LAYOUT = deployment_layout(host_layout({}), "minilm")
OLD_SETUP = {"name": "rocm", "unit": {"groups": ["video", "render"], "env": {"VLLM_ROCM_USE_AITER": "1"}},
             "uv": {"python": "3.12"}}


def write_record(tmp_path, number, host_plan):
    folder = tmp_path / "state" / "minilm"
    folder.mkdir(parents=True, exist_ok=True)
    record = {"deployment": "minilm", "number": number, "hash": host_plan["hash"], "plan": host_plan,
              "paths": [], "note": "", "time": "2026-01-01T00:00:00Z"}
    (folder / f"rev-{number}.json").write_text(json.dumps(record))


def test_an_old_record_reads_back_under_todays_keys(tmp_path):
    # recorded by an older vllm-fleet: vendor (the accelerator's name) and the accelerator block
    write_record(tmp_path, 1, dict(plan("h1"), vendor="rocm", accelerator=OLD_SETUP))
    # older still: no accelerator block yet
    write_record(tmp_path, 2, dict(plan("h2"), vendor="cpu"))
    # and older than secret_vars: the variable of each secret its processes get, from today's table
    # (a uv engine's HF token is a credential file, its API key an env value)
    uv = dict(plan("h3"), accelerator="cpu")
    uv["processes"][0]["credentials"] = [{"secret": "HF_TOKEN", "var": "vllm_fleet_hf_token"}]
    write_record(tmp_path, 3, uv)
    at1 = run(tmp_path, state="read", deployment="minilm", revision="1")["selected"]["plan"]
    # and older than the plan's drain_timeout: the drain role's default then (120 s)
    assert at1 == dict(plan("h1"), accelerator="rocm", accelerator_setup=OLD_SETUP, secret_vars=API_KEY,
                       drain_timeout=120, layout=OLD_LAYOUT)
    assert at1["layout"]["record_dir"] == "/var/lib/vllm-fleet/state/minilm"
    at2 = run(tmp_path, state="read", deployment="minilm", revision="2")["selected"]["plan"]
    assert at2 == dict(plan("h2"), accelerator="cpu", secret_vars=API_KEY, drain_timeout=120, layout=OLD_LAYOUT) and "vendor" not in json.dumps(at2)
    current = run(tmp_path, state="read")["deployments"]["minilm"]["record"]
    assert current["hash"] == "h3" and current["plan"]["secret_vars"] == dict(API_KEY, HF_TOKEN="vllm_fleet_hf_token")


def test_a_new_record_reads_back_unchanged(tmp_path):
    layout = deployment_layout(host_layout({"vllm_fleet_uv_root": "/srv/venvs"}), "minilm")
    today = dict(plan("h1"), accelerator="rocm", accelerator_setup=OLD_SETUP, secret_vars={}, drain_timeout=300,
                 layout=layout)
    run(tmp_path, state="recorded", deployment="minilm", plan=today)
    assert run(tmp_path, state="read")["deployments"]["minilm"]["record"]["plan"] == today
    assert run(tmp_path, state="read", deployment="minilm", revision="1")["selected"]["plan"] == today
    none = dict(plan("h2"), accelerator="none", accelerator_setup=None, secret_vars=API_KEY, drain_timeout=0,
                layout=layout)
    run(tmp_path, state="recorded", deployment="minilm", plan=none)
    assert run(tmp_path, state="read")["deployments"]["minilm"]["record"]["plan"] == none


def staged_plan(hash_, key, store, deployment="minilm", source="hub"):
    return {"deployment": deployment, "hash": hash_, "processes": [{"name": f"vllm-fleet-{deployment}", "argv": ["vllm"]}],
            "stage": {"source": source, "store": store, "key": key, "dir": f"{store}/{key}"}}


def test_pruned_revisions_take_their_snapshots_unless_a_record_still_uses_one(tmp_path):
    store = tmp_path / "models"
    for key in ("org--m--a", "org--m--b", "org--m--c", "org--m--keep"):
        (store / key).mkdir(parents=True)
        (store / key / "model.safetensors").write_bytes(b"x" * 10)
        (store / f"{key}.manifest.json").write_text("{}")
    operator_dir = tmp_path / "nfs" / "model"
    operator_dir.mkdir(parents=True)
    # another deployment on snapshot c, and one on an operator's directory (source path)
    other = run(tmp_path, state="recorded", deployment="other", plan=staged_plan("o1", "org--m--c", str(store), "other"))
    assert other["collected"] == []
    for i, key in enumerate(("a", "b", "b", "c"), start=1):
        out = run(tmp_path, state="recorded", deployment="minilm", plan=staged_plan(f"h{i}", f"org--m--{key}", str(store)),
                  keep=3, collect=True)
        assert out["revision"] == i
    # revision 1 (snapshot a) left; nothing else uses a: the directory and its manifest are gone
    assert [p["number"] for p in out["pruned"]] == [1]
    assert out["pruned"][0]["uses"] == [str(store / "org--m--a"), str(store / "org--m--a.manifest.json")]
    assert out["collected"] == [str(store / "org--m--a"), str(store / "org--m--a.manifest.json")]
    assert sorted(p.name for p in store.iterdir()) == [
        "org--m--b", "org--m--b.manifest.json", "org--m--c", "org--m--c.manifest.json",
        "org--m--keep", "org--m--keep.manifest.json"]
    # check mode reports what a prune would collect and removes nothing
    dry = run(tmp_path, check=True, state="recorded", deployment="minilm", plan=staged_plan("h5", "org--m--c", str(store)),
              keep=1, collect=True)
    assert dry["collected"] == [str(store / "org--m--b"), str(store / "org--m--b.manifest.json")]
    assert (store / "org--m--b").is_dir()
    # without collect nothing is removed (the default)
    quiet = run(tmp_path, state="recorded", deployment="minilm", plan=staged_plan("h5", "org--m--c", str(store)), keep=1)
    assert [p["number"] for p in quiet["pruned"]] == [2, 3, 4] and quiet["collected"] == []
    assert (store / "org--m--b").is_dir()
    # a deployment removed with collect takes what only it used; c stays for "other"
    run(tmp_path, state="recorded", deployment="minilm", plan=staged_plan("h6", "org--m--b", str(store)), keep=2)
    gone = run(tmp_path, state="absent", deployment="minilm", collect=True)
    assert gone["changed"] is True
    assert gone["collected"] == [str(store / "org--m--b"), str(store / "org--m--b.manifest.json")]
    assert sorted(p.name for p in store.iterdir()) == [
        "org--m--c", "org--m--c.manifest.json", "org--m--keep", "org--m--keep.manifest.json"]
    # an operator's directory (source path) is never collected
    run(tmp_path, state="recorded", deployment="nfs", plan=staged_plan("n1", None, str(tmp_path / "nfs"), "nfs", "path"))
    assert run(tmp_path, state="absent", deployment="nfs", collect=True)["collected"] == []
    assert (operator_dir).is_dir()
