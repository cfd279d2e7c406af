"""DESCRIPTOR frames with valid checksums but hostile content: every one is a counted malformed frame.

A descriptor is JSON from the sensor link, and the link is untrusted (a replay file, a pty anyone
may write to, a sensor with buggy firmware). Before, some of them made the decoder raise
something other than ``FrameError`` -- RecursionError, ValueError from Python's int-string limit,
OverflowError one frame later -- which ended the serial read thread for good.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firmware_bridge.descriptors import MAX_RATE_HZ, MIN_RATE_HZ, ChannelSpec, SensorDescriptor
from firmware_bridge.frames import (
    MAX_DESCRIPTOR_DEPTH,
    MAX_NUMBER_CHARS,
    MAX_PAYLOAD,
    DescriptorFrame,
    FrameDecoder,
    FrameError,
    SampleFrame,
    decode_frame,
    descriptor_from_dict,
    descriptor_to_dict,
    encode_frame,
)
from tests.firmware_bridge.frame_strategies import IMU, by_the_table, descriptors

GOOD = SampleFrame(1, 0, 0, np.ones((2, 3), np.int16))


def descriptor_frame(payload: bytes | str, sensor_id: int = 1) -> bytes:
    return by_the_table(2, sensor_id, 0, 0, payload.encode() if isinstance(payload, str) else payload)


def imu_json(**changes: str) -> str:
    """The IMU descriptor's JSON with fields replaced by raw JSON text (which json.dumps cannot write)."""
    doc = descriptor_to_dict(IMU)
    for key in changes:
        doc[key] = f"@{key}@"
    text = json.dumps(doc)
    for key, raw in changes.items():
        text = text.replace(f'"@{key}@"', raw)
    return text


def assert_dropped_as_malformed(payload: bytes | str) -> FrameDecoder:
    """The frame is refused by decode_frame, and a decoder counts it and goes on to the next frame."""
    bad = descriptor_frame(payload)
    with pytest.raises(FrameError):
        decode_frame(bad)
    dec = FrameDecoder()
    assert dec.feed(bad + encode_frame(GOOD)) == [GOOD]
    assert (dec.stats.malformed, dec.stats.frames_ok, dec.stats.bytes_skipped) == (1, 1, len(bad))
    return dec


@pytest.mark.parametrize(
    "payload",
    [
        "[" * (MAX_PAYLOAD // 2) + "]" * (MAX_PAYLOAD // 2),  # 4,096 deep: RecursionError in json
        imu_json(name="[" * 2000 + "]" * 2000),
        imu_json(extra="{\"a\":" * 1200 + "1" + "}" * 1200),
        "[" * (MAX_DESCRIPTOR_DEPTH + 1) + "]" * (MAX_DESCRIPTOR_DEPTH + 1),
    ],
)
def test_deeply_nested_json_is_malformed(payload: str) -> None:
    assert len(payload) <= MAX_PAYLOAD
    assert_dropped_as_malformed(payload)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    unit = '[[[[[[[[[[[[[[[[[[[[\\"\\\\' + "{" * 40  # escaped quote and backslash, then more brackets
    d = SensorDescriptor(1, "imu", "imu", 50.0, (ChannelSpec("ax", unit[:32]),))
    assert decode_frame(encode_frame(DescriptorFrame(d))).descriptor == d


@pytest.mark.parametrize(
    "payload",
    [
        imu_json(sensor_id="1" * 5000),  # int(): ValueError (Python's 4,300-digit limit)
        imu_json(sample_rate_hz="1" * 5000 + ".5"),  # float() of it is inf
        imu_json(sample_rate_hz="5" + "0" * MAX_NUMBER_CHARS),
        imu_json(sensor_id="1" + "0" * 400),  # fits the digit limit; float() of it overflows
    ],
)
def test_overlong_numbers_are_malformed(payload: str) -> None:
    assert_dropped_as_malformed(payload)


@pytest.mark.parametrize(
    "rate",
    [
        "1e-320",
        "0",
        "-50",
        "1e400",
        "NaN",
        "Infinity",
        "true",
        "\"50\"",
        repr(MIN_RATE_HZ / 2),
        repr(MAX_RATE_HZ * 1.001),
    ],
)
def test_sample_rates_outside_the_documented_range_are_malformed(rate: str) -> None:
    assert_dropped_as_malformed(imu_json(sample_rate_hz=rate))


def test_a_tiny_rate_no_longer_overflows_at_the_next_sequence_gap() -> None:
    dec = FrameDecoder()
    frames = [SampleFrame(1, seq, seq * 1000, np.ones((2, 3), np.int16)) for seq in (0, 5)]
    out = dec.feed(descriptor_frame(imu_json(sample_rate_hz="1e-320")) + b"".join(map(encode_frame, frames)))
    assert out == frames
    assert (dec.stats.malformed, dec.stats.lost_frames, dec.stats.lost_samples) == (1, 4, 8)


@pytest.mark.parametrize("rate", [MIN_RATE_HZ, MAX_RATE_HZ])
def test_the_range_limits_themselves_are_accepted(rate: float) -> None:
    d = SensorDescriptor(1, "imu", "imu", rate, IMU.channels)
    assert decode_frame(encode_frame(DescriptorFrame(d))).descriptor == d


def _channel(**changes: str) -> str:
    doc = descriptor_to_dict(IMU)
    text = json.dumps(doc)
    first = json.dumps(doc["channels"][0])
    channel = dict(doc["channels"][0])
    for key in changes:
        channel[key] = f"@{key}@"
    replaced = json.dumps(channel)
    for key, raw in changes.items():
        replaced = replaced.replace(f'"@{key}@"', raw)
    return text.replace(first, replaced, 1)


@pytest.mark.parametrize(
    "payload",
    [
        _channel(scale="NaN"),
        _channel(scale="Infinity"),
        _channel(scale="-Infinity"),
        _channel(scale="1e999"),
        _channel(offset="NaN"),
        _channel(offset="-Infinity"),
        _channel(offset="1e400"),
        _channel(scale="0"),
        _channel(scale="\"0.5\""),
        _channel(scale="\"nan\""),
        _channel(offset="null"),
        _channel(unit="{\"a\": 1}"),
        _channel(unit=json.dumps("u" * 33)),
        _channel(name="5"),
        imu_json(sensor_id="true"),
        imu_json(name="7"),
        imu_json(channels="{}"),
        imu_json(channels=json.dumps([{"name": f"c{i}", "unit": "g", "scale": 1, "offset": 0} for i in range(65)])),
        imu_json(channels="[" + ",".join(["1"] * 3000) + "]"),  # not 3,000 channel objects built to be refused
        imu_json(sample_format="[]"),
    ],
)
def test_ill_typed_or_non_finite_fields_are_malformed(payload: str) -> None:
    assert_dropped_as_malformed(payload)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ChannelSpec("ax", "g", math.nan),
        lambda: ChannelSpec("ax", "g", math.inf),
        lambda: ChannelSpec("ax", "g", 1.0, math.nan),
        lambda: ChannelSpec("ax", "g", 1.0, -math.inf),
        lambda: SensorDescriptor(1, "imu", "imu", 1e-320, IMU.channels),
        lambda: SensorDescriptor(1, "imu", "imu", math.inf, IMU.channels),
    ],
)
def test_descriptors_themselves_refuse_non_finite_values(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        make()


def test_descriptor_from_dict_refuses_numbers_float_cannot_hold() -> None:
    # Recording metadata goes through the same function, with no length limit on its numbers.
    with pytest.raises(FrameError):
        descriptor_from_dict({**descriptor_to_dict(IMU), "sample_rate_hz": 10**400})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
#: Raw JSON text json.dumps never writes, spliced into a field.
hostile_literals = st.sampled_from(
    [
        "1" * 5000,
        "-" + "9" * 4400,
        "1e-320",
        "1e400",
        "-1e400",
        "NaN",
        "Infinity",
        "-Infinity",
        "0.0",
        "-0.0",
        "[" * 3000 + "]" * 3000,
        "{\"k\":" * 900 + "0" + "}" * 900,
        "\"\\ud800\"",
        "1" * (MAX_NUMBER_CHARS + 1),
    ]
)
_FIELDS = [
    "sensor_id",
    "name",
    "kind",
    "sample_rate_hz",
    "sample_format",
    "channels",
    "channels.0",
    "channels.0.name",
    "channels.0.unit",
    "channels.0.scale",
    "channels.0.offset",
    "extra",
]


@st.composite
def mutated_descriptors(draw: st.DrawFn) -> tuple[int, bytes]:
    """(header sensor id, payload): a valid descriptor's JSON with one field replaced or removed."""
    descriptor = draw(descriptors())
    doc = descriptor_to_dict(descriptor)
    path = draw(st.sampled_from(_FIELDS)).split(".")
    parent: object = doc
    for part in path[:-1]:
        parent = parent[int(part)] if isinstance(parent, list) else parent[part]  # type: ignore[index]
    key: int | str = int(path[-1]) if isinstance(parent, list) else path[-1]
    how = draw(st.sampled_from(["value", "literal", "delete"]))
    if how == "delete" and key in parent:  # type: ignore[operator]
        del parent[key]  # type: ignore[union-attr]
        text = json.dumps(doc)
    else:
        parent[key] = draw(json_values) if how == "value" else "@hostile@"  # type: ignore[index]
        text = json.dumps(doc).replace('"@hostile@"', draw(hostile_literals))
    return descriptor.sensor_id, text.encode("utf-8", "surrogatepass")[:MAX_PAYLOAD]


def _feed_hostile(sensor_id: int, ftype: int, payload: bytes) -> None:
    """A CRC-valid frame, then two SAMPLES frames of its sensor with a gap between them: the
    decoder raises nothing, and each frame is either yielded or counted as malformed."""
    samples = [SampleFrame(sensor_id, seq, seq * 1000, np.ones((2, 1), np.float32)) for seq in (0, 7)]
    dec = FrameDecoder()
    out = dec.feed(by_the_table(ftype, sensor_id, 3, 5, payload) + b"".join(map(encode_frame, samples)))
    assert out[-2:] == samples
    assert dec.stats.frames_ok + dec.stats.malformed == 3 and dec.stats.frames_ok == len(out)
    for frame in out[:-2]:
        assert frame.sensor_id == sensor_id
        if not isinstance(frame, DescriptorFrame):
            continue
        d = frame.descriptor
        assert MIN_RATE_HZ <= d.sample_rate_hz <= MAX_RATE_HZ and 1 <= d.n_channels <= 64
        assert all(math.isfinite(c.scale) and c.scale and math.isfinite(c.offset) for c in d.channels)


@settings(max_examples=300, deadline=None)
@given(mutated_descriptors())
def test_any_mutated_descriptor_is_a_frame_or_a_counted_error(case: tuple[int, bytes]) -> None:
    _feed_hostile(case[0], 2, case[1])


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_any_json_document_as_a_descriptor_is_a_frame_or_a_counted_error(doc: object) -> None:
    _feed_hostile(1, 2, json.dumps(doc).encode()[:MAX_PAYLOAD])


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([1, 2, 3]), st.binary(max_size=MAX_PAYLOAD))
def test_any_payload_bytes_in_any_frame_type_are_a_frame_or_a_counted_error(ftype: int, payload: bytes) -> None:
    _feed_hostile(9, ftype, payload)


def test_floods_of_malformed_frames_gaps_and_restarts_log_one_line_per_kind(caplog: pytest.LogCaptureFixture) -> None:
    bad = descriptor_frame("[" * 3000 + "]" * 3000)
    seqs = [0, 0] * 100 + [s * 2 for s in range(100, 300)]  # 199 restarts, then 200 gaps
    samples = [SampleFrame(1, s, i * 1000, np.ones((2, 3), np.int16)) for i, s in enumerate(seqs)]
    dec = FrameDecoder()
    with caplog.at_level("WARNING", logger="firmware_bridge.frames"):
        assert dec.feed(bad * 200 + b"".join(map(encode_frame, samples))) == samples
    s = dec.stats.sensors[1]
    assert (dec.stats.malformed, s.restarts, s.gaps) == (200, 199, 200)
    assert sorted(r.getMessage().split(" (")[0] for r in caplog.records) == [
        "frames lost on the link",
        "malformed frame dropped",
        "sender restarted its sequence",
    ]
    assert not any(r.exc_info for r in caplog.records)
