"""Child process for the recording kill -9 test: appends records as fast as ``PACE_S`` allows.

    python -m tests.firmware_bridge.recording_crash_writer PATH PROGRESS PACE_S

It starts a new recording at PATH, or resumes the one there (``RecordingWriter.resume``, which
drops a torn tail) and appends record i = the number of records already in it, i + 1, ...; record
i is fully determined by i (``frame``), so the parent can check every byte. After each
``write_frame`` returns, i is appended to PROGRESS with a raw ``os.write`` (no buffering, so a
SIGKILL cannot lose an already-reported index). On ``RecordingFull`` it appends ``F`` and tries
the same record again a moment later, as ``wheelfed record`` carries on when there is room.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

from firmware_bridge.recording import RecordingFull, RecordingMetadata, RecordingReader, RecordingWriter

META = RecordingMetadata("crash", subject="s1", source="test", created_us=5)


def frame(i: int) -> bytes:
    """Record i's bytes: 32 to 288 of them, different for every i."""
    return hashlib.sha256(b"%d" % i).digest() * (1 + i % 9)


def main(path: Path, progress: str, pace_s: float) -> None:
    fd = os.open(progress, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    if path.exists():
        with RecordingReader(path) as reader:
            first = sum(1 for _ in reader)
        writer = RecordingWriter.resume(path)
    else:
        first, writer = 0, RecordingWriter(path, META)
    i = first
    while True:
        try:
            writer.write_frame(frame(i), i)
        except RecordingFull:
            os.write(fd, b"F\n")
            time.sleep(0.01)
            continue
        os.write(fd, b"%d\n" % i)
        i += 1
        time.sleep(pace_s)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]))
