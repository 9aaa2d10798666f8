"""The validator's building blocks: problems, the vocabulary taken from the taxonomy and the
strategies, the checking context, the declarative spec DSL (Type, Enum, Ref, ListOf, MapOf,
Fields, OneOf, Custom) and the reference checks."""


from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from typing import (
    Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Union,
)

from ..yamlio import index_path as _index, join_path as _join  # the problem paths


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


UNSAFE_ENV = frozenset({"LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONSTARTUP",
                         "PYTHONHOME", "BASH_ENV", "ENV", "PATH"})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def env_name(ctx: _Ctx, path: str, name: str) -> None:
    """Environment variable names must be shell-safe identifiers."""
    if not _ENV_NAME.match(name):
        ctx.error(path, f"invalid environment variable name '{name}' (expected [A-Za-z_][A-Za-z0-9_]*)")
    elif name.upper() in UNSAFE_ENV:
        ctx.error(path, f"environment variable {name} changes what every process loads; a recipe may not set it")


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
