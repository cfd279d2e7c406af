"""A job trains on the windows a gateway held when the job began, although the gateway keeps
storing and labelling windows while the job runs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedForest, FedSCSXGB
from edge_client.training_data import ClientData, LabelledData


@dataclass
class GrowingData:
    """A gateway whose store gains 7 labelled windows every time anything reads it."""

    full: ClientData
    n: int = 60
    reads: int = 0

    @property
    def client_id(self) -> str:
        return self.full.client_id

    def labelled(self, feature_set_version: str) -> LabelledData:
        self.reads += 1
        rows = slice(0, self.n)
        self.n = min(self.n + 7, self.full.X.shape[0])
        return LabelledData(self.full.X[rows], self.full.y[rows], ())

    def holdout(self, feature_set_version: str) -> LabelledData:
        return self.full.holdout(feature_set_version)


def fleet(seed: int) -> list[ClientData]:
    rng = np.random.default_rng(seed)
    clients = []
    for k in range(3):
        X = rng.normal(size=(400, 5)) + 0.3 * k
        y = np.where(X[:, 0] + X[:, 1] > 0.3 * k, "push", "rest")
        clients.append(ClientData(f"gw-{k + 1}", X, y))
    return clients


@pytest.mark.parametrize(
    "algorithm",
    [
        FedSCSXGB(n_rounds=3, max_depth=3, n_bins=16, protocol="histogram"),
        FedForest(n_trees=4, max_depth=4, n_bins=8, protocol="histogram"),
    ],
    ids=["fedscs-xgb", "fedforest"],
)
def test_windows_stored_mid_job_do_not_change_the_job(algorithm) -> None:
    full = fleet(0)
    growing = [GrowingData(c) for c in full]
    model = aggregator.simulate(algorithm, growing, seed=0)
    assert all(g.reads == 1 for g in growing), [g.reads for g in growing]
    first = [ClientData(c.client_id, c.X[:60], c.y[:60]) for c in full]
    assert model == aggregator.simulate(algorithm, first, seed=0)
