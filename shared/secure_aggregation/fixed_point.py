"""Fixed-point encoding of real vectors into the ring Z/2^64 that secure aggregation sums in.

Why a ring: masks are uniform in Z/2^64 and cancel exactly only under exact (wrapping) integer
addition; floats would neither hide the value (their exponent leaks magnitude) nor cancel
exactly. ``numpy.uint64`` arithmetic wraps mod 2^64, so a masked sum is plain vectorised numpy.

Signed values are stored as two's complement: ``x`` becomes ``round(x * 2**frac_bits)`` as an
int64, viewed as uint64 (negatives wrap to the top half of the ring). Summing the uint64 views
mod 2^64 and viewing the result as int64 gives the exact integer sum **as long as the true sum
stays within int64**, i.e. ``|sum_i q_i| < 2**63`` elementwise.

Sum bound: ``encode_fixed`` refuses any ``|q| >= 2**62``, which catches a wrong ``frac_bits``
early, but only guarantees two clients' worst-case sum. For ``n`` clients choose ``frac_bits``
so that ``n * max|x| * 2**frac_bits < 2**62`` (``max_frac_bits`` computes it): then every
partial and total sum is exact, with one bit to spare. A wrapped sum is not detectable from
the ring value (it just decodes to a wrong number), hence the explicit budget.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike

from .errors import SecureAggregationError

__all__ = [
    "MAX_ENCODED_MAGNITUDE",
    "decode_counts",
    "decode_fixed",
    "encode_counts",
    "encode_fixed",
    "max_frac_bits",
    "ring_sum",
]

#: Largest magnitude (exclusive) of one encoded value: 2**62 leaves a bit of headroom in int64.
MAX_ENCODED_MAGNITUDE = 2**62
_MAX_FRAC_BITS = 1000  # ldexp stays exact far beyond anything useful; this only bounds typos


def _check_frac_bits(frac_bits: int) -> None:
    if isinstance(frac_bits, bool) or not isinstance(frac_bits, (int, np.integer)):
        raise SecureAggregationError(f"frac_bits must be an int, got {type(frac_bits).__name__}")
    if not 0 <= frac_bits <= _MAX_FRAC_BITS:
        raise SecureAggregationError(f"frac_bits must be in [0, {_MAX_FRAC_BITS}], got {frac_bits}")


def _ring_array(ring: np.ndarray, what: str) -> np.ndarray:
    if not isinstance(ring, np.ndarray) or ring.dtype != np.uint64:
        got = ring.dtype if isinstance(ring, np.ndarray) else type(ring).__name__
        raise SecureAggregationError(f"{what} must be a numpy uint64 array (a ring vector), got {got}")
    return ring


def encode_fixed(values: ArrayLike, frac_bits: int) -> np.ndarray:
    """Quantise reals to ``round_half_even(x * 2**frac_bits)`` and store them in the uint64 ring.

    Parameters
    ----------
    values
        Finite reals (any shape). Integers above 2**53 lose precision on the way through float64;
        use ``encode_counts`` for exact integers.
    frac_bits
        Fractional bits: the quantisation step is ``2**-frac_bits``.

    Returns
    -------
    numpy.ndarray
        uint64 array of the same shape; negative values wrap (two's complement).

    Raises
    ------
    SecureAggregationError
        If a value is NaN/inf or its scaled magnitude reaches ``2**62`` (see the module docstring
        for the sum bound this protects).
    """
    _check_frac_bits(frac_bits)
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise SecureAggregationError(f"values are not real numbers: {exc}") from None
    if not np.all(np.isfinite(array)):
        raise SecureAggregationError("values must be finite: NaN or infinity cannot be encoded in the ring")
    scaled = np.rint(np.ldexp(array, frac_bits))  # ldexp is exact; rint rounds half to even
    too_large = np.abs(scaled) >= MAX_ENCODED_MAGNITUDE
    if np.any(too_large):
        worst = float(np.max(np.abs(array[too_large])))
        raise SecureAggregationError(
            f"|x| * 2**{frac_bits} must stay below 2**62 (found |x| = {worst:g}); lower frac_bits "
            "(see max_frac_bits) so that sums over all clients cannot overflow int64"
        )
    return scaled.astype(np.int64).view(np.uint64)


def encode_counts(values: ArrayLike) -> np.ndarray:
    """Store non-negative integers (counts, histogram cells) exactly in the uint64 ring.

    Raises
    ------
    SecureAggregationError
        For a non-integer dtype, a negative value or a value ``>= 2**62`` (the same headroom as
        ``encode_fixed``: the decoded sum must stay below 2**63).
    """
    array = np.asarray(values)
    if array.size == 0:
        return np.zeros(array.shape, dtype=np.uint64)
    if array.dtype.kind not in "iu":
        raise SecureAggregationError(f"counts must have an integer dtype, got {array.dtype}")
    if int(array.min()) < 0:  # Python ints: exact whatever the dtype
        raise SecureAggregationError("counts must be non-negative")
    if int(array.max()) >= MAX_ENCODED_MAGNITUDE:
        raise SecureAggregationError("counts must stay below 2**62 so that their sum cannot overflow")
    return array.astype(np.uint64)


def decode_fixed(ring: np.ndarray, frac_bits: int) -> np.ndarray:
    """The reals a ring vector (usually an aggregated sum) stands for: int64 view times ``2**-frac_bits``.

    The int64 -> float64 conversion rounds sums beyond 2**53 to the nearest float; the integer
    sum itself (``ring.view(np.int64)``) is exact.
    """
    _check_frac_bits(frac_bits)
    ring = _ring_array(ring, "ring")
    return np.ldexp(ring.view(np.int64).astype(np.float64), -frac_bits)


def decode_counts(ring: np.ndarray) -> np.ndarray:
    """The exact int64 counts of a ring vector encoded with ``encode_counts`` (and summed).

    Raises
    ------
    SecureAggregationError
        If a value is negative as int64: sums of counts never are, so the vector was not a sum
        of counts or it overflowed.
    """
    counts = _ring_array(ring, "ring").view(np.int64).copy()
    if np.any(counts < 0):
        raise SecureAggregationError("decoded counts are negative: the sum overflowed or was not a sum of counts")
    return counts


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


def max_frac_bits(max_abs_value: float, n_clients: int) -> int:
    """The largest ``frac_bits`` for which ``n_clients`` vectors bounded by ``max_abs_value`` sum exactly.

    Chooses ``f`` with ``n_clients * (max_abs_value * 2**f + 1) <= 2**62`` (the ``+ 1`` covers
    rounding), which keeps every value and every partial sum below ``2**62`` in magnitude.

    Raises
    ------
    SecureAggregationError
        If even ``frac_bits = 0`` does not fit, or the arguments are not positive.
    """
    if not (math.isfinite(max_abs_value) and max_abs_value > 0):
        raise SecureAggregationError(f"max_abs_value must be positive and finite, got {max_abs_value}")
    if isinstance(n_clients, bool) or not isinstance(n_clients, int) or n_clients < 1:
        raise SecureAggregationError(f"n_clients must be a positive int, got {n_clients!r}")
    per_client = MAX_ENCODED_MAGNITUDE // n_clients - 1  # max |q| allowed per client
    if per_client < max_abs_value:
        raise SecureAggregationError(
            f"{n_clients} clients with |x| <= {max_abs_value:g} overflow 2**62 even without fractional bits"
        )
    frac_bits = math.floor(math.log2(per_client / max_abs_value))
    while frac_bits > 0 and max_abs_value * 2.0**frac_bits > per_client:  # guard log2 rounding
        frac_bits -= 1
    while max_abs_value * 2.0 ** (frac_bits + 1) <= per_client and frac_bits < _MAX_FRAC_BITS:
        frac_bits += 1
    return min(frac_bits, _MAX_FRAC_BITS)
