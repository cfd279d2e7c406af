"""Boosting objectives as small pure, vectorised functions: gradients, Hessians, the initial
margin (``base_score``) and the loss printed as training progress.

Three objectives, each a frozen dataclass so a round's settings can be passed around and logged:

* :class:`Softmax` -- multiclass, XGBoost's ``multi:softprob`` (FedSCS-XGB's objective);
* :class:`Logistic` -- binary, XGBoost's ``binary:logistic``;
* :class:`SquaredError` -- regression, XGBoost's ``reg:squarederror``.

Formulas (checked against XGBoost 3.2.0's C++ source and, in the tests, against a trained booster's
``sum_hessian``; ``w`` is the optional per-sample weight, 1 by default):

* Softmax, per sample ``i`` and class ``k``, ``p = softmax(margin_i)``:
  ``g_ik = (p_k - [y_i == k]) * w_i`` and
  ``h_ik = max(hessian_factor * p_k * (1 - p_k) * w_i, min_hessian)``.
  The exact diagonal of the softmax cross-entropy Hessian is ``p_k (1 - p_k)``; XGBoost uses
  ``2 p_k (1 - p_k)`` (``multiclass_obj.cu``: ``fmax(2.0f * p * (1.0f - p) * wt, 1e-16f)``, the
  clamp applied *after* the weight). The factor 2 halves every Newton step; it is a deliberate
  upper bound (the softmax Hessian is dominated by ``2 diag(p(1-p))``), not a typo. We default to
  ``hessian_factor=2.0`` so a federated run reproduces centralized ``xgboost`` (the baseline of
  the paper and of our benchmarks) and so Hessian-weighted sketches weigh samples the same way;
  ``hessian_factor=1.0`` gives the exact diagonal. Note: XGBoost's development branch (2026)
  replaces this by the pseudo-Hessian ``|p - y|``; pin the comparison to the installed release.
* Logistic, ``p = sigmoid(margin)``: ``g = (p - y) w``, ``h = max(p (1 - p), min_hessian) * w``
  (XGBoost clamps *before* the weight here; no factor 2).
* Squared error: ``g = (margin - y) w``, ``h = w``.

XGBoost computes these in float32; we compute in float64, so values agree to ~1e-7 relative.

Initial margin (``base_score`` of a ``TreeEnsemble``, always in *margin* space here), from
additive statistics so a server can sum the clients' parts (:meth:`base_score_stats`):

* ``mode="zero"``: all zeros -- the paper's Alg. 1/2 (``f^(A) <- 0``, margins initialised to 0).
* ``mode="average"``: what XGBoost 3.x does with ``boost_from_average`` (verified against 3.2.0):
  softmax ``log(max(prior_k, 1e-6))`` centred to mean zero over classes (``prior_k`` the weighted
  class frequency); logistic ``logit(mean y)`` (XGBoost stores ``mean y`` in probability space);
  squared error the weighted mean of ``y``.

Progress losses (weighted means, as XGBoost's metrics): ``mlogloss`` with ``p`` clamped below at
1e-16, ``logloss`` with ``p`` clamped to [1e-16, 1 - 1e-16], ``rmse``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Union

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "LOSS_EPS",
    "OBJECTIVES",
    "Objective",
    "PRIOR_EPS",
    "Logistic",
    "Softmax",
    "SquaredError",
    "log_softmax",
    "objective_named",
    "sigmoid",
    "softmax",
]

#: Probability clamp of XGBoost's ``mlogloss``/``logloss`` metrics.
LOSS_EPS = 1e-16
#: Clamp of class priors before the log in XGBoost's multiclass ``boost_from_average`` (kRtEps).
PRIOR_EPS = 1e-6
_BASE_MODES = ("zero", "average")


# --- link functions ---------------------------------------------------------------------------
def softmax(margin: ArrayLike) -> np.ndarray:
    """Row-wise softmax of ``(n, K)`` margins (shifted by the row max, so no overflow)."""
    m = np.asarray(margin, dtype=np.float64)
    e = np.exp(m - m.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax(margin: ArrayLike) -> np.ndarray:
    """Row-wise ``log(softmax(margin))``, accurate for very negative log-probabilities."""
    m = np.asarray(margin, dtype=np.float64)
    shifted = m - m.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def sigmoid(margin: ArrayLike) -> np.ndarray:
    """Overflow-free logistic function."""
    m = np.asarray(margin, dtype=np.float64)
    z = np.exp(-np.abs(m))
    return np.where(m >= 0, 1.0 / (1.0 + z), z / (1.0 + z))


# --- helpers ----------------------------------------------------------------------------------
def _weights(weight: ArrayLike | None, n: int) -> np.ndarray:
    if weight is None:
        return np.ones(n, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError(f"weight must have shape ({n},), got {w.shape}")
    if not (np.isfinite(w).all() and (w >= 0).all()):
        raise ValueError("weights must be finite and >= 0")
    return w


def _mean_stats(t: np.ndarray, weight: ArrayLike | None) -> np.ndarray:
    """``[sum w*t, sum w]``: what a weighted mean of labels needs, additive across clients."""
    w = _weights(weight, t.shape[0])
    return np.array([np.dot(w, t), w.sum()], dtype=np.float64)


def _base_mode(mode: str) -> None:
    if mode not in _BASE_MODES:
        raise ValueError(f"mode must be one of {_BASE_MODES}, got {mode!r}")


def _scalar_margin(margin: ArrayLike) -> tuple[np.ndarray, tuple[int, ...]]:
    """Margins of a one-output model as (n,), remembering the caller's shape ((n,) or (n, 1))."""
    m = np.asarray(margin, dtype=np.float64)
    if m.ndim == 2 and m.shape[1] == 1:
        return m[:, 0], m.shape
    if m.ndim != 1:
        raise ValueError(f"margin must have shape (n,) or (n, 1), got {m.shape}")
    return m, m.shape


def _real_labels(y: ArrayLike, n: int | None) -> np.ndarray:
    t = np.asarray(y, dtype=np.float64)
    if t.ndim != 1 or (n is not None and t.shape[0] != n):
        raise ValueError(f"y must have shape ({n if n is not None else 'n'},), got {t.shape}")
    if not np.isfinite(t).all():
        raise ValueError("labels must be finite")
    return t


# --- objectives -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Softmax:
    """Multiclass softmax cross-entropy, XGBoost's ``multi:softprob`` (see module docstring)."""

    n_classes: int
    hessian_factor: float = 2.0
    min_hessian: float = 1e-16

    name: ClassVar[str] = "multi:softprob"
    link: ClassVar[str] = "softmax"
    metric: ClassVar[str] = "mlogloss"

    def __post_init__(self) -> None:
        if not (isinstance(self.n_classes, (int, np.integer)) and self.n_classes >= 2):
            raise ValueError(f"n_classes must be an int >= 2, got {self.n_classes!r}")
        if not (self.hessian_factor > 0 and self.min_hessian >= 0):
            raise ValueError("hessian_factor must be > 0 and min_hessian >= 0")

    @property
    def n_outputs(self) -> int:
        return int(self.n_classes)

    def labels(self, y: ArrayLike, n: int | None = None) -> np.ndarray:
        """``y`` as int64 class indices in ``[0, n_classes)`` (integral floats accepted)."""
        t = np.asarray(y)
        if t.ndim != 1 or (n is not None and t.shape[0] != n):
            raise ValueError(f"y must have shape ({n if n is not None else 'n'},), got {t.shape}")
        if t.dtype.kind == "f":
            if not (np.isfinite(t).all() and (t == np.floor(t)).all()):
                raise ValueError("class labels must be integers")
        elif t.dtype.kind not in "iub":
            raise ValueError(f"class labels must be integers, got dtype {t.dtype}")
        labels = t.astype(np.int64)
        if labels.size and (labels.min() < 0 or labels.max() >= self.n_classes):
            raise ValueError(f"class labels must lie in [0, {self.n_classes})")
        return labels

    def _margin(self, margin: ArrayLike) -> np.ndarray:
        m = np.asarray(margin, dtype=np.float64)
        if m.ndim != 2 or m.shape[1] != self.n_classes:
            raise ValueError(f"margin must have shape (n, {self.n_classes}), got {m.shape}")
        return m

    def gradients(
        self, margin: ArrayLike, y: ArrayLike, weight: ArrayLike | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-sample, per-class ``(g, h)``, each ``(n, K)`` float64 (diagonal Hessian)."""
        m = self._margin(margin)
        n = m.shape[0]
        labels = self.labels(y, n)
        w = _weights(weight, n)[:, None]
        p = softmax(m)
        g = p.copy()
        g[np.arange(n), labels] -= 1.0
        g *= w
        h = np.maximum(self.hessian_factor * p * (1.0 - p) * w, self.min_hessian)
        return g, h

    def loss(self, margin: ArrayLike, y: ArrayLike, weight: ArrayLike | None = None) -> float:
        """Weighted mean negative log-likelihood (XGBoost's ``mlogloss``, p clamped at 1e-16)."""
        m = self._margin(margin)
        n = m.shape[0]
        labels = self.labels(y, n)
        w = _weights(weight, n)
        log_p = log_softmax(m)[np.arange(n), labels]
        nll = -np.maximum(log_p, np.log(LOSS_EPS))
        return _weighted_mean(nll, w)

    def predict_proba(self, margin: ArrayLike) -> np.ndarray:
        return softmax(self._margin(margin))

    def base_score_stats(self, y: ArrayLike, weight: ArrayLike | None = None) -> np.ndarray:
        """Additive statistic for :meth:`base_score`: the weighted class counts ``(K,)``."""
        labels = self.labels(y)
        w = _weights(weight, labels.shape[0])
        return np.bincount(labels, weights=w, minlength=self.n_classes).astype(np.float64)

    def base_score(self, stats: ArrayLike | None = None, *, mode: str = "zero") -> np.ndarray:
        """Initial margins ``(K,)`` from summed :meth:`base_score_stats` (see module docstring)."""
        _base_mode(mode)
        if mode == "zero":
            return np.zeros(self.n_classes, dtype=np.float64)
        counts = _stats(stats, (self.n_classes,))
        total = counts.sum()
        if total <= 0:
            raise ValueError("base_score needs a positive total weight")
        log_prior = np.log(np.maximum(counts / total, PRIOR_EPS))
        return log_prior - log_prior.mean()


@dataclass(frozen=True)
class Logistic:
    """Binary logistic loss, XGBoost's ``binary:logistic``; labels in [0, 1]."""

    min_hessian: float = 1e-16

    name: ClassVar[str] = "binary:logistic"
    link: ClassVar[str] = "sigmoid"
    metric: ClassVar[str] = "logloss"
    n_outputs: ClassVar[int] = 1

    def _labels(self, y: ArrayLike, n: int | None) -> np.ndarray:
        t = _real_labels(y, n)
        if ((t < 0) | (t > 1)).any():
            raise ValueError("logistic labels must lie in [0, 1]")
        return t

    def gradients(
        self, margin: ArrayLike, y: ArrayLike, weight: ArrayLike | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(g, h)`` with the margin's shape ((n,) or (n, 1))."""
        m, shape = _scalar_margin(margin)
        t = self._labels(y, m.shape[0])
        w = _weights(weight, m.shape[0])
        p = sigmoid(m)
        g = (p - t) * w
        h = np.maximum(p * (1.0 - p), self.min_hessian) * w
        return g.reshape(shape), h.reshape(shape)

    def loss(self, margin: ArrayLike, y: ArrayLike, weight: ArrayLike | None = None) -> float:
        """Weighted mean binary cross-entropy (XGBoost's ``logloss``, p clamped to [eps, 1-eps])."""
        m, _ = _scalar_margin(margin)
        t = self._labels(y, m.shape[0])
        w = _weights(weight, m.shape[0])
        p = np.clip(sigmoid(m), LOSS_EPS, 1.0 - LOSS_EPS)
        nll = -(t * np.log(p) + (1.0 - t) * np.log1p(-p))
        return _weighted_mean(nll, w)

    def predict_proba(self, margin: ArrayLike) -> np.ndarray:
        """Probability of class 1, shaped like the margin."""
        m, shape = _scalar_margin(margin)
        return sigmoid(m).reshape(shape)

    def base_score_stats(self, y: ArrayLike, weight: ArrayLike | None = None) -> np.ndarray:
        """Additive statistic ``[sum w*y, sum w]``."""
        return _mean_stats(self._labels(y, None), weight)

    def base_score(self, stats: ArrayLike | None = None, *, mode: str = "zero") -> np.ndarray:
        """Initial margin ``(1,)``: 0, or ``logit(mean y)`` (``mode="average"``)."""
        _base_mode(mode)
        if mode == "zero":
            return np.zeros(1, dtype=np.float64)
        sum_wy, sum_w = _stats(stats, (2,))
        if sum_w <= 0:
            raise ValueError("base_score needs a positive total weight")
        mean = sum_wy / sum_w
        if not 0.0 < mean < 1.0:
            raise ValueError(f"logit of the label mean is infinite (mean = {mean})")
        return np.array([np.log(mean) - np.log1p(-mean)])


@dataclass(frozen=True)
class SquaredError:
    """Squared error ``(margin - y)^2 / 2``, XGBoost's ``reg:squarederror``."""

    name: ClassVar[str] = "reg:squarederror"
    link: ClassVar[str] = "identity"
    metric: ClassVar[str] = "rmse"
    n_outputs: ClassVar[int] = 1

    def gradients(
        self, margin: ArrayLike, y: ArrayLike, weight: ArrayLike | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(g, h) = ((margin - y) w, w)`` with the margin's shape ((n,) or (n, 1))."""
        m, shape = _scalar_margin(margin)
        t = _real_labels(y, m.shape[0])
        w = _weights(weight, m.shape[0])
        return ((m - t) * w).reshape(shape), w.copy().reshape(shape)

    def loss(self, margin: ArrayLike, y: ArrayLike, weight: ArrayLike | None = None) -> float:
        """Weighted root mean squared error (XGBoost's ``rmse``)."""
        m, _ = _scalar_margin(margin)
        t = _real_labels(y, m.shape[0])
        w = _weights(weight, m.shape[0])
        return float(np.sqrt(_weighted_mean((m - t) ** 2, w)))

    def base_score_stats(self, y: ArrayLike, weight: ArrayLike | None = None) -> np.ndarray:
        """Additive statistic ``[sum w*y, sum w]``."""
        return _mean_stats(_real_labels(y, None), weight)

    def base_score(self, stats: ArrayLike | None = None, *, mode: str = "zero") -> np.ndarray:
        """Initial margin ``(1,)``: 0, or the weighted mean of ``y`` (``mode="average"``)."""
        _base_mode(mode)
        if mode == "zero":
            return np.zeros(1, dtype=np.float64)
        sum_wy, sum_w = _stats(stats, (2,))
        if sum_w <= 0:
            raise ValueError("base_score needs a positive total weight")
        return np.array([sum_wy / sum_w])


def _stats(stats: ArrayLike | None, shape: tuple[int, ...]) -> np.ndarray:
    if stats is None:
        raise ValueError("mode='average' needs the summed base_score_stats")
    s = np.asarray(stats, dtype=np.float64)
    if s.shape != shape or not np.isfinite(s).all():
        raise ValueError(f"base_score stats must be finite with shape {shape}, got {s.shape}")
    return s


def _weighted_mean(values: np.ndarray, w: np.ndarray) -> float:
    total = w.sum()
    if total <= 0:
        raise ValueError("the loss needs a positive total weight")
    return float(np.dot(w, values) / total)


Objective = Union[Softmax, Logistic, SquaredError]
#: Wire names of the objectives (``shared.protocol.messages.fedscs_xgb.Objective``).
OBJECTIVES = ("softmax", "logistic", "squared_error")


def objective_named(name: str, n_classes: int = 0) -> Objective:
    """The objective for a wire name; ``n_classes`` is used by ``softmax`` only."""
    if name == "softmax":
        return Softmax(n_classes)
    if name == "logistic":
        return Logistic()
    if name == "squared_error":
        return SquaredError()
    raise ValueError(f"unknown objective {name!r}; expected one of {OBJECTIVES}")
