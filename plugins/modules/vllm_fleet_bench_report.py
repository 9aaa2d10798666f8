#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Report or gate on `vllm bench serve` results, on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_fleet_bench_report
short_description: Write a benchmark report (result JSONs, Markdown, PNG plots) or gate a canary on an SLO
description:
  - Runs on the controller (delegated to localhost) with the results C(vllm bench serve) wrote on the
    fleet's hosts (read back with slurp). The figures, the SLO check and the comparison come from
    module_utils C(vllm_fleet/bench.py).
  - C(state=report) writes C(<dir>/<deployment>/<UTC time>/) with every result JSON as vLLM wrote it
    (C(results/<target>.json)), C(report.json), C(report.md) and C(throughput.png) and C(latency.png)
    (matplotlib), compared with the newest earlier report of the deployment made with the same settings.
  - C(state=gate) writes nothing. It checks one result (the canary's) against the SLO and, with
    C(max_regression), against the same target's figures in the newest comparable report.
options:
  state: {type: str, choices: [report, gate], default: report, description: what to do}
  dir: {type: path, required: true, description: the reports' base directory}
  deployment: {type: str, required: true, description: the deployment}
  results:
    type: list
    elements: dict
    required: true
    description: "Each C(target), C(kind), C(host) and C(content) (the result file's text)."
  settings: {type: dict, required: true, description: the bench settings (prompts, input_len, ...)}
  slo: {type: dict, default: {}, description: vllm_fleet_slo}
  max_regression: {type: int, description: vllm_fleet_slo_max_regression (percent)}
  revision: {type: raw, description: the deployment's revision the results measured}
"""

RETURN = r"""
path: {description: the report's directory (report), type: str, returned: state=report}
files: {description: the files written (report), type: list, returned: state=report}
report: {description: the report document (report.json), type: dict, returned: state=report}
missed: {description: one line per SLO or regression miss (empty when met), type: list}
lines: {description: a line per target (report) or per verdict (gate), type: list}
"""

import datetime
import json
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_fleet import bench

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}\Z")


def _results(module):
    out = []
    for item in module.params["results"]:
        target = str(item.get("target") or "")
        if not SAFE_NAME.fullmatch(target):
            module.fail_json(msg=f"bench result of {target!r}: not a valid target name")
        try:
            result = bench.parse_result(item.get("content") or "", f"{item.get('host')}: {target}")
        except ValueError as exc:
            module.fail_json(msg=str(exc))
        if any(r["target"] == target for r in out):
            module.fail_json(msg=f"bench results: target {target} appears twice")
        out.append({"target": target, "kind": item.get("kind") or "instance", "host": item.get("host"),
                    "result": result, "content": item.get("content")})
    return out


def _line(row):
    return (f"{row['target']} ({row['kind']}): {row['completed']} completed, {row['failed']} failed, "
            f"{bench._fmt(row.get('output_throughput'))} output tok/s, p99 TTFT {bench._fmt(row.get('p99_ttft_ms'))} ms, "
            f"p99 ITL {bench._fmt(row.get('p99_itl_ms'))} ms")


def gate(module, results):
    p = module.params
    previous = bench.previous_report(p["dir"], p["deployment"], p["settings"]) if p["max_regression"] is not None else None
    missed, lines = [], []
    for item in results:
        verdicts = bench.evaluate(item["result"], p["slo"])
        if previous:
            before = {r["target"]: r for r in previous.get("rows") or []}.get(item["target"])
            if before:
                keys = list(p["slo"]) + ["output_throughput"]
                verdicts += bench.regressions(item["result"], before, p["max_regression"], keys)
            else:
                lines.append(f"{item['target']}: not in the previous report ({previous['dir']}): not compared")
        for v in verdicts:
            text = f"{item['target']}: {bench.verdict_line(v)}"
            lines.append(("ok: " if v["ok"] else "MISSED: ") + text)
            if not v["ok"]:
                missed.append(text)
    module.exit_json(changed=False, missed=missed, lines=lines,
                     previous=previous["dir"] if previous else None)


def report(module, results):
    p = module.params
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    root = os.path.join(p["dir"], p["deployment"])
    path = os.path.join(root, stamp)
    n = 1
    while os.path.exists(path):
        n += 1
        path = os.path.join(root, f"{stamp}-{n}")
    previous = bench.previous_report(p["dir"], p["deployment"], p["settings"], before=os.path.basename(path))
    doc = bench.report(p["deployment"], [{k: r[k] for k in ("target", "kind", "host", "result")} for r in results],
                       p["settings"], slo=p["slo"], previous=previous,
                       max_regression_pct=p["max_regression"] or 0, revision=p["revision"],
                       when=now.strftime("%Y-%m-%d %H:%M:%S UTC"))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        module.fail_json(msg="bench.yml's plots need matplotlib in the controller's Python "
                             "(pip install 'vllm-fleet[bench]' or pip install matplotlib)")
    os.makedirs(os.path.join(path, "results"), mode=0o755)
    files = []
    for r in results:
        name = os.path.join(path, "results", f"{r['target']}.json")
        with open(name, "w", encoding="utf-8") as handle:
            handle.write(r["content"])
        files.append(name)
    plots = bench.plot(doc, path)
    with open(os.path.join(path, "report.json"), "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=2)
        handle.write("\n")
    with open(os.path.join(path, "report.md"), "w", encoding="utf-8") as handle:
        handle.write(bench.markdown(doc, plots))
    files += [os.path.join(path, f) for f in ("report.json", "report.md", *plots)]
    missed = [f"{row['target']}: {bench.verdict_line(v)}" for row in doc["rows"] for v in row.get("slo", []) if not v["ok"]]
    lines = [_line(row) for row in doc["rows"]]
    if previous:
        worse = [f"{row['target']} {c['metric']} {c['change_pct']:+.1f} %" for row in doc["rows"]
                 for c in row.get("compared", []) if not c["ok"] or c["change_pct"] != 0]
        lines.append(f"compared with {previous['dir']}: " + ("; ".join(worse[:8]) or "no change"))
    module.exit_json(changed=True, path=path, files=files, report=doc, missed=missed, lines=lines)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["report", "gate"], default="report"),
            dir=dict(type="path", required=True),
            deployment=dict(type="str", required=True),
            results=dict(type="list", elements="dict", required=True),
            settings=dict(type="dict", required=True),
            slo=dict(type="dict", default={}),
            max_regression=dict(type="int"),
            revision=dict(type="raw"),
        ),
        supports_check_mode=False,
    )
    if not SAFE_NAME.fullmatch(module.params["deployment"]):
        module.fail_json(msg=f"deployment {module.params['deployment']!r}: not a valid name")
    results = _results(module)
    (gate if module.params["state"] == "gate" else report)(module, results)


if __name__ == "__main__":
    main()
