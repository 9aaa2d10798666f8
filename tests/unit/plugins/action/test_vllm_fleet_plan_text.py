"""The input boundary's text rules, through real ansible-playbook (issue 26).

The harness is the one of ``test_vllm_fleet_plan_contract.py`` (imported, not copied): each
table becomes one YAML inventory and one ``ansible-playbook`` run of the plan preamble. Three
runs in all:

* ``TEXT``: one host per refused case (the contract refuses them all in its first task):
  trailing line breaks (``$`` accepts one; every pattern is whole-string now), secrets with a
  line break (``echo $TOKEN | ansible-vault encrypt_string``), host paths that escape or are
  system directories (state_dir, model_path, the roles' path tunables), volume-spec syntax in
  mounted paths, credentials in service configs and URLs, messages that would quote a secret,
  loader variables with relative entries, run options out of range;
* ``CONTROL``: the near misses of each class, which must plan (so the refusals are not vacuous),
  run with ``-e`` run options that are fine;
* ``-e`` a revision 0 and a 10 kB change note: refused, the note shown at most ~60 characters.

Each refused case asserts: the run failed before any plan, a line ``HOST: VARIABLE...`` names
the case's host and variable, no traceback, and the case's sentinel secret never appears.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import List

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_vllm_fleet_plan_contract import (  # noqa: E402
    _BASE, ANSIBLE_PLAYBOOK, DSV3, ERNIE, S, SENTINEL, Case, Run, _assert_no_crash, _case_vars, _excerpt,
    _host_block, _inventory, _play, _plans)

sys.path.pop(0)
pytestmark = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not found")

NL = "\n"
_UV = {"vllm_fleet_runtime": "uv", "vllm_fleet_vllm_version": "0.32.0"}
ECHO_HINT = r"echo -n"
CREDENTIAL = r"vllm_fleet_hf_token / vllm_fleet_api_key"

TEXT: List[Case] = [
    # 1. a trailing line break: `$` matched before it, so each of these planned before
    Case("nl-deployment", {"vllm_fleet_deployment": "ernie" + NL}, "vllm_fleet_deployment", also="line break"),
    Case("nl-instance", {"vllm_fleet_instance": "x" + NL}, "vllm_fleet_instance", also="line break"),
    Case("nl-recipe", {"vllm_fleet_recipe": ERNIE + NL}, "vllm_fleet_recipe", also="line break"),
    Case("nl-image", {"vllm_fleet_image": "vllm/vllm-openai:latest" + NL}, "vllm_fleet_image"),
    Case("nl-image-tag", {"vllm_fleet_image_tag": "v0.32.0" + NL}, "vllm_fleet_image_tag"),
    Case("nl-served-name", {"vllm_fleet_served_model_name": "ernie" + NL}, "vllm_fleet_served_model_name"),
    Case("nl-address", {"vllm_fleet_address": "10.0.0.1" + NL}, "vllm_fleet_address"),
    Case("nl-listen", {"vllm_fleet_listen": "localhost" + NL}, "vllm_fleet_listen"),
    Case("nl-iface", {"vllm_fleet_iface": "eth0" + NL}, "vllm_fleet_iface"),
    Case("nl-vllm-version", {**_UV, "vllm_fleet_vllm_version": "0.32.0" + NL}, "vllm_fleet_vllm_version"),
    Case("nl-router-version", {"vllm_fleet_router_version": "0.1.17" + NL}, "vllm_fleet_router_version"),
    Case("nl-feature", {"vllm_fleet_features": ["encoder_parallel" + NL]}, "vllm_fleet_features"),
    Case("nl-strategy", {"vllm_fleet_strategy": "single_node_tp" + NL}, "vllm_fleet_strategy"),
    Case("nl-env-name", {"vllm_fleet_env": {"VLLM_LOGGING_LEVEL" + NL: "DEBUG"}}, "vllm_fleet_env"),
    Case("nl-placeholder-name", {"vllm_fleet_placeholders": {"ROUTER_HOST" + NL: "0.0.0.0"}},
         "vllm_fleet_placeholders"),
    Case("nl-torch-backend", {"vllm_fleet_cuda_torch_backend": "cu128" + NL}, "vllm_fleet_cuda_torch_backend"),
    Case("nl-rocm-device", {"vllm_fleet_rocm_devices": ["/dev/kfd" + NL]}, "vllm_fleet_rocm_devices"),
    Case("nl-mooncake-package", {"vllm_fleet_mooncake_package": "mooncake-transfer-engine==0.3.6" + NL},
         "vllm_fleet_mooncake_package"),
    Case("nl-rollback-to", {"vllm_fleet_rollback_to": "3" + NL}, "vllm_fleet_rollback_to"),
    # ... and a secret with one (ansible-vault encrypt_string of `echo $TOKEN`): refused, never shown
    Case("nl-hf-token", {"vllm_fleet_hf_token": "hf_" + S + NL}, "vllm_fleet_hf_token", secret=True, also=ECHO_HINT),
    Case("nl-api-key", {"vllm_fleet_api_key": S + NL}, "vllm_fleet_api_key", secret=True, also=ECHO_HINT),
    Case("cr-api-key", {"vllm_fleet_api_key": S + "\r" + NL}, "vllm_fleet_api_key", secret=True, also=ECHO_HINT),
    Case("nl-digest-key", {"vllm_fleet_secret_digest_key": S + NL}, "vllm_fleet_secret_digest_key", secret=True,
         also=ECHO_HINT),
    # 2. host paths that escape, or are system directories (state_dir is a teardown root)
    Case("state-dir-etc", {"vllm_fleet_state_dir": "/etc"}, "vllm_fleet_state_dir", also="system directory"),
    Case("state-dir-root", {"vllm_fleet_state_dir": "/"}, "vllm_fleet_state_dir"),
    Case("state-dir-var-lib", {"vllm_fleet_state_dir": "/var/lib"}, "vllm_fleet_state_dir"),
    Case("state-dir-var", {"vllm_fleet_state_dir": "/var"}, "vllm_fleet_state_dir"),
    Case("state-dir-in-etc", {"vllm_fleet_state_dir": "/etc/vllm-fleet/state"}, "vllm_fleet_state_dir",
         also="system tree /etc"),
    Case("state-dir-in-usr", {"vllm_fleet_state_dir": "/usr/share/vllm-fleet"}, "vllm_fleet_state_dir"),
    Case("state-dir-in-proc", {"vllm_fleet_state_dir": "/proc/self/x"}, "vllm_fleet_state_dir"),
    Case("state-dir-in-boot", {"vllm_fleet_state_dir": "/boot/vf"}, "vllm_fleet_state_dir"),
    Case("state-dir-dotdot", {"vllm_fleet_state_dir": "/var/lib/vllm-fleet/../../../etc"}, "vllm_fleet_state_dir"),
    Case("state-dir-dot", {"vllm_fleet_state_dir": "/var/lib/./vllm-fleet"}, "vllm_fleet_state_dir"),
    Case("state-dir-double-slash", {"vllm_fleet_state_dir": "/var/lib//vllm-fleet"}, "vllm_fleet_state_dir"),
    Case("state-dir-trailing-slash", {"vllm_fleet_state_dir": "/var/lib/vllm-fleet/"}, "vllm_fleet_state_dir"),
    Case("model-path-root", {"vllm_fleet_model_path": "/"}, "vllm_fleet_model_path"),
    Case("model-path-etc", {"vllm_fleet_model_path": "/etc"}, "vllm_fleet_model_path"),
    Case("model-path-trailing-slash", {"vllm_fleet_model_path": "/srv/models/ernie/"}, "vllm_fleet_model_path"),
    Case("model-path-double-slash", {"vllm_fleet_model_path": "/srv//models"}, "vllm_fleet_model_path"),
    Case("uv-root-etc", {"vllm_fleet_uv_root": "/etc"}, "vllm_fleet_uv_root"),
    Case("uv-root-relative", {"vllm_fleet_uv_root": "opt/vllm-fleet"}, "vllm_fleet_uv_root"),
    Case("uv-state-dir-in-usr", {"vllm_fleet_uv_state_dir": "/usr/lib/vllm-fleet"}, "vllm_fleet_uv_state_dir"),
    Case("uv-hf-cache-dotdot", {"vllm_fleet_uv_hf_cache": "/var/lib/vllm-fleet/../.."}, "vllm_fleet_uv_hf_cache"),
    Case("services-home-root", {"vllm_fleet_services_user_home": "/root"}, "vllm_fleet_services_user_home"),
    Case("services-root-opt", {"vllm_fleet_services_root": "/opt"}, "vllm_fleet_services_root"),
    Case("uv-unit-dir-etc", {"vllm_fleet_uv_unit_dir": "/etc"}, "vllm_fleet_uv_unit_dir"),
    Case("uv-writable-slash", {"vllm_fleet_uv_writable_paths": ["/srv/scratch", "/"]}, "vllm_fleet_uv_writable_paths"),
    # 5. volume-spec syntax and control characters in paths that become mounts
    Case("model-path-colon", {"vllm_fleet_model_path": "/srv/models/a:/etc"}, "vllm_fleet_model_path", also="':'"),
    Case("model-path-comma", {"vllm_fleet_model_path": "/srv/models/a,readonly=false"}, "vllm_fleet_model_path"),
    Case("model-path-tab", {"vllm_fleet_model_path": "/srv/models/a\tb"}, "vllm_fleet_model_path"),
    Case("docker-hf-cache-colon", {"vllm_fleet_docker_hf_cache": "/var/lib/vllm-fleet/hf:/etc"},
         "vllm_fleet_docker_hf_cache"),
    Case("docker-hf-cache-shared-comma", {"vllm_fleet_docker_hf_cache_shared": "/srv/hf,z"},
         "vllm_fleet_docker_hf_cache_shared"),
    # 3. credentials in service configs (0644 JSON mounted into containers) and in URLs
    Case("mc-url-password", {"vllm_fleet_mooncake_config": {"metadata_server": "redis://:" + S + "@10.0.0.5:6379"}},
         "vllm_fleet_mooncake_config", secret=True, also=CREDENTIAL),
    Case("mc-password-key", {"vllm_fleet_mooncake_config": {"metadata_server_password": S}},
         "vllm_fleet_mooncake_config", secret=True, also=CREDENTIAL),
    Case("mc-store-nested-key", {"vllm_fleet_mooncake_store_config": {"auth": {"Redis_Password": S}}},
         "vllm_fleet_mooncake_store_config", secret=True),
    Case("mc-store-token-key", {"vllm_fleet_mooncake_store_config": {"access-token": S}},
         "vllm_fleet_mooncake_store_config", secret=True),
    Case("mc-env-password", {"vllm_fleet_env": {"MC_REDIS_PASSWORD": S}}, "vllm_fleet_env", secret=True,
         also="set vllm_fleet_mooncake_redis_password instead"),
    Case("mc-url-points-to-the-variable", {"vllm_fleet_mooncake_store_config": {"metadata_server": "redis://default:"
                                                                                 + S + "@10.0.0.5:6379/0"}},
         "vllm_fleet_mooncake_store_config", secret=True, also="vllm_fleet_mooncake_redis_password"),
    Case("nl-mc-redis-password", {"vllm_fleet_mooncake_redis_password": S + NL}, "vllm_fleet_mooncake_redis_password",
         secret=True),
    Case("mc-list-url", {"vllm_fleet_mooncake_config": {"servers": ["10.0.0.1", "http://admin:" + S + "@10.0.0.2/"]}},
         "vllm_fleet_mooncake_config", secret=True),
    Case("env-url-password", {"vllm_fleet_env": {"REDIS_URL": "redis://user:" + S + "@cache:6379/0"}},
         "vllm_fleet_env", secret=True),
    Case("placeholder-url-password", {"vllm_fleet_placeholders": {"MOONCAKE_META": "etcd://root:" + S + "@h:2379"}},
         "vllm_fleet_placeholders", secret=True),
    Case("wheel-index-password", {"vllm_fleet_rocm_wheel_index": "https://ci:" + S + "@wheels.example/rocm/"},
         "vllm_fleet_rocm_wheel_index", secret=True),
    # 4. a refusal for another reason must not quote the secret in the value
    Case("arg-secret-flag-newline", {"vllm_fleet_extra_args": ["--api-key=" + S + NL]}, "vllm_fleet_extra_args",
         secret=True, also="line break"),
    Case("arg-secret-flag-inside", {"vllm_fleet_extra_args": ["--max-model-len", "4096" + NL + "--hf-token " + S]},
         "vllm_fleet_extra_args", secret=True),
    Case("served-name-url", {"vllm_fleet_served_model_name": "https://u:" + S + "@h x"},
         "vllm_fleet_served_model_name", secret=True),
    Case("note-secret-flag", {"vllm_fleet_change_note": "rotated --api-key " + S + NL}, "vllm_fleet_change_note",
         secret=True),
    Case("note-env-assignment", {"vllm_fleet_change_note": "set HF_TOKEN=" + S + "\tand" + NL},
         "vllm_fleet_change_note", secret=True),
    # 5. loader variables from the inventory: absolute paths only; the others stay refused
    Case("ld-preload-relative", {"vllm_fleet_env": {"LD_PRELOAD": "libtcmalloc.so"}}, "vllm_fleet_env",
         also="absolute paths only"),
    Case("ld-preload-dotdot", {"vllm_fleet_env": {"LD_PRELOAD": "/opt/../tmp/evil.so"}}, "vllm_fleet_env"),
    Case("ld-library-path-empty-entry", {"vllm_fleet_env": {"LD_LIBRARY_PATH": "/opt/intel/lib::/usr/local/lib"}},
         "vllm_fleet_env", also="empty entry"),
    Case("ld-library-path-trailing-colon", {"vllm_fleet_host_env": {"LD_LIBRARY_PATH": "/opt/intel/lib:"}},
         "vllm_fleet_host_env"),
    Case("ld-preload-newline", {"vllm_fleet_cpu_env": {"LD_PRELOAD": "/opt/x.so" + NL}}, "vllm_fleet_cpu_env"),
    Case("ld-audit", {"vllm_fleet_rocm_env": {"LD_AUDIT": "/opt/audit.so"}}, "vllm_fleet_rocm_env"),
    Case("pythonpath", {"vllm_fleet_env": {"PYTHONPATH": "/opt/py"}}, "vllm_fleet_env"),
    # 5. run options
    Case("rollback-to-0", {"vllm_fleet_rollback_to": "0"}, "vllm_fleet_rollback_to", also="start at 1"),
    Case("rollback-to-leading-zero", {"vllm_fleet_rollback_to": "007"}, "vllm_fleet_rollback_to"),
]

# ------------------------------------------------------------------------------------------
# CONTROL: the near misses of every class above, which must plan

_MC = {"vllm_fleet_recipe": DSV3, "vllm_fleet_hardware": "h200", "vllm_fleet_strategy": "single_node_tp",
       "vllm_fleet_kv_offload": "kv_store_centralized_mooncake", "vllm_fleet_deployment": "ok-mc"}
MC_CONFIG = {"metadata_server": "redis://10.0.0.5:6379", "master_server_address": "10.0.0.5:50051",
             "protocol": "tcp", "device_name": "", "global_segment_size": "4GB", "local_buffer_size": "1GB",
             "transfer_timeout": 30, "extra": {"nested": ["etcd://user@10.0.0.6:2379"]}}
MC_STORE = {"global_segment_size": "8GB", "keep_alive": True}
PRELOAD = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4:/opt/intel/oneapi/lib/libiomp5.so"
PRELOAD_BLANKS = "/usr/lib/libtcmalloc.so /opt/intel/lib/libiomp5.so"
LIBRARY_PATH = "/usr/local/lib:/opt/intel/oneapi/lib"
CONTROL_SECRET = SENTINEL + "text-control"
CONTROL = {
    "ok-names": dict(_BASE, vllm_fleet_deployment="ernie-2.x_y", vllm_fleet_instance="i-0.a",
                     vllm_fleet_served_model_name="ernie/4.5:vl"),
    "ok-paths": dict(_BASE, vllm_fleet_deployment="ok-paths", vllm_fleet_model_path="/srv/models/ERNIE 4.5 (vl)",
                     vllm_fleet_state_dir="/usr/local/vllm-fleet/state", vllm_fleet_uv_root="/opt/vf",
                     vllm_fleet_uv_state_dir="/srv/vllm-fleet", vllm_fleet_uv_user_home="/srv/vllm-fleet/home",
                     vllm_fleet_docker_hf_cache="/data/hf-cache",
                     vllm_fleet_uv_writable_paths=["/dev/shm/vf", "/tmp/vf"]),
    "ok-loader": dict(_BASE, vllm_fleet_deployment="ok-loader",
                      vllm_fleet_env={"LD_PRELOAD": PRELOAD, "LD_LIBRARY_PATH": LIBRARY_PATH},
                      vllm_fleet_host_env={"LD_PRELOAD": PRELOAD_BLANKS}),
    "ok-secrets": dict(_BASE, vllm_fleet_deployment="ok-text-secrets", vllm_fleet_hf_token="hf_" + CONTROL_SECRET,
                       vllm_fleet_mooncake_redis_password=CONTROL_SECRET + "-redis",
                       vllm_fleet_api_key=CONTROL_SECRET + "-k", vllm_fleet_secret_digest_key=CONTROL_SECRET + "-digest",
                       vllm_fleet_env={"HF_HOME": "/data/hf", "NO_PROXY": "10.0.0.0/8",
                                       "PROXY_URL": "http://proxy.example:3128"}),
    "ok-mc-1": dict(_MC, vllm_fleet_mooncake_config=MC_CONFIG, vllm_fleet_mooncake_store_config=MC_STORE,
                    vllm_fleet_mooncake_redis_password=CONTROL_SECRET + "-redis", ansible_host="10.9.5.1"),
    "ok-mc-2": dict(_MC, vllm_fleet_mooncake_config=MC_CONFIG, vllm_fleet_mooncake_store_config=MC_STORE,
                    vllm_fleet_mooncake_redis_password=CONTROL_SECRET + "-redis",
                    vllm_fleet_role=["master", "store"], ansible_host="10.9.5.2"),
}
CONTROL_EXTRA = ["-e", "vllm_fleet_rollback_to=1", "-e", json.dumps({"vllm_fleet_change_note": "a" * 400})]


@pytest.fixture(scope="module")
def text_run(tmp_path_factory) -> Run:
    blocks = [_host_block(c.host, _case_vars(c, _BASE), c.raw) for c in TEXT]
    return _play(tmp_path_factory.mktemp("text"), _inventory(blocks, {}))


@pytest.fixture(scope="module")
def control_run(tmp_path_factory) -> Run:
    blocks = [_host_block(name, variables) for name, variables in CONTROL.items()]
    return _play(tmp_path_factory.mktemp("text-control"), _inventory(blocks, {}), *CONTROL_EXTRA)


# a 10 kB note of distinct words: any 70 characters of it in the output would be found
LONG_NOTE = " ".join(f"word{n:05d}" for n in range(1000))


@pytest.fixture(scope="module")
def extra_vars_run(tmp_path_factory) -> Run:
    blocks = [_host_block("e-text", dict(_BASE, vllm_fleet_deployment="e-text"))]
    return _play(tmp_path_factory.mktemp("text-e"), _inventory(blocks, {}), "-e", "vllm_fleet_rollback_to=0",
                 "-e", json.dumps({"vllm_fleet_change_note": LONG_NOTE}))


def test_distinct_cases():
    ids = [c.id for c in TEXT]
    assert len(ids) == len(set(ids)) and len(ids) >= 60


@pytest.mark.parametrize("case", TEXT, ids=lambda c: c.id)
def test_text_refuses(text_run, case):
    run = text_run
    assert run.rc != 0, run.out[-3000:]
    assert "the inventory breaks the contract (nothing was changed)" in run.out
    assert "Plan every deployment" not in run.out
    for var in case.names:
        assert run.names(case.host, var), f"no line '{case.host}: {var}...':\n{_excerpt(run, case.host)}"
    if case.also:
        assert re.search(case.also, _excerpt(run, case.host)), _excerpt(run, case.host)
    _assert_no_crash(run)
    if case.secret:
        assert case.sentinel not in run.out, _excerpt(run, case.host)


def test_no_message_line_is_long(text_run):
    """Every message shows at most ~60 characters of any value: no refusal line is a wall."""
    lines = [line for line in text_run.out.splitlines() if re.match(r"k-[\w.-]+: vllm_fleet_", line)]
    assert len(lines) >= len(TEXT)
    assert max(len(line) for line in lines) < 400, max(lines, key=len)


def test_near_misses_plan(control_run):
    run = control_run
    assert run.rc == 0, run.out[-4000:]
    _assert_no_crash(run)
    plans = _plans(run)
    assert set(plans) == set(CONTROL)
    assert plans["ok-names"]["deployment"] == "ernie-2.x_y"
    assert plans["ok-paths"]["processes"][0]["model_path"] == CONTROL["ok-paths"]["vllm_fleet_model_path"]
    assert CONTROL_SECRET not in run.out and CONTROL_SECRET not in json.dumps(plans)


def test_operator_loader_env_reaches_the_process(control_run):
    """LD_PRELOAD / LD_LIBRARY_PATH from the inventory are in the planned environment of the
    server (not refused again later): vllm_fleet_env's and, laid over it, the host's."""
    env = _plans(control_run)["ok-loader"]["processes"][0]["env"]
    assert env["LD_LIBRARY_PATH"] == LIBRARY_PATH
    assert env["LD_PRELOAD"] in (PRELOAD, PRELOAD_BLANKS)


def test_mooncake_config_keys_reach_the_files(control_run):
    plans = _plans(control_run)
    contents = [json.loads(f["content"]) for p in (plans["ok-mc-1"], plans["ok-mc-2"]) for f in p["files"]
                if f["path"].endswith(".json")]
    assert contents, plans["ok-mc-1"]["files"]
    assert all(c["metadata_server"] == MC_CONFIG["metadata_server"] for c in contents)
    assert any(c.get("global_segment_size") == MC_STORE["global_segment_size"] for c in contents)


def test_the_redis_password_is_named_not_held_by_the_mooncake_plans(control_run):
    """The vaulted Redis password reaches Mooncake's master, store and engines as a variable name
    (the roles resolve it into root-only env files); no plan, file or output holds the value."""
    plans = _plans(control_run)
    kinds = {p["kind"]: p for name in ("ok-mc-1", "ok-mc-2") for p in plans[name]["processes"]}
    assert {"vllm", "mooncake_master", "mooncake_store"} <= set(kinds), sorted(kinds)
    for kind in ("vllm", "mooncake_master", "mooncake_store"):
        assert "MC_REDIS_PASSWORD" in kinds[kind]["secret_env"], kinds[kind]
    for name in ("ok-mc-1", "ok-mc-2"):
        assert plans[name]["secret_vars"]["MC_REDIS_PASSWORD"] == "vllm_fleet_mooncake_redis_password"
    # a deployment without Mooncake does not get it, even where the host sets it
    assert "MC_REDIS_PASSWORD" not in plans["ok-secrets"]["secret_vars"]
    assert CONTROL_SECRET + "-redis" not in control_run.out + json.dumps(plans)


def test_extra_vars_revision_0_and_a_long_note(extra_vars_run):
    run = extra_vars_run
    assert run.rc != 0, run.out[-4000:]
    assert run.names("e-text", "vllm_fleet_rollback_to"), run.out[-4000:]
    assert run.names("e-text", "vllm_fleet_change_note"), run.out[-4000:]
    _assert_no_crash(run)
    line = next(line for line in run.out.splitlines() if "e-text: vllm_fleet_change_note" in line)
    assert len(line) < 300, line
    assert f"({len(LONG_NOTE)} characters)" in line         # the length is said, the text is not repeated
    assert "word00010" not in run.out          # nothing past the first ~60 characters
