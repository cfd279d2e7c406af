"""FedForest learns where missing values go, xgboost-style: every numeric
split sends NaN to the side with the better pooled gain, and the model's ``default_left`` says so.

Oracle: a pooled (centralized) CART written here on the joined data with its NaNs -- every
(feature, given threshold, NaN left or right) candidate scored by the exact impurity decrease,
best gain first, ties to the lower feature, lower threshold, NaN right -- grows the same tree as
FedForest over the clients, in the paper's protocol (per-client summaries) and in the private
histogram protocol (fleet-summed histograms with a missing slot); predictions on rows with NaNs
agree. Before the fix NaN always went right.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedForest
from edge_client.training_data import ClientData
from shared.model import Tree

THRESHOLDS = np.arange(-2.0, 2.25, 0.25) + 0.125  # exact in float32 (the private edges' type)


def clients_with_dropouts(seed: int, task: str, n_clients: int = 4, n: int = 50, d: int = 3):
    """Feature 0 drops out (NaN) mostly on rows whose target is low: NaN carries information, so
    the best split on feature 0 sends it left, with the low side."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_clients):
        X = rng.normal(size=(n + 7 * k, d)) + 0.2 * k
        s = 1.5 * X[:, 0] - X[:, 1] + rng.normal(scale=0.3, size=X.shape[0])
        drop = (s < -0.5) & (rng.random(X.shape[0]) < 0.6) | (rng.random(X.shape[0]) < 0.05)
        X[drop, 0] = np.nan
        X[rng.random(X.shape[0]) < 0.08, 2] = np.nan  # uninformative dropouts
        y = s if task == "mse" else (s > 0.5).astype(int)
        out.append(ClientData(f"gw-{k}", X, y))
    return out


@dataclass
class Split:
    feature: int
    threshold: float
    default_left: bool
    left: "Split | float"
    right: "Split | float"


def impurity(y: np.ndarray, criterion: str) -> float:
    if criterion == "mse":
        return float(np.var(y)) if y.size else 0.0
    p = np.bincount(y.astype(int), minlength=2) / max(y.size, 1)
    return float(1.0 - (p * p).sum())


def leaf(y: np.ndarray, criterion: str):
    return float(y.mean()) if criterion == "mse" else tuple(np.bincount(y.astype(int), minlength=2) / y.size)


def pooled_cart(X: np.ndarray, y: np.ndarray, criterion: str, depth: int):
    """The centralized reference: exact gains of every (feature, threshold, NaN side)."""
    if depth == 0 or y.size < 2 or impurity(y, criterion) <= 1e-12:
        return leaf(y, criterion)
    parent = impurity(y, criterion)
    scored = []
    for j in range(X.shape[1]):
        missing = np.isnan(X[:, j])
        for t in THRESHOLDS:
            for nan_left in (False, True):
                go_left = (X[:, j] < t) | (missing & nan_left)
                n_l = int(go_left.sum())
                if n_l == 0 or n_l == y.size:
                    continue
                gain = (
                    parent
                    - n_l / y.size * impurity(y[go_left], criterion)
                    - (y.size - n_l) / y.size * impurity(y[~go_left], criterion)
                )
                scored.append((gain, j, float(t), nan_left, go_left))
    best = max((s[0] for s in scored), default=0.0)
    if best <= 1e-9 * max(parent, 1e-300):
        return leaf(y, criterion)
    # ties (equal partitions, mirrored splits): lower feature, lower threshold, NaN right
    gain, j, t, nan_left, go_left = min(
        (s for s in scored if s[0] >= best - 1e-9 * parent), key=lambda s: (s[1], s[2], s[3])
    )
    return Split(
        j,
        t,
        nan_left,
        pooled_cart(X[go_left], y[go_left], criterion, depth - 1),
        pooled_cart(X[~go_left], y[~go_left], criterion, depth - 1),
    )


def same_tree(tree: Tree, ref, node: int = 0) -> None:
    if not isinstance(ref, Split):
        assert tree.left[node] == -1, f"node {node} should be a leaf"
        value = tree.value[node]
        np.testing.assert_allclose(value[0] if np.ndim(ref) == 0 else value, ref, rtol=0, atol=1e-9)
        return
    assert tree.left[node] != -1, f"node {node} should split on feature {ref.feature}"
    assert (int(tree.feature[node]), float(tree.threshold[node]), bool(tree.default_left[node])) == (
        ref.feature,
        ref.threshold,
        ref.default_left,
    ), f"node {node}"
    same_tree(tree, ref.left, int(tree.left[node]))
    same_tree(tree, ref.right, int(tree.right[node]))


def count_default_left(ref) -> int:
    if not isinstance(ref, Split):
        return 0
    return int(ref.default_left) + count_default_left(ref.left) + count_default_left(ref.right)


def predict_ref(ref, x: np.ndarray):
    while isinstance(ref, Split):
        v = x[ref.feature]
        ref = ref.left if (v < ref.threshold or (np.isnan(v) and ref.default_left)) else ref.right
    return ref


@pytest.mark.parametrize("protocol", ["sketches", "histogram"])
@pytest.mark.parametrize("criterion", ["gini", "mse"])
@pytest.mark.parametrize("seed", range(3))
def test_default_direction_equals_the_pooled_reference(protocol: str, criterion: str, seed: int) -> None:
    clients = clients_with_dropouts(seed, criterion)
    X = np.concatenate([c.X for c in clients])
    y = np.concatenate([c.y for c in clients])
    depth = 3
    ref = pooled_cart(X, y, criterion, depth)
    task = "regression" if criterion == "mse" else "classification"
    config = FedForest(
        task=task,
        criterion=criterion,
        protocol=protocol,
        n_trees=1,
        max_depth=depth,
        bootstrap=False,
        max_features=None,
        thresholds=tuple(THRESHOLDS for _ in range(X.shape[1])),
        min_samples_leaf=1,
        min_crowd=0,
    )
    model = aggregator.simulate(config, clients, seed=seed)
    same_tree(model.trees[0], ref)
    # predictions on rows with NaNs follow the learned directions
    rng = np.random.default_rng(100 + seed)
    X_test = rng.normal(size=(200, X.shape[1]))
    X_test[rng.random(X_test.shape) < 0.3] = np.nan
    want = np.array([predict_ref(ref, x) for x in X_test], dtype=np.float64).reshape(200, -1)
    got = model.predict_proba(X_test) if task == "classification" else model.predict(X_test)
    np.testing.assert_allclose(np.asarray(got).reshape(200, -1), want, rtol=0, atol=1e-9)


def test_the_dropout_data_makes_nan_go_left_somewhere() -> None:
    """The oracle is not vacuous: the reference learns NaN-left splits on this data."""
    learned = 0
    for seed in range(3):
        for criterion in ("gini", "mse"):
            clients = clients_with_dropouts(seed, criterion)
            X = np.concatenate([c.X for c in clients])
            y = np.concatenate([c.y for c in clients])
            learned += count_default_left(pooled_cart(X, y, criterion, 3))
    assert learned >= 3
