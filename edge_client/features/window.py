"""The feature vector of one pipeline window (all sensors), as the store and the models see it.

Duck-typed on ``edge_client.pipeline.Window`` (``start_us``, ``end_us``, ``data``, ``raw``,
``raw_rate_hz``) so that feature extraction does not import the streaming pipeline: the
trainer can build vectors from stored or replayed windows without it.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import numpy as np

from edge_client.features.channel import channel_feature_names, extract
from edge_client.features.ecg import ecg_features
from edge_client.features.names import require_unique_sensors
from firmware_bridge.descriptors import SensorDescriptor

log = logging.getLogger(__name__)

PIPELINE_RATE_HZ = 20.0  # the pipeline's common grid (PipelineConfig.target_rate_hz)


def _sensor_array(mapping: Any, descriptor: SensorDescriptor, window: Any, what: str) -> np.ndarray:
    if descriptor.name not in mapping:
        raise ValueError(
            f"window [{window.start_us}, {window.end_us}) us has no {what} for sensor "
            f"{descriptor.name!r}; it has {sorted(mapping)} - build the window with the same "
            f"descriptors as the feature names"
        )
    array = np.asarray(mapping[descriptor.name], dtype=np.float64)
    if array.ndim == 1 and descriptor.n_channels == 1:
        array = array[:, None]
    if array.ndim != 2 or array.shape[1] != descriptor.n_channels:
        raise ValueError(
            f"{what} of sensor {descriptor.name!r} has shape {array.shape}, expected "
            f"(n_samples, {descriptor.n_channels}) for its {descriptor.n_channels} channel(s)"
        )
    return array


def window_features(
    window: Any, descriptors: Sequence[SensorDescriptor], *, fs: float = PIPELINE_RATE_HZ
) -> np.ndarray:
    """float64 vector named by ``feature_names(descriptors)``.

    ``window.data[name]`` (n, channels) at ``fs`` Hz gives the TIFEX-style features of every
    sensor; for ECG sensors ``window.raw[name]`` at ``window.raw_rate_hz[name]`` gives the R-peak
    features. Raises ValueError when the window lacks a sensor the descriptors name (a
    configuration mismatch), never because of the signal content.
    """
    require_unique_sensors(descriptors)
    parts: list[np.ndarray] = []
    for descriptor in descriptors:
        data = _sensor_array(window.data, descriptor, window, "20 Hz data")
        features = extract(data[None], fs)[0]
        parts.append(features)
        n_features = len(channel_feature_names())
        missing = features[n_features - 1 :: n_features]  # missing_fraction of each channel
        if missing.any():
            log.debug(
                "window has missing samples (interpolated)",
                extra={"sensor": descriptor.name, "start_us": window.start_us, "missing_fraction": missing.tolist()},
            )
        if descriptor.kind == "ecg":
            raw = _sensor_array(window.raw, descriptor, window, "raw ECG")
            if descriptor.name not in window.raw_rate_hz:
                raise ValueError(f"window has raw ECG for {descriptor.name!r} but no raw_rate_hz entry for it")
            rate = float(window.raw_rate_hz[descriptor.name])
            parts.extend(ecg_features(raw[:, c], rate) for c in range(descriptor.n_channels))
    return np.concatenate(parts) if parts else np.zeros(0)
