"""What to offer and what to pick when the operator does not choose.

Mirrors upstream's selection helpers: compatible hardware for a variant, strategies
offered on a GPU, GPU floors and node counts, default hardware and the recommended
strategy.  Also validates explicit choices with errors that name the valid values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .coerce import as_list, as_map
from .render import RenderError
from .rendermodel import Hardware, Request

MAX_NODES = 16
CONSTRAINED_PRECISIONS = ("nvfp4", "fp4")
BLACKWELL_CONSTRAINT = {"brand": "NVIDIA", "generation": "blackwell"}


class ChoiceError(RenderError):
    """An operator choice that is not valid; the message lists the valid values.

    ``field``: the choice at fault (``variant``, ``hardware``, ``strategy``, ``nodes``,
    ``features``, ``feature_modes``, ``kv_offload``), so the plan can name the inventory
    variable (``vllm_fleet_<field>``); None when no single choice is.
    """

    def __init__(self, message: str, field: Optional[str] = None):
        super().__init__(message)
        self.field = field


def profiles(taxonomy: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
    return as_map(taxonomy.get("hardware_profiles"))


def hardware(taxonomy: Mapping[str, Any], hw_id: str) -> Hardware:
    return Hardware(hw_id, as_map(profiles(taxonomy).get(hw_id)))


def precision_constraint(variant: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    explicit = variant.get("precision_hardware")
    if isinstance(explicit, dict) and explicit:
        return explicit
    if variant.get("precision") in CONSTRAINED_PRECISIONS:
        return BLACKWELL_CONSTRAINT
    return None


def meets_constraint(hw: Hardware, constraint: Optional[Mapping[str, Any]]) -> bool:
    if not constraint:
        return True
    if constraint.get("brand") and hw.brand != constraint["brand"]:
        return False
    if constraint.get("generation") and constraint["generation"] not in hw.gens:
        return False
    return True


def scalable(hw: Hardware) -> bool:
    return hw.profile.get("scalable") is not False


def fits_node(variant: Mapping[str, Any], hw: Hardware) -> bool:
    need = variant.get("vram_minimum_gb")
    return not need or not hw.vram_gb or need <= hw.vram_gb


def compatible_hardware(recipe: Mapping[str, Any], variant: Mapping[str, Any],
                        taxonomy: Mapping[str, Any]) -> List[str]:
    """Hardware ids a variant can be deployed on, in taxonomy order."""
    declared = as_map(as_map(recipe.get("meta")).get("hardware"))
    allow = variant.get("supported_hardware")
    constraint = precision_constraint(variant)
    out = []
    for hw_id in profiles(taxonomy):
        hw = hardware(taxonomy, hw_id)
        if not meets_constraint(hw, constraint):
            continue
        if declared.get(hw_id) == "unsupported":
            continue
        if isinstance(allow, list) and allow and hw_id not in allow:
            continue
        if hw.profile.get("restricted") and hw_id not in declared:
            continue
        if not scalable(hw) and not fits_node(variant, hw):
            continue
        out.append(hw_id)
    return out


def gpu_floor(recipe: Mapping[str, Any], strategy: str, hw_id: Optional[str],
              pool_mode: Optional[str] = None) -> int:
    """Highest GPU floor that applies (``strategy_min_gpus``), 0 when none."""
    spec = recipe.get("strategy_min_gpus")
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        return int(spec)
    spec = as_map(spec)
    keys = [strategy]
    if pool_mode:
        keys += [f"multi_node_{pool_mode}", f"single_node_{pool_mode}"]
    floors = [spec[k] for k in keys if isinstance(spec.get(k), (int, float))]
    per_gpu = spec.get(hw_id) if hw_id else None
    if isinstance(per_gpu, (int, float)) and not isinstance(per_gpu, bool):
        floors.append(per_gpu)
    elif isinstance(per_gpu, dict):
        floors += [per_gpu[k] for k in keys if isinstance(per_gpu.get(k), (int, float))]
    return int(max(floors)) if floors else 0


def deploy_type(strategies: Mapping[str, Any], name: str) -> str:
    return as_map(strategies.get(name)).get("deploy_type") or "single_node"


def strategy_verdict(recipe: Mapping[str, Any], name: str, hw: Hardware) -> bool:
    per_hw = as_map(as_map(recipe.get("strategy_hardware")).get(name))
    verdict = hw.ranked_lookup(per_hw)
    if verdict is not None:
        return verdict == "supported"
    return name in as_list(recipe.get("compatible_strategies"))


def offered_strategies(recipe: Mapping[str, Any], hw_id: str, strategies: Mapping[str, Any],
                       taxonomy: Mapping[str, Any]) -> List[str]:
    """Serving strategies offered for a recipe on one GPU (listed + opt-ins, filtered)."""
    hw = hardware(taxonomy, hw_id)
    listed = [s for s in as_list(recipe.get("compatible_strategies")) if isinstance(s, str)]
    names = list(listed)
    for name, per_hw in as_map(recipe.get("strategy_hardware")).items():
        if name not in names and hw.ranked_lookup(as_map(per_hw)) == "supported":
            names.append(name)
    out = []
    for name in names:
        if not strategy_verdict(recipe, name, hw):
            continue
        kind = deploy_type(strategies, name)
        if kind in ("multi_node", "pd_cluster") and not scalable(hw):
            continue
        floor = gpu_floor(recipe, name, hw_id)
        limit = (MAX_NODES if kind in ("multi_node", "pd_cluster") else 1) * hw.gpu_count
        if floor > limit:
            continue
        out.append(name)
    return out


def nodes_for(recipe: Mapping[str, Any], strategy: str, hw_id: str, strategies: Mapping[str, Any],
              taxonomy: Mapping[str, Any]) -> int:
    if deploy_type(strategies, strategy) == "single_node":
        return 1
    floor = gpu_floor(recipe, strategy, hw_id)
    return max(1, math.ceil(floor / hardware(taxonomy, hw_id).gpu_count))


def default_hardware(recipe: Mapping[str, Any], variant: Mapping[str, Any],
                     taxonomy: Mapping[str, Any]) -> Optional[str]:
    candidates = compatible_hardware(recipe, variant, taxonomy)
    if not candidates:
        return None
    wanted = as_map(recipe.get("meta")).get("default_hardware")
    if wanted in candidates:
        return wanted
    constraint = precision_constraint(variant) or {}
    if constraint.get("generation") == "blackwell":
        for hw_id in ("b200", "gb200"):
            if hw_id in candidates:
                return hw_id
    if "h200" in candidates:
        return "h200"
    return sorted(candidates, key=lambda h: (hardware(taxonomy, h).brand != "NVIDIA", h))[0]


def recommend_strategy(recipe: Mapping[str, Any], offered: Sequence[str], nodes: int) -> Optional[str]:
    if not offered:
        return None
    wanted = recipe.get("default_strategy")
    if wanted:
        if nodes > 1 and isinstance(wanted, str) and wanted.startswith("single_node_"):
            multi = "multi_node_" + wanted[len("single_node_"):]
            if multi in offered:
                return multi
        if wanted in offered:
            return wanted
    if nodes > 1:
        for name in ("multi_node_tp", "multi_node_dep", "multi_node_tep"):
            if name in offered:
                return name
    if "single_node_tp" in offered:
        return "single_node_tp"
    return offered[0]


@dataclass
class Choice:
    """A complete, validated set of choices."""

    request: Request
    offered_hardware: List[str]
    offered_strategies: List[str]


def _one_of(what: str, value: Any, valid: Sequence[str], where: str = "", field: Optional[str] = None) -> ChoiceError:
    listing = ", ".join(valid) if valid else "(none)"
    suffix = f" for {where}" if where else ""
    return ChoiceError(f"unknown {what} {value!r}{suffix}; valid: {listing}", field)


def complete(recipe: Mapping[str, Any], req: Request, strategies: Mapping[str, Any],
             taxonomy: Mapping[str, Any]) -> Choice:
    """Fill unset choices with upstream's defaults and reject invalid ones."""
    variants = as_map(recipe.get("variants"))
    if req.variant not in variants:
        raise _one_of("variant", req.variant, list(variants), req.hf_id, "variant")
    variant = as_map(variants[req.variant])
    candidates = compatible_hardware(recipe, variant, taxonomy)
    if req.hardware is None:
        req.hardware = default_hardware(recipe, variant, taxonomy)
        if req.hardware is None:
            raise ChoiceError(f"variant {req.variant!r} of {req.hf_id} runs on no known hardware", "variant")
    elif req.hardware not in profiles(taxonomy):
        raise _one_of("hardware", req.hardware, list(profiles(taxonomy)), field="hardware")
    elif req.hardware not in candidates:
        raise ChoiceError(f"variant {req.variant!r} of {req.hf_id} cannot run on {req.hardware!r}; "
                          f"valid hardware: {', '.join(candidates) or '(none)'}", "variant")
    hw = hardware(taxonomy, req.hardware)
    offered = offered_strategies(recipe, req.hardware, strategies, taxonomy)
    omni = bool(as_map(recipe.get("omni"))) and not offered
    if omni:
        tasks = as_list(as_map(recipe.get("omni")).get("tasks"))
        ids = [t if isinstance(t, str) else (as_map(t).get("key") or as_map(t).get("id")) for t in tasks]
        if req.omni_task is None and ids:
            req.omni_task = ids[0]
        elif req.omni_task not in ids:
            raise _one_of("omni task", req.omni_task, [i for i in ids if i], req.hf_id)
        return Choice(req, candidates, [])
    if req.strategy is None:
        # grow to the nodes the variant needs, when a multi-node strategy is offered
        need = 1
        multi = any(deploy_type(strategies, s) == "multi_node" for s in offered)
        if multi and not fits_node(variant, hw) and hw.vram_gb:
            need = math.ceil(variant["vram_minimum_gb"] / hw.vram_gb)
        nodes = max(need, req.node_count or 1)
        req.strategy = recommend_strategy(recipe, offered, nodes)
        if req.strategy is None:
            raise ChoiceError(f"{req.hf_id} offers no strategy on {req.hardware!r}", "hardware")
        if deploy_type(strategies, req.strategy) == "single_node":
            # upstream's API keeps the grown count here (same argv); one node is what runs
            req.node_count = 1
        elif req.node_count <= 1:
            req.node_count = max(nodes, nodes_for(recipe, req.strategy, req.hardware, strategies, taxonomy))
    elif req.strategy not in offered:
        known = [s for s in strategies if deploy_type(strategies, s) != "kv_store_lb"]
        if req.strategy not in known:
            raise _one_of("strategy", req.strategy, known, field="strategy")
        raise ChoiceError(f"strategy {req.strategy!r} is not offered for {req.hf_id} on "
                          f"{req.hardware!r}; valid: {', '.join(offered) or '(none)'}", "strategy")
    kind = deploy_type(strategies, req.strategy)
    floor = gpu_floor(recipe, req.strategy, req.hardware)
    if kind == "single_node" and req.node_count > 1:
        raise ChoiceError(f"strategy {req.strategy!r} runs on one node; got --nodes {req.node_count}", "nodes")
    if kind == "multi_node" and floor and req.node_count * hw.gpu_count < floor:
        least = math.ceil(floor / hw.gpu_count)
        raise ChoiceError(f"strategy {req.strategy!r} needs at least {floor} GPUs on {req.hardware!r} "
                          f"({least} nodes of {hw.gpu_count}); got --nodes {req.node_count}", "nodes")
    if kind == "multi_node" and req.node_count < 1:
        raise ChoiceError(f"--nodes must be at least 1; got {req.node_count}", "nodes")
    _check_features(recipe, req)
    _check_kv(req, strategies, taxonomy)
    return Choice(req, candidates, offered)


def default_features(recipe: Mapping[str, Any], variant: Mapping[str, Any],
                     hw_id: Optional[str]) -> List[str]:
    """Features on by default: all minus opt-ins (global and per GPU), plus default_modes keys."""
    features = list(as_map(recipe.get("features")))
    off = set(as_list(recipe.get("opt_in_features")))
    if hw_id:
        off |= set(as_list(as_map(recipe.get("hardware_opt_in_features")).get(hw_id)))
    out = [f for f in features if f not in off]
    for name in as_map(variant.get("default_modes")):
        if name not in out:
            out.append(name)
    return out


def _check_features(recipe: Mapping[str, Any], req: Request) -> None:
    features = as_map(recipe.get("features"))
    if req.features is None:
        variant = as_map(as_map(recipe.get("variants")).get(req.variant))
        req.features = default_features(recipe, variant, req.hardware)
    for name in req.features:
        if name not in features:
            raise _one_of("feature", name, list(features), req.hf_id, "features")
    for name, mode in req.feature_modes.items():
        modes = as_map(as_map(features.get(name)).get("modes"))
        if name not in features:
            raise _one_of("feature", name, list(features), req.hf_id, "feature_modes")
        if mode not in modes:
            raise _one_of(f"mode of feature {name!r}", mode, list(modes), req.hf_id, "feature_modes")


def _check_kv(req: Request, strategies: Mapping[str, Any], taxonomy: Mapping[str, Any]) -> None:
    if req.kv_offload is None:
        return
    valid = list(as_map(taxonomy.get("kv_offload"))) + [
        s for s in strategies if deploy_type(strategies, s) == "kv_store_lb"]
    if req.kv_offload not in valid:
        raise _one_of("kv offload option", req.kv_offload, valid, field="kv_offload")
