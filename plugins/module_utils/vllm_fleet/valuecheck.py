"""One variable's value against its declaration (:class:`variables.Var`): type, range,
pattern and shape, with the few coercions ``-e key=value`` needs (a string of digits for a whole
number, Ansible's boolean words). :class:`Checker` collects the problems of one host, each
naming host and variable; contract.py adds the rules across values and calls it."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from .pathrules import path_problem
from .redact import shown
from .variables import CHOICE_RE, Var

PERCENT_RE = re.compile(r"^(100|[1-9]?[0-9])%\Z")
BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True,
              "false": False, "no": False, "off": False, "0": False}


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_int(value: Any) -> Optional[int]:
    """A whole number, or a string of decimal digits (what -e key=value gives); else None."""
    if is_int(value):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,12}", value.strip()):
        return int(value.strip())
    return None


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, float)) or is_int(value)


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {value}"
    if isinstance(value, str):
        return f"the string {shown(value)}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if value is None:
        return "null"
    return f"{type(value).__name__} {shown(value)}"


def _clean_text(text: str) -> Optional[str]:
    if "\x00" in text:
        return "contains a NUL byte"
    if re.search(r"[\n\r]", text):
        return "contains a line break"
    if re.search(r"[\x01-\x1f\x7f]", text.replace("\t", "")):
        return "contains a control character"
    return None


LINE_BREAK_IN_SECRET = ("contains a line break (the value is not shown); ansible-vault encrypt_string keeps the "
                        "newline of `echo`: encrypt it from `echo -n ...` or `printf %s ...`")


class Checker:
    def __init__(self, host: str):
        self.host = host
        self.problems: List[str] = []
        self.flagged: set = set()

    def bad(self, var: str, message: str) -> None:
        self.problems.append(f"{self.host}: {var}: {message}")
        self.flagged.add(re.split(r"[.\[]", var)[0])

    def text(self, spec: Var, value: Any, where: str) -> Optional[str]:
        secret = spec.scope == "secret"   # a secret's value is never shown
        if not isinstance(value, str):
            self.bad(where, f"must be a string, got {'a ' + type(value).__name__ if secret else _describe(value)}")
            return None
        if secret and re.search(r"[\n\r]", value):
            self.bad(where, LINE_BREAK_IN_SECRET)
            return None
        if spec.choices and value not in spec.choices:
            self.bad(where, f"{shown(value)} is not one of {', '.join(spec.choices)}")
            return None
        if not secret and _clean_text(value):
            self.bad(where, f"{shown(value)} {_clean_text(value)}")
            return None
        if spec.path:   # the path rule first: it says what is wrong more precisely than a pattern
            problem = path_problem(value, spec.path, spaces=spec.name == "model_path")
            if problem:
                self.bad(where, f"{shown(value)} {problem}")
                return None
        if spec.pattern is not None and not spec.pattern.fullmatch(value):
            self.bad(where, f"{'the value (not shown)' if secret else shown(value)} is not {spec.pattern_hint or 'valid'}")
            return None
        if spec.name in ("deployment", "instance") and ".." in value:
            self.bad(where, f"{shown(value)} must not contain '..'")
            return None
        return value

    def whole(self, spec: Var, value: Any, where: str, low: Optional[int], high: Optional[int]) -> Optional[int]:
        number = _as_int(value)
        if number is None:
            self.bad(where, f"must be a whole number, got {_describe(value)}")
            return None
        if (low is not None and number < low) or (high is not None and number > high):
            span = f"{low}..{high}" if high is not None else f">= {low}"
            self.bad(where, f"{number} is out of range ({span})")
            return None
        return number

    def value(self, spec: Var, value: Any) -> Any:
        where = spec.full
        kind = spec.kind
        if spec.name == "bench_request_rate" and (is_int(value) or isinstance(value, float)):
            value = str(value)   # a rate written as a YAML number
        if kind == "str":
            return self.text(spec, value, where)
        if kind == "int":
            return self.whole(spec, value, where, spec.minimum, spec.maximum)
        if kind == "port":
            return self.whole(spec, value, where, 1, 65535)
        if kind == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in BOOL_WORDS:
                return BOOL_WORDS[value.strip().lower()]
            self.bad(where, f"must be true or false, got {_describe(value)}")
            return None
        if kind == "str_or_list":
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, list) or not items:
                self.bad(where, f"must be a string or a non-empty list of strings, got {_describe(value)}")
                return None
            out = [self.text(spec, item, f"{where}[{i}]") for i, item in enumerate(items)]
            return None if None in out else out
        if kind == "batch":
            steps = value if isinstance(value, list) else [value]
            out = []
            for i, step in enumerate(steps):
                at = f"{where}[{i}]" if isinstance(value, list) else where
                if isinstance(step, str) and PERCENT_RE.fullmatch(step.strip()) and step.strip() != "0%":
                    out.append(step.strip())
                else:
                    number = self.whole(spec, step, at, spec.minimum, spec.maximum) if not (
                        isinstance(step, str) and step.strip().endswith("%")) else None
                    if number is None:
                        if isinstance(step, str) and step.strip().endswith("%"):
                            self.bad(at, f"{shown(step)} is not a percentage from 1% to 100%")
                        return None
                    out.append(number)
            if not out:
                self.bad(where, "must not be an empty list")
                return None
            return out if isinstance(value, list) else out[0]
        if kind == "gpus":
            return self.gpu_set(spec, value, where)
        if kind == "replicas":
            if isinstance(value, str) and value.strip().lower() == "auto":
                return "auto"
            if _as_int(value) is None:
                self.bad(where, f"must be a whole number or auto, got {_describe(value)}")
                return None
            return self.whole(spec, value, where, spec.minimum, spec.maximum)
        if kind == "list":
            return self.listing(spec, value, where)
        if kind == "dict":
            return self.mapping(spec, value, where)
        raise AssertionError(kind)

    def gpu_set(self, spec: Var, value: Any, where: str) -> Optional[List[int]]:
        """GPU indices from a list of numbers or a range string ("0-3", "0,2,4-7"): sorted,
        each once; an empty set, a duplicate or a reversed range is refused."""
        items: List[Any] = []
        if isinstance(value, str):
            for part in value.split(","):
                m = re.match(r"^\s*(\d{1,4})\s*(?:-\s*(\d{1,4})\s*)?\Z", part)
                if not m:
                    self.bad(where, f"{shown(value)} is not a GPU list such as \"0-3\" or \"0,2,4-7\"")
                    return None
                low, high = int(m.group(1)), int(m.group(2) or m.group(1))
                if high < low:
                    self.bad(where, f"range {shown(part.strip())} runs backwards")
                    return None
                items += list(range(low, high + 1))
        elif isinstance(value, list):
            items = value
        else:
            self.bad(where, f"must be a list of GPU indices or a range string, got {_describe(value)}")
            return None
        out: List[int] = []
        for i, item in enumerate(items):
            number = self.whole(spec, item, f"{where}[{i}]" if isinstance(value, list) else where,
                                spec.minimum, spec.maximum)
            if number is None:
                return None
            if number in out:
                self.bad(where, f"GPU {number} is listed twice")
                return None
            out.append(number)
        if not out:
            self.bad(where, "must name at least one GPU (leave it unset for every GPU)")
            return None
        return sorted(out)

    def listing(self, spec: Var, value: Any, where: str) -> Optional[List[Any]]:
        if not isinstance(value, list):
            self.bad(where, f"must be a list, got {_describe(value)}")
            return None
        ok = True
        for i, item in enumerate(value):
            if not _scalar(item):
                self.bad(f"{where}[{i}]", f"must be a string or number, got {_describe(item)}")
                ok = False
            elif isinstance(item, str) and _clean_text(item):
                self.bad(f"{where}[{i}]", f"{shown(item)} {_clean_text(item)}")
                ok = False
            elif spec.pattern is not None and not spec.pattern.fullmatch(str(item)):
                self.bad(f"{where}[{i}]", f"{shown(item)} is not {spec.pattern_hint or 'valid'}")
                ok = False
        return list(value) if ok else None

    def mapping(self, spec: Var, value: Any, where: str) -> Optional[Dict[str, Any]]:
        if not isinstance(value, dict):
            self.bad(where, f"must be a mapping, got {_describe(value)}")
            return None
        ok = True
        for key, item in value.items():
            if not isinstance(key, str):
                self.bad(where, f"key {shown(key)} must be a string")
                ok = False
                continue
            if _clean_text(key):
                self.bad(f"{where}.{shown(key)[1:-1]}", f"key {shown(key)} {_clean_text(key)}")
                ok = False
                continue
            if spec.pattern is not None and not spec.pattern.fullmatch(key):
                self.bad(f"{where}.{key}", f"{shown(key)} is not {spec.pattern_hint or 'a valid key'}")
                ok = False
            if spec.name in ("env", "host_env", "placeholders", "feature_modes", "rocm_env", "cpu_env", "docker_labels"):
                if not _scalar(item):
                    self.bad(f"{where}.{key}", f"must be a string or number, got {_describe(item)}")
                    ok = False
                elif isinstance(item, str) and _clean_text(item):
                    self.bad(f"{where}.{key}", f"value {_clean_text(item)}")
                    ok = False
                elif spec.name == "feature_modes" and not CHOICE_RE.fullmatch(str(item)):
                    self.bad(f"{where}.{key}", f"{shown(item)} is not a mode name")
                    ok = False
        return dict(value) if ok else None
