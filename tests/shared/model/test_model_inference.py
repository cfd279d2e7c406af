"""The vectorised engine against the brute-force reference, plus its edge cases."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.model import Tree, TreeBuilder, TreeEnsemble, inference
from tests.shared.model import reference
from tests.shared.model.strategies import ensembles, inputs

TOL = dict(rtol=1e-12, atol=1e-12)


def check_against_reference(ensemble: TreeEnsemble, X: np.ndarray) -> None:
    np.testing.assert_array_equal(ensemble.leaves(X), reference.leaves(ensemble, X))
    np.testing.assert_allclose(ensemble.predict_raw(X), reference.raw(ensemble, X), **TOL)
    if ensemble.is_classifier:
        proba = ensemble.predict_proba(X)
        np.testing.assert_allclose(proba, reference.proba(ensemble, X), **TOL)
        assert proba.shape == (len(X), len(ensemble.classes))
        np.testing.assert_array_equal(ensemble.predict(X), np.asarray(ensemble.classes)[proba.argmax(axis=1)])
    else:
        expected = reference.raw(ensemble, X)
        np.testing.assert_allclose(ensemble.predict(X), expected[:, 0] if ensemble.n_outputs == 1 else expected, **TOL)
    if ensemble.kind == "boosted":
        np.testing.assert_array_equal(ensemble.predict_margin(X), ensemble.predict_raw(X))


@st.composite
def ensemble_and_inputs(draw: st.DrawFn, **kwargs) -> tuple[TreeEnsemble, np.ndarray]:
    ensemble = draw(ensembles(**kwargs))
    return ensemble, draw(inputs(ensemble.n_features))


@settings(max_examples=250, deadline=None)
@given(ensemble_and_inputs())
def test_engine_equals_brute_force(case: tuple[TreeEnsemble, np.ndarray]) -> None:
    ensemble, X = case
    check_against_reference(ensemble, X)


@settings(max_examples=60, deadline=None)
@given(ensemble_and_inputs(kinds=("boosted",)))
def test_single_row_and_float32_agree_with_batch(case: tuple[TreeEnsemble, np.ndarray]) -> None:
    ensemble, X = case
    batch = ensemble.predict_raw(X)
    np.testing.assert_array_equal(ensemble.predict_raw(X.astype(np.float32)), batch)
    for i in range(len(X)):
        np.testing.assert_array_equal(ensemble.predict_raw(X[i]), batch[i])
        np.testing.assert_array_equal(ensemble.leaves(X[i]), ensemble.leaves(X)[i])
        if ensemble.is_classifier:
            assert ensemble.predict(X[i]) == ensemble.predict(X)[i]


@settings(max_examples=60, deadline=None)
@given(ensemble_and_inputs())
def test_sparse_category_fallback_and_row_chunks_change_nothing(case: tuple[TreeEnsemble, np.ndarray]) -> None:
    ensemble, X = case
    with (
        mock.patch.object(inference, "DENSE_CATEGORY_BUDGET", -1),
        mock.patch.object(inference, "ROW_CHUNK_ELEMENTS", 1),
    ):
        fresh = TreeEnsemble.from_dict(ensemble.to_dict())  # new instance -> compiled under the patch
        if fresh._engine.has_categorical:
            assert not fresh._engine.dense_categories
        check_against_reference(fresh, X)


# --- hand-made cases -------------------------------------------------------------------------
def stump(threshold: float = 1.0, *, default_left: bool = False, categories=None) -> TreeEnsemble:
    builder = TreeBuilder([0.0])
    builder.split(
        0, 0, threshold, default_left=default_left, categories=categories, left_value=[-1.0], right_value=[1.0]
    )
    return TreeEnsemble(trees=(builder.build(),), kind="single", link="identity", n_outputs=1, feature_names=("x",))


def test_value_equal_to_threshold_goes_right() -> None:
    """The split rule compares ``float32(x)``: a float64 value one float64 ulp below the
    threshold rounds to it and goes right, as in XGBoost."""
    model = stump(1.0)
    X = np.array([[np.nextafter(1.0, 0.0)], [1.0], [np.nextafter(1.0, 2.0)]])
    np.testing.assert_array_equal(model.predict(X), [1.0, 1.0, 1.0])
    one = np.float32(1.0)
    X32 = np.array([[np.nextafter(one, np.float32(0))], [one], [np.nextafter(one, np.float32(2))]])
    np.testing.assert_array_equal(model.predict(X32), [-1.0, 1.0, 1.0])


@pytest.mark.parametrize("default_left, expected", [(True, -1.0), (False, 1.0)])
def test_nan_follows_default_direction(default_left: bool, expected: float) -> None:
    assert stump(default_left=default_left).predict(np.array([np.nan])) == expected
    assert stump(default_left=default_left, categories=[0, 2]).predict(np.array([np.nan])) == expected


def test_infinities_are_ordinary_numbers() -> None:
    np.testing.assert_array_equal(stump(default_left=True).predict(np.array([[-np.inf], [np.inf]])), [-1.0, 1.0])


def test_categorical_membership_and_non_codes() -> None:
    model = stump(default_left=True, categories=[0, 2, 5])
    values = [0, 2, 5, 1, 3, 4, 6, 100, -1, -0.0, 2.5, 1e300, -np.inf, np.inf, 2**31, 2**31 - 1]
    expected = [-1, -1, -1, 1, 1, 1, 1, 1, 1, -1, 1, 1, 1, 1, 1, 1]  # -0.0 is code 0
    np.testing.assert_array_equal(model.predict(np.array(values, dtype=np.float64)[:, None]), expected)


def test_huge_category_code_uses_bounded_memory() -> None:
    model = stump(categories=[3, 2**30])
    engine = model._engine
    assert not engine.dense_categories
    X = np.array([[3.0], [2.0**30], [2.0**30 - 64], [4.0]])
    np.testing.assert_array_equal(model.predict(X), [-1.0, -1.0, 1.0, 1.0])


def test_category_codes_are_compared_as_float32() -> None:
    """A code that is no float32 value matches no input (the float32 rounding of 2**31 - 1 is
    2**31, beyond every code), as in TFLite."""
    model = stump(categories=[3, 2**31 - 1])
    np.testing.assert_array_equal(model.predict(np.array([[3.0], [2.0**31 - 1], [2.0**31 - 2]])), [-1.0, 1.0, 1.0])


def test_engine_is_compiled_once_per_instance() -> None:
    model = stump()
    model.predict(np.zeros((2, 1)))
    engine = model._engine
    model.predict(np.zeros((3, 1)))
    assert model._engine is engine


def test_boosted_without_trees_predicts_base_score() -> None:
    model = TreeEnsemble(
        trees=(),
        kind="boosted",
        link="softmax",
        n_outputs=3,
        feature_names=("a", "b"),
        base_score=np.array([0.0, 1.0, 2.0]),
        classes=("x", "y", "z"),
    )
    np.testing.assert_array_equal(model.predict_margin(np.zeros((2, 2))), [[0.0, 1.0, 2.0]] * 2)
    assert model.leaves(np.zeros((2, 2))).shape == (2, 0)
    assert list(model.predict(np.zeros((2, 2)))) == ["z", "z"]


def test_deep_chain_tree() -> None:
    builder = TreeBuilder([0.0])
    node = 0
    for depth in range(60):
        node, _ = builder.split(node, 0, float(depth), left_value=[0.0], right_value=[float(depth)])
    builder.set_value(node, [-1.0])
    model = TreeEnsemble(trees=(builder.build(),), kind="single", link="identity", n_outputs=1, feature_names=("x",))
    X = np.array([[-5.0], [0.0], [30.5], [59.0], [100.0]])
    np.testing.assert_array_equal(model.predict(X), reference.raw(model, X)[:, 0])
    assert model.trees[0].depth == 60


def test_empty_batch() -> None:
    model = stump()
    assert model.predict(np.zeros((0, 1))).shape == (0,)
    assert model.leaves(np.zeros((0, 1))).shape == (0, 1)


def test_integer_and_bool_inputs_are_accepted() -> None:
    model = stump(1.0)
    np.testing.assert_array_equal(model.predict(np.array([[0], [1], [2]], dtype=np.int16)), [-1.0, 1.0, 1.0])
    np.testing.assert_array_equal(model.predict(np.array([[False], [True]])), [-1.0, 1.0])


@pytest.mark.parametrize(
    "X, error, match",
    [
        (np.zeros((3, 2)), ValueError, "2 features per row, the model expects 1"),
        (np.zeros(2), ValueError, "2 features per row"),
        (np.zeros((1, 1, 1)), ValueError, "1-D .* or 2-D"),
        (np.array([["a"]]), TypeError, "real numeric"),
        (np.array([[1 + 1j]]), TypeError, "real numeric"),
    ],
)
def test_input_is_checked(X: np.ndarray, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        stump().predict(X)


def test_prediction_methods_refuse_the_wrong_kind() -> None:
    with pytest.raises(ValueError, match="predict_margin is for boosted"):
        stump().predict_margin(np.zeros((1, 1)))
    with pytest.raises(ValueError, match="regressor"):
        stump().predict_proba(np.zeros((1, 1)))


def test_sigmoid_probabilities_and_extreme_margins() -> None:
    tree = Tree.leaf(0.0)
    model = TreeEnsemble(
        trees=(tree,),
        kind="boosted",
        link="sigmoid",
        n_outputs=1,
        feature_names=("x",),
        tree_output=np.array([0], dtype=np.int32),
        base_score=np.array([800.0]),
        classes=(0, 1),
    )
    np.testing.assert_array_equal(model.predict_proba(np.zeros((1, 1))), [[0.0, 1.0]])
    assert math.isclose(
        TreeEnsemble.from_dict({**model.to_dict(), "base_score": np.array([-800.0])}).predict_proba(np.zeros(1))[1], 0.0
    )


def test_mixed_scalar_and_vector_trees_in_one_boosted_model() -> None:
    scalar = TreeBuilder([0.0])
    scalar.split(0, 0, 0.5, left_value=[1.0], right_value=[2.0])
    vector = TreeBuilder([0.0, 0.0, 0.0])
    vector.split(0, 1, 0.5, left_value=[10.0, 20.0, 30.0], right_value=[40.0, 50.0, 60.0])
    model = TreeEnsemble(
        trees=(scalar.build(), vector.build(), scalar.build()),
        kind="boosted",
        link="identity",
        n_outputs=3,
        feature_names=("a", "b"),
        tree_output=np.array([2, -1, 0], dtype=np.int32),
        base_score=np.array([0.25, 0.5, 0.75]),
    )
    expected = [[11.25, 20.5, 31.75], [42.25, 50.5, 62.75]]
    np.testing.assert_array_equal(model.predict(np.array([[0.0, 0.0], [1.0, 1.0]])), expected)
