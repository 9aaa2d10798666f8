"""vllm_fleet_bench_report, run the way Ansible runs a module (python3 module.py args.json, this
project's plugins/module_utils importable as ansible.module_utils.*): the report directory and its
files, the comparison with the previous report, the SLO gate, and what it refuses."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ansible")

from module_runner import ROOT, module_argv

MODULE = ROOT / "plugins" / "modules" / "vllm_fleet_bench_report.py"
PNG = b"\x89PNG\r\n\x1a\n"
STAMP = re.compile(r"^\d{8}T\d{6}Z(-\d+)?\Z")
SETTINGS = {"prompts": 100, "input_len": 512, "output_len": 128, "request_rate": "inf", "max_concurrency": 16,
            "timeout": 900}


def run(tmp_path, **args):
    args.setdefault("dir", str(tmp_path / "reports"))
    args.setdefault("deployment", "d")
    args.setdefault("settings", SETTINGS)
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run(module_argv(MODULE, path), capture_output=True, text=True, timeout=120)
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)


def content(**over):
    """A result file as vLLM 0.32's ``vllm bench serve --save-result`` writes it."""
    doc = {"date": "20260101-000000", "backend": "vllm", "model_id": "/m", "num_prompts": 100,
           "duration": 12.5, "completed": 100, "failed": 0, "total_input_tokens": 51200,
           "total_output_tokens": 12800, "request_throughput": 8.0, "output_throughput": 1024.0,
           "total_token_throughput": 5120.0}
    for metric, (mean, p50, p90, p99) in {"ttft": (20.1, 18.0, 30.0, 35.2), "tpot": (8.0, 7.9, 9.5, 11.0),
                                          "itl": (8.0, 7.5, 12.0, 25.0),
                                          "e2el": (1100.0, 1050.0, 1250.0, 1400.0)}.items():
        doc.update({f"mean_{metric}_ms": mean, f"median_{metric}_ms": p50, f"std_{metric}_ms": 1.0,
                    f"p50_{metric}_ms": p50, f"p90_{metric}_ms": p90, f"p99_{metric}_ms": p99})
    doc.update({"ttfts": [0.018, 0.035], "errors": ["", ""]})
    doc.update(over)
    return json.dumps(doc, indent=4) + "\n"


def results(**over):
    return [{"target": "vllm-fleet-d-router", "kind": "router", "host": "r",
             "content": content(output_throughput=1500.0, p99_ttft_ms=60.0)},
            {"target": "vllm-fleet-d-r0", "kind": "instance", "host": "a", "content": content(**over)}]


def test_report_writes_the_run_directory(tmp_path):
    res = results()
    out = run(tmp_path, state="report", results=res, slo={"p99_ttft_ms": 800}, revision=4)
    assert out.get("failed") is not True, out
    assert out["changed"] is True
    path = Path(out["path"])
    assert path.parent == tmp_path / "reports" / "d" and STAMP.match(path.name), path
    expected = [path / "results" / "vllm-fleet-d-router.json", path / "results" / "vllm-fleet-d-r0.json",
                path / "report.json", path / "report.md", path / "throughput.png", path / "latency.png"]
    assert [Path(f) for f in out["files"]] == expected
    assert all(f.is_file() for f in expected)
    assert sorted(p.name for p in path.iterdir()) == ["latency.png", "report.json", "report.md", "results",
                                                     "throughput.png"]
    # every result as vLLM wrote it, byte for byte
    for item in res:
        assert (path / "results" / f"{item['target']}.json").read_bytes() == item["content"].encode()
    doc = json.loads((path / "report.json").read_text())
    assert doc == out["report"]
    assert doc["deployment"] == "d" and doc["revision"] == 4 and doc["previous"] is None
    assert [r["target"] for r in doc["rows"]] == ["vllm-fleet-d-r0", "vllm-fleet-d-router", "fleet"]
    assert doc["slo_ok"] is True and out["missed"] == []
    md = (path / "report.md").read_text()
    assert md.startswith("# Benchmark of d") and "| vllm-fleet-d-router | router |" in md
    assert "## SLO: met" in md and "![throughput](throughput.png)" in md and "Compared with" not in md
    for name in ("throughput.png", "latency.png"):
        assert (path / name).read_bytes().startswith(PNG)
    assert len(out["lines"]) == 3
    assert out["lines"][0].startswith("vllm-fleet-d-r0 (instance): 100 completed, 0 failed, 1024 output tok/s")
    assert "p99 TTFT 35.2 ms" in out["lines"][0]


def test_report_misses_and_previous(tmp_path):
    first = run(tmp_path, state="report", results=results(), revision=1)
    assert first["changed"] is True, first
    second = run(tmp_path, state="report", results=results(output_throughput=512.0),
                 slo={"p99_ttft_ms": 1}, max_regression=10, revision=2)
    assert second["changed"] is True, second
    assert second["path"] != first["path"]
    assert Path(first["path"]).is_dir()   # the first run's directory is kept
    doc = json.loads((Path(second["path"]) / "report.json").read_text())
    assert doc["previous"]["dir"] == first["path"] and doc["previous"]["revision"] == 1
    r0 = next(r for r in doc["rows"] if r["target"] == "vllm-fleet-d-r0")
    c = {x["metric"]: x for x in r0["compared"]}
    assert c["output_throughput"]["change_pct"] == pytest.approx(-50.0) and c["output_throughput"]["ok"] is False
    md = (Path(second["path"]) / "report.md").read_text()
    assert "## Compared with the previous report" in md and "revision 1)" in md
    assert "| vllm-fleet-d-r0 | output_throughput | 1024 | 512 | -50.0 % | worse |" in md
    assert "## SLO: MISSED" in md
    assert doc["slo_ok"] is False
    assert sorted(second["missed"]) == sorted([
        "vllm-fleet-d-r0: p99_ttft_ms: measured 35.2, threshold <= 1",
        "vllm-fleet-d-router: p99_ttft_ms: measured 60, threshold <= 1"])
    assert second["lines"][-1].startswith(f"compared with {first['path']}: ")
    assert "vllm-fleet-d-r0 output_throughput -50.0 %" in second["lines"][-1]
    # other settings: not comparable with either
    third = run(tmp_path, state="report", results=results(), settings={**SETTINGS, "prompts": 10})
    assert third["report"]["previous"] is None
    assert "Compared with" not in (Path(third["path"]) / "report.md").read_text()


def test_gate_slo(tmp_path):
    out = run(tmp_path, state="gate", results=results()[1:], slo={"p99_ttft_ms": 1, "min_output_tok_s": 50})
    assert out.get("failed") is not True, out
    assert out["changed"] is False and out["previous"] is None
    assert out["missed"] == ["vllm-fleet-d-r0: p99_ttft_ms: measured 35.2, threshold <= 1"]
    assert sorted(out["lines"]) == [
        "MISSED: vllm-fleet-d-r0: p99_ttft_ms: measured 35.2, threshold <= 1",
        "ok: vllm-fleet-d-r0: min_output_tok_s: measured 1024, threshold >= 50"]
    assert not (tmp_path / "reports").exists()   # a gate writes nothing
    met = run(tmp_path, state="gate", results=results()[1:], slo={"p99_ttft_ms": 800})
    assert met["missed"] == [] and met["lines"] == ["ok: vllm-fleet-d-r0: p99_ttft_ms: measured 35.2, threshold <= 800"]


def test_gate_regression_against_the_newest_report(tmp_path):
    first = run(tmp_path, state="report", results=results())
    assert first["changed"] is True, first
    slow = [{"target": "vllm-fleet-d-r0", "kind": "instance", "host": "a",
             "content": content(output_throughput=800.0, p99_ttft_ms=70.4)},
            {"target": "vllm-fleet-d-new", "kind": "instance", "host": "a", "content": content()}]
    out = run(tmp_path, state="gate", results=slow, slo={"p99_ttft_ms": 800}, max_regression=10)
    assert out["previous"] == first["path"]
    assert any(line.startswith("vllm-fleet-d-new: not in the previous report") for line in out["lines"])
    assert len(out["missed"]) == 2, out["missed"]
    ttft = next(m for m in out["missed"] if "p99_ttft_ms" in m)
    assert ttft.startswith("vllm-fleet-d-r0: p99_ttft_ms: 70.4 vs 35.2 before (+100.0 %")
    tput = next(m for m in out["missed"] if "output_throughput" in m)
    assert "800 vs 1024 before (-21.9 %" in tput
    # without max_regression the gate is the SLO's alone
    out = run(tmp_path, state="gate", results=slow, slo={"p99_ttft_ms": 800})
    assert out["missed"] == [] and out["previous"] is None


@pytest.mark.parametrize("target", ["../x", "", "a/b", ".hidden", "-x"])
def test_bad_target_name_fails(tmp_path, target):
    res = [{"target": target, "kind": "instance", "host": "a", "content": content()}]
    out = run(tmp_path, state="report", results=res)
    assert out.get("failed") is True
    assert "not a valid target name" in out["msg"] and repr(target) in out["msg"]
    assert not (tmp_path / "reports").exists() and not (tmp_path / "x").exists()


def test_bad_deployment_name_fails(tmp_path):
    out = run(tmp_path, state="report", deployment="../d", results=results())
    assert out.get("failed") is True and "not a valid name" in out["msg"]
    assert not (tmp_path / "d").exists() and not (tmp_path / "reports").exists()


@pytest.mark.parametrize("text,why", [("{not json", "not the JSON"), ('{"duration": 1}', "no completed"),
                                      ("", "not the JSON")])
def test_invalid_content_fails_naming_host_and_target(tmp_path, text, why):
    res = results()
    res[1]["content"] = text
    for state in ("report", "gate"):
        out = run(tmp_path, state=state, results=res)
        assert out.get("failed") is True
        assert out["msg"].startswith("a: vllm-fleet-d-r0: ") and why in out["msg"]
    assert not (tmp_path / "reports").exists()
