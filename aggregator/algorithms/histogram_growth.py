"""FedSCS-XGB's server-side tree growth: the trees of one boosting round from merged atoms.

After the atom phase the server holds, per distinct bin-id vector ("atom") ``r``: the bin ids
``bins[r]`` (``d`` features), the count ``W_r`` and, per class, the sums ``G_r``, ``H_r``. Lemma 1
of the paper: given the edges, growing from atoms *is* histogram XGBoost on the pooled data. This
module does that growth for one output (:func:`grow_tree`) or for every output of a round
(:func:`grow_trees`), with XGBoost's two multiclass strategies (``GrowthParams.multi_strategy``):

* ``"one_output_per_tree"`` (XGBoost's default, ``multi:softprob``'s tree group): one
  independent scalar-leaf tree per class;
* ``"multi_output_tree"`` (the paper's Alg. 1, XGBoost's ``multi_strategy="multi_output_tree"``):
  one tree per round whose splits maximise the gain summed over the classes and whose leaves are
  vectors of one weight per class.

Bins follow ``shared.sketches.bin_ids`` (bin ``b`` of feature ``j``: ``edges[j][b-1] <= x <
edges[j][b]``; NaN has the feature's missing id ``len(edges[j]) + 1``).

Algorithm (depth-wise, level by level):

1. Every atom carries the position of its node in the current level (or -1 once it is in a leaf).
2. One ``np.bincount`` per statistic builds the G/H/W histograms of *all nodes of the level and
   all features at once*: the key of (atom, feature) is ``node * d * S + feature * S + slot``
   with ``S = max_j n_j + 2`` slots per feature (present bins, padding, one missing slot). Large
   levels are processed in feature blocks to bound memory. No Python loop touches atoms.
3. Cumulative sums over present bins give, for every candidate "bins ``<= b`` go left"
   (threshold ``edges[j][b]``), the present left sums; present right = present total - left;
   the missing slot is added to the left (``default_left=True``) or to the right
   (``default_left=False``).
4. Every candidate gets XGBoost's *loss change* (its ``loss_chg``, the ``loss_changes`` of its
   model JSON): the bracket of Eq. 1 without the 1/2, ``G_L^2/(H_L+lambda) + G_R^2/(H_R+lambda)
   - G^2/(H+lambda)``. One output: a candidate is valid iff both children hold atoms (``W > 0``)
   and have ``H >= min_child_weight``. Vector leaves, as XGBoost 3.2's ``multi_output_tree``: a
   child's term is ``sum_k -w_k G_k`` with ``w_k`` its float32 weight for class ``k`` (0 where
   ``H_k < min_child_weight``), a candidate is valid iff both children hold atoms (so
   ``min_child_weight`` zeroes a class's weight instead of forbidding the split; XGBoost 3.4
   made it a bound on each child's mean Hessian instead). The best valid candidate splits its
   node iff its loss change is ``>= gamma`` and ``> 1e-6`` (XGBoost's ``min_split_loss`` and
   ``kRtEps``). Eq. 1's penalty is half of ``gamma``: Eq. 1's gain is ``loss_change / 2 -
   gamma / 2``, so "gain > 0" there is "loss change > gamma" here (XGBoost, and so we, split on
   equality too).
5. Tie-break among exactly equal loss changes (deterministic, and XGBoost's own order -- its
   ``hist`` evaluator keeps the first of equal gains while scanning features in index order, each
   feature first "forward" (missing right, bins ascending) then "backward" (missing left, bins
   descending); assumption A4 of the paper asks for exactly this agreement):
   (a) the lowest feature index; (b) missing-right (``default_left=False``) before missing-left;
   (c) for missing-right the lowest bin, for missing-left the highest bin. Thus a node without
   missing values (both directions tie) gets ``default_left=False`` like in XGBoost, and among
   thresholds producing the same partition (empty bins) XGBoost's choice is made. The one
   partition with two mirrored spellings, "missing vs all present values", is computed with
   bit-identical sums both ways (step 3) and so resolves by the rule above (missing-right with
   the lowest edge above every present value, when such an edge exists), not by rounding noise;
   XGBoost computes the two spellings with different roundings.
6. Children are numbered breadth-first (``TreeBuilder``: right = left + 1). Every node gets value
   ``learning_rate * (-G / (H + lambda))`` (internal nodes too; inference reads only leaves; a
   vector leaf's class with ``H_k < min_child_weight`` gets 0, as in XGBoost) and ``cover = H``
   (summed over the classes for vector leaves). Node sums are ``np.bincount`` sums over the
   node's atoms.

Numerics: float64 sums and loss changes; candidates are *compared* on the loss change rounded to
float32, exactly as XGBoost compares them. Gains that are equal in exact arithmetic (frequent in
round 1, where a sample's gradient depends only on its label) but computed with different
roundings then tie and the documented order decides; compared in float64 they would be ranked by
rounding noise (measured on the seglearn set with XGBoost's own cuts: 22 of 70 trees equal to
XGBoost's with float64 comparisons, 70 of 70 with float32). Two gains closer than a float32 ulp
but truly different also tie (XGBoost's behaviour, too).

Known differences from XGBoost 3.2 ``hist`` (same edges, same gradients):

* XGBoost's gradients are float32 (ours float64), so a near-tie can still fall on the other side
  of a float32 rounding boundary.
* One output per tree: XGBoost gives a *root* whose Hessian is below ``min_child_weight`` weight
  0; here it gets ``-G/(H+lambda)`` like every node (children always satisfy
  ``min_child_weight``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from shared.model import Tree, TreeBuilder
from shared.splitting import check_edges, leaf_weight, split_gain

__all__ = [
    "MULTI_STRATEGIES",
    "GrownTree",
    "GrowthParams",
    "LevelSplits",
    "best_splits",
    "grow_tree",
    "grow_trees",
    "split_sides",
    "vector_leaf_weights",
]

#: Upper bound on (active atoms x features in one block) per bincount call, to bound memory.
BLOCK_ELEMENTS = 1 << 22
#: XGBoost's ``kRtEps``: no split whose (float32) loss change is not above it.
RT_EPS = 1e-6
#: XGBoost's ``multi_strategy`` values: one scalar-leaf tree per class, or one vector-leaf tree.
MULTI_STRATEGIES = ("one_output_per_tree", "multi_output_tree")
MultiStrategy = Literal["one_output_per_tree", "multi_output_tree"]


@dataclass(frozen=True)
class GrowthParams:
    """Tree-growth settings, with XGBoost's names, meanings and defaults.

    ``gamma`` is XGBoost's ``gamma``/``min_split_loss``: a node splits iff its best loss change
    (the bracket of Eq. 1, without the 1/2) is ``>= gamma`` (and ``> 1e-6``). The same number
    given to ``xgboost.train`` grows the same trees. Eq. 1's split penalty is ``gamma / 2``.
    ``min_child_weight`` bounds each child's Hessian sum (vector leaves: see the module
    docstring). ``multi_strategy``: one tree per output, or one vector-leaf tree per round.
    """

    max_depth: int = 6
    reg_lambda: float = 1.0
    gamma: float = 0.0
    min_child_weight: float = 1.0
    learning_rate: float = 0.3
    multi_strategy: MultiStrategy = "one_output_per_tree"

    def __post_init__(self) -> None:
        if not (isinstance(self.max_depth, (int, np.integer)) and self.max_depth >= 0):
            raise ValueError(f"max_depth must be an int >= 0, got {self.max_depth!r}")
        for name in ("reg_lambda", "gamma", "min_child_weight", "learning_rate"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float, np.number)) and np.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
        if self.multi_strategy not in MULTI_STRATEGIES:
            raise ValueError(f"multi_strategy must be one of {MULTI_STRATEGIES}, got {self.multi_strategy!r}")

    @property
    def vector_leaves(self) -> bool:
        return self.multi_strategy == "multi_output_tree"

    def splits(self, loss_change: np.ndarray) -> np.ndarray:
        """Whether a node whose best candidate has ``loss_change`` splits: XGBoost's rule on the
        float32 loss change (``> kRtEps`` and ``>= min_split_loss``, both float32)."""
        key = np.asarray(loss_change, dtype=np.float64).astype(np.float32)
        return (key > np.float32(RT_EPS)) & (key >= np.float32(self.gamma))


@dataclass(frozen=True, eq=False)
class GrownTree:
    """A grown tree plus per-node statistics (indexed by the tree's node ids).

    ``tree``: ``K``-wide leaves (``K`` = 1 unless vector leaves), ``cover`` = Hessian sums.
    ``loss_change``: XGBoost's ``loss_changes`` of each split (twice Eq. 1's gain before the
    penalty), NaN at leaves; what gain-based feature importances add up.
    ``split_bin``: the bin ``b`` of each split ("bins <= b left"), -1 at leaves.
    ``sum_grad``, ``sum_hess``: node sums of G, H, ``(n_nodes, K)``; ``count``: of W.
    ``atom_leaf``: the leaf node each input atom ends in.
    """

    tree: Tree
    loss_change: np.ndarray
    split_bin: np.ndarray
    sum_grad: np.ndarray
    sum_hess: np.ndarray
    count: np.ndarray
    atom_leaf: np.ndarray


class _Layout:
    """Validated atom bins and the flat histogram slot of every (atom, feature)."""

    def __init__(self, bins: ArrayLike, edges: Sequence[ArrayLike]) -> None:
        b = np.asarray(bins)
        if b.ndim != 2:
            raise ValueError(f"bins must be 2-D (atoms, features), got shape {b.shape}")
        if b.dtype.kind not in "iu":
            raise ValueError(f"bins must be integers, got dtype {b.dtype}")
        self.edges = check_edges(edges)
        self.n_atoms, self.d = b.shape
        if len(self.edges) != self.d:
            raise ValueError(f"{len(self.edges)} edge arrays for {self.d} features")
        self.n_edges = np.array([e.shape[0] for e in self.edges], dtype=np.int64)
        self.max_edges = int(self.n_edges.max(initial=0))
        b = b.astype(np.int64)
        self.bins = b
        self.missing = b == (self.n_edges + 1)[None, :]
        bad = ~self.missing & ((b < 0) | (b > self.n_edges[None, :]))
        if bad.any():
            a, j = (int(v[0]) for v in np.nonzero(bad))
            raise ValueError(f"atom {a}: bin id {int(b[a, j])} of feature {j} is outside 0..{int(self.n_edges[j])}")
        self.n_present = self.max_edges + 1  # present slots 0..max_edges
        self.slots = self.n_present + 1  # plus the missing slot (index n_present)
        self.slot = np.where(self.missing, self.n_present, b)  # (A, d)
        # Candidate b (0..max_edges-1) exists for feature j iff b < n_edges[j].
        self.candidate = np.arange(self.max_edges)[None, :] < self.n_edges[:, None]  # (d, max_edges)


def _stats(values: ArrayLike, shape: tuple[int, ...], name: str, *, nonneg: bool) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if v.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {v.shape}")
    if not np.isfinite(v).all() or (nonneg and (v < 0).any()):
        raise ValueError(f"{name} must be finite{' and >= 0' if nonneg else ''}")
    return v


def grow_tree(
    bins: ArrayLike,
    grad: ArrayLike,
    hess: ArrayLike,
    counts: ArrayLike | None,
    edges: Sequence[ArrayLike],
    params: GrowthParams,
) -> GrownTree:
    """Grow one scalar-leaf tree from atoms: ``bins`` ``(A, d)`` ints, ``grad``/``hess``/``counts``
    ``(A,)`` (``counts=None``: one sample per atom), ``edges`` one float array per feature."""
    layout = _Layout(bins, edges)
    n = layout.n_atoms
    g = _stats(grad, (n,), "grad", nonneg=False)[:, None]
    h = _stats(hess, (n,), "hess", nonneg=True)[:, None]
    return _grow(layout, g, h, counts, params, vector=False)


def grow_trees(
    bins: ArrayLike,
    grad: ArrayLike,
    hess: ArrayLike,
    counts: ArrayLike | None,
    edges: Sequence[ArrayLike],
    params: GrowthParams,
) -> list[GrownTree]:
    """The round's trees for ``grad``/``hess`` ``(A, K)``, sharing the validated layout: one
    tree per column (tree ``k`` belongs to output ``k``, ``TreeEnsemble.tree_output``), or with
    ``params.multi_strategy="multi_output_tree"`` and ``K > 1`` one tree with ``K``-wide leaves
    (``tree_output`` -1)."""
    layout = _Layout(bins, edges)
    g = np.asarray(grad, dtype=np.float64)
    h = np.asarray(hess, dtype=np.float64)
    if g.ndim != 2 or h.shape != g.shape:
        raise ValueError(f"grad and hess must both have shape (atoms, classes), got {g.shape} and {h.shape}")
    shape = (layout.n_atoms, g.shape[1])
    g = _stats(g, shape, "grad", nonneg=False)
    h = _stats(h, shape, "hess", nonneg=True)
    if params.vector_leaves and g.shape[1] > 1:
        return [_grow(layout, g, h, counts, params, vector=True)]
    return [_grow(layout, g[:, k : k + 1], h[:, k : k + 1], counts, params, vector=False) for k in range(g.shape[1])]


def vector_leaf_weights(grad: np.ndarray, hess: np.ndarray, params: GrowthParams) -> np.ndarray:
    """XGBoost 3.2's weights of vector leaves (unscaled), per class on the last axis:
    ``-G / (H + lambda)``, 0 where ``H < min_child_weight`` or ``H <= 0``."""
    g = np.asarray(grad, dtype=np.float64)
    h = np.asarray(hess, dtype=np.float64)
    usable = (h >= params.min_child_weight) & (h > 0)
    return np.where(usable, leaf_weight(g, h, params.reg_lambda), 0.0)


def _grow(
    layout: _Layout, g: np.ndarray, h: np.ndarray, counts: ArrayLike | None, params: GrowthParams, *, vector: bool
) -> GrownTree:
    """One tree from the ``(A, K)`` statistics: ``K`` = 1 (scalar leaves) or vector leaves."""
    n_atoms, K = g.shape
    w = np.ones(n_atoms) if counts is None else _stats(counts, (n_atoms,), "counts", nonneg=True)
    builder = TreeBuilder(np.zeros(K))
    sums_g: dict[int, np.ndarray] = {}
    sums_h: dict[int, np.ndarray] = {}
    sums_w: dict[int, float] = {}
    changes: dict[int, float] = {}
    split_bins: dict[int, int] = {}
    atom_leaf = np.full(n_atoms, -1, dtype=np.int64)
    position = np.zeros(n_atoms, dtype=np.int64)  # node position in the current level, -1 = done
    frontier = np.zeros(1, dtype=np.int64)  # tree node ids of the current level

    for depth in range(params.max_depth + 1):
        n_level = frontier.shape[0]
        active = np.flatnonzero(position >= 0)
        pos = position[active]
        node_g = np.stack([np.bincount(pos, weights=g[active, k], minlength=n_level) for k in range(K)], axis=1)
        node_h = np.stack([np.bincount(pos, weights=h[active, k], minlength=n_level) for k in range(K)], axis=1)
        node_w = np.bincount(pos, weights=w[active], minlength=n_level)
        for i, node in enumerate(frontier.tolist()):
            sums_g[node], sums_h[node], sums_w[node] = node_g[i], node_h[i], float(node_w[i])

        if depth == params.max_depth or layout.max_edges == 0 or not active.size:
            atom_leaf[active] = frontier[pos]
            break
        columns = [g[:, k] for k in range(K)] + [h[:, k] for k in range(K)] + [w]
        hists = _histograms(layout, active, pos, n_level, columns)
        hist_g, hist_h = np.stack(hists[:K], axis=1), np.stack(hists[K : 2 * K], axis=1)
        if not vector:
            hist_g, hist_h = hist_g[:, 0], hist_h[:, 0]
        best = best_splits(hist_g, hist_h, hists[-1], layout.candidate, params)
        splits = best.split
        # Children of the k-th splitting node sit at positions 2k (left) and 2k+1 (right).
        rank = np.cumsum(splits) - 1
        next_frontier = np.empty(2 * int(splits.sum()), dtype=np.int64)
        for i in np.flatnonzero(splits).tolist():
            node = int(frontier[i])
            j, b = int(best.feature[i]), int(best.bin[i])
            left, right = builder.split(node, j, float(layout.edges[j][b]), default_left=bool(best.default_left[i]))
            next_frontier[2 * rank[i]], next_frontier[2 * rank[i] + 1] = left, right
            changes[node] = float(best.loss_change[i])
            split_bins[node] = b

        done = ~splits[pos]
        atom_leaf[active[done]] = frontier[pos[done]]
        moving = active[~done]
        mpos = pos[~done]
        j = best.feature[mpos]
        value = layout.bins[moving, j]
        go_left = np.where(layout.missing[moving, j], best.default_left[mpos], value <= best.bin[mpos])
        new_position = np.full(n_atoms, -1, dtype=np.int64)
        new_position[moving] = 2 * rank[mpos] + np.where(go_left, 0, 1)
        position = new_position
        frontier = next_frontier
        if frontier.size == 0:
            break

    n_nodes = builder.n_nodes
    sum_grad = np.array([sums_g[i] for i in range(n_nodes)]).reshape(n_nodes, K)
    sum_hess = np.array([sums_h[i] for i in range(n_nodes)]).reshape(n_nodes, K)
    count = np.array([sums_w[i] for i in range(n_nodes)])
    weights = (
        vector_leaf_weights(sum_grad, sum_hess, params)
        if vector
        else leaf_weight(sum_grad, sum_hess, params.reg_lambda)
    )
    values = params.learning_rate * weights + 0.0  # no -0.0
    for node in range(n_nodes):
        builder.set_value(node, values[node], cover=max(float(sum_hess[node].sum()), 0.0))
    change_arr = np.full(n_nodes, np.nan)
    bin_arr = np.full(n_nodes, -1, dtype=np.int64)
    for node, value in changes.items():
        change_arr[node] = value
        bin_arr[node] = split_bins[node]
    return GrownTree(
        tree=builder.build(),
        loss_change=change_arr,
        split_bin=bin_arr,
        sum_grad=sum_grad,
        sum_hess=sum_hess,
        count=count,
        atom_leaf=atom_leaf,
    )


def _histograms(
    layout: _Layout, active: np.ndarray, pos: np.ndarray, n_level: int, stats: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """Per-level histograms ``(n_level, d, S)`` of each statistic, by flattened bincount."""
    d, slots = layout.d, layout.slots
    out = [np.empty((n_level, d, slots)) for _ in stats]
    block = max(1, BLOCK_ELEMENTS // max(1, active.size))
    for start in range(0, d, block):
        stop = min(d, start + block)
        width = stop - start
        key = (pos[:, None] * (width * slots) + np.arange(width) * slots + layout.slot[active, start:stop]).ravel()
        size = n_level * width * slots
        for target, v in zip(out, stats):
            hist = np.bincount(key, weights=np.repeat(v[active], width), minlength=size)
            target[:, start:stop, :] = hist.reshape(n_level, width, slots)
    return out


@dataclass(frozen=True, eq=False)
class LevelSplits:
    """The best candidate of every node of a level: ``feature``, ``bin``, ``default_left``, its
    ``loss_change`` (-inf where no candidate is valid) and whether the node splits on it
    (``split``)."""

    feature: np.ndarray
    bin: np.ndarray
    default_left: np.ndarray
    loss_change: np.ndarray
    split: np.ndarray


def split_sides(hist: np.ndarray, n_cand: int) -> tuple[np.ndarray, np.ndarray]:
    """Left and right sums of every candidate of histograms ``(..., d, S)`` (present slots
    ``0..S-2``, the missing slot last), each ``(..., d, 2, n_cand)``; ``[..., 0, b]``: bins
    ``<= b`` left with missing right, ``[..., 1, b]``: missing left. Right = (present total -
    present left) + missing, so the two spellings of the split "missing vs all present values"
    (missing left below every present value, missing right above them) get bit-identical sums,
    hence gains, and the tie-break decides. Works on integer histograms too (exact)."""
    present = hist.shape[-1] - 1
    cum = np.cumsum(hist[..., :present], axis=-1)
    left = cum[..., :n_cand]
    right = cum[..., -1:] - left
    miss = hist[..., present][..., None]
    return np.stack([left, left + miss], axis=-2), np.stack([right + miss, right], axis=-2)


def _child_terms(grad: np.ndarray, hess: np.ndarray, params: GrowthParams) -> np.ndarray:
    """XGBoost 3.2's vector-leaf gain term of children, ``sum_k -w_k G_k`` with ``w_k`` the
    float32 weight, classes on axis 1 summed in order (as its double accumulator does)."""
    w = vector_leaf_weights(grad, hess, params).astype(np.float32).astype(np.float64)
    total = np.zeros(grad.shape[:1] + grad.shape[2:])
    for k in range(grad.shape[1]):
        total = total + -w[:, k] * grad[:, k]
    return total


def best_splits(
    hist_g: np.ndarray,
    hist_h: np.ndarray,
    hist_w: np.ndarray,
    candidate: np.ndarray,
    params: GrowthParams,
    *,
    min_crowd: float = 0.0,
) -> LevelSplits:
    """Best split of every node from its per-feature histograms of G and H -- ``(nodes, d, S)``,
    or ``(nodes, K, d, S)`` for vector leaves -- and W ``(nodes, d, S)`` (present slots
    ``0..S-2``, the missing slot last; ``candidate`` ``(d, S-2)`` marks the thresholds that
    exist). Rules and tie-breaks: the module docstring. ``min_crowd``: both children must count
    at least this many samples (the minimum crowd of private training). The atom and histogram
    protocols both grow through this function, so given the same sums they choose the same
    splits."""
    n_level = hist_g.shape[0]
    n_cand = hist_g.shape[-1] - 2
    (gl, gr), (hl, hr), (wl, wr) = (split_sides(hist, n_cand) for hist in (hist_g, hist_h, hist_w))
    valid = candidate[None, :, None, :] & (wl > 0) & (wr > 0) & (wl >= min_crowd) & (wr >= min_crowd)
    if hist_g.ndim == 4:  # vector leaves: XGBoost 3.2's multi-target evaluator
        total_g, total_h = hist_g[:, :, 0, :].sum(axis=-1), hist_h[:, :, 0, :].sum(axis=-1)
        parent = _child_terms(total_g, total_h, params)
        change = _child_terms(gl, hl, params) + _child_terms(gr, hr, params) - parent[:, None, None, None]
    else:
        # XGBoost's loss change is twice Eq. 1's gain (before the penalty): exact in float64.
        change = 2.0 * split_gain(gl, hl, gr, hr, params.reg_lambda)
        mcw = params.min_child_weight
        valid &= (hl >= mcw) & (hr >= mcw) & np.isfinite(change)
    # Candidates compete on XGBoost's loss change rounded to float32, as XGBoost compares them:
    # gains equal in exact arithmetic but computed with different roundings (summation order,
    # mirrored spellings) then tie, and the order below decides -- which is what makes the same
    # edges give XGBoost's trees.
    key = np.where(valid, change.astype(np.float32).astype(np.float64), -np.inf)
    change = np.where(valid, change, -np.inf)
    # Tie-break order along the flattened axis: feature, then direction (missing right first),
    # then bins ascending for missing-right and descending for missing-left; argmax keeps the first.
    flip = lambda a: np.concatenate([a[:, :, :1, :], a[:, :, 1:, ::-1]], axis=2).reshape(n_level, -1)  # noqa: E731
    rows = np.arange(n_level)
    if n_cand == 0:
        k = np.zeros(n_level, dtype=np.int64)
        best_change = np.full(n_level, -np.inf)
    else:
        k = np.argmax(flip(key), axis=1)
        best_change = flip(change)[rows, k]
    feature, rest = np.divmod(k, 2 * max(n_cand, 1))
    direction, offset = np.divmod(rest, max(n_cand, 1))
    bin_ = np.where(direction == 0, offset, n_cand - 1 - offset)
    return LevelSplits(feature, bin_, direction == 1, best_change, params.splits(best_change))
