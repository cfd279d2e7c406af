"""FedGA-Tree's string encoding (paper §III-A): round trips, detached subtrees, the layout.

Oracles: an independent recursive pre-order walk of the full binary tree (the layout); the
paper's Fig. 2 example; decode/encode round trips on random strings and on scikit-learn trees.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.tree import DecisionTreeClassifier

from shared.tree_encoding import (
    NIL,
    canonical,
    check_strings,
    decision_mask,
    decode,
    encode,
    layout,
    n_decision_nodes,
    string_length,
)


def preorder_heaps(depth: int, heap: int = 1, level: int = 0) -> list[int]:
    """Heap indices of the full tree's decision slots in pre-order, by plain recursion."""
    if level == depth:
        return []
    return [heap, *preorder_heaps(depth, 2 * heap, level + 1), *preorder_heaps(depth, 2 * heap + 1, level + 1)]


@pytest.mark.parametrize("depth", [1, 2, 3, 5, 9])
def test_layout_is_the_preorder_walk_of_the_full_tree(depth: int) -> None:
    lay = layout(depth)
    assert lay.heap.tolist() == preorder_heaps(depth)
    assert string_length(depth) == 2**depth - 1 == lay.heap.size
    inner = lay.level < depth - 1
    assert (lay.heap[lay.left[inner]] == 2 * lay.heap[inner]).all()
    assert (lay.heap[lay.right[inner]] == 2 * lay.heap[inner] + 1).all()
    assert (lay.left[~inner] == -1).all() and (lay.parent[0] == -1)
    assert (lay.slot_of_heap[lay.heap] == np.arange(lay.heap.size)).all()


def test_fig2_example_and_a_detached_subtree() -> None:
    # depth 3: root feature 2; left child 0 with children (NIL, NIL); right child 3 with children (1, NIL)
    s = np.array([2, 0, -1, -1, 3, 1, -1])
    tree = decode(s, 3)
    assert tree.feature.tolist() == [2, 0, -1, -1, 3, 1, -1, -1, -1]
    assert tree.n_decision_nodes == 4
    # the paper: replace 3 by nil -> the right subtree (feature 1 under it) is detached and dropped
    cut = s.copy()
    cut[4] = NIL
    assert decode(cut, 3).feature.tolist() == [2, 0, -1, -1, -1]
    assert canonical(cut, 3).tolist() == [2, 0, -1, -1, -1, -1, -1]
    assert n_decision_nodes(cut, 3) == 2


def random_tree_strings(depth: int, n_features: int):
    return st.lists(st.integers(NIL, n_features - 1), min_size=string_length(depth), max_size=string_length(depth)).map(
        lambda v: np.array(v, np.int64)
    )


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6).flatmap(lambda d: st.tuples(st.just(d), random_tree_strings(d, 5))))
def test_round_trip_decode_encode_is_the_canonical_string(case) -> None:
    depth, s = case
    tree = decode(s, depth)
    again = encode(tree.feature, tree.left, tree.right, depth)
    assert again.tolist() == canonical(s, depth).tolist()
    assert (canonical(again, depth) == again).all()  # canonical is idempotent
    # the decoded tree is a proper binary tree: every decision node has two children, leaves none
    decision = tree.feature >= 0
    assert ((tree.left >= 0) == decision).all() and ((tree.right >= 0) == decision).all()
    assert tree.n_decision_nodes == int(n_decision_nodes(s, depth))
    # a slot is kept iff its whole ancestor chain is non-NIL
    lay = layout(depth)
    mask = decision_mask(s, depth)
    for slot in range(s.size):
        chain, p = [], slot
        while p >= 0:
            chain.append(p)
            p = int(lay.parent[p])
        assert mask[slot] == all(s[c] != NIL for c in chain)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 6))
def test_scikit_learn_trees_encode_and_decode_back(seed: int, depth: int) -> None:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(80, 4))
    y = rng.integers(0, 3, 80)
    sk = DecisionTreeClassifier(max_depth=depth, random_state=seed).fit(X, y).tree_
    s = encode(sk.feature, sk.children_left, sk.children_right, depth)
    tree = decode(s, depth)
    # same tree: pre-order feature lists agree (scikit-learn numbers nodes in pre-order too)
    assert tree.feature.tolist() == np.where(sk.children_left < 0, -1, sk.feature).tolist()
    assert (tree.left == sk.children_left).all() and (tree.right == sk.children_right).all()


def test_bad_input_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="depth must be"):
        string_length(0)
    with pytest.raises(ValueError, match="population must have 7 slots"):
        check_strings(np.zeros((2, 6), np.int64), 3, 4, name="population")
    with pytest.raises(ValueError, match="feature ids in 0..3"):
        check_strings(np.full((1, 7), 4), 3, 4)
    with pytest.raises(ValueError, match="integers"):
        check_strings(np.zeros((1, 7)), 3, 4)
    with pytest.raises(ValueError, match="below depth 1"):
        encode([0, 1, -1, -1, -1], [1, 3, -1, -1, -1], [2, 4, -1, -1, -1], 1)
