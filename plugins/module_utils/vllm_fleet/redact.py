"""Values as the contract's messages quote them: secret-looking parts masked (:func:`masked`),
then shortened and quoted (:func:`shown`). Every message that quotes an operator's value goes
through :func:`shown`, so a token pasted into the wrong variable never reaches a log."""

from __future__ import annotations

import json
import re
from typing import Any

from . import vllmargs

# Flags whose value is a secret (canonical names, any case; vllmargs reads vLLM's other spellings):
# they must come from vllm_fleet_hf_token / vllm_fleet_api_key.
SECRET_FLAG_RE = vllmargs.SECRET_FLAG_RE
# Environment names that carry secrets (the bundle passes secret_table's itself).
SECRET_ENV_RE = re.compile(r"^(?:HF_TOKEN|VLLM_API_KEY|HUGGING_FACE_HUB_TOKEN|[A-Z0-9_]*_(?:TOKEN|KEY|SECRET|PASSWORD))\Z",
                           re.I)

MASK = "***"
SHOWN_MAX = 60   # characters of a value a message shows at most
# scheme://user:password@ (the password is masked; a user alone, as in ssh://git@host, is no secret)
URL_CREDENTIALS_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/@:]*):([^\s/@]*)@")
# the word form of Hugging Face / OpenAI style tokens, wherever they appear
TOKEN_WORD_RE = re.compile(r"\b(?:hf|sk|ghp|gho|glpat|xox[abp])[_-][A-Za-z0-9_-]{8,}")


def masked(text: str) -> str:
    """The text with every secret-looking part replaced by ***: a secret flag's value
    (``--api-key=***``, ``--api-key ***``), the value of a secret-looking ``NAME=value`` (by
    SECRET_ENV_RE), URL credentials (``https://user:***@host``) and token-looking words."""
    parts = re.split(r"(\s+)", text)
    hide_next = False
    for i, part in enumerate(parts):
        if not part or part.isspace():
            continue
        if hide_next:
            parts[i], hide_next = MASK, False
            continue
        flag = vllmargs.flag_name(part.strip())
        if flag and SECRET_FLAG_RE.fullmatch(flag.split(".")[0]):
            if "=" in part:
                parts[i] = part.split("=", 1)[0] + "=" + MASK
            else:
                hide_next = True
            continue
        name, eq, _ = part.partition("=")
        if eq and SECRET_ENV_RE.match(name.lstrip("-").replace("-", "_")):
            parts[i] = name + "=" + MASK
    out = "".join(parts)
    out = URL_CREDENTIALS_RE.sub(lambda m: f"{m.group(1)}:{MASK}@", out)
    return TOKEN_WORD_RE.sub(MASK, out)


def shown(value: Any, limit: int = SHOWN_MAX) -> str:
    """A value as a message quotes it: secret-looking parts masked first (:func:`masked`), then
    cut to ``limit`` characters (with the full length said), then quoted with repr (so a line
    break shows as \\n). Every message of the contract that quotes a value goes through it.
    None (YAML's null, an empty ``key:``) is said as such, not quoted like the string 'null'."""
    if value is None:
        return "null (no value)"
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, sort_keys=True, default=str)
        except (TypeError, ValueError):
            text = str(value)
    text = masked(text)
    if len(text) > limit:
        return repr(text[:limit - 3] + "...") + f" ({len(value) if isinstance(value, str) else len(text)} characters)"
    return repr(text)
