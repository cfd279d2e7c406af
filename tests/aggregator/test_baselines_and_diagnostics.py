"""Baselines through the real protocol, and the covariate-shift diagnostic of §F.4."""

from __future__ import annotations

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedForest
from aggregator.baselines import FederatedHistogram, LocalEnsembling, LocalLearning
from aggregator.diagnostics import covariate_shift
from aggregator.jobs import FederatedJob, JobSettings
from aggregator.simulate import Simulation
from edge_client.training_data import ClientData


def fleet(shift: float, seed: int = 0, k: int = 5):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(k):
        X = rng.normal(size=(150, 4))
        X[:, 3] += shift * i
        y = (X[:, 0] > 0).astype(int)
        out.append(ClientData(f"gw-{i}", X, y))
    return out


def test_local_learning_equals_fedforest_on_that_client_alone() -> None:
    data = fleet(0.0)
    forest = FedForest(protocol="sketches", n_trees=4, max_depth=3)
    local = aggregator.simulate(LocalLearning(forest), data, seed=3)
    assert set(local) == {c.client_id for c in data}
    alone = aggregator.simulate(forest, [data[2]], seed=3)
    assert local["gw-2"] == alone


def test_local_learning_uses_the_fleet_vocabulary() -> None:
    data = fleet(0.0)
    data[0] = ClientData("gw-0", data[0].X, np.zeros(150, int))  # this client only ever saw class 0
    local = aggregator.simulate(LocalLearning(FedForest(protocol="sketches", n_trees=2, max_depth=2)), data)
    assert local["gw-0"].classes == (0, 1) and local["gw-0"].predict_proba(data[0].X).shape == (150, 2)


def test_local_ensembling_averages_every_clients_trees() -> None:
    data = fleet(0.0)
    forest = FedForest(protocol="sketches", n_trees=10, max_depth=3)
    merged = aggregator.simulate(LocalEnsembling(forest), data, seed=1)
    local = aggregator.simulate(LocalLearning(FedForest(protocol="sketches", n_trees=2, max_depth=3)), data, seed=1)
    assert merged.n_trees == 10 and merged.kind == "forest"
    X = np.concatenate([c.X for c in data])
    want = np.mean([m.predict_proba(X) for m in local.values()], axis=0)
    np.testing.assert_allclose(merged.predict_proba(X), want, atol=1e-12)


def test_federated_histogram_uses_equal_width_bins_on_the_global_range() -> None:
    data = fleet(1.0)
    model = aggregator.simulate(
        FederatedHistogram(n_trees=3, max_depth=2, n_bins=8, bootstrap=False, max_features=None), data
    )
    X = np.concatenate([c.X for c in data])
    edges = [np.linspace(X[:, j].min(), X[:, j].max(), 9)[1:-1] for j in range(4)]
    for tree in model.trees:
        for f, t in zip(tree.feature, tree.threshold):
            if f >= 0:
                assert np.isclose(edges[f], t).any()
    with pytest.raises(ValueError):
        FederatedHistogram(client_splits=True)


def test_covariate_shift_diagnostic_finds_the_shifted_feature() -> None:
    sim = Simulation(fleet(3.0, seed=1))
    job = FederatedJob(sim.engine, list(sim.transports), job_id="diag", settings=JobSettings(deadline_s=30))
    report = covariate_shift(job)
    assert report.shifted and report.auc > 0.9 and report.root_gain > 0.1
    assert report.importance[0][0] == "f3"
    assert "covariate shift" in report.summary()


def test_no_covariate_shift_on_homogeneous_clients() -> None:
    sim = Simulation(fleet(0.0, seed=2))
    job = FederatedJob(sim.engine, list(sim.transports), job_id="diag", settings=JobSettings(deadline_s=30))
    report = covariate_shift(
        job, forest=FedForest(protocol="sketches", n_trees=10, max_depth=2, min_samples_leaf=20, max_features=None)
    )
    assert not report.shifted and report.auc < 0.7
