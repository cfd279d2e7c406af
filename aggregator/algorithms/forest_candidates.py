"""FedForest's candidate splits of one level, as named tables: pure functions over arrays.

A level's candidates come from three places, each a function here:

* :func:`numeric_candidates` -- thresholds of the continuous (node, feature) pairs: the mixture
  CDF of the clients' sketches (``forest_growth.pair_thresholds``) or fixed per-feature lists
  (the Federated Histogram baseline and the oracle tests' "same candidates");
* :func:`grouping_candidates_of` -- Fisher's contiguous groupings of categories, or of clients
  (the client indicator H), from exact pooled per-category / per-client summaries;
* :func:`histogram_candidates` -- the private protocol's: every edge of the fleet-wide bins,
  scored from the fleet-summed per-bin histograms.

Missing values: a numeric candidate whose pair has missing values at the
node is offered twice -- NaN right, and NaN left with the pair's pooled missing summary added
to its left side (:func:`with_missing_left`) -- so the best split carries its learnt default
direction, as xgboost does. ``rank`` orders the twins NaN right first, so equal gains keep NaN
right (the direction of a node that saw no missing value).

Everything is collected into one :class:`Candidates` table that ``forest_growth.choose_splits``
scores.

Where a chosen split sits: a sketch candidate is a data value ``t`` ("x < t"
goes left), so the boundary hugs the right-hand training value and a test value in the gap goes
right. :func:`gap_midpoints` moves it to the middle of the gap, as scikit-learn does, whenever the
clients' sketches provably hold every value of the node (each sketch's weight below its size M):
the training partition is unchanged, only unseen values in the gap are routed differently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .forest_growth import grouping_candidates, node_count, pair_thresholds

__all__ = [
    "CATEGORY",
    "CLIENT",
    "NUMERIC",
    "Candidates",
    "Grouping",
    "NumericCandidates",
    "PairSketches",
    "gap_midpoints",
    "grouping_candidates_of",
    "groupings_table",
    "histogram_candidates",
    "numeric_candidates",
    "with_missing_left",
]

#: ``Candidates.kind``: a threshold on a numeric feature, a set of categories, a set of clients.
NUMERIC, CATEGORY, CLIENT = 0, 1, 2


@dataclass(frozen=True, eq=False)
class NumericCandidates:
    """The thresholds of every requested (node, feature) pair, CSR: pair ``p`` (node
    ``pair_node[p]``, feature ``pair_feature[p]``) has ``thresholds[offsets[p]:offsets[p+1]]``,
    ascending -- the layout of ``ForestSplitRequest``."""

    pair_node: np.ndarray
    pair_feature: np.ndarray
    offsets: np.ndarray
    thresholds: np.ndarray

    @property
    def n_pairs(self) -> int:
        return int(self.pair_node.shape[0])

    @property
    def pair(self) -> np.ndarray:
        """The pair of every candidate."""
        return np.repeat(np.arange(self.n_pairs), np.diff(self.offsets))

    @property
    def node(self) -> np.ndarray:
        return self.pair_node[self.pair]

    @property
    def feature(self) -> np.ndarray:
        return self.pair_feature[self.pair]

    @property
    def rank(self) -> np.ndarray:
        """Position of each candidate's threshold within its pair (ascending)."""
        return np.arange(self.thresholds.shape[0]) - self.offsets[self.pair]


class PairSketches(NamedTuple):
    """The clients' quantile sketches of a level, stacked: row ``i`` is one client's sketch
    ``points[i]`` (M+1 quantiles) of pair ``pair[i]`` with its non-missing node weight."""

    pair: np.ndarray
    points: np.ndarray
    weight: np.ndarray


class Grouping(NamedTuple):
    """A categorical or client-indicator candidate: "the codes in ``categories`` go left"."""

    node: int
    feature: int
    rank: int
    kind: int
    categories: np.ndarray
    left: np.ndarray


@dataclass(frozen=True, eq=False)
class Candidates:
    """One level's candidate splits, a row each: frontier position ``node``, ``feature`` (``d``:
    the client indicator), tie-break ``rank`` within the pair, numeric ``threshold`` with
    ``default_left`` (NaN's side), ``kind`` (``NUMERIC``/``CATEGORY``/``CLIENT``), the left
    set of a grouping (``categories``; None for numeric), the pooled ``left`` summary (zeros for
    AvgImp's numeric candidates, whose clients send gains instead) and the pooled ``left_count``
    (weight going left, for ``min_samples_leaf``)."""

    node: np.ndarray
    feature: np.ndarray
    rank: np.ndarray
    threshold: np.ndarray
    default_left: np.ndarray
    kind: np.ndarray
    categories: list[np.ndarray | None]
    left: np.ndarray
    left_count: np.ndarray

    @property
    def size(self) -> int:
        return int(self.node.shape[0])

    @classmethod
    def numeric(cls, numeric: NumericCandidates, left: np.ndarray, left_count: np.ndarray) -> Candidates:
        """The numeric candidates as a table, NaN right (rank ``2 * position``: room for twins)."""
        n = numeric.thresholds.shape[0]
        return cls(
            numeric.node,
            numeric.feature,
            2 * numeric.rank,
            np.asarray(numeric.thresholds, np.float64),
            np.zeros(n, bool),
            np.full(n, NUMERIC, np.int64),
            [None] * n,
            left,
            left_count,
        )

    def concat(self, other: Candidates) -> Candidates:
        arrays = {f: np.concatenate([getattr(self, f), getattr(other, f)]) for f in _ARRAY_FIELDS}
        return Candidates(**arrays, categories=self.categories + other.categories)

    def take(self, rows: np.ndarray) -> Candidates:
        arrays = {f: getattr(self, f)[rows] for f in _ARRAY_FIELDS}
        return Candidates(**arrays, categories=[self.categories[i] for i in rows])


#: Every field of :class:`Candidates` but ``categories`` (a list): one row per candidate.
_ARRAY_FIELDS = ("node", "feature", "rank", "threshold", "default_left", "kind", "left", "left_count")


def numeric_candidates(
    pair_node: np.ndarray,
    pair_feature: np.ndarray,
    eligible: np.ndarray,
    n_bins: int,
    sketches: PairSketches | None = None,
    fixed: list[np.ndarray] | None = None,
) -> NumericCandidates:
    """Thresholds of the ``eligible`` pairs: the given per-feature lists ``fixed``, or the
    mixture-CDF inverse at ``b/n_bins`` of the clients' ``sketches`` (§3.1)."""
    n_pairs = pair_node.shape[0]
    if fixed is not None:
        lists = [fixed[j] if ok else np.zeros(0) for j, ok in zip(pair_feature.tolist(), eligible.tolist())]
        offsets = np.concatenate([[0], np.cumsum([t.size for t in lists])]).astype(np.int64)
        thresholds = np.concatenate(lists) if lists else np.zeros(0)
    elif sketches is not None:
        keep = eligible[sketches.pair] if sketches.pair.size else np.zeros(0, bool)
        offsets, thresholds = pair_thresholds(
            sketches.points[keep], sketches.weight[keep], sketches.pair[keep], n_pairs, n_bins
        )
    else:
        raise ValueError("numeric candidates come from fixed thresholds or from sketches: neither was given")
    return NumericCandidates(pair_node, pair_feature, offsets, np.asarray(thresholds, np.float64))


def with_missing_left(
    cands: Candidates, pair: np.ndarray, missing: np.ndarray, missing_count: np.ndarray
) -> Candidates:
    """Add, after the numeric candidates ``cands`` (of pairs ``pair``), their NaN-left twins where
    the pair's pooled ``missing`` summary (``(n_pairs, S)``, count ``missing_count``) is not
    empty: the same threshold with the missing rows added to the left side."""
    twin = np.flatnonzero(missing_count[pair] > 0)
    if twin.size == 0:
        return cands
    base = cands.take(twin)
    p = pair[twin]
    twins = Candidates(
        base.node,
        base.feature,
        base.rank + 1,
        base.threshold,
        np.ones(twin.size, bool),
        base.kind,
        base.categories,
        base.left + missing[p],
        base.left_count + missing_count[p],
    )
    return cands.concat(twins)


def grouping_candidates_of(
    summaries: np.ndarray, node: int, feature: int, kind: int, criterion: str, codes: np.ndarray | None = None
) -> list[Grouping]:
    """Fisher's contiguous groupings of ``m`` categories or clients with pooled summaries
    ``(m, S)`` at frontier position ``node``: "the first k in Fisher's order go left", k = 1..m-1.
    ``codes`` names the rows (default ``0..m-1``: category codes)."""
    order, lefts = grouping_candidates(summaries, criterion)
    names = np.arange(summaries.shape[0]) if codes is None else np.asarray(codes)
    return [Grouping(node, feature, k, kind, names[order[: k + 1]], lefts[k]) for k in range(lefts.shape[0])]


def groupings_table(groupings: list[Grouping], S: int, criterion: str) -> Candidates:
    """The groupings as a :class:`Candidates` table (exact left summaries)."""
    n = len(groupings)
    left = np.array([g.left for g in groupings], dtype=np.float64).reshape(n, S)
    column = lambda name: np.array([getattr(g, name) for g in groupings], np.int64)  # noqa: E731
    return Candidates(
        column("node"),
        column("feature"),
        column("rank"),
        np.zeros(n),
        np.zeros(n, bool),
        column("kind"),
        [g.categories for g in groupings],
        left,
        node_count(left, criterion),
    )


def histogram_candidates(
    sums: np.ndarray,
    windows: np.ndarray,
    features: np.ndarray,
    pair_node: np.ndarray,
    edge_values: np.ndarray,
    edge_offsets: np.ndarray,
    min_crowd: int,
    criterion: str,
) -> tuple[Candidates, np.ndarray]:
    """The private protocol's candidates from fleet-summed pair histograms: ``sums`` ``(P, T, S)``
    summary terms and ``windows`` ``(P, T)`` window counts per pair and slot (the last slot:
    missing). Candidate ``b`` of pair ``p`` sends present slots ``<= b`` left (``x <
    edges[j][b]``), missing right -- and, where the pair has missing windows, its twin sends them
    left. Candidates leaving fewer than ``min_crowd`` windows on a side are dropped. Returns the
    table and the candidates' left window counts."""
    n_edges = np.diff(edge_offsets)[features]
    cum_sums = np.cumsum(sums[:, :-1], axis=1)
    cum_windows = np.cumsum(windows[:, :-1], axis=1)
    pair, rank = np.nonzero(np.arange(cum_sums.shape[1])[None, :] < n_edges[:, None])
    missing_windows = windows[:, -1]
    nan_left = np.concatenate([np.zeros(pair.size, bool), np.ones(pair.size, bool)])
    pair, rank = np.concatenate([pair, pair]), np.concatenate([rank, rank])
    keep = ~nan_left | (missing_windows[pair] > 0)
    pair, rank, nan_left = pair[keep], rank[keep], nan_left[keep]
    left = cum_sums[pair, rank] + np.where(nan_left[:, None], sums[pair, -1], 0.0)
    left_windows = cum_windows[pair, rank] + np.where(nan_left, missing_windows[pair], 0)
    crowd = (left_windows >= min_crowd) & (windows.sum(axis=1)[pair] - left_windows >= min_crowd)
    pair, rank, nan_left, left = pair[crowd], rank[crowd], nan_left[crowd], left[crowd]
    feature = features[pair]
    threshold = edge_values[edge_offsets[feature] + rank].astype(np.float64)
    table = Candidates(
        pair_node[pair],
        feature,
        2 * rank + nan_left,
        threshold,
        nan_left,
        np.full(pair.size, NUMERIC, np.int64),
        [None] * pair.size,
        left,
        node_count(left, criterion),
    )
    return table, left_windows[crowd]


def gap_midpoints(pair: np.ndarray, threshold: np.ndarray, sketches: PairSketches, sketch_size: int) -> np.ndarray:
    """The thresholds of chosen splits (``threshold[i]`` of pair ``pair[i]``) moved to the middle
    of the gap they lie in: ``(lo + hi) / 2`` with ``lo`` the node's largest value below ``t``
    and ``hi`` its smallest value at or above ``t`` (scikit-learn's midpoint).

    ``lo`` and ``hi`` are read off the clients' sketches, so they are used only when the sketches
    hold every value of the node: a sketch of weight ``W < M`` (M = ``sketch_size``; bootstrap
    weights are whole numbers >= 1) takes its M+1 quantiles at steps of ``W/M < 1`` of running
    weight, so every value, whose own weight is >= 1, is one of its points. A split with a
    client whose sketch may have skipped values, or with no value on one side (that side holds
    missing values only), keeps ``t``. Either way every training value stays on its side.

    Examples
    --------
    >>> sk = PairSketches(np.array([0, 0]), np.array([[1.0, 1.0, 4.0], [2.0, 6.0, 6.0]]), np.array([2.0, 2.0]))
    >>> gap_midpoints(np.array([0]), np.array([4.0]), sk, sketch_size=2)  # W = 2 is not < M = 2
    array([4.])
    >>> gap_midpoints(np.array([0, 0]), np.array([4.0, 2.5]), sk, sketch_size=4)  # values 1, 2 | 4, 6
    array([3., 3.])
    """
    t = np.asarray(threshold, dtype=np.float64)
    out = t.copy()
    if t.size == 0 or sketches.pair.size == 0:
        return out
    order = np.argsort(sketches.pair, kind="stable")
    sorted_pair = sketches.pair[order]
    start = np.searchsorted(sorted_pair, pair, side="left")
    end = np.searchsorted(sorted_pair, pair, side="right")
    for i in range(t.size):  # one per chosen split: a node-level loop, not a sample-level one
        rows = order[start[i] : end[i]]
        if rows.size == 0 or (sketches.weight[rows] >= sketch_size).any():
            continue
        points = sketches.points[rows]
        below, above = points[points < t[i]], points[points >= t[i]]
        if below.size and above.size:
            lo, hi = below.max(), above.min()
            mid = 0.5 * (lo + hi)
            if lo < mid <= hi:  # adjacent floats: hi itself (x < hi sends exactly the same rows left)
                out[i] = mid
    return out
