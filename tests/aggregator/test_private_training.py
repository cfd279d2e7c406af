"""Private training end to end in simulation: the histogram protocols of FedSCS-XGB and FedForest,
with and without secure aggregation.

Oracles:
* masked == unmasked: secure aggregation changes no bit of the model;
* federated == pooled: K clients give the model of one client holding their union, bit for bit
  (integer sums are associative; edges come from summed counts);
* histogram == atoms / sketches given the same edges: the private protocols choose the splits
  of the paper's protocols (and so of xgboost / the exact pooled forest);
* dropouts: a client vanishing mid-round leaves the job going, and the sum is that of the rest.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.algorithms import FedForest, FedSCSXGB
from aggregator.jobs import JobSettings
from aggregator.simulate import Simulation, simulate
from edge_client.training_data import ClientData
from shared.protocol.messages.fedforest import ForestHistogramRequest
from shared.protocol.messages.fedscs_xgb import XgbHistogramRequest
from tests.aggregator.test_fedscs_xgb import make_clients, pooled


def assert_identical(a, b) -> None:
    """Bit-exact equality of everything but the metadata (which records the run's settings)."""
    assert a.trees == b.trees, "trees differ"
    np.testing.assert_array_equal(a.base_score, b.base_score)
    assert (a.kind, a.classes, a.feature_names) == (b.kind, b.classes, b.feature_names)


def xgb(**kw) -> FedSCSXGB:
    base = dict(n_rounds=3, max_depth=3, n_bins=32, protocol="histogram", secure_aggregation=False)
    return FedSCSXGB(**{**base, **kw})


def forest(**kw) -> FedForest:
    base = dict(n_trees=4, max_depth=4, n_bins=16, protocol="histogram", secure_aggregation=False, max_features=None)
    return FedForest(**{**base, **kw})


@pytest.mark.parametrize("objective", ["softmax", "logistic", "squared_error"])
def test_fedscs_xgb_masked_equals_unmasked(objective: str) -> None:
    clients = make_clients(1, objective=objective)
    plain = simulate(xgb(objective=objective), clients, seed=3)
    masked = simulate(xgb(objective=objective, secure_aggregation=True), clients, seed=3)
    assert_identical(plain, masked)
    assert plain.n_trees == 3 * (3 if objective == "softmax" else 1)


def test_fedscs_xgb_federated_equals_pooled_bit_for_bit() -> None:
    clients = make_clients(2)
    X, y = pooled(clients)
    fleet = simulate(xgb(secure_aggregation=True), clients, seed=0)
    one = simulate(xgb(), [ClientData("gw-all", X, y)], seed=0)
    assert_identical(fleet, one)


def test_fedscs_xgb_histogram_equals_atoms_given_the_edges() -> None:
    clients = make_clients(3)
    X, _ = pooled(clients)
    edges = tuple(
        np.unique(np.nanquantile(X[:, j], np.linspace(0.05, 0.95, 20))).astype(np.float32) for j in range(X.shape[1])
    )
    atoms = simulate(FedSCSXGB(n_rounds=3, max_depth=3, edges=edges, protocol="atoms"), clients)
    hist = simulate(xgb(edges=edges, min_crowd=0), clients)
    assert len(atoms.trees) == len(hist.trees)
    for a, b in zip(atoms.trees, hist.trees):
        np.testing.assert_array_equal(a.feature, b.feature)
        np.testing.assert_array_equal(a.threshold, b.threshold)
        np.testing.assert_allclose(a.value, b.value, rtol=1e-9, atol=1e-12)


def vanish_after(sim: Simulation, client: str, request_type: type, answers: int) -> None:
    """Make ``client`` answer ``answers`` requests of ``request_type``, then drop off the broker
    (while handling the next one, whose reply is lost with the connection)."""
    handlers = sim.participants[client].dispatcher._handlers
    original = handlers[request_type]
    seen = []

    def handler(message):
        if len(seen) >= answers:
            sim.transports[client].drop()
        seen.append(message.envelope.round)
        return original(message)

    handlers[request_type] = handler


def replies_of(sim: Simulation, client: str, reply_type: str) -> int:
    return sum(r.type == reply_type for r in sim.server_view()[client])


def test_fedscs_xgb_survives_a_client_dropping_mid_job() -> None:
    """gw-3 answers its first two histogram requests, then vanishes: the secure sums go on
    with the others (its pair seeds of those rounds are reconstructed), and the model trains."""
    sim = Simulation(make_clients(4, n_clients=5), record_bodies=True)
    vanish_after(sim, "gw-3", XgbHistogramRequest, 2)
    model = sim.run(xgb(secure_aggregation=True), settings=JobSettings(deadline_s=0.5, min_fraction=0.5))
    assert model.n_trees == 9
    assert replies_of(sim, "gw-3", "fedscs_xgb.histogram_reply") == 2
    assert replies_of(sim, "gw-0", "fedscs_xgb.histogram_reply") > 2


def test_fedforest_masked_equals_unmasked_and_pooled() -> None:
    clients = make_clients(5)
    plain = simulate(forest(), clients, seed=1)
    masked = simulate(forest(secure_aggregation=True), clients, seed=1)
    assert_identical(plain, masked)
    X, y = pooled(clients)
    one = simulate(forest(bootstrap=False), [ClientData("gw-all", X, y)], seed=1)
    many = simulate(forest(bootstrap=False, secure_aggregation=True), clients, seed=1)
    assert_identical(one, many)


def test_fedforest_histogram_equals_exact_sketch_forest_given_the_thresholds() -> None:
    clients = make_clients(6)
    X, _ = pooled(clients)
    thresholds = tuple(
        np.unique(np.nanquantile(X[:, j], np.linspace(0.05, 0.95, 12))).astype(np.float32) for j in range(X.shape[1])
    )
    exact = simulate(
        FedForest(n_trees=4, max_depth=4, max_features=None, thresholds=thresholds, protocol="sketches"),
        clients,
        seed=2,
    )
    hist = simulate(forest(thresholds=thresholds, min_crowd=0), clients, seed=2)
    assert len(exact.trees) == len(hist.trees)
    for a, b in zip(exact.trees, hist.trees):
        np.testing.assert_array_equal(a.feature, b.feature)
        np.testing.assert_array_equal(a.threshold, b.threshold)
        np.testing.assert_allclose(a.value, b.value, rtol=1e-12)


def test_fedforest_regression_masked_equals_unmasked() -> None:
    clients = make_clients(7, objective="squared_error")
    cfg = dict(task="regression", max_features=None)
    plain = simulate(forest(**cfg), clients, seed=0)
    masked = simulate(forest(**cfg, secure_aggregation=True), clients, seed=0)
    assert_identical(plain, masked)
    assert plain.trees[0].n_nodes > 3


@pytest.mark.parametrize("crowd", [1, 20])
def test_fedforest_minimum_crowd_bounds_every_leaf(crowd: int) -> None:
    """Every leaf of every tree holds at least ``min_crowd`` distinct windows of the fleet."""
    clients = make_clients(10)
    X, _ = pooled(clients)
    model = simulate(forest(n_trees=3, max_depth=8, bootstrap=False, min_crowd=crowd), clients)
    smallest = []
    for tree in model.trees:
        node = np.zeros(X.shape[0], dtype=np.int64)
        rows = np.arange(X.shape[0])
        while (tree.feature[node] >= 0).any():
            f = tree.feature[node]
            x = X[rows, np.maximum(f, 0)]
            go_left = np.where(np.isnan(x), tree.default_left[node], x < tree.threshold[node])  # NaN: learnt side
            node = np.where(f >= 0, np.where(go_left, tree.left[node], tree.right[node]), node)
        counts = np.bincount(node, minlength=tree.feature.shape[0])[tree.feature < 0]
        smallest.append(counts[counts > 0].min())
    assert min(smallest) >= crowd
    if crowd == 1:
        assert min(smallest) < 20  # without a crowd the trees isolate small groups: the bound binds


def test_fedforest_survives_a_client_dropping_between_levels() -> None:
    """gw-2 answers two levels, then vanishes: the forest is grown by the rest, every node's
    sums re-read from each level's histograms."""
    sim = Simulation(make_clients(11, n_clients=5), record_bodies=True)
    vanish_after(sim, "gw-2", ForestHistogramRequest, 2)
    model = sim.run(forest(n_trees=3, max_depth=5), settings=JobSettings(deadline_s=0.5, min_fraction=0.5))
    assert model.n_trees == 3 and max(t.n_nodes for t in model.trees) > 7
    assert replies_of(sim, "gw-2", "fedforest.histogram_reply") == 2


def test_fedforest_of_depth_zero_is_the_fleet_class_mix() -> None:
    clients = make_clients(13)
    model = simulate(forest(max_depth=0, bootstrap=False), clients)
    y = np.concatenate([c.y for c in clients])
    for tree in model.trees:
        assert tree.n_nodes == 1
        np.testing.assert_allclose(tree.value[0], np.bincount(y) / y.size)
