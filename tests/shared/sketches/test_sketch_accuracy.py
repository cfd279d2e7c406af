"""rank_error: the definition on hand examples, exact edges score 0, float32 rounding semantics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.sketches import SketchError, exact_edges, rank_error, target_rank_errors
from tests.shared.sketches.sketch_strategies import SLACK, client_column


def f32(*values: float) -> np.ndarray:
    return np.array(values, np.float32)


def test_hand_examples() -> None:
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert rank_error(f32(2.5), x, None) == 0.0  # F(2.5) = 1/2 = target
    assert rank_error(f32(3.5), x, None) == pytest.approx(0.25)  # bracket [3/4, 3/4]
    assert rank_error(f32(3.0), x, None) == 0.0  # bracket [F(3-), F(3)] = [1/2, 3/4] holds 1/2
    # B = 4 targets 1/4, 1/2, 3/4; the single edge 2.5 serves 1/2 exactly, 1/4 and 3/4 are 1/4 away.
    np.testing.assert_allclose(target_rank_errors(f32(2.5), x, None, 4), [0.25, 0.0, 0.25])
    # Weights move ranks: all weight on 4 puts every target inside the bracket of edge 4.
    assert rank_error(f32(4.0), x, [0.0, 0.0, 0.0, 1.0], 8) == 0.0


def test_virtual_edges_and_degenerate_cases() -> None:
    x = np.array([1.0, 2.0])
    assert rank_error(np.empty(0, np.float32), x, None, 2) == 0.5  # only -inf / +inf splits
    assert rank_error(np.empty(0, np.float32), x, None) == 0.0  # B = 1: nothing to hit
    assert rank_error(np.array([5.0], np.float32), x, None, 2) == 0.5  # edge above all data
    with pytest.raises(SketchError, match="no non-missing value has positive weight"):
        rank_error(np.array([1.0], np.float32), x, [0.0, 0.0])
    with pytest.raises(SketchError, match="strictly increasing"):
        rank_error(np.array([2.0, 1.0], np.float32), x, None)


def test_measured_on_float32_rounded_data() -> None:
    # Two float64 values that round to the same float32 are one value for the trees.
    x = np.array([1.0, 1.0 + 1e-12])
    assert rank_error(np.array([1.0], np.float32), x, None, 2) == 0.0  # bracket [0, 1] holds 1/2
    edges = exact_edges(x, None, 2)
    np.testing.assert_array_equal(edges, np.array([1.0], np.float32))


@settings(max_examples=150, deadline=None)
@given(client=client_column(max_n=60), n_bins=st.integers(2, 70))
def test_exact_edges_have_zero_rank_error(client, n_bins: int) -> None:
    if not client.w[~np.isnan(client.x)].sum() > 0:
        return
    edges = exact_edges(client.x, client.w, n_bins)
    assert rank_error(edges, client.x, client.w, n_bins) <= SLACK
