"""Exact weighted quantiles and the weighted CDF: the reference every sketch is measured against.

Definitions (used by the whole package). For values ``x_i`` with weights ``w_i >= 0`` (NaN values
excluded) and total weight ``W = sum w_i > 0``:

* weighted CDF ``F(v) = sum_{x_i <= v} w_i / W`` and its left limit ``F(v-) = sum_{x_i < v} w_i / W``;
* weighted q-quantile (left convention, FedSCS-XGB Eq. 3) ``Q(q) = inf{v : F(v) >= q}`` for
  ``q > 0``, and ``Q(0)`` = the smallest value with positive weight (the infimum would be -inf).

So ``F(Q(q)-) < q <= F(Q(q))``: the quantile *brackets* its rank, which is what both Theorem 3.1
of FedForest and assumption A2 of FedSCS-XGB are stated in. Weights are weights, not counts: a
sample of weight 0.01 moves the rank by 0.01 / W (the ``ddsketch`` package gets this wrong).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._inputs import as_ranks, as_values, as_weights
from .errors import SketchError


def left_quantile_index(cumulative: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """Indices of the left-convention q-quantiles in sorted data with ``cumulative`` weights.

    ``cumulative`` is the running weight sum over the sorted values (non-decreasing, last entry
    the total ``W > 0``). The q-quantile is the first value whose running sum reaches ``q * W``;
    ``q = 0`` picks the first value with positive weight.
    """
    total = cumulative[-1]
    index = np.searchsorted(cumulative, qs * total, side="left")
    first_positive = np.searchsorted(cumulative, 0.0, side="right")
    return np.clip(index, first_positive, cumulative.shape[0] - 1)


def sorted_finite(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-missing values in ascending order and their running weight sums."""
    keep = ~np.isnan(x)
    values, weights = x[keep], w[keep]
    order = np.argsort(values, kind="stable")
    return values[order], np.cumsum(weights[order])


def exact_weighted_quantiles(x: ArrayLike, w: ArrayLike | None, qs: ArrayLike) -> np.ndarray:
    """Exact weighted quantiles ``Q(q)`` of ``x`` (left convention, see the module docstring).

    ``w=None`` means unit weights. NaN values are ignored. Raises ``SketchError`` when no value
    has positive weight (the quantile is undefined). Returns float64 with the shape of ``qs``.
    """
    values = as_values(x, ndim=1)
    weights = as_weights(w, values.shape[0])
    ranks = as_ranks(qs)
    xs, cumulative = sorted_finite(values, weights)
    if xs.size == 0 or cumulative[-1] <= 0:
        raise SketchError("weighted quantiles are undefined: no non-missing value has positive weight")
    return xs[left_quantile_index(cumulative, ranks.ravel())].reshape(ranks.shape)


def weighted_cdf(at: ArrayLike, x: ArrayLike, w: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(F(v-), F(v))`` of the data ``(x, w)`` at every ``v`` in ``at`` (NaN data ignored).

    ``F(v-)`` is the share of weight strictly below ``v`` — what a split ``x < v`` sends left —
    and ``F(v)`` the share at or below ``v``. Raises ``SketchError`` on zero total weight.
    """
    values = as_values(x, ndim=1)
    weights = as_weights(w, values.shape[0])
    points = np.asarray(at, dtype=np.float64)
    xs, cumulative = sorted_finite(values, weights)
    if xs.size == 0 or cumulative[-1] <= 0:
        raise SketchError("the weighted CDF is undefined: no non-missing value has positive weight")
    running = np.concatenate(([0.0], cumulative))
    total = cumulative[-1]
    below = running[np.searchsorted(xs, points, side="left")] / total
    at_or_below = running[np.searchsorted(xs, points, side="right")] / total
    return below, at_or_below
