"""`demo.py down [--purge [--dry-run]]` against a FAKE docker CLI and scratch directories.

The real thing runs in tests/e2e/test_demo.py (down); --purge cannot run there (it would take
the testbed from the tests that follow on the same machine), so here: which images it removes
(only the testbed's own, labelled ones; the bytes each adds over its parent), which directories
(not one a container still mounts), the network only when unused, the FAKE GPU runtime's
`down`, and that --dry-run lists it all with sizes and removes nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "tests" / "testbed" / "demo.py"

FAKE_DOCKER = r'''#!/usr/bin/env python3
# FAKE docker CLI for tests/unit/testbed/test_demo_down.py: state in $FAKE_DOCKER_STATE (JSON)
import json, os, sys
state = json.load(open(os.environ["FAKE_DOCKER_STATE"]))
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\n")
args = sys.argv[1:]
images = state["images"]
def image(ref):
    return next((i for i in images if ref in (i["ref"], i["id"])), None)
if args[:2] == ["image", "inspect"]:
    img = image(args[-1])
    if img is None:
        sys.exit(1)
    fmt = args[3]
    if fmt == "{{.Parent}}":
        print(img.get("parent", ""))
    else:
        print(f'{img["id"]}|{img["size"]}|{img.get("parent", "")}|{img.get("label", "<no value>")}')
elif args[:1] == ["rmi"]:
    busy = [r for r in args[1:] if r in state.get("in_use", [])]
    sys.exit(1 if busy else 0)
elif args[:2] == ["ps", "-aq"]:
    print("\n".join(c["id"] for c in state["containers"]))
elif args[:1] == ["inspect"]:
    for c in state["containers"]:
        if c["id"] in args:
            print("/" + c["name"] + "".join(" " + m for m in c["mounts"]))
elif args[:2] == ["network", "inspect"]:
    print(state["network_users"])
elif args[:2] == ["network", "rm"]:
    pass
elif args[:1] == ["images"]:
    pass
else:
    sys.exit(2)
'''


def setup(tmp_path, network_users=0, cache_mounted=False):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    opt, cache = tmp_path / "opt", tmp_path / "cache"
    (opt / "vllm-cpu" / "lib").mkdir(parents=True)
    (opt / "vllm-cpu" / "lib" / "big").write_bytes(b"x" * 300_000)
    (cache / "wheelhouse").mkdir(parents=True)
    (cache / "wheelhouse" / "a.whl").write_bytes(b"y" * 200_000)
    gpu = tmp_path / "fake-gpu-runtime.sh"
    gpu.write_text(f'#!/bin/bash\necho "$@" >> {tmp_path}/gpu.log\n')
    state = {
        "images": [
            {"ref": "vllm/vllm-openai:latest", "id": "sha256:real", "size": 9_000_000_000},   # not ours
            {"ref": "vllm/vllm-openai-rocm:latest", "id": "sha256:rocm", "size": 3_000_050_000,
             "parent": "sha256:step2", "label": "1"},
            {"ref": "sha256:step2", "id": "sha256:step2", "size": 3_000_000_000, "parent": "sha256:cpu"},
            {"ref": "vllm/vllm-openai-cpu:latest-x86_64", "id": "sha256:cpu", "size": 3_000_000_000,
             "parent": "sha256:step1", "label": "1"},
            {"ref": "sha256:step1", "id": "sha256:step1", "size": 460_000_000, "parent": "sha256:vbase"},
            {"ref": "vllm-fleet/vllm-base:bookworm", "id": "sha256:vbase", "size": 460_000_000, "label": "1"},
            {"ref": "vllm-fleet/host:bookworm", "id": "sha256:host", "size": 520_000_000, "label": "1"},
        ],
        "in_use": ["vllm-fleet/host:bookworm"],
        "containers": [{"id": "c1", "name": "vllm-fleet-test-other-host",
                        "mounts": [str(cache / "wheelhouse")] if cache_mounted else ["/srv/x"]}],
        "network_users": network_users,
    }
    (tmp_path / "docker.json").write_text(json.dumps(state))
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               FAKE_DOCKER_STATE=str(tmp_path / "docker.json"), FAKE_DOCKER_LOG=str(tmp_path / "docker.log"),
               VLLM_FLEET_TESTBED_STATE=str(tmp_path / "state"), VLLM_FLEET_TESTBED_ROOT=str(opt),
               VLLM_FLEET_CACHE=str(cache), VLLM_FLEET_FAKE_GPU_RUNTIME=str(gpu))
    return env, opt, cache


def demo(env, *args):
    p = subprocess.run([sys.executable, str(DEMO), "down", *args], capture_output=True, text=True, env=env,
                       timeout=120)
    return p.returncode, p.stdout + p.stderr


def calls(tmp_path):
    return (tmp_path / "docker.log").read_text().splitlines()


def test_purge_removes_the_testbed_and_only_it(tmp_path):
    env, opt, cache = setup(tmp_path)
    rc, out = demo(env, "--purge")
    assert rc == 0, out
    rmis = [c for c in calls(tmp_path) if c.startswith("rmi ")]
    assert rmis == ["rmi vllm/vllm-openai-rocm:latest", "rmi vllm/vllm-openai-cpu:latest-x86_64",
                    "rmi vllm-fleet/vllm-base:bookworm", "rmi vllm-fleet/host:bookworm"]
    assert "vllm/vllm-openai:latest: left (not a testbed image)" in out
    assert "vllm-fleet/host:bookworm: left (" in out          # in use by a container: rmi refused
    assert not opt.exists() and not cache.exists()
    assert (tmp_path / "gpu.log").read_text() == "down\n"
    assert "network rm vllm-fleet-test" in calls(tmp_path)
    assert "no demo fleet" in out


def test_dry_run_lists_sizes_and_removes_nothing(tmp_path):
    env, opt, cache = setup(tmp_path)
    rc, out = demo(env, "--purge", "--dry-run")
    assert rc == 0, out
    # own bytes: the ROCm stand-in adds 50 kB to the CPU image, which adds 2.5 GB to vllm-base
    assert ("would remove images 3.5 GB: vllm/vllm-openai-rocm:latest (50.0 kB), "
            "vllm/vllm-openai-cpu:latest-x86_64 (2.5 GB), vllm-fleet/vllm-base:bookworm (460.0 MB), "
            "vllm-fleet/host:bookworm (520.0 MB)") in out
    # du -sb: the files plus the directories' own blocks
    assert re.search(rf"^would remove {opt} 3\d\d\.\d kB$", out, re.M), out
    assert re.search(rf"^would remove {cache} 2\d\d\.\d kB$", out, re.M), out
    assert not [c for c in calls(tmp_path) if c.startswith(("rmi", "network rm"))]
    assert opt.exists() and cache.exists() and not (tmp_path / "gpu.log").exists()


def test_plain_down_keeps_the_testbed_and_says_what_stays(tmp_path):
    env, opt, cache = setup(tmp_path, network_users=2)
    rc, out = demo(env)
    assert rc == 0, out
    assert opt.exists() and cache.exists()
    assert "network vllm-fleet-test: left, 2 other container(s) use it" in out
    assert "left for the next demo" in out and "images 3.5 GB" in out and "down --purge" in out
    assert not [c for c in calls(tmp_path) if c.startswith(("rmi", "network rm"))]


def test_purge_leaves_a_directory_a_container_mounts(tmp_path):
    env, opt, cache = setup(tmp_path, cache_mounted=True)
    rc, out = demo(env, "--purge")
    assert rc == 0, out
    assert cache.exists() and f"{cache}: left, mounted by vllm-fleet-test-other-host" in out
    assert not opt.exists()


@pytest.fixture
def demo_mod(tmp_path, monkeypatch):
    """tests/testbed/demo.py imported, its docker calls going to the fake docker of setup()."""
    env, _, _ = setup(tmp_path)
    for key in ("PATH", "FAKE_DOCKER_STATE", "FAKE_DOCKER_LOG"):
        monkeypatch.setenv(key, env[key])
    sys.path.insert(0, str(DEMO.parent))
    try:
        import demo
    finally:
        sys.path.pop(0)
    return demo


def test_empty_mount_dirs_go_up_to_the_vllm_fleet_dir_and_no_further(tmp_path, demo_mod):
    lib = tmp_path / "lib"
    mine = lib / "vllm-fleet" / "hf-cache" / "minilm-docker"
    mine.mkdir(parents=True)
    assert demo_mod.remove_empty_dirs(mine) == f"{mine}: removed (empty)"
    assert not (lib / "vllm-fleet").exists() and lib.is_dir()
    # another deployment's cache beside it stays, and so do its parents
    mine.mkdir(parents=True)
    (lib / "vllm-fleet" / "hf-cache" / "other").mkdir()
    demo_mod.remove_empty_dirs(mine)
    assert not mine.exists() and (lib / "vllm-fleet" / "hf-cache" / "other").is_dir()
    # not empty: left
    (mine / "hub").mkdir(parents=True)
    assert demo_mod.remove_empty_dirs(mine) == f"{mine}: left, not empty"


def test_the_demo_containers_compile_cache_goes_with_what_it_holds(tmp_path, monkeypatch, demo_mod):
    root = tmp_path / "lib" / "vllm-fleet" / "compile-cache"
    monkeypatch.setattr(demo_mod, "COMPILE_CACHE_ROOT", str(root))
    build = root / "minilm-docker" / "0123456789ab"
    (build / "torch_compile_cache").mkdir(parents=True)
    (build / "torch_compile_cache" / "kernel.so").write_bytes(b"x")
    (root / "other" / "ba9876543210").mkdir(parents=True)
    assert demo_mod.remove_empty_dirs(build) == f"{build}: removed (the compile cache)"
    assert not (root / "minilm-docker").exists() and (root / "other" / "ba9876543210").is_dir()
    # anything else not empty is still left
    hf = tmp_path / "lib" / "vllm-fleet" / "hf-cache" / "minilm-docker"
    (hf / "hub").mkdir(parents=True)
    assert demo_mod.remove_empty_dirs(hf) == f"{hf}: left, not empty"
