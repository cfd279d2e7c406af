"""Input checks and normalisation shared by every sketch.

Why one place: the summary, the DDSketch, the exact reference and the accuracy measure must see
*the same* data, or their comparisons measure the disagreement of the checks rather than of the
sketches. The conventions fixed here:

* values are float64; ``NaN`` means missing (excluded from every quantile, counted apart);
* ``±inf`` and anything beyond float32's range count as ``±FLT_MAX`` — the trees compare float32
  features (XGBoost semantics), where such values are ``±inf`` and fall into the outermost bins,
  which is exactly where ``±FLT_MAX`` orders them; this keeps every edge finite;
* weights are finite and ``>= 0`` (Hessians of a convex loss, or counts); ``None`` means 1 each.
"""

from __future__ import annotations

import math
import operator

import numpy as np
from numpy.typing import ArrayLike

from .errors import SketchError

#: Largest finite float32; the clip bound for values (see the module docstring).
FLOAT32_MAX = float(np.finfo(np.float32).max)


def as_values(x: ArrayLike, *, ndim: int, name: str = "x") -> np.ndarray:
    """A private float64 copy of ``x`` with ``ndim`` dimensions, infinities clipped, NaN kept."""
    array = np.asarray(x)
    if array.dtype.kind not in "biuf":
        raise SketchError(f"{name} must hold real numbers (NaN for missing), got dtype {array.dtype}")
    if array.ndim != ndim:
        shape = "(n,)" if ndim == 1 else "(n_samples, n_features)"
        raise SketchError(f"{name} must be {ndim}-D {shape}, got shape {array.shape}")
    values = array.astype(np.float64, copy=True)
    np.clip(values, -FLOAT32_MAX, FLOAT32_MAX, out=values)  # NaN propagates through clip
    return values


def as_weights(w: ArrayLike | None, n: int, *, name: str = "w") -> np.ndarray:
    """Per-sample float64 weights of length ``n``; ``None`` gives unit weights (counts)."""
    if w is None:
        return np.ones(n, dtype=np.float64)
    array = np.asarray(w)
    if array.dtype.kind not in "biuf":
        raise SketchError(f"{name} must hold real numbers, got dtype {array.dtype}")
    if array.shape != (n,):
        raise SketchError(f"{name} must have shape ({n},) — one weight per sample — got {array.shape}")
    weights = array.astype(np.float64, copy=True)
    bad = ~np.isfinite(weights)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SketchError(
            f"{name} must be finite: {name}[{i}] = {weights[i]} ({int(bad.sum())} non-finite); "
            "check the gradient/Hessian computation for overflow"
        )
    negative = weights < 0
    if negative.any():
        i = int(np.flatnonzero(negative)[0])
        raise SketchError(
            f"{name} must be >= 0 (Hessians of a convex loss or counts): {name}[{i}] = {weights[i]} "
            f"({int(negative.sum())} negative)"
        )
    return weights


def as_count(value: object, *, name: str, low: int, high: int | None = None) -> int:
    """An ``int`` in ``[low, high]`` (bools refused: ``True`` bins is a bug, not a request)."""
    if isinstance(value, (bool, np.bool_)):
        raise SketchError(f"{name} must be an integer, got {value!r}")
    try:
        number = operator.index(value)  # type: ignore[arg-type]  # any object: a non-integer raises TypeError
    except TypeError:
        raise SketchError(f"{name} must be an integer, got {value!r}") from None
    if number < low or (high is not None and number > high):
        upper = "" if high is None else f" and <= {high}"
        raise SketchError(f"{name} must be >= {low}{upper}, got {number}")
    return int(number)


def as_finite_float(value: object, name: str) -> float:
    """A finite Python float, or ``SketchError`` naming the field."""
    try:
        number = float(value)  # type: ignore[arg-type]  # any object: a non-number raises TypeError or ValueError
    except (TypeError, ValueError):
        raise SketchError(f"{name} must be a real number, got {value!r}") from None
    if not math.isfinite(number):
        raise SketchError(f"{name} must be finite, got {value!r}")
    return number


def as_ranks(qs: ArrayLike, *, name: str = "qs") -> np.ndarray:
    """Quantile ranks as float64 in ``[0, 1]`` (any shape)."""
    ranks = np.asarray(qs, dtype=np.float64)
    if not np.all((ranks >= 0) & (ranks <= 1)):  # also catches NaN
        raise SketchError(f"{name} must lie in [0, 1], got {ranks.ravel()[:8]}{'...' if ranks.size > 8 else ''}")
    return ranks


def interior_ranks(n_bins: int) -> np.ndarray:
    """The B-1 target ranks ``b/B, b = 1..B-1`` whose inverses are the bin edges."""
    n_bins = as_count(n_bins, name="n_bins", low=2, high=65_535)
    return np.arange(1, n_bins, dtype=np.float64) / n_bins
