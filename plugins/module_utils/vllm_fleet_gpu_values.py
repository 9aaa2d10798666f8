# -*- coding: utf-8 -*-
"""Reading the numbers and keys of GPU tool output, shared by the per-tool parsers of the GPU
facts (``vllm_fleet_gpu_nvidia``, ``vllm_fleet_gpu_amd``) and the facts module's probe notes:
memory sizes in any unit the tools print, non-negative integers, case-insensitive keys, the first
informative line of a message. The spellings of 'not available', JSON after warning lines and
amd-smi's per-GPU lists are ``vllm_fleet_smi``'s. Pure and stdlib only; modules import it as
``ansible.module_utils.vllm_fleet_gpu_values``."""

from __future__ import absolute_import, division, print_function

import re

from ansible.module_utils.vllm_fleet_smi import clean as _clean

__metaclass__ = type


def to_mib(value, unit=None):
    """MiB from 81559 / '81559' / '81559 MiB' / {'value': 196592, 'unit': 'MB'} / bytes."""
    if isinstance(value, dict):
        return to_mib(value.get("value"), value.get("unit") or unit)
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        text = _clean(value)
        if text is None:
            return None
        match = re.match(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$", text)
        if not match:
            return None
        number = float(match.group(1))
        unit = match.group(2) or unit
    scale = {"": 1, "mib": 1, "mb": 1, "m": 1, "gib": 1024, "gb": 1024, "g": 1024,
             "kib": 1.0 / 1024, "kb": 1.0 / 1024, "b": 1.0 / 1048576}
    factor = scale.get((unit or "").strip().lower())
    if factor is None:
        return None
    return int(round(number * factor))


def int_or_none(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    text = _clean(value)
    return int(text) if text is not None and re.match(r"^\d+$", text) else None


def ci_get(mapping, *keys):
    """First value of `keys` in a dict, comparing keys case-insensitively."""
    if not isinstance(mapping, dict):
        return None
    lowered = dict((str(k).strip().lower(), v) for k, v in mapping.items())
    for key in keys:
        if key.lower() in lowered:
            value = lowered[key.lower()]
            if _clean(value) is not None or isinstance(value, (dict, int, float)):
                return value
    return None


def first_line(*texts):
    """The first informative line of tool output (banners of '=' or '-' skipped)."""
    for text in texts:
        for line in (text or "").splitlines():
            words = re.sub(r"[=+|-]{3,}", " ", line).strip()
            if words and not re.match(r"^ROCm System Management Interface$", words):
                return line.strip()
    return ""
