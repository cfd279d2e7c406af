"""The seglearn smartwatch dataset as WheelFed recordings: one recording per subject.

Source: ``seglearn/data/watch_dataset.npy`` (BSD-3, Burns et al. 2018, arXiv:1802.01489):
140 series = 10 subjects x 7 shoulder-rehabilitation exercises x 2 sides, 6-axis IMU at 50 Hz
(ax, ay, az in g; wx, wy, wz gyroscope rates — the dataset does not state the unit; the watch is
an Android device, whose gyroscope API reports rad/s).

Each subject becomes one session: the subject's series in dataset order, back to back on one
continuous clock starting at 0 (series k starts one sample period after series k-1 ends), sent
as 25-sample frames (0.5 s; a series' last frame may be shorter, frames never straddle series),
with one label-track interval per series whose label is the exercise name. Series order, side and
dataset index are kept in the metadata ``extra["series"]``.

Samples travel as float32, not int16: the dataset stores 6 decimals, and float32's rounding error
(< 1e-6 for ``|x| < 32``, the largest value is 29) stays below that resolution, so the import is
lossless for practical purposes without choosing a per-channel int16 range that a future subject
could clip (int16 over +-32 rad/s would quantise in 1e-3 steps). The bandwidth cost is 1.2 kB/s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..descriptors import ChannelSpec, SensorDescriptor
from ..frames import Annotation, SampleFrame, chunk_samples
from ..recording import RecordingMetadata
from .writing import RECORDING_SUFFIX, package_file, write_recording

SAMPLE_RATE_HZ = 50.0
WATCH_SENSOR_ID = 1
FRAME_SAMPLES = 25
_UNITS = {"ax": "g", "ay": "g", "az": "g", "wx": "rad/s", "wy": "rad/s", "wz": "rad/s"}


def dataset_path() -> Path:
    return package_file("seglearn", "data/watch_dataset.npy")


def load_dataset(path: Path | None = None) -> dict[str, Any]:
    # The file is a pickled dict inside an installed package (trusted like the package's code).
    data = np.load(path or dataset_path(), allow_pickle=True).item()
    if not isinstance(data, dict) or not {"X", "y", "subject", "side", "X_labels", "y_labels"} <= set(data):
        raise ValueError("watch_dataset.npy does not hold the expected keys X, y, subject, side, X_labels, y_labels")
    return data


def watch_descriptor(channel_names: list[str]) -> SensorDescriptor:
    channels = tuple(ChannelSpec(name, _UNITS.get(name, "")) for name in channel_names)
    return SensorDescriptor(WATCH_SENSOR_ID, "watch", "imu", SAMPLE_RATE_HZ, channels, "float32")


def import_all(
    out_dir: str | Path,
    *,
    dataset: dict[str, Any] | None = None,
    frame_samples: int = FRAME_SAMPLES,
    shuffle_seed: int | None = None,
) -> list[Path]:
    """Write one recording per subject into ``out_dir``; returns their paths, by subject number.

    ``shuffle_seed``: put each subject's series in a random order (seeded per subject) instead of
    the dataset's fixed exercise order -- so that "the first minutes of every session" cover
    different exercises on different gateways, as sessions in daily use would (the fleet demo).
    """
    data = dataset if dataset is not None else load_dataset()
    descriptor = watch_descriptor([str(c) for c in data["X_labels"]])
    period_us = round(1e6 / SAMPLE_RATE_HZ)
    subjects = np.asarray(data["subject"])
    paths = []
    for subject in sorted({int(s) for s in subjects}):
        frames: list[SampleFrame] = []
        labels: list[Annotation] = []
        series: list[dict[str, Any]] = []
        t0_us, seq = 0, 0
        indices = np.flatnonzero(subjects == subject)
        if shuffle_seed is not None:
            indices = np.random.default_rng([shuffle_seed, subject]).permutation(indices)
        for index in indices:
            x = np.asarray(data["X"][index], dtype=np.float64)
            if x.ndim != 2 or x.shape[1] != descriptor.n_channels:
                raise ValueError(f"series {index} has shape {x.shape}, expected (n, {descriptor.n_channels})")
            chunk = chunk_samples(
                WATCH_SENSOR_ID, x.astype(np.float32), SAMPLE_RATE_HZ, frame_samples, t0_us=t0_us, first_seq=seq
            )
            frames += chunk
            seq += len(chunk)
            end_us = t0_us + len(x) * period_us
            label = str(data["y_labels"][int(data["y"][index])])
            labels.append(Annotation(label, t0_us, end_us, annotation_id=len(labels)))
            series.append(
                {
                    "dataset_index": int(index),
                    "label": label,
                    "side": int(data["side"][index]),
                    "start_us": t0_us,
                    "n_samples": len(x),
                }
            )
            t0_us = end_us
        metadata = RecordingMetadata(
            session_id=f"seglearn-watch-s{subject:02d}",
            subject=f"seglearn-{subject:02d}",
            source="seglearn:data/watch_dataset.npy",
            descriptors=(descriptor,),
            created_us=0,
            extra={
                "dataset": "seglearn watch_dataset (BSD-3)",
                "series": series,
                "series_order": "dataset" if shuffle_seed is None else f"shuffled (seed {shuffle_seed})",
            },
        )
        paths.append(
            write_recording(
                Path(out_dir) / f"seglearn_watch_s{subject:02d}{RECORDING_SUFFIX}", metadata, frames, labels
            )
        )
    return paths
