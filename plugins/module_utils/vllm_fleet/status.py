"""What playbooks/status.yml reports: one row per process a host runs (or should run), one summary
per deployment, and the processes that make the play fail.

The rows are built from three readings the play makes on each host: the processes its records
hold (filter ``vllm_fleet_status_processes``), their runtime state (module
vllm_fleet_process_info) and the health module run once without waiting, with ``observe`` (its
``load``: requests running and waiting, KV-cache use, tokens/s, the vLLM version). "Serving" is
the health gate's verdict (module_utils serving: a real request answered by the process); a
process without HTTP (a Mooncake store) serves when it runs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Sequence

# the table's columns, in order (the JSON document carries every key of a row)
COLUMNS = ("host", "deployment", "rev", "recipe", "process", "role", "runtime", "state", "health", "model", "inventory",
           "version", "uptime", "restarts", "running", "waiting", "kv_pct", "tok_s")


def duration(seconds: Optional[float]) -> str:
    """``3d4h``, ``2h05m``, ``7m12s``, ``40s``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s >= 86400:
        return f"{s // 86400}d{s % 86400 // 3600}h"
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def _dash(value: Any) -> Any:
    return "-" if value is None else value


def row(host: str, proc: Mapping[str, Any], state: Mapping[str, Any], health: Mapping[str, Any]) -> Dict[str, Any]:
    """One process's row. ``proc``: an entry of vllm_fleet_status_processes; ``state``: its
    vllm_fleet_process_info entry; ``health``: its health-loop result (``skipped`` when the
    process has no HTTP gate or was never deployed)."""
    p = proc.get("process") or {}
    asked = not health.get("skipped")
    served = asked and health.get("health_seconds") is not None
    deployed = proc.get("revision") is not None
    if asked:
        serving, word = served, "serving" if served else "down"
    else:
        # no HTTP gate (a Mooncake store): it serves when it runs; never deployed: it does not
        serving, word = deployed and state.get("state") == "running", "-"
    load = (health.get("load") or {}) if asked else {}
    return {
        "host": host, "deployment": proc.get("deployment"), "instance": proc.get("instance_name"),
        "replica": p.get("replica"), "rank": p.get("rank"), "phase": p.get("phase"),
        "rev": proc.get("revision") if deployed else "-", "recipe": proc.get("recipe"),
        "process": p.get("name"), "role": p.get("role"), "runtime": p.get("runtime"),
        "state": state.get("state"), "health": word, "serving": bool(serving),
        "why": (health.get("msg") or "") if asked and not served else ("not deployed" if not deployed else ""),
        "version": load.get("version") or p.get("version") or "-",
        "uptime": duration(state.get("uptime_s")), "uptime_s": state.get("uptime_s"),
        "restarts": state.get("restarts", 0),
        "running": _dash(load.get("running")), "waiting": _dash(load.get("waiting")),
        "kv_pct": _dash(load.get("kv_cache_pct")), "tok_s": _dash(load.get("generation_tok_s")),
        "prompt_tok_s": load.get("prompt_tok_s"), "metrics_error": load.get("error"),
        "model": p.get("served_model_name") or p.get("kind"), "inventory": proc.get("inventory"),
    }


def rows(procs: Sequence[Mapping[str, Any]], states: Mapping[str, Any], healths: Mapping[str, Any],
         host: str) -> List[Dict[str, Any]]:
    """Host ``host``'s rows (filter ``procs | vllm_fleet_status_rows(states, healths, host)``):
    ``states`` is vllm_fleet_process_info's result, ``healths`` the health loop's registered
    result (one entry per process, in the same order)."""
    seen = (states or {}).get("processes") or []
    results = (healths or {}).get("results") or []
    if not (len(procs) == len(seen) == len(results)):
        raise ValueError(f"{host}: {len(procs)} processes, {len(seen)} states, {len(results)} health results")
    return [row(host, p, s, h) for p, s, h in zip(procs, seen, results)]


def _num(values) -> Optional[float]:
    got = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return round(sum(got), 1) if got else None


def summary(all_rows: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """Per deployment: engine instances serving / planned (an instance serves when every one of
    its processes does: all nodes of a multi-node instance, the prefill and decode sides of a P/D
    unit), routers serving / planned, the revisions its processes run, and the summed load."""
    out = []
    for name in sorted({r["deployment"] for r in all_rows}, key=str):
        mine = [r for r in all_rows if r["deployment"] == name]
        orphan = all(r["inventory"] == "orphan" for r in mine)
        instances: Dict[Any, bool] = {}
        for r in mine:
            if r["phase"] == "engine":
                key = (r["instance"], r["replica"])
                instances[key] = instances.get(key, True) and r["serving"]
        routers = [r for r in mine if r["phase"] == "router"]
        revs = Counter(str(r["rev"]) for r in mine)
        serving = sum(instances.values())
        item = {
            "deployment": name, "orphan": orphan,
            "instances": len(instances), "instances_serving": serving,
            "capacity_pct": round(100 * serving / len(instances)) if instances else None,
            "routers": len(routers), "routers_serving": sum(r["serving"] for r in routers),
            "revisions": dict(sorted(revs.items())),
            "running": _num(r["running"] for r in mine), "waiting": _num(r["waiting"] for r in mine),
            "generation_tok_s": _num(r["tok_s"] for r in mine),
        }
        spread = ", ".join(f"rev {k} x{v}" for k, v in item["revisions"].items() if k != "-")
        never = item["revisions"].get("-")
        spread = ", ".join(part for part in (spread, f"{never} never deployed" if never else "") if part)
        load = "; ".join(part for part in (
            f"{int(item['running'])} running" if item["running"] is not None else "",
            f"{int(item['waiting'])} waiting" if item["waiting"] is not None else "",
            f"{item['generation_tok_s']} generated tok/s" if item["generation_tok_s"] is not None else "") if part)
        item["line"] = (f"{name}: " + ("orphan (no longer in the inventory): " if orphan else "")
                        + f"{serving} of {len(instances)} instance(s) serving"
                        + (f" (capacity {item['capacity_pct']} %)" if instances else "")
                        + (f", router(s) {item['routers_serving']} of {len(routers)} serving" if routers else "")
                        + f"; {spread}" + (f"; {load}" if load else ""))
        out.append(item)
    return out


def not_serving(all_rows: Sequence[Mapping[str, Any]]) -> List[str]:
    """``host process: why`` for every process today's inventory plans that does not serve
    (orphans are reported, not counted: the inventory no longer plans them)."""
    return [f"{r['host']} {r['process']}: {r['why'] or r['state']}"
            for r in all_rows if r["inventory"] != "orphan" and not r["serving"]]


def table(all_rows: Sequence[Mapping[str, Any]]) -> str:
    """The status table: a header and one line per row (columns COLUMNS, padded), then a line per
    process that does not serve, with why (``down:`` when its request failed, ``not serving:``
    when it was never deployed), and a ``deployment`` line per deployment."""
    width = {c: max([len(c)] + [len(str(r.get(c))) for r in all_rows]) for c in COLUMNS}
    lines = ["  ".join(c.upper().ljust(width[c]) for c in COLUMNS).rstrip()]
    lines += ["  ".join(str(r.get(c)).ljust(width[c]) for c in COLUMNS).rstrip() for r in all_rows]
    lines += [f"{'down' if r['health'] == 'down' else 'not serving'}: {r['host']} {r['process']}: {r['why']}"
              for r in all_rows if r.get("why")]
    lines += [f"deployment {d['line']}" for d in summary(all_rows)]
    return "\n".join(lines) + "\n"


def document(all_rows: Sequence[Mapping[str, Any]], hostvars: Optional[Mapping[str, Any]] = None,
             hosts: Sequence[str] = ()) -> Dict[str, Any]:
    """The JSON document of ``-e vllm_fleet_status_format=json``: whether every planned process
    serves, those that do not, the deployments' summaries, the rows, and each host's GPU health
    as the preamble read it (hosts whose GPU facts carry none are left out)."""
    missing = not_serving(all_rows)
    gpus = {}
    for host in hosts or ():
        health = ((hostvars or {})[host].get("vllm_fleet_gpu") or {}).get("health") if hostvars else None
        if health is not None:
            gpus[str(host)] = health
    return {"serving": not missing, "not_serving": missing, "deployments": summary(all_rows),
            "processes": [dict(r) for r in all_rows], "gpu_health": gpus}
