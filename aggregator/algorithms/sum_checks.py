"""Range checks of the exact (non-DP) fleet sums: what honest gateways' histograms always satisfy.

Without differential privacy every decoded or plain sum is an exact integer, so a sum that
breaks one of these rules was not produced by honest gateways:

* window and class counts are non-negative;
* every feature of a node describes the same windows: its slots add up to the same totals
  (counts, G, H, class counts) whichever feature is summed;
* slots beyond a feature's own bins (padding up to the widest feature) are zero;
* a child's totals are what its parent's histogram says about that split (children sum to their
  parent);
* each G and H lies within the bound the fixed point's clipping implies: ``|g| <= grad_bound``
  and ``0 <= h <= hess_bound`` per window (the DP counterpart with noise tails is
  :func:`~aggregator.algorithms.private_growth.level_violation`, which this module reuses with
  no noise); bootstrap-weighted class counts are at most ``max_weight`` per window.

Each check is a pure function returning one line naming what was violated, or None. The server
halves call them on each visible vector (plain mode: the culprit is named and dropped like a
dropout) and on every decoded sum (secure mode: the round fails with that line).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "SumViolation",
    "atom_violation",
    "forest_histogram_violation",
    "hessian_bound",
    "padding_mask",
    "parent_total_violation",
    "xgb_histogram_violation",
]


class SumViolation(ValueError):
    """A fleet sum honest gateways cannot produce; the message names what was violated."""


def hessian_bound(objective: object) -> float:
    """The largest per-window hessian of ``objective`` (shared.objectives): ``hessian_factor *
    p (1 - p) <= hessian_factor / 4`` for softmax and logistic, 1 for squared error.

    Examples
    --------
    >>> from shared.objectives import objective_named
    >>> hessian_bound(objective_named("softmax", 3)), hessian_bound(objective_named("squared_error", 0))
    (0.5, 1.0)
    """
    if getattr(objective, "link", "") == "identity":
        return 1.0
    return 0.25 * float(getattr(objective, "hessian_factor", 1.0))


def atom_violation(
    grad: np.ndarray, hess: np.ndarray, counts: np.ndarray, grad_bound: float, hess_bound: float
) -> str | None:
    """What one gateway's atoms (per atom: summed ``grad (n, m)`` and ``hess (n, m)`` of its
    ``counts (n,)`` windows) show that its honest gradients cannot produce, or None.

    Examples
    --------
    >>> g, h, n = np.array([[0.5]]), np.array([[0.2]]), np.array([2])
    >>> atom_violation(g, h, n, 1.0, 0.25) is None
    True
    >>> atom_violation(g * 1000, h, n, 1.0, 0.25)
    'an atom G of 500 over 2 windows (each |g| <= 1)'
    """
    counts = np.asarray(counts, dtype=np.float64)
    if (counts < 0).any() or not np.array_equal(counts, np.round(counts)):
        return "an atom window count that is not a non-negative integer"
    slack = 1e-9 * np.maximum(counts, 1.0)[:, None]
    over = np.abs(grad) - grad_bound * counts[:, None] - slack
    if (over > 0).any():
        at = np.unravel_index(np.argmax(over), over.shape)
        return f"an atom G of {float(grad[at]):.4g} over {int(counts[at[0]])} windows (each |g| <= {grad_bound:.4g})"
    if (hess < -slack).any() or (hess - hess_bound * counts[:, None] - slack > 0).any():
        return f"an atom H outside [0, {hess_bound:.4g}] per window"
    return None


def padding_mask(edge_offsets: np.ndarray, features: np.ndarray | None = None) -> np.ndarray:
    """``(k, S)`` True where a feature's slot is padding (beyond its ``n_edges + 1`` bins, before
    the last slot, the missing values); ``features``: the job columns of the ``k`` rows (all).

    Examples
    --------
    >>> padding_mask(np.array([0, 1, 3])).astype(int).tolist()  # 1 and 2 edges, S = 4
    [[0, 0, 1, 0], [0, 0, 0, 0]]
    """
    n_edges = np.diff(np.asarray(edge_offsets, dtype=np.int64))
    S = int(n_edges.max(initial=0)) + 2
    if features is not None:
        n_edges = n_edges[np.asarray(features, dtype=np.int64)]
    slot = np.arange(S)[None, :]
    return (slot > n_edges[:, None]) & (slot < S - 1)


def _feature_disagreement(totals: np.ndarray, node: np.ndarray | None = None) -> str | None:
    """``totals (P, terms)``: per-feature totals; ``node (P,)`` groups rows of one node (None:
    ``totals`` is ``(R, terms, k)``, one node per row)."""
    if node is None:
        bad = (totals != totals[..., :1]).any(axis=(1, 2))
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            j = int(np.flatnonzero((totals[r] != totals[r][:, :1]).any(axis=0))[0])
            return (
                f"node {r}'s features disagree on its totals: feature 0 counts {int(totals[r, -1, 0])} "
                f"windows, feature {j} {int(totals[r, -1, j])}"
            )
        return None
    first = np.r_[True, node[1:] != node[:-1]]
    reference = totals[np.maximum.accumulate(np.where(first, np.arange(node.shape[0]), 0))]
    bad = (totals != reference).any(axis=1)
    if bad.any():
        p = int(np.flatnonzero(bad)[0])
        return (
            f"node {int(node[p])}'s features disagree on its totals: {int(reference[p, 0])} windows "
            f"against {int(totals[p, 0])}"
        )
    return None


def xgb_histogram_violation(
    hist: np.ndarray, frac_bits: int, grad_bound: float, hess_bound: float, padding: np.ndarray
) -> str | None:
    """What an exact FedSCS-XGB level histogram ``(R, 2m + 1, k, S)`` (int64: G and H in fixed
    point with ``frac_bits``, then the window count) shows that honest gateways cannot produce,
    or None. ``padding``: :func:`padding_mask` of the job's edges.

    Examples
    --------
    >>> h = np.zeros((1, 3, 2, 3), np.int64)
    >>> h[0, 2] = [[4, 6, 0], [10, 0, 0]]; h[0, 0] = [[8, 4, 0], [12, 0, 0]]; h[0, 1, :, 0] = 10
    >>> pad = np.zeros((2, 3), bool)
    >>> xgb_histogram_violation(h, 4, 1.0, 0.25, pad) is None
    True
    >>> h[0, 2, 0, 0] = -1000
    >>> xgb_histogram_violation(h, 4, 1.0, 0.25, pad)
    'a window count of -1000'
    >>> h[0, 2, 0, 0] = 4; h[0, 0] *= 1000
    >>> xgb_histogram_violation(h, 4, 1.0, 0.25, pad)
    'a G sum of 750 over about 10 windows (each |g| <= 1)'
    """
    from .private_growth import (
        level_violation,  # private_growth imports levelwise_growth, which imports this
    )

    hist = np.asarray(hist, dtype=np.int64)
    count = hist[:, -1]
    if (count < 0).any():
        return f"a window count of {int(count.min())}"
    if (hist[..., padding] != 0).any():
        return "a non-zero sum in a slot beyond its feature's bins"
    bound = level_violation(
        np.ldexp(hist.astype(np.float64), np.r_[np.full(hist.shape[1] - 1, -frac_bits), 0][None, :, None, None]),
        0.0,
        grad_bound,
        hess_bound,
        1 << frac_bits,
    )
    if bound is not None:
        return bound
    return _feature_disagreement(hist.sum(axis=-1))


def parent_total_violation(hist: np.ndarray, expected: list[np.ndarray | None]) -> str | None:
    """Whether each fetched node's totals ``hist[i].sum over slots`` (feature 0) equal
    ``expected[i]``, the totals its parent's histogram gives that side of the split (None: a
    root, nothing to compare).

    Examples
    --------
    >>> h = np.zeros((1, 3, 1, 2), np.int64); h[0, :, 0, 0] = [5, 2, 7]
    >>> parent_total_violation(h, [np.array([5, 2, 7])]) is None
    True
    >>> parent_total_violation(h, [np.array([5, 2, 9])])
    'node 0 holds 7 windows, the parent split gave it 9'
    """
    for i, want in enumerate(expected):
        if want is None:
            continue
        got = np.asarray(hist[i], dtype=np.int64)[:, 0, :].sum(axis=-1)
        if not np.array_equal(got, want):
            return f"node {i} holds {int(got[-1])} windows, the parent split gave it {int(want[-1])}"
    return None


def forest_histogram_violation(
    hist: np.ndarray, pair_node: np.ndarray, padding: np.ndarray, *, regression: bool, max_weight: int
) -> str | None:
    """What an exact FedForest level histogram ``(P, slots, 1 + terms)`` (int64: distinct
    windows, then bootstrap-weighted class counts, or ``[n, Σy, Σy²]`` with y in fixed point)
    shows that honest gateways cannot produce, or None. ``pair_node``: the node of each pair
    (pairs of a node adjacent); ``padding (P, slots)``: :func:`padding_mask` of the pairs'
    features; ``max_weight``: the largest bootstrap multiplicity of a window.

    Examples
    --------
    >>> h = np.zeros((2, 3, 3), np.int64); h[:, 0] = [4, 3, 2]; h[:, 2] = [1, 0, 1]
    >>> pad = np.zeros((2, 3), bool)
    >>> forest_histogram_violation(h, np.array([0, 0]), pad, regression=False, max_weight=16) is None
    True
    >>> h[1, 0, 1:] *= -1
    >>> forest_histogram_violation(h, np.array([0, 0]), pad, regression=False, max_weight=16)
    'a class count of -3'
    """
    hist = np.asarray(hist, dtype=np.int64)
    windows = hist[..., 0]
    if (windows < 0).any():
        return f"a window count of {int(windows.min())}"
    counts = hist[..., 1:2] if regression else hist[..., 1:]
    if (counts < 0).any():
        return f"a {'weight' if regression else 'class'} count of {int(counts.min())}"
    if regression and (hist[..., 3] < 0).any():
        return "a negative sum of squares"
    weight = counts.sum(axis=-1)
    if (weight > max_weight * windows).any():
        at = np.unravel_index(np.argmax(weight - max_weight * windows), weight.shape)
        return f"a bootstrap weight of {int(weight[at])} over {int(windows[at])} windows (each <= {max_weight})"
    if (hist[padding] != 0).any():
        return "a non-zero sum in a slot beyond its feature's bins"
    return _feature_disagreement(hist.sum(axis=1), np.asarray(pair_node))
