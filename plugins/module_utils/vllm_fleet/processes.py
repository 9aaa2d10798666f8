"""One planned process from a placed slot: a vLLM engine (argv, env, image or packages, GPU set,
health gate, credentials) or a cluster service (vllm-router, Mooncake)."""

from __future__ import annotations

import json
import shlex
from typing import Any, Dict, List, Mapping, Optional

from . import secret_table
from .serving import DEFAULT_DRAIN_TIMEOUT
from .images import env_text
from .hostplan import PlannedProcess
from .coerce import as_list, as_map
from .shell import dedupe
from .topology import ranges as gpu_ranges
from .layout import secrets_dir
from .planmodel import DEFAULT_PORT, compile_cache_dir, Deployment, HostInput, ROCM_BRAND_KEYS, Slot, image_version, plan_hash, version_tuple
from .planargv import (bind_of, check_versions, customize, health_kind, int_flag, probe_host_of, router_argv,
                       router_metrics,
                       router_membership, gpus_per_node, substitute)
from .vllmargs import PRIVILEGED_PORTS, flag_name, has_flag


# Placeholder defaults (an operator's vllm_fleet_placeholders win).
PLACEHOLDER_DEFAULTS = {
    "ROUTER_HOST": "0.0.0.0",
    "PREFILL_DP_RPC_PORT": "29550",
    "DECODE_DP_RPC_PORT": "29560",
    "MOONCAKE_DEVICE_NAME": "",
    "MOONCAKE_STORE_DEVICE_NAME": "",
}


def _package_lines(install: Optional[str]) -> List[str]:
    """Requirement strings of an upstream install line (``uv pip install 'pkg>=1'``)."""
    if not install:
        return []
    words = shlex.split(install)
    if "install" not in words:
        return []
    return [w for w in words[words.index("install") + 1:] if not w.startswith("-")]


def _mooncake_packages(dep: Deployment, brand_key: str) -> List[str]:
    chosen = dep.settings.get("mooncake_package")
    if chosen:
        return [str(p) for p in (chosen if isinstance(chosen, list) else [chosen])]
    install = as_map(as_map((dep.store or {}).get("vllm")).get("install"))
    return _package_lines(install.get(brand_key))


def _config_json(dep: Deployment, template: Any, where: str, resolved, store: bool = False) -> str:
    """A Mooncake JSON config: the recipe's template, placeholders filled, operator keys on top
    (vllm_fleet_mooncake_config for every file, vllm_fleet_mooncake_store_config for the store's)."""
    config = dict(as_map(template))
    config.update(as_map(dep.settings.get("mooncake_config")))
    if store:
        config.update(as_map(dep.settings.get("mooncake_store_config")))
    out = {key: (resolved(env_text(v), where) if isinstance(v, str) else v) for key, v in config.items()}
    return json.dumps(out, indent=2) + "\n"


def planned_process(dep: Deployment, slot: Slot, files: Dict[str, Dict[str, Any]], engine_host: bool) -> PlannedProcess:
    """One planned process: placeholders resolved (a missing value is a problem naming host and
    variable), then built by :func:`_engine_process` (vLLM) or :func:`_service_process`."""
    host, proc, settings = slot.host, slot.proc, dep.settings
    values = dict(PLACEHOLDER_DEFAULTS)
    values.update(dep.values)
    values.update(slot.values)
    values.update({str(k): str(v) for k, v in as_map(settings.get("placeholders")).items()})

    def resolved(text: str, where: str) -> str:
        out, missing = substitute(text, values)
        for name in missing:
            var = "vllm_fleet_iface" if name == "IFACE_NAME" else f"vllm_fleet_placeholders.{name}"
            dep.problems.append(f"{host.name}: {var}: placeholder ${name} in {where} has no value "
                                f"(set vllm_fleet_placeholders.{name}"
                                f"{' or vllm_fleet_iface' if name == 'IFACE_NAME' else ''})")
        return out

    argv = [resolved(str(tok), f"the {proc.role} command") for tok in proc.argv]
    env = {key: resolved(env_text(value), f"env {key} of {proc.role}") for key, value in proc.env.items()}
    if proc.kind in ("vllm", "omni"):
        planned = _engine_process(dep, slot, files, argv, env, values, resolved)
    else:
        planned = _service_process(dep, slot, files, argv, env, values, resolved, engine_host)
    if settings.get("privileged_ports") and planned.port is not None and planned.port < PRIVILEGED_PORTS:
        # the one capability a server on a privileged port needs (the opt-in; contract.py refuses such
        # ports without it); every other process keeps none
        planned.capabilities = ["NET_BIND_SERVICE"]
    # a plain router's workers change through its API, not by a restart: its hash (the restart
    # key in its unit) leaves them out; the host plan's hash still covers them (argv)
    planned.membership = router_membership(planned.argv) if planned.kind == "router" else None
    hashed = {"argv": planned.membership["argv"] if planned.membership else planned.argv, "env": planned.env,
              "image": planned.image, "port": planned.port, "packages": planned.packages}
    # the secrets this process gets (table: secret_table), by the keyed digest of their values
    mine = secret_table.for_process(as_list(settings.get("secrets")), planned.kind, bool(dep.store))
    if mine:
        hashed["secrets"] = as_map(settings.get("secret_digests")).get(",".join(mine))
    for key in ("gpus", "devices", "cpus", "capabilities"):
        if getattr(planned, key) is not None:
            hashed[key] = getattr(planned, key)
    planned.hash = plan_hash(hashed)
    return planned


def _engine_process(dep: Deployment, slot: Slot, files: Dict[str, Dict[str, Any]], argv: List[str],
                    env: Dict[str, str], values: Mapping[str, str], resolved) -> PlannedProcess:
    """A vLLM server (vllm / omni): the operator's env and flags, GPU count and version checks,
    the image, Mooncake's config file, where it binds and is probed."""
    host, proc, settings, problems = slot.host, slot.proc, dep.settings, dep.problems
    multi = any(has_flag(proc.argv, flag) for flag in ("--nnodes", "--data-parallel-address", "--master-addr"))
    if multi and host.address:
        env.setdefault("VLLM_HOST_IP", host.address)
    if "VLLM_NIXL_SIDE_CHANNEL_HOST" in env and host.address:
        # the side channel is a bind address: this node's own (the recipe's comment says so)
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = host.address
    for key, value in as_map(settings.get("env")).items():
        env[str(key)] = str(value)
    # per host (CPU/NUMA binding, local cache dirs): may differ inside a deployment
    for key, value in as_map(host.settings.get("host_env")).items():
        env[str(key)] = str(value)
    argv = customize(argv, settings, proc.role, host.settings.get("listen"))
    docker = proc.docker or {}
    gpus = _gpu_set(dep, host, env)
    if slot.gpus is not None:   # a replica's share of the host's GPUs, or a server's healthy ones
        gpus = list(slot.gpus)
    if slot.replica is not None:   # a replica: its own port
        argv = argv[:3] + dedupe(argv[3:] + ["--port", str(slot.port)], key=flag_name)
    if slot.cpus is not None:
        # vLLM's CPU backend pins its OpenMP threads (and their memory) to these cores, one
        # set per tensor/pipeline rank separated by |; the container gets them as its cpuset
        env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(gpu_ranges(rank) for rank in slot.cpus)
    have = int(host.gpu.get("count") or 0)
    if host.fit_layout and have and host.gpu.get("brand") in ("nvidia", "amd") and dep.deploy_type != "pd_cluster":
        need = gpus_per_node(argv, len(slot.instance_hosts))
        usable = len(gpus) if gpus is not None else have
        if need > usable:
            given = f"vllm_fleet_gpus gives it {usable}" if gpus is not None else f"the host has {have}"
            problems.append(f"{host.name}: vllm_fleet_extra_args: the command needs {need} GPUs per node "
                            f"(tensor x pipeline x data parallel over {len(slot.instance_hosts)} node(s)) but "
                            f"{given}; lower the parallel sizes or choose another "
                            f"vllm_fleet_variant / vllm_fleet_strategy / vllm_fleet_nodes")
    devices = None
    render = [str(n) for n in as_list(host.gpu.get("render_nodes"))]
    if (gpus is not None and dep.runtime == "docker" and docker.get("brand_key") in ROCM_BRAND_KEYS
            and len(render) == have and all(g < len(render) for g in gpus)):
        # ROCm containers with a GPU set get /dev/kfd and the set's own render nodes (the GPU
        # facts map each GPU to its node): the runtime sees only those, numbered from 0 inside,
        # as NVIDIA containers do with device_ids
        devices = ["/dev/kfd"] + [render[g] for g in gpus]
    elif gpus is not None and (dep.runtime == "uv" or docker.get("brand_key") in ROCM_BRAND_KEYS):
        # units see the GPUs through the runtime's variable; ROCm containers whose render nodes
        # the facts do not map get every render node (/dev/dri) and the variable
        env[_visible_devices(docker)] = ",".join(map(str, gpus))
    image = settings.get("image") or docker.get("image")
    if settings.get("image_tag") and image:
        image = image.rsplit(":", 1)[0] + ":" + str(settings["image_tag"]).lstrip(":")
    version = settings.get("vllm_version") or (image_version(image) if dep.runtime == "docker" else None)
    problems.extend(check_versions(dep.recipe, dep.variant, version, argv, host.name))
    if dep.store and dep.store.get("min_vllm_version"):
        need = dep.store["min_vllm_version"]
        if version_tuple(version) and version_tuple(version) < version_tuple(need):
            problems.append(f"{host.name}: vllm_fleet_vllm_version {version} is older than "
                            f"{dep.req.kv_offload}'s min_vllm_version {need}")
    # the compile cache on the host (VLLM_CACHE_ROOT), unless the operator's env names one: the
    # same path at every start of this build, so a restart reuses what torch.compile wrote
    compile_cache = None
    if "VLLM_CACHE_ROOT" not in env:
        compile_cache = compile_cache_dir(dep.name, {"runtime": dep.runtime, "image": image if dep.runtime == "docker" else None,
                                                     "version": version, "brand": docker.get("brand_key")})
        env["VLLM_CACHE_ROOT"] = compile_cache
    mounts = []
    if "MOONCAKE_CONFIG_PATH" in proc.env:
        path = values["MOONCAKE_CONFIG_PATH"]
        template = as_map((dep.store or {}).get("mooncake_vllm_config")).get("template")
        files[path] = {"path": path, "mode": "0644",
                       "content": _config_json(dep, template, "the Mooncake vLLM config", resolved)}
        mounts.append(path.rsplit("/", 1)[0])
    # a uv engine gets the secrets the table passes as files that way (systemd's LoadCredential=;
    # it is told the file's path: HF_TOKEN_PATH, which huggingface_hub reads); containers get
    # them in their environment: a bind-mounted file cannot be exercised on the testbed, whose
    # containers are siblings on this machine's engine (bind sources resolve here, not on the
    # test host that wrote the file)
    argv, stop_timeout = graceful_stop(proc.kind, argv, version, settings.get("drain_timeout"))
    secrets = secret_table.for_process(as_list(settings.get("secrets")), proc.kind, bool(dep.store))
    as_file = [k for k in secrets if secret_table.BY_ENV[k].file and dep.runtime == "uv"]
    return PlannedProcess(
        name=slot.name, kind=proc.kind, role=proc.role, rank=proc.rank, phase=slot.phase,
        runtime=dep.runtime, version=version, argv=argv, env=env,
        port=int_flag(argv, "--port", proc.port or DEFAULT_PORT),
        serves_http=not has_flag(argv, "--headless"),
        health={"kind": "vllm", "request": health_kind(dep.recipe, argv)},
        bind=bind_of(argv), probe_host=probe_host_of(argv), image=image,
        served_model_name=settings.get("served_model_name") or proc.argv[2],
        model_path=settings.get("model_path"),
        packages=_mooncake_packages(dep, docker.get("brand_key") or "nvidia") if dep.store else [],
        mounts=mounts,
        secret_env=[k for k in secrets if k not in as_file],
        credentials=[credential(dep.name, k) for k in as_file],
        gpus=gpus, replica=slot.replica, devices=devices,
        cpus=sorted(c for rank in slot.cpus for c in rank) if slot.cpus is not None else None,
        stop_timeout=stop_timeout, compile_cache=compile_cache)


GRACEFUL_SINCE = "0.18"     # vLLM's --shutdown-timeout (SIGTERM: refuse new requests, finish running ones)
STOP_MARGIN = 30            # seconds the runtime waits beyond it before it kills


def drain_timeout_of(value: Any) -> int:
    """vllm_fleet_drain_timeout, or its default when unset."""
    return DEFAULT_DRAIN_TIMEOUT if value is None else int(value)


def graceful_stop(kind: str, argv: List[str], version: Optional[str], drain_timeout: Any):
    """(argv, stop_timeout): a vLLM server stops gracefully within vllm_fleet_drain_timeout
    (``--shutdown-timeout``, added after the model unless the recipe or the operator set it, and only where the
    vLLM it runs has it; an unknown version is the latest image's, which has it); its runtime
    waits STOP_MARGIN s longer before it kills. None: the runtime role's default."""
    if kind != "vllm":
        return argv, None
    timeout = drain_timeout_of(drain_timeout)
    have = version_tuple(version)
    if has_flag(argv, "--shutdown-timeout"):      # the recipe's or the operator's: never doubled
        given = int_flag(argv, "--shutdown-timeout", None)
        return argv, (max(given, timeout) + STOP_MARGIN) if given else None
    if timeout <= 0 or (have is not None and have < version_tuple(GRACEFUL_SINCE)):
        return argv, None
    # right after `vllm serve MODEL`: the recipe's flags and the operator's extra args follow as before
    return argv[:3] + ["--shutdown-timeout", str(timeout)] + argv[3:], timeout + STOP_MARGIN



def _visible_devices(docker: Mapping[str, Any]) -> str:
    return "HIP_VISIBLE_DEVICES" if docker.get("brand_key") in ROCM_BRAND_KEYS else "CUDA_VISIBLE_DEVICES"


def _gpu_set(dep: Deployment, host: HostInput, env: Mapping[str, str]) -> Optional[List[int]]:
    """The host's vllm_fleet_gpus, checked against what the host reports (when its GPU facts
    were read), the deployment shape and the environment; None: every GPU."""
    gpus = host.settings.get("gpus")
    if gpus is None:
        return None
    gpus = [int(g) for g in gpus]
    where = f"{host.name}: vllm_fleet_gpus"
    if dep.deploy_type == "pd_cluster":
        dep.problems.append(f"{where}: does not apply to P/D deployments (their pools split the host's GPUs "
                            f"themselves); leave it unset")
        return None
    have = int(host.gpu.get("count") or 0)
    if host.gpu.get("brand") is not None and host.gpu.get("brand") not in ("nvidia", "amd"):
        dep.problems.append(f"{where}: this host reports no GPUs (GPU facts: {host.gpu.get('brand')}); "
                            f"leave it unset")
    elif have and max(gpus) >= have and host.fit_layout:
        missing = [g for g in gpus if g >= have]
        dep.problems.append(f"{where}: GPU {', '.join(map(str, missing))} does not exist: the host has {have} "
                            f"GPUs (0-{have - 1})")
    for key in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        if key in env:
            dep.problems.append(f"{host.name}: vllm_fleet_env: {key} contradicts vllm_fleet_gpus; "
                                f"choose the GPUs in one place (vllm_fleet_gpus)")
    return gpus


def _service_process(dep: Deployment, slot: Slot, files: Dict[str, Dict[str, Any]], argv: List[str],
                     env: Dict[str, str], values: Mapping[str, str], resolved, engine_host: bool) -> PlannedProcess:
    """A cluster service under systemd: vllm-router, mooncake_master, mooncake_store (its config
    file), with its pip packages and how its readiness is probed."""
    host, proc, settings = slot.host, slot.proc, dep.settings
    brand = "amd" if (dep.profile.get("brand") or "").lower() == "amd" else "nvidia"
    if proc.kind == "router":
        argv = router_metrics(router_argv(argv), settings.get("router_metrics_port"))
        version = settings.get("router_version")
        packages = ["vllm-router" + (f"=={version}" if version else "")]
        port: Optional[int] = int_flag(argv, "--port", int(values["ROUTER_PORT"]))
        health: Dict[str, Any] = {"kind": "router"}
    else:
        # a services-only host has no GPU: it gets Mooncake's non-CUDA build
        packages = _mooncake_packages(dep, brand if engine_host else "amd")
        port = None
        health = {"kind": "alive"}
        if proc.kind == "mooncake_master":
            # the RPC port is what clients use; readiness is the admin server's /health
            port = int_flag(argv, "-rpc_port", 50051)
            health = {"kind": "http", "port": int_flag(argv, "-metrics_port", 9003)}
        if proc.kind == "mooncake_store":
            path = values["MOONCAKE_STORE_CONFIG_PATH"]
            # the store service refuses a config without local_hostname (the recipe has none):
            # it is the address this store registers with the master
            template = dict(as_map(proc.config))
            template.setdefault("local_hostname", host.address or "")
            files[path] = {"path": path, "mode": "0644",
                           "content": _config_json(dep, template, "the Mooncake store config",
                                                   resolved, store=True)}
    router = proc.kind == "router"
    return PlannedProcess(
        name=slot.name, kind=proc.kind, role=proc.role, rank=proc.rank, phase=slot.phase,
        runtime="service", version=None, argv=argv, env=env, port=port, serves_http=router,
        health=health, bind=bind_of(argv) if router else None,
        probe_host=probe_host_of(argv) if router else "127.0.0.1", packages=packages,
        secret_env=secret_table.for_process(as_list(settings.get("secrets")), proc.kind, bool(dep.store)))


def credential(deployment: str, secret: str) -> Dict[str, str]:
    """Where a file-passed secret lives on the host (``/etc/vllm-fleet/<deployment>/secrets/``,
    root only) and how the process finds it: ``env`` names the path variable, ``name`` the
    systemd credential (``%d/<name>``, LoadCredential= of ``path``)."""
    spec = secret_table.BY_ENV[secret]
    return {"secret": secret, "name": spec.file, "env": spec.file_env, "var": spec.var,
            "path": f"{secrets_dir(deployment)}/{spec.file}"}
