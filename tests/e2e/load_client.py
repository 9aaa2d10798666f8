#!/usr/bin/env python3
"""A bounded client load for rollout tests (stdlib only; runs inside a test host).

  python3 load_client.py URL MODEL OUT.json [--rate 8] [--max-seconds 600] [--stop-file F]
        [--api-key K] [--kind completion|embedding] [--workers-url URL/list_workers]

Sends --rate requests per second (each in its own thread, 30 s timeout) to URL until the stop
file appears or --max-seconds pass (and never more than rate x max-seconds requests), checks
every response (HTTP 200 and a well-formed body naming MODEL) and writes a summary to OUT.json:
requests, ok, failed, the first failures, and the time of each failure. With --workers-url it
also reads a vllm-router's worker list once a second: min_workers is the capacity floor.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import urllib.error
import urllib.request


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--rate", type=float, default=8.0)
    ap.add_argument("--max-seconds", type=float, default=600.0)
    ap.add_argument("--stop-file")
    ap.add_argument("--api-key")
    ap.add_argument("--kind", choices=("completion", "embedding"), default="completion")
    ap.add_argument("--workers-url")
    args = ap.parse_args()
    path = "/v1/completions" if args.kind == "completion" else "/v1/embeddings"
    body = ({"model": args.model, "prompt": "vllm-fleet rollout", "max_tokens": 4} if args.kind == "completion"
            else {"model": args.model, "input": "vllm-fleet rollout"})
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = "Bearer " + args.api_key
    lock = threading.Lock()
    stats = {"requests": 0, "ok": 0, "failed": 0, "failures": [], "latencies": []}
    start = time.monotonic()

    def one(n: int) -> None:
        t0 = time.monotonic()
        error = None
        try:
            req = urllib.request.Request(args.url.rstrip("/") + path, data=data, headers=headers, method="POST")
            with urllib.request.urlopen(req, timeout=30) as resp:
                answer = json.loads(resp.read().decode())
                if resp.status != 200 or answer.get("model") != args.model or not answer.get("choices" if
                                                                                            args.kind == "completion" else "data"):
                    error = f"bad answer {resp.status}: {str(answer)[:120]}"
        except urllib.error.HTTPError as exc:
            error = f"HTTP {exc.code}: {exc.read()[:120]!r}"
        except Exception as exc:  # connection refused/reset, timeouts: all failures
            error = f"{type(exc).__name__}: {exc}"
        with lock:
            stats["latencies"].append(time.monotonic() - t0)
            if error:
                stats["failed"] += 1
                if len(stats["failures"]) < 20:
                    stats["failures"].append({"n": n, "at": round(t0 - start, 2), "error": error})
            else:
                stats["ok"] += 1

    workers = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            try:
                with urllib.request.urlopen(args.workers_url, timeout=5) as resp:
                    workers.append(len(json.loads(resp.read().decode()).get("urls") or []))
            except Exception:
                pass
            done.wait(1.0)

    if args.workers_url:
        threading.Thread(target=sample, daemon=True).start()
    threads = []
    limit = int(args.rate * args.max_seconds)
    n = 0
    while n < limit and time.monotonic() - start < args.max_seconds:
        if args.stop_file and os.path.exists(args.stop_file):
            break
        thread = threading.Thread(target=one, args=(n,), daemon=True)
        thread.start()
        threads.append(thread)
        n += 1
        next_at = start + n / args.rate
        time.sleep(max(0.0, next_at - time.monotonic()))
    for thread in threads:
        thread.join(timeout=35)
    done.set()
    lat = sorted(stats.pop("latencies")) or [0.0]
    stats.update(min_workers=min(workers) if workers else None, max_workers=max(workers) if workers else None,
                 requests=n, seconds=round(time.monotonic() - start, 1), p50=round(lat[len(lat) // 2], 3),
                 p99=round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 3))
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(stats, handle)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
