"""The light stand-in server keeps a keep-alive connection usable after any answer.

vllm-router's cache_aware policy POSTs /v1/completions/render (a 404 on vLLM's default server
and on the stand-in) and then sends the completion on the same pooled connection. The stand-in
used to answer the 404 without reading the request body; the body was then parsed as the next
request line and http.server answered 501 "Unsupported method": the 501 CI once saw through the
router. These tests send each error answer and then a completion on one connection."""

from __future__ import annotations

import http.client
import json
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "fakes"))
import vllm_standin_server as standin  # noqa: E402

BODY = json.dumps({"model": "m", "prompt": "hello", "max_tokens": 2}, separators=(",", ":"))


@pytest.fixture()
def server():
    srv = standin.Server(("127.0.0.1", 0), standin.Handler)
    srv.names, srv.model, srv.api_keys = ["m"], "m", ["sekret"]
    srv.started, srv.lock, srv.running, srv.done, srv.latency = 0.0, threading.Lock(), 0, 0, 0.0
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("path,headers,status", [
    ("/v1/completions/render", {"Authorization": "Bearer sekret"}, 404),   # unknown path
    ("/health", {}, 405),                                                  # a GET-only path POSTed
    ("/v1/completions", {}, 401),                                          # no API key
    ("/v1/completions", {"Authorization": "Bearer sekret"}, 200),
])
def test_connection_stays_usable_after_each_answer(server, path, headers, status):
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=5)
    conn.request("POST", path, BODY, {"Content-Type": "application/json", **headers})
    first = conn.getresponse()
    first.read()
    assert first.status == status
    conn.request("POST", "/v1/completions", BODY, {"Content-Type": "application/json",
                                                    "Authorization": "Bearer sekret"})
    second = conn.getresponse()
    answer = json.loads(second.read())
    assert second.status == 200, answer
    assert answer["choices"][0]["text"]
    conn.close()


def test_bad_content_length_is_a_400_and_closes(server):
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=5)
    conn.putrequest("POST", "/v1/completions")
    conn.putheader("Content-Length", "abc")
    conn.endheaders()
    answer = conn.getresponse()
    assert answer.status == 400
    assert answer.getheader("Connection") in (None, "close") or answer.will_close
