"""Proposition 1 on arbitrary partial trees: for any tree, any division of its splits
among parties and any samples, intersecting the parties' reachable leaf sets (Alg. 3-4) gives
exactly the leaf the complete tree routes each sample to -- and so does the classical protocol."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.vertical_trees import (
    PartialTree,
    classical_leaves,
    intersect_leaves,
    leaves_of,
    owned_directions,
    reachable_leaves,
)


def _random_forest(seed: int, n_parties: int, depth: int, widths: list[int]):
    """A random complete tree (heap ids), its owners, features and thresholds, and the partial trees."""
    rng = np.random.default_rng(seed)
    splits, frontier = [], [0]
    for _ in range(depth):
        nxt = []
        for node in frontier:
            if rng.random() < 0.75:
                splits.append(node)
                nxt += [2 * node + 1, 2 * node + 2]
        frontier = nxt
    nodes = np.array(sorted(splits), dtype=np.int64)
    owner = rng.integers(0, n_parties, nodes.size)
    feature = np.array([rng.integers(0, widths[o]) for o in owner.tolist()], dtype=np.int64)
    threshold = rng.normal(size=nodes.size)
    partial = [
        PartialTree(nodes, owner == p, np.where(owner == p, feature, -1), np.where(owner == p, threshold, np.nan))
        for p in range(n_parties)
    ]
    return nodes, owner, feature, threshold, partial


def _complete_leaf(nodes, owner, feature, threshold, blocks, i):
    at = {n: k for k, n in enumerate(nodes.tolist())}
    node = 0
    while node in at:
        k = at[node]
        node = 2 * node + 1 if blocks[owner[k]][i, feature[k]] <= threshold[k] else 2 * node + 2
    return int(np.searchsorted(leaves_of(nodes), node))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4), st.integers(0, 7))
def test_the_intersection_of_leaf_sets_is_the_complete_trees_leaf(seed, n_parties, depth):
    rng = np.random.default_rng(seed + 1)
    widths = rng.integers(1, 4, n_parties).tolist()
    nodes, owner, feature, threshold, partial = _random_forest(seed, n_parties, depth, widths)
    blocks = [rng.normal(size=(40, w)) for w in widths]
    one_round = intersect_leaves([reachable_leaves(t, b) for t, b in zip(partial, blocks)])
    expected = [_complete_leaf(nodes, owner, feature, threshold, blocks, i) for i in range(40)]
    assert one_round.tolist() == expected
    classical = classical_leaves(
        nodes, owner, 40, lambda p, node, rows: owned_directions(partial[p], blocks[p][rows], node)
    )
    assert classical.tolist() == expected


def test_leaf_sets_of_different_forests_do_not_intersect_silently():
    nodes = np.array([0])
    left = PartialTree(nodes, np.array([True]), np.array([0]), np.array([0.0]))
    also_left = PartialTree(nodes, np.array([True]), np.array([0]), np.array([10.0]))
    X = np.array([[5.0]])
    with pytest.raises(ValueError, match="intersect in 0 leaves for sample 0, not 1"):
        intersect_leaves([reachable_leaves(left, X), reachable_leaves(also_left, X)])
    with pytest.raises(ValueError, match="does not own node 0"):
        owned_directions(PartialTree(nodes, np.array([False]), np.array([-1]), np.array([np.nan])), X, 0)
