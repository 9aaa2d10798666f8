"""Staging a model before anything stops: where a snapshot lives on a host, its sha256 manifest,
the fan-out schedule (every host that holds a verified copy sends it on) and the disk check.

Pure Python, no Ansible: the plan (plan.py) asks :func:`stage_block` where a deployment's
weights go; the ``vllm_fleet_stage`` module builds and verifies manifests on the controller and
on the hosts; the stage playbook follows :func:`fan_out`'s rounds.

Layout on a host (the plan's ``stage`` block carries every path; nothing else builds them)::

    <store>/<key>/                 the snapshot (what the server's argv names; mounted read-only)
    <store>/<key>.manifest.json    the manifest it was verified against (written after verification)

``key`` is ``<org>--<name>--<revision>``: one directory per model revision, so a rollback finds
the old revision's weights still there (``vllm_fleet_revisions_kept`` bounds them).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .layout import COMPILE_CACHE_ROOT, MODEL_STORE, NAME_RE, STAGE_TOOLS_VENV, stage_trust

SOURCES = ("hub", "controller", "path", "none")
STORE = MODEL_STORE                            # the snapshot store on every host
MANIFEST_SUFFIX = ".manifest.json"
MANIFEST_VERSION = 1
DEFAULT_REVISION = "main"
DEFAULT_MARGIN_PCT = 10
CHUNK = 8 << 20
# what a snapshot directory holds that is not the model: huggingface_hub's download metadata
# (local_dir/.cache/huggingface) and the fleet's own partial-transfer directory
SKIPPED_TOP = (".cache", ".vllm-fleet-partial")
PARTIAL_DIR = ".vllm-fleet-partial"

MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}\Z")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}\Z")      # a full commit id: an immutable revision
REVISION_RE = re.compile(r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


def snapshot_key(model: str, revision: Optional[str]) -> str:
    """``org--name--revision``: one directory name per model revision (validated names only)."""
    if not MODEL_RE.match(model or ""):
        raise ValueError(f"model id {model!r} is not org/name of letters, digits and . _ -")
    revision = revision or DEFAULT_REVISION
    if not REVISION_RE.match(revision):
        raise ValueError(f"revision {revision!r} is not a branch, tag or commit of letters, digits and . _ -")
    org, name = model.split("/")
    return f"{org}--{name}--{revision}"


def stage_block(settings: Mapping[str, Any], model: str) -> Tuple[Optional[Dict[str, Any]], List[str]]:
    """The plan's ``stage`` block of a deployment's engine host, and problems (``variable: why``).

    ``model``: the id the recipe's command serves (``vllm serve MODEL``). None: nothing is staged
    (source ``none``, or unset with ``model_path``)."""
    # unset: hub, unless the inventory names a directory to serve (vllm_fleet_model_path: served
    # as it is, like none)
    source = settings.get("model_source") or ("none" if settings.get("model_path") else "hub")
    problems: List[str] = []
    if source not in SOURCES:
        return None, [f"vllm_fleet_model_source: {source!r} is not one of {', '.join(SOURCES)}"]
    model_path = settings.get("model_path")
    if source in ("hub", "controller") and model_path:
        problems.append(f"vllm_fleet_model_path: set with vllm_fleet_model_source {source} (the staged copy is "
                        f"what the server reads); use vllm_fleet_model_source path for a directory every host "
                        f"already mounts")
    if source == "path" and not model_path:
        problems.append("vllm_fleet_model_source: path needs vllm_fleet_model_path (the directory every host mounts)")
    controller_path = settings.get("model_controller_path")
    if source == "controller" and not controller_path:
        problems.append("vllm_fleet_model_source: controller needs vllm_fleet_model_controller_path (the snapshot "
                        "or model directory on the controller)")
    if controller_path and source != "controller":
        problems.append(f"vllm_fleet_model_controller_path: only read with vllm_fleet_model_source controller "
                        f"(it is {source})")
    if settings.get("model_revision") and source not in ("hub", "controller"):
        problems.append(f"vllm_fleet_model_revision: only read with vllm_fleet_model_source hub or controller "
                        f"(it is {source})")
    if source == "none" or problems:
        return None, problems
    store = str(settings.get("stage_store") or STORE)
    block: Dict[str, Any] = {
        "source": source, "model": model, "store": store,
        "margin_pct": int(settings.get("stage_margin") if settings.get("stage_margin") is not None
                          else DEFAULT_MARGIN_PCT),
        "bwlimit": settings.get("stage_bwlimit"),
        "rack": settings.get("rack"),
    }
    if source == "path":
        block.update(revision=None, key=None, dir=str(model_path), manifest=None, controller_path=None)
        return block, problems
    revision = settings.get("model_revision") or DEFAULT_REVISION
    try:
        key = snapshot_key(model if source == "hub" else _controller_model(model), revision)
    except ValueError as exc:
        return None, [f"vllm_fleet_model_revision: {exc}" if "revision" in str(exc)
                      else f"vllm_fleet_recipe: {exc}"]
    block.update(revision=revision, key=key, dir=f"{store}/{key}", manifest=f"{store}/{key}{MANIFEST_SUFFIX}",
                 controller_path=str(controller_path) if controller_path else None)
    return block, problems


def _controller_model(model: str) -> str:
    return model if "/" in model else f"local/{model}"


# ---- manifests ---------------------------------------------------------------------------------

def _walk(root: str) -> Iterable[str]:
    """Relative paths of the regular files under ``root`` (sorted; the skipped tops left out;
    a symlink is followed only where it stays inside ``root``: huggingface_hub cache snapshots
    link into ../../blobs, which is read through the link)."""
    for base, dirs, files in os.walk(root, followlinks=False):
        rel_base = os.path.relpath(base, root)
        if rel_base == ".":
            dirs[:] = [d for d in dirs if d not in SKIPPED_TOP]
        dirs.sort()
        for name in sorted(files):
            rel = os.path.normpath(os.path.join(rel_base, name))
            yield rel


def file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def build_manifest(root: str, model: str = "", revision: Optional[str] = None,
                   commit: Optional[str] = None) -> Dict[str, Any]:
    """The per-file sha256 manifest of a snapshot directory."""
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root}: not a directory")
    files: Dict[str, Dict[str, Any]] = {}
    for rel in _walk(root):
        path = os.path.join(root, rel)
        if not os.path.isfile(path):     # a dangling link, a socket: not model data
            continue
        files[rel] = {"size": os.path.getsize(path), "sha256": file_digest(path)}
    if not files:
        raise ValueError(f"{root}: holds no file")
    return {"version": MANIFEST_VERSION, "model": model, "revision": revision, "commit": commit,
            "files": files, "bytes": sum(f["size"] for f in files.values())}


def listing(root: str) -> Dict[str, int]:
    """Relative path -> size (the ``path`` source's cheap check: the same names and sizes on every host)."""
    return {rel: os.path.getsize(os.path.join(root, rel)) for rel in _walk(root)
            if os.path.isfile(os.path.join(root, rel))}


def verify(root: str, manifest: Mapping[str, Any], digests: bool = True) -> List[str]:
    """What differs between ``root`` and the manifest (``file: why``; empty: verified). Files the
    manifest does not list are reported too (a stale file of another revision)."""
    problems: List[str] = []
    files = manifest.get("files") or {}
    present = set(_walk(root)) if os.path.isdir(root) else set()
    for rel in sorted(files):
        want = files[rel]
        path = os.path.join(root, rel)
        if rel not in present or not os.path.isfile(path):
            problems.append(f"{rel}: missing")
            continue
        size = os.path.getsize(path)
        if size != want["size"]:
            problems.append(f"{rel}: {size} bytes, the manifest says {want['size']}")
            continue
        if digests and file_digest(path) != want["sha256"]:
            problems.append(f"{rel}: sha256 differs from the manifest")
    for rel in sorted(present - set(files)):
        problems.append(f"{rel}: not in the manifest")
    return problems


def dumps(manifest: Mapping[str, Any]) -> str:
    return json.dumps(manifest, indent=1, sort_keys=True) + "\n"


def loads(text: str, where: str) -> Dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{where}: not a manifest ({exc})") from None
    if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION or not isinstance(doc.get("files"), dict):
        raise ValueError(f"{where}: not a vllm-fleet manifest of version {MANIFEST_VERSION}")
    for rel, entry in doc["files"].items():
        if (not isinstance(entry, dict) or rel.startswith("/") or ".." in rel.split("/")
                or not re.match(r"^[0-9a-f]{64}\Z", str(entry.get("sha256", "")))
                or not isinstance(entry.get("size"), int)):
            raise ValueError(f"{where}: entry {rel!r} is not a file name with size and sha256")
    return doc


# ---- disk ---------------------------------------------------------------------------------------

def bytes_present(root: str, manifest: Mapping[str, Any]) -> int:
    """Bytes of the manifest's files already at their final size under ``root`` (a resumed or
    repeated stage needs room only for the rest)."""
    have = 0
    for rel, entry in (manifest.get("files") or {}).items():
        path = os.path.join(root, rel)
        if os.path.isfile(path) and os.path.getsize(path) == entry["size"]:
            have += entry["size"]
    return have


def disk_need(total: int, present: int, margin_pct: int) -> int:
    """Free bytes a host needs: what is still missing plus the margin on the whole snapshot."""
    return max(0, total - present) + total * max(0, margin_pct) // 100


def free_bytes(path: str) -> Tuple[str, int]:
    """(the existing directory measured, bytes free to an unprivileged writer there) for a path
    that may not exist yet: its nearest existing parent's filesystem."""
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    st = os.statvfs(probe)
    return probe, st.f_bavail * st.f_frsize


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


# ---- fan-out ------------------------------------------------------------------------------------

CONTROLLER = "localhost"


def fan_out(hosts: Sequence[str], have: Sequence[str] = (), rack_of: Optional[Mapping[str, Optional[str]]] = None,
            relay: bool = True) -> List[List[Tuple[str, str]]]:
    """Rounds of (sender, receiver): the controller feeds one host (when no host already holds a
    verified copy), then every holder sends to one host that lacks it, round after round
    (1 -> 2 -> 4 ...: about log2(N) rounds). A sender prefers a receiver of its own rack
    (``rack_of``; hosts without one are one rack). ``have``: hosts that already hold it.
    ``relay=False`` (vllm_fleet_stage_fanout false: hosts that cannot reach each other): the
    controller sends to every host that lacks it, in one round."""
    rack_of = rack_of or {}
    holders = [h for h in hosts if h in set(have)]
    missing = [h for h in hosts if h not in set(have)]
    rounds: List[List[Tuple[str, str]]] = []
    if not missing:
        return rounds
    if not relay:
        return [[(CONTROLLER, h) for h in missing]]
    if not holders:
        first = missing.pop(0)
        rounds.append([(CONTROLLER, first)])
        holders.append(first)
    while missing:
        this: List[Tuple[str, str]] = []
        for sender in list(holders):
            if not missing:
                break
            rack = rack_of.get(sender)
            pick = next((m for m in missing if rack_of.get(m) == rack), missing[0])
            missing.remove(pick)
            this.append((sender, pick))
        holders += [r for _, r in this]
        rounds.append(this)
    return rounds


def schedule(rounds: Sequence[Sequence[Tuple[str, str]]]) -> Dict[str, Any]:
    """The rounds as the stage playbook reads them: ``rounds`` (each a list of {from, to}),
    ``sends`` (host -> the round indexes and receivers it sends to) and ``receives`` (host ->
    round, sender)."""
    sends: Dict[str, List[Dict[str, Any]]] = {}
    receives: Dict[str, Dict[str, Any]] = {}
    for index, pairs in enumerate(rounds):
        for sender, receiver in pairs:
            sends.setdefault(sender, []).append({"round": index, "to": receiver})
            receives[receiver] = {"round": index, "from": sender}
    return {"rounds": [[{"from": s, "to": r} for s, r in pairs] for pairs in rounds],
            "sends": sends, "receives": receives}


def fleet_schedule(stages: Mapping[str, Optional[Mapping[str, Any]]], cache_dir: str,
                   have: Sequence[str] = (), relay: bool = True, download: str = "controller",
                   addresses: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """The stage playbook's whole schedule, from each host's ``stage`` block (None: nothing staged):

    * ``snapshots``: key -> source, model, revision, controller dir (what the controller sends:
      the controller path, or ``<cache_dir>/<key>`` for a Hub download), manifest file on the
      controller, hosts, rounds (:func:`fan_out`, hosts of one rack preferred), and the rsync
      sources of its contents: ``controller_src`` (on the controller) and ``src`` (on a holder);
    * ``hosts``: host -> what it does in each round: ``receive`` (round -> key, from) and ``send``
      (round -> list of {key, to, dest}: ``dest`` the rsync destination on the receiver, its
      address from ``addresses`` (host -> ansible_host; default the name) and the snapshot's
      directory below the store the per-run key is restricted to);
    * ``rounds``: how many rounds the run has (the most of any snapshot);
    * ``checked``: host -> the ``path`` source's directory (checked on every host, never copied).

    ``have``: hosts that already hold a verified copy of their snapshot (they send, never receive).
    A snapshot gets ``fetch`` false when nothing about it can have changed and every host of it
    holds it: a Hub snapshot pinned to a commit (immutable) - a rollback to such a revision
    downloads nothing. A branch or tag (it can move) and a controller directory (its files can
    change under the same name) are read again every run.

    ``download`` ``host`` (vllm_fleet_stage_download): a Hub snapshot to fetch gets a ``seed``,
    one of its hosts (a holder of an older copy never counts: the first host by name), that
    downloads it from the Hub itself into its store; once verified it is a holder like any other
    and the fan-out starts there, the controller sends nothing. ``seeds``: the hosts that download,
    ``seed_venv``: where they get huggingface_hub, ``seed_python`` its interpreter.

    ``trust``: where a sender keeps this run's key and its receivers' host keys (layout.stage_trust),
    and ``ssh``: rsync's ``-e`` for a host-to-host send with them (this run's key only, host keys
    checked against that known_hosts alone).
    """
    if download not in ("controller", "host"):
        raise ValueError(f"vllm_fleet_stage_download: {download!r} is not one of controller, host")
    if download == "host" and not relay:
        raise ValueError("vllm_fleet_stage_download: host needs vllm_fleet_stage_fanout true (the seed host sends "
                         "the snapshot on to the others; without relaying only the controller sends)")
    snapshots: Dict[str, Dict[str, Any]] = {}
    checked: Dict[str, str] = {}
    for host in sorted(stages):
        block = stages[host]
        if not block:
            continue
        if block["source"] == "path":
            checked[host] = block["dir"]
            continue
        key = block["key"]
        entry = snapshots.setdefault(key, {
            "key": key, "source": block["source"], "model": block["model"], "revision": block["revision"],
            "controller_dir": block.get("controller_path") or f"{cache_dir.rstrip('/')}/{key}",
            "controller_manifest": f"{cache_dir.rstrip('/')}/{key}{MANIFEST_SUFFIX}",
            "dir": block["dir"], "store": block["store"], "manifest": block["manifest"],
            "hosts": [], "rack": {}})
        entry["controller_src"] = entry["controller_dir"].rstrip("/") + "/"
        entry["src"] = entry["dir"].rstrip("/") + "/"
        if block["dir"] != entry["dir"]:
            raise ValueError(f"{host}: stages {key} at {block['dir']}, another host at {entry['dir']} "
                             f"(vllm_fleet_stage_store differs)")
        entry["hosts"].append(host)
        entry["rack"][host] = block.get("rack")
    hosts: Dict[str, Dict[str, Any]] = {}
    most = 0
    for key, entry in snapshots.items():
        entry["fetch"] = not (entry["source"] == "hub" and COMMIT_RE.match(str(entry["revision"] or ""))
                              and set(entry["hosts"]) <= set(have))
        entry["seed"] = (sorted(entry["hosts"])[0] if download == "host" and entry["source"] == "hub"
                         and entry["fetch"] else None)
        rounds = fan_out(entry["hosts"], have=[h for h in entry["hosts"] if h in set(have)], rack_of=entry["rack"],
                         relay=relay)
        entry["rounds"] = [[{"from": s, "to": r} for s, r in pairs] for pairs in rounds]
        most = max(most, len(rounds))
        for index, pairs in enumerate(rounds):
            for sender, receiver in pairs:
                hosts.setdefault(receiver, {"receive": {}, "send": {}})["receive"][str(index)] = {
                    "key": key, "from": sender}
                hosts.setdefault(sender, {"receive": {}, "send": {}})["send"].setdefault(str(index), []).append(
                    {"key": key, "to": receiver, "dest": f"root@{(addresses or {}).get(receiver) or receiver}:{key}/"})
    seeds = sorted({e["seed"] for e in snapshots.values() if e["seed"]})
    trust = stage_trust()
    return {"snapshots": snapshots, "hosts": hosts, "rounds": most, "checked": checked,
            "receivers": sorted(hosts_of(hosts, "receive")), "senders": sorted(hosts_of(hosts, "send")),
            "seeds": seeds, "seed_venv": STAGE_TOOLS_VENV, "seed_python": f"{STAGE_TOOLS_VENV}/bin/python",
            "trust": trust, "ssh": ["-e", f"ssh -i {trust['key']} -o IdentitiesOnly=yes -o BatchMode=yes "
                                          f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={trust['known_hosts']} "
                                          "-o GlobalKnownHostsFile=/dev/null"]}


def hosts_of(hosts: Mapping[str, Mapping[str, Any]], what: str) -> List[str]:
    return [h for h, doing in hosts.items() if doing[what] and h != CONTROLLER]


def local_times(root: str, manifest: Mapping[str, Any]) -> Dict[str, int]:
    """Each manifest file's mtime (ns) on this host, recorded with a verified copy: a later check
    that finds a file's size and mtime unchanged need not hash it again (rsync's quick check)."""
    return {rel: os.stat(os.path.join(root, rel)).st_mtime_ns for rel in manifest.get("files") or {}}


def unchanged_since(root: str, recorded: Mapping[str, Any], manifest: Mapping[str, Any]) -> bool:
    """The host's copy is the verified one: the recorded manifest is this one and no file's
    size or mtime changed since it was verified."""
    if recorded.get("files") != manifest.get("files"):
        return False
    times = recorded.get("local_mtime_ns") or {}
    for rel, entry in (manifest.get("files") or {}).items():
        path = os.path.join(root, rel)
        try:
            st = os.stat(path)
        except OSError:
            return False
        if st.st_size != entry["size"] or times.get(rel) != st.st_mtime_ns:
            return False
    return not verify(root, manifest, digests=False)


# ---- what recorded revisions use (garbage collection) ------------------------------------------

KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}--[A-Za-z0-9][A-Za-z0-9._-]{0,95}--[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
BUILD_RE = re.compile(r"^[0-9a-f]{12}\Z")


def plan_uses(plan: Mapping[str, Any]) -> List[str]:
    """The host paths a recorded host plan's servers read that outlive one revision: the staged
    snapshot and its manifest (sources hub and controller: the fleet made them; a ``path``
    source's directory is the operator's, never collected) and the engines' compile caches.
    Only paths of the shapes the plan makes count (a record edited by hand cannot point the
    collector elsewhere)."""
    out: List[str] = []
    stage = plan.get("stage") or {}
    if stage.get("source") in ("hub", "controller") and stage.get("key") and stage.get("store"):
        store, key = str(stage["store"]), str(stage["key"])
        if KEY_RE.match(key) and os.path.isabs(store) and os.path.normpath(store) == store and store != "/":
            out += [f"{store}/{key}", f"{store}/{key}{MANIFEST_SUFFIX}"]
    dep = str(plan.get("deployment") or "")
    for proc in plan.get("processes") or []:
        cache = proc.get("compile_cache") if isinstance(proc, Mapping) else None
        if not cache or not NAME_RE.match(dep) or ".." in dep:
            continue
        parent, build = os.path.split(str(cache))
        if parent == f"{COMPILE_CACHE_ROOT}/{dep}" and BUILD_RE.match(build):
            out.append(str(cache))
    return sorted(set(out))


def collectable(leaving: Iterable[Mapping[str, Any]], staying: Iterable[Mapping[str, Any]]) -> List[str]:
    """What the plans ``leaving`` (pruned revisions, a removed deployment's records) used that no
    plan ``staying`` (every other record on the host, of any deployment) still uses: the paths
    garbage collection removes."""
    kept = {path for plan in staying for path in plan_uses(plan)}
    return sorted({path for plan in leaving for path in plan_uses(plan)} - kept)
