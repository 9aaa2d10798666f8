"""Upstream-corpus-shaped outputs: one record = one process of one rendering.

``render-batch`` (and the conformance session) feed records of the form
``{"inputs": {...}, "role": ..., "node_rank": ...}`` and get back the ``outputs``
object upstream's renderer produced for that process.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, Iterator, Mapping, Optional, Tuple

from .loader import Catalog
from .render import RenderError, resolve
from .rendermodel import Process, Rendering, Request

WORKER_ROLES = ("worker", "instance_worker")
INSTANCE_ROLES = ("instance", "instance_head", "instance_worker")


def request_from_inputs(inputs: Mapping[str, Any]) -> Request:
    if not isinstance(inputs, Mapping) or not isinstance(inputs.get("hf_id"), str):
        raise RenderError("inputs.hf_id: expected the recipe id")
    node_count = inputs.get("node_count")
    return Request(
        hf_id=inputs["hf_id"],
        variant=inputs.get("variant") or "default",
        hardware=inputs.get("hardware"),
        strategy=inputs.get("strategy"),
        node_count=node_count if isinstance(node_count, int) else 1,
        features=list(inputs.get("features") or []),
        feature_modes=dict(inputs.get("feature_modes") or {}),
        advanced_args=[str(a) for a in (inputs.get("advanced_args") or [])],
        pd_nodes=inputs.get("pd_nodes"),
        kv_offload=inputs.get("kv_offload"),
        kv_instances=inputs.get("kv_instances"),
        omni_task=inputs.get("omni_task") if "omni_task" in inputs else None,
    )


def render_request(cat: Catalog, req: Request) -> Rendering:
    recipe = cat.recipes.get(req.hf_id)
    if recipe is None:
        raise RenderError(f"unknown recipe {req.hf_id!r}")
    return resolve(recipe, req, cat.strategies, cat.taxonomy)


def process_outputs(rendering: Rendering, proc: Process, with_command: bool) -> Dict[str, Any]:
    """The upstream ``outputs`` object of one process."""
    deploy = rendering.deploy_type
    if proc.kind == "router":
        out: Dict[str, Any] = {"deploy_type": deploy, "command": proc.command,
                               "install": proc.install}
        if proc.config is not None:
            out["router_config"] = proc.config
        else:
            out["router_port"] = proc.extras.get("router_port")
        return out
    if proc.kind == "mooncake_master":
        return {"deploy_type": deploy, "command": proc.command}
    if proc.kind == "mooncake_store":
        return {"deploy_type": deploy, "command": proc.command, "config": proc.config}
    dock = proc.docker or {}
    if proc.kind == "omni":
        return {"deploy_type": deploy, "docker_image": dock.get("image"),
                "docker_brand_key": dock.get("brand_key"), "command": proc.command,
                "env": proc.env, "model_id": proc.extras.get("model_id"),
                "docker_command": proc.docker_command()}
    out = {"deploy_type": deploy, "docker_image": dock.get("image"),
           "docker_brand_key": dock.get("brand_key")}
    if "cuda_map" in dock:
        out["docker_cuda_map"] = dock["cuda_map"]
    out["argv"] = proc.argv
    out["env"] = proc.env
    if with_command:
        out["command"] = proc.command
    out["port"] = proc.port
    out["docker_argv"] = proc.docker_argv()
    return out


def record_outputs(rendering: Rendering, role: str, node_rank: Optional[int],
                   kv_store_active: bool) -> Dict[str, Any]:
    proc = rendering.find(role, node_rank)
    if proc is None:
        roles = sorted({f"{p.role}" + (f"[{p.rank}]" if p.rank is not None else "")
                        for p in rendering.processes})
        raise RenderError(f"no process with role {role!r} rank {node_rank!r} "
                          f"(rendering has: {', '.join(roles)})")
    with_command = role not in WORKER_ROLES and role not in INSTANCE_ROLES and not (
        kv_store_active and role in ("prefill", "decode"))
    return process_outputs(rendering, proc, with_command)


class BatchRenderer:
    """Renders records, reusing the rendering of consecutive records of one call."""

    def __init__(self, cat: Catalog):
        self.cat = cat
        self._key: Any = None
        self._value: Any = None

    def rendering(self, inputs: Mapping[str, Any]) -> Tuple[Rendering, Request]:
        if inputs != self._key or self._key is None:
            self._key = inputs
            try:
                req = request_from_inputs(inputs)
                self._value = (render_request(self.cat, req), req)
            except RenderError as exc:
                self._value = exc
        if isinstance(self._value, Exception):
            raise self._value
        return self._value

    def outputs(self, record: Mapping[str, Any]) -> Dict[str, Any]:
        try:
            rendering, req = self.rendering(record.get("inputs") or {})
            store = req.kv_offload in self.cat.strategies and \
                self.cat.strategies[req.kv_offload].get("deploy_type") == "kv_store_lb"
            return record_outputs(rendering, record.get("role") or "single",
                                  record.get("node_rank"), store)
        except RenderError as exc:
            return {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - one bad line never stops a batch
            return {"error": f"internal error: {type(exc).__name__}: {exc}"}


def render_lines(cat: Catalog, lines: Iterable[str]) -> Iterator[str]:
    """JSON Lines in, JSON Lines out (same order); a bad line yields an error object."""
    batch = BatchRenderer(cat)
    for line in lines:
        if not line.strip():
            yield json.dumps({"error": "empty line"})
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            yield json.dumps({"error": f"invalid JSON: {exc}"})
            continue
        if not isinstance(record, dict):
            yield json.dumps({"error": "expected a JSON object per line"})
            continue
        yield json.dumps(batch.outputs(record), ensure_ascii=False)
