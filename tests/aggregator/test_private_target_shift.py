"""The private opening of a regression job sums targets around a fleet shift.

Oracles:
* client half: ``count_vector`` is ``[n, Σ round((y - shift) 2^16), Σ round((y - shift)²)]`` of
  the gateway's targets, and refuses (``target_range``) when one lies 2**20 or more from the
  shift; ``grid_vector`` with ``target=True`` counts ``[X, y]`` as ``grid_counts`` does;
* server half, federated == pooled: the shift is the middle grid edge of the pooled targets
  (``grid_edges``), the feature edges are those of the pooled features (the target column does
  not change them), and the decoded sums give the pooled mean to the fixed point's precision and
  an upper bound on Σ(y - mean)² within its rounding;
* a target beyond the grid's outermost edges (only its gateway knows) still ends the job with
  the one-line error, not a per-gateway ``QuorumNotReached``.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.algorithms import FedForest
from aggregator.algorithms.private_fleet import TargetRangeError, describe_fleet_privately
from aggregator.fleet_sums import FleetSummer
from aggregator.jobs import FederatedJob, JobSettings
from aggregator.simulate import Simulation
from edge_client.dispatcher import RequestRejected
from edge_client.fleet_sums import count_vector, grid_vector
from edge_client.training_data import ClientData, LabelledData
from shared.protocol.messages.fleet_sums import TARGET_RANGE, FleetCountsRequest, GridCountsRequest
from shared.sketches import float32_keys, grid_counts, grid_edges, initial_plan

N_BINS = 16


def labelled(X: np.ndarray, y: np.ndarray) -> LabelledData:
    return LabelledData(X, y, tuple(f"f{j}" for j in range(X.shape[1])))


def fleet(offset: float, seed: int = 0) -> list[ClientData]:
    rng = np.random.default_rng(seed)
    return [
        ClientData(f"gw-{k}", rng.normal(size=(50 + 20 * k, 3)), offset + 100 * rng.normal(size=50 + 20 * k))
        for k in range(3)
    ]


def test_count_vector_sums_the_shifted_targets_and_refuses_beyond_the_bound() -> None:
    rng = np.random.default_rng(1)
    y = 1.7e9 + rng.uniform(-1e5, 1e5, size=40)
    data = labelled(rng.normal(size=(40, 2)), y)
    shift = 1.7e9 + 123.5
    vector = count_vector(data, FleetCountsRequest("", True, (), 16, shift=shift))
    d = y - shift
    assert vector.tolist() == [
        40,
        int(np.rint(d * 2.0**16).astype(np.int64).sum()),
        int(np.rint(d * d).astype(np.int64).sum()),
    ]
    with pytest.raises(RequestRejected, match=r"2\*\*20") as info:
        count_vector(data, FleetCountsRequest("", True, (), 16, shift=1.7e9 - 2e6))
    assert info.value.code == TARGET_RANGE


def test_grid_vector_counts_the_target_as_the_last_column() -> None:
    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(30, 2)), 1.7e9 + rng.normal(size=30)
    plan = initial_plan(3)
    request = GridCountsRequest("", **plan.to_arrays(), target=True)
    expected = grid_counts(*float32_keys(np.column_stack([X, y])), plan)
    np.testing.assert_array_equal(grid_vector(labelled(X, y), request), expected)


def opening(clients: list[ClientData]):
    sim = Simulation(clients)
    job = FederatedJob(sim.engine, list(sim.transports), job_id="opening", settings=JobSettings(deadline_s=5))
    summer = FleetSummer(job, secure=True)
    summer.start(job.clients)
    return describe_fleet_privately(job, summer, "", regression=True, n_bins=N_BINS)


@pytest.mark.parametrize("offset", [0.0, 1e9])
def test_the_opening_equals_the_pooled_statistics(offset: float) -> None:
    clients = fleet(offset)
    X = np.concatenate([c.X for c in clients])
    y = np.concatenate([c.y for c in clients])
    private = opening(clients)
    target_edges = grid_edges(y[:, None], N_BINS, include_min_point=True)[0]
    assert private.target_shift == float(target_edges[target_edges.size // 2])
    for mine, pooled in zip(private.edges, grid_edges(X, N_BINS, include_min_point=True), strict=True):
        np.testing.assert_array_equal(mine, pooled)
    n = y.size
    assert private.total_samples == n
    # Σ(y - shift) travels with 16 fraction bits: the mean to within 2**-17
    assert private.target_mean == pytest.approx(y.mean(), abs=2.0**-17 + 1e-15 * offset)
    centred = float(((y - y.mean()) ** 2).sum())
    assert centred <= private.target_spread <= centred + 2.0 * n  # squares round to whole units


def test_a_target_only_its_gateway_knows_is_too_far_ends_the_job_in_one_line() -> None:
    """One window of gw-2 lies 2e6 above the rest: the grid's edges do not reach it (it is one
    window of 211), so the server cannot refuse up front; gw-2 refuses the sums."""
    clients = fleet(0.0)
    y = clients[2].y.copy()
    y[0] = 2e6
    clients[2] = ClientData("gw-2", clients[2].X, y)
    sim = Simulation(clients, record_bodies=True)
    with pytest.raises(TargetRangeError, match=r"2\*\*20") as info:
        sim.run(FedForest(task="regression", protocol="histogram", n_trees=1, max_depth=2), seed=0)
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value) and "gw-" not in str(info.value)
    refusals = [r.body.code for r in sim.server_view()["gw-2"] if r.type == "error"]
    assert refusals == [TARGET_RANGE]  # the gateway's refusal, not the server's check of the edges
