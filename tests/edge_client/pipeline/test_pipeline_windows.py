"""Window assembly: chunk invariance on real data, absolute-grid alignment of several sensors, raw ECG."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.signal import butter, sosfilt, sosfilt_zi, sosfreqz

from edge_client.pipeline import PipelineConfig, StreamResampler, WindowAssembler, stage_sos, windows_from_arrays
from tests.edge_client.pipeline.pipeline_data import (
    assert_windows_identical,
    chunk_time,
    ecg,
    ecg_1000,
    ecg_2048,
    imu,
    pressure,
    push_chunked,
    watch_series,
)

EPOCH_US = 1_700_000_000_000_000  # realistic common-clock values: Unix time in microseconds
NO_SKEW = PipelineConfig(max_skew_s=None)


def _cuts(draw_cuts: list[int], n: int) -> list[int]:
    return sorted(c % (n + 1) for c in draw_cuts)


@settings(max_examples=25, deadline=None)
@given(
    series=st.integers(0, 139),
    t0=st.integers(0, 2 * EPOCH_US),
    cuts=st.lists(st.integers(0, 5000), max_size=40),
    nan_rows=st.lists(st.integers(0, 5000), max_size=3),
)
def test_imu_windows_are_bit_identical_for_any_chunking(
    series: int, t0: int, cuts: list[int], nan_rows: list[int]
) -> None:
    x = watch_series()[series].copy()
    for r in nan_rows:  # NaN rows split segments; that must not depend on chunking either
        x[r % len(x), r % 6] = np.nan
    want = windows_from_arrays([imu()], {"watch": (t0, x)})
    asm = WindowAssembler([imu()], NO_SKEW)
    got = push_chunked(asm, "watch", t0, x, 50.0, _cuts(cuts, len(x))) + asm.flush()
    assert_windows_identical(got, want)
    assert len(want) >= (len(x) / 50 - 4 - 2 * len(nan_rows) * 4) // 2 - 2
    assert all(np.isfinite(w.data["watch"]).all() for w in want)


@settings(max_examples=10, deadline=None)
@given(t0=st.integers(0, 2 * EPOCH_US), cuts=st.lists(st.integers(0, 2048 * 30), max_size=60))
def test_ecg_2048_windows_and_raw_samples_are_bit_identical_for_any_chunking(t0: int, cuts: list[int]) -> None:
    x = ecg_2048()[: 2048 * 30]
    want = windows_from_arrays([ecg()], {"ecg": (t0, x)})
    asm = WindowAssembler([ecg()], NO_SKEW)
    got = push_chunked(asm, "ecg", t0, x, 2048.0, _cuts(cuts, len(x))) + asm.flush()
    assert_windows_identical(got, want)
    assert len(want) >= 12
    assert all(len(w.raw["ecg"]) == 8192 and w.raw_rate_hz == {"ecg": 2048.0} for w in want)


def test_one_sample_chunks_equal_one_shot() -> None:
    x = watch_series()[7][:900]
    want = windows_from_arrays([imu()], {"watch": (EPOCH_US + 3, x)})
    asm = WindowAssembler([imu()], NO_SKEW)
    got = push_chunked(asm, "watch", EPOCH_US + 3, x, 50.0, list(range(1, len(x)))) + asm.flush()
    assert_windows_identical(got, want)


@settings(max_examples=10, deadline=None)
@given(
    order=st.randoms(use_true_random=False),
    offsets=st.tuples(st.integers(0, 10**7), st.integers(0, 10**7)),
    n_chunks=st.tuples(st.integers(1, 40), st.integers(1, 40)),
)
def test_two_sensors_in_any_interleaving_give_the_one_shot_windows(
    order,
    offsets: tuple[int, int],  # type: ignore[no-untyped-def]
    n_chunks: tuple[int, int],
) -> None:
    streams = {"watch": (imu(), watch_series()[11], 50.0), "ecg": (ecg(rate_hz=1000.0), ecg_1000(), 1000.0)}
    t0 = {name: EPOCH_US + off for name, off in zip(streams, offsets)}
    descs = [d for d, _, _ in streams.values()]
    want = windows_from_arrays(descs, {name: (t0[name], x) for name, (_, x, _) in streams.items()})
    chunks = []
    for (name, (_, x, fs)), n in zip(streams.items(), n_chunks):
        bounds = np.linspace(0, len(x), n + 1).astype(int)
        chunks += [(name, chunk_time(t0[name], a, fs), x[a:b], a) for a, b in zip(bounds[:-1], bounds[1:])]
    order.shuffle(chunks)
    chunks.sort(key=lambda c: (c[0], c[3]))  # each sensor's chunks stay in order...
    merged, queues = [], {name: [c for c in chunks if c[0] == name] for name in streams}
    while any(queues.values()):  # ...but the sensors interleave randomly
        name = order.choice([n for n, q in queues.items() if q])
        merged.append(queues[name].pop(0))
    asm = WindowAssembler(descs, NO_SKEW)
    got = [w for name, ts, x, _ in merged for w in asm.push(name, ts, x)] + asm.flush()
    assert_windows_identical(got, want)
    assert len(want) >= 5


def test_windows_are_anchored_on_the_absolute_grid_and_overlap_by_one_step() -> None:
    t0 = EPOCH_US + 1_234_567  # not on the grid
    ws = windows_from_arrays([imu()], {"watch": (t0, watch_series()[1])})
    assert len(ws) >= 20
    for w in ws:
        assert w.start_us % 2_000_000 == 0 and w.end_us - w.start_us == 4_000_000
        assert w.start_us >= t0 and w.data["watch"].shape == (80, 6) and w.data["watch"].dtype == np.float64
        assert w.raw == {} and w.raw_rate_hz == {}
    for a, b in zip(ws, ws[1:]):
        assert b.start_us - a.start_us == 2_000_000
        assert a.data["watch"][40:].tobytes() == b.data["watch"][:40].tobytes()


def test_shifting_the_input_by_one_step_shifts_the_windows_exactly() -> None:
    x = watch_series()[2]
    a = windows_from_arrays([imu()], {"watch": (EPOCH_US + 777, x)})
    b = windows_from_arrays([imu()], {"watch": (EPOCH_US + 777 + 2_000_000, x)})
    assert [w.start_us + 2_000_000 for w in a] == [w.start_us for w in b]
    assert all(u.data["watch"].tobytes() == v.data["watch"].tobytes() for u, v in zip(a, b))


def test_raw_ecg_is_the_unfiltered_input_inside_the_window_span() -> None:
    x = ecg_2048()[: 2048 * 20]
    t0 = EPOCH_US + 333
    ws = windows_from_arrays([ecg()], {"ecg": (t0, x)})
    fs = Fraction(2048)
    for w in ws:
        lo = math.ceil((w.start_us - t0) * fs / 10**6)  # first sample at or after start_us
        hi = math.ceil((w.end_us - t0) * fs / 10**6)  # first sample at or after end_us
        assert w.raw["ecg"].tobytes() == x[lo:hi].tobytes() and hi - lo == 8192
    # ...while the 20 Hz path of an ECG is low-passed at the default 5 Hz: its R-peaks are gone.
    assert max(np.abs(np.diff(w.data["ecg"][:, 0])).max() for w in ws) < 0.2 * np.ptp(x)


@pytest.mark.parametrize(("kind", "filtered"), [("imu", True), ("wheel_imu", False)])
def test_windows_are_the_resampler_output_through_scipys_butterworth_at_20_hz(kind: str, filtered: bool) -> None:
    """The design's oracle, bit for bit: a window holds ``StreamResampler``'s 20 Hz outputs of the raw
    samples, filtered by ``scipy.signal.sosfilt`` with ``butter(5, 5, fs=20)`` from the steady state
    of the first output — or, for the wheel IMU (10 Hz cut-off = the grid's Nyquist), unfiltered."""
    x = watch_series()[1]
    t0 = EPOCH_US + 4_321
    ws = windows_from_arrays([imu(kind=kind)], {"watch": (t0, x)})
    r = StreamResampler(50.0, 20.0, 50_000)
    r.start(t0, x[0])
    parts = [r.push(x), r.finish()]
    k = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    if filtered:
        sos = butter(5, 5.0, fs=20.0, output="sos")
        y, _ = sosfilt(sos, y, axis=0, zi=sosfilt_zi(sos)[:, :, None] * y[0][None, None, :])
    assert len(ws) >= 20
    for w in ws:
        i = w.start_us // 50_000 - int(k[0])
        assert w.data["watch"].tobytes() == y[i : i + 80].tobytes()


def _expected(tau_us: np.ndarray, comps: list[tuple[float, float, float]], sos: np.ndarray | None) -> np.ndarray:
    """Steady-state output for a sum of sinusoids: each through the sensor's low-pass on the 20 Hz grid
    (scipy's frequency response of the designed sections; FIR gain ~1)."""
    t = (tau_us - EPOCH_US) / 1e6
    out = np.zeros(len(tau_us))
    for amp, f, ph in comps:
        h = 1.0 + 0j if sos is None else sosfreqz(sos, worN=[f], fs=20.0)[1][0]
        out += amp * abs(h) * np.sin(2 * np.pi * f * t + ph + np.angle(h))
    return out


def test_imu_ecg_and_pressure_mat_at_different_rates_align_on_one_grid() -> None:
    """A 50 Hz IMU, a 250 Hz ECG and a 10 Hz pressure mat, started at unrelated microseconds, sense the
    same slow motion. Every window holds all three, and each sensor's 20 Hz samples equal the motion
    at the window's grid instants (through that sensor's low-pass, which runs on the 20 Hz grid:
    the mat's 10 Hz rate leaves its 5 Hz cut-off at its own Nyquist, so it is not low-passed). An
    error of 1 ms in any sensor's placement would show as ~6e-3 on the 1.9 Hz component; the
    tolerance is 3e-3 (FIR ripple ~1.4e-3 x 1.5)."""
    sensors = {
        "watch": (imu(), 50.0, 7_919),
        "ecg": (ecg(rate_hz=250.0), 250.0, 1_001),
        "mat": (pressure(), 10.0, 63_333),
    }
    duration_s = 40
    arrays, comps_of = {}, {}
    for name, (desc, fs, offset) in sensors.items():
        t0 = EPOCH_US + offset
        t = (t0 - EPOCH_US) / 1e6 + np.arange(int(duration_s * fs)) / fs
        comps_of[name] = [[(1.0, 0.7, 0.5 * c), (0.5, 1.9, 1.0 + c)] for c in range(desc.n_channels)]
        arrays[name] = (
            t0,
            np.stack([sum(a * np.sin(2 * np.pi * f * t + p) for a, f, p in comps) for comps in comps_of[name]], axis=1),
        )
    ws = windows_from_arrays([d for d, _, _ in sensors.values()], arrays)
    assert len(ws) == (duration_s - 4) // 2  # every window but the one cut by the latest start
    cfg = PipelineConfig()
    worst = 0.0
    for w in ws:
        assert set(w.data) == {"watch", "ecg", "mat"} and set(w.raw) == {"ecg"}
        tau = w.start_us + np.arange(80) * 50_000
        if w.end_us > EPOCH_US + (duration_s - 1) * 1_000_000:
            continue  # the last window reaches into the end-of-data hold extension (flush)
        for name, (desc, fs, _) in sensors.items():
            sos = stage_sos(fs, cfg.target_rate_hz, cfg.cutoff_for(desc.kind), cfg.filter_order)
            assert (sos is None) == (name == "mat")
            for c, comps in enumerate(comps_of[name]):
                worst = max(worst, float(np.abs(w.data[name][:, c] - _expected(tau, comps, sos)).max()))
    assert worst < 3e-3


def test_batch_helper_needs_exactly_the_described_sensors() -> None:
    x = watch_series()[0]
    with pytest.raises(ValueError, match="missing \\['ecg'\\]"):
        windows_from_arrays([imu(), ecg()], {"watch": (0, x)})
    with pytest.raises(ValueError, match="unknown \\['other'\\]"):
        windows_from_arrays([imu()], {"watch": (0, x), "other": (0, x)})


def test_invalid_use_fails_with_actionable_messages() -> None:
    with pytest.raises(ValueError, match="unique"):
        WindowAssembler([imu(), imu()])
    with pytest.raises(ValueError, match="at least one"):
        WindowAssembler([])
    asm = WindowAssembler([imu()])
    with pytest.raises(ValueError, match="unknown sensor 'ecg'"):
        asm.push("ecg", 0, np.zeros((3, 1)))
    with pytest.raises(ValueError, match=r"shape \(n, 6\)"):
        asm.push("watch", 0, np.zeros((3, 5)))
    with pytest.raises(TypeError):
        asm.push("watch", 1.5, np.zeros((3, 6)))  # type: ignore[arg-type]
    assert asm.push("watch", 0, np.zeros((0, 6))) == [] and asm.stats.sensors["watch"].samples_in == 0
    with pytest.raises(ValueError, match="whole number of microseconds"):
        PipelineConfig(target_rate_hz=30.0)
    with pytest.raises(ValueError, match="whole number of grid periods"):
        PipelineConfig(window_s=4.01)
    with pytest.raises(ValueError, match="'default'"):
        PipelineConfig(cutoff_hz={"imu": 5.0})
    with pytest.raises(ValueError, match="resync_tolerance_periods < gap_tolerance_periods"):
        PipelineConfig(gap_tolerance_periods=0.4)


def test_config_derives_the_grid() -> None:
    cfg = PipelineConfig()
    assert (cfg.period_us, cfg.window_len, cfg.step_len, cfg.max_skew_periods) == (50_000, 80, 40, 600)
    assert cfg.cutoff_for("wheel_imu") == 10.0 and cfg.cutoff_for("ppg") == 5.0
