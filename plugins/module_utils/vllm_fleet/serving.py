"""What a vLLM server's Prometheus text says about its serving: one reading, shared.

The health gate (plugins/modules/vllm_fleet_health.py, on the hosts, imported as
``ansible.module_utils.vllm_fleet.serving``), the drain (filters ``vllm_fleet_in_flight`` and
``vllm_fleet_drain_outcome``) and the router gate read the same series with these functions:
``vllm:num_requests_running`` + ``vllm:num_requests_waiting`` (requests in flight) and
``vllm:request_success_total`` (requests finished), summed over their label sets (one per
engine of a data-parallel server), as vLLM 0.32 exports them (vllm/v1/metrics/loggers.py).
Stdlib only: it runs on the hosts.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Mapping, Optional

# vllm_fleet_drain_timeout's default: seconds a drain waits for requests in flight (the plan's
# drain_timeout, and vLLM's --shutdown-timeout); plans recorded before it carried one get it
DEFAULT_DRAIN_TIMEOUT = 120

IN_FLIGHT = re.compile(r"(?m)^vllm:num_requests_(?:running|waiting)(?:\{[^}]*\})? ([0-9.e+-]+)$")
FINISHED = re.compile(r"(?m)^vllm:request_success_total(?:\{[^}]*\})? ([0-9.e+-]+)$")


def _sum(pattern: "re.Pattern[str]", text: Any) -> Optional[float]:
    found = pattern.findall(text if isinstance(text, str) else "")
    return sum(float(v) for v in found) if found else None


def in_flight(text: Any) -> Optional[float]:
    """Requests running or waiting; None when the text has neither series (not a vLLM server's
    metrics, or an error page): never 0 for a text that does not say so."""
    return _sum(IN_FLIGHT, text)


def finished(text: Any) -> Optional[float]:
    """Requests the server finished (vllm:request_success_total); None when not in the text."""
    return _sum(FINISHED, text)


def drain_outcome(result: Mapping[str, Any], seconds: Any = None) -> Dict[str, Any]:
    """How one drain wait ended, from its ``uri`` loop result (item: the planned process).

    ``read``: the last /metrics read gave an in-flight count; ``left``: that count (0: drained);
    ``graceful``: the process stops with vLLM's graceful shutdown (the plan gave it a
    stop_timeout with --shutdown-timeout), which lets what is left finish; ``text``: one line."""
    item = result.get("item") or {}
    graceful = bool(item.get("stop_timeout"))
    status = result.get("status")
    left = in_flight(result.get("content")) if status == 200 else None
    out: Dict[str, Any] = {"seconds": seconds, "read": left is not None, "left": left, "graceful": graceful}
    if left is None:
        why = (f"HTTP {status}" if status and status != -1 else (result.get("msg") or "no answer"))
        if status == 200:
            why = "no vllm:num_requests_running/_waiting in the answer"
        out["text"] = (f"in-flight requests unknown (/metrics: {why}): "
                       + ("left to vLLM's graceful stop" if graceful else "NOT drained"))
    elif left == 0:
        out["text"] = f"drained in {seconds} s, 0 requests in flight"
    else:
        out["text"] = (f"{int(left)} request(s) still in flight after {seconds} s: "
                       + ("vLLM's graceful stop lets them finish" if graceful else "they will be cut"))
    return out
