"""Partial trees of a vertical Federated Forest and the two ways to predict with them.

Every party keeps the structure of every tree -- which nodes split, addressed by heap index
(root 0, children ``2i+1``/``2i+2``) -- but the feature and threshold only of the splits it
owns (paper §4.1, "Model Storage"). Prediction:

* **one round** (Alg. 3-4): each party routes its samples through its partial tree, taking both
  branches where it does not own the split (:func:`reachable_leaves`); the master intersects
  the parties' leaf sets (:func:`intersect_leaves`). Proposition 1: the intersection is exactly
  the leaf the complete tree gives -- one leaf per sample, which the code checks rather than
  trusts;
* **classical** (:func:`classical_leaves`): node by node, the owner of each split says where
  the samples at that node go -- one exchange per tree level.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MAX_DEPTH",
    "PartialTree",
    "classical_leaves",
    "intersect_leaves",
    "leaves_of",
    "owned_directions",
    "reachable_leaves",
]

#: Deepest tree the vertical forest grows: heap ids of depth-40 nodes fit int64 with room for the
#: tree number (the party packs (tree, node) into one int64 key).
MAX_DEPTH = 40


def leaves_of(split_nodes: np.ndarray) -> np.ndarray:
    """The leaves (ascending heap ids) of the tree whose internal nodes are ``split_nodes``."""
    split_nodes = np.asarray(split_nodes, dtype=np.int64)
    if not split_nodes.size:
        return np.zeros(1, dtype=np.int64)
    children = np.concatenate([2 * split_nodes + 1, 2 * split_nodes + 2])
    return np.sort(children[~np.isin(children, split_nodes)])


@dataclass(frozen=True, eq=False)
class PartialTree:
    """One party's copy of one tree: every internal node (ascending heap ids), and for the ones
    this party owns its local ``feature`` and ``threshold`` (-1 / NaN elsewhere).

    Examples
    --------
    >>> t = PartialTree(np.array([0, 2]), np.array([True, False]), np.array([1, -1]), np.array([0.5, np.nan]))
    >>> t.leaves.tolist()
    [1, 5, 6]
    >>> reachable_leaves(t, np.array([[0.0, 0.2], [0.0, 0.9]])).astype(int).tolist()
    [[1, 0, 0], [0, 1, 1]]
    """

    split_nodes: np.ndarray
    owned: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray

    def __post_init__(self) -> None:
        n = self.split_nodes.shape[0]
        if not (self.owned.shape == self.feature.shape == self.threshold.shape == (n,)):
            raise ValueError("split_nodes, owned, feature and threshold must have the same length")
        if n > 1 and (np.diff(self.split_nodes) <= 0).any():
            raise ValueError("split_nodes must be strictly increasing")

    @property
    def leaves(self) -> np.ndarray:
        return leaves_of(self.split_nodes)


def reachable_leaves(tree: PartialTree, X: np.ndarray) -> np.ndarray:
    """Alg. 3: ``(n_samples, n_leaves)`` bool -- the leaves each sample may reach given only
    this party's splits (both branches where it does not own the split)."""
    n = X.shape[0]
    reach = {0: np.ones(n, dtype=bool)}
    for node, owned, f, t in zip(
        tree.split_nodes.tolist(), tree.owned.tolist(), tree.feature.tolist(), tree.threshold.tolist()
    ):
        here = reach.pop(node)
        if owned:
            go_left = X[:, f] <= t
            reach[2 * node + 1], reach[2 * node + 2] = here & go_left, here & ~go_left
        else:
            reach[2 * node + 1] = reach[2 * node + 2] = here
    return np.column_stack([reach[leaf] for leaf in tree.leaves.tolist()])


def intersect_leaves(reaches: Sequence[np.ndarray]) -> np.ndarray:
    """Alg. 4 / Proposition 1: each sample's leaf position from the parties' leaf sets.
    Raises ``ValueError`` unless the intersection is exactly one leaf for every sample (the
    partial trees are of different forests, or a party's answer was altered)."""
    both = np.logical_and.reduce(list(reaches))
    count = both.sum(axis=1)
    if (count != 1).any():
        bad = int(np.flatnonzero(count != 1)[0])
        raise ValueError(
            f"the parties' leaf sets intersect in {int(count[bad])} leaves for sample {bad}, not 1: "
            "their partial trees do not belong to one forest"
        )
    return np.argmax(both, axis=1)


def owned_directions(tree: PartialTree, X: np.ndarray, node: int) -> np.ndarray:
    """Classical prediction, the owner's answer: whether each of ``X``'s samples goes left at
    ``node`` (which this party must own)."""
    at = np.searchsorted(tree.split_nodes, node)
    if at >= tree.split_nodes.size or tree.split_nodes[at] != node or not tree.owned[at]:
        raise ValueError(f"this party does not own node {node}")
    return X[:, int(tree.feature[at])] <= float(tree.threshold[at])


def classical_leaves(
    split_nodes: np.ndarray, owner: np.ndarray, n_samples: int, ask: Callable[[int, int, np.ndarray], np.ndarray]
) -> np.ndarray:
    """Classical per-node prediction: route every sample from the root, asking the owner of
    each split (``ask(party, node, sample_indices)`` -> go-left flags) level by level; returns
    each sample's leaf position (as :func:`intersect_leaves`)."""
    split_nodes = np.asarray(split_nodes, dtype=np.int64)
    position = np.zeros(n_samples, dtype=np.int64)
    for node, party in zip(split_nodes.tolist(), np.asarray(owner).tolist()):  # heap order: parents first
        here = np.flatnonzero(position == node)
        if here.size:
            go_left = ask(party, node, here)
            position[here] = np.where(go_left, 2 * node + 1, 2 * node + 2)
    return np.searchsorted(leaves_of(split_nodes), position)
