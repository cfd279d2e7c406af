"""Rank error: how far a set of bin edges is from the exact weighted quantiles of the data.

Definition. Let ``F`` be the weighted CDF of the data ``(x, w)`` *as the trees see it* — ``x``
rounded to float32 like ``bin_ids`` does, NaN excluded — and ``F(e-)`` its left limit. A split
at edge ``e`` sends ``F(e-)`` of the weight left, and ``F(e)`` is the weight at or below ``e``;
``[F(e-), F(e)]`` is the edge's *rank bracket* (wider than a point when ``e`` is a tied value).
For ``B`` bins the target ranks are ``r_b = b/B``, ``b = 1..B-1``, and

    rank_error = max_b  min_e  dist(r_b, [F(e-), F(e)]),   dist(r, [lo, hi]) = max(lo - r, r - hi, 0),

with the two virtual edges ``-inf`` (bracket ``[0, 0]``) and ``+inf`` (``[1, 1]``) always
available (so no edges at all is well defined). This is the smallest ``alpha`` for which every
target rank has an edge satisfying FedSCS-XGB's bracketing assumption A2,
``F(e-) <= b/B + alpha`` and ``F(e) >= b/B - alpha``. It is 0 for the exact weighted quantiles
(``exact_edges``), at most ``1/M`` (+ round-off) for the mixture of M-point summaries, and for
DDSketch at most the weight of its heaviest bucket — which is large when a feature's spread is
small next to its magnitude (20 ± 0.05).

Targets are matched to the nearest edge rather than to "the b-th edge" because deduplication
(float32 ties) can leave fewer than ``B-1`` edges, and one tied edge may serve several targets.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._inputs import as_count, as_values, as_weights, interior_ranks
from .edges import finalize_edges, validate_edges
from .errors import SketchError
from .weighted import exact_weighted_quantiles, weighted_cdf


def _float32_view(x: ArrayLike) -> np.ndarray:
    """``x`` rounded to float32 (as ``bin_ids`` does), returned as float64; NaN kept."""
    values = np.asarray(x)
    if values.dtype.kind not in "biuf":
        raise SketchError(f"x must hold real numbers (NaN for missing), got dtype {values.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(np.float32).astype(np.float64)


def target_rank_errors(edges: ArrayLike, x: ArrayLike, w: ArrayLike | None, n_bins: int | None = None) -> np.ndarray:
    """Per-target distances ``min_e dist(b/B, [F(e-), F(e)])`` for ``b = 1..B-1``.

    ``n_bins`` defaults to ``len(edges) + 1``; pass the requested ``B`` when the edges came from
    a sketch, since deduplication may have shortened them.
    """
    e = validate_edges(edges).astype(np.float64)
    bins = e.size + 1 if n_bins is None else as_count(n_bins, name="n_bins", low=1)
    if bins == 1:
        return np.empty(0)
    values = _float32_view(as_values(x, ndim=1))
    weights = as_weights(w, values.shape[0])
    below, at_or_below = weighted_cdf(e, values, weights)
    lo = np.concatenate(([0.0], below, [1.0]))  # with the virtual edges -inf and +inf
    hi = np.concatenate(([0.0], at_or_below, [1.0]))
    targets = interior_ranks(bins)
    # Brackets are ordered (hi[k] <= lo[k+1]), so the nearest is the first with hi >= r or the one before.
    k = np.searchsorted(hi, targets, side="left")
    k = np.clip(k, 1, hi.size - 1)
    dist_k = np.maximum(np.maximum(lo[k] - targets, targets - hi[k]), 0.0)
    dist_prev = np.maximum(np.maximum(lo[k - 1] - targets, targets - hi[k - 1]), 0.0)
    return np.minimum(dist_k, dist_prev)


def rank_error(edges: ArrayLike, x: ArrayLike, w: ArrayLike | None, n_bins: int | None = None) -> float:
    """The rank error ``alpha`` of ``edges`` on data ``(x, w)`` (module docstring); 0 if B = 1."""
    errors = target_rank_errors(edges, x, w, n_bins)
    return float(errors.max()) if errors.size else 0.0


def exact_edges(x: ArrayLike, w: ArrayLike | None, n_bins: int) -> np.ndarray:
    """The reference edges: exact weighted quantiles at ``b/B`` of pooled data, as float32.

    What a centralised trainer holding all the data would use; its rank error is 0.
    """
    values = _float32_view(as_values(x, ndim=1))
    return finalize_edges(exact_weighted_quantiles(values, w, interior_ranks(n_bins)))
