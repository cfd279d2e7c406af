"""Distribution features of each series: location, spread, order statistics and shape.

All functions work on arrays whose LAST axis is time (``(..., n)``, C-contiguous rows, so a
reduction along it uses numpy's pairwise summation exactly like ``np.mean`` of one series,
which is what tsfresh calls: the test oracle then agrees to rounding).

Skewness and kurtosis follow tsfresh (pandas): the bias-corrected G1 and excess G2 estimators.
TIFEX calls ``scipy.stats.skew/kurtosis`` with ``bias=True``; the two differ by a factor that
depends only on n (see FEATURES.md). The moments are computed on the centred series scaled
by its largest absolute deviation, so tiny signals (1e-200) do not underflow into 0/0.
A constant series has skewness and kurtosis 0 (pandas and scipy return NaN): there is no
asymmetry and no tail to measure, and 0 is what a symmetric, normal-tailed signal reports.
"""

from __future__ import annotations

import numpy as np

DISTRIBUTION_FEATURES = ("mean", "std", "var", "median", "min", "max", "skewness", "kurtosis")


def centre(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean, deviations, constant)`` of series with at least one sample.

    For a constant series the mean is its value and the deviations are exactly 0: ``np.mean``
    of eighty 0.1 is 0.09999999999999999, and that 1-ulp "deviation" would otherwise make a
    flat signal look like a strike above its mean (tsfresh reports 80) or give it a tiny
    random spectrum.
    """
    constant = x.max(axis=-1) == x.min(axis=-1)
    mean = np.where(constant, x[..., 0], x.mean(axis=-1))
    deviations = np.where(constant[..., None], 0.0, x - mean[..., None])
    return mean, deviations, constant


def distribution_features(x: np.ndarray, mean: np.ndarray, d: np.ndarray, constant: np.ndarray) -> np.ndarray:
    """The DISTRIBUTION_FEATURES of each series, shape ``(..., 8)``; n >= 1."""
    n = x.shape[-1]
    var = np.mean(d * d, axis=-1)
    scale = np.max(np.abs(d), axis=-1, keepdims=True)
    u = d / np.where(scale > 0, scale, 1.0)
    u2 = u * u
    m2 = u2.mean(axis=-1)
    m3 = (u2 * u).mean(axis=-1)
    m4 = (u2 * u2).mean(axis=-1)
    measurable = ~constant & (m2 > 0)
    safe_m2 = np.where(measurable, m2, 1.0)
    skewness = np.zeros_like(mean)
    kurtosis = np.zeros_like(mean)
    if n >= 3:
        g1 = m3 / safe_m2**1.5
        skewness = np.where(measurable, np.sqrt(n * (n - 1.0)) / (n - 2.0) * g1, 0.0)
    if n >= 4:
        g2 = m4 / safe_m2**2 - 3.0
        kurtosis = np.where(measurable, (n - 1.0) / ((n - 2.0) * (n - 3.0)) * ((n + 1.0) * g2 + 6.0), 0.0)
    return np.stack(
        [mean, np.sqrt(var), var, np.median(x, axis=-1), x.min(axis=-1), x.max(axis=-1), skewness, kurtosis], axis=-1
    )
