"""The inventory contract: one host's ``vllm_fleet_*`` variables checked against their declarations.

The variables are declared once, in variables.py (:class:`Var`, VARIABLES); a value alone is
checked there by valuecheck.py (type, range, pattern). :func:`check` applies the whole contract
to one host's variables on the controller, before any host is touched: unknown names (with a
did-you-mean), wrong types (never coerced, apart from a string of digits for a whole number
and the words Ansible reads as booleans, which is what ``-e key=value`` produces), values
out of range, unsafe names and secrets put where they would leak (the rules across values
are here: environment, extra args, credentials in any value, privileged ports).  Every message
names the host and the variable, and quotes values through redact.py (secrets masked).

Names declared elsewhere (the role tunables ``vllm_fleet_docker_*``, ``vllm_fleet_uv_*``, ...:
their roles' argument_specs) are the caller's to pass: :func:`check` takes them as
``extra_known`` (and the host paths among them as ``path_kinds``) and reads no role itself.
The plan action (plugins/action/vllm_fleet_plan.py) reads them from the roles and validates
their types with Ansible's own argument-spec validator.

The variable table of docs/inventory.md is rendered from this module (``python3 -m
vllm_fleet.contract --update-readme docs/inventory.md``; a unit test keeps the page equal to
it), and the roles' argument_specs are tested against the declarations where a role consumes
a variable.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from . import secret_table, slo, vllmargs
from .pathrules import path_problem
from .redact import SECRET_ENV_RE, URL_CREDENTIALS_RE, shown
from .schema import UNSAFE_ENV   # environment names that change what every process loads: refused outright
from .valuecheck import Checker, is_int
from .variables import BY_NAME, INTERNAL, INTERNAL_PREFIXES, PREFIX, RESERVED_PREFIXES, RETIRED, SETTINGS, VARIABLES, internal

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")

# where a secret-looking env name or flag goes instead (upper case; flags as written)
SECRET_POINTER = {**{s.env: s.var for s in secret_table.TABLE},
                  "HUGGING_FACE_HUB_TOKEN": "vllm_fleet_hf_token",
                  "--api-key": "vllm_fleet_api_key", "--hf-token": "vllm_fleet_hf_token"}


class ContractError(ValueError):
    """Every problem found, one line each (host + variable)."""

    def __init__(self, problems: Sequence[str]):
        super().__init__("\n".join(problems))
        self.problems = list(problems)


# Loader variables the inventory's author may set (vLLM's CPU guidance preloads tcmalloc and Intel
# OpenMP with LD_PRELOAD): a recipe may not (schema's UNSAFE_ENV), an inventory may, with absolute
# paths only. How the entries are separated: LD_PRELOAD by ':' or blanks, LD_LIBRARY_PATH by ':'.
OPERATOR_LOADER_ENV = {"LD_PRELOAD": r"[:\s]+", "LD_LIBRARY_PATH": r":"}
_LOADER_ENTRY_RE = re.compile(r"/[^\s:\x00-\x1f\x7f]*\Z")


def _loader_env_problem(key: str, value: Any) -> Optional[str]:
    """What is wrong with an operator's LD_PRELOAD / LD_LIBRARY_PATH value (None: nothing)."""
    text = str(value)
    if not text.strip():
        return "must not be empty (leave it unset)"
    entries = re.split(OPERATOR_LOADER_ENV[key], text.strip())
    for entry in entries:
        if not entry:
            return ("has an empty entry (an empty LD_LIBRARY_PATH entry is the current directory): "
                    "separate absolute paths with one ':'")
        if not _LOADER_ENTRY_RE.fullmatch(entry) or any(p in (".", "..") for p in entry.split("/")[1:]) \
                or "//" in entry:
            return (f"entry {shown(entry)} is not an absolute path in normal form (no '.', '..' or '//'); "
                    f"{key} takes absolute paths only")
    return None


def _env_rules(c: Checker, where: str, env: Mapping[str, Any]) -> None:
    for key in env:
        if not ENV_NAME_RE.fullmatch(key):
            c.bad(f"{where}.{key}", f"{shown(key)} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
        elif key in OPERATOR_LOADER_ENV:
            problem = _loader_env_problem(key, env[key])
            if problem:
                c.bad(f"{where}.{key}", problem)
        elif key.upper() in UNSAFE_ENV:
            c.bad(f"{where}.{key}", f"{key} changes what every process loads and is refused")
        elif SECRET_ENV_RE.fullmatch(key):
            pointer = SECRET_POINTER.get(key.upper())
            c.bad(f"{where}.{key}", "looks like a secret and would be written in clear into unit files and container "
                  "config" + (f": set {pointer} instead (vault it)" if pointer else
                              f": pass secrets through {secret_table.CHANNELS} (vault them)"))


def _secret_message(flag: str, shown: Optional[str] = None) -> str:
    """``flag``: the canonical secret flag; ``shown``: how the item wrote it (never its value)."""
    pointer = SECRET_POINTER.get(flag.lower(), "vllm_fleet_api_key / vllm_fleet_hf_token")
    return (f"{shown or flag} puts a secret on the command line (visible in ps, logs and docker inspect): set "
            f"{pointer} instead (vault it)")


def _extra_args_rules(c: Checker, where: str, args: Sequence[Any], privileged_ports: bool = False) -> None:
    """vLLM flags as vLLM's parser reads them (vllmargs: ``--api_key`` is ``--api-key``,
    ``--port=80`` is ``--port 80``, ``-tp`` is ``--tensor-parallel-size``): no secret flag in any
    spelling (its value never shown), one argument per item, no abbreviation of a flag the
    planner reads, and whole numbers in range for the numeric flags it reads."""
    tokens = [str(a) for a in args]
    skip = set()
    for i, text in enumerate(tokens):
        at = f"{where}[{i}]"
        if i in skip:
            continue
        if vllmargs.packed(text):
            secret = next((vllmargs.canonical(w.partition("=")[0]) for w in text.split()
                           if vllmargs.SECRET_FLAG_RE.fullmatch(vllmargs.canonical(w.partition("=")[0]).split(".")[0])),
                          None)
            if secret:
                c.bad(at, "holds a flag and its value in one item (the value is not shown), and "
                      + _secret_message(secret))
            else:
                c.bad(at, f"one argument per list item: split {text!r} into the flag "
                      f"({text.split()[0]!r}) and its value, two items")
            continue
        name = vllmargs.flag_name(text)
        if name is None:
            continue
        written, inline = vllmargs.split(text)
        full = vllmargs.abbreviates(text)
        if vllmargs.SECRET_FLAG_RE.fullmatch(name.split(".")[0]) or (
                full and vllmargs.SECRET_FLAG_RE.fullmatch(full)):
            shown = written if written == (full or name) else f"{written} (vLLM reads it as {full or name})"
            c.bad(at, _secret_message(full or name, shown))
            if inline is None:
                skip.add(i + 1)   # the value: never checked (nor shown) as an argument of its own
            continue
        if full:
            c.bad(at, f"{written} abbreviates {full} (vLLM's parser takes it for that flag): write {full} in full")
            continue
        if name not in vllmargs.INT_FLAGS:
            continue
        value = inline if inline is not None else (tokens[i + 1] if i + 1 < len(tokens) else None)
        number = vllmargs.whole(value)
        low, high = vllmargs.INT_FLAGS[name]
        if value is None or (inline is None and vllmargs.is_option(value)):
            c.bad(at, f"{written} needs a value (a whole number)")
        elif number is None:
            c.bad(at, f"{written} {value!r} is not a whole number (vLLM would fail at start)")
        elif not low <= number <= high:
            c.bad(at, f"{written} {number} is out of range ({low}..{high})")
        elif name == "--port" and number < vllmargs.PRIVILEGED_PORTS and not privileged_ports:
            c.bad(at, _privileged_message(f"{written} {number}"))


def _privileged_message(what: str) -> str:
    return (f"{what} is below {vllmargs.PRIVILEGED_PORTS}: the bundle's servers run without capabilities and "
            f"could not bind it; choose a port from {vllmargs.PRIVILEGED_PORTS}, or set "
            f"vllm_fleet_privileged_ports: true to grant the servers on it CAP_NET_BIND_SERVICE")


# Keys of a service config (Mooncake JSON, ...) that hold a credential: the env names' rule
# (SECRET_ENV_RE) for JSON keys, any case, also bare (`password`) and dashed / dotted.
CONFIG_SECRET_KEY_RE = re.compile(r"(?:.*[_.-])?(?:token|key|secret|password|passwd|pwd|credentials?|api[_-]?key)s?\Z",
                                  re.I)
SECRET_CHANNELS = f"pass secrets only through {secret_table.CHANNELS} (vault them)"


def _walk(value: Any, where: str):
    """(path, key or None, value) of every entry of a nested value: mapping keys as .key, list
    items as [i]."""
    if isinstance(value, dict):
        for key, item in value.items():
            at = f"{where}.{key}"
            yield at, key, item
            yield from _walk(item, at)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            at = f"{where}[{i}]"
            yield at, None, item
            yield from _walk(item, at)


def _leak_rules(c: Checker, name: str, value: Any) -> None:
    """Secrets in plain variables: a URL with credentials anywhere in a value (the string, any
    item, any nested value), and in a config mapping (``*_config``: written to a 0644 JSON file
    mounted into containers) a key that names a credential. Nothing of the value is quoted."""
    entries = [(name, None, value)] + list(_walk(value, name))
    for at, key, item in entries:
        if name.endswith("_config") and isinstance(key, str) and CONFIG_SECRET_KEY_RE.fullmatch(key) \
                and item not in (None, "", [], {}):
            c.bad(at, "looks like a credential and would be written in clear into a service config file "
                  f"(mode 0644, mounted into the containers); {SECRET_CHANNELS}")
        elif isinstance(item, str) and URL_CREDENTIALS_RE.search(item):
            c.bad(at, f"holds a URL with credentials ({shown(item)}), which would be written in clear into "
                  f"unit files, config files and container settings; {SECRET_CHANNELS}, or use a "
                  "service that needs none")


def _tunable_path_rules(c: Checker, name: str, value: Any, kind: Optional[str]) -> None:
    """A host-path tunable (``kind``: its path_kinds entry, None for the others): the path, or
    each path of a list, by pathrules' rule for that kind."""
    if kind is None:
        return
    items = [(name, value)] if isinstance(value, str) else \
        [(f"{name}[{i}]", v) for i, v in enumerate(value)] if isinstance(value, list) else []
    for at, item in items:   # other types: the role's argument_specs report them
        if isinstance(item, str):
            problem = path_problem(item, kind)
            if problem:
                c.bad(at, f"{shown(item)} {problem}")


def suggest(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def check(host: str, variables: Mapping[str, Any], extra_known: Iterable[str] = (),
          path_kinds: Optional[Mapping[str, str]] = None) -> Tuple[Dict[str, Any], List[str]]:
    """Check one host's ``vllm_fleet_*`` variables; returns (checked values by full name, problems).

    ``extra_known``: other declared names (role tunables from argument_specs, play-internal
    names) that are not an error to find, but are checked elsewhere (their types by the roles'
    argument_specs); here only the host-path rule for the ones in ``path_kinds`` ({name: "root"
    or "dir"}, pathrules.path_problem's kinds) and the leak rule (no URL credentials). The
    caller reads both from wherever they are declared (the plan action: the roles).
    """
    c = Checker(host)
    extra = set(extra_known)
    known = {name for name in set(BY_NAME) | extra if not internal(name)}   # what did-you-mean offers
    out: Dict[str, Any] = {}
    for name in sorted(variables):
        if not name.startswith(PREFIX) or name.startswith(RESERVED_PREFIXES):
            continue
        value = variables[name]
        spec = BY_NAME.get(name)
        if name in INTERNAL:
            continue
        if name in RETIRED:
            if value is not None:
                c.bad(name, f"no longer a setting: {RETIRED[name]}; remove it from the inventory")
            continue
        prefix = next((p for p in INTERNAL_PREFIXES if name.startswith(p)), None)
        if prefix:
            c.bad(name, f"set by the bundle itself (the {prefix}* variables are internal), not by an inventory; "
                  f"set {INTERNAL_PREFIXES[prefix]} instead")
            continue
        if spec is None:
            if name not in extra:
                c.bad(name, "unknown variable" + suggest(name, known))
            elif value is not None:
                _tunable_path_rules(c, name, value, (path_kinds or {}).get(name))
                _leak_rules(c, name, value)
            continue
        if value is None:
            continue  # unset (YAML `key:` with no value) means the default
        checked = c.value(spec, value)
        if checked is None:
            continue
        out[name] = checked
    if isinstance(out.get("vllm_fleet_env"), dict):
        _env_rules(c, "vllm_fleet_env", out["vllm_fleet_env"])
    for name in ("vllm_fleet_host_env", "vllm_fleet_rocm_env", "vllm_fleet_cpu_env"):
        if isinstance(out.get(name), dict):
            _env_rules(c, name, out[name])
    if isinstance(out.get("vllm_fleet_slo"), dict):
        for problem in slo.slo_problems(out["vllm_fleet_slo"]):
            name, _, why = problem.partition(": ")
            c.bad(name, why)
    privileged = out.get("vllm_fleet_privileged_ports") is True
    if isinstance(out.get("vllm_fleet_extra_args"), list):
        _extra_args_rules(c, "vllm_fleet_extra_args", out["vllm_fleet_extra_args"], privileged)
    for name in ("vllm_fleet_port", "vllm_fleet_router_port", "vllm_fleet_router_metrics_port"):
        if not privileged and is_int(out.get(name)) and out[name] < vllmargs.PRIVILEGED_PORTS:
            c.bad(name, _privileged_message(str(out[name])))
    for name, value in out.items():
        if BY_NAME[name].scope != "secret":
            _leak_rules(c, name, value)
    if out.get("vllm_fleet_runtime") == "uv" and "vllm_fleet_recipe" in out and \
            "vllm_fleet_vllm_version" not in out and "vllm_fleet_vllm_version" not in c.flagged:
        c.bad("vllm_fleet_vllm_version", "required with vllm_fleet_runtime uv (an exact version such as 0.32.0)")
    image = out.get("vllm_fleet_image")
    if image and "@sha256:" in image and out.get("vllm_fleet_image_tag"):
        c.bad("vllm_fleet_image_tag", f"cannot replace the tag of {image}, which is pinned by digest; "
              "drop one of vllm_fleet_image_tag / the digest")
    return out, c.problems


# the keys of a role option's argument spec that say what its value must be (the plan action
# validates role tunables against them with Ansible's own validator)
SPEC_KEYS = ("type", "elements", "choices", "options")


def run_options(values: Mapping[str, Any]) -> Dict[str, Any]:
    """The run options (scope ``run``) of one host's checked values, each with its default from
    this contract when unset: what the playbooks read as ``vllm_fleet_run.<name>`` (the one place
    their defaults come from)."""
    return {v.name: values.get(v.full, v.default) for v in VARIABLES if v.scope == "run"}


def settings_of(values: Mapping[str, Any]) -> Dict[str, Any]:
    """The plan's settings from checked values (full names -> settings keys); unset keys are None."""
    return {key: values.get(full) for key, full in SETTINGS.items()}


def markdown_table() -> str:
    """The variable table of docs/inventory.md (one row per variable, in declaration order)."""
    rows = ["| variable | scope | type | default | meaning |", "|---|---|---|---|---|"]
    for v in VARIABLES:
        kind = {"str_or_list": "str or list", "port": "int 1-65535", "batch": "int, % or list",
                "gpus": "list or ranges", "replicas": "int or `auto`"}.get(v.kind, v.kind)
        if v.choices and v.kind != "str_or_list":
            kind = " \\| ".join(f"`{c}`" for c in v.choices)
        elif v.minimum is not None and v.kind not in ("batch", "gpus"):
            kind += f" {v.minimum}-{v.maximum}" if v.maximum is not None else f" >= {v.minimum}"
        default = "" if v.default is None else f"`{str(v.default).lower() if isinstance(v.default, bool) else v.default}`"
        rows.append(f"| `{v.full}` | {v.scope} | {kind} | {default} | {v.meaning} |")
    return "\n".join(rows) + "\n"


README_BEGIN = "<!-- contract table: generated by `python3 -m vllm_fleet.contract --markdown`, do not edit -->"
README_END = "<!-- end of contract table -->"


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python3 -m vllm_fleet.contract",
                                     description="Print or refresh the inventory contract's variable table "
                                                 "(docs/inventory.md).")
    parser.add_argument("--markdown", action="store_true", help="print the table")
    parser.add_argument("--update-readme", metavar="MARKDOWN",
                        help="rewrite the table between its markers in this file (docs/inventory.md)")
    args = parser.parse_args(argv)
    if args.update_readme:
        path = Path(args.update_readme)
        text = path.read_text()
        head, sep, rest = text.partition(README_BEGIN)
        _, sep2, tail = rest.partition(README_END)
        if not sep or not sep2:
            parser.error(f"{path}: markers not found")
        path.write_text(head + README_BEGIN + "\n" + markdown_table() + README_END + tail)
        return 0
    print(markdown_table(), end="")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
