"""Where a host's replicas run: GPU groups that follow the GPU topology, CPU sets inside NUMA nodes.

Pure functions over what ``vllm_fleet_gpu_facts`` reports (no Ansible import):

* :func:`gpu_groups` splits a host's GPUs into the GPU sets of its replicas, preferring the
  best links inside a set (NVLink / XGMI peers before PCIe neighbours) and one NUMA node per
  set. The facts' ``topology`` is ``{"links": [[word, ...], ...], "numa": [node or None, ...]}``:
  an n x n matrix of link words indexed by GPU index (``X`` on the diagonal; NVIDIA: ``NV#``,
  ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``; AMD: ``XGMI``, ``PCIE``, ``UNKNOWN``) and the
  NUMA node of every GPU.
* :func:`cpu_sets` splits a CPU host's usable cores (facts ``cpus`` and ``numa_nodes``) into
  equal disjoint sets, inside NUMA nodes where that costs no core.

Both are deterministic: the same facts always give the same sets.
"""

from __future__ import annotations

import itertools
import re
from functools import lru_cache
from typing import List, Mapping, Optional, Sequence, Tuple

# Largest pool searched exhaustively (every way to cut it); larger pools are cut greedily.
EXHAUSTIVE_MAX = 12

# Rank of a link word (higher is better): X > NV# (more links better) > XGMI > PIX > PXB > PHB
# > NODE > SYS / PCIE / anything unknown.
_RANKS = {"XGMI": 90, "PIX": 50, "PXB": 40, "PHB": 30, "NODE": 20}
_LOWEST = 10
_SELF = 1000
_NVLINK = re.compile(r"^NV(\d+)\Z")

Score = Tuple[int, int, int]


def link_rank(word: object) -> int:
    """How good a link word of the topology matrix is (higher is better)."""
    text = str(word if word is not None else "").strip().upper()
    if text == "X":
        return _SELF
    match = _NVLINK.match(text)
    if match:
        return 100 + min(int(match.group(1)), 899)
    return _RANKS.get(text, _LOWEST)


def consecutive(pool: Sequence[int], size: int, count: int) -> List[List[int]]:
    """The split without topology: ``count`` consecutive runs of ``size`` GPUs in pool order."""
    return [list(pool[i * size:(i + 1) * size]) for i in range(count)]


def _matrix(topology: Optional[Mapping], pool: Sequence[int]) -> Optional[Tuple[List[List[str]], List[Optional[int]]]]:
    """The topology's links and NUMA nodes when they cover every GPU of the pool, else None."""
    if not isinstance(topology, Mapping):
        return None
    links = topology.get("links")
    if not isinstance(links, (list, tuple)) or not links:
        return None
    n = len(links)
    if any(not isinstance(row, (list, tuple)) or len(row) != n for row in links):
        return None
    if any(not isinstance(g, int) or isinstance(g, bool) or g < 0 or g >= n for g in pool):
        return None
    numa_raw = topology.get("numa")
    numa: List[Optional[int]] = [None] * n
    if isinstance(numa_raw, (list, tuple)) and len(numa_raw) == n:
        numa = [v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None for v in numa_raw]
    return [[str(w) for w in row] for row in links], numa


def gpu_groups(pool: Sequence[int], size: int, count: int, topology: Optional[Mapping]) -> List[List[int]]:
    """Split the GPU ``pool`` (GPU indices in order, e.g. a host's ``vllm_fleet_gpus`` or
    ``range(n)``) into ``count`` disjoint groups of ``size`` GPUs.

    * ``size`` 1: the first ``count`` GPUs of the pool, one each, in pool order.
    * No topology, one that does not cover every GPU of the pool, or one whose links between
      the pool's GPUs are all equally good (an NVSwitch or all-XGMI machine): consecutive
      groups, ``[pool[i*size:(i+1)*size] for i in range(count)]`` (the NUMA nodes are not
      consulted then).
    * Otherwise the groups maximise, in this order: the sum over groups of the group's weakest
      link, the sum over groups of all their links, the number of groups inside one NUMA node;
      ties go to the cut closest to pool order. Pools of up to ``EXHAUSTIVE_MAX`` (12) GPUs are
      searched exhaustively; larger pools greedily, one group after the other around the
      lowest free GPU of the pool: for each possible first partner the group grows by the GPU
      with the best weakest link to it (then the best links in sum, the seed's NUMA node, pool
      order), and the best of those groups is kept.

    GPUs left over (``size * count`` below the pool's size) are not in any group. The groups
    come sorted by their lowest GPU, GPUs ascending inside. Raises ValueError when the pool
    cannot hold the groups."""
    pool = [int(g) for g in pool]
    size, count = int(size), int(count)
    if size < 1 or count < 1:
        raise ValueError(f"GPU groups need a size and a count of at least 1 (size {size}, count {count})")
    if len(set(pool)) != len(pool):
        raise ValueError(f"the GPU pool {pool} names a GPU twice")
    if size * count > len(pool):
        raise ValueError(f"{count} groups of {size} GPU(s) need {size * count} GPUs, the pool has {len(pool)}")
    if size == 1:
        return [[g] for g in pool[:count]]
    found = _matrix(topology, pool)
    if found is None:
        return consecutive(pool, size, count)
    links, numa = found
    n = len(pool)
    rank = [[min(link_rank(links[pool[a]][pool[b]]), link_rank(links[pool[b]][pool[a]])) if a != b else _SELF
             for b in range(n)] for a in range(n)]
    if len({rank[a][b] for a in range(n) for b in range(a + 1, n)}) <= 1:
        return consecutive(pool, size, count)
    node = [numa[g] for g in pool]

    def score(group: Sequence[int]) -> Score:
        pairs = [rank[a][b] for a, b in itertools.combinations(group, 2)]
        nodes = {node[a] for a in group}
        one_node = 1 if len(nodes) == 1 and None not in nodes else 0
        return (min(pairs), sum(pairs), one_node)

    if n <= EXHAUSTIVE_MAX:
        cut = _exhaustive(n, size, count, score)
    else:
        cut = _greedy(n, size, count, rank, node, score)
    groups = [sorted(pool[p] for p in group) for group in cut]
    return sorted(groups, key=lambda g: g[0])


def _add(a: Score, b: Score) -> Score:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def _exhaustive(n: int, size: int, count: int, score) -> List[Tuple[int, ...]]:
    """The best cut of pool positions 0..n-1 (dynamic programming over the free positions:
    the lowest free position joins a group, lexicographically smallest partners first, or is
    left over; the first best cut wins ties, which is the one closest to pool order)."""
    group_score = lru_cache(maxsize=None)(score)

    @lru_cache(maxsize=None)
    def best(free: int, left: int) -> Tuple[Score, Tuple[Tuple[int, ...], ...]]:
        if left == 0:
            return (0, 0, 0), ()
        positions = [p for p in range(n) if free >> p & 1]
        spare = len(positions) - left * size
        first, rest = positions[0], positions[1:]
        result: Optional[Tuple[Score, Tuple[Tuple[int, ...], ...]]] = None
        for partners in itertools.combinations(rest, size - 1):
            group = (first,) + partners
            mask = free
            for p in group:
                mask &= ~(1 << p)
            sub_score, sub_cut = best(mask, left - 1)
            total = _add(group_score(group), sub_score)
            if result is None or total > result[0]:
                result = (total, (group,) + sub_cut)
        if spare > 0:
            sub_score, sub_cut = best(free & ~(1 << first), left)
            if result is None or sub_score > result[0]:
                result = (sub_score, sub_cut)
        assert result is not None
        return result

    return list(best((1 << n) - 1, count)[1])


def _greedy(n: int, size: int, count: int, rank: List[List[int]], node: List[Optional[int]],
            score) -> List[Tuple[int, ...]]:
    """Groups one after the other, each around the lowest free position: for every possible
    first partner, the group grows by the position with the best weakest link to it (then the
    best links in sum, the seed's NUMA node, pool order); the best of these groups is kept."""
    free = list(range(n))
    cut: List[Tuple[int, ...]] = []
    for _ in range(count):
        seed = free[0]
        best: Optional[Tuple[Score, Tuple[int, ...]]] = None
        for first in free[1:]:
            group = [seed, first]
            rest = [p for p in free if p not in group]
            while len(group) < size:
                def key(p: int):
                    ranks = [rank[p][q] for q in group]
                    same = 1 if node[p] is not None and node[p] == node[seed] else 0
                    return (min(ranks), sum(ranks), same, -p)
                pick = max(rest, key=key)
                rest.remove(pick)
                group.append(pick)
            found = score(group)
            if best is None or found > best[0]:
                best = (found, tuple(group))
        assert best is not None
        cut.append(best[1])
        free = [p for p in free if p not in best[1]]
    return cut


# ----------------------------------------------------------------------------------------------
# CPU sets
# ----------------------------------------------------------------------------------------------

def ranges(cpus: Sequence[int]) -> str:
    """GPU or CPU numbers as ranges: ``[0, 1, 2, 3, 6]`` -> ``"0-3,6"``."""
    runs: List[List[int]] = []
    for c in sorted(cpus):
        if runs and runs[-1][-1] == c - 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _node_key(name: str):
    return (0, int(name)) if str(name).isdigit() else (1, str(name))


def cpu_sets(cpus: Sequence[int], numa_nodes: Mapping[str, Sequence[int]], count: int) -> List[List[int]]:
    """Split the usable ``cpus`` into ``count`` disjoint sets of equal size.

    ``numa_nodes`` maps a NUMA node (``"0"``, ``"1"``, ...) to its CPUs; only usable CPUs count
    (usable CPUs in no node form one node of their own; no nodes at all: one node with every CPU).
    Every set lies inside one NUMA node when ``count`` is a multiple of the number of nodes, or
    when keeping sets inside nodes costs no core per set (the nodes divide evenly): the set size
    is then the largest that lets the nodes hold ``count`` sets, and the sets are spread over the
    nodes in turn. Otherwise the sets are contiguous runs of the CPUs in node order, as large as
    ``len(cpus) // count``, and may span nodes. CPUs that do not fill a set stay unassigned.
    Sets come sorted by their lowest CPU, CPUs ascending inside (lowest CPU ids of a node first).
    Raises ValueError when there are fewer usable CPUs than sets."""
    usable = sorted(set(int(c) for c in cpus))
    count = int(count)
    if count < 1:
        raise ValueError(f"CPU sets need a count of at least 1 (count {count})")
    if len(usable) < count:
        have = f"{len(usable)} ({ranges(usable)})" if usable else "none"
        raise ValueError(f"{count} CPU sets need at least {count} usable CPUs, the host has {have}")
    allowed, taken = set(usable), set()
    nodes: List[List[int]] = []
    for name in sorted((numa_nodes or {}).keys(), key=_node_key):
        members = sorted(c for c in set(int(c) for c in numa_nodes[name] or []) if c in allowed and c not in taken)
        if members:
            nodes.append(members)
            taken.update(members)
    stray = [c for c in usable if c not in taken]
    if stray:
        nodes.append(stray)
    across = len(usable) // count
    inside = max((s for s in range(across, 0, -1) if sum(len(m) // s for m in nodes) >= count), default=0)
    if inside and (count % len(nodes) == 0 or inside == across):
        room = [len(m) // inside for m in nodes]
        used = [0] * len(nodes)
        sets: List[List[int]] = []
        while len(sets) < count:
            for i, members in enumerate(nodes):
                if len(sets) < count and used[i] < room[i]:
                    sets.append(members[used[i] * inside:(used[i] + 1) * inside])
                    used[i] += 1
        return sorted(sets, key=lambda s: s[0])
    ordered = [c for members in nodes for c in members]
    return sorted((ordered[i * across:(i + 1) * across] for i in range(count)), key=lambda s: s[0])
