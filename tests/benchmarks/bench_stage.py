"""Benchmark: the stage phase's fan-out against the controller sending to every host (prints figures).

Not a test: it prints numbers and fails only when a staging run fails. One test fleet of up to 8
light hosts (tests/testbed/fleet.py, no GPU, no server started); a snapshot of the testbed's
all-MiniLM-L6-v2 plus a random filler (``--filler-mib``, default 256) staged with
``vllm_fleet_model_source: controller`` by playbooks/stage.yml on 1, 2, 4 and 8 of its hosts:

* fan-out (``vllm_fleet_stage_fanout: true``, the default): the controller feeds one host, every
  verified holder sends on;
* naive (``vllm_fleet_stage_fanout: false``): the controller sends to every host itself.

The modes alternate (fan-out, naive, fan-out, ...) ``--repeats`` times per size, each from an
empty store on every host. Printed per size and mode: median wall time of the playbook run, the
median of the stage phase's own time (its summary line), and the bytes the controller sent
(rsync's --stats); then the ratios naive/fan-out at the largest size and how each mode grows
with N. All hosts and the controller are one 2-core machine here, so "links" are one bridge and
the CPU: the bytes the controller sends are the figure that carries over to a real fleet.

    python3 -m nox -s bench_stage
    python3 tests/benchmarks/bench_stage.py --sizes 1,2,4,8 --filler-mib 256 --repeats 3

The fleet is named benchstage (containers vllm-fleet-test-benchstage-s<i>), removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "testbed"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import fleet as testbed  # noqa: E402
from helpers import MINILM, MINILM_DIR  # noqa: E402

NAME = "benchstage"
STORE = "/var/lib/vllm-fleet/models"
SUMMARY = re.compile(r"staged: (\d+) hosts, (\d+) fed in (\d+) rounds in ([0-9.]+) s; controller sent (\d+) bytes, "
                     r"hosts sent (\d+) bytes \(snapshot (\d+) bytes\)")


def groups_file(path: Path, hosts, snapshot: Path) -> None:
    common = {k: v for k, v in MINILM.items() if k != "vllm_fleet_model_path"}
    common.update({"vllm_fleet_runtime": "docker", "vllm_fleet_deployment": "bench-stage",
                   "vllm_fleet_model_source": "controller", "vllm_fleet_model_controller_path": str(snapshot),
                   "vllm_fleet_replicas_per_host": 1, "vllm_fleet_recipe_sources": [str(ROOT / "recipes")]})
    doc = {"all": {"children": {"stagers": {"hosts": {h: {} for h in hosts}, "vars": common}}}}
    path.write_text(json.dumps(doc, indent=2) + "\n")


def run_stage(inventory, fanout: bool) -> dict:
    args = ["ansible-playbook", *[a for src in inventory for a in ("-i", src)], str(ROOT / "playbooks" / "stage.yml"),
            "-e", json.dumps({"vllm_fleet_stage_fanout": fanout})]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    start = time.monotonic()
    proc = subprocess.run(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=1800)
    wall = time.monotonic() - start
    match = SUMMARY.search(" ".join(proc.stdout.split()))
    if proc.returncode != 0 or not match:
        print(proc.stdout[-6000:])
        raise SystemExit(f"stage.yml failed (rc {proc.returncode})")
    hosts, fed, rounds, seconds, by_controller, by_hosts, size = match.groups()
    return {"wall": wall, "stage": float(seconds), "controller": int(by_controller), "hosts": int(by_hosts),
            "rounds": int(rounds), "fed": int(fed), "size": int(size)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,2,4,8")
    parser.add_argument("--filler-mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-stage."))
    snapshot = work / "minilm"
    shutil.copytree(MINILM_DIR, snapshot)
    with open(snapshot / "filler.bin", "wb") as handle:
        for _ in range(args.filler_mib):
            handle.write(os.urandom(1 << 20))
    names = [f"s{i}" for i in range(max(sizes))]
    info = testbed.up(NAME, [f"{h}:none" for h in names], replace=True)
    results = {}
    try:
        for n in sizes:
            hosts = names[:n]
            gfile = work / f"groups-{n}.json"
            groups_file(gfile, hosts, snapshot)
            inventory = [info["inventory"], str(gfile)]
            for _ in range(args.repeats):
                for mode, fanout in (("fan-out", True), ("naive", False)):
                    for h in hosts:       # an empty store: every host needs the whole snapshot
                        testbed.ssh(NAME, h, f"rm -rf {STORE}")
                    r = run_stage(inventory, fanout)
                    assert r["fed"] == n, r
                    results.setdefault((n, mode), []).append(r)
                    print(f"  N={n} {mode:7s}: {r['stage']:.1f} s stage ({r['wall']:.1f} s run), {r['rounds']} rounds, "
                          f"controller sent {r['controller'] / 1e6:.0f} MB, hosts {r['hosts'] / 1e6:.0f} MB", flush=True)
    finally:
        testbed.down(NAME)
        shutil.rmtree(work, ignore_errors=True)
    size = next(iter(results.values()))[0]["size"]
    print(f"\nbench_stage: snapshot {size / 1e6:.0f} MB (MiniLM + {args.filler_mib} MiB filler), "
          f"medians of {args.repeats} alternated runs")
    print(f"{'hosts':>5} {'mode':8} {'stage s':>8} {'run s':>7} {'rounds':>6} {'controller MB':>14} {'x snapshot':>10}")
    for (n, mode), runs in sorted(results.items()):
        med = {k: statistics.median(r[k] for r in runs) for k in ("stage", "wall", "controller", "rounds")}
        print(f"{n:>5} {mode:8} {med['stage']:>8.1f} {med['wall']:>7.1f} {med['rounds']:>6.0f} "
              f"{med['controller'] / 1e6:>14.0f} {med['controller'] / size:>10.2f}")
    top = max(sizes)
    fan = statistics.median(r["stage"] for r in results[(top, "fan-out")])
    naive = statistics.median(r["stage"] for r in results[(top, "naive")])
    cf = statistics.median(r["controller"] for r in results[(top, "fan-out")])
    cn = statistics.median(r["controller"] for r in results[(top, "naive")])
    print(f"\nat {top} hosts: naive/fan-out stage time {naive / fan:.2f}, controller bytes {cn / cf:.2f}")
    low = min(sizes)
    for mode in ("fan-out", "naive"):
        a = statistics.median(r["stage"] for r in results[(low, mode)])
        b = statistics.median(r["stage"] for r in results[(top, mode)])
        print(f"{mode}: {low} -> {top} hosts: stage time x{b / a:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
