"""Gradient histograms of FedSCS-XGB's private protocol: the client's maths, exact in integers.

Per depth level the server asks for, per requested node of the round's trees, per feature and
bin, the sums of G and H and the number of samples: G and H of the node's tree's output (one tree
per output), or of every output (``multi_output_tree``: one tree with vector leaves). A client's
contribution is one integer vector: G and H in fixed point (``round(g * 2**frac_bits)`` per
sample, then integer sums), counts as integers. Integer sums are associative, so the fleet sum
does not depend on how samples are spread over gateways or in which order vectors are added:
K gateways give *bit for bit* the histograms of one gateway holding their union, and secure
aggregation (sums mod 2^64) changes nothing.

Layout of the histograms: ``(nodes, 2m + 1, features, slots)`` with stats ``G_0..G_{m-1},
H_0..H_{m-1}, count`` (``m`` = 1, or the number of outputs for vector leaves) and slots
``0..S-2`` the bins (``shared.sketches.bin_ids``; a feature with fewer edges leaves its last
slots empty) and ``S-1`` the missing values.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["dequantize", "histogram_slots", "integer_bincount", "node_histograms", "quantize", "route_round"]

#: Low part of the split used by :func:`integer_bincount` (float64 sums of it stay exact).
_LOW_BITS = 26


def quantize(values: ArrayLike, frac_bits: int, bound: float) -> np.ndarray:
    """``round(values * 2**frac_bits)`` as int64 (half to even); ``ValueError`` when a value is
    not finite or exceeds ``bound`` in magnitude (the server chose ``frac_bits`` from the bound so
    that fleet sums cannot overflow)."""
    v = np.asarray(values, dtype=np.float64)
    if not np.isfinite(v).all():
        raise ValueError("cannot quantize non-finite values")
    if v.size and np.abs(v).max() > bound:  # the message names no value: it may leave the gateway
        raise ValueError(f"a value exceeds the job's bound {bound:.6g}")
    return np.rint(np.ldexp(v, frac_bits)).astype(np.int64)


def dequantize(values: ArrayLike, frac_bits: int) -> np.ndarray:
    """Fixed-point integers (:func:`quantize`'s, or their exact sums) as the float64 values they
    stand for: ``values * 2**-frac_bits``.

    Examples
    --------
    >>> dequantize(quantize([0.25, -3.75], 2, bound=4.0), 2).tolist()
    [0.25, -3.75]
    """
    return np.ldexp(np.asarray(values, dtype=np.float64), -frac_bits)


def integer_bincount(keys: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Exact int64 sums of ``values`` per key (``np.bincount`` with weights sums in float64,
    which loses the low bits of large fixed-point integers). Each value is split into a
    non-negative low part of 26 bits and a high part; both are summed in float64 exactly as
    long as ``len(values) < 2**27`` and the true sums of the high parts stay below 2**53 (the
    fixed-point bound guarantees it)."""
    v = np.asarray(values, dtype=np.int64)
    if v.shape[0] >= 1 << (53 - _LOW_BITS):
        raise ValueError("too many values for an exact float64 split sum")
    low = (v & ((1 << _LOW_BITS) - 1)).astype(np.float64)
    high = (v >> _LOW_BITS).astype(np.float64)
    low_sum = np.bincount(keys, weights=low, minlength=size)
    high_sum = np.bincount(keys, weights=high, minlength=size)
    return (high_sum.astype(np.int64) << _LOW_BITS) + low_sum.astype(np.int64)


def histogram_slots(bins: np.ndarray, n_edges: np.ndarray) -> np.ndarray:
    """Histogram slot of every (sample, feature): the bin id, or ``S - 1`` for missing values
    (bin id ``n_edges[j] + 1``), with ``S = max(n_edges) + 2``."""
    b = np.asarray(bins, dtype=np.int64)
    n_edges = np.asarray(n_edges, dtype=np.int64)
    missing_slot = int(n_edges.max(initial=0)) + 1
    return np.where(b == n_edges[None, :] + 1, missing_slot, b)


def route_round(
    slots: np.ndarray,
    missing_slot: int,
    n_trees: int,
    tree: ArrayLike,
    node: ArrayLike,
    feature: ArrayLike,
    bin_: ArrayLike,
    default_left: ArrayLike,
    left: ArrayLike,
    right: ArrayLike,
) -> np.ndarray:
    """Node of every sample in each of the round's ``n_trees`` trees ``(n_trees, n)``, after the
    splits (rows in level order; "slot <= bin" goes left, ``missing_slot`` by ``default_left``).
    A loop over the round's splits (a few dozen), vectorised over samples."""
    position = np.zeros((n_trees, slots.shape[0]), dtype=np.int64)
    rows = zip(*(np.asarray(a).tolist() for a in (tree, node, feature, bin_, default_left, left, right)))
    for k, nd, j, b, dl, lc, rc in rows:
        at = np.flatnonzero(position[k] == nd)
        column = slots[at, j]
        go_left = np.where(column == missing_slot, bool(dl), column <= b)
        position[k, at] = np.where(go_left, lc, rc)
    return position


def node_histograms(
    slots: np.ndarray,
    n_slots: int,
    position: np.ndarray,
    node_tree: ArrayLike,
    node_id: ArrayLike,
    grad: np.ndarray,
    hess: np.ndarray,
    *,
    vector_leaves: bool = False,
) -> np.ndarray:
    """Integer histograms ``(R, 2m + 1, d, n_slots)`` of the requested nodes ``(node_tree[r],
    node_id[r])`` (``grad``/``hess`` int64 ``(n, K)``): G and H of tree ``node_tree[r]``'s output
    (``m`` = 1), or with ``vector_leaves`` of all ``m = K`` outputs, then counts, per feature and
    slot."""
    node_tree = np.asarray(node_tree, dtype=np.int64)
    node_id = np.asarray(node_id, dtype=np.int64)
    n, d = slots.shape
    R = node_tree.shape[0]
    samples, requests = [], []
    for r, (k, nd) in enumerate(zip(node_tree.tolist(), node_id.tolist())):
        members = np.flatnonzero(position[k] == nd)
        samples.append(members)
        requests.append(np.full(members.shape[0], r, dtype=np.int64))
    rows = np.concatenate(samples) if samples else np.zeros(0, np.int64)
    req = np.concatenate(requests) if requests else np.zeros(0, np.int64)
    m = grad.shape[1] if vector_leaves else 1
    out = np.zeros((R, 2 * m + 1, d, n_slots), dtype=np.int64)
    if rows.size == 0:
        return out
    width = d * n_slots
    keys = (req[:, None] * width + np.arange(d)[None, :] * n_slots + slots[rows]).ravel()
    size = R * width
    for t in range(m):
        column = t if vector_leaves else node_tree[req]
        out[:, t] = integer_bincount(keys, np.repeat(grad[rows, column], d), size).reshape(R, d, n_slots)
        out[:, m + t] = integer_bincount(keys, np.repeat(hess[rows, column], d), size).reshape(R, d, n_slots)
    out[:, 2 * m] = np.bincount(keys, minlength=size).reshape(R, d, n_slots)
    return out
