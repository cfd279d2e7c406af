"""A gateway started without ``--trust``: a pushed model is refused with a reason the aggregator
shows (not ``handler_failed: TypeError``), and a restart without ``--trust`` while a model is
installed starts, says in one warning line that the stored model is not loaded, keeps collecting
windows and leaves the model files as they were."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedSCSXGB
from aggregator.registry import Registry
from edge_client.processing import extract_recording
from firmware_bridge.importers import seglearn_watch
from firmware_bridge.recording import Recording
from firmware_bridge.replay import replay
from shared.model.bundle import ModelBundle
from shared.signing import SigningKey, load_signing_key
from tests.cli.cli_support import wheelfed
from tests.cli.test_gateway_startup import GatewayProcess, gateway_on_a_new_pty
from tests.conftest import PASSWORDS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):
    """A recording, a model trained on its windows, and the aggregator's key pair."""
    folder = tmp_path_factory.mktemp("trained")
    path = seglearn_watch.import_all(folder / "rec")[0]
    table, _ = extract_recording(path)
    labelled = np.array([y is not None for y in table.labels])
    X, y = table.X[labelled], np.array([str(v) for v in table.labels[labelled]])
    model = aggregator.simulate(
        FedSCSXGB(n_rounds=2, max_depth=3, secure_aggregation=False, feature_set_version=table.feature_set_version),
        [(X, y)],
    )
    key = SigningKey.generate()
    key.save(folder / "aggregator.key")
    key.verify_key.save(folder / "aggregator.pub")
    return Recording.load(path), model, folder


@pytest.mark.mosquitto
def test_a_push_to_a_gateway_without_trust_is_refused_with_the_reason(tmp_path: Path, mosquitto, trained) -> None:
    _, model, keys = trained
    with Registry(tmp_path / "registry.db") as registry:
        registry.add("activity", model)
    gateway = GatewayProcess(
        tmp_path,
        "--client-id",
        "gw-1",
        "--store",
        "gw.db",
        "--port",
        str(mosquitto.port),
        "--stats-every",
        "0.2",
        env={"WHEELFED_MQTT_PASSWORD": PASSWORDS["gw-1"]},
    )
    try:
        assert gateway.wait_for(lambda: gateway.stats().get("broker") == "connected"), gateway.err
        run = wheelfed(
            "model",
            "deploy",
            "activity",
            "--registry",
            "registry.db",
            "--key",
            str(keys / "aggregator.key"),
            "--clients",
            "gw-1",
            "--port",
            str(mosquitto.port),
            "--deadline",
            "20",
            cwd=tmp_path,
            env={"WHEELFED_MQTT_PASSWORD": PASSWORDS["aggregator"]},
        )
    finally:
        assert gateway.stop() == 0, gateway.err
    assert run.code == 1, run
    assert "no_trusted_key: this gateway was started without --trust" in run.stdout, run.stdout
    assert "restart it with --trust aggregator.pub" in run.stdout and "TypeError" not in run.stdout
    assert not (tmp_path / "gw-1-models" / "active.bundle").exists()
    assert "Traceback" not in "\n".join(gateway.err)


def test_a_restart_without_trust_keeps_collecting_and_leaves_the_stored_model_alone(tmp_path: Path, trained) -> None:
    recording, model, keys = trained
    models = tmp_path / "models"
    models.mkdir()
    bundle = ModelBundle.create(
        model, model_id="activity", version=3, signing_key=load_signing_key(keys / "aggregator.key")
    ).to_bytes()
    (models / "active.bundle").write_bytes(bundle)

    gateway, master, _ = gateway_on_a_new_pty(
        tmp_path,
        "--client-id",
        "gw-1",
        "--no-broker",
        "--store",
        "gw.db",
        "--model-dir",
        str(models),
        "--stats-every",
        "0.2",
        "--engine",
        "numpy",
    )
    try:
        assert replay(recording, master, speed=0, wait_for_reader_s=20).completed
        assert gateway.wait_for(lambda: int(gateway.stats().get("labelled", 0)) > 200), (gateway.out[-1:], gateway.err)
        stats = gateway.stats()
    finally:
        code = gateway.stop()
        os.close(master)
    assert code == 0, gateway.err
    assert stats["model"] == "-" and stats["predicted"] == "0"
    warnings = [line for line in gateway.err if "WARNING" in line and "edge_client.models" in line]
    assert len(warnings) == 1, gateway.err
    assert "cannot be verified without --trust and is not loaded" in warnings[0] and "activity:v3" in warnings[0]
    assert "Traceback" not in "\n".join(gateway.err)
    assert (models / "active.bundle").read_bytes() == bundle and sorted(os.listdir(models)) == ["active.bundle"]
