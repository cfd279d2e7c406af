"""The vectorised weighted DDSketch: relative accuracy, weighted ranks, merging, standardisation, wire."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.protocol.codec import dumps_value, loads_value
from shared.sketches import (
    DDSketch,
    SketchError,
    Standardization,
    ddsketch_edges,
    merge_all,
    merge_edges,
    rank_error,
    summarize,
    weighted_cdf,
    weighted_moments,
)
from tests.shared.sketches.sketch_strategies import SLACK


@st.composite
def weighted_data(draw):
    """Values of both signs, zeros, ties and wide magnitudes; weights as small as 0.01."""
    n = draw(st.integers(1, 80))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["lognormal", "ties", "uniform"]))
    if kind == "lognormal":
        x = rng.choice([-1.0, 1.0], n) * rng.lognormal(0, 4, n)
    elif kind == "ties":
        x = rng.integers(-3, 4, n).astype(np.float64)
    else:
        x = rng.uniform(-1e3, 1e3, n)
    w = rng.choice([0.01, 0.02, 0.05, 0.3], n) if draw(st.booleans()) else np.full(n, 0.01)
    return x, w


def _within_alpha_of_a_valid_quantile(answer: float, x: np.ndarray, w: np.ndarray, q: float, alpha: float) -> bool:
    """Is ``answer`` within alpha*|v| of some v whose rank bracket [F(v-), F(v)] holds q?"""
    values = np.unique(x[w > 0])
    below, at = weighted_cdf(values, x, w)
    valid = values[(below <= q + SLACK) & (at >= q - SLACK)]
    return bool(np.any(np.abs(answer - valid) <= alpha * np.abs(valid) * (1 + 1e-9) + 1e-300))


@settings(max_examples=150, deadline=None)
@given(
    data=weighted_data(),
    alpha=st.sampled_from([0.05, 0.01, 0.001]),
    qs=st.lists(st.floats(0, 1), min_size=1, max_size=5),
)
def test_relative_accuracy_at_the_correct_weighted_rank(data, alpha: float, qs: list[float]) -> None:
    x, w = data
    answers = DDSketch.from_values(x, w, alpha).quantiles(qs)
    for q, answer in zip(qs, answers):
        assert _within_alpha_of_a_valid_quantile(answer, x, w, q, alpha), (q, answer)


def test_small_weights_are_not_counts() -> None:
    sketch = DDSketch.from_values([1.0, 2.0, 3.0], [0.01, 0.01, 0.98], alpha=0.01)
    # ddsketch 3.0.1 uses rank q*(count-1) with count = 1.0 here and answers ~1 for the median.
    median, low, zero = sketch.quantiles([0.5, 0.015, 0.0])
    assert median == pytest.approx(3.0, rel=0.01)
    assert low == pytest.approx(2.0, rel=0.01)
    assert zero == pytest.approx(1.0, rel=0.01)
    assert sketch.total_weight == pytest.approx(1.0)


def test_signs_zero_and_missing() -> None:
    x = np.array([-5.0, 0.0, 0.0, 3.0, np.nan, 1e-320])  # 1e-320 is subnormal: zero bucket
    sketch = DDSketch.from_values(x, [1.0, 1.0, 1.0, 1.0, 7.0, 1.0], alpha=0.01)
    assert (sketch.count, sketch.n_missing, sketch.missing_weight) == (5, 1, 7.0)
    assert sketch.zero_weight == 3.0 and sketch.n_buckets == 3
    lo, mid, hi = sketch.quantiles([0.0, 0.5, 1.0])
    assert lo == pytest.approx(-5.0, rel=0.01) and mid == 0.0 and hi == pytest.approx(3.0, rel=0.01)


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(weighted_data(), min_size=1, max_size=5), seed=st.integers(0, 2**32 - 1))
def test_merge_equals_sketch_of_union_and_is_order_independent(parts, seed: int) -> None:
    sketches = [DDSketch.from_values(x, w, 0.01) for x, w in parts]
    merged = merge_all(sketches)
    union = DDSketch.from_values(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), 0.01)
    np.testing.assert_array_equal(merged.pos_keys, union.pos_keys)
    np.testing.assert_array_equal(merged.neg_keys, union.neg_keys)
    np.testing.assert_allclose(merged.pos_weights, union.pos_weights, rtol=1e-12)
    np.testing.assert_allclose(merged.neg_weights, union.neg_weights, rtol=1e-12)
    assert merged.count == union.count and merged.zero_weight == pytest.approx(union.zero_weight)
    shuffled = merge_all([sketches[i] for i in np.random.default_rng(seed).permutation(len(sketches))])
    assert shuffled.to_arrays().keys() == merged.to_arrays().keys()
    for key, value in merged.to_arrays().items():
        assert np.array_equal(shuffled.to_arrays()[key], value), key  # bit-identical


def test_pairwise_merge_is_commutative() -> None:
    rng = np.random.default_rng(8)
    a = DDSketch.from_values(rng.normal(size=100), rng.random(100))
    b = DDSketch.from_values(rng.normal(3, 1, size=100), rng.random(100))
    ab, ba = a.merge(b), b.merge(a)
    np.testing.assert_array_equal(ab.pos_weights, ba.pos_weights)
    edges = {ddsketch_edges(list(p), 16).tobytes() for p in itertools.permutations([a, b, ab])}
    assert len(edges) == 1


def test_incompatible_sketches_are_refused() -> None:
    a = DDSketch.from_values([1.0, 2.0], alpha=0.01)
    with pytest.raises(SketchError, match="same alpha, center and scale"):
        a.merge(DDSketch.from_values([1.0], alpha=0.02))
    with pytest.raises(SketchError, match="same alpha, center and scale"):
        a.merge(DDSketch.from_values([1.0], alpha=0.01, standardization=Standardization(1.0, 2.0)))
    with pytest.raises(SketchError, match="can only merge"):
        a.merge(summarize([1.0], None, 2))  # type: ignore[arg-type]


def test_standardization_fixes_the_offset_feature_collapse() -> None:
    rng = np.random.default_rng(9)
    x = 20 + rng.uniform(-0.05, 0.05, 4000)  # e.g. a temperature or a gravity-dominated axis
    w = rng.uniform(0.01, 0.25, 4000)  # Hessian-like weights
    clients = np.array_split(np.arange(4000), 4)
    raw = ddsketch_edges([DDSketch.from_values(x[i], w[i], 0.01) for i in clients], 64)
    assert raw.size <= 2 and rank_error(raw, x, w, 64) > 0.3  # everything in one or two buckets
    moments = sum(weighted_moments(x[i], w[i]) for i in clients)  # one additive round
    shared = Standardization.from_moments(moments)
    assert shared.center == pytest.approx(np.average(x, weights=w))
    fixed = ddsketch_edges([DDSketch.from_values(x[i], w[i], 0.01, shared) for i in clients], 64)
    assert fixed.size > 50 and rank_error(fixed, x, w, 64) < 1 / 64
    # The rank-accurate summary needs no standardisation at all.
    summary = merge_edges([summarize(x[i], w[i], 256) for i in clients], 64)
    assert rank_error(summary, x, w, 64) <= 1 / 256


def test_moments_and_standardization() -> None:
    rng = np.random.default_rng(10)
    X = rng.normal([1.0, -4.0, 0.0], [2.0, 0.1, 1.0], size=(500, 3))
    X[:, 2] = 3.0  # constant: scale falls back to 1
    X[rng.random(500) < 0.1, 0] = np.nan
    w = rng.random(500)
    m = weighted_moments(X, w)
    assert m.shape == (3, 3)
    np.testing.assert_allclose(m, weighted_moments(X[:250], w[:250]) + weighted_moments(X[250:], w[250:]))
    keep = ~np.isnan(X[:, 0])
    s0 = Standardization.from_moments(m[:, 0])
    mean = np.average(X[keep, 0], weights=w[keep])
    assert s0.center == pytest.approx(mean)
    assert s0.scale == pytest.approx(np.sqrt(np.average((X[keep, 0] - mean) ** 2, weights=w[keep])))
    assert Standardization.from_moments(m[:, 2]).scale == 1.0
    assert Standardization.from_moments(m[:, 2]).center == pytest.approx(3.0)
    assert Standardization.from_moments([0.0, 0.0, 0.0]) == Standardization()
    sketches = DDSketch.from_columns(X, w, 0.01, [Standardization.from_moments(m[:, j]) for j in range(3)])
    assert sketches[2].quantiles([0.5])[0] == pytest.approx(3.0, rel=1e-12)  # constant column, centred
    with pytest.raises(SketchError, match="scale must be > 0"):
        Standardization(0.0, 0.0)
    with pytest.raises(SketchError, match="finite"):
        Standardization(np.nan, 1.0)
    with pytest.raises(SketchError, match="3 columns but 1"):
        DDSketch.from_columns(X, w, 0.01, [Standardization()])


def test_wire_roundtrip_and_validation() -> None:
    rng = np.random.default_rng(11)
    sketch = DDSketch.from_values(rng.normal(size=300), rng.random(300), 0.02, Standardization(0.5, 2.0))
    wire = sketch.to_arrays()
    assert wire["pos_keys"].dtype == np.int32 and wire["pos_weights"].dtype == np.float64
    back = DDSketch.from_arrays(loads_value(dumps_value(wire)))
    for key, value in wire.items():
        assert np.array_equal(back.to_arrays()[key], value), key
    np.testing.assert_array_equal(back.quantiles([0.1, 0.9]), sketch.quantiles([0.1, 0.9]))
    bad = [
        ({**wire, "pos_keys": wire["pos_keys"][::-1].copy()}, "strictly increasing"),
        ({**wire, "pos_weights": -wire["pos_weights"]}, "finite and >= 0"),
        ({**wire, "neg_weights": wire["neg_weights"][:-1]}, "equal length"),
        ({**wire, "pos_keys": wire["pos_keys"].astype(np.float64)}, "integers"),
        ({**wire, "pos_keys": wire["pos_keys"].astype(np.int64) + 2**40}, "int32"),
        ({**wire, "alpha": 1.5}, "alpha"),
        ({**wire, "scale": -1.0}, "scale"),
        ({k: v for k, v in wire.items() if k != "count"}, "missing field 'count'"),
    ]
    for data, match in bad:
        with pytest.raises(SketchError, match=match):
            DDSketch.from_arrays(data)


def test_empty_and_invalid() -> None:
    empty = DDSketch.from_values([np.nan, np.nan])
    assert empty.total_weight == 0 and empty.n_missing == 2
    with pytest.raises(SketchError, match="holds no weight"):
        empty.quantiles([0.5])
    assert ddsketch_edges([empty, DDSketch.from_values([1.0], [0.0])], 8).size == 0
    for alpha in (0.0, 1.0, 1e-9, np.nan):
        with pytest.raises(SketchError, match="alpha"):
            DDSketch.from_values([1.0], alpha=alpha)
    with pytest.raises(SketchError, match="no sketches"):
        merge_all([])
    with pytest.raises(SketchError, match=">= 0"):
        DDSketch.from_values([1.0], [-1.0])


def test_extreme_values_stay_finite() -> None:
    sketch = DDSketch.from_values(
        [-np.inf, 1e300, 1.0, np.inf], alpha=0.01, standardization=Standardization(0.0, 1e-30)
    )
    edges = ddsketch_edges([sketch], 4)
    assert np.all(np.isfinite(edges)) and edges.dtype == np.float32
