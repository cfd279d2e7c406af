"""A five-sensor wheelchair session of any length, built from bundled real data where it exists.

For load tests (CPU, memory, long replays), where one sensor per recording is not enough. The chair:

=========  ==========  ========  ========  ============================================================
id, name   kind        rate      channels  source
=========  ==========  ========  ========  ============================================================
1 wrist    imu         50 Hz     6         seglearn watch set (real), from its start: the user's
                                           shoulder-rehab exercises, with their exercise labels
2 frame    imu         50 Hz     6         seglearn watch set (real), from 1/3 into it (wrapping)
3 wheel    wheel_imu   50 Hz     6         seglearn watch set (real), from 2/3 into it (wrapping)
4 ecg      ecg         250 Hz    1         pyphysio ``medical.txt.bz2`` ECG (real, 2048 Hz), resampled
                                           to 250 Hz, looped R peak to R peak (no phase jump)
5 seat     pressure    10 Hz     16        synthetic 4 x 4 pressure mat (mmHg), see below
=========  ==========  ========  ========  ============================================================

The frame and wheel IMUs carry watch signals too: no bundled data set has a chair frame or a
wheel hub, and real signals load the pipeline like real ones (spectra, entropy, peaks) where a
synthetic sine would not. Everything is sent the way a sensor MCU would: int16 samples with the
usual full-scale ranges (+-16 g at 2048 LSB/g, +-2000 dps at 16.4 LSB/dps, ECG in 1 uV steps,
pressure in 0.1 mmHg steps), 0.5 s frames for the IMUs (25 samples) and the mat (5 samples),
0.2 s frames for the ECG (50 samples), each sensor's first sample a few milliseconds after the
session start (sensors are not powered up on the same microsecond), receive time = last sample.

Pressure mat (rows front -> back, columns left -> right): a seated load map peaking under the
ischial tuberosities (row 2, middle columns, ~70 mmHg) and lighter under the thighs, scaled per
subject (seed); slow postural drift (Ornstein-Uhlenbeck sway, 2 min time constant) shifting load
left/right and front/back; breathing (0.25 Hz, 1 %); sensor noise (0.3 mmHg). Every
``relief_interval_s`` (+-20 % jitter) a pressure relief of the kinds clinicians teach: forward
lean (rear rows unload, thighs load; 60-120 s), side lean to the left or the right (that side
loads, the other half unloads; 60-120 s) or a push-up lift (everything unloads to ~5 %;
15-30 s), with 2 s ramps.
The reliefs are listed in the metadata (``extra["reliefs"]``), not labelled: the label track is
the wrist IMU's exercises, so every label is a real one.

``generate`` is deterministic for a given duration and seed; ``write_chair`` writes a recording.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.signal import find_peaks, lfilter, resample_poly

from ..descriptors import ChannelSpec, SensorDescriptor
from ..frames import Annotation, SampleFrame, chunk_samples
from ..recording import RecordingMetadata
from . import ecg as ecg_importer
from . import seglearn_watch
from .writing import RECORDING_SUFFIX, write_recording

IMU_RATE_HZ = 50.0
ECG_RATE_HZ = 250.0
PRESSURE_RATE_HZ = 10.0
IMU_FRAME_SAMPLES = 25
ECG_FRAME_SAMPLES = 50
PRESSURE_FRAME_SAMPLES = 5
PRESSURE_ROWS = PRESSURE_COLS = 4

ACCEL_SCALE_G = 1 / 2048  # +-16 g full scale
GYRO_SCALE_RAD_S = float(np.deg2rad(1 / 16.4))  # +-2000 dps full scale
ECG_SCALE_MV = 0.001
PRESSURE_SCALE_MMHG = 0.1

WRIST_ID, FRAME_ID, WHEEL_ID, ECG_ID, SEAT_ID = 1, 2, 3, 4, 5
#: First-sample offsets (us) of each sensor after the session start.
START_OFFSET_US = {WRIST_ID: 0, FRAME_ID: 3_000, WHEEL_ID: 7_000, ECG_ID: 1_500, SEAT_ID: 12_000}

_IMU_CHANNELS = ("ax", "ay", "az", "wx", "wy", "wz")
#: Seated load map (mmHg), row 0 = front edge (knees), row 3 = back; columns left -> right.
_BASE_MAP_MMHG = np.array(
    [
        [14.0, 22.0, 22.0, 14.0],
        [24.0, 36.0, 36.0, 24.0],
        [38.0, 70.0, 70.0, 38.0],
        [20.0, 42.0, 42.0, 20.0],
    ]
)
RELIEF_KINDS = ("forward_lean", "lean_left", "lean_right", "push_up")


def _imu_descriptor(sensor_id: int, name: str, kind: str) -> SensorDescriptor:
    channels = tuple(
        ChannelSpec(c, "g", ACCEL_SCALE_G) if c.startswith("a") else ChannelSpec(c, "rad/s", GYRO_SCALE_RAD_S)
        for c in _IMU_CHANNELS
    )
    return SensorDescriptor(sensor_id, name, kind, IMU_RATE_HZ, channels, "int16")


def chair_descriptors() -> tuple[SensorDescriptor, ...]:
    """The five sensors, by sensor id."""
    pressure = tuple(
        ChannelSpec(f"p_r{r}c{c}", "mmHg", PRESSURE_SCALE_MMHG)
        for r in range(PRESSURE_ROWS)
        for c in range(PRESSURE_COLS)
    )
    return (
        _imu_descriptor(WRIST_ID, "wrist", "imu"),
        _imu_descriptor(FRAME_ID, "frame", "imu"),
        _imu_descriptor(WHEEL_ID, "wheel", "wheel_imu"),
        SensorDescriptor(ECG_ID, "ecg", "ecg", ECG_RATE_HZ, (ChannelSpec("ecg", "mV", ECG_SCALE_MV),), "int16"),
        SensorDescriptor(SEAT_ID, "seat", "pressure", PRESSURE_RATE_HZ, pressure, "int16"),
    )


def _to_int16(values: np.ndarray, scale: float | np.ndarray) -> np.ndarray:
    raw = np.round(np.asarray(values, dtype=np.float64) / scale)
    return np.clip(raw, np.iinfo(np.int16).min, np.iinfo(np.int16).max).astype(np.int16)


def _samples(duration_s: float, rate_hz: float, offset_us: int) -> int:
    """Samples a sensor starting ``offset_us`` after the session start takes before ``duration_s``."""
    return max(0, int(np.ceil((duration_s * 1e6 - offset_us) * rate_hz / 1e6)))


@dataclass(frozen=True)
class WatchSource:
    """The seglearn watch set as one continuous stream: every series in dataset order."""

    x: np.ndarray  # (n, 6) float64
    series: list[dict[str, Any]]  # dataset_index, label, subject, side, start (sample index), n_samples

    @classmethod
    def load(cls) -> WatchSource:
        data = seglearn_watch.load_dataset()
        parts, series, start = [], [], 0
        for index, x in enumerate(data["X"]):
            x = np.asarray(x, dtype=np.float64)
            parts.append(x)
            series.append(
                {
                    "dataset_index": index,
                    "label": str(data["y_labels"][int(data["y"][index])]),
                    "subject": int(data["subject"][index]),
                    "side": int(data["side"][index]),
                    "start": start,
                    "n_samples": len(x),
                }
            )
            start += len(x)
        return cls(np.concatenate(parts), series)

    def take(self, start: int, n: int) -> np.ndarray:
        """``n`` samples from sample ``start`` on, wrapping around the end."""
        idx = (start + np.arange(n)) % len(self.x)
        return self.x[idx]


def ecg_loop_250hz() -> np.ndarray:
    """pyphysio's ECG at 250 Hz (mV), cut from one R peak to the last so that tiling it keeps the rhythm."""
    x = resample_poly(ecg_importer.read_pyphysio_medical(), 125, 1024)  # 2048 Hz -> 250 Hz
    peaks, _ = find_peaks(x, distance=int(0.3 * ECG_RATE_HZ), height=0.5 * np.percentile(x, 99))
    if len(peaks) < 10:
        raise ValueError(f"only {len(peaks)} R peaks found in the pyphysio ECG: the file is not what was expected")
    return x[peaks[0] : peaks[-1]]


def _ou(rng: np.random.Generator, n: int, fs: float, tau_s: float, sd: float) -> np.ndarray:
    """Ornstein-Uhlenbeck process sampled at ``fs``: stationary sd ``sd``, correlation time ``tau_s``."""
    a = np.exp(-1.0 / (fs * tau_s))
    noise = rng.normal(0.0, sd * np.sqrt(1 - a * a), n)
    out, _ = lfilter([1.0], [1.0, -a], noise, zi=[rng.normal(0.0, sd) * a])
    return out


def _ramp(t: np.ndarray, start: float, end: float, ramp_s: float) -> np.ndarray:
    """0 outside [start, end], 1 inside, raised-cosine edges of ``ramp_s``."""
    up = np.clip((t - start) / ramp_s, 0.0, 1.0)
    down = np.clip((end - t) / ramp_s, 0.0, 1.0)
    return 0.5 - 0.5 * np.cos(np.pi * np.minimum(up, down))


def relief_schedule(duration_s: float, interval_s: float, rng: np.random.Generator) -> list[dict[str, Any]]:
    """Pressure reliefs: one per ``interval_s`` (+-20 % jitter), kind and length drawn per relief."""
    reliefs: list[dict[str, Any]] = []
    t = interval_s * rng.uniform(0.8, 1.2)
    while True:
        kind = RELIEF_KINDS[int(rng.integers(len(RELIEF_KINDS)))]
        length = rng.uniform(15.0, 30.0) if kind == "push_up" else rng.uniform(60.0, 120.0)
        if t + length > duration_s:
            return reliefs
        reliefs.append({"kind": kind, "start_s": round(float(t), 3), "end_s": round(float(t + length), 3)})
        t += length + interval_s * rng.uniform(0.8, 1.2)


def pressure_mat(
    duration_s: float, seed: int, *, relief_interval_s: float = 900.0, offset_us: int = 0
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """(n, 16) seat pressure in mmHg at 10 Hz (row-major r0c0 .. r3c3) and the relief schedule."""
    rng = np.random.default_rng([seed, 5])
    n = _samples(duration_s, PRESSURE_RATE_HZ, offset_us)
    t = offset_us / 1e6 + np.arange(n) / PRESSURE_RATE_HZ
    base = _BASE_MAP_MMHG * rng.uniform(0.85, 1.15, _BASE_MAP_MMHG.shape) * rng.uniform(0.8, 1.25)
    lateral = _ou(rng, n, PRESSURE_RATE_HZ, 120.0, 0.08)  # + = load shifted to the right
    sagittal = _ou(rng, n, PRESSURE_RATE_HZ, 120.0, 0.06)  # + = load shifted forward
    breathing = 0.01 * np.sin(2 * np.pi * 0.25 * t + rng.uniform(0, 2 * np.pi))
    cols = np.linspace(-1.0, 1.0, PRESSURE_COLS)
    rows = np.linspace(1.0, -1.0, PRESSURE_ROWS)  # front rows get + when leaning forward
    gain = (
        1.0
        + lateral[:, None, None] * cols[None, None, :]
        + sagittal[:, None, None] * rows[None, :, None]
        + breathing[:, None, None]
    )
    reliefs = relief_schedule(duration_s, relief_interval_s, rng)
    for relief in reliefs:
        w = _ramp(t, relief["start_s"], relief["end_s"], 2.0)[:, None, None]
        if relief["kind"] == "forward_lean":
            target = np.array([1.8, 1.4, 0.35, 0.2])[:, None] * np.ones(PRESSURE_COLS)[None, :]
        elif relief["kind"] == "push_up":
            target = np.full((PRESSURE_ROWS, PRESSURE_COLS), 0.05)
        else:
            # Leaning to one side loads that side and unloads the other (columns run left -> right).
            side = np.array([1.8, 1.5, 0.3, 0.15]) if relief["kind"] == "lean_left" else np.array([0.15, 0.3, 1.5, 1.8])
            target = np.ones(PRESSURE_ROWS)[:, None] * side[None, :]
        gain = gain * (1.0 + w * (target[None] - 1.0))
    p = base[None] * gain + rng.normal(0.0, 0.3, (n, PRESSURE_ROWS, PRESSURE_COLS))
    return np.clip(p, 0.0, None).reshape(n, -1), reliefs


@dataclass(frozen=True)
class ChairSession:
    metadata: RecordingMetadata
    frames: list[SampleFrame]
    labels: list[Annotation]
    physical: dict[int, np.ndarray]  # the values before int16 quantisation, by sensor id


def generate(
    duration_s: float,
    *,
    seed: int = 0,
    relief_interval_s: float = 900.0,
    watch: WatchSource | None = None,
    ecg_loop: np.ndarray | None = None,
) -> ChairSession:
    """The chair's frames and labels for ``duration_s`` seconds (see the module docstring)."""
    if not duration_s > 0:
        raise ValueError(f"duration_s must be positive, got {duration_s}")
    watch = watch or WatchSource.load()
    ecg_loop = ecg_loop if ecg_loop is not None else ecg_loop_250hz()
    descriptors = {d.sensor_id: d for d in chair_descriptors()}
    physical: dict[int, np.ndarray] = {}
    for sensor_id, start in ((WRIST_ID, 0), (FRAME_ID, len(watch.x) // 3), (WHEEL_ID, 2 * len(watch.x) // 3)):
        physical[sensor_id] = watch.take(start, _samples(duration_s, IMU_RATE_HZ, START_OFFSET_US[sensor_id]))
    n_ecg = _samples(duration_s, ECG_RATE_HZ, START_OFFSET_US[ECG_ID])
    physical[ECG_ID] = np.resize(ecg_loop, n_ecg)[:, None]  # np.resize repeats the loop
    physical[SEAT_ID], reliefs = pressure_mat(
        duration_s, seed, relief_interval_s=relief_interval_s, offset_us=START_OFFSET_US[SEAT_ID]
    )
    frame_samples = {
        WRIST_ID: IMU_FRAME_SAMPLES,
        FRAME_ID: IMU_FRAME_SAMPLES,
        WHEEL_ID: IMU_FRAME_SAMPLES,
        ECG_ID: ECG_FRAME_SAMPLES,
        SEAT_ID: PRESSURE_FRAME_SAMPLES,
    }
    frames: list[SampleFrame] = []
    for sensor_id, values in physical.items():
        d = descriptors[sensor_id]
        raw = _to_int16(values, np.array([c.scale for c in d.channels]))
        frames += chunk_samples(
            sensor_id, raw, d.sample_rate_hz, frame_samples[sensor_id], t0_us=START_OFFSET_US[sensor_id]
        )
    # Sending order: a frame leaves its sensor when its last sample is taken (write_recording
    # keeps the order it is given; ties in sensor id order).
    frames.sort(
        key=lambda f: (
            f.timestamp_us + round(len(f.samples) * 1e6 / descriptors[f.sensor_id].sample_rate_hz),
            f.sensor_id,
        )
    )
    # The wrist's exercises: one label interval per watch series (clipped to the session).
    labels: list[Annotation] = []
    period_us = round(1e6 / IMU_RATE_HZ)
    n_wrist = len(physical[WRIST_ID])
    for s in watch.series:
        if s["start"] >= n_wrist:
            break
        end = min(s["start"] + s["n_samples"], n_wrist)
        labels.append(Annotation(s["label"], s["start"] * period_us, end * period_us, annotation_id=len(labels)))
    metadata = RecordingMetadata(
        session_id=f"synthetic-chair-{seed}-{round(duration_s)}s",
        subject=f"synthetic-chair-{seed}",
        source="synthetic_chair: seglearn watch IMU, pyphysio ECG, synthetic pressure mat",
        descriptors=tuple(descriptors.values()),
        created_us=0,
        extra={
            "duration_s": duration_s,
            "seed": seed,
            "reliefs": reliefs,
            "imu_sources": {"wrist": 0, "frame": len(watch.x) // 3, "wheel": 2 * len(watch.x) // 3},
            "start_offset_us": {str(k): v for k, v in START_OFFSET_US.items()},
            "wrist_series": [
                {k: s[k] for k in ("dataset_index", "label", "subject", "side")} for s in watch.series[: len(labels)]
            ],
        },
    )
    return ChairSession(metadata, frames, labels, physical)


def write_chair(path: str | Path, duration_s: float, *, seed: int = 0, relief_interval_s: float = 900.0) -> Path:
    """Write a chair session of ``duration_s`` seconds as a recording at ``path`` (replaced if present)."""
    session = generate(duration_s, seed=seed, relief_interval_s=relief_interval_s)
    return write_recording(Path(path), session.metadata, session.frames, session.labels)


def import_all(out_dir: str | Path, *, duration_s: float = 3600.0, seed: int = 0) -> list[Path]:
    """The importer interface: one chair session (default one hour) in ``out_dir``."""
    name = f"synthetic_chair_{seed}_{round(duration_s)}s{RECORDING_SUFFIX}"
    return [write_chair(Path(out_dir) / name, duration_s, seed=seed)]
