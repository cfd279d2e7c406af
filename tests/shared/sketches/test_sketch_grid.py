"""The count-histogram grid: keys, plans, client counts, server refinement, edges, accuracy.

The central property: the federated loop (each gateway counts its own rows, the server sums the
count vectors) gives bit for bit the edges of ``grid_edges`` on the pooled rows, for any split.
"""

from __future__ import annotations

import doctest
import importlib.util
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.protocol.codec import dumps_value, loads_value
from shared.sketches import (
    GridPlan,
    GridRefinement,
    SketchError,
    bin_ids,
    float32_keys,
    grid_counts,
    grid_edges,
    grid_refine,
    initial_plan,
    key_values,
    rank_error,
    validate_edges,
)
from shared.sketches import grid as grid_module
from shared.sketches._inputs import FLOAT32_MAX
from tests.shared.sketches.sketch_strategies import SLACK

FMAX = np.float32(FLOAT32_MAX)


def _bits(edges: list[np.ndarray]) -> list[bytes]:
    """Edges as raw bytes: equality is bit for bit."""
    return [np.asarray(e, dtype=np.float32).tobytes() for e in edges]


def _federated(clients, n_bins: int, weights=None, order=None, **kw) -> GridRefinement:
    """The protocol: each client counts its own rows, the server sees only the sum."""
    keyed = [float32_keys(x) for x in clients]
    server = GridRefinement(clients[0].shape[1], n_bins, **kw)
    plan = server.first_plan()
    order = range(len(clients)) if order is None else order
    while plan is not None:
        replies = [grid_counts(*keyed[k], plan, None if weights is None else weights[k]) for k in order]
        for reply in replies:
            assert reply.dtype == np.int64 and reply.shape == (plan.n_cells,)  # one layout for all
        plan = server.add(plan, np.sum(replies, axis=0, dtype=np.int64))
    return server


def _as_trees_see_it(x: np.ndarray) -> np.ndarray:
    """float32-rounded values with ±inf as ±FLT_MAX (``_inputs``) and -0.0 as +0.0."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.clip(np.asarray(x, dtype=np.float64), -FLOAT32_MAX, FLOAT32_MAX).astype(np.float32) + np.float32(0)


# --- hypothesis data -----------------------------------------------------------------------------
KINDS = ["normal", "ties", "const", "empty", "wild", "narrow", "zero_inflated"]


def _column(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "normal":
        x = rng.normal(0, 3, n)
    elif kind == "ties":  # duplicates, both zeros
        x = rng.choice([-3.0, -1.0, -0.0, 0.0, 1.0, 2.0], n)
    elif kind == "const":
        x = np.full(n, float(np.float32(rng.uniform(-100, 100))))
    elif kind == "empty":
        x = np.full(n, np.nan)
    elif kind == "wild":  # every range at once: subnormals, huge, infinities, beyond float32
        x = rng.choice(
            [-np.inf, -1e38, -1e6, -1.0, -1e-42, -0.0, 0.0, 1e-45, 1e-30, 0.5, 1.0, 1e6, 3.4e38, 1e39, np.inf], n
        )
        x = np.where(rng.random(n) < 0.3, rng.normal(0, 1e3, n), x)
    elif kind == "narrow":
        x = 20 + 0.05 * rng.normal(size=n)
    else:
        x = np.where(rng.random(n) < 0.5, 0.0, rng.exponential(size=n))
    missing = rng.choice([0.0, 0.0, 0.2, 0.9])
    x = x.copy()
    x[rng.random(n) < missing] = np.nan
    return x


@st.composite
def fleets(draw):
    """Pooled rows, their split into 1..6 clients (some empty), integer weights or None."""
    n = draw(st.integers(0, 120))
    d = draw(st.integers(1, 4))
    kinds = [draw(st.sampled_from(KINDS)) for _ in range(d)]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    X = np.column_stack([_column(k, n, rng) for k in kinds]) if n else np.empty((0, d))
    k = draw(st.integers(1, 6))
    owner = rng.integers(0, k, n)
    weighted = draw(st.booleans())
    w = rng.integers(0, 4, n) if weighted else None
    return X, owner, k, w


# --- keys ----------------------------------------------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(raw=st.lists(st.floats(width=32) | st.sampled_from([1e39, -1e39, 1e-50]), min_size=0, max_size=50))
def test_keys_preserve_order_and_decode_to_the_values(raw) -> None:
    x = np.array(raw, dtype=np.float64)
    keys, missing = float32_keys(x)
    assert keys.dtype == np.uint32 and missing.dtype == np.bool_ and keys.shape == x.shape
    np.testing.assert_array_equal(missing, np.isnan(x))
    v = _as_trees_see_it(x)[~missing]
    k = keys[~missing].astype(np.int64)
    assert np.array_equal(v[:, None] < v[None, :], k[:, None] < k[None, :])
    assert np.array_equal(v[:, None] == v[None, :], k[:, None] == k[None, :])
    np.testing.assert_array_equal(key_values(keys[~missing]), v)  # -0.0 == 0.0 compares equal
    assert not np.signbit(key_values(keys[~missing])[v == 0]).any()  # and decodes to +0.0


def test_key_specials() -> None:
    keys, missing = float32_keys(np.array([-0.0, 0.0, np.inf, 1e39, -np.inf, -1e39, np.nan]))
    assert keys[0] == keys[1] == 0x80000000
    assert keys[2] == keys[3] == float32_keys(FMAX)[0] == 0xFF7FFFFF
    assert keys[4] == keys[5] == float32_keys(-FMAX)[0] == 0x00800000
    assert missing.tolist() == [False] * 6 + [True]
    f32, _ = float32_keys(np.array([np.inf, -0.0], dtype=np.float32))
    assert f32.tolist() == [0xFF7FFFFF, 0x80000000]
    two_d, m2 = float32_keys(np.array([[1, 2], [3, 4]], dtype=np.int64))
    assert two_d.shape == m2.shape == (2, 2) and (np.diff(two_d.ravel().astype(np.int64)) > 0).all()
    with pytest.raises(SketchError, match="real numbers"):
        float32_keys(np.array(["a"]))
    with pytest.raises(SketchError, match=r"\[0, 2\*\*32\)"):
        key_values(np.array([-1]))
    with pytest.raises(SketchError, match="integers"):
        key_values(np.array([1.0]))


# --- the plan ------------------------------------------------------------------------------------
def test_initial_plan_layout_and_wire_round_trip() -> None:
    plan = initial_plan(3, first_bits=5)
    assert plan.n_buckets == 3 and plan.n_cells == 96
    np.testing.assert_array_equal(plan.offsets, [0, 32, 64, 96])
    np.testing.assert_array_equal(plan.cells_per_feature, [32, 32, 32])
    wire = loads_value(dumps_value(plan.to_arrays()))
    back = GridPlan.from_arrays(wire, n_features=3)
    for name in ("feature", "prefix", "bits", "step"):
        np.testing.assert_array_equal(getattr(back, name), getattr(plan, name))
        assert getattr(back, name).dtype == np.int64 and not getattr(back, name).flags.writeable
    assert sum(a.nbytes for a in plan.to_arrays().values()) == 10 * plan.n_buckets


def _wire(feature, prefix, bits, step):
    return {"feature": np.array(feature), "prefix": np.array(prefix), "bits": np.array(bits), "step": np.array(step)}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_wire([0], [0], [32], [1]), "'bits' must lie in"),
        (_wire([0], [0], [-1], [1]), "'bits' must lie in"),
        (_wire([0], [4], [2], [2]), "does not fit in 2 bits"),
        (_wire([0], [-1], [2], [2]), "'prefix' must lie in"),
        (_wire([2], [0], [1], [1]), "'feature' must lie in"),
        (_wire([-1], [0], [1], [1]), "'feature' must lie in"),
        (_wire([0], [0], [30], [3]), "exceeds 32 bits"),
        (_wire([0], [0], [4], [0]), "'step' must lie in"),
        (_wire([0], [0], [0], [23]), "cells, more than the cap"),
        (_wire([0, 0], [1, 0], [1, 1], [1, 1]), "out of order or overlaps"),
        (_wire([0, 0], [1, 2], [1, 2], [1, 1]), "out of order or overlaps"),  # nested
        (_wire([0, 0], [1, 1], [1, 1], [1, 1]), "out of order or overlaps"),  # duplicate
        (_wire([1, 0], [0, 0], [1, 1], [1, 1]), "out of order or overlaps"),
        (_wire([0, 0], [0], [1], [1]), "one entry per bucket"),
        (_wire([0.0], [0], [1], [1]), "integer array"),
        (_wire([[0]], [[0]], [[1]], [[1]]), "1-D integer array"),
        ({"feature": [0], "prefix": [0], "bits": [1]}, "missing field 'step'"),
        ({"feature": [0], "prefix": [2**70], "bits": [1], "step": [1]}, "integer array"),
        (
            _wire(
                np.zeros(2000, np.int64), np.zeros(2000, np.int64), np.zeros(2000, np.int64), np.ones(2000, np.int64)
            ),
            "more buckets than",
        ),
        ([1, 2], "mapping"),
    ],
)
def test_hostile_plans_are_refused(data, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GridPlan.from_arrays(data, n_features=2, max_cells=1000)


def test_plan_layout_of_a_refinement_round() -> None:
    plan = GridPlan(2, feature=[0, 0, 1], prefix=[3, 9, 0], bits=[4, 4, 0], step=[2, 4, 1])
    np.testing.assert_array_equal(plan.offsets, [0, 4, 20, 22])
    np.testing.assert_array_equal(plan.low, [3 << 28, 9 << 28, 0])
    np.testing.assert_array_equal(plan.child_shift, [26, 24, 31])
    np.testing.assert_array_equal(plan.cells_per_feature, [20, 2])


# --- the client ----------------------------------------------------------------------------------
def _brute_force_counts(keys, missing, plan, weights=None) -> np.ndarray:
    n = keys.shape[0]
    w = np.ones(n, dtype=np.int64) if weights is None else np.asarray(weights, dtype=np.int64)
    out = []
    for i in range(plan.n_buckets):
        column = keys[:, plan.feature[i]].astype(np.int64)
        present = ~missing[:, plan.feature[i]]
        width = 1 << int(plan.child_shift[i])
        for c in range(1 << int(plan.step[i])):
            lo = int(plan.low[i]) + c * width
            out.append(int(w[present & (column >= lo) & (column < lo + width)].sum()))
    return np.array(out, dtype=np.int64)


@settings(max_examples=60, deadline=None)
@given(fleet=fleets(), n_bins=st.integers(2, 40))
def test_client_counts_match_a_brute_force_count_every_round(fleet, n_bins: int) -> None:
    X, _, _, w = fleet
    keys, missing = float32_keys(X)
    server = GridRefinement(X.shape[1], n_bins, first_bits=3, step=3)
    plan = server.first_plan()
    while plan is not None:
        counts = grid_counts(keys, missing, plan, w)
        np.testing.assert_array_equal(counts, _brute_force_counts(keys, missing, plan, w))
        plan = server.add(plan, counts)


def test_client_counts_of_a_hand_made_plan() -> None:
    x = np.array([[-2.0, 1.0], [-0.0, np.nan], [0.0, 3.0], [1.5, np.inf], [np.nan, -np.inf]])
    keys, missing = float32_keys(x)
    plan = GridPlan(2, feature=[0, 1, 1], prefix=[0, 0, 1], bits=[1, 1, 1], step=[1, 1, 1])
    counts = grid_counts(keys, missing, plan)
    np.testing.assert_array_equal(counts, _brute_force_counts(keys, missing, plan))
    # feature 0: the negatives (-0.0 counts as +0.0), halved at key 0x40000000 (-2.0 is just below);
    # feature 1: -inf as -FLT_MAX; then 1.0 | 3.0 and +inf as FLT_MAX (split at key 0xC0000000 = 2.0)
    assert counts.tolist() == [1, 0, 1, 0, 1, 2]
    weighted = grid_counts(keys, missing, plan, weights=np.array([1, 2, 3, 4, 5]))
    np.testing.assert_array_equal(weighted, _brute_force_counts(keys, missing, plan, [1, 2, 3, 4, 5]))
    np.testing.assert_array_equal(grid_counts(keys[:, :1].ravel(), missing[:, :1].ravel(), initial_plan(1, 1)), [1, 3])


def test_client_refuses_bad_inputs() -> None:
    keys, missing = float32_keys(np.zeros((4, 2)))
    plan = initial_plan(2, 2)
    with pytest.raises(SketchError, match="plan is for 2 features"):
        grid_counts(keys[:, :1], missing[:, :1], plan)
    with pytest.raises(SketchError, match="bool array"):
        grid_counts(keys, missing.astype(int), plan)
    with pytest.raises(SketchError, match="integer counts"):
        grid_counts(keys, missing, plan, weights=np.ones(4))
    with pytest.raises(SketchError, match=">= 0"):
        grid_counts(keys, missing, plan, weights=np.array([1, -1, 1, 1]))
    with pytest.raises(SketchError, match="shape"):
        grid_counts(keys, missing, plan, weights=np.ones(3, dtype=int))
    with pytest.raises(SketchError, match="GridPlan"):
        grid_counts(keys, missing, plan.to_arrays())  # type: ignore[arg-type]
    assert grid_counts(keys[:0], missing[:0], plan).tolist() == [0] * 8


# --- federated == pooled, and what the edges mean -------------------------------------------------
def _check_edges(X: np.ndarray, w, edges: list[np.ndarray]) -> None:
    """Valid edges, each separating two present values, binned by bin_ids as the keys imply."""
    keys, missing = float32_keys(X)
    for j, e in enumerate(edges):
        validate_edges(e)
        present = ~missing[:, j] if w is None else ~missing[:, j] & (w > 0)
        v = _as_trees_see_it(X[present, j])
        for edge in e:
            assert (v < edge).any() and (v >= edge).any()  # separates two non-empty leaves
        if e.size:
            ids = bin_ids(X[:, j], e)
            by_key = np.searchsorted(float32_keys(e)[0], keys[:, j], side="right")
            np.testing.assert_array_equal(ids[~missing[:, j]], by_key[~missing[:, j]])
            assert (ids[missing[:, j]] == e.size + 1).all()


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # np.diff of edges near ±FLT_MAX
@settings(max_examples=150, deadline=None)
@given(
    fleet=fleets(),
    n_bins=st.integers(2, 64),
    step=st.integers(1, 8),
    first_bits=st.integers(1, 10),
    refine_factor=st.sampled_from([0.5, 1.0, 2.0, 3.0]),
    data=st.data(),
)
def test_federated_edges_equal_pooled_edges_bit_for_bit(fleet, n_bins, step, first_bits, refine_factor, data) -> None:
    X, owner, k, w = fleet
    kw = {"step": step, "first_bits": first_bits, "refine_factor": refine_factor}
    pooled = grid_refine(X, n_bins, w, **kw)
    clients = [X[owner == c] for c in range(k)]
    weights = None if w is None else [w[owner == c] for c in range(k)]
    order = data.draw(st.permutations(range(k)))
    fed = _federated(clients, n_bins, weights, order=order, **kw)
    for flag in (False, True):
        assert _bits(fed.edges(include_min_point=flag)) == _bits(pooled.edges(include_min_point=flag))
    assert (fed.rounds, fed.cells_sent) == (pooled.rounds, pooled.cells_sent)
    np.testing.assert_array_equal(fed.cells_per_feature, pooled.cells_per_feature)
    assert pooled.done and pooled.rounds <= pooled.max_rounds
    edges = pooled.edges()
    _check_edges(X, w, edges)
    assert all(e.size <= n_bins - 1 for e in edges)
    # Refinement ran to completion (no cap), so the rank bound of the module docstring holds.
    bound = 1 / (2 * refine_factor * n_bins)
    weight = np.ones(X.shape[0], dtype=np.int64) if w is None else w
    for j in range(X.shape[1]):
        x = X[:, j]
        present = ~np.isnan(x) & (weight > 0)
        if not present.any():
            assert edges[j].size == 0
            continue
        v = _as_trees_see_it(x[present])
        if np.unique(v).size == 1 and refine_factor * n_bins > 1:  # else even all the mass is "light"
            assert edges[j].size == 0 and pooled.edges(include_min_point=True)[j].tolist() == [v[0]]
        with_min = pooled.edges(include_min_point=True)[j]
        assert rank_error(with_min, x, weight, n_bins) <= bound + SLACK
        p_min = weight[present][v == v.min()].sum() / weight[present].sum()  # the point mass at the minimum
        assert rank_error(edges[j], x, weight, n_bins) <= max(bound, p_min / 2) + SLACK


def test_constant_and_empty_features() -> None:
    X = np.column_stack(
        [
            np.full(50, 7.25),
            np.full(50, np.nan),
            np.r_[np.full(49, np.nan), 3.0],
            np.r_[np.full(25, -0.0), np.full(25, 0.0)],
        ]
    )
    server = grid_refine(X, 16)
    assert [e.size for e in server.edges()] == [0, 0, 0, 0]
    assert [e.tolist() for e in server.edges(include_min_point=True)] == [[7.25], [], [3.0], [0.0]]
    np.testing.assert_array_equal(server.totals, [50, 0, 1, 50])
    assert server.rounds == server.max_rounds == 7  # a heavy single value is refined down to 32 bits


def test_edges_are_leaf_boundaries_where_the_data_allow_it() -> None:
    X = np.arange(100.0)[:, None]
    assert grid_edges(X, 4)[0].tolist() == [24.0, 48.0, 72.0]  # leaves <= W / 8 = 12.5 are not refined
    exact = grid_edges(X, 4, refine_factor=1000.0)[0]
    assert exact.tolist() == [25.0, 50.0, 75.0]
    # outliers take far buckets: the body keeps its resolution
    Y = np.r_[np.arange(1000.0) / 1000, [1e6, 2e6, -5e30]][:, None]
    e = grid_edges(Y, 10)[0]
    assert rank_error(e, Y[:, 0], None, 10) <= 1 / 40 + SLACK
    assert (e[(e > 0) & (e < 1)]).size >= 8


# --- accuracy on the brief's datasets ------------------------------------------------------------
def _datasets(n: int = 20_000) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    outliers = rng.normal(size=n)
    far = rng.random(n) < 0.01
    outliers[far] = 1e6 * (1 + 0.1 * rng.normal(size=far.sum()))
    zeros_mid = rng.normal(size=n)
    zeros_mid[rng.random(n) < 0.5] = 0.0
    return {
        "normal": rng.normal(size=n),
        "narrow": 20 + 0.05 * rng.normal(size=n),
        "outliers": outliers,
        "zeros": zeros_mid,
    }


@pytest.mark.parametrize("n_bins", [64, 256])
@pytest.mark.parametrize("name", ["normal", "narrow", "outliers", "zeros"])
def test_rank_error_on_synthetic_features(name: str, n_bins: int) -> None:
    x = _datasets()[name]
    server = grid_refine(x[:, None], n_bins)
    alpha = rank_error(server.edges()[0], x, None, n_bins)
    assert alpha <= 1 / (4 * n_bins) + SLACK  # the default refine_factor 2: at most a quarter bin
    assert alpha <= 1 / n_bins
    assert server.capped_rounds == 0 and server.rounds <= server.max_rounds


def test_point_mass_at_the_minimum_needs_include_min_point() -> None:
    rng = np.random.default_rng(3)
    x = np.where(rng.random(20_000) < 0.5, 0.0, rng.exponential(size=20_000))
    server = grid_refine(x[:, None], 256)
    assert rank_error(server.edges(include_min_point=True)[0], x, None, 256) <= 1 / 1024 + SLACK
    # Without the (split-wise useless) edge at 0, targets inside the point mass rely on -inf and
    # on the first positive value: alpha ~ p / 2 = 0.25, though the usable splits are the same.
    plain = server.edges()[0]
    assert 0.2 < rank_error(plain, x, None, 256) <= 0.25 + SLACK
    np.testing.assert_array_equal(plain, server.edges(include_min_point=True)[0][1:])


@pytest.fixture(scope="module")
def watch() -> list[np.ndarray]:
    spec = importlib.util.find_spec("seglearn")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("seglearn is not installed (pip install --no-deps seglearn: it only provides the data file)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "watch_dataset.npy"
    data = np.load(path, allow_pickle=True).item()
    subjects = np.asarray(data["subject"])
    return [np.concatenate([x for x, s in zip(data["X"], subjects) if s == subject]) for subject in np.unique(subjects)]


def test_watch_data_one_gateway_per_subject(watch) -> None:
    X = np.concatenate(watch)  # the raw IMU columns
    n_bins = 256
    fed = _federated(watch, n_bins)
    pooled = grid_refine(X, n_bins)
    assert _bits(fed.edges()) == _bits(pooled.edges())
    edges = fed.edges()
    _check_edges(X, None, edges)
    alphas = [rank_error(edges[j], X[:, j], None, n_bins) for j in range(X.shape[1])]
    assert max(alphas) <= 1 / (4 * n_bins) + SLACK
    assert fed.rounds <= 5 and fed.cells_per_feature.max() <= 4096


# --- the server's bookkeeping and refusals --------------------------------------------------------
def test_cell_cap_trims_heaviest_first_and_only_delays_refinement() -> None:
    rng = np.random.default_rng(5)
    X = np.column_stack([rng.normal(size=5000), 20 + 0.05 * rng.normal(size=5000), rng.exponential(size=5000)])
    free = grid_refine(X, 64)
    server = GridRefinement(3, 64, max_cells=3 * 256, max_rounds=100)
    keys, missing = float32_keys(X)
    plan = server.first_plan()
    while plan is not None:
        assert plan.n_cells <= 3 * 256
        plan = server.add(plan, grid_counts(keys, missing, plan))
    assert server.capped_rounds > 0 and server.rounds >= free.rounds and free.capped_rounds == 0
    # which leaves need refinement does not depend on when they are refined: same final tree
    assert _bits(server.edges()) == _bits(free.edges())
    short = grid_refine(X, 64, max_cells=3 * 256)  # default max_rounds: stops early, coarser but valid
    _check_edges(X, None, short.edges())


def test_round_and_cell_accounting() -> None:
    X = np.random.default_rng(1).normal(size=(2000, 3))
    server = grid_refine(X, 32, first_bits=6, step=5)
    assert server.max_rounds == 1 + 6  # ceil((32 - 6) / 5) refinements reach single values
    assert server.cells_sent == int(server.cells_per_feature.sum())
    assert server.cells_per_feature.min() >= 64
    assert server.n_leaves > 0 and server.done
    coarse = grid_refine(X, 32, max_bits=16)
    assert coarse.max_rounds == 3 and coarse.rounds <= 3
    assert (coarse._bits <= 16).all()


def test_server_refuses_what_it_did_not_ask_for() -> None:
    x = np.r_[np.arange(100.0), np.arange(100.0)][:, None]
    keys, missing = float32_keys(x)
    server = GridRefinement(1, 8)
    with pytest.raises(SketchError, match="call first_plan"):
        server.add(initial_plan(1), np.zeros(256, dtype=np.int64))
    with pytest.raises(SketchError, match="no counts yet"):
        server.edges()
    plan = server.first_plan()
    counts = grid_counts(keys, missing, plan)
    with pytest.raises(SketchError, match="different plan"):
        server.add(initial_plan(1, 7), counts[:128])
    with pytest.raises(SketchError, match="256"):
        server.add(plan, counts[:-1])
    with pytest.raises(SketchError, match="integer"):
        server.add(plan, counts.astype(float))
    with pytest.raises(SketchError, match="lie in"):
        server.add(plan, -counts)
    plan2 = server.add(plan, counts)
    assert plan2 is not None
    with pytest.raises(SketchError, match="already started"):
        server.first_plan()
    half = grid_counts(keys[:100], missing[:100], plan2)  # half the fleet answered round 2
    with pytest.raises(SketchError, match="fleet changed between rounds"):
        server.add(plan2, half)
    plan3 = server.add(plan2, grid_counts(keys, missing, plan2))
    while plan3 is not None:
        plan3 = server.add(plan3, grid_counts(keys, missing, plan3))
    with pytest.raises(SketchError, match="done"):
        server.add(plan2, grid_counts(keys, missing, plan2))


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"n_bins": 1}, "n_bins"),
        ({"first_bits": 0}, "first_bits"),
        ({"first_bits": 17}, "first_bits"),
        ({"step": 0}, "step"),
        ({"refine_factor": 0.0}, "refine_factor"),
        ({"refine_factor": float("nan")}, "refine_factor"),
        ({"max_rounds": 0}, "max_rounds"),
        ({"max_cells": 100}, "cannot hold the first plan"),
        ({"max_bits": 33}, "max_bits"),
    ],
)
def test_server_settings_are_validated(kw, message: str) -> None:
    args = {"n_features": 2, "n_bins": 16, **kw}
    with pytest.raises(SketchError, match=message):
        GridRefinement(**args)


def test_client_counting_is_fast_for_10k_rows_200_features() -> None:
    X = np.random.default_rng(0).normal(size=(10_000, 200))
    keys, missing = float32_keys(X)
    server = GridRefinement(200, 256)
    plan = server.first_plan()
    while plan is not None:
        best = np.inf
        for _ in range(3):
            start = time.perf_counter()
            counts = grid_counts(keys, missing, plan)
            best = min(best, time.perf_counter() - start)
        assert best < 0.5
        start = time.perf_counter()
        plan = server.add(plan, counts)
        assert time.perf_counter() - start < 0.5


def test_docstring_examples_run() -> None:
    result = doctest.testmod(grid_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted >= 8


def test_bins_chosen_from_round_one_give_the_edges_of_a_refinement_built_for_them() -> None:
    """``choose_bins`` after round 1's counts (the fleet's size known) and before ``add``: every
    later round and the edges are those of a refinement built for that ``n_bins`` from the start,
    bit for bit; once round 1 is added the bins are fixed."""
    rng = np.random.default_rng(4)
    clients = [rng.normal(size=(700, 3)) for _ in range(3)]
    keyed = [float32_keys(x) for x in clients]
    chosen = GridRefinement(3, 16)
    plan = chosen.first_plan()
    first = np.sum([grid_counts(*k, plan) for k in keyed], axis=0, dtype=np.int64)
    chosen.choose_bins(64)
    plan = chosen.add(plan, first)
    with pytest.raises(SketchError, match="fixed once round 1"):
        chosen.choose_bins(16)
    while plan is not None:
        plan = chosen.add(plan, np.sum([grid_counts(*k, plan) for k in keyed], axis=0, dtype=np.int64))
    built = _federated(clients, 64)
    assert _bits(chosen.edges()) == _bits(built.edges()) and chosen.cells_sent == built.cells_sent
    assert _bits(chosen.edges()) != _bits(_federated(clients, 16).edges())
