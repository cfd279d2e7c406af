"""The DP-TR anchor: Maddock et al., "Federated Boosted Decision Trees with Differential Privacy"
(ACM CCS 2022), its totally-random-trees configuration, reimplemented from the paper's description.

Gradient boosting of binary logistic models whose trees take no data to grow: every internal
node of a complete tree of depth ``max_depth`` splits on a feature drawn uniformly at random, at
a threshold drawn uniformly in that feature's public range. The data are queried once per tree:
each window's gradient is clipped to ``[-grad_clip, grad_clip]`` (its Hessian lies in
``[0, 1/4]``), and the fleet's (G, H) sums of every leaf are released with Gaussian noise. A
window sits in one leaf, so a tree is one query of L2 sensitivity ``sqrt(grad_clip**2 +
(1/4)**2)``; the leaves are Newton steps ``-G / (H + reg_lambda)`` times the learning rate.
Multiclass data are fit one-vs-rest, as the paper does: ``K`` binary boosters of ``n_trees``
trees each, so a training is ``K * n_trees`` Gaussian queries. Their zCDP costs add
(``rho = sensitivity**2 / (2 sigma**2)`` each), and the noise is set so that the total converts
to ``(epsilon, delta)`` with ``aggregator.privacy.accountant`` (Google's ``dp-accounting``):
central DP per window, the noise added once to the exact fleet sums (the paper's model of
secure aggregation). Feature ranges are public, as the paper assumes.

The defaults are the paper's recommended DP-TR setting as this reimplementation reads it
(Newton leaves, depth 4, gradients clipped at 1, regularisation 1); the tree count and learning
rate are parameters because the paper tunes them per data set and budget, and the benchmark
reports the best of a small grid per cell. This is a benchmark baseline computed from the
clients' arrays in one process; it does not run over WheelFed's transport.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(4000, 3)); y = (X[:, 0] > 0).astype(int)
>>> model = DPRandomTrees(n_trees=20, max_depth=2, epsilon=4.0).fit(X, y, seed=0)
>>> model.classes.tolist(), model.sigma > 0
([0, 1], True)
>>> bool(np.mean(model.predict(X) == y) > 0.6)
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..privacy.accountant import epsilon_of, rho_for_epsilon

__all__ = ["HESS_BOUND", "DPRandomTrees", "DPRandomTreesModel"]

#: The logistic loss's Hessian ``p (1 - p)`` lies in [0, 1/4].
HESS_BOUND = 0.25


@dataclass(frozen=True)
class DPRandomTreesModel:
    """A trained DP-TR ensemble: per class booster and tree, complete trees in heap order.

    ``feature`` and ``threshold`` are ``(K, T, 2**depth - 1)`` (node ``i``'s children are
    ``2i + 1`` and ``2i + 2``; a window goes right when its value is above the threshold),
    ``leaf`` is ``(K, T, 2**depth)``; ``base`` is the ``K`` boosters' starting margins.
    """

    classes: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    leaf: np.ndarray
    base: np.ndarray
    sigma: float
    epsilon: float
    delta: float

    def margins(self, X: np.ndarray) -> np.ndarray:
        """The ``(n, K)`` margins of ``X`` (one column per one-vs-rest booster)."""
        X = np.asarray(X, dtype=np.float64)
        out = np.tile(self.base, (X.shape[0], 1))
        for k in range(self.feature.shape[0]):
            out[:, k] += _route(X, self.feature[k], self.threshold[k], self.leaf[k])
        return out

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The class of the largest margin (a binary model: its one booster's sign)."""
        m = self.margins(X)
        if self.classes.size == 2:
            return self.classes[(m[:, 0] > 0).astype(np.int64)]
        return self.classes[np.argmax(m, axis=1)]


@dataclass(frozen=True)
class DPRandomTrees:
    """DP-TR settings: ``n_trees`` per one-vs-rest booster, complete trees of ``max_depth``,
    learning rate, gradient clip and L2 regularisation, and the per-window budget
    ``(epsilon, delta)`` of the whole training. ``epsilon=math.inf`` trains without noise."""

    n_trees: int = 50
    max_depth: int = 4
    learning_rate: float = 0.3
    grad_clip: float = 1.0
    reg_lambda: float = 1.0
    epsilon: float = 1.0
    delta: float = 1e-6

    def __post_init__(self) -> None:
        if self.n_trees < 1 or self.max_depth < 1:
            raise ValueError(f"n_trees and max_depth must be >= 1, got {self.n_trees}, {self.max_depth}")
        if not self.epsilon > 0 or not 0 < self.delta < 1:
            raise ValueError(f"epsilon must be > 0 and delta in (0, 1), got {self.epsilon}, {self.delta}")

    @property
    def sensitivity(self) -> float:
        """L2 norm of one window's change to a tree's released (G, H) leaf sums."""
        return math.hypot(self.grad_clip, HESS_BOUND)

    def sigma(self, n_queries: int) -> float:
        """The Gaussian standard deviation of each released sum when the training makes
        ``n_queries`` tree queries: their zCDP costs add up to the budget's ``rho``."""
        if math.isinf(self.epsilon):
            return 0.0
        rho = rho_for_epsilon(self.epsilon, self.delta)
        return self.sensitivity * math.sqrt(n_queries / (2.0 * rho))

    def spent(self, sigma: float, n_queries: int) -> float:
        """The epsilon (at ``delta``) that ``n_queries`` releases with noise ``sigma`` spend."""
        return epsilon_of(n_queries * self.sensitivity**2 / (2.0 * sigma**2), 0.0, self.delta)

    def fit(
        self, X: np.ndarray, y: np.ndarray, *, seed: int = 0, bounds: tuple[np.ndarray, np.ndarray] | None = None
    ) -> DPRandomTreesModel:
        """Train on the pooled windows ``X``, labels ``y`` (the exact fleet sums are what the
        paper's protocol releases, plus noise). ``bounds`` are the public per-feature ranges
        (default: the data's, assumed public as the paper does)."""
        X = np.asarray(X, dtype=np.float64)
        classes, labels = np.unique(np.asarray(y), return_inverse=True)
        if classes.size < 2:
            raise ValueError("DP-TR needs at least two classes")
        lo, hi = bounds if bounds is not None else (X.min(axis=0), X.max(axis=0))
        K = 1 if classes.size == 2 else classes.size
        targets = (labels[:, None] == (np.arange(K) + (classes.size == 2))[None, :]).astype(np.float64)
        sigma = self.sigma(K * self.n_trees)
        rng = np.random.default_rng(seed)
        n_inner, n_leaves = 2**self.max_depth - 1, 2**self.max_depth
        feature = rng.integers(0, X.shape[1], size=(K, self.n_trees, n_inner))
        threshold = lo[feature] + rng.random(feature.shape) * (hi - lo)[feature]
        leaf = np.zeros((K, self.n_trees, n_leaves))
        base = np.zeros(K)  # the paper starts every booster at margin 0
        margins = np.zeros((X.shape[0], K))
        for t in range(self.n_trees):
            for k in range(K):
                p = 0.5 * (1.0 + np.tanh(0.5 * margins[:, k]))  # the logistic, without overflow
                g = np.clip(p - targets[:, k], -self.grad_clip, self.grad_clip)
                h = p * (1.0 - p)
                slot = _leaf_of(X, feature[k, t], threshold[k, t])
                G = np.bincount(slot, weights=g, minlength=n_leaves) + sigma * rng.standard_normal(n_leaves)
                H = np.bincount(slot, weights=h, minlength=n_leaves) + sigma * rng.standard_normal(n_leaves)
                leaf[k, t] = -self.learning_rate * G / (np.maximum(H, 0.0) + self.reg_lambda)
                margins[:, k] += leaf[k, t][slot]
        spent = 0.0 if sigma == 0 else self.spent(sigma, K * self.n_trees)
        return DPRandomTreesModel(classes, feature, threshold, leaf, base, sigma, spent, self.delta)


def _leaf_of(X: np.ndarray, feature: np.ndarray, threshold: np.ndarray) -> np.ndarray:
    """Every row's leaf (0 .. 2**depth - 1) in one complete heap-ordered tree."""
    node = np.zeros(X.shape[0], dtype=np.int64)
    n_inner = feature.shape[0]
    rows = np.arange(X.shape[0])
    for _ in range(int(n_inner + 1).bit_length() - 1):  # the tree's depth
        node = 2 * node + 1 + (X[rows, feature[node]] > threshold[node])
    return node - n_inner


def _route(X: np.ndarray, feature: np.ndarray, threshold: np.ndarray, leaf: np.ndarray) -> np.ndarray:
    """The summed leaf values of one booster's trees for every row of ``X``."""
    out = np.zeros(X.shape[0])
    for t in range(feature.shape[0]):
        out += leaf[t][_leaf_of(X, feature[t], threshold[t])]
    return out
