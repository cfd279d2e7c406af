"""Periodic retraining continues a deployed classifier although the fleet learned a new label:
the model's classes are kept (``init_model`` implies ``classes``), windows of the new label sit out."""

from __future__ import annotations

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedSCSXGB
from edge_client.training_data import ClientData


def fleet(labels: tuple[str, ...], seed: int = 0) -> list[ClientData]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(3):
        X = rng.normal(size=(300, 4))
        y = np.array(labels)[np.digitize(X[:, 0] + 0.5 * X[:, 1], np.linspace(-1, 1, len(labels) - 1))]
        out.append(ClientData(f"gw-{k + 1}", X, y))
    return out


@pytest.mark.parametrize("secure", [True, False])
def test_continuing_keeps_the_models_classes_and_leaves_new_labels_out(secure: bool) -> None:
    first = aggregator.simulate(
        FedSCSXGB(n_rounds=2, max_depth=3, n_bins=16, protocol="histogram", secure_aggregation=secure),
        fleet(("lie", "push", "sit")),
    )
    grown = fleet(("lie", "push", "sit", "tilt"), seed=1)
    more = aggregator.simulate(
        FedSCSXGB(
            n_rounds=2, max_depth=3, n_bins=16, protocol="histogram", secure_aggregation=secure, init_model=first
        ),
        grown,
    )
    assert tuple(more.classes) == tuple(first.classes) and more.n_trees == first.n_trees + 2 * 3
    fixed = aggregator.simulate(
        FedSCSXGB(
            n_rounds=2,
            max_depth=3,
            n_bins=16,
            protocol="histogram",
            secure_aggregation=secure,
            init_model=first,
            classes=("lie", "push", "sit"),
        ),
        grown,
    )
    assert more == fixed  # continuing == naming the model's classes explicitly
