"""Prometheus scrape targets of a fleet, from its host plans: one file_sd group per process that
exports metrics, labelled so that a dashboard and alert rules slice by deployment and instance.

Targets (each serves ``/metrics``), one file per job (playbooks/monitoring.yml writes them):
- ``vllm``: every vLLM server (kind vllm or omni) with an HTTP port;
- ``router``: every vllm-router, at its ``--prometheus-port`` (the plan always gives one:
  planargv.router_metrics) on its ``--prometheus-host``;
- ``mooncake``: every Mooncake master's admin server (``-metrics_port``, its health port).

Labels: ``deployment``; ``instance``: ``<host>/<process>``, unique, so that two targets never
share a label set (Prometheus would keep one) and a panel names what it shows; ``unit``: the
rollout instance (``i0``, ``pd``); ``replica``, ``rank``, ``role``, ``host``, ``kind`` where the
plan has them. A process bound to loopback only is scraped on 127.0.0.1 when Prometheus runs on
its host, and is otherwise returned in ``unreachable`` with the reason, never dropped silently.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from .layout import PROMETHEUS_DROPIN
from .planargv import LOOPBACK, flag_values

VLLM_KINDS = ("vllm", "omni")
JOBS = ("vllm", "router", "mooncake")
ANY = (None, "0.0.0.0", "::", "[::]")


def _address(plan: Mapping[str, Any], bind: Optional[str], local: bool) -> Optional[str]:
    """Where Prometheus reaches a process bound to ``bind`` (None: every interface): its host's
    address, or loopback when Prometheus runs on that host; None when it binds to loopback only
    and Prometheus is elsewhere."""
    if bind in LOOPBACK:
        return "127.0.0.1" if local else None
    if bind in ANY:
        return "127.0.0.1" if local else plan.get("address")
    return str(bind)


def _hostport(address: str, port: Any) -> str:
    address = address.strip("[]")
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _labels(host: str, plan: Mapping[str, Any], proc: Mapping[str, Any]) -> Dict[str, str]:
    labels = {"deployment": plan.get("deployment"), "instance": f"{host}/{proc.get('name')}",
              "instance_name": plan.get("instance_name"), "replica": proc.get("replica"), "rank": proc.get("rank"),
              "role": proc.get("role"), "host": host, "kind": proc.get("kind")}
    return {k: str(v) for k, v in labels.items() if v is not None}


def targets(plans: Mapping[str, Mapping[str, Any]], monitor_host: Optional[str] = None) -> Dict[str, Any]:
    """``{"vllm": [group...], "router": [...], "mooncake": [...], "unreachable": [why...]}`` for the
    host plans ``{host: plan}``. ``monitor_host``: the inventory host Prometheus runs on (its own
    processes are scraped on 127.0.0.1); None: elsewhere (the controller)."""
    out: Dict[str, Any] = {job: [] for job in JOBS}
    out["unreachable"] = []
    for host in sorted(plans):
        plan = plans[host] or {}
        local = monitor_host is not None and host == monitor_host
        for proc in plan.get("processes") or []:
            kind = proc.get("kind")
            argv = [str(a) for a in proc.get("argv") or []]
            if kind in VLLM_KINDS and proc.get("serves_http") and proc.get("port"):
                job, port, bind = "vllm", proc["port"], proc.get("bind")
            elif kind == "router" and flag_values(argv, "--prometheus-port"):
                job, port = "router", flag_values(argv, "--prometheus-port")[-1]
                bind = (flag_values(argv, "--prometheus-host") or ["127.0.0.1"])[-1]   # vllm-router's default
            elif kind == "mooncake_master" and (proc.get("health") or {}).get("port"):
                job, port, bind = "mooncake", proc["health"]["port"], None
            else:
                continue
            address = _address(plan, bind, local)
            if not address:
                out["unreachable"].append(f"{host} {proc.get('name')}: its {job} metrics listen on {bind} only; "
                                          f"a Prometheus elsewhere cannot scrape them (set vllm_fleet_monitoring_host "
                                          f"to {host}, or vllm_fleet_listen)")
                continue
            out[job].append({"targets": [_hostport(str(address), port)], "labels": _labels(host, plan, proc)})
    return out


def files(found: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The file_sd files: ``[{"job", "name": "vllm-fleet-<job>.json", "groups"}]``, one per job,
    written even when empty (Prometheus then drops targets that are gone); where each goes:
    :func:`paths`' ``targets``."""
    return [{"job": job, "name": f"vllm-fleet-{job}.json", "groups": list(found.get(job) or [])} for job in JOBS]


def summary(found: Mapping[str, Any]) -> str:
    counts = ", ".join(f"{len(found.get(job) or [])} {job}" for job in JOBS)
    left = found.get("unreachable") or []
    return f"scrape targets: {counts}" + (f"; not scrapable from there: {'; '.join(left)}" if left else "")


RULES = "vllm-fleet-rules.yml"
DASHBOARD = "vllm-fleet-dashboard.json"
PART = "prometheus-vllm-fleet.yml"


def paths(directory: str) -> Dict[str, Any]:
    """Every file monitoring.yml and roles/vllm_fleet_prometheus write in ``directory``
    (vllm_fleet_monitoring_dir), the one place they are named: ``targets`` (job -> its file_sd
    file), ``rules``, ``dashboard``, ``part`` (the prometheus.yml part for an existing Prometheus)
    and ``config`` (the whole prometheus.yml of an installed one), and outside it the installed
    one's systemd drop-in (``dropin_dir``, ``dropin``). The playbook reads them as
    ``vllm_fleet_run.monitoring_paths``."""
    base = directory.rstrip("/") or "/"
    return {"dir": base, "targets": {job: f"{base}/vllm-fleet-{job}.json" for job in JOBS},
            "rules": f"{base}/{RULES}", "dashboard": f"{base}/{DASHBOARD}", "part": f"{base}/{PART}",
            "config": f"{base}/prometheus.yml", "dropin_dir": PROMETHEUS_DROPIN,
            "dropin": f"{PROMETHEUS_DROPIN}/vllm-fleet.conf"}


def prometheus_config(directory: str, interval: str = "15s") -> Dict[str, Any]:
    """The part of a prometheus.yml that reads the fleet: one scrape job per target file (file_sd,
    re-read when monitoring.yml rewrites it) and the alert rules, all under ``directory``."""
    where = paths(directory)
    return {"rule_files": [where["rules"]],
            "scrape_configs": [{"job_name": f"vllm-fleet-{job}", "scrape_interval": interval,
                                "file_sd_configs": [{"files": [where["targets"][job]]}]}
                               for job in JOBS]}


def prometheus_yml(directory: str, interval: str = "15s") -> Dict[str, Any]:
    """A whole prometheus.yml for a Prometheus that monitors only the fleet (monitoring.yml with
    vllm_fleet_monitoring_install): scrape and rule evaluation every ``interval``, and
    :func:`prometheus_config`'s jobs and rules."""
    return {"global": {"scrape_interval": interval, "evaluation_interval": interval},
            **prometheus_config(directory, interval)}


def listen_url(listen: str) -> str:
    """Where the monitoring host itself reaches a Prometheus bound to ``listen`` (``ADDRESS:PORT``):
    loopback for every-interface binds."""
    host, _, port = listen.rpartition(":")
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{port}"


def fleet_targets(hostvars: Mapping[str, Any], hosts: Sequence[str], monitor_host: Optional[str] = None) -> Dict[str, Any]:
    """targets() of the hosts' plans (filter ``hostvars | vllm_fleet_monitoring_targets(hosts, monitor_host)``);
    hosts without a plan deploy nothing and are left out."""
    plans = {}
    for host in hosts:
        plan = hostvars[host].get("vllm_fleet_plan") if host in hostvars else None
        if plan:
            plans[str(host)] = plan
    found = targets(plans, monitor_host or None)
    found["files"] = files(found)
    found["summary"] = summary(found)
    return found


def fleet_prometheus_config(directory: str, interval: str = "15s") -> Dict[str, Any]:
    """Filter ``dir | vllm_fleet_monitoring_prometheus_config``."""
    return prometheus_config(directory, interval)
