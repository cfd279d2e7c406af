"""The client half of federated evaluation: score a model on local labelled windows, answer
with counts (``EvaluationReply``) -- the predictions themselves stay on the gateway."""

from __future__ import annotations

import numpy as np

from shared.model import ModelValidationError, TreeEnsemble, model_inputs, uses_client_index
from shared.protocol.errors import DecodeError
from shared.protocol.messages.evaluation import EvaluateRequest, EvaluationReply

from .dispatcher import RequestRejected
from .training_data import LabelledData, class_ids, label_strings

__all__ = ["evaluate_model", "load_model"]

#: Largest model accepted for evaluation.
MAX_MODEL_BYTES = 64 << 20
PROBABILITY_FLOOR = 1e-15


def load_model(data: bytes) -> TreeEnsemble:
    try:
        return TreeEnsemble.from_cbor(data, max_bytes=MAX_MODEL_BYTES)
    except (ModelValidationError, DecodeError) as exc:
        raise RequestRejected("bad_model", f"the model is invalid: {exc}") from None


def evaluate_model(model: TreeEnsemble, data: LabelledData, request: EvaluateRequest) -> EvaluationReply:
    """Additive scores of ``model`` on ``data`` (see ``EvaluationReply``)."""
    if model.n_features - int(uses_client_index(model)) != data.X.shape[1]:
        raise RequestRejected(
            "feature_mismatch", f"the model takes {model.n_features} inputs, this client has {data.X.shape[1]} features"
        )
    X = model_inputs(model, data.X, request.client_index)
    if not model.is_classifier:
        y = np.asarray(data.y, dtype=np.float64)
        err = model.predict(X) - y
        return EvaluationReply(
            n_samples=int(y.size),
            squared_error_sum=float(err @ err),
            absolute_error_sum=float(np.abs(err).sum()),
            target_sum=float(y.sum()),
            target_sum_squares=float(y @ y),
        )
    classes = tuple(label_strings(np.asarray(model.classes))[0].tolist())
    if request.target == "client":
        truth = np.full(X.shape[0], request.client_index, dtype=np.int64)
    else:
        truth = class_ids(np.asarray(data.y), classes)
    known = (truth >= 0) & (truth < len(classes))
    C = len(classes)
    proba = model.predict_proba(X[known]) if known.any() else np.zeros((0, C))
    t = truth[known]
    predicted = np.argmax(proba, axis=1)
    confusion = np.bincount(t * C + predicted, minlength=C * C).reshape(C, C)
    bins = request.score_bins
    slot = np.minimum((proba * bins).astype(np.int64), bins - 1)  # (n, C)
    positive = (t[:, None] == np.arange(C)[None, :]).astype(np.int64)
    flat = (np.arange(C)[None, :] * bins * 2 + slot * 2 + positive).ravel()
    histogram = np.bincount(flat, minlength=C * bins * 2).reshape(C, bins, 2)
    p_true = proba[np.arange(t.size), t] if t.size else np.zeros(0)
    return EvaluationReply(
        n_samples=int(X.shape[0]),
        confusion=confusion.astype(np.int64),
        score_histogram=histogram.astype(np.int64),
        log_loss_sum=float(-np.log(np.maximum(p_true, PROBABILITY_FLOOR)).sum()),
        unknown_labels=int((~known).sum()),
    )
