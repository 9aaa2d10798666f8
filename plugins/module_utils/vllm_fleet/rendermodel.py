"""What a rendering is made of: the operator's choices (:class:`Request`), a hardware profile,
the processes to launch (:class:`Process`) and the :class:`Rendering` that lists them, and the
:class:`Context` that resolves a recipe's variant, strategy and hardware override layers once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from . import images as dk
from .coerce import as_map, truthy
from .shell import vllm_shell

DEFAULT_PORT = 8000


class Hardware:
    """A taxonomy hardware profile, normalised (generation read once)."""

    def __init__(self, hw_id: Optional[str], profile: Dict[str, Any]):
        self.hw_id = hw_id
        self.profile = profile
        self.brand: Optional[str] = profile.get("brand")
        self.gen: Optional[str] = dk.generation(profile)
        raw = profile.get("generation", profile.get("gpu_generation"))
        if isinstance(raw, list):
            self.gens = [g for g in raw if isinstance(g, str)]
        else:
            self.gens = [raw] if isinstance(raw, str) else []
        self.gpu_count: int = profile.get("gpu_count") or 1
        self.vram_gb: Optional[float] = profile.get("vram_gb")
        self._keys = [k for k in (hw_id, self.gen, (self.brand or "").lower() or None, "default")
                      if k is not None]

    def gen_lookup(self, mapping: Mapping[str, Any]) -> Any:
        """Generation key, else ``nvidia`` on NVIDIA profiles (first truthy hit)."""
        if not isinstance(mapping, dict):
            return None
        hit = mapping.get(self.gen) if self.gen is not None else None
        if truthy(hit):
            return hit
        if self.brand == "NVIDIA":
            hit = mapping.get("nvidia")
            if truthy(hit):
                return hit
        return None

    def ranked_lookup(self, mapping: Mapping[str, Any]) -> Any:
        """Exact id > generation > lower-case brand > ``default``."""
        if not isinstance(mapping, dict):
            return None
        for key in self._keys:
            if key in mapping and mapping[key] is not None:
                return mapping[key]
        return None


class Process:
    """One thing to run on one host.

    vLLM processes carry their docker image choice; the upstream-style docker argv and
    the shell forms are computed on first use (they are only printed or compared).
    """

    def __init__(self, role: str, rank: Optional[int], argv: List[str],
                 env: Optional[Dict[str, Any]] = None, port: Optional[int] = None,
                 kind: str = "vllm", command: Optional[str] = None,
                 install: Optional[str] = None, config: Optional[Dict[str, Any]] = None,
                 docker: Optional[Dict[str, Any]] = None):
        self.role = role
        self.rank = rank
        self.argv = argv
        self.env = env if env is not None else {}
        self.port = port
        self.kind = kind
        self._command = command
        self.install = install
        self.config = config
        self.docker = docker  # image, brand_key, [cuda_map], profile, published port
        self.extras: Dict[str, Any] = {}
        self._docker_argv: Optional[List[str]] = None

    def __repr__(self) -> str:
        return f"Process({self.role!r}, rank={self.rank!r}, argv={self.argv!r})"

    @property
    def command(self) -> str:
        """Shell form, for humans only."""
        if self._command is None:
            self._command = vllm_shell(self.argv)
        return self._command

    @property
    def image(self) -> Optional[str]:
        return self.docker["image"] if self.docker else None

    def docker_argv(self) -> Optional[List[str]]:
        """Upstream's ``docker run`` argv (GPU flags, --privileged, -e per env entry)."""
        if not self.docker:
            return None
        if self._docker_argv is None:
            d = self.docker
            self._docker_argv = dk.docker_argv(d["profile"], d["image"], self.argv, self.env,
                                               d["published"])
        return self._docker_argv

    def docker_command(self) -> Optional[str]:
        if not self.docker:
            return None
        d = self.docker
        return dk.docker_command(d["profile"], d["image"], self.argv, self.env, d["published"])


@dataclass
class Rendering:
    deploy_type: str
    processes: List[Process]
    meta: Dict[str, Any] = field(default_factory=dict)

    def find(self, role: str, rank: Optional[int] = None) -> Optional[Process]:
        for proc in self.processes:
            if proc.role == role and (rank is None or proc.rank is None or proc.rank == rank):
                return proc
        return None


@dataclass
class Request:
    """The operator's choices for one rendering (upstream ``resolveCommand`` inputs)."""

    hf_id: str
    variant: str = "default"
    hardware: Optional[str] = None
    strategy: Optional[str] = None
    node_count: int = 1
    features: Optional[List[str]] = None
    feature_modes: Dict[str, str] = field(default_factory=dict)
    advanced_args: List[str] = field(default_factory=list)
    pd_nodes: Any = None
    kv_offload: Optional[str] = None
    kv_instances: Any = None
    omni_task: Optional[str] = None


class Context:
    """Everything one rendering needs, resolved once."""

    def __init__(self, recipe: Mapping[str, Any], req: Request, strategies: Mapping[str, Any],
                 taxonomy: Mapping[str, Any]):
        self.recipe = recipe
        self.req = req
        self.strategies = strategies
        self.taxonomy = taxonomy
        variants = as_map(recipe.get("variants"))
        self.variant_key = req.variant if req.variant in variants else "default"
        self.variant = as_map(variants.get(self.variant_key))
        self.model = as_map(recipe.get("model"))
        profiles = as_map(taxonomy.get("hardware_profiles"))
        self.hw = Hardware(req.hardware, as_map(profiles.get(req.hardware)) if req.hardware else {})
        self.strategy_name = req.strategy
        self.strategy = as_map(strategies.get(req.strategy)) if req.strategy else {}
        self.so_all = as_map(recipe.get("strategy_overrides"))
        self.node_count = req.node_count if isinstance(req.node_count, int) else 1
        self.model_id = (self.variant.get("model_id") or self.model.get("model_id") or "unknown")
        self.docker = dk.docker_meta(recipe, self.variant, req.hardware, self.hw.profile)

    @property
    def gpu_count(self) -> int:
        return self.hw.gpu_count

    @property
    def total_gpus(self) -> int:
        return self.gpu_count * max(1, self.node_count)

    def so(self, name: Optional[str] = None) -> Dict[str, Any]:
        return as_map(self.so_all.get(name or self.strategy_name))

    # -- hardware override layers -------------------------------------------------
    def hw_layers(self, strategy_name: Optional[str], role: Optional[str]) -> List[Dict[str, Any]]:
        """Hardware override blocks in application order (args and env alike)."""
        so = self.so(strategy_name)
        layers: List[Dict[str, Any]] = []
        so_gen = self.hw.gen_lookup(as_map(so.get("hardware_overrides")))
        if so_gen is not None:
            layers.append(as_map(so_gen))
        else:
            for source in (self.recipe.get("hardware_overrides"),
                           self.variant.get("hardware_overrides")):
                hit = self.hw.gen_lookup(as_map(source))
                if hit is not None:
                    layers.append(as_map(hit))
        exact = as_map(so.get("hardware_overrides")).get(self.hw.hw_id) if self.hw.hw_id else None
        if exact is not None:
            layers.append(as_map(exact))
        if role:
            role_exact = as_map(as_map(so.get(role)).get("hardware_overrides")).get(self.hw.hw_id)
            if role_exact is not None and self.hw.hw_id:
                layers.append(as_map(role_exact))
        return layers

    def variant_exact(self) -> Dict[str, Any]:
        if not self.hw.hw_id:
            return {}
        return as_map(as_map(self.variant.get("hardware_overrides")).get(self.hw.hw_id))


def vllm_process(ctx: Context, role: str, rank: Optional[int], argv: List[str],
                 env: Dict[str, Any], port: int, docker_port: Optional[int] = None) -> Process:
    """A vLLM server process; ``docker_port`` is the port upstream's docker line publishes."""
    docker = dict(ctx.docker)
    docker["profile"] = ctx.hw.profile
    docker["published"] = port if docker_port is None else docker_port
    return Process(role=role, rank=rank, argv=argv, env=env, port=port, docker=docker)
