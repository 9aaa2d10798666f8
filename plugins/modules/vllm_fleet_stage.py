#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Staging a model snapshot: download it, write its manifest, check a host's disk, verify a copy."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_fleet_stage
short_description: Download, manifest, disk-check and verify a staged model snapshot
description:
  - O(state=download) (on the controller) downloads a Hub snapshot into O(path) with huggingface_hub's own
    C(snapshot_download) (it honours C(HF_ENDPOINT) for a mirror), O(attempts) tries, then writes its manifest
    to O(manifest_path). Its action plugin (plugins/action/vllm_fleet_stage.py) prints a progress line every
    O(progress) seconds while the download runs on the controller.
  - O(state=manifest) (on the controller) writes the per-file sha256 manifest of the directory O(path) to
    O(manifest_path) (unchanged when the same).
  - O(state=check) (on a host) compares O(path) with O(manifest) by size and says whether the host already
    holds a verified copy (its recorded manifest at O(manifest_path) is the same); otherwise it measures the
    free space of the filesystem that will hold O(path) and fails, naming O(host), the path, the bytes needed
    and free, when what is missing plus O(margin_pct) percent of the snapshot does not fit.
  - O(state=held) (on a host) says whether the host holds the copy its own recorded manifest (O(manifest_path))
    describes, unchanged since it was verified (every file's size and mtime), and returns that manifest as
    RV(manifest); nothing is hashed. A missing or unreadable record is RV(staged) false, not a failure.
  - O(state=list) (on a host) returns the files and sizes under O(path) as RV(listing), for the C(path) source's
    check that every host mounts the same model directory; a missing or empty directory fails, naming O(host).
  - O(state=verify) (on a host) hashes every file of O(path) against O(manifest); a verified copy gets its
    manifest written to O(manifest_path). A copy that differs returns RV(problems) and fails.
options:
  state:
    description: What to do.
    type: str
    choices: [download, manifest, check, held, verify, list]
    required: true
  path:
    description: The snapshot directory.
    type: path
    required: true
  manifest_path:
    description: Where the manifest is written (download, manifest, verify) or read (check); not for list.
    type: path
  manifest:
    description: The manifest to check or verify against (check, verify).
    type: dict
  model:
    description: The Hub model id (download).
    type: str
  revision:
    description: The revision downloaded (download).
    type: str
    default: main
  token:
    description: Hugging Face token (download; never logged).
    type: str
  attempts:
    description: Downloads tried before the module fails (download).
    type: int
    default: 3
  endpoint:
    description:
      - The Hub endpoint a download uses (a mirror), set as C(HF_ENDPOINT) for huggingface_hub; unset, the
        environment's C(HF_ENDPOINT) or the Hub (download).
    type: str
  record:
    description:
      - A download on the host that keeps it (the seed of O(state=download) on a host) records its manifest as a
        verified copy (with every file's mtime, as O(state=verify) does), so the host counts as holding it.
    type: bool
    default: false
  progress:
    description: Seconds between two progress lines of a download on the controller (read by the action plugin).
    type: float
    default: 20
  margin_pct:
    description: Free space demanded beyond what is missing, in percent of the snapshot (check).
    type: int
    default: 10
  host:
    description: The host named in messages (check, verify).
    type: str
    default: this host
author: vllm-fleet
"""

EXAMPLES = r"""
- name: Verify the staged copy
  vllm_fleet_stage:
    state: verify
    path: /var/lib/vllm-fleet/models/org--m--main
    manifest_path: /var/lib/vllm-fleet/models/org--m--main.manifest.json
    manifest: "{{ manifest }}"
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
manifest:
  description: The manifest (download, manifest; held, the one the host recorded when it holds that copy).
  type: dict
  returned: when state is download or manifest, or held with RV(staged)
bytes:
  description: The snapshot's size in bytes.
  type: int
  returned: always
files:
  description: The snapshot's file count.
  type: int
  returned: always
staged:
  description: The host already holds a verified copy (check, held).
  type: bool
  returned: when state is check or held
present:
  description: Bytes of the snapshot's files already at their size on the host (check).
  type: int
  returned: when state is check
free:
  description: Free bytes on the filesystem that holds the path (check).
  type: int
  returned: when state is check
need:
  description: Free bytes the host needs (check).
  type: int
  returned: when state is check
problems:
  description: What differs (verify), one line a file.
  type: list
  elements: str
  returned: when state is verify
listing:
  description: Relative path -> size of every file under O(path) (list).
  type: dict
  returned: when state is list
commit:
  description: The commit the Hub resolved the revision to (download).
  type: str
  returned: when state is download
"""

import os
import sys
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_fleet import staging


def _write(path: str, text: str, mode: int = 0o644) -> bool:
    """Write ``text`` to ``path`` atomically; False when it already held it."""
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return False
    except OSError:
        pass
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".manifest.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return True


def _download(module: AnsibleModule, p: dict):
    if p["endpoint"]:
        os.environ["HF_ENDPOINT"] = p["endpoint"]      # read when huggingface_hub is imported, below
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        module.fail_json(msg=f"{p['host']}: vllm_fleet_model_source hub: {sys.executable} lacks huggingface_hub "
                             "(pip install huggingface_hub, or the project's [stage] extra)")
    errors = []
    for attempt in range(1, p["attempts"] + 1):
        start = time.monotonic()
        try:
            path = snapshot_download(repo_id=p["model"], revision=p["revision"], local_dir=p["path"],
                                     token=p["token"] or None)
            return path, errors, time.monotonic() - start
        except Exception as exc:  # noqa: BLE001  (every failure of the client is reported, then retried)
            errors.append(f"attempt {attempt}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            if attempt < p["attempts"]:
                time.sleep(min(30, 2 ** attempt))
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    module.fail_json(msg=f"{p['host']}: vllm_fleet_model_source hub: downloading {p['model']}@{p['revision']} from "
                         f"{endpoint} failed {p['attempts']} times: " + "; ".join(errors), errors=errors)


def _commit_of(path: str):
    """The commit huggingface_hub recorded for a local_dir download (its .cache metadata)."""
    meta = os.path.join(path, ".cache", "huggingface", "download")
    for base, _dirs, files in os.walk(meta):
        for name in files:
            if name.endswith(".metadata"):
                with open(os.path.join(base, name), encoding="utf-8") as handle:
                    first = handle.readline().strip()
                if first:
                    return first
    return None


def _recorded(manifest_path: str):
    """The manifest this host recorded with its verified copy, or None."""
    try:
        with open(manifest_path, encoding="utf-8") as handle:
            return staging.loads(handle.read(), manifest_path)
    except (OSError, ValueError):
        return None


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", required=True, choices=["download", "manifest", "check", "held", "verify", "list"]),
            path=dict(type="path", required=True),
            manifest_path=dict(type="path"),
            manifest=dict(type="dict"),
            model=dict(type="str"),
            revision=dict(type="str", default="main"),
            token=dict(type="str", no_log=True),
            attempts=dict(type="int", default=3),
            progress=dict(type="float", default=20),
            endpoint=dict(type="str"),
            record=dict(type="bool", default=False),
            margin_pct=dict(type="int", default=10),
            host=dict(type="str", default="this host"),
        ),
        required_if=[("state", "check", ["manifest", "manifest_path"]), ("state", "verify", ["manifest", "manifest_path"]),
                     ("state", "download", ["model", "manifest_path"]), ("state", "manifest", ["manifest_path"]), ("state", "held", ["manifest_path"])],
        supports_check_mode=True,
    )
    p = module.params
    state, path, where = p["state"], p["path"], p["host"]
    if state == "list":
        found = staging.listing(path) if os.path.isdir(path) else {}
        if not found:
            module.fail_json(msg=f"{where}: vllm_fleet_model_path {path}: {'holds no file' if os.path.isdir(path) else 'no such directory'} "
                                 f"(vllm_fleet_model_source path: every host must already mount the model directory)")
        module.exit_json(changed=False, listing=found, files=len(found), bytes=sum(found.values()))
    if state == "held":
        recorded = _recorded(p["manifest_path"])
        if recorded is None or not staging.unchanged_since(path, recorded, recorded):
            module.exit_json(changed=False, staged=False)
        manifest = {k: v for k, v in recorded.items() if k != "local_mtime_ns"}
        module.exit_json(changed=False, staged=True, manifest=manifest, files=len(manifest["files"]),
                         bytes=sum(entry["size"] for entry in manifest["files"].values()))
    if state in ("download", "manifest"):
        result = {}
        if state == "download":
            _, errors, seconds = _download(module, p)
            result.update(errors=errors, seconds=round(seconds, 1), commit=_commit_of(path))
        try:
            manifest = staging.build_manifest(path, p["model"] or "", p["revision"], result.get("commit"))
        except (OSError, ValueError) as exc:
            module.fail_json(msg=f"{where}: {exc}")
        recorded = dict(manifest, local_mtime_ns=staging.local_times(path, manifest)) if p["record"] else manifest
        changed = _write(p["manifest_path"], staging.dumps(recorded)) if not module.check_mode else False
        module.exit_json(changed=changed,
                         manifest=manifest, bytes=manifest["bytes"], files=len(manifest["files"]), **result)
    try:
        manifest = staging.loads(staging.dumps(p["manifest"]), "the manifest given")
    except ValueError as exc:
        module.fail_json(msg=f"{where}: {exc}")
    total = manifest["bytes"]
    if state == "check":
        recorded = _recorded(p["manifest_path"])
        staged = recorded is not None and staging.unchanged_since(path, recorded, manifest)
        present = staging.bytes_present(path, manifest)
        probe, free = staging.free_bytes(path)
        need = 0 if staged else staging.disk_need(total, present, p["margin_pct"])
        out = dict(changed=False, staged=staged, present=present, free=free, need=need, bytes=total,
                   files=len(manifest["files"]), measured=probe)
        if need > free:
            module.fail_json(msg=f"{where}: {path}: not enough free disk for the model snapshot: needs "
                                 f"{staging.human(need)} ({need} bytes: {staging.human(total - present)} still "
                                 f"missing + {p['margin_pct']} % margin), {probe} has {staging.human(free)} "
                                 f"({free} bytes) free", **out)
        module.exit_json(**out)
    problems = staging.verify(path, manifest)
    if problems:
        module.fail_json(msg=f"{where}: {path}: the copy differs from the manifest: " + "; ".join(problems[:10])
                         + (f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""),
                         problems=problems, bytes=total, files=len(manifest["files"]))
    recorded = dict(manifest, local_mtime_ns=staging.local_times(path, manifest))
    changed = _write(p["manifest_path"], staging.dumps(recorded)) if not module.check_mode else False
    module.exit_json(changed=changed, problems=[], bytes=total, files=len(manifest["files"]))


if __name__ == "__main__":
    main()
