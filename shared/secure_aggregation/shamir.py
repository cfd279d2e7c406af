"""Shamir secret sharing over GF(p), p = 2**521 - 1: split a seed so that any ``threshold`` holders can rebuild it.

This is arithmetic, not a cipher: a random polynomial ``f`` of degree ``threshold - 1`` with
``f(0) = secret``, evaluated at the holders' x-coordinates, and Lagrange interpolation at 0 to
get the secret back (Shamir 1979). Its secrecy is information-theoretic: any ``threshold - 1``
shares are consistent with every possible secret, each with equal probability, because the
``threshold - 1`` random coefficients are uniform in the field (drawn with ``secrets``). That is
why ``cryptography`` has no such primitive and why writing it here is safe; the only care
needed is a true prime field (2**521 - 1 is the Mersenne prime M521) and uniform coefficients.

Why this prime: it exceeds 2**512, so any secret up to 64 bytes is a field element as is,
and shares have a fixed width of 66 bytes (big-endian ``y``), which the wire format relies on.
x-coordinates are any distinct nonzero field elements; the protocol uses a 64-bit hash of
each holder's id (``contexts.share_x``). x = 0 would be the secret itself and is refused.

Side channels: Python integers are not constant-time. Splitting runs on a gateway over its own
fresh seeds and combining on the server over shares it is entitled to, with no remote party
able to time repeated operations on one secret (the same stance as ``shared.signing``).
"""

from __future__ import annotations

import secrets
from functools import lru_cache
from typing import Mapping, Sequence

from .errors import SecureAggregationError

__all__ = ["MAX_SECRET_BYTES", "PRIME", "SHARE_BYTES", "combine_shares", "lagrange_weights_at_zero", "split_secret"]

PRIME = 2**521 - 1
SHARE_BYTES = (PRIME.bit_length() + 7) // 8  # 66
MAX_SECRET_BYTES = 64


def _check_x(x: object) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or not 0 < x < PRIME:
        raise SecureAggregationError(f"a share's x-coordinate must be an int in [1, p), got {x!r}")
    return x


def _evaluate(coefficients: Sequence[int], x: int) -> int:
    """Horner's rule: ``sum(c_i * x**i) mod p`` for coefficients listed from degree 0 upwards."""
    value = 0
    for coefficient in reversed(coefficients):
        value = (value * x + coefficient) % PRIME
    return value


def split_secret(secret: bytes, holders: Sequence[int], threshold: int) -> dict[int, bytes]:
    """Shares of ``secret`` for each holder index: any ``threshold`` of them reconstruct it.

    Parameters
    ----------
    secret
        1 to 64 bytes, read as a big-endian integer (``combine_shares`` needs its length back).
    holders
        Distinct positive x-coordinates.
    threshold
        Shares needed to reconstruct, ``1 <= threshold <= len(holders)``; fewer reveal nothing.

    Returns
    -------
    dict[int, bytes]
        ``{x: f(x)}`` with ``f(x)`` as 66-byte big-endian.
    """
    if not isinstance(secret, (bytes, bytearray)) or not 1 <= len(secret) <= MAX_SECRET_BYTES:
        raise SecureAggregationError(f"a Shamir secret must be 1 to {MAX_SECRET_BYTES} bytes")
    xs = [_check_x(x) for x in holders]
    if len(set(xs)) != len(xs):
        raise SecureAggregationError("share holders' x-coordinates must be distinct")
    if isinstance(threshold, bool) or not isinstance(threshold, int) or not 1 <= threshold <= len(xs):
        raise SecureAggregationError(f"threshold must be in [1, {len(xs)}] (the number of holders), got {threshold!r}")
    coefficients = [int.from_bytes(secret, "big")] + [secrets.randbelow(PRIME) for _ in range(threshold - 1)]
    return {x: _evaluate(coefficients, x).to_bytes(SHARE_BYTES, "big") for x in xs}


def lagrange_weights_at_zero(xs: Sequence[int]) -> tuple[int, ...]:
    """``w_i = prod_{j != i} x_j / (x_j - x_i) mod p``: then ``f(0) = sum_i w_i f(x_i)`` for deg f < len(xs)."""
    xs = tuple(_check_x(x) for x in xs)
    if len(set(xs)) != len(xs):
        raise SecureAggregationError("shares must have distinct x-coordinates")
    return _weights(xs)


@lru_cache(maxsize=1024)
def _weights(xs: tuple[int, ...]) -> tuple[int, ...]:
    """Cached: the server rebuilds several seeds of one client from the same holders."""
    numerators, denominators = [], []
    for i, xi in enumerate(xs):
        numerator, denominator = 1, 1
        for j, xj in enumerate(xs):
            if j != i:
                numerator = numerator * xj % PRIME
                denominator = denominator * (xj - xi) % PRIME
        numerators.append(numerator)
        denominators.append(denominator)
    inverses = _batch_inverse(denominators)
    return tuple(n * inv % PRIME for n, inv in zip(numerators, inverses))


def _batch_inverse(values: list[int]) -> list[int]:
    """Montgomery's trick: the inverses of non-zero ``values`` mod p with a single modular inversion."""
    prefix = [1]
    for value in values:
        prefix.append(prefix[-1] * value % PRIME)
    inverse = pow(prefix[-1], -1, PRIME)
    out = [0] * len(values)
    for i in range(len(values) - 1, -1, -1):
        out[i] = prefix[i] * inverse % PRIME
        inverse = inverse * values[i] % PRIME
    return out


def combine_shares(shares: Mapping[int, bytes], secret_len: int) -> bytes:
    """The secret of ``secret_len`` bytes that ``shares`` ({x: 66-byte y}) interpolate to at x = 0.

    Pass at least ``threshold`` shares of one split: with fewer, or with shares of different
    secrets, the interpolated value is a uniformly random field element, which exceeds
    ``256**secret_len`` except with probability ``256**secret_len / p`` (2**-265 for 32-byte
    seeds): that is reported as an error instead of returning garbage.

    Raises
    ------
    SecureAggregationError
        No shares, malformed x or y, or a result that is not a ``secret_len``-byte value.
    """
    if len(shares) == 0:
        raise SecureAggregationError("no shares to combine")
    if isinstance(secret_len, bool) or not isinstance(secret_len, int) or not 1 <= secret_len <= MAX_SECRET_BYTES:
        raise SecureAggregationError(f"secret_len must be in [1, {MAX_SECRET_BYTES}], got {secret_len!r}")
    xs = list(shares)
    ys = []
    for x in xs:
        share = shares[x]
        if not isinstance(share, (bytes, bytearray)) or len(share) != SHARE_BYTES:
            raise SecureAggregationError(f"a Shamir share is {SHARE_BYTES} bytes (share at x = {x!r})")
        y = int.from_bytes(share, "big")
        if y >= PRIME:
            raise SecureAggregationError(f"share at x = {x} is not a field element")
        ys.append(y)
    value = sum(w * y for w, y in zip(lagrange_weights_at_zero(xs), ys)) % PRIME
    if value >= 256**secret_len:
        raise SecureAggregationError(
            f"shares do not reconstruct a {secret_len}-byte secret: too few shares, shares of different "
            "secrets, or a corrupted share"
        )
    return value.to_bytes(secret_len, "big")
