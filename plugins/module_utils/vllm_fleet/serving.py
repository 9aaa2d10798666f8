"""What "serving" means, one definition shared by the health gate and status, and what a vLLM
server's Prometheus text says about its serving: one reading, shared.

Serving (``request_body``, ``answered``, ``response``): the process answers a real request of
its kind (a 1-token completion, or an embedding) with a result, through the same HTTP call in
the gate (plugins/modules/vllm_fleet_health.py), in the router gate (requests through the
router) and in playbooks/status.yml (which runs that module once, without waiting).

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
from json import loads as json_loads
from typing import Any, Dict, Mapping, Optional

# vllm_fleet_drain_timeout's default: seconds a drain waits for requests in flight (the plan's
# drain_timeout, and vLLM's --shutdown-timeout); plans recorded before it carried one get it
DEFAULT_DRAIN_TIMEOUT = 120



def _series(name: str) -> "re.Pattern[str]":
    """The values of series ``name`` in a Prometheus text, one per label set."""
    return re.compile(r"(?m)^" + name + r"(?:\{[^}]*\})? ([0-9.e+-]+)$")


IN_FLIGHT = _series(r"vllm:num_requests_(?:running|waiting)")
FINISHED = _series(re.escape("vllm:request_success_total"))
# status.yml's load columns (load() below)
RUNNING = _series(re.escape("vllm:num_requests_running"))
WAITING = _series(re.escape("vllm:num_requests_waiting"))
KV_USAGE = _series(re.escape("vllm:kv_cache_usage_perc"))
GENERATED = _series(re.escape("vllm:generation_tokens_total"))
PROMPTED = _series(re.escape("vllm:prompt_tokens_total"))


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


def request_body(kind: str, model: Optional[str], n: int = 0):
    """(path, body) of one small real request of ``kind`` ("embedding", else a completion of one
    token); ``n`` leads the prompt: vllm-router's cache_aware policy sends a request whose prefix
    matches a worker's cached text (above its cache_threshold) to that worker, so prompts that
    share their start would all go to the first worker and a gate could never reach the others."""
    if kind == "embedding":
        return "/v1/embeddings", {"model": model, "input": f"{n}: vllm-fleet health check"}
    return "/v1/completions", {"model": model, "prompt": f"{n}: vllm-fleet health check", "max_tokens": 1}


def response(kind: str, status: Any, text: Any) -> Optional[Dict[str, Any]]:
    """What a real request's answer proves (endpoint, and the completion's text and finish reason,
    or the embedding's dimension), or None when it is not a 200 answer carrying a result."""
    if status != 200:
        return None
    try:
        data = json_loads(text)
        if kind == "embedding":
            vector = data["data"][0]["embedding"]
            return {"endpoint": "/v1/embeddings", "dimension": len(vector)} if vector else None
        choice = data["choices"][0]
        if not isinstance(choice, dict):
            return None
        return {"endpoint": "/v1/completions", "text": choice.get("text"), "finish_reason": choice.get("finish_reason")}
    except (ValueError, KeyError, IndexError, TypeError):
        return None


# Load (status.yml): what a vLLM server's /metrics says about how busy it is, as vLLM 0.32
# exports it (vllm/v1/metrics/loggers.py): the gauges vllm:num_requests_running / _waiting
# (summed over engines) and vllm:kv_cache_usage_perc (a fraction, 1 = full; the fullest engine
# counts), and the counters vllm:generation_tokens_total / vllm:prompt_tokens_total read twice,
# ``seconds`` apart, for tokens per second.


def _rate(pattern: "re.Pattern[str]", before: Any, after: Any, seconds: float) -> Optional[float]:
    a, b = _sum(pattern, before), _sum(pattern, after)
    if a is None or b is None or not seconds or seconds <= 0 or b < a:   # b < a: the server restarted
        return None
    return round((b - a) / seconds, 1)


def load(before: Any, after: Any, seconds: float) -> Dict[str, Any]:
    """{running, waiting, kv_cache_pct, generation_tok_s, prompt_tok_s} from two /metrics texts
    read ``seconds`` apart (the gauges from the later one); a value the texts do not carry is
    None, never 0."""
    kv = [float(v) for v in KV_USAGE.findall(after if isinstance(after, str) else "")]
    running, waiting = _sum(RUNNING, after), _sum(WAITING, after)
    return {
        "running": int(running) if running is not None else None,
        "waiting": int(waiting) if waiting is not None else None,
        "kv_cache_pct": round(100 * max(kv), 1) if kv else None,
        "generation_tok_s": _rate(GENERATED, before, after, seconds),
        "prompt_tok_s": _rate(PROMPTED, before, after, seconds),
    }


def version(status: Any, text: Any) -> Optional[str]:
    """The version a vLLM server's GET /version answered ({"version": "0.32.0"}), or None."""
    if status != 200:
        return None
    try:
        value = json_loads(text).get("version")
    except (ValueError, AttributeError):
        return None
    return str(value) if value else None
