"""The gateway's model manager, live predictor and alert rules, without a broker."""

from __future__ import annotations

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedForest
from edge_client.alerts import AlertEngine, AlertRule, load_rules
from edge_client.live import LiveConfig, LivePredictor
from edge_client.models import ModelManager
from edge_client.store import WindowRecord, WindowStore
from edge_client.training_data import ClientData
from shared.model.bundle import ModelBundle, sign_rollback
from shared.signing import SigningKey

FSV = "fs-live"
MIN = 60_000_000


@pytest.fixture(scope="module")
def models():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = np.where(X[:, 0] > 0, "push", "rest")
    a = aggregator.simulate(
        FedForest(n_trees=5, max_depth=3, secure_aggregation=False, feature_set_version=FSV), [ClientData("c", X, y)]
    )
    b = aggregator.simulate(
        FedForest(n_trees=7, max_depth=3, secure_aggregation=False, feature_set_version=FSV), [ClientData("c", X, y)]
    )
    other = aggregator.simulate(
        FedForest(n_trees=2, max_depth=2, secure_aggregation=False, feature_set_version="fs-other"),
        [ClientData("c", X, y)],
    )
    return a, b, other


def bundle(model, version: int, key: SigningKey, target: str = "") -> bytes:
    return ModelBundle.create(model, model_id="act", version=version, signing_key=key, target=target).to_bytes()


def test_install_rollback_reload_and_refusals(tmp_path, models) -> None:
    a, b, other = models
    key = SigningKey.generate()
    manager = ModelManager(tmp_path / "m", "gw-1", [key.verify_key], feature_set_version=lambda: FSV, engine="numpy")
    assert manager.load() is None and manager.current is None
    assert manager.install(bundle(a, 1, key)).state == "active"
    assert manager.install(bundle(a, 1, key)).state == "unchanged"  # the same model again (new signature time)
    reused = manager.install(bundle(b, 1, key))
    assert reused.state == "rejected" and "different content" in reused.reason
    status = manager.install(bundle(b, 2, key))
    assert (status.state, status.active_version, status.previous_version) == ("active", 2, 1)
    for data, reason in (
        (bundle(other, 3, key), "fs-other"),
        (bundle(a, 4, SigningKey.generate()), "trusts only"),
        (bundle(a, 5, key, target="gw-9"), "gw-9"),
        (b"\x00" * 40, ""),
    ):
        refused = manager.install(data)
        assert refused.state == "rejected" and reason in refused.reason and refused.active_version == 2
    back = manager.rollback(
        sign_rollback(
            key, client="gw-1", model_id="act", version=1, replaces_model_id="act", replaces_version=2, reason="drift"
        )
    )
    assert back.active_version == 1 and manager.current.label == "act:v1"
    again = ModelManager(tmp_path / "m", "gw-1", [key.verify_key], engine="numpy")
    assert again.load().label == "act:v1"  # a restart loads the stored active model
    (tmp_path / "m" / "active.bundle").write_bytes(b"corrupted")
    fallback = ModelManager(tmp_path / "m", "gw-1", [key.verify_key], engine="numpy")
    assert fallback.load().label == "act:v2" and "active.bundle" in fallback.last_error
    empty = ModelManager(tmp_path / "empty", "gw-1", [key.verify_key])
    assert (
        empty.rollback(
            sign_rollback(key, client="gw-1", model_id="act", version=1, replaces_model_id="act", replaces_version=2)
        ).state
        == "unchanged"
    )


def test_live_predictor_stores_publishes_and_survives_a_dead_link(tmp_path, models) -> None:
    a, _b, _ = models
    key = SigningKey.generate()
    manager = ModelManager(tmp_path / "m", "gw-1", [key.verify_key], engine="numpy")
    with WindowStore(tmp_path / "w.db") as store:
        predictor = LivePredictor(manager, store, AlertEngine(()), LiveConfig(max_batch=3, max_queue=5))
        record = WindowRecord("s", 0, 10, np.array([1.0, 0, 0, 0]), FSV)
        assert predictor.on_window(record, None) is None and predictor.stats.skipped_no_model == 1
        manager.install(bundle(a, 1, key))
        assert predictor.on_window(WindowRecord("s", 0, 10, np.zeros(3), "fs-other"), None) is None
        assert predictor.stats.skipped_feature_set == 1
        for i in range(7):
            x = np.array([1.0 if i % 2 else -1.0, 0, 0, 0])
            p = predictor.on_window(WindowRecord("s", i * 10, i * 10 + 10, x, FSV), i)
            assert p.label == ("push" if i % 2 else "rest") and p.model == "act:v1"
        assert len(store.predictions("s")) == 7 and predictor.stats.dropped_from_queue == 2  # bounded queue

        def down(_body):
            raise ConnectionError("offline")

        with pytest.raises(ConnectionError):
            predictor.flush(down)
        sent = []
        assert predictor.flush(sent.append) == 5
        assert [len(b.predicted) for b in sent] == [3, 2] and sent[0].classes == ("push", "rest")
        assert sent[0].model_id == "act" and sent[0].model_version == 1


def test_alert_rules_in_sensor_time() -> None:
    engine = AlertEngine(
        (
            AlertRule("relief", "absent", ("relief",), 30.0, "no relief"),
            AlertRule("lying", "sustained", ("lying",), 60.0, "lying 1 h"),
        )
    )
    events = []
    t = 0
    for label, minutes in (
        ("sit", 10),
        ("sit", 25),
        ("relief", 31),
        ("lying", 40),
        ("lying", 95),
        ("lying", 105),
        ("sit", 110),
    ):
        t = minutes * MIN
        events += [(e.rule, e.state, round((e.detected_us - e.started_us) / MIN)) for e in engine.observe(t, label)]
    # relief: absent 10 -> 31 (21 min, fine), then 31 -> 95 (64 min): raised at 95, still absent at 110;
    # lying: from 40, 65 minutes at 105 -> raised; sitting at 110 -> cleared (70 minutes in all)
    assert events == [("relief", "raised", 64), ("lying", "raised", 65), ("lying", "cleared", 70)]
    assert engine.observe(111 * MIN, "relief")[0].state == "cleared"


def test_alert_rules_file(tmp_path) -> None:
    path = tmp_path / "rules.json"
    path.write_text('[{"name": "r", "kind": "absent", "labels": ["a"], "minutes": 5}]')
    assert load_rules(path)[0].labels == ("a",)
    path.write_text('[{"name": "r", "kind": "sometimes", "labels": ["a"], "minutes": 5}]')
    with pytest.raises(ValueError, match="kind must be"):
        load_rules(path)
