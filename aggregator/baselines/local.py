"""Local Learning and Local Ensembling (Hauschild et al. 2022), through the real protocol.

Each client's forest is grown by FedForest in a sub-job that contains that client alone, so it
is exactly the forest the client would grow on its own data (same candidates, same stopping
rules) -- and the comparison with FedForest measures federation, not implementation details.
Both use the fleet's label vocabulary so every model predicts the same classes.

Privacy: a sum over one client is that client's statistics, so secure aggregation cannot hide
anything in these sub-jobs and is turned off: the aggregator sees each client's histograms
(``protocol="histogram"``) or sketches. They are research baselines (simulations, the demo's
comparison), not a way to train a deployed model (PRIVACY.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from shared.model import TreeEnsemble

from ..algorithms.fedforest import FedForest
from ..algorithms.fleet_data import describe_fleet
from ..jobs import FederatedJob

__all__ = ["LocalEnsembling", "LocalLearning"]


def _local_forests(
    forest: FedForest, job: FederatedJob, seed: int, n_trees: int | None = None
) -> dict[str, TreeEnsemble]:
    fleet = describe_fleet(job, forest.feature_set_version, regression=forest.regression, classes=forest.classes)
    local = replace(
        forest,
        classes=None if forest.regression else fleet.classes,
        n_trees=n_trees or forest.n_trees,
        client_splits=False,
        secure_aggregation=False,
    )
    out = {}
    for client in fleet.clients:
        sub = FederatedJob(job.engine, [client], job_id=f"{job.job_id}.local.{client}", settings=job.settings)
        out[client] = local.fit(sub, seed=seed)
    return out


@dataclass(frozen=True)
class LocalLearning:
    """Every client trains on its own data only; ``fit`` returns ``{client_id: forest}``."""

    forest: FedForest = field(default_factory=FedForest)

    name: ClassVar[str] = "local_learning"

    def fit(self, job: FederatedJob, *, seed: int = 0) -> dict[str, TreeEnsemble]:
        return _local_forests(self.forest, job, seed)


@dataclass(frozen=True)
class LocalEnsembling:
    """One-shot ensembling: every client grows ``trees_per_client`` trees (default: the forest's
    ``n_trees`` split evenly over the clients, at least 1) and the server averages all of them."""

    forest: FedForest = field(default_factory=FedForest)
    trees_per_client: int | None = None

    name: ClassVar[str] = "local_ensembling"

    def fit(self, job: FederatedJob, *, seed: int = 0) -> TreeEnsemble:
        per_client = self.trees_per_client or max(1, self.forest.n_trees // len(job.clients))
        forests = _local_forests(self.forest, job, seed, per_client)
        first = next(iter(forests.values()))
        trees = tuple(t for f in forests.values() for t in f.trees)
        return TreeEnsemble(
            trees=trees,
            kind="forest",
            link="identity",
            n_outputs=first.n_outputs,
            feature_names=first.feature_names,
            feature_set_version=first.feature_set_version,
            classes=first.classes,
            tree_output=np.full(len(trees), -1, dtype=np.int32),
            metadata={**first.metadata, "algorithm": self.name, "n_trees": len(trees), "clients": ",".join(forests)},
        )
