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
        with pytest.raises(RegistryError, match="no model act:v7"):
            registry.model("act", 7)
    (tmp_path / "bad.db").write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(RegistryError, match="not a usable registry"):
        Registry(tmp_path / "bad.db")
