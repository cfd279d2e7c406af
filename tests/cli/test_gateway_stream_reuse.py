"""The user's report, replayed: one subject's recording through a pty into ``wheelfed gateway``,
the replay ends, the pty path is handed to another process replaying *another* subject. Before,
the gateway read the second subject as its sensors and its labelled windows went from 263 to 188;
now the second subject is a stream of its own (``SESSION#2``), the first subject's windows and
labels never change, and both equal the batch computation of their recordings."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from edge_client.processing import extract_recording
from edge_client.store import WindowStore
from firmware_bridge.importers import seglearn_watch, synthetic_chair
from firmware_bridge.recording import Recording
from firmware_bridge.replay import open_pty, replay
from tests.cli.test_gateway_startup import gateway_on_a_new_pty

pytestmark = pytest.mark.slow


def next_pty(previous: str, tries: int = 50) -> tuple[int, str]:
    """The next pty, with ``previous``'s number when it is free again -- what the next process to
    open a pty gets -- else the first one opened (another process took the number meanwhile)."""
    opened: list[tuple[int, str]] = []
    try:
        for _ in range(tries):
            opened.append(open_pty())
            if opened[-1][1] == previous:
                return opened.pop()
        return opened.pop(0)
    finally:
        for fd, _ in opened:
            os.close(fd)


def labelled(db: Path, session: str) -> int:
    with WindowStore(db) as store:
        return store.count(labelled_only=True, session_id=session)


@dataclass
class TwoReplays:
    """What a gateway did with two recordings replayed one after the other on its serial path."""

    db: Path
    stats: dict[str, str]
    log: list[str]
    labelled_first: list[int]  # the first session's labelled windows, sampled during the second replay


def replay_one_after_the_other(
    tmp_path: Path,
    first: Recording,
    second: Recording,
    *,
    first_labelled: int,
    second_session_done: Callable[[Path], bool],
) -> TwoReplays:
    link = tmp_path / "ttyChair"  # the gateway's serial path; it leads to whichever pty is there
    db = tmp_path / "gw.db"
    gateway, master, pty_path = gateway_on_a_new_pty(
        tmp_path,
        "--client-id",
        "gw-1",
        "--no-broker",
        "--store",
        str(db),
        "--session",
        "chair",
        "--stats-every",
        "0.2",
        link=link,
    )
    second_master = None
    seen: list[int] = []
    try:
        assert replay(first, master, speed=0, wait_for_reader_s=20).completed
        assert gateway.wait_for(lambda: int(gateway.stats().get("labelled", 0)) >= first_labelled - 3), gateway.out[-1:]
        os.unlink(link)
        os.close(master)  # the replay ends: the pty is freed ...
        assert gateway.wait_for(lambda: gateway.stats().get("link") == "gone"), gateway.out[-1:]

        second_master, second_pty = next_pty(pty_path)  # ... and the next process to open one gets it
        os.symlink(second_pty, link)
        done = threading.Event()

        def watch_first_session() -> None:
            while not done.is_set():
                seen.append(labelled(db, "chair"))
                time.sleep(0.1)

        watcher = threading.Thread(target=watch_first_session, daemon=True)
        watcher.start()
        assert replay(second, second_master, speed=0, wait_for_reader_s=20).completed
        assert gateway.wait_for(lambda: second_session_done(db), timeout=30), gateway.out[-1:]
        done.set()
        watcher.join(5)
        stats = gateway.stats()
    finally:
        code = gateway.stop()
        if second_master is not None:
            os.close(second_master)
    assert code == 0, gateway.err
    assert "Traceback" not in "\n".join(gateway.err)
    return TwoReplays(db, stats, gateway.err, seen)


def assert_equals_batch(db: Path, session: str, batch) -> None:
    with WindowStore(db) as store:
        live = store.query(batch.feature_set_version, labelled_only=False)
    rows = live.meta.session_ids == session
    order = np.argsort(live.meta.start_us[rows])
    assert np.array_equal(live.meta.start_us[rows][order], batch.start_us), session
    assert np.array_equal(live.X[rows][order], batch.X), session
    assert list(live.y[rows][order]) == list(batch.labels), session


def test_another_recording_on_the_reused_pty_never_costs_the_first_its_labelled_windows(tmp_path: Path) -> None:
    first_path, second_path = seglearn_watch.import_all(tmp_path / "rec")[:2]
    batch_first, _ = extract_recording(first_path)
    batch_second, _ = extract_recording(second_path)
    expected_first = sum(y is not None for y in batch_first.labels)
    expected_second = sum(y is not None for y in batch_second.labels)
    assert expected_first == 263  # the subject of the report

    run = replay_one_after_the_other(
        tmp_path,
        Recording.load(first_path),
        Recording.load(second_path),
        first_labelled=expected_first,
        second_session_done=lambda db: labelled(db, "chair#2") >= expected_second - 3,
    )

    seen = run.labelled_first
    assert seen and all(b >= a for a, b in zip(seen, seen[1:])), f"labelled windows dropped: {seen}"
    assert (run.stats["streams"], run.stats["device_changes"], run.stats["session"]) == ("2", "1", "chair#2")
    assert any("another sensor stream" in line and "restarted its sequence" in line for line in run.log), run.log
    assert_equals_batch(run.db, "chair", batch_first)  # the first subject, exactly as recorded
    assert_equals_batch(run.db, "chair#2", batch_second)  # and the second one, apart from it


def test_another_sensor_layout_on_the_reused_pty_is_a_stream_of_its_own(tmp_path: Path) -> None:
    watch_path = seglearn_watch.import_all(tmp_path / "rec")[0]
    chair_path = synthetic_chair.write_chair(tmp_path / "chair.wfrec", 90.0, seed=3)
    batch_watch, _ = extract_recording(watch_path)
    batch_chair, _ = extract_recording(chair_path)
    assert batch_chair.feature_set_version != batch_watch.feature_set_version

    def chair_done(db: Path) -> bool:
        with WindowStore(db) as store:
            return store.count(batch_chair.feature_set_version, session_id="chair#2") >= len(batch_chair.X) - 3

    run = replay_one_after_the_other(
        tmp_path,
        Recording.load(watch_path),
        Recording.load(chair_path),
        first_labelled=sum(y is not None for y in batch_watch.labels),
        second_session_done=chair_done,
    )
    assert all(b >= a for a, b in zip(run.labelled_first, run.labelled_first[1:])), run.labelled_first
    assert run.stats["streams"] == "2" and run.stats["session"] == "chair#2"
    # sensor 1 was a float32 watch and is now an int16 wrist IMU: never the same sensor's windows
    assert any("another sensor stream" in line and "another descriptor" in line for line in run.log), run.log
    assert_equals_batch(run.db, "chair", batch_watch)
    assert_equals_batch(run.db, "chair#2", batch_chair)
    with WindowStore(run.db) as store:
        assert store.count(batch_chair.feature_set_version, session_id="chair") == 0
        assert store.count(batch_watch.feature_set_version, session_id="chair#2") == 0
