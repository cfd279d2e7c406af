"""Replay into a pty, read back by the SerialReader; record() of a replayed session; pacing and failures."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from firmware_bridge.frames import AnnotationFrame, DescriptorFrame, Frame, FrameDecoder, SampleFrame
from firmware_bridge.recorder import record
from firmware_bridge.recording import Recording, RecordingMetadata, merge_annotations
from firmware_bridge.replay import ReplayError, open_pty, replay, schedule
from firmware_bridge.serial_link import SerialReader
from tests.firmware_bridge.bridge_support import WAIT_S, wait_for
from tests.firmware_bridge.frame_strategies import ECG, IMU, small_session


def read_replay(rec: Recording, speed: float) -> tuple[list[Frame], float]:
    master, path = open_pty()
    got: list[Frame] = []
    try:
        with SerialReader(path, 115200, got.append) as reader:
            assert reader.wait_connected(WAIT_S)
            t0 = time.monotonic()
            stats = replay(rec, master, speed, wait_for_reader_s=WAIT_S, settle_s=0.0)
            wall = time.monotonic() - t0
            assert stats.completed and stats.frames_sent == len(schedule(rec))
            assert wait_for(lambda: len(got) == stats.frames_sent)
            assert reader.stats.link.bytes_skipped == 0 and reader.stats.link.gaps == 0
    finally:
        os.close(master)
    return got, wall


def test_schedule_sends_descriptors_first_then_frames_in_recorded_order_with_labels_at_their_times(
    tmp_path: Path,
) -> None:
    rec = Recording.load(small_session(tmp_path / "s.wfrec"))
    plan = schedule(rec)
    assert [p.frame for p in plan[:2]] == [DescriptorFrame(IMU, 0, 1_000_000), DescriptorFrame(ECG, 0, 1_000_000)]
    body = plan[2:]
    assert [
        p.frame for p in body if not (isinstance(p.frame, AnnotationFrame) and p.frame.sensor_id == 0)
    ] == rec.frames
    assert all(a.at_us <= b.at_us for a, b in zip(plan, plan[1:]))
    labels = [
        (p.at_us, p.frame.annotation.label, p.frame.annotation.end_us, p.frame.seq)
        for p in body
        if isinstance(p.frame, AnnotationFrame) and p.frame.sensor_id == 0
    ]
    assert labels == [
        (1_000_000, "rest", None, 0),
        (1_030_000, "rest", 1_030_000, 1),
        (1_030_000, "propel", None, 2),
        (1_060_000, "propel", 1_060_000, 3),
    ]
    # A SAMPLES frame is due when its last sample was taken.
    first = next(p for p in body if isinstance(p.frame, SampleFrame))
    assert first.at_us == first.frame.timestamp_us + 10 * 1000


def test_replay_into_a_pty_reads_back_as_the_recording(tmp_path: Path) -> None:
    rec = Recording.load(small_session(tmp_path / "s.wfrec"))
    got, _ = read_replay(rec, speed=0)
    assert got == [p.frame for p in schedule(rec)]
    assert [f for f in got if isinstance(f, SampleFrame)] == [f for f in rec.frames if isinstance(f, SampleFrame)]
    received = merge_annotations([f.annotation for f in got if isinstance(f, AnnotationFrame)])
    assert received == rec.annotations


def test_real_data_replays_at_speed_and_keeps_time(imported: dict[str, list[Path]]) -> None:
    rec = Recording.load(imported["ecg"][0])  # pyhrv, 22.35 s of 1000 Hz ECG
    got, wall = read_replay(rec, speed=40.0)
    assert got[1:] == rec.frames
    span = (schedule(rec)[-1].at_us - schedule(rec)[0].at_us) / 1e6
    assert span / 40 - 0.01 <= wall < span / 40 + 0.5


def test_record_of_a_replayed_session_holds_the_same_frames_and_labels(tmp_path: Path) -> None:
    source = Recording.load(small_session(tmp_path / "s.wfrec"))
    master, path = open_pty()
    stop = threading.Event()
    out = tmp_path / "recorded.wfrec"
    result: list[object] = []
    recorder = threading.Thread(target=lambda: result.append(record(path, out, RecordingMetadata("rec-1"), stop)))
    try:
        recorder.start()
        replay(source, master, 0, wait_for_reader_s=WAIT_S, settle_s=0.3)
        assert wait_for(lambda: out.exists() and len(Recording.load(out).frames) == len(schedule(source)))
    finally:
        stop.set()
        recorder.join(WAIT_S)
        os.close(master)
    recorded = Recording.load(out)
    assert recorded.frames == [p.frame for p in schedule(source)]
    assert recorded.annotations == source.annotations
    assert recorded.descriptors == source.descriptors
    assert result[0].records == len(recorded.frames)  # type: ignore[attr-defined]
    assert all(r.time_us > 1_600_000_000_000_000 for r in recorded.frame_records)  # wall-clock receive times


def test_replay_to_a_device_path(tmp_path: Path) -> None:
    rec = Recording.load(small_session(tmp_path / "s.wfrec"))
    master, path = open_pty()
    try:
        stats = replay(rec, path, 0)  # pyserial opens the slave like a real /dev/ttyUSB0
        dec = FrameDecoder()
        frames: list[Frame] = []
        os.set_blocking(master, False)
        while len(frames) < stats.frames_sent:
            frames += dec.feed(os.read(master, 65536))
    finally:
        os.close(master)
    assert frames == [p.frame for p in schedule(rec)]


def test_stop_event_ends_a_replay_early(tmp_path: Path) -> None:
    rec = Recording.load(small_session(tmp_path / "s.wfrec"))
    master, path = open_pty()
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    try:
        with SerialReader(path, 115200, lambda f: None) as reader:
            assert reader.wait_connected(WAIT_S)
            stats = replay(rec, master, 0.05, stop_event=stop)  # 60 ms of recording would take 1.2 s
    finally:
        os.close(master)
    assert not stats.completed and 0 < stats.frames_sent < len(schedule(rec))


def test_replay_fails_clearly_when_nobody_reads(tmp_path: Path) -> None:
    rec = Recording.load(small_session(tmp_path / "s.wfrec", n_imu_frames=400, frame_samples=20))
    master, _ = open_pty()
    try:
        with pytest.raises(ReplayError, match="no reader"):
            replay(rec, master, 0, wait_for_reader_s=0.1)
        with pytest.raises(ReplayError, match="nobody has read"):
            replay(rec, master, 0, stall_timeout_s=0.1)  # fills the pty buffer, then stalls
    finally:
        os.close(master)
    with pytest.raises(ReplayError, match="cannot open"):
        replay(rec, str(tmp_path / "no-such-tty"), 0)
    with pytest.raises(ValueError, match="speed"):
        replay(rec, master, -1)


def test_a_paced_replay_holds_at_its_limit_until_released(tmp_path: Path) -> None:
    from firmware_bridge.replay import Pace

    rec = Recording.load(small_session(tmp_path / "s.wfrec"))
    plan = schedule(rec)
    first = plan[0].at_us
    limit_s = (plan[len(plan) // 2].at_us - first) / 1e6
    held = sum((p.at_us - first) / 1e6 <= limit_s for p in plan)
    pace = Pace(speed=0, limit_s=limit_s)
    master, path = open_pty()
    got: list[Frame] = []
    try:
        with SerialReader(path, 115200, got.append) as reader:
            assert reader.wait_connected(WAIT_S)
            result = {}
            runner = threading.Thread(
                target=lambda: result.update(stats=replay(rec, master, pace, wait_for_reader_s=WAIT_S, settle_s=0.0))
            )
            runner.start()
            assert wait_for(lambda: len(got) == held)
            time.sleep(0.5)
            assert len(got) == held and runner.is_alive()  # nothing past the limit
            pace.set(limit_s=float("inf"))
            runner.join(WAIT_S)
            assert result["stats"].completed and wait_for(lambda: len(got) == len(plan))
    finally:
        os.close(master)
    assert got == [p.frame for p in plan]
