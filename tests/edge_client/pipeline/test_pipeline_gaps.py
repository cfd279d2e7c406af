"""Gaps, non-finite samples, clock drift, silent sensors and bounded memory.

The gap tests use an exact oracle: a stream with a break must give the windows of its two parts
processed *separately* (fresh filter and resampler state each, bit-identical), and nothing that
straddles the break.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import sosfreqz

from edge_client.pipeline import PipelineConfig, Window, WindowAssembler, stage_sos, windows_from_arrays
from firmware_bridge.descriptors import ChannelSpec, SensorDescriptor
from tests.edge_client.pipeline.pipeline_data import (
    assert_windows_identical,
    chunk_time,
    ecg,
    imu,
    pressure,
    push_chunked,
    watch_series,
)

T0 = 1_700_000_000_000_000 + 12_345
STEP_US = 2_000_000
NO_SKEW = PipelineConfig(max_skew_s=None)


def _oneshot(t0: int, x: np.ndarray) -> list[Window]:
    return windows_from_arrays([imu()], {"watch": (t0, x)})


def _skipped_between(a: list[Window], b: list[Window]) -> int:
    return (b[0].start_us - a[-1].start_us) // STEP_US - 1


def test_timestamp_jump_resets_state_and_skips_windows_across_the_gap() -> None:
    x = watch_series()[1]  # 2458 samples, 49 s
    split, jump_us = 1200, 3_000_000
    t_b = chunk_time(T0, split, 50.0) + jump_us
    asm = WindowAssembler([imu()], NO_SKEW)
    got = push_chunked(asm, "watch", T0, x[:split], 50.0, list(range(100, split, 100)))
    got += push_chunked(asm, "watch", t_b, x[split:], 50.0, list(range(100, len(x) - split, 100)))
    got += asm.flush()
    first, second = _oneshot(T0, x[:split]), _oneshot(t_b, x[split:])
    assert_windows_identical(got, first + second)
    stats = asm.stats
    assert stats.sensors["watch"].gaps == 1  # the jump (flush() ending the stream is no gap)
    assert stats.windows_skipped == _skipped_between(first, second) >= 2
    assert stats.windows_emitted == len(got)


def test_explicit_gap_call_splits_the_stream_without_a_time_jump() -> None:
    x = watch_series()[4]
    split = 1333
    asm = WindowAssembler([imu()], NO_SKEW)
    got = asm.push("watch", T0, x[:split]) + asm.gap("watch")
    got += asm.push("watch", chunk_time(T0, split, 50.0), x[split:]) + asm.flush()
    first, second = _oneshot(T0, x[:split]), _oneshot(chunk_time(T0, split, 50.0), x[split:])
    assert_windows_identical(got, first + second)
    assert asm.stats.windows_skipped == _skipped_between(first, second) >= 1
    assert asm.stats.sensors["watch"].gaps == 1


@pytest.mark.parametrize(("jump_periods", "gaps", "resyncs"), [(0.4, 0, 0), (1.4, 0, 1), (1.6, 1, 0), (-1.6, 1, 0)])
def test_gap_threshold_is_one_and_a_half_sample_periods(jump_periods: float, gaps: int, resyncs: int) -> None:
    x = watch_series()[0]
    asm = WindowAssembler([imu()], NO_SKEW)
    asm.push("watch", T0, x[:600])
    asm.push("watch", chunk_time(T0, 600, 50.0) + round(jump_periods * 20_000), x[600:])
    assert (asm.stats.sensors["watch"].gaps, asm.stats.sensors["watch"].resyncs) == (gaps, resyncs)


def test_non_finite_samples_end_the_segment_like_lost_data() -> None:
    x = watch_series()[5].copy()
    x[1000:1010, 2] = np.nan
    x[1005, 4] = np.inf
    asm = WindowAssembler([imu()], NO_SKEW)
    got = push_chunked(asm, "watch", T0, x, 50.0, [500, 1003, 1007, 1500]) + asm.flush()
    first, second = _oneshot(T0, x[:1000]), _oneshot(chunk_time(T0, 1010, 50.0), x[1010:])
    assert_windows_identical(got, first + second)
    assert asm.stats.sensors["watch"].nonfinite_samples == 10
    assert all(np.isfinite(w.data["watch"]).all() for w in got)


def test_backward_clock_step_never_emits_a_window_twice() -> None:
    x = watch_series()[1]
    split = 1500
    t_end_a = chunk_time(T0, split, 50.0)
    t_b = t_end_a - 5_000_000
    asm = WindowAssembler([imu()], NO_SKEW)
    got = asm.push("watch", T0, x[:split]) + asm.push("watch", t_b, x[split:]) + asm.flush()
    starts = [w.start_us for w in got]
    assert starts == sorted(set(starts))
    s = asm.stats.sensors["watch"]
    assert s.gaps == 1 and s.overlap_dropped == 5 * 20
    # The first part's windows, then only the new segment's windows made of grid instants not
    # delivered before the step (from A's last instant on) — each bit for bit the new segment's own.
    first_new_us = (-(-t_end_a // 50_000)) * 50_000
    want = _oneshot(T0, x[:split]) + [w for w in _oneshot(t_b, x[split:]) if w.start_us >= first_new_us]
    assert_windows_identical(got, want)
    assert len(want) - len(_oneshot(T0, x[:split])) >= 5


def _drifting_sensor() -> SensorDescriptor:
    return SensorDescriptor(9, "wrist", "imu", 1000.0, (ChannelSpec("ax", "g"),), "float32")


def test_clock_drift_is_absorbed_without_gaps_and_stays_on_time() -> None:
    """A sensor whose clock runs 200 ppm fast relative to the common clock: its frames' timestamps
    (true times) drift 12 ms from the nominal rate over 60 s. The timebase re-anchors whenever the
    drift exceeds half a sample, so no window is lost and every grid value is the motion at its
    true instant (without re-anchoring the 12 ms drift alone would cost ~0.07 at 0.9 Hz)."""
    fs, ppm, f = 1000.0, 200e-6, 0.9
    n = int(60 * fs)
    t_true = T0 + np.arange(n) * (1e6 / fs) * (1 + ppm)
    x = np.sin(2 * np.pi * f * (t_true - T0) / 1e6)[:, None]
    asm = WindowAssembler([_drifting_sensor()], NO_SKEW)
    got = []
    for a in range(0, n, 50):
        got += asm.push("wrist", round(t_true[a]), x[a : a + 50])
    got += asm.flush()
    s = asm.stats.sensors["wrist"]
    assert s.gaps == 0 and s.resyncs >= 20
    assert asm.stats.windows_skipped == 0 and len(got) == 28
    _, h = sosfreqz(stage_sos(fs, 20.0, 5.0, 5), worN=[f], fs=20.0)  # the low-pass runs on the 20 Hz grid
    worst = 0.0
    for w in got[1:-1]:
        tau = w.start_us + np.arange(80) * 50_000
        want = abs(h[0]) * np.sin(2 * np.pi * f * (tau - T0) / 1e6 + np.angle(h[0]))
        worst = max(worst, float(np.abs(w.data["wrist"][:, 0] - want).max()))
    assert worst < 4e-3  # FIR ripple ~1.4e-3 plus at most half a sample (0.5 ms) of timing


def test_a_silent_sensor_cannot_make_the_others_buffer_forever() -> None:
    x = np.tile(watch_series()[0], (3, 1))[: 50 * 80]  # 80 s
    cfg = PipelineConfig(max_skew_s=10.0)
    asm = WindowAssembler([imu(), ecg()], cfg)
    peak = 0
    for a in range(0, len(x), 50):
        assert asm.push("watch", chunk_time(T0, a, 50.0), x[a : a + 50]) == []
        peak = max(peak, asm.buffered_rows()["watch"]["grid"])
    assert peak <= (10 + 4 + 2 + 1) * 20
    assert asm.stats.windows_skipped >= 25
    # The ECG comes alive: from its first complete window on, windows flow again.
    y = np.zeros((2048 * 20, 1))
    t_ecg = chunk_time(T0, len(x), 50.0) - 15_000_000
    got = push_chunked(asm, "ecg", t_ecg, y, 2048.0, list(range(2048, len(y), 2048)))
    got += asm.push("watch", chunk_time(T0, len(x), 50.0), watch_series()[1][:1000])
    assert len(got) >= 5 and all(w.start_us >= t_ecg for w in got)
    # With no skew limit the same silence keeps everything (the batch helper's setting).
    asm = WindowAssembler([imu(), ecg()], NO_SKEW)
    asm.push("watch", T0, x)
    assert asm.buffered_rows()["watch"]["grid"] >= 75 * 20 and asm.stats.windows_skipped == 0


def test_memory_stays_bounded_over_a_long_three_sensor_stream() -> None:
    """20 minutes of IMU (50 Hz), ECG (250 Hz) and pressure mat (10 Hz) in 1 s frames: every window
    is emitted and what the assembler holds never grows past a few windows' worth."""
    minutes = 20
    rng = np.random.default_rng(7)
    sensors = [(imu(), 50.0, 6), (ecg(rate_hz=250.0), 250.0, 1), (pressure(), 10.0, 4)]
    asm = WindowAssembler([d for d, _, _ in sensors])
    peaks: list[dict[str, dict[str, int]]] = []
    emitted = 0
    for second in range(minutes * 60):
        for desc, fs, ch in sensors:
            n = int(fs)
            chunk = rng.standard_normal((n, ch)) + np.sin(second / 10)
            emitted += len(asm.push(desc.name, T0 + second * 1_000_000, chunk))
        if second % 60 == 59:
            peaks.append(asm.buffered_rows())
    emitted += len(asm.flush())
    assert emitted == (minutes * 60 - 4) // 2 and asm.stats.windows_skipped == 0
    for rows in peaks:
        assert rows["watch"]["grid"] <= 80 + 40 + 20 * 2  # one window + one step + latency and a frame
        assert rows["ecg"]["raw"] <= 250 * (4 + 2 + 2)
        assert rows["watch"]["history"] <= 2 * 25 + 4 + 50 and rows["ecg"]["history"] <= 2 * 125 + 4 + 250
    assert peaks[-1] == peaks[0]  # steady state: the same footprint after 1 and after 20 minutes
    assert asm.stats.sensors["ecg"].samples_in == minutes * 60 * 250
    assert asm.stats.sensors["ecg"].samples_out == asm.stats.sensors["watch"].samples_out
