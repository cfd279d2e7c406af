"""A gateway with valid credentials that lies during secure aggregation, end to end in simulation.

Oracle: the job finishes, the liar is rejected by name (one "reply rejected" log line, and the
job's record), and the model is bit for bit the model of a run in which the same gateway drops
out at the same point instead (the existing dropout path): nothing the liar sends reaches a sum.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import numpy as np
import pytest

from aggregator.hostile import Recorded, change_bundles, change_received_bundles
from aggregator.jobs import JobSettings
from aggregator.simulate import Simulation
from shared.protocol.messages.secure_aggregation import SecAggUnmaskReply, SecAggUnmaskRequest
from shared.secure_aggregation import PRIME, SHARE_BYTES, share_x
from shared.secure_aggregation.shamir import lagrange_weights_at_zero
from tests.aggregator.test_fedscs_xgb import make_clients
from tests.aggregator.test_private_training import assert_identical, xgb

LIAR = "gw-0"  # the smallest id: among the holders whose shares the server combines first
SETTINGS = JobSettings(deadline_s=0.5, min_fraction=0.5)


def lagrange_shifted(reply: SecAggUnmaskReply, request: SecAggUnmaskRequest, threshold: int) -> SecAggUnmaskReply:
    """Each self-mask share shifted by the inverse of the liar's Lagrange weight among the holders
    the server combines (the first ``threshold`` answering neighbours by id): the seed it rebuilds
    is the true one plus 1, a valid-looking 32-byte seed."""
    shifted = {}
    for owner, share in reply.self_mask.items():
        holders = sorted(c for c in request.survivors if c != owner)[:threshold]
        weight = lagrange_weights_at_zero([share_x(h) for h in holders])[holders.index(LIAR)]
        y = (int.from_bytes(share, "big") + pow(weight, -1, PRIME)) % PRIME
        shifted[owner] = y.to_bytes(SHARE_BYTES, "big")
    return dataclasses.replace(reply, self_mask=shifted)


def random_shares(reply: SecAggUnmaskReply, request: SecAggUnmaskRequest, threshold: int) -> SecAggUnmaskReply:
    rng = np.random.default_rng(0)
    shares = {
        o: (int.from_bytes(rng.bytes(SHARE_BYTES), "big") % PRIME).to_bytes(SHARE_BYTES, "big") for o in reply.self_mask
    }
    return dataclasses.replace(reply, self_mask=shares)


def lie_when_unmasking(sim: Simulation, tamper) -> None:
    handlers = sim.participants[LIAR].dispatcher._handlers
    original = handlers[SecAggUnmaskRequest]
    handlers[SecAggUnmaskRequest] = lambda message: tamper(original(message), message.body, 3)


def vanish_when_unmasking(sim: Simulation) -> None:
    handlers = sim.participants[LIAR].dispatcher._handlers
    original = handlers[SecAggUnmaskRequest]

    def handler(message):
        sim.transports[LIAR].drop()
        return original(message)

    handlers[SecAggUnmaskRequest] = handler


def run(sim: Simulation, expect_rejected: dict[str, int] | None = None):
    recorded = Recorded(xgb(secure_aggregation=True))
    model = sim.run(recorded, settings=SETTINGS)
    if expect_rejected is not None:
        assert recorded.job.rejected == expect_rejected
    return model


def rejections(caplog: pytest.LogCaptureFixture) -> dict[str, str]:
    return {r.client: r.reason for r in caplog.records if r.getMessage() == "reply rejected"}


def fleet() -> Simulation:
    return Simulation(make_clients(4, n_clients=5))


@pytest.mark.parametrize("tamper", [lagrange_shifted, random_shares])
def test_a_gateway_revealing_wrong_shares_is_named_and_the_model_is_that_of_its_dropping_out(
    tamper, caplog: pytest.LogCaptureFixture
) -> None:
    hostile = fleet()
    lie_when_unmasking(hostile, tamper)
    with caplog.at_level(logging.WARNING):
        model = run(hostile, expect_rejected={LIAR: 1})
    assert set(rejections(caplog)) == {LIAR}
    assert "self-mask seed that does not match" in rejections(caplog)[LIAR]
    dropping = fleet()
    vanish_when_unmasking(dropping)
    assert_identical(model, run(dropping))


def garbage(n, envelope, shares):
    return {w: os.urandom(len(blob)) for w, blob in shares.items()}


def garbage_sealed(n, envelope, shares):
    """The digests kept, the sealed bundles random: only the holders can tell."""
    digests = 2 + 16 * (len(shares) + 1)
    return {w: blob[:digests] + os.urandom(len(blob) - digests) for w, blob in shares.items()}


def made_up_neighbour(n, envelope, shares):
    return {**shares, "gw-ghost": next(iter(shares.values()))}


@pytest.mark.parametrize(
    ("attack", "first", "what"),
    [
        pytest.param(garbage, 0, "malformed bundle", id="garbage"),
        pytest.param(
            garbage_sealed,
            0,
            "did not open or match its commitments to ['gw-1', 'gw-2', 'gw-3', 'gw-4']",
            id="garbage_sealed",
        ),
        pytest.param("replayed", 1, "did not open or match its commitments", id="replayed"),
        pytest.param(
            made_up_neighbour, 0, "not address sealed bundles to exactly its neighbours", id="made_up_neighbour"
        ),
    ],
)
def test_a_gateway_sending_bad_bundles_is_named_and_the_model_is_that_of_its_dropping_out(
    attack, first, what, caplog: pytest.LogCaptureFixture
) -> None:
    hostile = fleet()
    if attack == "replayed":
        sent = change_bundles(hostile, LIAR, lambda n, envelope, shares: sent[-1] if n >= first else shares)
    else:
        change_bundles(hostile, LIAR, lambda n, envelope, shares: attack(n, envelope, shares) if n >= first else shares)
    with caplog.at_level(logging.WARNING):
        model = run(hostile, expect_rejected={LIAR: 1})
    assert set(rejections(caplog)) == {LIAR}
    assert what in rejections(caplog)[LIAR]
    assert_identical(model, run(dropping_out_when_masking(first)))


def dropping_out_when_masking(first: int) -> Simulation:
    """The fleet in which the liar drops out as it sends its ``first``-th masked vector."""
    dropping = fleet()

    def vanish(n, envelope, shares):
        if n >= first:
            dropping.transports[LIAR].drop()
        return shares

    change_bundles(dropping, LIAR, vanish)
    return dropping


def tampered(blob: bytes) -> bytes:
    """A committed bundle with its GCM tag's last byte flipped (the nonce, its key's commitment, kept)."""
    return blob[:-1] + bytes([blob[-1] ^ 1])


def test_a_gateway_complaining_about_a_good_bundle_is_named_and_the_model_is_that_of_its_dropping_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One false complaint about an honest dealer: the key the liar reveals opens the dealer's
    bundle and it matches, so the liar is named, never the dealer, and the sum is asked again."""
    hostile = fleet()
    change_received_bundles(hostile, LIAR, lambda shares: {**shares, "gw-1": tampered(shares["gw-1"])})
    with caplog.at_level(logging.WARNING):
        model = run(hostile, expect_rejected={LIAR: 1})
    assert set(rejections(caplog)) == {LIAR}
    assert "complained about gw-1's share bundle, which the key it revealed opens" in rejections(caplog)[LIAR]
    assert_identical(model, run(dropping_out_when_masking(0)))


def test_a_gateway_sending_one_bad_bundle_is_named_on_one_complaint(caplog: pytest.LogCaptureFixture) -> None:
    hostile = fleet()
    change_bundles(hostile, LIAR, lambda n, envelope, shares: {**shares, "gw-1": tampered(shares["gw-1"])})
    with caplog.at_level(logging.WARNING):
        model = run(hostile, expect_rejected={LIAR: 1})
    assert set(rejections(caplog)) == {LIAR}
    assert "sent gw-1 a share bundle that does not open or match" in rejections(caplog)[LIAR]
    assert_identical(model, run(dropping_out_when_masking(0)))
