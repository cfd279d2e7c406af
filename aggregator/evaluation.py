"""Federated evaluation, server side: send a model, sum the clients' counts, compute metrics.

Metrics come from additive statistics only (``EvaluationReply``), so the pooled numbers are
exactly what a centralized evaluation on the union of the clients' windows would give --
except the AUC, computed from per-class probability histograms (``score_bins`` bins; ties
within a bin count half, so it is exact up to the bin width).

Gateways hold windows out only when started with ``--holdout-fraction``; when none does, the
evaluation raises :class:`NoHeldOutData` (a ``TrainingError`` saying so), which a caller that
already saved its model can report as a note rather than a failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from shared.model import TreeEnsemble, client_index, uses_client_index
from shared.protocol.messages.evaluation import EvaluateRequest, EvaluationReply, LocalBaselineRequest

from .jobs import FederatedJob, TrainingError
from .rounds import QuorumNotReached

__all__ = [
    "Evaluation",
    "NoHeldOutData",
    "auc_from_histogram",
    "evaluate_federated",
    "evaluate_local_only",
    "metrics_of",
]

NO_HOLDOUT = "no_holdout_windows"


class NoHeldOutData(TrainingError):
    """No selected gateway keeps held-out windows: there is nothing to score a model on."""


def auc_from_histogram(histogram: np.ndarray) -> float:
    """ROC AUC from ``(bins, 2)`` counts of [negatives, positives] by score bin (ascending);
    pairs in the same bin count half. NaN without positives or negatives."""
    neg, pos = histogram[:, 0].astype(np.float64), histogram[:, 1].astype(np.float64)
    if neg.sum() == 0 or pos.sum() == 0:
        return float("nan")
    below = np.cumsum(neg) - neg  # negatives in lower bins
    return float((pos * (below + 0.5 * neg)).sum() / (pos.sum() * neg.sum()))


@dataclass(frozen=True)
class Evaluation:
    """Pooled metrics (``metrics``) and each client's own (``per_client``), the summed confusion
    matrix (classification; rows true, columns predicted) and the clients ``left_out`` of the
    evaluation with their reasons (e.g. no held-out windows)."""

    metrics: dict[str, float]
    per_client: dict[str, dict[str, float]] = field(default_factory=dict)
    confusion: np.ndarray | None = None
    left_out: dict[str, str] = field(default_factory=dict)


def metrics_of(reply: EvaluationReply, classifier: bool) -> dict[str, float]:
    """Metrics of one (possibly summed) reply: accuracy, balanced accuracy, macro-F1, log loss,
    macro one-vs-rest AUC; or MSE, RMSE, MAE, R^2."""
    n = reply.n_samples - reply.unknown_labels
    if not classifier:
        if n <= 0:
            return {"n": 0.0}
        mse = reply.squared_error_sum / n
        variance = reply.target_sum_squares / n - (reply.target_sum / n) ** 2
        return {
            "n": float(n),
            "mse": mse,
            "rmse": float(np.sqrt(mse)),
            "mae": reply.absolute_error_sum / n,
            "r2": 1.0 - mse / variance if variance > 0 else float("nan"),
        }
    c = reply.confusion.astype(np.float64)
    total = c.sum()
    if total == 0:
        return {"n": 0.0}
    tp = np.diag(c)
    support, predicted = c.sum(axis=1), c.sum(axis=0)
    present = support > 0
    recall = np.divide(tp, support, out=np.zeros_like(tp), where=support > 0)
    precision = np.divide(tp, predicted, out=np.zeros_like(tp), where=predicted > 0)
    f1 = np.divide(2 * precision * recall, precision + recall, out=np.zeros_like(tp), where=precision + recall > 0)
    scored = present | (predicted > 0)  # sklearn's macro average over labels present or predicted
    aucs = (
        [auc_from_histogram(reply.score_histogram[k]) for k in range(c.shape[0])] if reply.score_histogram.size else []
    )
    aucs = [a for a in aucs if np.isfinite(a)]
    return {
        "n": float(total),
        "accuracy": float(tp.sum() / total),
        "balanced_accuracy": float(recall[present].mean()),
        "macro_f1": float(f1[scored].mean()),
        "log_loss": float(reply.log_loss_sum / total),
        "auc": float(np.mean(aucs)) if aucs else float("nan"),
    }


def _sum(replies: list[EvaluationReply]) -> EvaluationReply:
    first = replies[0]
    return EvaluationReply(
        n_samples=sum(r.n_samples for r in replies),
        confusion=sum((r.confusion for r in replies), np.zeros_like(first.confusion)),
        score_histogram=sum((r.score_histogram for r in replies), np.zeros_like(first.score_histogram)),
        log_loss_sum=sum(r.log_loss_sum for r in replies),
        squared_error_sum=sum(r.squared_error_sum for r in replies),
        absolute_error_sum=sum(r.absolute_error_sum for r in replies),
        target_sum=sum(r.target_sum for r in replies),
        target_sum_squares=sum(r.target_sum_squares for r in replies),
        unknown_labels=sum(r.unknown_labels for r in replies),
    )


def evaluate_federated(
    job: FederatedJob,
    model: TreeEnsemble,
    *,
    split: Literal["train", "holdout"] = "holdout",
    target: Literal["label", "client"] = "label",
    clients: list[str] | None = None,
    score_bins: int = 100,
) -> Evaluation:
    """Score ``model`` on every client's ``split`` ("holdout" or "train") and pool the counts.
    Raises :class:`NoHeldOutData` when every client refused for want of held-out windows, and
    the job's ``QuorumNotReached`` when too few answered for other reasons (named per client)."""
    selected = clients or job.clients
    data = model.to_cbor()
    needs_index = uses_client_index(model) or target == "client"
    requests = {
        c: EvaluateRequest(
            data, model.feature_set_version, split, target, client_index(model, c) if needs_index else -1, score_bins
        )
        for c in selected
    }
    return _pooled(job, requests, selected, model.is_classifier, len(model.classes))


def evaluate_local_only(
    job: FederatedJob,
    model: TreeEnsemble,
    *,
    clients: list[str] | None = None,
    max_depth: int = 8,
    seed: int = 0,
    score_bins: int = 100,
) -> Evaluation:
    """The local-only baseline beside ``model``: every client trains a CART on its own training
    windows alone (``LocalBaselineRequest``: depth by cross-validation up to ``max_depth``) and
    scores it on its held-out windows; pooled and per client as :func:`evaluate_federated`, in
    ``model``'s classes."""
    selected = clients or job.clients
    classes = tuple(str(c) for c in model.classes)
    body = LocalBaselineRequest(
        model.feature_set_version, classes, not model.is_classifier, max_depth, seed=seed, score_bins=score_bins
    )
    return _pooled(job, dict.fromkeys(selected, body), selected, model.is_classifier, len(classes))


def _pooled(job: FederatedJob, requests: dict, selected: list[str], classifier: bool, n_classes: int) -> Evaluation:
    """Ask ``requests`` (each answered by an ``EvaluationReply``) and pool the usable replies."""
    try:
        replies = job.ask(requests, selected, EvaluationReply)
    except QuorumNotReached as exc:
        errors = exc.result.errors
        if not exc.result.replies and not exc.result.timed_out and all(e.code == NO_HOLDOUT for e in errors.values()):
            raise NoHeldOutData(
                "no held-out windows on any gateway (start gateways with --holdout-fraction 0.2)"
            ) from None
        raise
    usable = {}
    for client, reply in replies.items():
        if classifier and reply.confusion.shape != (n_classes, n_classes):
            job.reject(client, f"confusion matrix {reply.confusion.shape} for {n_classes} classes")
            continue
        usable[client] = reply
    if not usable:
        raise TrainingError("no client returned a usable evaluation")
    pooled = _sum(list(usable.values()))
    left_out = job.results[-1].failures()
    left_out.update((c, "its evaluation did not fit the model") for c in replies if c not in usable)
    return Evaluation(
        metrics=metrics_of(pooled, classifier),
        per_client={c: metrics_of(r, classifier) for c, r in usable.items()},
        confusion=pooled.confusion if classifier else None,
        left_out=dict(sorted(left_out.items())),
    )
