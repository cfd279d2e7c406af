"""The shared affine map a DDSketch applies before bucketing, and where the server gets it.

Why: DDSketch's buckets are relative to ``|value|``, so a feature whose spread is small next to its
magnitude (20 ± 0.05, ``|acceleration|`` ≈ 1 g) lands in one or two buckets. Subtracting a centre
near the data moves the values next to 0, where log buckets are finest. Every client must use
the *same* centre and scale (or their sketches do not merge), so the server picks them — e.g.
from one round of additive ``weighted_moments`` summed over clients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from ._inputs import as_finite_float, as_values, as_weights
from .errors import SketchError


@dataclass(frozen=True)
class Standardization:
    """The shared affine map ``z = (x - center) / scale`` applied before bucketing."""

    center: float = 0.0
    scale: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "center", as_finite_float(self.center, "center"))
        object.__setattr__(self, "scale", as_finite_float(self.scale, "scale"))
        if not self.scale > 0:
            raise SketchError(f"scale must be > 0, got {self.scale}")

    @classmethod
    def from_moments(cls, moments: ArrayLike) -> Standardization:
        """Mean and standard deviation from pooled ``weighted_moments`` ``[W, Σwx, Σwx²]``.

        A spread lost in round-off (``var <= 1e-10 * E[x²]``: a constant feature, where
        ``E[x²] - mean²`` is cancellation noise) or no weight gives ``scale = 1``. Centring is
        what un-collapses an offset feature; log buckets are scale-invariant, so ``scale`` only
        keeps ``z`` in a readable range.
        """
        weight, first, second = (float(v) for v in np.asarray(moments, dtype=np.float64).reshape(3))
        if not (weight > 0 and math.isfinite(first) and math.isfinite(second)):
            return cls(0.0, 1.0)
        mean = first / weight
        mean_square = second / weight
        var = mean_square - mean * mean
        std = math.sqrt(var) if var > 1e-10 * mean_square else 1.0
        return cls(mean, std if math.isfinite(std) and std > 0 else 1.0)


def weighted_moments(X: ArrayLike, w: ArrayLike | None = None) -> np.ndarray:
    """Additive per-column ``[W, Σwx, Σwx²]`` (shape ``(3, d)``, NaN excluded) for ``Standardization``.

    Clients send these, the server sums them over clients and calls ``from_moments`` per column.
    ``X`` may be 1-D (one column; result shape ``(3,)``).
    """
    data = np.asarray(X)
    one = data.ndim == 1
    values = as_values(data[:, None] if one else data, ndim=2, name="X")
    weights = as_weights(w, values.shape[0])
    present = ~np.isnan(values)
    v = np.where(present, values, 0.0)
    out = np.stack([present.T.astype(np.float64) @ weights, v.T @ weights, (v * v).T @ weights])
    return out[:, 0] if one else out
