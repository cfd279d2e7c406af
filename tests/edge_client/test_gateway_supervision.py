"""A gateway keeps reading whatever fails inside it: faults in the reader, pipeline, store and
predictor are counted (``faults=``) and logged once per kind; a reader thread that dies anyway is
restarted by the supervisor with backoff (``restarts=``); hostile and mismatched frames from the
sensor link are counted, one warning line per kind, never a traceback."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest

from edge_client.gateway import Gateway, GatewayConfig, SupervisionConfig
from edge_client.processing import FrameProcessor
from firmware_bridge import frames as frames_module
from firmware_bridge.descriptors import ChannelSpec, SensorDescriptor
from firmware_bridge.frames import DescriptorFrame, SampleFrame, encode_frame
from firmware_bridge.replay import open_pty
from firmware_bridge.serial_link import ReceivedFrame
from tests.firmware_bridge.bridge_support import wait_for
from tests.firmware_bridge.frame_strategies import by_the_table

WATCH = SensorDescriptor(1, "watch", "imu", 50.0, (ChannelSpec("ax", "g", 0.001),))
#: Fast enough for a test; the backoff still doubles.
FAST = SupervisionConfig(check_every_s=0.01, backoff_initial_s=0.05, backoff_max_s=0.4)


class ThreadKiller(BaseException):
    """Not an Exception: no loop catches it, so it ends the thread it is raised in."""


def watch(first: int, end: int, channels: int = 1) -> list[SampleFrame]:
    """Frames ``first..end-1`` of a 50 Hz sensor, 25 samples (0.5 s) each."""
    return [SampleFrame(1, seq, seq * 500_000, np.full((25, channels), seq, np.int16)) for seq in range(first, end)]


def send(fd: int, *frames: object) -> None:
    os.write(fd, b"".join(f if isinstance(f, bytes) else encode_frame(f) for f in frames))


@pytest.fixture
def pty() -> Iterator[tuple[int, str]]:
    master, path = open_pty()
    yield master, path
    os.close(master)


@pytest.fixture
def gateway(tmp_path: Path, pty: tuple[int, str]) -> Iterator[Callable[[], Gateway]]:
    started: list[Gateway] = []

    def start() -> Gateway:
        gw = Gateway(
            GatewayConfig(client_id="gw-1", store_path=tmp_path / "gw.db", serial_port=pty[1], supervision=FAST)
        )
        gw.start()
        started.append(gw)
        assert gw.serial.wait_connected(5)
        return gw

    yield start
    for gw in started:
        gw.shutdown()


def test_a_dead_delivery_thread_is_restarted_and_the_gateway_reads_on(
    gateway: Callable[[], Gateway], pty: tuple[int, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    master, _ = pty
    real = FrameProcessor.on_received

    def dies_at_frame_4(self: FrameProcessor, item: ReceivedFrame) -> None:
        if isinstance(item.frame, SampleFrame) and item.frame.seq == 4:
            raise ThreadKiller
        real(self, item)

    monkeypatch.setattr(FrameProcessor, "on_received", dies_at_frame_4)
    gw = gateway()
    send(master, DescriptorFrame(WATCH), *watch(0, 10))
    assert wait_for(lambda: gw.restarts == 1)
    send(master, *watch(10, 30))
    assert wait_for(lambda: gw.processor.stats.frames == 30)  # all but the frame that killed the thread
    assert wait_for(lambda: (gw.processor.stats.last_window_end_us or 0) >= 14_000_000)  # windows up to the end
    s = gw.stats()
    assert (s["restarts"], s["faults"], s["reopens"], s["link"]) == (1, 0, 0, "up")


def test_a_dead_read_thread_is_restarted_and_the_sensor_counts_again_after_re_announcing(
    gateway: Callable[[], Gateway], pty: tuple[int, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    master, _ = pty
    real = frames_module.FrameDecoder.feed_with_bytes
    armed = threading.Event()

    def killer(self, data: bytes):  # type: ignore[no-untyped-def]
        if armed.is_set():
            armed.clear()
            raise ThreadKiller
        return real(self, data)

    monkeypatch.setattr(frames_module.FrameDecoder, "feed_with_bytes", killer)
    gw = gateway()
    send(master, DescriptorFrame(WATCH), *watch(0, 10))
    assert wait_for(lambda: gw.processor.stats.frames == 11)
    armed.set()
    send(master, b"\x00")
    assert wait_for(lambda: gw.restarts == 2)  # read and delivery: the latter ends with the former
    assert gw.serial.wait_connected(5)
    send(master, DescriptorFrame(WATCH), *watch(10, 30))  # a new connection: the sensor re-announces
    assert wait_for(lambda: (gw.processor.stats.last_window_end_us or 0) >= 14_000_000)
    s = gw.stats()
    assert (s["restarts"], s["reopens"], s["streams"], s["unattributed"]) == (2, 1, 1, 0)


def test_restarts_back_off_when_a_thread_dies_again_and_again(
    gateway: Callable[[], Gateway], pty: tuple[int, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    master, _ = pty

    def always_dies(self: FrameProcessor, item: ReceivedFrame) -> None:
        raise ThreadKiller

    monkeypatch.setattr(FrameProcessor, "on_received", always_dies)
    gw = gateway()
    stop = threading.Event()

    def sensor() -> None:
        for frame in watch(0, 10_000):
            if stop.wait(0.005):
                return
            send(master, frame)

    writer = threading.Thread(target=sensor)
    writer.start()
    try:
        time.sleep(1.2)
    finally:
        stop.set()
        writer.join()
    # Waits of 0.05, 0.1, 0.2, 0.4, 0.4 s: at most 5 restarts in 1.2 s (a check every 10 ms without backoff).
    assert 2 <= gw.restarts <= 5


def test_store_and_predictor_faults_are_counted_once_per_kind_and_collection_goes_on(
    gateway: Callable[[], Gateway], pty: tuple[int, str], caplog: pytest.LogCaptureFixture
) -> None:
    master, _ = pty
    gw = gateway()
    real_add, failures = gw.store.add, {"left": 3}

    def full_disk(record):  # type: ignore[no-untyped-def]
        if failures["left"]:
            failures["left"] -= 1
            raise sqlite3.OperationalError("database or disk is full")
        return real_add(record)

    def broken_model(*args: object) -> None:
        raise ValueError("model input has the wrong shape")

    gw.store.add = full_disk  # type: ignore[method-assign]
    gw.processor.on_window = broken_model
    with caplog.at_level(logging.WARNING):
        send(master, DescriptorFrame(WATCH), *watch(0, 60))
        assert wait_for(lambda: gw.processor.stats.frames == 61)
    s = gw.stats()
    assert s["stored"] >= 10 and s["faults"] == 3 + s["stored"]
    assert gw.faults.by_kind() == {
        "frame delivery: OperationalError": 3,
        "window callback (live recognition): ValueError": s["stored"],
    }
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(logged) == 2 and all(r.exc_info for r in logged)  # one traceback per kind


def test_mismatched_and_hostile_frames_are_counted_with_one_line_each_and_no_traceback(
    gateway: Callable[[], Gateway], pty: tuple[int, str], caplog: pytest.LogCaptureFixture
) -> None:
    master, _ = pty
    gw = gateway()
    hostile = [
        by_the_table(2, 1, 0, 0, p.encode())
        for p in (
            "[" * 4096 + "]" * 4096,
            '{"sensor_id": ' + "1" * 5000 + "}",
            '{"sensor_id":1,"name":"watch","kind":"imu","sample_rate_hz":1e-320,"sample_format":"int16",'
            '"channels":[{"name":"ax","unit":"g","scale":NaN,"offset":0}]}',
        )
    ]
    unresampleable = SensorDescriptor(2, "wrist", "imu", 100.0003, (ChannelSpec("ax", "g"),))
    with caplog.at_level(logging.INFO):
        send(master, DescriptorFrame(WATCH), *(hostile * 20), DescriptorFrame(unresampleable))
        send(master, *watch(0, 50, channels=2))  # firmware sending 2 channels, announced 1
        send(master, *watch(50, 70))
        assert wait_for(lambda: gw.processor.stats.frames == 72)
    s = gw.stats()
    assert (s["mismatched"], s["refused_descriptors"], s["faults"], s["restarts"]) == (50, 1, 0, 0)
    assert gw.serial.stats.link.malformed == 60
    assert wait_for(lambda: (gw.processor.stats.last_window_end_us or 0) >= 34_000_000)  # the good frames' windows
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("malformed frame" in m for m in warnings) == 1
    assert sum("do not match their sensor's descriptor" in m for m in warnings) == 1
    assert sum("descriptor refused" in m for m in warnings) == 1
    assert not any(r.exc_info for r in caplog.records)
