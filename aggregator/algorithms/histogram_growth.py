"""FedSCS-XGB's server-side tree growth: one depth-limited regression tree from merged atoms.

After the atom phase the server holds, per distinct bin-id vector ("atom") ``r``: the bin ids
``bins[r]`` (``d`` features), the count ``W_r`` and, per class, the sums ``G_r``, ``H_r``. Lemma 1
of the paper: given the edges, growing from atoms *is* histogram XGBoost on the pooled data. This
module does that growth for one class (:func:`grow_tree`) or for every class of a round
(:func:`grow_trees`, the softmax tree group: one independent tree per class, as XGBoost's
``multi:softprob`` -- not the paper's summed-gain shared structure).

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
4. A candidate is valid iff both children hold atoms (``W > 0``), both have
   ``H >= min_child_weight`` and its Eq. 1 gain (``gamma`` already subtracted) is finite;
   the node splits iff the best valid gain is ``> 0``.
5. Tie-break among exactly equal gains (deterministic, and XGBoost's own order -- its ``hist``
   evaluator keeps the first of equal gains while scanning features in index order, each
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
   ``learning_rate * (-G / (H + lambda))`` (internal nodes too; inference reads only leaves) and
   ``cover = H``. Node sums are ``np.bincount`` sums over the node's atoms.

Numerics: float64 sums and gains; candidates are *compared* on the float32-rounded loss change
``2 (gain + gamma)``, exactly as XGBoost compares them. Gains that are equal in exact arithmetic
(frequent in round 1, where a sample's gradient depends only on its label) but computed with
different roundings then tie and the documented order decides; compared in float64 they would
be ranked by rounding noise (measured on the seglearn set with XGBoost's own cuts: 22 of 70 trees
equal to XGBoost's with float64 comparisons, 70 of 70 with float32). Two gains closer than a
float32 ulp but truly different also tie (XGBoost's behaviour, too).

Known differences from XGBoost 3.2 ``hist`` (same edges, same gradients):
* ``gamma`` here is Eq. 1's; XGBoost's ``min_split_loss`` is twice it (see
  :meth:`GrowthParams.from_xgboost`), and XGBoost also refuses loss changes ``<= 1e-6``.
* XGBoost's gradients are float32 (ours float64), so a near-tie can still fall on the other side
  of a float32 rounding boundary.
* XGBoost gives a *root* whose Hessian is below ``min_child_weight`` weight 0; here it gets
  ``-G/(H+lambda)`` like every node (children always satisfy ``min_child_weight``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from shared.model import Tree, TreeBuilder
from shared.splitting import check_edges, leaf_weight, split_gain

__all__ = ["GrownTree", "GrowthParams", "LevelSplits", "best_splits", "grow_tree", "grow_trees", "split_sides"]

#: Upper bound on (active atoms x features in one block) per bincount call, to bound memory.
BLOCK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class GrowthParams:
    """Tree-growth settings. ``gamma`` is Eq. 1's (half of XGBoost's ``min_split_loss``);
    ``min_child_weight`` bounds each child's Hessian sum. Defaults are XGBoost's."""

    max_depth: int = 6
    reg_lambda: float = 1.0
    gamma: float = 0.0
    min_child_weight: float = 1.0
    learning_rate: float = 0.3

    def __post_init__(self) -> None:
        if not (isinstance(self.max_depth, (int, np.integer)) and self.max_depth >= 0):
            raise ValueError(f"max_depth must be an int >= 0, got {self.max_depth!r}")
        for name in ("reg_lambda", "gamma", "min_child_weight", "learning_rate"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")

    @classmethod
    def from_xgboost(
        cls,
        *,
        max_depth: int = 6,
        reg_lambda: float = 1.0,
        min_split_loss: float = 0.0,
        min_child_weight: float = 1.0,
        learning_rate: float = 0.3,
    ) -> GrowthParams:
        """The settings equivalent to XGBoost's parameters of the same names (``gamma`` halved)."""
        return cls(
            max_depth=max_depth,
            reg_lambda=reg_lambda,
            gamma=min_split_loss / 2.0,
            min_child_weight=min_child_weight,
            learning_rate=learning_rate,
        )


@dataclass(frozen=True, eq=False)
class GrownTree:
    """A grown tree plus per-node statistics (indexed by the tree's node ids).

    ``tree``: scalar leaves (``n_outputs == 1``), ``cover`` = Hessian sums.
    ``gain``: Eq. 1 gain (gamma subtracted) of each split, NaN at leaves; XGBoost's
    ``loss_changes`` would be ``2 * (gain + gamma)``.
    ``split_bin``: the bin ``b`` of each split ("bins <= b left"), -1 at leaves.
    ``sum_grad``, ``sum_hess``, ``count``: node sums of G, H, W.
    ``atom_leaf``: the leaf node each input atom ends in.
    """

    tree: Tree
    gain: np.ndarray
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


def _stats(values: ArrayLike, n: int, name: str, *, nonneg: bool) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if v.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {v.shape}")
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
    """Grow one tree from atoms: ``bins`` ``(A, d)`` ints, ``grad``/``hess``/``counts`` ``(A,)``
    (``counts=None``: one sample per atom), ``edges`` one float array per feature."""
    layout = _Layout(bins, edges)
    return _grow(layout, grad, hess, counts, params)


def grow_trees(
    bins: ArrayLike,
    grad: ArrayLike,
    hess: ArrayLike,
    counts: ArrayLike | None,
    edges: Sequence[ArrayLike],
    params: GrowthParams,
) -> list[GrownTree]:
    """One tree per class (column) of ``grad``/``hess`` ``(A, K)``, sharing the validated layout.
    Tree ``k`` belongs to output ``k`` (``TreeEnsemble.tree_output``)."""
    layout = _Layout(bins, edges)
    g = np.asarray(grad, dtype=np.float64)
    h = np.asarray(hess, dtype=np.float64)
    if g.ndim != 2 or h.shape != g.shape:
        raise ValueError(f"grad and hess must both have shape (atoms, classes), got {g.shape} and {h.shape}")
    return [_grow(layout, g[:, k], h[:, k], counts, params) for k in range(g.shape[1])]


def _grow(layout: _Layout, grad: ArrayLike, hess: ArrayLike, counts: ArrayLike | None, params: GrowthParams) -> GrownTree:
    n_atoms = layout.n_atoms
    g = _stats(grad, n_atoms, "grad", nonneg=False)
    h = _stats(hess, n_atoms, "hess", nonneg=True)
    w = np.ones(n_atoms) if counts is None else _stats(counts, n_atoms, "counts", nonneg=True)
    lam, eta = params.reg_lambda, params.learning_rate

    builder = TreeBuilder(0.0)
    sums: dict[int, tuple[float, float, float]] = {}
    gains: dict[int, float] = {}
    split_bins: dict[int, int] = {}
    atom_leaf = np.full(n_atoms, -1, dtype=np.int64)
    position = np.zeros(n_atoms, dtype=np.int64)  # node position in the current level, -1 = done
    frontier = np.zeros(1, dtype=np.int64)  # tree node ids of the current level

    for depth in range(params.max_depth + 1):
        n_level = frontier.shape[0]
        active = np.flatnonzero(position >= 0)
        pos = position[active]
        node_g = np.bincount(pos, weights=g[active], minlength=n_level)
        node_h = np.bincount(pos, weights=h[active], minlength=n_level)
        node_w = np.bincount(pos, weights=w[active], minlength=n_level)
        for i, node in enumerate(frontier.tolist()):
            sums[node] = (float(node_g[i]), float(node_h[i]), float(node_w[i]))

        best = None
        if depth < params.max_depth and layout.max_edges > 0 and active.size:
            best = _best_splits(layout, active, pos, n_level, g, h, w, params)
        if best is None:
            atom_leaf[active] = frontier[pos]
            break
        feature, bin_, default_left, gain = best
        splits = gain > 0
        # Children of the k-th splitting node sit at positions 2k (left) and 2k+1 (right).
        rank = np.cumsum(splits) - 1
        next_frontier = np.empty(2 * int(splits.sum()), dtype=np.int64)
        for i in np.flatnonzero(splits).tolist():
            node = int(frontier[i])
            j, b = int(feature[i]), int(bin_[i])
            left, right = builder.split(node, j, float(layout.edges[j][b]), default_left=bool(default_left[i]))
            next_frontier[2 * rank[i]], next_frontier[2 * rank[i] + 1] = left, right
            gains[node] = float(gain[i])
            split_bins[node] = b

        done = ~splits[pos]
        atom_leaf[active[done]] = frontier[pos[done]]
        moving = active[~done]
        mpos = pos[~done]
        j = feature[mpos]
        value = layout.bins[moving, j]
        go_left = np.where(layout.missing[moving, j], default_left[mpos], value <= bin_[mpos])
        new_position = np.full(n_atoms, -1, dtype=np.int64)
        new_position[moving] = 2 * rank[mpos] + np.where(go_left, 0, 1)
        position = new_position
        frontier = next_frontier
        if frontier.size == 0:
            break

    n_nodes = builder.n_nodes
    sum_grad = np.array([sums[i][0] for i in range(n_nodes)])
    sum_hess = np.array([sums[i][1] for i in range(n_nodes)])
    count = np.array([sums[i][2] for i in range(n_nodes)])
    values = eta * leaf_weight(sum_grad, sum_hess, lam) + 0.0  # no -0.0
    for node in range(n_nodes):
        builder.set_value(node, values[node], cover=max(sum_hess[node], 0.0))
    gain_arr = np.full(n_nodes, np.nan)
    bin_arr = np.full(n_nodes, -1, dtype=np.int64)
    for node, value in gains.items():
        gain_arr[node] = value
        bin_arr[node] = split_bins[node]
    return GrownTree(
        tree=builder.build(),
        gain=gain_arr,
        split_bin=bin_arr,
        sum_grad=sum_grad,
        sum_hess=sum_hess,
        count=count,
        atom_leaf=atom_leaf,
    )


def _histograms(
    layout: _Layout, active: np.ndarray, pos: np.ndarray, n_level: int, stats: tuple[np.ndarray, ...]
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


def _best_splits(
    layout: _Layout,
    active: np.ndarray,
    pos: np.ndarray,
    n_level: int,
    g: np.ndarray,
    h: np.ndarray,
    w: np.ndarray,
    params: GrowthParams,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Best split of every node of a level: (feature, bin, default_left, gain), gain -inf if none."""
    hist_g, hist_h, hist_w = _histograms(layout, active, pos, n_level, (g, h, w))
    best = best_splits(hist_g, hist_h, hist_w, layout.candidate, params)
    return best.feature, best.bin, best.default_left, best.gain


@dataclass(frozen=True, eq=False)
class LevelSplits:
    """The best split of every node of a level (``gain`` -inf where none is valid) and the sums
    of G, H and W of the chosen left and right children (0 where there is no split)."""

    feature: np.ndarray
    bin: np.ndarray
    default_left: np.ndarray
    gain: np.ndarray
    left: np.ndarray  # (n_nodes, 3): G, H, W of the left child
    right: np.ndarray  # (n_nodes, 3)


def split_sides(hist: np.ndarray, n_cand: int) -> tuple[np.ndarray, np.ndarray]:
    """Left and right sums of every candidate of histograms ``(nodes, d, S)`` (present slots
    ``0..S-2``, the missing slot last), each ``(nodes, d, 2, n_cand)``; ``[..., 0, b]``: bins
    ``<= b`` left with missing right, ``[..., 1, b]``: missing left. Right = (present total -
    present left) + missing, so the two spellings of the split "missing vs all present values"
    (missing left below every present value, missing right above them) get bit-identical sums,
    hence gains, and the tie-break decides. Works on integer histograms too (exact)."""
    present = hist.shape[2] - 1
    cum = np.cumsum(hist[:, :, :present], axis=2)
    left = cum[:, :, :n_cand]
    right = cum[:, :, -1:] - left
    miss = hist[:, :, present][:, :, None]
    return np.stack([left, left + miss], axis=2), np.stack([right + miss, right], axis=2)


def best_splits(
    hist_g: np.ndarray,
    hist_h: np.ndarray,
    hist_w: np.ndarray,
    candidate: np.ndarray,
    params: GrowthParams,
    *,
    min_crowd: float = 0.0,
) -> LevelSplits:
    """Best split of every node from its per-feature histograms ``(nodes, d, S)`` of G, H and W
    (present slots ``0..S-2``, the missing slot last; ``candidate`` ``(d, S-2)`` marks the
    thresholds that exist). Rules and tie-breaks: the module docstring. ``min_crowd``: both
    children must count at least this many samples (the minimum crowd of private training).
    The atom and histogram protocols both grow through this function, so given the same sums
    they choose the same splits."""
    n_level = hist_g.shape[0]
    n_cand = hist_g.shape[2] - 2
    (gl, gr), (hl, hr), (wl, wr) = (split_sides(hist, n_cand) for hist in (hist_g, hist_h, hist_w))
    gain = split_gain(gl, hl, gr, hr, params.reg_lambda, params.gamma)
    mcw = params.min_child_weight
    valid = (
        candidate[None, :, None, :]
        & (wl > 0)
        & (wr > 0)
        & (wl >= min_crowd)
        & (wr >= min_crowd)
        & (hl >= mcw)
        & (hr >= mcw)
        & np.isfinite(gain)
    )
    # Candidates compete on XGBoost's loss change ``2 (gain + gamma)`` rounded to float32, as
    # XGBoost compares them: gains equal in exact arithmetic but computed with different roundings
    # (summation order, mirrored spellings) then tie, and the order below decides -- which is
    # what makes the same edges give XGBoost's trees. The split itself needs Eq. 1's gain > 0.
    key = np.where(valid, (2.0 * (gain + params.gamma)).astype(np.float32).astype(np.float64), -np.inf)
    gain = np.where(valid, gain, -np.inf)
    # Tie-break order along the flattened axis: feature, then direction (missing right first),
    # then bins ascending for missing-right and descending for missing-left; argmax keeps the first.
    flip = lambda a: np.concatenate([a[:, :, :1, :], a[:, :, 1:, ::-1]], axis=2).reshape(n_level, -1)  # noqa: E731
    rows = np.arange(n_level)
    if n_cand == 0:
        k = np.zeros(n_level, dtype=np.int64)
        best_gain = np.full(n_level, -np.inf)
    else:
        k = np.argmax(flip(key), axis=1)
        best_gain = flip(gain)[rows, k]
    feature, rest = np.divmod(k, 2 * max(n_cand, 1))
    direction, offset = np.divmod(rest, max(n_cand, 1))
    bin_ = np.where(direction == 0, offset, n_cand - 1 - offset)
    chosen = lambda side: flip(side)[rows, k] if n_cand else np.zeros(n_level)  # noqa: E731
    split = np.isfinite(best_gain)
    left = np.stack([np.where(split, chosen(s), 0) for s in (gl, hl, wl)], axis=1)
    right = np.stack([np.where(split, chosen(s), 0) for s in (gr, hr, wr)], axis=1)
    return LevelSplits(feature, bin_, direction == 1, best_gain, left, right)
