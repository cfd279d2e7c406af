"""Recording a live serial link to disk: the function behind ``wheelfed record``.

Frames are written as they are delivered — exact bytes plus receive time — by the serial
reader's delivery thread, so a slow disk can never stall the read loop (the reader drops the
oldest queued frames instead, and counts them). Only CRC-valid frames are stored: garbage on the
line is not part of a session.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .recording import FsyncPolicy, RecordingFull, RecordingMetadata, RecordingWriter
from .serial_link import ReaderStats, ReceivedFrame, SerialReader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecordStats:
    records: int
    bytes_written: int
    reader: ReaderStats
    unrecorded_frames: int = 0  # refused by a full disk (the recording stays valid; writing resumes with room)


class _DiskFullCount:
    """Frames a full disk refused, with one warning line per episode (not one per frame)."""

    def __init__(self) -> None:
        self.frames = 0
        self._full = False

    def refused(self, exc: RecordingFull) -> None:
        self.frames += 1
        if not self._full:
            self._full = True
            log.warning("disk full: frames are not being recorded until there is room", extra={"reason": str(exc)})

    def written(self) -> None:
        if self._full:
            self._full = False
            log.info("disk has room again: recording resumed", extra={"unrecorded_frames": self.frames})


def record(
    port: str,
    path: str | Path,
    metadata: RecordingMetadata,
    stop_event: threading.Event,
    *,
    baudrate: int = 115200,
    fsync: FsyncPolicy = FsyncPolicy(),
    progress_every_s: float = 10.0,
) -> RecordStats:
    """Record frames from ``port`` into a new recording at ``path`` until ``stop_event`` is set.

    A full disk does not end the recording: the frames it refuses are counted
    (``unrecorded_frames``) and writing resumes when there is room; the file stays valid.
    """
    unrecorded = _DiskFullCount()
    with RecordingWriter(path, metadata, fsync=fsync) as writer:

        def store(item: ReceivedFrame) -> None:
            try:
                writer.write_frame(item.raw, item.received_us)
            except RecordingFull as exc:
                unrecorded.refused(exc)
            else:
                unrecorded.written()

        reader = SerialReader(port, baudrate, on_received=store, descriptors=metadata.descriptors).start()
        log.info("recording started", extra={"port": port, "path": str(path), "session_id": metadata.session_id})
        next_progress = time.monotonic() + progress_every_s
        try:
            # Wake up regularly so the time part of the fsync policy holds while frames trickle in.
            while not stop_event.wait(0.25):
                writer.maybe_sync()
                if reader.error is not None:
                    raise ValueError(f"cannot record from {port!r}: {reader.error}") from reader.error
                if time.monotonic() >= next_progress:
                    next_progress = time.monotonic() + progress_every_s
                    s = reader.stats
                    log.info(
                        "recording progress",
                        extra={
                            "records": writer.records_written,
                            "bytes": writer.bytes_written,
                            "connected": s.connected,
                            "crc_errors": s.link.crc_errors,
                            "lost_frames": s.link.lost_frames,
                            "dropped": s.dropped,
                            "unrecorded_frames": unrecorded.frames,
                        },
                    )
        finally:
            reader.stop()
        stats = RecordStats(writer.records_written, writer.bytes_written, reader.stats, unrecorded.frames)
    log.info("recording finished", extra={"path": str(path), "records": stats.records, "bytes": stats.bytes_written})
    return stats
