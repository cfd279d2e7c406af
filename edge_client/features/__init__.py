"""TIFEX-style window features (per channel) and ECG heart-rate features, pure numpy (no SciPy on the gateway).

Public API::

    FEATURE_SET_VERSION                      # names the definitions in FEATURES.md
    channel_feature_names() -> list[str]     # per-channel suffixes, in output order
    extract(windows (n_windows, n_samples, n_channels), fs) -> (n_windows, n_channels * n_features)
    ecg_feature_names() -> list[str]
    ecg_features(raw (n,), fs) -> np.ndarray
    detect_r_peaks(signal (n,), fs) -> int64 sample indices
    feature_names(descriptors) -> list[str]  # "sensor.channel.feature"
    window_features(window, descriptors) -> np.ndarray   # one edge_client.pipeline Window

Every definition, and where it departs from tsfresh / TIFEX, is in FEATURES.md next to this file.
"""

from edge_client.features.channel import channel_feature_names, extract
from edge_client.features.ecg import detect_r_peaks, ecg_feature_names, ecg_features
from edge_client.features.names import FEATURE_SET_VERSION, feature_names
from edge_client.features.window import window_features

__all__ = [
    "FEATURE_SET_VERSION",
    "channel_feature_names",
    "detect_r_peaks",
    "ecg_feature_names",
    "ecg_features",
    "extract",
    "feature_names",
    "window_features",
]
