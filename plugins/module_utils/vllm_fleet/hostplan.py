"""The typed plan: what the planner (plan.py) hands the roles for one host.

A :class:`HostPlan` is one host's part of one deployment; its :class:`PlannedProcess` list is
what the host runs (vLLM engines, routers, Mooncake services). ``to_dict()`` gives the plain
dicts the playbooks read as ``vllm_fleet_plan`` (``vllm-fleet plan`` prints them as JSON).

The dict keys are the field names. The host plan's ``hash`` covers the whole process list and
the files (:meth:`HostPlan.hashed`), so renaming a PlannedProcess key would change every host's
hash and make the first run after an upgrade restart every instance: narrow the hash to what
runs before renaming one. HostPlan's own keys are outside the hash; they were renamed once
(``vendor`` -> ``accelerator``, the ``accelerator`` block -> ``accelerator_setup``), and the
revision module reads plans recorded before that under today's names
(plugins/modules/vllm_fleet_revision.py). tests/unit/plugins/module_utils/test_plan_hashes.py
pins the example inventory's hashes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional


def _doc(text: str, **kwargs: Any) -> Any:
    """A dataclass field with its description (``metadata["doc"]``; docs/architecture.md lists the
    fields); keyword arguments (default, default_factory) go to field(). The annotation is the
    field's type: plancheck.py checks a plan dict against it (the roles' argument validation)."""
    return field(metadata={"doc": text}, **kwargs)

# the kinds of process that are inference engines (the rest: routers, Mooncake services)
ENGINE_KINDS = ("vllm", "omni")


@dataclass
class PlannedProcess:
    """One process on one host, as the runtime roles start it."""

    name: str = _doc("container / systemd unit name: vllm-fleet-<deployment>[-part...]")
    kind: str = _doc("vllm | omni | router | mooncake_master | mooncake_store")
    role: str = _doc("the recipe's process role (single, head, worker, prefill, ...)")
    rank: Optional[int] = _doc("node rank inside its instance (0: head / single; None: services, routers)")
    phase: str = _doc("services | engine | router: the order phases start in")
    runtime: str = _doc("docker | uv for engines; service (systemd + pip venv) otherwise")
    version: Optional[str] = _doc("the vLLM version it runs (pinned, or from the image tag)")
    argv: List[str] = _doc("the exact command (argv list, never a shell string)")
    env: Dict[str, str] = _doc("environment without secret values")
    port: Optional[int] = _doc("where it listens (None: nothing to reach)")
    serves_http: bool = _doc("an HTTP API the health gate and routers reach")
    health: Dict[str, Any] = _doc("the gate: kind vllm (+ request), router, http (+ port), alive")
    bind: Optional[str] = _doc("--host it binds (None: every interface)")
    probe_host: str = _doc("where the host's own probes (gate, state, drain) reach it")
    image: Optional[str] = _doc("docker image (docker runtime)", default=None)
    served_model_name: Optional[str] = _doc("the name the server answers to (--served-model-name)", default=None)
    model_path: Optional[str] = _doc("local model directory it serves (mounted read-only)", default=None)
    packages: List[str] = _doc("pip requirements (uv / service venvs)", default_factory=list)
    mounts: List[str] = _doc("host dirs mounted read-only (configs)", default_factory=list)
    secret_env: List[str] = _doc("env names given from vaulted vars", default_factory=list)
    credentials: List[Dict[str, str]] = _doc("secrets passed as files (uv)", default_factory=list)
    hash: str = _doc("of argv (a plain router's: without its workers), env, image, port, packages (+ the "
                     "secrets' digest)", default="")
    drain: Optional[Dict[str, Any]] = _doc("the router that lists it: router_host, router_port, url", default=None)
    stop_timeout: Optional[int] = _doc(
        "seconds its runtime waits after SIGTERM before it kills the process (docker stop timeout, systemd "
        "TimeoutStopSec=): vllm_fleet_drain_timeout + 30 for a vLLM server that stops gracefully "
        "(--shutdown-timeout); None (left out): the runtime role's default. Not hashed", default=None)
    workers: Optional[Dict[str, Any]] = _doc(
        "a router's workers, which its gate expects it to list and to route requests to: pools (regular | "
        "prefill | decode -> URLs), model (the served name), request (completion | embedding); None (left "
        "out): not a router. Not hashed (the URLs are in argv)", default=None)
    membership: Optional[Dict[str, Any]] = _doc(
        "a plain router's workers as its API changes them without a restart (planargv.router_membership): "
        "flag, urls, env (the variable its unit's ExecStart reads them from at its next start), argv (the "
        "command without them, which its hash covers); None (left out): not such a router. Not hashed "
        "(the URLs are in argv)", default=None)
    # gpus, replica, devices, cpus: left out of the dict when None, so plans (and hashes) of
    # deployments that do not set them stay what they were
    gpus: Optional[List[int]] = _doc("the host's GPUs it may use (vllm_fleet_gpus); None (left out): every GPU",
                                     default=None)
    replica: Optional[int] = _doc("its index among the host's replicas (vllm_fleet_replicas_per_host); "
                                  "None (left out): the host's only server", default=None)
    devices: Optional[List[str]] = _doc("device nodes a container gets instead of the accelerator's (a ROCm GPU "
                                        "set: /dev/kfd and the set's render nodes); None (left out): the "
                                        "accelerator's", default=None)
    cpus: Optional[List[int]] = _doc("the cores a CPU replica is bound to (its cpuset; VLLM_CPU_OMP_THREADS_BIND "
                                     "in env); None (left out): unbound", default=None)
    capabilities: Optional[List[str]] = _doc(
        "the Linux capabilities it gets (without CAP_): [NET_BIND_SERVICE] for a server on a port below 1024 "
        "with vllm_fleet_privileged_ports; None (left out): none", default=None)
    container: Optional[Dict[str, Any]] = _doc(
        "what the accelerator gives a docker engine (accelerator.py): device_requests, devices, groups "
        "(names), security_opts, shm_size, cpuset_cpus, env (laid under env at run time); None (left out): "
        "not a docker engine", default=None)
    unit: Optional[Dict[str, Any]] = _doc(
        "what the accelerator gives a uv engine's unit (accelerator.py): groups (names), env; None (left "
        "out): not a uv engine", default=None)
    compile_cache: Optional[str] = _doc(
        "the host directory of its compile cache (VLLM_CACHE_ROOT in env; one per deployment and vLLM build): "
        "writable by the process, mounted at the same path into a container; None (left out): not a vLLM "
        "server, or its env names its own VLLM_CACHE_ROOT", default=None)
    docker_run: Optional[Dict[str, Any]] = _doc(
        "a docker process's finished container (runtimespec.docker_run): the docker_container parameters the "
        "docker role applies as they are (entrypoint, command, env merged with the container block's, volumes, "
        "labels, security options, capabilities, ...), with secret_env (env name -> inventory variable) and "
        "groups (names) for what the host resolves; None (left out): not a docker process. Not hashed (made "
        "from hashed fields and the host's docker tunables)", default=None)
    systemd_run: Optional[Dict[str, Any]] = _doc(
        "a uv engine's or a service's finished unit (runtimespec.systemd_run): exec_start (argv with argv[0] "
        "resolved in its venv), env (the unit block's env under its own; a service's PATH under both), "
        "fixed_env (written after env: a uv engine's HF_HOME), groups (names, those the host has are "
        "joined), files (layout.unit_files: its unit, env and worker-list files), workdir (its working "
        "directory), home (the service user's), hidden (the env files' directory, hidden from the unit), "
        "requires (files its argv names relative to workdir: preflight checks them), which the systemd "
        "role prints and writes as they are; None (left out): not a systemd process. Not hashed (made "
        "from hashed fields and the layout)", default=None)

    def to_dict(self, with_drain: bool = True) -> Dict[str, Any]:
        """The plan's dict; ``with_drain=False``: what the host plan's hash covers, which leaves
        out ``drain`` and the accelerator blocks (``container``, ``unit``): hashing these new keys
        would change every host's hash (accelerator.py folds a changed setting into ``hash``)."""
        out = asdict(self)
        if not with_drain:
            # compile_cache: its path is in env, which is hashed
            for key in ("drain", "container", "unit", "workers", "stop_timeout", "membership", "compile_cache",
                        "docker_run", "systemd_run"):
                del out[key]
        for key in ("gpus", "replica", "devices", "cpus", "capabilities", "container", "unit", "workers",
                    "stop_timeout", "membership", "compile_cache", "docker_run", "systemd_run"):
            if key in out and out[key] is None:
                del out[key]
        return out


@dataclass
class HostPlan:
    """One host's part of one deployment."""

    deployment: str = _doc("deployment name (vllm_fleet_deployment)")
    recipe: str = _doc("recipe id (org/repo)")
    variant: str = _doc("recipe variant")
    hardware: Optional[str] = _doc("taxonomy hardware id")
    strategy: Optional[str] = _doc("deployment strategy")
    kv_offload: Optional[str] = _doc("KV store deployment (kv_store_centralized_mooncake, ...)")
    deploy_type: str = _doc("single_node | multi_node | pd_cluster (the recipe's)")
    node_count: int = _doc("nodes of this host's instance")
    features: List[str] = _doc("feature sets enabled")
    runtime: str = _doc("docker | uv; service for hosts without an engine")
    accelerator: str = _doc("the software stack it runs on: cuda | rocm | cpu | xpu | tpu | none")
    brand: Optional[str] = _doc("hardware brand of the profile")
    gpu_count: int = _doc("per node, from the hardware profile")
    vram_gb_per_gpu: float = _doc("GPU memory per GPU (GB), from the hardware profile")
    vram_minimum_gb: Optional[float] = _doc("GPU memory the variant needs (GB)")
    min_vllm_version: Optional[str] = _doc("oldest vLLM the recipe supports")
    vllm_version: Optional[str] = _doc("the pinned vLLM version (vllm_fleet_vllm_version)")
    instance: Optional[int] = _doc("the engine instance this host belongs to (None: no engine)")
    instance_name: Optional[str] = _doc("its instance's name (what fails and rolls as one): i<N>, or pd for a P/D cluster")
    instance_hosts: List[str] = _doc("the hosts of that instance (in rank order)")
    head: str = _doc("the instance's rank-0 host")
    node_rank: int = _doc("node rank of this host inside its instance (0: head)")
    batch: Optional[int] = _doc("rollout batch of the instance (None: no engine)")
    max_fail_percentage: int = _doc("share of a batch's instances that may fail")
    phases: List[str] = _doc("which of services, engine, router this host runs")
    command: str = _doc("the processes' commands as shell text (printed, never run)")
    health: Dict[str, Any] = _doc("the host's first process: enabled, port, served_model_name, kind")
    processes: List[PlannedProcess] = _doc("what the host runs (engines, routers, Mooncake services)")
    files: List[Dict[str, Any]] = _doc("config files: path, mode, content")
    config_dir: str = _doc("directory of the deployment's config files (layout.config_dir)")
    exposed: List[str] = _doc("engines answering beyond localhost without an API key")
    secret_files: List[Dict[str, str]] = _doc("secrets the host's processes read from files")
    secret_vars: Dict[str, str] = _doc("the secrets the host's processes get: env name -> the inventory variable "
                                       "that holds the value (secret_table; the roles resolve it, the plan holds "
                                       "no value)")
    address: Optional[str] = _doc("rendezvous address of this host")
    hash: str = _doc("of the processes (without drain) and files", default="")
    drain: Optional[Dict[str, Any]] = _doc("the router that lists this host's server", default=None)
    drain_timeout: int = _doc("seconds a drain waits for this host's servers' requests in flight "
                              "(vllm_fleet_drain_timeout; their --shutdown-timeout). Not hashed", default=120)
    slo: Dict[str, Any] = _doc("the deployment's SLO (vllm_fleet_slo: bench.yml and the canary's gate check it; "
                               "{}: none). Not hashed", default_factory=dict)
    slo_max_regression: Optional[int] = _doc("percent the canary may be worse than the newest bench report "
                                             "(vllm_fleet_slo_max_regression; None: not compared). Not hashed",
                                             default=None)
    stage: Optional[Dict[str, Any]] = _doc(
        "what the stage phase puts on this engine host before anything stops (staging.stage_block): source "
        "(hub | controller | path), model, revision, key, store, dir (what the server reads), manifest (the "
        "verified manifest's path), controller_path, margin_pct, bwlimit, rack; left out when nothing is staged. "
        "Not hashed (the staged dir is in the processes' argv)", default=None)
    # across the deployments of the machine (plan_fleet); left out of the dict when None
    gpus_idle: Optional[List[int]] = _doc("GPUs of the host's machine that no server of the run uses (the run "
                                          "summary reports them); None (left out): all used, or the facts do "
                                          "not tell", default=None)
    gpu_health: Optional[Dict[str, Any]] = _doc(
        "the host's GPU health as the plan took it (gpuhealth.record): policy, failed GPUs with evidence, the "
        "ones left out (exclude), degraded GPUs; left out of the dict when all are healthy or health was not "
        "read. Not hashed", default=None)
    venv: Optional[Dict[str, Any]] = _doc(
        "the uv engines' venv (layout.uv_venv): root (<vllm_fleet_uv_root>/<deployment>), path (root/venv-<id of "
        "the package set>), python (what the venv is made with), interpreter and vllm (its bin/python and "
        "bin/vllm); left out without uv engines. Not hashed (its "
        "parts are: the version and packages in the processes, the Python a host fact)", default=None)
    layout: Dict[str, Any] = _doc(
        "every path of the deployment on this host (layout.deployment_layout): config_dir, venv_dir, overrides, "
        "services_dir, services_venv, unit_dirs, hf_cache, compile_cache, record_dir, legacy_marker, kept_suffix, "
        "and the host's roots (uv_root, services_root, workdir, hf_cache_shared, state_dir, uv_home, services_home, "
        "env_dir, unit_dir, uv_tools, uv_bin, prometheus_debs, roots: "
        "what teardown removes from). The roles, teardown and the records read paths here. Not hashed",
        default_factory=dict)
    accelerator_setup: Optional[Dict[str, Any]] = _doc(
        "the host's accelerator setup (accelerator.py): name, unit (its uv units' block), uv (what uv installs: python, "
        "install_args, package, cpu_fixups, overrides, os_packages); None: a host without engines or an "
        "accelerator without settings. Not hashed (hashed() covers processes and files)", default=None)

    def hashed(self) -> Dict[str, Any]:
        """What the host plan's hash covers."""
        return {"processes": [p.to_dict(with_drain=False) for p in self.processes], "files": self.files}

    def to_dict(self) -> Dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items()
               if k != "processes" and not (k in ("gpus_idle", "gpu_health", "stage", "venv") and v is None)}
        out["processes"] = [p.to_dict() for p in self.processes]
        return dict(out)
