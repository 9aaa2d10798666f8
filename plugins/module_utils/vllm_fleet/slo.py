"""The grammar of an SLO (``vllm_fleet_slo``): which keys there are and what each bounds. Kept
apart from bench.py (the benchmark and its report) because the inventory contract checks an SLO
and must not import what stands above it (bench.py imports monitoring.py, which imports the planner).
"""

from __future__ import annotations

import math
import re
from typing import Any, List, Mapping

# SLO keys: a latency statistic in ms (at most), or a floor / ceiling of a whole-run figure
LATENCY_KEY_RE = re.compile(r"^(mean|median|p(?:[1-9][0-9]{0,2}(?:\.[0-9]+)?))_(ttft|tpot|itl|e2el)_ms\Z")
FLOORS = {"min_output_tok_s": "output_throughput", "min_total_tok_s": "total_token_throughput",
          "min_requests_s": "request_throughput"}
CEILINGS = {"max_error_rate": "error_rate"}


def slo_problems(slo: Any, where: str = "vllm_fleet_slo") -> List[str]:
    """Problems (``where.key: why``) of an SLO mapping: known keys, numbers >= 0, an error rate <= 1."""
    if not isinstance(slo, Mapping):
        return [f"{where}: must be a mapping such as {{p99_ttft_ms: 800, min_output_tok_s: 50}}"]
    out = []
    for key, value in slo.items():
        if not isinstance(key, str) or not (LATENCY_KEY_RE.fullmatch(key) or key in FLOORS or key in CEILINGS):
            out.append(f"{where}.{key}: unknown SLO key; use <mean|median|pN>_<ttft|tpot|itl|e2el>_ms (at most, "
                       f"in ms, e.g. p99_ttft_ms), {', '.join(sorted(FLOORS))} (at least) or max_error_rate "
                       f"(a fraction from 0 to 1)")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            out.append(f"{where}.{key}: must be a number >= 0, got {value!r}")
        elif key == "max_error_rate" and value > 1:
            out.append(f"{where}.{key}: is a fraction of the requests (0 to 1), got {value!r}")
        elif LATENCY_KEY_RE.fullmatch(key) and key.startswith("p") and float(key.split("_")[0][1:]) >= 100:
            out.append(f"{where}.{key}: a percentile must be below 100")
        elif LATENCY_KEY_RE.fullmatch(key) and key.startswith("p") and "." in key.split("_")[0] and \
                (key.split("_")[0].endswith("0") or float(key.split("_")[0][1:]).is_integer()):
            p = key.split("_")[0][1:].rstrip("0").rstrip(".")
            out.append(f"{where}.{key}: write the percentile as vLLM names it: p{p}_{key.split('_', 1)[1]}")
    return out
