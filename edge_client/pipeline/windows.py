"""Multi-sensor window assembly on the absolute grid.

Windows
    Window ``w`` holds grid samples ``w * step .. w * step + length - 1`` (80 samples from grid
    index ``40 w`` at the defaults) and spans ``[start_us, end_us)`` with ``start_us = 40 w * 50 000``.
    Anchoring on the absolute grid rather than on each stream's first sample makes windows of
    every sensor — and of every gateway sharing the clock — line up, which vertical federation
    (windows of one person's gateways joined by time) relies on.

Emission
    Windows are decided strictly in order. Window ``w`` is decided once every sensor's content up to
    its last grid sample is final (``SensorStream.known_until``); it is then emitted if, for every
    sensor, one segment covers the whole span — else it is skipped and counted. A window
    overlapping a sensor's missing span, or straddling a filter restart, is therefore never emitted:
    its grid samples would mix data from before and after the break (and each restart's edge
    extension). Skipping is done in bulk over long gaps (not window by window).

Bounded memory
    Everything before the next undecided window is dropped. Two things could still grow: a sensor
    that stops delivering would keep every other sensor's data waiting for it, so a sensor more
    than ``max_skew_s`` behind the most advanced one is treated as missing for that span (``None``
    waits forever — batch use); and a window never waits for data older than itself.

ECG
    Windows also carry, for sensors of kind ``ecg``, the raw native-rate, *unfiltered* samples whose
    time lies in ``[start_us, end_us)`` — heart rate needs R-peaks, which the 5 Hz low-pass removes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from firmware_bridge.descriptors import SensorDescriptor

from .config import PipelineConfig
from .sensor_stream import SensorStats, SensorStream, StreamUpdate

log = logging.getLogger(__name__)

__all__ = ["PipelineConfig", "PipelineStats", "Window", "WindowAssembler", "windows_from_arrays"]


@dataclass(frozen=True)
class Window:
    """One window of every sensor: ``data[name]`` is ``(window_len, channels)`` float64 on the grid;
    ``raw[name]`` (ECG sensors only) the unfiltered native-rate samples in ``[start_us, end_us)``."""

    start_us: int
    end_us: int
    data: dict[str, np.ndarray]
    raw: dict[str, np.ndarray]
    raw_rate_hz: dict[str, float]


@dataclass
class PipelineStats:
    windows_emitted: int = 0
    windows_skipped: int = 0
    sensors: dict[str, SensorStats] = field(default_factory=dict)


@dataclass
class _Run:
    """Consecutive grid samples of one segment, starting at grid index ``k0``."""

    segment: int
    k0: int
    values: np.ndarray

    @property
    def k_end(self) -> int:
        return self.k0 + len(self.values)


class _SensorBuffer:
    """Grid samples (as runs) and raw chunks of one sensor that undecided windows may still need."""

    def __init__(self) -> None:
        self.runs: list[_Run] = []
        self.raw: list[tuple[int, np.ndarray, np.ndarray]] = []  # (segment, times_us, values)
        self.coverage_end: dict[int, Fraction] = {}  # ended segments -> end of coverage (us)

    def add(self, update: StreamUpdate, k_min: int) -> None:
        for segment, ks, values in update.grid:
            cut = int(np.searchsorted(ks, k_min))
            if cut == len(ks):
                continue
            k0, values = int(ks[cut]), values[cut:]
            last = self.runs[-1] if self.runs else None
            if last is not None and last.segment == segment and last.k_end == k0:
                last.values = np.concatenate([last.values, values])
            else:
                self.runs.append(_Run(segment, k0, values))
        self.raw.extend(update.raw)
        self.coverage_end.update(update.ended)

    def covering(self, k: int, length: int, end_us: int) -> _Run | None:
        """The run holding grid samples ``k .. k + length - 1`` whose segment covers up to ``end_us``."""
        for run in self.runs:
            if run.k0 <= k and k + length <= run.k_end:
                end = self.coverage_end.get(run.segment)
                return run if end is None or end >= end_us else None
        return None

    def next_run_after(self, k: int) -> int | None:
        return min((run.k0 for run in self.runs if run.k0 > k), default=None)

    def raw_in(self, segment: int, start_us: int, end_us: int) -> np.ndarray:
        parts = []
        for seg, times, values in self.raw:
            if seg == segment:
                lo, hi = np.searchsorted(times, [start_us, end_us])
                parts.append(values[lo:hi])
        return np.concatenate(parts)

    def prune(self, k_min: int, t_min_us: int) -> None:
        self.runs = [r for r in self.runs if r.k_end > k_min]
        if self.runs and self.runs[0].k0 < k_min:
            first = self.runs[0]
            first.values, first.k0 = first.values[k_min - first.k0 :], k_min
        stale = 0  # chunks arrive in time order (after a backward clock step a stale one waits its turn)
        while stale < len(self.raw) and self.raw[stale][1][-1] < t_min_us:
            stale += 1
        del self.raw[:stale]
        if self.raw:
            seg, times, values = self.raw[0]
            lo = int(np.searchsorted(times, t_min_us))
            self.raw[0] = (seg, times[lo:], values[lo:])
        live = {r.segment for r in self.runs} | {seg for seg, _, _ in self.raw}
        self.coverage_end = {s: e for s, e in self.coverage_end.items() if s in live}

    def rows(self) -> tuple[int, int]:
        return sum(len(r.values) for r in self.runs), sum(len(t) for _, t, _ in self.raw)


class WindowAssembler:
    """Aligns several sensors on the common grid and emits complete windows as soon as they are final.

    ``push(name, timestamp_us, samples)`` takes one chunk of physical float64 samples ``(n, channels)``
    whose first sample is at ``timestamp_us``; ``gap(name)`` ends a sensor's segment (lost data
    reported by the link); ``flush()`` ends every segment (end of a recording). Each returns the
    windows that became final, oldest first.
    """

    def __init__(self, descriptors: Sequence[SensorDescriptor], config: PipelineConfig = PipelineConfig()) -> None:
        names = [d.name for d in descriptors]
        if not names:
            raise ValueError("WindowAssembler needs at least one sensor descriptor")
        if len(set(names)) != len(names):
            raise ValueError(f"sensor names must be unique, got {names}")
        self.config = config
        self._streams = {d.name: SensorStream(d, config) for d in descriptors}
        self._buffers = {name: _SensorBuffer() for name in names}
        self._next_window: int | None = None
        self.stats = PipelineStats(sensors={name: s.stats for name, s in self._streams.items()})

    def push(self, sensor_name: str, timestamp_us: int, samples: np.ndarray) -> list[Window]:
        return self._apply(sensor_name, self._stream(sensor_name).push(timestamp_us, samples))

    def gap(self, sensor_name: str) -> list[Window]:
        """Declare lost data for a sensor: its segment ends here, windows across the break are skipped."""
        return self._apply(sensor_name, self._stream(sensor_name).gap())

    def flush(self) -> list[Window]:
        """End every sensor's stream (not counted as gaps) and return the windows that completes."""
        windows: list[Window] = []
        for name, stream in self._streams.items():
            windows += self._apply(name, stream.finish())
        return windows

    def buffered_rows(self) -> dict[str, dict[str, int]]:
        """Rows held per sensor — grid samples, raw samples, resampler history — for monitoring."""
        out = {}
        for name, buf in self._buffers.items():
            grid, raw = buf.rows()
            out[name] = {"grid": grid, "raw": raw, "history": self._streams[name].buffered_rows}
        return out

    def _stream(self, name: str) -> SensorStream:
        try:
            return self._streams[name]
        except KeyError:
            raise ValueError(f"unknown sensor {name!r}; this assembler has {sorted(self._streams)}") from None

    def _apply(self, name: str, update: StreamUpdate) -> list[Window]:
        known = self._streams[name].known_until
        if self._next_window is None and known is not None:
            # Windows start with the first grid sample any sensor delivers (or knows to be missing).
            first = int(update.grid[0][1][0]) if update.grid else known + 1
            self._next_window = -(-first // self.config.step_len)
        if self._next_window is not None:
            self._buffers[name].add(update, self._next_window * self.config.step_len)
        return self._decide()

    def _frontier(self) -> int | None:
        """Last grid index final for every sensor (lagging sensors forced forward by ``max_skew``)."""
        known = [s.known_until for s in self._streams.values()]
        skew = self.config.max_skew_periods
        if skew is None:
            return None if None in known else min(k for k in known if k is not None)
        floor = max(k for k in known if k is not None) - skew
        return min(floor if k is None else max(k, floor) for k in known)

    def _decide(self) -> list[Window]:
        if self._next_window is None:
            return []
        frontier = self._frontier()
        if frontier is None:
            return []
        cfg = self.config
        length, step, period = cfg.window_len, cfg.step_len, cfg.period_us
        last = (frontier - length + 1) // step
        windows: list[Window] = []
        w = self._next_window
        while w <= last:
            s = w * step
            end_us = (s + length) * period
            runs = {name: buf.covering(s, length, end_us) for name, buf in self._buffers.items()}
            covered = {name: run for name, run in runs.items() if run is not None}
            if len(covered) == len(runs):
                windows.append(self._window(s, covered))
                w += 1
                continue
            missing = [name for name in runs if name not in covered]
            resume = w + 1
            for name in missing:
                nxt = self._buffers[name].next_run_after(s)
                resume = max(resume, last + 1 if nxt is None else -(-nxt // step))
            resume = min(resume, last + 1)
            self.stats.windows_skipped += resume - w
            log.debug(
                "windows skipped: a sensor does not cover them",
                extra={"sensors": missing, "start_us": s * period, "count": resume - w},
            )
            w = resume
        if w != self._next_window:
            self._next_window = w
            for buf in self._buffers.values():
                buf.prune(w * step, w * step * period)
        self.stats.windows_emitted += len(windows)
        return windows

    def _window(self, s: int, runs: Mapping[str, _Run]) -> Window:
        length, period = self.config.window_len, self.config.period_us
        start_us, end_us = s * period, (s + length) * period
        data = {name: run.values[s - run.k0 : s - run.k0 + length].copy() for name, run in runs.items()}
        raw, rates = {}, {}
        for name, stream in self._streams.items():
            if stream.keeps_raw:
                raw[name] = self._buffers[name].raw_in(runs[name].segment, start_us, end_us)
                rates[name] = float(stream.descriptor.sample_rate_hz)
        return Window(start_us, end_us, data, raw, rates)


def windows_from_arrays(
    descriptors: Sequence[SensorDescriptor],
    arrays: Mapping[str, tuple[int, np.ndarray]],
    config: PipelineConfig = PipelineConfig(),
) -> list[Window]:
    """Batch helper: every window of whole recordings ``{name: (t0_us, (n, channels) samples)}``.

    One push per sensor, then ``flush``. Identical to streaming the same samples in any chunking
    (the pipeline is chunk-invariant), except that the skew limit is lifted: a whole array pushed
    first would otherwise look infinitely far ahead of the sensors not pushed yet.
    """
    names = {d.name for d in descriptors}
    if set(arrays) != names:
        raise ValueError(
            f"arrays must hold exactly the described sensors: missing {sorted(names - set(arrays))}, "
            f"unknown {sorted(set(arrays) - names)} (every window needs every sensor)"
        )
    assembler = WindowAssembler(descriptors, dataclasses.replace(config, max_skew_s=None))
    windows: list[Window] = []
    for name, (t0_us, samples) in arrays.items():
        windows += assembler.push(name, t0_us, samples)
    return windows + assembler.flush()
