"""Benchmarks of a deployed fleet with vLLM's own client (``vllm bench serve``), the SLO they are
held to, and the report they make.

- :func:`targets`: what bench.yml measures, from the host plans: each vLLM server through its own
  port (run on its host, from its own image or venv: the same vLLM as the server), and each
  deployment's router (run on the deployment's first engine host, which has that vLLM);
- :func:`bench_args`: the ``bench serve ...`` arguments (the runtime puts ``vllm`` or the venv's
  ``vllm`` and its container in front): an offline dataset (random tokens), bounded in requests;
  the API key travels in ``OPENAI_API_KEY`` (vLLM's client reads it there), never in argv;
- :func:`slo_problems`: the contract's check of ``vllm_fleet_slo``; :func:`evaluate`: a result
  against an SLO; :func:`regressions`: a result against the previous report's figures;
- :func:`report`: the report document of one run (per target and fleet-wide), :func:`markdown`
  and :func:`plot` (PNG, matplotlib) its files, compared with the previous report of the same
  deployment and settings.

A result is the JSON ``vllm bench serve --save-result`` writes (vLLM 0.32: ``completed``,
``failed``, ``duration``, ``request_throughput``, ``output_throughput``, ``total_token_throughput``,
``{mean,median,std,p<N>}_{ttft,tpot,itl,e2el}_ms``).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .monitoring import _address, _hostport
from .slo import CEILINGS, FLOORS, LATENCY_KEY_RE, slo_problems  # noqa: F401 (slo_problems: bench's API too)

LATENCIES = ("ttft", "tpot", "itl", "e2el")
LATENCY_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}
PERCENTILES = (50, 90, 99)
# figures a report shows and compares: (result key, label, higher is better)
THROUGHPUTS = (("output_throughput", "output tok/s", True), ("total_token_throughput", "total tok/s", True),
               ("request_throughput", "requests/s", True))
# what a report compares with the previous one, and below which change it calls the two the same
COMPARED = ("output_throughput", "request_throughput", "p50_ttft_ms", "p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms",
            "p99_e2el_ms")
SAME_PCT = 2.0
SETTINGS_KEYS = ("prompts", "input_len", "output_len", "request_rate", "max_concurrency")
DEFAULT_SETTINGS = {"prompts": 100, "input_len": 512, "output_len": 128, "request_rate": "inf",
                    "max_concurrency": 16, "timeout": 900}
RESULT_FILE = "result.json"


# ---- the SLO (its keys: slo.py) -----------------------------------------------------------------

def percentiles(slo: Optional[Mapping[str, Any]] = None) -> List[str]:
    """The ``--metric-percentiles`` a run needs: 50, 90, 99 and every one the SLO names."""
    found = {str(p) for p in PERCENTILES}
    for key in slo or {}:
        m = LATENCY_KEY_RE.fullmatch(str(key))
        if m and m.group(1).startswith("p"):
            found.add(m.group(1)[1:])
    return sorted(found, key=float)


def error_rate(result: Mapping[str, Any]) -> float:
    """Failed requests / requests sent. A pooling (embedding) run reports no ``failed``: its
    requests sent (``num_prompts``) less the completed ones failed."""
    completed = int(result.get("completed") or 0)
    failed = result.get("failed")
    if failed is None and isinstance(result.get("num_prompts"), int):
        failed = max(0, result["num_prompts"] - completed)
    failed = int(failed or 0)
    return failed / (completed + failed) if completed + failed else 1.0


def figure(result: Mapping[str, Any], key: str) -> Optional[float]:
    """A figure of a result by SLO key or result key (None: the result does not carry it)."""
    name = FLOORS.get(key) or CEILINGS.get(key) or key
    if name == "error_rate":
        return error_rate(result)
    value = result.get(name)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def evaluate(result: Mapping[str, Any], slo: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """One verdict per SLO key: metric, op (<= or >=), threshold, measured, ok. A figure the result
    lacks is a miss (measured None), never a pass."""
    out = []
    for key in sorted(slo):
        threshold = float(slo[key])
        measured = figure(result, key)
        op = ">=" if key in FLOORS else "<="
        ok = measured is not None and (measured >= threshold if op == ">=" else measured <= threshold)
        out.append({"metric": key, "op": op, "threshold": threshold, "measured": measured, "ok": ok})
    return out


def regressions(result: Mapping[str, Any], previous: Mapping[str, Any], max_regression_pct: float,
                keys: Sequence[str]) -> List[Dict[str, Any]]:
    """``keys`` (SLO keys, plus output_throughput) of ``result`` against ``previous``: a latency may
    grow, a throughput may fall, by at most ``max_regression_pct`` percent. Keys either side
    lacks are left out (nothing to compare)."""
    out = []
    for key in keys:
        if key in CEILINGS:
            continue
        now, before = figure(result, key), figure(previous, key)
        if now is None or before is None or before <= 0:
            continue
        higher_better = key in FLOORS or key in {k for k, _, _ in THROUGHPUTS}
        change = (now - before) / before * 100
        worse = -change if higher_better else change
        out.append({"metric": key, "previous": before, "measured": now, "change_pct": change,
                    "max_regression_pct": float(max_regression_pct), "ok": worse <= float(max_regression_pct)})
    return out


def verdict_line(v: Mapping[str, Any]) -> str:
    """``p99_ttft_ms: measured 35.2, threshold <= 1`` / a regression line."""
    if "previous" in v:
        return (f"{v['metric']}: {_fmt(v['measured'])} vs {_fmt(v['previous'])} before ({v['change_pct']:+.1f} %, "
                f"at most {_fmt(v['max_regression_pct'])} % worse allowed)")
    measured = "not reported" if v["measured"] is None else _fmt(v["measured"])
    return f"{v['metric']}: measured {measured}, threshold {v['op']} {_fmt(v['threshold'])}"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    value = float(value)
    if value.is_integer():
        return str(int(value))
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.3g}" if abs(value) < 1 else f"{value:.1f}"


# ---- what to measure, and how --------------------------------------------------------------------

def model_of(argv: Sequence[str]) -> Optional[str]:
    """The model a vLLM server loads (``vllm serve MODEL`` or ``--model``): the tokenizer of its bench."""
    argv = [str(a) for a in argv]
    for i, arg in enumerate(argv):
        if arg == "--model" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--model="):
            return arg.split("=", 1)[1]
    if len(argv) > 2 and argv[1] == "serve" and not argv[2].startswith("-"):
        return argv[2]
    return None


def _url(address: Optional[str], port: Any) -> Optional[str]:
    return f"http://{_hostport(str(address), port)}" if address and port else None


def targets(plans: Mapping[str, Mapping[str, Any]], which: str = "all") -> Dict[str, Any]:
    """``{host: [target...]}`` to run on each host, and ``skipped`` (why, one line each).

    A target: ``name`` (unique in the run: the server's name, or ``<deployment>-router``),
    ``kind`` (``instance`` or ``router``), ``deployment``, ``url``, ``host`` (where its process
    runs), and ``runner``: the planned vLLM process whose image or venv runs the client (the
    server itself; for a router, the deployment's first engine). P/D prefill and decode servers
    are measured through their router only (one alone does not serve a request the way the
    deployment does). ``which``: ``instances``, ``router`` or ``all``.
    """
    out: Dict[str, List[Dict[str, Any]]] = {}
    skipped: List[str] = []
    runners: Dict[str, Tuple[str, Mapping[str, Any]]] = {}
    routers: List[Tuple[str, Mapping[str, Any], Mapping[str, Any]]] = []
    for host in sorted(plans):
        plan = plans[host] or {}
        for proc in plan.get("processes") or []:
            if proc.get("kind") == "router" and proc.get("port"):
                routers.append((host, plan, proc))
            if proc.get("kind") != "vllm" or not proc.get("serves_http") or not proc.get("port"):
                continue
            runners.setdefault(str(plan.get("deployment")), (host, proc))
            if which not in ("instances", "all"):
                continue
            if proc.get("role") in ("prefill", "decode"):
                skipped.append(f"{host} {proc['name']}: a P/D {proc['role']} server is measured through its router")
                continue
            out.setdefault(host, []).append({
                "name": proc["name"], "kind": "instance", "deployment": plan.get("deployment"), "host": host,
                "url": _url(proc.get("probe_host") or "127.0.0.1", proc["port"]), "runner": proc})
    if which in ("router", "all"):
        for host, plan, proc in routers:
            deployment = str(plan.get("deployment"))
            if deployment not in runners:
                skipped.append(f"{host} {proc['name']}: no vLLM server of {deployment} in this run to run the client")
                continue
            run_host, runner = runners[deployment]
            bind = proc.get("bind")
            # where the client reaches it: the same rule as Prometheus's (monitoring._address)
            address = _address(plan, bind, local=run_host == host)
            if not address:
                skipped.append(f"{host} {proc['name']}: listens on {bind} only; the client on {run_host} cannot reach it")
                continue
            out.setdefault(run_host, []).append({
                "name": proc["name"], "kind": "router", "deployment": deployment, "host": host,
                "url": _url(address, proc["port"]), "runner": runner})
    return {"hosts": out, "skipped": skipped}


def bench_args(target: Mapping[str, Any], settings: Mapping[str, Any], result_dir: str,
               slo: Optional[Mapping[str, Any]] = None) -> List[str]:
    """``bench serve ...`` (after ``vllm``) for one target: vLLM's completions API, the runner's
    model as tokenizer, random prompts of fixed lengths, output lengths fixed (``--ignore-eos``)
    so that two runs are comparable, at most ``prompts`` requests."""
    s = {**DEFAULT_SETTINGS, **{k: v for k, v in settings.items() if v is not None}}
    runner = target["runner"]
    model = model_of(runner.get("argv") or [])
    # what the server serves: completions (vLLM's own backend), or embeddings (a pooling model)
    embedding = (runner.get("health") or {}).get("request") == "embedding"
    backend, endpoint = ("openai-embeddings", "/v1/embeddings") if embedding else ("vllm", "/v1/completions")
    args = ["bench", "serve", "--backend", backend, "--base-url", str(target["url"]), "--endpoint", endpoint]
    if model:
        args += ["--model", model]
    if runner.get("served_model_name"):
        args += ["--served-model-name", str(runner["served_model_name"])]
    if "--trust-remote-code" in [str(a) for a in runner.get("argv") or []]:
        args.append("--trust-remote-code")
    args += ["--dataset-name", "random", "--random-input-len", str(s["input_len"])]
    if not embedding:
        args += ["--random-output-len", str(s["output_len"]), "--ignore-eos"]
    args += ["--num-prompts", str(s["prompts"]), "--request-rate", str(s["request_rate"]), "--seed", "0",
             "--percentile-metrics", "e2el" if embedding else ",".join(LATENCIES),
             "--metric-percentiles", ",".join(percentiles(slo)),
             "--ready-check-timeout-sec", "0", "--disable-tqdm",
             "--save-result", "--result-dir", result_dir, "--result-filename", RESULT_FILE,
             "--metadata", f"deployment={target['deployment']}", f"target={target['name']}", f"kind={target['kind']}"]
    if s.get("max_concurrency"):
        args += ["--max-concurrency", str(s["max_concurrency"])]
    return args


def reports_dir(bench_dir: str, playbook_dir: str) -> str:
    """vllm_fleet_bench_dir on the controller: as given when absolute, else under the checkout
    (the parent of playbooks/) (filter ``vllm_fleet_run.bench_dir | vllm_fleet_bench_reports(playbook_dir)``)."""
    return bench_dir if bench_dir.startswith("/") else os.path.join(os.path.dirname(playbook_dir.rstrip("/")), bench_dir)


def settings_of(run: Mapping[str, Any]) -> Dict[str, Any]:
    """The bench settings of ``vllm_fleet_run`` (bench_prompts, ...), defaults filled."""
    out = dict(DEFAULT_SETTINGS)
    for key in list(out):
        value = run.get(f"bench_{key}")
        if value is not None:
            out[key] = value
    return out


# ---- the report ----------------------------------------------------------------------------------

def parse_result(text: str, where: str) -> Dict[str, Any]:
    if not isinstance(text, str):
        raise ValueError(f"{where}: the result is not the text of a JSON file")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{where}: not the JSON vllm bench serve writes ({exc})") from None
    if not isinstance(data, dict) or "completed" not in data or "duration" not in data:
        raise ValueError(f"{where}: not a vllm bench serve result (no completed / duration)")
    return data


def _summary(result: Mapping[str, Any]) -> Dict[str, Any]:
    keep = {"completed": result.get("completed"), "failed": result.get("failed", 0),
            "duration": result.get("duration"), "error_rate": error_rate(result)}
    for key, _, _ in THROUGHPUTS:
        keep[key] = result.get(key)
    for key, value in result.items():
        if LATENCY_KEY_RE.fullmatch(key):
            keep[key] = value
    return keep


def fleet_row(rows: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The instances' figures together: requests and throughputs summed (each instance measured on
    its own: the capacity of the fleet's servers), each latency statistic the worst instance's."""
    out: Dict[str, Any] = {"completed": sum(int(r.get("completed") or 0) for r in rows),
                           "failed": sum(int(r.get("failed") or 0) for r in rows)}
    out["error_rate"] = error_rate(out)
    for key, _, _ in THROUGHPUTS:
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        out[key] = sum(values) if values else None
    keys = sorted({k for r in rows for k in r if LATENCY_KEY_RE.fullmatch(k)})
    for key in keys:
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        out[key] = max(values) if values else None
    return out


def report(deployment: str, results: Sequence[Mapping[str, Any]], settings: Mapping[str, Any],
           slo: Optional[Mapping[str, Any]] = None, previous: Optional[Mapping[str, Any]] = None,
           max_regression_pct: Optional[float] = None, revision: Any = None, when: str = "") -> Dict[str, Any]:
    """The report document of one deployment's run. ``results``: ``{target, kind, host, result}``.
    Rows: one per target, and ``fleet`` (the instances together) when there are instances.
    ``slo``: verdicts per row; ``previous``: an earlier report of the same deployment and
    settings, compared row by row (same target name, and fleet)."""
    rows = []
    for item in sorted(results, key=lambda r: (r["kind"] != "instance", r["target"])):
        rows.append({"target": item["target"], "kind": item["kind"], "host": item.get("host"),
                     **_summary(item["result"])})
    instances = [r for r in rows if r["kind"] == "instance"]
    if instances:
        rows.append({"target": "fleet", "kind": "fleet", "host": None, **fleet_row(instances)})
    doc: Dict[str, Any] = {"deployment": deployment, "when": when, "revision": revision,
                           "settings": {k: settings.get(k) for k in SETTINGS_KEYS}, "rows": rows,
                           "slo": dict(slo or {}), "previous": None}
    if slo:
        for row in rows:
            if row["kind"] != "fleet":
                row["slo"] = evaluate(row, slo)
        doc["slo_ok"] = all(v["ok"] for row in rows for v in row.get("slo", []))
    if previous:
        before = {r["target"]: r for r in previous.get("rows") or []}
        keys = list(COMPARED)
        for row in rows:
            if row["target"] in before:
                row["compared"] = regressions(row, before[row["target"]], max_regression_pct or 0, keys)
        doc["previous"] = {"when": previous.get("when"), "revision": previous.get("revision"),
                           "dir": previous.get("dir")}
    return doc


def comparable(doc: Mapping[str, Any], settings: Mapping[str, Any]) -> bool:
    return all(str((doc.get("settings") or {}).get(k)) == str(settings.get(k)) for k in SETTINGS_KEYS)


def previous_report(base: str, deployment: str, settings: Mapping[str, Any],
                    before: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """The newest report.json under ``base/deployment/*/`` made with the same settings (a run
    with other prompt counts or lengths is not comparable), older than ``before`` (a run
    directory name) when given; its ``dir`` added. None: there is none."""
    root = os.path.join(base, deployment)
    if not os.path.isdir(root):
        return None
    def order(name: str):   # <stamp> then <stamp>-2, -3, ... -10 (numbers, not text)
        stamp, _, n = name.partition("-")
        return (stamp, int(n) if n.isdigit() else 1)

    for name in sorted(os.listdir(root), key=order, reverse=True):
        if before is not None and order(name) >= order(before):
            continue
        path = os.path.join(root, name, "report.json")
        try:
            with open(path, encoding="utf-8") as handle:
                doc = json.load(handle)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and comparable(doc, settings):
            doc["dir"] = os.path.join(root, name)
            return doc
    return None


def _cell(value: Any) -> str:
    return "-" if value is None else _fmt(value)


def markdown(doc: Mapping[str, Any], plots: Sequence[str] = ()) -> str:
    """The Markdown report: settings, a table per target (+ fleet), SLO verdicts, the comparison
    with the previous report, the plots."""
    s = doc["settings"]
    lines = [f"# Benchmark of {doc['deployment']}", "",
             f"{doc.get('when') or ''}; revision {doc.get('revision') if doc.get('revision') is not None else '-'}; "
             f"vllm bench serve, random prompts of {s['input_len']} tokens, {s['output_len']} output tokens each, "
             f"{s['prompts']} requests per target at rate {s['request_rate']} "
             f"(at most {s['max_concurrency'] or 'unbounded'} at once).", "",
             "| target | kind | completed | failed | output tok/s | requests/s | p50 TTFT ms | p99 TTFT ms | "
             "p50 TPOT ms | p99 TPOT ms | p99 ITL ms | p99 E2E ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        lines.append(f"| {r['target']} | {r['kind']} | {r['completed']} | {r['failed']} | {_cell(r['output_throughput'])} "
                     f"| {_cell(r['request_throughput'])} | {_cell(r.get('p50_ttft_ms'))} | {_cell(r.get('p99_ttft_ms'))} "
                     f"| {_cell(r.get('p50_tpot_ms'))} | {_cell(r.get('p99_tpot_ms'))} | {_cell(r.get('p99_itl_ms'))} "
                     f"| {_cell(r.get('p99_e2el_ms'))} |")
    lines += ["", "fleet: the instances together (throughputs summed, each measured alone; latencies the worst "
              "instance's)."]
    if doc.get("slo"):
        lines += ["", f"## SLO: {'met' if doc.get('slo_ok') else 'MISSED'}", ""]
        for r in doc["rows"]:
            for v in r.get("slo", []):
                lines.append(f"- {r['target']}: {'ok' if v['ok'] else 'MISSED'}: {verdict_line(v)}")
    prev = doc.get("previous")
    if prev:
        lines += ["", f"## Compared with the previous report ({prev.get('when')}, revision {prev.get('revision')})", "",
                  f"Changes under {SAME_PCT:g} % are called the same.", "",
                  "| target | metric | previous | now | change | |", "|---|---|---|---|---|---|"]
        for r in doc["rows"]:
            for c in r.get("compared", []):
                better = (c["change_pct"] > 0) == (c["metric"] in {k for k, _, _ in THROUGHPUTS})
                word = "same" if abs(c["change_pct"]) < SAME_PCT else "better" if better else "worse"
                lines.append(f"| {r['target']} | {c['metric']} | {_fmt(c['previous'])} | {_fmt(c['measured'])} "
                             f"| {c['change_pct']:+.1f} % | {word} |")
    if plots:
        lines += ["", "## Plots", ""] + [f"![{os.path.splitext(p)[0]}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def plot(doc: Mapping[str, Any], out_dir: str) -> List[str]:
    """``throughput.png`` (output tok/s and requests/s per target) and ``latency.png`` (p50/p90/p99
    of TTFT, TPOT, ITL and E2E latency per target) in ``out_dir``; their file names."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = doc["rows"]
    names = [r["target"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(names) * 2), 4.5))
    for ax, (key, label) in zip(axes, (("output_throughput", "output tokens/s"), ("request_throughput", "requests/s"))):
        values = [float(r.get(key) or 0) for r in rows]
        bars = ax.bar(names, values, color=["#4c72b0" if r["kind"] != "fleet" else "#55a868" for r in rows])
        ax.bar_label(bars, labels=[_fmt(v) for v in values], fontsize=8)
        ax.set_title(label)
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    fig.suptitle(f"{doc['deployment']}: throughput per target")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "throughput.png"), dpi=90)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(LATENCIES), figsize=(4.2 * len(LATENCIES), 4.5))
    width = 0.8 / len(PERCENTILES)
    for ax, metric in zip(axes, LATENCIES):
        for i, p in enumerate(PERCENTILES):
            values = [float(r.get(f"p{p}_{metric}_ms") or 0) for r in rows]
            ax.bar([x + i * width for x in range(len(rows))], values, width, label=f"p{p}")
        ax.set_xticks([x + width for x in range(len(rows))], names, rotation=20, fontsize=8)
        ax.set_title(f"{LATENCY_NAMES[metric]} (ms)")
        ax.legend(fontsize=7)
    fig.suptitle(f"{doc['deployment']}: latency percentiles per target")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "latency.png"), dpi=90)
    plt.close(fig)
    made = ["throughput.png", "latency.png"]

    compared = [r for r in rows if r.get("compared")]
    if compared:   # the previous report beside this one, per target
        names = [r["target"] for r in compared]
        fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(names) * 2), 4.5))
        for ax, (key, label) in zip(axes, (("output_throughput", "output tokens/s"), ("p99_ttft_ms", "p99 TTFT (ms)"))):
            found = [{c["metric"]: c for c in r["compared"]}.get(key) for r in compared]
            before = [float(c["previous"]) if c else 0.0 for c in found]
            now = [float(c["measured"]) if c else 0.0 for c in found]
            ax.bar([x - 0.2 for x in range(len(names))], before, 0.4, label="previous", color="#a0a0a0")
            ax.bar([x + 0.2 for x in range(len(names))], now, 0.4, label="now", color="#4c72b0")
            ax.set_xticks(list(range(len(names))), names, rotation=20, fontsize=8)
            ax.set_title(label)
            ax.legend(fontsize=7)
        fig.suptitle(f"{doc['deployment']}: this run and the previous report")
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "compared.png"), dpi=90)
        plt.close(fig)
        made.append("compared.png")
    return made


# ---- the playbooks' filters ----------------------------------------------------------------------

def fleet_targets(hostvars: Mapping[str, Any], hosts: Sequence[str], which: str = "all") -> Dict[str, Any]:
    """targets() of the hosts' plans (filter ``hostvars | vllm_fleet_bench_targets(hosts, which)``)."""
    plans = {str(h): hostvars[h]["vllm_fleet_plan"] for h in hosts
             if h in hostvars and hostvars[h].get("vllm_fleet_plan")}
    return targets(plans, which)


def canary_targets(plan: Mapping[str, Any], processes: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """The SLO gate's targets: the step's vLLM servers, each through its own port on this host
    (filter ``vllm_fleet_plan | vllm_fleet_bench_canary(processes)``)."""
    return [{"name": p["name"], "kind": "instance", "deployment": plan.get("deployment"), "host": None,
             "url": _url(p.get("probe_host") or "127.0.0.1", p["port"]), "runner": p}
            for p in processes if p.get("kind") == "vllm" and p.get("serves_http") and p.get("port")]
