"""FedSCS-XGB over mosquitto with real ``wheelfed gateway`` processes, each with its own labelled
window store: the model equals the in-memory simulation's on the same data and seed; a gateway
killed mid-training is dropped from its rounds (quorum), rejoins after a restart with the whole
model, and no reply ever reports a tree count other than the model's (no tree applied twice)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedSCSXGB
from aggregator.broker import BrokerUser, MosquittoBroker, mosquitto_available
from aggregator.fleet import GatewayProcesses, Presence, train_on_fleet
from aggregator.jobs import JobSettings
from edge_client.store import WindowRecord, WindowStore
from edge_client.training_data import ClientData, StoreTrainingData
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

FEATURE_SET = "e2e-fs-1"
GATEWAYS = [f"gw-{i}" for i in range(1, 5)]
PASSWORDS = {"aggregator": "agg-pw", **{g: f"pw-{g}" for g in GATEWAYS}}
LABELS = np.array(["sit", "push", "lie"])


def fill_store(path: Path, seed: int, n: int = 160, d: int = 8) -> None:
    """Windows with features and annotations, as a gateway's pipeline would have stored them."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + 0.2 * seed
    X[rng.random(X.shape) < 0.03] = np.nan
    y = np.digitize(np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) + rng.normal(scale=0.4, size=n), [-0.5, 0.8])
    with WindowStore(path) as store:
        for i in range(n):
            start = i * 1_000_000
            store.add(WindowRecord("s1", start, start + 1_000_000, X[i], FEATURE_SET))
            store.label_range("s1", start, start + 1_000_000, str(LABELS[y[i]]))
        store.add(WindowRecord("s1", n * 1_000_000, (n + 1) * 1_000_000, X[0], FEATURE_SET))  # unlabelled


def client_data(stores: dict[str, Path]) -> list[ClientData]:
    out = []
    for client, path in stores.items():
        with WindowStore(path) as store:
            data = StoreTrainingData(store).labelled(FEATURE_SET)
        out.append(ClientData(client, data.X, data.y))
    return out


@pytest.fixture
def fleet(tmp_path: Path):
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed: the test command installs it")
    stores = {g: tmp_path / f"{g}.db" for g in GATEWAYS}
    for i, (g, path) in enumerate(stores.items()):
        fill_store(path, i)
    broker = MosquittoBroker(tmp_path / "broker", users=[BrokerUser(n, p) for n, p in PASSWORDS.items()])
    with broker:
        processes = GatewayProcesses(broker.port, 5, PASSWORDS, tmp_path)
        agg = MqttTransport(AGGREGATOR_ID, MqttConfig(port=broker.port, username="aggregator",
                                                      password=PASSWORDS["aggregator"]), presence=False)
        agg.connect()
        presence = Presence(agg, TopicLayout())
        try:
            for g in GATEWAYS:
                processes.start(g, "--store", str(stores[g]))
            presence.wait(GATEWAYS, online=True, timeout_s=60)
            yield agg, processes, presence, stores
        finally:
            processes.stop_all()
            agg.close()


def test_mqtt_training_with_gateway_processes_equals_the_simulation(fleet) -> None:
    agg, _processes, _presence, stores = fleet
    config = FedSCSXGB(n_rounds=4, max_depth=3, n_bins=32, feature_set_version=FEATURE_SET)
    model, job = train_on_fleet(config, agg, clients=GATEWAYS, seed=5, settings=JobSettings(deadline_s=60))
    simulated = aggregator.simulate(config, client_data(stores), seed=5)
    assert model == simulated  # bit-identical: trees, leaves, base score, classes, metadata
    assert model.classes == ("lie", "push", "sit") and model.n_trees == 12
    assert not job.rejected and all(len(r.replies) == 4 for r in job.results)


def test_a_gateway_killed_mid_training_is_dropped_and_rejoins(fleet) -> None:
    agg, processes, presence, stores = fleet
    answered: list[int] = []

    def on_round(progress) -> None:
        answered.append(progress.answered)
        if progress.step == 2:
            processes.kill("gw-4")  # SIGKILL: its last will marks it offline
        if progress.step == 4:
            processes.start("gw-4", "--store", str(stores["gw-4"]))
            presence.wait(["gw-4"], online=True, timeout_s=60)

    config = FedSCSXGB(n_rounds=7, max_depth=3, n_bins=32, feature_set_version=FEATURE_SET)
    started = time.monotonic()
    model, job = train_on_fleet(config, agg, clients=GATEWAYS, seed=1,
                                settings=JobSettings(deadline_s=4, min_fraction=0.5), progress=on_round)
    assert model.n_trees == 21
    assert answered[:2] == [4, 4] and 3 in answered[2:4]
    assert answered[-1] == 4  # back, with the whole model (its restart lost its margins)
    assert not job.rejected  # every reply's tree count matched the model's: nothing applied twice
    assert time.monotonic() - started < 120
    X = np.concatenate([c.X for c in client_data(stores)])
    assert set(model.predict(X.astype(np.float32))) <= {"lie", "push", "sit"}
