"""FedGA-Tree's tree structures as fixed-length integer strings (paper §III-A, Fig. 2).

A *structure* is a binary decision tree without thresholds or leaf values: only which feature
each decision node tests. With maximum depth ``d`` it is written as the ``2^d - 1`` decision
slots of the full binary tree of depth ``d`` in pre-order (node, left subtree, right subtree);
a slot holds its feature id (``0 .. n_features - 1``) or ``NIL = -1`` when the node there is a
leaf or does not exist. Fixed length is what makes one-point crossover and the mutations plain
array operations, and it caps the depth (bloat control).

Every integer string over ``{-1, ..., n_features - 1}`` of the right length is valid: decoding
keeps the tree connected to the root and *drops detached subtrees* (features under a ``NIL``
slot). :func:`canonical` writes that decoded tree back, so two strings that decode to the same
tree have the same canonical form.

Slots are also addressed in heap order (root 1, children ``2h`` and ``2h + 1``): the client
fits trees level by level, where heap indices are natural. :func:`layout` maps between the two.

Pure numpy: the gateway (client half) and the aggregator (genetic operators) share it.

Examples
--------
>>> import numpy as np
>>> s = np.array([2, 0, -1, -1, 3, -1, -1])      # depth 3: root 2, left child 0, right child 3
>>> decode(s, 3).feature.tolist()                 # pre-order nodes of the decoded tree
[2, 0, -1, -1, 3, -1, -1]
>>> canonical(np.array([-1, 0, 1, 2, 3, 1, 0]), 3).tolist()   # a NIL root detaches the rest
[-1, -1, -1, -1, -1, -1, -1]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "NIL",
    "Layout",
    "Structure",
    "canonical",
    "check_strings",
    "decision_mask",
    "decode",
    "encode",
    "layout",
    "n_decision_nodes",
    "string_length",
]

#: The value of a slot that holds no decision node (a leaf, or no node at all).
NIL = -1
#: Deepest structure the encoding supports (2^15 - 1 slots; the paper's d_max).
MAX_DEPTH = 15


def string_length(depth: int) -> int:
    """``2^depth - 1``: the number of decision slots of a structure of maximum depth ``depth``."""
    _check_depth(depth)
    return (1 << depth) - 1


def _check_depth(depth: int) -> None:
    if not isinstance(depth, (int, np.integer)) or not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be an integer in 1..{MAX_DEPTH}, got {depth!r}")


@dataclass(frozen=True, eq=False)
class Layout:
    """Where the slots of a depth-``depth`` string sit in the full binary tree.

    Arrays are indexed by pre-order slot: ``heap`` (root 1), ``level`` (root 0), ``left`` and
    ``right`` (the children's slots, -1 on the last level) and ``parent`` (-1 at the root).
    ``slot_of_heap[h]`` is the inverse of ``heap`` (-1 at index 0).
    """

    depth: int
    heap: np.ndarray
    level: np.ndarray
    left: np.ndarray
    right: np.ndarray
    parent: np.ndarray
    slot_of_heap: np.ndarray


@lru_cache(maxsize=MAX_DEPTH)
def layout(depth: int) -> Layout:
    """The slot maps of depth ``depth`` (cached, read-only). Built level by level: the left
    child of slot ``i`` at level ``k`` is ``i + 1``, its right child ``i + 2^(depth-k-1)``
    (the size of the left subtree, plus one)."""
    n = string_length(depth)
    heap = np.zeros(n, np.int64)
    level = np.zeros(n, np.int64)
    left = np.full(n, -1, np.int64)
    right = np.full(n, -1, np.int64)
    parent = np.full(n, -1, np.int64)
    slots = np.zeros(1, np.int64)
    heap[0] = 1
    for k in range(depth - 1):
        lo, hi = slots + 1, slots + (1 << (depth - k - 1))
        left[slots], right[slots] = lo, hi
        parent[lo], parent[hi] = slots, slots
        heap[lo], heap[hi] = 2 * heap[slots], 2 * heap[slots] + 1
        level[lo] = level[hi] = k + 1
        slots = np.concatenate([lo, hi])
    slot_of_heap = np.full(n + 1, -1, np.int64)
    slot_of_heap[heap] = np.arange(n)
    for array in (heap, level, left, right, parent, slot_of_heap):
        array.setflags(write=False)
    return Layout(depth, heap, level, left, right, parent, slot_of_heap)


def check_strings(strings: ArrayLike, depth: int, n_features: int, *, name: str = "strings") -> np.ndarray:
    """``strings`` as int64 with shape ``(..., 2^depth - 1)`` and values in ``-1 .. n_features-1``;
    ``ValueError`` naming ``name`` otherwise."""
    array = np.asarray(strings)
    if array.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integers, got dtype {array.dtype}")
    length = string_length(depth)
    if array.ndim < 1 or array.shape[-1] != length:
        raise ValueError(f"{name} must have {length} slots per structure (depth {depth}), got shape {array.shape}")
    if array.size and (array.min() < NIL or array.max() >= n_features):
        raise ValueError(f"{name} must hold feature ids in 0..{n_features - 1} or {NIL}")
    return array.astype(np.int64)


def decision_mask(strings: ArrayLike, depth: int) -> np.ndarray:
    """Which slots are decision nodes of the decoded tree: not ``NIL`` and every ancestor a
    decision node too (slots under a ``NIL`` are a detached subtree). Shape of ``strings``."""
    s = np.asarray(strings)
    lay = layout(depth)
    connected = np.zeros(s.shape, bool)
    connected[..., 0] = True
    for k in range(1, depth):
        at = np.flatnonzero(lay.level == k)
        p = lay.parent[at]
        connected[..., at] = connected[..., p] & (s[..., p] != NIL)
    return connected & (s != NIL)


def canonical(strings: ArrayLike, depth: int) -> np.ndarray:
    """The strings with every detached subtree cleared to ``NIL``: the decoded trees, re-encoded."""
    s = np.asarray(strings, dtype=np.int64)
    return np.where(decision_mask(s, depth), s, NIL)


def n_decision_nodes(strings: ArrayLike, depth: int) -> np.ndarray:
    """Decision nodes of each decoded structure (the paper's complexity measure)."""
    return decision_mask(strings, depth).sum(axis=-1)


@dataclass(frozen=True, eq=False)
class Structure:
    """A decoded structure as node arrays in pre-order (root 0): ``feature`` (-1 at leaves),
    ``left``/``right`` child node ids (-1 at leaves) -- ``shared.model.Tree``'s layout without
    thresholds or values."""

    feature: np.ndarray
    left: np.ndarray
    right: np.ndarray

    @property
    def n_decision_nodes(self) -> int:
        return int((self.feature >= 0).sum())


def decode(string: ArrayLike, depth: int) -> Structure:
    """The tree a string encodes: its decision nodes (connected to the root) and their leaf
    children, numbered in pre-order. Detached subtrees are dropped."""
    s = np.asarray(string, dtype=np.int64)
    if s.shape != (string_length(depth),):
        raise ValueError(f"string must have {string_length(depth)} slots (depth {depth}), got shape {s.shape}")
    lay = layout(depth)
    decision = decision_mask(s, depth)
    feature: list[int] = []
    left: list[int] = []
    right: list[int] = []
    stack = [(0, -1, False)]  # (slot or -1 for a leaf below the last level, parent node, is right child)
    while stack:
        slot, parent, is_right = stack.pop()
        node = len(feature)
        if parent >= 0:
            (right if is_right else left)[parent] = node
        split = slot >= 0 and bool(decision[slot])
        feature.append(int(s[slot]) if split else NIL)
        left.append(-1)
        right.append(-1)
        if split:
            stack.append((int(lay.right[slot]), node, True))
            stack.append((int(lay.left[slot]), node, False))
    return Structure(np.array(feature, np.int64), np.array(left, np.int64), np.array(right, np.int64))


def encode(feature: ArrayLike, left: ArrayLike, right: ArrayLike, depth: int) -> np.ndarray:
    """The string of a tree given as node arrays (root 0; a node is a leaf iff ``left < 0``;
    e.g. ``Tree.feature``/``left``/``right``, or scikit-learn's ``tree_.feature``,
    ``children_left``, ``children_right``). Thresholds and values are not part of a structure.
    ``ValueError`` if the tree has decision nodes deeper than ``depth`` allows."""
    feature = np.asarray(feature, dtype=np.int64)
    left = np.asarray(left, dtype=np.int64)
    right = np.asarray(right, dtype=np.int64)
    lay = layout(depth)
    out = np.full(string_length(depth), NIL, np.int64)
    stack = [(0, 0)]  # (tree node, slot)
    while stack:
        node, slot = stack.pop()
        if left[node] < 0:
            continue
        if slot < 0:
            raise ValueError(f"the tree has decision nodes below depth {depth}")
        out[slot] = feature[node]
        stack.append((int(left[node]), int(lay.left[slot])))
        stack.append((int(right[node]), int(lay.right[slot])))
    return out
