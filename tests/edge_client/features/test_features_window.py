"""``window_features`` / ``feature_names``: one vector per pipeline window, all sensors, stable names."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from edge_client.features import (
    channel_feature_names,
    ecg_feature_names,
    ecg_features,
    extract,
    feature_names,
    window_features,
)
from firmware_bridge.descriptors import ChannelSpec, SensorDescriptor
from tests.edge_client.features.features_ecg_reference import MEDICAL_R_PEAKS, PYHRV_R_PEAKS
from tests.edge_client.features.features_real_data import RATE_HZ, medical_ecg, pyhrv_ecg, watch_series, watch_windows

WATCH = SensorDescriptor(
    1,
    "watch",
    "imu",
    50.0,
    tuple(
        ChannelSpec(n, u)
        for n, u in (("ax", "g"), ("ay", "g"), ("az", "g"), ("wx", "rad/s"), ("wy", "rad/s"), ("wz", "rad/s"))
    ),
    "float32",
)
CHEST = SensorDescriptor(2, "chest", "ecg", 2048.0, (ChannelSpec("lead1", "mv"),))
SEAT = SensorDescriptor(3, "seat", "pressure", 10.0, (ChannelSpec("left", "kpa"), ChannelSpec("right", "kpa")))


@dataclass
class StandInWindow:
    """Duck-typed edge_client.pipeline.Window."""

    start_us: int
    end_us: int
    data: dict[str, np.ndarray]
    raw: dict[str, np.ndarray] = field(default_factory=dict)
    raw_rate_hz: dict[str, float] = field(default_factory=dict)


def real_window() -> StandInWindow:
    """Seconds 10-14 of the watch and of the pyphysio ECG (2048 Hz), a made-up seat mat."""
    ecg, fs = medical_ecg()
    seat = np.column_stack([np.linspace(20, 21, 80), np.full(80, 18.5)])
    return StandInWindow(
        10_000_000,
        14_000_000,
        data={"watch": watch_windows((0,))[5], "chest": np.zeros((80, 1)), "seat": seat},
        raw={"chest": ecg[10 * 2048 : 14 * 2048, None]},
        raw_rate_hz={"chest": fs},
    )


def test_names_are_sensor_channel_feature_in_vector_order() -> None:
    names = feature_names([WATCH, CHEST, SEAT])
    per_channel, per_ecg = len(channel_feature_names()), len(ecg_feature_names())
    assert len(names) == len(set(names)) == 6 * per_channel + 1 * (per_channel + per_ecg) + 2 * per_channel
    assert names[0] == "watch.ax.mean" and names[per_channel] == "watch.ay.mean"
    assert names[6 * per_channel + per_channel] == "chest.lead1.ecg_n_beats"
    assert names[-1] == "seat.right.missing_fraction"
    assert all(name.count(".") == 2 for name in names)


def test_vector_is_each_sensors_features_in_descriptor_order() -> None:
    window = real_window()
    vector = window_features(window, [WATCH, CHEST, SEAT])
    assert vector.shape == (len(feature_names([WATCH, CHEST, SEAT])),) and np.isfinite(vector).all()
    expected = np.concatenate(
        [
            extract(window.data["watch"][None], RATE_HZ)[0],
            extract(window.data["chest"][None], RATE_HZ)[0],
            ecg_features(window.raw["chest"][:, 0], 2048.0),
            extract(window.data["seat"][None], RATE_HZ)[0],
        ]
    )
    np.testing.assert_array_equal(vector, expected)
    named = dict(zip(feature_names([WATCH, CHEST, SEAT]), vector))
    guard = round(0.05 * 2048)
    reference = MEDICAL_R_PEAKS[(MEDICAL_R_PEAKS >= 10 * 2048 + guard) & (MEDICAL_R_PEAKS < 14 * 2048 - guard)]
    assert named["chest.lead1.ecg_hr_mean_bpm"] == pytest.approx(60 * 2048 / np.diff(reference).mean(), abs=2)


def test_one_channel_raw_ecg_may_be_one_dimensional() -> None:
    window = real_window()
    flat = StandInWindow(
        window.start_us, window.end_us, window.data, {"chest": window.raw["chest"][:, 0]}, window.raw_rate_hz
    )
    np.testing.assert_array_equal(window_features(flat, [CHEST]), window_features(window, [CHEST]))


@pytest.mark.parametrize(
    "breakage, message",
    [
        (lambda w: w.data.pop("seat"), "no 20 Hz data for sensor 'seat'"),
        (lambda w: w.raw.pop("chest"), "no raw ECG for sensor 'chest'"),
        (lambda w: w.raw_rate_hz.pop("chest"), "no raw_rate_hz"),
        (lambda w: w.data.__setitem__("watch", np.zeros((80, 3))), "expected \\(n_samples, 6\\)"),
    ],
)
def test_a_window_that_does_not_match_the_descriptors_is_rejected(breakage, message: str) -> None:
    window = real_window()
    breakage(window)
    with pytest.raises(ValueError, match=message):
        window_features(window, [WATCH, CHEST, SEAT])


def test_duplicate_sensor_names_are_rejected() -> None:
    twin = SensorDescriptor(9, "watch", "imu", 50.0, (ChannelSpec("ax", "g"),))
    with pytest.raises(ValueError, match="unique"):
        feature_names([WATCH, twin])


def test_missing_samples_are_logged_with_their_sensor(caplog: pytest.LogCaptureFixture) -> None:
    window = real_window()
    window.data["seat"][5:9, 1] = np.nan
    with caplog.at_level(logging.DEBUG, logger="edge_client.features.window"):
        vector = window_features(window, [WATCH, CHEST, SEAT])
    assert np.isfinite(vector).all()
    records = [r for r in caplog.records if getattr(r, "sensor", None) == "seat"]
    assert len(records) == 1 and records[0].missing_fraction == [0.0, 4 / 80]


def test_real_pipeline_windows_give_complete_vectors_and_the_right_heart_rate() -> None:
    """Integration with edge_client.pipeline: seglearn watch (50 Hz) + pyhrv ECG (1000 Hz) on one clock."""
    pipeline = pytest.importorskip("edge_client.pipeline")
    ecg, fs = pyhrv_ecg()
    chest = SensorDescriptor(2, "chest", "ecg", fs, (ChannelSpec("lead1", "adc"),))
    watch = watch_series()[0]
    windows = pipeline.windows_from_arrays([WATCH, chest], {"watch": (0, watch), "chest": (0, ecg[:, None])})
    assert len(windows) >= 8
    names = feature_names([WATCH, chest])
    hr = names.index("chest.lead1.ecg_hr_mean_bpm")
    for window in windows:
        vector = window_features(window, [WATCH, chest])
        assert vector.shape == (len(names),) and np.isfinite(vector).all()
        first = math.ceil(window.start_us * fs / 1e6)  # raw = the native samples inside [start_us, end_us)
        inside = PYHRV_R_PEAKS[(PYHRV_R_PEAKS >= first + 50) & (PYHRV_R_PEAKS < first + len(window.raw["chest"]) - 50)]
        assert vector[hr] == pytest.approx(60 * fs / np.diff(inside).mean(), abs=2.0)
