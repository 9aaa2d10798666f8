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
# once; routers and Mooncake services kept theirs. And once more: vllm_fleet_model_source
# defaults to hub (staging.py): an engine without vllm_fleet_model_path serves its staged
# snapshot (its path in argv, --served-model-name the recipe's id, HF_HUB_OFFLINE=1), so the first
# run after that upgrade stages each model once per fleet and rolls each engine once; routers and
# Mooncake services kept theirs.
EXAMPLE = {
    "cpu-01": ("4b48587c1c2a59e0", {"vllm-fleet-minilm": "a8bb9c8e6d439ce9"}),
    "h200-31": ("04227be254214daf", {"vllm-fleet-dsv3-mooncake-i0": "5006cd055b11f7d4"}),
    "h200-32": ("eb276a47adfd511b", {"vllm-fleet-dsv3-mooncake-i1": "5006cd055b11f7d4"}),
    "kv-01": ("27d3fabc36518a50", {
        "vllm-fleet-dsv3-mooncake-mooncake-master": "c749d8e0100a226d",
        "vllm-fleet-dsv3-mooncake-mooncake-store": "2434dfc0cd438bdd",
        "vllm-fleet-dsv3-mooncake-router": "ca3ba42e74654185",
    }),
    "h200-11": ("9b731400e661dd6f", {"vllm-fleet-dsv3-tp16-i0-head0": "647d6ba60e95557c"}),
    "h200-12": ("f1914e142c063d27", {"vllm-fleet-dsv3-tp16-i0-worker1": "ec30afe967d5bb16"}),
    "h200-13": ("d5849010631fa17f", {"vllm-fleet-dsv3-tp16-i1-head0": "823aaf63a899215d"}),
    "h200-14": ("37cd1a616b5f3bbe", {"vllm-fleet-dsv3-tp16-i1-worker1": "ad44207a7e6aab3b"}),
    "h200-21": ("36b8db755bfb2a9d", {"vllm-fleet-dsv3-pd-prefill0": "6edf73aaaaa66f94"}),
    "h200-22": ("58ce6f98f206b950", {"vllm-fleet-dsv3-pd-prefill1": "bfef6b7b0399e510"}),
    "h200-23": ("1dd9c5ec91e5ed8c", {"vllm-fleet-dsv3-pd-decode0": "ab3d580c2062ec55"}),
    "router-01": ("57be91e4cb8384c1", {"vllm-fleet-dsv3-pd-router": "119cb803caf93f43"}),
    "h200-01": ("fb65ed65394012a2", {"vllm-fleet-ernie-vl-h200-i0": "96784c86db6e150b"}),
    "h200-02": ("28d412a642750e56", {"vllm-fleet-ernie-vl-h200-i1": "96784c86db6e150b"}),
    "mi300x-01": ("32ab5ef93d2ffe2b", {"vllm-fleet-ernie-vl-mi300x": "4480c7232aff7612"}),
}

# accelerator settings away from the contract's defaults: accelerator.py folds a digest of the
# blocks into the process hash (the path a renamed block key would change)
OVERRIDES = {"mi300x_cluster": {"rocm_aiter": False},
             "cpu_embeddings": {"cpu_env": {"VLLM_CPU_KVCACHE_SPACE": "8"}},
             "h200_cluster": {"cuda_gpu_count": 4}}
OVERRIDDEN = {
    "cpu-01": ("58d442559d8de127", {"vllm-fleet-minilm": "cec72df032ccb0ae"}),
    "h200-01": ("afc3ef00f74a486f", {"vllm-fleet-ernie-vl-h200-i0": "9fc782af599310d0"}),
    "h200-02": ("11b8152a17943ce5", {"vllm-fleet-ernie-vl-h200-i1": "9fc782af599310d0"}),
    "mi300x-01": ("f20d3ce0fa0675cf", {"vllm-fleet-ernie-vl-mi300x": "c3fab39cf4ceb377"}),
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
