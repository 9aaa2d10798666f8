"""Safe updates of a running deployment: three instances of the seed recipe behind the
deployment's own vllm-router (REAL vllm-router, FAKE H200 hosts, the stand-in GPU image in light
mode with 0.2 s per request so requests are in flight while an instance drains), under a bounded
client load for the whole rollout.

1. A good change rolls out batch by batch (canary, then the rest), each instance drained from
   the router, switched, health-gated and put back: 0 failed requests, every instance on the new
   revision, a revision recorded on every engine host.
2. A bad change (a flag vLLM rejects at start): the canary instance is put back on its previous
   container automatically, the other instances are never touched, the load sees 0 failed
   requests and the run fails with the summary.
3. rollback.yml to a named revision (and, in 4, to the previous one); a limit of one host.
4. A new model revision (vllm_fleet_model_source hub, a local Hub mirror with two commits):
   staged on every host before the first drain, a rollback that asks the Hub nothing, and the
   snapshot collected with the revisions that used it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from helpers import ROOT, Load, docker_inspect, events, host_exec, host_http, hub_mirror, playbook, served

pytestmark = pytest.mark.e2e

SEED = "baidu/ERNIE-4.5-VL-28B-A3B-PT"
ENGINES = ("roll-a", "roll-b", "roll-c")
GROUPS = {"roll_cluster": {"hosts": {"roll-a": "h200x8", "roll-b": "h200x8", "roll-c": "h200x8", "roll-r": "none"},
                           # one server per host (the default, auto, would start one per GPU; the
                           # replica test below asks for auto)
                           "vars": {"vllm_fleet_deployment": "roll", "vllm_fleet_replicas_per_host": 1}},
          # the replica test's ROCm host (no router): a replica per GPU, each its own render node
          "roll_rocm": {"hosts": {"roll-m": "mi300x8"}, "vars": {"vllm_fleet_deployment": "roll-rocm"}}}
HOST_VARS = {"roll-r": {"vllm_fleet_role": "router"}}
COMMON = {
    "vllm_fleet_recipe": SEED,
    "vllm_fleet_runtime": "docker",
    "vllm_fleet_docker_pull": "never",
    # light mode without the argv check (no import of the real vLLM: ~10 CPU-s per server start);
    # the bad revision below turns it on, so that vLLM's own parser refuses its flag
    "vllm_fleet_env": {"VLLM_STANDIN_SERVE": "light", "VLLM_STANDIN_LATENCY": "0.2", "VLLM_STANDIN_CHECK": "0"},
    "vllm_fleet_health_timeout": 90,
    "vllm_fleet_health_interval": 1,
    "vllm_fleet_services_wheelhouse": "/srv/wheels",
}
GOOD = ["--max-model-len", "4096"]


@pytest.fixture(scope="module")
def roll(make_fleet):
    made = make_fleet("roll", GROUPS, COMMON)
    hv = Path(made.inventory[-1]).with_name("host_vars.yml")
    hv.write_text(json.dumps({"all": {"hosts": HOST_VARS}}, indent=2) + "\n")
    made.inventory.append(str(hv))
    run = playbook("deploy.yml", made.inventory, "-l", "roll_cluster")
    assert run.rc == 0, run
    src = ROOT / "tests" / "e2e" / "load_client.py"
    assert host_exec(made.container("roll-r"), ["mkdir", "-p", "/opt/load"]).returncode == 0
    subprocess.run(["docker", "cp", str(src), f"{made.container('roll-r')}:/opt/load/load_client.py"], check=True)
    return made   # the module's tests tear it down (teardown.yml); make_fleet removes the hosts


NAMES = {"roll-a": "vllm-fleet-roll-i0", "roll-b": "vllm-fleet-roll-i1", "roll-c": "vllm-fleet-roll-i2"}


def running(fleet, host):
    c = docker_inspect(NAMES[host])
    assert c is not None and c["State"]["Running"], (host, c and c["State"])
    assert c["HostConfig"]["NetworkMode"] == f"container:{docker_inspect(fleet.container(host))['Id']}"
    assert docker_inspect(NAMES[host] + "-prev") is None, "the kept previous revision was not removed"
    return c


def test_rolling_update_under_load_has_no_failed_requests(roll, capsys):
    before = {h: running(roll, h)["Id"] for h in ENGINES}
    load = Load(roll, "good", SEED)
    run = playbook("deploy.yml", roll.inventory, "-l", "roll_cluster",
                   "-e", json.dumps({"vllm_fleet_extra_args": GOOD, "vllm_fleet_change_note": "max-model-len 4096"}))
    stats = load.stop(capsys)
    assert run.rc == 0, run
    assert stats["failed"] == 0, stats
    assert stats["requests"] >= 5 * 10 and stats["ok"] == stats["requests"], stats
    assert stats["min_workers"] == 2 and stats["max_workers"] == 3, stats   # capacity never dropped by more than a batch
    for host in ENGINES:
        c = running(roll, host)
        assert c["Id"] != before[host] and c["Config"]["Cmd"][-2:] == GOOD, host
        rec = host_exec(roll.container(host), ["sh", "-c", "cat /var/lib/vllm-fleet/state/roll/rev-*.json"])
        assert "max-model-len 4096" in rec.stdout and '"number": 2' in rec.stdout, rec.stdout[-500:]
        mode = host_exec(roll.container(host), ["stat", "-c", "%a", "/var/lib/vllm-fleet/state/roll"]).stdout.strip()
        assert mode == "700"
    workers = host_exec(roll.container("roll-r"), ["python3", "-c", "import urllib.request as u;print(u.urlopen('http://127.0.0.1:8000/list_workers').read().decode())"])
    assert len(json.loads(workers.stdout)["urls"]) == 3
    # the run's own report: the same floor the client saw, and each instance's time out of the router
    m = re.search(r"rollout: 3 instance\(s\): updated 3; serving capacity never below 2 of 3; "
                  r"out of service per instance: i0 ([0-9.]+) s, i1 ([0-9.]+) s, i2 ([0-9.]+) s", run.out)
    assert m, run.out[-3000:]
    assert all(0 < float(x) < run.seconds for x in m.groups()), m.groups()
    with capsys.disabled():
        print(f"summary: out of service per instance {', '.join(m.groups())} s (run {run.seconds:.0f} s)")


def test_a_bad_revision_is_rolled_back_under_load(roll, capsys):
    before = {h: running(roll, h) for h in ENGINES}
    kept = max(int(n) for n in re.findall(r'"number": (\d+)', _records(roll, "roll-a")))
    load = Load(roll, "bad", SEED)
    t0 = time.monotonic()
    checked = {**COMMON["vllm_fleet_env"], "VLLM_STANDIN_CHECK": "1"}   # vLLM's parser refuses the flag
    run = playbook("deploy.yml", roll.inventory, "-l", "roll_cluster",
                   "-e", json.dumps({"vllm_fleet_extra_args": GOOD + ["--no-such-flag-for-vllm"],
                                     "vllm_fleet_env": checked}))
    seconds = time.monotonic() - t0
    stats = load.stop(capsys)
    assert run.rc != 0, run
    assert stats["failed"] == 0, stats
    assert "rolled back" in run.out, run
    # the failed run names what the canary runs again (its newest revision) and that the new plan is not recorded
    assert re.search(rf"back on revision {kept}; the new plan [0-9a-f]{{16}} is not recorded", run.out), run.out[-3000:]
    m = re.search(r"rollout: 3 instance\(s\): rolled back 1, not reached 2; serving capacity never below 2 of 3; "
                  r"out of service per instance: i0 ([0-9.]+) s; drained: i0 [0-9.]+ s \(0 left, graceful stop\); "
                  r"restored: i0 in ([0-9.]+) s", run.out)
    assert m, run.out[-3000:]
    assert 0 < float(m.group(2)) <= float(m.group(1)), m.groups()
    canary = running(roll, "roll-a")
    # the canary serves its previous revision again: the same argv and image as before
    assert canary["Config"]["Cmd"] == before["roll-a"]["Config"]["Cmd"]
    assert canary["Image"] == before["roll-a"]["Image"]
    assert "--no-such-flag-for-vllm" not in canary["Config"]["Cmd"]
    # the other instances were never touched
    for host in ("roll-b", "roll-c"):
        c = running(roll, host)
        assert c["Id"] == before[host]["Id"] and c["State"]["StartedAt"] == before[host]["State"]["StartedAt"], host
    out = host_exec(roll.container("roll-a"), ["python3", "-c",
                    "import json,urllib.request as u;r=u.Request('http://127.0.0.1:8000/v1/completions',"
                    f"data=json.dumps({{'model':'{SEED}','prompt':'x','max_tokens':2}}).encode(),"
                    "headers={'Content-Type':'application/json'});print(u.urlopen(r,timeout=30).status)"])
    assert out.stdout.strip() == "200", out
    with capsys.disabled():
        print(f"rollback run: {seconds:.1f} s (canary rolled back, batches 2-3 not started)")


def _records(fleet, host):
    out = host_exec(fleet.container(host), ["sh", "-c", "cat /var/lib/vllm-fleet/state/roll/rev-*.json"]).stdout
    return out


def test_rollback_playbook_to_a_named_revision_under_load(roll, capsys):
    """rollback.yml -e vllm_fleet_rollback_to=1 under load; a revision no host has is refused.
    (rollback.yml to the previous revision, no number given: the model-revision test below.)"""
    # revisions so far on each engine host: 1 (the first deploy), 2 (max-model-len 4096; the bad
    # revision was rolled back and never recorded)
    load = Load(roll, "rollback", SEED)
    back = playbook("rollback.yml", roll.inventory, "-l", "roll_cluster", "-e", "vllm_fleet_rollback_to=1")
    stats = load.stop(capsys)
    assert back.rc == 0, back
    assert stats["failed"] == 0, stats
    assert stats["min_workers"] == 2 and stats["max_workers"] == 3, stats
    for host in ENGINES:
        c = running(roll, host)
        assert "--max-model-len" not in c["Config"]["Cmd"], (host, c["Config"]["Cmd"])   # revision 1's argv
        rec = _records(roll, host)
        assert '"number": 3' in rec and '"note": "rollback to revision 1"' in rec, rec[-800:]
    # a revision a host does not have: refused before any host changes, naming host and revision
    before = {h: running(roll, h)["Id"] for h in ENGINES}
    missing = playbook("rollback.yml", roll.inventory, "-l", "roll_cluster", "-e", "vllm_fleet_rollback_to=9")
    assert missing.rc != 0 and "no revision 9" in missing.out and "roll-a" in missing.out, missing
    assert "Traceback" not in missing.out
    assert {h: running(roll, h)["Id"] for h in ENGINES} == before


STORE = "/var/lib/vllm-fleet/models"
STAGED = re.compile(r"staged: (\d+) hosts, (\d+) fed in (\d+) rounds")


def test_a_new_model_revision_is_staged_everywhere_before_the_first_drain_and_rollback_downloads_nothing(roll, tmp_path):
    """vllm_fleet_model_source hub through a local Hub mirror holding two commits of the recipe's
    model: deploy commit 1, then roll out commit 2 (every engine host holds a verified copy before
    the first drain, from the run's own events), roll back to commit 1 keeping 1 revision: nothing
    asked of the Hub (every host still holds it), and commit 2's snapshot collected."""
    repos = []
    for n in (1, 2):
        src = tmp_path / f"rev{n}"
        src.mkdir()
        (src / "config.json").write_text(json.dumps({"model_type": "stand-in", "revision": n}))
        (src / "model.safetensors").write_bytes(os.urandom(1 << 20))
        repos.append((SEED, src))
    with hub_mirror(repos, tmp_path) as mirror:
        c1, c2 = mirror["revisions"][SEED]
        keys = {c: f"baidu--ERNIE-4.5-VL-28B-A3B-PT--{c}" for c in (c1, c2)}
        env = {"HF_ENDPOINT": mirror["endpoint"], "HF_HUB_DISABLE_TELEMETRY": "1"}

        def deploy(commit, playbook_name="deploy.yml", **more):
            over = {"vllm_fleet_model_source": "hub", "vllm_fleet_model_revision": commit,
                    "vllm_fleet_stage_cache": str(tmp_path / "cache"), "vllm_fleet_extra_args": GOOD, **more}
            run = playbook(playbook_name, roll.inventory, "-l", "roll_cluster", "-e", json.dumps(over), env=env)
            assert run.rc == 0, run
            return run

        try:
            deploy(c1)
            for host in ENGINES:
                c = running(roll, host)
                assert f"{STORE}/{keys[c1]}" in c["Config"]["Cmd"] and "HF_HUB_OFFLINE=1" in c["Config"]["Env"], host
            asked = len(mirror["log"].read_text().splitlines())
            # the rolling update to commit 2: staged on every host before anything drains
            run = deploy(c2)
            said = " ".join(run.out.split())
            assert STAGED.search(said) and STAGED.search(said).groups() == ("3", "3", "3"), said[-3000:]
            seen = events(run.out)
            verified = [i for i, (task, result, host) in enumerate(seen)
                        if task.startswith("Verify the copy against the manifest") and result in ("ok", "changed")]
            # the first drain: an engine taken out of the router (remove_worker through its API)
            drained = [i for i, (task, result, _) in enumerate(seen)
                       if task.endswith("Add and remove workers through the routers' API") and result == "changed"]
            assert {seen[i][2] for i in verified} == set(ENGINES), seen
            assert drained and max(verified) < min(drained), [seen[i] for i in verified + drained]
            # the Hub gave each file of commit 2 once for the 3 hosts
            got = [line.split()[2] for line in mirror["log"].read_text().splitlines()[asked:] if line.startswith("GET ")]
            assert sorted(got) == ["config.json", "model.safetensors"], got
            for host in ENGINES:
                assert f"{STORE}/{keys[c2]}" in running(roll, host)["Config"]["Cmd"], host
            # rollback.yml to the previous revision (commit 1's: no number given), keeping 1 revision
            # (a layer: the command is the docs' own): every host still holds commit 1, the Hub is
            # not asked; commit 2's snapshot goes with the revisions pruned
            previous = max(int(n) for n in re.findall(r'"number": (\d+)', _records(roll, "roll-a"))) - 1
            asked = len(mirror["log"].read_text().splitlines())
            kept_one = tmp_path / "revisions_kept_1.yml"
            kept_one.write_text(json.dumps({"roll_cluster": {"vars": {"vllm_fleet_revisions_kept": 1}}}) + "\n")
            back = playbook("rollback.yml", roll.inventory + [str(kept_one)], "-l", "roll_cluster", env=env)
            assert back.rc == 0, back
            assert mirror["log"].read_text().splitlines()[asked:] == [], "rollback asked the Hub"
            assert f"@{c1}: held by all 3 hosts, nothing fetched" in " ".join(back.out.split()), back.out[-3000:]
            for host in ENGINES:
                assert f"{STORE}/{keys[c1]}" in running(roll, host)["Config"]["Cmd"], host
                left = host_exec(roll.container(host), ["ls", "-A", STORE]).stdout.split()
                assert left == [keys[c1], f"{keys[c1]}.manifest.json"], (host, left)
                kept = host_exec(roll.container(host), ["ls", "/var/lib/vllm-fleet/state/roll"]).stdout.split()
                assert len(kept) == 1, (host, kept)   # vllm_fleet_revisions_kept 1
                assert f'"note": "rollback to revision {previous}"' in _records(roll, host), host
        finally:
            # the sibling containers' bind sources resolve on this machine: dockerd made them empty
            for key in keys.values():
                with contextlib.suppress(OSError):
                    os.rmdir(f"{STORE}/{key}")


def test_a_limit_of_one_host_updates_it_under_its_name_and_touches_no_other(roll):
    # -l one host of three single-node instances: the deployment is still planned over all its
    # hosts, so roll-b stays instance i1 (vllm-fleet-roll-i1), and only roll-b changes
    before = {h: running(roll, h) for h in ENGINES}
    changed = GOOD + ["--max-num-seqs", "8"]
    run = playbook("deploy.yml", roll.inventory, "-l", "roll-b", "-e", json.dumps({"vllm_fleet_extra_args": changed}))
    assert run.rc == 0, run
    assert set(run.recap) == {"roll-b"}, run.recap
    c = running(roll, "roll-b")
    assert c["Id"] != before["roll-b"]["Id"] and c["Config"]["Cmd"][-4:] == changed, c["Config"]["Cmd"]
    for host in ("roll-a", "roll-c"):
        now = running(roll, host)
        assert now["Id"] == before[host]["Id"] and now["State"]["StartedAt"] == before[host]["State"]["StartedAt"], host
    for name in ("vllm-fleet-roll", "vllm-fleet-roll-i0-prev", "vllm-fleet-roll-r0"):
        assert docker_inspect(name) is None, name   # no renamed or extra server
    assert "--max-num-seqs" in _records(roll, "roll-b") and "--max-num-seqs" not in _records(roll, "roll-a")
    workers = host_exec(roll.container("roll-r"), ["python3", "-c", "import urllib.request as u;print(u.urlopen("
                        "'http://127.0.0.1:8000/list_workers').read().decode())"])
    assert len(json.loads(workers.stdout)["urls"]) == 3, workers.stdout
    # a limit holding the router without its workers' hosts is refused before any host changes
    refused = playbook("deploy.yml", roll.inventory, "-l", "roll-r")
    said = " ".join(refused.out.split())   # the callback folds long messages
    assert refused.rc != 0 and "the limit (-l / vllm_fleet_target) cuts" in said, refused
    assert "'roll', a deployment whose engine hosts are all outside it: roll-a, roll-b, roll-c" in said, refused
    assert "Traceback" not in refused.out


def test_teardown_of_a_deployment_gone_from_the_inventory_leaves_nothing(roll):
    # the inventory now names another deployment: "roll" is only known from the hosts' records.
    # The new name is given to roll_cluster's hosts in a layer, not with -e: -e would give it to
    # roll-m too, joining its deployment to theirs (and a limit without roll-m would cut it)
    layer = Path(roll.inventory[-1]).with_name("renamed.yml")
    layer.write_text(json.dumps({"all": {"hosts": {h: {"vllm_fleet_deployment": "roll-renamed"}
                                                   for h in (*ENGINES, "roll-r")}}}) + "\n")
    run = playbook("teardown.yml", roll.inventory + [str(layer)], "-l", "roll_cluster",
                   "-e", json.dumps({"vllm_fleet_teardown_orphans": True}))
    assert run.rc == 0, run
    for host in ENGINES:
        assert docker_inspect(NAMES[host]) is None and docker_inspect(NAMES[host] + "-prev") is None, host
        assert host_exec(roll.container(host), ["test", "-e", "/var/lib/vllm-fleet/state/roll"]).returncode != 0
    r = roll.container("roll-r")
    for path in ("/etc/systemd/system/vllm-fleet-roll-router.service", "/opt/vllm-fleet/roll",
                 "/var/lib/vllm-fleet/state/roll"):
        assert host_exec(r, ["test", "-e", path]).returncode != 0, path
    listening = host_exec(r, ["ss", "-Htln", "sport = :8000"]).stdout
    assert listening.strip() == "", listening


def _replicas(prefix="vllm-fleet-roll-r"):
    """roll-a's replica containers (and kept -prev ones), by name suffix."""
    out = {}
    for i in range(8):
        for suffix in ("", "-prev"):
            c = docker_inspect(f"{prefix}{i}{suffix}")
            if c is not None:
                out[f"r{i}{suffix}"] = c
    return out


def _router_urls(fleet):
    out = host_exec(fleet.container("roll-r"), ["python3", "-c", "import urllib.request as u;print(u.urlopen("
                                                "'http://127.0.0.1:8000/list_workers').read().decode())"])
    return sorted(json.loads(out.stdout)["urls"])


ROUTER_UNIT = "vllm-fleet-roll-router.service"


def _router_process(fleet):
    """The router's main PID and start time (systemd), and the worker list its unit reads at its
    next start (its .workers file)."""
    show = host_exec(fleet.container("roll-r"), ["systemctl", "show", "-p", "MainPID,ExecMainStartTimestampMonotonic",
                                                 "--value", ROUTER_UNIT])
    workers = host_exec(fleet.container("roll-r"), ["cat", "/etc/vllm-fleet/vllm-fleet-roll-router.workers"])
    assert show.returncode == 0 and workers.returncode == 0, (show, workers)
    pid, started = show.stdout.split()
    assert int(pid) > 0, show.stdout
    urls = workers.stdout.strip().split("=", 1)[1].strip('"').split()
    return (int(pid), started), sorted(urls)


def test_replicas_fill_the_host_then_scale_down_and_update_under_load(roll, capsys):
    """The seed alone on a FAKE 8 x H200 host with vllm_fleet_replicas_per_host auto: 8 replicas,
    one GPU and one port each, all behind the router (a first deploy starts them at once). Down
    to 2: the 6 dropped ones leave the router and go, r0 and r1 run on untouched. Up to 3 under
    load, then back to 2 with a changed flag under load: r2 leaves, r0 (the canary) and r1 switch
    one after the other, 0 failed requests. The router is never restarted: every change of its
    workers goes through its API (same PID and start time), and its .workers file (what it
    reads at its next start) follows the plan.
    (VLLM_STANDIN_CHECK=0: the argv is compared here, not parsed by the real vLLM.)"""
    # roll-b and roll-c leave the deployment (`vllm_fleet_recipe:` unset in a layer): a limit
    # plans a deployment over all its hosts, so "roll" is now roll-a and its router roll-r
    layer = Path(roll.inventory[-1]).with_name("replicas_only_roll_a.yml")
    layer.write_text(json.dumps({"all": {"hosts": {"roll-b": {"vllm_fleet_recipe": None},
                                                   "roll-c": {"vllm_fleet_recipe": None}}}}) + "\n")
    inventory = roll.inventory + [str(layer)]
    limit = ["-l", "roll-a,roll-r"]
    env = {"VLLM_STANDIN_SERVE": "light", "VLLM_STANDIN_LATENCY": "0.2", "VLLM_STANDIN_CHECK": "0"}
    auto = {"vllm_fleet_replicas_per_host": "auto", "vllm_fleet_env": env}
    # the FAKE MI300X x8 host beside it (same run, in parallel)
    run = playbook("deploy.yml", inventory, "-l", "roll-a,roll-r,roll-m", "--diff", "-e", json.dumps(auto))
    assert run.rc == 0, run
    for i in range(8):   # the plan shows every replica's GPU set and port
        assert f"vllm-fleet-roll-r{i} (GPU {i}, port {8000 + i}): vllm serve" in " ".join(run.out.split()), i
    rocm_argv = seed_argv = ["vllm", "serve", SEED, "--trust-remote-code", "--tensor-parallel-size", "1",
                             "--mm-encoder-tp-mode", "data"]
    for i in range(8):   # ROCm: /dev/kfd and the replica's own render node, nothing else of /dev/dri
        c = docker_inspect(f"vllm-fleet-roll-rocm-r{i}")
        assert c is not None and c["State"]["Running"], (i, run.out[-2000:])
        assert sorted(d["PathOnHost"] for d in c["HostConfig"]["Devices"]) == [f"/dev/dri/renderD{128 + i}",
                                                                               "/dev/kfd"], i
        assert not c["HostConfig"].get("DeviceRequests")
        assert not [e for e in c["Config"]["Env"] if e.startswith(("HIP_VISIBLE_DEVICES=", "ROCR_VISIBLE_DEVICES="))]
        assert [*c["Config"]["Entrypoint"], *c["Config"]["Cmd"]] == served(rocm_argv) + ["--port", str(8000 + i)]
    for i in range(8):   # every replica answers on its own port (the health gate passed them all)
        status, _ = host_http(roll.container("roll-m"), "GET", f"http://127.0.0.1:{8000 + i}/v1/models")
        assert status == 200, i
    rocm_down = playbook("teardown.yml", inventory, "-l", "roll-m")
    assert rocm_down.rc == 0 and docker_inspect("vllm-fleet-roll-rocm-r0") is None, rocm_down
    got = _replicas()
    assert sorted(got) == [f"r{i}" for i in range(8)], sorted(got)
    for i in range(8):
        c = got[f"r{i}"]
        assert c["State"]["Running"], i
        requests = c["HostConfig"]["DeviceRequests"]
        assert [(r["Driver"], r["DeviceIDs"], r.get("Count") or 0) for r in requests] == [("nvidia", [str(i)], 0)]
        assert [*c["Config"]["Entrypoint"], *c["Config"]["Cmd"]] == served(seed_argv) + ["--port", str(8000 + i)]
    address = roll.hosts["roll-a"]["ip"]
    assert _router_urls(roll) == sorted(f"http://{address}:{8000 + i}" for i in range(8))
    router, on_disk = _router_process(roll)
    assert on_disk == _router_urls(roll)
    assert "idle GPUs" not in run.out   # 8 replicas x TP 1 cover the 8 GPUs
    # two replicas: r2-r7 leave the router and go; r0, r1 run as they were (same containers)
    two = {**auto, "vllm_fleet_replicas_per_host": 2}
    kept = {k: got[k]["Id"] for k in ("r0", "r1")}
    fewer = playbook("deploy.yml", inventory, *limit, "-e", json.dumps(two))
    assert fewer.rc == 0, fewer
    got = _replicas()
    assert sorted(got) == ["r0", "r1"] and {k: c["Id"] for k, c in got.items()} == kept, sorted(got)
    assert _router_urls(roll) == sorted(f"http://{address}:{p}" for p in (8000, 8001))
    assert _router_process(roll) == (router, _router_urls(roll)), "the router restarted or its file is stale"
    assert "idle GPUs: roll-a: GPU 2-7 of 8" in fewer.out, fewer.out[-2000:]
    # up to 3 under load: r2 starts, passes its gate and joins the router; r0 and r1 untouched
    load = Load(roll, "scale-up", SEED)
    three = {**auto, "vllm_fleet_replicas_per_host": 3}
    up = playbook("deploy.yml", inventory, *limit, "-e", json.dumps(three))
    up_stats = load.stop(capsys)
    assert up.rc == 0, up
    assert up_stats["failed"] == 0 and up_stats["requests"] >= 10, up_stats
    assert up_stats["min_workers"] == 2 and up_stats["max_workers"] == 3, up_stats
    got = _replicas()
    assert sorted(got) == ["r0", "r1", "r2"] and {k: got[k]["Id"] for k in kept} == kept, sorted(got)
    assert _router_urls(roll) == sorted(f"http://{address}:{p}" for p in (8000, 8001, 8002))
    assert _router_process(roll) == (router, _router_urls(roll)), "the router restarted or its file is stale"
    # back to 2 with a changed flag under load: r2 leaves the router and goes with the first
    # step, then the canary r0 and r1 switch, each out of the router while it switches
    load = Load(roll, "replicas", SEED)
    update = playbook("deploy.yml", inventory, *limit, "-e", json.dumps({**two, "vllm_fleet_extra_args": GOOD}))
    stats = load.stop(capsys)
    assert update.rc == 0, update
    assert stats["failed"] == 0 and stats["requests"] >= 30, stats
    assert stats["min_workers"] == 1 and stats["max_workers"] == 3, stats
    assert _router_process(roll) == (router, sorted(f"http://{address}:{p}" for p in (8000, 8001))), \
        "the router restarted or its file is stale"
    got = _replicas()
    assert sorted(got) == ["r0", "r1"], sorted(got)   # no -prev left
    for key, c in got.items():
        assert c["Id"] != kept[key] and c["Config"]["Cmd"][-4:] == GOOD + ["--port", str(8000 + int(key[1:]))]
    down = playbook("teardown.yml", inventory, *limit)
    assert down.rc == 0 and _replicas() == {}, down
    with capsys.disabled():
        print(f"\nreplicas: deploy 8 in {run.seconds:.0f} s, down to 2 in {fewer.seconds:.0f} s, up to 3 under "
              f"load in {up.seconds:.0f} s, down to 2 with an update under load in {update.seconds:.0f} s, "
              f"teardown in {down.seconds:.0f} s; router PID {router[0]} throughout")
