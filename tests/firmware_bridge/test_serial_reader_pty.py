"""SerialReader on real ptys: garbage bursts, unplug + replug, a slow consumer, loop:// URLs."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import serial

from firmware_bridge import serial_link
from firmware_bridge.frames import DescriptorFrame, Frame, SampleFrame, encode_frame
from firmware_bridge.replay import open_pty
from firmware_bridge.serial_link import ReceivedFrame, SerialReader
from tests.firmware_bridge.bridge_support import WAIT_S, wait_for
from tests.firmware_bridge.frame_strategies import IMU


def imu_frames(seqs: range) -> list[SampleFrame]:
    return [SampleFrame(1, s, s * 10_000, np.full((10, 3), s, np.int16)) for s in seqs]


@pytest.fixture
def pty() -> Iterator[tuple[int, str]]:
    master, path = open_pty()
    yield master, path
    try:
        os.close(master)
    except OSError:
        pass  # the test closed it (unplug)


def write_slowly(fd: int, data: bytes, rng: np.random.Generator) -> None:
    """Write in random small chunks so frames straddle reads."""
    pos = 0
    while pos < len(data):
        n = int(rng.integers(1, 200))
        os.write(fd, data[pos : pos + n])
        pos += n


def test_frames_survive_garbage_bursts_and_split_reads(pty: tuple[int, str]) -> None:
    master, path = pty
    got: list[ReceivedFrame] = []
    frames = [DescriptorFrame(IMU), *imu_frames(range(30))]
    rng = np.random.default_rng(1)
    stream = b""
    for i, f in enumerate(frames):
        if i in (5, 17):
            stream += rng.integers(0, 256, 700).astype(np.uint8).tobytes() + b"\xa5\x5a\x20"  # burst + fake sync
        stream += encode_frame(f)
    with SerialReader(path, 115200, on_received=got.append, clock_us=lambda: 42) as reader:
        assert reader.wait_connected(WAIT_S)
        write_slowly(master, stream, rng)
        assert wait_for(lambda: len(got) == len(frames))
        s = reader.stats
    assert [r.frame for r in got] == frames
    assert all(r.raw == encode_frame(r.frame) and r.received_us == 42 for r in got)
    assert s.link.bytes_skipped == 2 * 703 and s.link.gaps == 0 and s.delivered == len(frames)


def test_unplug_and_replug_reconnects_and_counts_what_was_lost(tmp_path: Path) -> None:
    # A udev-style stable name pointing at the current device, like /dev/serial/by-id/...
    link = tmp_path / "ttyWheelFed"
    master, slave = open_pty()
    os.symlink(slave, link)
    got: list[Frame] = []
    reader = SerialReader(str(link), 115200, got.append, descriptors=[IMU], backoff_initial_s=0.02, backoff_max_s=0.1)
    with reader:
        assert reader.wait_connected(WAIT_S)
        before = imu_frames(range(0, 5))
        # Frame 5 is long: if its torn start were kept after the reconnect, the decoder would hold
        # the next frames back while waiting for the rest of it.
        torn = encode_frame(SampleFrame(1, 5, 50_000, np.zeros((100, 3), np.int16)))
        sent = b"".join(map(encode_frame, before)) + torn[:40]
        os.write(master, sent)
        # A pty hangup may flush unread input: unplug only once every byte has been read.
        assert wait_for(lambda: len(got) == 5 and reader.stats.link.bytes_in == len(sent))
        # Unplug in the middle of frame 5: the stable name goes first (as udev removes it), so the
        # reader can never reopen the freed pts number, which another process may take meanwhile.
        os.unlink(link)
        os.close(master)
        assert wait_for(lambda: not reader.connected and reader.stats.open_failures >= 2)

        master2, slave2 = open_pty()  # replug: the device comes back, maybe under another pts number
        os.symlink(slave2, link)
        try:
            assert reader.wait_connected(WAIT_S)
            after = imu_frames(range(8, 12))  # frames 5..7 were sent while unplugged
            os.write(master2, b"".join(map(encode_frame, after)))
            assert wait_for(lambda: len(got) == 9)
            s = reader.stats
        finally:
            os.close(master2)
    assert got == before + after
    assert (s.opens, s.disconnects) == (2, 1)
    assert (s.link.lost_frames, s.link.lost_samples, s.link.gaps) == (3, 30, 1)
    assert s.link.bytes_skipped == 40  # the torn frame, dropped at the reconnect


def test_a_slow_consumer_never_blocks_the_read_loop_and_the_oldest_frames_are_dropped(pty: tuple[int, str]) -> None:
    master, path = pty
    release, entered = threading.Event(), threading.Event()
    got: list[Frame] = []

    def slow(frame: Frame) -> None:
        entered.set()
        release.wait(WAIT_S)
        got.append(frame)

    frames = imu_frames(range(50))
    reader = SerialReader(path, 115200, slow, queue_size=5)
    with reader:
        assert reader.wait_connected(WAIT_S)
        os.write(master, encode_frame(frames[0]))
        assert entered.wait(WAIT_S)  # the consumer is stuck on frame 0
        os.write(master, b"".join(map(encode_frame, frames[1:])))
        assert wait_for(lambda: reader.stats.link.frames_ok == 50)  # everything was read meanwhile
        s = reader.stats
        assert (s.dropped, s.queued, s.delivered) == (44, 5, 0)
        release.set()
        assert wait_for(lambda: reader.stats.delivered == 6)
    assert got == [frames[0], *frames[45:]]


def test_stop_delivers_what_was_already_read(pty: tuple[int, str]) -> None:
    master, path = pty
    gate = threading.Event()
    got: list[Frame] = []
    reader = SerialReader(path, 115200, lambda f: (gate.wait(WAIT_S), got.append(f)))
    reader.start()
    assert reader.wait_connected(WAIT_S)
    frames = imu_frames(range(10))
    os.write(master, b"".join(map(encode_frame, frames)))
    assert wait_for(lambda: reader.stats.link.frames_ok == 10)
    threading.Timer(0.05, gate.set).start()
    reader.stop()
    assert got == frames


def test_a_failing_callback_is_counted_and_delivery_goes_on(pty: tuple[int, str]) -> None:
    master, path = pty
    got: list[Frame] = []

    def picky(frame: Frame) -> None:
        if frame.seq == 1:
            raise RuntimeError("consumer bug")
        got.append(frame)

    with SerialReader(path, 115200, picky) as reader:
        assert reader.wait_connected(WAIT_S)
        os.write(master, b"".join(map(encode_frame, imu_frames(range(3)))))
        assert wait_for(lambda: reader.stats.delivered == 3)
        assert reader.stats.callback_errors == 1
    assert [f.seq for f in got] == [0, 2]


def test_works_with_a_pyserial_url(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[serial.SerialBase] = []
    real = serial.serial_for_url

    def keep(*args: object, **kwargs: object) -> serial.SerialBase:
        opened.append(real(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(serial_link.serial, "serial_for_url", keep)
    got: list[Frame] = []
    with SerialReader("loop://", 115200, got.append) as reader:
        assert reader.wait_connected(WAIT_S)
        frames = imu_frames(range(4))
        opened[0].write(b"noise" + b"".join(map(encode_frame, frames)))
        assert wait_for(lambda: len(got) == 4)
    assert got == frames


def test_an_invalid_url_stops_with_an_error_instead_of_retrying() -> None:
    reader = SerialReader("nosuchscheme://x", 115200, lambda f: None).start()
    assert wait_for(lambda: reader.error is not None)
    reader.stop()
    assert "nosuchscheme" in str(reader.error) and reader.stats.opens == 0


def test_needs_somewhere_to_deliver() -> None:
    with pytest.raises(ValueError, match="on_frame or on_received"):
        SerialReader("loop://")
