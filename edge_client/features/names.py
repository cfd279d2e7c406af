"""Feature names and the feature-set version: the contract between gateways and models.

A full name is ``sensor.channel.feature`` (sensor and channel names from the descriptors,
feature suffix from ``channel_feature_names()`` / ``ecg_feature_names()``). The order of a
window's vector is: for each descriptor in the given order, every channel's TIFEX-style
features (channel-major), then, for sensors of kind "ecg", every channel's ECG features.

FEATURE_SET_VERSION names the definitions in FEATURES.md. Changing any definition, parameter,
name or order is a new version: stored windows and trained models carry the version, so a
model is never fed features it was not trained on.
"""

from __future__ import annotations

from typing import Sequence

from edge_client.features.channel import channel_feature_names
from edge_client.features.ecg import ecg_feature_names
from firmware_bridge.descriptors import SensorDescriptor

FEATURE_SET_VERSION = "wheelfed-tifex-2"


def require_unique_sensors(descriptors: Sequence[SensorDescriptor]) -> None:
    names = [d.name for d in descriptors]
    if len(set(names)) != len(names):
        raise ValueError(f"sensor names must be unique to give unique feature names, got {names}")


def feature_names(descriptors: Sequence[SensorDescriptor]) -> list[str]:
    """Names of ``window_features(window, descriptors)``, in the same order."""
    require_unique_sensors(descriptors)
    names: list[str] = []
    for descriptor in descriptors:
        for suffixes, applies in ((channel_feature_names(), True), (ecg_feature_names(), descriptor.kind == "ecg")):
            if applies:
                names.extend(
                    f"{descriptor.name}.{channel.name}.{suffix}"
                    for channel in descriptor.channels
                    for suffix in suffixes
                )
    return names
