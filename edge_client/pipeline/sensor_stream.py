"""One sensor's path from timestamped chunks to grid samples: timebase, segments, resampler, filter.

Timebase
    A chunk's timestamp is that of its first sample; the samples inside follow at the nominal
    rate. Sample times come from an anchor ``(sample index, time_us)`` plus the sample count — not
    from each chunk's (rounded, integer) timestamp — so they do not depend on how the stream was cut
    into chunks. Each chunk's timestamp is compared with the time the anchor predicts for it:

    * deviation > ``gap_tolerance_periods`` sample periods (either direction): a **gap** — frames
      were lost or the clock stepped. The segment ends, a new timebase starts at the chunk.
    * deviation > ``resync_tolerance_periods``: **resync** — the anchor moves to this chunk, the
      segment goes on (filter and resampler keep their state). This absorbs clock drift.
    * otherwise nothing: timestamp jitter and rounding are ignored.

Segments
    A segment is a stretch of contiguous, finite samples; the resampler and filter run within it
    and restart at the next one. Segments end at gaps, at an explicit ``gap()``, and at non-finite
    samples: a NaN from a float32 sensor would reach every resampler output whose FIR touches it
    and from there poison the IIR state for the rest of the session, so a run of NaN/inf rows is
    treated like lost samples (the timebase continues through it). Each sample *owns* the interval
    ``[t_n, t_n + 1/fs)``; a segment covers the union, and the window assembler emits a window only
    if one segment of every sensor covers it entirely.

Order of the stages
    Resampler first (its FIR is the anti-aliasing filter), then the Butterworth on the 20 Hz
    outputs — the reverse of FedSCS-XGB's order, so that the recursive filter runs at 20 Hz in
    numpy; why, and what it changes, is in ``filters.py``. The filter starts (steady state) on the
    segment's first grid output and filters every output of the segment, including grid instants
    later dropped after a backward clock step, so its state never depends on what was delivered.

What is reported
    Grid samples tagged with their segment id (grid index ``k`` strictly increasing per sensor:
    after a backward clock step, grid instants already delivered are dropped and counted), the
    raw native-rate samples of ECG sensors with their integer-microsecond times (floored, so that
    ``start_us <= t < end_us`` on integers selects exactly the samples inside a window), segment
    ends with their coverage end, and ``known_until``: the last grid index whose content for this
    sensor is final (delivered or known to be missing).
"""

from __future__ import annotations

import logging
import math
import operator
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from firmware_bridge.descriptors import SensorDescriptor

from .config import PipelineConfig
from .filters import StreamingLowPass, stage_sos
from .resample import StreamResampler, exact_rate

log = logging.getLogger(__name__)


@dataclass
class SensorStats:
    samples_in: int = 0
    samples_out: int = 0  # grid samples produced
    gaps: int = 0  # timestamp jumps and explicit gap() calls that ended a segment
    resyncs: int = 0  # timebase re-anchorings (clock drift)
    nonfinite_samples: int = 0
    overlap_dropped: int = 0  # grid samples dropped after a backward clock step (already delivered)


@dataclass
class StreamUpdate:
    """What one call produced: grid samples per segment, raw samples, and segments that ended."""

    grid: list[tuple[int, np.ndarray, np.ndarray]] = field(default_factory=list)  # (segment, k int64, values)
    raw: list[tuple[int, np.ndarray, np.ndarray]] = field(default_factory=list)  # (segment, times_us, values)
    ended: list[tuple[int, Fraction]] = field(default_factory=list)  # (segment, end of coverage in us)


class SensorStream:
    """Turns one sensor's ``(timestamp_us, (n, channels) physical samples)`` chunks into grid samples."""

    def __init__(self, descriptor: SensorDescriptor, config: PipelineConfig) -> None:
        self.descriptor = descriptor
        self.name = descriptor.name
        self.fs = exact_rate(descriptor.sample_rate_hz)
        self.stats = SensorStats()
        self.keeps_raw = descriptor.kind == "ecg"
        self.known_until: int | None = None
        self._period_us = config.period_us
        self._sample_us = Fraction(10**6) / self.fs
        self._gap_us = self._sample_us * Fraction(config.gap_tolerance_periods)
        self._resync_us = self._sample_us * Fraction(config.resync_tolerance_periods)
        cutoff = config.cutoff_for(descriptor.kind)
        sos = stage_sos(descriptor.sample_rate_hz, config.target_rate_hz, cutoff, config.filter_order)
        if sos is None:
            log.info(
                "low-pass skipped: cut-off at or above the sensor's or the grid's Nyquist",
                extra={
                    "sensor": self.name,
                    "fs_hz": descriptor.sample_rate_hz,
                    "grid_hz": config.target_rate_hz,
                    "cutoff_hz": cutoff,
                },
            )
        self.lowpass = StreamingLowPass(sos, descriptor.n_channels)
        self.resampler = StreamResampler(descriptor.sample_rate_hz, config.target_rate_hz, config.period_us)
        self._clock: tuple[int, int] | None = None  # (sample index, time_us) anchor
        self._n = 0  # samples since the timebase started
        self._segment: int | None = None
        self._segment_start = 0  # sample index of the segment's first sample
        self._segment_end = 0  # sample index after its last processed sample
        self._next_segment_id = 0
        self._last_k: int | None = None

    def push(self, timestamp_us: int, samples: np.ndarray) -> StreamUpdate:
        ts = operator.index(timestamp_us)
        x = np.asarray(samples, dtype=np.float64)
        n_ch = self.descriptor.n_channels
        if x.ndim != 2 or x.shape[1] != n_ch:
            raise ValueError(f"sensor {self.name!r}: samples must have shape (n, {n_ch}), got {x.shape}")
        update = StreamUpdate()
        n = len(x)
        if n == 0:
            return update
        self.stats.samples_in += n
        self._check_clock(ts, update)
        finite = np.asarray(np.isfinite(x).all(axis=1))  # one flag per sample
        bounds = [0, *(np.flatnonzero(finite[1:] != finite[:-1]) + 1).tolist(), n]
        for a, b in zip(bounds[:-1], bounds[1:]):
            if finite[a]:
                self._process_run(x[a:b], self._n + a, update)
            else:
                self._end_segment(update)
                self.stats.nonfinite_samples += b - a
                log.info(
                    "non-finite samples treated as missing",
                    extra={"sensor": self.name, "count": b - a, "time_us": float(self._time_of(self._n + a))},
                )
                self._known_before(self._time_of(self._n + b))
        self._n += n
        return update

    def gap(self) -> StreamUpdate:
        """End the current segment now (e.g. the link reported lost data); the next chunk starts afresh."""
        if self._clock is not None:
            self.stats.gaps += 1
            log.info("sensor gap reported", extra={"sensor": self.name})
        return self.finish()

    def finish(self) -> StreamUpdate:
        """End the stream (end of a recording): flush the segment; a later chunk starts a new timebase."""
        update = StreamUpdate()
        self._end_segment(update)
        self._clock = None
        return update

    @property
    def buffered_rows(self) -> int:
        """Input rows held by the resampler (its FIR history)."""
        return self.resampler.history_len

    def _time_of(self, index: int) -> Fraction:
        assert self._clock is not None
        anchor_index, anchor_us = self._clock
        return anchor_us + (index - anchor_index) * self._sample_us

    def _check_clock(self, ts: int, update: StreamUpdate) -> None:
        if self._clock is None:
            self._clock, self._n = (0, ts), 0
            return
        expected = self._time_of(self._n)
        deviation = ts - expected
        if abs(deviation) > self._gap_us:
            log.warning(
                "sensor gap: timestamp jump",
                extra={
                    "sensor": self.name,
                    "expected_us": float(expected),
                    "timestamp_us": ts,
                    "jump_us": float(deviation),
                },
            )
            self._end_segment(update)
            self.stats.gaps += 1
            self._clock, self._n = (0, ts), 0
        elif abs(deviation) > self._resync_us:
            log.debug("timebase re-anchored", extra={"sensor": self.name, "drift_us": float(deviation)})
            self._clock = (self._n, ts)
            self.stats.resyncs += 1
            if self._segment is not None:
                self.resampler.set_clock(self._n - self._segment_start, ts)

    def _process_run(self, x: np.ndarray, first_index: int, update: StreamUpdate) -> None:
        if self._segment is None:
            self._segment, self._next_segment_id = self._next_segment_id, self._next_segment_id + 1
            self._segment_start = first_index
            t0 = self._time_of(first_index)
            self.resampler.start(t0, x[0])
            self._known_before(t0)
        self._segment_end = first_index + len(x)
        self._collect(*self._filtered(*self.resampler.push(x)), update)
        if self.keeps_raw:
            update.raw.append((self._segment, self._raw_times(first_index, len(x)), x.copy()))

    def _end_segment(self, update: StreamUpdate) -> None:
        if self._segment is None:
            return
        self._collect(*self._filtered(*self.resampler.finish()), update)
        self.lowpass.reset()
        end = self._time_of(self._segment_end)
        update.ended.append((self._segment, end))
        self._known_before(end)
        self._segment = None

    def _filtered(self, ks: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The low-pass over the segment's grid outputs, started on its first one."""
        if len(values) == 0:
            return ks, values
        if not self.lowpass.started:
            self.lowpass.start(values[0])
        return ks, self.lowpass.process(values)

    def _collect(self, ks: np.ndarray, values: np.ndarray, update: StreamUpdate) -> None:
        if self._last_k is not None and len(ks) and ks[0] <= self._last_k:
            keep = ks > self._last_k
            self.stats.overlap_dropped += int((~keep).sum())
            ks, values = ks[keep], values[keep]
        if len(ks) == 0:
            return
        assert self._segment is not None
        update.grid.append((self._segment, ks, values))
        self._last_k = int(ks[-1])
        self.stats.samples_out += len(ks)
        self.known_until = max(self._last_k, self.known_until if self.known_until is not None else self._last_k)

    def _known_before(self, time_us: Fraction) -> None:
        """Every grid instant before ``time_us`` is final for this sensor."""
        k = math.ceil(time_us / self._period_us) - 1
        self.known_until = k if self.known_until is None else max(self.known_until, k)

    def _raw_times(self, first_index: int, count: int) -> np.ndarray:
        assert self._clock is not None
        anchor_index, anchor_us = self._clock
        offsets = np.arange(first_index - anchor_index, first_index - anchor_index + count, dtype=np.int64)
        return anchor_us + (offsets * (10**6 * self.fs.denominator)) // self.fs.numerator
