"""Tree and ensemble validation: every malformed case is refused with a message that says where."""

from __future__ import annotations

import pickle
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from shared.model import ModelValidationError, Tree, TreeBuilder, TreeEnsemble


def good_tree(**changes: Any) -> Tree:
    """0: x0 < 0.5 ? 1 : 2;  1: x1 in {1, 3} ? 3 : 4;  leaves 2, 3, 4 (values of width 2)."""
    fields = dict(
        feature=np.array([0, 1, -1, -1, -1], dtype=np.int32),
        threshold=np.array([0.5, 0.0, 0.0, 0.0, 0.0]),
        left=np.array([1, 3, -1, -1, -1], dtype=np.int32),
        right=np.array([2, 4, -1, -1, -1], dtype=np.int32),
        default_left=np.array([True, False, False, False, False]),
        value=np.arange(10, dtype=np.float64).reshape(5, 2),
        is_categorical=np.array([False, True, False, False, False]),
        cat_offsets=np.array([0, 0, 2, 2, 2, 2], dtype=np.int64),
        cat_values=np.array([1, 3], dtype=np.int32),
        cover=np.array([10.0, 6.0, 4.0, 2.0, 4.0]),
    )
    for name, change in changes.items():
        if callable(change):
            array = fields[name].copy()
            change(array)
            fields[name] = array
        else:
            fields[name] = change
    return Tree(**fields)


def set_at(index: Any, value: Any):
    def apply(array: np.ndarray) -> None:
        array[index] = value

    return apply


def test_good_tree_is_valid() -> None:
    tree = good_tree()
    tree.validate(n_features=2, n_outputs=2)
    assert tree.n_nodes == 5 and tree.n_outputs == 2 and tree.depth == 2
    assert tree.categories(1).tolist() == [1, 3] and tree.categories(0).size == 0


# Each case: the change, the message fragment, the node and field the error must name.
MALFORMED = {
    "cycle": (
        dict(  # root is a leaf; 1 -> (2, 3), 3 -> (1, 4): one parent each, unreachable, cyclic
            feature=np.array([-1, 0, -1, 0, -1], dtype=np.int32),
            left=np.array([-1, 2, -1, 1, -1], dtype=np.int32),
            right=np.array([-1, 3, -1, 4, -1], dtype=np.int32),
            is_categorical=np.zeros(5, dtype=bool),
            cat_offsets=np.zeros(6, dtype=np.int64),
            cat_values=np.zeros(0, dtype=np.int32),
        ),
        r"form a cycle unreachable from the root",
        1,
        None,
    ),
    "two parents": (dict(right=set_at(1, 2)), r"has 2 parents \(nodes \[0, 1\]\)", 2, None),
    "root has a parent": (dict(left=set_at(1, 0)), r"the root is a child of node 1", 0, None),
    "child out of range": (dict(left=set_at(1, 9)), r"child 9 out of range", 1, "left"),
    "negative child": (dict(right=set_at(0, -2)), r"child -2 out of range", 0, "right"),
    "unreachable node": (
        dict(
            feature=np.array([0, 1, -1, -1, -1, -1], dtype=np.int32),
            threshold=np.zeros(6),
            left=np.array([1, 3, -1, -1, -1, -1], dtype=np.int32),
            right=np.array([2, 4, -1, -1, -1, -1], dtype=np.int32),
            default_left=np.zeros(6, dtype=bool),
            value=np.zeros((6, 2)),
            is_categorical=np.zeros(6, dtype=bool),
            cat_offsets=np.zeros(7, dtype=np.int64),
            cat_values=np.zeros(0, dtype=np.int32),
            cover=None,
        ),
        r"has no parent: unreachable from the root",
        5,
        None,
    ),
    "leaf with one child": (dict(right=set_at(3, 4)), r"has one child \(left=-1, right=4\)", 3, None),
    "feature out of range": (dict(feature=set_at(0, 2)), r"feature 2 out of range \[0, 2\)", 0, "feature"),
    "negative feature at a split": (dict(feature=set_at(0, -1)), r"feature -1 out of range", 0, "feature"),
    "leaf with a feature": (dict(feature=set_at(4, 0)), r"leaf has feature 0, expected -1", 4, "feature"),
    "NaN threshold": (dict(threshold=set_at(0, np.nan)), r"threshold nan is not finite", 0, "threshold"),
    "infinite threshold": (dict(threshold=set_at(0, np.inf)), r"threshold inf is not finite", 0, "threshold"),
    "NaN leaf value": (dict(value=set_at((3, 1), np.nan)), r"value \[6.0, nan\] is not finite", 3, "value"),
    "negative cover": (dict(cover=set_at(2, -1.0)), r"cover -1.0 must be finite and >= 0", 2, "cover"),
    "categorical leaf": (
        dict(is_categorical=set_at(2, True)),
        r"a leaf cannot be a categorical split",
        2,
        "is_categorical",
    ),
    "CSR not ending at len": (
        dict(cat_offsets=set_at(slice(2, None), 3)),
        r"must start at 0 and end at len\(cat_values\)=2",
        None,
        "cat_offsets",
    ),
    "CSR not starting at 0": (dict(cat_offsets=set_at(0, 1)), r"must start at 0", None, "cat_offsets"),
    "CSR decreasing": (
        dict(cat_offsets=np.array([0, 0, 2, 1, 2, 2], dtype=np.int64)),
        r"offsets decrease",
        2,
        "cat_offsets",
    ),
    "categories on a numeric split": (
        dict(cat_offsets=np.array([0, 1, 2, 2, 2, 2], dtype=np.int64)),
        r"a numeric split or leaf has a category set",
        0,
        "cat_offsets",
    ),
    "unsorted categories": (dict(cat_values=np.array([3, 1], dtype=np.int32)), r"sorted and unique", 1, "cat_values"),
    "duplicate categories": (dict(cat_values=np.array([3, 3], dtype=np.int32)), r"sorted and unique", 1, "cat_values"),
    "negative category": (dict(cat_values=np.array([-1, 3], dtype=np.int32)), r"codes must be >= 0", 1, "cat_values"),
    "value width": (dict(value=np.zeros((5, 3))), r"shape is \(5, 3\), expected \(5, 2\)", None, "value"),
    "threshold length": (dict(threshold=np.zeros(4)), r"shape is \(4,\), expected \(5,\)", None, "threshold"),
    "cat_offsets length": (dict(cat_offsets=np.zeros(5, dtype=np.int64)), r"expected \(6,\)", None, "cat_offsets"),
    "feature dtype": (dict(feature=np.array([0, 1, -1, -1, -1])), r"dtype is int64, expected int32", None, "feature"),
    "bool dtype": (
        dict(default_left=np.zeros(5, dtype=np.uint8)),
        r"dtype is uint8, expected bool",
        None,
        "default_left",
    ),
    "no nodes": (
        dict(feature=np.zeros(0, dtype=np.int32)),
        r"at least one node",
        None,
        "feature",
    ),
    "2-D cat_values": (dict(cat_values=np.array([[1, 3]], dtype=np.int32)), r"must be 1-D", None, "cat_values"),
}


@pytest.mark.parametrize("case", list(MALFORMED), ids=list(MALFORMED))
def test_malformed_tree_is_refused(case: str) -> None:
    changes, message, node, field = MALFORMED[case]
    tree = good_tree(**changes)
    with pytest.raises(ModelValidationError, match=message) as info:
        tree.validate(n_features=2, n_outputs=2, index=7)
    assert info.value.tree == 7
    assert info.value.node == node
    assert info.value.field == field
    assert str(info.value).startswith("tree 7")


def test_error_is_a_value_error() -> None:
    assert issubclass(ModelValidationError, ValueError)


def test_tree_arrays_are_private_read_only_copies() -> None:
    threshold = np.array([0.5, 0.0, 0.0, 0.0, 0.0])
    tree = good_tree(threshold=threshold)
    threshold[0] = 99.0
    assert tree.threshold[0] == 0.5
    with pytest.raises(ValueError):
        tree.threshold[0] = 1.0
    with pytest.raises(AttributeError):
        tree.threshold = threshold  # type: ignore[misc]


def test_tree_equality_is_bit_exact() -> None:
    assert good_tree() == good_tree()
    assert good_tree() != good_tree(threshold=set_at(2, -0.0))
    assert good_tree() != good_tree(cover=None)
    assert good_tree() != good_tree(feature=good_tree().feature.astype(np.int64))


def test_leaf_constructor() -> None:
    tree = Tree.leaf([1.0, 2.0])
    tree.validate(n_features=0, n_outputs=2)
    assert tree.value.tolist() == [[1.0, 2.0]] and tree.depth == 0
    Tree.leaf(3.0).validate(n_features=5, n_outputs=1)


def test_builder_grows_xgboost_style_layout() -> None:
    builder = TreeBuilder([0.0, 0.0], root_cover=10.0)
    left, right = builder.split(
        0, 1, 2.5, default_left=True, left_value=[1, 0], right_value=[0, 1], left_cover=4, right_cover=6
    )
    assert (left, right) == (1, 2)
    assert builder.split(2, 0, categories=[5, 1, 5], left_cover=2, right_cover=4) == (3, 4)
    tree = builder.build()
    tree.validate(n_features=2, n_outputs=2)
    assert tree.left.tolist() == [1, -1, 3, -1, -1] and tree.right.tolist() == [2, -1, 4, -1, -1]
    assert tree.categories(2).tolist() == [1, 5] and tree.is_categorical.tolist() == [False, False, True, False, False]
    assert tree.value[3].tolist() == [0.0, 1.0]  # children inherit the parent's value
    assert tree.cover.tolist() == [10.0, 4.0, 6.0, 2.0, 4.0]


def test_builder_refuses_misuse() -> None:
    builder = TreeBuilder(0.0)
    builder.split(0, 0, 1.0)
    with pytest.raises(ModelValidationError, match="can only split an existing leaf"):
        builder.split(0, 0, 1.0)
    with pytest.raises(ModelValidationError, match="must have 1 entries"):
        builder.set_value(1, [1.0, 2.0])
    builder.set_value(1, 5.0, cover=3.0)
    with pytest.raises(ModelValidationError, match="every node or for none"):
        builder.build()


def test_from_arrays_checks_integer_casts() -> None:
    with pytest.raises(ModelValidationError, match="int32 range"):
        Tree.from_arrays([2**40], [0.0], [-1], [-1], [0.0])
    with pytest.raises(ModelValidationError, match="non-integer"):
        Tree.from_arrays([-1], [0.0], [-1.5], [-1], [0.0])


# --- ensembles -------------------------------------------------------------------------------
def stump(width: int = 1) -> Tree:
    builder = TreeBuilder(np.zeros(width))
    builder.split(0, 0, 0.5)
    return builder.build()


BASE = dict(
    trees=(stump(3), stump(3)),
    kind="forest",
    link="identity",
    n_outputs=3,
    feature_names=("a", "b"),
    classes=("x", "y", "z"),
)


def test_good_ensemble() -> None:
    model = TreeEnsemble(**BASE)
    assert model.n_features == 2 and model.n_trees == 2 and model.is_classifier
    assert model.tree_output.tolist() == [-1, -1] and model.base_score.tolist() == [0.0, 0.0, 0.0]
    assert model == TreeEnsemble(**BASE)
    assert "forest" in repr(model)


ENSEMBLE_ERRORS = {
    "kind": (dict(kind="bagged"), "kind must be one of"),
    "link": (dict(link="relu"), "link must be one of"),
    "forest link": (dict(link="softmax"), "link must be 'identity'"),
    "n_outputs type": (dict(n_outputs=3.0), "must be an int >= 1"),
    "n_outputs zero": (dict(n_outputs=0, classes=()), "must be an int >= 1"),
    "single with two trees": (dict(kind="single"), "exactly one tree"),
    "empty forest": (dict(trees=(), classes=()), "at least one tree"),
    "class count": (dict(classes=("x", "y")), "n_outputs=3, 2 classes"),
    "mixed class types": (dict(classes=("x", 1, "z")), "all str or all int"),
    "bool classes": (dict(classes=(True, False, 2)), "all str or all int"),
    "duplicate classes": (dict(classes=("x", "x", "z")), "unique"),
    "duplicate features": (dict(feature_names=("a", "a")), "feature names must be unique"),
    "empty feature name": (dict(feature_names=("a", "")), "non-empty strings"),
    "forest tree_output": (dict(tree_output=np.array([0, -1], dtype=np.int32)), "must be all -1"),
    "forest base score": (dict(base_score=np.array([0.0, 1.0, 0.0])), "must be all 0"),
    "tree_output dtype": (dict(tree_output=np.array([-1, -1])), "expected int32 of shape"),
    "base_score shape": (dict(base_score=np.zeros(2)), r"expected float64 of shape \(3,\)"),
    "tree width": (dict(trees=(stump(3), stump(2))), r"tree 1, field 'value': shape is \(3, 2\), expected \(3, 3\)"),
    "feature range": (dict(feature_names=()), r"tree 0, node 0, field 'feature': feature 0 out of range \[0, 0\)"),
    "metadata bool": (dict(metadata={"ok": True}), "values str, int64 or finite float"),
    "metadata nan": (dict(metadata={"x": float("nan")}), "finite float"),
    "metadata huge int": (dict(metadata={"x": 2**70}), "int64"),
    "not a tree": (dict(trees=(stump(3), "tree")), "expected a Tree"),
    "feature_set_version": (dict(feature_set_version=3), "must be a string"),
    "feature names as one string": (dict(feature_names="ab"), "not a single string"),
    "kind not a string": (dict(kind=["forest"]), "kind must be one of"),
}


@pytest.mark.parametrize("case", list(ENSEMBLE_ERRORS), ids=list(ENSEMBLE_ERRORS))
def test_malformed_ensemble_is_refused(case: str) -> None:
    changes, message = ENSEMBLE_ERRORS[case]
    with pytest.raises(ModelValidationError, match=message):
        TreeEnsemble(**{**BASE, **changes})


BOOSTED = dict(
    trees=(stump(), stump()),
    kind="boosted",
    n_outputs=3,
    feature_names=("a", "b"),
    tree_output=np.array([0, 2], dtype=np.int32),
)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(link="softmax", classes=("x", "y")), "softmax needs n_outputs >= 2 equal to the number of classes"),
        (dict(link="sigmoid", classes=("x", "y")), "sigmoid needs n_outputs == 1 and 2 classes"),
        (dict(link="identity", classes=("x", "y", "z")), "regression"),
        (
            dict(link="identity", tree_output=np.array([0, 3], dtype=np.int32)),
            r"tree 1, field 'tree_output': output 3 out of range",
        ),
        (dict(link="identity", base_score=np.array([0.0, np.inf, 0.0])), "must be finite"),
        (
            dict(link="identity", tree_output=np.array([0, -1], dtype=np.int32)),
            r"tree 1, field 'value': shape is \(3, 1\), expected \(3, 3\)",
        ),
    ],
)
def test_malformed_boosted_ensemble_is_refused(changes: dict, message: str) -> None:
    with pytest.raises(ModelValidationError, match=message):
        TreeEnsemble(**{**BOOSTED, **changes})


def test_ensemble_validates_on_replace_and_normalises_numpy_labels() -> None:
    model = TreeEnsemble(
        **{**BASE, "classes": np.array([3, 5, 7]), "metadata": {"n": np.int64(4), "eta": np.float32(0.5)}}
    )
    assert model.classes == (3, 5, 7) and all(type(c) is int for c in model.classes)
    assert model.metadata == {"n": 4, "eta": 0.5} and type(model.metadata["n"]) is int
    with pytest.raises(ModelValidationError, match="exactly one tree"):
        replace(model, kind="single")


def test_pickle_round_trip_rebuilds_through_the_constructor() -> None:
    model = TreeEnsemble(**BASE)
    model.predict(np.zeros((1, 2)))  # compile the engine
    clone = pickle.loads(pickle.dumps(model))
    assert clone == model and "_engine" not in vars(clone)
    assert not clone.trees[0].threshold.flags.writeable and not clone.base_score.flags.writeable


def test_ensemble_is_immutable_and_copies_inputs() -> None:
    metadata = {"round": 1}
    base = np.zeros(3)
    model = TreeEnsemble(**{**BASE, "metadata": metadata, "base_score": base})
    metadata["round"] = 2
    base[0] = 1.0
    assert model.metadata == {"round": 1} and model.base_score[0] == 0.0
    with pytest.raises(ValueError):
        model.base_score[0] = 1.0
    with pytest.raises(AttributeError):
        model.kind = "single"  # type: ignore[misc]
