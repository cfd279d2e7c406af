"""Exact CART split search over one party's features, for every open node of a level at once.

A vertical party holds some columns of every window and (after the labels are shared, see
``shared.vertical_party_key``) the target. For each open node it scans every midpoint between
consecutive distinct values of each of its sampled features, as scikit-learn's ``BestSplitter``
does, and keeps its best: the master compares only these per-party bests (paper Alg. 1 l. 12).

Conventions, identical to scikit-learn's so that a single tree grown on all rows and features
equals ``DecisionTreeClassifier``/``Regressor`` (tested):

* a sample goes left iff ``x <= threshold``; the threshold is the midpoint of two consecutive
  values (the lower value when the midpoint rounds up to the upper one);
* no split between values closer than ``FEATURE_THRESHOLD`` (1e-7);
* the gain is the weighted impurity decrease ``w_node / w_root * (i(node) - w_l/w_node i(left)
  - w_r/w_node i(right))`` -- the quantity ``min_impurity_decrease`` is compared with; entropy
  in bits; bootstrap multiplicities are weights, ``min_samples_leaf`` counts distinct rows;
  impurities are ``shared.splitting.impurity`` of ``shared.node_statistics`` summaries, the
  regression targets centred on each node's mean (:func:`node_terms`);
* ties: gains within ``TIE_TOLERANCE`` (relative) of the best are equal, and the first in
  (feature, threshold) order wins -- so that summing in another order cannot change a tree.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .node_statistics import node_summaries, summary_terms
from .splitting import impurity
from .vertical_party_key import PartyKey

__all__ = [
    "EPSILON",
    "FEATURE_THRESHOLD",
    "TIE_TOLERANCE",
    "LocalSplits",
    "best_local_splits",
    "feature_codes",
    "is_tie_or_better",
    "Leaves",
    "leaf_values",
    "node_terms",
]

FEATURE_THRESHOLD = 1e-7
TIE_TOLERANCE = 1e-10
EPSILON = float(np.finfo(np.float64).eps)

Criterion = Literal["gini", "entropy", "mse"]


def is_tie_or_better(gain: np.ndarray, best: np.ndarray) -> np.ndarray:
    """Whether ``gain`` counts as equal to (or above) ``best``: within ``TIE_TOLERANCE`` of it."""
    best = np.asarray(best, dtype=np.float64)
    return gain >= best - TIE_TOLERANCE * np.maximum(1.0, np.abs(best))


def feature_codes(key: PartyKey, job: str, party: int, n_features: int) -> np.ndarray:
    """The ids under which party ``party`` shows its ``n_features`` columns to the master in job
    ``job``: ``codes[column]``, a permutation of ``0..n_features-1``.

    The permutation orders the columns by ``HMAC-SHA256(id_key, job, party, column)``: without
    the party key the master cannot tell which column an id stands for, and the same column gets
    unrelated ids in two jobs. Every other party of the person could compute it (they share the
    key), but none is ever sent an id of another party. Pure ``hmac``, no random generator, so
    the codes do not depend on the numpy version.

    Examples
    --------
    >>> key = PartyKey.from_secret(bytes(32))
    >>> codes = feature_codes(key, "job-1", 0, 5)
    >>> sorted(codes.tolist())
    [0, 1, 2, 3, 4]
    >>> bool((codes == feature_codes(key, "job-1", 0, 5)).all())
    True
    """
    prefix = b"wheelfed vertical feature codes v1\0" + job.encode() + b"\0" + str(int(party)).encode() + b"\0"
    tags = [hmac.new(key.id_key, prefix + str(j).encode(), hashlib.sha256).digest() for j in range(n_features)]
    order = sorted(range(n_features), key=tags.__getitem__)
    codes = np.empty(n_features, dtype=np.int64)
    codes[np.asarray(order, dtype=np.int64)] = np.arange(n_features)
    return codes


def _weight(stats: np.ndarray, criterion: Criterion) -> np.ndarray:
    return stats[..., 0] if criterion == "mse" else stats.sum(axis=-1)


def node_terms(y: np.ndarray, node_pos: np.ndarray, weight: np.ndarray, n_classes: int, n_nodes: int) -> np.ndarray:
    """Per entry (a row of node ``node_pos``) its summary terms (``shared.node_statistics.summary_terms``):
    one-hot classes, or for regression ``[1, y - m, (y - m)^2]`` with ``m`` the weighted mean of
    the entry's node.

    Why centred: the variance is ``sum y^2 / n - mean^2``, which loses ``log10(mean^2 / var)``
    digits -- all of them for targets of spread 1 around 1e7. Centring each node on its own mean
    (FedForest's clients shift by the node's mean likewise) keeps the sums near 0, so the gains
    equal a two-pass computation to rounding. The shift cancels in every gain; leaf values are
    computed from uncentred terms (:func:`leaf_values`).
    """
    y = np.asarray(y)
    if n_classes:
        return summary_terms(y, n_classes)
    y = y.astype(np.float64)
    w = np.bincount(node_pos, weights=weight, minlength=n_nodes)
    shift = np.bincount(node_pos, weights=weight * y, minlength=n_nodes) / np.where(w > 0, w, 1.0)
    return summary_terms(y - shift[node_pos], 0)


@dataclass(frozen=True, eq=False)
class Leaves:
    """Leaf ``values`` ``(n, K)`` -- the weighted class distribution (rows sum to 1) or the
    weighted mean (one column) -- and ``cover``, the weighted rows of each leaf."""

    values: np.ndarray
    cover: np.ndarray


def leaf_values(y: np.ndarray, node_pos: np.ndarray, weight: np.ndarray, n_classes: int, n_nodes: int) -> Leaves:
    """The leaves of nodes ``0..n_nodes-1`` from their entries (row labels ``y``, node, weight)."""
    stats = node_summaries(node_pos, weight, summary_terms(np.asarray(y), n_classes), n_nodes)
    cover = stats[:, 0] if not n_classes else stats.sum(axis=1)
    safe = np.where(cover > 0, cover, 1.0)
    return Leaves((stats[:, 1] / safe)[:, None] if not n_classes else stats / safe[:, None], cover)


@dataclass(frozen=True, eq=False)
class LocalSplits:
    """One party's best split per open node: ``gain`` (-inf: none), local ``feature`` (-1: none)
    and ``threshold``."""

    gain: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray


def _feature_best(x, node, w, terms, node_stats, node_rows, root_weight, criterion, min_samples_leaf, n_nodes):
    """Best split per node on one feature: (gain, threshold), -inf where none."""
    order = np.lexsort((x, node))
    x, node, w, terms = x[order], node[order], w[order], terms[order]
    weighted = terms * w[:, None]
    cum = np.cumsum(weighted, axis=0)
    starts = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
    seg_start = np.repeat(starts, np.diff(np.r_[starts, node.size]))
    before = np.where(seg_start[:, None] > 0, cum[np.maximum(seg_start - 1, 0)], 0.0)
    left = cum - before  # statistics of the rows up to and including position i, within its node
    left_rows = np.arange(node.size) - seg_start + 1
    gain = np.full(n_nodes, -np.inf)
    threshold = np.zeros(n_nodes)
    if node.size < 2:
        return gain, threshold
    i = np.arange(node.size - 1)
    nd = node[i]
    ok = (
        (node[i + 1] == nd)
        & (x[i + 1] > x[i] + FEATURE_THRESHOLD)
        & (left_rows[i] >= min_samples_leaf)
        & (node_rows[nd] - left_rows[i] >= min_samples_leaf)
    )
    i, nd = i[ok], nd[ok]
    if not i.size:
        return gain, threshold
    total = node_stats[nd]
    s_left = left[i]
    s_right = total - s_left
    w_node, w_left, w_right = (_weight(s, criterion) for s in (total, s_left, s_right))
    local = (
        impurity(total, criterion)
        - (w_left * impurity(s_left, criterion) + w_right * impurity(s_right, criterion)) / w_node
    )
    g = w_node / root_weight[nd] * local
    best = np.full(n_nodes, -np.inf)
    np.maximum.at(best, nd, g)
    tie = is_tie_or_better(g, best[nd])
    first = np.unique(nd[tie], return_index=True)
    pos = i[tie][first[1]]
    mid = x[pos] / 2.0 + x[pos + 1] / 2.0
    mid = np.where((mid == x[pos + 1]) | ~np.isfinite(mid), x[pos], mid)
    gain[first[0]] = g[tie][first[1]]
    threshold[first[0]] = mid
    return gain, threshold


def best_local_splits(
    X: np.ndarray,
    rows: np.ndarray,
    node_pos: np.ndarray,
    weight: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    node_features: np.ndarray,
    root_weight: np.ndarray,
    *,
    criterion: Criterion,
    min_samples_split: int,
    min_samples_leaf: int,
) -> LocalSplits:
    """Each open node's best split over this party's sampled features.

    ``rows``/``node_pos``/``weight``: one entry per (node, row with a positive multiplicity);
    ``y``: per row the class id (``n_classes`` > 0) or the target (``n_classes`` 0);
    ``node_features`` ``(n_nodes, d)`` bool: the features sampled for each node (the party's
    own share of the master's draw); ``root_weight``: the weighted size of each node's tree.
    Nodes too small for ``min_samples_split``/``2 * min_samples_leaf``, or pure, get no split --
    every party decides this alike, from the same rows and labels.
    """
    n_nodes = node_features.shape[0]
    terms = node_terms(np.asarray(y)[rows], node_pos, weight, n_classes, n_nodes)
    stats = node_summaries(node_pos, weight, terms, n_nodes)
    n_rows = np.bincount(node_pos, minlength=n_nodes)
    splittable = (
        (n_rows >= min_samples_split) & (n_rows >= 2 * min_samples_leaf) & (impurity(stats, criterion) > EPSILON)
    )
    best_gain = np.full(n_nodes, -np.inf)
    best_feature = np.full(n_nodes, -1, dtype=np.int64)
    best_threshold = np.zeros(n_nodes)
    gains, thresholds = [], []
    features = np.flatnonzero(node_features[splittable].any(axis=0)) if splittable.any() else np.zeros(0, np.int64)
    for j in features.tolist():
        keep = node_features[node_pos, j] & splittable[node_pos]
        g, t = _feature_best(
            X[rows[keep], j],
            node_pos[keep],
            weight[keep],
            terms[keep],
            stats,
            n_rows,
            root_weight,
            criterion,
            min_samples_leaf,
            n_nodes,
        )
        gains.append(g)
        thresholds.append(t)
    if gains:
        G, T = np.column_stack(gains), np.column_stack(thresholds)
        top = G.max(axis=1)
        has = np.isfinite(top)
        choice = np.argmax(is_tie_or_better(G, top[:, None]) & has[:, None], axis=1)
        rows_ = np.flatnonzero(has)
        best_gain[rows_] = G[rows_, choice[rows_]]
        best_feature[rows_] = features[choice[rows_]]
        best_threshold[rows_] = T[rows_, choice[rows_]]
    return LocalSplits(best_gain, best_feature, best_threshold)
