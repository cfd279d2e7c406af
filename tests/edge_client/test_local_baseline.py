"""The local-only baseline a gateway computes: scikit-learn's CART at the depth that K-fold
cross-validation picks, scored like any model, refusing what it cannot train on in one line."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import f1_score
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from edge_client.algorithms.fedga_cart import Samples, grow, to_ensemble
from edge_client.dispatcher import RequestRejected
from edge_client.evaluation import evaluate_model
from edge_client.local_baseline import cross_validated_depth, local_baseline, local_model
from edge_client.training_data import LabelledData
from shared.protocol.messages.evaluation import EvaluateRequest, LocalBaselineRequest

CLASSES = ("lift", "push", "rest")


def windows(n: int, seed: int) -> LabelledData:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    y = np.array(CLASSES)[(X[:, 0] > 0).astype(int) + (X[:, 1] + 0.5 * X[:, 2] > 0.8).astype(int)]
    return LabelledData(X, y, tuple(f"f{j}" for j in range(5)))


def test_the_depth_is_the_best_mean_cross_validated_f1_shallowest_on_ties() -> None:
    """Against trees grown to each depth separately (not cut from one deep tree), scored with
    scikit-learn's macro-F1, over the same folds."""
    data = windows(150, 1)
    X = data.X.astype(np.float32).astype(np.float64)
    ids = np.searchsorted(CLASSES, data.y)
    folds = np.array_split(np.random.default_rng(7).permutation(len(ids)), 5)
    scores = np.zeros((5, 8))
    for k, held in enumerate(folds):
        train = np.setdiff1d(np.arange(len(ids)), held)
        for d in range(1, 9):
            tree = to_ensemble(
                grow(Samples.of(X[train], ids[train], regression=False, n_classes=3), d),
                0,
                feature_names=data.feature_names,
                classes=(0, 1, 2),
            )
            scores[k, d - 1] = f1_score(ids[held], tree.predict(X[held]), average="macro")
    best = 1 + int(np.argmax(np.round(scores.mean(axis=0), 12)))
    assert cross_validated_depth(X, ids, regression=False, n_classes=3, max_depth=8, folds=5, seed=7) == best


@pytest.mark.parametrize("regression", [False, True], ids=["classifier", "regressor"])
def test_the_model_is_scikit_learns_cart_at_that_depth(regression: bool) -> None:
    data = windows(160, 2)
    if regression:
        data = LabelledData(data.X, data.X[:, 0] * 2 + np.sin(data.X[:, 1]), data.feature_names)
    request = LocalBaselineRequest("fs", () if regression else CLASSES, regression, max_depth=6, seed=3)
    model = local_model(data, request)
    depth = model.metadata["max_depth"]
    X = data.X.astype(np.float32)
    reference = (DecisionTreeRegressor if regression else DecisionTreeClassifier)(max_depth=depth, random_state=0)
    reference.fit(X, data.y)
    # on the windows it was trained on, the partition is the same (ties between features that
    # split them alike may route unseen windows differently)
    if regression:
        np.testing.assert_allclose(model.predict(data.X), reference.predict(X), rtol=0, atol=1e-12)
    else:
        assert (model.predict(data.X) == reference.predict(X)).all()
    assert model.feature_set_version == "fs" and model.n_features == 5


def test_the_reply_scores_the_local_model_on_the_held_out_windows_only() -> None:
    train, holdout = windows(120, 3), windows(40, 4)
    request = LocalBaselineRequest("fs", CLASSES)
    reply = local_baseline(train, holdout, request)
    expected = evaluate_model(local_model(train, request), holdout, EvaluateRequest(b"", "fs"))
    assert reply.n_samples == 40 and (reply.confusion == expected.confusion).all()
    assert reply.log_loss_sum == expected.log_loss_sum


def test_labels_outside_the_model_s_classes_are_left_out_of_training() -> None:
    data = windows(100, 5)
    y = data.y.copy()
    y[:10] = "fall"  # a label the federated model does not know
    request = LocalBaselineRequest("fs", CLASSES)
    with_unknown = local_model(LabelledData(data.X, y, data.feature_names), request)
    without = local_model(LabelledData(data.X[10:], data.y[10:], data.feature_names), request)
    assert with_unknown == without


def test_what_it_cannot_train_on_is_refused_in_one_line() -> None:
    with pytest.raises(RequestRejected, match="needs at least 5 labelled training windows, this gateway has 3"):
        local_model(windows(3, 0), LocalBaselineRequest("fs", CLASSES))
    data = windows(20, 0)
    with pytest.raises(RequestRejected, match="regression targets must be finite"):
        local_model(LabelledData(data.X, np.full(20, np.nan)), LocalBaselineRequest("fs", (), True))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"classes": CLASSES, "max_depth": 0}, "max_depth must lie in 1..15"),
        ({"classes": CLASSES, "cv_folds": 1}, "cv_folds must lie in 2..20"),
        ({"classes": ()}, "a classifier's baseline needs its classes"),
        ({"classes": ("a", "a")}, "classes must be distinct"),
    ],
)
def test_a_malformed_request_is_refused(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        LocalBaselineRequest("fs", **kwargs)
