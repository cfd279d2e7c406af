"""A gateway that lies to ``SecAggServer``: every lie is detected and attributed to its sender, never
to an honest gateway, and a sum is either exact or not given.

Oracle: ``plain_sum`` of the vectors (bit for bit), and the culprits named.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from shared.secure_aggregation import (
    PRIME,
    SEED_BYTES,
    SHARE_BYTES,
    MaliciousGateway,
    MaskedInput,
    UnmaskShares,
    combine_shares,
    share_x,
)
from shared.secure_aggregation.bundle import CommittedBundle
from shared.secure_aggregation.shamir import lagrange_weights_at_zero
from tests.shared.secure_aggregation.test_protocol import answer_all, make_fleet, mask_all, plain_sum, random_vectors

LABEL = b"round-1"
LENGTH = 64


def honest_round(n: int = 6, drop_before=()):
    fleet = make_fleet(n)
    vectors = random_vectors(fleet.ids, LENGTH)
    masked = mask_all(fleet, LABEL, vectors, drop_before)
    return fleet, vectors, masked


def shifted(share: bytes, weight: int) -> bytes:
    """The share moved by the inverse of its Lagrange weight: the rebuilt secret moves by exactly 1."""
    return ((int.from_bytes(share, "big") + pow(weight, -1, PRIME)) % PRIME).to_bytes(SHARE_BYTES, "big")


def test_a_lagrange_shifted_share_is_detected_and_the_sum_stays_exact() -> None:
    fleet, vectors, masked = honest_round()
    server = fleet.server
    replies = answer_all(fleet, LABEL, server.unmask_request(LABEL, masked))
    liar, owner = fleet.ids[0], fleet.ids[1]
    holders = sorted(w for w in server.neighbours[owner])[: server.threshold]  # the ones the server combines
    weight = lagrange_weights_at_zero([share_x(w) for w in holders])[holders.index(liar)]
    lie = shifted(replies[liar].self_mask[owner], weight)
    # the attack is real: the shifted share rebuilds a valid-looking seed, one more than the true one
    true_seed = combine_shares({share_x(w): replies[w].self_mask[owner] for w in holders}, SEED_BYTES)
    forged = {share_x(w): (lie if w == liar else replies[w].self_mask[owner]) for w in holders}
    assert int.from_bytes(combine_shares(forged, SEED_BYTES), "big") == int.from_bytes(true_seed, "big") + 1

    lying = {**replies, liar: UnmaskShares({**replies[liar].self_mask, owner: lie}, replies[liar].pair_seeds)}
    result = server.unmask_sum(LABEL, masked, lying, LENGTH)
    np.testing.assert_array_equal(result.total, plain_sum(vectors))
    assert result.contributors == tuple(fleet.ids)
    assert list(result.culprits) == [liar]
    assert f"{owner}'s self-mask seed that does not match {owner}'s commitment" in result.culprits[liar]


def test_aggregate_refuses_to_hide_a_culprit() -> None:
    fleet, _, masked = honest_round()
    replies = answer_all(fleet, LABEL, fleet.server.unmask_request(LABEL, masked))
    liar, owner = fleet.ids[2], fleet.ids[3]
    random = (int.from_bytes(os.urandom(SHARE_BYTES), "big") % PRIME).to_bytes(SHARE_BYTES, "big")
    lying = {**replies, liar: UnmaskShares({**replies[liar].self_mask, owner: random}, {})}
    with pytest.raises(MaliciousGateway, match=f"^{liar} revealed a share of {owner}'s self-mask seed") as caught:
        fleet.server.aggregate(LABEL, masked, lying, LENGTH)
    assert list(caught.value.culprits) == [liar]


def test_a_wrong_pair_seed_share_of_a_dropped_peer_is_detected() -> None:
    fleet, vectors, masked = honest_round(drop_before=["gw-005"])
    replies = answer_all(fleet, LABEL, fleet.server.unmask_request(LABEL, masked))
    liar = fleet.ids[0]
    owner, by_peer = next(iter(replies[liar].pair_seeds.items()))
    wrong = {o: {p: bytes(SHARE_BYTES - 1) + b"\x07" for p in peers} for o, peers in replies[liar].pair_seeds.items()}
    result = fleet.server.unmask_sum(LABEL, masked, {**replies, liar: UnmaskShares(replies[liar].self_mask, wrong)},
                                     LENGTH)
    np.testing.assert_array_equal(result.total, plain_sum(vectors, without=["gw-005"]))
    assert list(result.culprits) == [liar] and "pair seed with gw-005" in result.culprits[liar]


def with_bundles(masked: dict[str, MaskedInput], dealer: str, change) -> dict[str, MaskedInput]:
    """``dealer``'s masked input with each committed bundle ``blob`` for holder ``w`` replaced by ``change(w,
    blob)``."""
    original = masked[dealer]
    shares = {w: change(w, blob) for w, blob in original.shares.items()}
    return {**masked, dealer: MaskedInput(original.masked, shares)}


def garbage_sealed(holder: str, blob: bytes) -> bytes:
    committed = CommittedBundle.from_bytes(blob)
    return CommittedBundle(committed.digests, os.urandom(len(committed.sealed))).to_bytes()


def wrong_digests(holder: str, blob: bytes) -> bytes:
    """The sealed shares kept, the digests random: a dealer trying to get its honest holders blamed."""
    committed = CommittedBundle.from_bytes(blob)
    return CommittedBundle(tuple(os.urandom(16) for _ in committed.digests), committed.sealed).to_bytes()


@pytest.mark.parametrize("change", [garbage_sealed, wrong_digests, "replayed"])
def test_a_dealer_whose_bundles_its_holders_cannot_use_is_named_and_no_holder_is(change) -> None:
    fleet, _, masked = honest_round()
    dealer = fleet.ids[4]
    if change == "replayed":
        earlier = fleet.clients[dealer].mask(b"round-0", np.zeros(LENGTH, np.uint64))
        change = lambda holder, blob: earlier.shares[holder]  # noqa: E731
    hostile = with_bundles(masked, dealer, change)
    replies = answer_all(fleet, LABEL, fleet.server.unmask_request(LABEL, hostile))
    assert {c for c, r in replies.items() if r.complaints} == set(fleet.server.neighbours[dealer])
    with pytest.raises(MaliciousGateway) as caught:
        fleet.server.unmask_sum(LABEL, hostile, replies, LENGTH)
    assert list(caught.value.culprits) == [dealer]
    assert "did not open or match its commitments" in caught.value.culprits[dealer]


def one_digest_short(blob: bytes) -> bytes:
    committed = CommittedBundle.from_bytes(blob)
    return CommittedBundle(committed.digests[:-1], committed.sealed).to_bytes()


@pytest.mark.parametrize(("change", "what"), [
    pytest.param(lambda shares: {**shares, "gw-ghost": next(iter(shares.values()))}, "exactly its neighbours",
                 id="made-up neighbour"),
    pytest.param(lambda shares: {w: os.urandom(3) for w in shares}, "malformed bundle", id="garbage bytes"),
    pytest.param(lambda shares: {w: one_digest_short(b) for w, b in shares.items()}, "committed to",
                 id="one digest short"),
])
def test_a_malformed_contribution_is_attributed_to_its_sender_before_unmasking(change, what) -> None:
    fleet, _, masked = honest_round()
    dealer = fleet.ids[1]
    hostile = {**masked, dealer: MaskedInput(masked[dealer].masked, change(dict(masked[dealer].shares)))}
    with pytest.raises(MaliciousGateway, match=what) as caught:
        fleet.server.unmask_request(LABEL, hostile)
    assert list(caught.value.culprits) == [dealer]


def test_one_false_complaint_names_nobody_and_the_sum_stays_exact() -> None:
    """A holder cannot get an honest dealer named: more than ``k - threshold`` of its ``k``
    holders must complain, and the dealer stays in the sum while ``threshold`` shares remain."""
    fleet, vectors, masked = honest_round()
    replies = answer_all(fleet, LABEL, fleet.server.unmask_request(LABEL, masked))
    liar, victim = fleet.ids[0], fleet.ids[1]
    reply = replies[liar]
    false = UnmaskShares({o: s for o, s in reply.self_mask.items() if o != victim}, reply.pair_seeds, (victim,))
    result = fleet.server.unmask_sum(LABEL, masked, {**replies, liar: false}, LENGTH)
    np.testing.assert_array_equal(result.total, plain_sum(vectors))
    assert result.culprits == {}
