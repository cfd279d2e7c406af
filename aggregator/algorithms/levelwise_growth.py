"""FedSCS-XGB's private growth: the trees of one boosting round, level by level, from fleet-summed
histograms only.

Where the atom protocol hands the server every window's bin-id vector, here the server asks, per
depth level, for the (G, H, count) histograms of the nodes it must split and reads everything
else off them:

* **sibling subtraction** -- of two children that both need histograms, only the one with fewer
  samples is asked for; the other is its parent's histogram minus it (exact: integers);
* **children's sums** -- a split's left and right (G, H, count) are partial sums of the parent's
  histogram, so nodes at the last level and nodes too small to split never cost a round;
* **minimum crowd** -- a split is valid only if both children count at least ``min_crowd``
  windows fleet-wide, so every released node sum covers at least that many windows;
* **children sum to their parent** -- with ``exact=True`` a fetched child's totals must be the
  ones its parent's histogram gave it (:func:`~aggregator.algorithms.sum_checks.parent_total_violation`; else
  :class:`~aggregator.algorithms.sum_checks.SumViolation`);
* **same split rule** -- :func:`~aggregator.algorithms.histogram_growth.best_splits`, the atom
  protocol's own, so given the same sums both protocols choose the same splits.

The histograms arrive as int64 fixed-point sums (``shared.histograms``); gains are computed on
the float64 values they stand for. ``fetch(splits, node_tree, node_id)`` is the only I/O: the
server half passes one that asks the fleet, tests one that sums pooled data.

Per node the statistics are ``G_0..G_{m-1}, H_0..H_{m-1}, count`` (``shared.histograms``): ``m =
1`` with one tree per output (the node's tree's output), ``m = K`` with
``multi_strategy="multi_output_tree"`` (one vector-leaf tree per round: every class's G and H).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from shared.model import Tree, TreeBuilder
from shared.histograms import dequantize
from shared.protocol.messages.fedscs_xgb import RoundSplits
from shared.splitting import check_edges, leaf_weight

from .histogram_growth import GrowthParams, best_splits, vector_leaf_weights
from .sum_checks import SumViolation, parent_total_violation

__all__ = ["Fetch", "RoundTree", "grow_round", "grow_round_with_gains"]

#: ``fetch(splits so far, node_tree, node_id) -> int64 (R, 2m + 1, d, S)`` histograms of the nodes.
Fetch = Callable[[RoundSplits, np.ndarray, np.ndarray], np.ndarray]


class _SplitRow(NamedTuple):
    """One split of the round so far, as :class:`RoundSplits` sends it (one column each)."""

    tree: int
    node: int
    feature: int
    bin: int
    default_left: int
    left: int
    right: int


@dataclass
class _Node:
    tree: int
    node: int
    total: np.ndarray  # int64 (2m + 1,): G, H (fixed point, m columns each), count
    hist: np.ndarray | None = None  # int64 (2m + 1, d, S)
    parent: _Node | None = None
    sibling: _Node | None = None

    @property
    def histogram(self) -> np.ndarray:
        """``hist``, once :func:`_fill_histograms` has set it (``RuntimeError`` before: a growth bug)."""
        if self.hist is None:
            raise RuntimeError(f"tree {self.tree} node {self.node}: its histogram is read before it is filled")
        return self.hist


@dataclass(frozen=True, eq=False)
class RoundTree:
    """A grown tree and XGBoost's loss change of each of its splits (NaN at leaves): what
    gain-based feature importances add up."""

    tree: Tree
    loss_change: np.ndarray


def grow_round(
    n_outputs: int,
    edges: Sequence[np.ndarray],
    params: GrowthParams,
    fetch: Fetch,
    *,
    frac_bits: int,
    min_crowd: int = 0,
) -> list[Tree]:
    """The trees of :func:`grow_round_with_gains` alone."""
    return [
        r.tree for r in grow_round_with_gains(n_outputs, edges, params, fetch, frac_bits=frac_bits, min_crowd=min_crowd)
    ]


def grow_round_with_gains(
    n_outputs: int,
    edges: Sequence[np.ndarray],
    params: GrowthParams,
    fetch: Fetch,
    *,
    frac_bits: int,
    min_crowd: int = 0,
    exact: bool = False,
) -> list[RoundTree]:
    """Grow the round's trees from the histograms ``fetch`` returns -- one per output, or one
    with ``n_outputs``-wide leaves (``params.multi_strategy="multi_output_tree"``, ``n_outputs >
    1``) -- each with the loss changes of its splits. ``exact``: the histograms are exact sums
    over one cohort, so a fetched child's totals must be those its parent's histogram gave it
    (else :class:`~aggregator.algorithms.sum_checks.SumViolation`); PAX's surrogate histograms
    are not."""
    edges = check_edges(edges)
    n_edges = np.array([e.shape[0] for e in edges], dtype=np.int64)
    n_cand = int(n_edges.max(initial=0))
    candidate = np.arange(n_cand)[None, :] < n_edges[:, None]
    vector = params.vector_leaves and n_outputs > 1
    n_trees, m = (1, n_outputs) if vector else (n_outputs, 1)
    builders = [TreeBuilder(np.zeros(m)) for _ in range(n_trees)]
    rows: list[_SplitRow] = []
    totals: dict[tuple[int, int], np.ndarray] = {}
    changes: dict[tuple[int, int], float] = {}
    min_split = max(2 * max(min_crowd, 1), 2)

    frontier = [_Node(k, 0, np.zeros(2 * m + 1, np.int64)) for k in range(n_trees)]
    for depth in range(params.max_depth + 1):
        if depth == 0:
            wanted = frontier
        elif depth == params.max_depth:
            wanted = []
        else:
            # a split needs two children of the minimum crowd (and, one output per tree, of
            # min_child_weight; vector leaves only zero a class's weight below it)
            wanted = [
                n
                for n in frontier
                if n.total[-1] >= min_split
                and (vector or dequantize(n.total[1], frac_bits) >= 2 * params.min_child_weight)
            ]
        _fill_histograms(wanted, rows, fetch, exact)
        for node in wanted if depth == 0 else ():
            node.total = node.histogram[:, 0, :].sum(axis=1)
        for node in frontier:
            totals[(node.tree, node.node)] = node.total
        if not wanted or n_cand == 0 or depth == params.max_depth:
            break
        fixed = np.stack([n.histogram for n in wanted])
        hist_g, hist_h = dequantize(fixed[:, :m], frac_bits), dequantize(fixed[:, m : 2 * m], frac_bits)
        if not vector:
            hist_g, hist_h = hist_g[:, 0], hist_h[:, 0]
        best = best_splits(hist_g, hist_h, fixed[:, -1].astype(np.float64), candidate, params, min_crowd=min_crowd)
        next_frontier: list[_Node] = []
        for i, node in enumerate(wanted):
            if not best.split[i]:
                continue
            j, b, dl = int(best.feature[i]), int(best.bin[i]), bool(best.default_left[i])
            left_id, right_id = builders[node.tree].split(node.node, j, float(edges[j][b]), default_left=dl)
            hist = node.histogram
            left = hist[:, j, : b + 1].sum(axis=1) + (hist[:, j, -1] if dl else 0)
            rows.append(_SplitRow(node.tree, node.node, j, b, int(dl), left_id, right_id))
            changes[(node.tree, node.node)] = float(best.loss_change[i])
            a = _Node(node.tree, left_id, left, parent=node)
            b_ = _Node(node.tree, right_id, node.total - left, parent=node)
            a.sibling, b_.sibling = b_, a
            next_frontier += [a, b_]
        frontier = next_frontier
        if not frontier:
            break
    for node in frontier:
        totals[(node.tree, node.node)] = node.total

    trees = []
    for k, builder in enumerate(builders):
        for node_id in range(builder.n_nodes):
            g, h = (
                dequantize(totals[(k, node_id)][:m], frac_bits),
                dequantize(totals[(k, node_id)][m : 2 * m], frac_bits),
            )
            weight = vector_leaf_weights(g, h, params) if vector else leaf_weight(g, h, params.reg_lambda)
            builder.set_value(node_id, params.learning_rate * weight + 0.0, cover=max(float(h.sum()), 0.0))
        loss_change = np.array([changes.get((k, node_id), np.nan) for node_id in range(builder.n_nodes)])
        trees.append(RoundTree(builder.build(), loss_change))
    return trees


def _fill_histograms(wanted: list[_Node], rows: list[_SplitRow], fetch: Fetch, exact: bool = False) -> None:
    """Give every wanted node its histogram: fetch the smaller of two wanted siblings (the left
    on a tie) and every wanted node whose sibling is not wanted; subtract for the rest."""
    wanted_ids = {id(n) for n in wanted}
    fetched: list[_Node] = []
    derived: list[tuple[_Node, _Node, _Node]] = []  # (node, its parent, its fetched sibling)
    for node in wanted:
        other, parent = node.sibling, node.parent
        if other is None or parent is None or id(other) not in wanted_ids:
            fetched.append(node)
        elif node.total[-1] < other.total[-1] or (node.total[-1] == other.total[-1] and node.node < other.node):
            fetched.append(node)
        else:
            derived.append((node, parent, other))
    if fetched:
        hists = np.asarray(
            fetch(
                _round_splits(rows),
                np.array([n.tree for n in fetched], np.int64),
                np.array([n.node for n in fetched], np.int64),
            ),
            dtype=np.int64,
        )
        for node, hist in zip(fetched, hists):
            node.hist = hist
        why = exact and parent_total_violation(hists, [None if n.parent is None else n.total for n in fetched])
        if why:
            raise SumViolation(why)
    for node, parent, sibling in derived:
        node.hist = parent.histogram - sibling.histogram


def _round_splits(rows: list[_SplitRow]) -> RoundSplits:
    if not rows:
        return RoundSplits.empty()
    tree, node, feature, bin_, default_left, left, right = (np.array(c, dtype=np.int64) for c in zip(*rows))
    return RoundSplits(tree, node, feature, bin_, default_left.astype(np.uint8), left, right)
