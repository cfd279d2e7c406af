"""``to_xgboost_json``: XGBoost loads the export and predicts our margins.

Three kinds of evidence:

* random structures (the shared hypothesis strategies, made numeric and scalar-leaf) with leaf
  values on a 2**-10 grid, where XGBoost's float32 sums are exact: margins equal ours exactly
  (softmax, identity) or within 1e-6 (logistic, whose base margin XGBoost derives in float32);
* random float64 values and bases: XGBoost's margin equals, bit for bit, a float32 replay of the
  exported JSON (so every remaining difference is XGBoost's float32 arithmetic), and that is
  within a float32 rounding bound of ours;
* models trained by XGBoost, converted with the test importer and exported back: margins equal
  ours and the original's within 1e-6, and re-importing the export gives our ensemble back.

Inputs are float32 with NaNs and values exactly on (and one float32 step around) thresholds.
XGBoost's ``DMatrix`` refuses +-inf, so +-inf only goes through ``inplace_predict``.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.model import Tree, TreeBuilder, TreeEnsemble
from shared.model.xgboost_json import (
    ROOT_PARENT,
    XGBoostExportError,
    logistic_base_score,
    to_xgboost_json,
)
from tests.shared.model import strategies as model_st
from tests.shared.model.xgboost_json import booster_to_ensemble

xgb = pytest.importorskip("xgboost")

REPO = Path(__file__).resolve().parents[3]
F32 = np.float32


# --- helpers ---------------------------------------------------------------------------------------
def load(data: bytes) -> Any:
    booster = xgb.Booster()
    booster.load_model(bytearray(data))
    booster.set_param({"nthread": 1})  # thread start-up dominates on these tiny inputs
    return booster


def xgb_margins(booster: Any, X: np.ndarray, n_outputs: int) -> tuple[np.ndarray, np.ndarray]:
    """(DMatrix margins with +-inf replaced by NaN, inplace margins on X as is), (rows, outputs)."""
    X = np.asarray(X, dtype=F32)
    finite = np.where(np.isinf(X), np.nan, X)
    dmatrix = booster.predict(xgb.DMatrix(finite, nthread=1), output_margin=True).reshape(len(X), n_outputs)
    inplace = booster.inplace_predict(X, predict_type="margin").reshape(len(X), n_outputs)
    return dmatrix, inplace


def assert_margins(model: TreeEnsemble, X: np.ndarray, *, atol: float = 1e-6, booster: Any = None) -> Any:
    """Export, load, and compare both XGBoost prediction paths with ``predict_margin``."""
    booster = booster or load(to_xgboost_json(model))
    X = np.asarray(X, dtype=F32)
    dmatrix, inplace = xgb_margins(booster, X, model.n_outputs)
    finite = np.where(np.isinf(X), np.nan, X)
    np.testing.assert_allclose(dmatrix, model.predict_margin(finite), rtol=0, atol=atol)
    np.testing.assert_allclose(inplace, model.predict_margin(X), rtol=0, atol=atol)
    return booster


def xgboost_logistic_margin(p: float) -> np.float32:
    """XGBoost 3.2: ``p`` clamped to [1e-6, 1 - 1e-6] (float32), then ``-logf(1.0f / p - 1.0f)``
    (written here independently of the exporter)."""
    q = F32(1.0) / min(max(F32(p), F32(1e-6)), F32(1 - 1e-6)) - F32(1.0)
    return F32(-math.log(float(q)))


def replay_float32(doc: dict[str, Any], X: np.ndarray) -> np.ndarray:
    """Predict margins from the exported JSON the way XGBoost does: float32 compare ``x <
    split_condition`` (NaN -> default_left), float32 base, trees added in order in float32."""
    learner = doc["learner"]
    model = learner["gradient_booster"]["model"]
    base = [float(v) for v in json.loads(learner["learner_model_param"]["base_score"])]
    n_out = max(int(learner["learner_model_param"]["num_class"]), int(learner["learner_model_param"]["num_target"]))
    if learner["objective"]["name"] == "binary:logistic":
        start = np.array([xgboost_logistic_margin(base[0])], dtype=F32)
    else:
        start = np.broadcast_to(np.array(base, dtype=F32), (n_out,))
    X = np.asarray(X, dtype=F32)
    out = np.tile(start, (len(X), 1)).astype(F32)
    for tree, cls in zip(model["trees"], model["tree_info"]):
        left, right = tree["left_children"], tree["right_children"]
        cond = np.array(tree["split_conditions"], dtype=F32)
        for r, row in enumerate(X):
            node = 0
            while left[node] != -1:
                x = row[tree["split_indices"][node]]
                go_left = bool(tree["default_left"][node]) if np.isnan(x) else bool(x < cond[node])
                node = left[node] if go_left else right[node]
            out[r, cls] = F32(out[r, cls] + cond[node])
    return out


def numeric_scalar(ensemble: TreeEnsemble, *, grid: bool, scale: float = 1.0) -> TreeEnsemble:
    """A strategies ensemble made exportable: categorical splits become numeric ones (threshold
    from the thresholds grid), vector-leaf trees keep one column (``t % n_outputs``). With
    ``grid`` leaf values and base scores snap to multiples of 2**-10 (after ``scale``)."""

    def snap(v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, dtype=np.float64) * scale
        return np.round(v * 1024) / 1024 if grid else v

    trees, outputs = [], []
    for t, (tree, out) in enumerate(zip(ensemble.trees, ensemble.tree_output)):
        column = int(out) if out >= 0 else t % ensemble.n_outputs
        sizes = np.diff(tree.cat_offsets)
        threshold = np.where(tree.is_categorical, np.take(model_st.THRESHOLDS, sizes % 6), tree.threshold)
        trees.append(
            Tree.from_arrays(
                feature=tree.feature,
                threshold=threshold,
                left=tree.left,
                right=tree.right,
                value=snap(tree.value[:, min(column, tree.n_outputs - 1)]),
                default_left=tree.default_left,
                cover=tree.cover,
            )
        )
        outputs.append(column)
    return TreeEnsemble(
        trees=tuple(trees),
        kind="boosted",
        link=ensemble.link,
        n_outputs=ensemble.n_outputs,
        feature_names=ensemble.feature_names,
        tree_output=np.asarray(outputs, dtype=np.int32),
        base_score=snap(ensemble.base_score),
        classes=ensemble.classes,
    )


def boosted(trees: list[Tree], outputs: list[int], link: str, n_outputs: int, base: Any, n_features: int = 2):
    classes = {"softmax": tuple(range(n_outputs)), "sigmoid": ("no", "yes"), "identity": ()}[link]
    return TreeEnsemble(
        trees=tuple(trees),
        kind="boosted",
        link=link,
        n_outputs=n_outputs,
        feature_names=tuple(f"f{i}" for i in range(n_features)),
        tree_output=np.asarray(outputs, dtype=np.int32),
        base_score=np.asarray(base, dtype=np.float64),
        classes=classes,
    )


def stump(threshold: float, left: float = -1.0, right: float = 2.0, *, feature: int = 0, default_left: bool = True):
    builder = TreeBuilder(0.0)
    builder.split(0, feature, threshold, default_left=default_left, left_value=left, right_value=right)
    return builder.build()


def around(values: np.ndarray) -> np.ndarray:
    """float32 values, each with its float32 neighbours."""
    with np.errstate(over="ignore"):
        v = np.asarray(values, dtype=F32)
        return np.concatenate([np.nextafter(v, F32(-np.inf)), v, np.nextafter(v, F32(np.inf))])


LINKS = ("softmax", "sigmoid", "identity")
HYPOTHESIS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- random structures -----------------------------------------------------------------------------
@HYPOTHESIS
@given(data=st.data())
def test_random_grid_models_match_exactly(data: st.DataObject) -> None:
    raw = data.draw(model_st.ensembles(kinds=("boosted",)))
    logistic = raw.link == "sigmoid"
    # Logistic: XGBoost derives the base margin in float32, so sums are not exact; small
    # magnitudes (|margin| < 2) keep its float32 rounding well below 1e-6.
    model = numeric_scalar(raw, grid=True, scale=1 / 16 if logistic else 1.0)
    X = data.draw(model_st.inputs(model.n_features))
    booster = assert_margins(model, X, atol=1e-6)
    if not logistic:  # grid values: every float32 sum is exact
        _, inplace = xgb_margins(booster, X, model.n_outputs)
        np.testing.assert_array_equal(inplace, model.predict_margin(X.astype(F32)))


@HYPOTHESIS
@given(data=st.data(), logistic_base=st.floats(-30, 30))
def test_random_float64_models_replay_bit_exactly(data: st.DataObject, logistic_base: float) -> None:
    raw = data.draw(model_st.ensembles(kinds=("boosted",), max_trees=5))
    model = numeric_scalar(raw, grid=False)
    if model.link == "sigmoid":
        model = boosted(list(model.trees), list(model.tree_output), "sigmoid", 1, [logistic_base], model.n_features)
    X = data.draw(model_st.inputs(model.n_features)).astype(F32)
    exported = to_xgboost_json(model)
    dmatrix, inplace = xgb_margins(load(exported), X, model.n_outputs)
    doc = json.loads(exported)
    np.testing.assert_array_equal(inplace, replay_float32(doc, X))
    np.testing.assert_array_equal(dmatrix, replay_float32(doc, np.where(np.isinf(X), np.nan, X)))
    # ... and the replay is ours up to float32 rounding: each stored value and each of the
    # float32 additions is off by at most 2**-24 of a bound on the running sum.
    ours = model.predict_margin(X)
    per_output = np.zeros(model.n_outputs)
    count = np.zeros(model.n_outputs)
    for tree, out in zip(model.trees, model.tree_output):
        per_output[out] += np.abs(tree.value).max()
        count[out] += 1
    scale = 2 * np.abs(model.base_score) + per_output + 16.0 * (model.link == "sigmoid") + 1.0
    bound = (2 * count + 4) * 2.0**-24 * scale
    assert (np.abs(inplace - ours) <= bound).all()


# --- models trained by XGBoost ----------------------------------------------------------------------
def training_data(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, 5)), 1).astype(F32)  # coarse grid: ties with cut points
    y = (X[:, 0] > 0.2).astype(int) + (X[:, 1] + X[:, 3] < 0.5).astype(int) + (X[:, 2] > 1.0).astype(int)
    X[rng.random(X.shape) < 0.08] = np.nan
    return X, y


def threshold_rows(model: TreeEnsemble, template: np.ndarray) -> np.ndarray:
    """Rows with one feature set to each split threshold or one float32 step either side."""
    rows = []
    for tree in model.trees:
        for node in np.flatnonzero(tree.left >= 0):
            for value in around([tree.threshold[node]]):
                row = template[len(rows) % len(template)].copy()
                row[tree.feature[node]] = value
                rows.append(row)
    return np.array(rows, dtype=F32)


TRAINED = {
    "softprob-3": ({"objective": "multi:softprob", "num_class": 3}, lambda y, X: np.minimum(y, 2)),
    "softprob-4": ({"objective": "multi:softprob", "num_class": 4}, lambda y, X: y),
    "softprob-3-multi-output-tree": (
        {"objective": "multi:softprob", "num_class": 3, "multi_strategy": "multi_output_tree"},
        lambda y, X: np.minimum(y, 2),
    ),
    "logistic": ({"objective": "binary:logistic"}, lambda y, X: (y > 1).astype(int)),
    "squarederror": ({"objective": "reg:squarederror"}, lambda y, X: y * 2.5 + np.nan_to_num(X[:, 2])),
    "squarederror-2-targets": (
        {"objective": "reg:squarederror", "multi_strategy": "one_output_per_tree"},
        lambda y, X: np.stack([y * 1.5, np.nan_to_num(X[:, 0])], axis=1),
    ),
}


@pytest.mark.parametrize("case", list(TRAINED), ids=list(TRAINED))
def test_xgboost_trained_models_round_trip(case: str) -> None:
    params, target = TRAINED[case]
    X, y = training_data()
    train = xgb.DMatrix(X[:300], target(y, X)[:300])
    original = xgb.train(
        {**params, "tree_method": "hist", "max_depth": 4, "eta": 0.3, "nthread": 1, "seed": 0},
        train,
        num_boost_round=8,
    )
    ours = booster_to_ensemble(original)
    assert all(not tree.is_categorical.any() for tree in ours.trees)
    test = np.concatenate([X[300:], threshold_rows(ours, X[300:])])
    assert np.isnan(test).any()
    exported = load(ours.to_xgboost_json())
    assert_margins(ours, test, booster=exported)
    d_orig, i_orig = xgb_margins(original, test, ours.n_outputs)
    d_new, i_new = xgb_margins(exported, test, ours.n_outputs)
    np.testing.assert_allclose(d_new, d_orig, rtol=0, atol=1e-6)
    np.testing.assert_allclose(i_new, i_orig, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(
        exported.predict(xgb.DMatrix(test), pred_leaf=True), original.predict(xgb.DMatrix(test), pred_leaf=True)
    )
    # XGBoost's own trees are laid out breadth-first already: the round trip is bit-exact.
    assert booster_to_ensemble(exported) == ours
    assert exported.num_boosted_rounds() == original.num_boosted_rounds()


def test_trained_logistic_with_a_high_base_score() -> None:
    """base_score 0.98 (margin 3.89): no float32 probability hits the margin within float32
    rounding, so the remainder goes into tree 0; XGBoost's sums are then exactly the float32
    replay, and as close to ours as float32 sums of margins around 4..10 allow."""
    X, y = training_data()
    original = xgb.train(
        {"objective": "binary:logistic", "base_score": 0.98, "tree_method": "hist", "max_depth": 3, "nthread": 1},
        xgb.DMatrix(X[:300], (y[:300] > 0).astype(int)),
        num_boost_round=3,
    )
    ours = booster_to_ensemble(original)
    exported = ours.to_xgboost_json()
    doc = json.loads(exported)
    p = json.loads(doc["learner"]["learner_model_param"]["base_score"])[0]
    assert 0 < p < 1 and F32(p) == p
    test = np.concatenate([X[300:], threshold_rows(ours, X[300:])])
    dmatrix, inplace = xgb_margins(load(exported), test, 1)
    np.testing.assert_array_equal(inplace, replay_float32(doc, test))
    np.testing.assert_array_equal(dmatrix, inplace)
    np.testing.assert_allclose(inplace, ours.predict_margin(test), rtol=0, atol=1.5e-6)
    assert np.abs(inplace - ours.predict_margin(test)).max() <= 2.0**-24 * 8 * np.abs(ours.predict_margin(test)).max()


# --- logistic base score ---------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(margin=st.floats(-8, 8) | st.sampled_from([0.0, -0.0, 1e-30, 3.0, 4.0, 7.999]))
def test_logistic_base_margin_round_trip(margin: float) -> None:
    model = boosted([stump(0.5, -0.25, 0.125)], [0], "sigmoid", 1, [margin])
    X = np.array([[0.0, 0.0], [0.5, 0.0], [np.nan, 0.0], [np.inf, 1.0]], dtype=F32)
    assert_margins(model, X, atol=1e-6)


def test_logistic_base_score_search() -> None:
    for margin in (-13.0, -3.0, -0.4, 0.0, 0.3, 1.0, 2.5):  # reachable to float32 rounding
        p, achieved = logistic_base_score(margin)
        assert 0 < p < 1 and xgboost_logistic_margin(float(p)) == F32(achieved)
        assert abs(achieved - margin) <= 2.0**-23 * max(1.0, abs(margin))
    # near 1 float32 probabilities are coarse: margin 4 is missed by ~2e-6 ...
    p, achieved = logistic_base_score(4.0)
    assert 1e-6 < abs(achieved - 4.0) < 3e-6
    # ... and the exporter makes up the difference in tree 0 (so the margin is right)
    model = boosted([stump(0.5, 0.0, 0.0)], [0], "sigmoid", 1, [4.0])
    leaf_values = json.loads(to_xgboost_json(model))["learner"]["gradient_booster"]["model"]["trees"][0]
    assert leaf_values["split_conditions"][1] != 0.0
    assert_margins(model, np.zeros((1, 2)), atol=1e-6)
    # margins beyond XGBoost's clamp of p to [1e-6, 1 - 1e-6] still come out right
    assert logistic_base_score(20.0)[0] == F32(1 - 1e-6) and logistic_base_score(-20.0)[0] == F32(1e-6)
    for margin in (12.0, 20.0, -95.0):
        model = boosted([stump(0.5, 0.0, 0.0)], [0], "sigmoid", 1, [margin])
        assert_margins(model, np.zeros((1, 2)), atol=2.0**-23 * abs(margin) * 2)


def test_softprob_and_regression_base_scores_are_vectors() -> None:
    softmax = boosted([stump(0.5, 0.1, 0.2)] * 3, [0, 1, 2], "softmax", 3, [0.5, -1.25, 3.0])
    doc = json.loads(to_xgboost_json(softmax))
    assert json.loads(doc["learner"]["learner_model_param"]["base_score"]) == [0.5, -1.25, 3.0]
    regression = boosted([stump(0.5), stump(1.0)], [1, 0], "identity", 2, [0.1, 7.0])
    doc = json.loads(to_xgboost_json(regression))
    params = doc["learner"]["learner_model_param"]
    assert params["num_target"] == "2" and params["num_class"] == "0"
    assert json.loads(params["base_score"]) == [float(F32(0.1)), 7.0]
    X = around([0.5, 1.0, -3.0])[:, None].repeat(2, axis=1)
    assert_margins(softmax, X)
    assert_margins(regression, X)


@pytest.mark.parametrize(
    "link, n_outputs, base", [("softmax", 3, [0.5, -1.0, 2.0]), ("sigmoid", 1, [1.5]), ("identity", 1, [-2.0])]
)
def test_model_without_trees(link: str, n_outputs: int, base: list[float]) -> None:
    model = boosted([], [], link, n_outputs, base)
    doc = json.loads(to_xgboost_json(model))
    gbtree = doc["learner"]["gradient_booster"]["model"]
    assert gbtree["tree_info"] == [0] and gbtree["trees"][0]["left_children"] == [-1]
    # a single leaf of value 0 (logistic: plus the base margin's float32 remainder, if any)
    assert abs(gbtree["trees"][0]["split_conditions"][0]) < 1e-6
    assert_margins(model, np.array([[0.0, np.nan], [1.0, 2.0]], dtype=F32))


# --- thresholds ------------------------------------------------------------------------------------
def test_non_float32_threshold_is_refused_with_tree_and_node() -> None:
    builder = TreeBuilder(0.0)
    _, right = builder.split(0, 0, 1.0)
    builder.split(right, 1, 0.1)  # 0.1 is not a float32 value
    model = boosted([stump(0.5), builder.build()], [0, 0], "identity", 1, [0.0])
    with pytest.raises(XGBoostExportError, match=r"tree 1, node 2.*threshold 0\.1 is not a float32 value") as info:
        to_xgboost_json(model)
    assert (info.value.tree, info.value.node, info.value.field) == (1, 2, "threshold")
    assert isinstance(info.value, ValueError)


def test_round_thresholds_rounds_up_and_keeps_float32_routes() -> None:
    thresholds = [0.1, -0.1, 1 / 3, 1e-40, -3.5e38, 2.0]
    trees = [stump(t, -1.0, 1.0, default_left=bool(i % 2)) for i, t in enumerate(thresholds)]
    model = boosted(trees, [0] * len(trees), "identity", 1, [0.0], n_features=1)
    doc = json.loads(to_xgboost_json(model, round_thresholds=True))
    written = [tree["split_conditions"][0] for tree in doc["learner"]["gradient_booster"]["model"]["trees"]]
    for t, w in zip(thresholds, written):
        with np.errstate(over="ignore"):
            assert F32(w) == w and w >= t and (w == t or float(np.nextafter(F32(w), F32(-np.inf))) < t)
    assert written[1] == float(np.nextafter(F32(-0.1), F32(0))) and written[4] == -float(np.finfo(F32).max)
    # every float32 input takes the same route as in our model, including the neighbours
    X = np.concatenate([around(thresholds), around(written), [np.nan, np.inf, -np.inf, 0.0]])[:, None]
    booster = assert_margins(model, X, booster=load(to_xgboost_json(model, round_thresholds=True)))
    # float64 inputs too: both compare float32(-0.1), which is below -0.1 and its rounding up (left)
    x = np.array([[-0.1], [0.1], [1 / 3]])
    np.testing.assert_allclose(
        model.predict_margin(x)[:, 0], booster.inplace_predict(x, predict_type="margin"), rtol=0, atol=1e-6
    )


def test_threshold_beyond_float32_is_refused_even_when_rounding() -> None:
    model = boosted([stump(1e39)], [0], "identity", 1, [0.0])
    for option in (False, True):
        with pytest.raises(XGBoostExportError, match="tree 0, node 0.*beyond the float32 range"):
            to_xgboost_json(model, round_thresholds=option)


# --- refusals --------------------------------------------------------------------------------------
def test_forest_and_single_tree_models_are_refused() -> None:
    leaf = Tree.leaf([0.25, 0.75])
    for kind in ("forest", "single"):
        model = TreeEnsemble(
            trees=(leaf,), kind=kind, link="identity", n_outputs=2, feature_names=("a",), classes=("x", "y")
        )
        with pytest.raises(XGBoostExportError, match="only boosted"):
            model.to_xgboost_json()


def test_categorical_split_is_refused() -> None:
    builder = TreeBuilder(0.0)
    left, _ = builder.split(0, 0, 0.5)
    builder.split(left, 1, categories=[1, 3])
    model = boosted([stump(0.5), builder.build()], [0, 1], "softmax", 2, [0.0, 0.0])
    with pytest.raises(XGBoostExportError, match="tree 1, node 1.*categorical") as info:
        to_xgboost_json(model)
    assert (info.value.tree, info.value.node) == (1, 1)


def test_vector_leaf_trees_mixed_with_scalar_ones_are_refused() -> None:
    vector = Tree.leaf([0.5, -0.5])
    model = boosted([stump(0.5), vector], [0, -1], "softmax", 2, [0.0, 0.0])
    with pytest.raises(XGBoostExportError, match="tree 0.*mixes vector-leaf trees"):
        to_xgboost_json(model)
    alone = boosted([vector, vector], [-1, -1], "softmax", 2, [0.0, 0.0])
    assert_margins(alone, around([0.5, 1.5])[:, None].repeat(2, axis=1))
    # with one output a tree_output -1 tree has scalar leaves: exported for class 0
    single = boosted([stump(0.5), stump(1.5)], [-1, 0], "identity", 1, [0.0])
    assert json.loads(to_xgboost_json(single))["learner"]["gradient_booster"]["model"]["tree_info"] == [0, 0]
    assert_margins(single, around([0.5, 1.5])[:, None].repeat(2, axis=1))


def test_values_beyond_float32_are_refused() -> None:
    model = boosted([stump(0.5, 1.0, 1e39)], [0], "identity", 1, [0.0])
    with pytest.raises(XGBoostExportError, match="tree 0, node 2.*beyond the float32 range"):
        to_xgboost_json(model)
    model = boosted([stump(0.5)], [0], "identity", 1, [-1e300])
    with pytest.raises(XGBoostExportError, match="base_score"):
        to_xgboost_json(model)


# --- the JSON itself -------------------------------------------------------------------------------
def test_json_layout() -> None:
    # node ids deliberately not breadth-first: root 0, its children 4 (left) and 1 (right)
    tree = Tree.from_arrays(
        feature=[0, 1, -1, -1, -1],
        threshold=[0.5, 2.0, 0.0, 0.0, 0.0],
        left=[4, 2, -1, -1, -1],
        right=[1, 3, -1, -1, -1],
        value=[0.0, 0.5, 1.0, 2.0, 3.0],
        default_left=[True, False, False, False, False],
        cover=[10.0, 6.0, 2.5, 3.5, 4.0],
    )
    model = boosted(
        [tree, stump(1.0), stump(2.0), stump(0.0), stump(1.0), stump(2.0)],
        [0, 1, 2, 0, 1, 2],
        "softmax",
        3,
        [0.0, 0.0, 0.0],
    )
    doc = json.loads(model.to_xgboost_json())
    assert doc["version"] == [3, 2, 0]
    learner = doc["learner"]
    assert learner["objective"] == {"name": "multi:softprob", "softmax_multiclass_param": {"num_class": "3"}}
    assert learner["learner_model_param"]["num_class"] == "3" and learner["learner_model_param"]["num_feature"] == "2"
    assert learner["feature_names"] == [] and json.loads(learner["attributes"]["wheelfed_classes"]) == [0, 1, 2]
    gbtree = learner["gradient_booster"]["model"]
    assert gbtree["gbtree_model_param"]["num_trees"] == "6"
    assert gbtree["tree_info"] == [0, 1, 2, 0, 1, 2] and gbtree["iteration_indptr"] == [0, 3, 6]
    t0 = gbtree["trees"][0]
    assert t0["tree_param"] == {"num_deleted": "0", "num_feature": "2", "num_nodes": "5", "size_leaf_vector": "1"}
    # breadth-first: 0 -> (old 4, old 1) = (1, 2); old 1 -> (old 2, old 3) = (3, 4)
    assert t0["left_children"] == [1, -1, 3, -1, -1] and t0["right_children"] == [2, -1, 4, -1, -1]
    assert t0["parents"] == [ROOT_PARENT, 0, 0, 2, 2]
    assert t0["split_indices"] == [0, 0, 1, 0, 0]
    assert t0["split_conditions"] == [0.5, 3.0, 2.0, 1.0, 2.0]
    assert t0["base_weights"] == [0.0, 3.0, 0.5, 1.0, 2.0]
    assert t0["sum_hessian"] == [10.0, 4.0, 6.0, 2.5, 3.5]
    assert t0["default_left"] == [1, 0, 0, 0, 0] and t0["split_type"] == [0] * 5
    assert t0["loss_changes"] == [0.0] * 5 and t0["categories_nodes"] == []
    for tree in gbtree["trees"]:  # floats are JSON floats (an integer 0 fails to load)
        for name in ("split_conditions", "base_weights", "loss_changes", "sum_hessian"):
            assert all(type(v) is float for v in tree[name])
        left, right = np.array(tree["left_children"]), np.array(tree["right_children"])
        assert ((right == left + 1) | (left == -1)).all()
    X = around([0.5, 2.0, 1.0, 0.0])[:, None].repeat(2, axis=1)
    X[::4, 0] = np.nan
    assert_margins(model, X)


def test_iteration_indptr_for_unusual_layouts() -> None:
    trees = [stump(0.5, v, -v) for v in (0.5, 1.0, 2.0, 4.0, 8.0)]
    model = boosted(trees, [2, 2, 0, 1, 0], "softmax", 3, [0.1, 0.2, 0.3])
    gbtree = json.loads(to_xgboost_json(model))["learner"]["gradient_booster"]["model"]
    assert gbtree["tree_info"] == [2, 2, 0, 1, 0] and gbtree["iteration_indptr"] == [0, 1, 4, 5]
    assert_margins(model, around([0.5, -1.0])[:, None].repeat(2, axis=1))
    regression = boosted(trees[:3], [0, 0, 0], "identity", 1, [0.0])
    assert json.loads(to_xgboost_json(regression))["learner"]["gradient_booster"]["model"]["iteration_indptr"] == [
        0,
        1,
        2,
        3,
    ]


def test_feature_names_option() -> None:
    model = boosted([stump(0.5, feature=1)], [0], "identity", 1, [0.0])
    booster = load(to_xgboost_json(model, feature_names=True))
    assert booster.feature_names == ["f0", "f1"] and booster.feature_types == ["float", "float"]
    X = np.array([[0.0, 0.5], [0.0, 0.25]], dtype=F32)
    np.testing.assert_allclose(
        booster.predict(xgb.DMatrix(X, feature_names=["f0", "f1"]), output_margin=True), model.predict_margin(X)[:, 0]
    )
    assert load(to_xgboost_json(model)).feature_names is None  # default: plain numpy DMatrix works


def test_method_delegates_and_output_is_deterministic() -> None:
    model = boosted([stump(0.5), stump(1.5)], [0, 0], "sigmoid", 1, [0.7])
    assert model.to_xgboost_json() == to_xgboost_json(model) == to_xgboost_json(model)
    assert model.to_xgboost_json(round_thresholds=True, feature_names=True) == to_xgboost_json(
        model, round_thresholds=True, feature_names=True
    )


def test_shared_model_does_not_import_xgboost() -> None:
    code = (
        "import sys; import shared.model.xgboost_json as m; from shared.model import TreeEnsemble; "
        "assert 'xgboost' not in sys.modules, 'xgboost imported'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
