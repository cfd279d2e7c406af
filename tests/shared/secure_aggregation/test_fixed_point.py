"""Fixed-point ring encoding: exact sums (hypothesis, negatives included), rounding, refusals."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.secure_aggregation import (
    SecureAggregationError,
    decode_counts,
    decode_fixed,
    encode_counts,
    encode_fixed,
    max_frac_bits,
    ring_sum,
)


@st.composite
def client_vectors(draw: st.DrawFn) -> tuple[list[np.ndarray], int]:
    """Up to 20 clients' vectors, with values whose exact sum fits the documented budget."""
    n_clients = draw(st.integers(1, 20))
    length = draw(st.integers(1, 8))
    frac_bits = draw(st.integers(0, 40))
    bound = draw(st.floats(1e-6, 1e12))
    while n_clients * (bound * 2.0**frac_bits + 1) > 2.0**62:
        bound /= 2
    values = st.floats(-bound, bound, allow_nan=False, allow_infinity=False)
    vectors = [np.array(draw(st.lists(values, min_size=length, max_size=length))) for _ in range(n_clients)]
    return vectors, frac_bits


@settings(max_examples=300, deadline=None)
@given(case=client_vectors())
def test_ring_sum_of_encodings_is_the_exact_sum_of_quantised_values(case) -> None:
    vectors, frac_bits = case
    quantised = [[int(np.rint(np.ldexp(x, frac_bits))) for x in vector] for vector in vectors]
    exact = [sum(column) for column in zip(*quantised)]  # Python ints: no rounding, no overflow
    total = ring_sum([encode_fixed(v, frac_bits) for v in vectors])
    assert total.dtype == np.uint64
    assert total.view(np.int64).tolist() == exact
    expected = np.array([np.ldexp(float(s), -frac_bits) for s in exact])
    np.testing.assert_array_equal(decode_fixed(total, frac_bits), expected)


def test_rounding_is_half_to_even_and_negatives_wrap() -> None:
    encoded = encode_fixed([0.5, 1.5, 2.5, -0.5, -1.5, -1.0], 0)
    assert encoded.view(np.int64).tolist() == [0, 2, 2, 0, -2, -1]
    assert encoded[-1] == np.uint64(2**64 - 1)  # -1 is the top of the ring
    np.testing.assert_array_equal(decode_fixed(encode_fixed([0.25, -3.75], 2), 2), [0.25, -3.75])
    assert encode_fixed(np.zeros((2, 3)), 5).shape == (2, 3)


def test_encode_fixed_refuses_non_finite_and_too_large_values() -> None:
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(SecureAggregationError, match="finite"):
            encode_fixed([1.0, bad], 8)
    encode_fixed([2.0**61], 0)
    with pytest.raises(SecureAggregationError, match="2\\*\\*62"):
        encode_fixed([2.0**62], 0)
    with pytest.raises(SecureAggregationError, match="2\\*\\*62"):
        encode_fixed([-1.0], 62)
    with pytest.raises(SecureAggregationError, match="frac_bits"):
        encode_fixed([1.0], -1)
    with pytest.raises(SecureAggregationError, match="real numbers"):
        encode_fixed(["a"], 3)


def test_counts_are_exact_and_checked() -> None:
    counts = [np.array([0, 5, 2**40]), np.array([3, 0, 2**40 + 1], dtype=np.uint64)]
    total = ring_sum([encode_counts(c) for c in counts])
    assert decode_counts(total).tolist() == [3, 5, 2**41 + 1]
    assert encode_counts([]).shape == (0,)
    with pytest.raises(SecureAggregationError, match="non-negative"):
        encode_counts([1, -1])
    with pytest.raises(SecureAggregationError, match="integer dtype"):
        encode_counts([1.5])
    with pytest.raises(SecureAggregationError, match="2\\*\\*62"):
        encode_counts(np.array([2**63], dtype=np.uint64))
    with pytest.raises(SecureAggregationError, match="negative"):
        decode_counts(np.array([2**64 - 1], dtype=np.uint64))


def test_ring_sum_wraps_and_validates() -> None:
    top = np.array([2**64 - 1, 7], dtype=np.uint64)
    np.testing.assert_array_equal(ring_sum([top, np.array([2, 1], dtype=np.uint64)]), [1, 8])
    with pytest.raises(SecureAggregationError, match="at least one"):
        ring_sum([])
    with pytest.raises(SecureAggregationError, match="uint64"):
        ring_sum([np.array([1, 2])])
    with pytest.raises(SecureAggregationError, match="shape"):
        ring_sum([top, np.zeros(3, np.uint64)])
    with pytest.raises(SecureAggregationError, match="uint64"):
        decode_fixed(np.array([1.0]), 0)


@pytest.mark.parametrize(("bound", "n_clients"), [(1.0, 1), (1.0, 1000), (1e6, 100), (3.7, 7), (2.0**40, 2**20)])
def test_max_frac_bits_is_the_largest_that_fits(bound: float, n_clients: int) -> None:
    f = max_frac_bits(bound, n_clients)
    exact = Fraction(bound)  # exact arithmetic: 2.0**62 + 1 would round back to 2.0**62
    assert n_clients * (exact * 2**f + 1) <= 2**62
    assert n_clients * (exact * 2 ** (f + 1) + 1) > 2**62
    worst = [np.full(3, -bound)] * n_clients if n_clients <= 1000 else []
    if worst:
        total = ring_sum([encode_fixed(v, f) for v in worst])
        np.testing.assert_array_equal(decode_fixed(total, f), np.full(3, -bound * n_clients))


def test_max_frac_bits_refuses_impossible_budgets() -> None:
    with pytest.raises(SecureAggregationError, match="overflow"):
        max_frac_bits(2.0**61, 4)
    with pytest.raises(SecureAggregationError, match="positive"):
        max_frac_bits(0.0, 4)
    with pytest.raises(SecureAggregationError, match="n_clients"):
        max_frac_bits(1.0, 0)
