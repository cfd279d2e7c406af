"""Every per-channel feature against tsfresh's calculators on real (seglearn watch) windows.

Where our definition and tsfresh's agree, the values must agree to 1e-9 (relative; absolute
1e-12 of the column's scale for values near 0). The Welch summaries are rebuilt from
tsfresh's ``spkt_welch_density`` divided by fs (tsfresh uses fs = 1, see FEATURES.md), the
zero-crossing rate from ``number_crossing_m(x, 0) / n``. Intentional differences are pinned
in test_features_differences.py.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_client.features import channel_feature_names, extract
from tests.edge_client.features.features_real_data import RATE_HZ, watch_windows

fc = pytest.importorskip("tsfresh.feature_extraction.feature_calculators")

NPERSEG = 80
SAMPEN = channel_feature_names().index("sample_entropy")


def _welch_from_tsfresh(x: np.ndarray, fs: float) -> tuple[np.ndarray, np.ndarray]:
    nperseg = min(len(x), NPERSEG)
    n_bins = nperseg // 2 + 1
    pairs = dict(fc.spkt_welch_density(x, [{"coeff": k} for k in range(n_bins)]))
    density = np.array([pairs[f"coeff_{k}"] for k in range(n_bins)]) / fs
    return np.arange(n_bins) * fs / nperseg, density


def _welch_summary(x: np.ndarray, fs: float) -> list[float]:
    freqs, density = _welch_from_tsfresh(x, fs)
    df = freqs[1] - freqs[0]
    bands = [(0, 1), (1, 3), (3, 5), (5, np.inf)]
    return [
        freqs[np.argmax(density)],
        density.sum() * df,
        *[density[(freqs >= lo) & (freqs < hi)].sum() * df for lo, hi in bands],
    ]


def tsfresh_reference(x: np.ndarray, fs: float) -> dict[str, float]:
    """Our feature suffix -> the value tsfresh computes for the same definition."""
    fft = dict(fc.fft_coefficient(x, [{"coeff": k, "attr": "abs"} for k in range(1, 6)]))
    welch = _welch_summary(x, fs)
    ref: dict[str, Callable[[], float] | float] = {
        "mean": fc.mean(x),
        "std": fc.standard_deviation(x),
        "var": fc.variance(x),
        "median": fc.median(x),
        "min": fc.minimum(x),
        "max": fc.maximum(x),
        "skewness": fc.skewness(x),
        "kurtosis": fc.kurtosis(x),
        "abs_sum_of_changes": fc.absolute_sum_of_changes(x),
        "mean_change": fc.mean_change(x),
        "mean_abs_change": fc.mean_abs_change(x),
        "longest_strike_above_mean": fc.longest_strike_above_mean(x),
        "longest_strike_below_mean": fc.longest_strike_below_mean(x),
        "sample_entropy": fc.sample_entropy(x),
        "cid_ce": fc.cid_ce(x, normalize=True),
        **{f"fft_abs_{k}": fft[f'attr_"abs"__coeff_{k}'] for k in range(1, 6)},
        "welch_peak_hz": welch[0],
        "welch_power_total": welch[1],
        "welch_power_0_1hz": welch[2],
        "welch_power_1_3hz": welch[3],
        "welch_power_3_5hz": welch[4],
        "welch_power_5hz_up": welch[5],
        **{f"autocorr_lag_{lag}": fc.autocorrelation(x, lag) for lag in (1, 2, 5, 10, 20)},
        "n_peaks_support_3": fc.number_peaks(x, 3),
        "zero_crossing_rate": fc.number_crossing_m(x, 0) / len(x),
        "missing_fraction": 0.0,
    }
    return {name: float(value) for name, value in ref.items()}


def reference_matrix(windows: np.ndarray, fs: float) -> np.ndarray:
    names = channel_feature_names()
    rows = []
    for window in windows:
        row = []
        for channel in range(window.shape[1]):
            ref = tsfresh_reference(np.ascontiguousarray(window[:, channel]), fs)
            row.extend(ref[name] for name in names)
        rows.append(row)
    return np.array(rows)


def assert_columns_agree(ours: np.ndarray, theirs: np.ndarray, names: list[str], n_channels: int) -> None:
    per_channel = np.array(names * n_channels)
    failures = []
    for name in names:
        cols = per_channel == name
        a, b = ours[:, cols], theirs[:, cols]
        atol = 1e-12 * max(1.0, float(np.abs(b).max()))
        if not np.allclose(a, b, rtol=1e-9, atol=atol):
            worst = np.unravel_index(np.argmax(np.abs(a - b)), a.shape)
            failures.append(f"{name}: ours {a[worst]!r} vs tsfresh {b[worst]!r}")
    assert not failures, "features disagree with tsfresh:\n" + "\n".join(failures)


def test_every_feature_has_a_tsfresh_reference() -> None:
    x = watch_windows((0,))[0, :, 0]
    assert set(tsfresh_reference(x, RATE_HZ)) == set(channel_feature_names())


def test_features_match_tsfresh_on_real_watch_windows() -> None:
    windows = watch_windows()
    assert windows.shape[1:] == (80, 6) and len(windows) > 50
    ours = extract(windows, RATE_HZ)
    theirs = reference_matrix(windows, RATE_HZ)
    assert np.isfinite(theirs).all(), "real windows must be inside both definitions (no NaN from tsfresh)"
    assert_columns_agree(ours, theirs, channel_feature_names(), windows.shape[2])


@pytest.mark.filterwarnings("ignore:divide by zero encountered in log:RuntimeWarning")  # tsfresh, A = 0
@settings(max_examples=10, deadline=None)
@given(
    n_samples=st.integers(25, 80),
    n_channels=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
    fs=st.sampled_from([20.0, 50.0, 100.0]),
)
def test_features_match_tsfresh_for_other_lengths_and_rates(
    n_samples: int, n_channels: int, seed: int, fs: float
) -> None:
    """Vectorisation over windows/channels and the n-dependent formulas hold for other lengths and rates.

    Up to 80 samples: beyond, our Welch averages 80-sample segments while tsfresh takes one
    segment of up to 256 (FEATURES.md).
    """
    rng = np.random.default_rng(seed)
    windows = np.cumsum(rng.normal(size=(2, n_samples, n_channels)), axis=1) + rng.normal(size=(2, 1, n_channels))
    theirs = reference_matrix(windows, fs)
    # tsfresh's sample entropy is inf when no (m+1)-template matches (A = 0): ours is the
    # documented ceiling ln((n-m+1)(n-m)/2) there (test_features_differences.py pins it).
    undefined = ~np.isfinite(theirs)
    assert set(np.nonzero(undefined)[1] % len(channel_feature_names())) <= {SAMPEN}
    theirs[undefined] = np.log((n_samples - 1) * (n_samples - 2) / 2)
    assert_columns_agree(extract(windows, fs), theirs, channel_feature_names(), n_channels)


@settings(max_examples=40, deadline=None)
@given(n_samples=st.integers(2, 300), fs=st.sampled_from([20.0, 50.0, 128.0]), seed=st.integers(0, 2**32 - 1))
def test_welch_density_is_scipys(n_samples: int, fs: float, seed: int) -> None:
    """Our few-line Welch (spectral.welch_density) equals scipy.signal.welch(nperseg=min(n, 80))."""
    from scipy import signal

    from edge_client.features.spectral import welch_density

    x = np.random.default_rng(seed).normal(size=(2, 3, n_samples)) * 7.0 + 3.0
    _, expected = signal.welch(x, fs=fs, nperseg=min(n_samples, NPERSEG), axis=-1)
    np.testing.assert_allclose(welch_density(x, fs), expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
