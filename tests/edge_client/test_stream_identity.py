"""FrameProcessor: frames from another stream (a re-used pty, another device, a sender restart)
are never stored as the known sensors, and never relabel or drop what is already stored."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_client.processing import FrameProcessor
from edge_client.store import WindowStore
from firmware_bridge.descriptors import ChannelSpec, SensorDescriptor
from firmware_bridge.frames import Annotation, AnnotationFrame, DescriptorFrame, SampleFrame, chunk_samples
from firmware_bridge.serial_link import ReceivedFrame

RATE = 50.0
FRAME = 25  # samples per frame: 0.5 s
WATCH = SensorDescriptor(1, "watch", "imu", RATE, (ChannelSpec("ax", "g", 0.001), ChannelSpec("ay", "g", 0.001)))
OTHER = SensorDescriptor(1, "seat", "pressure", 100.0, (ChannelSpec("p", "kPa", 0.01),))


def samples(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-2000, 2000, size=(int(seconds * RATE), 2)).astype(np.int16)


def stream(seconds: float, *, t0_s: float = 0.0, first_seq: int = 0, seed: int = 0) -> list[SampleFrame]:
    return chunk_samples(1, samples(seconds, seed), RATE, FRAME, t0_us=int(t0_s * 1e6), first_seq=first_seq)


def closing(label: str, start_s: float, end_s: float, annotation_id: int = 0) -> AnnotationFrame:
    return AnnotationFrame(Annotation(label, int(start_s * 1e6), int(end_s * 1e6), annotation_id, 9))


class Link:
    """Feeds a processor as the serial reader does: frames numbered by connection, on a gateway clock."""

    def __init__(self, processor: FrameProcessor) -> None:
        self.processor, self.connection, self.now_us = processor, 1, 0

    def send(self, *frames, every_us: int = 0) -> None:
        for frame in frames:
            self.now_us += every_us
            self.processor.on_received(ReceivedFrame(frame, b"", self.now_us, self.connection))

    def reopen(self, down_s: float = 1.0) -> None:
        self.connection += 1
        self.now_us += int(down_s * 1e6)


@pytest.fixture
def store(tmp_path: Path):
    with WindowStore(tmp_path / "w.db") as s:
        yield s


def labelled(store: WindowStore, session: str) -> int:
    return store.count(labelled_only=True, session_id=session)


def first_recording(link: Link, store: WindowStore) -> int:
    """60 s labelled 'push' from a sensor that announced itself; returns the labelled windows."""
    link.send(DescriptorFrame(WATCH), *stream(60), closing("push", 0, 60))
    link.processor.finish()
    n = labelled(store, "s")
    assert n > 20
    return n


def test_a_foreign_recording_on_a_reused_port_is_a_new_session_and_relabels_nothing(store: WindowStore) -> None:
    processor = FrameProcessor(store, "s")
    link = Link(processor)
    before = first_recording(link, store)
    windows_before = store.count(session_id="s")

    link.reopen()
    link.send(*stream(2, seed=1))  # the new talker's samples, before it announced itself
    assert processor.stats.unattributed_frames == 4
    # another subject: same sensor type, its own clock from 0, sequence from 0, other labels
    link.send(DescriptorFrame(WATCH), *stream(60, seed=2), closing("rest", 0, 30), closing("lying", 30, 60, 1))
    processor.finish()

    assert labelled(store, "s") == before and store.count(session_id="s") == windows_before
    assert processor.current_session == "s#2" and processor.stats.streams == 2
    assert "restarted its sequence" in processor.stats.last_break
    assert labelled(store, "s#2") > 20  # the second subject's windows are kept too, with their own labels
    assert store.stats().labelled == before + labelled(store, "s#2")


def test_the_same_stream_after_a_reopen_carries_on_in_its_session(store: WindowStore) -> None:
    processor = FrameProcessor(store, "s")
    link = Link(processor)
    frames = stream(60)
    link.send(DescriptorFrame(WATCH), *frames[:60], every_us=500_000)  # 30 s at real time
    link.reopen(down_s=3.0)  # a USB adapter re-enumerates: 3 s of frames lost
    link.send(*frames[60:70])
    assert processor.stats.unattributed_frames == 10
    link.send(DescriptorFrame(WATCH), *frames[70:], closing("push", 0, 60), every_us=500_000)
    processor.finish()

    assert processor.stats.streams == 1 and processor.sessions == ["s"]
    assert labelled(store, "s") == store.count()
    starts = store.query(processor.feature_set_version, labelled_only=False).meta.start_us
    lost = (30e6, 35e6)  # frames 60..69 were not attributed: no window spans them
    assert not np.any((starts < lost[1]) & (starts + 4e6 > lost[0]))


@pytest.mark.parametrize("case", ["time went back", "time jumped ahead"])
def test_after_a_reopen_a_clock_that_does_not_continue_is_another_stream(store: WindowStore, case: str) -> None:
    processor = FrameProcessor(store, "s")
    link = Link(processor)
    before = first_recording(link, store)
    link.reopen(down_s=2.0)
    t0 = 10.0 if case == "time went back" else 3600.0  # the sequence continues from 120 either way
    link.send(DescriptorFrame(WATCH), *stream(30, t0_s=t0, first_seq=120, seed=3), closing("rest", t0, t0 + 30))
    processor.finish()
    assert processor.current_session == "s#2" and case.split()[-1] in processor.stats.last_break
    assert labelled(store, "s") == before and labelled(store, "s#2") > 5


def test_another_descriptor_for_a_known_sensor_starts_a_new_stream(store: WindowStore) -> None:
    processor = FrameProcessor(store, "s")
    link = Link(processor)
    before = first_recording(link, store)
    version = processor.feature_set_version
    rng = np.random.default_rng(4)
    seat = chunk_samples(1, rng.integers(0, 500, size=(3000, 1)).astype(np.int16), 100.0, 50, t0_us=0)
    link.send(DescriptorFrame(OTHER), *seat, closing("rest", 0, 30))  # no reopen at all
    processor.finish()
    assert processor.current_session == "s#2" and "another descriptor" in processor.stats.last_break
    assert processor.feature_set_version != version
    assert labelled(store, "s") == before and labelled(store, "s#2") > 5


def test_a_sender_restart_without_a_reopen_is_a_new_stream(store: WindowStore) -> None:
    processor = FrameProcessor(store, "s")
    link = Link(processor)
    before = first_recording(link, store)
    link.send(*stream(30, seed=5), closing("rest", 0, 30))  # the replay started again on the same link
    processor.finish()
    assert processor.current_session == "s#2" and labelled(store, "s") == before


def test_annotations_after_a_reopen_go_with_the_stream_they_came_with(store: WindowStore) -> None:
    processor = FrameProcessor(store, "s")
    link = Link(processor)
    before = first_recording(link, store)
    link.reopen()
    link.send(closing("rest", 0, 60))  # the foreign stream's label arrives before any of its samples
    assert labelled(store, "s") == before
    link.send(DescriptorFrame(WATCH), *stream(60, seed=6))
    processor.finish()
    assert labelled(store, "s") == before and labelled(store, "s#2") > 20


def test_a_recording_is_one_stream(store: WindowStore) -> None:
    """Batch use (no link): frames of one recording, with lost frames inside, stay one session."""
    processor = FrameProcessor(store, "s")
    frames = stream(60)
    for frame in [DescriptorFrame(WATCH), *frames[:40], *frames[50:], closing("push", 0, 60)]:
        processor.on_frame(frame)
    processor.finish()
    assert processor.sessions == ["s"] and labelled(store, "s") > 15
