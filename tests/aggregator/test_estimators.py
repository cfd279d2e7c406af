"""The scikit-learn-style estimators (``aggregator.estimators``).

Oracles:
* an estimator's model is the engine's: ``aggregator.simulate`` with the ``FedSCSXGB`` /
  ``FedForest`` configuration its parameters translate to gives the identical ensemble;
* ``feature_importances_`` of FedSCS-XGB is xgboost's "gain" importance of the same trees (trained
  with xgboost's cuts, the trees are xgboost's, and so must the importances be);
* ``sklearn.base.clone`` copies every estimator (parameters identical, unfitted), and
  ``get_params``/``set_params`` follow scikit-learn's semantics;
* scikit-learn itself recognises them: ``is_classifier``/``is_regressor``, its scorers equal the
  metric of ``predict``/``predict_proba``, and its ``check_estimator`` checks that need no
  ``fit(X, y)`` pass;
* ``min_split_loss`` is ``gamma``'s other name: the same number gives the engine's trees;
* every constructor parameter rejects a value of no kind it takes with one line naming it, and
  takes numpy scalars as the plain numbers they are (the same model).
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedForest, FedSCSXGB
from aggregator.estimators import (
    FedForestClassifier,
    FedForestRegressor,
    FedSCSXGBClassifier,
    FedSCSXGBRegressor,
    InvalidParameterError,
)
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


@pytest.mark.parametrize(
    ("estimator", "config", "regression"),
    [
        (
            FedSCSXGBClassifier(
                n_estimators=3, max_depth=3, max_bin=16, gamma=0.2, random_state=4, protocol="histogram"
            ),
            FedSCSXGB(n_rounds=3, max_depth=3, n_bins=16, gamma=0.2, protocol="histogram"),
            False,
        ),
        (
            FedSCSXGBClassifier(n_estimators=2, multi_strategy="multi_output_tree", protocol="atoms", max_bin=16),
            FedSCSXGB(n_rounds=2, multi_strategy="multi_output_tree", protocol="atoms", n_bins=16),
            False,
        ),
        (
            FedSCSXGBRegressor(n_estimators=3, learning_rate=0.3, max_bin=16, secure_aggregation=False),
            FedSCSXGB(n_rounds=3, learning_rate=0.3, n_bins=16, objective="squared_error", secure_aggregation=False),
            True,
        ),
        (
            FedForestClassifier(
                n_estimators=4,
                max_depth=4,
                criterion="entropy",
                min_samples_leaf=3,
                random_state=2,
                protocol="histogram",
            ),
            FedForest(
                n_trees=4,
                max_depth=4,
                criterion="entropy",
                min_samples_leaf=3,
                max_features="sqrt",
                protocol="histogram",
            ),
            False,
        ),
        (
            FedForestRegressor(n_estimators=4, max_depth=4, max_features=0.5, bootstrap=False, protocol="histogram"),
            FedForest(
                n_trees=4, max_depth=4, max_features=0.5, bootstrap=False, task="regression", protocol="histogram"
            ),
            True,
        ),
    ],
    ids=["xgb-classifier", "xgb-multi-output-atoms", "xgb-regressor", "forest-classifier", "forest-regressor"],
)
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
    a = FedForestClassifier(n_estimators=3, max_depth=3, protocol="histogram").fit(pairs).model_
    b = FedForestClassifier(n_estimators=3, max_depth=3, protocol="histogram").fit(named).model_
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
    config = FedSCSXGB(
        protocol="atoms",
        n_rounds=3,
        max_depth=4,
        edges=xgboost_cuts(X, y),
        gamma=0.1,
        learning_rate=0.3,
        multi_strategy=strategy,
    )
    sim = Simulation(clients)
    result = config.fit_with_diagnostics(
        FederatedJob(sim.engine, list(sim.transports), job_id="gain", settings=JobSettings(deadline_s=30))
    )
    theirs = xgb.XGBClassifier(
        n_estimators=3,
        max_depth=4,
        learning_rate=0.3,
        gamma=0.1,
        max_bin=32,
        tree_method="hist",
        multi_strategy=strategy,
        n_jobs=1,
    )
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
    model = FedForestClassifier(n_estimators=2, max_depth=2, max_features=value, protocol="histogram").fit(fleet(5))
    want = aggregator.simulate(FedForest(n_trees=2, max_depth=2, max_features=value, protocol="histogram"), fleet(5))
    assert model.model_ == want


def test_numpy_scalars_are_the_plain_numbers_they_hold() -> None:
    """The engine's configurations take plain ints and bools; the estimators convert numpy's."""
    numpy_typed = FedForestClassifier(
        n_estimators=np.int64(2),
        max_depth=np.int32(3),
        max_features=np.float64(0.5),
        min_samples_leaf=np.int64(2),
        bootstrap=np.bool_(False),
        min_impurity_decrease=np.float32(0.0),
        random_state=np.int64(3),
        protocol="histogram",
    )
    plain = FedForestClassifier(
        n_estimators=2,
        max_depth=3,
        max_features=0.5,
        min_samples_leaf=2,
        bootstrap=False,
        random_state=3,
        protocol="histogram",
    )
    assert numpy_typed.fit(fleet(5)).model_ == plain.fit(fleet(5)).model_


@pytest.mark.parametrize(
    ("cls", "params", "message"),
    [
        (FedForestClassifier, {"max_features": "auto"}, "max_features must be"),
        (FedForestClassifier, {"max_features": 0}, "max_features must be"),
        (FedForestRegressor, {"max_features": 1.5}, "max_features must be"),
        (FedForestClassifier, {"max_features": np.array([1, 2])}, "max_features must be .*an array of shape \\(2,\\)"),
        (FedForestClassifier, {"max_features": 5}, "max_features must be at most the 4 features of X, got 5"),
        (FedForestClassifier, {"max_features": np.nan}, "max_features must be"),
        (FedForestClassifier, {"max_depth": None}, "max_depth must be an int >= 1, got None"),
        (FedForestClassifier, {"min_samples_split": 0.5}, "min_samples_split must be an int >= 2"),
        (FedForestClassifier, {"bootstrap": "yes"}, "bootstrap must be a bool, got 'yes'"),
        (
            FedForestRegressor,
            {"protocol": "sketches", "secure_aggregation": True},
            "secure aggregation sums histograms",
        ),
        (FedSCSXGBRegressor, {"learning_rate": np.inf}, "learning_rate must be a finite number >= 0 or None, got inf"),
        (FedSCSXGBRegressor, {"reg_lambda": np.nan}, "reg_lambda must be a finite number >= 0, got nan"),
        (FedSCSXGBClassifier, {"client_fraction": 0}, r"client_fraction must be a number in \(0, 1\], got 0"),
        (FedSCSXGBClassifier, {"gamma": 0.1, "min_split_loss": 0.2}, "gamma and min_split_loss are one parameter"),
        (FedSCSXGBClassifier, {"min_split_loss": -1.0}, "min_split_loss must be a finite number >= 0 or None"),
        (FedSCSXGBClassifier, {"n_estimators": 2.0}, "n_estimators must be an int >= 1 or None, got 2.0"),
        (FedForestClassifier, {"criterion": "mse"}, "criterion must be"),
        (FedForestClassifier, {"protocol": "atoms"}, "protocol must be one of 'private', 'histogram', 'sketches'"),
        (FedForestClassifier, {"n_estimators": 0}, "n_estimators must be"),
        (FedSCSXGBClassifier, {"multi_strategy": "one_tree"}, "multi_strategy must be one of"),
        (FedSCSXGBClassifier, {"max_bin": 1}, "max_bin must be"),
        (FedSCSXGBClassifier, {"n_estimators": -1}, "n_estimators must be"),
        (FedSCSXGBClassifier, {"gamma": -0.5}, "gamma must be"),
        (FedSCSXGBClassifier, {"random_state": "seven"}, "random_state must be"),
        (FedSCSXGBRegressor, {"target_range": (2.0, 1.0)}, r"target_range must be a pair \(low, high\)"),
        (FedForestRegressor, {"target_range": (-1e31, 1e31)}, "target_range must be .* at most 2e30 apart"),
        (
            FedSCSXGBRegressor,
            {"target_range": (0.0, 1.0), "protocol": "histogram"},
            "target_range bounds a private regression's targets",
        ),
    ],
)
def test_bad_parameters_are_one_line_errors_at_fit(cls, params, message) -> None:
    estimator = cls(**params)  # scikit-learn checks at fit, not in __init__
    with pytest.raises(InvalidParameterError, match=message) as info:
        estimator.fit(fleet(6, regression=cls in (FedForestRegressor, FedSCSXGBRegressor)))
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)  # as scikit-learn's


def test_a_regressor_given_its_target_range_makes_no_range_release(monkeypatch) -> None:
    import aggregator.algorithms.private_fleet as fleet_module

    made = []
    release = fleet_module.release_target_range
    monkeypatch.setattr(fleet_module, "release_target_range", lambda *a, **k: made.append(1) or release(*a, **k))
    clients = fleet(6, regression=True)
    FedSCSXGBRegressor(n_estimators=3, max_depth=2).fit(clients)
    assert made == [1]
    given = FedSCSXGBRegressor(n_estimators=3, max_depth=2, target_range=[-50, 50]).fit(clients).model_.metadata
    assert (given["dp_target_low"], given["dp_target_high"]) == (-50.0, 50.0)
    assert made == [1]  # no release of the targets' octaves the second time
    assert FedSCSXGBRegressor(target_range=(0, 1)).get_params()["target_range"] == (0, 1)
    forest = FedForestRegressor(n_estimators=2, max_depth=2, target_range=(-50, 50)).fit(clients).model_.metadata
    assert (forest["dp_target_low"], forest["dp_target_high"]) == (-50.0, 50.0)
    assert made == [1]  # nor for the forest


@pytest.mark.parametrize(
    ("classifier", "regressor", "own", "differ"),
    [
        (FedSCSXGBClassifier, FedSCSXGBRegressor, ({}, {"target_range"}), set()),
        (FedForestClassifier, FedForestRegressor, ({"criterion"}, {"target_range"}), {"max_features"}),
    ],
)
def test_a_regressor_s_constructor_is_its_classifier_s_plus_its_own(classifier, regressor, own, differ) -> None:
    """Each estimator spells its constructor out (scikit-learn's rule); the pair must not drift:
    the same parameters with the same defaults, but for each one's own and the known ``differ``."""
    c, r = classifier().get_params(), regressor().get_params()
    assert set(c) - set(own[0]) == set(r) - set(own[1])
    assert {n: v for n, v in c.items() if n in r and n not in differ} == {
        n: v for n, v in r.items() if n in c and n not in differ
    }


#: Values no parameter takes: NaN, negative, infinite, of the wrong type.
NO_PARAMETER_S_VALUES = [np.nan, -1, np.inf, "x", np.array([1.0, 2.0]), object(), [1], True]


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_every_parameter_rejects_what_it_does_not_take_in_one_line(cls) -> None:
    """Each constructor keyword, set alone to a value it cannot take, stops ``fit`` before any
    training with one line that starts with its name (``True`` only where a bool is meant)."""
    clients = fleet(6, regression="Regressor" in cls.__name__)
    for name in cls().get_params():
        for value in NO_PARAMETER_S_VALUES:
            if value is True and name in ("secure_aggregation", "bootstrap"):
                continue
            with pytest.raises(InvalidParameterError) as info:
                cls(**{name: value}).fit(clients)
            message = str(info.value)
            assert message.startswith(f"{name} must be ") and "\n" not in message and len(message) < 160, message


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


# --- gamma and min_split_loss ----------------------------------------------------------------------


def test_min_split_loss_is_gamma_s_other_name() -> None:
    """xgboost's two names of one number: either (or both, equal) gives the engine's trees for
    ``FedSCSXGB(gamma=...)``; neither gives the engine's default; the number does matter."""
    clients = fleet(8)
    settings = {"n_estimators": 3, "max_depth": 4, "max_bin": 16, "protocol": "histogram"}
    engine = {"n_rounds": 3, "max_depth": 4, "n_bins": 16, "protocol": "histogram"}

    def model(**params):
        return FedSCSXGBClassifier(**settings, **params).fit(clients).model_

    pruned = model(min_split_loss=1.5)
    assert pruned == model(gamma=1.5) == model(gamma=1.5, min_split_loss=1.5)
    assert pruned == aggregator.simulate(FedSCSXGB(**engine, gamma=1.5), clients)
    assert pruned != model(min_split_loss=0.0)
    assert model() == aggregator.simulate(FedSCSXGB(**engine), clients)


# --- scikit-learn recognises them ------------------------------------------------------------------


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_scikit_learn_s_estimator_checks_that_need_no_fit(cls) -> None:
    """scikit-learn >= 1.6 asks ``__sklearn_tags__`` what an estimator is (``_estimator_type``
    alone made ``is_classifier`` raise). Its ``check_estimator`` checks that do not call
    ``fit(X, y)`` (ours takes a fleet) run as scikit-learn runs them."""
    base = pytest.importorskip("sklearn.base")
    checks = pytest.importorskip("sklearn.utils.estimator_checks")
    from sklearn.utils import get_tags

    estimator = cls(n_estimators=3)
    classifier = "Classifier" in cls.__name__
    assert base.is_classifier(estimator) is classifier and base.is_regressor(estimator) is not classifier
    tags = get_tags(estimator)
    assert tags.estimator_type == ("classifier" if classifier else "regressor") and tags.input_tags.allow_nan
    for check in (
        checks.check_valid_tag_types,
        checks.check_estimator_tags_renamed,
        checks.check_mixin_order,
        checks.check_estimator_cloneable,
        checks.check_estimator_repr,
        checks.check_no_attributes_set_in_init,
        checks.check_parameters_default_constructible,
        checks.check_get_params_invariance,
        checks.check_do_not_raise_errors_in_init_or_set_params,
    ):
        check(cls.__name__, estimator)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scikit-learn warns when set_params validates (it must not)
        checks.check_set_params(cls.__name__, estimator)
    params = estimator.get_params()
    assert estimator.set_params(**params) is estimator and estimator.get_params() == params


@pytest.mark.parametrize(
    ("cls", "scorers"),
    [
        (FedSCSXGBClassifier, ("accuracy", "neg_log_loss", "f1_macro")),
        (FedForestClassifier, ("accuracy", "neg_log_loss", "f1_macro")),
        (FedSCSXGBRegressor, ("r2", "neg_mean_squared_error")),
        (FedForestRegressor, ("r2", "neg_mean_squared_error")),
    ],
)
def test_scikit_learn_s_scorers_score_the_predictions(cls, scorers) -> None:
    """``get_scorer(name)(estimator, X, y)`` is the metric of ``predict`` (``predict_proba`` for
    log loss) on the same rows; accuracy and R² are also the estimator's ``score``.
    (``cross_val_score`` does not apply: ``fit`` takes a fleet, not ``X, y``.)"""
    pytest.importorskip("sklearn")
    from sklearn import metrics

    regression = "Regressor" in cls.__name__
    clients = fleet(9, regression=regression)
    estimator = cls(n_estimators=3, max_depth=3, max_bin=16).fit(clients)
    X, y = clients[1]
    prediction = estimator.predict(X)
    want = {
        "accuracy": lambda: metrics.accuracy_score(y, prediction),
        "f1_macro": lambda: metrics.f1_score(y, prediction, average="macro"),
        "neg_log_loss": lambda: -metrics.log_loss(y, estimator.predict_proba(X), labels=estimator.classes_),
        "r2": lambda: metrics.r2_score(y, prediction),
        "neg_mean_squared_error": lambda: -metrics.mean_squared_error(y, prediction),
    }
    for name in scorers:
        assert metrics.get_scorer(name)(estimator, X, y) == pytest.approx(want[name](), abs=1e-12), name
    assert estimator.score(X, y) == pytest.approx(want[scorers[0]](), abs=1e-12)


def test_the_estimators_work_without_scikit_learn() -> None:
    """scikit-learn is a development dependency: importing, fitting and predicting must not need
    it (only ``__sklearn_tags__``, which scikit-learn alone calls, imports it)."""
    program = """
import sys
sys.modules["sklearn"] = None  # import sklearn now raises ImportError
import numpy as np
from aggregator.estimators import FedForestClassifier
rng = np.random.default_rng(0)
clients = [(rng.normal(size=(40, 3)), rng.integers(0, 2, 40)) for _ in range(3)]
model = FedForestClassifier(n_estimators=2, max_depth=2).fit(clients)
assert model.predict(clients[0][0]).shape == (40,) and model.get_params()["n_estimators"] == 2
try:
    model.__sklearn_tags__()
except ImportError:
    print("fitted without scikit-learn")
"""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", program], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "fitted without scikit-learn", done.stderr[-2000:]


# --- docstrings ------------------------------------------------------------------------------------


def documented_parameters(obj) -> list[str]:
    """The names in the numpydoc ``Parameters`` section of ``obj``'s docstring."""
    doc = inspect.getdoc(obj) or ""
    section = re.search(r"^Parameters\n-+\n(.*?)(?:^\w[\w ]*\n-+\n|\Z)", doc, re.M | re.S)
    return re.findall(r"^(\*{0,2}\w+) :", section.group(1), re.M) if section else []


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_every_public_parameter_is_documented(cls) -> None:
    assert sorted(documented_parameters(cls)) == sorted(cls().get_params())
    for name in ("fit", "predict", "predict_proba", "score", "get_params", "set_params"):
        method = getattr(cls, name, None)
        if method is None:
            continue
        stars = {inspect.Parameter.VAR_KEYWORD: "**", inspect.Parameter.VAR_POSITIONAL: "*"}
        want = [
            stars.get(p.kind, "") + p.name for p in inspect.signature(method).parameters.values() if p.name != "self"
        ]
        assert documented_parameters(method) == want, name
