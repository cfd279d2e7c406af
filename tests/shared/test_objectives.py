"""Objectives: calculus (finite differences), XGBoost parity (its Hessian factor, clamps, base
scores and metrics, read from trained boosters), additivity of the base-score statistics."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shared.objectives import (
    Logistic,
    Softmax,
    SquaredError,
    log_softmax,
    sigmoid,
    softmax,
)

xgb = pytest.importorskip("xgboost")


def per_sample_nll(margin: np.ndarray, y: np.ndarray) -> np.ndarray:
    return -log_softmax(margin)[np.arange(len(y)), y]


# --- calculus -----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(2, 5)), elements=st.floats(-5, 5)),
    st.integers(0, 2**32 - 1),
)
def test_softmax_gradient_and_diagonal_hessian_by_finite_differences(margin, seed) -> None:
    n, K = margin.shape
    y = np.random.default_rng(seed).integers(0, K, n)
    g, h = Softmax(K, hessian_factor=1.0).gradients(margin, y)
    eps = 1e-5
    for k in range(K):
        step = np.zeros_like(margin)
        step[:, k] = eps
        dg = (per_sample_nll(margin + step, y) - per_sample_nll(margin - step, y)) / (2 * eps)
        np.testing.assert_allclose(g[:, k], dg, atol=1e-7)
        g_plus, _ = Softmax(K).gradients(margin + step, y)
        g_minus, _ = Softmax(K).gradients(margin - step, y)
        np.testing.assert_allclose(h[:, k], (g_plus[:, k] - g_minus[:, k]) / (2 * eps), atol=1e-7)
    # The default doubles the diagonal, as XGBoost does.
    _, h2 = Softmax(K).gradients(margin, y)
    np.testing.assert_allclose(h2, np.maximum(2 * h, 1e-16))
    np.testing.assert_allclose(g.sum(axis=1), 0.0, atol=1e-12)


def test_logistic_and_squared_error_by_finite_differences() -> None:
    rng = np.random.default_rng(0)
    m = rng.normal(scale=3, size=50)
    y = rng.random(50)  # probabilistic labels are allowed
    w = rng.uniform(0.1, 3, 50)
    g, h = Logistic().gradients(m, y, w)
    eps = 1e-6

    def nll(mm):
        p = sigmoid(mm)
        return -(y * np.log(p) + (1 - y) * np.log1p(-p)) * w

    np.testing.assert_allclose(g, (nll(m + eps) - nll(m - eps)) / (2 * eps), atol=1e-6)
    g_step = (Logistic().gradients(m + eps, y, w)[0] - Logistic().gradients(m - eps, y, w)[0]) / (2 * eps)
    np.testing.assert_allclose(h, g_step, atol=1e-6)
    g, h = SquaredError().gradients(m[:, None], y, w)
    assert g.shape == h.shape == (50, 1)
    np.testing.assert_allclose(g[:, 0], (m - y) * w)
    np.testing.assert_allclose(h[:, 0], w)


def test_hessian_clamps_and_extreme_margins() -> None:
    margin = np.array([[800.0, -800.0, 0.0], [0.0, 0.0, 0.0]])
    g, h = Softmax(3).gradients(margin, [0, 2])
    assert np.isfinite(g).all() and h.min() == 1e-16
    np.testing.assert_allclose(h[1], 2 * (1 / 3) * (2 / 3))
    _, h = Softmax(3).gradients(margin, [0, 2], weight=[0.0, 1.0])
    assert (h[0] == 1e-16).all()  # clamp after the weight, like XGBoost's softmax
    _, h = Logistic().gradients([50.0, -50.0], [1, 0], weight=[2.0, 0.5])
    np.testing.assert_allclose(h, [2e-16, 0.5e-16])  # clamp before the weight, like XGBoost's logistic
    assert Softmax(2).loss([[1000.0, -1000.0]], [1]) == pytest.approx(-np.log(1e-16))


def test_input_checks() -> None:
    with pytest.raises(ValueError):
        Softmax(1)
    with pytest.raises(ValueError, match="range|lie"):
        Softmax(3).gradients(np.zeros((2, 3)), [0, 3])
    with pytest.raises(ValueError, match="integers"):
        Softmax(3).gradients(np.zeros((2, 3)), [0.5, 1])
    with pytest.raises(ValueError, match="shape"):
        Softmax(3).gradients(np.zeros((2, 2)), [0, 1])
    with pytest.raises(ValueError, match="weight"):
        Softmax(3).gradients(np.zeros((2, 3)), [0, 1], weight=[1.0, -1.0])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        Logistic().gradients([0.0], [2.0])
    with pytest.raises(ValueError, match="mode"):
        SquaredError().base_score([1.0, 1.0], mode="median")
    with pytest.raises(ValueError, match="summed"):
        Logistic().base_score(mode="average")
    with pytest.raises(ValueError, match="infinite"):
        Logistic().base_score([0.0, 3.0], mode="average")


def test_softmax_helpers_are_stable() -> None:
    m = np.array([[1000.0, 0.0], [-1000.0, -1000.0]])
    np.testing.assert_allclose(softmax(m), [[1.0, 0.0], [0.5, 0.5]])
    np.testing.assert_allclose(log_softmax(m), [[0.0, -1000.0], [np.log(0.5)] * 2])
    np.testing.assert_allclose(sigmoid([-1000.0, 0.0, 1000.0]), [0.0, 0.5, 1.0])


# --- base scores: zero (the paper) and XGBoost's boost_from_average, from additive statistics ------


def test_base_score_statistics_are_additive() -> None:
    rng = np.random.default_rng(1)
    y = rng.integers(0, 4, 100)
    w = rng.uniform(0.5, 2, 100)
    parts = np.array_split(np.arange(100), 3)
    for obj, labels in ((Softmax(4), y), (Logistic(), (y > 1).astype(float)), (SquaredError(), y * 1.5)):
        whole = obj.base_score_stats(labels, w)
        summed = sum(obj.base_score_stats(labels[p], w[p]) for p in parts)
        np.testing.assert_allclose(summed, whole)
        np.testing.assert_array_equal(obj.base_score(), np.zeros(obj.n_outputs))
        assert obj.base_score(whole, mode="average").shape == (obj.n_outputs,)


def xgb_base_score(params: dict, X, y, w) -> np.ndarray:
    booster = xgb.train(params | {"max_depth": 1, "nthread": 1}, xgb.DMatrix(X, label=y, weight=w), 1)
    text = json.loads(booster.save_config())["learner"]["learner_model_param"]["base_score"]
    return np.array([float(v) for v in text.strip("[]").split(",")])


def test_average_base_scores_match_xgboost() -> None:
    rng = np.random.default_rng(2)
    n = 400
    X = rng.normal(size=(n, 2))
    w = rng.uniform(0.5, 2, n)
    y = rng.choice(4, size=n, p=[0.1, 0.2, 0.3, 0.4])
    y[:5] = 0
    obj = Softmax(4)
    np.testing.assert_allclose(
        obj.base_score(obj.base_score_stats(y, w), mode="average"),
        xgb_base_score({"objective": "multi:softprob", "num_class": 4}, X, y, w),
        rtol=1e-5,
        atol=1e-5,  # XGBoost works in float32
    )
    absent = np.where(y == 3, 0, y)  # a class with no samples: prior clamped at 1e-6
    np.testing.assert_allclose(
        obj.base_score(obj.base_score_stats(absent, w), mode="average"),
        xgb_base_score({"objective": "multi:softprob", "num_class": 4}, X, absent, w),
        rtol=1e-5,
        atol=1e-5,
    )
    yb = (y > 1).astype(float)
    p = xgb_base_score({"objective": "binary:logistic"}, X, yb, w)  # XGBoost stores a probability
    margin = Logistic().base_score(Logistic().base_score_stats(yb, w), mode="average")
    np.testing.assert_allclose(sigmoid(margin), p, rtol=1e-6)
    yr = rng.normal(3, 1, n)
    np.testing.assert_allclose(
        SquaredError().base_score(SquaredError().base_score_stats(yr, w), mode="average"),
        xgb_base_score({"objective": "reg:squarederror"}, X, yr, w),
        rtol=1e-6,
    )


# --- gradients against XGBoost: a root's sum_hessian and base weight expose H and G ---------------


def root_sums(booster, n_trees: int, reg_lambda: float) -> tuple[np.ndarray, np.ndarray]:
    trees = json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"]["trees"][:n_trees]
    H = np.array([t["sum_hessian"][0] for t in trees])
    G = np.array([-t["base_weights"][0] * (t["sum_hessian"][0] + reg_lambda) for t in trees])
    return G, H


@pytest.mark.parametrize("K", [2, 3, 5])
def test_softmax_gradients_match_xgboost(K: int) -> None:
    rng = np.random.default_rng(K)
    n = 500
    X = rng.normal(size=(n, 3)).astype(np.float32)
    y = rng.integers(0, K, n)
    w = rng.uniform(0.5, 2, n).astype(np.float32)
    margin = rng.normal(scale=2, size=(n, K)).astype(np.float32)
    booster = xgb.train(
        {"objective": "multi:softprob", "num_class": K, "max_depth": 1, "reg_lambda": 1.0, "nthread": 1},
        xgb.DMatrix(X, label=y, weight=w, base_margin=margin),
        1,
    )
    g, h = Softmax(K).gradients(margin, y, w)
    G, H = root_sums(booster, K, 1.0)
    np.testing.assert_allclose(H, h.sum(axis=0), rtol=1e-5)  # the factor 2 is XGBoost's
    np.testing.assert_allclose(G, g.sum(axis=0), rtol=1e-4, atol=1e-3)
    assert not np.allclose(H, Softmax(K, hessian_factor=1.0).gradients(margin, y, w)[1].sum(axis=0), rtol=0.1)


def test_logistic_and_squared_error_gradients_match_xgboost() -> None:
    rng = np.random.default_rng(9)
    n = 500
    X = rng.normal(size=(n, 3)).astype(np.float32)
    w = rng.uniform(0.5, 2, n).astype(np.float32)
    margin = rng.normal(scale=2, size=n).astype(np.float32)
    yb = (rng.random(n) < 0.4).astype(np.float32)
    yr = rng.normal(size=n).astype(np.float32)
    for obj, name, y in ((Logistic(), "binary:logistic", yb), (SquaredError(), "reg:squarederror", yr)):
        booster = xgb.train(
            {"objective": name, "max_depth": 1, "reg_lambda": 1.0, "nthread": 1},
            xgb.DMatrix(X, label=y, weight=w, base_margin=margin),
            1,
        )
        g, h = obj.gradients(margin, y, w)
        G, H = root_sums(booster, 1, 1.0)
        np.testing.assert_allclose(H, [h.sum()], rtol=1e-5)
        np.testing.assert_allclose(G, [g.sum()], rtol=1e-4, atol=1e-3)


# --- progress losses against XGBoost's metrics ----------------------------------------------------


def xgb_metric(booster, dmatrix) -> float:
    return float(booster.eval(dmatrix).split(":")[-1])


def test_losses_match_xgboost_metrics() -> None:
    rng = np.random.default_rng(4)
    n, K = 300, 3
    X = rng.normal(size=(n, 3)).astype(np.float32)
    w = rng.uniform(0.5, 2, n).astype(np.float32)
    y = rng.integers(0, K, n)
    cases = [
        (Softmax(K), {"objective": "multi:softprob", "num_class": K, "eval_metric": "mlogloss"}, y),
        (Logistic(), {"objective": "binary:logistic", "eval_metric": "logloss"}, (y == 1).astype(float)),
        (SquaredError(), {"objective": "reg:squarederror", "eval_metric": "rmse"}, y * 0.7),
    ]
    for obj, params, labels in cases:
        d = xgb.DMatrix(X, label=labels, weight=w)
        booster = xgb.train(params | {"max_depth": 2, "nthread": 1}, d, 3)
        margin = booster.predict(d, output_margin=True).astype(np.float64)
        assert obj.loss(margin, labels, w) == pytest.approx(xgb_metric(booster, d), rel=1e-5), obj.metric
