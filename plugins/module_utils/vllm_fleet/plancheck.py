"""The one check of a host plan's shape: a ``vllm_fleet_plan`` dict against the plan's own types
(hostplan.HostPlan and PlannedProcess, their fields' annotations). Every role runs it through
the filter ``vllm_fleet_checked_plan`` while Ansible validates the role's arguments, so a plan
a role is handed (the planner's, a recorded one, a hand-made one in a test) is refused with
the field that is wrong before any task reads it; the roles' argument_specs declare the plan as
a dict and nothing of its fields.

A field the dataclass marks Optional may be None or left out (``to_dict`` leaves some out);
every other field must be there; a key no field declares is refused (a misspelling, or a plan
from a newer vllm-fleet)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Dict, List, Mapping

from .hostplan import HostPlan, PlannedProcess

_SCALARS = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _fields(cls: type) -> Dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


_HOST = _fields(HostPlan)
_PROCESS = _fields(PlannedProcess)


def _optional(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


_KINDS = ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (Mapping, "mapping"), (list, "list"))


def _describe(value: Any) -> str:
    """The value's kind as the plan's types say it (Ansible's tagged subclasses of str and the
    rest are their base type) and its text, shortened."""
    kind = next((name for base, name in _KINDS if isinstance(value, base)), type(value).__name__)
    text = repr(str(value) if isinstance(value, str) else value)
    return f"{kind} {text if len(text) <= 40 else text[:37] + '...'}"


def _check(value: Any, hint: Any, where: str, out: List[str]) -> None:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        if value is None and type(None) in args:
            return
        rest = [a for a in args if a is not type(None)]
        hint, origin, args = rest[0], typing.get_origin(rest[0]), typing.get_args(rest[0])
    if hint is Any:
        return
    if hint in _SCALARS:
        ok = isinstance(value, hint) and not (hint is int and isinstance(value, bool))
        if hint is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            out.append(f"{where}: expected {_SCALARS[hint]}, got {_describe(value)}")
        return
    if origin in (dict, Dict) or hint in (dict, Dict):
        if not isinstance(value, Mapping):
            out.append(f"{where}: expected a mapping, got {_describe(value)}")
        return
    if origin in (list, List):
        if not isinstance(value, list):
            out.append(f"{where}: expected a list, got {_describe(value)}")
            return
        inner = args[0] if args else Any
        for index, item in enumerate(value):
            if inner is PlannedProcess:
                _record(item, _PROCESS, f"{where}[{index}]", out)
            else:
                _check(item, inner, f"{where}[{index}]", out)
        return
    raise TypeError(f"{where}: {hint} has no check")   # a new annotation: teach _check it


def _record(value: Any, fields: Mapping[str, Any], where: str, out: List[str]) -> None:
    if not isinstance(value, Mapping):
        out.append(f"{where}: expected a mapping, got {_describe(value)}")
        return
    for name, hint in fields.items():
        if name in value:
            _check(value[name], hint, f"{where}.{name}", out)
        elif not _optional(hint):
            out.append(f"{where}.{name}: missing")
    unknown = sorted(str(k) for k in value if k not in fields)
    if unknown:
        out.append(f"{where}: unknown key(s) {', '.join(unknown)} (a plan of another vllm-fleet version?)")


def problems(plan: Any, where: str = "vllm_fleet_plan") -> List[str]:
    """What is wrong with a host plan dict, one line per field (empty: it is a plan)."""
    out: List[str] = []
    _record(plan, _HOST, where, out)
    return out
