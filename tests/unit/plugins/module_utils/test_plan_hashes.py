"""The host plan and process hashes of inventories/example, pinned.

A hash decides whether a host is current (vllm_fleet_state compares it with the recorded one;
docker labels carry each process's): a change of the hashes makes the first run after an upgrade
redeploy every host. Renaming a plan key (the plan's ``vendor`` became ``accelerator``, its
``accelerator`` block ``accelerator_setup``; the GPU facts' ``vendor`` became ``brand``) must
not change them. A change here is a deliberate decision, never a by-product of a rename.
"""

from __future__ import annotations

import pytest

from example_hosts import HOSTS, ROOT, hosts_of   # tests/unit/example_hosts.py
from vllm_fleet import loader
from vllm_fleet.plan import plan

# host: (host plan hash, {process name: process hash}), as planned before the rename. Changed on
# purpose once since: every vLLM engine got --shutdown-timeout (vllm_fleet_drain_timeout, vLLM's
# graceful stop), so the first run after that upgrade rolls each engine once (drained, batch by
# batch); the routers' and Mooncake services' hashes stayed as they were. And once more: a plain
# router's hash (the restart key in its unit) leaves out its worker URLs, which its API changes
# without a restart; and, in the same release, every router got --prometheus-host/--prometheus-port
# (planargv.router_metrics: scrapable, and no second router on a machine collides on vllm-router's
# default 127.0.0.1:29000), so the first run after that upgrade restarts each router once. And
# once more: every vLLM engine got VLLM_CACHE_ROOT (its compile cache on the host, one per
# deployment and vLLM build, processes.py), so the first run after that upgrade rolls each engine
# once; routers and Mooncake services kept theirs.
EXAMPLE = {
    "cpu-01": ("dae86aa83a304e51", {"vllm-fleet-minilm": "027358c072163f22"}),
    "h200-31": ("d351776c7c6c07c9", {"vllm-fleet-dsv3-mooncake-i0": "c995214ec858228d"}),
    "h200-32": ("7944bf8371a1f542", {"vllm-fleet-dsv3-mooncake-i1": "c995214ec858228d"}),
    "kv-01": ("27d3fabc36518a50", {
        "vllm-fleet-dsv3-mooncake-mooncake-master": "c749d8e0100a226d",
        "vllm-fleet-dsv3-mooncake-mooncake-store": "2434dfc0cd438bdd",
        "vllm-fleet-dsv3-mooncake-router": "ca3ba42e74654185",
    }),
    "h200-11": ("332ebb220a623487", {"vllm-fleet-dsv3-tp16-i0-head0": "b5c600133df3ee62"}),
    "h200-12": ("d64c15207f8f024d", {"vllm-fleet-dsv3-tp16-i0-worker1": "c549633f3f9cf2d1"}),
    "h200-13": ("31dd2a91af39f72e", {"vllm-fleet-dsv3-tp16-i1-head0": "b8cf5802a9641dd9"}),
    "h200-14": ("ec625e97d83ec290", {"vllm-fleet-dsv3-tp16-i1-worker1": "aa164ca99b97f4b7"}),
    "h200-21": ("b93636b5116c7ebe", {"vllm-fleet-dsv3-pd-prefill0": "dbdde39a1d1ecb68"}),
    "h200-22": ("3c48d8e14cf19cc3", {"vllm-fleet-dsv3-pd-prefill1": "8db15a4eb6461e66"}),
    "h200-23": ("366b34e7389d8f98", {"vllm-fleet-dsv3-pd-decode0": "0ca19b030ad0c63f"}),
    "router-01": ("57be91e4cb8384c1", {"vllm-fleet-dsv3-pd-router": "119cb803caf93f43"}),
    "h200-01": ("25da473a0bb9a648", {"vllm-fleet-ernie-vl-h200-i0": "0341804dff20d52f"}),
    "h200-02": ("ca84656fe5295253", {"vllm-fleet-ernie-vl-h200-i1": "0341804dff20d52f"}),
    "mi300x-01": ("9f65a027e1aa5655", {"vllm-fleet-ernie-vl-mi300x": "3aa1239ef977ebcb"}),
}

# accelerator settings away from the contract's defaults: accelerator.py folds a digest of the
# blocks into the process hash (the path a renamed block key would change)
OVERRIDES = {"mi300x_cluster": {"rocm_aiter": False},
             "cpu_embeddings": {"cpu_env": {"VLLM_CPU_KVCACHE_SPACE": "8"}},
             "h200_cluster": {"cuda_gpu_count": 4}}
OVERRIDDEN = {
    "cpu-01": ("c73b694a716c0f8a", {"vllm-fleet-minilm": "6b25be0cfc741184"}),
    "h200-01": ("ca1c2aa6cf511dbc", {"vllm-fleet-ernie-vl-h200-i0": "52315e95bb15b9ab"}),
    "h200-02": ("2d57e5faa2cc5bc1", {"vllm-fleet-ernie-vl-h200-i1": "52315e95bb15b9ab"}),
    "mi300x-01": ("7d65f447bcf5b736", {"vllm-fleet-ernie-vl-mi300x": "025254444cf9cdb0"}),
}


@pytest.fixture(scope="module")
def cat():
    return loader.load([ROOT / "recipes"])


def hashes(cat, groups, overrides=None):
    out = {}
    for group in groups:
        hosts = hosts_of(group)
        for host in hosts:
            host.settings.update((overrides or {}).get(group, {}))
        for name, host_plan in plan(cat, hosts).items():
            out[name] = (host_plan["hash"], {p["name"]: p["hash"] for p in host_plan["processes"]})
    return out


def test_example_host_and_process_hashes_are_pinned(cat):
    assert hashes(cat, sorted(HOSTS)) == EXAMPLE


def test_hashes_with_accelerator_settings_overridden_are_pinned(cat):
    assert hashes(cat, sorted(OVERRIDES), OVERRIDES) == OVERRIDDEN
