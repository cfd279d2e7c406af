"""The exact weighted quantile reference and weighted CDF (the definitions everything is measured by)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shared.sketches import SketchError, exact_weighted_quantiles, weighted_cdf
from tests.shared.sketches.sketch_strategies import SLACK, weights_elements


def test_left_convention_on_a_hand_example() -> None:
    x = [3.0, 1.0, 2.0, 4.0]
    w = [1.0, 1.0, 1.0, 1.0]
    # F = 0.25, 0.5, 0.75, 1 at 1..4: Q(q) is the first value whose F reaches q.
    q = exact_weighted_quantiles(x, w, [0.0, 0.25, 0.26, 0.5, 0.75, 0.99, 1.0])
    np.testing.assert_array_equal(q, [1, 1, 2, 2, 3, 4, 4])


def test_weights_are_weights_not_counts() -> None:
    x = [1.0, 2.0, 3.0]
    w = [0.01, 0.01, 0.98]  # the ddsketch package would treat these as counts and answer 1
    np.testing.assert_array_equal(exact_weighted_quantiles(x, w, [0.5, 0.015, 0.0]), [3.0, 2.0, 1.0])


def test_zero_weight_values_are_never_quantiles_and_nan_is_ignored() -> None:
    x = [-50.0, 1.0, np.nan, 2.0, 99.0]
    w = [0.0, 1.0, 5.0, 1.0, 0.0]
    np.testing.assert_array_equal(exact_weighted_quantiles(x, w, [0.0, 0.5, 1.0]), [1.0, 1.0, 2.0])


def test_undefined_without_positive_weight() -> None:
    with pytest.raises(SketchError, match="no non-missing value has positive weight"):
        exact_weighted_quantiles([1.0, 2.0], [0.0, 0.0], [0.5])
    with pytest.raises(SketchError):
        exact_weighted_quantiles([np.nan], None, [0.5])
    with pytest.raises(SketchError):
        weighted_cdf([0.0], [1.0], [0.0])


@pytest.mark.parametrize(
    ("x", "w", "qs", "match"),
    [
        ([1.0, 2.0], [1.0, -1.0], [0.5], "must be >= 0"),
        ([1.0, 2.0], [1.0, np.nan], [0.5], "must be finite"),
        ([1.0, 2.0], [1.0], [0.5], "shape"),
        ([[1.0, 2.0]], None, [0.5], "1-D"),
        (["a", "b"], None, [0.5], "real numbers"),
        ([1.0, 2.0], None, [1.5], r"\[0, 1\]"),
        ([1.0, 2.0], None, [np.nan], r"\[0, 1\]"),
    ],
)
def test_bad_inputs_raise_actionable_errors(x, w, qs, match) -> None:
    with pytest.raises(SketchError, match=match):
        exact_weighted_quantiles(x, w, qs)


@settings(max_examples=150, deadline=None)
@given(
    data=hnp.arrays(np.float64, st.integers(1, 50), elements=st.integers(-5, 5).map(float)),
    wdata=st.data(),
    q=st.floats(0, 1),
)
def test_quantile_brackets_its_rank(data: np.ndarray, wdata: st.DataObject, q: float) -> None:
    w = wdata.draw(hnp.arrays(np.float64, data.shape[0], elements=weights_elements))
    if not w.sum() > 0:
        return
    v = exact_weighted_quantiles(data, w, [q])[0]
    below, at = weighted_cdf([v], data, w)
    assert below[0] <= q + SLACK and at[0] >= q - SLACK
    assert w[data == v].sum() > 0  # a quantile is a value that carries weight
