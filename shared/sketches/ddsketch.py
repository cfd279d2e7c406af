"""DDSketch (Masson et al. 2019), the sketch of the FedSCS-XGB paper, vectorised and weighted.

Why our own: the ``ddsketch`` package adds values one by one in Python (~0.6 µs each) and turns
weights into counts — its rank is ``q * (count - 1)`` — so Hessian weights below 1 give wrong
quantiles. Here a whole column is bucketed with one ``log``, one ``unique`` and one weighted
``bincount``, and quantiles use the weighted rank ``q * W`` with the same left convention as
the exact reference (``weighted.py``).

The sketch. With relative accuracy ``alpha`` and ``gamma = (1 + alpha) / (1 - alpha)``, a value
``z`` with ``|z| > MIN_INDEXABLE`` goes to bucket ``k = ceil(log|z| / log gamma)`` (so
``gamma**(k-1) < |z| <= gamma**k``) of the positive or negative store; the rest go to the zero
bucket. A bucket reports ``±2 gamma**k / (gamma + 1)``, within ``alpha * |z|`` of every value in
it. Stores are sparse (sorted int32 keys, float64 weights), so merging is adding weights by key,
exactly, in any order.

Its limitation (ARCHITECTURE §5): the guarantee is on *values*, relative to their magnitude, not
on *ranks*. A feature such as 20 ± 0.05 falls into one or two buckets of width ~0.4 and all
its edges collapse. ``Standardization`` fixes that: every client buckets
``z = (x - center) / scale`` with the *same* ``center``/``scale`` chosen by the server (e.g. the
pooled weighted mean and standard deviation from one round of additive ``weighted_moments``, see
``standardization.py``), and quantiles are mapped back. Sketches with different ``alpha`` or
standardisation cannot be merged. The default rank-accurate sketch remains ``summary.py`` +
``mixture.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._inputs import (
    FLOAT32_MAX,
    as_count,
    as_finite_float,
    as_ranks,
    as_values,
    as_weights,
    interior_ranks,
)
from .edges import finalize_edges
from .errors import SketchError
from .standardization import Standardization
from .weighted import left_quantile_index

#: Smallest ``|z|`` with its own bucket; smaller magnitudes share the zero bucket (reported as 0).
MIN_INDEXABLE = float(np.finfo(np.float64).tiny)
#: alpha below this would need bucket keys beyond int32 for the float range.
MIN_ALPHA = 1e-6
_KEY_LIMIT = np.iinfo(np.int32).max


def _check_alpha(alpha: Any) -> float:
    value = as_finite_float(alpha, "alpha")
    if not MIN_ALPHA <= value < 1:
        raise SketchError(f"alpha (relative accuracy) must be in [{MIN_ALPHA}, 1), got {value}; 0.01 is typical")
    return value


def _store(keys: Any, weights: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    k = np.asarray(keys)
    v = np.asarray(weights)
    if k.ndim != 1 or v.shape != k.shape:
        raise SketchError(f"{name} store: keys and weights must be 1-D of equal length, got {k.shape} and {v.shape}")
    if k.size and k.dtype.kind not in "iu":
        raise SketchError(f"{name} store: keys must be integers, got dtype {k.dtype}")
    if k.size and (k.min() < -_KEY_LIMIT or k.max() > _KEY_LIMIT):
        raise SketchError(f"{name} store: keys must fit int32")
    k = k.astype(np.int32)
    v = v.astype(np.float64)
    if np.any(np.diff(k.astype(np.int64)) <= 0):
        raise SketchError(f"{name} store: keys must be strictly increasing")
    if not np.all(np.isfinite(v)) or np.any(v < 0):
        raise SketchError(f"{name} store: weights must be finite and >= 0")
    k.setflags(write=False)
    v.setflags(write=False)
    return k, v


def _log_gamma(alpha: float) -> float:
    """``log((1 + alpha) / (1 - alpha))``, the bucket width in log space (one formula for keys and values)."""
    return math.log1p(2 * alpha / (1 - alpha))


def _bucket(keys: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum ``weights`` by key (one ``unique`` + one weighted ``bincount``); drop empty buckets."""
    unique, inverse = np.unique(keys, return_inverse=True)
    sums = np.bincount(inverse.ravel(), weights=weights, minlength=unique.size)
    keep = sums > 0
    return unique[keep].astype(np.int32), sums[keep]


@dataclass(frozen=True, eq=False)
class DDSketch:
    """A weighted DDSketch of one feature. Build with ``from_values``; immutable, validated."""

    alpha: float
    pos_keys: np.ndarray
    pos_weights: np.ndarray
    neg_keys: np.ndarray
    neg_weights: np.ndarray
    zero_weight: float = 0.0
    count: int = 0
    n_missing: int = 0
    missing_weight: float = 0.0
    standardization: Standardization = field(default_factory=Standardization)

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpha", _check_alpha(self.alpha))
        pos = _store(self.pos_keys, self.pos_weights, "positive")
        neg = _store(self.neg_keys, self.neg_weights, "negative")
        object.__setattr__(self, "pos_keys", pos[0])
        object.__setattr__(self, "pos_weights", pos[1])
        object.__setattr__(self, "neg_keys", neg[0])
        object.__setattr__(self, "neg_weights", neg[1])
        for name in ("zero_weight", "missing_weight"):
            value = as_finite_float(getattr(self, name), name)
            if value < 0:
                raise SketchError(f"{name} must be >= 0, got {value}")
            object.__setattr__(self, name, value)
        object.__setattr__(self, "count", as_count(self.count, name="count", low=0))
        object.__setattr__(self, "n_missing", as_count(self.n_missing, name="n_missing", low=0))
        if not isinstance(self.standardization, Standardization):
            raise SketchError("standardization must be a Standardization")

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def from_values(
        cls,
        x: ArrayLike,
        w: ArrayLike | None = None,
        alpha: float = 0.01,
        standardization: Standardization | None = None,
    ) -> DDSketch:
        """Sketch one column ``x`` with weights ``w`` (``None``: counts). NaN is counted apart."""
        return cls.from_columns(as_values(x, ndim=1)[:, None], w, alpha, [standardization or Standardization()])[0]

    @classmethod
    def from_columns(
        cls,
        X: ArrayLike,
        w: ArrayLike | None = None,
        alpha: float = 0.01,
        standardizations: Sequence[Standardization] | None = None,
    ) -> list[DDSketch]:
        """One sketch per column of ``X`` (n, d); keys for all columns come from one vectorised ``log``."""
        alpha = _check_alpha(alpha)
        data = as_values(X, ndim=2, name="X")
        n, d = data.shape
        weights = as_weights(w, n)
        maps = list(standardizations) if standardizations is not None else [Standardization()] * d
        if len(maps) != d:
            raise SketchError(f"X has {d} columns but {len(maps)} standardizations were given")
        center = np.array([s.center for s in maps])
        scale = np.array([s.scale for s in maps])
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            z = np.clip((data - center) / scale, -FLOAT32_MAX, FLOAT32_MAX)
            keys = np.ceil(np.log(np.abs(z)) / _log_gamma(alpha))
        missing = np.isnan(z)
        positive = z > MIN_INDEXABLE
        negative = z < -MIN_INDEXABLE
        zero = ~(positive | negative | missing)
        if np.any(np.abs(keys[positive | negative]) > _KEY_LIMIT):
            raise SketchError("bucket keys overflow int32; increase alpha")
        out = []
        for j in range(d):  # one unique + bincount per store and column
            pos = _bucket(keys[positive[:, j], j], weights[positive[:, j]])
            neg = _bucket(keys[negative[:, j], j], weights[negative[:, j]])
            out.append(
                cls(
                    alpha=alpha,
                    pos_keys=pos[0],
                    pos_weights=pos[1],
                    neg_keys=neg[0],
                    neg_weights=neg[1],
                    zero_weight=float(weights[zero[:, j]].sum()),
                    count=int(n - missing[:, j].sum()),
                    n_missing=int(missing[:, j].sum()),
                    missing_weight=float(weights[missing[:, j]].sum()),
                    standardization=maps[j],
                )
            )
        return out

    # -- properties ----------------------------------------------------------------------------

    @property
    def gamma(self) -> float:
        return (1 + self.alpha) / (1 - self.alpha)

    @property
    def total_weight(self) -> float:
        """Weight of the non-missing values."""
        return float(self.neg_weights.sum() + self.zero_weight + self.pos_weights.sum())

    @property
    def n_buckets(self) -> int:
        return int(self.pos_keys.size + self.neg_keys.size + (self.zero_weight > 0))

    # -- merging -------------------------------------------------------------------------------

    def _check_compatible(self, other: DDSketch) -> None:
        if not isinstance(other, DDSketch):
            raise SketchError(f"can only merge a DDSketch, got {type(other).__name__}")
        if other.alpha != self.alpha or other.standardization != self.standardization:
            raise SketchError(
                "cannot merge DDSketches with different alpha or standardization "
                f"({self.alpha}, {self.standardization}) vs ({other.alpha}, {other.standardization}): "
                "the server must send every client the same alpha, center and scale"
            )

    def merge(self, other: DDSketch) -> DDSketch:
        """The sketch of the union of both inputs (bucket weights add by key)."""
        return merge_all([self, other])

    # -- queries -------------------------------------------------------------------------------

    def _buckets(self) -> tuple[np.ndarray, np.ndarray]:
        """Representative values (in z units, ascending) and weights of all non-empty buckets."""
        log_gamma = _log_gamma(self.alpha)
        factor = 2.0 / (self.gamma + 1.0)
        neg = -factor * np.exp(self.neg_keys[::-1].astype(np.float64) * log_gamma)
        pos = factor * np.exp(self.pos_keys.astype(np.float64) * log_gamma)
        zero = np.array([0.0] if self.zero_weight > 0 else [])
        values = np.concatenate([neg, zero, pos])
        weights = np.concatenate(
            [self.neg_weights[::-1], [self.zero_weight] if self.zero_weight > 0 else [], self.pos_weights]
        )
        return values, weights

    def quantiles(self, qs: ArrayLike) -> np.ndarray:
        """Weighted q-quantiles (left convention: first bucket whose running weight reaches ``q W``).

        Each answer is within ``alpha * |z|`` (in standardised units) of the exact weighted
        quantile ``z`` of the sketched data. Raises ``SketchError`` if the sketch holds no weight.
        """
        ranks = as_ranks(qs)
        values, weights = self._buckets()
        if values.size == 0:
            raise SketchError("quantiles are undefined: the sketch holds no weight")
        z = values[left_quantile_index(np.cumsum(weights), ranks.ravel())]
        s = self.standardization
        return np.clip(s.center + s.scale * z, -FLOAT32_MAX, FLOAT32_MAX).reshape(ranks.shape)

    # -- wire ----------------------------------------------------------------------------------

    def to_arrays(self) -> dict[str, Any]:
        """Wire form: int32 keys, float64 weights, Python scalars — ready for the CBOR codec."""
        return {
            "alpha": self.alpha,
            "center": self.standardization.center,
            "scale": self.standardization.scale,
            "pos_keys": self.pos_keys.copy(),
            "pos_weights": self.pos_weights.copy(),
            "neg_keys": self.neg_keys.copy(),
            "neg_weights": self.neg_weights.copy(),
            "zero_weight": self.zero_weight,
            "count": self.count,
            "n_missing": self.n_missing,
            "missing_weight": self.missing_weight,
        }

    @classmethod
    def from_arrays(cls, data: Mapping[str, Any]) -> DDSketch:
        """Inverse of ``to_arrays``; validates everything (the data come from the network)."""
        try:
            return cls(
                alpha=data["alpha"],
                pos_keys=data["pos_keys"],
                pos_weights=data["pos_weights"],
                neg_keys=data["neg_keys"],
                neg_weights=data["neg_weights"],
                zero_weight=data["zero_weight"],
                count=data["count"],
                n_missing=data.get("n_missing", 0),
                missing_weight=data.get("missing_weight", 0.0),
                standardization=Standardization(data.get("center", 0.0), data.get("scale", 1.0)),
            )
        except KeyError as exc:
            raise SketchError(f"DDSketch is missing field {exc.args[0]!r}") from None


def merge_all(sketches: Sequence[DDSketch]) -> DDSketch:
    """Merge any number of compatible sketches; bit-identical whatever their order.

    The inputs are put in a canonical order before the weights are summed, so floating-point
    addition happens in the same order whichever client replied first.
    """
    if not sketches:
        raise SketchError("no sketches to merge")
    first = sketches[0]
    for other in sketches[1:]:
        first._check_compatible(other)
    ordered = sorted(
        sketches,
        key=lambda s: (
            s.pos_keys.tobytes(),
            s.pos_weights.tobytes(),
            s.neg_keys.tobytes(),
            s.neg_weights.tobytes(),
            s.zero_weight,
            s.count,
            s.n_missing,
            s.missing_weight,
        ),
    )

    def combined(keys: str, weights: str) -> tuple[np.ndarray, np.ndarray]:
        return _bucket(
            np.concatenate([getattr(s, keys) for s in ordered]).astype(np.int64),
            np.concatenate([getattr(s, weights) for s in ordered]),
        )

    pos = combined("pos_keys", "pos_weights")
    neg = combined("neg_keys", "neg_weights")
    return DDSketch(
        alpha=first.alpha,
        pos_keys=pos[0],
        pos_weights=pos[1],
        neg_keys=neg[0],
        neg_weights=neg[1],
        zero_weight=float(sum(s.zero_weight for s in ordered)),
        count=sum(s.count for s in ordered),
        n_missing=sum(s.n_missing for s in ordered),
        missing_weight=float(sum(s.missing_weight for s in ordered)),
        standardization=first.standardization,
    )


def ddsketch_edges(sketches: Sequence[DDSketch], n_bins: int) -> np.ndarray:
    """At most ``n_bins - 1`` float32 edges for one feature: merged quantiles at ``b/B``.

    An empty array when the merged sketch holds no weight (DDSketch keeps no count fallback).
    """
    ranks = interior_ranks(n_bins)
    merged = merge_all(sketches)
    if merged.total_weight <= 0:
        return np.empty(0, dtype=np.float32)
    return finalize_edges(merged.quantiles(ranks))


def ddsketches_to_columns(sketches: Sequence[DDSketch]) -> dict[str, Any]:
    """Column-batched wire form of one client's per-feature sketches (all with the same alpha).

    The stores are concatenated with offsets (feature ``j``: ``pos_keys[pos_offsets[j]:
    pos_offsets[j+1]]``); the standardizations are not sent: the server chose them.
    """
    if not sketches:
        raise SketchError("no sketches to pack")
    alphas = {s.alpha for s in sketches}
    if len(alphas) > 1:
        raise SketchError(f"ddsketches_to_columns needs one alpha for all features, got {sorted(alphas)}")

    def store(keys: str, weights: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k = [getattr(s, keys) for s in sketches]
        offsets = np.concatenate([[0], np.cumsum([a.shape[0] for a in k])]).astype(np.int64)
        return (np.concatenate(k).astype(np.int32), np.concatenate([getattr(s, weights) for s in sketches]), offsets)

    pos_keys, pos_weights, pos_offsets = store("pos_keys", "pos_weights")
    neg_keys, neg_weights, neg_offsets = store("neg_keys", "neg_weights")
    return {
        "alpha": alphas.pop(),
        "pos_keys": pos_keys,
        "pos_weights": pos_weights,
        "pos_offsets": pos_offsets,
        "neg_keys": neg_keys,
        "neg_weights": neg_weights,
        "neg_offsets": neg_offsets,
        "zero_weight": np.array([s.zero_weight for s in sketches], dtype=np.float64),
        "count": np.array([s.count for s in sketches], dtype=np.int64),
        "n_missing": np.array([s.n_missing for s in sketches], dtype=np.int64),
        "missing_weight": np.array([s.missing_weight for s in sketches], dtype=np.float64),
    }


def ddsketches_from_columns(data: Mapping[str, Any], standardizations: Sequence[Standardization]) -> list[DDSketch]:
    """Inverse of ``ddsketches_to_columns`` with the server's standardizations; validates all."""
    try:
        d = len(data["zero_weight"])
        if len(standardizations) != d:
            raise SketchError(f"{d} sketches but {len(standardizations)} standardizations")
        po, no = np.asarray(data["pos_offsets"]), np.asarray(data["neg_offsets"])
        if po.shape != (d + 1,) or no.shape != (d + 1,):
            raise SketchError(f"store offsets must have {d + 1} entries")
        return [
            DDSketch(
                alpha=data["alpha"],
                pos_keys=data["pos_keys"][po[j] : po[j + 1]],
                pos_weights=data["pos_weights"][po[j] : po[j + 1]],
                neg_keys=data["neg_keys"][no[j] : no[j + 1]],
                neg_weights=data["neg_weights"][no[j] : no[j + 1]],
                zero_weight=float(data["zero_weight"][j]),
                count=int(data["count"][j]),
                n_missing=int(data["n_missing"][j]),
                missing_weight=float(data["missing_weight"][j]),
                standardization=standardizations[j],
            )
            for j in range(d)
        ]
    except KeyError as exc:
        raise SketchError(f"DDSketch columns are missing field {exc.args[0]!r}") from None
