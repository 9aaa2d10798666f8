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

# host: (host plan hash, {process name: process hash}), as planned before the rename
EXAMPLE = {
    "cpu-01": ("609b03c221b09be2", {"vllm-fleet-minilm": "dc7c536c6b53d0a6"}),
    "h200-01": ("afc8276e038bbb1d", {"vllm-fleet-ernie-vl-h200-i0": "5852a4c3a8857d84"}),
    "h200-02": ("1faf38e97ee3d10f", {"vllm-fleet-ernie-vl-h200-i1": "5852a4c3a8857d84"}),
    "h200-11": ("7ff4dec99f926010", {"vllm-fleet-dsv3-tp16-i0-head0": "0847101e412f2dcd"}),
    "h200-12": ("a191ed4ea55ef52e", {"vllm-fleet-dsv3-tp16-i0-worker1": "996fd25bf615c76a"}),
    "h200-13": ("00e8611d4bc234f4", {"vllm-fleet-dsv3-tp16-i1-head0": "47ba270e0cd50b01"}),
    "h200-14": ("be583f5f3d8e58cc", {"vllm-fleet-dsv3-tp16-i1-worker1": "63e50c00c7f56bc1"}),
    "h200-21": ("ad83e431a355da48", {"vllm-fleet-dsv3-pd-prefill0": "0ad13d8c30f83cba"}),
    "h200-22": ("203deb94230847a1", {"vllm-fleet-dsv3-pd-prefill1": "16b42e9460d0a6dd"}),
    "h200-23": ("dcf3da0c8b88e257", {"vllm-fleet-dsv3-pd-decode0": "977be1f83e924cef"}),
    "h200-31": ("87cbe85f27966723", {"vllm-fleet-dsv3-mooncake-i0": "d8c8ab381750fd19"}),
    "h200-32": ("371b87225ba5d350", {"vllm-fleet-dsv3-mooncake-i1": "d8c8ab381750fd19"}),
    "kv-01": ("7c76b61333c96f8c", {
        "vllm-fleet-dsv3-mooncake-mooncake-master": "c749d8e0100a226d",
        "vllm-fleet-dsv3-mooncake-mooncake-store": "2434dfc0cd438bdd",
        "vllm-fleet-dsv3-mooncake-router": "b3b38f5f1171b23e",
    }),
    "mi300x-01": ("ed1d35caadd2b7a9", {"vllm-fleet-ernie-vl-mi300x": "98eda02587b083d1"}),
    "router-01": ("a1557fda0adacd61", {"vllm-fleet-dsv3-pd-router": "b8e0d6067a39dd63"}),
}

# accelerator settings away from the contract's defaults: accelerator.py folds a digest of the
# blocks into the process hash (the path a renamed block key would change)
OVERRIDES = {"mi300x_cluster": {"rocm_aiter": False},
             "cpu_embeddings": {"cpu_env": {"VLLM_CPU_KVCACHE_SPACE": "8"}},
             "h200_cluster": {"cuda_gpu_count": 4}}
OVERRIDDEN = {
    "cpu-01": ("80c5020dcfee0952", {"vllm-fleet-minilm": "680121995f1cb21f"}),
    "h200-01": ("b14cc1c58a3458e2", {"vllm-fleet-ernie-vl-h200-i0": "d03fcf2a32d538fa"}),
    "h200-02": ("2a95119b74dfaf9b", {"vllm-fleet-ernie-vl-h200-i1": "d03fcf2a32d538fa"}),
    "mi300x-01": ("a153343c602a78f3", {"vllm-fleet-ernie-vl-mi300x": "2856f1c9cde2b625"}),
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
