"""Oracles: models trained by scikit-learn and XGBoost, converted, must predict what they predict.

Data is float32 (both libraries compare in float32 or on float32-cast inputs) with NaNs, ties
on thresholds (values on a coarse grid) and, for XGBoost, a categorical feature.
"""

from __future__ import annotations

import numpy as np
import pytest

from shared.model import Tree, TreeEnsemble
from tests.shared.model.xgboost_json import booster_to_ensemble

sklearn_tree = pytest.importorskip("sklearn.tree")
sklearn_ensemble = pytest.importorskip("sklearn.ensemble")
xgb = pytest.importorskip("xgboost")

TOL = dict(rtol=1e-6, atol=1e-6)


def make_data(n: int = 400, *, nan_fraction: float = 0.08, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, 5)), 1).astype(np.float32)  # coarse grid: many ties
    X[:, 4] = rng.integers(0, 6, n)  # category codes
    y = (X[:, 0] > 0.2).astype(int) + (np.isin(X[:, 4], [1, 4]) & (X[:, 1] < 0.5)).astype(int)
    X[rng.random(X.shape) < nan_fraction] = np.nan
    return X, y


# --- scikit-learn -------------------------------------------------------------------------------
def sklearn_tree_to_tree(estimator, classifier: bool) -> Tree:
    t = estimator.tree_
    leaf = t.children_left == -1
    value = t.value[:, 0, :] if classifier else t.value[:, :, 0]
    if classifier:  # leaf class distributions (newer sklearn stores fractions, older counts)
        value = value / value.sum(axis=1, keepdims=True)
    return Tree.from_arrays(
        feature=np.where(leaf, -1, t.feature),
        # sklearn goes left iff x <= threshold; the next float64 up makes that our x < threshold.
        # Its "missing vs the rest" splits have threshold +inf; our thresholds are finite, and the
        # largest float differs only for x = +inf (which sklearn would send left).
        threshold=np.where(leaf, 0.0, np.minimum(np.nextafter(t.threshold, np.inf), np.finfo(np.float64).max)),
        left=t.children_left,
        right=t.children_right,
        value=value,
        default_left=getattr(t, "missing_go_to_left", np.zeros(t.node_count, dtype=np.uint8)).astype(bool),
        cover=t.weighted_n_node_samples,
    )


def sklearn_to_ensemble(model, kind: str) -> TreeEnsemble:
    classifier = hasattr(model, "classes_")
    estimators = model.estimators_ if kind == "forest" else [model]
    n_outputs = len(model.classes_) if classifier else model.n_outputs_
    return TreeEnsemble(
        trees=tuple(sklearn_tree_to_tree(e, classifier) for e in estimators),
        kind=kind,
        link="identity",
        n_outputs=n_outputs,
        feature_names=tuple(f"f{i}" for i in range(model.n_features_in_)),
        classes=tuple(model.classes_) if classifier else (),
    )


@pytest.mark.parametrize(
    "model, kind",
    [
        (sklearn_tree.DecisionTreeClassifier(max_depth=6, random_state=0), "single"),
        (sklearn_ensemble.RandomForestClassifier(n_estimators=15, max_depth=6, random_state=0), "forest"),
    ],
    ids=["decision-tree", "random-forest"],
)
def test_sklearn_classifiers(model, kind: str) -> None:
    X, y = make_data()
    labels = np.array(["rest", "push", "turn"])[y]
    model.fit(X[:300], labels[:300])
    ours = sklearn_to_ensemble(model, kind)
    test = X[300:]
    estimators = getattr(model, "estimators_", [model])
    np.testing.assert_array_equal(ours.leaves(test), np.stack([e.apply(test) for e in estimators], axis=1))
    np.testing.assert_allclose(ours.predict_proba(test), model.predict_proba(test), **TOL)
    np.testing.assert_array_equal(ours.predict(test), model.predict(test))
    np.testing.assert_allclose(ours.predict_proba(test[0]), model.predict_proba(test[:1])[0], **TOL)


@pytest.mark.parametrize(
    "model, kind",
    [
        (sklearn_tree.DecisionTreeRegressor(max_depth=5, random_state=0), "single"),
        (sklearn_ensemble.RandomForestRegressor(n_estimators=10, max_depth=5, random_state=0), "forest"),
    ],
    ids=["decision-tree", "random-forest"],
)
def test_sklearn_regressors(model, kind: str) -> None:
    X, y = make_data()
    target = y * 2.5 + np.nan_to_num(X[:, 2])
    model.fit(X[:300], target[:300])
    ours = sklearn_to_ensemble(model, kind)
    np.testing.assert_allclose(ours.predict(X[300:]), model.predict(X[300:]), **TOL)


# --- XGBoost ---------------------------------------------------------------------------------
XGB_CASES = {
    "softprob": ({"objective": "multi:softprob", "num_class": 3}, True),
    "softprob-multi-output-tree": (
        {"objective": "multi:softprob", "num_class": 3, "multi_strategy": "multi_output_tree"},
        False,
    ),
    "logistic": ({"objective": "binary:logistic"}, True),
    "squared-error": ({"objective": "reg:squarederror"}, True),
}


@pytest.mark.parametrize("case", list(XGB_CASES), ids=list(XGB_CASES))
def test_xgboost(case: str) -> None:
    params, categorical = XGB_CASES[case]
    X, y = make_data()
    if params["objective"] == "binary:logistic":
        y = (y > 0).astype(int)
    elif params["objective"] == "reg:squarederror":
        y = y * 2.5 + np.nan_to_num(X[:, 2])
    types = ["q", "q", "q", "q", "c" if categorical else "q"]
    train = xgb.DMatrix(X[:300], y[:300], feature_types=types, enable_categorical=True)
    booster = xgb.train(
        {**params, "tree_method": "hist", "max_depth": 4, "eta": 0.3, "nthread": 1, "max_cat_to_onehot": 1, "seed": 0},
        train,
        num_boost_round=8,
    )
    ours = booster_to_ensemble(booster)
    if categorical:
        assert any(tree.is_categorical.any() for tree in ours.trees)
    test = X[300:]
    dtest = xgb.DMatrix(test, feature_types=types, enable_categorical=True)
    theirs_leaves = booster.predict(dtest, pred_leaf=True).astype(np.int64).reshape(len(test), -1)
    np.testing.assert_array_equal(ours.leaves(test), theirs_leaves)
    margin = booster.predict(dtest, output_margin=True).reshape(len(test), -1)
    np.testing.assert_allclose(ours.predict_margin(test), margin, **TOL)
    prediction = booster.predict(dtest)
    if params["objective"] == "binary:logistic":
        np.testing.assert_allclose(ours.predict_proba(test)[:, 1], prediction, **TOL)
    elif params["objective"] == "reg:squarederror":
        np.testing.assert_allclose(ours.predict(test), prediction, **TOL)
    else:
        np.testing.assert_allclose(ours.predict_proba(test), prediction, **TOL)
    # and through the wire format
    np.testing.assert_array_equal(TreeEnsemble.from_json(ours.to_json()).predict_raw(test), ours.predict_raw(test))
