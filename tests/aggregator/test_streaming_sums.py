"""The aggregator sums as replies arrive: one full-length vector per open sum, whatever the fleet.

Oracles: the sum is compared bit for bit with the vectors added up afterwards (and with the
fleet's class counts computed from the data); memory is measured with tracemalloc around one
:meth:`FleetSummer.ask` at two fleet sizes.
"""

from __future__ import annotations

import tracemalloc
from types import SimpleNamespace

import numpy as np
import pytest

from aggregator.fleet_sums import FleetSummer
from aggregator.jobs import FederatedJob, JobSettings
from aggregator.simulate import Simulation
from edge_client.training_data import ClientData
from shared.protocol.messages.fleet_sums import FleetCountsRequest, FleetSumReply
from shared.protocol.messages.secure_aggregation import MaskedVector, widen

LENGTH = 200_000  # words per vector: 0.8 MB at 32 bits, 1.6 MB as the uint64 running total


def client_vector(client: int) -> np.ndarray:
    return np.random.default_rng(client).integers(0, 2**32, LENGTH, dtype=np.uint32)


class ArrivingReplies:
    """A job whose clients' replies are made one at a time, as they would arrive: a reply is
    held only as long as the server keeps it (the engine hands each to ``fold`` on arrival)."""

    def __init__(self, n_clients: int) -> None:
        self.job_id, self.rounds, self.engine = "stream", 0, SimpleNamespace(merged=None)
        self.n_clients = n_clients
        self.rejected: dict[str, int] = {}

    def ask(self, requests, clients, expect, *, fold=None):
        self.rounds += 1
        kept = {}
        for client in sorted(clients):
            reply = FleetSumReply(MaskedVector(client_vector(int(client))))
            kept[client] = reply if fold is None else fold(client, reply)
            del reply
        return kept

    def reject(self, client: str, reason: str) -> None:
        self.rejected[client] = self.rejected.get(client, 0) + 1


def summed(n_clients: int) -> tuple[np.ndarray, int]:
    """(the sum, tracemalloc's peak in bytes during the ask) over ``n_clients`` clients."""
    job = ArrivingReplies(n_clients)
    summer = FleetSummer(job, secure=False)
    requests = {f"{c:03d}": None for c in range(n_clients)}
    tracemalloc.start()
    try:
        total = summer.ask(requests, FleetSumReply, lambda r: r.sums, LENGTH, word_bits=32).total
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return total, peak


def test_the_server_holds_a_constant_number_of_vectors_whatever_the_fleet() -> None:
    vector_bytes = LENGTH * 8  # one uint64 vector
    small, small_peak = summed(4)
    large, large_peak = summed(40)
    # the running total, the widened result, one arriving reply and its 64-bit view: < 6 vectors,
    # at 4 clients as at 40 (holding every reply until the round closes takes > 40 x 0.8 MB)
    assert small_peak < 6 * vector_bytes and large_peak < 6 * vector_bytes, (small_peak, large_peak)
    assert large_peak < small_peak + vector_bytes
    for n, total in ((4, small), (40, large)):
        oracle = widen(sum((client_vector(c).astype(np.uint64) for c in range(n)), np.zeros(LENGTH, np.uint64)), 32)
        np.testing.assert_array_equal(total, oracle)


def test_a_reply_that_fails_the_check_is_left_out_of_the_running_sum() -> None:
    job = ArrivingReplies(3)
    summer = FleetSummer(job, secure=False)
    result = summer.ask(
        {"000": None, "001": None, "002": None},
        FleetSumReply,
        lambda r: r.sums,
        LENGTH,
        word_bits=32,
        check=lambda c, r: "refused" if c == "001" else None,
    )
    oracle = widen(client_vector(0).astype(np.uint64) + client_vector(2).astype(np.uint64), 32)
    np.testing.assert_array_equal(result.total, oracle)
    assert result.contributors == ("000", "002") and job.rejected == {"001": 1}


@pytest.mark.parametrize("secure", [False, True])
def test_the_round_engine_keeps_replies_without_their_vectors(secure: bool) -> None:
    """Through the real engine and gateways (masked or not): the sum is the fleet's class counts
    exactly, and no reply the server kept still holds its vector."""
    rng = np.random.default_rng(7)
    clients = [ClientData(f"gw-{i}", rng.normal(size=(30 + i, 4)), rng.integers(0, 3, 30 + i)) for i in range(5)]
    sim = Simulation(clients)
    job = FederatedJob(sim.engine, list(sim.transports), job_id="counts", settings=JobSettings(deadline_s=5))
    summer = FleetSummer(job, secure=secure)
    summer.start(job.clients)
    requests = {
        c: FleetCountsRequest("", False, ("0", "1", "2"), 0, summer.secure_round(c, summer.active))
        for c in summer.active
    }
    result = summer.ask(requests, FleetSumReply, lambda r: r.sums, 4, word_bits=32)
    y = np.concatenate([c.y for c in clients])
    np.testing.assert_array_equal(result.total.view(np.int64), [y.size, *np.bincount(y, minlength=3)])
    assert sorted(result.replies) == [c.client_id for c in clients]
    assert all(r.sums.values.size == 0 for r in result.replies.values())
    assert all(bool(r.sums.shares) == secure for r in result.replies.values())


def test_server_view_needs_recorded_bodies() -> None:
    sim = Simulation([ClientData("gw-0", np.zeros((3, 2)), np.zeros(3, int))])
    with pytest.raises(RuntimeError, match="record_bodies=True"):
        sim.server_view()
