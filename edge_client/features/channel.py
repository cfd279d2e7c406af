"""Per-channel TIFEX-style features of a batch of windows: ``extract(windows, fs)``.

The feature list and its parameters (5 FFT coefficients, autocorrelation lags, peak support,
Welch segment and bands, sample-entropy m and r) are constants, not configuration: a model is
trained on one feature set and must be fed exactly that set on every gateway, so any change
here is a new FEATURE_SET_VERSION (names.py), never a setting.

Order of the output columns: channel-major, i.e. all features of channel 0 in
``channel_feature_names()`` order, then channel 1, ... (matches ``names.feature_names``).
"""

from __future__ import annotations

import math

import numpy as np

from edge_client.features.cleaning import fill_missing
from edge_client.features.entropy import sample_entropy
from edge_client.features.spectral import FFT_FEATURES, WELCH_FEATURES, fft_magnitudes, welch_features
from edge_client.features.statistics import DISTRIBUTION_FEATURES, centre, distribution_features
from edge_client.features.temporal import (
    CHANGE_FEATURES,
    STRIKE_FEATURES,
    autocorrelation,
    change_features,
    cid_ce,
    number_peaks,
    strike_features,
    zero_crossing_rate,
)

AUTOCORRELATION_LAGS = (1, 2, 5, 10, 20)  # 0.05 .. 1 s at 20 Hz: within one movement cycle
PEAK_SUPPORT = 3  # a peak must exceed 3 samples (150 ms at 20 Hz) on each side: ignores ripples

_FEATURES = (
    DISTRIBUTION_FEATURES
    + CHANGE_FEATURES
    + STRIKE_FEATURES
    + ("sample_entropy", "cid_ce")
    + FFT_FEATURES
    + WELCH_FEATURES
    + tuple(f"autocorr_lag_{lag}" for lag in AUTOCORRELATION_LAGS)
    + (f"n_peaks_support_{PEAK_SUPPORT}", "zero_crossing_rate", "missing_fraction")
)


def channel_feature_names() -> list[str]:
    """Per-channel feature suffixes, in output order (full names are ``sensor.channel.suffix``)."""
    return list(_FEATURES)


def extract(windows: np.ndarray, fs: float) -> np.ndarray:
    """Features of every channel of every window.

    windows: ``(n_windows, n_samples, n_channels)``, any real dtype; non-finite samples are
    repaired (cleaning.fill_missing) and counted in ``missing_fraction``. fs: sample rate in
    Hz (the pipeline's 20 Hz). Returns float64 ``(n_windows, n_channels * n_features)``, all
    finite for inputs within float32 range, whatever the content (constant, NaN, short).
    """
    windows = np.asarray(windows)
    if windows.ndim != 3:
        raise ValueError(
            f"extract() needs windows shaped (n_windows, n_samples, n_channels), got shape "
            f"{windows.shape}; wrap a single window as windows[None]"
        )
    if windows.dtype.kind not in "biuf":
        raise ValueError(f"extract() needs real numbers, got dtype {windows.dtype}")
    if not (isinstance(fs, (int, float, np.number)) and math.isfinite(fs) and fs > 0):
        raise ValueError(f"sample rate fs must be a positive number of Hz, got {fs!r}")
    n_windows, n_samples, n_channels = windows.shape
    series = np.ascontiguousarray(np.moveaxis(windows, 1, 2), dtype=np.float64)  # (windows, channels, time)
    x, missing = fill_missing(series)
    if n_samples == 0:
        features = np.zeros((n_windows, n_channels, len(_FEATURES)))
        features[..., -1] = missing
        return features.reshape(n_windows, -1)
    mean, d, constant = centre(x)
    distribution = distribution_features(x, mean, d, constant)
    std, var = distribution[..., 1], distribution[..., 2]
    features = np.concatenate(
        [
            distribution,
            change_features(x),
            strike_features(d),
            sample_entropy(x, std, constant)[..., None],
            cid_ce(d, std)[..., None],
            fft_magnitudes(d),
            welch_features(d, float(fs)),
            autocorrelation(d, var, AUTOCORRELATION_LAGS),
            number_peaks(x, PEAK_SUPPORT)[..., None],
            zero_crossing_rate(x)[..., None],
            missing[..., None],
        ],
        axis=-1,
    )
    return features.reshape(n_windows, n_channels * len(_FEATURES))
