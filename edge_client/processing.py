"""The gateway's data path from decoded frames to stored, labelled feature windows.

One class serves the live gateway (frames from the serial reader) and batch extraction of a
recording (frames from the file), so the two cannot drift apart: the same frames give the same
windows, features and labels bit for bit, whatever the chunking of the byte stream.

- Descriptor frames declare the sensors; the pipeline is (re)built when the set changes.
  Sample frames of sensors not declared yet are counted and dropped: without a descriptor
  there are no units, no scale and no sample rate to interpret them with.
- Sample frames become physical values, go through the streaming pipeline, and every finished
  window becomes a feature vector stored under the session.
- Annotation frames label what they cover once their interval is closed (the store applies the
  rule: a window entirely inside one label's interval, and overlapping no other label).

The stored feature-set version combines the feature definitions' version with a digest of the
sensor layout, because a model's columns are only meaningful for the same sensors and channels.
"""

from __future__ import annotations

import csv
import hashlib
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from firmware_bridge.descriptors import SensorDescriptor
from firmware_bridge.frames import AnnotationFrame, DescriptorFrame, Frame, SampleFrame, to_physical

from .features import FEATURE_SET_VERSION, feature_names, window_features
from .pipeline import PipelineConfig, Window, WindowAssembler
from .store import WindowRecord, WindowStore

log = logging.getLogger(__name__)


def layout_version(descriptors: list[SensorDescriptor]) -> str:
    """``FEATURE_SET_VERSION`` + a digest of the feature names (sensors, channels, kinds)."""
    digest = hashlib.sha256("\n".join(feature_names(descriptors)).encode()).hexdigest()[:10]
    return f"{FEATURE_SET_VERSION}+{digest}"


@dataclass
class ProcessingStats:
    frames: int = 0
    unknown_sensor_frames: int = 0
    windows: int = 0
    annotations_closed: int = 0
    rebuilds: int = 0
    last_window_end_us: int | None = None


class FrameProcessor:
    """Frames in, stored feature windows out. Not thread-safe: one thread feeds it."""

    def __init__(self, store: WindowStore, session_id: str, *, config: PipelineConfig = PipelineConfig(),
                 on_window: Callable[[WindowRecord, int | None, float], object] | None = None) -> None:
        self.store = store
        self.on_window = on_window  # e.g. live recognition; called after the window is stored
        self.session_id = session_id
        self.config = config
        self.stats = ProcessingStats()
        self.descriptors: dict[int, SensorDescriptor] = {}
        self._assembler: WindowAssembler | None = None
        self._ordered: list[SensorDescriptor] = []
        self.feature_set_version = ""
        self.feature_names: list[str] = []

    def on_frame(self, frame: Frame) -> None:
        self.stats.frames += 1
        if isinstance(frame, SampleFrame):
            self._samples(frame)
        elif isinstance(frame, DescriptorFrame):
            self._descriptor(frame.descriptor)
        elif isinstance(frame, AnnotationFrame):
            self._annotation(frame)

    def finish(self) -> None:
        """End of stream: emit the windows the pipeline can still complete."""
        if self._assembler is not None:
            self._store(self._assembler.flush())

    def _descriptor(self, descriptor: SensorDescriptor) -> None:
        if self.descriptors.get(descriptor.sensor_id) == descriptor:
            return
        if self._assembler is not None:
            self._store(self._assembler.flush())  # what the old layout can still finish
        self.descriptors[descriptor.sensor_id] = descriptor
        self._ordered = [self.descriptors[k] for k in sorted(self.descriptors)]
        self._assembler = WindowAssembler(self._ordered, self.config)
        self.feature_names = feature_names(self._ordered)
        self.feature_set_version = layout_version(self._ordered)
        self.stats.rebuilds += 1
        log.info("sensor layout", extra={"sensors": [d.name for d in self._ordered],
                                         "feature_set_version": self.feature_set_version,
                                         "n_features": len(self.feature_names)})

    def _samples(self, frame: SampleFrame) -> None:
        descriptor = self.descriptors.get(frame.sensor_id)
        if descriptor is None or self._assembler is None:
            self.stats.unknown_sensor_frames += 1
            return
        windows = self._assembler.push(descriptor.name, frame.timestamp_us, to_physical(frame, descriptor))
        self._store(windows)

    def _store(self, windows: list[Window]) -> None:
        for window in windows:
            completed_at = time.perf_counter()  # the window's last sample is in: latency starts here
            features = window_features(window, self._ordered)
            record = WindowRecord(self.session_id, window.start_us, window.end_us, features, self.feature_set_version)
            row = self.store.add(record)
            self.stats.windows += 1
            self.stats.last_window_end_us = window.end_us
            if self.on_window is not None:
                try:
                    self.on_window(record, row, completed_at)
                except Exception:  # noqa: BLE001 - recognition must never stop data collection
                    log.exception("window callback failed", extra={"end_us": window.end_us})

    def _annotation(self, frame: AnnotationFrame) -> None:
        a = frame.annotation
        if a.end_us is None:  # still going on: its closing annotation carries the whole interval
            return
        self.store.label_range(self.session_id, a.start_us, a.end_us, a.label)
        self.stats.annotations_closed += 1


@dataclass(frozen=True)
class FeatureTable:
    """All windows of one session: what ``wheelfed features`` writes."""

    names: list[str]
    X: np.ndarray
    labels: np.ndarray  # object: str, or None for unlabelled windows
    start_us: np.ndarray
    end_us: np.ndarray
    feature_set_version: str
    session_id: str

    @classmethod
    def from_store(cls, store: WindowStore, session_id: str, names: list[str], feature_set_version: str) -> "FeatureTable":
        result = store.query(feature_set_version, labelled_only=False)
        rows = result.meta.session_ids == session_id
        return cls(names, result.X[rows], result.y[rows], result.meta.start_us[rows], result.meta.end_us[rows],
                   feature_set_version, session_id)

    def save(self, path: str | Path) -> None:
        """``.npz`` (arrays, labels "" when unlabelled) or ``.csv`` (one row per window)."""
        path = Path(path)
        labels = np.array(["" if y is None else y for y in self.labels], dtype=str)
        if path.suffix == ".npz":
            np.savez_compressed(path, X=self.X, names=np.array(self.names), labels=labels, start_us=self.start_us,
                                end_us=self.end_us, feature_set_version=self.feature_set_version,
                                session_id=self.session_id)
        elif path.suffix == ".csv":
            with path.open("w", newline="") as fh:
                writer = csv.writer(fh)
                writer.writerow(["session_id", "start_us", "end_us", "label", *self.names])
                for i in range(len(labels)):
                    writer.writerow([self.session_id, int(self.start_us[i]), int(self.end_us[i]), labels[i],
                                     *map(repr, self.X[i].tolist())])
        else:
            raise ValueError(f"unknown output format {path.suffix!r}: use .npz or .csv")


def extract_recording(path: str | Path, *, config: PipelineConfig = PipelineConfig()) -> tuple[FeatureTable, ProcessingStats]:
    """Batch features of a recording through exactly the live gateway's path (in a scratch store)."""
    from firmware_bridge.recording import Recording

    recording = Recording.load(path)
    session_id = recording.metadata.session_id
    with tempfile.TemporaryDirectory(prefix="wheelfed-features-") as scratch, \
            WindowStore(Path(scratch) / "windows.db") as store:
        processor = FrameProcessor(store, session_id, config=config)
        for descriptor in recording.metadata.descriptors:
            processor.on_frame(DescriptorFrame(descriptor))
        for frame in recording.frames:  # annotation frames included
            processor.on_frame(frame)
        for record in recording.label_records:  # the label track travels outside the frames
            processor.on_frame(AnnotationFrame(record.annotation))
        processor.finish()
        table = FeatureTable.from_store(store, session_id, processor.feature_names, processor.feature_set_version)
    return table, processor.stats
