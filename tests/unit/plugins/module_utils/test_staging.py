"""staging.py: snapshot keys, the plan's stage block, manifests, the disk check and the fan-out rounds."""

import math
import os

import pytest

from vllm_fleet import staging


def test_snapshot_key_is_one_directory_per_model_revision():
    assert staging.snapshot_key("baidu/ERNIE-4.5-VL-28B-A3B-PT", None) == "baidu--ERNIE-4.5-VL-28B-A3B-PT--main"
    assert staging.snapshot_key("org/m", "0123abc") == "org--m--0123abc"


@pytest.mark.parametrize("model, revision", [("../etc", None), ("org/..", None), ("org/m", "../x"),
                                             ("org/m", "a/b"), ("org/m", "x..y"), ("org", None)])
def test_snapshot_key_refuses_names_that_could_leave_the_store(model, revision):
    with pytest.raises(ValueError):
        staging.snapshot_key(model, revision)


def test_stage_block_of_each_source():
    # unset: hub (the model is fetched once per fleet and staged), unless a directory is named
    default, problems = staging.stage_block({}, "org/m")
    assert problems == [] and default["source"] == "hub" and default["dir"] == "/var/lib/vllm-fleet/models/org--m--main"
    assert staging.stage_block({"model_path": "/srv/m"}, "org/m") == (None, [])
    assert staging.stage_block({"model_source": "none"}, "org/m") == (None, [])
    block, problems = staging.stage_block({"model_source": "hub", "model_revision": "v2"}, "org/m")
    assert problems == []
    assert block["dir"] == "/var/lib/vllm-fleet/models/org--m--v2"
    assert block["manifest"] == "/var/lib/vllm-fleet/models/org--m--v2.manifest.json"
    assert block["source"] == "hub" and block["margin_pct"] == 10
    block, problems = staging.stage_block({"model_source": "controller", "model_controller_path": "/srv/m"}, "org/m")
    assert problems == [] and block["controller_path"] == "/srv/m" and block["key"] == "org--m--main"
    block, problems = staging.stage_block({"model_source": "path", "model_path": "/nfs/m"}, "org/m")
    assert problems == [] and block["dir"] == "/nfs/m" and block["manifest"] is None


def test_the_store_is_the_operators_choice_and_checked_like_every_root():
    """vllm_fleet_stage_store: the snapshot and its manifest move with it; the contract refuses
    a store in a system tree (the collector removes from it) and one not in normal form."""
    block, problems = staging.stage_block({"model_source": "hub", "stage_store": "/mnt/nvme/models"}, "org/m")
    assert problems == [] and block["dir"] == "/mnt/nvme/models/org--m--main"
    assert block["manifest"] == "/mnt/nvme/models/org--m--main.manifest.json" and block["store"] == "/mnt/nvme/models"
    from vllm_fleet import contract
    for bad in ("/etc/models", "/var/lib", "models", "/mnt/nvme/models/", "/mnt/a:b"):
        found = contract.check("gpu-1", {"vllm_fleet_stage_store": bad})[1]
        assert len(found) == 1 and "vllm_fleet_stage_store" in found[0] and "gpu-1" in found[0], (bad, found)
    assert contract.check("gpu-1", {"vllm_fleet_stage_store": "/mnt/nvme/models"})[1] == []


@pytest.mark.parametrize("settings, word", [
    ({"model_source": "hub", "model_path": "/m"}, "vllm_fleet_model_path"),
    ({"model_source": "path"}, "needs vllm_fleet_model_path"),
    ({"model_source": "controller"}, "needs vllm_fleet_model_controller_path"),
    ({"model_source": "hub", "model_controller_path": "/m"}, "vllm_fleet_model_controller_path"),
    ({"model_source": "none", "model_revision": "v1"}, "vllm_fleet_model_revision"),
    ({"model_path": "/m", "model_revision": "v1"}, "vllm_fleet_model_revision"),
    ({"model_source": "hub", "model_revision": "../x"}, "vllm_fleet_model_revision"),
    ({"model_source": "ftp"}, "vllm_fleet_model_source"),
])
def test_stage_block_refuses_settings_that_contradict(settings, word):
    block, problems = staging.stage_block(settings, "org/m")
    assert block is None and len(problems) == 1 and word in problems[0]


def _tree(root, files):
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_manifest_then_verify_finds_each_kind_of_difference(tmp_path):
    src = tmp_path / "src"
    _tree(src, {"config.json": b"{}", "model.safetensors": b"x" * 1000, "sub/tok.json": b"t",
                ".cache/huggingface/download/x.lock": b"meta"})
    manifest = staging.build_manifest(str(src), "org/m", "main", "c0ffee")
    assert sorted(manifest["files"]) == ["config.json", "model.safetensors", "sub/tok.json"]
    assert manifest["bytes"] == 1003 and manifest["commit"] == "c0ffee"
    assert staging.verify(str(src), manifest) == []
    assert staging.loads(staging.dumps(manifest), "m.json") == manifest
    (src / "model.safetensors").write_bytes(b"y" * 1000)           # same size, other bytes
    (src / "sub" / "tok.json").unlink()
    (src / "stale.bin").write_bytes(b"old")
    (src / "config.json").write_bytes(b"{} ")
    problems = staging.verify(str(src), manifest)
    assert problems == ["config.json: 3 bytes, the manifest says 2", "model.safetensors: sha256 differs from the manifest",
                        "sub/tok.json: missing", "stale.bin: not in the manifest"]
    assert staging.verify(str(src), manifest, digests=False) == [p for p in problems if "sha256" not in p]
    assert staging.bytes_present(str(src), manifest) == 1000      # model.safetensors has its size


def test_manifest_refuses_an_empty_or_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError):
        staging.build_manifest(str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="holds no file"):
        staging.build_manifest(str(tmp_path))


@pytest.mark.parametrize("text", ["{", "[]", '{"version": 1, "files": {"../x": {"size": 1, "sha256": "' + "a" * 64 + '"}}}',
                                  '{"version": 1, "files": {"x": {"size": 1, "sha256": "zz"}}}', '{"version": 9, "files": {}}'])
def test_loads_refuses_what_is_not_a_manifest(text):
    with pytest.raises(ValueError, match="m.json"):
        staging.loads(text, "m.json")


def test_disk_need_counts_what_is_missing_plus_the_margin():
    assert staging.disk_need(1000, 0, 10) == 1100
    assert staging.disk_need(1000, 1000, 10) == 100
    assert staging.disk_need(1000, 400, 0) == 600


def test_free_bytes_measures_the_nearest_existing_parent(tmp_path):
    probe, free = staging.free_bytes(str(tmp_path / "a" / "b"))
    assert probe == str(tmp_path) and free > 0


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 9, 32, 500])
def test_fan_out_doubles_the_holders_each_round(n):
    hosts = [f"h{i}" for i in range(n)]
    rounds = staging.fan_out(hosts)
    assert rounds[0] == [(staging.CONTROLLER, "h0")]
    sent_by_controller = sum(1 for r in rounds for s, _ in r if s == staging.CONTROLLER)
    assert sent_by_controller == 1
    assert len(rounds) == 1 + math.ceil(math.log2(n))
    holders = {"h0"}
    for pairs in rounds[1:]:
        senders = [s for s, _ in pairs]
        assert set(senders) <= holders and len(senders) == len(set(senders))   # one send per holder per round
        holders |= {r for _, r in pairs}
    assert holders == set(hosts)
    received = [r for pairs in rounds for _, r in pairs]
    assert sorted(received) == sorted(hosts)                                    # each host fed once


def test_fan_out_starts_from_hosts_that_hold_it_and_prefers_the_rack():
    assert staging.fan_out(["a", "b"], have=["a", "b"]) == []
    rounds = staging.fan_out(["a", "b", "c", "d"], have=["a"], rack_of={"a": "r1", "b": "r2", "c": "r1", "d": "r2"})
    assert rounds[0] == [("a", "c")]                   # no controller round; a's rack first
    assert sorted(rounds[1]) == [("a", "b"), ("c", "d")]


def test_schedule_indexes_the_rounds_by_host():
    doc = staging.schedule(staging.fan_out(["a", "b", "c"]))
    assert doc["receives"] == {"a": {"round": 0, "from": "localhost"}, "b": {"round": 1, "from": "a"},
                               "c": {"round": 2, "from": "a"}}
    assert doc["sends"]["a"] == [{"round": 1, "to": "b"}, {"round": 2, "to": "c"}]


def test_without_relay_the_controller_feeds_every_host_in_one_round():
    assert staging.fan_out(["a", "b", "c"], have=["b"], relay=False) == [[("localhost", "a"), ("localhost", "c")]]
    doc = staging.fleet_schedule({h: {"source": "controller", "key": "o--m--main", "model": "o/m", "revision": "main",
                                      "controller_path": "/src", "dir": "/s/o--m--main", "store": "/s",
                                      "manifest": "/s/o--m--main.manifest.json"} for h in ("a", "b")},
                                 "/cache", relay=False)
    assert doc["rounds"] == 1 and doc["senders"] == [] and doc["receivers"] == ["a", "b"]
    assert doc["snapshots"]["o--m--main"]["controller_dir"] == "/src"


def test_fleet_schedule_groups_hosts_by_snapshot_and_leaves_path_sources_to_the_check():
    block = {"source": "hub", "key": "o--m--v1", "model": "o/m", "revision": "v1", "controller_path": None,
             "dir": "/s/o--m--v1", "store": "/s", "manifest": "/s/o--m--v1.manifest.json", "rack": None}
    doc = staging.fleet_schedule({"a": block, "b": block, "c": None,
                                  "d": {"source": "path", "dir": "/nfs/m", "key": None}}, "/cache/")
    snap = doc["snapshots"]["o--m--v1"]
    assert snap["hosts"] == ["a", "b"] and snap["controller_dir"] == "/cache/o--m--v1"
    assert snap["controller_manifest"] == "/cache/o--m--v1.manifest.json"
    assert doc["checked"] == {"d": "/nfs/m"} and doc["rounds"] == 2
    # the rsync endpoints are the schedule's: the snapshot's contents on the controller and on a
    # holder, a receiver's directory below the store its per-run key is restricted to
    assert doc["hosts"]["a"]["send"] == {"1": [{"key": "o--m--v1", "to": "b", "dest": "root@b:o--m--v1/"}]}
    assert (snap["controller_src"], snap["src"]) == ("/cache/o--m--v1/", "/s/o--m--v1/")
    assert doc["trust"] == {"dir": "/run/vllm-fleet-stage", "key": "/run/vllm-fleet-stage/key",
                            "known_hosts": "/run/vllm-fleet-stage/known_hosts"}
    assert doc["ssh"][0] == "-e" and doc["ssh"][1].split() == [
        "ssh", "-i", "/run/vllm-fleet-stage/key", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o",
        "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=/run/vllm-fleet-stage/known_hosts", "-o",
        "GlobalKnownHostsFile=/dev/null"]
    assert doc["seed_python"] == doc["seed_venv"] + "/bin/python"
    at = staging.fleet_schedule({"a": block, "b": block}, "/cache", addresses={"a": "10.0.0.1", "b": "10.0.0.2"})
    assert at["hosts"]["a"]["send"]["1"][0]["dest"] == "root@10.0.0.2:o--m--v1/"
    with pytest.raises(ValueError, match="b: stages o--m--v1 at /t/o--m--v1"):
        staging.fleet_schedule({"a": block, "b": dict(block, dir="/t/o--m--v1")}, "/cache")


def _recorded(dep, key=None, source="hub", store="/var/lib/vllm-fleet/models", caches=()):
    stage = {"source": source, "store": store, "key": key, "dir": f"{store}/{key}"} if key else None
    return {"deployment": dep, "stage": stage,
            "processes": [{"name": f"vllm-fleet-{dep}", "compile_cache": c} for c in caches]}


def test_plan_uses_names_the_snapshot_its_manifest_and_the_compile_caches():
    cache = f"{staging.COMPILE_CACHE_ROOT}/minilm/0123456789ab"
    uses = staging.plan_uses(_recorded("minilm", "org--m--main", caches=[cache, cache]))
    assert uses == [cache, f"{staging.STORE}/org--m--main", f"{staging.STORE}/org--m--main.manifest.json"]
    # a path source's directory is the operator's: never a use the collector could remove
    assert staging.plan_uses(_recorded("minilm", "org--m--main", source="path")) == []
    assert staging.plan_uses({"deployment": "minilm", "processes": [{"name": "x"}]}) == []


@pytest.mark.parametrize("plan", [
    _recorded("minilm", "../etc"),                                       # a key that leaves the store
    _recorded("minilm", "org--m--main", store="/"),                     # the store at the root
    _recorded("minilm", "org--m--main", store="/var/lib/../../etc"),    # a store that is not normalized
    _recorded("minilm", caches=[f"{staging.COMPILE_CACHE_ROOT}/other/0123456789ab"]),   # another deployment's
    _recorded("minilm", caches=[f"{staging.COMPILE_CACHE_ROOT}/minilm"]),               # the whole root
    _recorded("minilm", caches=["/var/lib/vllm-fleet/state/0123456789ab"]),            # outside the root
    _recorded("../x", caches=[f"{staging.COMPILE_CACHE_ROOT}/../x/0123456789ab"]),
])
def test_plan_uses_ignores_paths_the_plan_could_not_have_made(plan):
    assert staging.plan_uses(plan) == []


def test_collectable_keeps_what_any_staying_plan_still_uses():
    a, b, c = (_recorded("minilm", f"org--m--{r}", caches=[f"{staging.COMPILE_CACHE_ROOT}/minilm/{h * 12}"])
               for r, h in (("a", "a"), ("b", "b"), ("c", "a")))
    # revision a leaves; c still uses its compile cache (same build), nothing uses snapshot a
    assert staging.collectable([a], [b, c]) == [f"{staging.STORE}/org--m--a", f"{staging.STORE}/org--m--a.manifest.json"]
    # another deployment staying on the same snapshot keeps it
    assert staging.collectable([a], [_recorded("other", "org--m--a")]) == [f"{staging.COMPILE_CACHE_ROOT}/minilm/{'a' * 12}"]
    assert staging.collectable([], [a]) == []


def test_only_a_commit_every_host_holds_is_not_fetched_again():
    commit = "0123456789abcdef0123456789abcdef01234567"

    def fetch(source, revision, have):
        block = {"source": source, "key": f"o--m--{revision}", "model": "o/m", "revision": revision,
                 "controller_path": "/src" if source == "controller" else None, "dir": f"/s/o--m--{revision}",
                 "store": "/s", "manifest": f"/s/o--m--{revision}.manifest.json"}
        return staging.fleet_schedule({"a": block, "b": block}, "/cache", have=have)["snapshots"][f"o--m--{revision}"]["fetch"]

    assert fetch("hub", commit, ["a", "b"]) is False
    assert fetch("hub", commit, ["a"]) is True              # b still needs it
    assert fetch("hub", "main", ["a", "b"]) is True         # a branch can move
    assert fetch("hub", commit[:12], ["a", "b"]) is True    # a short id is not pinned
    assert fetch("controller", commit, ["a", "b"]) is True  # its files can change under the same name


def test_a_seed_host_downloads_and_the_fan_out_starts_there():
    """vllm_fleet_stage_download host: the first host by name downloads a Hub snapshot to fetch;
    once it holds it the rounds start from it (the controller sends nothing); a controller source,
    a snapshot every host already holds and the controller mode have no seed."""
    hub = {"source": "hub", "key": "o--m--main", "model": "o/m", "revision": "main", "controller_path": None,
           "dir": "/s/o--m--main", "store": "/s", "manifest": "/s/o--m--main.manifest.json", "rack": None}
    hosts = {h: hub for h in ("c", "a", "b", "d")}
    found = staging.fleet_schedule(hosts, "/cache", download="host")
    assert found["snapshots"]["o--m--main"]["seed"] == "a" and found["seeds"] == ["a"]
    assert found["seed_venv"] == "/opt/vllm-fleet/stage-tools"
    # after the seed's download it holds a verified copy: 3 receivers in 2 rounds, none from the controller
    after = staging.fleet_schedule(hosts, "/cache", have=["a"], download="host")
    assert after["rounds"] == 2 and "localhost" not in after["hosts"] and after["receivers"] == ["b", "c", "d"]
    assert [len(r) for r in after["snapshots"]["o--m--main"]["rounds"]] == [1, 2]
    assert staging.fleet_schedule(hosts, "/cache")["seeds"] == []
    controller = {h: dict(hub, source="controller", controller_path="/src") for h in ("a", "b")}
    assert staging.fleet_schedule(controller, "/cache", download="host")["seeds"] == []
    commit = "0123456789abcdef0123456789abcdef01234567"
    held = {h: dict(hub, revision=commit, key=f"o--m--{commit}") for h in ("a", "b")}
    assert staging.fleet_schedule(held, "/cache", have=["a", "b"], download="host")["seeds"] == []


@pytest.mark.parametrize("download, relay, word", [("peer", True, "is not one of controller, host"),
                                                   ("host", False, "needs vllm_fleet_stage_fanout true")])
def test_a_seed_download_needs_the_fan_out(download, relay, word):
    with pytest.raises(ValueError, match=word):
        staging.fleet_schedule({}, "/cache", relay=relay, download=download)
