"""The numpy inference engine: every row through every tree at once.

Why this shape: a gateway (Raspberry Pi, numpy only) scores small batches continuously, so
Python-level loops over rows or trees would dominate. The ensemble is compiled once into one
node table over all trees (global node id = tree offset + local id; a leaf's children point to
itself), then a ``(n_rows, n_trees)`` array of current nodes advances one level per step with
fancy indexing, ``max_depth`` steps in all. The only Python loops are over depth (and over row
chunks that bound temporary memory).

Numerics, decided here once:

* **The split rule: a row goes left iff ``float32(x) < threshold``.** Inputs are rounded to the
  nearest float32 (as XGBoost and scikit-learn's trees round theirs; beyond the float32 range:
  ±inf; NaN stays NaN) and then compared, in float64, with the stored threshold. So float64 and
  float32 inputs of the same float32 value route alike, and a float64 value between its float32
  rounding and a threshold goes where its float32 rounding goes -- as in XGBoost, in TFLite
  (which computes in float32 and stores the smallest float32 ``t32 >= t``: for a float32 ``x``,
  ``x < t`` iff ``x < t32``), and in training, whose clients bin and route their features
  rounded to float32. Thresholds keep their float64 value: scikit-learn style cut points between
  two float32 values work too, and export to XGBoost exactly rounded up to the next float32.
* Categorical membership: codes come from (float32-rounded) values that are exact non-negative
  integers up to 2**31 - 1 (anything else is not in any set, so it goes right; a code that is
  no float32 value, such as 2**24 + 1, matches no input, as in TFLite). Each categorical node gets a
  dense boolean row of width (its largest code + 1) in one flat table; when the total would
  exceed ``DENSE_CATEGORY_BUDGET`` entries (possible with hostile or huge codes) the engine
  switches to a sorted-key binary search with the same results, so memory stays bounded.
* Sums: boosted margins are ``base_score`` + per-output sums of scalar-leaf trees (grouped by
  output with ``np.add.reduceat``) + sums of vector-leaf trees; forests average vector leaves.
  All in float64; the order differs from a sequential float32 sum by rounding only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from .tree import node_depths

if TYPE_CHECKING:
    from .ensemble import TreeEnsemble

#: Largest dense category table (booleans, summed over categorical nodes) before falling back.
DENSE_CATEGORY_BUDGET = 1 << 22
#: Rows per chunk are chosen so one chunk's (rows x trees x width) temporaries stay below this.
ROW_CHUNK_ELEMENTS = 1 << 21
_MAX_CODE = np.iinfo(np.int32).max


def as_rows(X: ArrayLike) -> tuple[np.ndarray, bool]:
    """``X`` as a 2-D real array (a 1-D ``X`` is one row) and whether it was 1-D; the engines'
    common input check."""
    array = np.asarray(X)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"X must be a real numeric array, got dtype {array.dtype}")
    single = array.ndim == 1
    if single:
        array = array[None, :]
    elif array.ndim != 2:
        raise ValueError(f"X must be 1-D (one row) or 2-D (rows x features), got shape {array.shape}")
    return array, single


def as_float32_values(X: ArrayLike) -> np.ndarray:
    """``X`` rounded to the nearest float32 values, returned as float64 (values beyond the
    float32 range become ±inf, NaN stays NaN): the inputs every split compares.

    Parameters
    ----------
    X : array_like
        Real values, any shape.

    Returns
    -------
    numpy.ndarray
        A float64 array of float32 values, of ``X``'s shape.
    """
    with np.errstate(over="ignore"):
        return np.asarray(X).astype(np.float32).astype(np.float64)


class CompiledEnsemble:
    """An ensemble's trees as one node table, ready for vectorised traversal."""

    def __init__(self, ensemble: TreeEnsemble) -> None:
        trees = ensemble.trees
        self.kind = ensemble.kind
        self.n_features = ensemble.n_features
        self.n_outputs = ensemble.n_outputs
        self.n_trees = len(trees)
        self.base_score = np.asarray(ensemble.base_score, dtype=np.float64)
        sizes = np.array([t.n_nodes for t in trees], dtype=np.intp)
        self.offsets = np.zeros(self.n_trees + 1, dtype=np.intp)
        np.cumsum(sizes, out=self.offsets[1:])
        self.roots = self.offsets[:-1].copy()
        self.max_depth = max((int(node_depths(t.left, t.right).max()) for t in trees), default=0)
        self._compile_nodes(trees, sizes)
        self._compile_categories(trees)
        self._compile_values(trees, np.asarray(ensemble.tree_output))

    # --- compilation -------------------------------------------------------------------------
    def _compile_nodes(self, trees: tuple, sizes: np.ndarray) -> None:
        n_total = int(self.offsets[-1])
        ids = np.arange(n_total, dtype=np.intp)
        shift = np.repeat(self.offsets[:-1], sizes)
        left = _concat([t.left for t in trees], np.intp)
        right = _concat([t.right for t in trees], np.intp)
        leaf = left < 0
        self.left = np.where(leaf, ids, left + shift)
        self.right = np.where(leaf, ids, right + shift)
        self.feature = np.where(leaf, 0, _concat([t.feature for t in trees], np.intp))
        self.threshold = _concat([t.threshold for t in trees], np.float64)
        self.default_left = _concat([t.default_left for t in trees], np.bool_)
        self.is_categorical = _concat([t.is_categorical for t in trees], np.bool_)
        self.has_categorical = bool(self.is_categorical.any())

    def _compile_categories(self, trees: tuple) -> None:
        if not self.has_categorical:
            return
        codes = _concat([t.cat_values for t in trees], np.int64)
        owner = _concat(  # global id of the node each code belongs to
            [np.repeat(np.arange(t.n_nodes), np.diff(t.cat_offsets)) + off for t, off in zip(trees, self.offsets)],
            np.intp,
        )
        n_total = int(self.offsets[-1])
        width = np.zeros(n_total, dtype=np.int64)
        np.maximum.at(width, owner, codes + 1)
        total = int(width.sum())
        self.dense_categories = total <= DENSE_CATEGORY_BUDGET
        if self.dense_categories:
            self.cat_width = width
            self.cat_base = np.concatenate([[0], np.cumsum(width)[:-1]]).astype(np.int64)
            self.cat_table = np.zeros(total + 1, dtype=np.bool_)  # last entry: "not a member"
            self.cat_table[self.cat_base[owner] + codes] = True
        else:
            # owner ascending, codes sorted within an owner -> keys already sorted; the sentinel
            # (larger than any query) keeps searchsorted's answer a valid index.
            self.cat_stride = int(codes.max()) + 1 if codes.size else 1
            keys = owner.astype(np.int64) * self.cat_stride + codes
            self.cat_keys = np.append(keys, np.iinfo(np.int64).max)

    def _compile_values(self, trees: tuple, tree_output: np.ndarray) -> None:
        scalar = tree_output >= 0
        # Scalar-leaf trees, sorted (stably) by their output so one reduceat sums each output.
        order = np.flatnonzero(scalar)
        order = order[np.argsort(tree_output[order], kind="stable")]
        self.scalar_cols = order
        self.scalar_value = np.zeros(int(self.offsets[-1]), dtype=np.float64)
        for t in order:
            self.scalar_value[self.offsets[t] : self.offsets[t + 1]] = trees[t].value[:, 0]
        outputs = tree_output[order]
        starts = np.flatnonzero(np.concatenate([[True], outputs[1:] != outputs[:-1]])) if order.size else order
        self.scalar_group_starts = starts
        self.scalar_group_outputs = outputs[starts] if order.size else order
        # Vector-leaf trees: their own value table, indexed by global id + per-tree shift.
        vector = np.flatnonzero(~scalar)
        self.vector_cols = vector
        sizes = np.array([trees[t].n_nodes for t in vector], dtype=np.intp)
        vector_offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
        self.vector_shift = vector_offsets - self.offsets[vector]
        self.vector_value = (
            np.concatenate([trees[t].value for t in vector]) if vector.size else np.zeros((0, self.n_outputs))
        )

    # --- evaluation -------------------------------------------------------------------------------
    def rows(self, X: ArrayLike) -> tuple[np.ndarray, bool]:
        """``X`` rounded to float32 (the split rule), as a C-contiguous float64 (n_rows,
        n_features) array, and whether it was 1-D."""
        array, single = as_rows(X)
        if array.shape[1] != self.n_features:
            raise ValueError(f"X has {array.shape[1]} features per row, the model expects {self.n_features}")
        return np.ascontiguousarray(as_float32_values(array)), single

    def traverse(self, X: np.ndarray) -> np.ndarray:
        """Global leaf ids (n_rows, n_trees) for a float64 (n_rows, n_features) array."""
        n_rows = X.shape[0]
        node = np.broadcast_to(self.roots, (n_rows, self.n_trees)).copy()
        if self.max_depth == 0 or n_rows == 0:
            return node
        flat = X.ravel()
        row_base = (np.arange(n_rows, dtype=np.intp) * self.n_features)[:, None]
        for _ in range(self.max_depth):
            x = flat[row_base + self.feature[node]]
            go_left = x < self.threshold[node]
            if self.has_categorical:
                cat = self.is_categorical[node]
                if cat.any():
                    go_left[cat] = self._member(node[cat], x[cat])
            missing = np.isnan(x)
            if missing.any():
                go_left |= missing & self.default_left[node]
            node = np.where(go_left, self.left[node], self.right[node])
        return node

    def _member(self, node: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Whether each value is a code in its categorical node's set (NaN and non-codes: no)."""
        valid = (x >= 0) & (x <= _MAX_CODE) & (np.floor(x) == x)
        code = np.where(valid, x, 0).astype(np.int64)
        if self.dense_categories:
            valid &= code < self.cat_width[node]
            index = np.where(valid, self.cat_base[node] + code, self.cat_table.shape[0] - 1)
            return self.cat_table[index]
        valid &= code < self.cat_stride
        key = node.astype(np.int64) * self.cat_stride + code
        return valid & (self.cat_keys[np.searchsorted(self.cat_keys, key)] == key)

    def leaves(self, X: ArrayLike) -> np.ndarray:
        rows, single = self.rows(X)
        local = (self.traverse(rows) - self.roots).astype(np.int32)
        return local[0] if single else local

    def raw(self, X: ArrayLike) -> np.ndarray:
        rows, single = self.rows(X)
        n_rows = rows.shape[0]
        out = np.empty((n_rows, self.n_outputs), dtype=np.float64)
        per_row = max(1, self.n_trees * max(1, self.vector_value.shape[1] if self.vector_cols.size else 1))
        step = max(1, ROW_CHUNK_ELEMENTS // per_row)
        for start in range(0, n_rows, step):
            out[start : start + step] = self._combine(self.traverse(rows[start : start + step]))
        return out[0] if single else out

    def _combine(self, leaves: np.ndarray) -> np.ndarray:
        """Apply the ensemble rule (before the link) to global leaf ids."""
        total = np.zeros((leaves.shape[0], self.n_outputs), dtype=np.float64)
        if self.scalar_cols.size:
            values = self.scalar_value[leaves[:, self.scalar_cols]]
            total[:, self.scalar_group_outputs] += np.add.reduceat(values, self.scalar_group_starts, axis=1)
        if self.vector_cols.size:
            index = leaves[:, self.vector_cols] + self.vector_shift
            total += self.vector_value[index].sum(axis=1)
        if self.kind == "boosted":
            total += self.base_score
        elif self.kind == "forest":
            total /= self.n_trees
        return total


def _concat(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype=dtype)
