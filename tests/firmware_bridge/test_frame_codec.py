"""The frame format as documented: byte layout, CRC parameters, round trips, validation, helpers."""

from __future__ import annotations

import binascii
import json
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings

from firmware_bridge.descriptors import ChannelSpec, SensorDescriptor
from firmware_bridge.frames import (
    FRAME_OVERHEAD,
    HEADER_SIZE,
    MAX_PAYLOAD,
    Annotation,
    AnnotationFrame,
    DescriptorFrame,
    FrameDecoder,
    FrameError,
    SampleFrame,
    chunk_samples,
    decode_frame,
    descriptor_to_dict,
    encode_frame,
    to_physical,
)
from tests.firmware_bridge.frame_strategies import IMU, any_frames, by_the_table


def test_crc_parameters_are_the_documented_standard_ones() -> None:
    # Published check values for "123456789": CRC-16/CCITT-FALSE 0x29B1, CRC-32 (IEEE) 0xCBF43926.
    assert binascii.crc_hqx(b"123456789", 0xFFFF) == 0x29B1
    assert zlib.crc32(b"123456789") == 0xCBF43926
    assert (HEADER_SIZE, FRAME_OVERHEAD) == (21, 25)


def test_samples_frame_bytes_follow_the_table() -> None:
    samples = np.array([[1, -2], [300, -32768]], dtype=np.int16)
    raw = encode_frame(SampleFrame(7, 0x01020304, 0x1122334455667788, samples))
    payload = bytes([2, 1]) + struct.pack("<4h", 1, -2, 300, -32768)
    assert raw == by_the_table(1, 7, 0x01020304, 0x1122334455667788, payload)
    floats = np.array([[1.5], [-0.25]], dtype=np.float32)
    assert encode_frame(SampleFrame(3, 1, 2, floats)) == by_the_table(
        1, 3, 1, 2, bytes([1, 2]) + struct.pack("<2f", 1.5, -0.25)
    )


def test_annotation_and_descriptor_frame_bytes_follow_the_table() -> None:
    open_ = AnnotationFrame(Annotation("transfer", 10, None, 42, source_id=5), seq=3, timestamp_us=11)
    assert encode_frame(open_) == by_the_table(3, 5, 3, 11, struct.pack("<IQQ", 42, 10, 2**64 - 1) + b"transfer")
    closed = AnnotationFrame(Annotation("transfer", 10, 99, 42, source_id=5), seq=4, timestamp_us=99)
    assert encode_frame(closed) == by_the_table(3, 5, 4, 99, struct.pack("<IQQ", 42, 10, 99) + b"transfer")
    raw = encode_frame(DescriptorFrame(IMU, 0, 0))
    assert json.loads(raw[HEADER_SIZE:-4]) == descriptor_to_dict(IMU)
    assert raw[6] == IMU.sensor_id and raw[5] == 2


@settings(max_examples=300, deadline=None)
@given(any_frames())
def test_every_frame_round_trips_through_bytes(frame) -> None:  # type: ignore[no-untyped-def]
    raw = encode_frame(frame)
    assert len(raw) == FRAME_OVERHEAD + int.from_bytes(raw[2:4], "little")
    assert decode_frame(raw) == frame
    assert FrameDecoder().feed(raw) == [frame]


def test_big_endian_input_is_sent_little_endian_and_compares_equal() -> None:
    native = np.array([[1, 2], [3, 4]], dtype=np.int16)
    be = SampleFrame(1, 0, 0, native.astype(">i2"))
    assert encode_frame(be) == encode_frame(SampleFrame(1, 0, 0, native))
    assert be == SampleFrame(1, 0, 0, native)
    nan = np.full((1, 1), np.nan, dtype=np.float32)
    assert SampleFrame(1, 0, 0, nan) == decode_frame(encode_frame(SampleFrame(1, 0, 0, nan)))


@pytest.mark.parametrize(
    "make",
    [
        lambda: SampleFrame(1, 0, 0, np.zeros((MAX_PAYLOAD // 4, 1), np.float32)),  # payload 2 bytes too big
        lambda: SampleFrame(1, 0, 0, np.zeros((3,), np.int16)),
        lambda: SampleFrame(1, 0, 0, np.zeros((0, 2), np.int16)),
        lambda: SampleFrame(1, 0, 0, np.zeros((2, 2), np.float64)),
        lambda: SampleFrame(256, 0, 0, np.zeros((2, 2), np.int16)),
        lambda: SampleFrame(1, 2**32, 0, np.zeros((2, 2), np.int16)),
        lambda: SampleFrame(1, 0, -1, np.zeros((2, 2), np.int16)),
        lambda: Annotation("", 0),
        lambda: Annotation("x" * 256, 0),
        lambda: Annotation("rest", 10, 9),
        lambda: Annotation("rest", 2**64 - 1),  # reserved for the open end
    ],
)
def test_invalid_frames_are_refused_with_frame_error(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(FrameError):
        encode_frame(make())


def test_largest_frame_fits_exactly() -> None:
    frame = SampleFrame(1, 0, 0, np.zeros(((MAX_PAYLOAD - 2) // 2, 1), np.int16))
    assert len(encode_frame(frame)) == MAX_PAYLOAD + FRAME_OVERHEAD


def test_decode_frame_rejects_anything_but_one_whole_valid_frame() -> None:
    raw = encode_frame(SampleFrame(1, 0, 0, np.ones((4, 2), np.int16)))
    for bad in (
        raw[:-1],
        raw + b"\x00",
        raw[:10] + bytes([raw[10] ^ 1]) + raw[11:],
        raw[:-2] + bytes([raw[-2] ^ 0x80, raw[-1]]),
    ):
        with pytest.raises(FrameError):
            decode_frame(bad)


@pytest.mark.parametrize(
    "ftype,payload",
    [
        (1, bytes([2, 1]) + b"\x00" * 5),  # not whole 2-channel int16 samples
        (1, bytes([0, 1]) + b"\x00" * 4),  # zero channels
        (1, bytes([1, 3]) + b"\x00" * 4),  # unknown sample format
        (1, bytes([1, 1])),  # no samples
        (2, b"{not json"),
        (2, json.dumps({**descriptor_to_dict(IMU), "sensor_id": 4}).encode()),  # id differs from the header
        (2, json.dumps({**descriptor_to_dict(IMU), "kind": "toaster"}).encode()),
        (3, struct.pack("<IQQ", 1, 5, 4) + b"x"),  # ends before it starts
        (3, struct.pack("<IQQ", 1, 5, 9)),  # no label
        (3, struct.pack("<IQQ", 1, 5, 9) + b"\xff\xfe"),  # label not UTF-8
    ],
)
def test_crc_valid_frames_with_bad_content_are_counted_and_skipped(ftype: int, payload: bytes) -> None:
    good = SampleFrame(1, 0, 0, np.ones((2, 3), np.int16))
    dec = FrameDecoder()
    bad = by_the_table(ftype, 1, 0, 0, payload)
    with pytest.raises(FrameError):
        decode_frame(bad)
    assert dec.feed(bad + encode_frame(good)) == [good]
    assert (dec.stats.malformed, dec.stats.crc_errors, dec.stats.bytes_skipped) == (1, 0, len(bad))


def test_to_physical_applies_scale_and_offset_per_channel() -> None:
    d = SensorDescriptor(
        4, "mat", "pressure", 10.0, (ChannelSpec("p0", "kPa", 0.5, -1.0), ChannelSpec("p1", "kPa", 2.0))
    )
    frame = SampleFrame(4, 0, 0, np.array([[2, 3], [-4, 32767]], dtype=np.int16))
    out = to_physical(frame, d)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, [[0.0, 6.0], [-3.0, 65534.0]])


def test_to_physical_refuses_a_stale_descriptor() -> None:
    frame = SampleFrame(1, 0, 0, np.ones((2, 2), np.int16))
    with pytest.raises(ValueError, match="stale"):
        to_physical(frame, IMU)  # IMU has 3 channels
    with pytest.raises(ValueError, match="sensor 1"):
        to_physical(SampleFrame(9, 0, 0, np.ones((2, 3), np.int16)), IMU)


def test_chunk_samples_timestamps_do_not_drift_at_2048_hz() -> None:
    samples = np.arange(2048 * 10, dtype=np.int16).reshape(-1, 1)
    frames = chunk_samples(3, samples, 2048.0, 100, t0_us=7, first_seq=2**32 - 2)
    assert [f.seq for f in frames[:3]] == [2**32 - 2, 2**32 - 1, 0]
    # Frame 204 starts at sample 20400: its time comes from the sample index, not from adding up
    # 204 rounded frame durations (48828.125 us each).
    assert frames[-1].timestamp_us == 7 + round(20400 * 1e6 / 2048)
    assert frames[-1].samples.shape == (2048 * 10 - 204 * 100, 1)
    np.testing.assert_array_equal(np.concatenate([f.samples for f in frames]), samples)
