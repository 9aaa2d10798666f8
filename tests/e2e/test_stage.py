"""The stage phase (issue 23): a model snapshot on the controller fanned out to 8 test hosts.

A real small model (the testbed's all-MiniLM-L6-v2) plus a generated filler file is staged with
``vllm_fleet_model_source: controller`` by playbooks/stage.yml on 8 light test hosts (no GPU,
no server started): the controller sends it once, then every host that holds a verified copy
sends it on over SSH with a key made for the run (rsync, restricted to the store by rrsync).
In order:

1. a host whose store is a 4 MiB tmpfs stops the run before any transfer (host, path, needed, free);
2. the fan-out: 8 hosts in 4 rounds, every copy sha256-verified, the controller sent the snapshot
   once (bytes from rsync's own --stats), no key or known_hosts of the run left on any host;
3. a re-run sends nothing;
4. a copy corrupted on one host (same size, other bytes) is found and fed again from a host;
5. an interrupted transfer (half of the filler left in the partial dir) resumes: the hosts send
   far less than the filler's size;
6. the ``hub`` source: downloaded once through a local Hub mirror (tests/testbed/hub_mirror.py,
   the real huggingface_hub client with HF_ENDPOINT), whose log shows one download per file,
   then fanned out to the 8 hosts;
7. the ``hub`` source downloaded on a seed host (vllm_fleet_stage_download host): the mirror's log
   shows every file asked once by that host, the controller sends nothing;
8. the ``path`` source: listed on every host, never copied; a host whose directory differs is named.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

import fleet as testbed  # tests/testbed/fleet.py (on sys.path: conftest.py)
from helpers import MINILM, MINILM_DIR, host_exec, hub_mirror, playbook

pytestmark = pytest.mark.e2e

HOSTS = [f"stage{i}" for i in range(8)]
GROUPS = {"stagers": {"hosts": {h: "none" for h in HOSTS}}}
KEY = "sentence-transformers--all-MiniLM-L6-v2--main"
STORE = "/var/lib/vllm-fleet/models"
DIR = f"{STORE}/{KEY}"
FILLER_MIB = 24
SUMMARY = re.compile(r"staged: (\d+) hosts, (\d+) fed in (\d+) rounds in ([0-9.]+) s; controller sent (\d+) bytes, "
                     r"hosts sent (\d+) bytes \(snapshot (\d+) bytes\)")


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stage-src") / "minilm"
    shutil.copytree(MINILM_DIR, root)
    (root / "filler.bin").write_bytes(os.urandom(FILLER_MIB << 20))   # random: rsync cannot compress it away
    return root


@pytest.fixture(scope="module")
def fleet(make_fleet, snapshot):
    common = {k: v for k, v in MINILM.items() if k != "vllm_fleet_model_path"}
    common.update({"vllm_fleet_runtime": "docker", "vllm_fleet_deployment": "stage-mini",
                   "vllm_fleet_model_source": "controller", "vllm_fleet_model_controller_path": str(snapshot),
                   "vllm_fleet_replicas_per_host": 1})
    return make_fleet("stage", GROUPS, common)


def _run(fleet):
    run = playbook("stage.yml", fleet.inventory)
    match = SUMMARY.search(" ".join(run.out.split()))     # (the callback folds long lines)
    return run, match


def _sha(fleet, host: str, rel: str) -> str:
    out = host_exec(fleet.container(host), ["sha256sum", f"{DIR}/{rel}"])
    assert out.returncode == 0, out.stderr
    return out.stdout.split()[0]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_host_short_of_disk_stops_the_run_before_any_transfer(fleet):
    small = fleet.container("stage7")
    host_exec(small, ["mkdir", "-p", STORE])
    mounted = host_exec(small, ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", STORE])
    assert mounted.returncode == 0, mounted.stderr
    try:
        run, _ = _run(fleet)
        assert run.rc != 0
        assert re.search(rf"stage7: {DIR}: not enough free disk for the model snapshot: needs [0-9.]+ MiB "
                         rf"\(\d+ bytes: .* missing \+ 10 % margin\), {STORE} has [0-9.]+ MiB \(\d+ bytes\) free", " ".join(run.out.split())), run.out
        for host in HOSTS:      # nothing was sent anywhere
            assert host_exec(fleet.container(host), ["test", "-e", DIR]).returncode != 0, host
    finally:
        assert host_exec(small, ["umount", STORE]).returncode == 0


def test_fan_out_to_8_hosts_the_controller_sends_once(fleet, snapshot):
    run, match = _run(fleet)
    assert run.rc == 0, run.out
    assert match, run.out
    hosts, fed, rounds, seconds, by_controller, by_hosts, size = match.groups()
    assert (int(hosts), int(fed), int(rounds)) == (8, 8, 4)
    size = int(size)
    assert size > FILLER_MIB << 20
    # rsync's own count of what the controller sent: the snapshot once (plus protocol overhead)
    assert size <= int(by_controller) < 1.05 * size, run.out
    assert int(by_hosts) >= 7 * size
    print(f"fan-out: 8 hosts, 4 rounds, {float(seconds):.1f} s; controller sent {int(by_controller)} bytes "
          f"({int(by_controller) / size:.2f} x the snapshot), hosts {int(by_hosts)}")
    want = _digest(snapshot / "filler.bin")
    for host in HOSTS:
        assert _sha(fleet, host, "filler.bin") == want, host
        assert _sha(fleet, host, "config.json") == _digest(snapshot / "config.json"), host
        c = fleet.container(host)
        assert host_exec(c, ["test", "-s", f"{DIR}.manifest.json"]).returncode == 0, host
        # no trust of the run outlives it
        assert host_exec(c, ["test", "-e", "/run/vllm-fleet-stage"]).returncode != 0, host
        keys = host_exec(c, ["cat", "/root/.ssh/authorized_keys"]).stdout
        assert "vllm-fleet-stage" not in keys and "rrsync" not in keys, host


def test_a_rerun_sends_nothing(fleet):
    run, match = _run(fleet)
    assert run.rc == 0, run.out
    assert match and match.group(2) == "0" and match.group(5) == "0" and match.group(6) == "0", run.out


def test_a_corrupted_copy_is_found_and_fed_again_from_a_host(fleet, snapshot):
    c = fleet.container("stage3")
    bad = host_exec(c, ["dd", "if=/dev/zero", f"of={DIR}/filler.bin", "bs=4096", "count=1", "seek=100", "conv=notrunc"])
    assert bad.returncode == 0, bad.stderr
    run, match = _run(fleet)
    assert run.rc == 0, run.out
    assert match and match.group(2) == "1" and match.group(5) == "0", run.out   # one host fed, not by the controller
    assert re.search(r"-> stage3", run.out), run.out
    assert _sha(fleet, "stage3", "filler.bin") == _digest(snapshot / "filler.bin")


def test_an_interrupted_transfer_resumes(fleet, snapshot):
    c = fleet.container("stage5")
    half = (FILLER_MIB << 20) // 2
    cmd = (f"set -e; mkdir -p {DIR}/.vllm-fleet-partial; head -c {half} {DIR}/filler.bin > {DIR}/.vllm-fleet-partial/filler.bin; "
           f"rm {DIR}/filler.bin")
    assert host_exec(c, ["sh", "-c", cmd]).returncode == 0
    run, match = _run(fleet)
    assert run.rc == 0, run.out
    assert match and match.group(2) == "1", run.out
    sent = int(match.group(6))
    assert sent < 0.75 * (FILLER_MIB << 20), f"{sent} bytes sent to resume a half-sent {FILLER_MIB} MiB file"
    print(f"resume: {sent} bytes sent for the missing half of {FILLER_MIB} MiB")
    assert _sha(fleet, "stage5", "filler.bin") == _digest(snapshot / "filler.bin")
    assert host_exec(c, ["test", "-e", f"{DIR}/.vllm-fleet-partial/filler.bin"]).returncode != 0


@pytest.fixture
def mirror(snapshot, tmp_path):
    """tests/testbed/hub_mirror.py serving the snapshot as the recipe's Hub repo (on loopback)."""
    with hub_mirror([("sentence-transformers/all-MiniLM-L6-v2", snapshot)], tmp_path) as served:
        yield dict(served, commit=served["commit"]["sentence-transformers/all-MiniLM-L6-v2"])


def test_the_hub_source_downloads_once_per_fleet_through_a_mirror(fleet, snapshot, mirror, tmp_path):
    over = {"vllm_fleet_model_source": "hub", "vllm_fleet_model_revision": mirror["commit"],
            "vllm_fleet_model_controller_path": None, "vllm_fleet_stage_cache": str(tmp_path / "cache")}
    run = playbook("stage.yml", fleet.inventory, "-e", json.dumps(over),
                   env={"HF_ENDPOINT": mirror["endpoint"], "HF_HUB_DISABLE_TELEMETRY": "1"})
    assert run.rc == 0, run.out
    match = SUMMARY.search(" ".join(run.out.split()))
    assert match and match.groups()[:3] == ("8", "8", "4"), run.out
    # the mirror's own log: every file of the snapshot downloaded exactly once for the 8 hosts
    got = [line.split()[2] for line in mirror["log"].read_text().splitlines() if line.startswith("GET ")]
    files = sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file())
    assert sorted(got) == files, got
    key = f"sentence-transformers--all-MiniLM-L6-v2--{mirror['commit']}"
    want = _digest(snapshot / "filler.bin")
    for host in HOSTS:
        out = host_exec(fleet.container(host), ["sha256sum", f"{STORE}/{key}/filler.bin"])
        assert out.returncode == 0 and out.stdout.split()[0] == want, (host, out.stderr)
        assert host_exec(fleet.container(host), ["test", "-e", f"{STORE}/{key}/.cache"]).returncode != 0, host


def test_the_hub_source_downloaded_on_a_seed_host_the_controller_sends_nothing(fleet, snapshot, tmp_path):
    """vllm_fleet_stage_download host: the first host by name (stage0) gets huggingface_hub in a venv
    of its own (from the hosts' wheelhouse) and downloads the snapshot from the mirror itself (the
    mirror's log: every file once, asked by stage0's address); it counts as a verified holder, the
    fan-out starts there: the controller sends 0 bytes and downloads nothing."""
    for host in HOSTS:                      # nothing held: every host needs the snapshot
        assert host_exec(fleet.container(host), ["rm", "-rf", STORE]).returncode == 0
    with hub_mirror([("sentence-transformers/all-MiniLM-L6-v2", snapshot)], tmp_path,
                    bind=testbed.gateway()) as mirror:
        commit = mirror["commit"]["sentence-transformers/all-MiniLM-L6-v2"]
        over = {"vllm_fleet_model_source": "hub", "vllm_fleet_model_revision": commit,
                "vllm_fleet_model_controller_path": None, "vllm_fleet_stage_cache": str(tmp_path / "cache"),
                "vllm_fleet_stage_download": "host", "vllm_fleet_stage_wheelhouse": "/srv/wheels"}
        # check mode first: says what it would do, asks the Hub nothing, changes no host
        check = playbook("stage.yml", fleet.inventory, "--check", "-e", json.dumps(over),
                         env={"HF_ENDPOINT": mirror["endpoint"], "HF_HUB_DISABLE_TELEMETRY": "1"})
        assert check.rc == 0, check.out[-3000:]
        assert f"check mode: sentence-transformers/all-MiniLM-L6-v2@{commit} would be downloaded on stage0 and staged on 8 hosts" \
            in " ".join(check.out.split()), check.out[-3000:]
        assert mirror["log"].read_text() == "" and "staged:" not in check.out
        assert host_exec(fleet.container("stage0"), ["test", "-e", STORE]).returncode != 0
        run = playbook("stage.yml", fleet.inventory, "-e", json.dumps(over),
                       env={"HF_ENDPOINT": mirror["endpoint"], "HF_HUB_DISABLE_TELEMETRY": "1"})
        log = mirror["log"].read_text().splitlines()
    assert run.rc == 0, run.out[-4000:]
    said = " ".join(run.out.split())
    match = SUMMARY.search(said)
    # the seed holds it after its download; 7 hosts fed from it in 3 rounds (1 -> 2 -> 4 -> 8)
    assert match and match.groups()[:3] == ("8", "7", "3") and match.group(5) == "0", said[-3000:]
    assert re.search(r"downloaded on stage0 in [0-9.]+ s \(commit " + commit, said), said[-3000:]
    got = [line.split() for line in log if line.startswith("GET ")]
    files = sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file())
    assert sorted(g[2] for g in got) == files, got
    assert {g[4] for g in got} == {f"from={fleet.hosts['stage0']['ip']}"}, got
    assert not (tmp_path / "cache").exists()
    key = f"sentence-transformers--all-MiniLM-L6-v2--{commit}"
    want = _digest(snapshot / "filler.bin")
    for host in HOSTS:
        out = host_exec(fleet.container(host), ["sha256sum", f"{STORE}/{key}/filler.bin"])
        assert out.returncode == 0 and out.stdout.split()[0] == want, (host, out.stderr)
    venv = host_exec(fleet.container("stage0"), ["/opt/vllm-fleet/stage-tools/bin/python", "-c", "import huggingface_hub"])
    assert venv.returncode == 0, venv.stderr
    assert host_exec(fleet.container("stage1"), ["test", "-e", "/opt/vllm-fleet/stage-tools"]).returncode != 0


def test_the_path_source_is_checked_on_every_host_never_copied(fleet):
    """vllm_fleet_model_source path: a directory every host mounts is listed on every host (files
    and sizes), never copied; a host whose directory differs fails the run, named."""
    for host in HOSTS:
        made = host_exec(fleet.container(host), ["sh", "-c", f"mkdir -p /srv/m && cp {MINILM_DIR}/config.json /srv/m/"])
        assert made.returncode == 0, made.stderr
    over = {"vllm_fleet_model_source": "path", "vllm_fleet_model_path": "/srv/m", "vllm_fleet_model_controller_path": None}
    run = playbook("stage.yml", fleet.inventory, "-e", json.dumps(over))
    assert run.rc == 0, run.out
    assert "staged:" not in run.out          # nothing fanned out
    host_exec(fleet.container("stage2"), ["sh", "-c", "echo extra > /srv/m/extra.bin"])
    run = playbook("stage.yml", fleet.inventory, "-e", json.dumps(over))
    assert run.rc != 0
    said = " ".join(run.out.split())
    assert re.search(r"stage2: vllm_fleet_model_path /srv/m: differs from stage0's \(2 files, \d+ bytes here; 1 files, "
                     r"\d+ bytes there\): every host must mount the same model", said), said[-3000:]
