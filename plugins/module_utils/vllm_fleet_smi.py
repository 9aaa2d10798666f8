# -*- coding: utf-8 -*-
"""Reading what the GPU tools print, shared by the GPU facts and the GPU health parsers: the
spellings of 'not available', JSON after warning lines, amd-smi's per-GPU lists. Stdlib only;
modules import it as ``ansible.module_utils.vllm_fleet_smi``."""

from __future__ import absolute_import, division, print_function

import json

__metaclass__ = type

# how nvidia-smi, amd-smi and rocm-smi say a value is not there
NOT_AVAILABLE = ("", "[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", "unknown error",
                 "[insufficient permissions]", "not found", "none", "null",
                 "requested functionality has been deprecated")


def clean(value):
    """A stripped string, or None for the spellings of 'not available'."""
    if value is None:
        return None
    text = str(value).strip()
    return None if text.lower() in NOT_AVAILABLE else text


def load_json(text):
    """JSON from tool output that may carry warning lines before the document."""
    if text is None:
        return None
    if isinstance(text, (dict, list)):
        return text
    try:
        return json.loads(text)
    except ValueError:
        pass
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("{", "[")):
            try:
                return json.loads("\n".join(lines[i:]))
            except ValueError:
                continue
    return None


def amd_items(doc):
    """The per-GPU list of an amd-smi JSON document: a bare list (ROCm <= 6.4), or
    {"gpu_data": [...]} (ROCm >= 7); a single GPU object is accepted too."""
    if isinstance(doc, dict):
        for key in ("gpu_data", "gpus"):
            if isinstance(doc.get(key), list):
                return [item for item in doc[key] if isinstance(item, dict)]
        if "asic" in doc or "gpu" in doc:
            return [doc]
        return []
    if isinstance(doc, list):
        return [item for item in doc if isinstance(item, dict)]
    return []
