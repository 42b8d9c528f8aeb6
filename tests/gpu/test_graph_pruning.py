"""Pure graph algorithms of kernel isolation and schedule segmentation."""

from __future__ import annotations

import pytest

from rlclock.gpu import graph_pruning as gp

K, S, C, E = "kernel", "memset", "memcpy", "empty"


def test_topological_order_breaks_ties_by_index_and_detects_cycles():
    preds = [[], [2], [0], [0]]  # 0 -> 2 -> 1, 0 -> 3
    assert gp.topological_order(preds) == [0, 2, 1, 3]
    with pytest.raises(ValueError, match="cycle"):
        gp.topological_order([[1], [0]])


# chain: k0, m1 (memset for k3), e2 (empty), k3, m4, m5, k6, k7
TYPES = [K, S, E, K, S, S, K, K]
PREDS = [[], [0], [1], [2], [3], [4], [5], [6]]


def test_dependency_memsets_walk_back_through_non_kernels_only():
    assert gp.dependency_memsets(3, TYPES, PREDS) == [1]
    assert gp.dependency_memsets(6, TYPES, PREDS) == [4, 5]
    assert gp.dependency_memsets(7, TYPES, PREDS) == []  # stops at kernel 6
    assert gp.dependency_memsets(0, TYPES, PREDS) == []
    assert gp.isolation_set(6, TYPES, PREDS) == [4, 5, 6]


def test_widened_search_walks_past_kernels():
    # cuDNN's flash backward: counter memset, pre-processing kernel, main kernel
    assert gp.dependency_memsets(7, TYPES, PREDS, kernels_back=1) == [4, 5]
    assert gp.dependency_memsets(7, TYPES, PREDS, kernels_back=2) == [1, 4, 5]


def test_bridging_edges_reconnect_kept_nodes_across_removed_ones():
    keep = [1, 3]  # memset 1 -> (empty 2 removed) -> kernel 3
    assert gp.bridging_edges(keep, PREDS) == [(1, 3)]
    assert gp.bridging_edges([4, 5, 6], PREDS) == []  # 4 -> 5 -> 6 are direct edges already
    diamond = [[], [0], [0], [1, 2]]  # 0 -> {1, 2} -> 3; keep 0 and 3
    assert gp.bridging_edges([0, 3], diamond) == [(0, 3)]


def test_segment_bounds_put_memsets_with_the_kernel_they_prepare():
    entries = [0, 3, 6, 7]  # kernel positions
    bounds = gp.segment_bounds(entries, [0, 1, 1, 0], len(TYPES))
    assert bounds == [(0, 1, 0), (1, 7, 1), (7, 8, 0)]
    assert gp.segment_bounds(entries, [2, 2, 2, 2], 8) == [(0, 8, 2)]
    with pytest.raises(ValueError):
        gp.segment_bounds([3, 1], [0, 1], 8)
    order = list(range(len(TYPES)))
    assert gp.segment_set(order, 1, 7, TYPES, PREDS) == [1, 2, 3, 4, 5, 6]
    assert gp.segment_set(order, 7, 8, TYPES, PREDS) == [7]
