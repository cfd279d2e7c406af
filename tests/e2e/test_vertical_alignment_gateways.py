"""Vertical alignment on gateways as they really run: three ``wheelfed gateway``
processes of one person, each with its own client id and its DEFAULT session (client id + start
time), are fed one seglearn subject's IMU channels through ptys and the real frame pipeline --
the wrist gateway gets ax, ay and the labels; the chair gateway az, wx, and its sensor restarts
its sequence half-way (stored as ``session#1``); the chest gateway wy, wz with its sensors'
clock 120 ms ahead. No two gateways share a session name, yet training over mosquitto aligns
the windows by their start on the common grid and grows exactly the forest of a plain
simulation on the rows joined by start time (an independent join, not the digests)."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from aggregator.algorithms.vertical_forest import VerticalFederatedForest, parties_for_simulation
from aggregator.jobs import FederatedJob, JobSettings
from aggregator.rounds import RoundEngine
from aggregator.simulate import Simulation
from edge_client.algorithms.vertical_forest import PARTY_KEY_ENV
from edge_client.store import WindowStore
from firmware_bridge.descriptors import ChannelSpec, SensorDescriptor
from firmware_bridge.frames import Annotation, chunk_samples
from firmware_bridge.importers import seglearn_watch
from firmware_bridge.importers.writing import write_recording
from firmware_bridge.recording import Recording, RecordingMetadata
from firmware_bridge.replay import open_pty, replay
from shared.vertical_party_key import new_party_key
from tests.e2e.fleet_support import gateways_on_mosquitto

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

T0_US = 1_790_000_000_000_000  # a 2026 instant on the sensors' common clock, on the 2 s grid
RATE_HZ = 50.0
SERIES = 6  # the first six exercise series of subject 1: ~4 minutes, ~115 windows
# gateway -> (channels, clock offset of its sensors, sequence restart half-way, holds the labels)
GATEWAYS = {
    "gw-wrist": (("ax", "ay"), 0, False, True),
    "gw-chair": (("az", "wx"), 0, True, False),
    "gw-chest": (("wy", "wz"), 120_000, False, False),
}
PASSWORDS = {"aggregator": "agg-pw", **{g: f"pw-{g}" for g in GATEWAYS}}
HOP_US, TOLERANCE_US = 2_000_000, 250_000


def _recordings(folder: Path) -> tuple[dict[str, Path], int]:
    """One recording per gateway, cut from one subject's series played back to back, and when
    the chair's sensor restarted."""
    data = seglearn_watch.load_dataset()
    names = [str(c) for c in data["X_labels"]]
    subject = np.asarray(data["subject"])
    series = np.flatnonzero(subject == subject.min())[:SERIES]
    X = np.concatenate([np.asarray(data["X"][i], dtype=np.float64) for i in series])
    bounds = np.cumsum([0] + [len(data["X"][i]) for i in series])
    period_us = round(1e6 / RATE_HZ)
    labels = [
        Annotation(
            str(data["y_labels"][int(data["y"][i])]),
            T0_US + int(a) * period_us,
            T0_US + int(b) * period_us,
            annotation_id=k,
        )
        for k, (i, a, b) in enumerate(zip(series, bounds[:-1], bounds[1:]))
    ]
    paths = {}
    for gateway, (channels, offset_us, restart, labelled) in GATEWAYS.items():
        descriptor = SensorDescriptor(
            1, gateway.removeprefix("gw-"), "imu", RATE_HZ, tuple(ChannelSpec(c, "") for c in channels), "float32"
        )
        samples = X[:, [names.index(c) for c in channels]].astype(np.float32)
        frames = chunk_samples(1, samples, RATE_HZ, 25, t0_us=T0_US + offset_us)
        if restart:  # the sensor rebooted: its frame numbers start again at 0, its clock runs on
            half = len(frames) // 2
            restart_us = frames[half].timestamp_us
            frames[half:] = [dataclasses.replace(f, seq=k) for k, f in enumerate(frames[half:])]
        metadata = RecordingMetadata(session_id=f"{gateway}-recorded", descriptors=(descriptor,), created_us=0)
        paths[gateway] = write_recording(folder / f"{gateway}.wfrec", metadata, frames, labels if labelled else ())
    return paths, restart_us


def _wait_until_stored(stores: dict[str, Path], timeout_s: float = 60.0) -> None:
    """Until every store's window count has stood still for a second."""
    deadline, last, since = time.monotonic() + timeout_s, {}, time.monotonic()
    while time.monotonic() < deadline:
        counts = {g: WindowStore(p).count() if p.exists() else 0 for g, p in stores.items()}
        if counts != last:
            last, since = counts, time.monotonic()
        elif min(counts.values()) > 50 and time.monotonic() - since > 1.0:
            return
        time.sleep(0.2)
    raise AssertionError(f"the gateways did not finish storing their windows: {last}")


def _stored(path: Path):
    with WindowStore(path) as store:
        (version,) = store.stats().by_feature_set
        X, y, meta = store.query(version, labelled_only=False)
    return X, y, meta


def test_gateways_with_default_sessions_a_restart_and_a_clock_offset_align_and_train_exactly(tmp_path, monkeypatch):
    key, key_file = new_party_key(), tmp_path / "person.key"
    key_file.write_text(key.hex())
    monkeypatch.setenv(PARTY_KEY_ENV, str(key_file))  # inherited by the gateway processes
    recordings, restart_us = _recordings(tmp_path / "rec")
    stores = {g: tmp_path / f"{g}.db" for g in GATEWAYS}
    ptys = {g: open_pty() for g in GATEWAYS}
    config = VerticalFederatedForest(
        n_trees=6, max_depth=5, min_samples_leaf=2, hop_us=HOP_US, tolerance_us=TOLERANCE_US
    )
    with gateways_on_mosquitto(tmp_path, PASSWORDS) as fleet:
        try:
            for g in GATEWAYS:  # no --session: each gateway names its own
                fleet.processes.start(g, "--store", str(stores[g]), "--serial", ptys[g][1])
            stats = {}
            threads = [
                threading.Thread(
                    target=lambda g=g: stats.__setitem__(
                        g, replay(Recording.load(recordings[g]), ptys[g][0], speed=0, wait_for_reader_s=30)
                    )
                )
                for g in GATEWAYS
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(90)
            assert all(stats[g].completed for g in GATEWAYS), stats
            _wait_until_stored(stores)
            fleet.presence.wait(list(GATEWAYS), online=True, timeout_s=60)
            model = config.fit(
                FederatedJob(RoundEngine(fleet.agg), list(GATEWAYS), settings=JobSettings(deadline_s=60)), seed=3
            )
        finally:
            for master, _ in ptys.values():
                os.close(master)

    stored = {g: _stored(stores[g]) for g in GATEWAYS}
    sessions = {g: set(meta.session_ids.tolist()) for g, (_, _, meta) in stored.items()}
    (wrist,), (chest,) = sessions["gw-wrist"], sessions["gw-chest"]
    chair = sorted(sessions["gw-chair"])
    assert wrist.startswith("gw-wrist-") and chest.startswith("gw-chest-")
    assert len(chair) == 2 and chair[1].startswith(chair[0] + "#"), chair  # the restart: session#n
    # the oracle's own join: rows by start time; the label holder offers its labelled windows only
    parties = model.alignment.parties  # the master's party order: the feature blocks' order
    offered = {
        g: np.flatnonzero([v is not None for v in stored[g][1]]) if GATEWAYS[g][3] else np.arange(len(stored[g][1]))
        for g in parties
    }
    # every gateway cut its windows on the absolute grid of its own clock, the one 120 ms ahead too
    assert all((meta.start_us % HOP_US == 0).all() for _, _, meta in stored.values())
    starts = {g: stored[g][2].start_us[rows] for g, rows in offered.items()}
    common = sorted(set.intersection(*(set(s.tolist()) for s in starts.values())))
    assert len(common) > 80
    assert model.alignment.common == len(common)
    assert model.alignment.missing == tuple(len(starts[g]) - len(common) for g in parties)
    across = [s for s in starts["gw-wrist"].tolist() if s < restart_us < s + 2 * HOP_US]
    assert across and not set(across) & set(common)  # the chair's windows across its restart are lost
    blocks = []
    for g, rows in offered.items():
        row_of = dict(zip(starts[g].tolist(), rows.tolist()))
        pick = [row_of[s] for s in common]
        X, y, _ = stored[g]
        blocks.append((X[pick], y[pick].astype(str) if GATEWAYS[g][3] else None))
    # same key and job id: the parties show the master the same feature codes
    clean = dataclasses.replace(config, hop_us=0, tolerance_us=0).run_in(
        Simulation(parties_for_simulation(blocks, party_key=key)), seed=3, job_id=model.metadata.job
    )
    assert model.classes == clean.classes and len(model.classes) >= 3
    for a, b in zip(model.trees, clean.trees, strict=True):
        for field in ("split_nodes", "owner", "feature", "gain", "leaves", "values", "cover"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
