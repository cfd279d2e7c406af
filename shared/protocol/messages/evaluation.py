"""Federated evaluation: a model goes to the clients, counts come back -- never predictions.

The client scores the model on its held-out (or training) labelled windows and answers with
additive statistics only: the confusion matrix, per-class histograms of predicted probabilities
(enough for a one-vs-rest AUC), the summed log-loss; for regression, error and target sums.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np

from ..envelope import message_type
from ..schema import ArraySpec

COUNTS = ("int32", "int64")


@message_type("evaluate")
@dataclass(frozen=True)
class EvaluateRequest:
    """Score ``model`` (``TreeEnsemble.to_cbor()``) on the client's ``split`` of
    ``feature_set_version``. ``client_index``: this client's index in the model's client list
    (appended as the last input when the model splits on the client; the truth when
    ``target="client"``), -1 if it has none. ``score_bins``: histogram resolution for AUCs."""

    model: bytes
    feature_set_version: str
    split: Literal["train", "holdout"] = "holdout"
    target: Literal["label", "client"] = "label"
    client_index: int = -1
    score_bins: int = 100

    def __post_init__(self) -> None:
        if not 2 <= self.score_bins <= 10_000:
            raise ValueError("score_bins must lie in 2..10000")
        if self.client_index < -1:
            raise ValueError("client_index must be >= -1")


@message_type("evaluation")
@dataclass(frozen=True)
class EvaluationReply:
    """``confusion[i, j]``: samples of true class i predicted as j (model class order);
    ``score_histogram[c, b, t]``: samples whose probability of class c falls in bin b, t = 1 if
    their true class is c; ``log_loss_sum`` (classification). Regression: the error and target
    sums. ``unknown_labels``: samples whose label the model does not know (left out)."""

    n_samples: int
    confusion: Annotated[np.ndarray, ArraySpec(COUNTS, ndim=2)] = field(
        default_factory=lambda: np.zeros((0, 0), np.int64)
    )
    score_histogram: Annotated[np.ndarray, ArraySpec(COUNTS, ndim=3)] = field(
        default_factory=lambda: np.zeros((0, 0, 2), np.int64)
    )
    log_loss_sum: float = 0.0
    squared_error_sum: float = 0.0
    absolute_error_sum: float = 0.0
    target_sum: float = 0.0
    target_sum_squares: float = 0.0
    unknown_labels: int = 0

    def __post_init__(self) -> None:
        c = self.confusion
        if c.shape[0] != c.shape[1] or (c.size and c.min() < 0):
            raise ValueError("confusion must be a square matrix of counts >= 0")
        if int(c.sum()) > self.n_samples:
            raise ValueError("the confusion matrix counts more samples than n_samples")
        h = self.score_histogram
        if h.size and (h.shape[0] != c.shape[0] or h.shape[2] != 2 or h.min() < 0):
            raise ValueError("score_histogram must be (classes, bins, 2) counts >= 0")
        for name in ("log_loss_sum", "squared_error_sum", "absolute_error_sum", "target_sum_squares"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.n_samples < 0 or self.unknown_labels < 0:
            raise ValueError("counts must be >= 0")


@message_type("evaluate.local_baseline")
@dataclass(frozen=True)
class LocalBaselineRequest:
    """Train this gateway's own model on its training windows of ``feature_set_version`` -- a
    CART whose depth (1 to ``max_depth``) ``cv_folds``-fold cross-validation picks, folds drawn
    from ``seed`` -- and score it on its held-out windows; the answer is an ``EvaluationReply``
    (counts only), as for a federated model. ``classes``: the federated model's classes, in whose
    order the confusion matrix is counted (windows of other labels are left out of training and
    counted as unknown); empty for a regression target."""

    feature_set_version: str
    classes: tuple[str, ...] = ()
    regression: bool = False
    max_depth: int = 8
    cv_folds: int = 5
    seed: int = 0
    score_bins: int = 100

    def __post_init__(self) -> None:
        if not 1 <= self.max_depth <= 15:
            raise ValueError(f"max_depth must lie in 1..15, got {self.max_depth}")
        if not 2 <= self.cv_folds <= 20:
            raise ValueError(f"cv_folds must lie in 2..20, got {self.cv_folds}")
        if not 2 <= self.score_bins <= 10_000:
            raise ValueError("score_bins must lie in 2..10000")
        if self.regression == bool(self.classes):
            raise ValueError("a classifier's baseline needs its classes, a regressor's none")
        if len(set(self.classes)) != len(self.classes) or len(self.classes) > 4096:
            raise ValueError("classes must be distinct (at most 4096)")
