"""Private FedSCS-XGB regression is invariant to a constant offset of the targets.

Oracle: the same clients with ``y + c`` boost the same trees on the private protocol with secure
aggregation -- same features, thresholds, default directions and layout, leaf weights equal up
to float64 rounding of ``y + c`` -- and the base score and every prediction move by exactly
``c``, for c in {0, 1e3, 1e5, 1e6, 1e9}. Gradients are ``prediction - y``: only the opening
(base score, fixed point of the gradients) could see the offset, and before the fix it summed raw
targets and refused |y| >= 2**20, and took the gradients' bound from sum(y^2).
"""

from __future__ import annotations

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedSCSXGB
from aggregator.estimators import FedSCSXGBRegressor
from shared.model import TreeEnsemble
from tests.aggregator.test_fedforest_offsets import OFFSETS, held_out, regression_clients, shape, spread_clients


def boost(c: float) -> TreeEnsemble:
    clients, _, _ = regression_clients(c)
    config = FedSCSXGB(
        objective="squared_error", protocol="histogram", secure_aggregation=True, n_rounds=6, max_depth=4, n_bins=32
    )
    return aggregator.simulate(config, clients, seed=1)


def leaf_weights(model: TreeEnsemble) -> np.ndarray:
    return np.concatenate([t.value[:, 0] for t in model.trees])


def test_offset_targets_boost_the_same_trees_and_shift_the_predictions() -> None:
    base = boost(0.0)
    assert sum(t.n_nodes for t in base.trees) > 6 * 9  # real trees, not stumps
    X, _ = held_out()
    base_prediction = base.predict(X).ravel()
    for c in OFFSETS[1:]:
        model = boost(c)
        assert shape(model) == shape(base), f"c={c:g}"
        # gradients are (base + f(x)) - (y + c): float64 rounding of y + c, ~1e-16 c per sample
        tolerance = 1e-12 + 1e-15 * c
        np.testing.assert_allclose(leaf_weights(model), leaf_weights(base), rtol=0, atol=tolerance)
        np.testing.assert_allclose(np.asarray(model.base_score) - c, base.base_score, rtol=0, atol=tolerance)
        np.testing.assert_allclose(model.predict(X).ravel() - c, base_prediction, rtol=0, atol=4 * tolerance)


def test_estimator_refuses_a_target_spread_beyond_the_bound_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"2\*\*20") as info:
        FedSCSXGBRegressor(n_estimators=2, max_depth=2, protocol="histogram").fit(spread_clients(3e6))
    assert "\n" not in str(info.value), str(info.value)
