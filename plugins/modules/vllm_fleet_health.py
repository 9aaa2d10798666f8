#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Health gate for one vLLM server: /health, then /v1/models, then one real request."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_fleet_health
short_description: Wait until a vLLM server is really serving
description:
  - Polls C(GET /health) until it answers 200 (bounded by O(timeout)), then checks that
    C(GET /v1/models) lists O(served_model_name), then sends one real request (a 1-token
    completion, or an embedding for pooling models) and checks the answer.
  - While waiting it watches the process (docker container or systemd unit) and fails
    at once when it died, returning the last lines of its log.
  - "Progress: with O(window) set, one call waits at most O(window) seconds and then returns
    C(waiting=true) with what it awaits, the last answer, the process state and the last
    log line; the next call passes the seconds already waited in O(waited), so the overall
    bound stays O(timeout). The project's action plugin of the same name makes these calls
    in a loop and prints one progress line per call."
  - Secret values (O(api_key), O(hf_token)) are masked in everything it returns, the log
    tail included.
  - Never changes anything.
options:
  url:
    description: Base URL of the server, e.g. C(http://127.0.0.1:8000).
    type: str
    required: true
  served_model_name:
    description:
      - Model name /v1/models must list and requests use.
      - "Omitted for services that are not vLLM servers (vllm-router): then C(/health) is the whole gate."
    type: str
  workers:
    description:
      - "For a router (vllm-router): the workers the plan gives it, C(pools) (C(regular), C(prefill),
        C(decode) -> worker URLs), C(model) (the served name) and C(request) (C(completion) or
        C(embedding)). After C(/health) the gate then requires C(GET /workers) to list exactly
        these workers, each in its pool and healthy (waiting for that at most O(membership_timeout)
        seconds), and sends real requests through the router until every worker's own
        C(vllm:request_success_total) moved: at most four rounds of as many requests as the largest
        pool has workers, each round all sent before any answer is read (a load-aware policy such
        as cache_aware sends one-at-a-time requests all to its first worker). A failed request
        fails the gate after its round (no retry, no later round); so does a worker that never
        got one."
    type: dict
  membership_timeout:
    description: Seconds a router may take to list exactly its planned workers, all healthy, after C(/health).
    type: float
    default: 60
  request:
    description: Kind of real request; C(none) stops after /v1/models.
    type: str
    choices: [completion, embedding, none]
    default: completion
  timeout:
    description: Seconds to wait for /health.
    type: int
    default: 900
  interval:
    description: Seconds between polls.
    type: float
    default: 1
  api_key:
    description: Bearer token when the server requires one (masked in all output).
    type: str
    no_log: true
  hf_token:
    description: The deployment's Hugging Face token, only to mask it in the log tail and messages.
    type: str
    no_log: true
  window:
    description:
      - Seconds one call may wait for /health before it returns C(waiting=true); C(0) waits
        the whole O(timeout) in one call.
    type: float
    default: 0
  waited:
    description: Seconds earlier calls of the same gate already waited (counted against O(timeout)).
    type: float
    default: 0
  runtime:
    description: How the process runs, to watch it and read its log.
    type: str
    choices: [docker, uv, service, none]
    default: none
  process_name:
    description: Container name (docker) or systemd unit name without C(.service) (uv, service).
    type: str
  log_lines:
    description: Lines of log returned on failure.
    type: int
    default: 40
  observe:
    description:
      - "For a vLLM server (O(served_model_name) set): before the gate, read its C(/metrics) twice,
        O(observe) seconds apart, and C(/version), and return what they say as C(load) (status.yml's
        load columns). C(0) reads nothing."
    type: float
    default: 0
author: vllm-fleet
"""

EXAMPLES = r"""
- name: Wait for the server
  vllm_fleet_health:
    url: http://127.0.0.1:8000
    served_model_name: baidu/ERNIE-4.5-VL-28B-A3B-PT
    runtime: docker
    process_name: vllm-fleet-ernie-4-5-vl-28b-a3b-pt-h200
"""

RETURN = r"""
health_seconds:
  description: Seconds until /health answered 200 (O(waited) included).
  type: float
  returned: success
waiting:
  description: The window ended before /health answered; call again with O(waited).
  type: bool
  returned: always
awaiting:
  description: What the gate waits for (the /health URL), while waiting.
  type: str
  returned: when waiting
last_answer:
  description: The last answer of /health (HTTP status or connection error), while waiting.
  type: str
  returned: when waiting
state:
  description: The process state (container or unit), while waiting.
  type: str
  returned: when waiting
log_line:
  description: The last line of the process log, secrets masked, while waiting.
  type: str
  returned: when waiting
models:
  description: Model ids listed by /v1/models.
  type: list
  elements: str
  returned: success
routed:
  description: For a router, per worker URL the requests it answered during the gate (its counter's increase).
  type: dict
  returned: success, for a router
response:
  description: Short summary of the real request (tokens, or embedding dimension).
  type: dict
  returned: success
log_tail:
  description: Last lines of the process log, secrets masked.
  type: str
  returned: failure
load:
  description:
    - "With O(observe): C(running), C(waiting) (requests), C(kv_cache_pct), C(generation_tok_s),
      C(prompt_tok_s) (over C(window_s) seconds), C(version) (GET /version); a value the server
      did not give is null; C(error) when /metrics could not be read."
  type: dict
  returned: with observe, success and failure
"""

import http.client as httpclient
import json
import time
import urllib.parse
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_fleet_process import state as process_state
from ansible.module_utils.vllm_fleet.serving import finished, request_body, response as served_response
from ansible.module_utils.vllm_fleet.serving import load as load_of, version as version_of


def http(method, url, api_key=None, body=None, timeout=30.0):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if api_key:
        req.add_header("Authorization", "Bearer " + api_key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - operator URL
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except urllib.error.URLError as exc:
        return None, str(exc.reason)   # e.g. "[Errno 111] Connection refused"
    except OSError as exc:
        return None, str(exc)


def post_together(base, api_key, bodies, timeout=120.0):
    """POST each (path, body) on its own connection, every request sent before any answer is
    read (so they are in flight at once, whatever the thread scheduling); [(status, text)]."""
    url = urllib.parse.urlsplit(base)
    conn_class = httpclient.HTTPSConnection if url.scheme == "https" else httpclient.HTTPConnection
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    sent = []
    for path, body in bodies:
        conn = conn_class(url.hostname, url.port, timeout=timeout)
        try:
            conn.request("POST", url.path.rstrip("/") + path, json.dumps(body).encode(), headers)
            sent.append((conn, None))
        except OSError as exc:
            sent.append((conn, str(exc)))
    out = []
    for conn, error in sent:
        try:
            if error is not None:
                out.append((None, error))
                continue
            resp = conn.getresponse()
            out.append((resp.status, resp.read().decode("utf-8", "replace")))
        except (OSError, httpclient.HTTPException) as exc:
            out.append((None, str(exc)))
        finally:
            conn.close()
    return out


MASK = "********"


def masker(secrets):
    """A function that replaces every secret value in a string (longest first)."""
    values = sorted({v for v in secrets if v}, key=len, reverse=True)

    def mask(text):
        if not isinstance(text, str):
            return text
        for value in values:
            text = text.replace(value, MASK)
        return text

    return mask


def masked(value, mask):
    """``value`` (str, list, dict, nested) with every string masked."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {k: masked(v, mask) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [masked(v, mask) for v in value]
    return value


def metrics(url, api_key=None):
    """(the server's /metrics text, None), or (None, why not)."""
    status, text = http("GET", url.rstrip("/") + "/metrics", api_key, timeout=10)
    if status != 200:
        return None, f"GET {url.rstrip('/')}/metrics: {'HTTP %s' % status if status else text}"
    return text, None


def served_total(url, api_key=None):
    """(requests the worker finished, None) from its /metrics, or (None, why not)."""
    text, why = metrics(url, api_key)
    if why:
        return None, why
    total = finished(text)
    if total is None:
        return None, f"GET {url}/metrics has no vllm:request_success_total"
    return total, None


def listed_workers(text):
    """{(pool, url)} and the unhealthy URLs from vllm-router's GET /workers."""
    listed, sick = set(), []
    for w in json.loads(text).get("workers") or []:
        listed.add((w.get("worker_type") or "regular", w.get("url")))
        if w.get("is_healthy") is False:
            sick.append(w.get("url"))
    return listed, sick


def router_gate(base, workers, api_key, membership_timeout, interval, fail):
    """The router lists exactly its planned workers (healthy), and requests sent through it reach
    every one of them; returns {url: requests it answered}."""
    pools = workers.get("pools") or {}
    want = {(pool, url) for pool, urls in pools.items() for url in urls}
    urls = sorted({url for _, url in want})
    end = time.monotonic() + max(0.0, membership_timeout)
    while True:
        status, text = http("GET", base + "/workers", api_key)
        try:
            listed, sick = listed_workers(text) if status == 200 else (set(), [])
        except (ValueError, AttributeError, TypeError):
            listed, sick = set(), []
        if status == 200 and listed == want and not sick:
            break
        if time.monotonic() + interval > end:
            missing = sorted(f"{u} ({p})" for p, u in want - listed)
            extra = sorted(f"{u} ({p})" for p, u in listed - want)
            fail(f"{base}/workers does not list the plan's workers after {membership_timeout:g} s: "
                 + (f"HTTP {status}: {text[:200]}" if status != 200 else
                    "; ".join(part for part in (f"missing {', '.join(missing)}" if missing else "",
                                                f"not in the plan {', '.join(extra)}" if extra else "",
                                                f"unhealthy {', '.join(sick)}" if sick else "") if part)))
        time.sleep(interval)
    before = {}
    for url in urls:
        before[url], why = served_total(url, api_key)
        if why:
            fail(f"cannot count the requests worker {url} answers: {why}")
    kind, model = workers.get("request") or "completion", workers.get("model")
    # rounds of as many requests as the largest pool has workers, each round all sent before any
    # answer is read: a load-aware policy (cache_aware picks the least loaded worker for a new
    # prefix, the first one on a tie) sends one-at-a-time requests all to one worker
    width = max(len(v) for v in pools.values()) if pools else 0
    rounds, bound, moved = 4, 4 * width, {}

    for r in range(rounds):
        numbers = range(r * width + 1, (r + 1) * width + 1)
        bodies = [request_body(kind, model, n) for n in numbers]
        for n, (path, _), (status, text) in zip(numbers, bodies, post_together(base, api_key, bodies)):
            if served_response(kind, status, text) is None:
                fail(f"request {n} through the router failed: POST {base}{path} -> "
                     f"{'HTTP %s' % status if status else 'no answer'}: {text[:300]}", routed=moved)
        for url in urls:
            now, why = served_total(url, api_key)
            if why:
                fail(f"cannot count the requests worker {url} answers: {why}", routed=moved)
            moved[url] = int(now - before[url])
        if all(moved[url] > 0 for url in urls):
            return moved
    idle = [url for url in urls if moved.get(url, 0) <= 0]
    fail(f"{bound} requests through {base} all succeeded, but none reached {', '.join(idle)}: the router "
         f"lists the worker and does not route to it", routed=moved)


def observe(base, api_key, seconds):
    """The server's load (module_utils serving.load) from two /metrics reads ``seconds`` apart,
    and the version it reports; read before the gate's own request, which it would count."""
    before, why = metrics(base, api_key)
    t0 = time.monotonic()
    if why:
        return {"error": why[:300]}
    version = version_of(*http("GET", base + "/version", api_key, timeout=10))
    time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
    after, why = metrics(base, api_key)
    window = time.monotonic() - t0
    if why:
        after, window = before, 0
    return {**load_of(before, after, window), "version": version, "window_s": round(window, 1)}


class Process:
    def __init__(self, module, runtime, name, lines):
        self.module, self.runtime, self.name, self.lines = module, runtime, name, lines
        self.first_restarts = None

    def alive(self):
        """(alive, state); a restart since the first poll counts as dead (a crash loop)."""
        if self.runtime not in ("docker", "uv", "service"):
            return True, "not watched"
        seen = process_state(self.module.run_command, self.runtime, self.name)
        if seen["state"] in ("absent", "unknown"):
            return False, seen["raw"] if seen["state"] == "unknown" else "absent (no such container or unit)"
        if self.first_restarts is None:
            self.first_restarts = seen["restarts"]
        if seen["restarts"] > self.first_restarts:
            return False, f"restarted {seen['restarts'] - self.first_restarts} time(s) while starting (crash loop)"
        alive = seen["state"] in ("running", "starting")
        # a dead process is named in the runtime's own word (exited, dead, failed/failed)
        return alive, seen["state"] if alive else seen["raw"]

    def log_tail(self, lines=None):
        lines = str(lines or self.lines)
        if self.runtime == "docker":
            rc, out, err = self.module.run_command(["docker", "logs", "--tail", lines, self.name])
            return (out + err).strip()
        if self.runtime in ("uv", "service"):
            rc, out, err = self.module.run_command(
                ["journalctl", "-u", self.name + ".service", "-n", lines, "--no-pager", "-o", "cat"])
            return (out or err).strip()
        return ""

    def last_log_line(self):
        """The last non-empty log line (a few lines are read: stderr and stdout interleave)."""
        tail = [line for line in self.log_tail(5).splitlines() if line.strip()]
        return tail[-1].strip()[:300] if tail else ""


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            served_model_name=dict(type="str"),
            request=dict(type="str", choices=["completion", "embedding", "none"], default="completion"),
            timeout=dict(type="int", default=900),
            interval=dict(type="float", default=1),
            api_key=dict(type="str", no_log=True),
            hf_token=dict(type="str", no_log=True),
            window=dict(type="float", default=0),
            waited=dict(type="float", default=0),
            runtime=dict(type="str", choices=["docker", "uv", "service", "none"], default="none"),
            process_name=dict(type="str"),
            log_lines=dict(type="int", default=40),
            workers=dict(type="dict"),
            membership_timeout=dict(type="float", default=60),
            observe=dict(type="float", default=0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    base = p["url"].rstrip("/")
    proc = Process(module, p["runtime"] if p["process_name"] else "none", p["process_name"], p["log_lines"])
    mask = masker([p["api_key"], p["hf_token"]])
    observed = {"load": observe(base, p["api_key"], p["observe"])} if p["observe"] > 0 and p["served_model_name"] else {}

    def fail(msg, **extra):
        module.fail_json(msg=mask(msg), log_tail=mask(proc.log_tail()), **masked({**observed, **extra}, mask))

    def done(**result):
        module.exit_json(**{"changed": False, "waiting": False, **masked({**observed, **result}, mask)})

    start = time.monotonic()
    waited = max(0.0, p["waited"])
    deadline = start + max(0.0, p["timeout"] - waited)
    window_end = start + p["window"] if p["window"] > 0 else None
    last = None
    polls = 0
    while True:
        polls += 1
        status, text = http("GET", base + "/health", timeout=10)
        if status == 200:
            break
        last = f"HTTP {status}" if status else text
        alive, state = proc.alive()
        if not alive:
            fail(f"{p['process_name']} is not running ({state}) while waiting for {base}/health "
                 f"(last answer: {last})", polls=polls)
        now = time.monotonic()
        if now + p["interval"] > deadline:
            fail(f"{base}/health did not answer 200 within {p['timeout']} s (last answer: {last})",
                 polls=polls)
        if window_end is not None and now + p["interval"] > window_end:
            # this call's share of the wait is over: report, the caller calls again
            done(waiting=True, awaiting=f"{base}/health", last_answer=last, state=state,
                 log_line=proc.last_log_line(), polls=polls, waited=round(waited + now - start, 1))
        time.sleep(p["interval"])
    health_seconds = round(waited + time.monotonic() - start, 1)

    if p["workers"] and (p["workers"].get("pools") or {}):
        # a router: proven by the workers it lists and by requests it routes to each of them
        routed = router_gate(base, p["workers"], p["api_key"], p["membership_timeout"], p["interval"], fail)
        done(health_seconds=health_seconds, polls=polls, models=[], routed=routed,
             response=f"{sum(routed.values())} requests routed to {len(routed)} workers")
    if not p["served_model_name"]:
        # another non-vLLM HTTP service (Mooncake's master): /health is the whole gate
        done(health_seconds=health_seconds, polls=polls, models=[], response="no model check (service)")
    status, text = http("GET", base + "/v1/models", p["api_key"])
    try:
        models = [m.get("id") for m in json.loads(text).get("data", [])]
    except (ValueError, AttributeError):
        models = []
    if status != 200 or p["served_model_name"] not in models:
        fail(f"{base}/v1/models (HTTP {status}) does not list {p['served_model_name']!r}: {models or text[:300]}")

    if p["request"] == "none":
        done(health_seconds=health_seconds, polls=polls, models=models, response={})
    # serving: one real request of the process's kind answered with a result (module_utils serving)
    path, body = request_body(p["request"], p["served_model_name"])
    status, text = http("POST", base + path, p["api_key"], body, timeout=300)
    response = served_response(p["request"], status, text)
    if response is None:
        fail(f"POST {base}{path} failed (HTTP {status}): {text[:300]}")
    done(health_seconds=health_seconds, polls=polls, models=models, response=response)


if __name__ == "__main__":
    main()
