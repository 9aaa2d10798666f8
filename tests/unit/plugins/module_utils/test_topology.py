"""Replica placement inside a host (topology.py): GPU groups that follow the GPU topology the
facts report, CPU sets inside NUMA nodes.

The topologies come from the facts' real parsers (module_utils ``vllm_fleet_gpu_nvidia``,
``vllm_fleet_gpu_amd``) where they can (the ``nvidia-smi topo -m`` fixture of an 8-GPU PCIe box
with NVLink bridges, the ``amd-smi topology`` fixture, the FAKE tools' output), so the shape the
planner gets is the shape the facts publish.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_fleet.topology import EXHAUSTIVE_MAX, consecutive, cpu_sets, gpu_groups, link_rank
from vllm_fleet_gpu_amd import parse_amd_smi_topology
from vllm_fleet_gpu_nvidia import parse_nvidia_topo

ROOT = Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests" / "fixtures" / "gpu"
FAKES = ROOT / "tests" / "fakes" / "bin"


@pytest.fixture(scope="module")
def pairs():
    """8 PCIe GPUs: NVLink bridges 0-4, 1-5, 2-6, 3-7 (NV4), PIX within a PCIe switch (0-1,
    2-3, ...), NODE between the switches of a socket, SYS across; GPUs 0-3 on NUMA 0."""
    topology = parse_nvidia_topo((FIXTURES / "nvidia-smi-topo-m-550-pcie-nvlink-pairs.txt").read_text())
    assert topology["numa"] == [0, 0, 0, 0, 1, 1, 1, 1] and topology["links"][0][4] == "NV4"
    return topology


def uniform(n, word, numa=None):
    return {"links": [["X" if i == j else word for j in range(n)] for i in range(n)],
            "numa": numa if numa is not None else [None] * n}


def matrix(n, word_of, numa=None):
    """A symmetric topology with word_of(i, j) for i < j."""
    links = [["X"] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            links[i][j] = links[j][i] = word_of(i, j)
    return {"links": links, "numa": numa if numa is not None else [None] * n}


# ------------------------------------------------------------------------------ link ranks

def test_link_rank_order():
    order = ["X", "NV18", "NV12", "NV4", "NV1", "XGMI", "PIX", "PXB", "PHB", "NODE", "SYS"]
    ranks = [link_rank(w) for w in order]
    assert ranks == sorted(ranks, reverse=True) and len(set(ranks)) == len(ranks)
    assert link_rank("SYS") == link_rank("PCIE") == link_rank("UNKNOWN") == link_rank("N/A") == link_rank(None)
    assert link_rank(" nv4 ") == link_rank("NV4") and link_rank("xgmi") == link_rank("XGMI")


# ------------------------------------------------------------------------------ GPU groups

def test_nvlink_pairs_win_over_the_consecutive_split(pairs):
    assert gpu_groups(range(8), 2, 4, pairs) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert consecutive(range(8), 2, 4) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # fewer replicas than pairs: the NVLink pairs of the lowest GPUs, the rest idle
    assert gpu_groups(range(8), 2, 3, pairs) == [[0, 4], [1, 5], [2, 6]]


def test_groups_of_four_stay_on_one_numa_node(pairs):
    """Half the box per replica: a NUMA node each (PIX/NODE inside) beats NVLink pairs that
    would put a cross-socket SYS link inside every group."""
    assert gpu_groups(range(8), 4, 2, pairs) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert gpu_groups(range(8), 8, 1, pairs) == [list(range(8))]
    assert gpu_groups(range(8), 3, 2, pairs) == [[0, 1, 2], [4, 5, 6]]


def test_size_one_is_singles_in_pool_order(pairs):
    assert gpu_groups(range(8), 1, 8, pairs) == [[i] for i in range(8)]
    assert gpu_groups([5, 2, 7, 0], 1, 3, pairs) == [[5], [2], [7]]


def test_pools_that_are_a_subset(pairs):
    assert gpu_groups([1, 2, 3, 5, 6, 7], 2, 3, pairs) == [[1, 5], [2, 6], [3, 7]]
    assert gpu_groups([0, 1, 4, 5], 2, 2, pairs) == [[0, 4], [1, 5]]
    assert gpu_groups([4, 0, 6, 2], 2, 2, pairs) == [[0, 4], [2, 6]]
    # one socket's GPUs (vllm_fleet_gpus "0-3"): no NVLink peer inside, the PCIe switch pairs
    assert gpu_groups([0, 1, 2, 3], 2, 2, pairs) == [[0, 1], [2, 3]]
    assert gpu_groups([0, 2, 1, 3], 2, 2, pairs) == [[0, 1], [2, 3]]


def test_the_fake_nvidia_smi_pairs_layout_gives_the_same_groups():
    out = subprocess.run([sys.executable, str(FAKES / "nvidia-smi"), "topo", "-m"], capture_output=True, text=True,
                         check=True, env=dict(os.environ, FAKE_GPU_PROFILE="h200x8", FAKE_GPU_TOPOLOGY="pairs")).stdout
    topology = parse_nvidia_topo(out)
    assert gpu_groups(range(8), 2, 4, topology) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert gpu_groups(range(8), 4, 2, topology) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_uniform_links_give_the_consecutive_split():
    """NVSwitch (every pair NV18) or all-XGMI: exactly the split without topology, whatever
    the NUMA nodes say."""
    nvswitch = uniform(8, "NV18", [0, 0, 0, 0, 1, 1, 1, 1])
    assert gpu_groups(range(8), 2, 4, nvswitch) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert gpu_groups(range(8), 3, 2, nvswitch) == [[0, 1, 2], [3, 4, 5]]
    assert gpu_groups(range(8), 4, 2, uniform(8, "XGMI")) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # a subset whose own links are uniform (the NVLink-free half of the pairs box would not be)
    half = matrix(8, lambda i, j: "NV4" if j - i == 4 else "PIX")
    assert gpu_groups([0, 1, 2, 3], 2, 2, half) == [[0, 1], [2, 3]]


def test_without_a_usable_topology_the_split_is_today_s():
    pool = [6, 7, 0, 1, 2, 3]
    expected = [[6, 7], [0, 1], [2, 3]]
    assert gpu_groups(pool, 2, 3, None) == expected
    assert gpu_groups(pool, 2, 3, {}) == expected
    assert gpu_groups(pool, 2, 3, {"links": "NV4"}) == expected
    assert gpu_groups(pool, 2, 3, uniform(4, "NV4")) == expected           # GPUs 6 and 7 missing from it
    ragged = uniform(8, "NV4")
    ragged["links"][3] = ragged["links"][3][:5]
    assert gpu_groups(pool, 2, 3, ragged) == expected


def test_amd_xgmi_bridges_through_the_real_parser():
    topology = parse_amd_smi_topology((FIXTURES / "amd-smi-topology-mi210x4-rocm62.json").read_text())
    assert gpu_groups([0, 2, 1, 3], 2, 2, topology) == [[0, 1], [2, 3]]
    assert gpu_groups([0, 2, 1, 3], 2, 2, None) == [[0, 2], [1, 3]]


def test_more_nvlinks_are_better():
    topology = matrix(4, lambda i, j: {(0, 2): "NV12", (1, 3): "NV12", (0, 1): "NV2", (2, 3): "NV2"}.get((i, j), "PIX"))
    assert gpu_groups(range(4), 2, 2, topology) == [[0, 2], [1, 3]]


def test_numa_breaks_ties_of_the_links():
    topology = matrix(4, lambda i, j: "SYS" if (i, j) == (0, 3) else "PXB", numa=[0, 1, 0, 1])
    assert gpu_groups(range(4), 2, 2, topology) == [[0, 2], [1, 3]]
    topology["numa"] = [None] * 4   # without NUMA nodes: the tie goes to pool order
    assert gpu_groups(range(4), 2, 2, topology) == [[0, 1], [2, 3]]


def test_ties_go_to_pool_order():
    links = {(0, 1): "NV4", (2, 3): "NV4", (0, 2): "NV4", (1, 3): "NV4"}
    topology = matrix(4, lambda i, j: links.get((i, j), "SYS"))
    assert gpu_groups(range(4), 2, 2, topology) == [[0, 1], [2, 3]]
    assert gpu_groups([0, 2, 1, 3], 2, 2, topology) == [[0, 2], [1, 3]]


def test_the_weakest_link_counts_first():
    """A group is as fast as its slowest link: three NVLink peers plus a SYS link lose to four
    GPUs on one PCIe switch tree."""
    fast = {(0, 1), (0, 2), (1, 2), (3, 4), (3, 5), (4, 5)}
    topology = matrix(6, lambda i, j: "NV18" if (i, j) in fast else "PXB" if (i, j) in {(2, 3)} else "SYS")
    assert gpu_groups(range(6), 3, 2, topology) == [[0, 1, 2], [3, 4, 5]]
    assert gpu_groups(range(6), 2, 3, topology) == [[0, 1], [2, 3], [4, 5]]


def test_the_largest_exhaustive_pools_are_quick():
    words = ["PIX", "NODE", "SYS", "NV2", "PXB"]
    topology = matrix(EXHAUSTIVE_MAX, lambda i, j: words[(i * 7 + j * 3 + i * j) % 5])
    for size, count in [(2, 6), (2, 5), (3, 4), (3, 3), (4, 3), (6, 2), (5, 2)]:
        groups = gpu_groups(range(EXHAUSTIVE_MAX), size, count, topology)
        assert len(groups) == count and all(len(g) == size for g in groups)
        assert len({g for group in groups for g in group}) == size * count


def test_large_pools_are_cut_greedily():
    n = 16
    topology = matrix(n, lambda i, j: "NV4" if j - i == 8 else ("PIX" if i // 2 == j // 2 else "NODE")
                      if i // 8 == j // 8 else "SYS", numa=[i // 8 for i in range(n)])
    assert gpu_groups(range(n), 2, 8, topology) == [[i, i + 8] for i in range(8)]
    assert gpu_groups(range(n), 8, 2, topology) == [list(range(8)), list(range(8, 16))]
    assert gpu_groups(range(n), 2, 8, uniform(n, "NV18")) == consecutive(range(n), 2, 8)


@pytest.mark.parametrize("pool,size,count,message", [
    (range(8), 0, 2, "size and a count of at least 1"),
    (range(8), 2, 0, "size and a count of at least 1"),
    (range(8), 3, 3, "3 groups of 3 GPU(s) need 9 GPUs, the pool has 8"),
    ([0, 1, 1, 2], 2, 2, "names a GPU twice"),
])
def test_impossible_groups_are_refused(pairs, pool, size, count, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        gpu_groups(pool, size, count, pairs)


# ------------------------------------------------------------------------------ CPU sets

TWO = {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}


def test_cpu_sets_one_per_numa_node_and_more():
    assert cpu_sets(range(8), TWO, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert cpu_sets(range(8), TWO, 4) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert cpu_sets(range(8), TWO, 8) == [[i] for i in range(8)]


def test_cpu_sets_with_hyperthread_siblings():
    """The cpulists of a 2-socket host with SMT: physical cores first, siblings after."""
    numa = {"0": [0, 1, 2, 3, 8, 9, 10, 11], "1": [4, 5, 6, 7, 12, 13, 14, 15]}
    assert cpu_sets(range(16), numa, 2) == [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]]
    assert cpu_sets(range(16), numa, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]


def test_cpu_sets_inside_nodes_when_that_costs_no_core():
    # 3 sets over two nodes of 4: 2 cores each either way, so inside nodes; 6 and 7 stay free
    assert cpu_sets(range(8), TWO, 3) == [[0, 1], [2, 3], [4, 5]]
    # a multiple of the node count with unequal nodes: one set per node, as large as the small node
    assert cpu_sets(range(12), {"0": list(range(8)), "1": [8, 9, 10, 11]}, 2) == [[0, 1, 2, 3], [8, 9, 10, 11]]


def test_cpu_sets_across_nodes_otherwise():
    # 3 sets over two nodes of 7: 4 cores each across the nodes, only 3 inside them
    numa = {"0": list(range(7)), "1": list(range(7, 14))}
    assert cpu_sets(range(14), numa, 3) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    # one set on a 2-node host: every core
    assert cpu_sets(range(8), TWO, 1) == [list(range(8))]


def test_cpu_sets_of_a_small_host_and_too_many_sets():
    assert cpu_sets([0, 1], {"0": [0, 1]}, 2) == [[0], [1]]
    assert cpu_sets([0, 1, 2], {}, 3) == [[0], [1], [2]]
    with pytest.raises(ValueError, match=r"^3 CPU sets need at least 3 usable CPUs, the host has 2 \(0-1\)$"):
        cpu_sets([0, 1], {"0": [0, 1]}, 3)
    with pytest.raises(ValueError, match="usable CPUs, the host has none"):
        cpu_sets([], {}, 1)
    with pytest.raises(ValueError, match="count of at least 1"):
        cpu_sets([0, 1], {}, 0)


def test_cpu_sets_follow_the_usable_cpus():
    # a cpuset of 2-7: node 0 keeps 2 and 3; unordered input, node keys sorted as numbers
    assert cpu_sets([7, 6, 5, 4, 3, 2], TWO, 2) == [[2, 3], [4, 5]]
    assert cpu_sets(range(4), {"10": [2, 3], "2": [0, 1]}, 2) == [[0, 1], [2, 3]]
    # usable CPUs in no node form one of their own
    assert cpu_sets(range(6), {"0": [0, 1, 2, 3]}, 2) == [[0, 1], [4, 5]]
    # no NUMA nodes at all: one node
    assert cpu_sets(range(4), {}, 2) == [[0, 1], [2, 3]]
