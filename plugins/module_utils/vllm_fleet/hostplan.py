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
    """A dataclass field with its description (``metadata["doc"]``), which :func:`argument_spec`
    gives the roles' argument_specs; keyword arguments (default, default_factory) go to field()."""
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

    def to_dict(self, with_drain: bool = True) -> Dict[str, Any]:
        """The plan's dict; ``with_drain=False``: what the host plan's hash covers, which leaves
        out ``drain`` and the accelerator blocks (``container``, ``unit``): hashing these new keys
        would change every host's hash (accelerator.py folds a changed setting into ``hash``)."""
        out = asdict(self)
        if not with_drain:
            # compile_cache: its path is in env, which is hashed
            for key in ("drain", "container", "unit", "workers", "stop_timeout", "membership", "compile_cache"):
                del out[key]
        for key in ("gpus", "replica", "devices", "cpus", "capabilities", "container", "unit", "workers",
                    "stop_timeout", "membership", "compile_cache"):
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
    unit: Optional[str] = _doc("its failure/rollout unit: i<N>, or pd for a P/D cluster")
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
        "the package set>), python (what the venv is made with); left out without uv engines. Not hashed (its "
        "parts are: the version and packages in the processes, the Python a host fact)", default=None)
    layout: Dict[str, Any] = _doc(
        "every path of the deployment on this host (layout.deployment_layout): config_dir, venv_dir, overrides, "
        "services_dir, services_venv, hf_cache, compile_cache, record_dir, legacy_marker, kept_suffix, and the host's "
        "roots (uv_root, services_root, workdir, hf_cache_shared, state_dir, uv_tools, uv_bin, roots: what teardown "
        "removes from). The roles, teardown and the records read paths here. Not hashed", default_factory=dict)
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


# ---- the roles' argument_specs of vllm_fleet_plan ----------------------------------------------
# Role argument validation refuses keys a spec does not declare, so the spec is derived from the
# dataclasses above (every field, with its type and description) and written into each role's
# meta/argument_specs.yml between these markers: `python3 -m vllm_fleet.hostplan --update-specs`.

SPEC_BEGIN = "# BEGIN generated by python3 -m vllm_fleet.hostplan --update-specs (do not edit)"
SPEC_END = "# END generated by python3 -m vllm_fleet.hostplan --update-specs"
SPEC_ANCHOR = "vllm_fleet_plan"
PLAN_DESCRIPTION = ("This host's plan, set by the vllm_fleet_plan action (hostplan.HostPlan.to_dict(); "
                    "`vllm-fleet plan` prints it).")
_SIMPLE = {str: "str", int: "int", float: "float", bool: "bool"}


def _spec_type(hint: Any, where: str) -> Dict[str, Any]:
    """type / elements / options of one field's annotation (Optional[X] is X: None passes)."""
    import types
    import typing

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"{where}: {hint} has no argument_spec type (one type, or Optional of one)")
        return _spec_type(rest[0], where)
    if hint is Any:
        return {"type": "raw"}
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    if origin in (dict, Dict) or hint in (dict, Dict):
        return {"type": "dict"}      # free-form (env, health, drain, ...): no suboptions
    if origin in (list, List):
        inner = args[0] if args else Any
        if hasattr(inner, "__dataclass_fields__"):
            return {"type": "list", "elements": "dict", "options": _options(inner)}
        element = _spec_type(inner, where)
        if "options" in element or element["type"] == "list":
            raise TypeError(f"{where}: {hint}: lists of lists have no argument_spec type")
        return {"type": "list", "elements": element["type"]}
    raise TypeError(f"{where}: {hint} has no argument_spec type")


def _options(cls: type) -> Dict[str, Dict[str, Any]]:
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    out: Dict[str, Dict[str, Any]] = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        optional = type(None) in typing.get_args(hint)   # Optional[X], X | None
        spec = _spec_type(hint, f"{cls.__name__}.{f.name}")
        entry: Dict[str, Any] = {"type": spec["type"]}
        if "elements" in spec:
            entry["elements"] = spec["elements"]
        # to_dict() always carries a field that cannot be None; an Optional one may be None, or
        # left out (gpus, replica, devices, cpus, gpus_idle when None)
        entry["required"] = not optional
        entry["description"] = f.metadata.get("doc") or f.name.replace("_", " ")
        if "options" in spec:
            entry["options"] = spec["options"]
        out[f.name] = entry
    return out


def argument_spec() -> Dict[str, Any]:
    """The argument_spec option of ``vllm_fleet_plan`` (roles' meta/argument_specs.yml): every
    HostPlan field, ``processes`` with every PlannedProcess field as suboptions."""
    return {"type": "dict", "required": True, "description": PLAN_DESCRIPTION, "options": _options(HostPlan)}


def spec_block(indent: str) -> str:
    """The generated block (markers included) at ``indent`` (the options' indentation)."""
    import yaml

    body = yaml.safe_dump({SPEC_ANCHOR: argument_spec()}, sort_keys=False, default_flow_style=False,
                          width=110, allow_unicode=True)
    lines = body.splitlines()
    assert lines[0] == f"{SPEC_ANCHOR}:", lines[0]
    lines[0] = f"{SPEC_ANCHOR}: &{SPEC_ANCHOR}"
    return "\n".join([indent + SPEC_BEGIN] + [indent + line for line in lines] + [indent + SPEC_END]) + "\n"


def _declaration_end(lines: List[str], start: int) -> int:
    """The line after an option's declaration (its more-indented lines)."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    return end


def updated_specs(text: str, where: str) -> str:
    """One argument_specs.yml with its vllm_fleet_plan block (re)generated. A file without the
    markers gets them in place of its first ``vllm_fleet_plan:`` declaration, and its other
    declarations become ``vllm_fleet_plan: *vllm_fleet_plan``."""
    import re

    lines = text.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.strip() == SPEC_BEGIN]
    ends = [i for i, line in enumerate(lines) if line.strip() == SPEC_END]
    if len(begins) > 1 or len(ends) != len(begins) or (begins and ends[0] < begins[0]):
        raise ValueError(f"{where}: expected one pair of markers ({SPEC_BEGIN!r} ... {SPEC_END!r})")
    declaration = re.compile(rf"^(\s+){SPEC_ANCHOR}:(.*)$")
    if begins:
        indent = lines[begins[0]][: len(lines[begins[0]]) - len(lines[begins[0]].lstrip())]
        lines[begins[0]: ends[0] + 1] = [spec_block(indent)]
        first = begins[0]
    else:
        first = next((i for i, line in enumerate(lines) if declaration.match(line.rstrip("\n"))), None)
        if first is None:
            return text
        indent = declaration.match(lines[first].rstrip("\n")).group(1)
        lines[first: _declaration_end(lines, first)] = [spec_block(indent)]
    out: List[str] = []
    for i, line in enumerate(lines):
        m = declaration.match(line.rstrip("\n")) if i != first else None
        if m and m.group(2).strip() != f"*{SPEC_ANCHOR}":
            end = _declaration_end(lines, i)
            out.append(f"{m.group(1)}{SPEC_ANCHOR}: *{SPEC_ANCHOR}\n")
            lines[i + 1: end] = [""] * (end - i - 1)
            continue
        out.append(line)
    return "".join(out)


def spec_files(roles_dir: str) -> List[str]:
    """The roles' meta/argument_specs.yml that declare vllm_fleet_plan."""
    import os
    import re

    found = []
    for role in sorted(os.listdir(roles_dir)):
        path = os.path.join(roles_dir, role, "meta", "argument_specs.yml")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                if re.search(rf"^\s+{SPEC_ANCHOR}:", handle.read(), re.M):
                    found.append(path)
    return found


def outdated_specs(roles_dir: str, write: bool = False) -> List[str]:
    """The argument_specs files whose vllm_fleet_plan block is not what this module generates
    (rewritten when ``write``)."""
    outdated = []
    for path in spec_files(roles_dir):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        new = updated_specs(text, path)
        if new != text:
            outdated.append(path)
            if write:
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(new)
    return outdated


def main(argv: Optional[List[str]] = None) -> int:
    import argparse
    import os
    import sys

    import yaml

    default_roles = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "roles")
    parser = argparse.ArgumentParser(
        prog="python3 -m vllm_fleet.hostplan",
        description="Print the argument_spec of vllm_fleet_plan, or write it into the roles' meta/argument_specs.yml.")
    parser.add_argument("--update-specs", action="store_true", help="rewrite the generated blocks of the roles")
    parser.add_argument("--check", action="store_true", help="exit 1 when a role's block is out of date")
    parser.add_argument("--roles", default=os.path.normpath(default_roles), help="roles directory (default: %(default)s)")
    args = parser.parse_args(argv)
    if not (args.update_specs or args.check):
        print(yaml.safe_dump({SPEC_ANCHOR: argument_spec()}, sort_keys=False, width=110), end="")
        return 0
    if not os.path.isdir(args.roles):
        parser.error(f"--roles {args.roles}: not a directory")
    try:
        outdated = outdated_specs(args.roles, write=args.update_specs)
    except ValueError as exc:
        print(f"vllm_fleet.hostplan: {exc}", file=sys.stderr)
        return 2
    for path in outdated:
        print(f"{'updated' if args.update_specs else 'out of date'}: {path}", file=sys.stderr)
    return 1 if outdated and args.check and not args.update_specs else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
