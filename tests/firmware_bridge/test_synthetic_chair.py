"""The synthetic five-sensor chair: real sources where it claims them, sensor-like frames, plausible pressure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.signal import find_peaks

from edge_client.processing import extract_recording
from firmware_bridge.frames import SampleFrame, to_physical
from firmware_bridge.importers import seglearn_watch
from firmware_bridge.importers import synthetic_chair as chair
from firmware_bridge.recording import Recording

DURATION_S = 200.0  # longer than the 119 s ECG loop: one loop join inside


@pytest.fixture(scope="module")
def session() -> chair.ChairSession:
    return chair.generate(DURATION_S, seed=3, relief_interval_s=40.0)


def frames_of(session: chair.ChairSession, sensor_id: int) -> list[SampleFrame]:
    return [f for f in session.frames if f.sensor_id == sensor_id]


def values_of(session: chair.ChairSession, sensor_id: int) -> np.ndarray:
    d = {d.sensor_id: d for d in session.metadata.descriptors}[sensor_id]
    return np.concatenate([to_physical(f, d) for f in frames_of(session, sensor_id)])


def test_five_sensors_of_the_declared_kinds_rates_and_channels() -> None:
    ds = chair.chair_descriptors()
    assert [(d.sensor_id, d.name, d.kind, d.sample_rate_hz, d.n_channels, d.sample_format) for d in ds] == [
        (1, "wrist", "imu", 50.0, 6, "int16"),
        (2, "frame", "imu", 50.0, 6, "int16"),
        (3, "wheel", "wheel_imu", 50.0, 6, "int16"),
        (4, "ecg", "ecg", 250.0, 1, "int16"),
        (5, "seat", "pressure", 10.0, 16, "int16"),
    ]
    assert [c.unit for c in ds[0].channels] == ["g"] * 3 + ["rad/s"] * 3
    assert {c.unit for c in ds[4].channels} == {"mmHg"}


def test_frames_are_sensor_like_continuous_and_in_sending_order(session: chair.ChairSession) -> None:
    rates = {d.sensor_id: d.sample_rate_hz for d in session.metadata.descriptors}
    sizes = {1: 25, 2: 25, 3: 25, 4: 50, 5: 5}
    for sensor_id, rate in rates.items():
        frames = frames_of(session, sensor_id)
        starts = np.cumsum([0] + [len(f.samples) for f in frames[:-1]])
        t0 = chair.START_OFFSET_US[sensor_id]
        assert [f.timestamp_us for f in frames] == [t0 + round(i * 1e6 / rate) for i in starts]
        assert [f.seq for f in frames] == list(range(len(frames)))
        assert {len(f.samples) for f in frames[:-1]} == {sizes[sensor_id]}
        total = sum(len(f.samples) for f in frames)
        assert t0 + (total - 1) * 1e6 / rate < DURATION_S * 1e6 <= t0 + total * 1e6 / rate  # covers the session
    due = [f.timestamp_us + round(len(f.samples) * 1e6 / rates[f.sensor_id]) for f in session.frames]
    assert due == sorted(due)


def test_imus_carry_the_seglearn_watch_signals_and_the_wrist_its_labels(session: chair.ChairSession) -> None:
    watch = chair.WatchSource.load()
    for sensor_id, start in ((1, 0), (2, len(watch.x) // 3), (3, 2 * len(watch.x) // 3)):
        values = values_of(session, sensor_id)
        expected = watch.take(start, len(values))
        lsb = np.array([chair.ACCEL_SCALE_G] * 3 + [chair.GYRO_SCALE_RAD_S] * 3)
        assert (np.abs(values - expected) <= lsb / 2 + 1e-12).all()  # int16 quantisation only
    data = seglearn_watch.load_dataset()
    series = [(str(data["y_labels"][int(y)]), len(x)) for y, x in zip(data["y"], data["X"])]
    bounds = np.cumsum([0] + [n for _, n in series]) * 20_000
    labels = session.labels
    assert [a.label for a in labels] == [label for label, _ in series[: len(labels)]]
    assert [a.start_us for a in labels] == bounds[: len(labels)].tolist()
    assert labels[-1].end_us == min(int(bounds[len(labels)]), len(values_of(session, 1)) * 20_000)


def test_ecg_is_the_real_ecg_looped_without_breaking_the_rhythm(session: chair.ChairSession) -> None:
    loop = chair.ecg_loop_250hz()
    ecg = values_of(session, 4)[:, 0]
    assert len(ecg) > len(loop)  # the loop joins once
    assert np.abs(ecg[: len(loop)] - loop).max() <= chair.ECG_SCALE_MV / 2 + 1e-12
    peaks, _ = find_peaks(ecg, distance=75, height=0.5 * np.percentile(ecg, 99))
    rr = np.diff(peaks) / chair.ECG_RATE_HZ
    assert 50 < 60 / rr.mean() < 100
    assert rr.max() < 1.5 * np.median(rr) and rr.min() > 0.5 * np.median(rr)  # no beat lost or doubled at the join


def test_pressure_mat_is_a_plausible_seated_load_with_reliefs(session: chair.ChairSession) -> None:
    p = values_of(session, 5).reshape(-1, 4, 4)
    t = chair.START_OFFSET_US[5] / 1e6 + np.arange(len(p)) / chair.PRESSURE_RATE_HZ
    assert (p >= 0).all() and 15 < p.mean() < 80
    reliefs = session.metadata.extra["reliefs"]
    assert len(reliefs) >= 2 and {r["kind"] for r in reliefs} <= set(chair.RELIEF_KINDS)
    outside = np.ones(len(t), dtype=bool)
    for r in reliefs:
        outside &= (t < r["start_s"] - 5) | (t > r["end_s"] + 5)
    seated = p[outside].mean(axis=0)
    assert seated[2, 1:3].mean() == pytest.approx(seated.max(), rel=0.3)  # ischial tuberosities carry the most
    for r in reliefs:
        mid = p[(t > r["start_s"] + 3) & (t < r["end_s"] - 3)].mean(axis=0)
        unloaded = {
            "forward_lean": mid[2:] / seated[2:],
            "push_up": mid / seated,
            "lean_left": mid[:, 2:] / seated[:, 2:],
            "lean_right": mid[:, :2] / seated[:, :2],
        }[r["kind"]]
        assert unloaded.mean() < 0.4, r


def test_generation_is_deterministic_per_seed() -> None:
    a = chair.generate(30.0, seed=1)
    b = chair.generate(30.0, seed=1)
    c = chair.generate(30.0, seed=2)
    assert a.frames == b.frames and a.labels == b.labels and a.metadata == b.metadata
    assert values_of(a, 1).tolist() == values_of(c, 1).tolist()  # real data does not depend on the seed
    assert not np.array_equal(values_of(a, 5), values_of(c, 5))


def test_recording_replays_through_the_gateway_data_path(tmp_path: Path) -> None:
    path = chair.write_chair(tmp_path / "chair.wfrec", 30.0)
    rec = Recording.load(path)
    assert sorted(rec.descriptors) == [1, 2, 3, 4, 5] and rec.discarded_bytes == 0
    table, stats = extract_recording(path)
    assert stats.unknown_sensor_frames == 0
    # windows [2 s, 6 s) ... [26 s, 30 s): the mat's first sample comes 12 ms after 0, so [0, 4) is incomplete
    assert table.start_us.tolist() == [k * 2_000_000 for k in range(1, 14)]
    assert {n.split(".")[0] for n in table.names} == {"wrist", "frame", "wheel", "ecg", "seat"}
    assert np.isfinite(table.X).all()
    # the wrist's exercise labels: a window inside one series gets its label, one across two series none
    expected = [
        next((a.label for a in rec.annotations if a.start_us <= s and e <= a.end_us), None)
        for s, e in zip(table.start_us, table.end_us)
    ]
    assert list(table.labels) == expected and expected.count(None) < len(expected) / 2
