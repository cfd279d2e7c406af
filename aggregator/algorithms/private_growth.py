"""FedSCS-XGB's private growth: one boosting round's tree from noisy fleet sums only.

The server asks per depth level for the lattice histograms (G, H, count per node, round feature
and bin) of the nodes it must split, with distributed DP noise on every cell, and once per
round for the leaves' (G, H) sums. Everything else is post-processing of those releases, which
costs no privacy:

* **consistency** -- the slots of every feature of a node are shifted to add up to the node's
  total averaged over the features (:func:`consistent_histograms`: the least-squares projection
  onto histograms that agree);
* **sibling subtraction** -- of two children only the one with the smaller noisy count is asked
  for, the other is its parent's histogram minus it;
* **noise-aware split rule** -- :func:`~aggregator.algorithms.histogram_growth.best_splits`, the
  same rule as the other protocols, with a minimum child count of a few noise standard deviations
  (``min_count``) so that a split into a near-empty child is not chosen for its noise;
* **clipped leaves** -- leaf weights ``-G / (H + lambda)`` from the leaf release, 0 for a class
  whose noisy H is below ``min_child_weight``, clipped to ``+-leaf_clip`` before shrinkage.

``fetch_level(splits, node_ids)`` and ``fetch_leaves(splits, leaf_ids)`` are the only I/O; they
return the decoded noisy sums in natural units. Tests pass functions that sum pooled data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from shared.model import TreeBuilder
from shared.protocol.messages.fedscs_xgb import RoundSplits

from .histogram_growth import GrowthParams, best_splits, split_sides, vector_leaf_weights
from .levelwise_growth import RoundTree

__all__ = [
    "FetchLeaves",
    "FetchLevel",
    "PrivateGrowth",
    "consistent_histograms",
    "grow_private_tree",
    "level_violation",
]

#: Noise standard deviations beyond which a decoded cell cannot be noise (false alarm < 1e-14).
TAIL_SIGMAS = 8.0

#: ``fetch_level(splits, node_ids) -> (R, 2m + 1, k, S)`` float sums of the requested nodes.
FetchLevel = Callable[[RoundSplits, np.ndarray], np.ndarray]
#: ``fetch_leaves(splits, leaf_ids) -> (L, 2m)`` float G and H sums of the leaves.
FetchLeaves = Callable[[RoundSplits, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class PrivateGrowth:
    """The private round's settings: the tree rule (``params``), the round's ``features`` (job
    columns, ascending) with their ``edges``, the noise-aware minimum child count and the leaf
    clip (a weight's magnitude before shrinkage)."""

    params: GrowthParams
    features: np.ndarray
    edges: Sequence[np.ndarray]
    min_count: float
    leaf_clip: float


def consistent_histograms(hist: np.ndarray) -> np.ndarray:
    """Noisy histograms ``(..., k, S)`` made to agree: each feature's slots are shifted evenly so
    that they add up to the mean over features of the per-feature totals (the least-squares
    projection onto histograms whose features share one total).

    Examples
    --------
    >>> h = np.array([[1.0, 3.0], [2.0, 4.0]])  # two features, totals 4 and 6
    >>> consistent_histograms(h)
    array([[1.5, 3.5],
           [1.5, 3.5]])
    """
    h = np.asarray(hist, dtype=np.float64)
    totals = h.sum(axis=-1, keepdims=True)
    mean = totals.mean(axis=-2, keepdims=True)
    return h + (mean - totals) / h.shape[-1]


def level_violation(
    hist: np.ndarray, sigma: float, grad_bound: float, hess_bound: float, scale: int, grad_scale: float | None = None
) -> str | None:
    """What a decoded level release ``(R, 2m + 1, k, S)`` (natural units, noise deviation
    ``sigma`` per count and H cell, ``sigma * scale / grad_scale`` per G cell) shows that honest
    gateways cannot produce, or None: a count below 0, a G beyond ``grad_bound`` per window, an
    H below 0 or beyond ``hess_bound`` per window -- each by more than ``TAIL_SIGMAS`` noise
    deviations (a window's lattice values move by less than one step: ``1 / grad_scale`` of G,
    ``1 / scale`` of H; ``grad_scale`` None: ``scale``).

    Examples
    --------
    >>> h = np.zeros((1, 3, 1, 2)); h[0, 2] = 10.0; h[0, 0] = 5.0  # 10 windows, G = 5
    >>> level_violation(h, 1.0, 1.0, 0.25, 64) is None
    True
    >>> h[0, 0] = 500.0
    >>> level_violation(h, 1.0, 1.0, 0.25, 64)
    'a G sum of 500 over about 10 windows (each |g| <= 1)'
    """
    m = (hist.shape[1] - 1) // 2
    g_scale = float(scale if grad_scale is None else grad_scale)
    tail = TAIL_SIGMAS * sigma
    count = hist[:, -1]
    windows = np.maximum(count, 0.0)[:, None] + tail
    g, h = hist[:, :m], hist[:, m : 2 * m]
    if (count < -tail).any():
        return f"a window count of {float(count.min()):.4g}"
    over = np.abs(g) - ((grad_bound + 1.0 / g_scale) * windows + tail * scale / g_scale)
    if (over > 0).any():
        at = np.unravel_index(np.argmax(over), over.shape)
        return (
            f"a G sum of {float(g[at]):.4g} over about {float(count[at[0], at[2], at[3]]):.4g} windows "
            f"(each |g| <= {grad_bound:.4g})"
        )
    if (h < -tail).any() or (h - ((hess_bound + 1.0 / scale) * windows + tail) > 0).any():
        return f"an H sum outside [0, {hess_bound:.4g}] per window"
    return None


@dataclass(eq=False)
class _Node:
    node: int
    count: float = 0.0  # noisy window count
    hist: np.ndarray | None = None  # (2m + 1, k, S) natural units, consistent
    parent: _Node | None = None
    sibling: _Node | None = None

    @property
    def histogram(self) -> np.ndarray:
        """The node's consistent histogram (RuntimeError before its level filled it)."""
        if self.hist is None:
            raise RuntimeError(f"node {self.node} has no histogram yet")
        return self.hist


def grow_private_tree(
    growth: PrivateGrowth, n_outputs: int, fetch_level: FetchLevel, fetch_leaves: FetchLeaves
) -> RoundTree:
    """One round's tree (vector leaves when ``n_outputs > 1``) from noisy level histograms and a
    noisy leaf release (module docstring)."""
    params, features, m = growth.params, np.asarray(growth.features, dtype=np.int64), n_outputs
    n_edges = np.array([e.shape[0] for e in growth.edges], dtype=np.int64)
    n_cand = int(n_edges.max(initial=0))
    candidate = np.arange(n_cand)[None, :] < n_edges[:, None]
    builder = TreeBuilder(np.zeros(m))
    rows: list[tuple[int, int, int, int, int, int]] = []
    changes: dict[int, float] = {}
    leaves: list[int] = []
    frontier = [_Node(0)]
    for depth in range(params.max_depth if n_cand else 0):
        wanted = [n for n in frontier if n.parent is None or n.count >= 2 * growth.min_count]
        leaves += [n.node for n in frontier if n not in wanted]
        frontier = []
        if not wanted:
            break
        _fill(wanted, rows, fetch_level)
        hist = np.stack([n.histogram for n in wanted])
        hist_g, hist_h = (hist[:, :m], hist[:, m : 2 * m]) if m > 1 else (hist[:, 0], hist[:, 1])
        best = best_splits(hist_g, hist_h, hist[:, -1], candidate, params, min_crowd=growth.min_count)
        for i, node in enumerate(wanted):
            if not best.split[i]:
                leaves.append(node.node)
                continue
            j, b, dl = int(best.feature[i]), int(best.bin[i]), int(best.default_left[i])
            left_id, right_id = builder.split(
                node.node, int(features[j]), float(growth.edges[j][b]), default_left=bool(dl)
            )
            rows.append((node.node, int(features[j]), b, dl, left_id, right_id))
            hess = node.histogram[m : 2 * m].sum(axis=-1).mean(axis=-1)  # the node's H per output, over its features
            builder.set_value(node.node, np.zeros(m), cover=max(float(hess.sum()), 0.0))
            changes[node.node] = float(best.loss_change[i])
            left_counts, _ = split_sides(node.histogram[-1], n_cand)
            left_count = float(left_counts[j, dl, b])
            left = _Node(left_id, left_count, parent=node)
            right = _Node(right_id, node.count - left_count, parent=node, sibling=left)
            left.sibling = right
            frontier += [left, right]
    leaf_ids = np.array(sorted(leaves + [n.node for n in frontier]), dtype=np.int64)
    splits = _round_splits(rows)
    sums = np.asarray(fetch_leaves(splits, leaf_ids), dtype=np.float64).reshape(leaf_ids.shape[0], 2 * m)
    weights = np.clip(vector_leaf_weights(sums[:, :m], sums[:, m:], params), -growth.leaf_clip, growth.leaf_clip)
    for leaf, w, h in zip(leaf_ids.tolist(), weights, sums[:, m:]):
        builder.set_value(leaf, params.learning_rate * w + 0.0, cover=max(float(h.sum()), 0.0))
    loss_change = np.array([changes.get(i, np.nan) for i in range(builder.n_nodes)])
    return RoundTree(builder.build(), loss_change)


def _fill(wanted: list[_Node], rows: list, fetch_level: FetchLevel) -> None:
    """Give every wanted node its consistent histogram: fetch the root, the one of two wanted
    siblings with the smaller noisy count (the left on a tie) and every wanted node whose
    sibling is not wanted; subtract for the rest."""
    fetched: list[_Node] = []
    derived: list[tuple[_Node, _Node, _Node]] = []  # node, its parent, its fetched sibling
    for node in wanted:
        other = node.sibling
        if (
            other is None
            or node.parent is None
            or other not in wanted
            or (node.count, node.node) < (other.count, other.node)
        ):
            fetched.append(node)
        else:
            derived.append((node, node.parent, other))
    hists = consistent_histograms(fetch_level(_round_splits(rows), np.array([n.node for n in fetched])))
    for node, hist in zip(fetched, hists):
        node.hist = hist
        if node.parent is None:
            node.count = float(hist[-1].sum(axis=-1).mean())
    for node, parent, sibling in derived:
        node.hist = parent.histogram - sibling.histogram


def _round_splits(rows: list[tuple[int, int, int, int, int, int]]) -> RoundSplits:
    if not rows:
        return RoundSplits.empty()
    node, feature, bin_, default_left, left, right = (np.array(c, dtype=np.int64) for c in zip(*rows))
    return RoundSplits(np.zeros_like(node), node, feature, bin_, default_left.astype(np.uint8), left, right)
