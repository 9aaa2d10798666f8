"""The rules for host paths an operator chooses: one table of system directories, one check.

Every path variable of the inventory contract (``vllm_fleet_state_dir``, ``vllm_fleet_model_path``)
and every path tunable of the roles (``vllm_fleet_uv_root``, ``..._state_dir``, ``..._hf_cache``,
...) goes through :func:`path_problem` on the controller, and the teardown's guard
(``plugins/filter/vllm_fleet_teardown.py``) never treats a system directory as one of the bundle's
roots. A path must be written in its one normal form (absolute, no ``.`` / ``..`` component, no
``//``, no trailing ``/``, no control characters) so that what is checked is what is used; it
must not contain ``:`` or ``,`` (a docker ``-v`` / ``--mount`` spec splits on them) and must not
be a system directory or a parent of one. A path the bundle owns and removes from (``kind``
``"root"``: the state directory, install roots, caches, the service user's home) must also
not lie inside a tree of the operating system (:data:`SYSTEM_TREES`).
"""

from __future__ import annotations

import re
from typing import Optional

# Directories of the operating system: never a path variable's value, nor a parent of one of them
# (so "/" and "/var" are refused with "/var/lib"). Their subdirectories are fine unless a tree
# below (SYSTEM_TREES) says otherwise: /var/lib/vllm-fleet, /opt/vllm-fleet, /srv/models.
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/dev/shm", "/etc", "/etc/default", "/etc/cron.d", "/etc/ssh",
    "/etc/sudoers.d", "/etc/systemd", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/lost+found",
    "/opt", "/proc", "/root", "/run", "/run/systemd", "/sbin", "/snap", "/srv", "/sys", "/tmp",
    "/usr", "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/local",
    "/usr/local/bin", "/usr/local/lib", "/usr/local/sbin", "/usr/local/share", "/usr/sbin", "/usr/share",
    "/var", "/var/cache", "/var/lib", "/var/lib/containerd", "/var/lib/docker", "/var/log", "/var/mail",
    "/var/run", "/var/spool", "/var/tmp",
})
# Trees of the operating system that a directory the bundle owns (creates, chmods, removes from)
# must not lie in at all. /usr/local/<dir> is allowed (a local install root, like /opt/<dir>);
# every other path below /usr is refused.
SYSTEM_TREES = ("/etc", "/proc", "/sys", "/dev", "/boot", "/usr", "/bin", "/sbin", "/lib", "/lib32",
                "/lib64", "/libx32")
TREE_EXCEPTIONS = ("/usr/local",)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def is_system_dir(path: str) -> bool:
    """A system directory (SYSTEM_DIRS) or a parent of one ("/" included)."""
    return path in SYSTEM_DIRS or any(d.startswith(path.rstrip("/") + "/") for d in SYSTEM_DIRS)


def in_system_tree(path: str) -> Optional[str]:
    """The SYSTEM_TREES entry the path lies in (or is), else None."""
    for tree in SYSTEM_TREES:
        if path == tree or path.startswith(tree + "/"):
            if any(path.startswith(keep + "/") for keep in TREE_EXCEPTIONS):
                return None
            return tree
    return None


def path_problem(path: str, kind: str = "dir", spaces: bool = False) -> Optional[str]:
    """What is wrong with a host path an operator chose (None: nothing). The message never
    quotes the path (the caller shows it, masked and shortened). ``kind``: ``"dir"`` (table
    rule) or ``"root"`` (also outside SYSTEM_TREES); ``spaces``: whether blanks are allowed."""
    if not isinstance(path, str) or not path:
        return "must be a non-empty absolute path"
    if _CONTROL.search(path):
        return "contains a line break or another control character"
    if not path.startswith("/"):
        return "must be an absolute path (starting with /)"
    if not spaces and re.search(r"\s", path):
        return "must not contain blanks"
    if ":" in path or "," in path:
        return "must not contain ':' or ',' (a docker volume or mount spec splits on them)"
    if "//" in path:
        return "must not contain '//' (write the path in its normal form)"
    if len(path) > 1 and path.endswith("/"):
        return "must not end with '/' (write the path in its normal form)"
    if any(part in (".", "..") for part in path.split("/")[1:]):
        return "must not contain '.' or '..' components"
    if is_system_dir(path):
        return "is a system directory (or a parent of one): choose a directory of its own, such as /var/lib/vllm-fleet"
    if kind == "root":
        tree = in_system_tree(path)
        if tree:
            return (f"lies inside the system tree {tree}, which the bundle must never own or remove from: "
                    "choose a directory such as /var/lib/vllm-fleet/... or /opt/...")
    return None
