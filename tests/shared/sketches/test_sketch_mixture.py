"""The server half: FedForest's CDF mixture (Theorem 3.1 with weights), edges, order, pre-merging."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.sketches import (
    SketchError,
    compress,
    exact_edges,
    merge_edges,
    merge_edges_columns,
    mixture_cdf,
    mixture_quantiles,
    rank_error,
    summarize,
    summarize_columns,
    weighted_cdf,
)
from tests.shared.sketches.sketch_strategies import SLACK, fleets, has_weight, pooled


def _bound(summaries) -> float:
    """sum_k pi_k / M_k over the clients that carry weight (Theorem 3.1 with per-client M)."""
    w = np.array([s.total_weight for s in summaries])
    m = np.array([max(s.m, 1) for s in summaries])
    return float(np.sum(w / m) / w.sum())


@settings(max_examples=200, deadline=None)
@given(clients=fleets(), ms=st.lists(st.integers(1, 24), min_size=6, max_size=6))
def test_theorem_3_1_mixture_cdf_is_within_1_over_m_of_the_pooled_cdf(clients, ms) -> None:
    x, w = pooled(clients)
    if not has_weight(x, w):
        return
    summaries = [summarize(c.x, c.w, m) for c, m in zip(clients, ms)]
    at = np.unique(x[~np.isnan(x)])  # the sup over x is reached at a data value or its left limit
    below, at_or_below = weighted_cdf(at, x, w)
    bound = _bound(summaries) + SLACK
    assert np.max(np.abs(mixture_cdf(summaries, at, "right") - at_or_below)) <= bound
    assert np.max(np.abs(mixture_cdf(summaries, at, "left") - below)) <= bound


@settings(max_examples=200, deadline=None)
@given(clients=fleets(), m=st.integers(1, 32), n_bins=st.integers(2, 80))
def test_rank_error_of_merged_edges_is_at_most_1_over_m(clients, m: int, n_bins: int) -> None:
    x, w = pooled(clients)
    if not has_weight(x, w):
        return
    edges = merge_edges([summarize(c.x, c.w, m) for c in clients], n_bins)
    assert edges.dtype == np.float32 and np.all(np.isfinite(edges))
    assert np.all(np.diff(edges) > 0) and edges.size <= n_bins - 1
    assert rank_error(edges, x, w, n_bins) <= 1 / m + SLACK


@settings(max_examples=100, deadline=None)
@given(clients=fleets(), m=st.integers(1, 16), n_bins=st.integers(2, 40), seed=st.integers(0, 2**32 - 1))
def test_merge_is_order_independent_bit_for_bit(clients, m: int, n_bins: int, seed: int) -> None:
    summaries = [summarize(c.x, c.w, m) for c in clients]
    reference = merge_edges(summaries, n_bins)
    shuffled = [summaries[i] for i in np.random.default_rng(seed).permutation(len(summaries))]
    assert merge_edges(shuffled, n_bins).tobytes() == reference.tobytes()


@settings(max_examples=100, deadline=None)
@given(clients=fleets(max_clients=8), m=st.integers(2, 16), site_m=st.integers(2, 32), n_bins=st.integers(2, 40))
def test_compressed_site_summaries_add_1_over_m_per_level(clients, m: int, site_m: int, n_bins: int) -> None:
    x, w = pooled(clients)
    if not has_weight(x, w):
        return
    summaries = [summarize(c.x, c.w, m) for c in clients]
    sites = [compress(summaries[i::2], site_m) for i in range(2)]  # two site aggregators
    assert sum(s.count for s in sites) == sum(s.count for s in summaries)
    assert sum(s.n_missing for s in sites) == np.isnan(x).sum()
    edges = merge_edges(sites, n_bins)
    assert rank_error(edges, x, w, n_bins) <= 1 / m + 1 / site_m + SLACK


def test_disjoint_client_supports_are_mixed_not_averaged() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.uniform(0, 1, 400), rng.uniform(100, 101, 400)
    sa, sb = summarize(a, np.full(400, 1.0), 64), summarize(b, np.full(400, 3.0), 64)
    edges = merge_edges([sa, sb], 8)
    # Client a holds a quarter of the weight: the first two edges (ranks 1/8, 2/8) are in its
    # support, the rest in b's. Averaging the clients' quantiles would put edges in the gap.
    assert np.all(edges[:2] <= 1.0) and np.all(edges[2:] >= 100.0)
    x, w = np.concatenate([a, b]), np.concatenate([np.full(400, 1.0), np.full(400, 3.0)])
    assert rank_error(edges, x, w, 8) <= 1 / 64


def test_ties_and_constant_columns() -> None:
    tied = [summarize(np.repeat([1.0, 2.0, 3.0], [50, 10, 40]), None, 16) for _ in range(3)]
    edges = merge_edges(tied, 16)
    np.testing.assert_array_equal(edges, np.array([1.0, 2.0, 3.0], np.float32)[: edges.size])
    assert set(edges.tolist()) <= {1.0, 2.0, 3.0}
    x = np.tile(np.repeat([1.0, 2.0, 3.0], [50, 10, 40]), 3)
    assert rank_error(edges, x, None, 16) <= 1 / 16
    constant = merge_edges([summarize(np.full(10, 5.0), None, 8), summarize([5.0], [2.0], 8)], 64)
    np.testing.assert_array_equal(constant, np.array([5.0], np.float32))


def test_zero_weight_clients_and_all_zero_fleet() -> None:
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=200), rng.normal(5, 1, size=200)
    weighted = summarize(a, rng.random(200), 32)
    silent = summarize(b, np.zeros(200), 32)  # contributes nothing when others have weight
    np.testing.assert_array_equal(merge_edges([weighted, silent], 16), merge_edges([weighted], 16))
    # Every weight zero: the fleet falls back to count quantiles mixed by count.
    zeros = [summarize(a, np.zeros(200), 32), summarize(b, np.zeros(200), 32)]
    counts = [summarize(a, None, 32), summarize(b, None, 32)]
    np.testing.assert_array_equal(merge_edges(zeros, 16), merge_edges(counts, 16))


def test_no_values_anywhere_gives_no_edges() -> None:
    empty = [summarize([np.nan, np.nan], None, 8), summarize(np.empty(0), None, 8)]
    edges = merge_edges(empty, 64)
    assert edges.dtype == np.float32 and edges.size == 0
    assert compress(empty, 4).is_empty and compress(empty, 4).n_missing == 2
    with pytest.raises(SketchError, match="no summary holds any value"):
        mixture_quantiles(empty, [0.5])
    with pytest.raises(SketchError, match="no summary holds any value"):
        mixture_cdf(empty, [0.5])


def test_inverse_hits_exact_quantiles_when_m_covers_the_data() -> None:
    # With M >= n every distinct value is a point: the mixture is exact at the data values.
    x = np.arange(1.0, 9.0)
    s = summarize(x, None, 64)
    np.testing.assert_array_equal(mixture_quantiles([s], [0.0, 1.0]), [1.0, 8.0])
    assert rank_error(merge_edges([s], 8), x, None, 8) == 0.0
    np.testing.assert_array_equal(exact_edges(x, None, 8), np.arange(1, 8, dtype=np.float32))


def test_columns_and_validation() -> None:
    rng = np.random.default_rng(5)
    clients = [rng.normal(k, 1, size=(100, 3)) for k in range(4)]
    per_client = [summarize_columns(X, None, 16) for X in clients]
    edges = merge_edges_columns(per_client, 32)
    for f in range(3):
        np.testing.assert_array_equal(edges[f], merge_edges([c[f] for c in per_client], 32))
    with pytest.raises(SketchError, match="different numbers of features"):
        merge_edges_columns([per_client[0], per_client[1][:2]], 32)
    with pytest.raises(SketchError, match="n_bins must be >= 2"):
        merge_edges(per_client[0], 1)
    with pytest.raises(SketchError, match="expected WeightedSummary"):
        merge_edges([np.arange(3.0)], 4)  # type: ignore[list-item]


def test_order_independence_exhaustive_small_fleet() -> None:
    rng = np.random.default_rng(6)
    summaries = [summarize(rng.normal(k, 1 + k, 50), rng.random(50), 8) for k in range(4)]
    results = {merge_edges(list(p), 32).tobytes() for p in itertools.permutations(summaries)}
    assert len(results) == 1


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 12), st.integers(1, 20))
def test_batched_mixture_quantiles_equal_the_per_mixture_inverse(seed: int, n_groups: int, m: int) -> None:
    """FedForest inverts thousands of mixtures per level in one batch; every answer must be an
    inverse of the mixture CDF (``F~(t-) <= r <= F~(t)``, evaluated by ``mixture_cdf``) and agree
    with the bisection of ``mixture_quantiles`` except where ``F~`` is flat at ``r`` (a gap between
    supports): there either end of the gap is an inverse and a 1-ulp difference in the running
    sums picks one or the other."""
    from shared.sketches import WeightedSummary, batched_mixture_quantiles

    rng = np.random.default_rng(seed)
    rows, weights, groups = [], [], []
    for g in range(n_groups):
        for _ in range(int(rng.integers(0, 4))):
            x = np.sort(rng.normal(loc=rng.normal() * 5, size=int(rng.integers(1, 30))).round(int(rng.integers(0, 3))))
            rows.append(x[np.minimum((np.arange(m + 1) / m * (len(x) - 1)).astype(int), len(x) - 1)])
            weights.append(float(rng.integers(1, 40)))
            groups.append(g)
    ranks = np.arange(1, 16) / 16
    P = np.array(rows).reshape(-1, m + 1)
    got = batched_mixture_quantiles(P, np.array(weights), np.array(groups, dtype=np.int64), n_groups, ranks)
    for g in range(n_groups):
        members = [i for i, gg in enumerate(groups) if gg == g]
        if not members:
            assert np.isnan(got[g]).all()
            continue
        summaries = [WeightedSummary(P[i], weights[i], int(weights[i])) for i in members]
        assert (mixture_cdf(summaries, got[g], "right") >= ranks - 1e-9).all()
        assert (mixture_cdf(summaries, got[g], "left") <= ranks + 1e-9).all()
        want = mixture_quantiles(summaries, ranks)
        no_mass_between = mixture_cdf(summaries, got[g], "left") - mixture_cdf(summaries, want, "right") < 1e-9
        gap = (np.abs(got[g] - want) > 1e-9) & no_mass_between  # both ends of a flat stretch
        assert gap.mean() <= 0.5
        np.testing.assert_allclose(got[g][~gap], want[~gap], rtol=1e-9, atol=1e-9)
