#!/usr/bin/env python3
"""One long streaming completion, for the drain tests: POSTs ``stream: true`` with
``ignore_eos`` and ``max_tokens`` N, reads the server-sent events to ``[DONE]`` and writes a
JSON summary (start/end on the host's clock, chunks, tokens, finish reason, whether it saw
[DONE], the error if any). Stdlib only: it runs on a test host.

usage: stream_client.py URL MODEL OUT.json [--max-tokens N] [--timeout S] [--started FILE]
                        [--when-removed-from LIST_WORKERS_URL --wait S]
(``--started``: a file written once the first chunk arrived: the request is in flight;
``--when-removed-from``: first poll that router's worker list (every 0.1 s, at most ``--wait``
seconds) and start only once URL has left it, i.e. when a rollout drains that server.)
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--max-tokens", type=int, default=1500)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--started")
    ap.add_argument("--when-removed-from")
    ap.add_argument("--wait", type=float, default=600)
    args = ap.parse_args()
    if args.when_removed_from:
        deadline = time.monotonic() + args.wait
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(args.when_removed_from, timeout=5) as resp:
                    if args.url.rstrip("/") not in json.loads(resp.read().decode()).get("urls", []):
                        break
            except Exception:
                pass
            time.sleep(0.1)
        else:
            with open(args.out, "w", encoding="utf-8") as handle:
                json.dump({"error": f"{args.url} never left {args.when_removed_from} in {args.wait} s"}, handle)
            return 1
    body = {"model": args.model, "prompt": "vllm-fleet drain", "max_tokens": args.max_tokens, "stream": True,
            "ignore_eos": True, "temperature": 0}
    summary = {"start": time.time(), "chunks": 0, "text_chars": 0, "finish_reason": None, "done": False,
               "error": None, "first_chunk_at": None}
    try:
        req = urllib.request.Request(args.url.rstrip("/") + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=args.timeout) as resp:
            summary["status"] = resp.status
            for raw in resp:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    summary["done"] = True
                    break
                chunk = json.loads(data)
                summary["chunks"] += 1
                if summary["first_chunk_at"] is None:
                    summary["first_chunk_at"] = time.time()
                    if args.started:
                        with open(args.started, "w", encoding="utf-8") as handle:
                            handle.write("1\n")
                for choice in chunk.get("choices") or []:
                    summary["text_chars"] += len(choice.get("text") or "")
                    if choice.get("finish_reason"):
                        summary["finish_reason"] = choice["finish_reason"]
                if chunk.get("usage"):
                    summary["usage"] = chunk["usage"]
    except Exception as exc:   # a cut stream (reset, timeout, HTTP error) is what the test looks for
        summary["error"] = f"{type(exc).__name__}: {exc}"
    summary["end"] = time.time()
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(summary, handle)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
