"""Bin edges and bin ids: how a sketch's answer becomes the atoms' keys.

Conventions (XGBoost's, shared with ``shared/model/tree.py``):

* ``edges`` of one feature is a sorted, strictly increasing, finite **float32** array. Edges are
  the split thresholds the server may choose, and trees compare float32 features with
  ``x < threshold``; a float32 edge is exactly representable in the float64 model arrays and in
  XGBoost's JSON, so routing, atoms and export agree bit for bit.
* ``bin_ids`` rounds ``x`` to float32 (as XGBoost does on input) and uses
  ``searchsorted(edges, x, side="right")``: bin ``b`` holds ``edges[b-1] <= x < edges[b]``
  (bin 0 is ``x < edges[0]``, bin ``len(edges)`` is ``x >= edges[-1]``). A value equal to an
  edge goes right, as it does at a split on that edge — so "bins ``<= k`` go left" is exactly
  the split ``x < edges[k]``.
* NaN gets the **missing bin id** ``len(edges) + 1``: the id right after the last real bin, so
  a feature's histogram has ``len(edges) + 2`` slots with the missing one last, whatever dtype
  carries the ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from ._inputs import FLOAT32_MAX
from .errors import SketchError


def finalize_edges(raw: ArrayLike) -> np.ndarray:
    """Sorted, unique, finite float32 edges from raw (float64) quantile estimates.

    Rounding to float32 can only widen an edge's rank bracket ``[F(e-), F(e)]`` when the data
    are rounded the same way (which ``bin_ids`` does), so it never worsens the rank error; the
    dedupe merges candidates that the trees could not tell apart anyway. NaN estimates are dropped.
    """
    values = np.asarray(raw, dtype=np.float64).ravel()
    values = np.clip(values[~np.isnan(values)], -FLOAT32_MAX, FLOAT32_MAX)
    return np.unique(values.astype(np.float32))


def validate_edges(edges: ArrayLike, *, feature: int | None = None) -> np.ndarray:
    """``edges`` as a float32 array, or ``SketchError`` if it breaks the conventions above."""
    where = "" if feature is None else f" of feature {feature}"
    array = np.asarray(edges)
    if array.ndim != 1 or array.dtype.kind not in "iuf":
        raise SketchError(f"edges{where} must be a 1-D numeric array, got shape {array.shape} dtype {array.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        as32 = array.astype(np.float32)
    if not np.all(np.isfinite(as32)):
        raise SketchError(f"edges{where} must be finite float32 values; build them with finalize_edges()")
    if np.any(as32.astype(np.float64) != array.astype(np.float64)):
        raise SketchError(f"edges{where} must be float32-representable; build them with finalize_edges()")
    if np.any(np.diff(as32) <= 0):
        raise SketchError(f"edges{where} must be strictly increasing; build them with finalize_edges()")
    return as32


def missing_bin_id(edges: ArrayLike) -> int:
    """The bin id NaN values get for this feature: ``len(edges) + 1``."""
    return int(np.asarray(edges).shape[0]) + 1


def bin_dtype(edges_per_feature: Sequence[ArrayLike]) -> np.dtype:
    """``uint8`` if every id (missing included) fits, else ``uint16``; depends on edges only.

    So every client derives the same dtype from the same broadcast edges. With B bins a feature
    needs ids ``0..B`` (``B`` = missing): ``uint8`` up to ``B = 255``.
    """
    largest = max((missing_bin_id(e) for e in edges_per_feature), default=1)
    if largest <= np.iinfo(np.uint8).max:
        return np.dtype(np.uint8)
    if largest <= np.iinfo(np.uint16).max:
        return np.dtype(np.uint16)
    raise SketchError(f"{largest - 1} edges need more than 16-bit bin ids; use at most 65,534 edges")


def bin_ids(X: ArrayLike, edges: ArrayLike | Sequence[ArrayLike]) -> np.ndarray:
    """Bin ids of ``X`` under ``edges`` (see the module docstring for the exact rule).

    ``X`` 1-D with one edges array gives a 1-D result; ``X`` of shape ``(n, d)`` takes a
    sequence of ``d`` edge arrays (lengths may differ). dtype: ``bin_dtype`` of the edges.
    """
    data = np.asarray(X)
    if data.dtype.kind not in "biuf":
        raise SketchError(f"X must hold real numbers (NaN for missing), got dtype {data.dtype}")
    if data.ndim == 1:
        per_feature = [validate_edges(np.asarray(edges))]
        columns = data[:, None]
    elif data.ndim == 2:
        if isinstance(edges, np.ndarray) and edges.ndim == 1:
            raise SketchError("a 2-D X needs one edges array per column (a list), got a single 1-D array")
        if not isinstance(edges, Iterable):
            raise TypeError(f"a 2-D X needs a sequence of edges arrays, got {type(edges).__name__}")
        per_feature = [validate_edges(e, feature=j) for j, e in enumerate(edges)]
        if len(per_feature) != data.shape[1]:
            raise SketchError(f"X has {data.shape[1]} columns but {len(per_feature)} edge arrays were given")
        columns = data
    else:
        raise SketchError(f"X must be 1-D or 2-D, got shape {data.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        x32 = columns.astype(np.float32)
    dtype = bin_dtype(per_feature)
    out = np.empty(x32.shape, dtype=dtype)
    for j, e in enumerate(per_feature):  # one vectorised searchsorted per feature
        column = x32[:, j]
        ids = np.searchsorted(e, column, side="right")
        ids[np.isnan(column)] = missing_bin_id(e)
        out[:, j] = ids
    return out[:, 0] if data.ndim == 1 else out


def pack_edges(edges: Sequence[ArrayLike]) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature float32 edges as ``(values, offsets)`` for the wire: feature ``j``'s edges are
    ``values[offsets[j]:offsets[j + 1]]``.

    Examples
    --------
    >>> values, offsets = pack_edges([np.array([1.0, 2.0]), np.array([], np.float32), np.array([5.0])])
    >>> values.tolist(), offsets.tolist()
    ([1.0, 2.0, 5.0], [0, 2, 2, 3])
    """
    offsets = np.concatenate([[0], np.cumsum([np.shape(e)[0] for e in edges])]).astype(np.int64)
    values = np.concatenate([np.asarray(e, np.float32) for e in edges]) if len(edges) else np.zeros(0, np.float32)
    return values.astype(np.float32), offsets
