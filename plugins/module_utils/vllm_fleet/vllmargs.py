"""vLLM's argument grammar, once: how vLLM's parser reads the flags of an argv list.

Every place that reads a flag of a vLLM command (the secret-flag check of the contract, the
GPU-fit arithmetic, the port and listen logic, the removed-flag check, the last-wins dedupe of
the operator's additions) asks this module what a token is, so that a spelling vLLM accepts
cannot slip past one of them. What vLLM's ``FlexibleArgumentParser`` (``vllm/utils/argparse_utils.py``,
checked against vLLM 0.32.0) and the argparse under it accept:

* ``--max_model_len`` is ``--max-model-len``: in a long flag's name, everything between the
  leading ``--`` and the first ``.``, underscores become dashes;
* ``--flag=value`` is ``--flag value``;
* short aliases: ``-tp`` is ``--tensor-parallel-size``, ``-pp``, ``-dp``, ``-dpl``, ... (SHORT_ALIASES);
* abbreviations (argparse's ``allow_abbrev``, on in vLLM's parser): ``--tensor-parallel 4`` and
  ``--api-ke KEY`` are taken for the one flag they begin; the planner refuses abbreviations
  of the flags it reads (:func:`abbreviates`) instead of guessing at vLLM's whole flag list;
* the last occurrence of a flag wins, whatever spelling it used.

A list item holding a flag and its value (``"--max-model-len 4096"``) is not a flag to vLLM's
parser (argparse takes a token with a space in it for a positional): :func:`packed` finds them.
Pure Python, imports nothing of the package: contract.py and planargv.py both build on it.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

# vLLM's short aliases of the flags the planner reads or that name its topology
# (vllm/engine/arg_utils.py, add_argument("--long", "-short", ...)).
SHORT_ALIASES: Dict[str, str] = {
    "-tp": "--tensor-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dp": "--data-parallel-size",
    "-dpl": "--data-parallel-size-local",
    "-dpa": "--data-parallel-address",
    "-dpr": "--data-parallel-start-rank",
    "-dpn": "--data-parallel-rank",
    "-dpp": "--data-parallel-rpc-port",
    "-n": "--nnodes",
    "-r": "--node-rank",
}

# Flags the planner reads as whole numbers, with the range it accepts (port: see PRIVILEGED_PORTS).
INT_FLAGS: Dict[str, Tuple[int, int]] = {
    "--port": (1, 65535),
    "--tensor-parallel-size": (1, 4096),
    "--pipeline-parallel-size": (1, 4096),
    "--data-parallel-size": (1, 4096),
    "--data-parallel-size-local": (0, 4096),
}

# Flags whose value is a secret: they must come from vllm_fleet_hf_token / vllm_fleet_api_key
# (matched against the canonical name, any case).
SECRET_FLAG_RE = re.compile(r"--(?:api-key|hf-token|token|[a-z0-9-]*-(?:token|api-key|password|secret))", re.I)

# Every flag the planner reads by name (besides INT_FLAGS): an abbreviation of one is refused.
READ_FLAGS: Tuple[str, ...] = tuple(INT_FLAGS) + (
    "--host", "--headless", "--api-key", "--hf-token", "--served-model-name", "--nnodes",
    "--node-rank", "--master-addr", "--data-parallel-address", "--disable-log-requests",
)

# Ports below this need CAP_NET_BIND_SERVICE (the bundle's servers run without capabilities).
PRIVILEGED_PORTS = 1024

_WHOLE = re.compile(r"[0-9]{1,9}")


def is_option(token: object) -> bool:
    """A token vLLM's parser reads as an option: it starts with ``-`` and is not a number."""
    text = str(token)
    return text.startswith("-") and len(text) > 1 and not re.fullmatch(r"-[0-9.]+(?:[eE][-+]?[0-9]+)?", text)


def split(token: object) -> Tuple[str, Optional[str]]:
    """An option token's name as written and its ``=`` value (None: the value is the next token)."""
    text = str(token)
    name, eq, value = text.partition("=")
    return name, (value if eq else None)


def canonical(name: str) -> str:
    """The flag's one spelling: underscores of a long name (up to its first ``.``) as dashes,
    a short alias as its long flag; anything else as it is."""
    if name.startswith("--"):
        head, dot, rest = name[2:].partition(".")
        return "--" + head.replace("_", "-") + dot + rest
    return SHORT_ALIASES.get(name, name)


def flag_name(token: object) -> Optional[str]:
    """The canonical flag of an option token (``--max_model_len=1`` -> ``--max-model-len``);
    None for a value or positional."""
    return canonical(split(token)[0]) if is_option(token) else None


def abbreviates(token: object) -> Optional[str]:
    """The flag the planner reads (READ_FLAGS, or a short alias) that ``token`` abbreviates,
    which vLLM's parser would take for it: a proper prefix of one, not itself a known flag."""
    name = flag_name(token)
    if name is None or name in READ_FLAGS or name in SHORT_ALIASES.values():
        return None
    if name.startswith("--"):
        full = [flag for flag in READ_FLAGS if flag.startswith(name) and len(name) > 2]
    else:
        full = [SHORT_ALIASES[s] for s in SHORT_ALIASES if s.startswith(name) and s != name]
    return sorted(full, key=len)[0] if full else None


def options(argv: Sequence[object]) -> List[Tuple[int, str, Optional[str]]]:
    """Every option of ``argv``: (index, canonical flag, value), the value being the ``=`` part
    or else the next token (None at the end)."""
    tokens = [str(a) for a in argv]
    out: List[Tuple[int, str, Optional[str]]] = []
    for i, tok in enumerate(tokens):
        if not is_option(tok):
            continue
        name, value = split(tok)
        if value is None and i + 1 < len(tokens):
            value = tokens[i + 1]
        out.append((i, canonical(name), value))
    return out


def has_flag(argv: Sequence[object], flag: str) -> bool:
    """Whether ``argv`` gives ``flag`` (a canonical name) in any spelling."""
    return any(flag_name(tok) == flag for tok in argv)


def flag_values(argv: Sequence[object], flag: str) -> List[str]:
    """Values ``argv`` gives ``flag`` (a canonical name), in order, in any spelling."""
    want = canonical(flag)
    return [value for _, name, value in options(argv) if name == want and value is not None]


def whole(value: Optional[str]) -> Optional[int]:
    """A plain whole number (ASCII digits only), else None."""
    return int(value) if value is not None and _WHOLE.fullmatch(value) else None


def int_flag(argv: Sequence[object], flag: str, default: int) -> int:
    """The flag's last value when it is a whole number (vLLM's parser keeps the last), else ``default``."""
    numbers = [whole(v) for v in flag_values(argv, flag)]
    numbers = [n for n in numbers if n is not None]
    return numbers[-1] if numbers else default


def packed(token: object) -> bool:
    """A list item holding a flag and more in one token (``"--max-model-len 4096"``): it starts
    with ``-`` (after any blanks) and its name part (before ``=``) has whitespace."""
    text = str(token)
    return text.lstrip().startswith("-") and bool(re.search(r"\s", split(text)[0]))


def packed_flag(token: object) -> str:
    """The flag a packed item begins with (its first word), canonical."""
    return canonical(str(token).split()[0].partition("=")[0])
