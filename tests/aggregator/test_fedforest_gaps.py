"""FedForest splits in the middle of the gap between training values, as scikit-learn does
(on tiny clients, thresholds on the right-hand data value cost ~1 pp).

Oracle: tiny clients (every sketch holds all of its node's values) and enough bins for every
gap to be a candidate: one FedForest tree (paper's protocol, no bootstrap, every feature) equals
scikit-learn's ``DecisionTreeRegressor`` on the pooled rows -- partitions, leaf values and, where
the feature is the same, thresholds (midpoints, to 1e-12; on an exact tie between features
scikit-learn picks by a random feature order, FedForest the lower feature). And the training
partition never changes, proof or not (a client's node weight >= the sketch size: its sketch may
have skipped values, the threshold stays).
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.tree import DecisionTreeRegressor

import aggregator
from aggregator.algorithms import FedForest
from edge_client.training_data import ClientData


def tiny_clients(seed: int, n_clients: int = 6, n: int = 7, d: int = 3):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_clients):
        # float32 values: scikit-learn's trees compare in float32, FedForest in float64
        X = (rng.normal(size=(n, d)) + 0.3 * k).astype(np.float32).astype(np.float64)
        y = np.sin(2 * X[:, 0]) + X[:, 1] + rng.normal(scale=0.2, size=n)
        out.append(ClientData(f"gw-{k}", X, y))
    return out


def walk(tree, sk, X: np.ndarray, a: int = 0, b: int = 0) -> int:
    """Compare node ``a`` of FedForest's tree with node ``b`` of scikit-learn's on the rows ``X``
    reaching them; returns how many thresholds were compared."""
    if sk.children_left[b] == -1:
        assert tree.left[a] == -1
        assert tree.value[a][0] == pytest.approx(sk.value[b].ravel()[0], abs=1e-9)
        return 0
    f, g = int(tree.feature[a]), int(sk.feature[b])
    ours, theirs = X[:, f] < tree.threshold[a], X[:, g] <= sk.threshold[b]
    left, right = int(sk.children_left[b]), int(sk.children_right[b])
    compared = 0
    if f == g:
        np.testing.assert_array_equal(ours, theirs, err_msg=f"node {a}: another partition")
        assert float(tree.threshold[a]) == pytest.approx(float(sk.threshold[b]), rel=0, abs=1e-12), f"node {a}"
        compared = 1
    else:  # an exact tie between features broken differently: the same partition, maybe mirrored
        assert np.array_equal(ours, theirs) or np.array_equal(ours, ~theirs), f"node {a}: another partition"
        if not np.array_equal(ours, theirs):
            left, right = right, left
    return (
        compared
        + walk(tree, sk, X[ours], int(tree.left[a]), left)
        + walk(tree, sk, X[~ours], int(tree.right[a]), right)
    )


@pytest.mark.parametrize("seed", range(4))
def test_tiny_clients_split_in_the_middle_of_the_gap_like_scikit_learn(seed: int) -> None:
    clients = tiny_clients(seed)
    X = np.concatenate([c.X for c in clients])
    y = np.concatenate([c.y for c in clients])
    config = FedForest(
        protocol="sketches",
        task="regression",
        n_trees=1,
        max_depth=4,
        n_bins=64,
        bootstrap=False,
        max_features=None,
        min_samples_leaf=1,
    )
    model = aggregator.simulate(config, clients, seed=seed)
    sk = DecisionTreeRegressor(max_depth=4, random_state=0).fit(X, y).tree_
    assert walk(model.trees[0], sk, X) >= 8


@pytest.mark.parametrize("n_bins", [8, 64])
def test_moving_thresholds_into_gaps_never_changes_the_training_partition(n_bins: int) -> None:
    """With or without a proof from the sketches (clients of 80 rows exceed M = 8 at the top
    levels), every leaf's cover -- the pooled weight the protocol counted -- is the number of
    training rows the model routes there."""
    clients = tiny_clients(5, n_clients=3, n=80)
    X = np.concatenate([c.X for c in clients])
    config = FedForest(
        protocol="sketches",
        task="regression",
        n_trees=1,
        max_depth=6,
        n_bins=n_bins,
        bootstrap=False,
        max_features=None,
    )
    model = aggregator.simulate(config, clients, seed=0)
    tree = model.trees[0]
    leaves = model.leaves(X)[:, 0]
    assert (tree.left >= 0).sum() >= 10
    np.testing.assert_array_equal(np.bincount(leaves, minlength=tree.n_nodes)[tree.left < 0], tree.cover[tree.left < 0])
