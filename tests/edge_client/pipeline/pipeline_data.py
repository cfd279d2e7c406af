"""Real recordings and helpers shared by the pipeline tests.

The recordings ship inside dev packages: seglearn's smartwatch IMU (50 Hz),
pyphysio's ``medical.txt.bz2`` (2048 Hz; column 0 is the ECG — the peaky one, kurtosis ~21 — the
others are EDA, BVP and respiration) and pyhrv's ``SampleECG.txt`` (1000 Hz, BITalino ADC, column 6).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from edge_client.pipeline import Window, WindowAssembler
from firmware_bridge.descriptors import ChannelSpec, SensorDescriptor

IMU_CHANNELS = ("ax", "ay", "az", "wx", "wy", "wz")


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, f"{name} is a dev dependency (pip install -e '.[dev]')"
    return Path(spec.origin).parent


@functools.cache
def watch_series() -> tuple[np.ndarray, ...]:
    """seglearn's 140 series, each (n, 6): ax, ay, az [g], wx, wy, wz at 50 Hz."""
    data = np.load(_package_dir("seglearn") / "data" / "watch_dataset.npy", allow_pickle=True).item()
    return tuple(np.asarray(x, dtype=np.float64) for x in data["X"])


@functools.cache
def ecg_2048() -> np.ndarray:
    """pyphysio medical.txt.bz2, ECG column, (245760, 1) at 2048 Hz (120 s)."""
    table = np.genfromtxt(_package_dir("pyphysio") / "test_data" / "medical.txt.bz2", delimiter="\t")
    return table[:, :1].copy()


@functools.cache
def ecg_1000() -> np.ndarray:
    """pyhrv SampleECG.txt, ECG column (ADC counts), (22350, 1) at 1000 Hz."""
    table = np.loadtxt(_package_dir("pyhrv") / "files" / "SampleECG.txt", comments="#")
    return table[:, 5:6].copy()


def imu(name: str = "watch", rate_hz: float = 50.0, kind: str = "imu", sensor_id: int = 1) -> SensorDescriptor:
    return SensorDescriptor(sensor_id, name, kind, rate_hz, tuple(ChannelSpec(c, "g") for c in IMU_CHANNELS), "float32")


def ecg(name: str = "ecg", rate_hz: float = 2048.0, sensor_id: int = 2) -> SensorDescriptor:
    return SensorDescriptor(sensor_id, name, "ecg", rate_hz, (ChannelSpec("lead1", "mV"),), "float32")


def pressure(name: str = "mat", rate_hz: float = 10.0, n_channels: int = 4, sensor_id: int = 3) -> SensorDescriptor:
    channels = tuple(ChannelSpec(f"p{i}", "kPa") for i in range(n_channels))
    return SensorDescriptor(sensor_id, name, "pressure", rate_hz, channels, "int16")


def chunk_time(t0_us: int, index: int, rate_hz: float) -> int:
    """Timestamp of sample ``index`` as a bridge would stamp a frame: nominal time rounded to 1 us."""
    return t0_us + round(index * 1e6 / rate_hz)


def push_chunked(
    asm: WindowAssembler, name: str, t0_us: int, x: np.ndarray, rate_hz: float, cuts: Sequence[int]
) -> list[Window]:
    """Push ``x`` cut at the (sorted, possibly repeated -> empty chunks) indices ``cuts``."""
    bounds = [0, *sorted(cuts), len(x)]
    out: list[Window] = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        out += asm.push(name, chunk_time(t0_us, a, rate_hz), x[a:b])
    return out


def assert_windows_identical(got: Sequence[Window], want: Sequence[Window]) -> None:
    """Same windows, same spans, bit-identical arrays (``tobytes`` also compares NaN payloads and -0.0)."""
    assert [(w.start_us, w.end_us) for w in got] == [(w.start_us, w.end_us) for w in want]
    for g, w in zip(got, want):
        assert g.data.keys() == w.data.keys() and g.raw.keys() == w.raw.keys() and g.raw_rate_hz == w.raw_rate_hz
        for name in w.data:
            assert g.data[name].shape == w.data[name].shape
            assert g.data[name].tobytes() == w.data[name].tobytes(), f"{name} differs in window {w.start_us}"
        for name in w.raw:
            assert g.raw[name].tobytes() == w.raw[name].tobytes(), f"raw {name} differs in window {w.start_us}"
