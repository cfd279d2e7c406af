"""Range checks of the exact fleet sums (FedSCS-XGB histogram and atoms, FedForest histogram)
against one lying gateway, end to end in simulation.

Oracle: in plain mode (each vector visible) the liar is named in the job's record and the model
is bit for bit that of the same gateway refusing those requests instead (the dropout path); under
secure aggregation the job fails with one line naming the violated rule. Before the checks every
one of these runs registered a model built on the lie.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from aggregator.algorithms.histogram_growth import GrowthParams
from aggregator.algorithms.levelwise_growth import grow_round_with_gains
from aggregator.algorithms.sum_checks import SumViolation
from aggregator.hostile import lie_in_vectors
from aggregator.jobs import JobSettings, TrainingError
from aggregator.simulate import Simulation
from edge_client.dispatcher import RequestRejected
from shared.protocol.messages.fedforest import ForestHistogramRequest
from shared.protocol.messages.fedscs_xgb import XgbAtomRequest, XgbHistogramRequest
from tests.aggregator.test_fedscs_xgb import make_clients
from tests.aggregator.test_hostile_gateway import Recorded
from tests.aggregator.test_private_training import assert_identical, forest, xgb

LIAR = "gw-2"
SETTINGS = JobSettings(deadline_s=0.5, min_fraction=0.5)


def xgb_cells(vector: np.ndarray, body: XgbHistogramRequest) -> np.ndarray:
    """The histogram part of a FedSCS-XGB level vector as ``(R, 2m + 1, d, S)`` (a view)."""
    n = vector.shape[0] - 2 * body.with_loss
    return vector[:n].reshape(body.node_tree.shape[0], body.stats, body.task.n_features, body.slots)


def g_times_1000(vector: np.ndarray, body: XgbHistogramRequest) -> np.ndarray:
    m = body.task.node_columns
    xgb_cells(vector, body)[:, :m] *= 1000
    return vector


def counts_minus_1000(vector: np.ndarray, body: XgbHistogramRequest) -> np.ndarray:
    xgb_cells(vector, body)[:, -1] -= 1000
    return vector


def negated_class_counts(vector: np.ndarray, body: ForestHistogramRequest) -> np.ndarray:
    cells = vector.reshape(body.features.shape[0], body.slots, body.terms)
    cells[..., 1:] *= -1
    return vector


def refuse(sim: Simulation, request_type: type) -> None:
    """The liar refusing the requests it would lie in: the dropout the model must equal."""
    handlers = sim.participants[LIAR].dispatcher._handlers

    def handler(message):
        raise RequestRejected("busy", "refusing")

    handlers[request_type] = handler


def run(sim: Simulation, algorithm) -> tuple[object, Recorded]:
    recorded = Recorded(algorithm)
    return sim.run(recorded, settings=SETTINGS), recorded


def fleet(objective: str = "softmax") -> Simulation:
    return Simulation(make_clients(7, n_clients=5, objective=objective))


@pytest.mark.parametrize(
    ("algorithm", "request_type", "lie", "what"),
    [
        pytest.param(lambda: xgb(), XgbHistogramRequest, g_times_1000, "a G sum of", id="xgb-G_x1000"),
        pytest.param(lambda: xgb(), XgbHistogramRequest, counts_minus_1000, "a window count of", id="xgb-counts-1000"),
        pytest.param(
            lambda: forest(),
            ForestHistogramRequest,
            negated_class_counts,
            "a class count of",
            id="forest-negated-counts",
        ),
    ],
)
def test_a_plain_liar_is_named_and_the_model_is_that_of_its_dropping_out(
    algorithm, request_type, lie, what, caplog: pytest.LogCaptureFixture
) -> None:
    hostile = fleet()
    lie_in_vectors(hostile, LIAR, request_type, lie)
    with caplog.at_level(logging.WARNING):
        model, recorded = run(hostile, algorithm())
    assert recorded.job.rejected == {LIAR: 1}  # named once, never asked again
    reasons = {r.client: r.reason for r in caplog.records if r.getMessage() == "reply rejected"}
    assert set(reasons) == {LIAR} and what in reasons[LIAR]
    dropping = fleet()
    refuse(dropping, request_type)
    assert_identical(model, run(dropping, algorithm())[0])


@pytest.mark.parametrize(
    ("algorithm", "request_type", "lie", "what"),
    [
        pytest.param(
            lambda: xgb(secure_aggregation=True), XgbHistogramRequest, g_times_1000, "a G sum of", id="xgb-G_x1000"
        ),
        pytest.param(
            lambda: xgb(secure_aggregation=True),
            XgbHistogramRequest,
            counts_minus_1000,
            "range check",
            id="xgb-counts-1000",
        ),
        pytest.param(
            lambda: forest(secure_aggregation=True),
            ForestHistogramRequest,
            negated_class_counts,
            "a class count of",
            id="forest-negated-counts",
        ),
    ],
)
def test_a_secure_sum_that_breaks_a_range_check_fails_the_job_in_one_line(algorithm, request_type, lie, what) -> None:
    hostile = fleet()
    lie_in_vectors(hostile, LIAR, request_type, lie)
    with pytest.raises(TrainingError, match="range check") as caught:
        run(hostile, algorithm())
    message = str(caught.value)
    assert what in message and "\n" not in message and "secure aggregation hides which" in message


def test_an_atom_liar_is_named_and_left_out() -> None:
    hostile = fleet("logistic")
    handlers = hostile.participants[LIAR].dispatcher._handlers
    original = handlers[XgbAtomRequest]

    def scaled(message):
        import dataclasses

        reply = original(message)
        return dataclasses.replace(reply, grad=reply.grad * 1000)

    handlers[XgbAtomRequest] = scaled
    model, recorded = run(hostile, xgb(protocol="atoms", objective="logistic"))
    assert set(recorded.job.rejected) == {LIAR}
    assert len(model.trees) == 3


def test_a_child_whose_totals_differ_from_its_parent_split_is_a_violation() -> None:
    """The fetch answers the root honestly and the next level with one count shifted (each
    feature still agrees with itself): only the children-sum-to-parent rule sees it."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    y = (X[:, 0] > 0).astype(float)
    edges = [np.quantile(X[:, j], [0.25, 0.5, 0.75]).astype(np.float32).astype(np.float64) for j in range(2)]
    from shared.histograms import (
        histogram_slots,
        node_histograms,
        quantize,
        route_round,
    )
    from shared.sketches import bin_ids

    slots = histogram_slots(bin_ids(X, edges), np.array([3, 3]))
    g, h = quantize(0.5 - y[:, None], 8, 1.0), quantize(np.full((200, 1), 0.25), 8, 1.0)

    def fetch(splits, node_tree, node_id):
        position = route_round(
            slots,
            4,
            1,
            splits.tree,
            splits.node,
            splits.feature,
            splits.bin,
            splits.default_left,
            splits.left,
            splits.right,
        )
        hist = node_histograms(slots, 5, position, node_tree, node_id, g, h)
        if splits.tree.shape[0]:
            hist[:, -1, :, 0] += 1  # one window more in every feature's first slot
        return hist

    with pytest.raises(SumViolation, match="the parent split gave it"):
        grow_round_with_gains(1, edges, GrowthParams(max_depth=2, learning_rate=0.3), fetch, frac_bits=8, exact=True)
