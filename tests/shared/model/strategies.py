"""Hypothesis strategies for random valid trees, ensembles and inputs.

Thresholds and inputs come from small shared grids so that inputs hit thresholds exactly (the
"equal goes right" rule gets exercised), categorical codes collide with category sets, and
NaN / +-inf / negative / non-integer values show up at both kinds of split. Node ids are
shuffled (root stays 0) so nothing relies on a breadth-first layout.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from shared.model import Tree, TreeEnsemble

THRESHOLDS = (-1.0, 0.0, 0.5, 1.0, 2.0, 3.0)
CATEGORY_CODES = st.integers(0, 7)
X_VALUES = (
    -1.0,
    -0.5,
    0.0,
    0.5,
    1.0,
    1.5,
    2.0,
    2.5,
    3.0,
    4.0,
    5.0,
    6.0,
    7.0,
    8.0,
    1e10,
    math.nan,
    math.inf,
    -math.inf,
)  # all float32-representable
LEAF_VALUES = st.floats(-4.0, 4.0, allow_nan=False)
METADATA_VALUES = (
    st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5)
)


@st.composite
def trees(draw: st.DrawFn, n_features: int, width: int, max_splits: int = 7) -> Tree:
    """A random valid tree: grow by splitting random leaves, then shuffle the non-root ids."""
    feature, threshold, left, right, default_left = [-1], [0.0], [-1], [-1], [False]
    categories: list[frozenset[int] | None] = [None]
    leaves = [0]
    for _ in range(draw(st.integers(0, max_splits))):
        node = draw(st.sampled_from(leaves))
        leaves.remove(node)
        first = len(feature)
        feature[node] = draw(st.integers(0, n_features - 1))
        left[node], right[node] = first, first + 1
        default_left[node] = draw(st.booleans())
        if draw(st.booleans()):
            categories[node] = draw(st.frozensets(CATEGORY_CODES, max_size=5))
        else:
            threshold[node] = draw(st.sampled_from(THRESHOLDS))
        for child in (first, first + 1):
            feature.append(-1)
            threshold.append(0.0)
            left.append(-1)
            right.append(-1)
            default_left.append(False)
            categories.append(None)
            leaves.append(child)
    n = len(feature)
    new_id = np.arange(n)
    new_id[1:] = 1 + np.asarray(draw(st.permutations(range(n - 1))), dtype=int)
    order = np.argsort(new_id)  # order[new] = old

    def relabel(children: list[int]) -> np.ndarray:
        c = np.asarray(children)[order]
        return np.where(c >= 0, new_id[np.maximum(c, 0)], -1)

    value = draw(arrays(np.float64, (n, width), elements=LEAF_VALUES))
    return Tree.from_arrays(
        feature=np.asarray(feature)[order],
        threshold=np.asarray(threshold)[order],
        left=relabel(left),
        right=relabel(right),
        value=value,
        default_left=np.asarray(default_left)[order],
        categories=[None if categories[o] is None else sorted(categories[o]) for o in order]
        if any(c is not None for c in categories)
        else None,
        cover=draw(st.none() | arrays(np.float64, n, elements=st.floats(0, 100))),
    )


@st.composite
def ensembles(
    draw: st.DrawFn, kinds: tuple[str, ...] = ("boosted", "forest", "single"), max_trees: int = 6
) -> TreeEnsemble:
    kind = draw(st.sampled_from(kinds))
    n_features = draw(st.integers(1, 4))
    base = None
    if kind == "boosted":
        link = draw(st.sampled_from(("softmax", "sigmoid", "identity")))
        n_outputs = {"softmax": draw(st.integers(2, 4)), "sigmoid": 1, "identity": draw(st.integers(1, 3))}[link]
        classes: tuple = {"softmax": tuple(range(10, 10 + n_outputs)), "sigmoid": ("neg", "pos"), "identity": ()}[link]
        n_trees = draw(st.integers(0, max_trees))
        outputs = draw(st.lists(st.integers(-1, n_outputs - 1), min_size=n_trees, max_size=n_trees))
        base = draw(arrays(np.float64, n_outputs, elements=LEAF_VALUES))
    else:
        link = "identity"
        n_outputs = draw(st.integers(1, 4))
        classes = tuple(f"c{i}" for i in range(n_outputs)) if n_outputs >= 2 and draw(st.booleans()) else ()
        n_trees = 1 if kind == "single" else draw(st.integers(1, max_trees))
        outputs = [-1] * n_trees
    tree_list = [draw(trees(n_features, 1 if out >= 0 else n_outputs)) for out in outputs]
    return TreeEnsemble(
        trees=tuple(tree_list),
        kind=kind,
        link=link,
        n_outputs=n_outputs,
        feature_names=tuple(f"f{i}" for i in range(n_features)),
        tree_output=np.asarray(outputs, dtype=np.int32),
        base_score=base,
        feature_set_version=draw(st.sampled_from(("", "v1", "pipeline-2025.11"))),
        classes=classes,
        metadata=draw(st.dictionaries(st.text(max_size=5), METADATA_VALUES, max_size=3)),
    )


def inputs(n_features: int, max_rows: int = 12) -> st.SearchStrategy[np.ndarray]:
    rows = st.integers(1, max_rows)
    return rows.flatmap(lambda n: arrays(np.float64, (n, n_features), elements=st.sampled_from(X_VALUES)))
