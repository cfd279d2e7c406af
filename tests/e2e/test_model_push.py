"""Model push and live recognition end to end: a model trained in simulation on a real recording
is signed, pushed over mosquitto to a ``wheelfed gateway`` process, verified, activated and used
on the replayed recording; its live predictions equal offline predictions of the same windows.
Tampered and foreign bundles are refused while the previous model keeps running; a replayed,
validly signed older version is refused as a downgrade, also after the gateway restarted;
unsigned, forged and misaddressed rollbacks are refused; a signed rollback restores the previous
version and a replayed old one does nothing; a restart with no broker loads the stored model and
keeps predicting and alerting."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedSCSXGB
from aggregator.broker import BrokerUser, MosquittoBroker, mosquitto_available
from aggregator.deployment import deploy, rollback
from aggregator.fleet import PASSWORD_ENV, Presence
from aggregator.registry import Registry
from aggregator.rounds import RoundEngine
from edge_client.processing import extract_recording
from edge_client.store import WindowRecord, WindowStore
from edge_client.training_data import ClientData
from firmware_bridge.importers import seglearn_watch
from firmware_bridge.recording import Recording
from firmware_bridge.replay import open_pty, replay
from shared.model import model_inputs
from shared.model.bundle import ModelBundle, sign_rollback
from shared.protocol.messages.deployment import ModelPush, ModelRollback, ModelStatus, PredictionBatch
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.signing import SigningKey
from shared.transport.mqtt import MqttConfig, MqttTransport

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]


def start_gateway(tmp: Path, port: int | None, password: str, *extra: str) -> subprocess.Popen:
    broker = ["--port", str(port)] if port else ["--no-broker"]
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_client.cli",
            "gateway",
            "--client-id",
            "gw-1",
            "--store",
            str(tmp / "gw-1.db"),
            "--model-dir",
            str(tmp / "models"),
            "--trust",
            str(tmp / "aggregator.pub"),
            "--stats-every",
            "0",
            "--publish-every",
            "0.5",
            "--engine",
            "numpy",
            *broker,
            *extra,
        ],
        env=dict(os.environ, **{PASSWORD_ENV: password}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    return out


def replay_into_gateway(
    tmp: Path, recording: Recording, port: int | None, password: str, n_windows: int, *extra: str
) -> str:
    master, slave = open_pty()
    gateway = start_gateway(tmp, port, password, "--serial", slave, "--session", recording.metadata.session_id, *extra)
    try:
        stats = replay(recording, master, speed=0, wait_for_reader_s=30)
        assert stats.completed
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with WindowStore(tmp / "gw-1.db") as store:
                if len(store.predictions(recording.metadata.session_id)) >= n_windows - 2:
                    break
            time.sleep(0.3)
        time.sleep(1.0)
        return stop(gateway)
    finally:
        gateway.kill()
        os.close(master)


def recording_and_clients(tmp: Path) -> tuple[Path, object, list[ClientData]]:
    """A bundled real recording's file, its extracted windows, and its labelled windows split
    between two simulated clients (what the pushed models are trained on)."""
    recording_path = seglearn_watch.import_all(tmp / "rec")[0]
    batch, _ = extract_recording(recording_path)
    labelled = np.array([y is not None for y in batch.labels])
    X, y = batch.X[labelled], np.array([str(v) for v in batch.labels[labelled]])
    half = len(y) // 2
    return recording_path, batch, [ClientData("a", X[:half], y[:half]), ClientData("b", X[half:], y[half:])]


def wait_for_live_predictions(received: list, lock: threading.Lock, n_windows: int, version: int) -> None:
    """The gateway's prediction batches reach the aggregator: all but the last two windows
    (cut off by the stop), all of them made by model ``version``."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sum(len(b.predicted) for b in received) < n_windows - 2:
        time.sleep(0.2)
    with lock:
        assert sum(len(b.predicted) for b in received) >= n_windows - 2
        assert {b.model_version for b in received} == {version}


def assert_live_equals_offline(store_path: Path, session_id: str, fsv: str, model, n_windows: int) -> list:
    """The predictions the gateway stored live equal ``model``'s offline predictions of the same
    windows (probabilities to 1e-6, labels exactly); returns them."""
    with WindowStore(store_path) as store:
        live = store.predictions(session_id)
        windows = store.query(fsv, labelled_only=False)
    rows = {int(e): i for i, e in enumerate(windows.meta.end_us)}
    offline = model.predict_proba(model_inputs(model, windows.X[[rows[p.end_us] for p in live]].astype(np.float32)))
    np.testing.assert_allclose(np.array([p.probabilities for p in live]), offline, rtol=0, atol=1e-6)
    assert [p.label for p in live] == [str(c) for c in np.asarray(model.classes)[offline.argmax(axis=1)]]
    assert len(live) >= n_windows - 2
    return live


def test_train_sign_push_verify_swap_predict_rollback_and_offline_restart(tmp_path: Path) -> None:
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed: the test command installs it")
    recording_path, batch, clients = recording_and_clients(tmp_path)
    recording = Recording.load(recording_path)
    fsv = batch.feature_set_version
    v1 = aggregator.simulate(
        FedSCSXGB(n_rounds=3, n_bins=32, feature_set_version=fsv, secure_aggregation=False), clients
    )
    v2 = aggregator.simulate(
        FedSCSXGB(n_rounds=4, n_bins=32, feature_set_version=fsv, secure_aggregation=False), clients
    )
    foreign = aggregator.simulate(
        FedSCSXGB(n_rounds=1, n_bins=32, feature_set_version="another-sensor-layout", secure_aggregation=False), clients
    )
    key = SigningKey.generate()
    key.save(tmp_path / "aggregator.key")
    key.verify_key.save(tmp_path / "aggregator.pub")
    registry = Registry(tmp_path / "registry.db")
    registry.add("activity", v1)
    registry.add("activity", v2)
    registry.add("foreign", foreign)
    with WindowStore(tmp_path / "gw-1.db") as store:  # a gateway that has run before knows its feature set
        store.add(WindowRecord("earlier", 0, 1, batch.X[0], fsv))

    passwords = {"aggregator": secrets.token_hex(6), "gw-1": secrets.token_hex(6)}
    with MosquittoBroker(tmp_path / "broker", users=[BrokerUser(n, p) for n, p in passwords.items()]) as broker:
        agg = MqttTransport(
            AGGREGATOR_ID,
            MqttConfig(port=broker.port, username="aggregator", password=passwords["aggregator"]),
            presence=False,
        )
        agg.connect()
        engine = RoundEngine(agg)
        presence = Presence(agg, TopicLayout())
        received: list[PredictionBatch] = []
        lock = threading.Lock()

        def on_outbox(_topic, message) -> None:
            if isinstance(message.body, PredictionBatch):
                with lock:
                    received.append(message.body)

        agg.subscribe(TopicLayout().all_outboxes, on_outbox)
        gateway = start_gateway(tmp_path, broker.port, passwords["gw-1"])
        try:
            presence.wait(["gw-1"], online=True, timeout_s=60)
            result = deploy(engine, registry, key, "activity", 1, ["gw-1"])
            assert result.active == ["gw-1"] and result.statuses["gw-1"].active_version == 1

            # tampered bytes, a foreign key, another feature set: refused, v1 keeps running
            good = ModelBundle.create(v2, model_id="activity", version=2, signing_key=key).to_bytes()
            tampered = bytearray(good)
            tampered[len(tampered) // 2] ^= 0x01
            stranger = ModelBundle.create(v2, model_id="activity", version=2, signing_key=SigningKey.generate())
            for data, reason in (
                (bytes(tampered), "Bad"),
                (stranger.to_bytes(), "trusts only"),
                (good[: len(good) // 2], ""),
            ):
                answer = engine.run_round(
                    f"evil-{secrets.token_hex(3)}", 1, ModelPush(data), ["gw-1"], deadline_s=20, expect=ModelStatus
                )
                status = answer.replies["gw-1"].body
                assert status.state == "rejected" and reason in status.reason and status.active_version == 1
            result = deploy(engine, registry, key, "foreign", None, ["gw-1"])
            assert result.rejected and "another-sensor-layout" in result.rejected["gw-1"]

            result = deploy(engine, registry, key, "activity", 2, ["gw-1"])
            assert result.statuses["gw-1"].active_version == 2 and result.statuses["gw-1"].previous_version == 1

            def send(body) -> ModelStatus:
                answer = engine.run_round(
                    f"evil-{secrets.token_hex(3)}", 1, body, ["gw-1"], deadline_s=20, expect=ModelStatus
                )
                return answer.replies["gw-1"].body

            # a replayed, validly signed v1 on a gateway running v2: refused, and still after a restart
            replayed_v1 = ModelPush(ModelBundle.create(v1, model_id="activity", version=1, signing_key=key).to_bytes())
            for attempt in range(2):
                status = send(replayed_v1)
                assert status.state == "rejected" and status.active_version == 2, status
                assert status.reason.startswith("downgrade: activity:v1 is older than activity:v2 already accepted")
                if attempt == 0:
                    stop(gateway)
                    gateway = start_gateway(tmp_path, broker.port, passwords["gw-1"])
                    presence.wait(["gw-1"], online=True, timeout_s=60)

            # unsigned, forged and misaddressed rollbacks: refused, v2 keeps running
            old_rollback = sign_rollback(
                key, client="gw-1", model_id="activity", version=1, replaces_model_id="activity", replaces_version=2
            )
            for body, reason in (
                (ModelRollback("unsigned, as before"), "unsigned"),
                (
                    sign_rollback(
                        SigningKey.generate(),
                        client="gw-1",
                        model_id="activity",
                        version=1,
                        replaces_model_id="activity",
                        replaces_version=2,
                    ),
                    "trusts only",
                ),
                (
                    sign_rollback(
                        key,
                        client="gw-2",
                        model_id="activity",
                        version=1,
                        replaces_model_id="activity",
                        replaces_version=2,
                    ),
                    "misaddressed",
                ),
            ):
                status = send(body)
                assert status.state == "rejected" and reason in status.reason and status.active_version == 2, status

            back = rollback(engine, registry, key, ["gw-1"], reason="test")
            assert back.statuses["gw-1"].active_version == 1 and back.statuses["gw-1"].previous_version == 2
            # an older signed rollback replayed after the rollback-forward to v2 (signed too) does nothing
            assert rollback(engine, registry, key, ["gw-1"]).statuses["gw-1"].active_version == 2
            status = send(old_rollback)
            assert status.state == "rejected" and "replayed" in status.reason and status.active_version == 2
            back = rollback(engine, registry, key, ["gw-1"], reason="test")
            assert back.statuses["gw-1"].active_version == 1
            deployments = {(m, v): s for m, v, c, s, _ in registry.deployments()}
            assert deployments[("activity", 1)] == "active" and deployments[("foreign", 1)] == "rejected"
            stop(gateway)

            # live recognition with the broker: predictions published and stored
            out = replay_into_gateway(tmp_path, recording, broker.port, passwords["gw-1"], len(batch.X))
            assert "model=activity:v1" in out
            wait_for_live_predictions(received, lock, len(batch.X), 1)
        finally:
            gateway.kill()
            agg.close()

    # the live predictions equal offline predictions of the same model on the same windows
    live = assert_live_equals_offline(tmp_path / "gw-1.db", recording.metadata.session_id, fsv, v1, len(batch.X))

    # restart with no broker at all: the stored model is loaded; predictions and alerts go on
    label = live[0].label
    rules = tmp_path / "alerts.json"
    rules.write_text(
        json.dumps(
            [{"name": "busy", "kind": "sustained", "labels": [label], "minutes": 0.05, "message": f"{label} for 3 s"}]
        )
    )
    session_2 = Recording.load(recording_path)
    object.__setattr__(session_2.metadata, "session_id", "offline-session")
    out = replay_into_gateway(tmp_path, session_2, None, "", len(batch.X), "--alerts", str(rules))
    assert "model=activity:v1" in out and "broker=" not in out  # an offline gateway reports no broker link
    with WindowStore(tmp_path / "gw-1.db") as store:
        offline_live = store.predictions("offline-session")
        alerts = store.alerts()
    assert len(offline_live) >= len(batch.X) - 2
    assert any(a[1] == "busy" and a[2] == "raised" for a in alerts)
