"""Validator for vLLM recipe trees (the public ``vllm-project/recipes`` schema).

A recipe tree is a directory holding ``models/<org>/<repo>.yaml`` recipes,
``strategies/*.yaml``, ``kv_store/*.yaml`` and ``taxonomy.yaml``.  Several trees
can be stacked: later roots override recipes (by ``<org>/<repo>``), strategies and
kv_store deployments (by ``name``) and taxonomy entries of earlier roots.  A root
may hold only some of these parts; cross references are checked against the
merged taxonomy and strategies of all roots.

Every file is checked and every problem is reported; nothing stops at the first.
Checks cover unknown keys, value types, fixed enums, references (hardware ids,
strategies, features, modes, variants, tasks, kv options) and YAML 1.1 / 1.2
reading differences (``yes``, ``0777``, ``1:30`` ...), which are warnings.

The key sets, types and value domains follow the path tables of the conformance
``SCHEMA.md`` (sections 2-5 and appendix A).  Values that are valid upstream but
unusual (``meta.hardware: supported``, ``difficulty: hard``, a feature-level
``hardware`` map, docker images such as ``docker pull vllm/...``, empty
``compatible_strategies``) are accepted.  Entries that upstream silently ignores
(an exact GPU id where only generations are looked up, a ``meta.hardware`` id
missing from the taxonomy, overrides that only one strategy reads) are warnings.

Only the standard library and PyYAML are used, so the module runs both inside
Ansible modules and from the command-line tool.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import (
    Any,
    Callable,
    Dict,
    FrozenSet,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

import yaml

from .loader import merge_taxonomy, tree_files
from .yamlio import Yaml12Loader, load_yaml, yaml11_traps

__all__ = [
    "Problem",
    "validate_trees",
    "validate_recipe",
    "validate_taxonomy",
    "validate_strategy",
    "validate_kv_store",
    "format_problems",
]

ERROR = "error"
WARNING = "warning"
DOCUMENT = "(document)"  # path used for problems about a whole file

StrategiesArg = Optional[Union[Mapping[str, Any], Iterable[str]]]


# --------------------------------------------------------------------------- #
# Problems
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Problem:
    """One finding: where it is (file and dotted key path) and what is wrong."""

    file: str
    path: str
    message: str
    severity: str = ERROR

    def __str__(self) -> str:
        return f"{self.file}: {self.path}: {self.message}"


def _natural_key(text: str) -> Tuple[Any, ...]:
    """Sort key that orders ``args[2]`` before ``args[10]``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def format_problems(problems: Iterable[Problem]) -> str:
    """One line per problem, sorted by file then path.

    Lines read ``<file>: <path>: <severity>: <message>``.
    """
    ordered = sorted(
        problems,
        key=lambda p: (p.file, _natural_key(p.path), p.severity, p.message),
    )
    return "\n".join(f"{p.file}: {p.path}: {p.severity}: {p.message}" for p in ordered)


# --------------------------------------------------------------------------- #
# Vocabulary taken from the taxonomy and the strategies
# --------------------------------------------------------------------------- #

# Hardware-key sites (SCHEMA.md 6.4): which kinds of keys a site accepts.
GPU = "gpu"  # exact taxonomy profile ids only
META_GPU = "meta_gpu"  # like GPU, but unknown ids are only a warning
GEN = "gen"  # generation or 'nvidia' (exact ids are never consulted)
GEN_OR_GPU = "gen_or_gpu"  # generation, 'nvidia' or exact id
LOOKUP = "lookup"  # exact id > generation > lower-case brand > 'default'
GATE = "gate"  # generation or exact id
NODES = "nodes"  # exact id or 'default'
ROLE_GPU = "role_gpu"  # exact id only; generation keys are ignored upstream


@dataclass(frozen=True)
class _Vocab:
    """Names that recipes may reference; ``None`` means "unknown, do not check"."""

    profiles: Optional[FrozenSet[str]] = None
    generations: FrozenSet[str] = frozenset()
    brands: FrozenSet[str] = frozenset()
    tasks: Optional[FrozenSet[str]] = None
    kv_options: Optional[FrozenSet[str]] = None
    kv_groups: Optional[FrozenSet[str]] = None
    strategies: Optional[Mapping[str, Optional[str]]] = None  # name -> deploy_type
    kv_stores: FrozenSet[str] = frozenset()

    @property
    def brand_keys(self) -> FrozenSet[str]:
        return frozenset(b.lower() for b in self.brands)

    def hardware_keys(self, site: str) -> FrozenSet[str]:
        """Keys accepted without comment at a hardware-keyed site."""
        profiles = self.profiles or frozenset()
        gens = self.generations
        table = {
            GPU: profiles,
            META_GPU: profiles,
            GEN: gens | {"nvidia"},
            GEN_OR_GPU: gens | {"nvidia"} | profiles,
            LOOKUP: profiles | gens | self.brand_keys | {"default"},
            GATE: profiles | gens,
            NODES: profiles | {"default"},
            ROLE_GPU: profiles,
        }
        return frozenset(table[site])


def _as_str_list(value: Any) -> List[str]:
    """Strings of a string-or-list value (other items dropped)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def _strategy_table(strategies: StrategiesArg) -> Tuple[Optional[Dict[str, Optional[str]]], Set[str]]:
    """Split a strategies argument into serving strategies and kv_store ids."""
    if strategies is None:
        return None, set()
    serving: Dict[str, Optional[str]] = {}
    kv_stores: Set[str] = set()
    if isinstance(strategies, Mapping):
        for name, spec in strategies.items():
            deploy = spec.get("deploy_type") if isinstance(spec, Mapping) else None
            if deploy == "kv_store_lb":
                kv_stores.add(str(name))
            else:
                serving[str(name)] = deploy if isinstance(deploy, str) else None
    else:
        serving = {str(name): None for name in strategies}
    return serving, kv_stores


def _build_vocab(taxonomy: Optional[Mapping[str, Any]], strategies: StrategiesArg) -> _Vocab:
    """Collect the referenceable names from a taxonomy and a strategy map."""
    serving, kv_stores = _strategy_table(strategies)
    if not isinstance(taxonomy, Mapping):
        return _Vocab(strategies=serving, kv_stores=frozenset(kv_stores))
    profiles = taxonomy.get("hardware_profiles")
    profiles = profiles if isinstance(profiles, Mapping) else {}
    gens: Set[str] = set()
    brands: Set[str] = set()
    for spec in profiles.values():
        if isinstance(spec, Mapping):
            gens.update(_as_str_list(spec.get("generation")))
            gens.update(_as_str_list(spec.get("gpu_generation")))
            brands.update(_as_str_list(spec.get("brand")))
    tasks = taxonomy.get("tasks")
    task_ids = None
    if isinstance(tasks, list):
        task_ids = frozenset(
            t["id"] for t in tasks if isinstance(t, Mapping) and isinstance(t.get("id"), str)
        )
    kv = taxonomy.get("kv_offload")
    groups = taxonomy.get("kv_offload_groups")
    if serving is None and isinstance(taxonomy.get("strategies"), list):
        serving = {s: None for s in _as_str_list(taxonomy["strategies"])}
    return _Vocab(
        profiles=frozenset(str(k) for k in profiles),
        generations=frozenset(gens),
        brands=frozenset(brands),
        tasks=task_ids,
        kv_options=frozenset(str(k) for k in kv) if isinstance(kv, Mapping) else None,
        kv_groups=frozenset(str(k) for k in groups) if isinstance(groups, Mapping) else None,
        strategies=serving,
        kv_stores=frozenset(kv_stores),
    )


# --------------------------------------------------------------------------- #
# Checking context and declarative specs
# --------------------------------------------------------------------------- #


@dataclass
class _Ctx:
    """Where problems go while one file is checked."""

    file: str
    vocab: _Vocab
    problems: List[Problem] = field(default_factory=list)
    loaded: bool = False    # data from loader.Catalog (dates already YYYY-MM-DD strings)

    def error(self, path: str, message: str) -> None:
        self.problems.append(Problem(self.file, path or DOCUMENT, message, ERROR))

    def warn(self, path: str, message: str) -> None:
        self.problems.append(Problem(self.file, path or DOCUMENT, message, WARNING))


def _join(path: str, key: Any) -> str:
    """Dotted child path of a map key."""
    return f"{path}.{key}" if path else str(key)


def _index(path: str, i: int) -> str:
    """Child path of a list item."""
    return f"{path}[{i}]"


def _kind(value: Any) -> str:
    """JSON-ish type name used in messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, datetime.date):
        return "date"
    return type(value).__name__


def _names(values: Iterable[str]) -> str:
    """Sorted, comma-separated names for messages."""
    return ", ".join(sorted(values)) or "none"


class Spec:
    """A check for the value found at one path."""

    expects = "value"
    plural = "values"

    def check(self, ctx: _Ctx, path: str, value: Any) -> None:  # pragma: no cover
        raise NotImplementedError


# Kinds a Type spec may accept; "number" includes integers.
_KIND_TESTS: Dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "map": lambda v: isinstance(v, dict),
    "list": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
    "date": lambda v: isinstance(v, datetime.date) and not isinstance(v, datetime.datetime),
}
_PLURALS = {"string": "strings", "integer": "integers", "number": "numbers",
            "boolean": "booleans", "map": "maps", "list": "lists", "date": "dates"}


class Type(Spec):
    """Value must have one of the given kinds (optionally a minimum)."""

    def __init__(self, *kinds: str, minimum: Optional[int] = None) -> None:
        self.kinds = kinds
        self.minimum = minimum
        self.expects = " or ".join(kinds)
        self.plural = " or ".join(_PLURALS.get(k, k) for k in kinds)
        if kinds == ("date",):
            self.expects = "date (unquoted YYYY-MM-DD)"

    def matches(self, value: Any) -> bool:
        return any(_KIND_TESTS[k](value) for k in self.kinds)

    def check(self, ctx: _Ctx, path: str, value: Any) -> None:
        if ctx.loaded and self.kinds == ("date",) and isinstance(value, str) and \
                re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            return  # the loader turned the file's date into this string
        if not self.matches(value):
            ctx.error(path, f"expected {self.expects}, got {_kind(value)}")
        elif self.minimum is not None and isinstance(value, (int, float)) and value < self.minimum:
            ctx.error(path, f"expected {self.expects} >= {self.minimum}, got {value}")


STR = Type("string")
INT = Type("integer")
POS_INT = Type("integer", minimum=1)
NUM = Type("number", minimum=0)
NODE_COUNT = Type("integer", minimum=0)
BOOL = Type("boolean")
DATE = Type("date")
SCALAR = Type("string", "number", "boolean")
ENV_VALUE = Type("string", "number")


class Enum(Spec):
    """String out of a fixed set."""

    def __init__(self, *values: str) -> None:
        self.values = values
        self.expects = "one of " + ", ".join(values)
        self.plural = "strings (" + ", ".join(values) + ")"

    def check(self, ctx: _Ctx, path: str, value: Any) -> None:
        if not isinstance(value, str):
            ctx.error(path, f"expected string ({', '.join(self.values)}), got {_kind(value)}")
        elif value not in self.values:
            ctx.error(path, f"expected one of {', '.join(self.values)}, got '{value}'")


class Ref(Spec):
    """String naming something defined elsewhere (hardware, strategy, task ...)."""

    expects = "string"
    plural = "strings"

    def __init__(self, check_name: Callable[[_Ctx, str, str], None]) -> None:
        self.check_name = check_name

    def check(self, ctx: _Ctx, path: str, value: Any) -> None:
        if not isinstance(value, str):
            ctx.error(path, f"expected string, got {_kind(value)}")
        else:
            self.check_name(ctx, path, value)


class ListOf(Spec):
    """List whose items all satisfy ``item``."""

    def __init__(self, item: Spec) -> None:
        self.item = item
        self.expects = f"list of {item.plural}"
        self.plural = f"lists of {item.plural}"

    def check(self, ctx: _Ctx, path: str, value: Any) -> None:
        if not isinstance(value, list):
            ctx.error(path, f"expected {self.expects}, got {_kind(value)}")
            return
        for i, item in enumerate(value):
            self.item.check(ctx, _index(path, i), item)


KeyCheck = Callable[[_Ctx, str, str], None]


def _check_key_type(ctx: _Ctx, path: str, key: Any) -> bool:
    """Report a non-string map key; True when the key is a string."""
    if isinstance(key, str):
        return True
    ctx.error(_join(path, key), f"expected string key, got {_kind(key)} (quote it)")
    return False


class MapOf(Spec):
    """Map keyed by author-chosen names (optionally checked) to ``value`` specs."""

    expects = "map"
    plural = "maps"

    def __init__(self, value: Spec, keys: Optional[KeyCheck] = None) -> None:
        self.value = value
        self.keys = keys

    def check(self, ctx: _Ctx, path: str, value: Any) -> None:
        if not isinstance(value, dict):
            ctx.error(path, f"expected map, got {_kind(value)}")
            return
        for key, item in value.items():
            if not _check_key_type(ctx, path, key):
                continue
            if self.keys is not None:
                self.keys(ctx, _join(path, key), key)
            self.value.check(ctx, _join(path, key), item)


class Fields(Spec):
    """Map with a fixed key set; unknown keys are errors."""

    expects = "map"
    plural = "maps"

    def __init__(self, fields: Mapping[str, Spec], required: Sequence[str] = ()) -> None:
        self.fields = dict(fields)
        self.required = tuple(required)

    def check(self, ctx: _Ctx, path: str, value: Any) -> None:
        if not isinstance(value, dict):
            ctx.error(path, f"expected map, got {_kind(value)}")
            return
        for key in self.required:
            if key not in value:
                ctx.error(path, f"missing required key '{key}'")
        for key, item in value.items():
            spec = self.fields.get(key) if isinstance(key, str) else None
            if spec is None:
                ctx.error(_join(path, key), f"unknown key '{key}' (allowed: {_names(self.fields)})")
            else:
                spec.check(ctx, _join(path, key), item)


class OneOf(Spec):
    """Value whose shape is chosen by its kind, e.g. ``tp``: integer or map."""

    def __init__(self, **by_kind: Spec) -> None:
        self.by_kind = by_kind
        self.expects = " or ".join(by_kind)
        self.plural = " or ".join(_PLURALS.get(k, k) for k in by_kind)

    def check(self, ctx: _Ctx, path: str, value: Any) -> None:
        for kind, spec in self.by_kind.items():
            if _KIND_TESTS[kind](value):
                spec.check(ctx, path, value)
                return
        ctx.error(path, f"expected {self.expects}, got {_kind(value)}")


class Custom(Spec):
    """Escape hatch for shapes the combinators do not express."""

    def __init__(self, func: Callable[[_Ctx, str, Any], None], expects: str) -> None:
        self.func = func
        self.expects = expects

    def check(self, ctx: _Ctx, path: str, value: Any) -> None:
        self.func(ctx, path, value)


# --------------------------------------------------------------------------- #
# Reference checks
# --------------------------------------------------------------------------- #


def hardware(site: str) -> KeyCheck:
    """Check a hardware key or id against what ``site`` accepts."""

    def check(ctx: _Ctx, path: str, name: str) -> None:
        vocab = ctx.vocab
        if vocab.profiles is None:
            return
        accepted = vocab.hardware_keys(site)
        if name in accepted:
            return
        _report_hardware(ctx, site, path, name, accepted)

    return check


def _report_hardware(ctx: _Ctx, site: str, path: str, name: str, accepted: FrozenSet[str]) -> None:
    """Error, or warning where upstream just ignores the key, for an unaccepted hardware key."""
    vocab = ctx.vocab
    profiles = vocab.profiles or frozenset()
    if site == GEN and name in profiles:
        ctx.warn(path, f"'{name}' is an exact GPU id, but this map is only looked up by "
                       f"generation ({_names(vocab.generations)}) or 'nvidia'; the entry is never used")
    elif site == ROLE_GPU and name in (vocab.generations | {"nvidia"}):
        ctx.warn(path, f"'{name}' is not a GPU id; prefill/decode hardware_overrides are looked "
                       f"up by exact GPU id only, so the entry is never used")
    elif site == META_GPU:
        ctx.warn(path, f"unknown hardware '{name}' is not a taxonomy profile and has no effect "
                       f"(known: {_names(accepted)})")
    else:
        ctx.error(path, f"unknown hardware '{name}' (known: {_names(accepted)})")


def strategy_ref(ctx: _Ctx, path: str, name: str) -> None:
    """Check that ``name`` is a serving strategy."""
    known = ctx.vocab.strategies
    if known is None or name in known:
        return
    hint = " (a kv_store deployment, not a serving strategy)" if name in ctx.vocab.kv_stores else ""
    ctx.error(path, f"unknown strategy '{name}'{hint} (known: {_names(known)})")


def task_ref(ctx: _Ctx, path: str, name: str) -> None:
    """Check a ``meta.tasks`` entry against the taxonomy tasks."""
    known = ctx.vocab.tasks
    if known is not None and name not in known:
        ctx.error(path, f"unknown task '{name}' (known: {_names(known)})")


def kv_option_ref(ctx: _Ctx, path: str, name: str) -> None:
    """Check a ``kv_offload_support`` key against taxonomy options and kv_store ids."""
    options = ctx.vocab.kv_options
    if options is None:
        return  # no taxonomy kv_offload section to check against
    known = options | ctx.vocab.kv_stores
    if name not in known:
        ctx.error(path, f"unknown kv offload option '{name}' (known: {_names(known)})")


def brand_ref(ctx: _Ctx, path: str, name: str) -> None:
    """Check a brand name (``NVIDIA``, ``AMD`` ...) against the taxonomy."""
    if ctx.vocab.profiles is not None and name not in ctx.vocab.brands:
        ctx.error(path, f"unknown brand '{name}' (known: {_names(ctx.vocab.brands)})")


def generation_ref(ctx: _Ctx, path: str, name: str) -> None:
    """Check a generation name (``hopper``, ``blackwell`` ...) against the taxonomy."""
    if ctx.vocab.profiles is not None and name not in ctx.vocab.generations:
        ctx.error(path, f"unknown generation '{name}' (known: {_names(ctx.vocab.generations)})")


def kv_group_ref(ctx: _Ctx, path: str, name: str) -> None:
    """Check a kv_offload option's ``group`` against ``kv_offload_groups``."""
    known = ctx.vocab.kv_groups
    if known is not None and name not in known:
        ctx.error(path, f"unknown kv_offload group '{name}' (known: {_names(known)})")


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_name(ctx: _Ctx, path: str, name: str) -> None:
    """Environment variable names must be shell-safe identifiers."""
    if not _ENV_NAME.match(name):
        ctx.error(path, f"invalid environment variable name '{name}' (expected [A-Za-z_][A-Za-z0-9_]*)")
    elif name.upper() in UNSAFE_ENV:
        ctx.error(path, f"environment variable {name} changes what every process loads; a recipe may not set it")


# --------------------------------------------------------------------------- #
# Recipe schema (SCHEMA.md section 2)
# --------------------------------------------------------------------------- #

# loader-level variables no recipe may set (the inventory contract refuses them too)
UNSAFE_ENV = frozenset({"LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONSTARTUP",
                         "PYTHONHOME", "BASH_ENV", "ENV", "PATH"})
ARGS = ListOf(STR)
ENV = MapOf(ENV_VALUE, keys=env_name)
PRECISIONS = ("bf16", "fp8", "nvfp4", "int4", "mxfp4", "int8", "int2/4/8", "mxfp8", "fp4")
BRAND_KEYS = ("nvidia", "amd", "tpu", "intel")
CUDA_KEYS = ("cu129", "cu130")
SUPPORT = Enum("unsupported", "supported")


def _positive_int_or_map(site: str) -> Spec:
    """A positive integer, or a hardware-keyed map of positive integers."""
    return OneOf(integer=POS_INT, map=MapOf(POS_INT, keys=hardware(site)))


_CUDA_MAP = Fields({k: STR for k in CUDA_KEYS})
_BRAND_MAP = Fields({"nvidia": OneOf(string=STR, map=_CUDA_MAP), "amd": STR, "tpu": STR, "intel": STR})


def _check_docker_image(ctx: _Ctx, path: str, value: Any) -> None:
    """String, brand map ``{nvidia, amd, tpu, intel}`` or bare CUDA map."""
    if isinstance(value, str):
        if not value.strip():
            ctx.error(path, "expected a docker image, got an empty string")
    elif isinstance(value, dict):
        keys = set(value)
        is_cuda = bool(keys) and keys <= set(CUDA_KEYS)
        (_CUDA_MAP if is_cuda else _BRAND_MAP).check(ctx, path, value)
    else:
        ctx.error(path, f"expected string, brand map ({', '.join(BRAND_KEYS)}) or CUDA map "
                        f"({', '.join(CUDA_KEYS)}), got {_kind(value)}")


DOCKER_IMAGE = Custom(_check_docker_image, "docker image")


_GPU_MIN_GPUS = OneOf(integer=POS_INT, map=MapOf(POS_INT, keys=strategy_ref))


def _check_min_gpus(ctx: _Ctx, path: str, value: Any) -> None:
    """``strategy_min_gpus``: a number, or a map by strategy id and/or GPU id."""
    if not isinstance(value, dict):
        POS_INT.check(ctx, path, value)
        return
    strategies = ctx.vocab.strategies
    profiles = ctx.vocab.profiles
    for key, item in value.items():
        if not _check_key_type(ctx, path, key):
            continue
        sub = _join(path, key)
        if profiles is not None and key in profiles:
            _GPU_MIN_GPUS.check(ctx, sub, item)
            continue
        if strategies is not None and key not in strategies and profiles is not None:
            ctx.error(sub, f"unknown strategy or hardware '{key}' (strategies: {_names(strategies)}; "
                           f"hardware: {_names(profiles)})")
        POS_INT.check(ctx, sub, item)


_META = Fields({
    "title": STR,
    "slug": STR,
    "provider": STR,
    "description": STR,
    "date_added": DATE,
    "date_updated": DATE,
    "difficulty": Enum("beginner", "intermediate", "advanced", "hard"),
    "tasks": ListOf(Ref(task_ref)),
    "performance_headline": STR,
    "related_recipes": ListOf(STR),
    "hardware": MapOf(Enum("verified", "supported", "unsupported"), keys=hardware(META_GPU)),
    "default_hardware": Ref(hardware(GPU)),
    "platforms": ListOf(Fields({"id": STR, "blurb": STR, "install": STR, "script": STR})),
})

# `command` under install.docker appears in newer upstream recipes (the seed has it)
_INSTALL_CHANNEL_DOCKER = OneOf(boolean=BOOL, null=Type("null"), map=Fields({"command": STR, "note": STR}))
_INSTALL_CHANNEL_PIP = OneOf(boolean=BOOL, null=Type("null"), map=Fields({"command": STR, "note": STR}))

_MODEL = Fields({
    "model_id": STR,
    "parameter_count": STR,
    "active_parameters": STR,
    "architecture": Enum("dense", "moe"),
    "context_length": Type("integer", minimum=0),
    "min_vllm_version": STR,
    "base_args": ARGS,
    "base_env": ENV,
    "docker_image": DOCKER_IMAGE,
    "docker_source": Fields({"mount_path": STR}),
    "nightly_required": BOOL,
    "supports_dcp": BOOL,
    "flashinfer_autotune": BOOL,
    "install": Fields({"docker": _INSTALL_CHANNEL_DOCKER, "pip": _INSTALL_CHANNEL_PIP}),
}, required=("model_id",))

_VARIANT = Fields({
    "label": STR,
    "description": STR,
    "model_id": STR,
    "precision": Enum(*PRECISIONS),
    "precision_hardware": Fields({"brand": Ref(brand_ref), "generation": Ref(generation_ref)}),
    "supported_hardware": ListOf(Ref(hardware(GPU))),
    "vram_minimum_gb": NUM,
    "min_vllm_version": STR,
    "tp": _positive_int_or_map(LOOKUP),
    "extra_args": ARGS,
    "extra_env": ENV,
    "docker_image": DOCKER_IMAGE,
    "default_modes": MapOf(STR),
    "hardware_overrides": MapOf(
        Fields({"extra_args": ARGS, "extra_env": ENV, "docker_image": STR}),
        keys=hardware(GEN_OR_GPU),
    ),
})

_HARDWARE_GATE = MapOf(SUPPORT, keys=hardware(GATE))

_MODE = Fields({
    "label": STR,
    "description": STR,
    "args": ARGS,
    "variants": ListOf(STR),
    "hardware": _HARDWARE_GATE,
    "hardware_overrides": MapOf(Fields({"args": ARGS}), keys=hardware(LOOKUP)),
})

_FEATURE = Fields({
    "label": STR,
    "description": STR,
    "args": ARGS,
    "modes": MapOf(_MODE),
    "default_mode": STR,
    "strategies": ListOf(Ref(strategy_ref)),
    "hardware": _HARDWARE_GATE,
    "hardware_overrides": MapOf(Fields({"args": ARGS}), keys=hardware(GEN)),
    "companion": Fields({"label": STR, "description": STR, "command": STR}),
})

_HW_ENV_ARGS = Fields({"extra_args": ARGS, "extra_env": ENV})

_PD_ROLE = Fields({
    "parallelism": Enum("tp", "tep", "dep"),
    "tp": POS_INT,
    "nodes": OneOf(integer=NODE_COUNT, map=MapOf(NODE_COUNT, keys=hardware(NODES))),
    "vllm_args": ARGS,
    "extra_args": ARGS,
    "env": ENV,
    "parallel_flag": STR,
    "hardware_overrides": MapOf(_HW_ENV_ARGS, keys=hardware(ROLE_GPU)),
})

_STRATEGY_OVERRIDE = Fields({
    "tp": _positive_int_or_map(LOOKUP),
    "extra_args": ARGS,
    "vllm_args": ARGS,
    "env": ENV,
    "extra_env": ENV,
    "hardware_overrides": MapOf(_HW_ENV_ARGS, keys=hardware(GEN_OR_GPU)),
    "prefill": _PD_ROLE,
    "decode": _PD_ROLE,
    "router": Fields({"intra_node_data_parallel_size": POS_INT}),
    "pool_modes": ListOf(Enum("tp", "tep", "dep")),
})

_OMNI_TASK = Fields({
    "id": STR,
    "key": STR,
    "label": STR,
    "description": STR,
    "endpoint": STR,
    "model_id": STR,
    "vram_minimum_gb": NUM,
    "extra_args": ARGS,
    "curl": STR,
    "axes": MapOf(STR),
    "hardware_overrides": MapOf(
        Fields({"extra_args": ARGS, "curl": STR, "vram_minimum_gb": NUM}),
        keys=hardware(LOOKUP),
    ),
}, required=("id",))

_OMNI = Fields({
    "tasks": ListOf(OneOf(string=STR, map=_OMNI_TASK)),
    "port": POS_INT,
    "serve_binary": STR,
    "task_label": STR,
    "task_hint": STR,
    "variant_label": STR,
    "variant_hint": STR,
    "task_axes": ListOf(Fields({
        "id": STR,
        "label": STR,
        "options": ListOf(Fields({"id": STR, "label": STR}, required=("id",))),
    }, required=("id",))),
})

_RECIPE = Fields({
    "meta": _META,
    "model": _MODEL,
    "variants": MapOf(_VARIANT),
    "features": MapOf(_FEATURE),
    "opt_in_features": ListOf(STR),
    "hardware_opt_in_features": MapOf(ListOf(STR), keys=hardware(GPU)),
    "compatible_strategies": ListOf(Ref(strategy_ref)),
    "default_strategy": Ref(strategy_ref),
    "strategy_hardware": MapOf(
        MapOf(SUPPORT, keys=hardware(LOOKUP)), keys=strategy_ref
    ),
    "strategy_min_gpus": Custom(_check_min_gpus, "integer or map"),
    "strategy_overrides": MapOf(_STRATEGY_OVERRIDE, keys=strategy_ref),
    "hardware_overrides": MapOf(
        Fields({"extra_args": ARGS, "extra_env": ENV, "install_note": STR}),
        keys=hardware(GEN),
    ),
    "kv_offload_support": MapOf(Enum("verified", "unsupported"), keys=kv_option_ref),
    "kv_cache_strategy_hardware": MapOf(MapOf(SCALAR)),
    "guide": STR,
    "dependencies": ListOf(Fields({
        "command": STR,
        "note": STR,
        "brand": STR,
        "optional": BOOL,
        "install_modes": ListOf(Enum("pip", "docker")),
    })),
    "hardware_notes": MapOf(
        Fields({"title": STR, "body": STR, "link": Fields({"href": STR, "label": STR})}),
        keys=hardware(GPU),
    ),
    "omni": _OMNI,
}, required=("model", "variants"))


# --------------------------------------------------------------------------- #
# Recipe cross references (features, modes, variants, strategies)
# --------------------------------------------------------------------------- #


def _dict(value: Any) -> Dict[Any, Any]:
    """The value if it is a map, else an empty map (for cross checks on ill-typed data)."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> List[Any]:
    """The value if it is a list, else an empty list."""
    return value if isinstance(value, list) else []


def _check_feature_refs(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """Feature names in opt-in lists; args vs modes; default_mode; mode variants."""
    features = _dict(data.get("features"))
    variants = _dict(data.get("variants"))
    known = _names(str(k) for k in features)
    for i, name in enumerate(_list(data.get("opt_in_features"))):
        if isinstance(name, str) and name not in features:
            ctx.error(_index("opt_in_features", i), f"unknown feature '{name}' (known: {known})")
    for gpu, names in _dict(data.get("hardware_opt_in_features")).items():
        for i, name in enumerate(_list(names)):
            if isinstance(name, str) and name not in features:
                path = _index(_join("hardware_opt_in_features", gpu), i)
                ctx.error(path, f"unknown feature '{name}' (known: {known})")
    for fname, feature in features.items():
        if isinstance(feature, dict):
            _check_one_feature(ctx, _join("features", fname), feature, variants)


def _check_one_feature(
    ctx: _Ctx, path: str, feature: Mapping[str, Any], variants: Mapping[str, Any]
) -> None:
    """One feature: ``args`` xor ``modes``, ``default_mode`` and mode ``variants``."""
    has_args, has_modes = "args" in feature, "modes" in feature
    if has_args and has_modes:
        ctx.error(path, "feature has both 'args' and 'modes' (expected one of them)")
    if not (has_args or has_modes or feature.get("hardware_overrides")):
        ctx.warn(path, "feature has no 'args', 'modes' or 'hardware_overrides'; enabling it adds nothing")
    modes = _dict(feature.get("modes"))
    default_mode = feature.get("default_mode")
    if isinstance(default_mode, str):
        if not has_modes:
            ctx.error(_join(path, "default_mode"), "default_mode set on a feature without 'modes'")
        elif default_mode not in modes:
            ctx.error(_join(path, "default_mode"),
                      f"unknown mode '{default_mode}' (known: {_names(str(m) for m in modes)})")
    for mname, mode in modes.items():
        for i, vname in enumerate(_list(_dict(mode).get("variants"))):
            if isinstance(vname, str) and vname not in variants:
                ctx.error(_index(_join(_join(path, f"modes.{mname}"), "variants"), i),
                          f"unknown variant '{vname}' (known: {_names(str(v) for v in variants)})")


def _check_variant_refs(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """``variants.default`` exists; ``default_modes`` name modal features and their modes."""
    variants = data.get("variants")
    if not isinstance(variants, dict):
        return
    if "default" not in variants:
        ctx.error("variants", f"missing variant 'default' (every recipe needs one; found: "
                              f"{_names(str(v) for v in variants)})")
    features = _dict(data.get("features"))
    profiles = ctx.vocab.profiles or frozenset()
    for vname, variant in variants.items():
        vpath = _join("variants", vname)
        for fname, mode in _dict(_dict(variant).get("default_modes")).items():
            path = _join(_join(vpath, "default_modes"), fname)
            _check_default_mode(ctx, path, features, fname, mode)
        for key, block in _dict(_dict(variant).get("hardware_overrides")).items():
            if isinstance(block, dict) and "docker_image" in block and profiles and key not in profiles:
                ctx.warn(_join(_join(vpath, f"hardware_overrides.{key}"), "docker_image"),
                         "docker_image is only read under an exact GPU id, not under a generation key")


def _check_default_mode(ctx: _Ctx, path: str, features: Mapping[str, Any], fname: Any, mode: Any) -> None:
    """``variants.<v>.default_modes.<feature>: <mode>`` must name a modal feature and its mode."""
    if fname not in features:
        ctx.error(path, f"unknown feature '{fname}' (known: {_names(str(f) for f in features)})")
        return
    modes = _dict(features[fname]).get("modes")
    if not isinstance(modes, dict):
        ctx.error(path, f"feature '{fname}' has no modes")
    elif isinstance(mode, str) and mode not in modes:
        known = _names(str(m) for m in modes)
        ctx.error(path, f"unknown mode '{mode}' for feature '{fname}' (known: {known})")


def _offered_strategies(data: Mapping[str, Any]) -> Set[str]:
    """Strategies listed as compatible or opted in via ``strategy_hardware``."""
    offered = {s for s in _list(data.get("compatible_strategies")) if isinstance(s, str)}
    for name, per_hw in _dict(data.get("strategy_hardware")).items():
        if "supported" in _dict(per_hw).values():
            offered.add(name)
    return offered


_PD_ONLY_KEYS = ("prefill", "decode", "router", "pool_modes")


def _check_strategy_refs(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """Overrides and defaults that only take effect for certain strategies."""
    offered = _offered_strategies(data)
    deploy_types = ctx.vocab.strategies or {}
    default = data.get("default_strategy")
    if default in deploy_types and offered and default not in offered:
        ctx.warn("default_strategy", f"'{default}' is not offered by compatible_strategies or "
                                     f"strategy_hardware, so it never applies")
    for name, override in _dict(data.get("strategy_overrides")).items():
        if not isinstance(override, dict):
            continue
        path = _join("strategy_overrides", name)
        if name in deploy_types and name not in offered:
            ctx.warn(path, f"overrides for '{name}', which compatible_strategies and strategy_hardware "
                           f"do not offer")
        if "tp" in override and name != "single_node_tp":
            ctx.warn(_join(path, "tp"), "tp is only read for single_node_tp")
        deploy = deploy_types.get(name)
        if deploy is not None and deploy != "pd_cluster":
            for key in _PD_ONLY_KEYS:
                if key in override:
                    ctx.warn(_join(path, key), f"'{key}' is only read for pd_cluster strategies "
                                               f"('{name}' is {deploy})")


def _check_omni_refs(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """Omni block vs ``meta.tasks``; task ``axes`` vs ``omni.task_axes``."""
    omni = data.get("omni")
    tasks = _list(_dict(data.get("meta")).get("tasks"))
    if isinstance(omni, dict) and "omni" not in tasks:
        ctx.warn("omni", "recipe has an omni block but meta.tasks does not list 'omni'")
    if omni is None and "omni" in tasks:
        ctx.warn("meta.tasks", "meta.tasks lists 'omni' but the recipe has no omni block")
    axes: Dict[str, Set[str]] = {}
    for axis in _list(_dict(omni).get("task_axes")):
        if isinstance(axis, dict) and isinstance(axis.get("id"), str):
            axes[axis["id"]] = {o.get("id") for o in _list(axis.get("options")) if isinstance(o, dict)}
    for i, task in enumerate(_list(_dict(omni).get("tasks"))):
        for axis, option in _dict(_dict(task).get("axes")).items():
            path = _join(_index("omni.tasks", i), f"axes.{axis}")
            if axis not in axes:
                ctx.error(path, f"unknown axis '{axis}' (known from omni.task_axes: {_names(axes)})")
            elif isinstance(option, str) and option not in axes[axis]:
                ctx.error(path, f"unknown option '{option}' for axis '{axis}' (known: "
                                f"{_names(o for o in axes[axis] if isinstance(o, str))})")


# --------------------------------------------------------------------------- #
# Strategies, kv_store and taxonomy schemas (SCHEMA.md 3-5, appendix A)
# --------------------------------------------------------------------------- #

_STRATEGY_ROLE = Fields({
    "vllm_args": ARGS,
    "env": ENV,
    "parallelism": Enum("tp", "tep", "dep"),
    "tp": POS_INT,
    "parallel_flag": STR,
})

_DEPLOY_TYPES = ("single_node", "multi_node", "pd_cluster")

_STRATEGY = Fields({
    "name": STR,
    "deploy_type": Enum(*_DEPLOY_TYPES),
    "display_name": STR,
    "short_label": STR,  # newer upstream (SCHEMA.md section 10)
    "description": STR,
    "orientation": STR,
    "hardware_match": Fields({
        "architecture": Enum("dense", "moe"),
        "min_gpus": POS_INT,
        "max_gpus": POS_INT,
        "multi_node": BOOL,
    }),
    "vllm_args": ARGS,
    "parallel_flag": STR,
    "parallelism": Enum("tp_pp", "tp_dp"),
    "env": ENV,
    "prefill": _STRATEGY_ROLE,
    "decode": _STRATEGY_ROLE,
    "router": Fields({"policy": STR}),
}, required=("name", "deploy_type"))

_KV_STORE = Fields({
    "name": STR,
    "deploy_type": Enum("kv_store_lb"),
    "display_name": STR,
    "label": STR,
    "description": STR,
    "order": INT,
    "default_instances": POS_INT,
    "min_vllm_version": STR,
    "router": Fields({"policy": STR, "install": STR, "port": POS_INT}),
    "vllm": Fields({
        "vllm_args": ARGS,
        "env": ENV,
        "install": Fields({k: STR for k in BRAND_KEYS}),
        "port": POS_INT,
    }),
    "pd": Fields({"prefill": Fields({"args": ARGS}), "decode": Fields({"args": ARGS})}),
    "mooncake_master": Fields({"command": STR, "description": STR}),
    "mooncake_store_config": Fields({
        "command": STR,
        "description": STR,
        "note": STR,
        "config": MapOf(SCALAR),
    }),
    "mooncake_vllm_config": Fields({"mode": STR, "note": STR, "template": MapOf(SCALAR)}),
}, required=("name", "deploy_type"))

_GENERATION = OneOf(string=STR, list=ListOf(STR))

_PROFILE = Fields({
    "brand": STR,
    "generation": _GENERATION,
    "gpu_generation": _GENERATION,  # legacy spelling still read upstream
    "display_name": STR,
    "description": STR,
    "gpu_count": POS_INT,
    "vram_gb": NUM,
    "multi_node": BOOL,
    "scalable": BOOL,
    "restricted": BOOL,
    "compute_arch": STR,  # newer upstream (SCHEMA.md section 10)
}, required=("brand", "gpu_count"))

_KV_OPTION = Fields({
    "display_name": STR,
    "label": STR,
    "description": STR,
    "group": Ref(kv_group_ref),
    "order": INT,
    "requires_opt_in": BOOL,
    "brands": ListOf(Ref(brand_ref)),
    "strategies": ListOf(Ref(strategy_ref)),
    "args": ARGS,
    "env": ENV,
    "install": STR,
    "docs_url": STR,
    "companion": Fields({"label": STR, "description": STR, "command": STR}, required=("command",)),
})

_TAXONOMY = Fields({
    "hardware_profiles": MapOf(_PROFILE),
    "tasks": ListOf(Fields({"id": STR, "display_name": STR, "description": STR}, required=("id",))),
    "strategies": ListOf(Ref(strategy_ref)),
    "kv_offload": MapOf(_KV_OPTION),
    "kv_offload_groups": MapOf(Fields({
        "display_name": STR,
        "label": STR,
        "description": STR,
        "docs_url": STR,
        "order": INT,
        "sub_row_label": STR,
        "tooltip": STR,
    })),
})


def _check_profiles(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """Each hardware profile needs a generation (or the legacy gpu_generation)."""
    for pid, profile in _dict(data.get("hardware_profiles")).items():
        if isinstance(profile, dict) and "generation" not in profile and "gpu_generation" not in profile:
            ctx.error(_join("hardware_profiles", pid), "missing required key 'generation'")


def _check_strategy_shape(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """Blocks that only one deploy_type reads."""
    deploy = data.get("deploy_type")
    if deploy not in _DEPLOY_TYPES:
        return  # already reported by the enum check
    if deploy != "pd_cluster":
        for key in ("prefill", "decode", "router"):
            if key in data:
                ctx.warn(key, f"'{key}' is only read for deploy_type pd_cluster (this is {deploy})")
    if "parallelism" in data and deploy != "multi_node":
        ctx.warn("parallelism", f"'parallelism' is only read for deploy_type multi_node (this is {deploy})")


# --------------------------------------------------------------------------- #
# Public single-document validators
# --------------------------------------------------------------------------- #


def _top_level_map(ctx: _Ctx, data: Any) -> bool:
    """Report a document whose top level is not a map."""
    if isinstance(data, dict):
        return True
    got = "an empty document" if data is None else _kind(data)
    ctx.error(DOCUMENT, f"expected a map at the top level, got {got}")
    return False


def _recipe_problems(data: Any, ctx: _Ctx) -> List[Problem]:
    """Schema and cross-reference checks of one recipe."""
    if _top_level_map(ctx, data):
        _RECIPE.check(ctx, "", data)
        _check_variant_refs(ctx, data)
        _check_feature_refs(ctx, data)
        _check_strategy_refs(ctx, data)
        _check_omni_refs(ctx, data)
    return ctx.problems


def validate_recipe(
    data: Any,
    file: str,
    taxonomy: Optional[Mapping[str, Any]] = None,
    strategies: StrategiesArg = None,
    loaded: bool = False,
) -> List[Problem]:
    """Validate one loaded recipe.

    ``taxonomy`` is the (merged) taxonomy mapping; ``strategies`` maps strategy
    names to their definitions (kv_store deployments, ``deploy_type:
    kv_store_lb``, may be included) or is an iterable of strategy names.  Checks
    that need a missing piece are skipped.
    """
    return _recipe_problems(data, _Ctx(str(file), _build_vocab(taxonomy, strategies), loaded=loaded))


def validate_strategy(data: Any, file: str) -> List[Problem]:
    """Validate one ``strategies/*.yaml`` document."""
    ctx = _Ctx(str(file), _Vocab())
    if _top_level_map(ctx, data):
        _STRATEGY.check(ctx, "", data)
        _check_strategy_shape(ctx, data)
    return ctx.problems


def validate_kv_store(data: Any, file: str) -> List[Problem]:
    """Validate one ``kv_store/*.yaml`` document."""
    ctx = _Ctx(str(file), _Vocab())
    if _top_level_map(ctx, data):
        _KV_STORE.check(ctx, "", data)
    return ctx.problems


def _taxonomy_problems(data: Any, ctx: _Ctx) -> List[Problem]:
    """Schema checks of one taxonomy document."""
    if _top_level_map(ctx, data):
        _TAXONOMY.check(ctx, "", data)
        _check_profiles(ctx, data)
    return ctx.problems


def validate_taxonomy(data: Any, file: str, strategies: StrategiesArg = None) -> List[Problem]:
    """Validate one ``taxonomy.yaml`` document.

    Brands, kv_offload groups and (when ``strategies`` is given) strategy names
    are checked against the document itself.
    """
    vocab = _build_vocab(data if isinstance(data, dict) else None, strategies)
    if strategies is None:
        vocab = replace(vocab, strategies=None)
    return _taxonomy_problems(data, _Ctx(str(file), vocab))


# --------------------------------------------------------------------------- #
# YAML loading with line-aware diagnostics
# --------------------------------------------------------------------------- #

_STR_TAG = "tag:yaml.org,2002:str"
_INT_TAG = "tag:yaml.org,2002:int"
_RESOLVERS_11 = yaml.SafeLoader.yaml_implicit_resolvers
_LEADING_ZERO = re.compile(r"^[-+]?0[0-9_]")


def _tag11(value: str) -> str:
    """Tag PyYAML's YAML 1.1 resolver gives a plain scalar."""
    candidates = _RESOLVERS_11.get(value[:1], []) + _RESOLVERS_11.get(None, [])
    for tag, regexp in candidates:
        if regexp.match(value):
            return tag
    return _STR_TAG


def _may_differ(node: yaml.ScalarNode) -> bool:
    """Cheap pre-filter: could YAML 1.1 read this plain scalar differently?"""
    if _tag11(node.value) != node.tag:
        return True
    return node.tag == _INT_TAG and bool(_LEADING_ZERO.match(node.value))


@dataclass
class _Scan:
    """What one walk over the node tree found."""

    duplicates: List[Tuple[str, str, int, int]] = field(default_factory=list)
    suspects: Dict[Tuple[int, str], str] = field(default_factory=dict)  # (line, text) -> path


def _scan_nodes(root: Optional[yaml.Node]) -> _Scan:
    """Find duplicate keys and plain scalars that YAML 1.1 may read differently."""
    scan = _Scan()
    stack: List[Tuple[yaml.Node, str]] = [(root, "")] if root is not None else []
    while stack:
        node, path = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            if not node.style and _may_differ(node):  # plain: None (Python) or "" (libyaml)
                scan.suspects.setdefault((node.start_mark.line + 1, node.value), path)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, _index(path, i)) for i, child in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            seen: Dict[str, int] = {}
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                child = _join(path, name)
                line = key.start_mark.line + 1
                if isinstance(key, yaml.ScalarNode) and name in seen:
                    scan.duplicates.append((child, name, seen[name], line))
                seen.setdefault(name, line)
                stack.append((key, child))
                stack.append((value, child))
    return scan


_UNREADABLE = object()  # YAML 1.1 reading that PyYAML cannot construct (e.g. '=')


def _describe(value: Any) -> str:
    """Type and value of a scalar reading, for trap messages."""
    if value is _UNREADABLE:
        return "an error (no constructor)"
    if isinstance(value, str):
        return f"string '{value}'"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    return f"{_kind(value)} {value!r}"


def _read11(raw: str) -> Any:
    """YAML 1.1 (PyYAML safe_load) reading of one scalar."""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return _UNREADABLE


def _trap_problems(file: str, text: str, scan: _Scan) -> List[Problem]:
    """Warnings for plain scalars whose YAML 1.1 and 1.2 readings differ."""
    if not scan.suspects:
        return []
    try:
        traps = yaml11_traps(text)
    except yaml.YAMLError:  # one scalar has a 1.1-only tag; read the suspects one by one
        traps = [(line, raw, load_yaml(raw), _read11(raw)) for line, raw in scan.suspects]
    problems = []
    for line, raw, v12, v11 in traps:
        path = scan.suspects.get((line, raw))
        if path is None:  # e.g. '.nan', which only differs because nan != nan
            continue
        if raw == "<<":
            message = (f"line {line}: merge key '<<' is read as a plain key '<<' by the YAML 1.2 loader, "
                       f"so nothing is merged; write the keys out")
        else:
            message = (f"line {line}: plain scalar '{raw}' reads as {_describe(v12)} in YAML 1.2 "
                       f"(upstream js-yaml) but as {_describe(v11)} in YAML 1.1; quote it or write it "
                       f"unambiguously")
        problems.append(Problem(file, path, message, WARNING))
    return problems


def _load_file(path: Path, file: str) -> Tuple[Any, List[Problem], bool]:
    """Read and parse one YAML file: ``(data, problems, ok)``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(file, DOCUMENT, f"cannot read file: {exc}")], False
    loader = Yaml12Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown line"
        reason = "; ".join(part for part in (exc.context, exc.problem) if part) or "syntax error"
        return None, [Problem(file, DOCUMENT, f"invalid YAML at {where}: {reason}")], False
    except yaml.YAMLError as exc:
        return None, [Problem(file, DOCUMENT, f"invalid YAML: {exc}")], False
    finally:
        loader.dispose()
    scan = _scan_nodes(node)
    problems = [
        Problem(file, child, f"duplicate key '{name}' (lines {first} and {line}); upstream js-yaml "
                             f"rejects the file, PyYAML keeps the last value")
        for child, name, first, line in scan.duplicates
    ]
    problems.extend(_trap_problems(file, text, scan))
    return data, problems, True


# --------------------------------------------------------------------------- #
# Trees
# --------------------------------------------------------------------------- #


@dataclass
class _Doc:
    """One loaded file of a tree."""

    kind: str  # "taxonomy", "strategy", "kv_store" or "recipe"
    root_index: int
    file: str
    data: Any
    ok: bool
    problems: List[Problem]


@dataclass
class _Tree:
    """Everything found under the roots, in root order."""

    problems: List[Problem] = field(default_factory=list)
    taxonomies: List[_Doc] = field(default_factory=list)
    strategies: List[_Doc] = field(default_factory=list)
    kv_stores: List[_Doc] = field(default_factory=list)
    recipes: List[_Doc] = field(default_factory=list)

    def documents(self) -> List[_Doc]:
        return self.taxonomies + self.strategies + self.kv_stores + self.recipes


def _load_doc(kind: str, index: int, path: Path) -> _Doc:
    """Load one file of a tree."""
    data, problems, ok = _load_file(path, str(path))
    return _Doc(kind, index, str(path), data, ok, problems)


def _discover(roots: Sequence[Path]) -> _Tree:
    """Load every relevant file of every root."""
    tree = _Tree()
    for index, root in enumerate(roots):
        if not root.is_dir():
            tree.problems.append(Problem(str(root), DOCUMENT, "recipe root is not a directory"))
            continue
        # the loader's rule for which files make a tree (one rule, see loader.tree_files)
        buckets = {"taxonomy": tree.taxonomies, "strategy": tree.strategies, "kv_store": tree.kv_stores,
                   "recipe": tree.recipes}
        for kind, path in tree_files(root):
            buckets[kind].append(_load_doc(kind, index, path))
        tree.problems.extend(_stray_files(root))
    return tree


def _stray_files(root: Path) -> List[Problem]:
    """YAML under ``models/`` that upstream would not pick up."""
    models = root / "models"
    problems = []
    for path in sorted(models.rglob("*.y*ml")) if models.is_dir() else []:
        if not path.is_file():
            continue
        if path.suffix == ".yml":
            problems.append(Problem(str(path), DOCUMENT, "ignored: recipe files must end in .yaml",
                                    WARNING))
        elif path.suffix == ".yaml" and len(path.relative_to(models).parts) < 2:
            problems.append(Problem(str(path), DOCUMENT,
                                    "ignored: recipes must live at models/<org>/<repo>.yaml"))
    return problems


def _merged_taxonomy(docs: Sequence[_Doc]) -> Optional[Dict[str, Any]]:
    """Merge the taxonomies of all roots; ``None`` when no root has one."""
    if not docs:
        return None
    merged: Dict[str, Any] = {}
    for doc in docs:
        merge_taxonomy(merged, _dict(doc.data))   # the loader's stacking
    return merged


def _named(docs: Sequence[_Doc], problems: List[Problem], kind: str) -> Dict[str, Dict[str, Any]]:
    """Index strategy-like documents by ``name``; later roots override earlier ones."""
    table: Dict[str, Dict[str, Any]] = {}
    origin: Dict[str, _Doc] = {}
    for doc in docs:
        name = _dict(doc.data).get("name")
        if not isinstance(name, str):
            continue
        first = origin.get(name)
        if first is not None and first.root_index == doc.root_index:
            problems.append(Problem(doc.file, "name", f"duplicate {kind} name '{name}' "
                                                      f"(also defined in {first.file})"))
        origin[name] = doc
        table[name] = doc.data
    return table


def _name_collisions(
    tree: _Tree, strategies: Mapping[str, Any], kv_stores: Mapping[str, Any]
) -> List[Problem]:
    """Strategies and kv_store deployments share one id space upstream."""
    by_name = {_dict(d.data).get("name"): d for d in tree.kv_stores}
    message = "kv_store name '{}' collides with a strategy of the same name"
    return [
        Problem(by_name[name].file, "name", message.format(name))
        for name in sorted(set(strategies) & set(kv_stores))
    ]


def validate_trees(roots: Sequence[Union[str, Path]]) -> List[Problem]:
    """Validate stacked recipe trees and return every problem found.

    Recipes, strategies, kv_store deployments and taxonomies of all roots are
    checked; references are resolved against the merged taxonomy (profiles,
    tasks, kv options, groups) and the merged strategies of all roots.
    """
    paths = [Path(r) for r in roots]
    tree = _discover(paths)
    problems = list(tree.problems)
    for doc in tree.documents():
        problems.extend(doc.problems)
    strategies = _named(tree.strategies, problems, "strategy")
    kv_stores = _named(tree.kv_stores, problems, "kv_store")
    problems.extend(_name_collisions(tree, strategies, kv_stores))
    taxonomy = _merged_taxonomy([d for d in tree.taxonomies if d.ok and isinstance(d.data, dict)])
    problems.extend(_missing_parts(paths, taxonomy, strategies))
    vocab = _build_vocab(taxonomy, strategies or None)
    vocab = replace(vocab, kv_stores=frozenset(kv_stores))
    for doc in tree.documents():
        if doc.ok:
            problems.extend(_check_doc(doc, vocab))
    return problems


def _missing_parts(paths: Sequence[Path], taxonomy: Any, strategies: Mapping[str, Any]) -> List[Problem]:
    """Report a stack without any taxonomy or strategies."""
    where = ", ".join(str(p) for p in paths) or "(no roots)"
    problems = []
    if taxonomy is None:
        problems.append(Problem(where, "taxonomy.yaml", "no readable taxonomy.yaml in any root; hardware, "
                                                        "task and kv_offload references are not checked"))
    if not strategies and not _list(_dict(taxonomy).get("strategies")):
        problems.append(Problem(where, "strategies", "no strategies/*.yaml in any root; strategy "
                                                     "references are not checked"))
    return problems


def _check_doc(doc: _Doc, vocab: _Vocab) -> List[Problem]:
    """Dispatch one loaded document to its validator."""
    ctx = _Ctx(doc.file, vocab)
    if doc.kind == "recipe":
        return _recipe_problems(doc.data, ctx)
    if doc.kind == "taxonomy":
        return _taxonomy_problems(doc.data, ctx)
    if doc.kind == "strategy":
        return validate_strategy(doc.data, doc.file)
    return validate_kv_store(doc.data, doc.file)
