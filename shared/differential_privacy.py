"""Distributed differential privacy: the gateway's half (pure functions, numpy only).

Every released fleet sum is an integer vector. Each of the ``m`` gateways asked for it adds
Skellam noise of variance ``mu / m`` to every cell (the difference of two Poisson draws,
:func:`skellam_share`) before secure aggregation masks the vector, so that the sum the aggregator
decodes carries exactly ``Skellam(mu)`` noise -- Skellam is closed under summation (Agarwal,
Kairouz, Liu, NeurIPS 2021) -- and nobody ever sees a sum without it. Real-valued statistics
(gradients, Hessians) are first put on the integer lattice of step ``1 / scale`` by
:func:`stochastic_round` (unbiased; Shi et al., NeurIPS 2022) after :func:`clip_norm`, so that one
window's contribution has a public L2 and L1 bound: the sensitivities the accountant
(``aggregator.privacy``) needs. ``docs/differential_privacy.md`` has the argument.

Post-processing is free: noisy counts are clipped at 0 and children made to add up to their
parent (:func:`consistent_children`) at no further privacy cost.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["clip_norm", "consistent_children", "lattice_norm_bound", "skellam_share", "stochastic_round"]


def skellam_share(
    shape: int | tuple[int, ...], mu: float, shares: int, rng: np.random.Generator | None = None
) -> np.ndarray:
    """One gateway's share of ``Skellam(mu)`` noise: ``Poisson(mu / 2m) - Poisson(mu / 2m)`` per
    cell as int64, ``m = shares``. The shares of ``m`` gateways add up to ``Skellam(mu)``
    (variance ``mu``) exactly.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> total = sum(skellam_share(100_000, 400.0, 4, rng) for _ in range(4))
    >>> round(float(total.var()) / 400, 1), total.dtype.name
    (1.0, 'int64')
    """
    if not (math.isfinite(mu) and mu >= 0) or shares < 1:
        raise ValueError(f"mu must be finite and >= 0 and shares >= 1, got {mu}, {shares}")
    rng = rng or np.random.default_rng()
    lam = mu / (2.0 * shares)
    return rng.poisson(lam, shape).astype(np.int64) - rng.poisson(lam, shape).astype(np.int64)


def stochastic_round(values: ArrayLike, scale: float, rng: np.random.Generator | None = None) -> np.ndarray:
    """``values * scale`` rounded to an integer at random, up with probability equal to the
    fraction (unbiased: the expectation is ``values * scale``), as int64.

    Examples
    --------
    >>> q = stochastic_round(np.full(100_000, 0.3), 4, np.random.default_rng(1))
    >>> sorted(set(q.tolist())), round(float(q.mean()), 2)
    ([1, 2], 1.2)
    """
    x = np.asarray(values, dtype=np.float64) * scale
    if not np.isfinite(x).all():
        raise ValueError("cannot round non-finite values")
    rng = rng or np.random.default_rng()
    low = np.floor(x)
    return (low + (rng.random(x.shape) < x - low)).astype(np.int64)


def clip_norm(rows: ArrayLike, max_norm: float) -> np.ndarray:
    """Each row scaled down to L2 norm ``<= max_norm`` (rows already within it are unchanged).

    Examples
    --------
    >>> clip_norm(np.array([[3.0, 4.0], [0.3, 0.4]]), 1.0)
    array([[0.6, 0.8],
           [0.3, 0.4]])
    """
    r = np.asarray(rows, dtype=np.float64)
    norms = np.sqrt((r * r).sum(axis=-1, keepdims=True))
    return r * np.minimum(1.0, max_norm / np.maximum(norms, 1e-300))


def lattice_norm_bound(max_norm: float, scale: float, dims: int) -> tuple[float, float]:
    """Public (L2, L1) bounds on ``stochastic_round(v, scale)`` for any ``v`` with ``||v||_2 <=
    max_norm`` in ``dims`` dimensions: each coordinate moves by less than 1, so the L2 norm is at
    most ``scale * max_norm + sqrt(dims)`` and the L1 norm at most ``scale * max_norm * sqrt(dims)
    + dims``.

    Examples
    --------
    >>> lattice_norm_bound(1.0, 64, 4)
    (66.0, 132.0)
    """
    return scale * max_norm + math.sqrt(dims), scale * max_norm * math.sqrt(dims) + dims


def consistent_children(noisy: ArrayLike, parents: ArrayLike, offsets: ArrayLike) -> np.ndarray:
    """Noisy child counts made non-negative integers that add up to their parent's count:
    bucket ``i``'s children are ``noisy[offsets[i]:offsets[i+1]]`` and must sum to
    ``parents[i]``. Clipped at 0, scaled, rounded by largest remainder (ties: lower index);
    all-zero children share the parent's count evenly."""
    c = np.clip(np.asarray(noisy, dtype=np.float64), 0.0, None)
    parents = np.asarray(parents, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    out = np.zeros(c.shape[0], dtype=np.int64)
    for i in range(parents.shape[0]):  # a loop over refined buckets (hundreds), vectorised inside
        s, e = offsets[i], offsets[i + 1]
        part = c[s:e]
        total = part.sum()
        share = part / total * parents[i] if total > 0 else np.full(e - s, parents[i] / max(e - s, 1))
        base = np.floor(share).astype(np.int64)
        rest = int(parents[i] - base.sum())
        if rest > 0:
            base[np.argsort(-(share - base), kind="stable")[:rest]] += 1
        out[s:e] = base
    return out
