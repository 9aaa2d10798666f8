"""vllm_fleet.serving: the one reading of a vLLM server's metrics (gate, drain, router gate),
and how a drain wait ended. The metric text is vLLM 0.32's exposition format (two engines of a
data-parallel server each have their own label set)."""

from __future__ import annotations

import json

from vllm_fleet.serving import drain_outcome, finished, in_flight, request_body, response

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 2.0
vllm:num_requests_running{engine="1",model_name="tiny"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0
vllm:num_requests_waiting{engine="1",model_name="tiny"} 3.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 7.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 2.0
vllm:request_success_total{engine="1",finished_reason="length",model_name="tiny"} 1e+01
"""
IDLE = METRICS.replace("} 2.0\nvllm:num_requests_running", "} 0.0\nvllm:num_requests_running") \
    .replace('engine="1",model_name="tiny"} 1.0', 'engine="1",model_name="tiny"} 0.0') \
    .replace('engine="1",model_name="tiny"} 3.0', 'engine="1",model_name="tiny"} 0.0')


def test_in_flight_and_finished_sum_every_engine():
    assert in_flight(METRICS) == 6.0
    assert finished(METRICS) == 19.0
    assert in_flight(IDLE) == 0.0


def test_a_text_without_the_series_is_unknown_never_zero():
    for text in ("", "<html>401 Unauthorized</html>", "# TYPE other gauge\nother 0\n", None, 42):
        assert in_flight(text) is None and finished(text) is None


def item(graceful=True):
    return {"name": "vllm-fleet-x-r0", "port": 8000, **({"stop_timeout": 150} if graceful else {})}


def test_drained():
    out = drain_outcome({"item": item(), "status": 200, "content": IDLE}, 2.4)
    assert out == {"seconds": 2.4, "read": True, "left": 0.0, "graceful": True,
                   "text": "drained in 2.4 s, 0 requests in flight"}


def test_requests_left_after_the_wait():
    out = drain_outcome({"item": item(), "status": 200, "content": METRICS}, 120.3)
    assert out["left"] == 6.0 and out["read"] and "vLLM's graceful stop lets them finish" in out["text"]
    cut = drain_outcome({"item": item(False), "status": 200, "content": METRICS}, 120.3)
    assert "they will be cut" in cut["text"] and not cut["graceful"]


def test_an_unreadable_metrics_endpoint_is_not_drained():
    for result, why in (({"status": 401, "content": "Unauthorized"}, "HTTP 401"),
                        ({"status": -1, "msg": "Status code was -1: Connection refused"}, "Connection refused"),
                        ({"status": 200, "content": "<html>proxy</html>"}, "no vllm:num_requests_running")):
        out = drain_outcome({"item": item(False), **result}, 1.0)
        assert out["read"] is False and out["left"] is None and why in out["text"], out
        assert out["text"].endswith("NOT drained")
        graceful = drain_outcome({"item": item(True), **result}, 1.0)
        assert graceful["text"].endswith("left to vLLM's graceful stop")


def test_serving_is_a_real_answer_with_a_result():
    path, body = request_body("completion", "tiny", 3)
    assert path == "/v1/completions" and body["model"] == "tiny" and body["max_tokens"] == 1 and "3" in body["prompt"]
    assert request_body("embedding", "minilm")[0] == "/v1/embeddings"
    done = json.dumps({"choices": [{"text": " a", "finish_reason": "length"}]})
    assert response("completion", 200, done) == {"endpoint": "/v1/completions", "text": " a", "finish_reason": "length"}
    assert response("embedding", 200, json.dumps({"data": [{"embedding": [0.1, 0.2]}]})) == {
        "endpoint": "/v1/embeddings", "dimension": 2}
    # an error, an answer without a result, an empty vector, a proxy page: not serving
    for kind, status, text in (("completion", 500, done), ("completion", 200, json.dumps({"choices": []})),
                               ("completion", 200, json.dumps({"error": {"message": "overloaded"}})),
                               ("embedding", 200, json.dumps({"data": [{"embedding": []}]})),
                               ("completion", 200, "<html>ok</html>"), ("completion", None, "refused")):
        assert response(kind, status, text) is None, (kind, status, text)


def test_a_gates_prompts_differ_from_their_first_character():
    """vllm-router's cache_aware policy pins a prompt whose prefix matches a worker's cache to that
    worker: the gate's requests must not share their start (CI saw 8 of 8 go to one worker)."""
    firsts = [request_body("completion", "m", n)[1]["prompt"][0] for n in range(1, 10)]
    assert len(set(firsts)) == 9, firsts
