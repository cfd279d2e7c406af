"""The scikit-learn-style estimators (``aggregator.estimators``).

Oracles:
* an estimator's model is the engine's: ``aggregator.simulate`` with the ``FedSCSXGB`` /
  ``FedForest`` configuration its parameters translate to gives the identical ensemble;
* ``feature_importances_`` of FedSCS-XGB is xgboost's "gain" importance of the same trees (trained
  with xgboost's cuts, the trees are xgboost's, and so must the importances be);
* ``sklearn.base.clone`` copies every estimator (parameters identical, unfitted), and
  ``get_params``/``set_params`` follow scikit-learn's semantics.
"""

from __future__ import annotations

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedForest, FedSCSXGB
from aggregator.estimators import FedForestClassifier, FedForestRegressor, FedSCSXGBClassifier, FedSCSXGBRegressor
from aggregator.jobs import FederatedJob, JobSettings
from aggregator.simulate import Simulation
from edge_client.training_data import ClientData

ESTIMATORS = [FedSCSXGBClassifier, FedSCSXGBRegressor, FedForestClassifier, FedForestRegressor]


def fleet(seed: int, *, regression: bool = False, n_classes: int = 3, n_clients: int = 3):
    rng = np.random.default_rng(seed)
    clients = []
    for k in range(n_clients):
        X = rng.normal(size=(70 + 10 * k, 4)) + 0.2 * k
        X[rng.random(X.shape) < 0.03] = np.nan
        score = np.nan_to_num(X[:, 0]) + 0.5 * np.nan_to_num(X[:, 2])
        if regression:
            y = 3.0 * score + rng.normal(scale=0.2, size=X.shape[0])
        else:
            y = np.digitize(score, np.linspace(-1.0, 1.0, n_classes + 1)[1:-1])
        clients.append((X, y))
    return clients


# --- the engine underneath -------------------------------------------------------------------------


@pytest.mark.parametrize(("estimator", "config", "regression"), [
    (FedSCSXGBClassifier(n_estimators=3, max_depth=3, max_bin=16, gamma=0.2, random_state=4),
     FedSCSXGB(n_rounds=3, max_depth=3, n_bins=16, gamma=0.2), False),
    (FedSCSXGBClassifier(n_estimators=2, multi_strategy="multi_output_tree", protocol="atoms", max_bin=16),
     FedSCSXGB(n_rounds=2, multi_strategy="multi_output_tree", protocol="atoms", n_bins=16), False),
    (FedSCSXGBRegressor(n_estimators=3, learning_rate=0.3, max_bin=16, secure_aggregation=False),
     FedSCSXGB(n_rounds=3, learning_rate=0.3, n_bins=16, objective="squared_error", secure_aggregation=False), True),
    (FedForestClassifier(n_estimators=4, max_depth=4, criterion="entropy", min_samples_leaf=3, random_state=2),
     FedForest(n_trees=4, max_depth=4, criterion="entropy", min_samples_leaf=3, max_features="sqrt"), False),
    (FedForestRegressor(n_estimators=4, max_depth=4, max_features=0.5, bootstrap=False),
     FedForest(n_trees=4, max_depth=4, max_features=0.5, bootstrap=False, task="regression"), True),
], ids=["xgb-classifier", "xgb-multi-output-atoms", "xgb-regressor", "forest-classifier", "forest-regressor"])
def test_estimator_trains_the_engine_s_model(estimator, config, regression: bool) -> None:
    clients = fleet(1, regression=regression)
    fitted = estimator.fit(clients)
    assert fitted is estimator
    want = aggregator.simulate(config, clients, seed=estimator.random_state)
    assert fitted.model_ == want
    X = clients[0][0]
    np.testing.assert_array_equal(fitted.predict(X), want.predict(X))
    assert fitted.n_features_in_ == 4
    importances = fitted.feature_importances_
    assert importances.shape == (4,) and importances.sum() == pytest.approx(1.0) and (importances >= 0).all()
    assert np.argmax(importances) == 0  # the target leans on feature 0 most
    if not regression:
        np.testing.assert_array_equal(fitted.classes_, [0, 1, 2])
        np.testing.assert_allclose(fitted.predict_proba(X), want.predict_proba(X))
        assert 0.5 < fitted.score(X, clients[0][1]) <= 1.0
    else:
        assert fitted.score(X, clients[0][1]) > 0.5


def test_two_classes_train_a_logistic_booster_like_xgbclassifier() -> None:
    clients = [(X, np.array(["rest", "push"])[(y > 0).astype(int)]) for X, y in fleet(2)]
    model = FedSCSXGBClassifier(n_estimators=3, max_bin=16).fit(clients)
    assert model.model_.link == "sigmoid" and model.model_.metadata["objective"] == "logistic"
    np.testing.assert_array_equal(model.classes_, ["push", "rest"])
    assert model.predict_proba(clients[0][0]).shape == (clients[0][0].shape[0], 2)
    assert set(model.predict(clients[0][0])) <= {"push", "rest"}


def test_client_data_and_pairs_give_the_same_model() -> None:
    pairs = fleet(3)
    named = [ClientData(f"gw-{k}", X, y) for k, (X, y) in enumerate(pairs)]
    a = FedForestClassifier(n_estimators=3, max_depth=3).fit(pairs).model_
    b = FedForestClassifier(n_estimators=3, max_depth=3).fit(named).model_
    assert a == b


# --- importances -----------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["one_output_per_tree", "multi_output_tree"])
def test_fedscs_importances_are_xgboost_s_gain_importances(strategy: str) -> None:
    """Trained on xgboost's cuts the trees are xgboost's (test_fedscs_xgb), so the gain importance
    (mean loss change per feature, normalised) must be xgboost's ``feature_importances_``."""
    xgb = pytest.importorskip("xgboost")
    from tests.aggregator.test_fedscs_xgb import make_clients, pooled, xgboost_cuts

    clients = make_clients(25, n=300)
    X, y = pooled(clients)
    config = FedSCSXGB(protocol="atoms", n_rounds=3, max_depth=4, edges=xgboost_cuts(X, y), gamma=0.1,
                       learning_rate=0.3, multi_strategy=strategy)
    sim = Simulation(clients)
    result = config.fit_with_diagnostics(FederatedJob(sim.engine, list(sim.transports), job_id="gain",
                                                      settings=JobSettings(deadline_s=30)))
    theirs = xgb.XGBClassifier(n_estimators=3, max_depth=4, learning_rate=0.3, gamma=0.1, max_bin=32,
                               tree_method="hist", multi_strategy=strategy, n_jobs=1)
    theirs.fit(X.astype(np.float32), y)
    np.testing.assert_allclose(result.feature_importances(), theirs.feature_importances_, rtol=1e-5, atol=1e-7)


# --- scikit-learn's contract ---------------------------------------------------------------------


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_clone_get_params_and_set_params(cls) -> None:
    base = pytest.importorskip("sklearn.base")
    estimator = cls(n_estimators=7, max_depth=3, random_state=5)
    params = estimator.get_params()
    assert params["n_estimators"] == 7 and params["random_state"] == 5
    assert set(params) == set(cls().get_params()) and "max_bin" in params and "min_crowd" in params
    copy = base.clone(estimator)
    assert type(copy) is cls and copy.get_params() == params and copy is not estimator
    assert estimator.set_params(n_estimators=2, max_depth=2) is estimator
    assert estimator.get_params()["n_estimators"] == 2 and copy.get_params()["n_estimators"] == 7
    with pytest.raises(ValueError, match="no parameter 'n_trees'"):
        estimator.set_params(n_trees=3)
    assert "n_estimators=2" in repr(estimator)
    fitted = cls(n_estimators=2, max_depth=2, max_bin=8).fit(fleet(4, regression="Regressor" in cls.__name__))
    assert not hasattr(base.clone(fitted), "model_")


@pytest.mark.parametrize("value", ["sqrt", "log2", None, 2, 0.5, 1.0])
def test_max_features_takes_scikit_learn_s_values(value) -> None:
    model = FedForestClassifier(n_estimators=2, max_depth=2, max_features=value).fit(fleet(5))
    want = aggregator.simulate(FedForest(n_trees=2, max_depth=2, max_features=value), fleet(5))
    assert model.model_ == want


@pytest.mark.parametrize(("cls", "params", "message"), [
    (FedForestClassifier, {"max_features": "auto"}, "max_features must be"),
    (FedForestClassifier, {"max_features": 0}, "max_features must be"),
    (FedForestRegressor, {"max_features": 1.5}, "max_features must be"),
    (FedForestClassifier, {"criterion": "mse"}, "criterion must be"),
    (FedForestClassifier, {"protocol": "atoms"}, "protocol must be one of 'histogram', 'sketches'"),
    (FedForestClassifier, {"n_estimators": 0}, "n_estimators must be"),
    (FedSCSXGBClassifier, {"multi_strategy": "one_tree"}, "multi_strategy must be one of"),
    (FedSCSXGBClassifier, {"max_bin": 1}, "max_bin must be"),
    (FedSCSXGBClassifier, {"n_estimators": -1}, "n_estimators must be"),
    (FedSCSXGBClassifier, {"gamma": -0.5}, "gamma must be"),
    (FedSCSXGBClassifier, {"random_state": "seven"}, "random_state must be"),
])
def test_bad_parameters_are_one_line_errors_at_fit(cls, params, message) -> None:
    estimator = cls(**params)  # scikit-learn checks at fit, not in __init__
    with pytest.raises(ValueError, match=message) as info:
        estimator.fit(fleet(6, regression=cls is FedForestRegressor))
    assert "\n" not in str(info.value)


def test_bad_fleets_and_inputs_are_clear_errors() -> None:
    model = FedSCSXGBClassifier(n_estimators=1, max_bin=8)
    with pytest.raises(ValueError, match="not fitted"):
        model.predict(np.zeros((1, 4)))
    with pytest.raises(ValueError, match="non-empty list"):
        model.fit([])
    with pytest.raises(ValueError, match=r"clients\[1\] must be an \(X, y\) pair"):
        model.fit([fleet(7)[0], np.zeros((3, 4))])
    with pytest.raises(ValueError, match="needs 2 or more"):
        model.fit([(X, np.zeros(len(X), int)) for X, _ in fleet(7)])
    model.fit(fleet(7))
    with pytest.raises(ValueError, match="4 columns"):
        model.predict(np.zeros((2, 5)))


def test_the_docstring_examples_run() -> None:
    """The numpydoc Examples blocks are doctests; CI runs them here (``pytest --doctest-modules
    aggregator/estimators.py`` runs the same)."""
    import doctest

    import aggregator.estimators as module

    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted >= 20
