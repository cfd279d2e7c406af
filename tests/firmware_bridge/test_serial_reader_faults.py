"""SerialReader's threads against faults: whatever raises inside them is counted and logged once
per kind, and the thread reads (or delivers) on; what ends a thread anyway is visible
(``dead_workers``) and repaired (``restart``)."""

from __future__ import annotations

import logging
import os
from typing import Iterator

import numpy as np
import pytest
import serial

from firmware_bridge import frames as frames_module
from firmware_bridge.frames import Frame, SampleFrame, encode_frame
from firmware_bridge.replay import open_pty
from firmware_bridge.serial_link import Faults, ReceivedFrame, SerialReader
from tests.firmware_bridge.bridge_support import WAIT_S, wait_for


class ThreadKiller(BaseException):
    """Not an Exception: no loop catches it, so it ends the thread it is raised in."""


def imu_frames(seqs: range) -> list[SampleFrame]:
    return [SampleFrame(1, s, s * 10_000, np.full((10, 3), s, np.int16)) for s in seqs]


def send(fd: int, seqs: range) -> list[SampleFrame]:
    frames = imu_frames(seqs)
    os.write(fd, b"".join(map(encode_frame, frames)))
    return frames


@pytest.fixture
def pty() -> Iterator[tuple[int, str]]:
    master, path = open_pty()
    yield master, path
    os.close(master)


def errors(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR and text in r.getMessage()]


def test_faults_are_counted_by_kind_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    faults = Faults()
    with caplog.at_level(logging.ERROR):
        for i in range(50):
            faults.record("store write", OSError("disk full") if i % 2 else ValueError("bad row"))
    assert faults.total == 50 and faults.by_kind() == {"store write: ValueError": 25, "store write: OSError": 25}
    assert len(errors(caplog, "store write")) == 2  # one per kind, each with its traceback
    assert all(r.exc_info for r in errors(caplog, "store write"))


def test_a_decoder_fault_drops_its_bytes_and_reading_goes_on(
    pty: tuple[int, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    master, path = pty
    real = frames_module.FrameDecoder.feed_with_bytes
    calls = {"n": 0}

    def choke_once(self, data: bytes):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 1:
            self._buf += data  # as if it failed half way through
            raise RecursionError("a decoder bug")
        return real(self, data)

    monkeypatch.setattr(frames_module.FrameDecoder, "feed_with_bytes", choke_once)
    got: list[Frame] = []
    with caplog.at_level(logging.ERROR), SerialReader(path, 115200, got.append) as reader:
        assert reader.wait_connected(WAIT_S)
        os.write(master, b"x")  # the read the decoder chokes on
        assert wait_for(lambda: reader.faults.total == 1)
        frames = send(master, range(5))
        assert wait_for(lambda: len(got) == 5)
        assert reader.dead_workers() == [] and reader.stats.opens == 1  # no reopen for a decoder fault
    assert got == frames
    assert reader.faults.by_kind() == {"frame decoder: RecursionError": 1}
    assert len(errors(caplog, "frame decoder")) == 1


def test_an_unexpected_port_error_reopens_the_port_and_reading_goes_on(
    pty: tuple[int, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    master, path = pty
    real = serial.Serial.read
    calls = {"n": 0}

    def flaky(self, size: int = 1) -> bytes:  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 1:
            raise TypeError("'NoneType' object is not subscriptable")  # pyserial racing a close
        return real(self, size)

    monkeypatch.setattr(serial.Serial, "read", flaky)
    got: list[Frame] = []
    with SerialReader(path, 115200, got.append, backoff_initial_s=0.01) as reader:
        assert wait_for(lambda: reader.faults.total == 1 and reader.stats.opens == 2)
        frames = send(master, range(3))
        assert wait_for(lambda: len(got) == 3)
        assert reader.dead_workers() == []
    assert got == frames and reader.faults.by_kind() == {"serial read: TypeError": 1}


def test_a_callback_failing_on_every_frame_logs_one_line(
    pty: tuple[int, str], caplog: pytest.LogCaptureFixture
) -> None:
    master, path = pty

    def broken(item: ReceivedFrame) -> None:
        raise KeyError("no such sensor")

    with caplog.at_level(logging.ERROR), SerialReader(path, 115200, on_received=broken) as reader:
        assert reader.wait_connected(WAIT_S)
        send(master, range(200))
        assert wait_for(lambda: reader.stats.delivered == 200)
    assert reader.stats.callback_errors == reader.faults.total == 200
    assert len(errors(caplog, "frame delivery")) == 1


def test_a_dead_delivery_thread_is_named_and_restarted(pty: tuple[int, str]) -> None:
    master, path = pty
    got: list[Frame] = []

    def fatal_once(frame: Frame) -> None:
        if frame.seq == 2:
            raise ThreadKiller
        got.append(frame)

    with SerialReader(path, 115200, fatal_once) as reader:
        assert reader.wait_connected(WAIT_S)
        send(master, range(3))
        assert wait_for(lambda: reader.dead_workers() == ["deliver"])
        frames = send(master, range(3, 6))  # read and queued meanwhile
        assert wait_for(lambda: reader.stats.link.frames_ok == 6)
        assert reader.restart(["deliver"]) == ["deliver"]
        assert wait_for(lambda: len(got) == 5)
        assert reader.dead_workers() == [] and reader.restart(["deliver"]) == []  # alive: nothing to do
    assert [f.seq for f in got] == [0, 1, 3, 4, 5] and got[2:] == frames


def test_a_dead_read_thread_is_restarted_on_a_fresh_connection(
    pty: tuple[int, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    master, path = pty
    real = frames_module.FrameDecoder.feed_with_bytes
    armed = {"kill": False}

    def killer(self, data: bytes):  # type: ignore[no-untyped-def]
        if armed["kill"]:
            armed["kill"] = False
            raise ThreadKiller
        return real(self, data)

    monkeypatch.setattr(frames_module.FrameDecoder, "feed_with_bytes", killer)
    got: list[ReceivedFrame] = []
    with SerialReader(path, 115200, on_received=got.append) as reader:
        assert reader.wait_connected(WAIT_S)
        send(master, range(2))
        assert wait_for(lambda: len(got) == 2)
        armed["kill"] = True
        os.write(master, b"x")
        # The read thread ended; the delivery thread delivered what was queued and ended with it.
        assert wait_for(lambda: reader.dead_workers() == ["read", "deliver"])
        assert not reader.connected
        assert reader.restart(["read", "deliver"]) == ["read", "deliver"]
        assert reader.wait_connected(WAIT_S)
        send(master, range(2, 4))
        assert wait_for(lambda: len(got) == 4)
    assert [(r.frame.seq, r.connection) for r in got] == [(0, 1), (1, 1), (2, 2), (3, 2)]


def test_a_stopped_reader_has_no_dead_workers_and_is_not_restarted(pty: tuple[int, str]) -> None:
    _, path = pty
    reader = SerialReader(path, 115200, lambda f: None).start()
    assert reader.wait_connected(WAIT_S)
    reader.stop()
    assert reader.dead_workers() == [] and reader.restart(["read", "deliver"]) == []
