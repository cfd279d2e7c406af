"""FedSCS-XGB's atoms: samples grouped by their bin-id vector, with summed statistics.

An atom is one distinct bin-id vector ``r`` (one bin id per feature, ``shared.sketches.bin_ids``)
with the count ``W_r`` and the per-class sums ``G_r``, ``H_r`` of the samples mapped to it. A
client groups its samples (Alg. 2 step 15), the server groups the clients' atoms again by key
(Alg. 1 step 14): the same function, because summing is associative -- which is why K clients
give the trees of one client holding their union (Lemma 1), up to float re-association.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["Atoms", "merge_atoms"]


class Atoms(NamedTuple):
    """Merged atoms: distinct bin-id vectors ``keys`` ``(A, d)`` (sorted), and per atom the sums
    ``grad``/``hess`` (``(A,)`` or ``(A, K)``, float64) and the sample ``count`` (float64)."""

    keys: np.ndarray
    grad: np.ndarray
    hess: np.ndarray
    count: np.ndarray  # type: ignore[assignment]  # the field shadows tuple.count, as the format names it


def merge_atoms(bins: ArrayLike, grad: ArrayLike, hess: ArrayLike, counts: ArrayLike | None = None) -> Atoms:
    """Merge rows with identical bin-id vectors by summing their statistics.

    ``bins`` ``(A, d)`` integers; ``grad``/``hess`` ``(A,)`` or ``(A, K)``; ``counts`` ``(A,)``
    (``None``: one sample per row). Returns :class:`Atoms` ``(keys, G, H, W)`` with keys sorted
    lexicographically (so the result does not depend on the row order of ``bins``; the sums are
    accumulated in row order) and ``W`` as float64 (exact for counts below 2**53).
    """
    b = np.asarray(bins)
    if b.ndim != 2 or b.dtype.kind not in "iu":
        raise ValueError(f"bins must be a 2-D integer array, got {b.dtype} of shape {b.shape}")
    n = b.shape[0]
    g = np.asarray(grad, dtype=np.float64)
    h = np.asarray(hess, dtype=np.float64)
    if g.shape[:1] != (n,) or h.shape != g.shape or g.ndim not in (1, 2):
        raise ValueError(f"grad/hess must have shape ({n},) or ({n}, K), got {g.shape} and {h.shape}")
    if counts is None:
        w = np.ones(n)
    else:
        w = np.asarray(counts, dtype=np.float64)
        if w.shape != (n,) or not np.isfinite(w).all() or (w < 0).any():
            raise ValueError(f"counts must be finite, >= 0 and of shape ({n},)")
    keys, inverse = np.unique(b, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    m = keys.shape[0]

    def total(v: np.ndarray) -> np.ndarray:
        if v.ndim == 1:
            return np.bincount(inverse, weights=v, minlength=m)
        k = v.shape[1]
        flat = (inverse[:, None] * k + np.arange(k)).ravel()
        return np.bincount(flat, weights=v.ravel(), minlength=m * k).reshape(m, k)

    return Atoms(keys, total(g), total(h), total(w))
