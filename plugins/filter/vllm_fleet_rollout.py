# -*- coding: utf-8 -*-
"""Filters of the rollout (playbooks/_deploy.yml, rollback.yml, status.yml): the order of the
engine hosts in batches, which nodes and batches failed, deployment-wide revision numbers, what
status reports from the hosts' records, and the run report (outcomes per instance, the serving
capacity floor and each instance's time out of service)."""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping

# The engine (plugins/module_utils/vllm_fleet) is the installed `vllm_fleet` package (`pip install -e .`).
# Imported plainly: every playbook starts with the plan action (playbooks/_plan.yml), whose one
# import guard (plugins/action/vllm_fleet_plan.py) says what to install when it is missing.
from vllm_fleet.rollout import rollout as _rollout
from vllm_fleet.rollout import membership_calls, membership_changes, router_reconcile, rollout_batches
from vllm_fleet.serving import drain_outcome, in_flight
from vllm_fleet import status as _status
from vllm_fleet.monitoring import fleet_prometheus_config, fleet_targets, listen_url, prometheus_yml
from vllm_fleet import bench as _bench



def failed_nodes(hostvars, hosts, alive=None) -> dict:
    """Nodes among ``hosts`` that recorded a deploy failure, or left the play (``alive``)."""
    out = {}
    for host in hosts:
        failure = hostvars[host].get("vllm_fleet_deploy_failure") if host in hostvars else None
        if failure:
            out[str(host)] = str(failure).strip()
        elif alive is not None and host not in alive:
            out[str(host)] = "not in the play any more (unreachable, or failed earlier)"
    return out


FAILED_OUTCOMES = ("rolled back", "stopped", "failed")


def batch_failed_share(hostvars, hosts) -> float:
    """Percentage of the instances among ``hosts`` (a rollout batch) that did not reach their new
    revision (any node rolled back, stopped, failed or gone)."""
    instances, failed = set(), set()
    for host in hosts:
        facts = hostvars[host] if host in hostvars else {}
        plan = facts.get("vllm_fleet_plan") or {}
        key = (plan.get("deployment"), plan.get("instance_name"))
        instances.add(key)
        if facts.get("vllm_fleet_outcome") in FAILED_OUTCOMES or facts.get("vllm_fleet_deploy_failure"):
            failed.add(key)
    return 100.0 * len(failed) / len(instances) if instances else 0.0


def all_current(hostvars, hosts) -> bool:
    """Every one of ``hosts`` already runs its plan, healthy (vllm_fleet_current facts)."""
    return bool(hosts) and all(bool(hostvars[h].get("vllm_fleet_current")) if h in hostvars else False
                               for h in hosts)


def _recorded_numbers(hostvars, hosts, deployment, var) -> dict:
    """Revision numbers of ``deployment`` each of ``hosts`` recorded, from the registered result
    of a vllm_fleet_revision read or of vllm_fleet_state (``var``; both return ``deployments``);
    hosts without that result are left out."""
    out = {}
    for host in hosts:
        hv = hostvars[host] if host in hostvars else {}
        plan, read = hv.get("vllm_fleet_plan"), hv.get(var)
        if not plan or not isinstance(read, dict) or plan.get("deployment") != deployment:
            continue
        entry = (read.get("deployments") or {}).get(deployment) or {}
        out[str(host)] = sorted(int(r["number"]) for r in entry.get("revisions") or [])
    return out


def next_revision(hostvars, hosts, deployment, var="vllm_fleet_deploy_state") -> int:
    """The number of a deployment's next revision: one above the newest any of its hosts
    recorded, so one number names one change of the whole deployment (a host whose plan did
    not change keeps its older revision, which is what it ran at that number)."""
    numbers = [n for ns in _recorded_numbers(hostvars, hosts, deployment, var).values() for n in ns]
    return max(numbers, default=0) + 1


def rollback_target(hostvars, hosts, deployment, wanted, var="vllm_fleet_rollback_have") -> dict:
    """The deployment revision rollback.yml goes back to: ``previous`` (the one before the
    newest any host recorded) or a number some host recorded. Returns {number, error}."""
    known = sorted({n for ns in _recorded_numbers(hostvars, hosts, deployment, var).values() for n in ns})
    listed = ", ".join(map(str, known)) or "none"
    wanted = str(wanted).strip()
    if wanted == "previous":
        if len(known) < 2:
            return {"number": None, "error": f"deployment {deployment} has no previous revision "
                                             f"(recorded revisions: {listed})"}
        return {"number": known[-2], "error": ""}
    if not re.match(r"^[0-9]{1,9}\Z", wanted) or int(wanted) not in known:
        return {"number": None, "error": f"deployment {deployment} has no revision {wanted} "
                                         f"(recorded revisions: {listed})"}
    return {"number": int(wanted), "error": ""}


def status_processes(recorded, plan=None) -> list:
    """What status.yml reports on a host: every process of every deployment the host recorded
    (its current revision), and today's planned processes of a deployment it never recorded.
    Each: deployment, revision (None: never deployed), recipe, instance_name (the host's instance), the
    process, and ``inventory``:
    ``current`` (today's plan is what runs), ``changed`` (deploy.yml would change it),
    ``orphan`` (no longer in the inventory) or ``not deployed``."""
    out = []
    today = (plan or {}).get("deployment")
    for name, entry in sorted((recorded or {}).items()):
        record = entry.get("record") or {}
        rplan = record.get("plan") or {}
        if name != today:
            inventory = "orphan"
        else:
            inventory = "current" if record.get("hash") == (plan or {}).get("hash") else "changed"
        for proc in rplan.get("processes") or []:
            out.append({"deployment": name, "revision": entry.get("current"), "recipe": rplan.get("recipe"),
                        "instance_name": rplan.get("instance_name"), "process": proc, "inventory": inventory})
    if today and today not in (recorded or {}):
        for proc in plan.get("processes") or []:
            out.append({"deployment": today, "revision": None, "recipe": plan.get("recipe"), "instance_name": plan.get("instance_name"),
                        "process": proc, "inventory": "not deployed"})
    return out


def rollout(hostvars, hosts) -> dict:
    """Engine hosts in rollout order and Ansible's serial list (hosts per batch).

    Instances whose hosts all run their plan already (the re-run fast path) are left out."""
    plans = {}
    for host in hosts:
        plan = hostvars[host].get("vllm_fleet_plan")
        if plan and not all_current(hostvars, plan.get("instance_hosts") or [host]):
            plans[str(host)] = plan
    return _rollout(plans)


# An instance's outcome is the worst of its nodes'.
_OUTCOME_ORDER = ("failed", "stopped", "rolled back", "not reached", "updated", "unchanged")


def host_result(facts, in_play=True) -> str:
    """What a run did to one host (the summary's words: deployed, unchanged, rolled back,
    stopped, failed, not reached), from the facts the plays leave (vllm_fleet_outcome,
    vllm_fleet_deploy_failure, vllm_fleet_current, vllm_fleet_rollout_stopped); ``in_play``:
    the host is still in the play."""
    outcome = facts.get("vllm_fleet_outcome") or ""
    if outcome in ("rolled back", "stopped", "failed", "not reached"):
        return outcome
    if not in_play or facts.get("vllm_fleet_deploy_failure") is not None:
        return "failed"
    if facts.get("vllm_fleet_current"):
        return "unchanged"
    if not outcome and facts.get("vllm_fleet_rollout_stopped") and (facts.get("vllm_fleet_plan") or {}).get("batch") is not None:
        return "not reached"
    return "deployed"


def _instance_outcome(facts, in_play) -> str:
    """A node's share of its instance's outcome: :func:`host_result`, with ``updated`` for a
    node that reached its new revision (and ``unchanged`` for one that ran it already)."""
    if facts.get("vllm_fleet_current"):
        return "unchanged"
    result = host_result(facts, in_play)
    return "updated" if result == "deployed" else result


def rollout_report(hostvars, hosts, alive=None) -> dict:
    """What the rollout did to each deployment, from the facts the rollout play leaves on its
    hosts (vllm_fleet_outcome, vllm_fleet_current, vllm_fleet_deploy_failure, and the controller
    times vllm_fleet_out_at (before the drain, or the stop where there is no router) and
    vllm_fleet_back_at (back in the router, or healthy)).

    Per deployment: ``instances``, ``outcomes`` (outcome -> instance count; an instance has the
    worst outcome of its nodes), ``new`` (instances with no earlier revision: not serving before),
    ``serving_before``, ``floor`` (fewest of those serving at any moment of the run: an instance
    is out from its first node's out_at to its last node's back_at, to the end of the run when
    it did not come back; a node that left the play is out for the whole run), ``downtime``
    (instance -> seconds out, None = not back), ``downtime_median`` / ``downtime_max`` over
    the instances that came back, and ``restored`` (rolled-back instance -> seconds from the
    start of its restore (vllm_fleet_restore_at) to back in service), ``drained`` (instance ->
    its drain: seconds, requests left in flight, graceful; from vllm_fleet_drain_report).
    ``alive``: the hosts still in the play (None: all)."""
    instances = {}
    for host in hosts:
        facts = hostvars[host] if host in hostvars else {}
        plan = facts.get("vllm_fleet_plan") or {}
        if plan.get("batch") is None or plan.get("instance_name") is None:
            continue   # no engine here (router, services only, or nothing to deploy)
        key = (str(plan["deployment"]), str(plan["instance_name"]))
        inst = instances.setdefault(key, {"outcomes": [], "out": [], "back": [], "restore": [], "new": False,
                                          "lost": False, "drain": []})
        inst["drain"] += [r for r in (facts.get("vllm_fleet_drain_report") or {}).values() if isinstance(r, Mapping)]
        in_play = alive is None or host in alive
        inst["outcomes"].append(_instance_outcome(facts, in_play))
        inst["new"] = inst["new"] or bool(facts.get("vllm_fleet_first_deploy"))
        if not in_play and not facts.get("vllm_fleet_current"):
            inst["lost"] = True
        if facts.get("vllm_fleet_out_at") not in (None, ""):
            inst["out"].append(float(facts["vllm_fleet_out_at"]))
            back = facts.get("vllm_fleet_back_at")
            inst["back"].append(float(back) if back not in (None, "") else None)
        if facts.get("vllm_fleet_restore_at") not in (None, ""):
            inst["restore"].append(float(facts["vllm_fleet_restore_at"]))
    out = {}
    for (deployment, name), inst in sorted(instances.items()):
        dep = out.setdefault(deployment, {"instances": 0, "outcomes": {}, "new": 0, "serving_before": 0,
                                          "floor": None, "downtime": {}, "restored": {}, "drained": {},
                                          "_intervals": []})
        outcome = min(inst["outcomes"], key=_OUTCOME_ORDER.index)
        dep["instances"] += 1
        dep["outcomes"][outcome] = dep["outcomes"].get(outcome, 0) + 1
        if inst["new"]:
            dep["new"] += 1
            continue
        dep["serving_before"] += 1
        if inst["drain"]:
            dep["drained"][name] = _drain_summary(inst["drain"])
        if inst["lost"]:
            dep["_intervals"].append((float("-inf"), float("inf")))
            dep["downtime"][name] = None
        elif inst["out"]:
            start = min(inst["out"])
            back = None if None in inst["back"] else max(inst["back"])
            dep["_intervals"].append((start, float("inf") if back is None else back))
            dep["downtime"][name] = None if back is None else round(back - start, 1)
            if outcome == "rolled back" and back is not None and inst["restore"]:
                dep["restored"][name] = round(back - min(inst["restore"]), 1)
    for dep in out.values():
        events = sorted([(s, 1) for s, _ in dep["_intervals"]] + [(e, -1) for _, e in dep["_intervals"]],
                        key=lambda ev: (ev[0], ev[1]))   # an end before a start at the same time
        down = most = 0
        for _, step in events:
            down += step
            most = max(most, down)
        dep["floor"] = dep["serving_before"] - most if dep["serving_before"] else None
        back = [s for s in dep["downtime"].values() if s is not None]
        dep["downtime_median"] = round(statistics.median(back), 1) if back else None
        dep["downtime_max"] = max(back) if back else None
        del dep["_intervals"]
    return out


def _drain_summary(reports) -> dict:
    """One instance's drain (its processes' drain_outcome reports): ``seconds`` (the longest),
    ``left`` (requests in flight when the wait ended, summed; None when a count was unread),
    ``graceful`` (every process stops with vLLM's graceful shutdown)."""
    unread = any(not r.get("read") for r in reports)
    seconds = [float(r["seconds"]) for r in reports if r.get("seconds") not in (None, "")]
    return {"seconds": max(seconds) if seconds else None,
            "left": None if unread else int(sum(float(r.get("left") or 0) for r in reports)),
            "graceful": all(r.get("graceful") for r in reports)}


def switch_steps(engines, previous=None, stale=(), batch=None) -> list:
    """The steps an instance's engines switch in on this host. Replicas
    (vllm_fleet_replicas_per_host) that run as planned already (same name and hash in the
    previous revision ``previous``, not ``stale`` by the state read) are left alone; the others
    go in batches as vllm_fleet_rollout_batch cuts instances (``batch``; default a canary of one,
    then 25 %), so the host's other replicas serve meanwhile. A first deploy (no previous
    revision) and hosts without replicas: every engine at once, one step. Always at least one
    step (it also stops the engines the new plan no longer has)."""
    engines = list(engines or [])
    if not isinstance(previous, Mapping) or not any(p.get("replica") is not None for p in engines):
        return [engines]
    ran = {p.get("name"): p.get("hash") for p in previous.get("processes") or []}
    changed = [p for p in engines if ran.get(p["name"]) != p.get("hash") or p["name"] in set(stale or [])]
    steps: list = []
    for proc, number in zip(changed, rollout_batches(len(changed), batch)):
        if number == len(steps):
            steps.append([])
        steps[number].append(proc)
    return steps or [[]]


def retired(previous, plan) -> list:
    """The engines of ``previous`` (the plan of the revision the host runs, as recorded; anything
    but a mapping on a first deploy) that ``plan`` (the new one) no longer has among its engines:
    fewer replicas, an instance renamed, one server becoming replicas. The rollout stops them at
    the switch (kept for a rollback); preflight counts the ports they hold as this deployment's."""
    if not isinstance(previous, Mapping):
        return []
    engines = {p.get("name") for p in (plan or {}).get("processes") or [] if p.get("phase") == "engine"}
    return [p for p in previous.get("processes") or [] if p.get("phase") == "engine" and p.get("name") not in engines]


def drained(processes) -> list:
    """The processes a router serves from (a ``drain`` target): what is drained before a switch
    and put back into rotation after it."""
    return [p for p in processes or [] if p.get("drain")]


class FilterModule:
    def filters(self):
        return {
            "vllm_fleet_failed_nodes": failed_nodes,
            "vllm_fleet_batch_failed_share": batch_failed_share,
            "vllm_fleet_all_current": all_current,
            "vllm_fleet_next_revision": next_revision,
            "vllm_fleet_status_processes": status_processes,
            "vllm_fleet_rollback_target": rollback_target,
            "vllm_fleet_rollout": rollout,
            "vllm_fleet_rollout_report": rollout_report,
            "vllm_fleet_host_result": host_result,
            "vllm_fleet_switch_steps": switch_steps,
            "vllm_fleet_retired": retired,
            "vllm_fleet_drained": drained,
            "vllm_fleet_membership_changes": membership_changes,
            "vllm_fleet_router_reconcile": router_reconcile,
            "vllm_fleet_membership_calls": membership_calls,
            "vllm_fleet_in_flight": in_flight,
            "vllm_fleet_drain_outcome": drain_outcome,
            "vllm_fleet_status_rows": _status.rows,
            "vllm_fleet_status_not_serving": _status.not_serving,
            "vllm_fleet_status_document": _status.document,
            "vllm_fleet_status_table": _status.table,
            "vllm_fleet_monitoring_targets": fleet_targets,
            "vllm_fleet_monitoring_prometheus_config": fleet_prometheus_config,
            "vllm_fleet_monitoring_prometheus_yml": prometheus_yml,
            "vllm_fleet_monitoring_listen_url": listen_url,
            "vllm_fleet_bench_targets": _bench.fleet_targets,
            "vllm_fleet_bench_canary": _bench.canary_targets,
            "vllm_fleet_bench_args": _bench.bench_args,
            "vllm_fleet_bench_settings": _bench.settings_of,
            "vllm_fleet_bench_reports": _bench.reports_dir,
        }
