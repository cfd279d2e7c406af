"""Edges and bin ids: XGBoost semantics (x < edge goes left, equal goes right), the missing bin, dtypes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shared.sketches import (
    SketchError,
    bin_dtype,
    bin_ids,
    finalize_edges,
    missing_bin_id,
    validate_edges,
)


def test_value_equal_to_an_edge_goes_right_and_nan_gets_the_missing_bin() -> None:
    edges = np.array([1.0, 2.0, 3.5], dtype=np.float32)
    x = np.array([-np.inf, 0.0, 1.0, 1.5, 2.0, 3.4999, 3.5, 1e9, np.inf, np.nan])
    np.testing.assert_array_equal(bin_ids(x, edges), [0, 0, 1, 1, 2, 2, 3, 3, 3, 4])
    assert missing_bin_id(edges) == 4 == edges.size + 1


def test_float64_values_are_rounded_to_float32_like_xgboost() -> None:
    edge = np.float32(1.0)
    just_below = 1.0 - 1e-12  # float32(just_below) == 1.0, so XGBoost sends it right
    assert bin_ids(np.array([just_below]), np.array([edge]))[0] == 1
    assert bin_ids(np.array([np.nextafter(np.float32(1.0), np.float32(0.0))], np.float32), np.array([edge]))[0] == 0


@settings(max_examples=100, deadline=None)
@given(
    x=hnp.arrays(np.float64, st.integers(0, 60), elements=st.floats(-1e6, 1e6, width=32) | st.just(np.nan)),
    raw=hnp.arrays(np.float64, st.integers(0, 30), elements=st.floats(-1e6, 1e6, allow_nan=False)),
)
def test_bins_are_exactly_the_splits_x_less_than_edge(x: np.ndarray, raw: np.ndarray) -> None:
    edges = finalize_edges(raw)
    ids = bin_ids(x, edges)
    present = ~np.isnan(x)
    assert np.all(ids[~present] == edges.size + 1)
    for k, e in enumerate(edges):  # "bins <= k go left" is the split x < edges[k]
        np.testing.assert_array_equal(ids[present] <= k, x[present].astype(np.float32) < e)


def test_two_dimensional_x_with_ragged_edges() -> None:
    X = np.array([[0.5, 10.0], [1.5, np.nan], [2.5, 30.0]])
    edges = [np.array([1.0, 2.0], np.float32), np.array([20.0], np.float32)]
    ids = bin_ids(X, edges)
    assert ids.shape == (3, 2) and ids.dtype == np.uint8
    np.testing.assert_array_equal(ids, [[0, 0], [1, 2], [2, 1]])
    with pytest.raises(SketchError, match="2 columns but 1 edge arrays"):
        bin_ids(X, edges[:1])
    with pytest.raises(SketchError, match="one edges array per column"):
        bin_ids(X, edges[0])


def test_empty_edges_put_every_value_in_bin_0() -> None:
    ids = bin_ids(np.array([1.0, np.nan, -3.0]), np.empty(0, np.float32))
    np.testing.assert_array_equal(ids, [0, 1, 0])


def test_dtype_depends_on_edges_only() -> None:
    e254 = np.arange(254, dtype=np.float32)  # ids 0..254, missing 255: fits uint8
    e255 = np.arange(255, dtype=np.float32)  # missing id 256 needs uint16
    assert bin_dtype([e254]) == np.uint8 and bin_dtype([e255]) == np.uint16
    assert bin_ids(np.array([np.nan]), e254).dtype == np.uint8
    ids = bin_ids(np.array([np.nan, 300.0]), e255)
    assert ids.dtype == np.uint16 and ids.tolist() == [256, 255]
    with pytest.raises(SketchError, match="16-bit"):
        bin_dtype([np.zeros(70_000)])


def test_finalize_edges_sorts_dedupes_and_rounds_to_float32() -> None:
    raw = [3.0, 1.0, 1.0 + 1e-12, np.nan, 2.0, 1e300, -np.inf]
    edges = finalize_edges(raw)
    assert edges.dtype == np.float32
    fmax = np.finfo(np.float32).max
    np.testing.assert_array_equal(edges, np.array([-fmax, 1.0, 2.0, 3.0, fmax], np.float32))


@pytest.mark.parametrize(
    ("edges", "match"),
    [
        (np.array([2.0, 1.0], np.float32), "strictly increasing"),
        (np.array([1.0, 1.0], np.float32), "strictly increasing"),
        (np.array([1.0, np.nan], np.float32), "finite"),
        (np.array([0.1]), "float32-representable"),
        (np.array([1e300]), "finite"),
        (np.array([[1.0]], np.float32), "1-D"),
    ],
)
def test_invalid_edges_are_refused(edges: np.ndarray, match: str) -> None:
    with pytest.raises(SketchError, match=match):
        validate_edges(edges)
    with pytest.raises(SketchError):
        bin_ids(np.array([1.0]), edges)


def test_bad_x_is_refused() -> None:
    with pytest.raises(SketchError, match="1-D or 2-D"):
        bin_ids(np.zeros((2, 2, 2)), [np.zeros(0, np.float32)] * 2)
    with pytest.raises(SketchError, match="real numbers"):
        bin_ids(np.array(["a"]), np.zeros(0, np.float32))
