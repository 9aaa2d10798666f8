"""The input boundary's text rules (issue 26), on the engine alone: whole-string patterns,
masked and shortened values in messages, host paths (vllm_fleet.pathrules), credentials in
service configs, loader variables from the inventory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vllm_fleet import contract, pathrules, redact, valuecheck
from vllm_fleet import variables as declarations
from vllm_fleet.plan import host_input, plan
from vllm_fleet import loader

ROOT = Path(__file__).resolve().parents[4]
SECRET = "Zq7-sEcReT-value-9x"


def problems(**variables):
    values = {contract.PREFIX + k: v for k, v in variables.items()}
    values.setdefault("vllm_fleet_recipe", "a/b")
    return contract.check("h1", values)[1]


def _compiled_patterns():
    """Every regex the contract validates with: the constants of its modules and the Vars' own
    patterns."""
    found = {name: value for module in (contract, declarations, valuecheck, redact)
             for name, value in vars(module).items() if isinstance(value, re.Pattern)}
    found.update({v.full: v.pattern for v in contract.VARIABLES if v.pattern is not None})
    # SECRET_FLAG_RE is a prefix test on one word (`--api-key` or `--api-key=...`), not a
    # whole-value validator; URL_CREDENTIALS_RE and TOKEN_WORD_RE search inside values
    return {k: v for k, v in found.items() if k not in ("SECRET_FLAG_RE", "URL_CREDENTIALS_RE", "TOKEN_WORD_RE")}


@pytest.mark.parametrize("name", sorted(_compiled_patterns()))
def test_no_validation_pattern_ends_in_a_bare_dollar(name):
    """`$` matches before a final newline: every whole-value pattern ends in \\Z."""
    pattern = _compiled_patterns()[name].pattern
    assert pattern.endswith("\\Z") and not pattern.endswith("$"), pattern


@pytest.mark.parametrize("name, value", [
    ("deployment", "ernie"), ("instance", "i0"), ("recipe", "a/b"), ("image", "vllm/vllm-openai:latest"),
    ("image_tag", "v0.32.0"), ("served_model_name", "ernie"), ("address", "10.0.0.1"), ("listen", "localhost"),
    ("iface", "eth0"), ("router_version", "0.1.17"), ("strategy", "single_node_tp"), ("rollback_to", "3"),
    ("state_dir", "/var/lib/vllm-fleet/state"), ("model_path", "/srv/models/ernie"),
])
def test_a_trailing_line_break_is_refused_where_the_value_alone_passes(name, value):
    assert not [p for p in problems(**{name: value}) if f"vllm_fleet_{name}" in p]
    found = [p for p in problems(**{name: value + "\n"}) if p.startswith(f"h1: vllm_fleet_{name}")]
    assert found and "line break" in found[0], found


@pytest.mark.parametrize("name", ["hf_token", "api_key", "secret_digest_key"])
@pytest.mark.parametrize("tail", ["\n", "\r\n"])
def test_a_secret_with_a_line_break_is_refused_unshown(name, tail):
    found = problems(**{name: SECRET + tail})
    assert any(p.startswith(f"h1: vllm_fleet_{name}: contains a line break") and "echo -n" in p for p in found)
    assert SECRET not in "\n".join(found)
    assert not problems(**{name: SECRET})   # the same value without it is fine


@pytest.mark.parametrize("text, hidden", [
    ("--api-key=" + SECRET, "--api-key=***"),
    ("--api-key " + SECRET + " --port 8000", "--api-key *** --port 8000"),
    ("x\n--hf-token\t" + SECRET, "--hf-token\t***"),
    ("redis://:" + SECRET + "@10.0.0.1:6379", "redis://:***@10.0.0.1:6379"),
    ("see https://user:" + SECRET + "@host/x", "https://user:***@host/x"),
    ("HF_TOKEN=" + SECRET, "HF_TOKEN=***"),
    ("token hf_" + SECRET, "token ***"),
])
def test_masked_hides_every_secret_looking_part(text, hidden):
    out = redact.masked(text)
    assert SECRET not in out and hidden in out, out


def test_masked_keeps_what_is_no_secret():
    for text in ("--max-model-len 4096", "ssh://git@host/repo", "http://proxy:3128", "LEVEL=DEBUG"):
        assert redact.masked(text) == text


def test_shown_cuts_long_values_and_says_their_length():
    note = "".join(f"{n:04d}" for n in range(2500))
    out = redact.shown(note)
    assert len(out) < 90 and f"({len(note)} characters)" in out and note[100:120] not in out
    assert redact.shown("short\n") == repr("short\n")


def test_the_secret_is_masked_before_the_cut():
    out = redact.shown("x" * 50 + " --api-key " + SECRET)
    assert SECRET[:3] not in out.replace("xxx", "")


@pytest.mark.parametrize("path", ["/", "/etc", "/var", "/var/lib", "/usr", "/usr/local", "/home", "/opt", "/tmp",
                                  "/root", "/boot", "/etc/systemd", "/proc", "/dev", "/run", "/var/log"])
def test_system_directories_and_their_parents_are_refused_everywhere(path):
    assert pathrules.is_system_dir(path)
    for kind in ("dir", "root"):
        assert "system directory" in (pathrules.path_problem(path, kind) or ""), (path, kind)


@pytest.mark.parametrize("path, kind", [
    ("/etc/vllm-fleet/state", "root"), ("/usr/lib/vf", "root"), ("/usr/share/vf", "root"), ("/proc/1", "root"),
    ("/sys/x", "root"), ("/dev/shm/x", "root"), ("/boot/x", "root"), ("/lib64/x", "root"),
])
def test_roots_inside_system_trees_are_refused(path, kind):
    assert "system tree" in (pathrules.path_problem(path, kind) or "")


@pytest.mark.parametrize("path", [
    "relative/x", "/a/../b", "/a/./b", "/a//b", "/a/b/", "/a/b\n", "/a\tb", "/a:b", "/a,b", "/a b", "",
])
def test_paths_out_of_normal_form_or_with_spec_syntax_are_refused(path):
    assert pathrules.path_problem(path, "dir")


@pytest.mark.parametrize("path, kind", [
    ("/var/lib/vllm-fleet/state", "root"), ("/opt/vllm-fleet", "root"), ("/usr/local/vllm-fleet", "root"),
    ("/srv/state", "root"), ("/data/hf-cache", "root"), ("/etc/systemd/system", "dir"), ("/etc/vllm-fleet", "dir"),
    ("/dev/shm/models", "dir"), ("/tmp/vf", "dir"), ("/home/ops/models", "dir"),
])
def test_near_miss_paths_pass(path, kind):
    assert pathrules.path_problem(path, kind) is None


def test_model_path_may_have_blanks_but_no_spec_syntax():
    assert not problems(model_path="/srv/models/ERNIE 4.5")
    assert any("':'" in p for p in problems(model_path="/srv/models/a:/etc"))


@pytest.mark.parametrize("config", [
    {"metadata_server": "redis://:" + SECRET + "@10.0.0.5:6379"},
    {"metadata_server_password": SECRET},
    {"REDIS_PASSWORD": SECRET},
    {"password": SECRET},
    {"auth": {"api-key": SECRET}},
    {"servers": [{"url": "etcd://root:" + SECRET + "@h:2379"}]},
])
def test_credentials_in_service_configs_are_refused_unquoted(config):
    found = problems(mooncake_config=config) + problems(mooncake_store_config=config)
    assert len(found) == 2 and all("vllm_fleet_hf_token / vllm_fleet_api_key" in p for p in found), found
    assert SECRET not in "\n".join(found)


def test_legitimate_mooncake_keys_pass():
    config = {"mode": "standalone-store", "metadata_server": "P2PHANDSHAKE", "master_server_address": "10.0.0.1:50051",
              "protocol": "rdma", "device_name": "mlx5_0,mlx5_1", "global_segment_size": "500GB",
              "local_buffer_size": "4GB", "metadata_server_url": "http://10.0.0.2:8080/metadata",
              "etcd": "etcd://user@10.0.0.3:2379", "password": ""}
    assert not problems(mooncake_config=config, mooncake_store_config=config)


def test_operator_loader_env_is_accepted_and_planned():
    preload = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 /opt/intel/lib/libiomp5.so"
    libs = "/usr/local/lib:/opt/intel/lib"
    variables = {"vllm_fleet_recipe": "baidu/ERNIE-4.5-VL-28B-A3B-PT", "vllm_fleet_hardware": "h200",
                 "vllm_fleet_env": {"LD_PRELOAD": preload, "LD_LIBRARY_PATH": libs}}
    values, found = contract.check("h1", variables)
    assert not found
    hosts = [host_input("h1", values, {"ansible_host": "10.0.0.1"}, b"k" * 32)]
    env = plan(loader.load([str(ROOT / "recipes")]), hosts)["h1"]["processes"][0]["env"]
    assert env["LD_PRELOAD"] == preload and env["LD_LIBRARY_PATH"] == libs


@pytest.mark.parametrize("env, words", [
    ({"LD_PRELOAD": "libx.so"}, "absolute paths only"),
    ({"LD_PRELOAD": "/a/../b.so"}, "absolute paths only"),
    ({"LD_LIBRARY_PATH": "/a::/b"}, "empty entry"),
    ({"LD_LIBRARY_PATH": ":/a"}, "empty entry"),
    ({"LD_LIBRARY_PATH": ""}, "must not be empty"),
    ({"LD_AUDIT": "/a.so"}, "refused"),
    ({"ld_preload": "/a.so"}, "refused"),
    ({"PYTHONPATH": "/a"}, "refused"),
])
def test_loader_env_from_the_inventory_needs_absolute_paths(env, words):
    for name in ("env", "host_env", "cpu_env", "rocm_env"):
        found = problems(**{name: env})
        assert any(p.startswith(f"h1: vllm_fleet_{name}.") and words in p for p in found), (name, found)


@pytest.mark.parametrize("value, ok", [("previous", True), ("1", True), ("42", True), ("0", False), ("007", False),
                                       ("-1", False), ("1.0", False)])
def test_rollback_to_counts_from_1(value, ok):
    assert (not problems(rollback_to=value)) is ok
