"""Private growth from fleet-summed histograms == growth from atoms (the paper's protocol) given
the same edges and gradients; K clients' summed histograms == the pooled data's, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.algorithms.histogram_growth import GrowthParams, grow_trees
from aggregator.algorithms.levelwise_growth import grow_round
from shared.atoms import merge_atoms
from shared.histograms import histogram_slots, node_histograms, quantize, route_round
from shared.sketches import bin_ids

FRAC_BITS = 40


def _data(seed: int, n: int = 600, d: int = 5, k: int = 3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    X[rng.random((n, d)) < 0.05] = np.nan
    y = (np.nan_to_num(X[:, 0]) + 0.5 * np.nan_to_num(X[:, 1]) > 0).astype(int) + (np.nan_to_num(X[:, 2]) > 1)
    p = np.full((n, k), 1.0 / k)
    g = p - np.eye(k)[y]
    h = np.maximum(2 * p * (1 - p), 1e-16)
    edges = [np.unique(np.nanquantile(X[:, j], np.linspace(0.05, 0.95, 17)).astype(np.float32)) for j in range(d)]
    return X, g, h, edges


def _fetch_from(parts, edges, *, vector_leaves: bool = False):
    """A fetch that sums the clients' integer histograms (the fleet sum, unmasked)."""
    n_edges = np.array([e.shape[0] for e in edges])
    S = int(n_edges.max()) + 2

    def fetch(splits, node_tree, node_id):
        total = 0
        for X, g, h in parts:
            slots = histogram_slots(bin_ids(X, edges), n_edges)
            pos = route_round(
                slots,
                S - 1,
                1 if vector_leaves else g.shape[1],
                splits.tree,
                splits.node,
                splits.feature,
                splits.bin,
                splits.default_left,
                splits.left,
                splits.right,
            )
            total = total + node_histograms(
                slots,
                S,
                pos,
                node_tree,
                node_id,
                quantize(g, FRAC_BITS, 1.0),
                quantize(h, FRAC_BITS, 1.0),
                vector_leaves=vector_leaves,
            )
        return total

    return fetch


@pytest.mark.parametrize("strategy", ["one_output_per_tree", "multi_output_tree"])
@pytest.mark.parametrize("seed", range(5))
def test_histogram_growth_equals_atom_growth(seed: int, strategy: str) -> None:
    X, g, h, edges = _data(seed)
    params = GrowthParams(
        max_depth=4,
        reg_lambda=1.0,
        gamma=0.1,
        learning_rate=0.3,
        multi_strategy=strategy,
        min_child_weight=1.0 if seed % 2 else 20.1,
    )  # h = 4/9 for all: no H sum near 20.1
    keys, G, H, W = merge_atoms(bin_ids(X, edges), g, h)
    expected = [t.tree for t in grow_trees(keys, G, H, W, edges, params)]
    vector = strategy == "multi_output_tree"
    got = grow_round(
        g.shape[1], edges, params, _fetch_from([(X, g, h)], edges, vector_leaves=vector), frac_bits=FRAC_BITS
    )
    assert len(got) == len(expected) == (1 if vector else 3)
    assert all(t.n_outputs == (3 if vector else 1) for t in got) and sum(t.n_nodes for t in got) > 7
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a.feature, b.feature)
        np.testing.assert_array_equal(a.threshold, b.threshold)
        np.testing.assert_array_equal(a.default_left, b.default_left)
        np.testing.assert_allclose(a.value, b.value, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("strategy", ["one_output_per_tree", "multi_output_tree"])
@pytest.mark.parametrize("seed", range(3))
def test_clients_sum_to_the_pooled_trees_bit_for_bit(seed: int, strategy: str) -> None:
    X, g, h, edges = _data(seed)
    params = GrowthParams(max_depth=5, gamma=0.0, multi_strategy=strategy)
    vector = strategy == "multi_output_tree"
    cut = np.sort(np.random.default_rng(seed).choice(np.arange(1, X.shape[0]), 3, replace=False))
    parts = [(x, gg, hh) for x, gg, hh in zip(np.split(X, cut), np.split(g, cut), np.split(h, cut))]
    pooled = grow_round(3, edges, params, _fetch_from([(X, g, h)], edges, vector_leaves=vector), frac_bits=FRAC_BITS)
    fleet = grow_round(3, edges, params, _fetch_from(parts, edges, vector_leaves=vector), frac_bits=FRAC_BITS)
    for a, b in zip(pooled, fleet):
        np.testing.assert_array_equal(a.value, b.value)
        np.testing.assert_array_equal(a.feature, b.feature)
        np.testing.assert_array_equal(a.threshold, b.threshold)


def _leaf_counts(tree, X: np.ndarray) -> np.ndarray:
    node = np.zeros(X.shape[0], dtype=np.int64)
    rows = np.arange(X.shape[0])
    while (tree.feature[node] >= 0).any():
        f = tree.feature[node]
        inner = f >= 0
        x = X[rows, np.maximum(f, 0)]
        left = np.where(np.isnan(x), tree.default_left[node], x < tree.threshold[node])
        node = np.where(inner, np.where(left, tree.left[node], tree.right[node]), node)
    counts = np.bincount(node, minlength=tree.feature.shape[0])
    return counts[tree.feature < 0]


@pytest.mark.parametrize("strategy", ["one_output_per_tree", "multi_output_tree"])
@pytest.mark.parametrize("crowd", [0, 25, 60])
def test_minimum_crowd_bounds_every_leaf(crowd: int, strategy: str) -> None:
    X, g, h, edges = _data(1, n=300)
    params = GrowthParams(max_depth=8, gamma=0.0, min_child_weight=0.0, multi_strategy=strategy)
    vector = strategy == "multi_output_tree"
    trees = grow_round(
        3, edges, params, _fetch_from([(X, g, h)], edges, vector_leaves=vector), frac_bits=FRAC_BITS, min_crowd=crowd
    )
    smallest = min(_leaf_counts(t, X).min() for t in trees)
    assert smallest >= max(crowd, 1)
    if crowd == 0:
        assert smallest < 25  # the bound binds: without a crowd, deep trees isolate small groups


def test_depth_zero_gives_one_leaf_per_output() -> None:
    X, g, h, edges = _data(2)
    trees = grow_round(3, edges, GrowthParams(max_depth=0), _fetch_from([(X, g, h)], edges), frac_bits=FRAC_BITS)
    assert [t.n_nodes for t in trees] == [1, 1, 1]
    np.testing.assert_allclose([t.value[0, 0] for t in trees], 0.3 * -g.sum(axis=0) / (h.sum(axis=0) + 1.0))
