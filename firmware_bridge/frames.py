"""The binary frame format of the sensor link, its reference encoder and a resynchronising decoder.

A sensor MCU (or the replay tool) sends a stream of frames over a serial line. The line is
unreliable: bytes get lost, flipped or inserted (USB-serial glitches, a cable pulled mid-frame,
a bootloader printing text), so the format is built for *resynchronisation*: every frame starts
with a sync word, its header is protected on its own, and the whole frame by a CRC-32. The
decoder never trusts a length it has not checked and never yields a frame whose CRC fails.

Frame layout (all integers little-endian)::

    offset  size  field
    ------  ----  ---------------------------------------------------------------
     0      2     sync          0xA5 0x5A
     2      2     payload_len   uint16, N <= MAX_PAYLOAD (8192)
     4      1     version       1
     5      1     type          1 = SAMPLES, 2 = DESCRIPTOR, 3 = ANNOTATION
     6      1     sensor_id     0..255 (ANNOTATION: the id of the label source)
     7      4     seq           uint32, +1 per frame of this (type, sensor_id) stream, wraps
    11      8     timestamp_us  uint64, common clock: SAMPLES = time of the first sample,
                                DESCRIPTOR / ANNOTATION = time the frame was issued
    19      2     header_crc    CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF) of bytes 0..18
    21      N     payload       see below
    21+N    4     crc           CRC-32 (IEEE 802.3, zlib.crc32) of bytes 0..20+N

    SAMPLES payload:     n_channels uint8 (1..64), format uint8 (1 = int16, 2 = float32),
                         then n_samples x n_channels values, row-major (sample by sample).
                         n_samples = (N - 2) / (n_channels * itemsize), at least 1.
    DESCRIPTOR payload:  compact UTF-8 JSON of the SensorDescriptor (see descriptor_to_dict);
                         its "sensor_id" must equal the header's. At most MAX_DESCRIPTOR_DEPTH
                         levels of nesting, number literals of at most MAX_NUMBER_CHARS
                         characters, no NaN/Infinity; the ranges are SensorDescriptor's.
    ANNOTATION payload:  annotation_id uint32, start_us uint64, end_us uint64
                         (0xFFFFFFFFFFFFFFFF = still open), label UTF-8 (the rest, 1..255 bytes).

Why two CRCs: the header CRC lets the decoder reject a corrupted length at once instead of
waiting for up to MAX_PAYLOAD bytes that belong to later, intact frames (at 115200 baud 8 KiB is
0.7 s of data held back); during resynchronisation every sync-like byte pair in garbage is a
candidate header, and the 16-bit check throws almost all of them away before any payload wait.
Why CRC-32 for the frame: the decoder tests many garbage candidates while resynchronising, so the
residual false-accept rate matters — 2^-32 per candidate (behind the 2^-16 header check) versus
2^-16 for a CRC-16; it detects all burst errors up to 32 bits and has Hamming distance 4 over
the whole 8 KiB maximum frame; it is one C call in Python (zlib.crc32) and a hardware unit on the
common sensor MCUs (STM32, nRF52, ESP32). The 4 extra bytes cost < 3 % of a typical 150-byte frame.

Sequence numbers let the gateway *count* what the link lost without guessing data: a jump of k
in a SAMPLES stream is k - 1 lost frames, and the number of lost samples follows from the
timestamps and the sensor's rate (or, before its descriptor is known, from the frame size).
A backwards jump or repeat is a sender restart (firmware reboot, a replay started again), not a
gap. DESCRIPTOR frames are idempotent re-announcements; their seq is not checked.

Whatever a CRC-valid frame carries is still untrusted input (a replay file, a pty anyone may
write to, buggy firmware): a payload that breaks the format -- including JSON nested deep enough
to exhaust the parser's recursion, a number too long for ``int()``, a rate that makes a duration
infinite -- is a ``FrameError``, which the decoder counts as ``malformed`` and skips. Nothing
in a payload can make ``FrameDecoder.feed`` raise (property-tested on arbitrary payloads).

A byte belongs to at most one yielded frame: when a frame that lost its last bytes is followed
by bytes that happen to equal them (the next frame's sync byte is the lost last CRC byte, a
1-in-256 chance for a frame that lost exactly one byte), the frame is complete and correct again
and is yielded, and the next frame, which lost its first byte to it, is not -- its loss is
counted by its sequence number like any other.

Annotations are activity-label intervals from a caregiver app, a button or a replayed label
track. An interval is identified by (source id, annotation_id): the source sends it with
end_us open when the activity starts and again with the same id and end_us set when it ends
(a late, closing annotation); a consumer keeps the latest end it has seen.
"""

from __future__ import annotations

import binascii
import json
import logging
import struct
import zlib
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Iterable, Union

import numpy as np

from .descriptors import MAX_CHANNELS, ChannelSpec, SensorDescriptor

log = logging.getLogger(__name__)

SYNC = b"\xa5\x5a"
VERSION = 1
MAX_PAYLOAD = 8192
MAX_LABEL_BYTES = 255
#: Deepest JSON nesting a DESCRIPTOR payload may have. A descriptor is 3 deep (object, channel
#: list, channel); the rest is room for future fields. json's parser recurses once per level and
#: raises RecursionError at about 1,000 -- 8 KiB of brackets reach 4,096 -- so depth is checked first.
MAX_DESCRIPTOR_DEPTH = 16
#: Longest number literal in a DESCRIPTOR payload: a float64's shortest repr has at most 24
#: characters. Longer ones are refused before conversion: ``int()`` raises ValueError above 4,300
#: digits, and a 400-digit integer overflows ``float()``.
MAX_NUMBER_CHARS = 32
#: Link events of one kind (malformed frames of a type, gaps or restarts of a stream) are logged
#: the first time, then every this many: all are counted in LinkStats, and a hostile or broken
#: sender must not be able to write a log line per frame.
LOG_EVERY = 1000
OPEN_END = 0xFFFF_FFFF_FFFF_FFFF

_HEADER = struct.Struct("<2sHBBBIQ")
_HEADER_CRC = struct.Struct("<H")
_CRC = struct.Struct("<I")
_ANNOTATION = struct.Struct("<IQQ")
HEADER_SIZE = _HEADER.size + _HEADER_CRC.size  # 21
FRAME_OVERHEAD = HEADER_SIZE + _CRC.size  # 25

_U32 = 1 << 32
_U64 = 1 << 64


class FrameType(IntEnum):
    SAMPLES = 1
    DESCRIPTOR = 2
    ANNOTATION = 3


_TYPE_VALUES = frozenset(int(t) for t in FrameType)


_FORMATS: dict[int, np.dtype] = {1: np.dtype("<i2"), 2: np.dtype("<f4")}
_FORMAT_CODES = {"int16": 1, "float32": 2}
_FORMAT_NAMES = {np.dtype("int16"): "int16", np.dtype("float32"): "float32"}


class FrameError(ValueError):
    """A frame that cannot be encoded, or bytes that are not one valid frame."""


def _check_uint(name: str, value: int, bound: int) -> None:
    if not 0 <= value < bound:
        raise FrameError(f"{name} {value} is outside 0..{bound - 1}")


def _check_header(seq: int, timestamp_us: int) -> None:
    _check_uint("seq", seq, _U32)
    _check_uint("timestamp_us", timestamp_us, _U64)


@dataclass(frozen=True, eq=False)
class SampleFrame:
    """``samples`` is (n_samples, n_channels) in the sensor's raw dtype (int16 or float32)."""

    sensor_id: int
    seq: int
    timestamp_us: int
    samples: np.ndarray

    def __post_init__(self) -> None:
        _check_uint("sensor_id", self.sensor_id, 256)
        _check_header(self.seq, self.timestamp_us)
        s = self.samples
        if not isinstance(s, np.ndarray) or s.ndim != 2 or s.shape[0] < 1 or not 1 <= s.shape[1] <= 64:
            raise FrameError("samples must be a 2-D array (n_samples >= 1, 1..64 channels)")
        if s.dtype.newbyteorder("=") not in _FORMAT_NAMES:
            raise FrameError(f"samples dtype {s.dtype} must be int16 or float32")

    @property
    def sample_format(self) -> str:
        return _FORMAT_NAMES[self.samples.dtype.newbyteorder("=")]

    def __eq__(self, other: object) -> bool:
        # Bitwise equality: a NaN sample equals itself, as it does on the wire.
        if not isinstance(other, SampleFrame):
            return NotImplemented
        return (self.sensor_id, self.seq, self.timestamp_us, self.sample_format, self.samples.shape) == (
            other.sensor_id,
            other.seq,
            other.timestamp_us,
            other.sample_format,
            other.samples.shape,
        ) and _le_bytes(self.samples) == _le_bytes(other.samples)

    __hash__ = None  # type: ignore[assignment]  # unhashable: equality compares the samples


@dataclass(frozen=True)
class DescriptorFrame:
    descriptor: SensorDescriptor
    seq: int = 0
    timestamp_us: int = 0

    def __post_init__(self) -> None:
        _check_header(self.seq, self.timestamp_us)

    @property
    def sensor_id(self) -> int:
        return self.descriptor.sensor_id


@dataclass(frozen=True)
class Annotation:
    """An activity-label interval; ``end_us`` None while the activity is still going on."""

    label: str
    start_us: int
    end_us: int | None = None
    annotation_id: int = 0
    source_id: int = 0

    def __post_init__(self) -> None:
        if not 1 <= len(self.label.encode("utf-8")) <= MAX_LABEL_BYTES:
            raise FrameError(f"annotation label must be 1..{MAX_LABEL_BYTES} UTF-8 bytes, got {self.label!r}")
        _check_uint("start_us", self.start_us, OPEN_END)
        if self.end_us is not None:
            _check_uint("end_us", self.end_us, OPEN_END)
            if self.end_us < self.start_us:
                raise FrameError(f"annotation {self.label!r} ends ({self.end_us}) before it starts ({self.start_us})")
        _check_uint("annotation_id", self.annotation_id, _U32)
        _check_uint("source_id", self.source_id, 256)


@dataclass(frozen=True)
class AnnotationFrame:
    annotation: Annotation
    seq: int = 0
    timestamp_us: int = 0

    def __post_init__(self) -> None:
        _check_header(self.seq, self.timestamp_us)

    @property
    def sensor_id(self) -> int:
        return self.annotation.source_id


Frame = Union[SampleFrame, DescriptorFrame, AnnotationFrame]


def _le_bytes(samples: np.ndarray) -> bytes:
    return np.ascontiguousarray(samples, dtype=samples.dtype.newbyteorder("<")).tobytes()


def descriptor_to_dict(descriptor: SensorDescriptor) -> dict[str, object]:
    """The JSON form of a descriptor, shared by DESCRIPTOR frames and recording metadata."""
    return {
        "sensor_id": descriptor.sensor_id,
        "name": descriptor.name,
        "kind": descriptor.kind,
        "sample_rate_hz": descriptor.sample_rate_hz,
        "sample_format": descriptor.sample_format,
        "channels": [
            {"name": c.name, "unit": c.unit, "scale": c.scale, "offset": c.offset} for c in descriptor.channels
        ],
    }


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number, got {value!r:.40}")
    return float(value)  # OverflowError for an int beyond float's range


def _string(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {value!r:.40}")
    return value


def descriptor_from_dict(doc: object) -> SensorDescriptor:
    """Inverse of descriptor_to_dict; raises FrameError on any missing, ill-typed or out-of-range field.

    Types are checked, not coerced: ``float("nan")`` of a string, or ``str()`` of a nested object
    as a unit, would let a descriptor through that no encoder wrote.
    """
    try:
        if not isinstance(doc, dict) or not isinstance(doc["channels"], list):
            raise TypeError("expected an object with a list of channels")
        if not 1 <= len(doc["channels"]) <= MAX_CHANNELS:  # before building thousands of specs to refuse
            raise ValueError(f"a sensor has 1 to {MAX_CHANNELS} channels, not {len(doc['channels'])}")
        channels = tuple(
            ChannelSpec(
                _string(c["name"], "channel name"),
                _string(c["unit"], "unit"),
                _number(c["scale"], "scale"),
                _number(c["offset"], "offset"),
            )
            for c in doc["channels"]
        )
        if not isinstance(doc["sensor_id"], int) or isinstance(doc["sensor_id"], bool):
            raise TypeError("sensor_id must be an integer")
        return SensorDescriptor(
            doc["sensor_id"],
            _string(doc["name"], "name"),
            _string(doc["kind"], "kind"),
            _number(doc["sample_rate_hz"], "sample_rate_hz"),
            channels,
            _string(doc["sample_format"], "sample_format"),  # type: ignore[arg-type]  # SensorDescriptor refuses other text
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise FrameError(f"invalid sensor descriptor {doc!r:.200}: {exc}") from exc


def json_depth(text: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON text; brackets inside strings do not count.

    Vectorised, so an 8 KiB payload costs a few numpy passes rather than a Python loop over its
    bytes. A quote is a string delimiter unless an odd run of backslashes precedes it. For text
    that is not valid JSON the count may be off past the first error, but json stops parsing
    there, so the depth it could reach is still bounded by the count.
    """
    b = np.frombuffer(text, dtype=np.uint8)
    if b.size == 0:
        return 0
    idx = np.arange(b.size)
    last_plain = np.maximum.accumulate(np.where(b == 0x5C, -1, idx))  # last non-backslash at or before i
    backslashes_before = idx - 1 - np.concatenate(([-1], last_plain[:-1]))
    quotes = (b == 0x22) & (backslashes_before % 2 == 0)
    outside = (np.cumsum(quotes) - quotes) % 2 == 0  # an even number of delimiters before i
    step = (np.isin(b, (0x5B, 0x7B)) & outside).astype(np.int32) - (np.isin(b, (0x5D, 0x7D)) & outside)
    return int(np.cumsum(step).max(initial=0))


def _int_literal(literal: str) -> int:
    if len(literal) > MAX_NUMBER_CHARS:
        raise FrameError(f"a number of {len(literal)} characters (at most {MAX_NUMBER_CHARS})")
    return int(literal)


def _float_literal(literal: str) -> float:
    if len(literal) > MAX_NUMBER_CHARS:
        raise FrameError(f"a number of {len(literal)} characters (at most {MAX_NUMBER_CHARS})")
    return float(literal)


def _no_constant(name: str) -> float:
    raise FrameError(f"{name} is not a number a descriptor may carry")


def _descriptor_json(payload: bytes) -> object:
    """The parsed JSON of a DESCRIPTOR payload, within the limits of the module docstring."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrameError(f"DESCRIPTOR payload is not UTF-8: {exc}") from exc
    depth = json_depth(payload)
    if depth > MAX_DESCRIPTOR_DEPTH:
        raise FrameError(f"DESCRIPTOR JSON is nested {depth} deep (at most {MAX_DESCRIPTOR_DEPTH})")
    try:
        return json.loads(text, parse_int=_int_literal, parse_float=_float_literal, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise FrameError(f"DESCRIPTOR payload is not JSON: {exc}") from exc


def _header(ftype: FrameType, sensor_id: int, seq: int, timestamp_us: int, payload: bytes) -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise FrameError(
            f"payload of {len(payload)} bytes exceeds MAX_PAYLOAD {MAX_PAYLOAD}: send fewer samples per frame"
        )
    head = _HEADER.pack(SYNC, len(payload), VERSION, ftype, sensor_id, seq, timestamp_us)
    return head + _HEADER_CRC.pack(binascii.crc_hqx(head, 0xFFFF))


def encode_frame(frame: Frame) -> bytes:
    """The bytes of one frame, exactly as a sensor firmware sends them."""
    if isinstance(frame, SampleFrame):
        ch = frame.samples.shape[1]
        payload = bytes((ch, _FORMAT_CODES[frame.sample_format])) + _le_bytes(frame.samples)
        head = _header(FrameType.SAMPLES, frame.sensor_id, frame.seq, frame.timestamp_us, payload)
    elif isinstance(frame, DescriptorFrame):
        payload = json.dumps(descriptor_to_dict(frame.descriptor), separators=(",", ":")).encode("utf-8")
        head = _header(FrameType.DESCRIPTOR, frame.sensor_id, frame.seq, frame.timestamp_us, payload)
    elif isinstance(frame, AnnotationFrame):
        a = frame.annotation
        end = OPEN_END if a.end_us is None else a.end_us
        payload = _ANNOTATION.pack(a.annotation_id, a.start_us, end) + a.label.encode("utf-8")
        head = _header(FrameType.ANNOTATION, a.source_id, frame.seq, frame.timestamp_us, payload)
    else:
        raise FrameError(f"cannot encode {type(frame).__name__}: not a frame")
    body = head + payload
    return body + _CRC.pack(zlib.crc32(body))


def _parse_payload(ftype: int, sensor_id: int, seq: int, timestamp_us: int, payload: bytes) -> Frame:
    """Turn a CRC-checked payload into a frame; FrameError when its content breaks the format."""
    if ftype == FrameType.SAMPLES:
        if len(payload) < 2 or payload[1] not in _FORMATS or not 1 <= payload[0] <= 64:
            raise FrameError("SAMPLES payload needs a channel count 1..64 and format 1 (int16) or 2 (float32)")
        ch, dtype = payload[0], _FORMATS[payload[1]]
        n_bytes = len(payload) - 2
        if n_bytes == 0 or n_bytes % (ch * dtype.itemsize):
            raise FrameError(
                f"SAMPLES payload of {n_bytes} bytes is not a whole number of {ch}-channel {dtype} samples"
            )
        samples = (
            np.frombuffer(payload, dtype=dtype, offset=2).reshape(-1, ch).astype(dtype.newbyteorder("="), copy=False)
        )
        return SampleFrame(sensor_id, seq, timestamp_us, samples)
    if ftype == FrameType.DESCRIPTOR:
        descriptor = descriptor_from_dict(_descriptor_json(payload))
        if descriptor.sensor_id != sensor_id:
            raise FrameError(f"DESCRIPTOR for sensor {descriptor.sensor_id} sent in a frame of sensor {sensor_id}")
        return DescriptorFrame(descriptor, seq, timestamp_us)
    if ftype == FrameType.ANNOTATION:
        if len(payload) <= _ANNOTATION.size:
            raise FrameError("ANNOTATION payload has no label")
        annotation_id, start, end = _ANNOTATION.unpack_from(payload)
        try:
            label = payload[_ANNOTATION.size :].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FrameError(f"ANNOTATION label is not UTF-8: {exc}") from exc
        annotation = Annotation(label, start, None if end == OPEN_END else end, annotation_id, sensor_id)
        return AnnotationFrame(annotation, seq, timestamp_us)
    raise FrameError(f"unknown frame type {ftype}")


def decode_frame(raw: bytes) -> Frame:
    """Decode exactly one complete frame (e.g. from a recording); FrameError if it is not one."""
    if len(raw) < FRAME_OVERHEAD or raw[:2] != SYNC:
        raise FrameError(f"{len(raw)} bytes do not start with a frame header")
    _, n, version, ftype, sensor_id, seq, ts = _HEADER.unpack_from(raw)
    if (
        version != VERSION
        or binascii.crc_hqx(raw[: _HEADER.size], 0xFFFF) != _HEADER_CRC.unpack_from(raw, _HEADER.size)[0]
    ):
        raise FrameError("frame header is corrupt or of an unknown version")
    if len(raw) != FRAME_OVERHEAD + n or zlib.crc32(raw[:-4]) != _CRC.unpack_from(raw, len(raw) - 4)[0]:
        raise FrameError(f"frame of {len(raw)} bytes fails its length or CRC-32 check")
    return _parse_payload(ftype, sensor_id, seq, ts, raw[HEADER_SIZE:-4])


def to_physical(frame: SampleFrame, descriptor: SensorDescriptor) -> np.ndarray:
    """Raw samples as float64 physical values, ``raw * scale + offset`` per channel."""
    if frame.sensor_id != descriptor.sensor_id:
        raise ValueError(
            f"frame of sensor {frame.sensor_id} converted with the descriptor of sensor {descriptor.sensor_id}"
        )
    if frame.samples.shape[1] != descriptor.n_channels or frame.sample_format != descriptor.sample_format:
        raise ValueError(
            f"sensor {descriptor.name!r} announces {descriptor.n_channels} {descriptor.sample_format} channels but the "
            f"frame carries {frame.samples.shape[1]} {frame.sample_format} channels: the descriptor is stale"
        )
    scale = np.array([c.scale for c in descriptor.channels])
    offset = np.array([c.offset for c in descriptor.channels])
    return frame.samples.astype(np.float64) * scale + offset


def chunk_samples(
    sensor_id: int,
    samples: np.ndarray,
    sample_rate_hz: float,
    frame_samples: int,
    *,
    t0_us: int = 0,
    first_seq: int = 0,
) -> list[SampleFrame]:
    """Cut a raw sample array into consecutive SampleFrames, as a sensor firmware would send it.

    Timestamps are computed from the absolute sample index (``t0 + round(i * 1e6 / rate)``) so that
    non-integer sample periods (e.g. 2048 Hz) never accumulate rounding drift.
    """
    if frame_samples < 1:
        raise ValueError("frame_samples must be >= 1")
    starts = np.arange(0, len(samples), frame_samples)
    stamps = t0_us + np.round(starts * (1e6 / sample_rate_hz)).astype(np.int64)
    return [
        SampleFrame(sensor_id, (first_seq + k) % _U32, int(ts), samples[i : i + frame_samples])
        for k, (i, ts) in enumerate(zip(starts, stamps))
    ]


@dataclass
class StreamStats:
    """Per (type, sender) stream: frames seen and what the sequence numbers say was lost."""

    frames: int = 0
    samples: int = 0
    gaps: int = 0
    lost_frames: int = 0
    lost_samples: int = 0
    restarts: int = 0


@dataclass
class LinkStats:
    """Counters of one link. Invariant: bytes_in == bytes in yielded frames + bytes_skipped + pending."""

    bytes_in: int = 0
    frames_ok: int = 0
    header_errors: int = 0  # candidate headers rejected (bad version/type/length or header CRC)
    crc_errors: int = 0  # good header, frame CRC-32 mismatch
    malformed: int = 0  # CRC-valid frame whose payload breaks the format
    bytes_skipped: int = 0
    gaps: int = 0
    lost_frames: int = 0
    lost_samples: int = 0
    sensors: dict[int, StreamStats] = field(default_factory=dict)  # SAMPLES streams by sensor id
    annotation_sources: dict[int, StreamStats] = field(default_factory=dict)

    def copy(self) -> LinkStats:
        out = LinkStats(**{k: v for k, v in vars(self).items() if not isinstance(v, dict)})
        out.sensors = {k: StreamStats(**vars(v)) for k, v in self.sensors.items()}
        out.annotation_sources = {k: StreamStats(**vars(v)) for k, v in self.annotation_sources.items()}
        return out


@dataclass
class _StreamState:
    seq: int
    end_us: float | None  # expected timestamp of the next SAMPLES frame, if the rate is known
    n: int


class FrameDecoder:
    """Incremental decoder: feed it bytes as they arrive, get whole, CRC-checked frames back.

    Resynchronises after garbage, truncated frames and bit flips by scanning for the next sync
    word whose header checks out. ``max_payload`` caps the length a header may claim, so a
    corrupted length can hold back later frames for at most that many bytes.
    """

    def __init__(self, descriptors: Iterable[SensorDescriptor] = (), *, max_payload: int = MAX_PAYLOAD) -> None:
        if not 0 < max_payload <= 0xFFFF:
            raise ValueError("max_payload must be in 1..65535")
        self.max_payload = max_payload
        self.stats = LinkStats()
        self._buf = bytearray()
        self._rates = {d.sensor_id: d.sample_rate_hz for d in descriptors}
        self._streams: dict[tuple[int, int], _StreamState] = {}
        self._logged: dict[tuple[object, ...], int] = {}  # events per kind, for _log_sometimes

    @property
    def pending(self) -> int:
        """Bytes held back: a partial frame (or a sync byte) waiting for more data."""
        return len(self._buf)

    def reset(self) -> None:
        """Drop a partial frame (the link was re-opened); sequence tracking carries on across it."""
        self.stats.bytes_skipped += len(self._buf)
        self._buf.clear()

    def feed(self, data: bytes) -> list[Frame]:
        return [frame for frame, _ in self.feed_with_bytes(data)]

    def feed_with_bytes(self, data: bytes) -> list[tuple[Frame, bytes]]:
        """Like feed, but each frame comes with its exact bytes (what a recorder stores)."""
        stats = self.stats
        stats.bytes_in += len(data)
        buf = self._buf
        buf += data
        out: list[tuple[Frame, bytes]] = []
        pos, n = 0, len(buf)
        while True:
            start = buf.find(SYNC, pos)
            if start < 0:
                # Keep a trailing first sync byte: the second may come with the next read.
                keep = 1 if n > pos and buf[n - 1] == SYNC[0] else 0
                stats.bytes_skipped += n - keep - pos
                pos = n - keep
                break
            stats.bytes_skipped += start - pos
            pos = start
            if n - pos < HEADER_SIZE:
                break
            _, length, version, ftype, sensor_id, seq, ts = _HEADER.unpack_from(buf, pos)
            (hcrc,) = _HEADER_CRC.unpack_from(buf, pos + _HEADER.size)
            if (
                version != VERSION
                or ftype not in _TYPE_VALUES
                or length > self.max_payload
                or binascii.crc_hqx(buf[pos : pos + _HEADER.size], 0xFFFF) != hcrc
            ):
                stats.header_errors += 1
                stats.bytes_skipped += 1
                pos += 1
                continue
            end = pos + FRAME_OVERHEAD + length
            if n < end:
                break
            if zlib.crc32(buf[pos : end - 4]) != _CRC.unpack_from(buf, end - 4)[0]:
                stats.crc_errors += 1
                log.debug("frame CRC mismatch", extra={"sensor_id": sensor_id, "seq": seq, "length": length})
                stats.bytes_skipped += 1
                pos += 1
                continue
            raw = bytes(buf[pos:end])
            try:
                frame = _parse_payload(ftype, sensor_id, seq, ts, raw[HEADER_SIZE:-4])
            except FrameError as exc:
                stats.malformed += 1
                stats.bytes_skipped += end - pos
                self._log_sometimes(
                    ("malformed", ftype), "malformed frame dropped", sensor_id=sensor_id, type=ftype, reason=str(exc)
                )
                pos = end
                continue
            pos = end
            stats.frames_ok += 1
            self._track(frame)
            out.append((frame, raw))
        del buf[:pos]
        return out

    def _log_sometimes(self, kind: tuple[object, ...], message: str, **extra: object) -> None:
        """A warning for the first event of ``kind``, then for every ``LOG_EVERY``-th (see there)."""
        self._logged[kind] = count = self._logged.get(kind, 0) + 1
        if count == 1 or count % LOG_EVERY == 0:
            log.warning(
                "%s (the first of its kind, then every %dth, is logged)",
                message,
                LOG_EVERY,
                extra={**extra, "count": count},
            )

    def _track(self, frame: Frame) -> None:
        if isinstance(frame, DescriptorFrame):
            self._rates[frame.sensor_id] = frame.descriptor.sample_rate_hz
            return
        is_samples = isinstance(frame, SampleFrame)
        table = self.stats.sensors if is_samples else self.stats.annotation_sources
        st = table.setdefault(frame.sensor_id, StreamStats())
        st.frames += 1
        n = frame.samples.shape[0] if isinstance(frame, SampleFrame) else 0
        st.samples += n
        rate = self._rates.get(frame.sensor_id) if is_samples else None
        key = (FrameType.SAMPLES if is_samples else FrameType.ANNOTATION, frame.sensor_id)
        prev = self._streams.get(key)
        self._streams[key] = _StreamState(frame.seq, frame.timestamp_us + n * 1e6 / rate if rate else None, n)
        if prev is None:
            return
        delta = (frame.seq - prev.seq) % _U32
        if delta == 1:
            return
        if delta == 0 or delta >= _U32 // 2:
            st.restarts += 1
            self._log_sometimes(
                ("restart", key),
                "sender restarted its sequence",
                sensor_id=frame.sensor_id,
                seq=frame.seq,
                previous_seq=prev.seq,
            )
            return
        lost_frames = delta - 1
        if not is_samples:
            lost_samples = 0
        elif prev.end_us is not None and rate:
            lost_samples = max(0, round((frame.timestamp_us - prev.end_us) * rate / 1e6))
        else:
            lost_samples = lost_frames * prev.n
        st.gaps += 1
        st.lost_frames += lost_frames
        st.lost_samples += lost_samples
        self.stats.gaps += 1
        self.stats.lost_frames += lost_frames
        self.stats.lost_samples += lost_samples
        self._log_sometimes(
            ("gap", key),
            "frames lost on the link",
            sensor_id=frame.sensor_id,
            lost_frames=lost_frames,
            lost_samples=lost_samples,
            seq=frame.seq,
        )
