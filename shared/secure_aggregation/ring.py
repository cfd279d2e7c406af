"""The ring Z/2^64 that secure aggregation sums in.

Why a ring: masks are uniform in Z/2^64 and cancel exactly only under exact (wrapping) integer
addition; floats would neither hide the value (their exponent leaks magnitude) nor cancel
exactly. ``numpy.uint64`` arithmetic wraps mod 2^64, so a masked sum is plain vectorised numpy.

Signed fixed-point values (``shared.histograms.quantize``: ``round(x * 2**frac_bits)`` as int64)
enter the ring as their two's complement (``.view(np.uint64)``: negatives wrap to the top half).
Summing mod 2^64 and viewing the result as int64 gives the exact integer sum as long as the true
sum stays within int64; the jobs choose ``frac_bits`` so that it does (``frac_bits_for`` in the
aggregator's private opening: every sum below 2^61), since a wrapped sum is not detectable from
the ring value.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .errors import SecureAggregationError

__all__ = ["ring_sum"]


def _ring_array(ring: np.ndarray, what: str) -> np.ndarray:
    if not isinstance(ring, np.ndarray) or ring.dtype != np.uint64:
        got = ring.dtype if isinstance(ring, np.ndarray) else type(ring).__name__
        raise SecureAggregationError(f"{what} must be a numpy uint64 array (a ring vector), got {got}")
    return ring


def ring_sum(vectors: Sequence[np.ndarray]) -> np.ndarray:
    """Sum uint64 ring vectors mod 2**64, in the given order, into a new array.

    Raises
    ------
    SecureAggregationError
        For an empty sequence, a non-uint64 vector or mismatched shapes.
    """
    if len(vectors) == 0:
        raise SecureAggregationError("ring_sum needs at least one vector (the shape of an empty sum is unknown)")
    first = _ring_array(vectors[0], "vector 0")
    total = first.copy()
    for position, vector in enumerate(vectors[1:], start=1):
        vector = _ring_array(vector, f"vector {position}")
        if vector.shape != total.shape:
            raise SecureAggregationError(f"vector {position} has shape {vector.shape}, expected {total.shape}")
        np.add(total, vector, out=total)  # uint64 wraps mod 2**64
    return total
