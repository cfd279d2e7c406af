"""FedSCS-XGB's private protocol: the oracles that still apply under differential privacy.

* growth from exact sums equals the histogram growth of pooled data on the same features and
  edges (federated == pooled with the noise off: ``grow_private_tree`` is fed exact sums);
* masked == unmasked given the same noise draws (secure aggregation changes nothing);
* one window moves a release by at most the sensitivity the accountant charges for;
* the model reports what it spent, within the budget.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aggregator.algorithms.fedscs_xgb_private as private_module
from aggregator.algorithms import FedSCSXGB
from aggregator.algorithms.fedscs_xgb_private import BOUNDS, LATTICE_SCALE, _cell_bounds, round_features
from aggregator.algorithms.histogram_growth import GrowthParams, grow_trees
from aggregator.algorithms.private_growth import PrivateGrowth, grow_private_tree
from aggregator.fleet_sums import FleetSummer
from aggregator.simulate import Simulation
from edge_client.training_data import ClientData
from shared.differential_privacy import clip_norm, stochastic_round
from shared.histograms import histogram_slots, route_round
from shared.objectives import objective_named
from shared.protocol.messages.fedscs_xgb import PrivateLattice
from shared.sketches import bin_ids


def fleet(n_clients: int = 4, n: int = 150, d: int = 6, seed: int = 0) -> list[ClientData]:
    rng = np.random.default_rng(seed)
    clients = []
    for k in range(n_clients):
        X = rng.normal(size=(n, d)).astype(np.float32).astype(np.float64)
        y = np.digitize(X[:, 0] + 0.5 * X[:, 1], [-0.6, 0.6])
        clients.append(ClientData(f"gw-{k}", X, y))
    return clients


# --- federated == pooled with exact sums -----------------------------------------------------------


def _exact_fetchers(Xf: np.ndarray, edges: list[np.ndarray], g: np.ndarray, h: np.ndarray, features: np.ndarray):
    """``fetch_level``/``fetch_leaves`` that sum the pooled windows exactly (no noise)."""
    n_edges = np.array([e.shape[0] for e in edges], dtype=np.int64)
    slots = histogram_slots(bin_ids(Xf, edges), n_edges)
    S = int(n_edges.max()) + 2
    m = g.shape[1]

    def positions(splits):
        column = np.searchsorted(features, splits.feature)
        return route_round(
            slots,
            S - 1,
            1,
            np.zeros_like(splits.tree),
            splits.node,
            column,
            splits.bin,
            splits.default_left,
            splits.left,
            splits.right,
        )[0]

    def level(splits, node_ids):
        pos = positions(splits)
        out = np.zeros((len(node_ids), 2 * m + 1, Xf.shape[1], S))
        stats = np.concatenate([g, h, np.ones((g.shape[0], 1))], axis=1)
        for r, node in enumerate(node_ids):
            rows = pos == node
            for j in range(Xf.shape[1]):
                for t in range(2 * m + 1):
                    out[r, t, j] = np.bincount(slots[rows, j], weights=stats[rows, t], minlength=S)
        return out

    def leaves(splits, leaf_ids):
        pos = positions(splits)
        return np.array([np.concatenate([g[pos == leaf].sum(axis=0), h[pos == leaf].sum(axis=0)]) for leaf in leaf_ids])

    return level, leaves


def test_private_growth_from_exact_sums_equals_pooled_histogram_growth() -> None:
    clients = fleet(n=200, d=8)
    X = np.vstack([c.X for c in clients])
    y = np.concatenate([c.y for c in clients])
    objective = objective_named("softmax", 3)
    g, h = objective.gradients(np.zeros((y.size, 3)), y)
    features = round_features(8, np.ones(8, bool), 5, seed=3, round_no=1)
    Xf = X[:, features]
    edges = [np.unique(np.quantile(Xf[:, j], np.linspace(0.1, 0.9, 7)).astype(np.float32)) for j in range(5)]
    params = GrowthParams(max_depth=3, learning_rate=0.3, reg_lambda=1.0, gamma=0.0, multi_strategy="multi_output_tree")
    level, leaves = _exact_fetchers(Xf, edges, g, h, features)
    grown = grow_private_tree(PrivateGrowth(params, features, edges, min_count=0.0, leaf_clip=1e9), 3, level, leaves)
    pooled = grow_trees(bin_ids(Xf, edges), g, h, None, edges, params)[0].tree
    tree = grown.tree
    assert tree.n_nodes == pooled.n_nodes > 1
    leaf = pooled.feature < 0
    np.testing.assert_array_equal(tree.feature[~leaf], features[pooled.feature[~leaf]])
    np.testing.assert_array_equal(tree.threshold[~leaf], pooled.threshold[~leaf])
    np.testing.assert_array_equal(tree.left, pooled.left)
    np.testing.assert_array_equal(tree.right, pooled.right)
    np.testing.assert_allclose(tree.value[leaf], pooled.value[leaf], rtol=0, atol=1e-9)


# --- secure aggregation changes nothing -------------------------------------------------------------


class _PlainSummer(FleetSummer):
    def __init__(self, job, *, secure: bool, degree=None, threshold=None) -> None:
        super().__init__(job, secure=False, degree=degree, threshold=threshold)


def seeded_run(monkeypatch, module, clients: list[ClientData], algorithm, *, plain: bool):
    """``algorithm`` trained on ``clients`` with every gateway's noise seeded; with ``plain`` the
    private protocol's ``module`` sums without secure aggregation."""
    if plain:
        monkeypatch.setattr(module, "FleetSummer", _PlainSummer)
    sim = Simulation(clients)
    for i, participant in enumerate(sim.participants.values()):
        participant.seed_noise(100 + i)
    model = sim.run(algorithm)
    monkeypatch.undo()
    return model


def test_masked_equals_unmasked_given_the_same_noise_draws(monkeypatch) -> None:
    algorithm = FedSCSXGB(n_rounds=3, max_depth=3, dp_epsilon=4.0)
    masked = seeded_run(monkeypatch, private_module, fleet(), algorithm, plain=False)
    unmasked = seeded_run(monkeypatch, private_module, fleet(), algorithm, plain=True)
    assert masked == unmasked
    assert masked.metadata["dp_epsilon"] == unmasked.metadata["dp_epsilon"]
    other = Simulation(fleet()).run(FedSCSXGB(n_rounds=3, max_depth=3, dp_epsilon=4.0))
    assert other != masked  # the noise is real: unseeded gateways draw other noise


# --- the sensitivity the accountant charges for ----------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 12), st.integers(0, 2**31), st.sampled_from(["softmax", "logistic"]))
def test_one_window_moves_a_cell_by_at_most_the_charged_bound(k: int, seed: int, name: str) -> None:
    rng = np.random.default_rng(seed)
    k = 2 if name == "logistic" else k
    objective = objective_named(name, k)
    m = objective.n_outputs
    margins = rng.normal(scale=rng.choice([0.1, 3.0, 30.0]), size=(1, m))
    label = rng.integers(0, k, 1)
    g, h = objective.gradients(margins if name == "softmax" else margins[:, 0], label)
    g, h = g.reshape(1, m), h.reshape(1, m)
    lattice = PrivateLattice(LATTICE_SCALE, *BOUNDS[name])
    qg = stochastic_round(clip_norm(g, lattice.grad_bound), lattice.scale, rng)
    qh = stochastic_round(clip_norm(h, lattice.hess_bound), lattice.scale, rng)
    # the clipping never binds: the bounds are the objectives' own
    assert np.sqrt((g * g).sum()) <= lattice.grad_bound + 1e-12 and np.sqrt((h * h).sum()) <= lattice.hess_bound
    cell = np.concatenate([qg[0], qh[0], [lattice.scale]]).astype(np.float64)
    l2, l1 = _cell_bounds(lattice, m, with_count=True)
    assert np.sqrt((cell * cell).sum()) <= l2 and np.abs(cell).sum() <= l1
    leaf_l2, leaf_l1 = _cell_bounds(lattice, m, with_count=False)
    assert np.sqrt((cell[:-1] ** 2).sum()) <= leaf_l2 and np.abs(cell[:-1]).sum() <= leaf_l1


# --- the budget ------------------------------------------------------------------------------------


def test_model_reports_what_it_spent_within_the_budget() -> None:
    model = Simulation(fleet()).run(FedSCSXGB(n_rounds=4, max_depth=3, dp_epsilon=2.0))
    meta = model.metadata
    assert meta["protocol"] == "private" and meta["multi_strategy"] == "multi_output_tree"
    assert 1.0 < meta["dp_epsilon"] <= 2.0 and meta["dp_delta"] == 1e-6
    assert meta["dp_rho"] > 0 and 0 <= meta["dp_xi"] < 0.05 * meta["dp_rho"]


def test_private_training_learns_a_separable_fleet() -> None:
    clients = fleet(n_clients=5, n=400)
    model = Simulation(clients).run(FedSCSXGB(n_rounds=6, max_depth=3, learning_rate=0.5, dp_epsilon=16.0))
    X = np.vstack([c.X for c in clients])
    y = np.concatenate([c.y for c in clients])
    assert np.mean(model.predict(X) == y) > 0.8


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"multi_strategy": "one_output_per_tree"}, "vector-leaf"),
        ({"dp_epsilon": 0.0}, "dp_epsilon"),
        ({"dp_delta": 0.5}, "dp_delta"),
        ({"protocol": "private", "secure_aggregation": False}, "secure aggregation"),
        ({"dp_features": 0}, "dp_features"),
    ],
)
def test_bad_private_settings_are_one_line(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message) as info:
        FedSCSXGB(**kwargs)
    assert "\n" not in str(info.value)


def test_protocol_defaults_private_and_histogram_keeps_the_papers_settings() -> None:
    assert FedSCSXGB().protocol == "private" and FedSCSXGB().bins == 8
    assert (FedSCSXGB().n_rounds, FedSCSXGB().max_depth, FedSCSXGB().learning_rate) == (
        40,
        6,
        0.3,
    )  # more trees see more features
    regression = FedSCSXGB(objective="squared_error")
    assert (regression.n_rounds, regression.max_depth, regression.learning_rate) == (20, 6, 0.5)  # as measured
    histogram = FedSCSXGB(objective="squared_error", protocol="histogram")
    assert histogram.bins == 256 and (histogram.n_rounds, histogram.max_depth) == (10, 4)  # the paper's
    assert FedSCSXGB(protocol="histogram", n_rounds=3).n_rounds == 3
    assert FedSCSXGB(protocol="histogram").multi_strategy == "one_output_per_tree"
    assert FedSCSXGB(secure_aggregation=False).protocol == "histogram"  # no DP without secure aggregation
    assert math.isfinite(FedSCSXGB().dp_epsilon)


def test_a_gateway_that_inflates_its_gradients_stops_the_job_in_one_line() -> None:
    from aggregator.jobs import TrainingError

    sim = Simulation(fleet())
    half = sim.participants["gw-1"].halves["fedscs_xgb"]
    honest = half._private_positions

    def lying(message, body):
        qg, qh, slots, position = honest(message, body)
        return qg * 1000, qh, slots, position

    half._private_positions = lying
    with pytest.raises(TrainingError, match="G sum") as info:
        sim.run(FedSCSXGB(n_rounds=3, max_depth=3, dp_epsilon=4.0))
    assert "\n" not in str(info.value)
