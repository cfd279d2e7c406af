"""scikit-learn-style estimators over the federated algorithms, for users of xgboost or scikit-learn.

``FedSCSXGBClassifier`` / ``FedSCSXGBRegressor`` take xgboost's parameter names and meanings,
``FedForestClassifier`` / ``FedForestRegressor`` scikit-learn's random-forest ones, and all four
add the federated settings (``protocol``, ``secure_aggregation``, ``min_crowd``, ...). ``fit``
takes the fleet -- a list of ``(X, y)`` pairs or ``edge_client.training_data.ClientData``, one per
gateway -- and trains over the in-memory simulation of the real protocol (``aggregator.Simulation``,
what ``aggregator.simulate`` runs): the configuration dataclasses ``FedSCSXGB`` and ``FedForest``
stay the engine, these classes only translate names and keep the fitted model
(``model_``, a ``shared.model.TreeEnsemble``).

They follow scikit-learn's estimator contract without importing scikit-learn (a development
dependency only; ``__sklearn_tags__`` imports it when scikit-learn itself asks): ``__init__``
stores its arguments unchanged, ``fit`` checks them (each mistake one ``InvalidParameterError``
naming the parameter), ``get_params``/``set_params`` list and set exactly the constructor's
parameters, so ``sklearn.base.clone`` copies an estimator, ``sklearn.base.is_classifier`` and
the scorers of ``sklearn.metrics.get_scorer`` recognise it, and fitted attributes end in ``_``.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, get_args

import numpy as np
from numpy.typing import ArrayLike

from shared.model import TreeEnsemble

from .algorithms import FedForest, FedSCSXGB
from .algorithms.private_fleet import target_pair
from .jobs import FederatedJob, JobSettings
from .simulate import Simulation

if TYPE_CHECKING:
    from sklearn.utils import Tags

__all__ = [
    "FedForestClassifier",
    "FedForestRegressor",
    "FedSCSXGBClassifier",
    "FedSCSXGBRegressor",
    "InvalidParameterError",
]

#: Seconds a simulated client may take to answer one request (generous: masking on 2 cores).
DEADLINE_S = 30.0


class InvalidParameterError(ValueError, TypeError):
    """A constructor parameter holds a value it does not accept (raised by ``fit``).

    Both a ``ValueError`` and a ``TypeError``, as scikit-learn's own ``InvalidParameterError``
    is: a value of the wrong type and a value out of range are the same mistake to the caller,
    so code catching either exception catches it.
    """


class _FederatedEstimator:
    """The scikit-learn contract shared by the four estimators (parameters, fitting, prediction)."""

    _is_classifier: ClassVar[bool]
    #: What each constructor parameter accepts (checked by ``fit``, in name order).
    _accepts: ClassVar[dict[str, _Accepts]]
    model_: TreeEnsemble

    # -- parameters (scikit-learn semantics) ------------------------------------------------------

    @classmethod
    def _get_param_names(cls) -> list[str]:
        """The constructor's keyword parameters, sorted (what ``get_params`` returns)."""
        signature = inspect.signature(cls.__init__)
        return sorted(name for name, p in signature.parameters.items() if p.kind == p.KEYWORD_ONLY)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's parameters and their current values.

        Parameters
        ----------
        deep : bool, default=True
            Accepted for scikit-learn's sake: no parameter is itself an estimator, so the
            answer is the same either way.

        Returns
        -------
        dict
            Parameter name to value, for every keyword of the constructor.
        """
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params: Any) -> _FederatedEstimator:
        """Set constructor parameters by name (values are checked by ``fit``, as in scikit-learn).

        Parameters
        ----------
        **params : dict
            Parameter name to new value; every name must be a constructor keyword.

        Returns
        -------
        self
            The estimator, for chaining.
        """
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

    def __sklearn_tags__(self) -> Tags:
        """scikit-learn's description of the estimator (scikit-learn >= 1.6 reads it in
        ``is_classifier``, ``is_regressor``, the scorers and ``check_estimator``; older versions
        read ``_estimator_type``). Imported here: only scikit-learn calls this, so the module
        works without scikit-learn installed. ``X`` may hold NaN (missing values)."""
        from sklearn.utils import ClassifierTags, InputTags, RegressorTags, Tags, TargetTags

        classifier = self._is_classifier
        return Tags(
            estimator_type="classifier" if classifier else "regressor",
            target_tags=TargetTags(required=True),
            classifier_tags=ClassifierTags() if classifier else None,
            regressor_tags=None if classifier else RegressorTags(),
            input_tags=InputTags(allow_nan=True),
        )

    def _checked_params(self) -> dict[str, Any]:
        """Every parameter checked against ``_accepts`` and converted to the plain Python value
        the engine takes (``np.int64(3)`` -> ``3``); the first bad one raises
        ``InvalidParameterError`` naming it."""
        return {name: self._accepts[name].check(name, value) for name, value in self.get_params().items()}

    # -- fitting ----------------------------------------------------------------------------------

    def _config(self, params: dict[str, Any], fleet: _Fleet) -> FedSCSXGB | FedForest:
        raise NotImplementedError

    def _train(self, config: Any, job: FederatedJob, seed: int) -> tuple[TreeEnsemble, np.ndarray]:
        raise NotImplementedError

    def fit(self, clients: Sequence[Any]) -> _FederatedEstimator:
        """Train over the fleet, one entry per gateway.

        Parameters
        ----------
        clients : sequence of (X, y) pairs or ClientData
            One per gateway: ``X`` 2-D with the same columns everywhere (NaN for a missing
            value), ``y`` its labels or targets; or ``edge_client.training_data.ClientData``.

        Returns
        -------
        self
            The fitted estimator.
        """
        params = self._checked_params()
        fleet = _fleet(clients)
        if self._is_classifier and np.unique(fleet.labels).size < 2:
            raise ValueError(
                f"the clients' labels hold {np.unique(fleet.labels).size} class; a classifier needs 2 or more"
            )
        config = self._config(params, fleet)
        seed = _seed(params["random_state"])
        sim = Simulation(clients)
        job = FederatedJob(
            sim.engine,
            list(sim.transports),
            job_id=f"{type(self).__name__}-{seed}",
            settings=JobSettings(deadline_s=DEADLINE_S),
        )
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
        """Predict every row of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features_in_)
            The windows' features, NaN for a missing value.

        Returns
        -------
        ndarray of shape (n_rows,)
            Class labels (classifiers, from ``classes_``) or values (regressors).
        """
        return self._fitted().predict(self._rows(X))


class _ClassifierMixin:
    _is_classifier: ClassVar[bool] = True
    # scikit-learn < 1.6 reads the kind here (is_classifier, scorers); 1.6+ reads __sklearn_tags__
    _estimator_type: ClassVar[str] = "classifier"

    def score(self, X: ArrayLike, y: ArrayLike) -> float:
        """Mean accuracy of the predictions (scikit-learn's classifier score).

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features_in_)
            The windows' features.
        y : array-like of shape (n_rows,)
            Their true labels.

        Returns
        -------
        float
            The share of rows predicted right.
        """
        return float(np.mean(self.predict(X) == np.asarray(y)))  # type: ignore[attr-defined]

    def predict_proba(self, X: ArrayLike) -> np.ndarray:
        """Class probabilities of every row of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features_in_)
            The windows' features, NaN for a missing value.

        Returns
        -------
        ndarray of shape (n_rows, n_classes)
            Columns in the order of ``classes_``; every row sums to 1.
        """
        return self._fitted().predict_proba(self._rows(X))  # type: ignore[attr-defined]


class _RegressorMixin:
    _is_classifier: ClassVar[bool] = False
    # scikit-learn < 1.6 reads the kind here (is_regressor, scorers); 1.6+ reads __sklearn_tags__
    _estimator_type: ClassVar[str] = "regressor"

    def score(self, X: ArrayLike, y: ArrayLike) -> float:
        """R² of the predictions (scikit-learn's regressor score).

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features_in_)
            The windows' features.
        y : array-like of shape (n_rows,)
            Their true targets.

        Returns
        -------
        float
            1 minus the residual sum of squares over the total sum of squares (0 for a constant
            ``y``).
        """
        target = np.asarray(y, dtype=np.float64)
        residual = np.sum((target - self.predict(X)) ** 2)  # type: ignore[attr-defined]
        total = np.sum((target - target.mean()) ** 2)
        return float(1.0 - residual / total) if total > 0 else 0.0


# --- what the parameters accept --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Accepts:
    """What one constructor parameter accepts: ``convert`` returns the value as the engine takes
    it (a plain ``int``, ``float``, ``bool`` or ``str``) or ``None`` for a value it rejects (a
    parameter that accepts ``None`` says so with ``none_ok``); ``wording`` ends the error message
    "<name> must be <wording>, got <value>"."""

    wording: str
    convert: Callable[[Any], Any]
    none_ok: bool = False

    def check(self, name: str, value: Any) -> Any:
        if value is None and self.none_ok:
            return None
        converted = None if value is None else self.convert(value)
        if converted is None:
            raise InvalidParameterError(f"{name} must be {self.wording}, got {_shown(value)}")
        return converted

    def or_none(self) -> _Accepts:
        return _Accepts(f"{self.wording} or None", self.convert, none_ok=True)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    """A finite real number, not a bool (NaN and infinities are nobody's setting here)."""
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and (isinstance(value, numbers.Integral) or math.isfinite(value))
    )


def _integer(low: int, high: int | None = None) -> _Accepts:
    def convert(value: Any) -> int | None:
        return int(value) if _is_int(value) and low <= value and (high is None or value <= high) else None

    return _Accepts(f"an int >= {low}" if high is None else f"an int in {low}..{high}", convert)


def _number(low: float, *, low_open: bool = False, high: float | None = None) -> _Accepts:
    """A finite number ``>= low`` (``> low`` when ``low_open``), at most ``high``."""

    def convert(value: Any) -> float | None:
        above = _is_real(value) and (value > low if low_open else value >= low)
        return float(value) if above and (high is None or value <= high) else None

    if high is not None:
        return _Accepts(f"a number in {'(' if low_open else '['}{low:g}, {high:g}]", convert)
    return _Accepts(f"a finite number {'>' if low_open else '>='} {low:g}", convert)


def _one_of(*choices: str) -> _Accepts:
    return _Accepts(
        f"one of {', '.join(repr(c) for c in choices)}",
        lambda value: value if isinstance(value, str) and value in choices else None,
    )


def _choices(config: type, name: str) -> _Accepts:
    """The choices of a configuration's ``Literal`` field (so the two cannot drift apart)."""
    annotation = inspect.get_annotations(config, eval_str=True)[name]
    literals = [a for a in get_args(annotation) if a is not type(None)]
    if all(isinstance(a, str) for a in literals):
        return _one_of(*literals)
    accepts = _one_of(*(c for literal in literals for c in get_args(literal)))
    return accepts.or_none() if type(None) in get_args(annotation) else accepts


def _convert_max_features(value: Any) -> str | int | float | None:
    """scikit-learn's ``max_features``: "sqrt", "log2", a count of features, or a fraction of
    them (``1`` is one feature, ``1.0`` all of them; ``None`` is handled by ``none_ok``)."""
    if isinstance(value, str):
        return value if value in ("sqrt", "log2") else None
    if _is_int(value):
        return int(value) if value >= 1 else None
    return float(value) if _is_real(value) and 0.0 < value <= 1.0 else None


_BOOLEAN = _Accepts("a bool", lambda value: bool(value) if isinstance(value, (bool, np.bool_)) else None)

#: A regressor's public target range (private protocol).
_TARGET_RANGE = _Accepts(
    "a pair (low, high) of finite numbers, low < high, at most 2e30 apart", target_pair, none_ok=True
)
_TARGET_RANGE_DOC = """    target_range : tuple of (float, float) or None, default=None
        Private protocol: the public range ``(low, high)`` the targets lie in (a sensor's
        physical range, say). The training makes no release of the targets' octaves (that part
        of the opening's share stays unspent) and clips the targets to it (FedSCS-XGB clips the
        residuals to half its width, or to twice the reach of the opening's noisy target
        quantiles from their median when that is less). ``None``: the range is read off that
        release, and a fleet too small for its budget to read it is refused in one line.
"""

#: The parameters every estimator has.
_COMMON_ACCEPTS = {
    "n_estimators": _integer(1),
    "max_depth": _integer(1),
    "max_bin": _integer(2, 65_535),
    "random_state": _integer(0).or_none(),
    "secure_aggregation": _BOOLEAN.or_none(),
    "min_crowd": _integer(0),
    "client_fraction": _number(0.0, low_open=True, high=1.0),
    "dp_epsilon": _number(0.0, low_open=True, high=1000.0),
    "dp_delta": _number(0.0, low_open=True, high=1e-3),
}


# --- FedSCS-XGB ------------------------------------------------------------------------------------


class _FedSCSXGBBase(_FederatedEstimator):
    _objective: ClassVar[str]
    _accepts = {
        **_COMMON_ACCEPTS,
        "learning_rate": _number(0.0).or_none(),
        "gamma": _number(0.0).or_none(),
        "min_split_loss": _number(0.0).or_none(),
        "reg_lambda": _number(0.0),
        "min_child_weight": _number(0.0),
        "multi_strategy": _choices(FedSCSXGB, "multi_strategy"),
        "protocol": _choices(FedSCSXGB, "protocol"),
        "max_bin": _integer(2, 65_535).or_none(),
        "n_estimators": _integer(1).or_none(),
        "max_depth": _integer(1).or_none(),
    }

    def __init__(
        self,
        *,
        n_estimators: int | None = None,
        max_depth: int | None = None,
        learning_rate: float | None = None,
        max_bin: int | None = None,
        gamma: float | None = None,
        min_split_loss: float | None = None,
        reg_lambda: float = 1.0,
        min_child_weight: float = 1.0,
        multi_strategy: str | None = None,
        random_state: int | None = 0,
        protocol: str | None = None,
        secure_aggregation: bool | None = None,
        min_crowd: int = 5,
        client_fraction: float = 1.0,
        dp_epsilon: float = FedSCSXGB.dp_epsilon,
        dp_delta: float = FedSCSXGB.dp_delta,
    ) -> None:
        _store(self, locals())

    def _config(self, params: dict[str, Any], fleet: _Fleet) -> FedSCSXGB:
        objective = self._objective
        if objective == "softmax" and np.unique(fleet.labels).size == 2:
            objective = "logistic"  # xgboost's XGBClassifier: binary:logistic for two classes
        gamma = _split_loss(params["gamma"], params["min_split_loss"])
        return _build(
            FedSCSXGB,
            _FEDSCS_NAMES,
            n_rounds=params["n_estimators"],
            max_depth=params["max_depth"],
            learning_rate=params["learning_rate"],
            n_bins=params["max_bin"],
            reg_lambda=params["reg_lambda"],
            min_child_weight=params["min_child_weight"],
            multi_strategy=params["multi_strategy"],
            objective=objective,
            protocol=params["protocol"],
            secure_aggregation=params["secure_aggregation"],
            min_crowd=params["min_crowd"],
            client_fraction=params["client_fraction"],
            dp_epsilon=params["dp_epsilon"],
            dp_delta=params["dp_delta"],
            **({} if gamma is None else {"gamma": gamma}),
            **self._task_fields(params),
        )

    def _task_fields(self, params: dict[str, Any]) -> dict[str, Any]:
        """The configuration fields only this task's estimator sets."""
        return {}

    def _train(self, config: FedSCSXGB, job: FederatedJob, seed: int) -> tuple[TreeEnsemble, np.ndarray]:
        result = config.fit_with_diagnostics(job, seed=seed)
        return result.model, result.feature_importances()


_FEDSCS_PARAMETERS = """\
    Parameters
    ----------
    n_estimators : int or None, default=None
        Boosting rounds (xgboost's ``n_estimators``; ``FedSCSXGB.n_rounds``); ``None``: in the
        private protocol 40 for classification and 20 for regression, else 10 (the paper's).
    max_depth : int or None, default=None
        Depth of every tree, at least 1 (xgboost's 0, no limit, is not offered); ``None``: 6 in
        the private protocol, else 4 (the paper's).
    learning_rate : float or None, default=None
        Shrinkage ``eta`` of every leaf; ``None``: in the private protocol 0.3 for
        classification and 0.5 for regression, else 0.2 (the paper's).
    max_bin : int or None, default=None
        Bins per feature, 2 to 65535 (xgboost's ``max_bin``; the edges are fleet-wide quantiles);
        ``None``: 8 in the private protocol, 256 otherwise.
    gamma : float or None, default=None
        xgboost's ``gamma``: a node splits only if its loss change (xgboost's, the bracket of the
        paper's Eq. 1 without its 1/2) is at least this, so the same number grows xgboost's trees;
        Eq. 1 subtracts half of it. ``None``: ``min_split_loss``, or 0.1 (the paper's γ) when
        that is ``None`` too.
    min_split_loss : float or None, default=None
        xgboost's native name of ``gamma`` (its scikit-learn wrapper passes it on as a keyword):
        give either name. Both with different numbers is an error here, where xgboost silently
        lets ``min_split_loss`` win.
    reg_lambda : float, default=1.0
        L2 penalty on leaf weights.
    min_child_weight : float, default=1.0
        Smallest Hessian sum of a child (xgboost's meaning).
    multi_strategy : {"one_output_per_tree", "multi_output_tree"} or None, default=None
        Multiclass trees (xgboost's names): one tree per class per round, or one tree per round with
        one leaf weight per class (the paper's). Ignored with one output. ``None``:
        ``"multi_output_tree"`` in the private protocol (which needs it), else
        ``"one_output_per_tree"``.
    random_state : int or None, default=0
        Seed of the client sampling (``client_fraction``); ``None`` draws one.
    protocol : {"private", "histogram", "atoms"} or None, default=None
        ``"private"`` (``None``, unless ``secure_aggregation=False``): differential privacy with
        the noise added by the gateways under secure aggregation (a regressor clips every
        residual to a public bound read off noisy releases of the target's range and
        quantiles); ``"histogram"``: secure sums
        of exact histograms, without differential privacy; ``"atoms"``: the paper's protocol,
        which reveals every window's quantised features and gradients (for reproduction). The
        last two log a one-line warning.
    secure_aggregation : bool or None, default=None
        Mask every gateway's vector so the server decodes only the fleet's sum (``None``: on
        except for the atom protocol; needs 3 or more clients).
    min_crowd : int, default=5
        No split leaves a child with fewer windows fleet-wide (histogram protocol).
    client_fraction : float, default=1.0
        Share of the clients sampled per round (atom protocol).
    dp_epsilon : float, default=8.0
        The private protocol's budget per window and training (``(dp_epsilon, dp_delta)``-DP
        for adding or removing one window).
    dp_delta : float, default=1e-6
        The private protocol's delta.

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
    __doc__ = (
        """FedSCS-XGB classifier with xgboost's ``XGBClassifier`` parameter names.

    Softmax for three or more classes, logistic for two, as xgboost chooses.

"""
        + _FEDSCS_PARAMETERS
        + """    classes_ : ndarray
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
    >>> private = FedSCSXGBClassifier(n_estimators=5, max_depth=3, dp_epsilon=4.0).fit(clients)
    >>> bool(private.model_.metadata["dp_epsilon"] <= 4.0)  # the budget it spent per window
    True
    >>> model = FedSCSXGBClassifier(n_estimators=5, max_depth=3, max_bin=32, protocol="histogram").fit(clients)
    >>> model.classes_
    array([0, 1, 2])
    >>> model.predict_proba(clients[0][0][:2]).shape
    (2, 3)
    >>> bool((model.predict(clients[0][0]) == clients[0][1]).mean() > 0.7)
    True
    >>> same = FedSCSXGBClassifier(n_estimators=5, max_depth=3, max_bin=32, protocol="histogram",
    ...                            min_split_loss=0.1).fit(clients)
    >>> same.model_ == model.model_  # min_split_loss is gamma's other name; both None: 0.1
    True
    """
    )

    _objective = "softmax"


class FedSCSXGBRegressor(_RegressorMixin, _FedSCSXGBBase):
    __doc__ = (
        """FedSCS-XGB regressor (squared error) with xgboost's ``XGBRegressor`` parameter names.

"""
        + _FEDSCS_PARAMETERS.replace("\n    Attributes\n", _TARGET_RANGE_DOC + "\n    Attributes\n")
        + """
    Examples
    --------
    >>> import numpy as np
    >>> from aggregator.estimators import FedSCSXGBRegressor
    >>> rng = np.random.default_rng(0)
    >>> clients = []
    >>> for gateway in range(3):
    ...     X = rng.normal(size=(80, 3))
    ...     clients.append((X, 2.0 * X[:, 0] + rng.normal(scale=0.1, size=80)))
    >>> private = FedSCSXGBRegressor(n_estimators=5, max_depth=3).fit(clients)
    >>> meta = private.model_.metadata  # the budget spent per window, the public target range
    >>> bool(meta["dp_epsilon"] <= 8.0), bool(meta["dp_target_low"] < 0.0 < meta["dp_target_high"])
    (True, True)
    >>> model = FedSCSXGBRegressor(n_estimators=20, learning_rate=0.3, max_bin=32, protocol="histogram").fit(clients)
    >>> X, y = clients[0]
    >>> bool(np.abs(model.predict(X) - y).mean() < 0.5)
    True
    >>> int(np.argmax(model.feature_importances_))
    0
    >>> known = FedSCSXGBRegressor(n_estimators=5, max_depth=3, target_range=(-8.0, 8.0)).fit(clients)
    >>> known.model_.metadata["dp_target_low"], known.model_.metadata["dp_target_high"]
    (-8.0, 8.0)
    """
    )

    _objective = "squared_error"
    _accepts = {**_FedSCSXGBBase._accepts, "target_range": _TARGET_RANGE}

    def _task_fields(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"target_range": params["target_range"]}

    def __init__(
        self,
        *,
        n_estimators: int | None = None,
        max_depth: int | None = None,
        learning_rate: float | None = None,
        max_bin: int | None = None,
        gamma: float | None = None,
        min_split_loss: float | None = None,
        reg_lambda: float = 1.0,
        min_child_weight: float = 1.0,
        multi_strategy: str | None = None,
        random_state: int | None = 0,
        protocol: str | None = None,
        secure_aggregation: bool | None = None,
        min_crowd: int = 5,
        client_fraction: float = 1.0,
        dp_epsilon: float = FedSCSXGB.dp_epsilon,
        dp_delta: float = FedSCSXGB.dp_delta,
        target_range: tuple[float, float] | None = None,
    ) -> None:
        _store(self, locals())


# --- FedForest -------------------------------------------------------------------------------------


class _FedForestBase(_FederatedEstimator):
    _task: ClassVar[str]
    _accepts = {
        **_COMMON_ACCEPTS,
        "max_features": _Accepts(
            "'sqrt', 'log2', an int >= 1, a float in (0, 1] or None", _convert_max_features, none_ok=True
        ),
        "min_samples_split": _integer(2),
        "min_samples_leaf": _integer(1),
        "min_impurity_decrease": _number(0.0),
        "bootstrap": _BOOLEAN,
        "protocol": _choices(FedForest, "protocol"),
        "max_bin": _integer(2, 65_535).or_none(),
    }

    def _forest_config(self, params: dict[str, Any], fleet: _Fleet, **fields: Any) -> FedForest:
        """The ``FedForest`` of these settings: the common parameters plus the task's."""
        max_features = params["max_features"]
        if isinstance(max_features, int) and max_features > fleet.n_features:
            raise InvalidParameterError(
                f"max_features must be at most the {fleet.n_features} features of X, got {max_features}"
            )
        return _build(
            FedForest,
            _FEDFOREST_NAMES,
            n_trees=params["n_estimators"],
            max_depth=params["max_depth"],
            n_bins=params["max_bin"],
            task=self._task,
            max_features=max_features,
            min_samples_split=params["min_samples_split"],
            min_samples_leaf=params["min_samples_leaf"],
            min_impurity_decrease=params["min_impurity_decrease"],
            bootstrap=params["bootstrap"],
            protocol=params["protocol"],
            secure_aggregation=params["secure_aggregation"],
            min_crowd=params["min_crowd"],
            client_fraction=params["client_fraction"],
            dp_epsilon=params["dp_epsilon"],
            dp_delta=params["dp_delta"],
            **fields,
        )

    def _train(self, config: FedForest, job: FederatedJob, seed: int) -> tuple[TreeEnsemble, np.ndarray]:
        result = config.fit_with_diagnostics(job, seed=seed)
        return result.model, np.asarray(result.importance, dtype=np.float64)[: result.model.n_features]


_FEDFOREST_PARAMETERS = """\
    n_estimators : int, default=50
        Trees (the paper's experiments: 50; ``FedForest.n_trees``). A private regression grows
        one: its trees would share one structure.
    max_depth : int, default=8
        Depth of every tree (the paper's: 8). Unlike scikit-learn's, not ``None``: every level
        costs the fleet its own rounds of messages.
    max_bin : int or None, default=None
        Bins of the fleet-wide edges per feature, 2 to 65535. ``None``: in the private protocol
        16 for classification and, for regression, about 50 windows a bin from 16 to 64 (read
        off the opening's noisy window count); 32 otherwise.
    max_features : {"sqrt", "log2"}, int, float or None, default={default_features}
        Features drawn per node, scikit-learn's values: ``"sqrt"``, ``"log2"``, a count (at most
        the number of features), a fraction in (0, 1] of the features (at least one), or
        ``None`` for all.
    min_samples_split : int, default=2
        Fewest windows a node needs to be split (an int >= 2; scikit-learn's fractions are not
        offered).
    min_samples_leaf : int, default=1
        Fewest windows of a leaf (the paper's experiments: 5; an int >= 1).
    min_impurity_decrease : float, default=0.0
        A split must decrease the weighted impurity by at least this.
    bootstrap : bool, default=True
        Every client bootstraps its own windows per tree.
    random_state : int or None, default=0
        Seed of the tree's client subsets, feature draws and bootstraps; ``None`` draws one.
    protocol : {"private", "histogram", "sketches"} or None, default=None
        ``"private"`` (``None`` resolves to it unless secure aggregation is turned off):
        differential privacy -- the server decodes two noisy fleet sums of class counts (for
        regression: window counts and sums of the target clipped to a public range) per feature
        and bin, then per leaf; classification trees split at random on the features the first
        scores best, regression trees where its marginals call for a split; every window is in
        every tree (``bootstrap``, ``max_features``, ``min_samples_*``,
        ``min_impurity_decrease`` and ``min_crowd`` do not apply).
        ``"histogram"`` (``None`` resolves to it without secure aggregation): exact fleet sums
        per node and bin under secure aggregation, no differential privacy. ``"sketches"``: the paper's
        protocol, which reveals client values (for reproduction). Both non-private protocols log a
        one-line warning.
    secure_aggregation : bool or None, default=None
        As for ``FedSCSXGBClassifier``.
    min_crowd : int, default=5
        No split leaves a child with fewer windows fleet-wide (histogram protocol).
    client_fraction : float, default=1.0
        Share of the clients each tree is grown on.
    dp_epsilon : float, default=8.0
        The private protocol's budget per window and training (``(dp_epsilon, dp_delta)``-DP
        for adding or removing one window; the model's metadata reports what was spent).
    dp_delta : float, default=1e-6
        The private protocol's delta.

    Attributes
    ----------
    model_ : shared.model.TreeEnsemble
        The trained forest (``kind="forest"``).
    n_features_in_ : int
        Columns of ``X``.
    feature_importances_ : ndarray of shape (n_features,)
        Impurity-based importance: the weighted impurity decrease of each feature's splits summed
        over the forest, normalised to sum 1 (private protocol: each kept feature's best noisy
        root decrease, normalised; 0 for the others).
"""


class FedForestClassifier(_ClassifierMixin, _FedForestBase):
    __doc__ = (
        """FedForest classifier with scikit-learn's ``RandomForestClassifier`` parameter names.

    Parameters
    ----------
    criterion : {"gini", "entropy"}, default="gini"
        Impurity of the splits.
"""
        + _FEDFOREST_PARAMETERS.replace("{default_features}", '"sqrt"')
        + """    classes_ : ndarray
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
    )

    _task = "classification"
    _accepts = {**_FedForestBase._accepts, "criterion": _one_of("gini", "entropy")}

    def __init__(
        self,
        *,
        n_estimators: int = 50,
        criterion: str = "gini",
        max_depth: int = 8,
        max_bin: int | None = None,
        max_features: str | int | float | None = "sqrt",
        min_samples_split: int = 2,
        min_samples_leaf: int = 1,
        min_impurity_decrease: float = 0.0,
        bootstrap: bool = True,
        random_state: int | None = 0,
        protocol: str | None = None,
        secure_aggregation: bool | None = None,
        min_crowd: int = 5,
        client_fraction: float = 1.0,
        dp_epsilon: float = FedForest.dp_epsilon,
        dp_delta: float = FedForest.dp_delta,
    ) -> None:
        _store(self, locals())

    def _config(self, params: dict[str, Any], fleet: _Fleet) -> FedForest:
        return self._forest_config(params, fleet, criterion=params["criterion"])


class FedForestRegressor(_RegressorMixin, _FedForestBase):
    __doc__ = (
        """FedForest regressor (squared error) with scikit-learn's ``RandomForestRegressor``
    parameter names.

    Parameters
    ----------
"""
        + _FEDFOREST_PARAMETERS.replace("{default_features}", "1.0").replace(
            "\n    Attributes\n", _TARGET_RANGE_DOC + "\n    Attributes\n"
        )
        + """
    Examples
    --------
    >>> import numpy as np
    >>> from aggregator.estimators import FedForestRegressor
    >>> rng = np.random.default_rng(0)
    >>> clients = []
    >>> for gateway in range(3):
    ...     X = rng.normal(size=(200, 3))
    ...     clients.append((X, np.where(X[:, 0] > 0, 10.0, 0.0) + rng.normal(scale=0.1, size=200)))
    >>> model = FedForestRegressor(n_estimators=10, max_depth=4).fit(clients)
    >>> X, y = clients[2]
    >>> bool(np.abs(model.predict(X) - y).mean() < 1.5)
    True
    """
    )

    _task = "regression"
    _accepts = {**_FedForestBase._accepts, "target_range": _TARGET_RANGE}

    def __init__(
        self,
        *,
        n_estimators: int = 50,
        max_depth: int = 8,
        max_bin: int | None = None,
        max_features: str | int | float | None = 1.0,
        min_samples_split: int = 2,
        min_samples_leaf: int = 1,
        min_impurity_decrease: float = 0.0,
        bootstrap: bool = True,
        random_state: int | None = 0,
        protocol: str | None = None,
        secure_aggregation: bool | None = None,
        min_crowd: int = 5,
        client_fraction: float = 1.0,
        dp_epsilon: float = FedForest.dp_epsilon,
        dp_delta: float = FedForest.dp_delta,
        target_range: tuple[float, float] | None = None,
    ) -> None:
        _store(self, locals())

    def _config(self, params: dict[str, Any], fleet: _Fleet) -> FedForest:
        return self._forest_config(params, fleet, target_range=params["target_range"])


# --- helpers ---------------------------------------------------------------------------------------


def _store(estimator: _FederatedEstimator, arguments: dict[str, Any]) -> None:
    """Keep every constructor argument as it is (scikit-learn's rule: no checks, no copies)."""
    for name in estimator._get_param_names():
        setattr(estimator, name, arguments[name])


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _shown(value: Any) -> str:
    """``value`` for a one-line error message: arrays by shape, anything else by a short repr."""
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape}"
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


@dataclasses.dataclass(frozen=True)
class _Fleet:
    """What ``fit`` needs to know of the fleet before training: all the labels (the classes,
    and the classifier's objective) and the number of features (``max_features``' bound)."""

    labels: np.ndarray
    n_features: int


def _fleet(clients: Sequence[Any]) -> _Fleet:
    """The fleet's labels and feature count (a clear error for a malformed fleet)."""
    if isinstance(clients, (str, bytes)) or not isinstance(clients, Sequence) or not clients:
        raise ValueError("clients must be a non-empty list of (X, y) pairs or ClientData, one per gateway")
    labels, widths = [], set()
    for k, client in enumerate(clients):
        if hasattr(client, "X") and hasattr(client, "y"):
            X, y = client.X, client.y
        elif isinstance(client, (tuple, list)) and len(client) == 2:
            X, y = client
        else:
            raise ValueError(f"clients[{k}] must be an (X, y) pair or a ClientData, got {type(client).__name__}")
        shape = np.shape(X)
        if len(shape) != 2:
            raise ValueError(f"clients[{k}]'s X must be 2-D (rows, features), got shape {shape}")
        widths.add(shape[1])
        labels.append(np.asarray(y).ravel())
    if len(widths) > 1:
        raise ValueError(f"every client's X must have the same columns, got {sorted(widths)} columns")
    return _Fleet(np.concatenate(labels), widths.pop())


def _seed(random_state: int | None) -> int:
    """scikit-learn's ``random_state``: an int seeds the run; ``None`` draws a fresh seed."""
    return int(np.random.default_rng().integers(2**31)) if random_state is None else random_state


def _split_loss(gamma: float | None, min_split_loss: float | None) -> float | None:
    """The one number of ``gamma`` and its alias ``min_split_loss`` (``None``: neither given)."""
    if gamma is not None and min_split_loss is not None and gamma != min_split_loss:
        raise InvalidParameterError(
            f"gamma and min_split_loss are one parameter (xgboost's two names), got "
            f"gamma={gamma!r} and min_split_loss={min_split_loss!r}: give one"
        )
    return min_split_loss if gamma is None else gamma


#: Configuration field -> estimator parameter, where the names differ (for error messages).
_FEDSCS_NAMES = {"n_rounds": "n_estimators", "n_bins": "max_bin"}
_FEDFOREST_NAMES = {"n_trees": "n_estimators", "n_bins": "max_bin"}


def _build(config: type, names: dict[str, str], **values: Any) -> Any:
    """``config(**values)`` by field name. A field the configuration lacks is this module's bug
    (``TypeError``); a value it rejects is the user's (settings that do not go together, such
    as secure aggregation with the paper's protocol): its one line, with the estimator's
    parameter names."""
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
        raise InvalidParameterError(message) from None
