"""vLLM's argument grammar at the input boundary (issue 26), through real ansible-playbook.

vLLM's parser reads ``--api_key`` as ``--api-key``, ``--port=80`` as ``--port 80``, ``-tp`` as
``--tensor-parallel-size`` and an abbreviation (``--api-ke``) as the flag it begins; a list item
``"--api-key VALUE"`` is one token with a space. Every spelling must meet the same checks
(vllm_fleet/vllmargs.py): no secret flag in ``vllm_fleet_extra_args`` (its value never printed),
one argument per item, whole numbers for the numeric flags the planner reads, the GPU-fit
arithmetic, the port checks, and no port below 1024 without ``vllm_fleet_privileged_ports``
(with it, exactly NET_BIND_SERVICE for the servers on such a port).

Reuses the harness of test_vllm_fleet_plan_contract.py (Case / PlanCase, the playbook, the
sentinel secrets, ``_assert_no_crash``): three ansible-playbook runs (contract, plan, control)
plus one that renders the systemd unit template.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_vllm_fleet_plan_contract as base  # noqa: E402  (the shared harness)
from test_vllm_fleet_plan_contract import (  # noqa: E402
    ANSIBLE_PLAYBOOK, ROOT, S, Case, PlanCase, _assert_no_crash, _case_vars, _excerpt, _host_block, _inventory,
    _play, _plan_hosts, _plans)

yaml = pytest.importorskip("yaml")
pytestmark = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not found")

_BASE = {"vllm_fleet_recipe": base.ERNIE, "vllm_fleet_hardware": "h200"}
EA = "vllm_fleet_extra_args"

# Refused by the contract (first task), each one host; `secret`: its sentinel must never be printed.
CONTRACT = [
    Case("api-key-underscore", {EA: ["--api_key", S]}, EA, secret=True, also=r"vllm_fleet_api_key"),
    Case("hf-token-underscore-eq", {EA: [f"--hf_token={S}"]}, EA, secret=True, also=r"vllm_fleet_hf_token"),
    Case("api-key-one-item", {EA: [f"--api-key {S}"]}, EA, secret=True, also=r"one item"),
    Case("hf-token-one-item-eq", {EA: ["--enforce-eager", f"--HF_TOKEN={S} --x"]}, EA, secret=True),
    Case("api-key-abbreviated", {EA: ["--api-ke", S]}, EA, secret=True, also=r"reads it as --api-key"),
    Case("other-secret-underscore", {EA: [f"--db_password={S}"]}, EA, secret=True),
    Case("flag-and-value-one-item", {EA: ["--max-model-len 4096"]}, EA, also=r"one argument per list item"),
    Case("port-abc", {EA: ["--port", "abc"]}, EA, also=r"not a whole number"),
    Case("port-eq-abc", {EA: ["--port=8k"]}, EA, also=r"not a whole number"),
    Case("port-no-value", {EA: ["--enforce-eager", "--port"]}, EA, also=r"needs a value"),
    Case("port-out-of-range", {EA: ["--port", "70000"]}, EA, also=r"out of range"),
    Case("tp-underscore-abc", {EA: ["--tensor_parallel_size", "two"]}, EA),
    Case("tp-alias-eq-float", {EA: ["-tp=2.0"]}, EA),
    Case("dp-zero", {EA: ["-dp", "0"]}, EA, also=r"out of range"),
    Case("tp-abbreviated", {EA: ["--tensor-parallel", "2"]}, EA, also=r"write --tensor-parallel-size in full"),
    Case("port-eq-80", {EA: ["--port=80"]}, EA, also=r"vllm_fleet_privileged_ports"),
    Case("port-underscore-eq-1023", {"vllm_fleet_port": 1023, EA: ["--port=1023"]}, ("vllm_fleet_port", EA)),
    Case("port-443", {"vllm_fleet_port": 443}, "vllm_fleet_port", also=r"CAP_NET_BIND_SERVICE"),
    Case("router-port-80", {"vllm_fleet_router_port": "80"}, "vllm_fleet_router_port"),
    Case("privileged-not-bool", {"vllm_fleet_privileged_ports": "maybe", "vllm_fleet_port": 80},
         ("vllm_fleet_privileged_ports", "vllm_fleet_port")),
]

# Pass the contract; the plan refuses the deployment (the fake nvidia-smi: 8 H200s).
PLAN = [
    PlanCase("tp-underscore-over-gpus", {EA: ["--tensor_parallel_size", "16"]}, EA, gpu=True,
             also=r"needs 16 GPUs"),
    PlanCase("tp-underscore-eq-over-gpus", {EA: ["--tensor_parallel_size=4", "--pipeline_parallel_size=4"]}, EA,
             gpu=True, also=r"needs 16 GPUs"),
    PlanCase("dp-alias-eq-over-gpus", {EA: ["-tp=4", "--data_parallel_size", "4"]}, EA, gpu=True),
    PlanCase("port-eq-vs-port", {"vllm_fleet_port": 8001, EA: ["--port=08002"]}, EA),
    PlanCase("host-underscore-eq-vs-listen", {"vllm_fleet_listen": "localhost", EA: ["--host=0.0.0.0"]}, EA),
    PlanCase("removed-flag-underscore", {EA: ["--disable_log_requests"]}, EA, also=r"--disable-log-requests"),
]

# Near misses that must plan (host -> vars); checked in test_near_misses_plan.
CONTROL = {
    "ok-underscore": dict(_BASE, vllm_fleet_deployment="ok-underscore",
                          vllm_fleet_extra_args=["--max_model_len", "4096", "--gpu_memory_utilization=0.85",
                                                 "--tensor_parallel_size", "1"]),
    "ok-port-same": dict(_BASE, vllm_fleet_deployment="ok-port-same", vllm_fleet_port=8001,
                         vllm_fleet_extra_args=["--port", "8001"]),
    "ok-port-eq-same": dict(_BASE, vllm_fleet_deployment="ok-port-eq-same", vllm_fleet_port="8003",
                            vllm_fleet_extra_args=["--port=8003"]),
    "ok-json-value": dict(_BASE, vllm_fleet_deployment="ok-json-value",
                          vllm_fleet_extra_args=['--hf-overrides={"max_position_embeddings": 8192}']),
    "ok-port-80": dict(_BASE, vllm_fleet_deployment="ok-port-80", vllm_fleet_port=80,
                       vllm_fleet_privileged_ports=True),
    "ok-port-eq-443-uv": dict(_BASE, vllm_fleet_deployment="ok-port-eq-443-uv", vllm_fleet_privileged_ports="yes",
                              vllm_fleet_runtime="uv", vllm_fleet_vllm_version="0.32.0",
                              vllm_fleet_extra_args=["--port=443"]),
    "ok-opt-in-high-port": dict(_BASE, vllm_fleet_deployment="ok-opt-in-high-port", vllm_fleet_privileged_ports=True),
    "ok-gpu-underscore": {"vllm_fleet_recipe": base.ERNIE, "vllm_fleet_deployment": "ok-gpu-underscore",
                          "case_gpu": True, "vllm_fleet_extra_args": ["--tensor_parallel_size", "4", "-pp=2"]},
}


@pytest.fixture(scope="module")
def contract_run(tmp_path_factory):
    blocks = [_host_block(c.host, _case_vars(c, _BASE), c.raw) for c in CONTRACT]
    blocks.append(_host_block("k-ok-argv", dict(_BASE, vllm_fleet_extra_args=["--max_model_len", "4096"])))
    return _play(tmp_path_factory.mktemp("argv-contract"), _inventory(blocks, {}))


@pytest.fixture(scope="module")
def plan_run(tmp_path_factory):
    blocks = [_host_block(name, variables) for case in PLAN for name, variables in _plan_hosts(case)]
    return _play(tmp_path_factory.mktemp("argv-plan"), _inventory(blocks, {}))


@pytest.fixture(scope="module")
def control_run(tmp_path_factory):
    blocks = [_host_block(host, variables) for host, variables in CONTROL.items()]
    return _play(tmp_path_factory.mktemp("argv-control"), _inventory(blocks, {}))


@pytest.mark.parametrize("case", CONTRACT, ids=lambda c: c.id)
def test_contract_refuses(contract_run, case):
    run = contract_run
    assert run.rc != 0, run.out[-3000:]
    assert "the inventory breaks the contract (nothing was changed)" in run.out
    for var in case.names:
        assert run.names(case.host, var), f"no line '{case.host}: {var}...':\n{_excerpt(run, case.host)}"
    if case.also:
        import re
        assert re.search(case.also, _excerpt(run, case.host)), _excerpt(run, case.host)
    _assert_no_crash(run)
    assert case.sentinel not in run.out


def test_contract_near_miss_is_not_named(contract_run):
    assert not contract_run.mentions("k-ok-argv"), _excerpt(contract_run, "k-ok-argv")


@pytest.mark.parametrize("case", PLAN, ids=lambda c: c.id)
def test_plan_refuses(plan_run, case):
    run = plan_run
    assert run.rc != 0, run.out[-3000:]
    assert "the inventory breaks the contract" not in run.out, run.out[-3000:]
    assert f"vllm-fleet plan failed for deployment {case.host!r}" in run.out, run.out[-4000:]
    for var in case.names:
        assert run.names(case.host, var), f"no line '{case.host}: {var}...':\n{_excerpt(run, case.host)}"
    if case.also:
        import re
        assert re.search(case.also, _excerpt(run, case.host)), _excerpt(run, case.host)
    _assert_no_crash(run)


def test_near_misses_plan(control_run):
    run = control_run
    assert run.rc == 0, run.out[-4000:]
    _assert_no_crash(run)
    plans = _plans(run)
    assert set(plans) == set(CONTROL)
    first = {host: plan["processes"][0] for host, plan in plans.items()}
    assert first["ok-port-same"]["port"] == 8001 and first["ok-port-eq-same"]["port"] == 8003
    # the operator's spelling wins the last-wins dedupe over the recipe's --tensor-parallel-size:
    # one tensor-parallel flag is left, as vLLM reads it
    tp_spellings = {"--tensor-parallel-size", "--tensor_parallel_size", "-tp", "-pp", "--pipeline-parallel-size"}
    argv = first["ok-underscore"]["argv"]
    assert argv[argv.index("--max_model_len") + 1] == "4096"
    assert [(t, argv[i + 1]) for i, t in enumerate(argv) if t in tp_spellings] == [("--tensor_parallel_size", "1")]
    # GPU fit read through the aliases: 4 x 2 = 8 GPUs of the fake host's 8, the recipe's TP replaced
    argv = first["ok-gpu-underscore"]["argv"]
    assert [t for t in argv if t in tp_spellings or t.startswith("-pp=")] == ["--tensor_parallel_size", "-pp=2"]
    # privileged ports: exactly NET_BIND_SERVICE, only with the opt-in and only on such a port
    assert first["ok-port-80"]["port"] == 80 and first["ok-port-80"]["capabilities"] == ["NET_BIND_SERVICE"]
    assert first["ok-port-eq-443-uv"]["port"] == 443
    assert first["ok-port-eq-443-uv"]["capabilities"] == ["NET_BIND_SERVICE"]
    for host in ("ok-underscore", "ok-port-same", "ok-opt-in-high-port", "ok-gpu-underscore", "ok-json-value"):
        assert all("capabilities" not in p for p in plans[host]["processes"]), host


# ------------------------------------------------------------------------------------------
# the systemd unit template with and without a capability (one local ansible-playbook run)

UNIT_PLAY = """\
- name: Render the vllm-fleet unit template
  hosts: localhost
  connection: local
  gather_facts: false
  vars_files: ["%(role)s/defaults/main.yml", "%(role)s/vars/main.yml"]
  vars:
    vllm_fleet_systemd_config_bind: ""
    vllm_fleet_plan: {recipe: org/model, deployment: dep}
    vllm_fleet_systemd_writable_paths: [/var/lib/vllm-fleet/home]
  tasks:
    - name: Render one unit per process
      ansible.builtin.template:
        src: "%(role)s/templates/etc/systemd/system/vllm-fleet.service.j2"
        dest: "%(out)s/{{ item.name }}.service"
        mode: "0644"
      loop: %(processes)s

    - name: Render one env file per process
      ansible.builtin.template:
        src: "%(role)s/templates/etc/vllm-fleet/process.env.j2"
        dest: "%(out)s/{{ item.name }}.env"
        mode: "0600"
      loop: %(processes)s
"""


def _unit_processes():
    """Two uv engines (one on a port below 1024) and a plain router (a service), each with the
    finished unit the planner gives it (runtimespec.systemd_run)."""
    from vllm_fleet.layout import host_layout
    from vllm_fleet.runtimespec import systemd_run

    layout = dict(host_layout({"vllm_fleet_uv_state_dir": "/srv/work"}), services_venv="/opt/services",
                  hf_cache_shared="/var/lib/hf")
    procs = [
        {"name": "plain", "kind": "vllm", "runtime": "uv", "argv": ["vllm", "serve", "m", "--port", "8000"],
         "env": {"B": "2", "A": "3"}, "unit": {"groups": ["render"], "env": {"A": "1", "C": "4"}}, "hash": "h1"},
        {"name": "low", "kind": "vllm", "runtime": "uv", "argv": ["vllm", "serve", "m", "--port", "80"], "env": {},
         "hash": "h2", "capabilities": ["NET_BIND_SERVICE"]},
        {"name": "router", "kind": "router", "runtime": "service", "env": {}, "hash": "h3",
         "argv": ["vllm-router", "--port", "9000", "--worker-urls", "http://a:1", "http://a:2", "--policy", "round_robin"],
         "membership": {"flag": "--worker-urls", "urls": ["http://a:1", "http://a:2"], "env": "VLLM_FLEET_WORKER_URLS",
                        "argv": ["vllm-router", "--port", "9000", "--policy", "round_robin"]}},
    ]
    return [dict(p, systemd_run=systemd_run(p, layout, "/opt/venv", {"groups": [], "env": {}})) for p in procs]


def test_unit_file_grants_the_capability_only_when_planned(tmp_path):
    role = ROOT / "roles" / "vllm_fleet_systemd"
    (tmp_path / "play.yml").write_text(UNIT_PLAY % {"role": role, "out": tmp_path,
                                                    "processes": json.dumps(_unit_processes())})
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", "localhost,", "-e",
                           "ansible_python_interpreter=" + sys.executable, str(tmp_path / "play.yml")],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    low = (tmp_path / "low.service").read_text().splitlines()
    plain = (tmp_path / "plain.service").read_text()
    assert "AmbientCapabilities=CAP_NET_BIND_SERVICE" in low
    assert "CapabilityBoundingSet=CAP_NET_BIND_SERVICE" in low
    assert "NoNewPrivileges=yes" in low
    assert "Capabilit" not in plain
    assert "ExecStart=/opt/venv/bin/vllm serve m --port 80" in low
    # a plain router: its workers come from a file of their own (systemd splits the unbraced
    # variable into words), so its unit does not change when only they do
    router = (tmp_path / "router.service").read_text().splitlines()
    assert ("ExecStart=/opt/services/bin/vllm-router --port 9000 --policy round_robin "
            "--worker-urls $VLLM_FLEET_WORKER_URLS") in router
    assert [line for line in router if line.startswith("EnvironmentFile=")] == [
        "EnvironmentFile=/etc/vllm-fleet/router.env", "EnvironmentFile=/etc/vllm-fleet/router.workers"]
    assert not any("http://a:" in line for line in router)
    assert "EnvironmentFile=/etc/vllm-fleet/plain.env" in plain and ".workers" not in plain
    # the paths are the finished unit's (the host's layout): working directory, the hidden env dir
    assert "WorkingDirectory=/srv/work" in router and "TemporaryFileSystem=/etc/vllm-fleet:ro" in router
    # the env file: the unit block's env under the process's own (its value wins, in the block's
    # place), then the fixed env (a uv engine's HF_HOME); a service's PATH with its venv first
    env = [line for line in (tmp_path / "plain.env").read_text().splitlines() if not line.startswith("#")]
    assert env == ['A="3"', 'C="4"', 'B="2"', 'HF_HOME="/var/lib/hf"'], env
    assert 'PATH="/opt/services/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"' in \
        (tmp_path / "router.env").read_text().splitlines()
    # the host has no "render" group here (getent not read): no SupplementaryGroups=
    assert not [line for line in plain.splitlines() if line.startswith("SupplementaryGroups=")]
