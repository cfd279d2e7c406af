"""Federated evaluation: pooled metrics equal centralized ones on the union of the clients'
held-out data (sklearn as the oracle), per-client metrics, and hostile replies."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, balanced_accuracy_score, f1_score, log_loss, r2_score, roc_auc_score

import aggregator
from aggregator.algorithms import FedForest, FedSCSXGB
from aggregator.evaluation import auc_from_histogram, evaluate_federated
from aggregator.jobs import FederatedJob, JobSettings
from aggregator.simulate import Simulation
from edge_client.training_data import ClientData
from shared.model import model_inputs


def clients(seed: int = 0, regression: bool = False, k: int = 4):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(k):
        X, Xt = rng.normal(size=(120, 4)) + 0.3 * i, rng.normal(size=(40, 4)) + 0.3 * i
        f = lambda Z: Z[:, 0] + 0.5 * Z[:, 1] + rng.normal(scale=0.5, size=len(Z))  # noqa: E731
        y, yt = (f(X), f(Xt)) if regression else (np.digitize(f(X), [-0.4, 0.6]), np.digitize(f(Xt), [-0.4, 0.6]))
        out.append(ClientData(f"gw-{i}", X, y, X_test=Xt, y_test=yt))
    return out


def job_over(sim: Simulation, name: str) -> FederatedJob:
    return FederatedJob(sim.engine, list(sim.transports), job_id=name, settings=JobSettings(deadline_s=30))


@pytest.mark.parametrize("algorithm", [FedForest(n_trees=10, max_depth=4), FedSCSXGB(n_rounds=5)])
def test_pooled_classification_metrics_equal_centralized_ones(algorithm) -> None:
    data = clients(1)
    sim = Simulation(data)
    model = sim.run(algorithm)
    evaluation = evaluate_federated(job_over(sim, "eval"), model, score_bins=10_000)
    X = np.concatenate([c.X_test for c in data])
    y = np.concatenate([c.y_test for c in data])
    proba = model.predict_proba(model_inputs(model, X))
    pred = np.argmax(proba, axis=1)
    m = evaluation.metrics
    assert m["n"] == len(y)
    assert m["accuracy"] == pytest.approx(accuracy_score(y, pred))
    assert m["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(y, pred))
    assert m["macro_f1"] == pytest.approx(f1_score(y, pred, average="macro"))
    assert m["log_loss"] == pytest.approx(log_loss(y, np.clip(proba, 1e-15, 1), labels=[0, 1, 2]), rel=1e-6)
    assert m["auc"] == pytest.approx(roc_auc_score(y, proba, multi_class="ovr", average="macro"), abs=2e-3)
    for c in data:  # each gateway's own metrics
        own = np.argmax(model.predict_proba(model_inputs(model, c.X_test)), axis=1)
        assert evaluation.per_client[c.client_id]["accuracy"] == pytest.approx(accuracy_score(c.y_test, own))
    np.testing.assert_array_equal(evaluation.confusion.sum(), len(y))


def test_pooled_regression_metrics_equal_centralized_ones() -> None:
    data = clients(2, regression=True)
    sim = Simulation(data)
    model = sim.run(FedForest(n_trees=8, max_depth=4, task="regression"))
    m = evaluate_federated(job_over(sim, "eval"), model).metrics
    X = np.concatenate([c.X_test for c in data])
    y = np.concatenate([c.y_test for c in data])
    pred = model.predict(X)
    assert m["mse"] == pytest.approx(np.mean((pred - y) ** 2))
    assert m["r2"] == pytest.approx(r2_score(y, pred))
    assert m["mae"] == pytest.approx(np.mean(np.abs(pred - y)))


def test_training_split_and_clients_without_holdout() -> None:
    data = clients(3)
    no_test = ClientData("gw-9", data[0].X, data[0].y)
    sim = Simulation([*data, no_test])
    model = sim.run(FedForest(n_trees=5, max_depth=3))
    job = FederatedJob(
        sim.engine, list(sim.transports), job_id="e", settings=JobSettings(deadline_s=5, min_fraction=0.5)
    )
    evaluation = evaluate_federated(job, model)
    assert "gw-9" not in evaluation.per_client and job.results[-1].errors["gw-9"].code == "no_holdout_windows"
    train = evaluate_federated(job, model, split="train")
    assert train.metrics["n"] == sum(len(c.y) for c in [*data, no_test])


def test_auc_from_histogram() -> None:
    assert auc_from_histogram(np.array([[5, 0], [0, 5]])) == 1.0
    assert auc_from_histogram(np.array([[0, 5], [5, 0]])) == 0.0
    assert auc_from_histogram(np.array([[3, 3]])) == 0.5
    assert np.isnan(auc_from_histogram(np.array([[3, 0]])))
    rng = np.random.default_rng(0)
    s, t = rng.random(500), rng.random(500) < 0.4
    hist = np.zeros((1000, 2), int)
    np.add.at(hist, (np.minimum((s * 1000).astype(int), 999), t.astype(int)), 1)
    assert auc_from_histogram(hist) == pytest.approx(roc_auc_score(t, s), abs=1e-3)


def test_bad_models_are_refused_with_a_code() -> None:
    from edge_client.dispatcher import RequestRejected
    from edge_client.evaluation import load_model

    with pytest.raises(RequestRejected) as err:
        load_model(b"\x00garbage")
    assert err.value.code == "bad_model"


def test_feature_mismatch_is_refused() -> None:
    data = clients(4)
    model = aggregator.simulate(FedForest(n_trees=3, max_depth=2), data)
    other = Simulation(
        [ClientData("gw-x", np.zeros((5, 3)), np.zeros(5, int), X_test=np.zeros((5, 3)), y_test=np.zeros(5, int))]
    )
    job = FederatedJob(other.engine, ["gw-x"], job_id="m", settings=JobSettings(deadline_s=5, min_fraction=1.0))
    with pytest.raises(Exception, match="quorum"):
        evaluate_federated(job, model)
    assert job.results[-1].errors["gw-x"].code == "feature_mismatch"
