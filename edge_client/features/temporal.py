"""Features of the order of samples in time: changes, strikes, complexity, autocorrelation,
peaks and zero crossings. Last axis is time; every function is vectorised over the others.

Definitions follow tsfresh's calculators of the same name unless FEATURES.md says otherwise;
the choices that differ (values for constant and too-short series, zero crossings at exact
zeros, the rate normalisation) are explained there and pinned by tests.
"""

from __future__ import annotations

import numpy as np

CHANGE_FEATURES = ("abs_sum_of_changes", "mean_change", "mean_abs_change")
STRIKE_FEATURES = ("longest_strike_above_mean", "longest_strike_below_mean")


def change_features(x: np.ndarray) -> np.ndarray:
    """Sum of ``|x[i+1]-x[i]|``, ``(x[-1]-x[0])/(n-1)`` and mean ``|x[i+1]-x[i]|``; 0 when n < 2."""
    n = x.shape[-1]
    if n < 2:
        return np.zeros(x.shape[:-1] + (3,))
    steps = np.abs(np.diff(x, axis=-1))
    return np.stack([steps.sum(axis=-1), (x[..., -1] - x[..., 0]) / (n - 1), steps.mean(axis=-1)], axis=-1)


def longest_run(flags: np.ndarray) -> np.ndarray:
    """Length of the longest run of True along the last axis (0 if none)."""
    if flags.shape[-1] == 0:
        return np.zeros(flags.shape[:-1])
    count = np.cumsum(flags, axis=-1)
    last_reset = np.maximum.accumulate(np.where(flags, 0, count), axis=-1)
    return (count - last_reset).max(axis=-1).astype(np.float64)


def strike_features(d: np.ndarray) -> np.ndarray:
    """Longest run strictly above / strictly below the mean, from the deviations ``d``.

    ``d`` is exactly 0 for a constant series (see statistics.centre), so both are 0 there,
    as in tsfresh (TIFEX raises on constant series).
    """
    return np.stack([longest_run(d > 0), longest_run(d < 0)], axis=-1)


def cid_ce(d: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Complexity estimate of the z-normalised series: sqrt(sum(diff(z)^2)) (Batista et al. 2011).

    tsfresh ``cid_ce(x, normalize=True)``; 0 for a constant series (both libraries agree).
    Normalised so that it measures shape complexity, not amplitude (std already does that).
    """
    z = d / np.where(std > 0, std, 1.0)[..., None]
    steps = np.diff(z, axis=-1)
    return np.sqrt(np.sum(steps * steps, axis=-1))


def autocorrelation(d: np.ndarray, var: np.ndarray, lags: tuple[int, ...]) -> np.ndarray:
    """Autocorrelation at each lag: sum(d[t] d[t+lag]) / ((n - lag) var), shape ``(..., len(lags))``.

    tsfresh's estimator. Defined as 0 when it cannot be measured: a constant series (tsfresh:
    NaN, and also NaN whenever ``np.isclose(var, 0)``, i.e. var < 1e-8 in whatever unit the
    signal has) or a lag not shorter than the series (tsfresh: NaN).
    """
    n = d.shape[-1]
    safe_var = np.where(var > 0, var, 1.0)
    columns = []
    for lag in lags:
        if lag >= n:
            columns.append(np.zeros(d.shape[:-1]))
            continue
        covariation = np.sum(d[..., : n - lag] * d[..., lag:], axis=-1)
        columns.append(np.where(var > 0, covariation / ((n - lag) * safe_var), 0.0))
    return np.stack(columns, axis=-1)


def number_peaks(x: np.ndarray, support: int) -> np.ndarray:
    """Samples strictly larger than their ``support`` neighbours on each side (tsfresh ``number_peaks``).

    A flat-topped peak (plateau) is not counted, unlike ``scipy.signal.find_peaks`` (TIFEX).
    0 when the series is shorter than 2 * support + 1.
    """
    n = x.shape[-1]
    if n < 2 * support + 1:
        return np.zeros(x.shape[:-1])
    middle = x[..., support : n - support]
    is_peak = np.ones(middle.shape, dtype=bool)
    for k in range(1, support + 1):
        is_peak &= middle > x[..., support - k : n - support - k]
        is_peak &= middle > x[..., support + k : n - support + k]
    return np.count_nonzero(is_peak, axis=-1).astype(np.float64)


def zero_crossing_rate(x: np.ndarray) -> np.ndarray:
    """Sign changes per sample: (number of crossings of 0) / n; 0 for n < 2.

    Exact zeros carry no sign: they are skipped, so +1, 0, -1 is one crossing and +1, 0, +1
    none. tsfresh (``number_crossing_m(x, 0)``, tests x > 0) counts the touch 1, 0, 1 twice
    and -1, 0, -1 never; TIFEX (signbit) treats +0.0 as positive and -0.0 as negative, so the
    result depends on the sign of a zero produced by arithmetic. Without exact zeros all three
    count the same crossings; we divide by n like TIFEX's rate.
    """
    n = x.shape[-1]
    if n < 2:
        return np.zeros(x.shape[:-1])
    sign = np.sign(x)
    last_signed = np.maximum.accumulate(np.where(sign != 0, np.arange(n), 0), axis=-1)
    carried = np.take_along_axis(sign, last_signed, axis=-1)
    crossings = np.count_nonzero(carried[..., 1:] * carried[..., :-1] < 0, axis=-1)
    return crossings / n
