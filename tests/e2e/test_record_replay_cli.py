"""`wheelfed replay --pty` into `wheelfed record`: the recorded session gives the same features."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edge_client.processing import extract_recording
from firmware_bridge.importers import ecg
from firmware_bridge.recording import Recording

pytestmark = pytest.mark.slow


def test_replay_then_record_round_trips_a_real_ecg_session(tmp_path: Path) -> None:
    original = ecg.import_all(tmp_path / "rec")[0]  # pyhrv SampleECG, 1000 Hz, 22 s
    replayer = subprocess.Popen(
        [sys.executable, "-m", "edge_client.cli", "replay", str(original), "--pty", "--speed", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = replayer.stdout.readline()
        assert line.startswith("pty: "), line
        recorded = tmp_path / "recorded.wfrec"
        recorder = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "edge_client.cli",
                "record",
                "--serial",
                line.split()[1],
                "-o",
                str(recorded),
                "--session",
                "copy",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        replay_out, _ = replayer.communicate(timeout=60)
        assert replayer.returncode == 0, replay_out
        recorder.send_signal(signal.SIGINT)
        record_out, _ = recorder.communicate(timeout=30)
        assert recorder.returncode == 0, record_out
    finally:
        replayer.kill()
    source, copy = Recording.load(original), Recording.load(recorded)
    sensor = next(iter(source.descriptors))
    assert copy.sample_frames(sensor) == source.sample_frames(sensor)  # every frame, bit for bit
    assert copy.discarded_bytes == 0
    a, _ = extract_recording(original)
    b, _ = extract_recording(recorded)
    assert len(a.X) > 5 and np.array_equal(a.start_us, b.start_us) and np.array_equal(a.X, b.X)
