"""The bundle's roots on a host and the deployment names under them: the one place they are
spelled (nothing of the package imported, so the controller's engine and the modules on the
hosts read the same constants).

:func:`host_layout` takes a host's path tunables (the roles' defaults are these constants) and
:func:`deployment_layout` derives every path of one deployment on that host from it: the plan
carries the result (``HostPlan.layout``), teardown the host's part (``vllm_fleet_run.layout``),
and the roles, playbooks and records read them; nothing else composes a path of the bundle.
Every name a host plan leads to under them is listed by ``planmodel.host_names``."""

from __future__ import annotations

import hashlib
import json
import re

# A deployment's name: it becomes a directory and unit-name part under every root below
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}\Z")

DATA_ROOT = "/var/lib/vllm-fleet"                   # vllm_fleet_uv_state_dir: the units' working directory
STATE_DIR = f"{DATA_ROOT}/state"                    # vllm_fleet_state_dir: <deployment>/rev-<N>.json (records)
PACKAGE_CACHE = "/var/cache/vllm-fleet"             # packages the controller copies to a host (prometheus-debs/)
CONFIG_ROOT = "/etc/vllm-fleet"                     # <deployment>/ config files; the units' <process>.env, .workers
UNIT_DIR = "/etc/systemd/system"                    # the units' <process>.service
SERVICE_HOME = f"{DATA_ROOT}/home"                  # the service user's home (vLLM, torch, triton caches)
VENV_ROOT = "/opt/vllm-fleet"                       # vllm_fleet_uv_root / vllm_fleet_services_root: <deployment>/ (venvs)
HF_CACHE_ROOT = f"{DATA_ROOT}/hf-cache"             # docker: <deployment>/ each; uv units: HF_HOME itself
# vLLM's compile cache (VLLM_CACHE_ROOT: torch.compile / inductor artifacts), <deployment>/<build>/:
# one per deployment and vLLM build, so a restart of the same revision reuses it and a new
# build starts from an empty one
COMPILE_CACHE_ROOT = f"{DATA_ROOT}/compile-cache"
MODEL_STORE = f"{DATA_ROOT}/models"                 # staged snapshots, <org>--<name>--<revision>/ (staging)
# vllm_fleet_stage_download host: the seed host's huggingface_hub, in a venv of its own
STAGE_TOOLS_VENV = f"{VENV_ROOT}/stage-tools"
STAGE_TRUST_DIR = "/run/vllm-fleet-stage"          # a sender's per-run key and known_hosts (staging)
PROMETHEUS_DROPIN = f"{UNIT_DIR}/prometheus.service.d"   # monitoring.yml's drop-in for Debian's prometheus
KEPT_SUFFIX = "-prev"       # docker: the container of the previous revision, kept (module vllm_fleet_container)
LEGACY_MARKER_SUFFIX = ".plan"   # <state_dir>/<deployment>.plan: the deployed plan's hash, before the records held it

# The host's path tunables (inventory variables; the roles' defaults hold the same values) and
# their values when unset
HOST_TUNABLES = {
    "uv_root": ("vllm_fleet_uv_root", VENV_ROOT),
    "services_root": ("vllm_fleet_services_root", VENV_ROOT),
    "workdir": ("vllm_fleet_uv_state_dir", DATA_ROOT),
    "hf_cache_shared": ("vllm_fleet_uv_hf_cache", HF_CACHE_ROOT),
    "state_dir": ("vllm_fleet_state_dir", STATE_DIR),
    "uv_home": ("vllm_fleet_uv_user_home", SERVICE_HOME),
    "services_home": ("vllm_fleet_services_user_home", SERVICE_HOME),
}


def host_layout(values):
    """The bundle's roots on one host from its variables (``values``: a mapping of inventory
    variable -> value; the contract checked each path before): the uv and services roots, the
    units' working directory, the uv units' shared HF cache, the records' directory, the service
    user's home as the uv engines and as the services see it, the directories of the units'
    env files (``env_dir``) and unit files (``unit_dir``), the uv tools venv, the Prometheus
    packages' copy (monitoring.yml), and ``roots``: the directories teardown removes from (each
    path is checked to lie below one of them)."""
    out = {key: str(values.get(var) or default).rstrip("/") or "/" for key, (var, default) in HOST_TUNABLES.items()}
    out["env_dir"] = CONFIG_ROOT
    out["unit_dir"] = UNIT_DIR
    out["uv_tools"] = f"{out['uv_root']}/tools"
    out["uv_bin"] = f"{out['uv_tools']}/bin/uv"
    out["prometheus_debs"] = f"{PACKAGE_CACHE}/prometheus-debs"   # monitoring.yml's install (vllm_fleet_prometheus)
    out["roots"] = list(dict.fromkeys([out["uv_root"], out["services_root"], CONFIG_ROOT, DATA_ROOT,
                                       out["workdir"], out["state_dir"]]))
    return out


def deployment_layout(host, deployment):
    """Every path and derived name of one deployment on a host (``host``: :func:`host_layout`):
    config_dir (config files), secrets_dir (the root-only secret files, below it), venv_dir (the uv engines' venvs; overrides
    its uv overrides file), services_dir and services_venv (routers, Mooncake), unit_dirs (the
    venv directories of a deployment that runs units: venv_dir and services_dir, once each;
    what the revision record and teardown list), hf_cache (the
    containers' HF cache), compile_cache (<build>/ below it), record_dir (rev-<N>.json),
    legacy_marker (the hash marker of records from before), kept_suffix (docker: the kept
    previous container's name suffix), and the host's own entries (workdir, hf_cache_shared,
    uv_tools, uv_bin, state_dir, roots)."""
    dep = str(deployment)
    if not NAME_RE.fullmatch(dep) or ".." in dep:
        raise ValueError(f"vllm_fleet_deployment: {dep!r} is not a safe name")
    out = dict(host)
    out.update(config_dir=f"{CONFIG_ROOT}/{dep}", secrets_dir=secrets_dir(dep), venv_dir=f"{host['uv_root']}/{dep}",
               overrides=f"{host['uv_root']}/{dep}/overrides.txt",
               services_dir=f"{host['services_root']}/{dep}", services_venv=f"{host['services_root']}/{dep}/services",
               hf_cache=f"{HF_CACHE_ROOT}/{dep}", compile_cache=f"{COMPILE_CACHE_ROOT}/{dep}",
               record_dir=f"{host['state_dir']}/{dep}", legacy_marker=f"{host['state_dir']}/{dep}{LEGACY_MARKER_SUFFIX}",
               kept_suffix=KEPT_SUFFIX)
    out["unit_dirs"] = list(dict.fromkeys([out["venv_dir"], out["services_dir"]]))
    return out


def secrets_dir(deployment):
    """The root-only directory of a deployment's file-passed secrets (systemd LoadCredential=)."""
    return f"{CONFIG_ROOT}/{deployment}/secrets"


def stage_trust():
    """Where a sender keeps the stage phase's per-run trust (playbooks/tasks/stage_trust.yml,
    removed at the run's end): the directory under /run (never across a reboot), the run's
    private key and the receivers' host keys."""
    return {"dir": STAGE_TRUST_DIR, "key": f"{STAGE_TRUST_DIR}/key", "known_hosts": f"{STAGE_TRUST_DIR}/known_hosts"}


def unit_files(layout, name):
    """The files of one systemd process (``name``: its unit name, without .service) on a host
    (``layout``: :func:`host_layout` or a deployment's): its unit, its env file (0600) and a
    router's worker list, beside the env file."""
    return {"unit": f"{layout['unit_dir']}/{name}.service", "env": f"{layout['env_dir']}/{name}.env",
            "workers": f"{layout['env_dir']}/{name}.workers"}


def removed_paths(layout, units, purge_cache):
    """What teardown removes of one deployment (``layout``: :func:`deployment_layout`) besides
    its processes and recorded paths: the venv directories when it ran units, the config
    directory, the legacy marker, and with the cache purge its HF and compile caches."""
    return list(dict.fromkeys((layout["unit_dirs"] if units else [])
                              + [layout["config_dir"], layout["legacy_marker"]]
                              + ([layout["hf_cache"], layout["compile_cache"]] if purge_cache else [])))


def uv_venv(root, deployment, package, version, python, packages, overrides):
    """The uv engines' venv of a deployment on a host: one per package set (the vLLM package and
    version, the Python, the extra packages, the overrides), so a new set installs beside the
    running one and a rollback finds the previous venv intact. ``root``: vllm_fleet_uv_root.

    The id is the sha1 of the set as JSON (the same digits the uv role's Jinja computed before the
    plan carried them, so venvs made then are found again)."""
    key = [f"{package}=={version}", python] + sorted(set(packages)) + list(overrides)
    digest = hashlib.sha1(json.dumps(key).encode("utf-8")).hexdigest()[:12]
    return venv_commands({"root": f"{root}/{deployment}", "path": f"{root}/{deployment}/venv-{digest}", "python": python})


def venv_commands(venv):
    """A venv (``root``, ``path``, ``python``) with the commands the uv role runs from it:
    ``interpreter`` (its bin/python) and ``vllm`` (its bin/vllm)."""
    return dict(venv, interpreter=f"{venv['path']}/bin/python", vllm=f"{venv['path']}/bin/vllm")


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
