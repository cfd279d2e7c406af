"""``shared.node_statistics`` (FedForest's client maths) against brute-force loops.

Every function is checked on small random data with NaNs, ties, zero weights, samples outside
every tree (node -1) and requested nodes that hold no sample.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.node_statistics import (
    category_summaries,
    node_summaries,
    pair_left_summaries,
    pair_quantiles,
    summary_terms,
)
from shared.sketches import exact_weighted_quantiles

GRID = [-2.0, -0.0, 0.0, 0.5, 1.0, 1.0, 3.0, 7.25]  # repeated values: ties
WEIGHTS = [0.0, 0.0, 1.0, 1.0, 2.0, 3.0, 0.5]
NODES = [-1, 0, 1, 2, 3, 5]


@st.composite
def samples(draw, *, n_max: int = 30, nan: bool = True, infinite: bool = False):
    """(x, node, weight, y_class, y_real) for n samples."""
    n = draw(st.integers(0, n_max))
    values = st.sampled_from(GRID + ([float("nan")] * 2 if nan else []) + ([np.inf, -np.inf] if infinite else []))
    x = np.array(draw(st.lists(values, min_size=n, max_size=n)), dtype=np.float64)
    node = np.array(draw(st.lists(st.sampled_from(NODES), min_size=n, max_size=n)), dtype=np.int64)
    weight = np.array(draw(st.lists(st.sampled_from(WEIGHTS), min_size=n, max_size=n)), dtype=np.float64)
    y_class = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), dtype=np.int64)
    y_real = np.array(draw(st.lists(st.sampled_from([-1.5, 0.0, 2.0, 3.25]), min_size=n, max_size=n)))
    return x, node, weight, y_class, y_real


requested = st.lists(st.integers(0, 6), min_size=1, max_size=5, unique=True).map(lambda v: np.array(v, np.int64))


def brute_terms(y, n_classes):
    rows = []
    for v in y:
        if n_classes:
            row = [0.0] * n_classes
            row[int(v)] = 1.0
        else:
            row = [1.0, float(v), float(v) * float(v)]
        rows.append(row)
    return np.array(rows, dtype=np.float64).reshape(len(y), n_classes or 3)


# --- summary_terms / node_summaries --------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(samples(), st.sampled_from([0, 3]))
def test_summary_terms_are_one_hot_rows_or_moments(data, n_classes) -> None:
    _, _, _, y_class, y_real = data
    y = y_class if n_classes else y_real
    got = summary_terms(y, n_classes)
    np.testing.assert_array_equal(got, brute_terms(y, n_classes))


@settings(max_examples=80, deadline=None)
@given(samples(), st.sampled_from([0, 3]), st.integers(1, 8))
def test_node_summaries_are_weighted_sums_per_node(data, n_classes, n_nodes) -> None:
    _, node, weight, y_class, y_real = data
    node = np.where(node >= n_nodes, -1, node)
    terms = brute_terms(y_class if n_classes else y_real, n_classes)
    got = node_summaries(node, weight, terms, n_nodes)
    S = terms.shape[1]
    want = np.zeros((n_nodes, S))
    for i in range(len(node)):
        if node[i] >= 0:
            want[node[i]] += weight[i] * terms[i]
    assert got.shape == (n_nodes, S)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


# --- pair_quantiles ------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(samples(), requested, st.integers(1, 9))
def test_pair_quantiles_equal_exact_weighted_quantiles_of_each_node(data, nodes, m) -> None:
    x, node, weight, _, _ = data
    points, total = pair_quantiles(x, node, weight, nodes, m)
    assert points.shape == (nodes.size, m + 1) and total.shape == (nodes.size,)
    ranks = np.arange(m + 1) / m
    for p, nu in enumerate(nodes.tolist()):
        keep = [i for i in range(len(x)) if node[i] == nu and not np.isnan(x[i]) and weight[i] > 0]
        if not keep:
            assert total[p] == 0
            assert np.isnan(points[p]).all()
            continue
        assert total[p] == sum(weight[i] for i in keep)
        want = exact_weighted_quantiles(x[keep], weight[keep], ranks)
        np.testing.assert_array_equal(points[p], want)
        assert (np.diff(points[p]) >= 0).all()
        assert points[p, 0] == min(x[keep]) and points[p, -1] == max(x[keep])


def test_pair_quantiles_with_no_samples_at_all() -> None:
    points, total = pair_quantiles(np.zeros(0), np.zeros(0, np.int64), np.zeros(0), np.array([0, 2]), 4)
    assert points.shape == (2, 5) and np.isnan(points).all()
    np.testing.assert_array_equal(total, [0.0, 0.0])


# --- pair_left_summaries -------------------------------------------------------------------------


THRESHOLDS = [-3.0, -2.0, -1.0, -0.0, 0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 7.25, 8.0]


@settings(max_examples=150, deadline=None)
@given(
    samples(infinite=True),
    st.sampled_from([0, 3]),
    st.lists(st.tuples(st.integers(0, 6), st.sampled_from(THRESHOLDS)), min_size=0, max_size=12),
)
def test_pair_left_summaries_sum_the_node_samples_below_each_threshold(data, n_classes, cands) -> None:
    x, node, weight, y_class, y_real = data
    terms = brute_terms(y_class if n_classes else y_real, n_classes)
    cand_node = np.array([c[0] for c in cands], dtype=np.int64)
    cand_threshold = np.array([c[1] for c in cands], dtype=np.float64)
    got = pair_left_summaries(x, node, weight, terms, cand_node, cand_threshold)
    S = terms.shape[1]
    want = np.zeros((len(cands), S))
    for c, (nu, t) in enumerate(cands):
        for i in range(len(x)):
            if node[i] == nu and not np.isnan(x[i]) and x[i] < t:  # NaN never goes left
                want[c] += weight[i] * terms[i]
    assert got.shape == (len(cands), S)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)


def test_pair_left_summaries_ties_go_right_and_nan_never_left() -> None:
    x = np.array([1.0, 1.0, np.nan, 0.0, 2.0])
    node = np.array([0, 0, 0, 0, -1])
    terms = summary_terms(np.array([0, 1, 1, 0, 1]), 2)
    got = pair_left_summaries(x, node, np.ones(5), terms, np.array([0, 0, 0]), np.array([1.0, 1.5, 100.0]))
    np.testing.assert_array_equal(got, [[1, 0], [2, 1], [2, 1]])


# --- category_summaries --------------------------------------------------------------------------


CODES = [0.0, 1.0, 2.0, 3.0, 4.0, -1.0, 1.5, np.nan, np.inf, -np.inf, 2.0**40]


@settings(max_examples=150, deadline=None)
@given(
    samples(),
    st.lists(st.sampled_from(CODES), min_size=30, max_size=30),
    requested,
    st.integers(2, 5),
    st.sampled_from([0, 3]),
)
def test_category_summaries_sum_each_valid_code(data, codes, nodes, m, n_classes) -> None:
    _, node, weight, y_class, y_real = data
    n = len(node)
    c = np.array(codes[:n], dtype=np.float64)
    terms = brute_terms(y_class if n_classes else y_real, n_classes)
    got = category_summaries(c, node, weight, terms, nodes, m)
    S = terms.shape[1]
    want = np.zeros((nodes.size, m, S))
    for p, nu in enumerate(nodes.tolist()):
        for i in range(n):
            v = c[i]
            if node[i] == nu and np.isfinite(v) and v == int(v) and 0 <= v < m:
                want[p, int(v)] += weight[i] * terms[i]
    assert got.shape == (nodes.size, m, S)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_top_per_node_keeps_the_largest_gains_of_each_node() -> None:
    from shared.node_statistics import top_per_node

    node = np.array([0, 1, 0, 0, 1, 2])
    gain = np.array([0.1, 0.5, 0.9, 0.3, 0.2, 0.0])
    np.testing.assert_array_equal(top_per_node(node, gain, 2), [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(top_per_node(node, gain, 1), [1, 2, 5])
    assert top_per_node(np.zeros(0, int), np.zeros(0), 3).size == 0
