"""Hypothesis strategies and builders for frames, sensor streams and small recordings."""

from __future__ import annotations

import binascii
import zlib
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

from firmware_bridge.descriptors import ChannelSpec, SensorDescriptor
from firmware_bridge.frames import (
    Annotation,
    AnnotationFrame,
    DescriptorFrame,
    SampleFrame,
    chunk_samples,
    encode_frame,
)
from firmware_bridge.recording import RecordingMetadata, RecordingWriter

# 1000 Hz keeps the sample period a whole number of microseconds, so expected losses are exact.
RATE_HZ = 1000.0
PERIOD_US = 1000

IMU = SensorDescriptor(
    1, "imu", "imu", RATE_HZ, tuple(ChannelSpec(c, "g", 1 / 4096) for c in ("ax", "ay", "az")), "int16"
)
ECG = SensorDescriptor(2, "ecg", "ecg", RATE_HZ, (ChannelSpec("ecg", "mV"),), "float32")
DESCRIPTORS = {d.sensor_id: d for d in (IMU, ECG)}


def by_the_table(ftype: int, sensor_id: int, seq: int, ts: int, payload: bytes) -> bytes:
    """A frame assembled from the module docstring's byte table, independently of the encoder."""
    head = b"\xa5\x5a" + len(payload).to_bytes(2, "little") + bytes([1, ftype, sensor_id])
    head += seq.to_bytes(4, "little") + ts.to_bytes(8, "little")
    head += binascii.crc_hqx(head, 0xFFFF).to_bytes(2, "little")
    body = head + payload
    return body + zlib.crc32(body).to_bytes(4, "little")


@st.composite
def sample_arrays(draw: st.DrawFn, n_channels: int, dtype: str, max_rows: int = 12) -> np.ndarray:
    """Arbitrary bit patterns (NaNs and infinities included for float32); far cheaper than extra.numpy.arrays."""
    size = draw(st.integers(1, max_rows)) * n_channels * np.dtype(dtype).itemsize
    return np.frombuffer(draw(st.binary(min_size=size, max_size=size)), dtype=dtype).reshape(-1, n_channels)


labels = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)


@st.composite
def annotations(draw: st.DrawFn) -> Annotation:
    start = draw(st.integers(0, 2**40))
    end = draw(st.none() | st.integers(start, start + 2**30))
    return Annotation(draw(labels), start, end, draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 255)))


@st.composite
def descriptors(draw: st.DrawFn) -> SensorDescriptor:
    n = draw(st.integers(1, 6))
    channels = tuple(
        ChannelSpec(
            f"c{i}",
            draw(st.sampled_from(["g", "mV", "rad/s", ""])),
            draw(st.floats(1e-6, 1e3)),
            draw(st.floats(-1e3, 1e3)),
        )
        for i in range(n)
    )
    return SensorDescriptor(
        draw(st.integers(0, 255)),
        draw(st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)),
        draw(st.sampled_from(["imu", "wheel_imu", "ecg", "ppg", "pressure"])),
        draw(st.floats(0.5, 10_000)),
        channels,
        draw(st.sampled_from(["int16", "float32"])),
    )


@st.composite
def any_frames(draw: st.DrawFn) -> SampleFrame | DescriptorFrame | AnnotationFrame:
    seq, ts = draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 2**64 - 1))
    kind = draw(st.sampled_from(["samples", "descriptor", "annotation"]))
    if kind == "samples":
        ch = draw(st.integers(1, 8))
        return SampleFrame(
            draw(st.integers(0, 255)), seq, ts, draw(sample_arrays(ch, draw(st.sampled_from(["int16", "float32"]))))
        )
    if kind == "descriptor":
        return DescriptorFrame(draw(descriptors()), seq, ts)
    return AnnotationFrame(draw(annotations()), seq, ts)


@st.composite
def sensor_streams(draw: st.DrawFn, max_frames: int = 24) -> list[SampleFrame]:
    """Interleaved frames of IMU and ECG with consecutive seqs and timestamps consistent with 1000 Hz."""
    state = {sid: [draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 2**40))] for sid in DESCRIPTORS}
    out = []
    for _ in range(draw(st.integers(1, max_frames))):
        sid = draw(st.sampled_from(sorted(DESCRIPTORS)))
        d = DESCRIPTORS[sid]
        samples = draw(sample_arrays(d.n_channels, d.sample_format))
        seq, ts = state[sid]
        out.append(SampleFrame(sid, seq, ts, samples))
        state[sid] = [(seq + 1) % 2**32, ts + len(samples) * PERIOD_US]
    return out


def small_session(path: Path, *, n_imu_frames: int = 8, frame_samples: int = 10, with_labels: bool = True) -> Path:
    """A two-sensor recording with interleaved frames, a live annotation frame and label-track entries."""
    rng = np.random.default_rng(7)
    imu = chunk_samples(
        IMU.sensor_id,
        rng.integers(-2000, 2000, (n_imu_frames * frame_samples, 3)).astype(np.int16),
        RATE_HZ,
        frame_samples,
        t0_us=1_000_000,
    )
    ecg = chunk_samples(
        ECG.sensor_id,
        rng.normal(size=(n_imu_frames * frame_samples, 1)).astype(np.float32),
        RATE_HZ,
        frame_samples,
        t0_us=1_000_000,
    )
    meta = RecordingMetadata("test-session", subject="s1", source="test", descriptors=(IMU, ECG), created_us=5)
    with RecordingWriter(path, meta) as w:
        for i, (a, b) in enumerate(zip(imu, ecg)):
            done = a.timestamp_us + frame_samples * PERIOD_US
            w.write_frame(encode_frame(a), done + 50)
            w.write_frame(encode_frame(b), done + 80)
            if i == 2:
                live = AnnotationFrame(Annotation("button", done - 5000, None, 1, source_id=9), 0, done - 5000)
                w.write_frame(encode_frame(live), done + 90)
        if with_labels:
            w.write_label(Annotation("rest", 1_000_000, 1_030_000, 0), 1_030_000)
            w.write_label(Annotation("propel", 1_030_000, None, 1), 1_030_000)
            w.write_label(Annotation("propel", 1_030_000, 1_060_000, 1), 1_060_000)
    return path
