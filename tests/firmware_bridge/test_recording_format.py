"""The recording file: round trip, recovery from a cut or garbled tail at any offset, fsync policy, resume."""

from __future__ import annotations

import os
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from firmware_bridge import recording as recording_module
from firmware_bridge.frames import Annotation, AnnotationFrame, DescriptorFrame, SampleFrame, encode_frame
from firmware_bridge.recording import (
    FsyncPolicy,
    FrameRecord,
    LabelRecord,
    Recording,
    RecordingError,
    RecordingMetadata,
    RecordingReader,
    RecordingWriter,
    merge_annotations,
)
from tests.firmware_bridge.frame_strategies import ECG, IMU, small_session


def records_of(path: Path) -> tuple[list[object], int, int]:
    with RecordingReader(path) as r:
        recs = list(r)
        return recs, r.valid_end, r.discarded_bytes


def header_size(path: Path) -> int:
    with RecordingReader(path) as r:
        return r.header_size


def test_metadata_frames_and_labels_round_trip(tmp_path: Path) -> None:
    path = small_session(tmp_path / "s.wfrec")
    rec = Recording.load(path)
    assert rec.metadata == RecordingMetadata("test-session", "s1", "test", (IMU, ECG), 5, {})
    assert rec.descriptors == {1: IMU, 2: ECG}
    assert len(rec.frames) == 17 and rec.discarded_bytes == 0
    assert [f.sensor_id for f in rec.sample_frames(1)] == [1] * 8
    assert rec.frame_records[0].time_us == 1_010_050
    assert [(a.label, a.start_us, a.end_us, a.source_id) for a in rec.annotations] == [
        ("rest", 1_000_000, 1_030_000, 0),
        ("button", 1_025_000, None, 9),
        ("propel", 1_030_000, 1_060_000, 0),
    ]
    assert [type(r) for r in rec.label_records] == [LabelRecord] * 3


def test_header_bytes_follow_the_documented_layout(tmp_path: Path) -> None:
    path = small_session(tmp_path / "s.wfrec")
    data = path.read_bytes()
    magic, version, n = struct.unpack_from("<8sHI", data)
    assert (magic, version) == (b"\x89WFR\r\n\x1a\n", 1)
    assert struct.unpack_from("<I", data, 14 + n)[0] == zlib.crc32(data[: 14 + n])
    kind, length, time_us = struct.unpack_from("<BIq", data, 18 + n)
    body = data[18 + n + 13 : 18 + n + 13 + length]
    assert (kind, time_us) == (1, 1_010_050)
    assert struct.unpack_from("<I", data, 18 + n + 13 + length)[0] == zlib.crc32(data[18 + n : 18 + n + 13 + length])
    assert body[:2] == b"\xa5\x5a"


def test_a_recording_cut_at_any_byte_recovers_every_whole_record_before_the_cut(tmp_path: Path) -> None:
    path = small_session(tmp_path / "s.wfrec", n_imu_frames=3, frame_samples=2)
    data = path.read_bytes()
    full, _, _ = records_of(path)
    header_end = header_size(path)
    # Offsets at which each record ends.
    ends, pos = [], header_end
    for r in full:
        body = len(r.raw) if isinstance(r, FrameRecord) else len(recording_module._annotation_to_json(r.annotation))
        pos += 13 + body + 4
        ends.append(pos)
    assert ends[-1] == len(data)
    cut_path = tmp_path / "cut.wfrec"
    for cut in range(len(data) + 1):
        cut_path.write_bytes(data[:cut])
        if cut < header_end:
            with pytest.raises(RecordingError):
                RecordingReader(cut_path)
            continue
        recs, valid_end, discarded = records_of(cut_path)
        n_whole = sum(e <= cut for e in ends)
        assert recs == full[:n_whole]
        assert valid_end == (ends[n_whole - 1] if n_whole else header_end)
        assert discarded == cut - valid_end


@pytest.mark.parametrize("tail", [b"\x00" * 100, bytes(range(256)), b"\x01\xff\xff\xff\x7f"])
def test_garbage_after_the_last_record_is_discarded_and_reported(tmp_path: Path, tail: bytes) -> None:
    path = small_session(tmp_path / "s.wfrec")
    clean = Recording.load(path)
    with open(path, "ab") as f:
        f.write(tail)
    rec = Recording.load(path)
    assert rec.frames == clean.frames and rec.annotations == clean.annotations
    assert rec.discarded_bytes == len(tail)


def test_a_bit_flip_stops_recovery_at_the_damaged_record(tmp_path: Path) -> None:
    path = small_session(tmp_path / "s.wfrec")
    full, _, _ = records_of(path)
    data = bytearray(path.read_bytes())
    second = header_size(path) + 13 + len(full[0].raw) + 4
    data[second + 20] ^= 0x04  # inside the second record's frame
    path.write_bytes(bytes(data))
    recs, valid_end, discarded = records_of(path)
    assert recs == full[:1]
    assert (valid_end, discarded) == (second, len(data) - second)


@pytest.mark.parametrize("damage", ["magic", "version", "metadata", "length"])
def test_a_damaged_header_is_an_actionable_error(tmp_path: Path, damage: str) -> None:
    path = small_session(tmp_path / "s.wfrec")
    data = bytearray(path.read_bytes())
    index = {"magic": 1, "version": 8, "metadata": 30, "length": 13}[damage]
    data[index] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(RecordingError, match=str(path)):
        Recording.load(path)


def test_the_writer_never_overwrites_and_resume_appends_after_a_damaged_tail(tmp_path: Path) -> None:
    path = small_session(tmp_path / "s.wfrec", with_labels=False)
    with pytest.raises(FileExistsError, match="resume"):
        RecordingWriter(path, RecordingMetadata("other"))
    before = Recording.load(path)
    with open(path, "ab") as f:
        f.write(b"\x01\x40\x00\x00\x00torn")  # a record cut by a power loss
    extra = SampleFrame(1, 99, 5_000_000, np.ones((2, 3), np.int16))
    with RecordingWriter.resume(path) as w:
        w.write_frame(encode_frame(extra), 5_000_010)
        w.write_label(Annotation("late", 4_000_000, 4_500_000, 7), 5_000_020)
    after = Recording.load(path)
    assert after.discarded_bytes == 0
    assert after.metadata == before.metadata
    assert after.frames == before.frames + [extra]
    assert after.annotations[-1] == Annotation("late", 4_000_000, 4_500_000, 7)


def test_descriptor_frames_in_the_recording_update_the_metadata_descriptors(tmp_path: Path) -> None:
    path = tmp_path / "d.wfrec"
    faster = type(IMU)(1, "imu", "imu", 200.0, IMU.channels, "int16")
    with RecordingWriter(path, RecordingMetadata("d", descriptors=(IMU,))) as w:
        w.write_frame(encode_frame(DescriptorFrame(ECG)), 1)
        w.write_frame(encode_frame(DescriptorFrame(faster, 1, 2)), 2)
    assert Recording.load(path).descriptors == {1: faster, 2: ECG}


def test_fsync_every_n_records_and_on_close(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(recording_module.os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    frame = encode_frame(SampleFrame(1, 0, 0, np.ones((2, 3), np.int16)))
    w = RecordingWriter(tmp_path / "f.wfrec", RecordingMetadata("f"), fsync=FsyncPolicy(every_records=3, every_s=None))
    created = len(calls)  # the file at creation, and its directory
    assert created == 2
    for _ in range(7):
        w.write_frame(frame, 0)
    assert len(calls) - created == 2
    w.close()
    assert len(calls) - created == 3
    w.close()
    assert len(calls) - created == 3


def test_fsync_every_t_seconds_even_when_records_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(recording_module.os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    frame = encode_frame(SampleFrame(1, 0, 0, np.ones((2, 3), np.int16)))
    with RecordingWriter(tmp_path / "t.wfrec", RecordingMetadata("t"), fsync=FsyncPolicy(None, every_s=0.05)) as w:
        base = len(calls)
        w.write_frame(frame, 0)
        w.maybe_sync()
        assert len(calls) == base  # not yet due
        time.sleep(0.06)
        w.maybe_sync()
        assert len(calls) == base + 1
        w.maybe_sync()
        assert len(calls) == base + 1  # nothing new to sync


def test_annotation_updates_merge_into_intervals() -> None:
    open_ = Annotation("eat", 10, None, 1)
    closed = Annotation("eat", 10, 50, 1)
    other_source = Annotation("eat", 20, None, 1, source_id=2)
    reused = Annotation("drink", 60, None, 1)
    assert merge_annotations([open_, closed]) == [closed]
    assert merge_annotations([closed, open_]) == [closed]  # a repeated "started" does not re-open it
    assert merge_annotations([open_, closed, other_source]) == [closed, other_source]
    assert merge_annotations([open_, closed, reused]) == [reused]  # the id reused for a new interval
    assert merge_annotations([Annotation("x", 10, 20, 1), Annotation("y", 10, 30, 1)]) == [Annotation("y", 10, 30, 1)]


def test_labels_with_any_unicode_survive(tmp_path: Path) -> None:
    path = tmp_path / "u.wfrec"
    label = "Transfer → Bett ✓ 移乗"
    with RecordingWriter(path, RecordingMetadata("u", subject="Zoë")) as w:
        w.write_label(Annotation(label, 1, 2, 3, 4), 5)
        w.write_frame(encode_frame(AnnotationFrame(Annotation(label, 7, None, 1, 4), 0, 7)), 8)
    rec = Recording.load(path)
    assert [a.label for a in rec.annotations] == [label, label] and rec.metadata.subject == "Zoë"


def _recording_with_metadata(path, meta: bytes) -> None:
    """A recording whose header carries ``meta`` verbatim, with a correct CRC (a hostile file)."""
    import struct
    import zlib

    from firmware_bridge.recording import FORMAT_VERSION, MAGIC

    head = struct.pack("<8sHI", MAGIC, FORMAT_VERSION, len(meta)) + meta
    path.write_bytes(head + struct.pack("<I", zlib.crc32(head)))


@pytest.mark.parametrize(
    "meta",
    [
        b"[" * 5000 + b"]" * 5000,  # RecursionError in json
        b'{"format": "wheelfed-recording", "session_id": ' + b"9" * 5000 + b"}",  # int-digit limit
        b'{"format": "wheelfed-recording", "session_id": "s", "created_us": 1e999}',  # OverflowError
        b'{"format": "wheelfed-recording", "session_id": "s", "descriptors": [{"sensor_id": 1}]}',
        b'{"format": "wheelfed-recording", "session_id": "s", "extra": [1, 2]}',
    ],
    ids=["deep", "long-int", "inf-int", "bad-descriptor", "extra-list"],
)
def test_a_hostile_header_is_a_recording_error(tmp_path, meta: bytes) -> None:
    from firmware_bridge.recording import RecordingError, RecordingReader

    path = tmp_path / "hostile.wfrec"
    _recording_with_metadata(path, meta)
    with pytest.raises(RecordingError):
        RecordingReader(path)
