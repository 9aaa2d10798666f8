"""The inventory contract on real test hosts: a refused run changes nothing, teardown with a
malicious deployment name deletes nothing, secrets never show up in any output channel, and a
rotated API key is live after one plain re-run.

One FAKE H200 x8 host; the engine is the stand-in GPU image in its light mode (the argv is
checked by the real vLLM parser, then a small stand-in server that enforces VLLM_API_KEY).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers import docker_inspect, host_exec, playbook

pytestmark = pytest.mark.e2e

DEPLOYMENT = "contract-seed"
CONTAINER = f"vllm-fleet-{DEPLOYMENT}"
KEY_A = "SENTINEL-key-a-8c1f2e"
KEY_B = "SENTINEL-key-b-93d4aa"
HF = "SENTINEL-hf-5b7e01"
GROUPS = {"contract_cluster": {"hosts": {"guard-a": "h200x8"},
                               "vars": {"vllm_fleet_deployment": DEPLOYMENT}}}
COMMON = {
    "vllm_fleet_recipe": "baidu/ERNIE-4.5-VL-28B-A3B-PT",
    "vllm_fleet_runtime": "docker",
    # one server per host (the default, auto, would start one per GPU: the replica tests set it)
    "vllm_fleet_replicas_per_host": 1,
    "vllm_fleet_health_request": "none",
    "vllm_fleet_health_timeout": 120,
    "vllm_fleet_docker_pull": "never",
    # light mode without the argv check (the inventory's refusals are the point; vLLM's own parser checks the argv in
    # test_seed_gpu, test_fleet_multinode and the bad revision of test_rolling_update): no
    # import of the real vLLM, ~10 CPU-s and ~400 MB less per server
    "vllm_fleet_env": {"VLLM_STANDIN_SERVE": "light", "VLLM_STANDIN_CHECK": "0"},
}
# what a refused run must leave exactly as it was
SNAPSHOT = ("find /etc /opt /var/lib/vllm-fleet -xdev -maxdepth 3 2>/dev/null | sort | sha256sum; "
            "systemctl list-units --all --no-legend 'vllm-fleet*' | sort")


@pytest.fixture(scope="module")
def guard(make_fleet):
    fleet = make_fleet("contract", GROUPS, COMMON)
    container = fleet.container("guard-a")
    for path in ("/etc/vllm-fleet-sentinel", "/opt/sentinel/keep", "/etc/vllm-fleet/keep"):
        assert host_exec(container, ["sh", "-c", f"mkdir -p $(dirname {path}) && echo keep > {path}"]).returncode == 0
    return fleet   # make_fleet removes the hosts and their sibling containers


def _state(fleet) -> str:
    out = host_exec(fleet.container("guard-a"), ["sh", "-c", SNAPSHOT]).stdout
    siblings = subprocess.run(["docker", "ps", "-a", "--filter", f"name=^{CONTAINER}$", "--format", "{{.Names}}"],
                              stdout=subprocess.PIPE, text=True).stdout
    return out + siblings


def _ask(fleet, key=None) -> int:
    """HTTP status of GET /v1/models on the host's server, with or without a bearer key."""
    code = ("import sys,urllib.request as u\n"
            "r=u.Request('http://127.0.0.1:8000/v1/models')\n"
            "k=sys.argv[1]\n"
            "k and r.add_header('Authorization','Bearer '+k)\n"
            "try: print(u.urlopen(r,timeout=10).status)\n"
            "except Exception as e: print(getattr(e,'code',0))\n")
    out = host_exec(fleet.container("guard-a"), ["python3", "-c", code, key or ""]).stdout.strip()
    return int(out or 0)


def _extra(**variables) -> list:
    return ["-e", json.dumps(variables)]


@pytest.mark.parametrize("bad", [
    {"vllm_fleet_port": 70000},
    {"vllm_fleet_recipie": "baidu/ERNIE-4.5-VL-28B-A3B-PT"},
    {"vllm_fleet_extra_args": ["--api-key", KEY_A]},
    {"vllm_fleet_env": {"HF_TOKEN": HF}},
])
def test_a_refused_run_changes_nothing(guard, bad):
    before = _state(guard)
    run = playbook("deploy.yml", guard.inventory, "-l", "contract_cluster", *_extra(**bad))
    assert run.rc != 0, run
    assert f"guard-a: {next(iter(bad))}" in run.out, run
    assert "Traceback" not in run.out and KEY_A not in run.out and HF not in run.out
    assert _state(guard) == before


@pytest.mark.parametrize("name", ["..", ".", "../..", "a/b", "evil\n[Service]\nExecStartPre=/bin/rm -rf /etc"])
def test_teardown_with_a_malicious_name_deletes_nothing(guard, name):
    before = _state(guard)
    run = playbook("teardown.yml", guard.inventory, "-l", "contract_cluster", *_extra(vllm_fleet_deployment=name))
    assert run.rc != 0, run
    assert "vllm_fleet_deployment" in run.out and "Traceback" not in run.out, run
    assert _state(guard) == before
    for path in ("/etc/vllm-fleet-sentinel", "/opt/sentinel/keep", "/etc/vllm-fleet/keep", "/etc/passwd"):
        assert host_exec(guard.container("guard-a"), ["test", "-f", path]).returncode == 0, path


def test_secrets_never_leak_and_a_rotated_key_is_live_after_one_rerun(guard):
    secrets_a = _extra(vllm_fleet_api_key=KEY_A, vllm_fleet_hf_token=HF)
    check = playbook("deploy.yml", guard.inventory, "-l", "contract_cluster", "-v", "--check", "--diff", *secrets_a)
    assert check.rc == 0, check
    first = playbook("deploy.yml", guard.inventory, "-l", "contract_cluster", "-v", "--diff", *secrets_a)
    assert first.rc == 0, first
    info = docker_inspect(CONTAINER)
    assert info is not None
    assert _ask(guard, KEY_A) == 200 and _ask(guard) == 401 and _ask(guard, KEY_B) == 401
    # rotate: one plain re-run applies the new key (the plan hash carries a keyed digest)
    secrets_b = _extra(vllm_fleet_api_key=KEY_B, vllm_fleet_hf_token=HF)
    second = playbook("deploy.yml", guard.inventory, "-l", "contract_cluster", "-v", *secrets_b)
    assert second.rc == 0, second
    assert _ask(guard, KEY_B) == 200 and _ask(guard, KEY_A) == 401
    rotated = docker_inspect(CONTAINER)
    # a start that fails (a flag the real vLLM parser rejects: the stand-in's argv check on for
    # this run) must not print the secrets either
    checked = {**COMMON["vllm_fleet_env"], "VLLM_STANDIN_CHECK": "1"}
    failing = playbook("deploy.yml", guard.inventory, "-l", "contract_cluster", "-v", *secrets_b,
                       *_extra(vllm_fleet_extra_args=["--no-such-flag-for-vllm"], vllm_fleet_health_timeout=40,
                               vllm_fleet_env=checked))
    assert failing.rc != 0, failing
    marker = host_exec(guard.container("guard-a"),
                       ["sh", "-c", "cat /var/lib/vllm-fleet/state/* 2>/dev/null; ls -la /var/lib/vllm-fleet"]).stdout
    channels = {
        "check --diff -v": check.out, "deploy -v --diff": first.out, "re-run -v": second.out,
        "failing start -v": failing.out, "host state": marker,
        "docker labels/cmd": json.dumps([info["Config"]["Labels"], info["Config"]["Cmd"], info["Config"]["Entrypoint"],
                                         info["Args"], rotated["Config"]["Labels"], rotated["Config"]["Cmd"]]),
    }
    for channel, text in channels.items():
        for secret in (KEY_A, KEY_B, HF):
            assert secret not in text, f"{secret} leaked into {channel}"
