"""FedForest §F.4: is there covariate shift between the clients? A federated forest learns to
tell the clients apart from X alone (the client index as the target, Gini over clients from
summed counts); a large root gain or a high one-vs-rest AUC rejects "X independent of H", and the
forest's impurity importances name the features whose distributions differ between clients.

Privacy: the target is the client itself, so the per-client statistics of the paper's protocol
(``protocol="sketches"``) are what it needs; the histogram protocol cannot predict the client.
The aggregator learns how each client's feature distributions differ (PRIVACY.md): a research
diagnostic, run with the fleet operator's consent."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from shared.model import TreeEnsemble

from .algorithms.fedforest import FedForest
from .evaluation import evaluate_federated
from .jobs import FederatedJob

__all__ = ["CovariateShiftReport", "covariate_shift"]


@dataclass(frozen=True)
class CovariateShiftReport:
    """``root_gain``: the largest Gini decrease of a root split relative to the root impurity
    (0: no feature separates the clients); ``auc``: macro one-vs-rest AUC of the client classifier
    on ``split``; ``importance``: (feature, share of the impurity decrease), largest first."""

    root_gain: float
    auc: float
    importance: list[tuple[str, float]]
    shifted: bool
    model: TreeEnsemble

    def summary(self, top: int = 5) -> str:
        names = ", ".join(f"{n} ({v:.2f})" for n, v in self.importance[:top])
        verdict = "covariate shift" if self.shifted else "no evidence of covariate shift"
        return f"{verdict}: root gain {self.root_gain:.3f}, client AUC {self.auc:.3f}; separating features: {names}"


def covariate_shift(
    job: FederatedJob,
    *,
    forest: FedForest | None = None,
    seed: int = 0,
    split: Literal["train", "holdout"] = "train",
    auc_threshold: float = 0.7,
) -> CovariateShiftReport:
    """Train the client discriminator (``forest``; default 20 trees of depth 4 that consider every
    feature at every node, so the root gain is the best any feature achieves) and score it.

    ``split="train"`` scores in-sample (optimistic; the default because clients need no held-out
    data for it); ``"holdout"`` uses the clients' held-out windows.
    """
    base = forest or FedForest(n_trees=20, max_depth=4, min_samples_leaf=5, max_features=None)
    result = replace(
        base,
        target="client",
        client_splits=False,
        task="classification",
        criterion=None,
        classes=None,
        protocol="sketches",
        secure_aggregation=False,
    ).fit_with_diagnostics(job, seed=seed)
    evaluation = evaluate_federated(job, result.model, split=split, target="client")
    names = result.model.feature_names
    ranked = sorted(zip(names, result.importance.tolist()), key=lambda kv: -kv[1])
    auc = evaluation.metrics.get("auc", float("nan"))
    return CovariateShiftReport(result.root_gain, auc, ranked, bool(auc >= auc_threshold), result.model)
