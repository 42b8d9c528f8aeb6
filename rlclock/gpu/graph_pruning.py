"""Pure graph algorithms behind kernel isolation: topological order, dependency memsets, the nodes a replay keeps.

These work on plain integers — node positions and predecessor lists — so they are tested without a GPU;
:mod:`rlclock.gpu.cuda_graph` applies them to real CUDA graphs.

Why memsets: cuBLAS "coop" GEMMs and flash-attention kernels read small tile counters that a memset node
just before them zeroes. Replayed without it, such a kernel finds the counters already used and exits in a
couple of microseconds instead of doing its work. Keeping *all* memsets costs ~1–2 µs per memset per launch,
so an isolated kernel keeps exactly the memsets it depends on: walking back from the kernel through
predecessors that are not kernels, every memset found is kept; the walk stops at kernels.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection, Sequence

KERNEL = "kernel"
MEMSET = "memset"
MEMCPY = "memcpy"


def topological_order(preds: Sequence[Sequence[int]]) -> list[int]:
    """Node indices in an order where every node follows its predecessors (ties: lower index first).

    Args:
        preds: For node ``i``, the indices of its predecessors.

    Raises:
        ValueError: The graph has a cycle.
    """
    n = len(preds)
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for i, ps in enumerate(preds):
        for p in ps:
            succ[p].append(i)
            indeg[i] += 1
    ready = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    out: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        out.append(i)
        for s in succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, s)
    if len(out) != n:
        raise ValueError("the graph has a cycle")
    return out


def dependency_memsets(
    node: int, types: Sequence[str], preds: Sequence[Sequence[int]], kernels_back: int = 0
) -> list[int]:
    """The memset nodes ``node`` depends on through non-kernel predecessors (sorted).

    Args:
        node: The node to isolate.
        types: Node types (``"kernel"``, ``"memset"``, ``"memcpy"``, ``"empty"`` …).
        preds: Predecessor lists.
        kernels_back: Walk on through this many kernels (not kept) before stopping. A library call may
            launch its memsets ahead of a helper kernel (cuDNN's flash backward: counter memset, then a
            pre-processing kernel, then the main kernel); 0 is the exact rule.
    """
    found: set[int] = set()
    seen: set[tuple[int, int]] = set()
    stack = [(p, 0) for p in preds[node]]
    while stack:
        p, passed = stack.pop()
        if (p, passed) in seen:
            continue
        seen.add((p, passed))
        if types[p] == KERNEL:
            if passed >= kernels_back:
                continue
            passed += 1
        elif types[p] == MEMSET:
            found.add(p)
        stack.extend((q, passed) for q in preds[p])
    return sorted(found)


def bridging_edges(keep: Collection[int], preds: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """Edges to add so the kept nodes keep their order once every other node is removed.

    For each kept node, its nearest kept ancestors reached only through removed nodes must become direct
    predecessors (an edge between two kept nodes survives the removal by itself).

    Args:
        keep: Nodes that stay.
        preds: Predecessor lists of the full graph.

    Returns:
        ``(from, to)`` pairs, sorted.
    """
    keep = set(keep)
    edges: set[tuple[int, int]] = set()
    for k in keep:
        direct = set(preds[k])
        stack = [p for p in preds[k] if p not in keep]
        seen: set[int] = set()
        while stack:
            p = stack.pop()
            if p in seen:
                continue
            seen.add(p)
            for q in preds[p]:
                if q in keep:
                    if q not in direct:
                        edges.add((q, k))
                else:
                    stack.append(q)
    return sorted(edges)


def isolation_set(node: int, types: Sequence[str], preds: Sequence[Sequence[int]], kernels_back: int = 0) -> list[int]:
    """The nodes an isolated replay of ``node`` keeps: the node and its dependency memsets (sorted)."""
    return sorted({node, *dependency_memsets(node, types, preds, kernels_back)})


def segment_set(
    order: Sequence[int], start: int, stop: int, types: Sequence[str], preds: Sequence[Sequence[int]]
) -> list[int]:
    """The nodes of the segment ``order[start:stop]`` plus the memsets its first node depends on.

    Args:
        order: Nodes in topological order.
        start: First position of the segment in ``order``.
        stop: One past its last position.
        types: Node types.
        preds: Predecessor lists.
    """
    nodes = set(order[start:stop])
    if start < stop:
        for n in list(nodes):
            nodes.update(m for m in dependency_memsets(n, types, preds) if m not in nodes)
    return sorted(nodes)


def segment_bounds(entry_positions: Sequence[int], group: Sequence[int], n_nodes: int) -> list[tuple[int, int, int]]:
    """Split a topologically ordered graph into segments where ``group`` changes.

    Args:
        entry_positions: Position in the topological order of every trace entry, increasing.
        group: A label per trace entry (e.g. its requested clock configuration index).
        n_nodes: Number of graph nodes.

    Returns:
        ``(start, stop, label)`` per segment over topological positions; nodes between two entries belong to
        the later one's segment (a memset belongs with the kernel it prepares); the first segment starts at 0
        and the last ends at ``n_nodes``.
    """
    if len(entry_positions) != len(group) or not entry_positions:
        raise ValueError("need one label per trace entry and at least one entry")
    if any(b <= a for a, b in itertools.pairwise(entry_positions)):
        raise ValueError("entry positions must increase")
    out: list[tuple[int, int, int]] = []
    start = 0
    for j in range(1, len(group)):
        if group[j] != group[j - 1]:
            cut = entry_positions[j - 1] + 1
            out.append((start, cut, int(group[j - 1])))
            start = cut
    out.append((start, n_nodes, int(group[-1])))
    return out
