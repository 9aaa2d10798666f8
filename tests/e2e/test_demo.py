"""The README's quick start as a newcomer runs it: the demo, then every command it prints, each
in a new login shell exactly as printed, then the teardown it prints.

The fleet is named ``e2e-demo`` (``-- --name e2e-demo``) so a demo someone has up stays
untouched; the printed commands carry the name. CI=true in every shell: no ANSI escapes may
appear. Checked besides: the health gate prints progress while vLLM loads, the re-deploy
changes nothing and prints no ``[WARNING]``, ``down`` leaves none of the demo's containers,
state or network behind. While the demo is up, its docker runtime's vLLM container
(``vllm-fleet-minilm-docker`` on this machine's engine; the suite's one real docker deploy of
the CPU recipe) is read with ``docker inspect``: image, argv, the recipe's env, shm size, the
model and HF cache binds, least privilege; the health gate reports 384 dimensions for it.
``down --purge`` is printed but run here with ``--dry-run`` only: removing the testbed would
take it from the tests that follow (they share this machine).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "testbed"))

import fleet as testbed  # noqa: E402
from helpers import GRACEFUL, docker_inspect  # noqa: E402

NAME = "e2e-demo"
# tests/testbed/demo.py's inventory (groups_for): the docker runtime's deployment on cpu-docker
MODEL_DIR = "/opt/vllm-fleet-testbed/models/all-MiniLM-L6-v2"
DOCKER_CONTAINER = "vllm-fleet-minilm-docker"
RECAP = re.compile(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def fresh_shell(command: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    """`command` in a new login shell: no variable of this test's environment (no venv on PATH)."""
    start = time.monotonic()
    proc = subprocess.run(["env", "-i", f"HOME={Path.home()}", "TERM=dumb", "CI=true", "LANG=C.UTF-8",
                           "bash", "-lc", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, cwd="/")
    print(f"$ {command}\n# rc={proc.returncode} in {time.monotonic() - start:.1f} s\n{proc.stdout}")
    return proc


def printed_commands(out: str) -> list[str]:
    tail = out.split("Next (each line works on its own, in a new shell):", 1)
    assert len(tail) == 2, out[-3000:]
    return [line.strip() for line in tail[1].splitlines() if line.startswith("  cd ")]


def assert_clean(out: str) -> None:
    assert "\x1b[" not in out, "ANSI escape in CI output"
    assert "[WARNING]" not in out, [l for l in out.splitlines() if "[WARNING]" in l]


def docker_names() -> list[str]:
    return subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True,
                          check=True).stdout.split()


@pytest.fixture(scope="module")
def demo():
    up = fresh_shell(f"cd {ROOT} && python3 -m nox -s demo -- --name {NAME}")
    yield up
    testbed.down(NAME, remove_siblings=True)   # only if a test failed before `down`


def test_quick_start_serves_and_shows_progress(demo):
    assert demo.returncode == 0, demo.stdout[-5000:]
    assert_clean(demo.stdout)
    # the health gate's progress lines while vLLM loads (window 20 s)
    progress = re.findall(r"^\[cpu-(?:docker|uv)\] vllm-fleet-minilm-(?:docker|uv)\S*: waiting \d+ s of 900 "
                          r"for http://127\.0\.0\.1:8000/health \(last answer: .+\), running; log: .+$",
                          demo.stdout, re.M)
    assert len(progress) >= 2, demo.stdout[-5000:]
    assert re.search(r"^cpu-docker: POST /v1/embeddings -> model minilm, 384 dimensions", demo.stdout, re.M)
    assert re.search(r"^cpu-uv: POST /v1/embeddings -> model minilm, 384 dimensions", demo.stdout, re.M)
    assert re.search(r"deployed 2, unchanged 0 \(already running their plan\), failed 0", demo.stdout)


def health_reports(out: str, host: str) -> list[str]:
    """The health gate's report lines for `host` (YAML callback: a msg folded over several
    lines is joined back into one)."""
    blocks = re.findall(rf"^ok: \[{re.escape(host)}\] => \(item=[^)]*\) =>\s*\n\s+msg: (.*?)(?=\n\S|\Z)",
                        out, re.M | re.S)
    return [" ".join(b.split()) for b in blocks if "healthy after" in b]


def test_docker_runtime_container_as_planned_and_least_privilege(demo):
    """The demo's docker deployment (cpu-docker, minilm-docker) read on the engine while up."""
    assert demo.returncode == 0, demo.stdout[-5000:]
    # the health gate's report on cpu-docker (YAML doubles the quotes: ''dimension'': 384)
    reports = health_reports(demo.stdout, "cpu-docker")
    assert any(re.search(rf"^'?{DOCKER_CONTAINER}\S* healthy after [\d.]+ s; .*dimension'*: 384\b", r)
               for r in reports), reports or demo.stdout[-5000:]
    c = docker_inspect(DOCKER_CONTAINER)
    assert c is not None, f"no {DOCKER_CONTAINER} on this machine's engine"
    assert c["State"]["Running"], c["State"]
    assert c["Config"]["Image"] == "vllm/vllm-openai-cpu:latest-x86_64"
    assert c["Config"]["Cmd"] == [MODEL_DIR, *GRACEFUL, "--runner", "pooling", "--tensor-parallel-size", "1",
                                  "--served-model-name", "minilm"]
    assert "VLLM_CPU_KVCACHE_SPACE=1" in c["Config"]["Env"]
    assert c["HostConfig"]["ShmSize"] == 1024 ** 3          # vllm_fleet_cpu_shm_size: 1g
    assert f"{MODEL_DIR}:{MODEL_DIR}:ro" in c["HostConfig"]["Binds"]
    # least privilege, and still serving: no capabilities, no new privileges, its own HF cache
    assert c["HostConfig"]["CapDrop"] == ["ALL"] and "no-new-privileges" in c["HostConfig"]["SecurityOpt"], c["HostConfig"]
    assert "/var/lib/vllm-fleet/hf-cache/minilm-docker:/root/.cache/huggingface:rw" in c["HostConfig"]["Binds"]
    # its compile cache (VLLM_CACHE_ROOT): a host directory per deployment and image, mounted
    # read-write at the same path, so a recreated container of the same image finds its kernels
    [cache] = [e.split("=", 1)[1] for e in c["Config"]["Env"] if e.startswith("VLLM_CACHE_ROOT=")]
    assert re.fullmatch(r"/var/lib/vllm-fleet/compile-cache/minilm-docker/[0-9a-f]{12}", cache), cache
    assert f"{cache}:{cache}:rw" in c["HostConfig"]["Binds"], c["HostConfig"]["Binds"]


def test_operator_install_puts_ansible_playbook_and_vllm_fleet_on_path(demo, tmp_path):
    """README, Deploy with Ansible: `pip install -e '.[deploy]' && vllm-fleet-collections`."""
    assert demo.returncode == 0
    venv = tmp_path / "venv"
    run = fresh_shell(f"python3 -m venv {venv} && . {venv}/bin/activate && cd {ROOT} && "
                      f"pip install -q -e '.[deploy]' && vllm-fleet-collections")
    assert run.returncode == 0, run.stdout[-3000:]
    assert re.search(r"^(installed|collections already installed in) ", run.stdout, re.M), run.stdout
    invs = f"-i /tmp/vllm-fleet-testbed/{NAME}/inventory.yml -i /tmp/vllm-fleet-testbed/{NAME}/groups.yml"
    run = fresh_shell(f". {venv}/bin/activate && cd {ROOT} && command -v ansible-playbook vllm-fleet && "
                      f"vllm-fleet list hardware >/dev/null && ansible-playbook {invs} playbooks/status.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    assert run.stdout.startswith(f"{venv}/bin/ansible-playbook\n{venv}/bin/vllm-fleet\n"), run.stdout[:300]
    assert re.search(r"^\s+cpu-uv\s+minilm-uv\s+1\s+sentence-transformers/all-MiniLM-L6-v2\s+vllm-fleet-minilm-uv\s+single\s+uv\s+running\s+serving\s",
                     run.stdout, re.M), run.stdout[-3000:]
    assert_clean(run.stdout)


def test_every_printed_command_works_in_a_new_shell(demo):
    assert demo.returncode == 0
    commands = printed_commands(demo.stdout)
    assert [c.split(" -- ", 1)[-1] if " -- " in c else "direct" for c in commands] == [
        f"status --name {NAME}", f"redeploy --name {NAME}", "direct", f"down --name {NAME}",
        f"down --purge --name {NAME}"]
    status, redeploy, direct, down, purge = commands
    assert f"-i /tmp/vllm-fleet-testbed/{NAME}/inventory.yml" in direct and direct.endswith("playbooks/status.yml")

    for command in (status, direct):
        run = fresh_shell(command)
        assert run.returncode == 0, run.stdout[-3000:]
        assert_clean(run.stdout)
        assert re.search(r"^\s+cpu-docker\s+\S+\s+1\s+sentence-transformers/all-MiniLM-L6-v2\s+vllm-fleet-minilm-docker\s+single\s+docker\s+running\s+serving\s+minilm\s+current",
                         run.stdout, re.M), run.stdout[-3000:]
        assert re.search(r"^\s+cpu-uv\s+\S+\s+1\s+sentence-transformers/all-MiniLM-L6-v2\s+vllm-fleet-minilm-uv\s+single\s+uv\s+running\s+serving\s+minilm\s+current",
                         run.stdout, re.M), run.stdout[-3000:]

    run = fresh_shell(redeploy)
    assert run.returncode == 0, run.stdout[-3000:]
    assert_clean(run.stdout)
    recap = {host: int(changed) for host, changed, *_ in RECAP.findall(run.stdout)}
    assert recap == {"cpu-docker": 0, "cpu-uv": 0}, run.stdout[-3000:]
    assert "deployed 0, unchanged 2 (already running their plan), failed 0" in run.stdout

    run = fresh_shell(purge + " --dry-run")
    assert run.returncode == 0, run.stdout[-3000:]
    assert re.search(r"^would remove images \d+\.\d GB: vllm/vllm-openai:latest", run.stdout, re.M), run.stdout
    assert subprocess.run(["docker", "image", "inspect", "vllm/vllm-openai-cpu:latest-x86_64"],
                          capture_output=True).returncode == 0   # dry run: nothing removed

    containers = [h["container"] for h in testbed.load(NAME)["hosts"]]
    siblings = testbed.siblings(containers)
    assert siblings, "the docker runtime's vLLM container shares cpu-docker's network namespace"
    rw = subprocess.run(["docker", "inspect", "-f", '{{range .Mounts}}{{if .RW}}{{.Source}} {{end}}{{end}}', *siblings],
                        capture_output=True, text=True, check=True).stdout.split()
    assert rw, "the vLLM container writes its HF cache to a directory of this machine"
    run = fresh_shell(down)
    assert run.returncode == 0, run.stdout[-3000:]
    assert_clean(run.stdout)
    left = set(docker_names()) & set(containers + siblings)
    assert not left, left
    assert not any(NAME in n for n in docker_names())
    assert not (testbed.STATE_ROOT / NAME).exists()
    net = subprocess.run(["docker", "network", "inspect", "-f", "{{len .Containers}}", testbed.NETWORK],
                         capture_output=True, text=True)
    assert net.returncode != 0 or int(net.stdout.strip()) > 0, "an unused test network is removed"
    assert re.search(r"^left for the next demo .*images \d+\.\d GB", run.stdout, re.M), run.stdout
    # the directories the engine made for the container: gone unless something else is in them
    for source in map(Path, rw):
        assert not source.exists() or any(source.iterdir()), source
