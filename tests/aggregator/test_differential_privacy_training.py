"""FedSCS-XGB with differential privacy: noisy fleet sums, epsilon reported, and the noise is
really there (the decoded sums differ from the true ones)."""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.algorithms import FedSCSXGB
from aggregator.simulate import simulate
from shared.differential_privacy import epsilon_from_rho
from tests.aggregator.test_fedscs_xgb import make_clients


def test_noisy_training_reports_the_epsilon_it_spent() -> None:
    clients = make_clients(8)
    config = FedSCSXGB(n_rounds=2, max_depth=2, n_bins=16, dp_noise_multiplier=2.0)
    model = simulate(config, clients)
    meta = model.metadata
    # every release costs 1 / (2 z^2) when every gateway answered
    assert meta["dp_rho"] == pytest.approx(meta["dp_releases"] / (2 * 2.0 ** 2))
    assert meta["dp_epsilon"] == pytest.approx(epsilon_from_rho(meta["dp_rho"], 1e-5))
    assert meta["dp_releases"] > 4 and model.n_trees == 6


def test_noise_changes_the_model_and_more_noise_changes_it_more() -> None:
    clients = make_clients(9)
    X = np.concatenate([c.X for c in clients]).astype(np.float32)
    y = np.concatenate([c.y for c in clients])
    exact = simulate(FedSCSXGB(n_rounds=3, max_depth=3, n_bins=16), clients)
    mild = simulate(FedSCSXGB(n_rounds=3, max_depth=3, n_bins=16, dp_noise_multiplier=0.05), clients)
    heavy = simulate(FedSCSXGB(n_rounds=3, max_depth=3, n_bins=16, dp_noise_multiplier=50.0), clients)
    accuracy = lambda m: float(np.mean(m.predict(X) == y))  # noqa: E731
    assert exact.trees != mild.trees
    assert accuracy(mild) > accuracy(heavy) - 0.02
    assert heavy.metadata["dp_epsilon"] < mild.metadata["dp_epsilon"]


def test_dp_needs_secure_aggregation_and_classification() -> None:
    with pytest.raises(ValueError, match="secure aggregation"):
        FedSCSXGB(dp_noise_multiplier=1.0, secure_aggregation=False)
    with pytest.raises(ValueError, match="classification"):
        FedSCSXGB(dp_noise_multiplier=1.0, objective="squared_error")


def test_noisy_forest_reports_its_epsilon_and_degrades_with_noise() -> None:
    from aggregator.algorithms import FedForest

    clients = make_clients(12)
    X = np.concatenate([c.X for c in clients])
    y = np.concatenate([c.y for c in clients])
    base = dict(n_trees=4, max_depth=4, n_bins=16, bootstrap=False)
    exact = simulate(FedForest(**base), clients)
    mild = simulate(FedForest(**base, dp_noise_multiplier=0.05), clients)
    heavy = simulate(FedForest(**base, dp_noise_multiplier=50.0), clients)
    accuracy = lambda m: float(np.mean(m.predict(X) == y))  # noqa: E731
    assert exact.trees != mild.trees and accuracy(mild) > accuracy(heavy) - 0.02
    meta = mild.metadata
    assert meta["dp_rho"] == pytest.approx(meta["dp_releases"] / (2 * 0.05 ** 2))
    with pytest.raises(ValueError, match="bootstrap=False"):
        FedForest(dp_noise_multiplier=1.0)
