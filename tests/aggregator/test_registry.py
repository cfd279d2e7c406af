"""The model registry: versions count up per model, metrics and deployment states persist."""

from __future__ import annotations

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedForest
from aggregator.registry import Registry, RegistryError


def test_versions_metrics_and_deployments_persist(tmp_path) -> None:
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(80, 3)), rng.integers(0, 2, 80)
    model = aggregator.simulate(FedForest(n_trees=2, max_depth=2, secure_aggregation=False), [(X, y)])
    with Registry(tmp_path / "r.db") as registry:
        assert registry.add("act", model).version == 1
        assert registry.add("act", model, metrics={"accuracy": 0.9}).label == "act:v2"
        registry.set_deployment("act", 2, "gw-1", "pending")
        registry.set_deployment("act", 2, "gw-1", "active")
        registry.set_metrics("act", 1, {"accuracy": 0.8})
    with Registry(tmp_path / "r.db") as registry:
        assert [r.label for r in registry.list()] == ["act:v1", "act:v2"]
        record, back = registry.model("act")
        assert record.version == 2 and back == model and record.metrics == {"accuracy": 0.9}
        assert registry.record("act", 1).metrics == {"accuracy": 0.8}
        assert registry.deployments() == [("act", 2, "gw-1", "active", "")]
        with pytest.raises(RegistryError, match="no version 7 of act"):
            registry.model("act", 7)
    (tmp_path / "bad.db").write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(RegistryError, match="not a usable registry"):
        Registry(tmp_path / "bad.db")


def _small_model():
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(60, 3)), rng.integers(0, 2, 60)
    return aggregator.simulate(FedForest(n_trees=1, max_depth=2, secure_aggregation=False), [(X, y)])


def test_an_unknown_model_or_version_names_what_the_registry_holds(tmp_path) -> None:
    with Registry(tmp_path / "r.db") as registry:
        with pytest.raises(RegistryError, match="holds no models yet"):
            registry.model("act")
        model = _small_model()
        registry.add("act", model)
        registry.add("act", model)
        registry.add("fall", model)
        with pytest.raises(RegistryError, match=r"no model 'acts' in .*; it has act \(v1/v2\), fall \(v1\)"):
            registry.record("acts")
        with pytest.raises(RegistryError, match="no version 7 of act in .*; it has act:v1, act:v2"):
            registry.model("act", 7)


def test_running_is_each_gateways_latest_confirmed_version(tmp_path) -> None:
    """A deploy of v2 and a rollback to v1 leave both rows ``active``; the newer report wins."""
    with Registry(tmp_path / "r.db") as registry:
        registry.set_deployment("act", 1, "gw-1", "active")
        registry.set_deployment("act", 1, "gw-2", "active")
        registry.set_deployment("act", 2, "gw-1", "active")
        registry.set_deployment("act", 2, "gw-2", "rejected", "BundleError: feature set")
        registry.set_deployment("act", 2, "gw-3", "pending")
        assert {c: d.label for c, d in registry.running().items()} == {"gw-1": "act:v2", "gw-2": "act:v1"}
        registry.set_deployment("act", 1, "gw-1", "active", "rolled back: drift")
        running = registry.running()
        assert running["gw-1"].label == "act:v1" and running["gw-1"].detail == "rolled back: drift"
        model_id, version, client, state, detail = registry.deployments()[0]  # still a plain 5-tuple
        assert (model_id, version, client, state, detail) == ("act", 1, "gw-1", "active", "rolled back: drift")
