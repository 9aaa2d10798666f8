"""Reading and adjusting vLLM argv lists: flag values, placeholders, the listen address and
port, the health probe's kind and host, flags a pinned vLLM removed, the router's renames."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .coerce import as_list, as_map
from .shell import dedupe
from .planmodel import DEFAULT_PORT, version_tuple
# vLLM's argument grammar (spellings, aliases, --flag=value): every flag read here goes through it
from .vllmargs import flag_name, flag_values, has_flag, int_flag  # noqa: F401 (flag_values, int_flag: re-exported)


PLACEHOLDER = re.compile(r"\$([A-Z][A-Z0-9_]*)(?![A-Z0-9_])")

# Flags vLLM removed, with the first release that rejects them (checked against the
# pinned version; "latest"/"nightly" images are treated as the newest release).
REMOVED_FLAGS: Dict[str, str] = {
    "--disable-log-requests": "0.12.0",
}

# The recipes' Mooncake router line uses --backend-url, which vllm-router (0.1.x, the PyPI
# package the recipe installs) rejects; its equivalent is one --worker-urls list.
ROUTER_FLAG_RENAMES = {"--backend-url": "--worker-urls"}


def substitute(text: str, values: Mapping[str, str]) -> Tuple[str, List[str]]:
    """Replace ``$NAME`` placeholders (not followed by [A-Z0-9_]); return leftovers."""
    missing: List[str] = []

    def repl(match: "re.Match[str]") -> str:
        name = match.group(1)
        if name in values:
            return str(values[name])
        missing.append(name)
        return match.group(0)

    return PLACEHOLDER.sub(repl, text), missing


def gpus_per_node(argv: Sequence[str], nodes: int) -> int:
    """GPUs one node of a rendered vLLM command uses: TP x PP x DP over the instance's nodes
    (``--data-parallel-size-local`` counts when given)."""
    tp = int_flag(argv, "--tensor-parallel-size", 1)
    pp = int_flag(argv, "--pipeline-parallel-size", 1)
    local = int_flag(argv, "--data-parallel-size-local", 0)
    if local:
        return tp * local * max(1, pp // max(nodes, 1))
    dp = int_flag(argv, "--data-parallel-size", 1)
    total = tp * pp * dp
    return -(-total // max(nodes, 1))


def health_kind(recipe: Mapping[str, Any], argv: Sequence[str]) -> str:
    tasks = as_list(as_map(recipe.get("meta")).get("tasks"))
    if "embedding" in tasks or "pooling" in argv or "embed" in argv:
        return "embedding"
    return "completion"


def listen_address(listen: Optional[str]) -> Optional[str]:
    """The ``--host`` a vllm_fleet_listen value asks for (None: vLLM's default, every interface)."""
    if not listen or listen == "all":
        return None
    return "127.0.0.1" if listen == "localhost" else str(listen)


def customize(argv: List[str], settings: Mapping[str, Any], role: str, listen: Optional[str] = None) -> List[str]:
    """Operator additions, appended so they win the last-wins dedupe."""
    out = list(argv)
    extra: List[str] = []
    bind = listen_address(listen)
    if bind and not has_flag(out, "--headless"):
        extra += ["--host", bind]
    model_path = settings.get("model_path")
    if model_path:
        out[2] = str(model_path)
        extra += ["--served-model-name", str(settings.get("served_model_name") or argv[2])]
    elif settings.get("served_model_name"):
        extra += ["--served-model-name", str(settings["served_model_name"])]
    port = settings.get("port")
    if port and role in ("single", "head") and int(port) != DEFAULT_PORT:
        extra += ["--port", str(int(port))]
    extra += [str(a) for a in as_list(settings.get("extra_args"))]
    if not extra:
        return out
    return out[:3] + dedupe(out[3:] + extra, key=flag_name)


def check_versions(recipe: Mapping[str, Any], variant: Mapping[str, Any], version: Optional[str],
                    argv: Sequence[str], where: str) -> List[str]:
    problems = []
    need = variant.get("min_vllm_version") or as_map(recipe.get("model")).get("min_vllm_version")
    have = version_tuple(version)
    if have and need and version_tuple(need) and have < version_tuple(need):
        problems.append(f"{where}: vllm_fleet_vllm_version {version} is older than the recipe's "
                        f"min_vllm_version {need}")
    for flag, removed in REMOVED_FLAGS.items():
        if has_flag(argv, flag) and (have is None or have >= version_tuple(removed)):
            shown = version or "latest"
            problems.append(f"{where}: vllm_fleet_extra_args: flag {flag} was removed in vLLM {removed} "
                            f"and vLLM {shown} "
                            f"rejects it: drop it from vllm_fleet_extra_args (or pin an older vllm_fleet_vllm_version)")
    return problems


def router_argv(argv: List[str]) -> List[str]:
    """Renamed router flags (ROUTER_FLAG_RENAMES), each given once with all its values at the
    position of its first use (vllm-router's list flags keep only their last occurrence)."""
    values: Dict[str, List[str]] = {}
    out: List[str] = []
    i = 0
    while i < len(argv):
        new = ROUTER_FLAG_RENAMES.get(argv[i])
        if new and i + 1 < len(argv):
            if new not in values:
                values[new] = []
                out.append(new)
            values[new].append(argv[i + 1])
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return [tok for flag in out for tok in [flag] + values.get(flag, [])]


ROUTER_METRICS_PORT = 29000   # vllm-router's own default for --prometheus-port (bound to 127.0.0.1)


def router_metrics(argv: List[str], port: Any = None) -> List[str]:
    """A router's Prometheus metrics where Prometheus can scrape them and where no second router
    collides: ``--prometheus-host`` (where the router binds; every interface when it binds every
    one) and ``--prometheus-port`` (vllm_fleet_router_metrics_port), each added unless the recipe
    or the operator gave it. vllm-router 0.1.17 otherwise binds 127.0.0.1:29000, and a second
    router on the machine panics at start ("failed to install Prometheus metrics exporter:
    Address already in use")."""
    argv = [str(a) for a in argv]
    out = list(argv)
    if "--prometheus-host" not in argv:
        out += ["--prometheus-host", bind_of(argv) or "0.0.0.0"]
    if "--prometheus-port" not in argv:
        out += ["--prometheus-port", str(int(port) if port is not None else ROUTER_METRICS_PORT)]
    return out


MEMBERSHIP_ENV = "VLLM_FLEET_WORKER_URLS"


def router_membership(argv: Sequence[str]) -> Optional[Dict[str, Any]]:
    """A plain router's workers, which a running vllm-router changes through its API
    (``/add_worker``, ``/remove_worker``) without a restart: ``flag`` (--worker-urls), ``urls``,
    ``env`` (the variable its unit reads them from, for its next start) and ``argv`` (the command
    without them: what a restart depends on). None where the API cannot change them: a P/D
    router (vllm-router 0.1.17's P/D mode answers /add_worker with "PD router requires specific
    add_prefill_server or add_decode_server methods", which it does not serve over HTTP), a
    router without --worker-urls, or one whose list is not plain URLs."""
    argv = [str(a) for a in argv]
    flag = "--worker-urls"
    if argv.count(flag) != 1 or any(f in argv for f in ("--vllm-pd-disaggregation", "--prefill", "--decode")):
        return None
    urls = flag_values_list(argv, flag)
    if not urls or not all(u.startswith(("http://", "https://")) for u in urls):
        return None
    at = argv.index(flag)
    return {"flag": flag, "urls": urls, "env": MEMBERSHIP_ENV, "argv": argv[:at] + argv[at + 1 + len(urls):]}


_ANY_ADDRESS = (None, "0.0.0.0", "::", "[::]")

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def bind_of(argv: Sequence[str]) -> Optional[str]:
    """The address a server's argv binds (``--host``, last wins); None: every interface."""
    given = flag_values(argv, "--host")
    return None if not given or given[-1] in _ANY_ADDRESS else given[-1]


def probe_host_of(argv: Sequence[str]) -> str:
    """Where the host's own probes (health gate, state, drain) reach a server: loopback unless
    the server binds one other address (then that one, bracketed when IPv6)."""
    bind = bind_of(argv)
    if bind is None or bind in LOOPBACK:
        return "[::1]" if bind in ("::1", "[::1]") else "127.0.0.1"
    return f"[{bind}]" if ":" in bind and not bind.startswith("[") else bind


def flag_values_list(argv: Sequence[str], flag: str) -> List[str]:
    """The values of a list flag (``--flag A B C``, up to the next ``--option``)."""
    argv = [str(a) for a in argv]
    if flag not in argv:
        return []
    out = []
    for tok in argv[argv.index(flag) + 1:]:
        if tok.startswith("--"):
            break
        out.append(tok)
    return out
