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
    default: 5
  api_key:
    description: Bearer token when the server requires one.
    type: str
    no_log: true
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
  description: Seconds until /health answered 200.
  type: float
  returned: success
models:
  description: Model ids listed by /v1/models.
  type: list
  elements: str
  returned: success
response:
  description: Short summary of the real request (tokens, or embedding dimension).
  type: dict
  returned: success
log_tail:
  description: Last lines of the process log.
  type: str
  returned: failure
"""

import json
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule


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
    except (urllib.error.URLError, OSError) as exc:
        return None, str(exc)


class Process:
    def __init__(self, module, runtime, name, lines):
        self.module, self.runtime, self.name, self.lines = module, runtime, name, lines
        self.first_restarts = None

    def alive(self):
        """(alive, state); a restart since the first poll counts as dead (a crash loop)."""
        if self.runtime == "docker":
            rc, out, _ = self.module.run_command(
                ["docker", "inspect", "-f", "{{.State.Status}} {{.RestartCount}} {{.State.ExitCode}}", self.name])
            parts = out.split()
            if rc != 0 or len(parts) < 2:
                return False, out.strip() or "container missing"
            status, restarts = parts[0], int(parts[1])
        elif self.runtime in ("uv", "service"):
            rc, out, _ = self.module.run_command(
                ["systemctl", "show", "-p", "ActiveState,SubState,NRestarts", self.name + ".service"])
            props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
            status = "running" if props.get("ActiveState") in ("active", "activating") \
                and props.get("SubState") != "auto-restart" else props.get("SubState", "unknown")
            restarts = int(props.get("NRestarts") or 0)
        else:
            return True, "not watched"
        if self.first_restarts is None:
            self.first_restarts = restarts
        if restarts > self.first_restarts:
            return False, f"restarted {restarts - self.first_restarts} time(s) while starting (crash loop)"
        return status == "running", status

    def log_tail(self):
        if self.runtime == "docker":
            rc, out, err = self.module.run_command(["docker", "logs", "--tail", str(self.lines), self.name])
            return (out + err).strip()
        if self.runtime in ("uv", "service"):
            rc, out, err = self.module.run_command(
                ["journalctl", "-u", self.name + ".service", "-n", str(self.lines), "--no-pager", "-o", "cat"])
            return (out or err).strip()
        return ""


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            served_model_name=dict(type="str"),
            request=dict(type="str", choices=["completion", "embedding", "none"], default="completion"),
            timeout=dict(type="int", default=900),
            interval=dict(type="float", default=5),
            api_key=dict(type="str", no_log=True),
            runtime=dict(type="str", choices=["docker", "uv", "service", "none"], default="none"),
            process_name=dict(type="str"),
            log_lines=dict(type="int", default=40),
        ),
        supports_check_mode=True,
    )
    p = module.params
    base = p["url"].rstrip("/")
    proc = Process(module, p["runtime"] if p["process_name"] else "none", p["process_name"], p["log_lines"])

    def fail(msg, **extra):
        module.fail_json(msg=msg, log_tail=proc.log_tail(), **extra)

    start = time.monotonic()
    deadline = start + p["timeout"]
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
        if time.monotonic() + p["interval"] > deadline:
            fail(f"{base}/health did not answer 200 within {p['timeout']} s (last answer: {last})",
                 polls=polls)
        time.sleep(p["interval"])
    health_seconds = round(time.monotonic() - start, 1)

    if not p["served_model_name"]:
        # a router or another non-vLLM HTTP service: /health is the whole gate
        module.exit_json(changed=False, health_seconds=health_seconds, polls=polls, models=[],
                         response="no model check (service)")
    status, text = http("GET", base + "/v1/models", p["api_key"])
    try:
        models = [m.get("id") for m in json.loads(text).get("data", [])]
    except (ValueError, AttributeError):
        models = []
    if status != 200 or p["served_model_name"] not in models:
        fail(f"{base}/v1/models (HTTP {status}) does not list {p['served_model_name']!r}: {models or text[:300]}")

    response = {}
    name = p["served_model_name"]
    if p["request"] == "embedding":
        status, text = http("POST", base + "/v1/embeddings", p["api_key"],
                            {"model": name, "input": "vllm-fleet health check"}, timeout=120)
        try:
            vector = json.loads(text)["data"][0]["embedding"]
        except (ValueError, KeyError, IndexError, TypeError):
            vector = None
        if status != 200 or not vector:
            fail(f"POST {base}/v1/embeddings failed (HTTP {status}): {text[:300]}")
        response = {"endpoint": "/v1/embeddings", "dimension": len(vector)}
    elif p["request"] == "completion":
        status, text = http("POST", base + "/v1/completions", p["api_key"],
                            {"model": name, "prompt": "Hello", "max_tokens": 1}, timeout=300)
        try:
            choice = json.loads(text)["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            choice = None
        if status != 200 or choice is None:
            fail(f"POST {base}/v1/completions failed (HTTP {status}): {text[:300]}")
        response = {"endpoint": "/v1/completions", "text": choice.get("text"),
                    "finish_reason": choice.get("finish_reason")}
    module.exit_json(changed=False, health_seconds=health_seconds, polls=polls, models=models,
                     response=response)


if __name__ == "__main__":
    main()
