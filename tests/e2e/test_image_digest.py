"""Images pinned by digest (`name@sha256:...`) through the docker role's docker_image and
docker_container, pulled from a real registry.

No registry is reachable from here, so the test runs one: the registry binary of Debian's
docker-registry package (tests/testbed/registry-binary.sh), on 127.0.0.1 only, for the length
of the test. vllm-fleet/base:bookworm is pushed to it; the reference by digest is then the only
name the engine knows it by (tag and digest reference removed), the docker role (prepare +
start) runs a sleeper from it on a test host (docker socket: the engine is this machine's),
and a second run changes nothing.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from helpers import docker_inspect, playbook
from vllm_fleet.layout import deployment_layout, host_layout
from vllm_fleet import runtimespec

pytestmark = pytest.mark.e2e

REGISTRY = Path("/opt/vllm-fleet-testbed/registry/usr/bin/docker-registry")
BASE_IMAGE = "vllm-fleet/base:bookworm"
CONTAINER = "vllm-fleet-e2e-digest-sleeper"
ARGV = ["python3", "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); time.sleep(3600)"]
PLAY = """
- name: The docker role with a plan whose image is pinned by digest
  hosts: all
  gather_facts: false
  vars_files: [{vars}]
  tasks:
    - name: CPU settings
      ansible.builtin.include_role:
        name: vllm_fleet_cpu
    - name: Prepare (pull by digest) and start
      ansible.builtin.include_role:
        name: vllm_fleet_docker
"""


def docker(*args, check=True, timeout=300):
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=timeout)


@pytest.fixture(scope="module")
def registry():
    if not REGISTRY.is_file():
        pytest.fail(f"{REGISTRY} missing: run bash tests/testbed/registry-binary.sh (tests/testbed/setup.sh does)")
    work = Path(tempfile.mkdtemp(prefix="vllm-fleet-e2e-registry-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (work / "config.yml").write_text(
        f"version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem:\n    rootdirectory: {work}/data\n"
        f"http:\n  addr: 127.0.0.1:{port}\n")
    proc = subprocess.Popen([str(REGISTRY), "serve", str(work / "config.yml")],
                            stdout=open(work / "registry.log", "w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"registry did not answer: {(work / 'registry.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def digest_ref(registry):
    """Push the base image, return REPO@sha256:..., known to the engine by nothing else."""
    repo = f"{registry}/vllm-fleet-e2e/base"
    docker("tag", BASE_IMAGE, f"{repo}:digest")
    docker("push", f"{repo}:digest")
    digests = json.loads(docker("image", "inspect", "-f", "{{json .RepoDigests}}", f"{repo}:digest").stdout)
    ref = next(d for d in digests if d.startswith(repo + "@sha256:"))
    docker("rmi", f"{repo}:digest")
    docker("rmi", ref, check=False)   # the digest reference, if the engine kept it
    assert docker("image", "inspect", ref, check=False).returncode != 0, "the engine still knows the digest"
    yield ref
    docker("rm", "-f", CONTAINER, check=False)
    docker("rmi", ref, check=False)


@pytest.fixture(scope="module")
def digest_fleet(make_fleet):
    return make_fleet("digest", {"digest": {"hosts": {"dg-a": "none"}}}, {})


def test_image_pinned_by_digest_is_pulled_run_and_left_alone(digest_fleet, digest_ref, tmp_path):
    state = Path(digest_fleet.info["state_dir"])
    # a whole plan (each role checks it against hostplan.py's types: vllm_fleet.plancheck), with the
    # CPU accelerator's blocks (accelerator_setup, container) as accelerator.py makes them and the
    # paths as layout.py derives them, and the finished container (below)
    plan = {
        "deployment": "e2e-digest", "recipe": "test/digest", "variant": "default", "deploy_type": "single_node",
        "node_count": 1, "features": [], "runtime": "docker", "accelerator": "cpu", "gpu_count": 0,
        "vram_gb_per_gpu": 0.0, "instance_hosts": ["dg-a"], "head": "dg-a", "node_rank": 0,
        "max_fail_percentage": 0, "phases": ["engine"], "command": "(digest test)", "health": {"enabled": False},
        "files": [], "config_dir": "/etc/vllm-fleet/e2e-digest", "exposed": [], "secret_files": [], "secret_vars": {},
        "hash": "digesthost012345", "drain_timeout": 120, "slo": {}, "slo_max_regression": None,
        "accelerator_setup": {"name": "cpu", "unit": {"groups": [], "env": {}}, "uv": {}},
        "layout": deployment_layout(host_layout({"vllm_fleet_state_dir": str(state)}), "e2e-digest"),
        "processes": [{"name": CONTAINER, "kind": "vllm", "role": "single", "rank": 0, "phase": "engine",
                       "runtime": "docker", "image": digest_ref, "argv": ARGV, "env": {}, "secret_env": [],
                       "mounts": [], "packages": [], "model_path": None, "port": 18791, "serves_http": False,
                       "health": {"kind": "alive"}, "probe_host": "127.0.0.1", "credentials": [],
                       "container": {"device_requests": [], "devices": [], "groups": [], "security_opts": [],
                                     "shm_size": "64m", "cpuset_cpus": None, "env": {}},
                       "hash": "digest0123456789"}],
    }
    variables = {"vllm_fleet_plan": plan, "vllm_fleet_docker_pull": "missing",
                 "vllm_fleet_docker_network_mode": "none", "vllm_fleet_docker_ipc_mode": "private",
                 "vllm_fleet_cpu_shm_size": "64m", "vllm_fleet_docker_hf_cache": str(state / "hf-cache")}
    # the finished container as the planner makes it (runtimespec.py) from these docker tunables
    [proc] = plan["processes"]
    proc["docker_run"] = runtimespec.docker_run(proc, plan["deployment"], plan["recipe"], plan["layout"],
                                                runtimespec.docker_tunables(variables))
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    (tmp_path / "play.yml").write_text(PLAY.format(vars=json.dumps(str(tmp_path / "vars.json"))))
    run = playbook(str(tmp_path / "play.yml"), digest_fleet.inventory, "-l", "dg-a")
    assert run.rc == 0, run
    assert run.changed("dg-a") >= 2, run              # pulled, started
    c = docker_inspect(CONTAINER)
    assert c is not None and c["State"]["Running"], run
    assert c["Config"]["Image"] == digest_ref
    base_id = docker("image", "inspect", "-f", "{{.Id}}", BASE_IMAGE).stdout.strip()
    assert c["Image"] == base_id
    pulled = json.loads(docker("image", "inspect", "-f", "{{json .RepoDigests}}", digest_ref).stdout)
    assert digest_ref in pulled
    again = playbook(str(tmp_path / "play.yml"), digest_fleet.inventory, "-l", "dg-a")
    assert again.rc == 0 and again.changed("dg-a") == 0, again
    assert docker_inspect(CONTAINER)["Id"] == c["Id"]
