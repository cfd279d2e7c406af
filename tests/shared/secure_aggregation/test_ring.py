"""The ring secure aggregation sums in: fixed-point vectors (``shared.histograms.quantize``, the
one encoder of every exact sum) summed as uint64 give the exact integer sum, negatives included;
rounding; refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.histograms import dequantize, quantize
from shared.secure_aggregation import SecureAggregationError, ring_sum


@st.composite
def client_vectors(draw: st.DrawFn) -> tuple[list[np.ndarray], int, float]:
    """Up to 20 clients' vectors, with values whose exact sum stays below 2**62."""
    n_clients = draw(st.integers(1, 20))
    length = draw(st.integers(1, 8))
    frac_bits = draw(st.integers(0, 40))
    bound = draw(st.floats(1e-6, 1e12))
    while n_clients * (bound * 2.0**frac_bits + 1) > 2.0**62:
        bound /= 2
    values = st.floats(-bound, bound, allow_nan=False, allow_infinity=False)
    vectors = [np.array(draw(st.lists(values, min_size=length, max_size=length))) for _ in range(n_clients)]
    return vectors, frac_bits, bound


@settings(max_examples=300, deadline=None)
@given(case=client_vectors())
def test_ring_sum_of_fixed_point_vectors_is_the_exact_sum_of_quantised_values(case) -> None:
    vectors, frac_bits, bound = case
    quantised = [[int(np.rint(np.ldexp(x, frac_bits))) for x in vector] for vector in vectors]
    exact = [sum(column) for column in zip(*quantised)]  # Python ints: no rounding, no overflow
    total = ring_sum([quantize(v, frac_bits, bound).view(np.uint64) for v in vectors])
    assert total.dtype == np.uint64
    assert total.view(np.int64).tolist() == exact
    expected = np.array([np.ldexp(float(s), -frac_bits) for s in exact])
    np.testing.assert_array_equal(dequantize(total.view(np.int64), frac_bits), expected)


def test_rounding_is_half_to_even_and_negatives_wrap() -> None:
    encoded = quantize([0.5, 1.5, 2.5, -0.5, -1.5, -1.0], 0, bound=3.0).view(np.uint64)
    assert encoded.view(np.int64).tolist() == [0, 2, 2, 0, -2, -1]
    assert encoded[-1] == np.uint64(2**64 - 1)  # -1 is the top of the ring
    np.testing.assert_array_equal(dequantize(quantize([0.25, -3.75], 2, bound=4.0), 2), [0.25, -3.75])


def test_quantize_refuses_non_finite_and_out_of_bound_values() -> None:
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match="finite"):
            quantize([1.0, bad], 4, bound=10.0)
    with pytest.raises(ValueError, match="exceeds the job's bound 2"):
        quantize([2.5], 4, bound=2.0)


def test_ring_sum_wraps_and_validates() -> None:
    top = np.array([2**64 - 1, 7], dtype=np.uint64)
    np.testing.assert_array_equal(ring_sum([top, np.array([2, 1], dtype=np.uint64)]), [1, 8])
    with pytest.raises(SecureAggregationError, match="at least one"):
        ring_sum([])
    with pytest.raises(SecureAggregationError, match="uint64"):
        ring_sum([np.array([1, 2])])
    with pytest.raises(SecureAggregationError, match="shape"):
        ring_sum([top, np.zeros(3, np.uint64)])
