"""Playing a recording into a serial device or a pty, at real time x speed, as a sensor would.

The gateway under test reads a replay through its ordinary serial path, so a replay exercises
the same decoder, reconnect logic and pipeline as a live chair. What goes on the wire:

1. one DESCRIPTOR frame per sensor the recording knows (so the gateway can scale samples);
2. the recorded frames, byte for byte, in the order they were received;
3. label-track entries as ANNOTATION frames: an open one at the interval's start and a closing
   one at its end, interleaved with the frames by time — the gateway gets labels over the same
   link a caregiver app would use.

Pacing: a SAMPLES frame is due when its last sample was taken (timestamp of the first sample +
n / rate), which is when a sensor could have sent it; other frames at their timestamp. Times
come from the frames themselves (the recording's common clock), not from the receive times,
because labels are on that clock too. Never earlier than the frame before it: recorded order
is kept even when two sensors' timestamps interleave. ``speed`` scales time (2.0 = twice as
fast); 0 sends as fast as the port takes the bytes.

Recorded ANNOTATION frames and label-track entries should not share a source id: the replayed
label track numbers its own frames, and mixing them would confuse the receiver's sequence check.
"""

from __future__ import annotations

import heapq
import logging
import os
import select
import threading
import time
import tty
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import serial

from .frames import Annotation, AnnotationFrame, DescriptorFrame, Frame, SampleFrame, encode_frame
from .recording import Recording, merge_annotations

log = logging.getLogger(__name__)


class ReplayError(Exception):
    """The replay could not write: the port is gone or nobody reads it."""


@dataclass(frozen=True)
class ScheduledFrame:
    at_us: int  # when to send it, on the recording's clock
    raw: bytes
    frame: Frame


def open_pty() -> tuple[int, str]:
    """A virtual serial port: returns the master fd (replay writes here) and the slave path (the gateway opens it).

    The slave is put in raw mode so the tty line discipline passes every byte untouched (no echo,
    no CR/LF translation, no ^C/^S handling).
    """
    master, slave = os.openpty()
    path = os.ttyname(slave)
    tty.setraw(slave)
    os.close(slave)
    return master, path


def _due_us(frame: Frame, recording: Recording) -> int:
    if isinstance(frame, SampleFrame):
        d = recording.descriptors.get(frame.sensor_id)
        if d is not None:
            return frame.timestamp_us + round(frame.samples.shape[0] * 1e6 / d.sample_rate_hz)
    return frame.timestamp_us


def schedule(recording: Recording) -> list[ScheduledFrame]:
    """Everything a replay sends, in order, with send times (see the module docstring)."""
    recorded: list[ScheduledFrame] = []
    latest = 0
    for rec, frame in zip(recording.frame_records, recording.frames):
        latest = max(latest, _due_us(frame, recording))
        recorded.append(ScheduledFrame(latest, rec.raw, frame))

    events: list[tuple[int, Annotation]] = []
    for a in merge_annotations([r.annotation for r in recording.label_records]):
        events.append((a.start_us, Annotation(a.label, a.start_us, None, a.annotation_id, a.source_id)))
        if a.end_us is not None:
            events.append((a.end_us, a))
    events.sort(key=lambda e: e[0])
    seqs: dict[int, int] = {}
    labels: list[ScheduledFrame] = []
    for at, a in events:
        seq = seqs.get(a.source_id, 0)
        seqs[a.source_id] = seq + 1
        frame = AnnotationFrame(a, seq, at)
        labels.append(ScheduledFrame(at, encode_frame(frame), frame))

    body = list(heapq.merge(recorded, labels, key=lambda s: s.at_us))
    start = body[0].at_us if body else 0
    head = []
    for sensor_id in sorted(recording.descriptors):
        frame = DescriptorFrame(recording.descriptors[sensor_id], 0, start)
        head.append(ScheduledFrame(start, encode_frame(frame), frame))
    return head + body


class _Port(Protocol):
    def write(self, data: bytes) -> None: ...
    def close(self) -> None: ...


class _FdPort:
    """A file descriptor (a pty master): non-blocking writes, a stall longer than the timeout is an error."""

    def __init__(self, fd: int, stall_timeout_s: float) -> None:
        self._fd, self._timeout = fd, stall_timeout_s
        self._was_blocking = os.get_blocking(fd)
        os.set_blocking(fd, False)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:
                if not select.select([], [self._fd], [], self._timeout)[1]:
                    raise ReplayError(
                        f"nobody has read the port for {self._timeout} s (is the gateway reading the pty?)"
                    ) from None
            except OSError as exc:
                raise ReplayError(f"writing to the port failed: {exc}") from exc

    def close(self) -> None:
        os.set_blocking(self._fd, self._was_blocking)


class _SerialPort:
    def __init__(self, url: str, baudrate: int, stall_timeout_s: float) -> None:
        try:
            self._serial = serial.serial_for_url(url, baudrate, write_timeout=stall_timeout_s)
        except (serial.SerialException, OSError, ValueError) as exc:
            raise ReplayError(f"cannot open {url!r} for replay: {exc}") from exc

    def write(self, data: bytes) -> None:
        try:
            self._serial.write(data)
        except (serial.SerialException, OSError) as exc:
            raise ReplayError(f"writing to {self._serial.name!r} failed: {exc}") from exc

    def close(self) -> None:
        try:
            self._serial.flush()
        finally:
            self._serial.close()


def _wait_for_reader(fd: int, timeout_s: float, settle_s: float, stop: threading.Event) -> None:
    # A pty master polls POLLHUP while no process has the slave open.
    poller = select.poll()
    poller.register(fd, select.POLLHUP)
    deadline = time.monotonic() + timeout_s
    waited = False
    while poller.poll(0) and not stop.is_set():
        if time.monotonic() >= deadline:
            raise ReplayError(f"no reader opened the pty within {timeout_s} s")
        if not waited:
            log.info("waiting for a reader to open the pty", extra={"timeout_s": timeout_s})
            waited = True
        stop.wait(0.02)
    # pyserial flushes its input buffer just after opening: let that pass before the descriptors go out.
    stop.wait(settle_s)


@dataclass(frozen=True)
class ReplayStats:
    frames_sent: int
    sample_frames: int
    descriptor_frames: int
    annotation_frames: int
    bytes_sent: int
    recording_s: float  # recording time covered by what was sent
    wall_s: float
    max_lag_s: float  # how far the writer fell behind the schedule at worst
    completed: bool  # False when stopped early


class Pace:
    """A replay's speed and how far it may go, changeable while it runs (the fleet demo holds
    the stream at the end of the labelled part while the fleet trains, then lets it run on).

    ``speed``: 1 = real time, N = N times faster, 0 = as fast as possible. ``limit_s``: the replay
    sends nothing recorded later than this many seconds after the recording's start until the
    limit is raised (``inf``: no limit). Timing restarts from the current position whenever
    either changes, so a held replay does not rush to catch up.
    """

    def __init__(self, speed: float = 1.0, limit_s: float = float("inf")) -> None:
        if speed < 0:
            raise ValueError("speed must be >= 0 (0 = as fast as possible)")
        self._speed, self._limit_s = speed, limit_s
        self._version = 0
        self._changed = threading.Condition()
        self.held = False  # True while a replay waits at the limit (everything before it is sent)

    @property
    def speed(self) -> float:
        return self._speed

    @property
    def limit_s(self) -> float:
        return self._limit_s

    @property
    def version(self) -> int:
        return self._version

    def set(self, *, speed: float | None = None, limit_s: float | None = None) -> None:
        with self._changed:
            if speed is not None:
                if speed < 0:
                    raise ValueError("speed must be >= 0 (0 = as fast as possible)")
                self._speed = speed
            if limit_s is not None:
                self._limit_s = limit_s
            self.held = False  # until the replay reaches the new limit
            self._version += 1
            self._changed.notify_all()

    def wait_for_change(self, version: int, timeout_s: float) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._version != version, timeout_s)


def _with_periodic_descriptors(plan: list[ScheduledFrame], rec: Recording, every_s: float) -> list[ScheduledFrame]:
    if not plan:
        return plan
    out: list[ScheduledFrame] = []
    next_at = plan[0].at_us + int(every_s * 1e6)
    for item in plan:
        if item.at_us >= next_at:
            for sensor_id in sorted(rec.descriptors):
                frame = DescriptorFrame(rec.descriptors[sensor_id], 0, item.at_us)
                out.append(ScheduledFrame(item.at_us, encode_frame(frame), frame))
            next_at = item.at_us + int(every_s * 1e6)
        out.append(item)
    return out


def replay(
    recording: Recording | str | Path,
    port: str | int,
    speed: float | Pace = 1.0,
    *,
    baudrate: int = 115200,
    stop_event: threading.Event | None = None,
    stall_timeout_s: float = 10.0,
    wait_for_reader_s: float | None = None,
    settle_s: float = 0.2,
    progress_every_s: float = 5.0,
    descriptors_every_s: float | None = None,
) -> ReplayStats:
    """Play ``recording`` (a Recording or a path) into ``port``: a device path / pyserial URL, or an fd (pty master).

    ``wait_for_reader_s`` (fd ports only): first wait that long for a reader to open the pty.
    ``descriptors_every_s``: re-announce the sensors every that many seconds of recording time,
    as firmware does so that a receiver that restarted mid-stream can decode again (identical
    descriptors change nothing for a receiver that already knows them).
    Progress is logged every ``progress_every_s`` seconds; ``stop_event`` ends the replay early.
    """
    if not isinstance(speed, Pace) and speed < 0:
        raise ValueError("speed must be >= 0 (0 = as fast as possible)")
    rec = recording if isinstance(recording, Recording) else Recording.load(recording)
    plan = schedule(rec)
    if descriptors_every_s:
        plan = _with_periodic_descriptors(plan, rec, descriptors_every_s)
    stop = stop_event or threading.Event()
    if isinstance(port, int):
        if wait_for_reader_s is not None:
            _wait_for_reader(port, wait_for_reader_s, settle_s, stop)
        out: _Port = _FdPort(port, stall_timeout_s)
    else:
        out = _SerialPort(port, baudrate, stall_timeout_s)
    counts = {SampleFrame: 0, DescriptorFrame: 0, AnnotationFrame: 0}
    sent_bytes = 0
    max_lag = 0.0
    pace = speed if isinstance(speed, Pace) else Pace(speed)
    first = plan[0].at_us if plan else 0
    at_us = first
    t0 = time.monotonic()
    anchor_wall, anchor_us, version = t0, first, pace.version
    next_progress = t0 + progress_every_s
    log.info(
        "replay started",
        extra={"session_id": rec.metadata.session_id, "frames": len(plan), "speed": speed, "port": str(port)},
    )
    try:
        for item in plan:
            while not stop.is_set() and (item.at_us - first) / 1e6 > pace.limit_s:  # held
                pace.held = True
                pace.wait_for_change(pace.version, 0.2)
            pace.held = False
            if stop.is_set():
                break
            if pace.version != version:  # speed or limit changed: time from here
                anchor_wall, anchor_us, version = time.monotonic(), item.at_us, pace.version
            if pace.speed > 0:
                target = anchor_wall + (item.at_us - anchor_us) / 1e6 / pace.speed
                delay = target - time.monotonic()
                if delay > 0 and stop.wait(min(delay, 0.5)):
                    break
                if delay > 0.5:  # re-check the pace at least twice a second
                    continue_at = target
                    while time.monotonic() < continue_at and not stop.is_set() and pace.version == version:
                        stop.wait(min(continue_at - time.monotonic(), 0.5))
                    if stop.is_set():
                        break
                max_lag = max(max_lag, time.monotonic() - target)
            out.write(item.raw)
            sent_bytes += len(item.raw)
            counts[type(item.frame)] += 1
            at_us = item.at_us
            now = time.monotonic()
            if now >= next_progress:
                next_progress = now + progress_every_s
                log.info(
                    "replay progress",
                    extra={
                        "sent": sum(counts.values()),
                        "total": len(plan),
                        "position_s": round((at_us - first) / 1e6, 3),
                    },
                )
    finally:
        out.close()
    stats = ReplayStats(
        frames_sent=sum(counts.values()),
        sample_frames=counts[SampleFrame],
        descriptor_frames=counts[DescriptorFrame],
        annotation_frames=counts[AnnotationFrame],
        bytes_sent=sent_bytes,
        recording_s=(at_us - first) / 1e6,
        wall_s=time.monotonic() - t0,
        max_lag_s=max_lag,
        completed=sum(counts.values()) == len(plan),
    )
    log.info(
        "replay finished",
        extra={
            "session_id": rec.metadata.session_id,
            "frames_sent": stats.frames_sent,
            "completed": stats.completed,
            "wall_s": round(stats.wall_s, 3),
        },
    )
    return stats
