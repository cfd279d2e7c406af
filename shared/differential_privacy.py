"""Differential privacy on released fleet sums: distributed Gaussian noise and a zCDP accountant.

Every gateway adds ``round(N(0, sigma² / m))`` (in the fixed-point units of each cell) to its
vector before masking, where ``m`` is the number of gateways asked for the sum; the fleet sum
then carries ``N(0, sigma²)`` noise (plus rounding) and the aggregator never decodes a sum
without it -- secure aggregation hides the individual shares. A release whose L2 sensitivity to
adding or removing one window is ``Delta`` costs ``rho = Delta² / (2 sigma_eff²)`` in zero-
concentrated DP (Bun & Steinke 2016), where ``sigma_eff² = sigma² * answered / m`` (the shares of
gateways that dropped out are missing); releases compose by adding ``rho``, and ``(epsilon,
delta)``-DP follows from ``epsilon = rho + 2 sqrt(rho ln(1/delta))``.

Shares are rounded stochastically to the fixed-point grid, so the decoded noise is a sum of
rounded Gaussians: its variance is at least ``sigma²``, and the accounting treats it as the
Gaussian it approximates -- close when each share spans many grid units (G and H in fixed point),
an approximation for count cells with shares of about one unit (Kairouz et al. 2021 analyse
the distributed discrete Gaussian exactly; not implemented here).

Post-processing is free: noisy counts are clipped at 0 and children rescaled to their parent's
count (:func:`consistent_children`) without further cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["ZCDPAccountant", "consistent_children", "epsilon_from_rho", "noise_share"]


def noise_share(scales: ArrayLike, sigma: float, shares: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """One gateway's share of the noise: ``N(0, (sigma * scale)² / shares)`` per cell, rounded
    *stochastically* to an integer (up with probability equal to the fraction), as int64;
    ``scales`` are the cells' fixed-point factors (``2**frac_bits``, or 1 for counts). Stochastic
    rounding is unbiased and never shrinks the variance -- rounding to the nearest integer would
    erase shares smaller than half a unit (counts with little noise per gateway)."""
    if not (sigma >= 0 and math.isfinite(sigma)) or shares < 1:
        raise ValueError(f"sigma must be finite and >= 0 and shares >= 1, got {sigma}, {shares}")
    scale = np.asarray(scales, dtype=np.float64)
    rng = rng or np.random.default_rng()
    x = rng.normal(0.0, 1.0, scale.shape) * (sigma / math.sqrt(shares)) * scale
    low = np.floor(x)
    return (low + (rng.random(scale.shape) < x - low)).astype(np.int64)


def epsilon_from_rho(rho: float, delta: float) -> float:
    """``(epsilon, delta)``-DP of a ``rho``-zCDP mechanism (Bun & Steinke 2016, Prop. 1.3)."""
    if rho < 0 or not 0 < delta < 1:
        raise ValueError("rho must be >= 0 and delta in (0, 1)")
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


@dataclass
class ZCDPAccountant:
    """Adds up the zCDP cost of a training's releases."""

    delta: float = 1e-5
    rho: float = 0.0
    releases: int = 0
    by_kind: dict[str, float] = field(default_factory=dict)

    def spend(self, kind: str, sensitivity: float, sigma: float, answered: int, asked: int) -> float:
        """Account one release; returns its ``rho``."""
        if sigma <= 0 or answered < 1 or asked < answered:
            raise ValueError("a release needs sigma > 0 and 1 <= answered <= asked")
        cost = sensitivity ** 2 / (2.0 * sigma ** 2 * answered / asked)
        self.rho += cost
        self.releases += 1
        self.by_kind[kind] = self.by_kind.get(kind, 0.0) + cost
        return cost

    @property
    def epsilon(self) -> float:
        return epsilon_from_rho(self.rho, self.delta)


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
