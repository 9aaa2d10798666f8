# -*- coding: utf-8 -*-
"""The planned containers' host side, one remote run per step: prepare what they need (host
directories, images, the image identity), and a rollout's revisions (keep the running one as
``<name><suffix>``, drop the kept one once the new revision serves, or put the kept one back).

Each step was a read, a pick and a task per directory, image or container before (docker role:
prepare, keep_previous, commit, restore). The container states come from the one probe
(module_utils vllm_fleet_process.docker_state); every change is a docker CLI call with an argv.
``run(argv) -> (rc, stdout, stderr)`` is AnsibleModule.run_command (or a test's stand-in).
Each function returns ``{"changed": bool, "actions": [str], ...}``; ``check`` plans without
acting. A failed docker call raises ContainerError naming the container and docker's words.
"""

from __future__ import annotations

import os
import socket
import stat
import time

from ansible.module_utils.vllm_fleet_process import docker_state


class ContainerError(Exception):
    pass


def _docker(run, argv, what):
    rc, out, err = run(["docker", *argv])
    if rc != 0:
        raise ContainerError(f"{what}: docker {' '.join(argv)} failed: {(err or out or '').strip()[:300]}")
    return out


def _known(run, name):
    """The container's state; an engine that does not answer is an error, not 'absent'."""
    seen = docker_state(run, name)
    if seen["state"] == "unknown":
        raise ContainerError(f"{name}: the docker engine did not say its state ({seen['raw']})")
    return seen


DIR_MODE = 0o755
PORT_WAIT_S = 60   # how long a stopped revision may take to let go of its port


def _image_id(run, image):
    """The image's id, or None when the engine does not have it."""
    rc, out, _ = run(["docker", "image", "inspect", "-f", "{{.Id}}", image])
    return out.strip() if rc == 0 and out.strip() else None


def prepare(run, dirs, dirs_present, images, pull="missing", check=False):
    """Create ``dirs`` (mode 0755: the deployment's Hugging Face cache, the engines' compile
    caches), require ``dirs_present`` (a shared cache mounted read-only: it must be filled
    already), pull ``images`` as ``pull`` says (never, missing, always: vllm_fleet_docker_pull)
    and read each image's id. ``identity``: the sorted ids joined with ',' (every node of an instance must
    run the same vLLM). In check mode nothing is created or pulled and a missing image is only
    reported (it would be pulled, or the real run fails)."""
    actions, missing = [], []
    for path in dirs:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if not check:
                os.makedirs(path, DIR_MODE, exist_ok=True)
                os.chmod(path, DIR_MODE)
            actions.append(f"{path}: {'would be ' if check else ''}created")
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise ContainerError(f"{path} exists and is not a directory (a cache directory the containers mount)")
        if stat.S_IMODE(st.st_mode) != DIR_MODE:
            if not check:
                os.chmod(path, DIR_MODE)
            actions.append(f"{path}: mode {'would be ' if check else ''}set to 0755")
    for path in dirs_present:
        if not os.path.isdir(path):
            raise ContainerError(f"vllm_fleet_docker_hf_cache_shared {path} is not a directory on the host "
                                 f"(it is mounted read-only: fill it first)")
    ids = []
    for image in images:
        present = _image_id(run, image)
        if pull == "always" or (pull == "missing" and not present):
            if check:
                actions.append(f"{image}: would be pulled")
                if not present:
                    continue
            else:
                _docker(run, ["pull", "--quiet", image], image)
                actions.append(f"{image}: pulled")
                present = _image_id(run, image)
        if present:
            ids.append(present)
        elif not check:
            missing.append(image)
    if missing:
        raise ContainerError(f"image(s) {', '.join(missing)} not present (vllm_fleet_docker_pull is {pull}); "
                             f"load or pull them first")
    return {"changed": bool(actions), "actions": actions, "identity": ",".join(sorted(ids))}


def port_free(port, host="127.0.0.1", timeout=PORT_WAIT_S, interval=0.5, clock=time.monotonic, sleep=time.sleep):
    """Wait until nothing accepts on host:port (the stopped revision let go of it). True when free."""
    deadline = clock() + timeout
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            if s.connect_ex((host, int(port))) != 0:
                return True
        if clock() >= deadline:
            return False
        sleep(interval)


def keep(run, processes, suffix, stop_timeout, check=False, wait_port=port_free):
    """Stop each running container whose plan-hash label is not its process's hash and rename
    it to ``<name><suffix>`` (an older kept one is removed first); wait until a serving one's
    port is free. Containers of the same revision, and absent ones, are left alone. Docker waits
    the process's finished spec's ``docker_run.stop_timeout`` (the plan merged the graceful stop
    and vllm_fleet_docker_stop_timeout there); ``stop_timeout`` only for a process without one (a
    revision recorded before the plan carried it)."""
    actions, kept = [], []
    for proc in processes:
        name = proc["name"]
        seen = _known(run, name)
        if seen["state"] == "absent" or seen["plan_hash"] == proc.get("hash"):
            continue
        prev = name + suffix
        kept.append(name)
        if check:
            actions.append(f"{name}: would stop and keep as {prev}")
            continue
        if _known(run, prev)["state"] != "absent":
            _docker(run, ["rm", "-f", prev], prev)
            actions.append(f"{prev}: removed (an older kept revision)")
        timeout = int((proc.get("docker_run") or {}).get("stop_timeout") or stop_timeout)
        _docker(run, ["stop", "-t", str(timeout), name], name)
        _docker(run, ["rename", name, prev], name)
        actions.append(f"{name}: stopped and kept as {prev}")
        if proc.get("serves_http") and proc.get("port"):
            if not wait_port(proc["port"]):
                raise ContainerError(f"{name}: port {proc['port']} is still taken {PORT_WAIT_S} s after the container stopped")
    return {"changed": bool(kept), "actions": actions, "kept": kept}


def commit(run, processes, suffix, check=False):
    """Remove the kept ``<name><suffix>`` of each process (the new revision serves)."""
    actions = []
    for proc in processes:
        prev = proc["name"] + suffix
        if _known(run, prev)["state"] == "absent":
            continue
        if not check:
            _docker(run, ["rm", "-f", prev], prev)
        actions.append(f"{prev}: {'would be ' if check else ''}removed")
    return {"changed": bool(actions), "actions": actions}


def restore(run, processes, suffix, check=False):
    """A new revision failed: remove it and start the kept previous revision again under its
    name. Only what the rollout changed is touched: a container goes when its kept revision
    exists or when it carries the process's (new) hash; a retired engine comes with hash
    'retired' (no container has it). A replica still on the previous revision stays."""
    actions, restored = [], []
    for proc in processes:
        name, prev = proc["name"], proc["name"] + suffix
        was_kept = _known(run, prev)["state"] != "absent"
        seen = _known(run, name)
        new = seen["state"] != "absent" and (was_kept or seen["plan_hash"] == proc.get("hash"))
        if new:
            if not check:
                _docker(run, ["rm", "-f", name], name)
            actions.append(f"{name}: {'would be ' if check else ''}removed (the failed new revision)")
        if was_kept:
            if not check:
                _docker(run, ["rename", prev, name], prev)
                _docker(run, ["start", name], name)
            actions.append(f"{name}: {'would be ' if check else ''}started again from {prev}")
            restored.append(name)
    return {"changed": bool(actions), "actions": actions, "restored": restored}
