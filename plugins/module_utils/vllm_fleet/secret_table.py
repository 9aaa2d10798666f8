"""The one table of secrets: each inventory variable (vault it), the environment name its
process reads, which processes get it, and how a uv engine gets it as a file.

Everything else reads this table: the contract (the variables, what a secret-looking env name
or config key points to), the planner (which process gets which secret, the keyed digest that
makes a rotation redeploy exactly the processes that use the secret) and, through the plan's
``secret_vars`` (env name -> variable), the roles that resolve the values on the controller.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

ENGINES = "engines"     # vLLM engines (vllm, omni)
MOONCAKE = "mooncake"   # what talks to Mooncake's metadata server: its master, store, and the engines
#                         of a Mooncake deployment (the connector's transfer engine)


@dataclass(frozen=True)
class Secret:
    var: str                        # the inventory variable (vault it)
    env: str                        # the environment name the process reads
    used_by: str                    # ENGINES | MOONCAKE
    meaning: str
    file: Optional[str] = None      # a uv engine gets it as a root-only file of this name (LoadCredential=)
    file_env: Optional[str] = None  # ... and the file's path in this variable


TABLE: Tuple[Secret, ...] = (
    Secret("vllm_fleet_hf_token", "HF_TOKEN", ENGINES,
           "Hugging Face token (vault it), never argv: containers get `HF_TOKEN` in their environment; uv units a "
           "root-only file (`/etc/vllm-fleet/<deployment>/secrets/hf_token`, systemd `LoadCredential=`) and "
           "`HF_TOKEN_PATH`.", file="hf_token", file_env="HF_TOKEN_PATH"),
    Secret("vllm_fleet_api_key", "VLLM_API_KEY", ENGINES,
           "API key the servers require (vault it): `VLLM_API_KEY`, never argv."),
    Secret("vllm_fleet_mooncake_redis_password", "MC_REDIS_PASSWORD", MOONCAKE,
           "Password of the Redis that a Mooncake deployment's metadata server (`metadata_server: "
           "redis://host:port`) or HA backend requires (vault it): `MC_REDIS_PASSWORD` in the root-only "
           "environment file of the Mooncake master and store units (mode 0600, read by systemd) and in the "
           "environment of the deployment's engines, never in a config file or argv."),
)
BY_VAR: Dict[str, Secret] = {s.var: s for s in TABLE}
BY_ENV: Dict[str, Secret] = {s.env: s for s in TABLE}
# the variables, for messages: "set one of these instead"
CHANNELS = " / ".join(s.var for s in TABLE)


def audience(kind: str, mooncake: bool) -> Tuple[str, ...]:
    """Who a process is for the table: an engine (of a Mooncake deployment or not), a Mooncake
    service, or nobody (the router holds no secret)."""
    if kind in ("vllm", "omni"):
        return (ENGINES, MOONCAKE) if mooncake else (ENGINES,)
    if kind.startswith("mooncake_"):
        return (MOONCAKE,)
    return ()


def for_process(set_envs: Iterable[str], kind: str, mooncake: bool) -> List[str]:
    """The env names (of those the host sets) a process of ``kind`` gets, sorted."""
    who = audience(kind, mooncake)
    return sorted(env for env in set_envs if env in BY_ENV and BY_ENV[env].used_by in who)


def digest(key: bytes, values: Mapping[str, str]) -> str:
    """Keyed digest (HMAC-SHA256) of secret values ({env: value}): a rotated secret changes the
    plan hash of the processes that get it, and the hash (stored on hosts, in container labels)
    reveals nothing about the values."""
    body = json.dumps(dict(sorted(values.items())), sort_keys=True).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()[:16]


def digests(key: bytes, values: Mapping[str, str]) -> Dict[str, str]:
    """{",".join(env names): digest} for every set of the host's secrets one process can get
    (one per audience): the planner picks a process's by its names, never sees a value."""
    out: Dict[str, str] = {}
    for who in ((ENGINES,), (MOONCAKE,), (ENGINES, MOONCAKE)):
        mine = {env: value for env, value in values.items() if BY_ENV[env].used_by in who}
        if mine:
            out[",".join(sorted(mine))] = digest(key, mine)
    return out
