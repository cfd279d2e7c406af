"""scikit-learn-style estimators over the federated algorithms, for users of xgboost or scikit-learn.

``FedSCSXGBClassifier`` / ``FedSCSXGBRegressor`` take xgboost's parameter names and meanings,
``FedForestClassifier`` / ``FedForestRegressor`` scikit-learn's random-forest ones, and all four
add the federated settings (``protocol``, ``secure_aggregation``, ``min_crowd``, ...). ``fit``
takes the fleet -- a list of ``(X, y)`` pairs or ``edge_client.training_data.ClientData``, one per
gateway -- and trains over the in-memory simulation of the real protocol (``aggregator.Simulation``,
what ``aggregator.simulate`` runs): the configuration dataclasses ``FedSCSXGB`` and ``FedForest``
stay the engine, these classes only translate names and keep the fitted model
(``model_``, a ``shared.model.TreeEnsemble``).

They follow scikit-learn's estimator contract without importing scikit-learn: ``__init__`` stores
its arguments unchanged (values are checked by ``fit``, each mistake one ``ValueError`` naming the
parameter), ``get_params``/``set_params`` list and set exactly the constructor's parameters, so
``sklearn.base.clone`` copies an estimator, and fitted attributes end in ``_``.
"""

from __future__ import annotations

import dataclasses
import inspect
import numbers
import re
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from shared.model import TreeEnsemble

from .algorithms import FedForest, FedSCSXGB
from .jobs import FederatedJob, JobSettings
from .simulate import Simulation

__all__ = ["FedForestClassifier", "FedForestRegressor", "FedSCSXGBClassifier", "FedSCSXGBRegressor"]

#: Seconds a simulated client may take to answer one request (generous: masking on 2 cores).
DEADLINE_S = 30.0


class _FederatedEstimator:
    """The scikit-learn contract shared by the four estimators (parameters, fitting, prediction)."""

    _is_classifier: ClassVar[bool]
    model_: TreeEnsemble

    # -- parameters (scikit-learn semantics) ------------------------------------------------------

    @classmethod
    def _get_param_names(cls) -> list[str]:
        """The constructor's keyword parameters, sorted (what ``get_params`` returns)."""
        signature = inspect.signature(cls.__init__)
        return sorted(name for name, p in signature.parameters.items() if p.kind == p.KEYWORD_ONLY)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's parameters and their current values (``deep`` is accepted for
        scikit-learn's sake: no parameter is itself an estimator)."""
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params: Any) -> _FederatedEstimator:
        """Set constructor parameters by name; returns the estimator. Values are checked by ``fit``."""
        valid = self._get_param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"{type(self).__name__} has no parameter {name!r}; valid ones: {', '.join(valid)}")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = {n: p.default for n, p in inspect.signature(type(self).__init__).parameters.items()}
        changed = [f"{n}={v!r}" for n, v in self.get_params().items() if not _same(v, defaults.get(n))]
        return f"{type(self).__name__}({', '.join(changed)})"

    # -- fitting ----------------------------------------------------------------------------------

    def _config(self, labels: np.ndarray) -> FedSCSXGB | FedForest:
        raise NotImplementedError

    def _train(self, config: Any, job: FederatedJob, seed: int) -> tuple[TreeEnsemble, np.ndarray]:
        raise NotImplementedError

    def fit(self, clients: Sequence[Any]) -> _FederatedEstimator:
        """Train over the fleet ``clients``: a list of ``(X, y)`` pairs or ``ClientData``, one per
        gateway (``X`` 2-D with the same columns everywhere, NaN for missing values). Returns
        ``self``."""
        labels = _labels_of(clients)
        if self._is_classifier and np.unique(labels).size < 2:
            raise ValueError(f"the clients' labels hold {np.unique(labels).size} class; a classifier needs 2 or more")
        config = self._config(labels)
        seed = _seed(self.random_state)
        sim = Simulation(clients)
        job = FederatedJob(sim.engine, list(sim.transports), job_id=f"{type(self).__name__}-{seed}",
                           settings=JobSettings(deadline_s=DEADLINE_S))
        self.model_, self.feature_importances_ = self._train(config, job, seed)
        self.n_features_in_ = self.model_.n_features
        if self._is_classifier:
            self.classes_ = np.asarray(self.model_.classes)
        return self

    # -- prediction -------------------------------------------------------------------------------

    def _fitted(self) -> TreeEnsemble:
        model = getattr(self, "model_", None)
        if model is None:
            raise ValueError(f"this {type(self).__name__} is not fitted yet: call fit(clients) first")
        return model

    def _rows(self, X: ArrayLike) -> np.ndarray:
        model = self._fitted()
        rows = np.asarray(X, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[1] != model.n_features:
            raise ValueError(f"X must be 2-D with {model.n_features} columns (n_features_in_), got shape {rows.shape}")
        return rows

    def predict(self, X: ArrayLike) -> np.ndarray:
        """Class labels (classifiers, from ``classes_``) or values (regressors), one per row of ``X``."""
        return self._fitted().predict(self._rows(X))


class _ClassifierMixin:
    _is_classifier: ClassVar[bool] = True
    _estimator_type: ClassVar[str] = "classifier"  # scikit-learn's marker (stratified CV, scorers)

    def score(self, X: ArrayLike, y: ArrayLike) -> float:
        """Mean accuracy on ``X`` against ``y`` (scikit-learn's classifier score)."""
        return float(np.mean(self.predict(X) == np.asarray(y)))  # type: ignore[attr-defined]

    def predict_proba(self, X: ArrayLike) -> np.ndarray:
        """Class probabilities ``(n_rows, n_classes)``, columns in the order of ``classes_``."""
        return self._fitted().predict_proba(self._rows(X))  # type: ignore[attr-defined]


class _RegressorMixin:
    _is_classifier: ClassVar[bool] = False
    _estimator_type: ClassVar[str] = "regressor"

    def score(self, X: ArrayLike, y: ArrayLike) -> float:
        """R² of the predictions on ``X`` against ``y`` (scikit-learn's regressor score)."""
        target = np.asarray(y, dtype=np.float64)
        residual = np.sum((target - self.predict(X)) ** 2)  # type: ignore[attr-defined]
        total = np.sum((target - target.mean()) ** 2)
        return float(1.0 - residual / total) if total > 0 else 0.0


# --- FedSCS-XGB ------------------------------------------------------------------------------------


class _FedSCSXGBBase(_FederatedEstimator):
    _objective: ClassVar[str]

    def __init__(
        self,
        *,
        n_estimators: int = 10,
        max_depth: int = 4,
        learning_rate: float = 0.2,
        max_bin: int = 256,
        gamma: float = 0.1,
        reg_lambda: float = 1.0,
        min_child_weight: float = 1.0,
        multi_strategy: str = "one_output_per_tree",
        random_state: int | None = 0,
        protocol: str = "histogram",
        secure_aggregation: bool | None = None,
        min_crowd: int = 5,
        client_fraction: float = 1.0,
        dp_noise_multiplier: float | None = None,
    ) -> None:
        _store(self, locals())

    def _config(self, labels: np.ndarray) -> FedSCSXGB:
        objective = self._objective
        if objective == "softmax" and np.unique(labels).size == 2:
            objective = "logistic"  # xgboost's XGBClassifier: binary:logistic for two classes
        for name in ("protocol", "multi_strategy"):
            _check_choice(name, getattr(self, name), FedSCSXGB)
        return _build(FedSCSXGB, _FEDSCS_NAMES, n_rounds=self.n_estimators, max_depth=self.max_depth,
                      learning_rate=self.learning_rate, n_bins=self.max_bin, gamma=self.gamma,
                      reg_lambda=self.reg_lambda, min_child_weight=self.min_child_weight,
                      multi_strategy=self.multi_strategy, objective=objective, protocol=self.protocol,
                      secure_aggregation=self.secure_aggregation, min_crowd=self.min_crowd,
                      client_fraction=self.client_fraction, dp_noise_multiplier=self.dp_noise_multiplier)

    def _train(self, config: FedSCSXGB, job: FederatedJob, seed: int) -> tuple[TreeEnsemble, np.ndarray]:
        result = config.fit_with_diagnostics(job, seed=seed)
        return result.model, result.feature_importances()


_FEDSCS_PARAMETERS = """\
    Parameters
    ----------
    n_estimators : int, default=10
        Boosting rounds (xgboost's ``n_estimators``; ``FedSCSXGB.n_rounds``).
    max_depth : int, default=4
        Depth of every tree (the paper's experiment: 4).
    learning_rate : float, default=0.2
        Shrinkage ``eta`` of every leaf.
    max_bin : int, default=256
        Bins per feature (xgboost's ``max_bin``; the edges are fleet-wide quantiles).
    gamma : float, default=0.1
        xgboost's ``gamma``/``min_split_loss``: a node splits only if its loss change is at least
        this. The same number gives xgboost's trees; the paper's Eq. 1 penalty is half of it.
    reg_lambda : float, default=1.0
        L2 penalty on leaf weights.
    min_child_weight : float, default=1.0
        Smallest Hessian sum of a child (xgboost's meaning).
    multi_strategy : {"one_output_per_tree", "multi_output_tree"}, default="one_output_per_tree"
        Multiclass trees (xgboost's names): one tree per class per round, or one tree per round with
        one leaf weight per class (the paper's). Ignored with one output.
    random_state : int or None, default=0
        Seed of the client sampling (``client_fraction``); ``None`` draws one.
    protocol : {"histogram", "atoms"}, default="histogram"
        ``"histogram"``: the server learns only fleet sums; ``"atoms"``: the paper's protocol,
        which reveals every window's quantised features and gradients (for reproduction).
    secure_aggregation : bool or None, default=None
        Mask every gateway's vector so the server decodes only the fleet's sum (``None``: on
        for the histogram protocol; needs 3 or more clients).
    min_crowd : int, default=5
        No split leaves a child with fewer windows fleet-wide (histogram protocol).
    client_fraction : float, default=1.0
        Share of the clients sampled per round (atom protocol).
    dp_noise_multiplier : float or None, default=None
        Differential privacy on the released sums (classification, histogram protocol with
        secure aggregation); ``None``: off.

    Attributes
    ----------
    model_ : shared.model.TreeEnsemble
        The trained booster (``model_.to_xgboost_json()`` loads into xgboost).
    n_features_in_ : int
        Columns of ``X``.
    feature_importances_ : ndarray of shape (n_features,)
        xgboost's "gain" importance: per feature the mean loss change of its splits, normalised
        to sum 1.
"""


class FedSCSXGBClassifier(_ClassifierMixin, _FedSCSXGBBase):
    __doc__ = """FedSCS-XGB classifier with xgboost's ``XGBClassifier`` parameter names.

    Softmax for three or more classes, logistic for two, as xgboost chooses.

""" + _FEDSCS_PARAMETERS + """    classes_ : ndarray
        The class labels (the union of the clients' labels, sorted).

    Examples
    --------
    >>> import numpy as np
    >>> from aggregator.estimators import FedSCSXGBClassifier
    >>> rng = np.random.default_rng(0)
    >>> clients = []
    >>> for gateway in range(3):
    ...     X = rng.normal(size=(80, 4))
    ...     clients.append((X, np.digitize(X[:, 0] + X[:, 1], [-0.5, 0.5])))
    >>> model = FedSCSXGBClassifier(n_estimators=5, max_depth=3, max_bin=32).fit(clients)
    >>> model.classes_
    array([0, 1, 2])
    >>> model.predict_proba(clients[0][0][:2]).shape
    (2, 3)
    >>> bool((model.predict(clients[0][0]) == clients[0][1]).mean() > 0.7)
    True
    >>> model.get_params()["gamma"]
    0.1
    """

    _objective = "softmax"


class FedSCSXGBRegressor(_RegressorMixin, _FedSCSXGBBase):
    __doc__ = """FedSCS-XGB regressor (squared error) with xgboost's ``XGBRegressor`` parameter names.

""" + _FEDSCS_PARAMETERS + """
    Examples
    --------
    >>> import numpy as np
    >>> from aggregator.estimators import FedSCSXGBRegressor
    >>> rng = np.random.default_rng(0)
    >>> clients = []
    >>> for gateway in range(3):
    ...     X = rng.normal(size=(80, 3))
    ...     clients.append((X, 2.0 * X[:, 0] + rng.normal(scale=0.1, size=80)))
    >>> model = FedSCSXGBRegressor(n_estimators=20, learning_rate=0.3, max_bin=32).fit(clients)
    >>> X, y = clients[0]
    >>> bool(np.abs(model.predict(X) - y).mean() < 0.5)
    True
    >>> int(np.argmax(model.feature_importances_))
    0
    """

    _objective = "squared_error"


# --- FedForest -------------------------------------------------------------------------------------


class _FedForestBase(_FederatedEstimator):
    _task: ClassVar[str]

    def _forest_config(self, **fields: Any) -> FedForest:
        """The ``FedForest`` of these settings: the common parameters plus the task's."""
        _check_choice("protocol", self.protocol, FedForest)
        return _build(FedForest, _FEDFOREST_NAMES, n_trees=self.n_estimators, max_depth=self.max_depth,
                      n_bins=self.max_bin,
                      task=self._task, max_features=_max_features(self.max_features),
                      min_samples_split=self.min_samples_split, min_samples_leaf=self.min_samples_leaf,
                      min_impurity_decrease=self.min_impurity_decrease, bootstrap=self.bootstrap,
                      protocol=self.protocol, secure_aggregation=self.secure_aggregation,
                      min_crowd=self.min_crowd, client_fraction=self.client_fraction,
                      dp_noise_multiplier=self.dp_noise_multiplier, **fields)

    def _train(self, config: FedForest, job: FederatedJob, seed: int) -> tuple[TreeEnsemble, np.ndarray]:
        result = config.fit_with_diagnostics(job, seed=seed)
        return result.model, np.asarray(result.importance, dtype=np.float64)[: result.model.n_features]


_FEDFOREST_PARAMETERS = """\
    n_estimators : int, default=50
        Trees (the paper's experiments: 50; ``FedForest.n_trees``).
    max_depth : int, default=8
        Depth of every tree (the paper's: 8).
    max_bin : int, default=32
        Candidate thresholds per feature (bins of the fleet-wide edges).
    max_features : {"sqrt", "log2"}, int, float or None, default={default_features}
        Features drawn per node, scikit-learn's values: ``"sqrt"``, ``"log2"``, a count, a
        fraction of the features, or ``None`` for all.
    min_samples_split : int, default=2
        Fewest windows a node needs to be split.
    min_samples_leaf : int, default=1
        Fewest windows of a leaf (the paper's experiments: 5).
    min_impurity_decrease : float, default=0.0
        A split must decrease the weighted impurity by at least this.
    bootstrap : bool, default=True
        Every client bootstraps its own windows per tree.
    random_state : int or None, default=0
        Seed of the tree's client subsets, feature draws and bootstraps; ``None`` draws one.
    protocol : {"histogram", "sketches"}, default="histogram"
        ``"histogram"``: the server learns only fleet sums; ``"sketches"``: the paper's protocol,
        which reveals client values (for reproduction).
    secure_aggregation : bool or None, default=None
        As for ``FedSCSXGBClassifier``.
    min_crowd : int, default=5
        No split leaves a child with fewer windows fleet-wide (histogram protocol).
    client_fraction : float, default=1.0
        Share of the clients each tree is grown on.
    dp_noise_multiplier : float or None, default=None
        Differential privacy on the released sums (classification, ``bootstrap=False``);
        ``None``: off.

    Attributes
    ----------
    model_ : shared.model.TreeEnsemble
        The trained forest (``kind="forest"``).
    n_features_in_ : int
        Columns of ``X``.
    feature_importances_ : ndarray of shape (n_features,)
        Impurity-based importance: the weighted impurity decrease of each feature's splits summed
        over the forest, normalised to sum 1.
"""


class FedForestClassifier(_ClassifierMixin, _FedForestBase):
    __doc__ = """FedForest classifier with scikit-learn's ``RandomForestClassifier`` parameter names.

    Parameters
    ----------
    criterion : {"gini", "entropy"}, default="gini"
        Impurity of the splits.
""" + _FEDFOREST_PARAMETERS.replace("{default_features}", '"sqrt"') + """    classes_ : ndarray
        The class labels (the union of the clients' labels, sorted).

    Examples
    --------
    >>> import numpy as np
    >>> from aggregator.estimators import FedForestClassifier
    >>> rng = np.random.default_rng(0)
    >>> clients = []
    >>> for gateway in range(3):
    ...     X = rng.normal(size=(80, 4))
    ...     clients.append((X, (X[:, 0] > 0).astype(int)))
    >>> model = FedForestClassifier(n_estimators=10, max_depth=4, max_features=None).fit(clients)
    >>> model.classes_
    array([0, 1])
    >>> bool((model.predict(clients[1][0]) == clients[1][1]).mean() > 0.9)
    True
    >>> int(np.argmax(model.feature_importances_))
    0
    """

    _task = "classification"

    def __init__(
        self,
        *,
        n_estimators: int = 50,
        criterion: str = "gini",
        max_depth: int = 8,
        max_bin: int = 32,
        max_features: str | int | float | None = "sqrt",
        min_samples_split: int = 2,
        min_samples_leaf: int = 1,
        min_impurity_decrease: float = 0.0,
        bootstrap: bool = True,
        random_state: int | None = 0,
        protocol: str = "histogram",
        secure_aggregation: bool | None = None,
        min_crowd: int = 5,
        client_fraction: float = 1.0,
        dp_noise_multiplier: float | None = None,
    ) -> None:
        _store(self, locals())

    def _config(self, labels: np.ndarray) -> FedForest:
        if self.criterion not in ("gini", "entropy"):
            raise ValueError(f"criterion must be 'gini' or 'entropy', got {self.criterion!r}")
        return self._forest_config(criterion=self.criterion)


class FedForestRegressor(_RegressorMixin, _FedForestBase):
    __doc__ = """FedForest regressor (squared error) with scikit-learn's ``RandomForestRegressor``
    parameter names.

    Parameters
    ----------
""" + _FEDFOREST_PARAMETERS.replace("{default_features}", "1.0") + """
    Examples
    --------
    >>> import numpy as np
    >>> from aggregator.estimators import FedForestRegressor
    >>> rng = np.random.default_rng(0)
    >>> clients = []
    >>> for gateway in range(3):
    ...     X = rng.normal(size=(80, 3))
    ...     clients.append((X, np.where(X[:, 0] > 0, 10.0, 0.0) + rng.normal(scale=0.1, size=80)))
    >>> model = FedForestRegressor(n_estimators=10, max_depth=4).fit(clients)
    >>> X, y = clients[2]
    >>> bool(np.abs(model.predict(X) - y).mean() < 1.5)
    True
    """

    _task = "regression"

    def __init__(
        self,
        *,
        n_estimators: int = 50,
        max_depth: int = 8,
        max_bin: int = 32,
        max_features: str | int | float | None = 1.0,
        min_samples_split: int = 2,
        min_samples_leaf: int = 1,
        min_impurity_decrease: float = 0.0,
        bootstrap: bool = True,
        random_state: int | None = 0,
        protocol: str = "histogram",
        secure_aggregation: bool | None = None,
        min_crowd: int = 5,
        client_fraction: float = 1.0,
        dp_noise_multiplier: float | None = None,
    ) -> None:
        _store(self, locals())

    def _config(self, labels: np.ndarray) -> FedForest:
        return self._forest_config()


# --- helpers ---------------------------------------------------------------------------------------


def _store(estimator: _FederatedEstimator, arguments: dict[str, Any]) -> None:
    """Keep every constructor argument as it is (scikit-learn's rule: no checks, no copies)."""
    for name in estimator._get_param_names():
        setattr(estimator, name, arguments[name])


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _labels_of(clients: Sequence[Any]) -> np.ndarray:
    """Every client's targets, concatenated (a clear error for a malformed fleet)."""
    if isinstance(clients, (str, bytes)) or not isinstance(clients, Sequence) or not clients:
        raise ValueError("clients must be a non-empty list of (X, y) pairs or ClientData, one per gateway")
    labels = []
    for k, client in enumerate(clients):
        if hasattr(client, "y"):
            labels.append(np.asarray(client.y).ravel())
        elif isinstance(client, (tuple, list)) and len(client) == 2:
            labels.append(np.asarray(client[1]).ravel())
        else:
            raise ValueError(f"clients[{k}] must be an (X, y) pair or a ClientData, got {type(client).__name__}")
    return np.concatenate(labels)


def _seed(random_state: int | None) -> int:
    """scikit-learn's ``random_state``: an int seeds the run; ``None`` draws a fresh seed."""
    if random_state is None:
        return int(np.random.default_rng().integers(2**31))
    if isinstance(random_state, bool) or not isinstance(random_state, numbers.Integral) or random_state < 0:
        raise ValueError(f"random_state must be an int >= 0 or None, got {random_state!r}")
    return int(random_state)


def _max_features(value: Any) -> str | int | float | None:
    """scikit-learn's accepted ``max_features`` (FedForest itself knows a few more spellings)."""
    if value is None or value in ("sqrt", "log2"):
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1:
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and 0.0 < value <= 1.0:
        return float(value)
    raise ValueError(f"max_features must be 'sqrt', 'log2', an int >= 1, a float in (0, 1] or None, got {value!r}")


def _check_choice(name: str, value: Any, config: type) -> None:
    """A ``Literal`` field's value is one of its choices (one clear line, before the engine)."""
    hint = inspect.get_annotations(config, eval_str=True)[name]
    choices = getattr(hint, "__args__", ())
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")


#: Configuration field -> estimator parameter, where the names differ (for error messages).
_FEDSCS_NAMES = {"n_rounds": "n_estimators", "n_bins": "max_bin"}
_FEDFOREST_NAMES = {"n_trees": "n_estimators", "n_bins": "max_bin"}


def _build(config: type, names: dict[str, str], **values: Any) -> Any:
    """``config(**values)`` by field name. A field the configuration lacks is this module's bug
    (``TypeError``); a value it rejects is the user's: its one-line ``ValueError``, with the
    estimator's parameter names."""
    known = {f.name for f in dataclasses.fields(config)}
    missing = sorted(set(values) - known)
    if missing:
        raise TypeError(f"{config.__name__} has no field(s) {', '.join(missing)}")
    try:
        return config(**values)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        for field, parameter in names.items():
            message = re.sub(rf"\b{field}\b", parameter, message)
        raise ValueError(message) from None
