"""Benchmark: playbooks/deploy.yml on test fleets of 1, 8 and 32 FAKE H200 hosts (prints figures).

Not a test: it prints numbers and fails only when a deploy fails. For each fleet size it brings
up a test fleet (tests/testbed/fleet.py: systemd + sshd containers, FAKE h200x8 profile, the
machine's docker socket), deploys the seed recipe (baidu/ERNIE-4.5-VL-28B-A3B-PT) with the
docker runtime on every host, then deploys again at once (the idempotent re-run), and prints:

  wall time of both runs, tasks per host (recap ok+skipped+failed), changed tasks on the re-run
  (target 0), SSH operations per host, and the ratios 32-host/1-host first-run time (target
  <= 1.5) and re-run/first run (target <= 0.25).

Each host serves the FAKE GPU image's light mode (VLLM_STANDIN_SERVE=light, argv check skipped:
a ~20 MB stdlib HTTP server, tests/fakes/vllm_standin_server.py), never a real vLLM. Each host
gets its own vllm_fleet_deployment (bench<N>-<host>): all test hosts share ONE docker engine and
containers are named after the deployment.

How things are counted:
* SSH operations: ANSIBLE_SSH_EXECUTABLE / _SFTP_ / _SCP_ point at symlinks to
  tests/benchmarks/ssh_count.sh, which appends "<kind> <host>" to a log and execs the real client.
  One line = one client process = one remote operation (module run, file transfer, ...);
  `ssh -O check/stop` (master control) is counted apart. Multiplexed over ControlPersist masters
  or not, each operation is still one client process.
* Task timings: tests/benchmarks/callback_plugins/bench_deploy_timing.py (aggregate callback,
  enabled only here) writes per-task wall time (task start to next task start) and per-host
  worker seconds; the slowest tasks of the largest fleet are printed.

Settings variations (`--variants all`, on the largest fleet; each: clean state, first run,
re-run): forks 5/16/32/50, pipelining off, ControlPersist off, full fact gathering (a copy of
_plan.yml with host_facts [all]), jsonfile fact cache, strategy free, Mitogen (pip-installed
into a throwaway --target dir). The baseline is ansible.cfg as committed.

    python3 -m nox -s bench_deploy                       # sizes 1, 8, 32; baseline only
    python3 -m nox -s bench_deploy -- --variants all     # + every variation at 32 hosts
    python3 tests/benchmarks/bench_deploy.py --sizes 8 --variants baseline,forks32,mitogen

Fleets are named bench<N> (containers vllm-fleet-test-bench<N>-h<i>) and removed at the end
with their sibling vLLM containers (`fleet.py down --name bench<N> --siblings`).
Prerequisites: bash tests/testbed/setup.sh (the nox session runs it).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests" / "testbed"))

import fleet as testbed  # noqa: E402

RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+"
                   r"skipped=(\d+)\s+rescued=(\d+)\s+ignored=(\d+)", re.M)
RECIPE = "baidu/ERNIE-4.5-VL-28B-A3B-PT"
GROUP = "bench"
MITOGEN = "mitogen==0.3.54"

# name -> (description, env overrides on top of ansible.cfg, playbook patch or None)
VARIANTS = {
    "baseline": ("ansible.cfg as committed (forks 16, pipelining, ControlPersist 60s, linear)", {}, None),
    "forks5": ("forks 5", {"ANSIBLE_FORKS": "5"}, None),
    "forks32": ("forks 32", {"ANSIBLE_FORKS": "32"}, None),
    "forks50": ("forks 50", {"ANSIBLE_FORKS": "50"}, None),
    "no-pipelining": ("pipelining off", {"ANSIBLE_PIPELINING": "False"}, None),
    "no-controlpersist": ("no SSH master (ControlMaster=no, ControlPath=none)",
                          {"ANSIBLE_SSH_ARGS": "-o ControlMaster=no -o ControlPath=none"}, None),
    "controlpersist-30m": ("ControlPersist 30m (masters outlive the run)",
                           {"ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=30m"}, None),
    "gather-full": ("fact gathering host_facts [all] (playbook copy)", {},
                    ("host_facts: [min, network]", "host_facts: [all]")),
    "gather-min": ("fact gathering host_facts [min] (playbook copy; no network facts)", {},
                   ("host_facts: [min, network]", "host_facts: [min]")),
    "factcache-jsonfile": ("fact_caching jsonfile (gathering smart): the re-run skips setup",
                           {"ANSIBLE_CACHE_PLUGIN": "jsonfile", "ANSIBLE_CACHE_PLUGIN_TIMEOUT": "86400"}, None),
    "free": ("strategy free", {"ANSIBLE_STRATEGY": "free"}, None),
    "forks32-free": ("strategy free + forks 32", {"ANSIBLE_STRATEGY": "free", "ANSIBLE_FORKS": "32"}, None),
    "mitogen": (f"Mitogen ({MITOGEN}, strategy mitogen_linear)", {"ANSIBLE_STRATEGY": "mitogen_linear"}, None),
    "mitogen-forks32": (f"Mitogen + forks 32", {"ANSIBLE_STRATEGY": "mitogen_linear", "ANSIBLE_FORKS": "32"}, None),
}
DEFAULT_ALL = ["baseline", "forks5", "forks32", "forks50", "no-pipelining", "no-controlpersist",
               "gather-full", "gather-min", "factcache-jsonfile", "free", "mitogen"]


def log(msg: str) -> None:
    print(f"[bench-deploy] {msg}", flush=True)


# --- fleet and inventory -------------------------------------------------------------------
def fleet_name(size: int) -> str:
    return f"bench{size}"


def host_names(size: int) -> list[str]:
    return [f"h{i:02d}" for i in range(size)]


def deployment(size: int, host: str) -> str:
    return f"{fleet_name(size)}-{host}"


def write_groups(path: Path, size: int, extra_vars: dict) -> None:
    """Groups inventory (JSON is valid YAML), as tests/e2e/conftest.py write_groups."""
    doc = {"all": {
        "vars": {"vllm_fleet_recipe_sources": [str(ROOT / "recipes")],
                 "vllm_fleet_docker_network_mode": "container:{{ vllm_fleet_testbed_container }}"},
        "children": {GROUP: {
            "hosts": {h: {"vllm_fleet_deployment": deployment(size, h)} for h in host_names(size)},
            "vars": {"vllm_fleet_recipe": RECIPE,
                     "vllm_fleet_model_source": "none",     # no Hub here; the stand-ins read no weights
                     "vllm_fleet_runtime": "docker",
                     "vllm_fleet_docker_pull": "never",
                     "vllm_fleet_health_request": "none",
                     # one server per host: the figures are per host (auto would start 8)
                     "vllm_fleet_replicas_per_host": 1,
                     "vllm_fleet_env": {"VLLM_STANDIN_SERVE": "light", "VLLM_STANDIN_CHECK": "0"},
                     **extra_vars}}}}}
    path.write_text(json.dumps(doc, indent=2) + "\n")


def vllm_containers(size: int) -> list[str]:
    return [f"vllm-fleet-{deployment(size, h)}" for h in host_names(size)]


def close_masters(info: dict) -> int:
    """Ask this fleet's SSH control masters to exit (a fresh first run opens its own)."""
    cp = Path(info["state_dir"]) / "cp"
    socks = list(cp.iterdir()) if cp.is_dir() else []
    for sock in socks:
        subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "x"], capture_output=True, timeout=10)
    return len(socks)


def reset_hosts(info: dict, size: int) -> None:
    """Back to a never-deployed fleet: this benchmark's vLLM containers (exact names) and the
    state directory the docker role makes on each host; SSH masters closed."""
    names = vllm_containers(size)
    present = subprocess.run(["docker", "inspect", "-f", "{{.Name}}", *names], capture_output=True,
                             text=True).stdout.split()
    present = [n.lstrip("/") for n in present]
    if present:
        subprocess.run(["docker", "rm", "-f", *present], capture_output=True, timeout=300, check=True)
    with cf.ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda h: subprocess.run(["docker", "exec", h["container"], "rm", "-rf", "/var/lib/vllm-fleet"],
                                             capture_output=True, timeout=60), info["hosts"]))
    close_masters(info)


def hosts_cpu_s(info: dict) -> float | None:
    """CPU seconds used so far by the fleet's host containers (sshd, the modules they run):
    cgroup v1 cpuacct of each container; None when not readable (cgroup v2 hosts)."""
    total = 0.0
    for h in info["hosts"]:
        cid = h.get("_id")
        if cid is None:
            cid = h["_id"] = subprocess.run(["docker", "inspect", "-f", "{{.Id}}", h["container"]],
                                            capture_output=True, text=True).stdout.strip()
        f = Path(f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage")
        if not f.is_file():
            return None
        total += int(f.read_text()) / 1e9
    return total


# --- one ansible-playbook run ----------------------------------------------------------------
class Run:
    def __init__(self, label: str, rc: int, seconds: float, out: str, timing: dict | None, ssh_lines: list[str],
                 hosts: list[str], controller_cpu: float = 0.0, hosts_cpu: float | None = None,
                 load: tuple = ()):
        self.label, self.rc, self.seconds, self.out, self.timing = label, rc, seconds, out, timing
        self.controller_cpu, self.hosts_cpu, self.load = controller_cpu, hosts_cpu, load
        self.recap = {m.group(1): dict(zip(("ok", "changed", "unreachable", "failed", "skipped", "rescued",
                                            "ignored"), map(int, m.groups()[1:])))
                      for m in RECAP.finditer(out)}
        self.hosts = hosts
        per_host = collections.Counter()
        self.ssh_kinds = collections.Counter()
        for line in ssh_lines:
            kind, _, host = line.partition(" ")
            self.ssh_kinds[kind] += 1
            if kind != "ssh-control":
                per_host[host] += 1
        self.ssh_per_host = per_host

    def tasks_per_host(self) -> float:
        # recap: `ok` already includes the changed ones
        vals = [r["ok"] + r["skipped"] + r["failed"] + r["unreachable"] for r in self.recap.values()]
        return statistics.mean(vals) if vals else 0.0

    def changed(self) -> int:
        return sum(r["changed"] for r in self.recap.values())

    def ssh_ops(self) -> tuple[float, int, int]:
        """(mean, min, max) client processes per host. Mitogen's ssh argv does not end in the
        host address: then only the mean (all operations / hosts) is known, min = max = -1."""
        if not self.hosts:
            return (0.0, 0, 0)
        total = sum(self.ssh_per_host.values())
        vals = [self.ssh_per_host.get(ip, 0) for ip in self.hosts]
        if sum(vals) != total:
            return (total / len(self.hosts), -1, -1)
        return (statistics.mean(vals), min(vals), max(vals))

    def ok(self) -> bool:
        return self.rc == 0 and self.recap and all(r["failed"] == 0 and r["unreachable"] == 0
                                                   for r in self.recap.values())


def run_playbook(label: str, info: dict, groups: Path, playbook: Path, env_over: dict, outdir: Path,
                 wrappers: Path) -> Run:
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    timing_f, ssh_f, log_f = outdir / f"{stem}.timing.json", outdir / f"{stem}.ssh.log", outdir / f"{stem}.log"
    for f in (timing_f, ssh_f):
        f.unlink(missing_ok=True)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_RETRY_FILES_ENABLED="False",
               # its timing callback, and the project's stdout callback (ansible.cfg names it)
               ANSIBLE_CALLBACK_PLUGINS=f"{HERE / 'callback_plugins'}:{ROOT / 'plugins' / 'callback'}",
               ANSIBLE_CALLBACKS_ENABLED="bench_deploy_timing", BENCH_DEPLOY_TIMING=str(timing_f),
               BENCH_SSH_LOG=str(ssh_f), ANSIBLE_SSH_EXECUTABLE=str(wrappers / "ssh"),
               ANSIBLE_SFTP_EXECUTABLE=str(wrappers / "sftp"), ANSIBLE_SCP_EXECUTABLE=str(wrappers / "scp"),
               **env_over)
    args = ["ansible-playbook", "-i", info["inventory"], "-i", str(groups), str(playbook), "-l", GROUP]
    load0 = os.getloadavg()[0]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    hcpu0 = hosts_cpu_s(info)
    t0 = time.monotonic()
    proc = subprocess.run(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=3600)
    seconds = time.monotonic() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    hcpu1 = hosts_cpu_s(info)
    # ansible-playbook, its forks and the ssh clients (all reaped children of this process)
    controller_cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    hosts_cpu = (hcpu1 - hcpu0) if hcpu0 is not None and hcpu1 is not None else None
    log_f.write_text(f"$ {' '.join(args)}\n# env overrides: {env_over}\n# rc={proc.returncode} in {seconds:.1f} s\n"
                     + proc.stdout)
    timing = json.loads(timing_f.read_text()) if timing_f.is_file() else None
    ssh_lines = ssh_f.read_text().splitlines() if ssh_f.is_file() else []
    run = Run(label, proc.returncode, seconds, proc.stdout, timing, ssh_lines, [h["ip"] for h in info["hosts"]],
              controller_cpu, hosts_cpu, (round(load0, 2), round(os.getloadavg()[0], 2)))
    if not run.ok():
        log(f"{label}: FAILED (rc {proc.returncode}); log: {log_f}")
        print("\n".join(proc.stdout.splitlines()[-40:]))
    return run


# --- helpers: playbook variants, mitogen -----------------------------------------------------
def patched_playbook(variant: str, patch, outdir: Path) -> Path | None:
    src = ROOT / "playbooks" / "deploy.yml"
    if patch is None:
        return src
    old, new = patch
    text = src.read_text()
    if old not in text:
        log(f"playbook variant: '{old}' not found in {src} (deploy.yml changed?); variant skipped")
        return None
    d = outdir / "playbooks"
    d.mkdir(exist_ok=True)
    dst = d / f"deploy-{variant}.yml"
    dst.write_text(text.replace(old, new))
    return dst


def ensure_mitogen(outdir: Path) -> Path | None:
    """Mitogen pip-installed into a throwaway --target dir; its strategy plugins dir."""
    target = outdir / "mitogen"
    strategy = target / "ansible_mitogen" / "plugins" / "strategy"
    if not strategy.is_dir():
        p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                            "--target", str(target), MITOGEN], capture_output=True, text=True)
        if p.returncode != 0 or not strategy.is_dir():
            log(f"could not install {MITOGEN}: {p.stderr.strip()[-500:]}")
            return None
    return strategy


def ssh_wrappers(outdir: Path) -> Path:
    d = outdir / "ssh-count"
    d.mkdir(exist_ok=True)
    for kind in ("ssh", "sftp", "scp"):
        link = d / kind
        if not link.exists():
            link.symlink_to(HERE / "ssh_count.sh")
    return d


# --- reporting ---------------------------------------------------------------------------------
def slow_tasks(run: Run, top: int) -> list[tuple[str, float, float, int]]:
    """(task, wall seconds, mean per-host worker seconds, hosts) of the slowest tasks."""
    if not run.timing:
        return []
    rows = []
    for t in run.timing["tasks"]:
        secs = [h["seconds"] for h in t["hosts"].values() if h.get("seconds") is not None]
        wall = (t["end"] or run.timing["end"]) - t["start"]
        rows.append((f"{t['name']}", wall, statistics.mean(secs) if secs else 0.0, len(t["hosts"])))
    return sorted(rows, key=lambda r: -r[1])[:top]


def fmt_run(run: Run) -> str:
    mean, lo, hi = run.ssh_ops()
    hosts_cpu = f"{run.hosts_cpu:6.1f}" if run.hosts_cpu is not None else "     ?"
    return (f"{run.seconds:7.1f} s  tasks/host {run.tasks_per_host():5.1f}  changed {run.changed():3d}  "
            f"ssh ops/host {mean:5.1f} ({lo}-{hi})  cpu controller {run.controller_cpu:6.1f} s hosts {hosts_cpu} s  "
            f"load {run.load[0]:.1f}->{run.load[1]:.1f}")


def _f(x) -> str:
    return "?" if x is None else f"{x:6.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,8,32", help="fleet sizes (default 1,8,32)")
    ap.add_argument("--variants", default="baseline",
                    help="comma list of settings variations run on --variant-size, or 'all' "
                         f"({', '.join(DEFAULT_ALL)}); known: {', '.join(VARIANTS)}")
    ap.add_argument("--variant-size", type=int, help="fleet size for the variations (default: the largest)")
    ap.add_argument("--top", type=int, default=12, help="slowest tasks to print (largest fleet)")
    ap.add_argument("--out", default="/tmp/vllm-fleet-bench-deploy", help="logs, timings, JSON summary")
    ap.add_argument("--up-timeout", type=float, default=300, help="seconds for a fleet's hosts to boot")
    ap.add_argument("--keep", action="store_true", help="leave the fleets up (remove: fleet.py down --siblings)")
    args = ap.parse_args()

    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    variants = DEFAULT_ALL if args.variants == "all" else [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {list(VARIANTS)}")
    if "baseline" not in variants:
        variants = ["baseline"] + variants
    vsize = args.variant_size or max(sizes)
    if vsize not in sizes:
        sizes = sorted(set(sizes) | {vsize})

    outdir = Path(args.out) / time.strftime("%Y%m%d-%H%M%S")
    outdir.mkdir(parents=True)
    wrappers = ssh_wrappers(outdir)
    log(f"output in {outdir}; sizes {sizes}; variations {variants} at {vsize} hosts")

    made: list[str] = []

    def cleanup(*_):
        for name in made:
            if args.keep:
                log(f"left up: fleet {name} (python3 tests/testbed/fleet.py down --name {name} --siblings)")
                continue
            try:
                res = testbed.down(name, remove_siblings=True)
                log(f"fleet {name} removed ({len(res['removed'])} hosts, {len(res['removed_siblings'])} vLLM containers)")
            except Exception as exc:  # noqa: BLE001 - report and go on with the others
                log(f"fleet {name}: down failed: {exc}")
        made.clear()

    def on_signal(signum, _frame):
        log(f"signal {signum}: removing the fleets")
        cleanup()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    results: dict = {"sizes": {}, "variants": {}, "versions": {}}
    results["versions"]["ansible"] = subprocess.run(["ansible", "--version"], capture_output=True,
                                                    text=True).stdout.splitlines()[:1]
    failed = False
    slow: dict = {}
    try:
        for size in sizes:
            name = fleet_name(size)
            t0 = time.monotonic()
            made.append(name)
            for attempt in (1, 2):             # a loaded 2-core machine boots 32 systemd hosts slowly
                try:
                    info = testbed.up(name, [f"{h}:h200x8" for h in host_names(size)], docker_socket=True,
                                      replace=True, timeout=args.up_timeout)
                    break
                except testbed.FleetError as exc:
                    if attempt == 2:
                        raise
                    log(f"fleet {name}: up failed ({exc}); once more")
            up_s = time.monotonic() - t0
            log(f"fleet {name}: {size} hosts up in {up_s:.1f} s")
            groups = Path(info["state_dir"]) / "groups.yml"
            write_groups(groups, size, {})
            todo = variants if size == vsize else ["baseline"]
            for variant in todo:
                desc, env_over, patch = VARIANTS[variant]
                env_over = dict(env_over)
                playbook = patched_playbook(variant, patch, outdir)
                if playbook is None:
                    continue
                if variant == "factcache-jsonfile" or "ANSIBLE_CACHE_PLUGIN" in env_over:
                    cache = outdir / f"factcache-{size}"
                    shutil.rmtree(cache, ignore_errors=True)
                    env_over["ANSIBLE_CACHE_PLUGIN_CONNECTION"] = str(cache)
                if env_over.get("ANSIBLE_STRATEGY", "").startswith("mitogen"):
                    strategy = ensure_mitogen(outdir)
                    if strategy is None:
                        continue
                    env_over["ANSIBLE_STRATEGY_PLUGINS"] = str(strategy)
                reset_hosts(info, size)
                first = run_playbook(f"{name}-{variant}-first", info, groups, playbook, env_over, outdir, wrappers)
                again = run_playbook(f"{name}-{variant}-rerun", info, groups, playbook, env_over, outdir, wrappers)
                failed |= not (first.ok() and again.ok())
                entry = {"description": desc, "env": env_over, "first_s": round(first.seconds, 2),
                         "rerun_s": round(again.seconds, 2), "first_ok": first.ok(), "rerun_ok": again.ok(),
                         "tasks_per_host_first": first.tasks_per_host(),
                         "tasks_per_host_rerun": again.tasks_per_host(),
                         "changed_first": first.changed(), "changed_rerun": again.changed(),
                         "ssh_ops_per_host_first": first.ssh_ops(), "ssh_ops_per_host_rerun": again.ssh_ops(),
                         "ssh_kinds_first": dict(first.ssh_kinds), "ssh_kinds_rerun": dict(again.ssh_kinds),
                         "controller_cpu_first": round(first.controller_cpu, 2),
                         "controller_cpu_rerun": round(again.controller_cpu, 2),
                         "hosts_cpu_first": first.hosts_cpu and round(first.hosts_cpu, 2),
                         "hosts_cpu_rerun": again.hosts_cpu and round(again.hosts_cpu, 2),
                         "load_first": first.load, "load_rerun": again.load}
                log(f"{size:3d} hosts {variant:18s} first {fmt_run(first)}")
                log(f"{size:3d} hosts {variant:18s} rerun {fmt_run(again)}")
                if variant == "baseline":
                    results["sizes"][size] = {**entry, "fleet_up_s": round(up_s, 1)}
                    slow[size] = (slow_tasks(first, args.top), slow_tasks(again, args.top))
                if size == vsize:
                    results["variants"][variant] = entry
            if not args.keep:                  # one fleet at a time: sizes do not share the 2 cores
                res = testbed.down(name, remove_siblings=True)
                made.remove(name)
                log(f"fleet {name} removed ({len(res['removed'])} hosts, "
                    f"{len(res['removed_siblings'])} vLLM containers)")
    finally:
        cleanup()

    # --- the figures ---------------------------------------------------------------------
    print()
    print("== deploy.yml, seed recipe, docker runtime, FAKE h200x8 hosts, light stand-in "
          f"({results['versions']['ansible'][0] if results['versions']['ansible'] else 'ansible ?'})")
    print("(cpu = CPU seconds: controller = ansible-playbook + forks + ssh clients; hosts = the test hosts' "
          "containers; load = 1-min load average before the run: other work on the machine inflates wall times)")
    print(f"{'hosts':>5} | {'first run':>9} | {'re-run':>7} | {'re/first':>8} | {'tasks/host':>10} | "
          f"{'changed re-run':>14} | {'ssh ops/host 1st/re':>19} | {'cpu ctl 1st/re':>14} | {'cpu hosts 1st/re':>16} | load")
    for size, e in sorted(results["sizes"].items()):
        print(f"{size:5d} | {e['first_s']:7.1f} s | {e['rerun_s']:5.1f} s | {e['rerun_s'] / e['first_s']:8.2f} | "
              f"{e['tasks_per_host_first']:4.1f}/{e['tasks_per_host_rerun']:<5.1f} | {e['changed_rerun']:14d} | "
              f"{e['ssh_ops_per_host_first'][0]:8.1f}/{e['ssh_ops_per_host_rerun'][0]:<10.1f} | "
              f"{e['controller_cpu_first']:6.1f}/{e['controller_cpu_rerun']:<7.1f} | "
              f"{_f(e['hosts_cpu_first'])}/{_f(e['hosts_cpu_rerun']):<9} | {e['load_first'][0]:.1f}")
    if len(results["sizes"]) > 1:
        lo, hi = min(results["sizes"]), max(results["sizes"])
        r = results["sizes"][hi]["first_s"] / results["sizes"][lo]["first_s"]
        rr = results["sizes"][hi]["rerun_s"] / results["sizes"][lo]["rerun_s"]
        print(f"ratio {hi}-host / {lo}-host time: first run {r:.2f} (target <= 1.5), re-run {rr:.2f}")
    for size, e in sorted(results["sizes"].items()):
        ratio = e["rerun_s"] / e["first_s"]
        print(f"ratio re-run / first run, {size} hosts: {ratio:.2f} (target <= 0.25)")
    if len(results["variants"]) > 1:
        print()
        print(f"== settings variations at {vsize} hosts (each from a clean state: first run, then re-run)")
        print(f"{'variant':<19}| {'first run':>9} | {'re-run':>7} | {'changed re-run':>14} | "
              f"{'ssh ops/host 1st/re':>19} | {'cpu ctl 1st/re':>14} | {'cpu hosts 1st/re':>16} | load | description")
        for v, e in results["variants"].items():
            flag = "" if e["first_ok"] and e["rerun_ok"] else "  FAILED"
            print(f"{v:<19}| {e['first_s']:7.1f} s | {e['rerun_s']:5.1f} s | {e['changed_rerun']:14d} | "
                  f"{e['ssh_ops_per_host_first'][0]:8.1f}/{e['ssh_ops_per_host_rerun'][0]:<10.1f} | "
                  f"{e['controller_cpu_first']:6.1f}/{e['controller_cpu_rerun']:<7.1f} | "
                  f"{_f(e['hosts_cpu_first'])}/{_f(e['hosts_cpu_rerun']):<9} | {e['load_first'][0]:4.1f} | "
                  f"{e['description']}{flag}")
    if slow:
        size = max(slow)
        for label, rows in zip(("first run", "re-run"), slow[size]):
            print()
            print(f"== slowest tasks, {size} hosts, baseline {label} (wall = task start to next task start; "
                  "host = mean worker seconds per host)")
            for task, wall, host_s, n in rows:
                print(f"{wall:6.2f} s wall  {host_s:5.2f} s/host  {n:3d} hosts  {task}")
    (outdir / "summary.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\nlogs, timings and summary.json: {outdir}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
