#!/usr/bin/env python3
"""A local Hugging Face Hub stand-in for the tests: serves model directories as Hub repos over
the endpoints huggingface_hub's snapshot_download calls, so the real client code path runs with
``HF_ENDPOINT=http://127.0.0.1:PORT`` (no network, no mock):

* ``GET /api/models/<org>/<name>/revision/<rev>``: the repo's info (``sha``: the commit, ``siblings``);
* ``GET /api/models/<org>/<name>/tree/<rev>[/<path>]``: the file list (type, path, size, oid);
* ``HEAD|GET /<org>/<name>/resolve/<rev>/<file>``: the file, with the headers the client reads
  (``X-Repo-Commit``, ``ETag``, ``Content-Length``); ranges are honoured.

Every file body sent is logged as one line ``GET <repo> <file> <bytes> from=<client address>`` to
``--log`` (the test counts downloads per file, and who downloaded, from it), every other request
as ``ASK <method> <path>`` (a run that
must not touch the Hub shows none). Revisions: each ``--repo`` directory is one commit (a sha1
of its manifest); a repo given more than once has several, ``main`` being the last given;
anything else is 404. ``--bind`` (default 127.0.0.1): the address it listens on (the test
network's gateway where a test host's containers download themselves); ``--rate-mib``: file
bodies are sent at most that fast, all requests together (a simulated Hub link; unset: as fast
as the disk).

    python3 tests/testbed/hub_mirror.py --repo org/name=/path/to/model [--repo org/name=/newer] --port 0 --log FILE --ready FILE
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

REPOS = {}      # "org/name" -> {"main": commit, commit: {"dir", "commit", "files": {rel: (size, sha256)}}}
LOCK = threading.Lock()
CHUNK = 1 << 20


class Link:
    """One shared link of ``rate`` bytes/s (None: unlimited): each chunk sent waits for its slot."""

    def __init__(self, rate=None):
        self.rate, self.lock, self.free_at = rate, threading.Lock(), 0.0

    def send(self, out, data: bytes) -> None:
        if self.rate:
            with self.lock:
                start = max(time.monotonic(), self.free_at)
                self.free_at = start + len(data) / self.rate
            time.sleep(max(0.0, start - time.monotonic()))
        out.write(data)


def load_repo(repo_id: str, root: str) -> dict:
    files = {}
    for base, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(base, name)
            rel = os.path.relpath(path, root)
            with open(path, "rb") as handle:
                files[rel] = (os.path.getsize(path), hashlib.sha256(handle.read()).hexdigest())
    commit = hashlib.sha1(json.dumps(files, sort_keys=True).encode()).hexdigest()
    return {"dir": root, "commit": commit, "files": files}


class Handler(BaseHTTPRequestHandler):
    log_path = None
    link = Link()

    def log_message(self, fmt, *args):  # quiet: the download log is the record
        pass

    def _json(self, doc, code=200):
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _repo(self, parts, rev):
        """The repo id and the commit ``rev`` names (None: no such repo or revision)."""
        repo_id = "/".join(parts[:2])
        commits = REPOS.get(repo_id) or {}
        return repo_id, commits.get(commits.get("main") if rev == "main" else rev)

    def _note(self, line):
        with LOCK, open(self.log_path, "a", encoding="utf-8") as log:
            log.write(line + "\n")

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path = unquote(urlparse(self.path).path)
        parts = [p for p in path.split("/") if p]
        if not (len(parts) >= 5 and parts[2] == "resolve" and self.command == "GET"):
            self._note(f"ASK {self.command} {path}")
        if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] in ("revision", "tree"):
            repo_id, repo = self._repo(parts[2:4], parts[5])
            if repo is None:
                return self._json({"error": "Repository or revision not found"}, 404)
            if parts[4] == "revision":
                return self._json({"id": repo_id, "modelId": repo_id, "sha": repo["commit"], "private": False,
                                   "siblings": [{"rfilename": f} for f in repo["files"]]})
            prefix = "/".join(parts[6:])
            return self._json([{"type": "file", "path": f, "size": s, "oid": h[:40]}
                               for f, (s, h) in repo["files"].items() if f.startswith(prefix)])
        if len(parts) >= 5 and parts[2] == "resolve":
            repo_id, repo = self._repo(parts[:2], parts[3])
            rel = "/".join(parts[4:])
            if repo is None or rel not in repo["files"]:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            size, digest = repo["files"][rel]
            start, end = 0, size - 1
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                lo, _, hi = rng[6:].partition("-")
                start, end = int(lo or 0), int(hi) if hi else size - 1
            self.send_response(206 if rng else 200)
            self.send_header("X-Repo-Commit", repo["commit"])
            self.send_header("ETag", f'"{digest}"')
            self.send_header("Content-Length", str(end - start + 1))
            if rng:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.end_headers()
            if self.command == "HEAD":
                return
            with open(os.path.join(repo["dir"], rel), "rb") as handle:
                handle.seek(start)
                left = end - start + 1
                while left > 0:
                    data = handle.read(min(CHUNK, left))
                    if not data:
                        break
                    self.link.send(self.wfile, data)
                    left -= len(data)
            self._note(f"GET {repo_id} {rel} {end - start + 1} from={self.client_address[0]}")
            return
        self._json({"error": f"not served here: {path}"}, 404)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", action="append", required=True, help="org/name=DIR")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--rate-mib", type=float, default=None, help="MiB/s of file bodies, all requests together")
    parser.add_argument("--log", required=True)
    parser.add_argument("--ready", required=True, help="file the port and commits are written to once listening")
    args = parser.parse_args(argv)
    for spec in args.repo:
        repo_id, _, root = spec.partition("=")
        repo = load_repo(repo_id, root)
        REPOS.setdefault(repo_id, {})[repo["commit"]] = repo
        REPOS[repo_id]["main"] = repo["commit"]
    Handler.log_path = args.log
    Handler.link = Link(args.rate_mib * (1 << 20) if args.rate_mib else None)
    server = ThreadingHTTPServer((args.bind, args.port), Handler)
    with open(args.ready + ".tmp", "w", encoding="utf-8") as handle:
        json.dump({"port": server.server_address[1], "commits": {k: v["main"] for k, v in REPOS.items()},
                   "revisions": {k: [c for c in v if c != "main"] for k, v in REPOS.items()}}, handle)
    os.replace(args.ready + ".tmp", args.ready)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
