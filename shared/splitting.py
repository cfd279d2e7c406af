"""Split-evaluation maths shared by the tree learners: pure, vectorised numpy functions.

Everything broadcasts over leading axes, so one call scores every candidate split of every node.

Gradient boosting (FedSCS-XGB)
------------------------------
* :func:`split_gain` -- Eq. 1 of the FedSCS-XGB paper (Chen & Guestrin's gain)::

      gain = 1/2 [G_L^2/(H_L+lambda) + G_R^2/(H_R+lambda) - (G_L+G_R)^2/(H_L+H_R+lambda)] - gamma

  A split is worth making iff ``gain > 0``.
  XGBoost computes the bracket *without* the 1/2 (its ``loss_chg``, written to the model as
  ``loss_changes``) and keeps a split iff ``loss_chg >= min_split_loss`` (and ``loss_chg > 1e-6``),
  so Eq. 1's ``gamma`` is half of XGBoost's. WheelFed's ``gamma`` parameters are XGBoost's
  (``aggregator.algorithms.histogram_growth`` compares ``2 * split_gain(..., gamma=0)`` with it);
  ``split_gain``'s own ``gamma`` argument is Eq. 1's.
* :func:`leaf_weight` -- ``-G / (H + lambda)``, *unscaled*: the caller multiplies by the learning
  rate eta (``aggregator.algorithms.histogram_growth`` stores ``eta * leaf_weight`` in its trees,
  as XGBoost stores shrunk leaves). Where ``H + lambda <= 0`` (only possible with ``lambda = 0``
  and no Hessian mass) the weight is 0, as in XGBoost's ``CalcWeight``.

Binning
-------
Bin ids come from ``shared.sketches.bin_ids`` (XGBoost's convention: bin ``b`` of feature ``j``
holds ``edges[j][b-1] <= x < edges[j][b]``, NaN gets ``len(edges[j]) + 1``); the candidate split
"bins ``<= b`` go left" has threshold ``edges[j][b]`` and agrees with the model's routing rule
``x < threshold`` goes left. :func:`check_edges` validates per-feature edges.

Impurity-based trees (FedForest)
--------------------------------
Additive node summaries ("sufficient statistics"), summed over clients:

* classification: weighted class counts, last axis ``C``;
* regression: ``[n, sum y, sum y^2]`` (weighted: ``[sum w, sum w y, sum w y^2]``), last axis 3.

:func:`impurity` gives ``Psi`` (``"gini"``, ``"entropy"`` -- base 2 by default like
scikit-learn -- or ``"mse"``, the population variance), :func:`pooled_gain` the impurity decrease
``Psi(s) - (n_L/n) Psi(s_L) - (n_R/n) Psi(s_R)`` with ``s_R = s - s_L``.
:func:`fisher_order` sorts categories (or clients, for the client-indicator split) by mean
target / class-``positive`` proportion; :func:`prefix_summaries` then gives the left summary of
every contiguous grouping "first ``k`` in that order go left" (Fisher 1958; optimal among all
subsets for regression and binary classification).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "CRITERIA",
    "check_edges",
    "entropy",
    "fisher_order",
    "gini",
    "impurity",
    "leaf_weight",
    "mse",
    "pooled_gain",
    "prefix_summaries",
    "split_gain",
]

CRITERIA = ("gini", "entropy", "mse")


# --- gradient boosting ---------------------------------------------------------------------------
def split_gain(
    grad_left: ArrayLike,
    hess_left: ArrayLike,
    grad_right: ArrayLike,
    hess_right: ArrayLike,
    reg_lambda: float,
    gamma: float = 0.0,
) -> np.ndarray:
    """Eq. 1, elementwise over broadcast arrays (float64). Denominators of 0 give inf/nan:
    callers mask candidates that are invalid (see ``histogram_growth``)."""
    gl = np.asarray(grad_left, dtype=np.float64)
    hl = np.asarray(hess_left, dtype=np.float64)
    gr = np.asarray(grad_right, dtype=np.float64)
    hr = np.asarray(hess_right, dtype=np.float64)
    g = gl + gr
    with np.errstate(divide="ignore", invalid="ignore"):
        return (
            0.5 * (gl * gl / (hl + reg_lambda) + gr * gr / (hr + reg_lambda) - g * g / (hl + hr + reg_lambda)) - gamma
        )


def leaf_weight(grad: ArrayLike, hess: ArrayLike, reg_lambda: float) -> np.ndarray:
    """``-G / (H + lambda)`` (not multiplied by the learning rate); 0 where ``H + lambda <= 0``."""
    g = np.asarray(grad, dtype=np.float64)
    denom = np.asarray(hess, dtype=np.float64) + reg_lambda
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denom > 0, -g / np.where(denom > 0, denom, 1.0), 0.0)


# --- binning -------------------------------------------------------------------------------------
def check_edges(edges: Sequence[ArrayLike]) -> tuple[np.ndarray, ...]:
    """Validate per-feature edges (1-D, finite, strictly increasing); returns float64 copies."""
    out = []
    for j, e in enumerate(edges):
        a = np.asarray(e, dtype=np.float64).copy()
        if a.ndim != 1:
            raise ValueError(f"edges[{j}] must be 1-D, got shape {a.shape}")
        if not np.isfinite(a).all():
            raise ValueError(f"edges[{j}] must be finite")
        if a.size > 1 and not (np.diff(a) > 0).all():
            raise ValueError(f"edges[{j}] must be strictly increasing")
        a.setflags(write=False)
        out.append(a)
    return tuple(out)


# --- impurity-based trees ------------------------------------------------------------------------
def gini(counts: ArrayLike) -> np.ndarray:
    """Gini impurity ``1 - sum_k p_k^2`` of class counts (last axis); 0 for an empty node."""
    c = np.asarray(counts, dtype=np.float64)
    n = c.sum(axis=-1)
    safe = np.where(n > 0, n, 1.0)
    return np.where(n > 0, 1.0 - ((c / safe[..., None]) ** 2).sum(axis=-1), 0.0)


def entropy(counts: ArrayLike, base: float = 2.0) -> np.ndarray:
    """Entropy ``-sum_k p_k log_base p_k`` of class counts (last axis; ``0 log 0 = 0``)."""
    c = np.asarray(counts, dtype=np.float64)
    n = c.sum(axis=-1)
    p = c / np.where(n > 0, n, 1.0)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return np.where(n > 0, -terms.sum(axis=-1) / np.log(base), 0.0)


def mse(summary: ArrayLike) -> np.ndarray:
    """Population variance ``sum y^2/n - (sum y/n)^2`` from ``[n, sum y, sum y^2]`` (last axis),
    clamped at 0 (cancellation can make it slightly negative); 0 for an empty node.

    The subtraction loses ``log10(mean^2 / variance)`` digits, so callers keep the sums centred
    near the node's mean: FedForest's clients sum ``y - shift`` with a per-node shift (the node's
    mean from the parent's split), which makes ``mean`` here close to 0."""
    s = np.asarray(summary, dtype=np.float64)
    if s.shape[-1] != 3:
        raise ValueError(f"a regression summary is [n, sum y, sum y^2], got last axis {s.shape[-1]}")
    n = s[..., 0]
    safe = np.where(n > 0, n, 1.0)
    mean = s[..., 1] / safe
    return np.where(n > 0, np.maximum(s[..., 2] / safe - mean * mean, 0.0), 0.0)


def _count(summary: np.ndarray, criterion: str) -> np.ndarray:
    return summary[..., 0] if criterion == "mse" else summary.sum(axis=-1)


def impurity(summary: ArrayLike, criterion: str) -> np.ndarray:
    """``Psi(s)`` for ``criterion`` in ``CRITERIA``."""
    if criterion == "gini":
        return gini(summary)
    if criterion == "entropy":
        return entropy(summary)
    if criterion == "mse":
        return mse(summary)
    raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")


def pooled_gain(parent: ArrayLike, left: ArrayLike, criterion: str) -> np.ndarray:
    """Impurity decrease ``Psi(s) - (n_L/n) Psi(s_L) - (n_R/n) Psi(s_R)``, ``s_R = s - s_L``,
    broadcast over candidates (``parent`` ``(..., C)`` against ``left`` ``(..., C)``); 0 for an
    empty parent. An empty side gives 0 up to rounding (exactly 0 for ``"mse"``, which is
    computed in the equivalent form ``n_L n_R / n^2 (mean_L - mean_R)^2``: it reads no sum of
    squares, so it is exact to float64 however large the targets' mean is next to their spread).

    Examples
    --------
    >>> float(pooled_gain([4, 10.0, 36.0], [2, 2.0, 2.0], "mse"))  # y = 1, 1 | 3, 5
    2.25
    >>> float(pooled_gain([4, 4e9 + 10.0, 0.0], [2, 2e9 + 2.0, 0.0], "mse"))  # the same, offset 1e9
    2.25
    """
    s = np.asarray(parent, dtype=np.float64)
    s_l = np.asarray(left, dtype=np.float64)
    s, s_l = np.broadcast_arrays(s, s_l)
    s_r = s - s_l
    n = _count(s, criterion)
    safe = np.where(n > 0, n, 1.0)
    n_l, n_r = _count(s_l, criterion), _count(s_r, criterion)
    if criterion == "mse":
        # The variance decrease equals the between-children term n_L n_R / n^2 (mean_L - mean_R)^2:
        # no sum of squares, so no cancellation when the mean is large next to the spread (the
        # three-variance form loses every digit of a target with an offset of 1e6).
        mean_l = s_l[..., 1] / np.where(n_l > 0, n_l, 1.0)
        mean_r = s_r[..., 1] / np.where(n_r > 0, n_r, 1.0)
        gain = np.where((n_l > 0) & (n_r > 0), n_l * n_r / (safe * safe) * (mean_l - mean_r) ** 2, 0.0)
    else:
        gain = impurity(s, criterion) - n_l / safe * impurity(s_l, criterion) - n_r / safe * impurity(s_r, criterion)
    return np.where(n > 0, gain, 0.0)


def fisher_order(summaries: ArrayLike, criterion: str, *, positive: int = 1) -> np.ndarray:
    """Order (stable argsort, last-but-one axis) of categories/clients by their mean target
    (``"mse"``) or their proportion of class ``positive`` (``"gini"``/``"entropy"``).
    ``summaries`` is ``(..., m, C)``; empty categories (no mass) sort last, ties keep input order."""
    s = np.asarray(summaries, dtype=np.float64)
    n = _count(s, criterion)
    if criterion == "mse":
        top = s[..., 1]
    elif criterion in ("gini", "entropy"):
        top = s[..., positive]
    else:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    key = np.where(n > 0, top / np.where(n > 0, n, 1.0), np.inf)
    return np.argsort(key, axis=-1, kind="stable")


def prefix_summaries(summaries: ArrayLike, order: ArrayLike) -> np.ndarray:
    """Left summaries of the contiguous groupings "the first ``k`` of ``order`` go left",
    ``k = 1..m-1``: shape ``(..., m-1, C)``. Feed them to :func:`pooled_gain`."""
    s = np.asarray(summaries, dtype=np.float64)
    idx = np.asarray(order)[..., None]
    ordered = np.take_along_axis(s, np.broadcast_to(idx, idx.shape[:-1] + (s.shape[-1],)), axis=-2)
    return np.cumsum(ordered, axis=-2)[..., :-1, :]
