"""What a sensor is: its channels, units, scaling and sample rate.

A sensor announces itself with a descriptor frame on the serial link (and recordings keep the
descriptors in their metadata), so the gateway needs no per-sensor configuration: raw samples
become physical values as ``raw * scale + offset``, and the sensor's ``name`` and channel names
become the prefix of every feature name (``sensor.channel.feature``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")

#: Sensor kinds the pipeline knows; the kind selects the low-pass cut-off and ECG features.
SENSOR_KINDS = ("imu", "wheel_imu", "ecg", "ppg", "pressure")


@dataclass(frozen=True)
class ChannelSpec:
    name: str
    unit: str
    scale: float = 1.0
    offset: float = 0.0

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"channel name {self.name!r} must match {_NAME.pattern}")
        if not self.scale or self.scale != self.scale:
            raise ValueError(f"channel {self.name!r}: scale must be a non-zero number")


@dataclass(frozen=True)
class SensorDescriptor:
    sensor_id: int
    name: str
    kind: str
    sample_rate_hz: float
    channels: tuple[ChannelSpec, ...]
    sample_format: Literal["int16", "float32"] = "int16"

    def __post_init__(self) -> None:
        if not 0 <= self.sensor_id <= 255:
            raise ValueError(f"sensor_id {self.sensor_id} must be in 0..255")
        if not _NAME.match(self.name):
            raise ValueError(f"sensor name {self.name!r} must match {_NAME.pattern}")
        if self.kind not in SENSOR_KINDS:
            raise ValueError(f"sensor kind {self.kind!r} is not one of {SENSOR_KINDS}")
        if not 0 < self.sample_rate_hz <= 100_000:
            raise ValueError(f"sample rate {self.sample_rate_hz} Hz is out of range")
        if not 1 <= len(self.channels) <= 64:
            raise ValueError("a sensor has 1 to 64 channels")
        names = [c.name for c in self.channels]
        if len(set(names)) != len(names):
            raise ValueError(f"sensor {self.name!r} repeats a channel name: {names}")
        if self.sample_format not in ("int16", "float32"):
            raise ValueError(f"sample_format must be int16 or float32, got {self.sample_format!r}")

    @property
    def n_channels(self) -> int:
        return len(self.channels)
