"""YAML 1.2 (core schema) loading on top of PyYAML.

Upstream parses recipes with js-yaml 4, which implements the YAML 1.2 core schema.
PyYAML implements YAML 1.1, where unquoted ``yes``/``no``/``on``/``off`` are booleans,
``1:30`` is a base-60 integer and ``0777`` is octal.  The loader below swaps PyYAML's
implicit resolvers for the 1.2 core ones, so both parsers agree on every scalar.
Dates (``YYYY-MM-DD``) stay ``datetime.date`` like js-yaml's timestamp type; callers
that need upstream's API shape turn them into strings.

``yaml11_traps`` lists the plain scalars whose value differs between the two
versions, and ``scan_nodes`` finds duplicate keys and the plain scalars that may differ
(with their dotted paths); the validator (schema/trees.py) reports both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import yaml

try:  # the C loader is about 5x faster; fall back to pure Python
    _BaseLoader = yaml.CSafeLoader  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - depends on libyaml
    _BaseLoader = yaml.SafeLoader

_BOOL12 = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)\Z")
_NULL12 = re.compile(r"^(?:~|null|Null|NULL|)\Z")
_INT12 = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)\Z")
_FLOAT12 = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z"
)
_TIMESTAMP = re.compile(
    r"^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?"
    r"(?:(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?"
    r"(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)?)\Z"
)


class Yaml12Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """SafeLoader with YAML 1.2 core-schema implicit typing."""


Yaml12Loader.yaml_implicit_resolvers = {}
for _tag, _rx, _first in (
    ("tag:yaml.org,2002:bool", _BOOL12, list("tTfF")),
    ("tag:yaml.org,2002:null", _NULL12, ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:int", _INT12, list("-+0123456789")),
    ("tag:yaml.org,2002:float", _FLOAT12, list("-+.0123456789")),
    ("tag:yaml.org,2002:timestamp", _TIMESTAMP, list("0123456789")),
    ("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)\Z"), ["<"]),  # js-yaml merges too
):
    Yaml12Loader.add_implicit_resolver(_tag, _rx, _first)


def _construct_int(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    text = loader.construct_scalar(node)
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


def _construct_float(loader: yaml.SafeLoader, node: yaml.Node) -> float:
    text = str(loader.construct_scalar(node)).lower()
    if text.endswith(".inf"):
        return float("-inf") if text.startswith("-") else float("inf")
    if text.endswith(".nan"):
        return float("nan")
    return float(text)


def _construct_bool(loader: yaml.SafeLoader, node: yaml.Node) -> bool:
    return str(loader.construct_scalar(node)).lower() == "true"


Yaml12Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
Yaml12Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)
Yaml12Loader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)


def load_yaml(text: str) -> Any:
    """Parse one YAML document with YAML 1.2 core typing."""
    return yaml.load(text, Loader=Yaml12Loader)  # noqa: S506 - safe loader subclass


def yaml11_traps(text: str) -> List[Tuple[int, str, Any, Any]]:
    """Plain scalars that YAML 1.1 and YAML 1.2 read differently.

    Returns ``(line, scalar, yaml12_value, yaml11_value)`` tuples (1-based lines).
    """
    traps: List[Tuple[int, str, Any, Any]] = []
    for node in _plain_scalars(yaml.compose(text, Loader=yaml.SafeLoader)):
        if not node.value or node.value in ("=", "<<"):
            continue
        try:
            v11 = yaml.safe_load(node.value)
            v12 = load_yaml(node.value)
        except yaml.YAMLError:
            continue
        if type(v11) is not type(v12) or v11 != v12:
            traps.append((node.start_mark.line + 1, node.value, v12, v11))
    return traps


def _plain_scalars(node: Any):
    if node is None:
        return
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, yaml.ScalarNode):
            if cur.style is None:
                yield cur
        elif isinstance(cur, yaml.SequenceNode):
            stack.extend(reversed(cur.value))
        elif isinstance(cur, yaml.MappingNode):
            for key, value in reversed(cur.value):
                stack.append(value)
                stack.append(key)


# ---------------------------------------------------------------------------------
# scanning a composed document: duplicate keys and YAML 1.1 / 1.2 suspects, by path


def join_path(path: str, key: Any) -> str:
    """Dotted child path of a map key (the validator's problem paths)."""
    return f"{path}.{key}" if path else str(key)


def index_path(path: str, i: int) -> str:
    """Child path of a list item."""
    return f"{path}[{i}]"


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
class NodeScan:
    """What one walk over the node tree found."""

    duplicates: List[Tuple[str, str, int, int]] = field(default_factory=list)
    suspects: Dict[Tuple[int, str], str] = field(default_factory=dict)  # (line, text) -> path


def scan_nodes(root: Optional[yaml.Node]) -> NodeScan:
    """Find duplicate keys and plain scalars that YAML 1.1 may read differently."""
    scan = NodeScan()
    stack: List[Tuple[yaml.Node, str]] = [(root, "")] if root is not None else []
    while stack:
        node, path = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            if not node.style and _may_differ(node):  # plain: None (Python) or "" (libyaml)
                scan.suspects.setdefault((node.start_mark.line + 1, node.value), path)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, index_path(path, i)) for i, child in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            seen: Dict[str, int] = {}
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                child = join_path(path, name)
                line = key.start_mark.line + 1
                if isinstance(key, yaml.ScalarNode) and name in seen:
                    scan.duplicates.append((child, name, seen[name], line))
                seen.setdefault(name, line)
                stack.append((key, child))
                stack.append((value, child))
    return scan


UNREADABLE = object()  # YAML 1.1 reading that PyYAML cannot construct (e.g. '=')


def read11(raw: str) -> Any:
    """YAML 1.1 (PyYAML safe_load) reading of one scalar."""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return UNREADABLE
