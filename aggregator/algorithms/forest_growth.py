"""FedForest's server-side maths: candidates from sketches, exact pooled gains, best splits.

Pure functions over arrays, used level by level by ``fedforest.py``:

* :func:`mixture_thresholds` -- §3.1: each client's M+1 quantile points define a piecewise-linear
  CDF; the node's pooled CDF is their mixture weighted by ``n_{nu,k} / n_nu`` (Eq. 4), and the
  candidates are its inverse at ``b/B``, ``b = 1..B-1`` (never averages of quantiles). Within
  1/B in rank of the pooled empirical CDF (Theorem 3.1; ``shared.sketches.mixture``).
* :func:`grouping_candidates` -- categories (or clients: the H split) ordered by Fisher's rule
  (mean target / proportion of a class) with the left summaries of every contiguous grouping.
* :func:`choose_splits` -- the pooled impurity decrease (Thm. 3.5, ``shared.splitting``) of every
  candidate, validity (``min_samples_leaf``, ``min_impurity_decrease``) and the best candidate
  per node with a deterministic tie-break: larger gain (gains within ``TIE_TOLERANCE`` of the
  node's impurity scale are equal: mirrored splits and re-ordered sums differ in the last bits),
  then lower feature index (the client indicator has index d, last), then lower candidate rank
  (thresholds ascending; NaN right before NaN left).
* :func:`leaf_value` -- class distribution or mean from a node summary.

Regression summaries are centred: ``[n, sum (y - shift), sum (y - shift)^2]`` with the node's
shift (its mean as the parent's split left it; the fleet mean at the roots), so the variance
``Q/n - mean^2`` subtracts numbers of the size of the variance, not of ``mean(y)^2``, and the
tolerances scale with the variance (:func:`impurity_scale`): a target offset of 1e9 grows the same
trees as no offset.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from shared.sketches import batched_mixture_quantiles
from shared.splitting import fisher_order, impurity, pooled_gain, prefix_summaries

__all__ = [
    "PURITY_TOLERANCE",
    "TIE_TOLERANCE",
    "child_shift",
    "choose_splits",
    "grouping_candidates",
    "impurity_scale",
    "is_pure",
    "leaf_value",
    "mixture_thresholds",
    "n_sampled_features",
    "node_count",
    "pair_thresholds",
]


#: Gains within this fraction of the node's impurity scale (:func:`impurity_scale`) are equal, and
#: a gain below it is no gain. Why 1e-11: the same split reached by two routes (mirrored
#: thresholds, a union client vs K clients, sums in another order) gives gains that differ in the
#: last ~10 bits of float64 (~1e-13 relative); real differences between distinct candidates on
#: real data are orders of magnitude larger. Tested by the mirrored-split and K-clients tests.
TIE_TOLERANCE = 1e-11
#: A node whose impurity is at most this fraction of its impurity scale is pure (stops). Why
#: 1e-12 and not the tie width: the impurity of a node of equal targets is 0 up to a few ulps of
#: the scale (``Q/n - mean^2`` of centred sums; class proportions summing to 1), and a node whose
#: spread is a 1e-11 fraction of its scale is still a real, splittable node.
PURITY_TOLERANCE = 1e-12


def node_count(summary: ArrayLike, criterion: str) -> np.ndarray:
    """Weighted sample count of summaries (class counts summed, or the ``n`` column)."""
    s = np.asarray(summary, dtype=np.float64)
    return s[..., 0] if criterion == "mse" else s.sum(axis=-1)


def n_sampled_features(max_features: str | int | float | None, d: int, regression: bool) -> int:
    """scikit-learn's ``max_features``: "sqrt", "log2", "third" (d/3), an int, a fraction, or
    None (all); default per the paper: sqrt(d) for classification, d/3 for regression."""
    if max_features is None or max_features == "all":
        k = d
    elif max_features == "auto":
        k = max(1, d // 3) if regression else int(np.sqrt(d))
    elif max_features == "sqrt":
        k = int(np.sqrt(d))
    elif max_features == "log2":
        k = int(np.log2(d))
    elif max_features == "third":
        k = d // 3
    elif isinstance(max_features, float):
        k = int(max_features * d)
    elif isinstance(max_features, int):
        k = max_features
    else:
        raise ValueError(
            f"max_features must be 'auto', 'sqrt', 'log2', 'third', 'all', an int or a float, got {max_features!r}"
        )
    return int(min(max(k, 1), d))


def mixture_thresholds(points: ArrayLike, weights: ArrayLike, n_bins: int) -> np.ndarray:
    """Candidate thresholds of one (node, feature) pair from the clients' quantile points
    ``(K, M+1)`` and their node weights ``(K,)``: the mixture CDF's inverse at ``b/B``, unique,
    ascending (float64). A threshold ``t`` sends ``x < t`` left."""
    p = np.asarray(points, dtype=np.float64)
    offsets, thresholds = pair_thresholds(p, weights, np.zeros(p.shape[0], np.int64), 1, n_bins)
    return thresholds


def pair_thresholds(
    points: ArrayLike, weights: ArrayLike, pair: ArrayLike, n_pairs: int, n_bins: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`mixture_thresholds` of every pair at once (rows = one client's sketch of pair
    ``pair[i]``): CSR ``(offsets (n_pairs + 1,), thresholds)``, each pair's unique and ascending."""
    ranks = np.arange(1, n_bins, dtype=np.float64) / n_bins
    q = batched_mixture_quantiles(points, weights, pair, n_pairs, ranks)  # (n_pairs, B-1), NaN: no sketch
    row = np.repeat(np.arange(n_pairs), ranks.size)
    value = q.ravel()
    keep = ~np.isnan(value)
    row, value = row[keep], value[keep]
    order = np.lexsort((value, row))
    row, value = row[order], value[order]
    distinct = np.ones(row.size, dtype=bool)
    distinct[1:] = (row[1:] != row[:-1]) | (value[1:] != value[:-1])
    row, value = row[distinct], value[distinct]
    offsets = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=n_pairs))]).astype(np.int64)
    return offsets, value


def grouping_candidates(summaries: ArrayLike, criterion: str) -> tuple[np.ndarray, np.ndarray]:
    """Fisher grouping of ``m`` categories/clients with summaries ``(m, S)``: their order and the
    left summaries ``(m-1, S)`` of "the first k in that order go left". Classification orders by
    the proportion of the node's majority class (Fisher's rule is exact for two classes)."""
    s = np.asarray(summaries, dtype=np.float64)
    positive = 1
    if criterion != "mse":
        positive = int(np.argmax(s.sum(axis=0))) if s.shape[-1] > 2 else 1
    order = fisher_order(s, criterion, positive=positive)
    return order, prefix_summaries(s, order)


def choose_splits(
    parent: ArrayLike,
    cand_node: ArrayLike,
    cand_left: ArrayLike,
    cand_feature: ArrayLike,
    cand_rank: ArrayLike,
    criterion: str,
    *,
    min_samples_leaf: float = 1.0,
    min_impurity_decrease: float = 0.0,
    total_weight: ArrayLike | None = None,
    cand_gain: ArrayLike | None = None,
    cand_left_count: ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Best candidate per node: ``(index into the candidates or -1, gain)`` for each of the
    ``parent`` summaries ``(A, S)``.

    ``cand_left`` ``(C, S)`` are pooled left summaries; gains are computed from them unless
    ``cand_gain`` is given (AvgImp, whose clients send gains and left counts
    ``cand_left_count`` instead of left summaries). A candidate is valid iff both children weigh at least
    ``min_samples_leaf`` and ``n_nu / total_weight[node] * gain >= min_impurity_decrease``
    (scikit-learn's rule; ``total_weight`` is the node's tree's root weight) and the gain is > 0.
    """
    s = np.asarray(parent, dtype=np.float64)
    node = np.asarray(cand_node, dtype=np.int64)
    left = np.asarray(cand_left, dtype=np.float64)
    n_nodes = s.shape[0]
    if node.size == 0:
        return np.full(n_nodes, -1, dtype=np.int64), np.zeros(n_nodes)
    gain = pooled_gain(s[node], left, criterion) if cand_gain is None else np.asarray(cand_gain, dtype=np.float64)
    n_left = node_count(left, criterion) if cand_left_count is None else np.asarray(cand_left_count, np.float64)
    n_parent = node_count(s, criterion)
    n_right = n_parent[node] - n_left
    root = n_parent if total_weight is None else np.asarray(total_weight, dtype=np.float64)
    weighted = n_parent[node] / np.where(root[node] > 0, root[node], 1.0) * gain
    noise = TIE_TOLERANCE * impurity_scale(s, criterion)
    valid = (n_left >= min_samples_leaf) & (n_right >= min_samples_leaf) & np.isfinite(gain)
    valid &= (gain > noise[node]) & (weighted >= min_impurity_decrease)
    # Gains equal up to rounding (mirrored splits, sums in another order) are ties: every valid
    # candidate within TIE_TOLERANCE of its node's best competes on (feature, rank) alone.
    masked = np.where(valid, gain, -np.inf)
    node_best = np.full(n_nodes, -np.inf)
    np.maximum.at(node_best, node, masked)
    tied = valid & (masked >= node_best[node] - noise[node])
    order = np.lexsort((np.asarray(cand_rank), np.asarray(cand_feature), ~tied, node))
    first = np.ones(order.size, dtype=bool)
    first[1:] = node[order][1:] != node[order][:-1]
    best = np.full(n_nodes, -1, dtype=np.int64)
    winners = order[first]
    ok = tied[winners]
    best[node[winners][ok]] = winners[ok]
    best_gain = np.zeros(n_nodes)
    best_gain[best >= 0] = gain[best[best >= 0]]
    return best, best_gain


def impurity_scale(summary: ArrayLike, criterion: str) -> np.ndarray:
    """Per node, the size of its impurity's terms, which the tolerances multiply: 1 for class
    proportions; ``Q/n`` for a centred regression summary -- the variance plus the square of the
    shift's distance from the mean, i.e. about the variance, since the shift is the node's mean
    up to rounding (a summary in its parent's shift adds ``(mean - parent mean)^2``)."""
    s = np.asarray(summary, dtype=np.float64)
    if criterion != "mse":
        return np.ones(s.shape[:-1])
    n = s[..., 0]
    return np.maximum(np.abs(s[..., 2]) / np.where(n > 0, n, 1.0), np.finfo(float).tiny)


def leaf_value(summary: ArrayLike, criterion: str, shift: float = 0.0) -> np.ndarray:
    """A leaf's output: the class distribution (classification) or the mean (regression: the
    summary's centred mean plus its ``shift``)."""
    s = np.asarray(summary, dtype=np.float64)
    if criterion == "mse":
        return np.array([shift + (s[1] / s[0] if s[0] > 0 else 0.0)])
    total = s.sum()
    return s / total if total > 0 else np.full(s.shape, 1.0 / s.shape[0])


def child_shift(summary: ArrayLike, shift: float) -> float:
    """The shift of a regression node whose summary ``summary`` is centred on ``shift``: its mean."""
    s = np.asarray(summary, dtype=np.float64)
    return float(shift + s[1] / s[0]) if s[0] > 0 else float(shift)


def is_pure(summary: ArrayLike, criterion: str) -> np.ndarray:
    """Nodes whose impurity is zero up to rounding (``PURITY_TOLERANCE`` of the scale)."""
    return impurity(summary, criterion) <= PURITY_TOLERANCE * impurity_scale(summary, criterion)
