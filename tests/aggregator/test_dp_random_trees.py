"""The DP-TR anchor (Maddock et al. 2022): exact Newton leaves without noise, the noise the
accountant charges for, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aggregator.baselines.dp_random_trees import HESS_BOUND, DPRandomTrees
from aggregator.privacy.accountant import epsilon_of


def data(n: int = 600, k: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = np.digitize(X[:, 0], np.linspace(-0.6, 0.6, k - 1))
    return X, y


def test_noise_off_leaves_are_the_newton_steps_by_hand() -> None:
    X, y = data(k=2)
    cfg = DPRandomTrees(n_trees=2, max_depth=2, learning_rate=0.5, grad_clip=0.3, reg_lambda=2.0, epsilon=math.inf)
    model = cfg.fit(X, y, seed=4)
    assert model.sigma == 0.0 and model.feature.shape == (1, 2, 3) and model.leaf.shape == (1, 2, 4)
    margin = np.zeros(len(y))
    for t in range(2):
        f, thr = model.feature[0, t], model.threshold[0, t]
        # the tree by hand: root, then its left (1) or right (2) child
        right = X[:, f[0]] > thr[0]
        child = np.where(right, 2, 1)
        below = X[np.arange(len(y)), f[child]] > thr[child]
        leaf = 2 * (child - 1) + below
        p = 1 / (1 + np.exp(-margin))
        g, h = np.clip(p - (y == 1), -0.3, 0.3), p * (1 - p)
        expected = np.array([-0.5 * g[leaf == j].sum() / (h[leaf == j].sum() + 2.0) for j in range(4)])
        np.testing.assert_allclose(model.leaf[0, t], expected, rtol=0, atol=1e-12)
        margin += expected[leaf]
    np.testing.assert_allclose(model.margins(X)[:, 0], margin, rtol=0, atol=1e-12)


def test_the_noise_spends_exactly_the_budget_over_every_one_vs_rest_tree() -> None:
    X, y = data(k=3)
    cfg = DPRandomTrees(n_trees=10, max_depth=3, epsilon=1.0)
    model = cfg.fit(X, y, seed=0)
    queries = 3 * 10  # one-vs-rest: three boosters of ten trees, one query each
    rho = queries * (1.0 + HESS_BOUND**2) / (2 * model.sigma**2)
    assert epsilon_of(rho, 0.0, 1e-6) == pytest.approx(1.0, rel=1e-4)
    assert model.epsilon == pytest.approx(1.0, rel=1e-4)
    # more classes or trees, more noise per query: sigma grows as the square root of the queries
    assert cfg.sigma(4 * queries) == pytest.approx(2 * cfg.sigma(queries))


def test_same_seed_same_model_other_seed_other_model() -> None:
    X, y = data()
    cfg = DPRandomTrees(n_trees=5, max_depth=3, epsilon=2.0)
    a, b, c = cfg.fit(X, y, seed=7), cfg.fit(X, y, seed=7), cfg.fit(X, y, seed=8)
    np.testing.assert_array_equal(a.leaf, b.leaf)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    assert not np.array_equal(a.leaf, c.leaf)


def test_it_learns_with_a_generous_budget() -> None:
    X, y = data(n=20_000, k=3)
    model = DPRandomTrees(n_trees=30, max_depth=3, epsilon=8.0).fit(X, y, seed=0)
    assert np.mean(model.predict(X) == y) > 0.7
