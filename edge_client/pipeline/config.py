"""The pipeline's settings, checked once so the streaming code can rely on integer grid maths.

The defaults follow FedSCS-XGB §III-A (5th-order Butterworth low-pass at 5 Hz, 10 Hz for the
wheel IMU; 20 Hz; 4 s windows every 2 s). The grid is absolute: grid index ``k`` is the instant
``k * period_us`` of the common clock, so the period must be a whole number of microseconds and
windows and steps whole numbers of grid periods — otherwise two gateways (or two sensors) could
not agree on where a window starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


def _default_cutoffs() -> dict[str, float]:
    return {"default": 5.0, "wheel_imu": 10.0}


@dataclass(frozen=True)
class PipelineConfig:
    """Streaming preprocessing settings.

    ``gap_tolerance_periods``: a chunk whose timestamp differs from the time the sensor's
    nominal rate predicts by more than this many sample periods starts a new segment (lost
    frames, a clock step): filter and resampler restart and windows across the break are skipped.

    ``resync_tolerance_periods``: a smaller deviation than a gap but larger than this re-anchors
    the sensor's timebase on the chunk timestamp *without* a restart. It absorbs the slow drift
    between a sensor's oscillator and the common clock (50 ppm is one 2048 Hz sample every 10 s;
    without re-anchoring that drift would accumulate into a "gap" every few seconds).

    ``max_skew_s``: how far a sensor may lag behind the most advanced one before the span it has
    not delivered is treated as missing. A silent sensor would otherwise make the others buffer
    forever (no window is complete without it). ``None`` waits indefinitely — for batch use,
    where whole arrays are pushed one sensor after the other.
    """

    target_rate_hz: float = 20.0
    window_s: float = 4.0
    step_s: float = 2.0
    filter_order: int = 5
    cutoff_hz: dict[str, float] = field(default_factory=_default_cutoffs)
    gap_tolerance_periods: float = 1.5
    resync_tolerance_periods: float = 0.5
    max_skew_s: float | None = 30.0

    def __post_init__(self) -> None:
        if not self.target_rate_hz > 0:
            raise ValueError(f"target_rate_hz must be positive, got {self.target_rate_hz}")
        period = 1e6 / self.target_rate_hz
        if abs(period - round(period)) > 1e-9 * period:
            raise ValueError(
                f"target_rate_hz={self.target_rate_hz} gives a grid period of {period} us; "
                "choose a rate whose period is a whole number of microseconds (e.g. 20, 25, 50 Hz)"
            )
        for name in ("window_s", "step_s"):
            n = getattr(self, name) * self.target_rate_hz
            if n < 1 or abs(n - round(n)) > 1e-9 * n:
                raise ValueError(
                    f"{name}={getattr(self, name)} must be a positive whole number of grid periods "
                    f"(1/{self.target_rate_hz} s)"
                )
        if self.filter_order < 1:
            raise ValueError(f"filter_order must be >= 1, got {self.filter_order}")
        if "default" not in self.cutoff_hz:
            raise ValueError(f"cutoff_hz needs a 'default' entry, got keys {sorted(self.cutoff_hz)}")
        if not all(c > 0 for c in self.cutoff_hz.values()):
            raise ValueError(f"every cut-off must be positive: {self.cutoff_hz}")
        if not 0 < self.resync_tolerance_periods < self.gap_tolerance_periods <= 2.0:
            raise ValueError(
                "need 0 < resync_tolerance_periods < gap_tolerance_periods <= 2 "
                f"(got {self.resync_tolerance_periods}, {self.gap_tolerance_periods}); a larger gap tolerance "
                "would let the timebase jump further than the resampler keeps history for"
            )
        if self.max_skew_s is not None and not self.max_skew_s >= 0:
            raise ValueError(f"max_skew_s must be >= 0 or None, got {self.max_skew_s}")

    @property
    def period_us(self) -> int:
        """Grid period in integer microseconds (50 000 at 20 Hz)."""
        return round(1e6 / self.target_rate_hz)

    @property
    def window_len(self) -> int:
        """Samples per window on the grid (80)."""
        return round(self.window_s * self.target_rate_hz)

    @property
    def step_len(self) -> int:
        """Grid samples between window starts (40); window ``w`` starts at grid index ``w * step_len``."""
        return round(self.step_s * self.target_rate_hz)

    @property
    def max_skew_periods(self) -> int | None:
        return None if self.max_skew_s is None else math.ceil(self.max_skew_s * self.target_rate_hz)

    def cutoff_for(self, kind: str) -> float:
        """Low-pass cut-off for a sensor kind (the ``default`` entry unless the kind has its own)."""
        return self.cutoff_hz.get(kind, self.cutoff_hz["default"])
