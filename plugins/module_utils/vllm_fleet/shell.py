"""Argv helpers: upstream's last-wins flag dedupe and the human-readable shell form.

Commands live as argv lists everywhere in vllm-fleet; the shell form produced here is
only ever printed (and compared with upstream's rendering), never executed.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

_BARE = re.compile(r"^[A-Za-z0-9_./=:@,+%-]+\Z")
_LONE_VAR = re.compile(r"^\$[A-Z_][A-Z0-9_]*\Z")

Unit = Tuple[str, ...]


def units(tokens: Sequence[str]) -> List[Unit]:
    """Group tokens into units: a flag with its value, a lone flag, or a positional."""
    out: List[Unit] = []
    i, n = 0, len(tokens)
    while i < n:
        tok = tokens[i]
        if tok.startswith("-"):
            if i + 1 < n and not tokens[i + 1].startswith("-"):
                out.append((tok, tokens[i + 1]))
                i += 2
                continue
            out.append((tok,))
        else:
            out.append((tok,))
        i += 1
    return out


def dedupe(tokens: Iterable[str], key: Optional[Callable[[str], Optional[str]]] = None) -> List[str]:
    """Drop empty tokens, then keep the last unit of every flag (positionals all stay).

    Survivors keep their relative order, so a repeated flag moves to the place of its
    last occurrence.  Flag identity is the exact string (``--x=1`` and ``--x`` differ, as in
    upstream's rendering), or ``key(flag)`` when given (vllmargs.flag_name: vLLM's own
    identity, so ``--max_model_len=1`` and ``--max-model-len 2`` are one flag).
    """
    grouped = units([t for t in tokens if t != ""])
    ident = (lambda tok: key(tok) or tok) if key else (lambda tok: tok)
    last = {}
    for i, unit in enumerate(grouped):
        if unit[0][:1] == "-":
            last[ident(unit[0])] = i
    out: List[str] = []
    for i, unit in enumerate(grouped):
        if unit[0][:1] != "-" or last[ident(unit[0])] == i:
            out.extend(unit)
    return out


def quote(value: str) -> str:
    """Quote a value the way upstream prints it (bare when safe, else single quotes)."""
    if _LONE_VAR.match(value) or _BARE.match(value):
        return value
    return "'" + value.replace("'", "'\\''") + "'"


def unit_line(unit: Unit, quoted: bool = True) -> str:
    if len(unit) == 2:
        return unit[0] + " " + (quote(unit[1]) if quoted else unit[1])
    return unit[0]


def shell_command(head: str, args: Sequence[str], indent: str = "  ", quoted: bool = True) -> str:
    """``head`` then one unit per continuation line (a flag shares its value's line).

    ``quoted=False`` reproduces upstream's templated commands (the routers), whose
    values are printed as they are.
    """
    lines = [head] + [unit_line(u, quoted) for u in units(args)]
    return (" \\\n" + indent).join(lines)


def vllm_shell(argv: Sequence[str], binary_words: int = 2) -> str:
    """Shell form of a ``vllm serve <model> ...`` argv (``binary_words`` before the model)."""
    head = binary_words + 1
    return shell_command(" ".join(argv[:head]), argv[head:])
