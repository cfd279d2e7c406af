"""The server half of the default sketch: mix the clients' piecewise-linear CDFs and invert.

Each client's ``WeightedSummary`` defines a curve ``F_k``: 0 below ``points[0]``, linear from
``(points[b], b/M)`` to ``(points[b+1], (b+1)/M)``, 1 from ``points[M]`` on; a tied run of points
makes it jump, and at a jump it takes the upper value (right-continuous, like a CDF). The pooled
estimate is ``F~ = sum_k pi_k F_k`` with ``pi_k = W_k / sum W`` (total weights; counts when every
weight is zero). Candidate edges are the inverse ``t_b = inf{x : F~(x) >= b/B}``, ``b = 1..B-1``,
rounded to float32 and deduplicated (``edges.finalize_edges``).

Guarantee (FedForest Theorem 3.1, with weights): ``|F~(x) - F(x)| <= sum_k pi_k / M_k`` for every
``x`` and for left limits, where ``F`` is the pooled weighted CDF — no matter how the clients'
distributions differ. Hence every edge brackets its target: ``F(t_b-) <= b/B + 1/M`` and
``F(t_b) >= b/B - 1/M``, i.e. ``rank_error <= 1/M`` (``accuracy.py``), up to float64 round-off
in the clients' running sums and in this inversion (~1e-12; the tests allow 1e-9).

Summaries are mixed in a canonical order, so the edges are bit-identical whatever order the
clients' replies arrived in. Cost: the K clients' points are laid out once as one sorted integer
array; the inverse is a vectorised bisection over the knots, so B ranks cost
``O(K B log(K M))`` with no Python loop over clients (500 clients x M = 256: ~0.3 s per feature;
evaluating every client at every knot would be quadratic in K). ``compress`` pre-merges summaries
into one (a site aggregator forwarding to the cloud, ARCHITECTURE §8); each such level adds ``1/m``
to the bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from ._inputs import as_count, as_ranks, interior_ranks
from .edges import finalize_edges
from .errors import SketchError
from .summary import MAX_POINTS, WeightedSummary

Side = Literal["left", "right"]


@dataclass(frozen=True)
class _Mixture:
    """The clients that carry mass, laid out for batched evaluation (no loop over clients).

    ``points`` is ``(K, Mmax+1)``, rows padded with +inf. ``ranked`` holds each point's index in
    ``knots`` (pads: ``len(knots)``) plus ``row * stride``, so it is one sorted int array and a
    single ``searchsorted`` counts, for every client at once, its points below a knot.
    """

    knots: np.ndarray
    points: np.ndarray
    m: np.ndarray
    pi: np.ndarray
    ranked: np.ndarray
    stride: int

    @classmethod
    def of(cls, summaries: Sequence[WeightedSummary]) -> _Mixture | None:
        for i, s in enumerate(summaries):
            if not isinstance(s, WeightedSummary):
                raise SketchError(f"summaries[{i}] is a {type(s).__name__}, expected WeightedSummary")
        # Canonical order: the same floating-point sums whatever order the replies arrived in.
        ordered = sorted(summaries, key=lambda s: (s.total_weight, s.count, s.points.tobytes()))
        weights = np.array([s.total_weight for s in ordered], dtype=np.float64)
        if not weights.sum() > 0:  # every weight vanished: mix the count-based points by count
            weights = np.array([s.count for s in ordered], dtype=np.float64)
        keep = np.flatnonzero(weights > 0)
        if keep.size == 0:
            return None
        rows = [ordered[i].points for i in keep]
        m = np.array([r.size - 1 for r in rows], dtype=np.int64)
        points = np.full((len(rows), int(m.max()) + 1), np.inf)
        for k, r in enumerate(rows):  # one row copy per client
            points[k, : r.size] = r
        knots = np.unique(points[np.isfinite(points)])
        stride = knots.size + 1
        ranks = np.searchsorted(knots, points, side="left")  # pads (+inf) get len(knots)
        ranked = (ranks + stride * np.arange(len(rows))[:, None]).ravel()
        return cls(knots, points, m, weights[keep] / weights[keep].sum(), ranked, stride)

    def at_ranks(self, x: np.ndarray, below: np.ndarray) -> np.ndarray:
        """``F~`` at values ``x`` given ``below`` = how many knots each client point must be under.

        A client's point counts as "at or before x" iff its knot index is ``< below``; pass the
        number of knots ``<= x`` for ``F~(x)`` and ``< x`` for the left limit ``F~(x-)``.
        """
        K, width = self.points.shape
        out = np.empty(x.shape, dtype=np.float64)
        chunk = max(1, (1 << 20) // K)  # bound the (K, chunk) temporaries
        rows = np.arange(K)[:, None]
        m = self.m[:, None]
        for start in range(0, x.size, chunk):  # chunks of queries, not samples or clients
            xs = x[start : start + chunk]
            query = below[start : start + chunk][None, :] + self.stride * rows
            j = np.searchsorted(self.ranked, query, side="left") - width * rows  # points before x
            lo = self.points[rows, np.clip(j - 1, 0, m)]
            hi = self.points[rows, np.minimum(j, m)]
            span = hi - lo
            inside = (j > 0) & (j <= m) & (span > 0)
            frac = np.divide(xs - lo, span, out=np.zeros_like(span), where=inside)
            value = np.where(j == 0, 0.0, np.where(j > m, 1.0, (j - 1 + np.clip(frac, 0.0, 1.0)) / m))
            out[start : start + chunk] = (self.pi[:, None] * value).sum(axis=0)
        return out

    def at(self, x: np.ndarray, side: Side) -> np.ndarray:
        return self.at_ranks(x, np.searchsorted(self.knots, x, side=side))

    def at_knots(self, index: np.ndarray, side: Side) -> np.ndarray:
        return self.at_ranks(self.knots[index], index + (1 if side == "right" else 0))

    def inverse(self, r: np.ndarray) -> np.ndarray:
        """``inf{x : F~(x) >= r}`` by a vectorised bisection over the knots (O(K log) per rank)."""
        lo = np.zeros(r.shape, dtype=np.int64)
        hi = np.full(r.shape, self.knots.size - 1, dtype=np.int64)
        while np.any(lo < hi):  # first knot i with F~(knots[i]) >= r (or the last knot)
            mid = (lo + hi) // 2
            reached = self.at_knots(mid, "right") >= r
            hi = np.where(reached, mid, hi)
            lo = np.where(reached, lo, np.minimum(mid + 1, hi))
        i = lo
        prev = np.maximum(i - 1, 0)
        left = self.at_knots(i, "left")
        before = self.at_knots(prev, "right")
        on_knot = (i == 0) | (left < r)  # F~ jumps over r at knot i (a shared tie) or r = 0
        rise = left - before
        frac = np.divide(r - before, rise, out=np.ones_like(r), where=~on_knot & (rise > 0))
        inside = self.knots[prev] + np.clip(frac, 0.0, 1.0) * (self.knots[i] - self.knots[prev])
        return np.where(on_knot, self.knots[i], np.clip(inside, self.knots[prev], self.knots[i]))


def _mixture(summaries: Sequence[WeightedSummary]) -> _Mixture:
    mixture = _Mixture.of(summaries)
    if mixture is None:
        raise SketchError("the mixture is undefined: no summary holds any value")
    return mixture


def mixture_cdf(summaries: Sequence[WeightedSummary], at: ArrayLike, side: Side = "right") -> np.ndarray:
    """The mixture ``F~`` at ``at`` (``side="left"`` for left limits ``F~(x-)``)."""
    if side not in ("left", "right"):
        raise SketchError(f"side must be 'left' or 'right', got {side!r}")
    x = np.asarray(at, dtype=np.float64)
    return _mixture(summaries).at(x.ravel(), side).reshape(x.shape)


def mixture_quantiles(summaries: Sequence[WeightedSummary], ranks: ArrayLike) -> np.ndarray:
    """Raw float64 inverse ``inf{x : F~(x) >= r}`` for each rank ``r`` (``r = 0``: the minimum).

    ``F~`` is linear between consecutive knots (the union of all clients' points) and may jump
    at a knot, so each rank either lands on a knot (a jump, i.e. a tie shared by clients) or is
    interpolated inside one segment. Raises ``SketchError`` if no summary holds any value.
    """
    r = as_ranks(ranks, name="ranks")
    return _mixture(summaries).inverse(r.ravel()).reshape(r.shape)


def merge_edges(summaries: Sequence[WeightedSummary], n_bins: int) -> np.ndarray:
    """At most ``n_bins - 1`` float32 edges for one feature from all clients' summaries of it.

    An empty array when no client has a value (every id is then bin 0 or the missing bin).
    """
    ranks = interior_ranks(n_bins)
    mixture = _Mixture.of(summaries)
    if mixture is None:
        return np.empty(0, dtype=np.float32)
    return finalize_edges(mixture.inverse(ranks))


def merge_edges_columns(per_client: Sequence[Sequence[WeightedSummary]], n_bins: int) -> list[np.ndarray]:
    """``merge_edges`` for every feature; ``per_client[k][f]`` is client k's summary of feature f."""
    if not per_client:
        raise SketchError("no client summaries to merge")
    widths = {len(s) for s in per_client}
    if len(widths) != 1:
        raise SketchError(f"clients summarised different numbers of features: {sorted(widths)}")
    n_features = widths.pop()
    return [merge_edges([client[f] for client in per_client], n_bins) for f in range(n_features)]


def compress(summaries: Sequence[WeightedSummary], m: int) -> WeightedSummary:
    """Pre-merge several summaries of one feature into one with ``m + 1`` points.

    The result mixes like the union of its inputs (weights, counts and missing tallies add);
    its points are the mixture's quantiles at ``b/m``, so its rank bound is the inputs' bound
    plus ``1/m``.
    """
    m = as_count(m, name="m", low=1, high=MAX_POINTS)
    mixture = _Mixture.of(summaries)  # validates the inputs
    total = math.fsum(s.total_weight for s in summaries)  # fsum: exact, so order-independent
    count = sum(s.count for s in summaries)
    n_missing = sum(s.n_missing for s in summaries)
    missing_weight = math.fsum(s.missing_weight for s in summaries)
    if mixture is None:
        return WeightedSummary(np.empty(0), 0.0, 0, n_missing, missing_weight)
    merged = mixture.inverse(np.arange(m + 1, dtype=np.float64) / m)
    merged[0], merged[-1] = mixture.knots[0], mixture.knots[-1]
    return WeightedSummary(np.maximum.accumulate(merged), total, count, n_missing, missing_weight)


def batched_mixture_quantiles(
    points: ArrayLike, weights: ArrayLike, group: ArrayLike, n_groups: int, ranks: ArrayLike
) -> np.ndarray:
    """``mixture_quantiles`` for many independent mixtures at once (FedForest: one mixture per
    (node, feature) pair per level, thousands of them).

    Row ``i`` is one client's summary of mixture ``group[i]``: ``points[i]`` (M+1 non-decreasing
    values, same M for all rows) with mixture weight ``weights[i] > 0``. Returns ``(n_groups,
    len(ranks))`` inverses ``inf{x : F~_g(x) >= r}``; NaN for groups without rows.

    Instead of bisecting per mixture, ``F~_g`` is integrated exactly from events: every client
    segment ``[p_b, p_{b+1}]`` adds slope ``pi / (M (p_{b+1} - p_b))`` (or, when tied, a jump of
    ``pi / M`` at ``p_b``); one sort of all (group, knot) keys and segmented cumulative sums give
    ``F~_g`` at every knot, and one merge of the queries into the knots gives each inverse.
    The result equals ``mixture_quantiles`` up to float64 rounding (~1e-12 relative).
    """
    P = np.asarray(points, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    g = np.asarray(group, dtype=np.int64)
    r = np.asarray(ranks, dtype=np.float64).ravel()
    out = np.full((n_groups, r.size), np.nan)
    if P.shape[0] == 0:
        return out
    if P.ndim != 2 or P.shape[1] < 2 or w.shape != (P.shape[0],) or g.shape != (P.shape[0],):
        raise SketchError(
            f"points must be (rows, M+1) with M >= 1 and one weight and group per row, got "
            f"{P.shape}, {w.shape}, {g.shape}"
        )
    if not (np.isfinite(P).all() and (np.diff(P, axis=1) >= 0).all() and (w > 0).all()):
        raise SketchError("points must be finite and non-decreasing, weights > 0")
    M = P.shape[1] - 1
    total = np.bincount(g, weights=w, minlength=n_groups)
    pi = w / total[g]
    # knots: the distinct values of each group
    rows = np.repeat(np.arange(P.shape[0]), M + 1)
    key_g, key_v = g[rows], P.ravel()
    order = np.lexsort((key_v, key_g))
    sg, sv = key_g[order], key_v[order]
    new = np.ones(sg.size, dtype=bool)
    new[1:] = (sg[1:] != sg[:-1]) | (sv[1:] != sv[:-1])
    knot_g, knot_v = sg[new], sv[new]
    knot_of = np.cumsum(new) - 1  # knot index of every sorted point
    sorted_knot = np.empty(sg.size, dtype=np.int64)
    sorted_knot[order] = knot_of
    point_knot = sorted_knot.reshape(P.shape)
    lo_k, hi_k = point_knot[:, :-1], point_knot[:, 1:]
    lo_v, hi_v = P[:, :-1], P[:, 1:]
    height = np.broadcast_to((pi / M)[:, None], lo_v.shape)
    tied = hi_v <= lo_v
    span = np.where(tied, 1.0, hi_v - lo_v)
    slope = np.where(tied, 0.0, height / span)
    n_knots = knot_v.size
    slope_change = np.bincount(lo_k.ravel(), weights=slope.ravel(), minlength=n_knots) - np.bincount(
        hi_k.ravel(), weights=slope.ravel(), minlength=n_knots
    )
    jump = np.bincount(lo_k.ravel(), weights=np.where(tied, height, 0.0).ravel(), minlength=n_knots)
    start = np.searchsorted(knot_g, np.arange(n_groups), side="left")
    first = np.zeros(n_knots, dtype=bool)
    first[start[start < n_knots]] = True
    # slope on (knot q, knot q+1) = segmented cumsum of the changes at knots <= q
    cum_slope = np.cumsum(slope_change)  # segmented below
    slope_after = _segmented(cum_slope, knot_g, start)
    dx = np.zeros(n_knots)
    dx[1:] = np.where(first[1:], 0.0, knot_v[1:] - knot_v[:-1])
    prev_slope = np.zeros(n_knots)
    prev_slope[1:] = np.where(first[1:], 0.0, slope_after[:-1])
    F = _segmented(np.cumsum(prev_slope * dx + jump), knot_g, start)  # F~ at each knot (right value)
    left_limit = F - jump
    # first knot of the group with F >= r: merge the queries before equal knot values
    n_r = r.size
    q_g = np.repeat(np.arange(n_groups), n_r)
    q_r = np.tile(r, n_groups)
    all_g = np.concatenate([knot_g, q_g])
    all_v = np.concatenate([F, q_r])
    is_knot = np.concatenate([np.ones(n_knots, np.int8), np.zeros(q_g.size, np.int8)])
    merged = np.lexsort((is_knot, all_v, all_g))
    position = np.empty(merged.size, dtype=np.int64)
    position[merged] = np.arange(merged.size)
    q_pos = position[n_knots:]
    queries_before = np.searchsorted(np.sort(q_pos), q_pos, side="left")
    knots_below = q_pos - queries_before  # knots (of any group <= this one) ordered before the query
    end = np.searchsorted(knot_g, np.arange(n_groups), side="right")
    idx = np.minimum(knots_below, np.maximum(end[q_g] - 1, 0))  # global index of the first knot reaching r
    has = end[q_g] > start[q_g]
    idx = np.minimum(idx, n_knots - 1)  # groups without knots: any valid index, masked by ``has``
    prev = np.minimum(np.maximum(idx - 1, start[q_g]), n_knots - 1)
    rise = left_limit[idx] - F[prev]
    interpolate = has & (idx > start[q_g]) & (left_limit[idx] >= q_r) & (rise > 0)
    frac = np.divide(q_r - F[prev], rise, out=np.zeros_like(rise), where=interpolate)
    inside = np.clip(knot_v[prev] + np.clip(frac, 0.0, 1.0) * (knot_v[idx] - knot_v[prev]), knot_v[prev], knot_v[idx])
    x = np.where(interpolate, inside, knot_v[idx])
    out[:] = np.where(has, x, np.nan).reshape(n_groups, n_r)
    return out


def _segmented(cumulative: np.ndarray, group: np.ndarray, start: np.ndarray) -> np.ndarray:
    """A global running sum restarted at each group's first element (groups are contiguous)."""
    base = np.where(start > 0, cumulative[np.maximum(start - 1, 0)], 0.0)
    return cumulative - base[group]
