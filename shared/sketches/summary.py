"""The client half of the default sketch: M+1 weighted quantile points per feature.

Why this summary (FedForest §3.1, reused for FedSCS-XGB): a client sends, per feature, the exact
weighted quantiles at ranks ``b/M, b = 0..M`` of its own data plus its total weight. Linear
interpolation through those points is within ``1/M`` of the client's weighted CDF everywhere
(the points bracket their ranks, so curve and interpolant share a band of height ``1/M``), and a
mixture of such curves weighted by total weight is within ``1/M`` of the pooled CDF, however
different the clients are (Theorem 3.1, which holds for Hessian weights as for counts). That is
the *rank* accuracy FedSCS-XGB's convergence argument needs (A2), at a fixed ``M+1`` floats per
feature, with no tuning against the data's scale. The server half is ``mixture.py``.

Choosing M: the bound ``1/M`` is in units of total weight, a bin holds ``1/B``. ``M = B`` may be
off by up to a whole bin (measured on the seglearn watch data: ~0.55/M); ``M = 4B`` guarantees
at most a quarter bin (measured ~0.25/M) for ``8 (4B + 1)`` bytes per feature per client.

Privacy note: the points are M+1 actual feature values of the client's windows (FedForest sends
the same); DDSketch sends only bucket indices. Neither is a raw signal, but say so in reviews.

Fields of one ``WeightedSummary`` (one client, one feature):

* ``points`` — float64 ``(M+1,)``, non-decreasing: ``points[b] = Q(b/M)`` (left-convention
  weighted quantile, see ``weighted.py``); ``points[0]`` is the smallest and ``points[M]`` the
  largest value with positive weight. Ties simply repeat a value. Empty when ``count == 0``.
* ``total_weight`` — the weight of the non-missing values: the client's mixture weight.
* ``count`` — number of non-missing values. If ``count > 0`` but ``total_weight == 0`` (every
  Hessian underflowed), the points are *count* quantiles instead, so a fleet whose weights all
  vanish still gets edges (the server then mixes by count).
* ``n_missing``, ``missing_weight`` — the NaN values, excluded from the quantiles; the server
  may use them to judge whether the missing bin matters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._inputs import as_count, as_values, as_weights
from .errors import SketchError
from .weighted import left_quantile_index

#: Upper bound on M: a summary is a message, not a copy of the data.
MAX_POINTS = 1 << 16


def _finite_scalar(value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SketchError(f"{name} must be a real number, got {value!r}") from None
    if not np.isfinite(number) or number < 0:
        raise SketchError(f"{name} must be finite and >= 0, got {value!r}")
    return number


@dataclass(frozen=True, eq=False)
class WeightedSummary:
    """One client's weighted quantile summary of one feature (see the module docstring).

    Immutable and validated on construction (summaries arrive from the network); ``points`` is a
    read-only copy. ``eq=False``: compare ``to_arrays()`` if you need equality.
    """

    points: np.ndarray
    total_weight: float
    count: int
    n_missing: int = 0
    missing_weight: float = 0.0

    def __post_init__(self) -> None:
        points = np.array(self.points, dtype=np.float64, copy=True)
        count = as_count(self.count, name="count", low=0)
        if points.ndim != 1:
            raise SketchError(f"points must be 1-D, got shape {points.shape}")
        if count == 0:
            if points.size:
                raise SketchError("a summary of no values (count 0) must have no points")
        elif not 2 <= points.size <= MAX_POINTS + 1:
            raise SketchError(f"a summary needs M+1 points with 1 <= M <= {MAX_POINTS}, got {points.size} points")
        if not np.all(np.isfinite(points)):
            raise SketchError("summary points must be finite (NaN values belong in n_missing)")
        if np.any(np.diff(points) < 0):
            raise SketchError("summary points must be non-decreasing (they are quantiles at increasing ranks)")
        total = _finite_scalar(self.total_weight, "total_weight")
        if count == 0 and total > 0:
            raise SketchError(f"total_weight {total} > 0 with count 0: the weight must belong to some values")
        points.setflags(write=False)
        object.__setattr__(self, "points", points)
        object.__setattr__(self, "total_weight", total)
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "n_missing", as_count(self.n_missing, name="n_missing", low=0))
        object.__setattr__(self, "missing_weight", _finite_scalar(self.missing_weight, "missing_weight"))

    @property
    def m(self) -> int:
        """M, the number of rank intervals (0 for an empty summary)."""
        return max(self.points.size - 1, 0)

    @property
    def is_empty(self) -> bool:
        return self.count == 0

    def to_arrays(self) -> dict[str, Any]:
        """Wire form: a CBOR-ready dict (float64 points, Python scalars)."""
        return {
            "points": self.points.copy(),
            "total_weight": self.total_weight,
            "count": self.count,
            "n_missing": self.n_missing,
            "missing_weight": self.missing_weight,
        }

    @classmethod
    def from_arrays(cls, data: Mapping[str, Any]) -> WeightedSummary:
        """Inverse of ``to_arrays``; validates everything (the data come from the network)."""
        try:
            return cls(
                points=np.asarray(data["points"], dtype=np.float64),
                total_weight=data["total_weight"],
                count=data["count"],
                n_missing=data.get("n_missing", 0),
                missing_weight=data.get("missing_weight", 0.0),
            )
        except KeyError as exc:
            raise SketchError(f"summary is missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, SketchError):
                raise
            raise SketchError(f"malformed summary: {exc}") from None


def summarize(x: ArrayLike, w: ArrayLike | None, m: int) -> WeightedSummary:
    """Summarise one feature column ``x`` with per-sample weights ``w`` (``None``: counts)."""
    values = as_values(x, ndim=1)
    return summarize_columns(values[:, None], w, m)[0]


def summarize_columns(X: ArrayLike, w: ArrayLike | None, m: int) -> list[WeightedSummary]:
    """One ``WeightedSummary`` per column of ``X`` (n_samples, n_features), same weights ``w``.

    All columns are sorted in one vectorised call; only the M+1 binary searches run per column.
    """
    data = as_values(X, ndim=2, name="X")
    n, d = data.shape
    weights = as_weights(w, n)
    m = as_count(m, name="m", low=1, high=MAX_POINTS)
    ranks = np.arange(m + 1, dtype=np.float64) / m
    rows = np.ascontiguousarray(data.T)  # one contiguous row per feature
    missing = np.isnan(rows)
    order = np.argsort(rows, axis=1, kind="stable")  # NaN sorts last
    sorted_values = np.take_along_axis(rows, order, axis=1)
    cumulative = np.cumsum(np.where(np.isnan(sorted_values), 0.0, weights[order]), axis=1)
    counts = n - missing.sum(axis=1)
    missing_weight = missing.astype(np.float64) @ weights
    out: list[WeightedSummary] = []
    for j in range(d):
        k = int(counts[j])
        if k == 0:
            points, total = np.empty(0), 0.0
        else:
            running = cumulative[j, :k]
            total = float(running[-1])
            if total <= 0:  # every weight is zero: fall back to count quantiles (documented above)
                running = np.arange(1, k + 1, dtype=np.float64)
            points = sorted_values[j, left_quantile_index(running, ranks)]
        out.append(WeightedSummary(points, total, k, int(missing[j].sum()), float(missing_weight[j])))
    return out


def summaries_to_arrays(summaries: Sequence[WeightedSummary]) -> dict[str, np.ndarray]:
    """Column-batched wire form of one client's per-feature summaries (all with the same M).

    ``points`` is ``(d, M+1)``; rows of empty features (count 0) are zeros and are ignored.
    """
    if not summaries:
        raise SketchError("no summaries to pack")
    ms = {s.m for s in summaries if not s.is_empty}
    if len(ms) > 1:
        raise SketchError(f"summaries_to_arrays needs one M for all features, got {sorted(ms)}")
    m = ms.pop() if ms else 1
    points = np.zeros((len(summaries), m + 1), dtype=np.float64)
    for j, s in enumerate(summaries):
        if not s.is_empty:
            points[j] = s.points
    return {
        "points": points,
        "total_weight": np.array([s.total_weight for s in summaries], dtype=np.float64),
        "count": np.array([s.count for s in summaries], dtype=np.int64),
        "n_missing": np.array([s.n_missing for s in summaries], dtype=np.int64),
        "missing_weight": np.array([s.missing_weight for s in summaries], dtype=np.float64),
    }


def summaries_from_arrays(data: Mapping[str, Any]) -> list[WeightedSummary]:
    """Inverse of ``summaries_to_arrays``; validates shapes and every summary."""
    try:
        points = np.asarray(data["points"], dtype=np.float64)
        fields = {k: np.asarray(data[k]) for k in ("total_weight", "count", "n_missing", "missing_weight")}
    except KeyError as exc:
        raise SketchError(f"summaries are missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise SketchError(f"malformed summaries: {exc}") from None
    if points.ndim != 2:
        raise SketchError(f"points must be 2-D (n_features, M+1), got shape {points.shape}")
    d = points.shape[0]
    for name, array in fields.items():
        if array.shape != (d,):
            raise SketchError(f"{name} must have shape ({d},) to match points, got {array.shape}")
    for name in ("count", "n_missing"):
        if fields[name].dtype.kind not in "iu":
            raise SketchError(f"{name} must be integers, got dtype {fields[name].dtype}")
    return [
        WeightedSummary(
            points=points[j] if fields["count"][j] > 0 else np.empty(0),
            total_weight=fields["total_weight"][j],
            count=int(fields["count"][j]),
            n_missing=int(fields["n_missing"][j]),
            missing_weight=fields["missing_weight"][j],
        )
        for j in range(d)
    ]
