"""The bundle's roots on a host and the deployment names under them: the one place they are
spelled (nothing of the package imported, so the controller's engine and the modules on the
hosts read the same constants).

Every name a host plan leads to under them is listed by ``planmodel.host_names``."""

from __future__ import annotations

import hashlib
import json
import re

# A deployment's name: it becomes a directory and unit-name part under every root below
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}\Z")

CONFIG_ROOT = "/etc/vllm-fleet"                     # <deployment>/ config files
VENV_ROOT = "/opt/vllm-fleet"                       # vllm_fleet_uv_root / vllm_fleet_services_root: <deployment>/ (venvs)
HF_CACHE_ROOT = "/var/lib/vllm-fleet/hf-cache"      # docker: <deployment>/ each; uv units: HF_HOME itself
# vLLM's compile cache (VLLM_CACHE_ROOT: torch.compile / inductor artifacts), <deployment>/<build>/:
# one per deployment and vLLM build, so a restart of the same revision reuses it and a new
# build starts from an empty one
COMPILE_CACHE_ROOT = "/var/lib/vllm-fleet/compile-cache"
MODEL_STORE = "/var/lib/vllm-fleet/models"          # staged snapshots, <org>--<name>--<revision>/ (staging)
# vllm_fleet_stage_download host: the seed host's huggingface_hub, in a venv of its own
STAGE_TOOLS_VENV = f"{VENV_ROOT}/stage-tools"


def uv_venv(root, deployment, package, version, python, packages, overrides):
    """The uv engines' venv of a deployment on a host: one per package set (the vLLM package and
    version, the Python, the extra packages, the overrides), so a new set installs beside the
    running one and a rollback finds the previous venv intact. ``root``: vllm_fleet_uv_root.

    The id is the sha1 of the set as JSON (the same digits the uv role's Jinja computed before the
    plan carried them, so venvs made then are found again)."""
    key = [f"{package}=={version}", python] + sorted(set(packages)) + list(overrides)
    digest = hashlib.sha1(json.dumps(key).encode("utf-8")).hexdigest()[:12]
    return {"root": f"{root}/{deployment}", "path": f"{root}/{deployment}/venv-{digest}", "python": python}


def plan_venv(root, deployment, version, setup, processes, host_python, override=None):
    """The venv of a host plan's uv processes (``processes``: mappings with runtime and packages;
    ``setup``: the plan's accelerator_setup.uv), None without either. Its Python: ``override``
    (vllm_fleet_uv_python), else the setup's (ROCm: 3.12), else the host's, else python3. The
    planner and the reader of older records (records.todays_plan) both come here."""
    uv = [p for p in processes if p.get("runtime") == "uv"]
    if not uv or not setup:
        return None
    python = override or setup.get("python") or host_python or "python3"
    return uv_venv(root, deployment, setup.get("package", "vllm"), version, python,
                   [pkg for p in uv for pkg in p.get("packages") or []], setup.get("overrides") or [])
