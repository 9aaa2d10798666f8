"""Check mode on fresh hosts: `deploy.yml --check --diff` exits 0 and changes nothing.

Two fresh CPU test hosts, one per runtime (docker, uv + systemd), the CPU recipe as in
test_cpu_serving.py. Before and after the check run each host is read the same way: the
bundle's roots (/opt/vllm-fleet, /etc/vllm-fleet, /var/lib/vllm-fleet) must not exist, the
systemd unit directory, the user and group databases and the installed packages must be the
same, no vllm-fleet unit may be known to systemd; on the docker engine no container of the
deployment may exist.
"""

from __future__ import annotations

import pytest

from helpers import MINILM, MINILM_DIR, docker_inspect, host_exec, playbook

pytestmark = pytest.mark.e2e

MODEL_DIR = MINILM_DIR
COMMON = MINILM
GROUPS = {
    "check_docker": {"hosts": {"chk-a": "none"},
                     "vars": {"vllm_fleet_runtime": "docker", "vllm_fleet_deployment": "minilm-check-docker",
                              "vllm_fleet_docker_pull": "never", "vllm_fleet_cpu_shm_size": "1g"}},
    "check_uv": {"hosts": {"chk-b": "none"},
                 "vars": {"vllm_fleet_runtime": "uv", "vllm_fleet_deployment": "minilm-check-uv",
                          "vllm_fleet_vllm_version": "0.32.0", "vllm_fleet_uv_wheelhouse": "/srv/wheels"}},
}
ROOTS = ("/opt/vllm-fleet", "/etc/vllm-fleet", "/var/lib/vllm-fleet")
# Everything a deploy could leave on a host, read in one command (stable when nothing changes).
SNAPSHOT = r"""
for p in /opt/vllm-fleet /etc/vllm-fleet /var/lib/vllm-fleet; do [ -e "$p" ] && echo "EXISTS $p"; done
find /etc/systemd/system /usr/local/lib/systemd /run/systemd/system /etc/passwd /etc/group /etc/shadow \
     -xdev \( -type f -o -type l \) -printf '%p %s %T@ %l\n' 2>/dev/null | sort
echo "units: $(systemctl list-units --all --no-legend --plain 'vllm-fleet*' | wc -l)"
echo "unit files: $(systemctl list-unit-files --no-legend 'vllm-fleet*' | wc -l)"
echo "user: $(getent passwd vllm-fleet || echo none)"
echo "packages: $(dpkg-query -W -f '${Package} ${Version} ${Status}\n' | sort | md5sum)"
"""


@pytest.fixture(scope="module")
def fresh_fleet(make_fleet):
    return make_fleet("check", GROUPS, COMMON)


def snapshot(container: str) -> str:
    proc = host_exec(container, ["sh", "-c", SNAPSHOT])
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_check_mode_on_fresh_hosts_exits_0_and_changes_nothing(fresh_fleet):
    hosts = {h: fresh_fleet.container(h) for h in ("chk-a", "chk-b")}
    before = {h: snapshot(c) for h, c in hosts.items()}
    for h, snap in before.items():
        assert "EXISTS" not in snap, (h, snap)          # really fresh
        assert "units: 0" in snap and "user: none" in snap, (h, snap)
    run = playbook("deploy.yml", fresh_fleet.inventory, "--check", "--diff", "-l", "check_docker,check_uv")
    assert run.rc == 0, run
    for h in hosts:
        assert run.recap[h]["failed"] == 0 and run.recap[h]["unreachable"] == 0, run
    assert "stopped on all its nodes" not in run.out, run
    # --check --diff shows each host's exact command
    assert f"vllm serve {MODEL_DIR} --shutdown-timeout 120 --runner pooling" in " ".join(run.out.split()), run   # (wrapped lines)
    after = {h: snapshot(c) for h, c in hosts.items()}
    for h in hosts:
        assert after[h] == before[h], (h, before[h], after[h])
        for root in ROOTS:
            assert host_exec(hosts[h], ["test", "-e", root]).returncode != 0, (h, root)
    assert docker_inspect("vllm-fleet-minilm-check-docker") is None
    state = host_exec(hosts["chk-b"], ["systemctl", "show", "-p", "LoadState", "vllm-fleet-minilm-check-uv.service"])
    assert state.stdout.strip() == "LoadState=not-found", state.stdout
