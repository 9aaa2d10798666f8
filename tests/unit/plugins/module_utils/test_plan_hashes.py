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
# default 127.0.0.1:29000), so the first run after that upgrade restarts each router once.
EXAMPLE = {
    "cpu-01": ("42670db6f220dfb5", {"vllm-fleet-minilm": "4081dba77bd1192a"}),
    "h200-31": ("b8f223da96cbac68", {"vllm-fleet-dsv3-mooncake-i0": "ac82f219825777c5"}),
    "h200-32": ("abb5143edb049ba0", {"vllm-fleet-dsv3-mooncake-i1": "ac82f219825777c5"}),
    "kv-01": ("27d3fabc36518a50", {
        "vllm-fleet-dsv3-mooncake-mooncake-master": "c749d8e0100a226d",
        "vllm-fleet-dsv3-mooncake-mooncake-store": "2434dfc0cd438bdd",
        "vllm-fleet-dsv3-mooncake-router": "ca3ba42e74654185",
    }),
    "h200-11": ("02fd752daa07b5ea", {"vllm-fleet-dsv3-tp16-i0-head0": "e29c5907fbd81c2a"}),
    "h200-12": ("1f59693d6002537e", {"vllm-fleet-dsv3-tp16-i0-worker1": "d7917f739d9b464d"}),
    "h200-13": ("506d175f54ab9a4d", {"vllm-fleet-dsv3-tp16-i1-head0": "3b471199311c43bc"}),
    "h200-14": ("4f847b199f0e3d99", {"vllm-fleet-dsv3-tp16-i1-worker1": "783220dd5b9fd82c"}),
    "h200-21": ("f1cb2dc1ce9faeb3", {"vllm-fleet-dsv3-pd-prefill0": "ed35ebbcb0dadee4"}),
    "h200-22": ("bc0e21f900c015c1", {"vllm-fleet-dsv3-pd-prefill1": "c85c7684c4100fbb"}),
    "h200-23": ("547a9894a6cacdc5", {"vllm-fleet-dsv3-pd-decode0": "1ca8029f766d9df3"}),
    "router-01": ("57be91e4cb8384c1", {"vllm-fleet-dsv3-pd-router": "119cb803caf93f43"}),
    "h200-01": ("7bf6c7d24d7ac9d9", {"vllm-fleet-ernie-vl-h200-i0": "d74d3ee2a75d5ff7"}),
    "h200-02": ("7f2e449d74848674", {"vllm-fleet-ernie-vl-h200-i1": "d74d3ee2a75d5ff7"}),
    "mi300x-01": ("09f315763825cfda", {"vllm-fleet-ernie-vl-mi300x": "ca2b7a3ea5560bdd"}),
}

# accelerator settings away from the contract's defaults: accelerator.py folds a digest of the
# blocks into the process hash (the path a renamed block key would change)
OVERRIDES = {"mi300x_cluster": {"rocm_aiter": False},
             "cpu_embeddings": {"cpu_env": {"VLLM_CPU_KVCACHE_SPACE": "8"}},
             "h200_cluster": {"cuda_gpu_count": 4}}
OVERRIDDEN = {
    "cpu-01": ("99987d85b9800836", {"vllm-fleet-minilm": "1bb139b807390a0f"}),
    "h200-01": ("98729612b88a9d5e", {"vllm-fleet-ernie-vl-h200-i0": "79483ce9b90d5a4e"}),
    "h200-02": ("c712764383c53750", {"vllm-fleet-ernie-vl-h200-i1": "79483ce9b90d5a4e"}),
    "mi300x-01": ("d198f71d900bd89b", {"vllm-fleet-ernie-vl-mi300x": "9d5e3212a003741e"}),
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
