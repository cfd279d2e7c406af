"""Recordings on a real full disk (a small tmpfs, real ENOSPC), at every phase of the file.

What must hold: a full disk is one clear ``RecordingFull``; no half-written header is left
behind (the same name can be used again); a record that did not fit is cut off again, so the
file stays valid up to its last whole record and the writer carries on once there is room --
every record the writer acknowledged is read back, in order, with no damaged tail. A writer
killed (SIGKILL) at any moment -- writing, or retrying after ``RecordingFull`` -- loses no record
it acknowledged: the file reads back up to its last whole record, and the writer resumes it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from firmware_bridge.frames import chunk_samples, encode_frame
from firmware_bridge.recorder import RecordStats, record
from firmware_bridge.recording import RecordingFull, RecordingMetadata, RecordingReader, RecordingWriter
from firmware_bridge.replay import open_pty
from tests.firmware_bridge import recording_crash_writer as crash
from tests.firmware_bridge.frame_strategies import IMU
from tests.small_disk import SmallDisk

KIB = 1024
ROOT = Path(__file__).resolve().parents[2]
META = RecordingMetadata("full-disk", subject="s1", source="test", descriptors=(IMU,), created_us=5)


def _frames(n: int) -> list[bytes]:
    rng = np.random.default_rng(3)
    samples = rng.integers(-2000, 2000, (n * 40, 3)).astype(np.int16)
    return [encode_frame(f) for f in chunk_samples(IMU.sensor_id, samples, 100.0, 40)]  # ~270 B each


def test_a_full_disk_at_every_phase_is_one_clear_error_and_loses_nothing_acknowledged(tmp_path: Path) -> None:
    frames = _frames(200)
    phases: set[str] = set()
    for leave in range(0, 40 * KIB, 2 * KIB):  # header, then the n-th record, then a record's middle
        with SmallDisk(tmp_path / f"disk-{leave}", 128 * KIB) as disk:
            path = disk.path / "s.wfrec"
            disk.fill(leave)
            try:
                writer = RecordingWriter(path, META)
            except RecordingFull as exc:
                phases.add("header")
                assert str(path) in str(exc) and "disk is full" in str(exc)
                assert not path.exists()  # nothing half-made: the same name works once there is room
                disk.empty()
                writer = RecordingWriter(path, META)
            acked: list[bytes] = []
            with writer:
                for raw in frames:
                    try:
                        writer.write_frame(raw, len(acked))
                    except RecordingFull as exc:
                        phases.add("record")
                        assert "disk is full" in str(exc)
                        break
                    acked.append(raw)
                disk.empty()  # room again: the same writer carries on
                for raw in frames[:5]:
                    writer.write_frame(raw, len(acked))
                    acked.append(raw)
            with RecordingReader(path) as reader:
                assert [r.raw for r in reader] == acked
                assert reader.discarded_bytes == 0
    assert phases == {"header", "record"}


def test_recording_from_a_serial_port_counts_the_frames_a_full_disk_refused(tmp_path: Path) -> None:
    frames = _frames(400)
    master, port = open_pty()
    stop = threading.Event()
    result: list[RecordStats] = []
    with SmallDisk(tmp_path / "disk", 64 * KIB) as disk:
        path = disk.path / "s.wfrec"
        recorder = threading.Thread(target=lambda: result.append(record(port, path, META, stop)))
        try:
            recorder.start()
            time.sleep(0.5)  # the reader has opened the port
            for raw in frames:
                os.write(master, raw)
            time.sleep(1.5)  # delivered
        finally:
            stop.set()
            recorder.join(10)
            os.close(master)
        (stats,) = result
        assert stats.unrecorded_frames > 0
        assert stats.records + stats.unrecorded_frames + stats.reader.dropped == len(frames)
        with RecordingReader(path) as reader:
            assert len(list(reader)) == stats.records and reader.discarded_bytes == 0


def test_sigkill_while_the_disk_fills_loses_no_acknowledged_record(tmp_path: Path) -> None:
    rng = random.Random(20261126)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kills = {"writing": 0, "after RecordingFull": 0, "after RecordingFull and room again": 0}
    with SmallDisk(tmp_path / "disk", 64 * KIB) as disk:
        path, progress = disk.path / "s.wfrec", tmp_path / "progress"
        reported: list[int] = []

        def lines() -> list[str]:
            return progress.read_text().split()

        def wait(child: subprocess.Popen, until) -> None:
            deadline = time.monotonic() + 30
            while not until() and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
            assert child.poll() is None, child.stderr.read().decode()

        for run in range(9):
            mode = list(kills)[run % 3]
            if mode == "writing":
                disk.resize(disk.size + 32 * KIB)  # room for about 150 more records
            progress.write_text("")
            child = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.firmware_bridge.recording_crash_writer",
                    str(path),
                    str(progress),
                    "0.002",
                ],
                cwd=ROOT,
                env=env,
                stderr=subprocess.PIPE,
            )
            wait(child, lambda: lines() and (mode == "writing" or "F" in lines()))
            if mode == "after RecordingFull and room again":  # the same writer carries on past its cut record
                disk.resize(disk.size + 8 * KIB)
                wait(child, lambda: lines()[-1] != "F" and lines()[-5:].count("F") == 0)
            time.sleep(rng.uniform(0.0, 0.3 if mode == "writing" else 0.05))
            os.kill(child.pid, signal.SIGKILL)
            assert child.wait(10) == -signal.SIGKILL
            child.stderr.close()
            kills[mode] += 1
            assert ("F" in lines()) == (mode != "writing"), (mode, lines()[-3:])
            reported += [int(x) for x in lines() if x != "F"]
            with RecordingReader(path) as reader:  # readable up to its last whole record
                records = list(reader)
            # record i is frame(i): every acknowledged one, in order; at most one more that the
            # writer wrote but was killed before acknowledging
            assert [(r.time_us, r.raw) for r in records] == [(i, crash.frame(i)) for i in range(len(records))]
            assert reported == sorted(set(reported)) and reported[-1] < len(records) <= reported[-1] + 2
    assert len(reported) > 300, len(reported)
