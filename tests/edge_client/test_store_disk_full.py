"""The window store on a real full disk (a small tmpfs, real ENOSPC), at every phase, and killed.

What must hold: a full disk is one clear ``StoreFull`` (never a raw ``sqlite3`` error), every
window and label the store acknowledged is still there -- bit for bit -- once there is room, the
file stays a sound SQLite database, and the same store carries on. On the gateway, windows and
labels that arrive while the disk is full wait in memory (bounded) and are stored once there is
room: the same frames give the same store as on a disk that never filled.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from edge_client.processing import FrameProcessor
from edge_client.store import RetentionPolicy, StoreError, StoreFull, WindowStore
from firmware_bridge.frames import DescriptorFrame
from tests.edge_client import store_crash_writer as crash
from tests.edge_client.test_stream_identity import WATCH, Link, closing, stream
from tests.small_disk import SmallDisk

ROOT = Path(__file__).resolve().parents[2]
KIB = 1024


LABEL_EVERY = 3


def _label_of(i: int) -> str:
    return f"L{i // LABEL_EVERY % 3}"


def _assert_sound(db: Path) -> None:
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def _expected_label(i: int, labels: list[tuple[int, int, str]]) -> str | None:
    """The store's rule: inside one acknowledged annotation and overlapping none that disagrees."""
    w = crash.window(i)
    overlapping = {label for start, end, label in labels if start < w.end_us and w.start_us < end}
    inside = any(start <= w.start_us and w.end_us <= end for start, end, _ in labels)
    return overlapping.pop() if inside and len(overlapping) == 1 else None


def _assert_kept(store: WindowStore, windows: list[int], labels: list[tuple[int, int, str]]) -> None:
    """Every acknowledged window is stored bit for bit, labelled as the acknowledged labels say."""
    result = store.query(crash.FEATURE_SET, labelled_only=False)
    stored = {int(s): row for row, s in enumerate(result.meta.start_us)}
    for i in windows:
        row = stored[crash.window(i).start_us]
        assert np.array_equal(result.X[row], crash.window(i).features)
        assert result.y[row] == _expected_label(i, labels)


def test_a_full_disk_at_every_phase_is_one_clear_error_and_loses_nothing_acknowledged(tmp_path: Path) -> None:
    phases: set[str] = set()
    # Each insert grows the WAL by ~6 pages, a label by a few: 4 KiB steps move the failure through
    # opening (file, WAL index, schema), inserts (and the retention deletes they trigger) and labels.
    for leave in range(0, 400 * KIB, 4 * KIB):
        with SmallDisk(tmp_path / f"disk-{leave}", 512 * KIB) as disk:
            db = disk.path / "w.db"
            disk.fill(leave)
            acked: list[int] = []
            labels: list[tuple[int, int, str]] = []
            retention = RetentionPolicy(max_windows=120, check_every=20)
            try:
                store = WindowStore(db, retention=retention)
            except StoreFull as exc:
                phases.add("open")
                assert "disk" in str(exc) and str(db) in str(exc)
            else:
                with store:
                    for i in range(10_000):
                        phase = "insert"
                        try:
                            store.add(crash.window(i))
                            acked.append(i)
                            if i % LABEL_EVERY == LABEL_EVERY - 1:
                                phase = "label"
                                span = (crash.window(i - LABEL_EVERY + 1).start_us, crash.window(i).end_us)
                                store.label_range(crash.session_of(i), *span, _label_of(i))
                                labels.append((*span, _label_of(i)))
                        except StoreFull as exc:
                            phases.add(phase)
                            assert "disk is full" in str(exc)
                            break
                    else:
                        pytest.fail("the disk never filled")
                    with pytest.raises(StoreFull):  # still full: clear again, the store not wedged
                        store.add(crash.window(10**6))
                    assert min(len(acked), retention.max_windows) <= store.count() <= len(acked)  # reads work
            disk.empty()
            with WindowStore(db, retention=retention) as store:  # room again: the same file carries on
                kept = acked[-retention.max_windows :]  # opening applies retention: the newest acknowledged
                starts = store.query(crash.FEATURE_SET, labelled_only=False).meta.start_us
                assert sorted(starts.tolist()) == [crash.window(i).start_us for i in kept]
                _assert_kept(store, kept, labels)
                store.add(crash.window(20_000))
            _assert_sound(db)
    assert phases == {"open", "insert", "label"}, phases


def _labels_allowed(i: int, acked: list[tuple[int, int, str]], unsure: list[tuple[int, int, str]]) -> set[str | None]:
    """The labels window ``i`` may carry: as the acknowledged annotations say, with or without
    each annotation whose ``label_range`` a kill may have cut short (stored, but not reported)."""
    w = crash.window(i)
    near = [a for a in unsure if a[0] < w.end_us and w.start_us < a[1]]
    return {
        _expected_label(i, acked + [a for k, a in enumerate(near) if mask >> k & 1]) for mask in range(1 << len(near))
    }


def test_sigkill_while_the_disk_fills_loses_no_reported_window_or_label(tmp_path: Path) -> None:
    rng = random.Random(20261126)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with SmallDisk(tmp_path / "disk", 2048 * KIB) as disk:
        db, progress, labels = disk.path / "w.db", tmp_path / "progress", tmp_path / "labels"
        first, full = 0, 0
        windows: list[int] = []
        acked: list[tuple[int, int, str]] = []  # annotations whose label_range returned
        unsure: list[tuple[int, int, str]] = []  # annotations in flight when the writer died
        for run in range(5):
            progress.write_text("")
            labels.write_text("")
            child = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.edge_client.store_crash_writer",
                    str(db),
                    str(progress),
                    str(first),
                    str(labels),
                ],
                cwd=ROOT,
                env=env,
                stderr=subprocess.PIPE,
            )
            deadline = time.monotonic() + 30
            while not progress.read_text() and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.005)  # writing (a loaded machine takes a while to start Python)
            if run < 4:  # killed at a random moment; the last run writes until the disk is full
                time.sleep(rng.uniform(0.0, 0.3))
                if child.poll() is None:
                    os.kill(child.pid, signal.SIGKILL)
            code = child.wait(60)
            err = child.stderr.read().decode()
            child.stderr.close()
            if code != -signal.SIGKILL:  # it ran into the full disk first: the clear error, nothing else
                assert "StoreFull" in err and "disk is full" in err, err
                full += 1
            reported = [int(x) for x in progress.read_text().split()]
            labelled = [int(x) for x in labels.read_text().split()]
            windows += reported
            acked += [crash.annotation(i) for i in labelled]
            if reported and reported[-1] % 25 == 24 and reported[-1] not in labelled:
                unsure.append(crash.annotation(reported[-1]))  # died in or right after label_range
            disk.resize(disk.size + 64 * KIB)  # room for the check's own WAL, then fill up again
            with WindowStore(db) as store:  # no retention: every reported window must be there
                result = store.query(crash.FEATURE_SET, labelled_only=False)
            stored = {int(s): (row, label) for row, (s, label) in enumerate(zip(result.meta.start_us, result.y))}
            for i in windows:  # every reported window, bit for bit, labelled as the reported labels say
                row, label = stored[crash.window(i).start_us]
                assert np.array_equal(result.X[row], crash.window(i).features)
                assert label in _labels_allowed(i, acked, unsure), (i, label, run)
            first = (reported[-1] + 1) if reported else first
        _assert_sound(db)
    assert full >= 1  # the last writer, at least, ran into the full disk
    assert len(acked) >= 8 and sum(label is not None for _, label in stored.values()) >= 150, (len(acked), full)


def _frames():
    """120 s of a wrist sensor, labelled in four 30 s parts."""
    frames = [DescriptorFrame(WATCH), *stream(120)]
    labels = [closing(label, 30 * k, 30 * (k + 1), k) for k, label in enumerate(["push", "rest", "push", "turn"])]
    return frames, labels


def _table(store: WindowStore):
    result = store.query(store.latest_feature_set_version(), labelled_only=False)
    return result.meta.start_us.tolist(), result.X, result.y.tolist()


def test_the_gateway_keeps_windows_and_labels_in_memory_while_the_disk_is_full(tmp_path: Path) -> None:
    frames, labels = _frames()
    with WindowStore(tmp_path / "reference.db") as reference:
        link = Link(FrameProcessor(reference, "s"))
        link.send(*frames[:120], labels[0], labels[1], *frames[120:], labels[2], labels[3])
        link.processor.finish()
        expected = _table(reference)

    with SmallDisk(tmp_path / "disk", 8 * 1024 * KIB) as disk, WindowStore(disk.path / "w.db") as store:
        processor = FrameProcessor(store, "s")
        link = Link(processor)
        link.send(*frames[:40])
        disk.fill(0)
        link.send(*frames[40:120], labels[0], labels[1])  # 40 s of windows and two labels: nowhere to go
        assert processor.stats.pending > 0 and processor.stats.unstored_windows == 0
        disk.empty()
        link.send(*frames[120:], labels[2], labels[3])
        processor.finish()
        assert processor.stats.pending == 0 and processor.stats.disk_full_episodes == 1
        got = _table(store)
    assert got[0] == expected[0] and got[2] == expected[2]
    assert np.array_equal(got[1], expected[1])


def test_a_full_disk_that_stays_full_drops_the_oldest_waiting_windows_and_counts_them(tmp_path: Path) -> None:
    frames, _ = _frames()
    with SmallDisk(tmp_path / "disk", 8 * 1024 * KIB) as disk, WindowStore(disk.path / "w.db") as store:
        processor = FrameProcessor(store, "s", max_pending=10)
        link = Link(processor)
        link.send(*frames[:20])
        stored_before = processor.stats.windows
        disk.fill(0)
        link.send(*frames[20:])
        processor.finish()
        assert processor.stats.pending == 10
        assert processor.stats.unstored_windows > 0
        assert processor.stats.windows == stored_before  # counts stored windows only
        disk.empty()
        processor.flush_pending()
        assert processor.stats.pending == 0
        assert store.count() == stored_before + 10


def test_store_errors_are_store_errors() -> None:
    assert issubclass(StoreFull, StoreError)
