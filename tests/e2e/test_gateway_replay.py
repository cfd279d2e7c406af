"""A real seglearn subject replayed through a pty into `wheelfed gateway`: the stored windows,
features and labels equal the batch computation (`wheelfed features`) of the same recording."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from edge_client.processing import extract_recording
from edge_client.store import WindowStore
from firmware_bridge.importers import seglearn_watch
from firmware_bridge.recording import Recording
from firmware_bridge.replay import open_pty, replay

pytestmark = pytest.mark.slow


def wait_stable(db: Path, expected: int, timeout_s: float = 60) -> int:
    deadline, last, since = time.monotonic() + timeout_s, -1, time.monotonic()
    while time.monotonic() < deadline:
        n = WindowStore(db).count() if db.exists() else 0
        if n != last:
            last, since = n, time.monotonic()
        elif n >= expected - 2 and time.monotonic() - since > 1.0:
            return n
        time.sleep(0.2)
    return last


def test_replayed_subject_equals_batch_features(tmp_path: Path) -> None:
    recording_path = seglearn_watch.import_all(tmp_path / "rec")[0]
    recording = Recording.load(recording_path)
    batch, _ = extract_recording(recording_path)
    assert len(batch.X) > 200 and sum(y is not None for y in batch.labels) > 150

    master, slave = open_pty()
    db = tmp_path / "gw.db"
    gateway = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_client.cli",
            "gateway",
            "--client-id",
            "gw-1",
            "--serial",
            slave,
            "--store",
            str(db),
            "--no-broker",
            "--session",
            recording.metadata.session_id,
            "--stats-every",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        stats = replay(recording, master, speed=0, wait_for_reader_s=20)
        assert stats.completed and stats.sample_frames == len(recording.sample_frames(seglearn_watch.WATCH_SENSOR_ID))
        wait_stable(db, len(batch.X))
        gateway.send_signal(signal.SIGTERM)
        out, _ = gateway.communicate(timeout=30)
    finally:
        gateway.kill()
        os.close(master)
    assert gateway.returncode == 0, out
    assert "dropped=0" in out and "crc_errors=0" in out, out

    with WindowStore(db) as store:
        live = store.query(batch.feature_set_version, labelled_only=False)
    order = np.argsort(live.meta.start_us)
    assert np.array_equal(live.meta.start_us[order], batch.start_us)
    assert np.array_equal(live.X[order], batch.X)  # bit-identical features
    assert list(live.y[order]) == list(batch.labels)
