"""The client half: weighted quantile summaries, their edge cases and wire form."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.protocol.codec import dumps_value, loads_value
from shared.sketches import (
    SketchError,
    WeightedSummary,
    exact_weighted_quantiles,
    summaries_from_arrays,
    summaries_to_arrays,
    summarize,
    summarize_columns,
)
from shared.sketches._inputs import FLOAT32_MAX
from tests.shared.sketches.sketch_strategies import client_column


@settings(max_examples=150, deadline=None)
@given(client=client_column(), m=st.integers(1, 40))
def test_points_are_the_exact_weighted_quantiles_at_b_over_m(client, m: int) -> None:
    s = summarize(client.x, client.w, m)
    finite = ~np.isnan(client.x)
    assert s.count == finite.sum() and s.n_missing == (~finite).sum()
    assert s.missing_weight == pytest.approx(client.w[~finite].sum())
    if s.count == 0:
        assert s.points.size == 0 and s.total_weight == 0
        return
    assert s.m == m and s.points.size == m + 1
    ranks = np.arange(m + 1) / m
    if client.w[finite].sum() > 0:
        assert s.total_weight == pytest.approx(client.w[finite].sum())
        expected = exact_weighted_quantiles(client.x, client.w, ranks)
    else:  # all weights zero: documented fallback to count quantiles
        assert s.total_weight == 0
        expected = exact_weighted_quantiles(client.x, None, ranks)
    np.testing.assert_array_equal(s.points, expected)


def test_columns_match_one_column_at_a_time() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 5))
    X[rng.random(X.shape) < 0.1] = np.nan
    X[:, 3] = 7.0  # a constant column
    X[:, 4] = np.round(X[:, 4])  # heavy ties
    w = rng.exponential(size=300)
    batched = summarize_columns(X, w, 16)
    for j in range(5):
        single = summarize(X[:, j], w, 16)
        np.testing.assert_array_equal(batched[j].points, single.points)
        assert batched[j].total_weight == single.total_weight
        assert (batched[j].count, batched[j].n_missing) == (single.count, single.n_missing)
    np.testing.assert_array_equal(batched[3].points, np.full(17, 7.0))


def test_edge_cases() -> None:
    one = summarize([4.5], [0.3], 8)  # a client with one sample
    np.testing.assert_array_equal(one.points, np.full(9, 4.5))
    assert (one.count, one.total_weight) == (1, 0.3)

    empty = summarize([np.nan, np.nan], [1.0, 2.0], 8)  # all missing
    assert empty.is_empty and empty.points.size == 0 and empty.m == 0
    assert (empty.n_missing, empty.missing_weight) == (2, 3.0)

    nothing = summarize(np.empty(0), np.empty(0), 4)
    assert nothing.is_empty and nothing.n_missing == 0

    counts = summarize([3.0, 1.0, 2.0], [0.0, 0.0, 0.0], 2)  # zero total weight: count quantiles
    assert counts.total_weight == 0 and counts.count == 3
    np.testing.assert_array_equal(counts.points, [1.0, 2.0, 3.0])

    unit = summarize([3.0, 1.0, 2.0], None, 2)  # w=None means counts
    np.testing.assert_array_equal(unit.points, [1.0, 2.0, 3.0])
    assert unit.total_weight == 3.0

    inf = summarize([-np.inf, 0.0, np.inf, 1e300], None, 3)  # beyond float32: +-FLT_MAX
    np.testing.assert_array_equal(inf.points, [-FLOAT32_MAX, 0.0, FLOAT32_MAX, FLOAT32_MAX])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"x": [1.0], "w": [1.0], "m": 0}, "m must be >= 1"),
        ({"x": [1.0], "w": [1.0], "m": True}, "integer"),
        ({"x": [1.0], "w": [1.0], "m": 2.5}, "integer"),
        ({"x": [1.0, 2.0], "w": [1.0, -0.5], "m": 4}, "must be >= 0"),
        ({"x": [1.0, 2.0], "w": [1.0, np.inf], "m": 4}, "must be finite"),
        ({"x": [1.0, 2.0], "w": [1.0], "m": 4}, "one weight per sample"),
    ],
)
def test_bad_inputs(kwargs, match) -> None:
    with pytest.raises(SketchError, match=match):
        summarize(**kwargs)
    with pytest.raises(SketchError):
        summarize_columns(np.ones((3, 2, 2)), None, 4)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"points": [2.0, 1.0], "total_weight": 1.0, "count": 1}, "non-decreasing"),
        ({"points": [1.0, np.nan], "total_weight": 1.0, "count": 1}, "finite"),
        ({"points": [1.0], "total_weight": 1.0, "count": 1}, "M\\+1 points"),
        ({"points": [1.0, 2.0], "total_weight": 0.0, "count": 0}, "no points"),
        ({"points": [], "total_weight": 2.0, "count": 0}, "must belong"),
        ({"points": [1.0, 2.0], "total_weight": -1.0, "count": 2}, ">= 0"),
        ({"points": [1.0, 2.0], "total_weight": 1.0, "count": -2}, ">= 0"),
        ({"points": [[1.0, 2.0]], "total_weight": 1.0, "count": 2}, "1-D"),
    ],
)
def test_malformed_summaries_are_refused(fields, match) -> None:
    with pytest.raises(SketchError, match=match):
        WeightedSummary(**fields)
    with pytest.raises(SketchError):
        WeightedSummary.from_arrays(fields)


def test_summary_is_immutable() -> None:
    s = summarize([1.0, 2.0], None, 2)
    with pytest.raises(ValueError):
        s.points[0] = 5.0
    with pytest.raises(AttributeError):
        s.count = 3  # type: ignore[misc]


def test_wire_roundtrip_through_the_cbor_codec() -> None:
    rng = np.random.default_rng(2)
    X = rng.normal(size=(100, 3))
    X[:, 2] = np.nan  # an empty column travels too
    summaries = summarize_columns(X, rng.random(100), 8)
    back = summaries_from_arrays(loads_value(dumps_value(summaries_to_arrays(summaries))))
    for a, b in zip(summaries, back):
        assert a.to_arrays().keys() == b.to_arrays().keys()
        np.testing.assert_array_equal(a.points, b.points)
        assert (a.total_weight, a.count, a.n_missing, a.missing_weight) == (
            b.total_weight,
            b.count,
            b.n_missing,
            b.missing_weight,
        )
    one = WeightedSummary.from_arrays(loads_value(dumps_value(summaries[0].to_arrays())))
    np.testing.assert_array_equal(one.points, summaries[0].points)


def test_malformed_wire_batches_are_refused() -> None:
    good = summaries_to_arrays(summarize_columns(np.arange(12.0).reshape(6, 2), None, 2))
    with pytest.raises(SketchError, match="missing field 'count'"):
        summaries_from_arrays({k: v for k, v in good.items() if k != "count"})
    with pytest.raises(SketchError, match="shape"):
        summaries_from_arrays({**good, "total_weight": good["total_weight"][:1]})
    with pytest.raises(SketchError, match="integers"):
        summaries_from_arrays({**good, "count": good["count"].astype(np.float64)})
    with pytest.raises(SketchError, match="non-decreasing"):
        summaries_from_arrays({**good, "points": good["points"][:, ::-1].copy()})
    with pytest.raises(SketchError, match="one M"):
        summaries_to_arrays([summarize([1.0], None, 2), summarize([1.0], None, 3)])
