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

from .recording import FsyncPolicy, RecordingMetadata, RecordingWriter
from .serial_link import ReaderStats, ReceivedFrame, SerialReader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecordStats:
    records: int
    bytes_written: int
    reader: ReaderStats


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
    """Record frames from ``port`` into a new recording at ``path`` until ``stop_event`` is set."""
    with RecordingWriter(path, metadata, fsync=fsync) as writer:

        def store(item: ReceivedFrame) -> None:
            writer.write_frame(item.raw, item.received_us)

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
                    log.info("recording progress", extra={
                        "records": writer.records_written, "bytes": writer.bytes_written, "connected": s.connected,
                        "crc_errors": s.link.crc_errors, "lost_frames": s.link.lost_frames, "dropped": s.dropped})
        finally:
            reader.stop()
        stats = RecordStats(writer.records_written, writer.bytes_written, reader.stats)
    log.info("recording finished", extra={"path": str(path), "records": stats.records, "bytes": stats.bytes_written})
    return stats
