"""FedForest regression is invariant to a constant offset of the targets.

Oracle: the same clients with ``y + c`` grow the same forest -- same features, thresholds and
default directions, leaf values shifted by exactly ``c`` (up to float64 rounding of ``y + c``) --
for c in {0, 1e3, 1e5, 1e6, 1e9}, in both protocols; and the forest's test MSE stays within a
small factor of scikit-learn's ``RandomForestRegressor`` at every offset (which is itself offset
invariant). Before the fix the impurity was ``Q/n - mean^2`` of raw sums and the purity test
and split threshold were ``1e-11 * mean(y^2)``: at c = 1e6 only the roots survived. The private
protocol's opening summed raw targets in fixed point and refused |y| >= 2**20; it now sums them
around a fleet shift read off the target's grid counts, so only the spread is bounded.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import RandomForestRegressor

import aggregator
from aggregator.algorithms import FedForest
from aggregator.estimators import FedForestRegressor
from edge_client.training_data import ClientData
from shared.model import TreeEnsemble

OFFSETS = (0.0, 1e3, 1e5, 1e6, 1e9)
#: The private protocol's opening sums ``y - shift`` (the fleet shift from the target's grid counts).
PRIVATE_OFFSETS = OFFSETS


def regression_clients(c: float, seed: int = 0, n_clients: int = 4, n: int = 80, d: int = 4):
    rng = np.random.default_rng(seed)
    out, X_all, y_all = [], [], []
    for k in range(n_clients):
        X = rng.normal(size=(n + 10 * k, d)) + 0.3 * k
        y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] + rng.normal(scale=0.1, size=X.shape[0])
        out.append(ClientData(f"gw-{k}", X, y + c))
        X_all.append(X)
        y_all.append(y)
    return out, np.concatenate(X_all), np.concatenate(y_all)


def held_out(seed: int = 99, n: int = 400, d: int = 4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + 0.45
    return X, np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] * X[:, 2]


def shape(model: TreeEnsemble):
    """Per tree: the split nodes' (feature, threshold, default_left) and the children's layout."""
    return [
        (t.feature.tolist(), t.threshold.tolist(), t.default_left.tolist(), t.left.tolist(), t.right.tolist())
        for t in model.trees
    ]


def leaf_values(model: TreeEnsemble) -> np.ndarray:
    return np.concatenate([t.value[:, 0] for t in model.trees])


def grow(protocol: str, c: float) -> tuple[TreeEnsemble, float]:
    clients, _, _ = regression_clients(c)
    config = FedForest(task="regression", protocol=protocol, n_trees=5, max_depth=6, min_samples_leaf=1)
    model = aggregator.simulate(config, clients, seed=3)
    X, y = held_out()
    return model, float(np.mean((model.predict(X).ravel() - c - y) ** 2))


@pytest.mark.parametrize("protocol,offsets", [("sketches", OFFSETS), ("histogram", PRIVATE_OFFSETS)])
def test_offset_targets_grow_the_same_forest_shifted_by_the_offset(protocol: str, offsets) -> None:
    base, base_mse = grow(protocol, 0.0)
    n_nodes = sum(t.n_nodes for t in base.trees)
    assert n_nodes > 5 * 40  # real trees, not roots
    for c in offsets[1:]:
        model, mse = grow(protocol, c)
        assert shape(model) == shape(base), f"c={c:g}"
        # leaf values: float64 rounding of y + c and of the sums (relative 1e-15 of c per sample)
        np.testing.assert_allclose(leaf_values(model) - c, leaf_values(base), rtol=0, atol=1e-12 + 1e-13 * c)
        assert mse == pytest.approx(base_mse, rel=1e-6, abs=1e-9)


def spread_clients(spread: float) -> list[ClientData]:
    """Four gateways whose targets (around 1.7e9, like Unix timestamps) span ``spread``."""
    rng = np.random.default_rng(5)
    out = []
    for k in range(4):
        X = rng.normal(size=(60, 3))
        y = 1.7e9 + spread * rng.uniform(size=60)
        y[:2] = 1.7e9, 1.7e9 + spread  # every gateway holds both ends
        out.append(ClientData(f"gw-{k}", X, y))
    return out


@pytest.mark.parametrize(
    "fit",
    [
        lambda clients: aggregator.simulate(
            FedForest(task="regression", protocol="histogram", n_trees=1, max_depth=2), clients, seed=0
        ),
        lambda clients: FedForestRegressor(n_estimators=1, max_depth=2, protocol="histogram").fit(clients),
    ],
    ids=["simulate", "estimator"],
)
def test_private_protocol_refuses_a_target_spread_beyond_the_bound_in_one_line(fit) -> None:
    with pytest.raises(ValueError, match=r"2\*\*20") as info:
        fit(spread_clients(3e6))
    assert "\n" not in str(info.value) and len(str(info.value)) < 300, str(info.value)


def test_private_protocol_trains_on_timestamps_within_the_bound() -> None:
    """Targets near 1.7e9 spread over 1e5 (a day of timestamps) train; the forest predicts in range."""
    clients = spread_clients(1e5)
    model = FedForestRegressor(n_estimators=2, max_depth=3, random_state=0, protocol="histogram").fit(clients)
    prediction = model.predict(clients[0].X)
    assert np.all((prediction >= 1.7e9) & (prediction <= 1.7e9 + 1e5))


@pytest.mark.parametrize("protocol,offsets", [("sketches", OFFSETS), ("histogram", PRIVATE_OFFSETS)])
def test_offset_test_mse_tracks_scikit_learn_at_every_offset(protocol: str, offsets) -> None:
    _, X_train, y_train = regression_clients(0.0)
    X, y = held_out()
    for c in offsets:
        rf = RandomForestRegressor(n_estimators=5, max_depth=6, max_features=1 / 3, random_state=0)
        rf.fit(X_train, y_train + c)
        rf_mse = float(np.mean((rf.predict(X) - c - y) ** 2))
        _, mse = grow(protocol, c)
        # same hyper-parameters, 32 bins, different bootstrap/feature draws: within 1.6x and
        # never the roots-only forest (MSE ~ var(y) ~ 0.6)
        assert mse < 1.6 * rf_mse + 0.02, f"c={c:g}: FedForest {mse:.4f} vs scikit-learn {rf_mse:.4f}"
