"""Defined values for constant, missing (NaN/inf) and short windows; input validation; the pinned
feature list. Property tests: whatever the content, every feature is finite."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from edge_client.features import FEATURE_SET_VERSION, channel_feature_names, extract
from edge_client.features.cleaning import fill_missing
from tests.edge_client.features.features_real_data import RATE_HZ, watch_windows

NAMES = channel_feature_names()
N_FEATURES = len(NAMES)

#: The versioned feature list. Changing it (names, order, definitions) needs a new FEATURE_SET_VERSION.
PINNED = {
    # version 2 = version 1's list; the values changed because the pipeline now low-passes at 20 Hz
    "wheelfed-tifex-2": [
        "mean",
        "std",
        "var",
        "median",
        "min",
        "max",
        "skewness",
        "kurtosis",
        "abs_sum_of_changes",
        "mean_change",
        "mean_abs_change",
        "longest_strike_above_mean",
        "longest_strike_below_mean",
        "sample_entropy",
        "cid_ce",
        "fft_abs_1",
        "fft_abs_2",
        "fft_abs_3",
        "fft_abs_4",
        "fft_abs_5",
        "welch_peak_hz",
        "welch_power_total",
        "welch_power_0_1hz",
        "welch_power_1_3hz",
        "welch_power_3_5hz",
        "welch_power_5hz_up",
        "autocorr_lag_1",
        "autocorr_lag_2",
        "autocorr_lag_5",
        "autocorr_lag_10",
        "autocorr_lag_20",
        "n_peaks_support_3",
        "zero_crossing_rate",
        "missing_fraction",
    ],
}


def column(features: np.ndarray, name: str, channel: int = 0) -> np.ndarray:
    return features[:, channel * N_FEATURES + NAMES.index(name)]


def test_feature_list_is_pinned_to_its_version() -> None:
    assert FEATURE_SET_VERSION in PINNED, "new FEATURE_SET_VERSION: pin its feature list here"
    assert NAMES == PINNED[FEATURE_SET_VERSION]


def test_output_is_channel_major() -> None:
    windows = watch_windows((0,))[:4]
    features = extract(windows, RATE_HZ)
    assert features.shape == (4, 6 * N_FEATURES)
    for channel in range(6):
        alone = extract(windows[:, :, channel : channel + 1], RATE_HZ)
        np.testing.assert_array_equal(features[:, channel * N_FEATURES : (channel + 1) * N_FEATURES], alone)


def test_a_window_alone_equals_the_same_window_in_a_batch() -> None:
    windows = watch_windows((101,))
    batch = extract(windows, RATE_HZ)
    for i in (0, len(windows) // 2, len(windows) - 1):
        np.testing.assert_array_equal(extract(windows[i : i + 1], RATE_HZ)[0], batch[i])


@pytest.mark.parametrize("value", [0.0, 0.1, -3.7, 1e30])
def test_constant_window_has_exact_defined_values(value: float) -> None:
    features = dict(zip(NAMES, extract(np.full((1, 80, 1), value), RATE_HZ)[0]))
    expected_zero = [n for n in NAMES if n not in ("mean", "median", "min", "max")]
    assert {n: features[n] for n in expected_zero} == {n: 0.0 for n in expected_zero}
    assert features["mean"] == features["median"] == features["min"] == features["max"] == value


def test_nan_gaps_are_interpolated_and_counted() -> None:
    window = watch_windows((0,))[2:3].copy()
    clean = window.copy()
    window[0, 10:13, 0] = np.nan  # interior gap: linear between samples 9 and 13
    window[0, :2, 1] = np.inf  # leading gap: holds sample 2
    window[0, -3:, 2] = -np.inf  # trailing gap: holds sample 76
    window[0, :, 3] = np.nan  # nothing valid: constant 0
    repaired = clean.copy()
    repaired[0, 10:13, 0] = clean[0, 9, 0] + (clean[0, 13, 0] - clean[0, 9, 0]) * np.array([1, 2, 3]) / 4
    repaired[0, :2, 1] = clean[0, 2, 1]
    repaired[0, -3:, 2] = clean[0, 76, 2]
    repaired[0, :, 3] = 0.0
    got, want = extract(window, RATE_HZ), extract(repaired, RATE_HZ)
    missing = NAMES.index("missing_fraction")
    for channel, fraction in enumerate([3 / 80, 2 / 80, 3 / 80, 1.0, 0.0, 0.0]):
        block = slice(channel * N_FEATURES, (channel + 1) * N_FEATURES)
        assert got[0, block][missing] == pytest.approx(fraction)
        np.testing.assert_allclose(
            np.delete(got[0, block], missing), np.delete(want[0, block], missing), rtol=1e-12, atol=1e-15
        )


def test_fill_missing_without_gaps_returns_the_input() -> None:
    x = np.arange(12.0).reshape(3, 4)
    filled, missing = fill_missing(x)
    assert filled is x and missing.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("n_samples", [0, 1, 2, 3, 4, 5, 7, 20])
def test_short_windows_give_finite_features(n_samples: int) -> None:
    windows = watch_windows((0,))[:3, :n_samples]
    features = extract(windows, RATE_HZ)
    assert features.shape == (3, 6 * N_FEATURES) and np.isfinite(features).all()
    assert (column(features, "missing_fraction") == (1.0 if n_samples == 0 else 0.0)).all()
    if n_samples == 0:
        assert not np.delete(features.reshape(3, 6, N_FEATURES), -1, axis=2).any()


def test_integer_samples_are_accepted() -> None:
    raw = np.random.default_rng(3).integers(-2000, 2000, size=(2, 80, 3)).astype(np.int16)
    np.testing.assert_array_equal(extract(raw, RATE_HZ), extract(raw.astype(np.float64), RATE_HZ))


@pytest.mark.parametrize(
    "windows, fs, message",
    [
        (np.zeros((80, 6)), 20.0, "n_windows, n_samples, n_channels"),
        (np.zeros((1, 80, 6), dtype=complex), 20.0, "real numbers"),
        (np.zeros((1, 80, 6)), 0.0, "positive"),
        (np.zeros((1, 80, 6)), float("nan"), "positive"),
    ],
)
def test_invalid_input_is_rejected_with_a_clear_message(windows: np.ndarray, fs: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        extract(windows, fs)


_values = st.one_of(
    st.floats(-3.4e38, 3.4e38, allow_nan=False),  # a float32 sensor's range
    st.floats(-1e-300, 1e-300),
    st.sampled_from([0.0, -0.0, 1.0, np.nan, np.inf, -np.inf]),
)


@settings(max_examples=80, deadline=None)
@given(
    windows=hnp.arrays(
        np.float64, st.tuples(st.integers(1, 3), st.integers(0, 90), st.integers(1, 3)), elements=_values
    )
)
def test_any_content_gives_finite_features(windows: np.ndarray) -> None:
    with np.errstate(over="raise", divide="raise", invalid="raise"):  # no overflow, x/0 or NaN made inside
        features = extract(windows, RATE_HZ)
    assert features.shape == (windows.shape[0], windows.shape[2] * N_FEATURES)
    assert np.isfinite(features).all()
    expected_missing = (~np.isfinite(windows)).mean(axis=1) if windows.shape[1] else 1.0
    np.testing.assert_allclose(features[:, N_FEATURES - 1 :: N_FEATURES], expected_missing)


@settings(max_examples=60, deadline=None)
@given(level=st.floats(-1e6, 1e6), n_samples=st.integers(1, 100))
def test_any_constant_is_regular_and_still(level: float, n_samples: int) -> None:
    features = extract(np.full((1, n_samples, 1), level), RATE_HZ)
    for name in (
        "std",
        "skewness",
        "kurtosis",
        "sample_entropy",
        "cid_ce",
        "longest_strike_above_mean",
        "longest_strike_below_mean",
        "welch_power_total",
        "welch_peak_hz",
        "autocorr_lag_1",
        "fft_abs_1",
    ):
        assert column(features, name)[0] == 0.0, name
