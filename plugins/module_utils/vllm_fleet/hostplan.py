"""The typed plan: what the planner (plan.py) hands the roles for one host.

A :class:`HostPlan` is one host's part of one deployment; its :class:`PlannedProcess` list is
what the host runs (vLLM engines, routers, Mooncake services). ``to_dict()`` gives the plain
dicts the playbooks read as ``vllm_fleet_plan`` (``vllm-fleet plan`` prints them as JSON).

The dict keys are the field names, unchanged from the untyped plan this replaces: the host plan's
``hash`` covers the whole process list, so renaming a key would change every host's hash and
make the first run after an upgrade restart every instance. Narrow the hash to what runs
before renaming anything here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class PlannedProcess:
    """One process on one host, as the runtime roles start it."""

    name: str                       # container / systemd unit name: vllm-fleet-<deployment>[-part...]
    kind: str                       # vllm | omni | router | mooncake_master | mooncake_store
    role: str                       # the recipe's process role (single, head, worker, prefill, ...)
    rank: int                       # node rank inside its instance (0: head / single)
    phase: str                      # services | engine | router: the order phases start in
    runtime: str                    # docker | uv for engines; service (systemd + pip venv) otherwise
    version: Optional[str]          # the vLLM version it runs (pinned, or from the image tag)
    argv: List[str]                 # the exact command (argv list, never a shell string)
    env: Dict[str, str]             # environment without secret values
    port: Optional[int]             # where it listens (None: nothing to reach)
    serves_http: bool               # an HTTP API the health gate and routers reach
    health: Dict[str, Any]          # the gate: kind vllm (+ request), router, http (+ port), alive
    bind: Optional[str]             # --host it binds (None: every interface)
    probe_host: str                 # where the host's own probes (gate, state, drain) reach it
    image: Optional[str] = None     # docker image (docker runtime)
    served_model_name: Optional[str] = None
    model_path: Optional[str] = None
    packages: List[str] = field(default_factory=list)       # pip requirements (uv / service venvs)
    mounts: List[str] = field(default_factory=list)         # host dirs mounted read-only (configs)
    secret_env: List[str] = field(default_factory=list)     # env names given from vaulted vars
    credentials: List[Dict[str, str]] = field(default_factory=list)   # secrets passed as files (uv)
    hash: str = ""                  # of argv, env, image, port, packages (+ the secrets' digest)
    drain: Optional[Dict[str, Any]] = None   # the router that lists it: router_host, router_port, url
    # the host's GPUs it may use (vllm_fleet_gpus); None: every GPU. Left out of the dict when
    # None, so plans (and hashes) of deployments that do not set it stay what they were
    gpus: Optional[List[int]] = None
    # its index among the host's replicas (vllm_fleet_replicas_per_host); None (left out of the
    # dict): the host's only server
    replica: Optional[int] = None
    # device nodes a container gets instead of the accelerator's (a ROCm GPU set: /dev/kfd and
    # the set's render nodes); None (left out of the dict): the accelerator's
    devices: Optional[List[str]] = None
    # the cores a CPU replica is bound to (its cpuset; VLLM_CPU_OMP_THREADS_BIND in env); None
    # (left out of the dict): unbound
    cpus: Optional[List[int]] = None
    # what the accelerator gives a docker engine (accelerator.py): device_requests, devices,
    # groups (names), security_opts, shm_size, cpuset_cpus, env (laid under ``env`` at run time)
    container: Optional[Dict[str, Any]] = None
    # what the accelerator gives a uv engine's unit (accelerator.py): groups (names), env
    unit: Optional[Dict[str, Any]] = None

    def to_dict(self, with_drain: bool = True) -> Dict[str, Any]:
        """The plan's dict; ``with_drain=False``: what the host plan's hash covers, which leaves
        out ``drain`` and the accelerator blocks (``container``, ``unit``): hashing these new keys
        would change every host's hash (accelerator.py folds a changed setting into ``hash``)."""
        out = asdict(self)
        if not with_drain:
            for key in ("drain", "container", "unit"):
                del out[key]
        for key in ("gpus", "replica", "devices", "cpus", "container", "unit"):
            if key in out and out[key] is None:
                del out[key]
        return out


@dataclass
class HostPlan:
    """One host's part of one deployment."""

    deployment: str
    recipe: str
    variant: str
    hardware: Optional[str]
    strategy: Optional[str]
    kv_offload: Optional[str]
    deploy_type: str                # single_node | multi_node | pd_cluster (the recipe's)
    node_count: int                 # nodes of this host's instance
    features: List[str]
    runtime: str                    # docker | uv; service for hosts without an engine
    vendor: str                     # accelerator: cuda | rocm | cpu | xpu | none
    brand: Optional[str]
    gpu_count: int                  # per node, from the hardware profile
    vram_gb_per_gpu: float
    vram_minimum_gb: Optional[float]
    min_vllm_version: Optional[str]
    vllm_version: Optional[str]
    instance: Optional[int]         # the engine instance this host belongs to (None: no engine)
    unit: Optional[str]             # its failure/rollout unit: i<N>, or pd for a P/D cluster
    instance_hosts: List[str]       # the hosts of that instance (in rank order)
    head: str                       # the instance's rank-0 host
    node_rank: int
    batch: Optional[int]            # rollout batch of the instance (None: no engine)
    max_fail_percentage: int
    phases: List[str]               # which of services, engine, router this host runs
    command: str                    # the processes' commands as shell text (printed, never run)
    health: Dict[str, Any]          # the host's first process: enabled, port, served_model_name, kind
    processes: List[PlannedProcess]
    files: List[Dict[str, Any]]     # config files: path, mode, content
    config_dir: str
    exposed: List[str]              # engines answering beyond localhost without an API key
    secret_files: List[Dict[str, str]]
    address: Optional[str]
    hash: str = ""                  # of the processes (without drain) and files
    drain: Optional[Dict[str, Any]] = None
    # GPUs of the host's machine that no server of the run uses (plan_fleet, across the
    # deployments of the machine; the run summary reports them). Left out of the dict when None
    # (all used, or the facts do not tell)
    gpus_idle: Optional[List[int]] = None
    # the accelerator (accelerator.py): name, unit (its uv units' block), uv (what uv installs: python,
    # install_args, package, cpu_fixups, overrides, os_packages); None: a host without engines
    # or an accelerator without settings. Not hashed (hashed() covers processes and files)
    accelerator: Optional[Dict[str, Any]] = None

    def hashed(self) -> Dict[str, Any]:
        """What the host plan's hash covers."""
        return {"processes": [p.to_dict(with_drain=False) for p in self.processes], "files": self.files}

    def to_dict(self) -> Dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "processes" and not (k == "gpus_idle" and v is None)}
        out["processes"] = [p.to_dict() for p in self.processes]
        return dict(out)
