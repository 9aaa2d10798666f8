#!/usr/bin/env python3
# FAKE: stand-in for a GPU vLLM image (light mode: an OpenAI-shaped HTTP server, no model)
#
# The server behind `VLLM_STANDIN_SERVE=light` of tests/fakes/vllm-standin: after the argv
# check, the stand-in serves THIS instead of the real vLLM. Python stdlib only (~15 MB RSS,
# answers within ~0.1 s of start), so dozens of test hosts (benchmarks, multi-host and P/D
# tests) can "serve" at once. Nothing here runs a model: the answers are canned.
#
# Endpoints (vLLM's paths and response shapes):
#   GET  /health, /ping                  200, empty body
#   GET  /version                        {"version": ...}
#   GET  /v1/models                      OpenAI model list of the served names
#   POST /v1/completions                 a short canned text_completion (stream: SSE chunks)
#   POST /v1/chat/completions            a short canned chat.completion (stream: SSE chunks)
#   POST /v1/embeddings                  fixed-dimension (384) unit vectors, one per input
#   GET  /metrics                        Prometheus text: vllm:num_requests_running / _waiting (the
#                                        requests in flight), vllm:request_success_total, as vLLM
# VLLM_STANDIN_LATENCY=S (seconds, float) makes every POST take that long, so requests are in
# flight while a rollout drains a server.
# `kv_transfer_params` of a completion/chat request body is echoed back in the response, as
# vLLM's P/D KV connectors return it, so a P/D router (vllm-router) can chain prefill and
# decode through it. `model` must be a served name (404 otherwise, as vLLM); omitted = the
# first. With --api-key (or env VLLM_API_KEY) paths under /v1 need `Authorization: Bearer`
# (401 {"error": "Unauthorized"}), as vLLM's middleware. Each request line goes to stdout
# (uvicorn's access-log shape). SIGTERM/SIGINT stop it at once.
#
# Standalone: python3 vllm_standin_server.py [--host H] [--port P] [--served-model-name N...]
#             [--api-key K...] [MODEL]
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import signal
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EMBED_DIM = 384                                  # all-MiniLM-L6-v2's, what the full stand-in serves
VERSION = "0.32.0+standin-light"
CANNED = "This is a canned answer from the vLLM stand-in light server .".split()
GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")


def log(msg: str) -> None:
    print(f"stand-in: {msg}", flush=True)


def _tokens(value) -> int:
    """A rough token count of a prompt / input / messages value (words; ids count as one)."""
    if value is None:
        return 0
    if isinstance(value, str):
        return max(1, len(value.split()))
    if isinstance(value, int):
        return 1
    if isinstance(value, dict):
        return _tokens(value.get("content")) if "content" in value else 1
    if isinstance(value, list):
        return sum(_tokens(v) for v in value)
    return 1


def _vector(text: str) -> list:
    """A deterministic unit vector of EMBED_DIM floats for `text`."""
    raw = b""
    counter = 0
    while len(raw) < EMBED_DIM * 2:
        raw += hashlib.sha256(f"{counter}:{text}".encode()).digest()
        counter += 1
    vals = [(int.from_bytes(raw[2 * i:2 * i + 2], "big") / 32767.5) - 1.0 for i in range(EMBED_DIM)]
    norm = math.sqrt(sum(v * v for v in vals)) or 1.0
    return [round(v / norm, 6) for v in vals]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"                # keep-alive (routers and benchmarks reuse sockets)
    server_version = "vllm-standin-light"
    sys_version = ""

    # --- plumbing ----------------------------------------------------------------------------
    def log_message(self, fmt, *args):           # BaseHTTPRequestHandler logs to stderr otherwise
        pass

    def log_request(self, code="-", size="-"):
        try:
            code = int(code)
        except (TypeError, ValueError):
            pass
        print(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.requestline}" {code}',
              flush=True)

    def _send(self, status: int, body=None, content_type: str = "application/json") -> None:
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str, param=None) -> None:
        self._send(status, {"error": {"message": message, "type": kind, "param": param, "code": status}})

    def _authorized(self) -> bool:
        tokens = self.server.api_keys
        if not tokens or not self.path.startswith(GUARDED_PREFIX):
            return True
        scheme, _, param = (self.headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and param in tokens

    @staticmethod
    def _body(raw: bytes):
        if not raw:
            return {}
        body = json.loads(raw)
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
        return body

    def _model(self, body):
        """The served name the request asks for, or None after sending a 404."""
        name = body.get("model") or self.server.names[0]
        if name not in self.server.names:
            self._error(404, f"The model `{name}` does not exist.", "NotFoundError", "model")
            return None
        return name

    def _route(self, method: str):
        path = self.path.split("?", 1)[0]
        # the body is read before any answer, an error answer too: left unread on a keep-alive
        # connection it would be parsed as the next request line (http.server then answers 501
        # "Unsupported method"). vllm-router's cache_aware policy first POSTs
        # /v1/completions/render, a 404 here, on the connection it then sends the completion on.
        try:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0) or 0) if method == "POST" else b""
        except ValueError:
            self._send(400, {"detail": "bad Content-Length"})
            self.close_connection = True
            return
        routes = {"GET": {"/health": self.health, "/ping": self.health, "/version": self.version,
                          "/v1/models": self.models, "/metrics": self.metrics},
                  "POST": {"/v1/completions": self.completions, "/v1/chat/completions": self.chat,
                           "/v1/embeddings": self.embeddings, "/ping": self.health}}
        handler = routes.get(method, {}).get(path)
        if handler is None:
            known = any(path in table for table in routes.values())
            self._send(405 if known else 404, {"detail": "Method Not Allowed" if known else "Not Found"})
            return
        if not self._authorized():
            self._send(401, {"error": "Unauthorized"})
            return
        if method == "POST":
            try:
                body = self._body(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                self._error(400, f"invalid JSON body: {exc}", "BadRequestError")
                return
            with self.server.lock:
                self.server.running += 1
            try:
                if self.server.latency:
                    time.sleep(self.server.latency)
                handler(body)
            finally:
                with self.server.lock:
                    self.server.running -= 1
                    self.server.done += 1
        else:
            handler()

    def do_GET(self):  # noqa: N802 - http.server's naming
        self._route("GET")

    def do_HEAD(self):  # noqa: N802
        self._route("GET")

    def do_POST(self):  # noqa: N802
        self._route("POST")

    # --- endpoints ---------------------------------------------------------------------------
    def health(self, body=None):
        self._send(200, b"")

    def version(self):
        self._send(200, {"version": VERSION})

    def metrics(self):
        with self.server.lock:
            running, done = self.server.running, self.server.done
        name = self.server.names[0]
        lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
                 "# TYPE vllm:num_requests_running gauge",
                 f'vllm:num_requests_running{{engine="0",model_name="{name}"}} {float(running)}',
                 "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
                 "# TYPE vllm:num_requests_waiting gauge",
                 f'vllm:num_requests_waiting{{engine="0",model_name="{name}"}} 0.0',
                 "# TYPE vllm:request_success_total counter",
                 f'vllm:request_success_total{{engine="0",finished_reason="stop",model_name="{name}"}} {float(done)}']
        self._send(200, ("\n".join(lines) + "\n").encode(), "text/plain; version=0.0.4")

    def models(self):
        created = int(self.server.started)
        self._send(200, {"object": "list", "data": [
            {"id": n, "object": "model", "created": created, "owned_by": "vllm", "root": self.server.model,
             "parent": None, "max_model_len": 4096,
             "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                             "created": created, "allow_create_engine": False, "allow_sampling": True,
                             "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                             "allow_fine_tuning": False, "organization": "*", "group": None,
                             "is_blocking": False}]}
            for n in self.server.names]})

    def _answer(self, body):
        """(words, finish_reason): the canned answer cut to max_tokens / max_completion_tokens."""
        limit = body.get("max_completion_tokens") or body.get("max_tokens") or 16
        try:
            limit = max(1, int(limit))
        except (TypeError, ValueError):
            limit = 16
        words = CANNED[:limit]
        return words, ("length" if limit < len(CANNED) else "stop")

    def _stream(self, chunks) -> None:
        """Server-sent events, then [DONE]; the connection closes after it (no length)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for chunk in chunks:
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")

    def completions(self, body):
        name = self._model(body)
        if name is None:
            return
        words, finish = self._answer(body)
        prompt_tokens = _tokens(body.get("prompt"))
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(words),
                 "total_tokens": prompt_tokens + len(words)}
        if body.get("stream"):
            pieces = [" " + w for w in words]
            chunks = [{"id": rid, "object": "text_completion", "created": created, "model": name,
                       "choices": [{"index": 0, "text": p, "logprobs": None,
                                    "finish_reason": finish if i == len(pieces) - 1 else None,
                                    "stop_reason": None}]}
                      for i, p in enumerate(pieces)]
            chunks[-1]["kv_transfer_params"] = body.get("kv_transfer_params")
            if (body.get("stream_options") or {}).get("include_usage"):
                chunks.append({"id": rid, "object": "text_completion", "created": created, "model": name,
                               "choices": [], "usage": usage})
            self._stream(chunks)
            return
        self._send(200, {"id": rid, "object": "text_completion", "created": created, "model": name,
                         "choices": [{"index": 0, "text": " " + " ".join(words), "logprobs": None,
                                      "finish_reason": finish, "stop_reason": None,
                                      "prompt_logprobs": None}],
                         "service_tier": None, "system_fingerprint": None, "usage": usage,
                         "kv_transfer_params": body.get("kv_transfer_params")})

    def chat(self, body):
        name = self._model(body)
        if name is None:
            return
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            self._error(400, "messages must be a non-empty list", "BadRequestError", "messages")
            return
        words, finish = self._answer(body)
        prompt_tokens = _tokens(messages)
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(words),
                 "total_tokens": prompt_tokens + len(words)}
        if body.get("stream"):
            head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": name}
            chunks = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                            "logprobs": None, "finish_reason": None}]}]
            chunks += [{**head, "choices": [{"index": 0, "delta": {"content": (" " if i else "") + w},
                                             "logprobs": None,
                                             "finish_reason": finish if i == len(words) - 1 else None}]}
                       for i, w in enumerate(words)]
            chunks[-1]["kv_transfer_params"] = body.get("kv_transfer_params")
            if (body.get("stream_options") or {}).get("include_usage"):
                chunks.append({**head, "choices": [], "usage": usage})
            self._stream(chunks)
            return
        self._send(200, {"id": rid, "object": "chat.completion", "created": created, "model": name,
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": " ".join(words),
                                                              "refusal": None, "tool_calls": [],
                                                              "reasoning_content": None},
                                      "logprobs": None, "finish_reason": finish, "stop_reason": None}],
                         "service_tier": None, "system_fingerprint": None, "usage": usage,
                         "prompt_logprobs": None, "kv_transfer_params": body.get("kv_transfer_params")})

    def embeddings(self, body):
        name = self._model(body)
        if name is None:
            return
        given = body.get("input")
        if given is None or given == [] or given == "":
            self._error(400, "input must be a non-empty string or list", "BadRequestError", "input")
            return
        # a string, a list of strings, a list of token ids (one input) or a list of id lists
        if isinstance(given, str) or (isinstance(given, list) and all(isinstance(t, int) for t in given)):
            items = [given]
        else:
            items = list(given)
        data = [{"object": "embedding", "index": i, "embedding": _vector(json.dumps(item))}
                for i, item in enumerate(items)]
        tokens = _tokens(items)
        self._send(200, {"id": f"embd-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
                         "model": name, "data": data,
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens,
                                   "completion_tokens": 0}})


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def serve(host: str, port: int, names, model: str, api_keys=None) -> None:
    """Serve until SIGTERM/SIGINT (both exit 0 at once: docker stop must not wait 10 s)."""
    host = host or "0.0.0.0"
    Server.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server = Server((host, int(port)), Handler)
    server.names = list(names) or [model]
    server.model = model
    keys = [k for k in (api_keys or [os.environ.get("VLLM_API_KEY")]) if k]
    server.api_keys = keys
    server.started = time.time()
    server.lock = threading.Lock()
    server.running = server.done = 0
    server.latency = float(os.environ.get("VLLM_STANDIN_LATENCY") or 0)

    def stop(*_):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log(f"light server (FAKE: canned answers, no model) pid {os.getpid()}: serving {server.names} "
        f"on http://{host}:{port}{' (API key required under /v1)' if keys else ''}")
    print(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)", flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        log("light server stopped")


def parse(argv):
    """The few `vllm serve` options the server needs; everything else is ignored."""
    p = argparse.ArgumentParser(prog="vllm serve (stand-in light)", allow_abbrev=False, add_help=False)
    p.add_argument("--model")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--api-key", nargs="+")
    p.add_argument("--headless", action="store_true")
    argv = list(argv)
    # `vllm serve MODEL ...`: the model tag comes first (a positional after unknown options
    # would take their values)
    tag = argv.pop(0) if argv and not argv[0].startswith("-") else None
    args, _ = p.parse_known_args(argv)
    args.model = tag or args.model or "standin-model"
    return args


def main(argv=None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    serve(args.host or "0.0.0.0", args.port or 8000, args.served_model_name or [args.model], args.model,
          args.api_key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
