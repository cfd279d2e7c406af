"""The documented differences to tsfresh and TIFEX (FEATURES.md), each shown on a concrete input.

TIFEX-py cannot be imported with current SciPy, so its definitions are transcribed here from
its source (tifex_py/feature_extraction/statistical_feature_calculators.py, v0.1.1) as small
reference functions.
"""

from __future__ import annotations

from itertools import groupby

import numpy as np
import pytest
from scipy import signal, stats

from edge_client.features import channel_feature_names, extract
from tests.edge_client.features.features_real_data import RATE_HZ, watch_windows

fc = pytest.importorskip("tsfresh.feature_extraction.feature_calculators")

NAMES = channel_feature_names()


def features_of(x: np.ndarray, fs: float = RATE_HZ) -> dict[str, float]:
    return dict(zip(NAMES, extract(np.asarray(x, dtype=float)[None, :, None], fs)[0]))


def tifex_sample_entropy(x: np.ndarray) -> float:
    n, m, r = len(x), 2, 0.2 * np.std(x)

    def phi(order: int) -> float:
        templates = np.array([x[i : i + order] for i in range(n - order + 1)])
        counts = np.sum(np.max(np.abs(templates[:, None] - templates[None, :]), axis=2) <= r, axis=0) - 1
        return np.sum(counts) / (n - m + 1) if order == m else np.sum(counts) / (n - m)

    return float(-np.log(phi(m + 1) / phi(m)))


def tifex_longest_strike_above_mean(x: np.ndarray) -> int:
    return max(sum(1 for _ in g) for k, g in groupby(x > np.mean(x)) if k)


def tifex_zero_crossings(x: np.ndarray) -> int:
    return int(np.diff(np.signbit(x)).sum())


def test_sample_entropy_is_tifex_plus_a_constant_of_n() -> None:
    """TIFEX normalises A by (n-m) and B by (n-m+1): a constant shift of ln((n-m+1)/(n-m))."""
    for window in watch_windows((17,))[:6]:
        x = window[:, 3]
        ours = features_of(x)["sample_entropy"]
        assert ours == pytest.approx(fc.sample_entropy(x), rel=1e-9)
        assert ours - tifex_sample_entropy(x) == pytest.approx(np.log(79 / 78), rel=1e-9)


def test_sample_entropy_without_any_m_plus_1_match_is_the_finite_ceiling() -> None:
    some_b = np.array([0.3, 0.8, 0.3, -1.3, 0.9, 0.4, -0.5, 0.6])  # 2-templates match, 3-templates never
    no_b = np.array([0.0, 5.0, 1.0, 9.0, 2.0, 14.0, 3.0, 20.0])  # not even 2-templates match
    with np.errstate(divide="ignore", invalid="ignore"):
        assert np.isinf(fc.sample_entropy(some_b)) and np.isnan(fc.sample_entropy(no_b))
    ceiling = np.log(7 * 6 / 2)  # ln((n-m+1)(n-m)/2), n = 8, m = 2
    assert features_of(some_b)["sample_entropy"] == features_of(no_b)["sample_entropy"] == pytest.approx(ceiling)


def test_constant_window_is_zero_where_tsfresh_and_scipy_give_nan_or_other_values() -> None:
    x = np.full(80, 0.1)
    ours = features_of(x)
    assert np.isnan(fc.skewness(x)) and np.isnan(fc.kurtosis(x)) and np.isnan(fc.autocorrelation(x, 1))
    assert fc.sample_entropy(x) == pytest.approx(-np.log(77 / 79))  # r = 0 still matches every pair
    # np.mean of eighty 0.1 is not 0.1: tsfresh sees the whole flat window "above its mean"
    assert np.mean(x) != 0.1 and fc.longest_strike_above_mean(x) == 80
    with pytest.raises(ValueError):
        tifex_longest_strike_above_mean(np.full(80, 3.0))  # mean exact: max() of an empty sequence
    for name in (
        "skewness",
        "kurtosis",
        "autocorr_lag_1",
        "sample_entropy",
        "longest_strike_above_mean",
        "longest_strike_below_mean",
        "cid_ce",
        "welch_peak_hz",
        "welch_power_total",
    ):
        assert ours[name] == 0.0, name


def test_skewness_and_kurtosis_are_the_bias_corrected_estimators_not_tifex_scipy_default() -> None:
    x = watch_windows((0,))[3, :, 1]
    n = len(x)
    ours = features_of(x)
    assert ours["skewness"] == pytest.approx(stats.skew(x, bias=False), rel=1e-9)
    assert ours["kurtosis"] == pytest.approx(stats.kurtosis(x, bias=False), rel=1e-9)
    assert ours["skewness"] / stats.skew(x) == pytest.approx(np.sqrt(n * (n - 1)) / (n - 2), rel=1e-9)  # TIFEX
    assert ours["kurtosis"] != pytest.approx(stats.kurtosis(x), rel=1e-3)


def test_autocorrelation_of_a_small_unit_signal_is_defined_where_tsfresh_gives_nan() -> None:
    """tsfresh returns NaN when np.isclose(var, 0): var < 1e-8 in the signal's own unit."""
    x = watch_windows((0,))[5, :, 4]
    small = x * 1e-5
    assert np.var(small) < 1e-8 and np.isnan(fc.autocorrelation(small, 2))
    assert features_of(small)["autocorr_lag_2"] == pytest.approx(fc.autocorrelation(x, 2), rel=1e-9)


def test_zero_crossings_skip_exact_zeros() -> None:
    touch_from_above = np.array([1.0, 0.0, 1.0, 2.0])
    touch_from_below = np.array([-1.0, 0.0, -1.0, -2.0])
    through_zero = np.array([1.0, 0.0, -1.0, -2.0])
    negative_zero = np.array([1.0, -0.0, 1.0, 2.0])
    assert [fc.number_crossing_m(x, 0) for x in (touch_from_above, touch_from_below, through_zero)] == [2, 0, 1]
    assert [tifex_zero_crossings(x) for x in (touch_from_above, touch_from_below, negative_zero)] == [0, 2, 2]
    ours = [
        features_of(x)["zero_crossing_rate"] * 4
        for x in (touch_from_above, touch_from_below, through_zero, negative_zero)
    ]
    assert ours == [0, 0, 1, 0]


def test_zero_crossing_rate_is_per_sample_like_tifex_where_tsfresh_counts() -> None:
    x = np.sin(2 * np.pi * 1.0 * np.arange(80) / RATE_HZ + 0.3)
    crossings = fc.number_crossing_m(x, 0)
    assert crossings == tifex_zero_crossings(x) == 7
    assert features_of(x)["zero_crossing_rate"] == crossings / 80


def test_welch_uses_the_real_sample_rate() -> None:
    """A 2 Hz tone peaks at 2 Hz; tsfresh (fs = 1) reports per-sample units: density x fs, bin k."""
    x = np.sin(2 * np.pi * 2.0 * np.arange(80) / RATE_HZ)
    ours = features_of(x)
    assert ours["welch_peak_hz"] == 2.0
    density = np.array([v for _, v in fc.spkt_welch_density(x, [{"coeff": k} for k in range(41)])])
    assert np.argmax(density) == 8  # 8 cycles per 80 samples
    _, our_density = signal.welch(x, fs=RATE_HZ, nperseg=80)
    np.testing.assert_allclose(our_density * RATE_HZ, density, rtol=1e-12, atol=1e-15)
    assert ours["welch_power_total"] == pytest.approx(our_density.sum() * RATE_HZ / 80)


def test_welch_averages_80_sample_segments_on_longer_windows() -> None:
    x = watch_windows((63,))[:3, :, 0].reshape(-1)[:160]
    _, ours = signal.welch(x, fs=RATE_HZ, nperseg=80)
    _, single = signal.welch(x, fs=RATE_HZ, nperseg=160)  # what tsfresh does (nperseg = min(n, 256))
    assert features_of(x)["welch_power_total"] == pytest.approx(ours.sum() * RATE_HZ / 80, rel=1e-12)
    assert ours.sum() * RATE_HZ / 80 != pytest.approx(single.sum() * RATE_HZ / 160, rel=1e-3)


def test_plateau_peaks_are_not_counted_unlike_find_peaks() -> None:
    x = np.array([0.0, 1, 2, 3, 5, 5, 3, 2, 1, 0, 0, 1, 2, 3, 6, 3, 2, 1, 0])
    assert len(signal.find_peaks(x)[0]) == 2  # TIFEX's local maxima count the plateau
    assert fc.number_peaks(x, 3) == 1
    assert features_of(x)["n_peaks_support_3"] == 1


def test_short_series_give_zero_where_tsfresh_gives_nan() -> None:
    x = np.array([1.0, 2.5, 2.0])
    ours = features_of(x)
    assert np.isnan(fc.autocorrelation(x, 5)) and np.isnan(fc.mean_change(x[:1]))
    assert np.isnan(dict(fc.fft_coefficient(x, [{"coeff": 4, "attr": "abs"}]))['attr_"abs"__coeff_4'])
    assert ours["autocorr_lag_5"] == ours["fft_abs_4"] == ours["kurtosis"] == 0.0
    assert features_of(x[:1])["mean_change"] == 0.0
