"""What a sensor is: its channels, units, scaling and sample rate.

A sensor announces itself with a descriptor frame on the serial link (and recordings keep the
descriptors in their metadata), so the gateway needs no per-sensor configuration: raw samples
become physical values as ``raw * scale + offset``, and the sensor's ``name`` and channel names
become the prefix of every feature name (``sensor.channel.feature``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")

#: Sample rates a descriptor may declare. Below 0.01 Hz (one sample per 100 s) a sensor cannot
#: feed a 4 s window, and the bound keeps every duration derived from the rate (``n * 1e6 / rate``,
#: the decoder's lost-sample count) finite: 1e-320 Hz, a positive float, made them infinite and
#: ``round(inf)`` raised in the serial read thread. 100 kHz is above any body-worn sensor.
MIN_RATE_HZ = 0.01
MAX_RATE_HZ = 100_000.0
MAX_CHANNELS = 64
#: A unit is a label ("g", "mV", "rad/s"), not a place to carry data.
MAX_UNIT_CHARS = 32

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
        if not isinstance(self.unit, str) or len(self.unit) > MAX_UNIT_CHARS:
            raise ValueError(f"channel {self.name!r}: unit must be a string of at most {MAX_UNIT_CHARS} characters")
        # NaN or infinite scale/offset would turn every sample of the channel into NaN or inf.
        if not (math.isfinite(self.scale) and self.scale != 0):
            raise ValueError(f"channel {self.name!r}: scale must be a finite non-zero number, got {self.scale!r}")
        if not math.isfinite(self.offset):
            raise ValueError(f"channel {self.name!r}: offset must be a finite number, got {self.offset!r}")


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
        if not MIN_RATE_HZ <= self.sample_rate_hz <= MAX_RATE_HZ:  # False for NaN too
            raise ValueError(f"sample rate {self.sample_rate_hz} Hz is outside {MIN_RATE_HZ:g}..{MAX_RATE_HZ:g} Hz")
        if not 1 <= len(self.channels) <= MAX_CHANNELS:
            raise ValueError(f"a sensor has 1 to {MAX_CHANNELS} channels")
        names = [c.name for c in self.channels]
        if len(set(names)) != len(names):
            raise ValueError(f"sensor {self.name!r} repeats a channel name: {names}")
        if self.sample_format not in ("int16", "float32"):
            raise ValueError(f"sample_format must be int16 or float32, got {self.sample_format!r}")

    @property
    def n_channels(self) -> int:
        return len(self.channels)
