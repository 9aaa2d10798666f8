"""Reading recipe and inventory data that may have the wrong shape: a list or ``[]``, a map or
``{}``, and JavaScript truthiness (what upstream's command builder tests)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Dict, List


def truthy(value: Any) -> bool:
    """JavaScript truthiness (empty maps and lists are true, 0 and "" are false)."""
    if value is None or value is False:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value != 0 and not (isinstance(value, float) and math.isnan(value))
    if isinstance(value, str):
        return value != ""
    return True


def as_list(value: Any) -> List[Any]:
    return list(value) if isinstance(value, list) else []


def as_map(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def plain(value: Any) -> Any:
    """Ansible's (lazy, tagged, unsafe) containers, strings and numbers as plain Python values:
    what the plan reads from an inventory (the plan action's hostvars; `vllm-fleet plan`'s JSON
    is plain already)."""
    if isinstance(value, Mapping):
        return {str(k) if isinstance(k, str) else k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value
