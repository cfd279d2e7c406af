"""The local-only baseline: what this gateway would reach alone, as a federated model must beat it.

The gateway grows a CART on its own training windows (``algorithms.fedga_cart``, the CART rules
of scikit-learn's defaults), its depth picked by K-fold cross-validation on those windows (the
local baseline of FedGA-Tree's paper), and scores it on its held-out windows exactly as it scores a
federated model (``evaluation.evaluate_model``): the server receives the same counts as for any
evaluation, never the model or a window.
"""

from __future__ import annotations

import numpy as np

from shared.model import TreeEnsemble
from shared.model.inference import as_float32_values
from shared.protocol.messages.evaluation import EvaluateRequest, EvaluationReply, LocalBaselineRequest

from .algorithms.fedga_cart import Samples, cv_scores, grow, to_ensemble
from .dispatcher import RequestRejected
from .evaluation import evaluate_model
from .training_data import LabelledData, class_ids

__all__ = ["cross_validated_depth", "local_baseline", "local_model"]


def cross_validated_depth(
    X: np.ndarray, target: np.ndarray, *, regression: bool, n_classes: int, max_depth: int, folds: int, seed: int
) -> int:
    """The CART depth in ``1..max_depth`` with the best mean validation score (macro-F1, or R²
    for regression) over ``folds`` folds drawn from ``seed``; the shallowest on ties. One tree of
    ``max_depth`` per fold serves every depth: CART is greedy top-down, so the depth-j tree is
    that tree cut at level j.

    Examples
    --------
    >>> X = np.arange(40.0)[:, None]
    >>> cross_validated_depth(X, (X[:, 0] >= 20).astype(int), regression=False, n_classes=2, max_depth=4,
    ...                       folds=4, seed=0)
    1
    """
    depths = np.arange(1, max_depth + 1)
    held_out = np.array_split(np.random.default_rng(seed).permutation(X.shape[0]), folds)
    scores = cv_scores(X, target, held_out, depths, regression=regression, n_classes=n_classes)
    return int(depths[int(np.argmax(scores.mean(axis=0)))])


def local_model(data: LabelledData, request: LocalBaselineRequest) -> TreeEnsemble:
    """The gateway's own CART on ``data`` (its training windows), depth by cross-validation."""
    X = as_float32_values(data.X).astype(np.float64)  # the split rule: features compared as float32
    if request.regression:
        target = np.asarray(data.y, dtype=np.float64)
        if not np.isfinite(target).all():
            raise RequestRejected("bad_data", "regression targets must be finite")
    else:
        target = class_ids(np.asarray(data.y), request.classes)
        X, target = X[target >= 0], target[target >= 0]
    if X.shape[0] < request.cv_folds:
        raise RequestRejected(
            "too_few_samples",
            f"the local-only baseline needs at least {request.cv_folds} "
            f"labelled training windows, this gateway has {X.shape[0]}",
        )
    n_classes = len(request.classes)
    depth = cross_validated_depth(
        X,
        target,
        regression=request.regression,
        n_classes=n_classes,
        max_depth=request.max_depth,
        folds=request.cv_folds,
        seed=request.seed,
    )
    grown = grow(Samples.of(X, target, regression=request.regression, n_classes=n_classes), depth)
    names = data.feature_names or tuple(f"f{j}" for j in range(X.shape[1]))
    return to_ensemble(
        grown,
        0,
        feature_names=names,
        classes=request.classes,
        feature_set_version=request.feature_set_version,
        metadata={"algorithm": "local_cart", "max_depth": depth},
    )


def local_baseline(train: LabelledData, holdout: LabelledData, request: LocalBaselineRequest) -> EvaluationReply:
    """Counts of :func:`local_model` (fitted on ``train``) scored on ``holdout``."""
    model = local_model(train, request)
    return evaluate_model(
        model, holdout, EvaluateRequest(b"", request.feature_set_version, score_bins=request.score_bins)
    )
