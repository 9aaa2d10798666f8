"""Each docker process of a plan carries its finished container (runtimespec.docker_run), made
from the process, the layout and the host's vllm_fleet_docker_* tunables, which the docker role
hands docker as it is (roles/vllm_fleet_docker/tasks/start.yml)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vllm_fleet import runtimespec
from vllm_fleet.hostplan import PlannedProcess
from vllm_fleet.layout import deployment_layout, host_layout

ROOT = Path(__file__).resolve().parents[4]
BIN = Path(sys.executable).parent
HOST = "h1"
BASE = {
    "vllm_fleet_recipe": "sentence-transformers/all-MiniLM-L6-v2",
    "vllm_fleet_deployment": "spec",
    "vllm_fleet_hardware": "xeon6",
    "vllm_fleet_runtime": "docker",
    "vllm_fleet_image": "vllm-fleet/base:bookworm",
    "vllm_fleet_port": 18790,
    "vllm_fleet_env": {"VLLM_NO_USAGE_STATS": "1"},
    "vllm_fleet_hf_token": "hf_unit_dummy_token",
    "ansible_host": "127.0.0.1",
}


def planned(tmp_path, **more):
    """`vllm-fleet plan` over a one-host inventory with BASE and ``more`` as its variables."""
    inventory = tmp_path / f"hosts-{len(list(tmp_path.iterdir()))}.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {HOST: dict(BASE, **more)}}}))
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    out = subprocess.run([sys.executable, "-m", "vllm_fleet.cli", "plan", "--recipes", str(ROOT / "recipes"),
                          "--inventory", str(inventory)], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)[HOST]


def test_the_tunables_are_the_contracts_docker_variables_and_the_docker_role_declares_none():
    """One declaration: runtimespec's tunables are variables.py's docker_* (name and default); the
    docker role neither declares nor defaults any (it applies docker_run as it is)."""
    from vllm_fleet.variables import BY_NAME

    assert len(runtimespec.DOCKER_TUNABLES) == 13
    for key, (var, default) in runtimespec.DOCKER_TUNABLES.items():
        assert var == f"vllm_fleet_docker_{key}" and BY_NAME[var].default == default and BY_NAME[var].scope == "host"
    role = ROOT / "roles" / "vllm_fleet_docker"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    options = {name for entry in specs.values() for name in entry.get("options") or {}}
    tunables = {var for var, _ in runtimespec.DOCKER_TUNABLES.values()}
    assert tunables.isdisjoint(defaults) and tunables.isdisjoint(options)


def test_a_planned_docker_process_carries_its_finished_container(tmp_path):
    plan = planned(tmp_path)
    [proc] = plan["processes"]
    run = proc["docker_run"]
    assert run["name"] == proc["name"] and run["image"] == "vllm-fleet/base:bookworm"
    assert run["entrypoint"] + run["command"] == proc["argv"] and run["entrypoint"] == ["vllm", "serve"]
    # the container block's env under the process's, no secret value anywhere
    assert run["env"] == dict(proc["container"]["env"], **proc["env"])
    assert run["env"]["VLLM_NO_USAGE_STATS"] == "1"
    assert run["secret_env"] == {"HF_TOKEN": "vllm_fleet_hf_token"}
    assert "hf_unit_dummy_token" not in json.dumps(plan)
    assert run["volumes"][0] == f"{plan['layout']['hf_cache']}:/root/.cache/huggingface"
    assert run["dirs"][0] == plan["layout"]["hf_cache"] and run["dirs_present"] == []
    if proc.get("compile_cache"):
        assert f"{proc['compile_cache']}:{proc['compile_cache']}" in run["volumes"]
        assert proc["compile_cache"] in run["dirs"]
    # host IPC: docker would add label=disable itself, so it is asked for (strict comparison)
    assert run["ipc_mode"] == "host" and run["network_mode"] == "host" and run["published_ports"] == []
    assert run["security_opts"] == ["no-new-privileges", "label=disable"]
    assert run["cap_drop"] == ["ALL"] and run["capabilities"] == [] and run["privileged"] is False
    assert run["stop_timeout"] == proc["stop_timeout"]
    assert run["labels"] == {"vllm-fleet.deployment": "spec", "vllm-fleet.recipe": plan["recipe"],
                             "vllm-fleet.role": proc["role"], "vllm-fleet.plan-hash": proc["hash"]}
    assert run["pull"] == "missing" and run["restart_policy"] == "unless-stopped"


def test_the_hosts_tunables_shape_it_and_leave_the_hash_alone(tmp_path):
    plain = planned(tmp_path)
    tuned = planned(tmp_path, vllm_fleet_docker_network_mode="bridge", vllm_fleet_docker_ipc_mode="private",
                    vllm_fleet_docker_hf_cache_shared="/srv/hf", vllm_fleet_docker_security_opts=[],
                    vllm_fleet_docker_cap_drop=[], vllm_fleet_docker_cap_add=["SYS_NICE", "SYS_NICE"],
                    vllm_fleet_docker_extra_volumes=["/srv/x:/x:ro"], vllm_fleet_docker_labels={"team": "a"},
                    vllm_fleet_docker_pull="never", vllm_fleet_docker_restart_policy="no")
    run = tuned["processes"][0]["docker_run"]
    assert run["published_ports"] == ["18790:18790"] and run["ipc_mode"] == "private"
    # the shared cache replaces the deployment's own, read-only, and must already be there
    assert run["volumes"][0] == "/srv/hf:/root/.cache/huggingface:ro" and run["volumes"][-1] == "/srv/x:/x:ro"
    assert tuned["layout"]["hf_cache"] not in run["dirs"] and run["dirs_present"] == ["/srv/hf"]
    # false and empty values are values, not "unset": no option, no capability dropped
    assert run["security_opts"] == [] and run["cap_drop"] == [] and run["capabilities"] == ["SYS_NICE"]
    assert run["labels"]["team"] == "a" and run["pull"] == "never" and run["restart_policy"] == "no"
    # the tunables are the runtime's, not the process's: the plan hash does not move
    assert tuned["hash"] == plain["hash"] and tuned["processes"][0]["hash"] == plain["processes"][0]["hash"]
    privileged = planned(tmp_path, vllm_fleet_docker_privileged=True, vllm_fleet_docker_ipc_mode="private")
    run = privileged["processes"][0]["docker_run"]
    assert run["privileged"] is True and run["cap_drop"] == [] and "label=disable" in run["security_opts"]


def test_a_label_option_given_is_not_doubled():
    proc = {"name": "p", "argv": ["vllm", "serve", "m"], "image": "i", "container": {"security_opts": ["label=type:x"]}}
    run = runtimespec.docker_run(proc, "d", "r", {"hf_cache": "/c"}, {})
    assert run["security_opts"] == ["label=type:x", "no-new-privileges"]


def test_a_recorded_plan_without_it_gets_it_from_todays_tunables(tmp_path):
    plan = planned(tmp_path)
    recorded = copy.deepcopy(plan)
    del recorded["processes"][0]["docker_run"]
    finished = runtimespec.finish_plan(recorded, {"vllm_fleet_docker_ipc_mode": "private"})
    assert finished["processes"][0]["docker_run"] == dict(plan["processes"][0]["docker_run"], ipc_mode="private",
                                                          security_opts=["no-new-privileges"])
    # one recorded with it is kept as it ran
    kept = runtimespec.finish_plan(plan, {"vllm_fleet_docker_ipc_mode": "private"})
    assert kept["processes"][0]["docker_run"] == plan["processes"][0]["docker_run"]
    assert "docker_run" not in recorded["processes"][0]   # the input is not changed


def test_it_is_not_hashed():
    proc = PlannedProcess(name="p", kind="vllm", role="single", rank=0, phase="engine", runtime="docker",
                          version=None, argv=["vllm", "serve", "m"], env={}, port=1, serves_http=True, health={},
                          bind=None, probe_host="127.0.0.1", docker_run={"name": "p"})
    assert "docker_run" not in proc.to_dict(with_drain=False) and proc.to_dict()["docker_run"] == {"name": "p"}


@pytest.mark.parametrize("var,value,said", [
    ("vllm_fleet_docker_cap_drop", {"not": "right"}, "must be a list, got a mapping"),
    ("vllm_fleet_docker_cap_add", ["SYS_NICE", "x y"], "[1]: 'x y' is not a capability name"),
    ("vllm_fleet_docker_ipc_mode", {"not": "right"}, "must be a string, got a mapping"),
    # the pull policies the container module knows (community.docker's not_present is not one)
    ("vllm_fleet_docker_pull", "not_present", "'not_present' is not one of missing, always, never"),
    ("vllm_fleet_docker_hf_cache", "/etc", "'/etc'"),
    ("vllm_fleet_docker_extra_volumes", ["/data"], "[0]: '/data' is not a mount such as /data:/data:ro"),
    ("vllm_fleet_docker_labels", {"team": ["a"]}, ".team: must be a string or number, got a list"),
    ("vllm_fleet_docker_stop_timeout", -1, "-1 is out of range (0..86400)"),
])
def test_a_wrong_value_is_refused_before_planning(tmp_path, var, value, said):
    """`vllm-fleet plan` refuses it by the contract, as deploy.yml's plan action does (one check)."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {HOST: dict(BASE, **{var: value})}}}))
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    out = subprocess.run([sys.executable, "-m", "vllm_fleet.cli", "plan", "--recipes", str(ROOT / "recipes"),
                          "--inventory", str(inventory)], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert out.returncode != 0 and f"{HOST}: {var}" in out.stderr and "Traceback" not in out.stderr
    assert said in out.stderr.split(f"{HOST}: {var}", 1)[1].splitlines()[0], out.stderr


def test_a_uv_engine_carries_its_finished_unit_and_a_recorded_one_without_it_gets_the_same(tmp_path):
    """systemd_run of a uv engine: ExecStart's argv[0] in the deployment's venv, the accelerator's
    unit env under the process's own, HF_HOME as the fixed env, the unit block's groups; not in the
    hash; a plan recorded without it is given the same by finish_plan (rollback.yml, uv restore)."""
    plan = planned(tmp_path, vllm_fleet_runtime="uv", vllm_fleet_vllm_version="0.32.0",
                   vllm_fleet_cpu_env={"ONEDNN_VERBOSE": "0", "VLLM_NO_USAGE_STATS": "0"})
    [proc] = plan["processes"]
    run = proc["systemd_run"]
    assert "docker_run" not in proc
    assert run["exec_start"] == [f"{plan['venv']['path']}/bin/vllm"] + proc["argv"][1:]
    # the accelerator's env (vllm_fleet_cpu_env here) under the process's own: the process's value wins
    assert list(run["env"]) == list(dict(proc["unit"]["env"], **proc["env"]))
    assert run["env"]["ONEDNN_VERBOSE"] == "0" and run["env"]["VLLM_NO_USAGE_STATS"] == "1"
    assert run["fixed_env"] == {"HF_HOME": plan["layout"]["hf_cache_shared"]}
    assert run["groups"] == proc["unit"]["groups"]
    assert "hf_unit_dummy_token" not in json.dumps(run)       # secrets: names in secret_env, values never
    # its files, working directory, home and hidden env dir: the host's layout (no role composes them)
    name = proc["name"]
    assert run["files"] == {"unit": f"/etc/systemd/system/{name}.service", "env": f"/etc/vllm-fleet/{name}.env",
                            "workers": f"/etc/vllm-fleet/{name}.workers"}
    assert (run["workdir"], run["home"], run["hidden"]) == ("/var/lib/vllm-fleet", "/var/lib/vllm-fleet/home",
                                                            "/etc/vllm-fleet")
    assert run["requires"] == []
    assert plan["venv"]["interpreter"] == plan["venv"]["path"] + "/bin/python"
    assert plan["venv"]["vllm"] == run["exec_start"][0]
    recorded = copy.deepcopy(plan)
    del recorded["processes"][0]["systemd_run"]
    assert runtimespec.finish_plan(recorded, {})["processes"][0]["systemd_run"] == run
    # a record of the release before: a finished unit without its paths, a layout without the unit
    # and env dirs and homes, a venv without its commands, no accelerator_setup (an older one still):
    # today's plan of the host fills in what is missing, and keeps what was recorded
    older = copy.deepcopy(plan)
    for key in ("files", "workdir", "home", "hidden", "requires"):
        del older["processes"][0]["systemd_run"][key]
    older["processes"][0]["systemd_run"]["env"] = {"AS": "recorded"}
    for key in ("env_dir", "unit_dir", "uv_home", "services_home"):
        del older["layout"][key]
    for key in ("interpreter", "vllm"):
        del older["venv"][key]
    del older["accelerator_setup"]
    finished = runtimespec.finish_plan(older, {}, plan)
    assert finished["processes"][0]["systemd_run"] == dict(run, env={"AS": "recorded"})
    assert finished["layout"] == plan["layout"] and finished["venv"] == plan["venv"]
    assert finished["accelerator_setup"] == plan["accelerator_setup"]
    # not hashed: the plan's hash is that of the same plan without it
    other = planned(tmp_path, vllm_fleet_runtime="uv", vllm_fleet_vllm_version="0.32.0",
                    vllm_fleet_cpu_env={"ONEDNN_VERBOSE": "0", "VLLM_NO_USAGE_STATS": "0"}, vllm_fleet_uv_root="/srv/uv")
    assert other["processes"][0]["systemd_run"]["exec_start"][0].startswith("/srv/uv/spec/venv-")
    assert other["processes"][0]["hash"] == proc["hash"]


def test_a_service_and_an_absolute_command_resolve_as_the_unit_runs_them():
    layout = deployment_layout(host_layout({"vllm_fleet_services_user_home": "/srv/svc-home"}), "d")
    router = {"name": "r", "runtime": "service", "env": {"RUST_LOG": "info"},
              "argv": ["vllm-router", "--port", "9000", "--worker-urls", "http://a:1", "--policy", "round_robin"],
              "membership": {"flag": "--worker-urls", "env": "W", "urls": ["http://a:1"],
                             "argv": ["vllm-router", "--port", "9000", "--policy", "round_robin"]}}
    run = runtimespec.systemd_run(router, layout, None, None)
    # a plain router: its command without the workers (the unit appends them from its .workers file)
    assert run["exec_start"] == ["/opt/vllm-fleet/d/services/bin/vllm-router", "--port", "9000", "--policy", "round_robin"]
    assert run["env"] == {"PATH": "/opt/vllm-fleet/d/services/bin:" + runtimespec.SERVICE_PATH, "RUST_LOG": "info"}
    assert run["fixed_env"] == {} and run["groups"] == []
    assert run["home"] == "/srv/svc-home" and run["files"]["workers"] == "/etc/vllm-fleet/r.workers"
    engine = {"name": "e", "runtime": "uv", "env": {}, "argv": ["/usr/bin/python3", "-m", "x"]}
    run = runtimespec.systemd_run(engine, layout, "/v", {"groups": ["render"], "env": {"A": "1"}})
    assert run["exec_start"] == ["/usr/bin/python3", "-m", "x"] and run["groups"] == ["render"] and run["env"] == {"A": "1"}


def test_a_chat_template_named_relative_to_the_working_directory_is_required_there():
    """A recipe's --chat-template relative to the official image's /vllm-workspace: the uv unit
    runs in the layout's workdir, so the finished unit lists the file there (preflight stats it);
    absolute paths and inline templates are not files to look for."""
    layout = deployment_layout(host_layout({"vllm_fleet_uv_state_dir": "/srv/work"}), "d")
    engine = {"name": "e", "runtime": "uv", "env": {},
              "argv": ["vllm", "serve", "m", "--chat-template", "examples/tool_chat_template_x.jinja",
                       "--chat-template=/abs/t.jinja", "--chat_template", "{{ messages }}.jinja"]}
    run = runtimespec.systemd_run(engine, layout, "/v", {})
    assert run["requires"] == ["/srv/work/examples/tool_chat_template_x.jinja"]
    service = dict(engine, runtime="service")
    assert runtimespec.systemd_run(service, layout, None, None)["requires"] == []
