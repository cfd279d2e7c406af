"""Vertical Federated Forest over mosquitto: one ``wheelfed gateway`` process per
party of one person -- wrist accelerometer, wheel gyroscope, chest ECG -- each with its own
window store and its own feature set; only the accelerometer gateway's windows are labelled;
the gateways' clocks are offset and one missed some windows. Training and one-round prediction
over the broker equal the simulation of the same parties."""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.algorithms.vertical_forest import VerticalFederatedForest, predict_on_parties
from aggregator.jobs import FederatedJob, JobSettings
from aggregator.rounds import RoundEngine
from aggregator.simulate import Simulation
from edge_client.algorithms.vertical_forest import PARTY_KEY_ENV
from edge_client.store import WindowRecord, WindowStore
from edge_client.training_data import PartyData, StoreTrainingData
from shared.vertical_party_key import new_party_key
from tests.e2e.fleet_support import gateways_on_mosquitto

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

PARTIES = {"gw-acc": ("e2e-acc", 3, 0), "gw-ecg": ("e2e-ecg", 2, 180_000), "gw-gyro": ("e2e-gyro", 2, -90_000)}
PASSWORDS = {"aggregator": "agg-pw", **{g: f"pw-{g}" for g in PARTIES}}
HOP, TOL = 2_000_000, 250_000
LABELS = np.array(["sit", "push", "lie"])


def _fill(stores, n=150):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 7))
    y = np.digitize(X[:, 0] + X[:, 3] - X[:, 6] + 0.3 * rng.normal(size=n), [-0.6, 0.6])
    column = 0
    for g, (version, width, offset) in PARTIES.items():
        skip = {5, 6, 90} if g == "gw-ecg" else set()
        with WindowStore(stores[g]) as store:
            for i in range(n):
                if i in skip:
                    continue
                start = i * HOP + offset
                store.add(WindowRecord("walk-1", start, start + HOP, X[i, column : column + width], version))
                if g == "gw-acc":
                    store.label_range("walk-1", start, start + HOP, str(LABELS[y[i]]))
        column += width


def _simulated_parties(stores, key):
    out = []
    for g in sorted(PARTIES):
        with WindowStore(stores[g]) as store:
            w = StoreTrainingData(store).party_windows("")
        out.append(PartyData(g, w.X, w.y, party_key=key, sessions=w.sessions, start_us=w.start_us))
    return out


def test_vertical_forest_over_mosquitto_equals_the_simulation(tmp_path, monkeypatch):
    key = new_party_key()
    key_file = tmp_path / "party.key"
    key_file.write_text(key.hex())
    monkeypatch.setenv(PARTY_KEY_ENV, str(key_file))  # inherited by the gateway processes only
    stores = {g: tmp_path / f"{g}.db" for g in PARTIES}
    _fill(stores)
    config = VerticalFederatedForest(n_trees=6, max_depth=5, min_samples_leaf=2, hop_us=HOP, tolerance_us=TOL)
    with gateways_on_mosquitto(tmp_path, PASSWORDS) as fleet:
        for g in PARTIES:
            fleet.processes.start(g, "--store", str(stores[g]))
        fleet.presence.wait(list(PARTIES), online=True, timeout_s=60)
        engine = RoundEngine(fleet.agg)
        settings = JobSettings(deadline_s=60)
        model = config.fit(FederatedJob(engine, list(PARTIES), settings=settings), seed=3)
        live = predict_on_parties(
            FederatedJob(engine, list(PARTIES), settings=settings), model, hop_us=HOP, tolerance_us=TOL
        )
    sim = Simulation(_simulated_parties(stores, key))
    simulated = config.run_in(sim, seed=3, job_id=model.metadata.job)  # the job keys the feature codes
    assert model.alignment == simulated.alignment and model.alignment.common == 147
    assert model.alignment.missing == (3, 0, 3)
    for a, b in zip(model.trees, simulated.trees):
        for field in ("split_nodes", "owner", "feature", "gain", "leaves", "values", "cover"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert model.classes == simulated.classes == ("lie", "push", "sit")
    expected = predict_on_parties(
        FederatedJob(sim.engine, list(PARTIES), job_id="sim-predict"), simulated, hop_us=HOP, tolerance_us=TOL
    )
    np.testing.assert_array_equal(live.values, expected.values)
    np.testing.assert_array_equal(live.predictions, expected.predictions)
    assert live.predictions.shape == (147,) and set(live.predictions) <= set(LABELS)
