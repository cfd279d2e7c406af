"""Per-node statistics of one client's data, for FedForest's client half: pure, vectorised numpy.

A client holds, per tree, the node every sample sits in (``node``, -1 when the sample is not in
the tree's bootstrap or its node is finished) and the sample's bootstrap multiplicity
(``weight``). Everything the server needs is a weighted sum over the samples of a node:

* :func:`node_summaries` -- the additive summary ``s_nu`` of each node (FedForest Thm. 3.5):
  class counts (classification) or ``[n, sum y, sum y^2]`` (regression; the client passes
  ``y`` minus its node's shift, which keeps the sums centred); the per-sample terms come from
  :func:`summary_terms`.
* :func:`pair_quantiles` -- for (node, feature) pairs, the M+1 weighted quantiles of the node's
  values at ranks ``b/M`` (left convention, ``shared.sketches.weighted``) and the node's
  non-missing weight: the client's CDF sketch of §3.1.
* :func:`pair_left_summaries` -- for candidate thresholds of (node, feature) pairs, the summary
  of the node's samples with ``x < t`` (NaN excluded: the server adds the node's missing
  summary, from ``node_summaries`` over the NaN rows, to score "NaN goes left").
* :func:`category_summaries` -- exact per-category summaries of a categorical feature.
* :func:`pair_histograms` -- the private protocol's: for (node, feature) pairs, integer sums of
  per-sample terms per bin of fleet-wide edges (no value of the client's leaves it).

One sort per feature serves every node of every tree: samples are ordered by (node, value) with
``np.lexsort`` and each node is a contiguous segment, so quantiles are ``searchsorted`` on
running weights and left summaries are differences of running sums. No Python loop over
samples or nodes.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .histograms import integer_bincount

__all__ = [
    "category_summaries",
    "top_per_node",
    "node_summaries",
    "pair_histograms",
    "pair_left_summaries",
    "pair_quantiles",
    "summary_terms",
]


def summary_terms(y: ArrayLike, n_classes: int) -> np.ndarray:
    """Per-sample summary contributions ``(n, S)``: one-hot class rows (``n_classes >= 2``) or
    ``[1, y, y^2]`` (``n_classes == 0``, regression)."""
    t = np.asarray(y)
    if n_classes:
        out = np.zeros((t.shape[0], n_classes))
        out[np.arange(t.shape[0]), t.astype(np.int64)] = 1.0
        return out
    v = t.astype(np.float64)
    return np.stack([np.ones_like(v), v, v * v], axis=1)


def _weighted_sums(group: np.ndarray, weight: np.ndarray, terms: np.ndarray, n_groups: int) -> np.ndarray:
    """``(n_groups, S)`` sums of ``weight * terms`` by ``group`` (rows with group < 0 ignored)."""
    keep = group >= 0
    g, w, t = group[keep], weight[keep], terms[keep]
    S = t.shape[1]
    flat = (g[:, None] * S + np.arange(S)).ravel()
    return np.bincount(flat, weights=(t * w[:, None]).ravel(), minlength=n_groups * S).reshape(n_groups, S)


def node_summaries(node: ArrayLike, weight: ArrayLike, terms: ArrayLike, n_nodes: int) -> np.ndarray:
    """Additive summary of every node ``0..n_nodes-1``: ``(n_nodes, S)`` float64."""
    return _weighted_sums(np.asarray(node), np.asarray(weight, dtype=np.float64), np.asarray(terms), n_nodes)


def _request_position(node: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """For every sample, the position of its node in ``nodes`` (-1 if not requested)."""
    size = max(int(node.max(initial=-1)), int(nodes.max(initial=-1))) + 1
    position = np.full(size + 1, -1, dtype=np.int64)  # the extra slot maps node -1 to -1
    position[nodes] = np.arange(nodes.shape[0])
    return position[node]


def _segments(x: np.ndarray, node: np.ndarray, weight: np.ndarray, nodes: np.ndarray):
    """Samples of the requested ``nodes`` with a value and positive weight, sorted by (request
    position, value): (sorted values, running weights, running start per request, end)."""
    pos = _request_position(node, nodes)
    keep = (pos >= 0) & ~np.isnan(x) & (weight > 0)
    idx = np.flatnonzero(keep)
    order = idx[np.lexsort((x[idx], pos[idx]))]
    seg = pos[order]
    start = np.searchsorted(seg, np.arange(nodes.shape[0]), side="left")
    end = np.searchsorted(seg, np.arange(nodes.shape[0]), side="right")
    return order, seg, start, end


def pair_quantiles(
    x: ArrayLike, node: ArrayLike, weight: ArrayLike, nodes: ArrayLike, m: int
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted quantiles at ``b/m`` (b = 0..m) of feature values ``x`` within each of ``nodes``
    (distinct node ids), and each node's total non-missing weight. A node without values gets
    zero weight and a row of NaN. Returns ``(points (p, m+1), weight (p,))``."""
    xv = np.asarray(x, dtype=np.float64)
    nd = np.asarray(node, dtype=np.int64)
    w = np.asarray(weight, dtype=np.float64)
    req = np.asarray(nodes, dtype=np.int64)
    order, _seg, start, end = _segments(xv, nd, w, req)
    values = xv[order]
    running = np.cumsum(w[order])
    empty = end <= start
    points = np.full((req.shape[0], m + 1), np.nan)
    if values.size == 0:
        return points, np.zeros(req.shape[0])
    base = np.where(start > 0, running[np.maximum(start - 1, 0)], 0.0)
    total = np.where(empty, 0.0, running[np.maximum(end - 1, 0)] - base)
    ranks = np.arange(m + 1, dtype=np.float64) / m
    # left convention: the first value whose running weight within the node reaches q * W
    # (q = 0: the node's first value; every weight here is > 0)
    index = np.searchsorted(running, base[:, None] + ranks[None, :] * total[:, None], side="left")
    index = np.clip(index, start[:, None], np.maximum(end - 1, start)[:, None])
    filled = ~empty
    points[filled] = values[index[filled]]
    return points, total


def pair_left_summaries(
    x: ArrayLike, node: ArrayLike, weight: ArrayLike, terms: ArrayLike, cand_node: ArrayLike, cand_threshold: ArrayLike
) -> np.ndarray:
    """For each candidate ``(cand_node[c], cand_threshold[c])`` of one feature: the summary of
    that node's samples with ``x < threshold`` (NaN never goes left). ``(c, S)`` float64."""
    xv = np.asarray(x, dtype=np.float64)
    nd = np.asarray(node, dtype=np.int64)
    w = np.asarray(weight, dtype=np.float64)
    tm = np.asarray(terms, dtype=np.float64)
    cn = np.asarray(cand_node, dtype=np.int64)
    ct = np.asarray(cand_threshold, dtype=np.float64)
    S = tm.shape[1]
    if cn.size == 0:
        return np.zeros((0, S))
    req, cpos = np.unique(cn, return_inverse=True)
    order, seg, start, _end = _segments(xv, nd, w, req)
    values = xv[order]
    running = np.vstack([np.zeros((1, S)), np.cumsum(tm[order] * w[order][:, None], axis=0)])
    # merge candidates into the (node, value) order: a candidate sorts before data of equal value,
    # so the data rows before it in its node are exactly those with x < t
    n_data = values.shape[0]
    keys_node = np.concatenate([seg, cpos])
    keys_value = np.concatenate([values, ct])
    is_data = np.concatenate([np.ones(n_data, np.int8), np.zeros(cn.shape[0], np.int8)])
    merged = np.lexsort((is_data, keys_value, keys_node))
    rank = np.empty_like(merged)
    rank[merged] = np.arange(merged.shape[0])
    cand_rank = rank[n_data:]
    # data rows before the candidate = its merged rank minus the candidates before it
    cand_sorted = np.sort(cand_rank)
    before = cand_rank - np.searchsorted(cand_sorted, cand_rank, side="left")
    return running[before] - running[start[cpos]]


def category_summaries(
    codes: ArrayLike, node: ArrayLike, weight: ArrayLike, terms: ArrayLike, nodes: ArrayLike, n_categories: int
) -> np.ndarray:
    """Exact summaries per (requested node, category): ``(p, n_categories, S)``. Codes outside
    ``0..n_categories-1`` (and NaN) are not counted: they go right at any categorical split."""
    c = np.asarray(codes, dtype=np.float64)
    nd = np.asarray(node, dtype=np.int64)
    req = np.asarray(nodes, dtype=np.int64)
    pos = _request_position(nd, req)
    valid = (pos >= 0) & np.isfinite(c) & (c >= 0) & (c < n_categories) & (c == np.floor(c))
    group = np.where(valid, pos * n_categories + np.where(valid, c, 0).astype(np.int64), -1)
    sums = _weighted_sums(group, np.asarray(weight, dtype=np.float64), np.asarray(terms), req.shape[0] * n_categories)
    return sums.reshape(req.shape[0], n_categories, -1)


def top_per_node(node: ArrayLike, gain: ArrayLike, top: int) -> np.ndarray:
    """Positions (ascending) of the ``top`` largest ``gain`` values of every ``node`` -- AvgImp's
    Top-L shortlist, on the client (what to send) and on the server (what to evaluate)."""
    nd = np.asarray(node)
    ranked = np.lexsort((-np.asarray(gain, dtype=np.float64), nd))
    first = np.searchsorted(nd[ranked], nd[ranked], side="left")
    return np.sort(ranked[np.arange(ranked.size) - first < top])


def pair_histograms(
    x: ArrayLike,
    node: ArrayLike,
    terms: ArrayLike,
    pair_of_node: ArrayLike,
    n_pairs: int,
    edges: ArrayLike,
    n_slots: int,
) -> np.ndarray:
    """Integer histograms ``(n_pairs, n_slots, T)`` of one feature: entry ``e`` (value ``x[e]``,
    node position ``node[e]``, int64 terms ``terms[e]``) adds its terms to the slot of its value
    in the histogram of pair ``pair_of_node[node[e]]`` (-1: none). Slot ``b`` holds
    ``edges[b-1] <= x < edges[b]`` -- compared in float64, as the trees route -- and the last
    slot the missing values. Sums are exact (``shared.histograms.integer_bincount``)."""
    v = np.asarray(x, dtype=np.float64)
    t = np.asarray(terms, dtype=np.int64)
    pair = np.asarray(pair_of_node, dtype=np.int64)[np.asarray(node, dtype=np.int64)]
    keep = pair >= 0
    v, t, pair = v[keep], t[keep], pair[keep]
    slot = np.searchsorted(np.asarray(edges, dtype=np.float64), v, side="right")
    slot = np.where(np.isnan(v), n_slots - 1, slot)
    T = t.shape[1]
    keys = ((pair * n_slots + slot)[:, None] * T + np.arange(T)).ravel()
    size = n_pairs * n_slots * T
    return integer_bincount(keys, t.ravel(), size).reshape(n_pairs, n_slots, T)
