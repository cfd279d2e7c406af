"""The "IBM tree" baseline of the FedGA-Tree paper: Truex et al. (2019)'s differentially private
federated decision tree, adapted to binary CART as that paper does (§IV-A 2).

One global tree for every client. The server grows it top-down from *noisy count queries*: at
each node the fleet's window count, and for every candidate split the class counts of its two
sides; leaves from the node's noisy class counts. The total budget ``epsilon`` is split evenly
over the ``max_depth + 1`` levels (sequential composition along a path, parallel composition
across the disjoint nodes of a level); within a level, half goes to the node count and half is
divided over the candidate splits, as §II-B of the FedGA paper describes. Candidates are the
edges of a few quantile bins per feature (the paper discretises with ``KBinsDiscretizer``,
5 quantile bins), given by the caller.

Noise model: Truex et al.'s hybrid protocol (threshold encryption + SMC) lets the fleet add one
Laplace draw to each *summed* query answer when all clients are honest and non-colluding (the
paper's assumption), so each answer here is the exact fleet sum plus one Laplace draw -- the
protocol's best case. This is a benchmark baseline computed from the clients' arrays in one
process; it does not run over WheelFed's transport and is not a way to train a deployed model.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(400, 3)); y = (X[:, 0] > 0).astype(int)
>>> tree = DPTree(max_depth=2, epsilon=1.0).fit([(X[:200], y[:200]), (X[200:], y[200:])],
...                                            edges=quantile_edges(X, 5), classes=(0, 1), seed=0)
>>> tree.kind, tree.classes
('single', (0, 1))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shared.model import Tree, TreeEnsemble

__all__ = ["DPTree", "quantile_edges"]


def quantile_edges(X: np.ndarray, n_bins: int = 5) -> list[np.ndarray]:
    """Inner edges of ``n_bins`` quantile bins per column (duplicates merged; a column with one
    value falls back to 2 uniform bins, as the paper's Appendix A does)."""
    edges = []
    for column in np.asarray(X, dtype=np.float64).T:
        column = column[np.isfinite(column)]
        inner = np.unique(np.quantile(column, np.linspace(0, 1, n_bins + 1)[1:-1])) if column.size else np.zeros(0)
        inner = inner[(inner > column.min()) & (inner <= column.max())] if column.size else inner
        if inner.size == 0 and column.size and column.max() > column.min():
            inner = np.array([(column.min() + column.max()) / 2])
        edges.append(inner)
    return edges


@dataclass(frozen=True)
class DPTree:
    """Truex et al.'s DP tree as a binary CART of depth ``max_depth`` (the paper tunes 6) under a
    total budget ``epsilon`` (the paper fixes 1)."""

    max_depth: int = 6
    epsilon: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_depth, int) or self.max_depth < 1:
            raise ValueError(f"max_depth must be an integer >= 1, got {self.max_depth!r}")
        if not self.epsilon > 0:
            raise ValueError(f"epsilon must be > 0, got {self.epsilon!r}")

    def fit(
        self,
        clients: Sequence[tuple[np.ndarray, np.ndarray]],
        *,
        edges: list[np.ndarray],
        classes: tuple,
        seed: int = 0,
    ) -> TreeEnsemble:
        """Grow the global tree from the clients' ``(X, y)``; ``edges[j]``: candidate thresholds
        of feature ``j`` (go left iff ``x < edge``)."""
        rng = np.random.default_rng(seed)
        X = np.concatenate([np.asarray(x, np.float64) for x, _ in clients])
        index = {c: i for i, c in enumerate(classes)}
        y = np.array([index[v] for v in np.concatenate([np.asarray(t) for _, t in clients]).tolist()])
        n_classes = len(classes)
        candidates = [(j, e) for j, column in enumerate(edges) for e in column.tolist()]
        feature = np.array([j for j, _ in candidates], np.int64)
        threshold = np.array([e for _, e in candidates])
        level_budget = self.epsilon / (self.max_depth + 1)
        split_scale = 1.0 / (level_budget / 2 / max(len(candidates), 1))
        onehot = np.eye(n_classes)[y]
        nodes: list[dict] = []

        def noisy(counts: np.ndarray, scale: float) -> np.ndarray:
            return np.maximum(counts + rng.laplace(0.0, scale, counts.shape), 0.0)

        def build(rows: np.ndarray, depth: int) -> int:
            node = len(nodes)
            nodes.append({})
            n_noisy = float(noisy(np.array([rows.size]), 2.0 / level_budget)[0])
            if depth == self.max_depth or n_noisy < 2 or not candidates:
                counts = noisy(onehot[rows].sum(axis=0), 2.0 / level_budget)  # the level's other half
                total = counts.sum()
                nodes[node] = {"value": counts / total if total > 0 else np.full(n_classes, 1.0 / n_classes)}
                return node
            left = (X[rows][:, feature] < threshold).astype(np.float64)  # (m, candidates)
            left_counts = noisy(left.T @ onehot[rows], split_scale)
            right_counts = noisy((1 - left).T @ onehot[rows], split_scale)
            n_left, n_right = left_counts.sum(axis=1), right_counts.sum(axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                proxy = np.where(n_left > 0, (left_counts**2).sum(axis=1) / n_left, 0.0) + np.where(
                    n_right > 0, (right_counts**2).sum(axis=1) / n_right, 0.0
                )
            best = int(np.argmax(proxy))
            go_left = X[rows, feature[best]] < threshold[best]
            nodes[node] = {
                "feature": int(feature[best]),
                "threshold": float(threshold[best]),
                "value": np.full(n_classes, 1.0 / n_classes),
            }
            nodes[node]["left"] = build(rows[go_left], depth + 1)
            nodes[node]["right"] = build(rows[~go_left], depth + 1)
            return node

        build(np.arange(X.shape[0]), 0)
        tree = Tree.from_arrays(
            [n.get("feature", -1) for n in nodes],
            [n.get("threshold", 0.0) for n in nodes],
            [n.get("left", -1) for n in nodes],
            [n.get("right", -1) for n in nodes],
            np.array([n["value"] for n in nodes]),
        )
        return TreeEnsemble(
            trees=(tree,),
            kind="single",
            link="identity",
            n_outputs=n_classes,
            feature_names=tuple(f"f{j}" for j in range(X.shape[1])),
            classes=tuple(classes),
            metadata={"algorithm": "dp_tree", "epsilon": self.epsilon, "max_depth": self.max_depth},
        )
