"""WheelFed's on-disk session format: raw serial frames as received, plus label tracks.

A recording keeps the frames' exact bytes (not decoded samples) so a replay puts the very same
bytes on a serial line, and a later decoder fix applies to old sessions. The file is
append-only and every record carries its own length and CRC: after a power loss or a killed
recorder, the reader recovers everything up to the last whole record and reports how many tail
bytes it discarded. (Damage in the middle of the file cannot come from a crash of an
append-only writer; the reader stops there too and reports the rest as discarded.)

File layout (integers little-endian)::

    header
    offset  size  field
     0      8     magic           89 57 46 52 0D 0A 1A 0A  ("\\x89WFR\\r\\n\\x1a\\n": catches text-mode
                                  and 7-bit transfers like PNG's magic does)
     8      2     version         uint16 = 1
    10      4     metadata_len    uint32 M <= 1 MiB
    14      M     metadata        UTF-8 JSON (RecordingMetadata.to_dict): format, session_id,
                                  subject, source, created_us, descriptors [...], extra {...}
    14+M    4     header_crc      CRC-32 of bytes 0..13+M

    then records, each
     0      1     kind            1 = FRAME, 2 = LABEL
     1      4     body_len        uint32 B <= 1 MiB
     5      8     time_us         int64: FRAME = receive time on the gateway clock,
                                  LABEL = when the entry was made
    13      B     body            FRAME: one serial frame, byte for byte (see frames.py)
                                  LABEL: UTF-8 JSON {"label", "start_us", "end_us" (null = open),
                                         "annotation_id", "source_id"}
    13+B    4     crc             CRC-32 of bytes 0..12+B of this record

Label-track entries hold labels that did not arrive over the serial link (imported datasets,
a clinician's later corrections); labels sent as ANNOTATION frames are stored as FRAME records.
Both use the same identity (source_id, annotation_id): a later entry closes or relabels an
earlier one, so an interval may be written open and closed afterwards.

Durability: each record goes to the OS in one write() (a crashed *process* loses nothing
written); ``FsyncPolicy`` bounds what a *power loss* can take: fsync every N records or every
T seconds, whichever comes first (and on close). fsync per record would cost a flash-card
write per frame — hundreds per second on a Pi's SD card.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Mapping, Union

from .clock import wall_clock_us
from .descriptors import SensorDescriptor
from .frames import (
    Annotation,
    AnnotationFrame,
    DescriptorFrame,
    Frame,
    FrameError,
    SampleFrame,
    descriptor_from_dict,
    descriptor_to_dict,
    decode_frame,
    json_depth,
)

log = logging.getLogger(__name__)

MAGIC = b"\x89WFR\r\n\x1a\n"
#: The metadata's JSON nesting: a session's header is a few levels deep (descriptors, channels).
MAX_METADATA_DEPTH = 16
FORMAT_VERSION = 1
FORMAT_NAME = "wheelfed-recording"
MAX_METADATA_BYTES = 1 << 20
MAX_RECORD_BODY = 1 << 20

_FILE_HEAD = struct.Struct("<8sHI")
_RECORD_HEAD = struct.Struct("<BIq")
_CRC = struct.Struct("<I")


class RecordKind(IntEnum):
    FRAME = 1
    LABEL = 2


class RecordingFull(OSError):
    """The disk is full: the record (or the new file's header) was not written. The recording
    stays valid up to its last whole record, and the same writer carries on once there is room."""


class RecordingError(Exception):
    """A file that is not a readable WheelFed recording (bad magic, version or header)."""


@dataclass(frozen=True)
class RecordingMetadata:
    session_id: str
    subject: str | None = None
    source: str = ""
    descriptors: tuple[SensorDescriptor, ...] = ()
    created_us: int = field(default_factory=wall_clock_us)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.session_id:
            raise ValueError("a recording needs a non-empty session_id")
        ids = [d.sensor_id for d in self.descriptors]
        if len(set(ids)) != len(ids):
            raise ValueError(f"descriptors repeat a sensor id: {ids}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "session_id": self.session_id,
            "subject": self.subject,
            "source": self.source,
            "created_us": self.created_us,
            "descriptors": [descriptor_to_dict(d) for d in self.descriptors],
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> RecordingMetadata:
        if doc.get("format") != FORMAT_NAME:
            raise RecordingError(f"metadata format is {doc.get('format')!r}, expected {FORMAT_NAME!r}")
        try:
            return cls(
                session_id=str(doc["session_id"]),
                subject=None if doc.get("subject") is None else str(doc["subject"]),
                source=str(doc.get("source", "")),
                descriptors=tuple(descriptor_from_dict(d) for d in doc.get("descriptors", [])),
                created_us=int(doc.get("created_us", 0)),
                extra=dict(doc.get("extra", {})),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:  # FrameError is a ValueError
            raise RecordingError(f"recording metadata is invalid: {exc}") from exc


@dataclass(frozen=True)
class FrameRecord:
    time_us: int  # receive time on the gateway clock
    raw: bytes


@dataclass(frozen=True)
class LabelRecord:
    time_us: int
    annotation: Annotation


Record = Union[FrameRecord, LabelRecord]


def _annotation_to_json(a: Annotation) -> bytes:
    doc = {
        "label": a.label,
        "start_us": a.start_us,
        "end_us": a.end_us,
        "annotation_id": a.annotation_id,
        "source_id": a.source_id,
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _annotation_from_json(body: bytes) -> Annotation:
    try:
        doc = json.loads(body.decode("utf-8"))
        return Annotation(
            str(doc["label"]),
            int(doc["start_us"]),
            None if doc["end_us"] is None else int(doc["end_us"]),
            int(doc["annotation_id"]),
            int(doc["source_id"]),
        )
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise RecordingError(f"label record is invalid: {exc}") from exc


def _encode_record(kind: RecordKind, time_us: int, body: bytes) -> bytes:
    if len(body) > MAX_RECORD_BODY:
        raise ValueError(f"record body of {len(body)} bytes exceeds {MAX_RECORD_BODY}")
    head = _RECORD_HEAD.pack(kind, len(body), time_us)
    return head + body + _CRC.pack(zlib.crc32(body, zlib.crc32(head)))


@dataclass(frozen=True)
class FsyncPolicy:
    """fsync after ``every_records`` records or ``every_s`` seconds, whichever comes first (None: never)."""

    every_records: int | None = 256
    every_s: float | None = 1.0


def _fsync_dir(path: Path) -> None:
    # A new file's directory entry must reach the disk too, or a power loss can lose the whole file.
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _full_disk(path: Path, exc: OSError, what: str) -> RecordingFull | None:
    if exc.errno != errno.ENOSPC:
        return None
    full = RecordingFull(
        f"{path}: the disk is full: {what}; the recording is valid up to its last whole "
        "record -- make room and writing carries on"
    )
    full.errno, full.__cause__ = errno.ENOSPC, exc
    return full


class RecordingWriter:
    """Appends records to a recording. Thread-safe; a new file is never written over an old one."""

    def __init__(self, path: str | Path, metadata: RecordingMetadata, *, fsync: FsyncPolicy = FsyncPolicy()) -> None:
        self.path = Path(path)
        self.metadata = metadata
        meta = json.dumps(metadata.to_dict(), separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        if len(meta) > MAX_METADATA_BYTES:
            raise ValueError(f"metadata of {len(meta)} bytes exceeds {MAX_METADATA_BYTES}")
        head = _FILE_HEAD.pack(MAGIC, FORMAT_VERSION, len(meta)) + meta
        try:
            self._file: BinaryIO = open(self.path, "xb", buffering=0)
        except FileExistsError:
            raise FileExistsError(
                f"{self.path} exists: choose a new file, or RecordingWriter.resume() to append to it"
            ) from None
        self._init_state(fsync)
        try:
            self._write(head + _CRC.pack(zlib.crc32(head)))
            self.sync()
            _fsync_dir(self.path)
            self._end = len(head) + _CRC.size
        except OSError as exc:  # a file cut inside its header is no recording: remove it
            self._file.close()
            self.path.unlink(missing_ok=True)
            raise _full_disk(self.path, exc, "the new recording's header was not written") or exc

    @classmethod
    def resume(cls, path: str | Path, *, fsync: FsyncPolicy = FsyncPolicy()) -> RecordingWriter:
        """Continue an existing recording (e.g. after a power loss): drops its damaged tail, then appends."""
        with RecordingReader(path) as reader:
            for _ in reader:
                pass
            metadata, valid_end, discarded = reader.metadata, reader.valid_end, reader.discarded_bytes
        writer = cls.__new__(cls)  # skips __init__, which would create a new file
        writer.path, writer.metadata = Path(path), metadata
        writer._file = open(writer.path, "r+b", buffering=0)
        writer._file.truncate(valid_end)
        writer._file.seek(valid_end)
        writer._init_state(fsync)
        writer._end = valid_end
        writer.sync()
        if discarded:
            log.warning(
                "recording tail discarded before appending", extra={"path": str(path), "discarded_bytes": discarded}
            )
        return writer

    def _init_state(self, fsync: FsyncPolicy) -> None:
        self._policy = fsync
        self._lock = threading.Lock()
        self._unsynced = 0
        self._last_sync = time.monotonic()
        self.records_written = 0
        self.bytes_written = 0
        self._end = 0  # the offset just past the last whole record

    def _write(self, data: bytes) -> None:
        """Write all of ``data`` (a raw file may take part of it); ``bytes_written`` counts whole writes."""
        view = memoryview(data)
        while view:
            view = view[self._file.write(view) :]
        self.bytes_written += len(data)

    def write_frame(self, raw: bytes, time_us: int) -> None:
        """Store one serial frame exactly as received, with its receive time."""
        self._append(RecordKind.FRAME, time_us, bytes(raw))

    def write_label(self, annotation: Annotation, time_us: int | None = None) -> None:
        self._append(RecordKind.LABEL, wall_clock_us() if time_us is None else time_us, _annotation_to_json(annotation))

    def _append(self, kind: RecordKind, time_us: int, body: bytes) -> None:
        record = _encode_record(kind, time_us, body)
        with self._lock:
            if self._file.closed:
                raise ValueError(f"recording {self.path} is closed")
            try:
                self._write(record)
            except OSError as exc:  # cut the partial record off again: the file stays valid
                self._file.truncate(self._end)
                self._file.seek(self._end)
                raise _full_disk(self.path, exc, "a record was not written") or exc
            self._end += len(record)
            self.records_written += 1
            self._unsynced += 1
            self._maybe_sync_locked()

    def maybe_sync(self) -> None:
        """Apply the time part of the fsync policy; call it now and then when records stop coming."""
        with self._lock:
            if not self._file.closed:
                self._maybe_sync_locked()

    def _maybe_sync_locked(self) -> None:
        p = self._policy
        if not self._unsynced:
            return
        if (p.every_records is not None and self._unsynced >= p.every_records) or (
            p.every_s is not None and time.monotonic() - self._last_sync >= p.every_s
        ):
            self._sync_locked()

    def _sync_locked(self) -> None:
        os.fsync(self._file.fileno())
        self._unsynced = 0
        self._last_sync = time.monotonic()

    def sync(self) -> None:
        with self._lock:
            self._sync_locked()

    def close(self) -> None:
        with self._lock:
            if self._file.closed:
                return
            self._sync_locked()
            self._file.close()

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RecordingReader:
    """Reads a recording's metadata, then its records in order, stopping at the first damaged one.

    After iteration, ``valid_end`` is the offset just past the last whole record and
    ``discarded_bytes`` the number of bytes after it that were ignored.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file = open(self.path, "rb")
        try:
            self.metadata = self._read_header()
        except BaseException:
            self._file.close()
            raise
        self.valid_end = self.header_size
        self.discarded_bytes = 0

    def _read_header(self) -> RecordingMetadata:
        head = self._file.read(_FILE_HEAD.size)
        if len(head) < _FILE_HEAD.size or head[:8] != MAGIC:
            raise RecordingError(f"{self.path} is not a WheelFed recording (bad magic or cut before its header ended)")
        _, version, meta_len = _FILE_HEAD.unpack(head)
        if version != FORMAT_VERSION:
            raise RecordingError(
                f"{self.path} is recording format version {version}; this reader knows {FORMAT_VERSION}"
            )
        if meta_len > MAX_METADATA_BYTES:
            raise RecordingError(
                f"{self.path}: metadata length {meta_len} exceeds {MAX_METADATA_BYTES}; header is corrupt"
            )
        meta = self._file.read(meta_len)
        crc = self._file.read(_CRC.size)
        if len(meta) < meta_len or len(crc) < _CRC.size:
            raise RecordingError(f"{self.path} was cut inside its header: no records can be recovered")
        if zlib.crc32(head + meta) != _CRC.unpack(crc)[0]:
            raise RecordingError(f"{self.path}: header CRC mismatch; the metadata is corrupt")
        self.header_size = _FILE_HEAD.size + meta_len + _CRC.size
        depth = json_depth(meta)
        if depth > MAX_METADATA_DEPTH:  # json.loads would recurse (RecursionError) on a hostile file
            raise RecordingError(f"{self.path}: metadata JSON is nested {depth} deep (at most {MAX_METADATA_DEPTH})")
        try:
            doc = json.loads(meta.decode("utf-8"))
        except ValueError as exc:  # not UTF-8, not JSON, or an integer longer than Python converts
            raise RecordingError(f"{self.path}: metadata is not UTF-8 JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise RecordingError(f"{self.path}: metadata is not a JSON object")
        return RecordingMetadata.from_dict(doc)

    def __iter__(self) -> Iterator[Record]:
        f = self._file
        f.seek(self.valid_end)
        while True:
            head = f.read(_RECORD_HEAD.size)
            if len(head) < _RECORD_HEAD.size:
                break
            kind, length, time_us = _RECORD_HEAD.unpack(head)
            if kind not in (RecordKind.FRAME, RecordKind.LABEL) or length > MAX_RECORD_BODY:
                break
            body = f.read(length)
            crc = f.read(_CRC.size)
            if len(body) < length or len(crc) < _CRC.size or zlib.crc32(body, zlib.crc32(head)) != _CRC.unpack(crc)[0]:
                break
            self.valid_end += _RECORD_HEAD.size + length + _CRC.size
            yield (
                FrameRecord(time_us, body)
                if kind == RecordKind.FRAME
                else LabelRecord(time_us, _annotation_from_json(body))
            )
        self.discarded_bytes = os.fstat(f.fileno()).st_size - self.valid_end
        if self.discarded_bytes:
            log.warning(
                "recording has a damaged or truncated tail",
                extra={"path": str(self.path), "valid_end": self.valid_end, "discarded_bytes": self.discarded_bytes},
            )

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> RecordingReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def merge_annotations(entries: list[Annotation]) -> list[Annotation]:
    """Fold annotation updates (in arrival order) into one interval per (source_id, annotation_id).

    The latest entry sets the label and start; an open entry (end None) does not erase an end
    already seen, so a repeated 'started' announcement cannot re-open a closed interval — unless
    it starts after that end: then the source has reused the id for a new interval.
    """
    merged: dict[tuple[int, int], Annotation] = {}
    for a in entries:
        key = (a.source_id, a.annotation_id)
        old = merged.get(key)
        if old is not None and a.end_us is None and old.end_us is not None and old.end_us >= a.start_us:
            a = Annotation(a.label, a.start_us, old.end_us, a.annotation_id, a.source_id)
        merged[key] = a
    return sorted(merged.values(), key=lambda a: (a.start_us, a.source_id, a.annotation_id))


@dataclass
class Recording:
    """A whole recording in memory: what replay, importers' tests and offline tools work from."""

    path: Path
    metadata: RecordingMetadata
    descriptors: dict[int, SensorDescriptor]  # metadata's, updated by DESCRIPTOR frames in file order
    frame_records: list[FrameRecord]
    frames: list[Frame]  # decoded frame_records, same order
    label_records: list[LabelRecord]
    annotations: list[Annotation]  # merged from ANNOTATION frames and label records
    discarded_bytes: int

    @classmethod
    def load(cls, path: str | Path) -> Recording:
        frame_records: list[FrameRecord] = []
        frames: list[Frame] = []
        label_records: list[LabelRecord] = []
        updates: list[Annotation] = []
        with RecordingReader(path) as reader:
            descriptors = {d.sensor_id: d for d in reader.metadata.descriptors}
            for rec in reader:
                if isinstance(rec, LabelRecord):
                    label_records.append(rec)
                    updates.append(rec.annotation)
                    continue
                try:
                    frame = decode_frame(rec.raw)
                except FrameError as exc:
                    raise RecordingError(f"{path}: a CRC-valid record holds an invalid frame ({exc})") from exc
                frame_records.append(rec)
                frames.append(frame)
                if isinstance(frame, DescriptorFrame):
                    descriptors[frame.sensor_id] = frame.descriptor
                elif isinstance(frame, AnnotationFrame):
                    updates.append(frame.annotation)
            metadata, discarded = reader.metadata, reader.discarded_bytes
        return cls(
            Path(path),
            metadata,
            descriptors,
            frame_records,
            frames,
            label_records,
            merge_annotations(updates),
            discarded,
        )

    def sample_frames(self, sensor_id: int) -> list[SampleFrame]:
        return [f for f in self.frames if isinstance(f, SampleFrame) and f.sensor_id == sensor_id]
