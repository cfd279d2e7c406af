"""The gateway's data path from decoded frames to stored, labelled feature windows.

One class serves the live gateway (frames from the serial reader) and batch extraction of a
recording (frames from the file), so the two cannot drift apart: the same frames give the same
windows, features and labels bit for bit, whatever the chunking of the byte stream.

- Descriptor frames declare the sensors; the pipeline is (re)built when the set changes.
  Sample frames of sensors not declared yet are counted and dropped: without a descriptor
  there are no units, no scale and no sample rate to interpret them with.
- Sample frames become physical values, go through the streaming pipeline, and every finished
  window becomes a feature vector stored under the session. A frame whose channels or sample
  format differ from its sensor's descriptor is counted (``mismatched_frames``) and dropped,
  with one warning line per kind of mismatch: the sensor sends it with every frame, and a
  traceback per frame told the operator nothing more.
- A descriptor the pipeline cannot serve (a rate it cannot resample onto the grid, such as
  100.0003 Hz) is refused, counted (``refused_descriptors``) and warned about once; the sensor's
  samples then count as unknown, and nothing known so far changes.
- An exception from the window callback (live recognition) is a counted fault (``Faults``): the
  window is stored, collection goes on.
- Annotation frames label what they cover once their interval is closed (the store applies the
  rule: a window entirely inside one label's interval, and overlapping no other label).

The stored feature-set version combines the feature definitions' version with a digest of the
sensor layout, because a model's columns are only meaningful for the same sensors and channels.

Whose frames are these? (streams)
    A serial path is not a sensor: a pty number freed by one replay is handed to the next, a USB
    adapter re-enumerates, firmware reboots. Frames of another stream stored as the known sensors
    would be spliced into their windows, and -- worse -- that stream's annotations (on its own
    clock) would relabel the windows already stored: a store whose labelled windows shrink. So
    the descriptors and the sequence numbers decide, and a break starts a new *stream*: the
    windows the old one can still finish are stored, a fresh assembler starts (no window spans
    the break) and everything after it is stored under its own session, ``SESSION#2``,
    ``SESSION#3``..., which no annotation of another stream can reach. A break is

    - a DESCRIPTOR that differs from the one known for its sensor id (at any time), or -- after a
      reopen, until the first SAMPLES frame has shown the stream continues -- a new sensor id;
    - a SAMPLES frame whose sequence number goes back or repeats (a sender restart: firmware
      reboot, a replay started again), at any time;
    - after a reopen, a sensor's first SAMPLES frame whose timestamp lies before where its last
      one ended (beyond the pipeline's gap tolerance) or further ahead than the sensor could have
      got meanwhile: the wall time the link was down or the frames its sequence says were lost,
      whichever is longer, plus 10 %.

    After a reopen (``link_reopened``, or a new ``connection`` number on a received frame) the
    known sensors' samples are not used -- counted as ``unattributed`` -- until each announces a
    DESCRIPTOR identical to the known one (firmware re-announces periodically; ``wheelfed replay``
    at its start), and annotations wait until the first sensor's continuity is decided, so they
    land in the session of the stream they came with. Within one stream, lost data is the
    pipeline's business: a timestamp jump ends the sensor's segment there (``SensorStream``).
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
from firmware_bridge.frames import Annotation, AnnotationFrame, DescriptorFrame, Frame, SampleFrame, to_physical
from firmware_bridge.serial_link import Faults, ReceivedFrame

from .features import FEATURE_SET_VERSION, feature_names, window_features
from .pipeline import PipelineConfig, Window, WindowAssembler
from .store import WindowRecord, WindowStore
from .store_backlog import DEFAULT_MAX_PENDING, LabelWrite, StoreBacklog, WindowWrite

log = logging.getLogger(__name__)


def layout_version(descriptors: list[SensorDescriptor]) -> str:
    """``FEATURE_SET_VERSION`` + a digest of the feature names (sensors, channels, kinds)."""
    digest = hashlib.sha256("\n".join(feature_names(descriptors)).encode()).hexdigest()[:10]
    return f"{FEATURE_SET_VERSION}+{digest}"


#: A forward jump after a reopen may exceed the time the link was down by this share (clock slack).
_FORWARD_SLACK = 1.1
_SEQ_WRAP = 1 << 32


@dataclass
class ProcessingStats:
    frames: int = 0
    unknown_sensor_frames: int = 0
    unattributed_frames: int = 0  # SAMPLES of known sensors after a reopen, before their descriptor came again
    mismatched_frames: int = 0  # SAMPLES whose channels or format differ from their sensor's descriptor
    refused_descriptors: int = 0  # DESCRIPTORs the pipeline cannot serve
    windows: int = 0
    annotations_closed: int = 0
    rebuilds: int = 0
    streams: int = 0  # streams started: 1 after the first descriptor, +1 per break (see the module docstring)
    last_break: str = ""  # why the latest stream started
    last_window_end_us: int | None = None
    pending: int = 0  # windows and labels waiting in memory for room on a full disk (store_backlog.py)
    unstored_windows: int = 0  # windows given up while the disk stayed full
    disk_full_episodes: int = 0


@dataclass(frozen=True)
class _LastFrame:
    """Where a sensor's stream was: what its next SAMPLES frame must continue."""

    seq: int
    end_us: float  # timestamp its next frame should carry
    duration_us: float  # of this frame: what one lost frame would have covered
    received_us: int | None  # gateway clock when it arrived (None in batch use)


class FrameProcessor:
    """Frames in, stored feature windows out. Not thread-safe: one thread feeds it.

    ``on_frame`` takes frames whose origin is one stream (a recording); ``on_received`` takes
    frames from a ``SerialReader`` and notices reopens of the link from their connection number.
    """

    def __init__(
        self,
        store: WindowStore,
        session_id: str,
        *,
        config: PipelineConfig = PipelineConfig(),
        on_window: Callable[[WindowRecord, int | None, float], object] | None = None,
        faults: Faults | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        self.store = store
        self.backlog = StoreBacklog(store, max_pending)  # writes wait here while the disk is full
        self._stored_at_once = 0
        self.on_window = on_window  # e.g. live recognition; called after the window is stored
        self.faults = faults if faults is not None else Faults()  # on_window's exceptions
        self.session_id = session_id  # the first stream's session; later ones are SESSION#N
        self.current_session = session_id
        self.sessions = [session_id]  # every session this processor has stored under
        self.config = config
        self.stats = ProcessingStats()
        self.descriptors: dict[int, SensorDescriptor] = {}
        self._assembler: WindowAssembler | None = None
        self._ordered: list[SensorDescriptor] = []
        self.feature_set_version = ""
        self.feature_names: list[str] = []
        self._last: dict[int, _LastFrame] = {}
        self.connection: int | None = None  # of the latest frame from the serial reader
        self.unconfirmed: set[int] = set()  # known sensors that have not re-announced since the reopen
        self._check_after_reopen: set[int] = set()  # sensors whose next SAMPLES frame must prove continuity
        self._held: list[Annotation] | None = None  # annotations waiting for the reopen's decision
        # Kinds of refused input already logged; bounded (by sensor id and channel layout) so that a
        # sender varying its descriptors cannot grow it without limit.
        self._warned: set[tuple[object, ...]] = set()

    def on_frame(self, frame: Frame, received_us: int | None = None) -> None:
        self.stats.frames += 1
        if isinstance(frame, SampleFrame):
            self._samples(frame, received_us)
        elif isinstance(frame, DescriptorFrame):
            self._descriptor(frame.descriptor)
        elif isinstance(frame, AnnotationFrame):
            self._annotation(frame.annotation)

    def on_received(self, item: ReceivedFrame) -> None:
        """A frame from the serial reader: a new connection number means the link was reopened."""
        if self.connection is not None and item.connection != self.connection:
            self.link_reopened()
        self.connection = item.connection
        self.on_frame(item.frame, item.received_us)

    def link_reopened(self) -> None:
        """The link was closed and opened again: whatever now speaks must prove it is the same stream."""
        if not self.descriptors:
            return
        self.unconfirmed = set(self.descriptors)
        self._check_after_reopen = set(self._last)
        if self._held is None:
            self._held = []
        log.info(
            "serial link reopened: known sensors wait for their descriptors",
            extra={"sensors": sorted(d.name for d in self.descriptors.values())},
        )

    def finish(self) -> None:
        """End of stream: emit the windows the pipeline can still complete."""
        if self._assembler is not None:
            self._store(self._assembler.flush())
        if self._held:
            log.warning(
                "annotations dropped: the stream they came with was never identified", extra={"count": len(self._held)}
            )
        self._held = None

    def _warn_once(self, kind: tuple[object, ...], message: str, **extra: object) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning(message, extra=extra)

    def _descriptor(self, descriptor: SensorDescriptor) -> None:
        known = self.descriptors.get(descriptor.sensor_id)
        if known == descriptor:
            self.unconfirmed.discard(descriptor.sensor_id)
            return
        ordered = [d for k, d in sorted({**self.descriptors, descriptor.sensor_id: descriptor}.items())]
        try:  # before anything changes: a refused descriptor leaves the known layout as it was
            assembler = WindowAssembler(ordered, self.config)
        except ValueError as exc:
            self.stats.refused_descriptors += 1
            self._warn_once(
                ("descriptor", descriptor.sensor_id),
                "sensor descriptor refused: the pipeline cannot use it; its samples are dropped",
                sensor=descriptor.name,
                reason=str(exc),
            )
            return
        if known is not None:
            self._new_stream(
                f"sensor {descriptor.sensor_id} announced another descriptor ({known.name} -> "
                f"{descriptor.name}, {descriptor.sample_rate_hz:g} Hz, {descriptor.n_channels} channels)"
            )
        elif self._held is not None:
            self._new_stream(f"a new sensor {descriptor.sensor_id} ({descriptor.name}) after the link was reopened")
        elif self._assembler is not None:
            self._store(self._assembler.flush())  # what the old layout can still finish
        self.unconfirmed.discard(descriptor.sensor_id)
        self.descriptors[descriptor.sensor_id] = descriptor
        self._ordered = ordered
        self._assembler = assembler
        self.feature_names = feature_names(self._ordered)
        self.feature_set_version = layout_version(self._ordered)
        self.stats.rebuilds += 1
        self.stats.streams = max(self.stats.streams, 1)
        log.info(
            "sensor layout",
            extra={
                "sensors": [d.name for d in self._ordered],
                "feature_set_version": self.feature_set_version,
                "n_features": len(self.feature_names),
            },
        )

    def _samples(self, frame: SampleFrame, received_us: int | None) -> None:
        descriptor = self.descriptors.get(frame.sensor_id)
        if descriptor is None or self._assembler is None:
            self.stats.unknown_sensor_frames += 1
            return
        if frame.sensor_id in self.unconfirmed:
            self.stats.unattributed_frames += 1
            return
        received = (frame.samples.shape[1], frame.sample_format)
        announced = (descriptor.n_channels, descriptor.sample_format)
        if received != announced:
            self.stats.mismatched_frames += 1
            self._warn_once(
                ("samples", frame.sensor_id, announced, received),
                "sample frames do not match their sensor's descriptor (stale or wrong firmware?): "
                "dropped and counted as mismatched",
                sensor=descriptor.name,
                announced="{} {}".format(*announced),
                received="{} {}".format(*received),
            )
            return
        last = self._last.get(frame.sensor_id)
        reason = self._continuity_break(frame, descriptor, last, received_us) if last is not None else ""
        if reason:
            self._new_stream(reason)
        elif self._held is not None:  # the first sensor heard since the reopen carries on: so do its labels
            log.info("sensor stream continues after the reopen", extra={"sensor": descriptor.name})
            self._release_held()
        self._check_after_reopen.discard(frame.sensor_id)
        duration_us = frame.samples.shape[0] * 1e6 / descriptor.sample_rate_hz
        self._last[frame.sensor_id] = _LastFrame(frame.seq, frame.timestamp_us + duration_us, duration_us, received_us)
        windows = self._assembler.push(descriptor.name, frame.timestamp_us, to_physical(frame, descriptor))
        self._store(windows)

    def _continuity_break(
        self, frame: SampleFrame, descriptor: SensorDescriptor, last: _LastFrame, received_us: int | None
    ) -> str:
        """Why ``frame`` cannot continue its sensor's stream ("" if it can); see the module docstring."""
        name = descriptor.name
        delta = (frame.seq - last.seq) % _SEQ_WRAP
        if delta == 0 or delta >= _SEQ_WRAP // 2:
            return f"sensor {name} restarted its sequence ({last.seq} -> {frame.seq})"
        if frame.sensor_id not in self._check_after_reopen:
            return ""
        jump_us = frame.timestamp_us - last.end_us
        tolerance_us = self.config.gap_tolerance_periods * 1e6 / descriptor.sample_rate_hz
        if jump_us < -tolerance_us:
            return f"sensor {name}'s time went back {-jump_us / 1e6:.3f} s after the reopen"
        down_us = received_us - last.received_us if received_us is not None and last.received_us is not None else 0
        possible_us = max(down_us, (delta - 1) * last.duration_us) * _FORWARD_SLACK + tolerance_us
        if jump_us > possible_us:
            return (
                f"sensor {name}'s time jumped {jump_us / 1e6:.3f} s ahead after the reopen, more than it "
                f"could have advanced ({possible_us / 1e6:.3f} s)"
            )
        return ""

    def _new_stream(self, reason: str) -> None:
        """Finish the old stream's windows and store whatever follows under a session of its own."""
        if self._assembler is not None:
            self._store(self._assembler.flush())
            self._assembler = WindowAssembler(self._ordered, self.config)  # its window grid starts afresh
        self.stats.streams += 1
        self.current_session = f"{self.session_id}#{self.stats.streams}"
        self.sessions.append(self.current_session)
        self.stats.last_break = reason
        self._last.clear()
        self._check_after_reopen.clear()
        log.warning(
            "another sensor stream: stored as a new session, apart from the windows before it",
            extra={"reason": reason, "session": self.current_session},
        )
        self._release_held()

    def _release_held(self) -> None:
        held, self._held = self._held or [], None
        for annotation in held:
            self._annotation(annotation)

    def _store(self, windows: list[Window]) -> None:
        for window in windows:
            completed_at = time.perf_counter()  # the window's last sample is in: latency starts here
            features = window_features(window, self._ordered)
            record = WindowRecord(
                self.current_session, window.start_us, window.end_us, features, self.feature_set_version
            )
            stored, row = self.backlog.submit(WindowWrite(record))
            self._stored_at_once += stored
            self.stats.last_window_end_us = window.end_us
            self._backlog_stats()
            if self.on_window is not None:
                try:
                    self.on_window(record, row, completed_at)
                except Exception as exc:  # noqa: BLE001 - recognition must never stop data collection
                    self.faults.record("window callback (live recognition)", exc, end_us=window.end_us)

    def _annotation(self, a: Annotation) -> None:
        if a.end_us is None:  # still going on: its closing annotation carries the whole interval
            return
        if self._held is not None:
            self._held.append(a)
            return
        self.backlog.submit(LabelWrite(self.current_session, a.start_us, a.end_us, a.label))
        self.stats.annotations_closed += 1
        self._backlog_stats()

    def flush_pending(self) -> bool:
        """Store the windows and labels waiting for room on a full disk; True if none wait."""
        done = self.backlog.flush()
        self._backlog_stats()
        return done

    def _backlog_stats(self) -> None:
        b = self.backlog
        self.stats.windows = self._stored_at_once + b.late_windows  # late: stored once there was room
        self.stats.pending, self.stats.unstored_windows, self.stats.disk_full_episodes = (
            len(b),
            b.dropped_windows,
            b.episodes,
        )


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
    def from_store(
        cls, store: WindowStore, sessions: list[str], names: list[str], feature_set_version: str
    ) -> "FeatureTable":
        """The windows of ``sessions`` (the first names the table: a recording's later streams,
        after a sender restart inside it, are ``SESSION#N``)."""
        result = store.query(feature_set_version, labelled_only=False)
        rows = np.isin(result.meta.session_ids.astype(str), sessions)
        return cls(
            names,
            result.X[rows],
            result.y[rows],
            result.meta.start_us[rows],
            result.meta.end_us[rows],
            feature_set_version,
            sessions[0],
        )

    def save(self, path: str | Path) -> None:
        """``.npz`` (arrays, labels "" when unlabelled) or ``.csv`` (one row per window)."""
        path = Path(path)
        labels = np.array(["" if y is None else y for y in self.labels], dtype=str)
        if path.suffix == ".npz":
            np.savez_compressed(
                path,
                X=self.X,
                names=np.array(self.names),
                labels=labels,
                start_us=self.start_us,
                end_us=self.end_us,
                feature_set_version=self.feature_set_version,
                session_id=self.session_id,
            )
        elif path.suffix == ".csv":
            with path.open("w", newline="") as fh:
                writer = csv.writer(fh)
                writer.writerow(["session_id", "start_us", "end_us", "label", *self.names])
                for i in range(len(labels)):
                    writer.writerow(
                        [
                            self.session_id,
                            int(self.start_us[i]),
                            int(self.end_us[i]),
                            labels[i],
                            *map(repr, self.X[i].tolist()),
                        ]
                    )
        else:
            raise ValueError(f"unknown output format {path.suffix!r}: use .npz or .csv")


def extract_recording(
    path: str | Path, *, config: PipelineConfig = PipelineConfig()
) -> tuple[FeatureTable, ProcessingStats]:
    """Batch features of a recording through exactly the live gateway's path (in a scratch store)."""
    from firmware_bridge.recording import Recording

    recording = Recording.load(path)
    session_id = recording.metadata.session_id
    with (
        tempfile.TemporaryDirectory(prefix="wheelfed-features-") as scratch,
        WindowStore(Path(scratch) / "windows.db") as store,
    ):
        processor = FrameProcessor(store, session_id, config=config)
        for descriptor in recording.metadata.descriptors:
            processor.on_frame(DescriptorFrame(descriptor))
        for frame in recording.frames:  # annotation frames included
            processor.on_frame(frame)
        for record in recording.label_records:  # the label track travels outside the frames
            processor.on_frame(AnnotationFrame(record.annotation))
        processor.finish()
        table = FeatureTable.from_store(
            store, processor.sessions, processor.feature_names, processor.feature_set_version
        )
    return table, processor.stats
