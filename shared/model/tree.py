"""One decision tree as flat parallel numpy arrays.

Why flat arrays: they serialise as a handful of typed arrays (CBOR, RFC 8746), concatenate
into one node table for vectorised inference over a whole ensemble, and map one-to-one onto
XGBoost's JSON tree arrays. Node ``i``'s fields sit at index ``i`` of every array; the root is
node 0; leaves have ``left == right == feature == -1``.

Routing rules (applied by ``inference.py``, checked against XGBoost and scikit-learn in tests):

* numeric split: go LEFT iff ``x < threshold`` (XGBoost's convention; a value equal to the
  threshold goes right). Comparisons are done in float64 on the input converted to float64,
  which is exact for float32 inputs (see ``inference.py``).
* categorical split (``is_categorical``): go LEFT iff ``x`` is a non-negative integer that is in
  the node's category set ``cat_values[cat_offsets[i]:cat_offsets[i+1]]``. A value that is not a
  category code (negative, non-integer, +-inf, beyond int32) cannot be in the set and goes
  RIGHT. (XGBoost sends its set RIGHT and truncates non-integers; an exporter swaps the
  children and flips ``default_left``.)
* ``NaN`` goes the ``default_left`` way at either kind of split.

``value`` has shape ``(n_nodes, n_outputs)``: the leaf vectors; internal nodes may hold values
too (e.g. XGBoost's ``base_weights`` for export). ``cover`` is optional: the sum of Hessians
(boosting) or of sample weights (forests) that reached each node; inference ignores it.

A ``Tree`` is a plain container: construction copies the arrays read-only and fills defaults
but does not judge them; ``validate`` does (``TreeEnsemble`` validates all its trees when it is
built, which is what protects the inference engine).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .errors import ModelValidationError

#: dtype of every array field; ``value`` is 2-D, ``cat_offsets`` has n_nodes + 1 entries.
FIELD_DTYPES: dict[str, np.dtype] = {
    "feature": np.dtype(np.int32),
    "threshold": np.dtype(np.float64),
    "left": np.dtype(np.int32),
    "right": np.dtype(np.int32),
    "default_left": np.dtype(np.bool_),
    "value": np.dtype(np.float64),
    "is_categorical": np.dtype(np.bool_),
    "cat_offsets": np.dtype(np.int64),
    "cat_values": np.dtype(np.int32),
    "cover": np.dtype(np.float64),
}


def _readonly_copy(value: Any) -> np.ndarray:
    """A private, read-only, native-byte-order copy that keeps the dtype *kind* it was given."""
    array = np.array(value, copy=True)
    if array.dtype.byteorder not in ("=", "|"):
        array = array.astype(array.dtype.newbyteorder("="))
    array.setflags(write=False)
    return array


def same_array(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Bit-exact equality: same dtype, same shape, same bytes (so -0.0 != 0.0)."""
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def node_depths(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Depth of every node reachable from node 0 by breadth-first search, -1 for the others.

    Visits each node at most once, so it terminates on any graph (cycles included); children
    must already be ``-1`` or in range.
    """
    n = left.shape[0]
    depth = np.full(n, -1, dtype=np.int64)
    depth[0] = 0
    frontier = np.zeros(1, dtype=np.int64)
    level = 0
    while frontier.size:
        kids = np.concatenate([left[frontier], right[frontier]]).astype(np.int64)
        kids = np.unique(kids[kids >= 0])
        kids = kids[depth[kids] < 0]
        level += 1
        depth[kids] = level
        frontier = kids
    return depth


@dataclass(frozen=True, eq=False, repr=False, init=False)
class Tree:
    """One tree; see the module docstring for the field meanings and routing rules."""

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    default_left: np.ndarray
    value: np.ndarray
    is_categorical: np.ndarray
    cat_offsets: np.ndarray
    cat_values: np.ndarray
    cover: np.ndarray | None  # optional, stays None

    def __init__(
        self,
        feature: ArrayLike,
        threshold: ArrayLike,
        left: ArrayLike,
        right: ArrayLike,
        default_left: ArrayLike,
        value: ArrayLike,
        is_categorical: ArrayLike | None = None,  # None -> all False
        cat_offsets: ArrayLike | None = None,  # None -> all zeros (no category sets)
        cat_values: ArrayLike | None = None,  # None -> empty
        cover: ArrayLike | None = None,  # optional, stays None
    ) -> None:
        """Copy every array read-only, filling the defaults; the fields are never None afterwards
        except ``cover``."""
        n = int(np.shape(feature)[0]) if np.ndim(feature) >= 1 else 0
        given = {
            "feature": feature,
            "threshold": threshold,
            "left": left,
            "right": right,
            "default_left": default_left,
            "value": value,
            "is_categorical": is_categorical,
            "cat_offsets": cat_offsets,
            "cat_values": cat_values,
            "cover": cover,
        }
        defaults = {
            "is_categorical": lambda: np.zeros(n, dtype=np.bool_),
            "cat_offsets": lambda: np.zeros(n + 1, dtype=np.int64),
            "cat_values": lambda: np.zeros(0, dtype=np.int32),
        }
        for name in FIELD_DTYPES:
            current = given[name]
            if current is None:
                if name == "cover":
                    object.__setattr__(self, name, None)
                    continue
                current = defaults[name]()
            object.__setattr__(self, name, _readonly_copy(current))

    # --- shape helpers -------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return int(self.feature.shape[0])

    @property
    def n_outputs(self) -> int:
        """Width of the leaf vectors (1 for a scalar-leaf boosting tree)."""
        return int(self.value.shape[1]) if self.value.ndim == 2 else 0

    @property
    def is_leaf(self) -> np.ndarray:
        return self.left == -1

    @property
    def depth(self) -> int:
        """Length of the longest root-to-leaf path (0 for a lone leaf); tree must be valid."""
        return int(node_depths(self.left, self.right).max())

    def categories(self, node: int) -> np.ndarray:
        """The sorted category codes that go left at ``node`` (empty for numeric splits)."""
        return self.cat_values[self.cat_offsets[node] : self.cat_offsets[node + 1]]

    # --- constructors ----------------------------------------------------------------------
    @classmethod
    def leaf(cls, value: ArrayLike, *, cover: float | None = None) -> Tree:
        """A one-node tree predicting ``value`` (a scalar or a vector) for every input."""
        vector = np.atleast_1d(np.asarray(value, dtype=np.float64))
        if vector.ndim != 1:
            raise ModelValidationError(f"a leaf value must be a scalar or a vector, got shape {vector.shape}")
        return cls(
            feature=np.array([-1], dtype=np.int32),
            threshold=np.zeros(1, dtype=np.float64),
            left=np.array([-1], dtype=np.int32),
            right=np.array([-1], dtype=np.int32),
            default_left=np.zeros(1, dtype=np.bool_),
            value=vector[None, :],
            cover=None if cover is None else np.array([cover], dtype=np.float64),
        )

    @classmethod
    def from_arrays(
        cls,
        feature: ArrayLike,
        threshold: ArrayLike,
        left: ArrayLike,
        right: ArrayLike,
        value: ArrayLike,
        *,
        default_left: ArrayLike | None = None,
        categories: Sequence[Iterable[int] | None] | None = None,
        cover: ArrayLike | None = None,
    ) -> Tree:
        """Build from array-likes of any numeric dtype, converting (with range checks) to the
        format's dtypes. ``value`` may be 1-D (scalar leaves). ``categories[i]`` is the set of
        codes going left at node ``i`` (None or absent for a numeric split). Not validated."""
        feature_a = _checked_cast(feature, np.int32, "feature")
        n = feature_a.shape[0]
        value_a = np.asarray(value, dtype=np.float64)
        if value_a.ndim == 1:
            value_a = value_a[:, None]
        is_cat = np.zeros(n, dtype=np.bool_)
        offsets = np.zeros(n + 1, dtype=np.int64)
        codes: list[np.ndarray] = []
        if categories is not None:
            if len(categories) != n:
                raise ModelValidationError(f"categories has {len(categories)} entries for {n} nodes")
            for i, cats in enumerate(categories):
                if cats is None:
                    codes.append(np.zeros(0, dtype=np.int32))
                    continue
                is_cat[i] = True
                codes.append(np.unique(_checked_cast(list(cats), np.int32, "categories")))
            offsets[1:] = np.cumsum([c.size for c in codes])
        return cls(
            feature=feature_a,
            threshold=np.asarray(threshold, dtype=np.float64),
            left=_checked_cast(left, np.int32, "left"),
            right=_checked_cast(right, np.int32, "right"),
            default_left=(
                np.zeros(n, dtype=np.bool_) if default_left is None else np.asarray(default_left, dtype=np.bool_)
            ),
            value=value_a,
            is_categorical=is_cat,
            cat_offsets=offsets,
            cat_values=np.concatenate(codes) if codes else np.zeros(0, dtype=np.int32),
            cover=None if cover is None else np.asarray(cover, dtype=np.float64),
        )

    # --- validation ------------------------------------------------------------------------
    def validate(self, n_features: int, n_outputs: int, *, index: int | None = None) -> None:
        """Raise ``ModelValidationError`` (naming tree ``index``, node and field) unless this is a
        well-formed tree over ``n_features`` inputs with ``n_outputs``-wide values."""
        _TreeChecker(self, index).run(n_features, n_outputs)

    # --- dunder ------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        """Bit-exact equality of every field (dtypes included)."""
        if not isinstance(other, Tree):
            return NotImplemented
        return all(same_array(getattr(self, f), getattr(other, f)) for f in FIELD_DTYPES)

    __hash__ = None  # type: ignore[assignment]  # mutable-looking content; equality is by value

    def __reduce__(self) -> tuple:
        """Pickle through the constructor, so unpickled arrays are read-only copies again."""
        return (type(self), tuple(getattr(self, f) for f in FIELD_DTYPES))

    def __repr__(self) -> str:
        n_cat = int(np.count_nonzero(self.is_categorical)) if self.is_categorical.ndim == 1 else "?"
        return f"Tree(n_nodes={self.n_nodes}, n_outputs={self.n_outputs}, categorical_splits={n_cat})"


def _checked_cast(values: ArrayLike, dtype: type[np.integer], name: str) -> np.ndarray:
    """Convert integer-valued array-likes to ``dtype``, refusing values that would change."""
    array = np.asarray(values)
    if array.size == 0:
        return array.astype(dtype).reshape(array.shape)
    if array.dtype.kind not in "iuf":
        raise ModelValidationError(f"expected integers, got dtype {array.dtype}", field=name)
    info = np.iinfo(dtype)
    if not (np.all(np.isfinite(array)) and array.min() >= info.min and array.max() <= info.max):
        raise ModelValidationError(f"values outside the {np.dtype(dtype)} range", field=name)
    cast: np.ndarray = array.astype(dtype)
    if not np.array_equal(cast, array):
        raise ModelValidationError("non-integer values", field=name)
    return cast


class _TreeChecker:
    """All the rules of ``Tree.validate``, in an order where each check may rely on the ones before."""

    def __init__(self, tree: Tree, index: int | None) -> None:
        self.t = tree
        self.index = index

    def fail(self, message: str, *, node: int | None = None, field: str | None = None) -> None:
        raise ModelValidationError(message, tree=self.index, node=node, field=field)

    def first(self, bad: np.ndarray) -> int:
        return int(np.flatnonzero(bad)[0])

    def run(self, n_features: int, n_outputs: int) -> None:
        self.check_arrays(n_outputs)
        self.check_structure()
        self.check_features(n_features)
        self.check_numbers()
        self.check_categories()

    def check_arrays(self, n_outputs: int) -> None:
        t = self.t
        for name, dtype in FIELD_DTYPES.items():
            array = getattr(t, name)
            if array is None:
                continue
            if array.dtype != dtype:
                self.fail(f"dtype is {array.dtype}, expected {dtype}", field=name)
        if t.feature.ndim != 1 or t.feature.shape[0] < 1:
            self.fail(f"must be 1-D with at least one node (the root), got shape {t.feature.shape}", field="feature")
        n = t.n_nodes
        expected = {
            "threshold": (n,),
            "left": (n,),
            "right": (n,),
            "default_left": (n,),
            "value": (n, n_outputs),
            "is_categorical": (n,),
            "cat_offsets": (n + 1,),
            "cover": (n,),
        }
        for name, shape in expected.items():
            array = getattr(t, name)
            if array is not None and array.shape != shape:
                self.fail(f"shape is {array.shape}, expected {shape} ({n} nodes)", field=name)
        if t.cat_values.ndim != 1:
            self.fail(f"must be 1-D, got shape {t.cat_values.shape}", field="cat_values")

    def check_structure(self) -> None:
        t = self.t
        n = t.n_nodes
        for name in ("left", "right"):
            child = getattr(t, name)
            bad = (child < -1) | (child >= n)
            if bad.any():
                j = self.first(bad)
                self.fail(f"child {int(child[j])} out of range (nodes are 0..{n - 1}, -1 for none)", node=j, field=name)
        one_child = (t.left == -1) != (t.right == -1)
        if one_child.any():
            j = self.first(one_child)
            self.fail(
                f"has one child (left={int(t.left[j])}, right={int(t.right[j])}): a leaf needs both "
                "children -1, a split needs both set",
                node=j,
            )
        internal = t.left >= 0
        parents = np.concatenate([np.flatnonzero(internal), np.flatnonzero(internal)])
        children = np.concatenate([t.left[internal], t.right[internal]])
        counts = np.bincount(children, minlength=n)
        if counts[0]:
            self.fail(f"the root is a child of node {int(parents[self.first(children == 0)])}", node=0)
        if (counts[1:] > 1).any():
            j = 1 + self.first(counts[1:] > 1)
            who = sorted(int(p) for p in parents[children == j])
            self.fail(f"has {int(counts[j])} parents (nodes {who}); a tree node has exactly one", node=j)
        if (counts[1:] == 0).any():
            j = 1 + self.first(counts[1:] == 0)
            self.fail("has no parent: unreachable from the root", node=j)
        unreachable = node_depths(t.left, t.right) < 0
        if unreachable.any():
            # Every node has exactly one parent here, so an unreachable set must contain a cycle.
            nodes = np.flatnonzero(unreachable).tolist()
            self.fail(f"nodes {nodes[:10]} form a cycle unreachable from the root", node=nodes[0])

    def check_features(self, n_features: int) -> None:
        t = self.t
        leaf = t.left == -1
        bad = leaf & (t.feature != -1)
        if bad.any():
            j = self.first(bad)
            self.fail(f"leaf has feature {int(t.feature[j])}, expected -1", node=j, field="feature")
        bad = ~leaf & ((t.feature < 0) | (t.feature >= n_features))
        if bad.any():
            j = self.first(bad)
            self.fail(f"feature {int(t.feature[j])} out of range [0, {n_features})", node=j, field="feature")
        bad = leaf & t.is_categorical
        if bad.any():
            self.fail("a leaf cannot be a categorical split", node=self.first(bad), field="is_categorical")

    def check_numbers(self) -> None:
        t = self.t
        bad = ~np.isfinite(t.threshold)
        if bad.any():
            j = self.first(bad)
            self.fail(f"threshold {float(t.threshold[j])!r} is not finite", node=j, field="threshold")
        bad = ~np.isfinite(t.value).all(axis=1)
        if bad.any():
            j = self.first(bad)
            self.fail(f"value {t.value[j].tolist()} is not finite", node=j, field="value")
        if t.cover is not None:
            bad = ~np.isfinite(t.cover) | (t.cover < 0)
            if bad.any():
                j = self.first(bad)
                self.fail(f"cover {float(t.cover[j])!r} must be finite and >= 0", node=j, field="cover")

    def check_categories(self) -> None:
        t = self.t
        offsets, codes = t.cat_offsets, t.cat_values
        if offsets[0] != 0 or offsets[-1] != codes.shape[0]:
            self.fail(
                f"must start at 0 and end at len(cat_values)={codes.shape[0]}, got "
                f"{int(offsets[0])}..{int(offsets[-1])}",
                field="cat_offsets",
            )
        sizes = np.diff(offsets)
        if (sizes < 0).any():
            self.fail("offsets decrease", node=self.first(sizes < 0), field="cat_offsets")
        bad = ~t.is_categorical & (sizes != 0)
        if bad.any():
            self.fail("a numeric split or leaf has a category set", node=self.first(bad), field="cat_offsets")
        if (codes < 0).any():
            j = int(np.searchsorted(offsets, self.first(codes < 0), side="right")) - 1
            self.fail("category codes must be >= 0", node=j, field="cat_values")
        # Strictly increasing inside each node's segment: compare neighbours that share a node.
        owner = np.repeat(np.arange(t.n_nodes), sizes)
        same_node = owner[1:] == owner[:-1]
        bad = same_node & (codes[1:] <= codes[:-1])
        if bad.any():
            j = int(owner[1:][self.first(bad)])
            self.fail("category codes must be sorted and unique", node=j, field="cat_values")


class TreeBuilder:
    """Grow a tree by splitting leaves, the way the training algorithms do.

    Children get consecutive ids (right = left + 1, which XGBoost's JSON wants); a new child
    starts with its parent's value (so an unfinished split changes no prediction) unless a
    value is given. ``cover`` must be given for every node or for none.
    """

    def __init__(self, root_value: ArrayLike, *, root_cover: float | None = None) -> None:
        first = np.atleast_1d(np.asarray(root_value, dtype=np.float64))
        if first.ndim != 1:
            raise ModelValidationError(f"a node value must be a scalar or vector, got shape {first.shape}")
        self._width = first.shape[0]
        self._feature = [-1]
        self._threshold = [0.0]
        self._left = [-1]
        self._right = [-1]
        self._default_left = [False]
        self._value = [first]
        self._categories: list[np.ndarray | None] = [None]
        self._cover: list[float | None] = [root_cover]

    @property
    def n_nodes(self) -> int:
        return len(self._feature)

    def _vector(self, value: ArrayLike) -> np.ndarray:
        vector = np.atleast_1d(np.asarray(value, dtype=np.float64))
        if vector.shape != (self._width,):
            raise ModelValidationError(f"node value must have {self._width} entries, got shape {vector.shape}")
        return vector

    def split(
        self,
        node: int,
        feature: int,
        threshold: float = 0.0,
        *,
        default_left: bool = False,
        categories: Iterable[int] | None = None,
        left_value: ArrayLike | None = None,
        right_value: ArrayLike | None = None,
        left_cover: float | None = None,
        right_cover: float | None = None,
    ) -> tuple[int, int]:
        """Turn leaf ``node`` into a split; returns the (left, right) child ids. With
        ``categories`` the split is categorical (codes in the set go left; ``threshold`` unused)."""
        if not 0 <= node < self.n_nodes or self._left[node] != -1:
            raise ModelValidationError(f"can only split an existing leaf, node {node} is not one")
        left_id = self.n_nodes
        self._feature[node] = int(feature)
        self._threshold[node] = float(threshold) if categories is None else 0.0
        self._left[node], self._right[node] = left_id, left_id + 1
        self._default_left[node] = bool(default_left)
        if categories is not None:
            self._categories[node] = np.unique(_checked_cast(list(categories), np.int32, "categories"))
        parent = self._value[node]
        for value, cover in ((left_value, left_cover), (right_value, right_cover)):
            self._feature.append(-1)
            self._threshold.append(0.0)
            self._left.append(-1)
            self._right.append(-1)
            self._default_left.append(False)
            self._value.append(parent.copy() if value is None else self._vector(value))
            self._categories.append(None)
            self._cover.append(cover)
        return left_id, left_id + 1

    def set_value(self, node: int, value: ArrayLike, *, cover: float | None = None) -> None:
        self._value[node] = self._vector(value)
        if cover is not None:
            self._cover[node] = float(cover)

    def build(self) -> Tree:
        covers = [c for c in self._cover if c is not None]
        if covers and len(covers) != len(self._cover):
            raise ModelValidationError("cover must be set for every node or for none")
        return Tree.from_arrays(
            feature=self._feature,
            threshold=self._threshold,
            left=self._left,
            right=self._right,
            value=np.stack(self._value),
            default_left=self._default_left,
            categories=self._categories if any(c is not None for c in self._categories) else None,
            cover=covers or None,
        )
