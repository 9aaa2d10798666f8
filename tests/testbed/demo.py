#!/usr/bin/env python3
"""The quick-start demo: a real deploy of the CPU recipe on a local test fleet.

  python3 tests/testbed/demo.py [up]     start 2 test hosts, deploy all-MiniLM-L6-v2 with
                                         playbooks/deploy.yml (docker on one, uv + systemd on
                                         the other), then ask both for an embedding
  python3 tests/testbed/demo.py down     teardown.yml, then remove the test hosts

Prerequisites (idempotent, cached): bash tests/testbed/setup.sh (the nox `demo` session runs it).
The hosts are systemd containers on an internal network; only the GPU tools would be fake,
and this recipe needs none: vLLM really serves the model on the CPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import fleet as testbed  # noqa: E402

NAME = "demo"
MODEL_DIR = "/opt/vllm-fleet-testbed/models/all-MiniLM-L6-v2"
GROUPS = {
    "all": {"vars": {
        "vllm_fleet_recipe_sources": [str(ROOT / "recipes")],
        "vllm_fleet_recipe": "sentence-transformers/all-MiniLM-L6-v2",
        "vllm_fleet_hardware": "xeon6",
        "vllm_fleet_model_path": MODEL_DIR,
        "vllm_fleet_served_model_name": "minilm",
        "vllm_fleet_env": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"},
        "vllm_fleet_docker_network_mode": "container:{{ vllm_fleet_testbed_container }}",
        "vllm_fleet_docker_pull": "never",
        "vllm_fleet_cpu_shm_size": "1g",
    }, "children": {
        "demo_docker": {"hosts": {"cpu-docker": {}},
                        "vars": {"vllm_fleet_runtime": "docker", "vllm_fleet_deployment": "minilm-docker"}},
        "demo_uv": {"hosts": {"cpu-uv": {}},
                    "vars": {"vllm_fleet_runtime": "uv", "vllm_fleet_deployment": "minilm-uv",
                             "vllm_fleet_vllm_version": "0.32.0", "vllm_fleet_uv_wheelhouse": "/srv/wheels"}},
    }},
}


def playbook(name: str, inventories) -> int:
    argv = ["ansible-playbook"] + [a for inv in inventories for a in ("-i", inv)] + [str(ROOT / "playbooks" / name)]
    print("$", " ".join(argv), flush=True)
    return subprocess.run(argv, cwd=ROOT, env={**__import__("os").environ,
                                                "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}).returncode


def ask(container: str) -> dict:
    code = ("import json,urllib.request as u;"
            "r=u.Request('http://127.0.0.1:8000/v1/embeddings',data=json.dumps({'model':'minilm',"
            "'input':'vllm-fleet deployed me'}).encode(),headers={'Content-Type':'application/json'});"
            "print(u.urlopen(r,timeout=60).read().decode())")
    out = subprocess.run(["docker", "exec", container, "python3", "-c", code], stdout=subprocess.PIPE,
                         text=True, check=True).stdout
    return json.loads(out)


def up() -> int:
    t0 = time.monotonic()
    info = testbed.up(NAME, ["cpu-docker:none", "cpu-uv:none"], docker_socket=True, replace=True)
    groups = Path(info["state_dir"]) / "groups.yml"
    groups.write_text(json.dumps(GROUPS, indent=2) + "\n")
    inventories = [info["inventory"], str(groups)]
    rc = playbook("deploy.yml", inventories)
    if rc != 0:
        print(f"deploy failed (rc {rc}); `python3 tests/testbed/demo.py down` cleans up", file=sys.stderr)
        return rc
    for host in info["hosts"]:
        answer = ask(host["container"])
        vec = answer["data"][0]["embedding"]
        print(f"{host['name']}: POST /v1/embeddings -> model {answer['model']}, {len(vec)} dimensions, "
              f"first values {[round(v, 4) for v in vec[:4]]}")
    playbook("status.yml", inventories)
    print(f"demo up in {time.monotonic() - t0:.0f} s. Inventory: -i {inventories[0]} -i {inventories[1]}\n"
          f"Tear down with: python3 tests/testbed/demo.py down")
    return 0


def down() -> int:
    try:
        info = testbed.load(NAME)
    except testbed.FleetError:
        print("no demo fleet")
        return 0
    groups = Path(info["state_dir"]) / "groups.yml"
    if groups.exists():
        playbook("teardown.yml", [info["inventory"], str(groups)])
    testbed.down(NAME, remove_siblings=True)
    print("demo removed")
    return 0


if __name__ == "__main__":
    sys.exit(down() if sys.argv[1:2] == ["down"] else up())
