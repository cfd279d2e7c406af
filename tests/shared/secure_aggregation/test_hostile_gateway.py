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
    SecureAggregationError,
    UnmaskShares,
    combine_shares,
    share_x,
)
from shared.secure_aggregation.bundle import CommittedBundle
from shared.secure_aggregation.contexts import pair_seed_info
from shared.secure_aggregation.keys import derive_key
from shared.secure_aggregation.shamir import lagrange_weights_at_zero
from tests.shared.secure_aggregation.test_protocol import (
    JOB,
    answer_all,
    make_fleet,
    mask_all,
    plain_sum,
    random_vectors,
)

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
    result = fleet.server.unmask_sum(
        LABEL, masked, {**replies, liar: UnmaskShares(replies[liar].self_mask, wrong)}, LENGTH
    )
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
    assert "not open or match its commitments" in caught.value.culprits[dealer]


def one_digest_short(blob: bytes) -> bytes:
    committed = CommittedBundle.from_bytes(blob)
    return CommittedBundle(committed.digests[:-1], committed.sealed).to_bytes()


@pytest.mark.parametrize(
    ("change", "what"),
    [
        pytest.param(
            lambda shares: {**shares, "gw-ghost": next(iter(shares.values()))},
            "exactly its neighbours",
            id="made-up neighbour",
        ),
        pytest.param(lambda shares: {w: os.urandom(3) for w in shares}, "malformed bundle", id="garbage bytes"),
        pytest.param(
            lambda shares: {w: one_digest_short(b) for w, b in shares.items()}, "committed to", id="one digest short"
        ),
    ],
)
def test_a_malformed_contribution_is_attributed_to_its_sender_before_unmasking(change, what) -> None:
    fleet, _, masked = honest_round()
    dealer = fleet.ids[1]
    hostile = {**masked, dealer: MaskedInput(masked[dealer].masked, change(dict(masked[dealer].shares)))}
    with pytest.raises(MaliciousGateway, match=what) as caught:
        fleet.server.unmask_request(LABEL, hostile)
    assert list(caught.value.culprits) == [dealer]


def tampered(blob: bytes) -> bytes:
    """The committed bundle with the last byte of its GCM tag flipped (its nonce, the key's commitment, kept)."""
    return blob[:-1] + bytes([blob[-1] ^ 1])


def complaint(fleet, masked, holder: str, dealer: str) -> UnmaskShares:
    """``holder``'s honest answer had it received ``dealer``'s bundle tampered with: a complaint
    about ``dealer`` with the key of that bundle as evidence, and its shares of the others."""
    request = fleet.server.unmask_request(LABEL, masked)[holder]
    shares = {**request.shares, dealer: tampered(request.shares[dealer])}
    return fleet.clients[holder].unmask(LABEL, request.survivors, request.dropped, shares)


def again_without(fleet, vectors, gone: set[str], label: bytes = b"round-2"):
    """The aggregation asked again with a fresh label, ``gone`` left out as the caller does."""
    selected = [c for c in fleet.ids if c not in gone]
    masked = {c: fleet.clients[c].mask(label, vectors[c], fleet.server.participants(c, selected)) for c in selected}
    replies = answer_all(fleet, label, fleet.server.unmask_request(label, masked, selected))
    return fleet.server.unmask_sum(label, masked, replies, LENGTH)


def assert_only_named_then_exact_without(fleet, vectors, masked, replies, culprit: str, reason: str) -> None:
    """``unmask_sum`` names ``culprit`` alone, for ``reason``; asked again without it, the sum is exact."""
    with pytest.raises(MaliciousGateway) as caught:
        fleet.server.unmask_sum(LABEL, masked, replies, LENGTH)
    assert list(caught.value.culprits) == [culprit]
    assert reason in caught.value.culprits[culprit]
    result = again_without(fleet, vectors, {culprit})
    np.testing.assert_array_equal(result.total, plain_sum(vectors, without=[culprit]))
    assert result.culprits == {}


def forged_complaint(reply: UnmaskShares, victim: str, key: bytes) -> UnmaskShares:
    """``reply`` with its share of ``victim``'s self-mask seed withheld and a complaint about it backed by ``key``."""
    self_mask = {o: s for o, s in reply.self_mask.items() if o != victim}
    return UnmaskShares(self_mask, reply.pair_seeds, {victim: key})


def test_a_false_complaint_names_the_complainer_and_not_the_dealer() -> None:
    """A holder complains about an honest dealer's good bundle: the key it reveals opens that
    bundle and it matches, so the complainer lied; asked again without it, the sum is exact."""
    fleet, vectors, masked = honest_round()
    liar, victim = fleet.ids[0], fleet.ids[1]
    replies = answer_all(fleet, LABEL, fleet.server.unmask_request(LABEL, masked), drop_after=[liar])
    replies[liar] = complaint(fleet, masked, liar, victim)
    reason = f"complained about {victim}'s share bundle, which the key it revealed opens"
    assert_only_named_then_exact_without(fleet, vectors, masked, replies, liar, reason)


def test_a_complaint_without_a_key_names_the_complainer() -> None:
    fleet, _, masked = honest_round()
    liar, victim = fleet.ids[0], fleet.ids[1]
    replies = answer_all(fleet, LABEL, fleet.server.unmask_request(LABEL, masked))
    replies[liar] = forged_complaint(replies[liar], victim, b"no key")
    with pytest.raises(MaliciousGateway, match="without the key that sealed it") as caught:
        fleet.server.unmask_sum(LABEL, masked, replies, LENGTH)
    assert list(caught.value.culprits) == [liar]


def test_a_complaint_with_a_key_the_bundle_does_not_commit_to_names_nobody() -> None:
    """The one dispute no evidence decides (only the pair knows its key): nobody is named, the
    complainer's share is not used, and the dealer stays in the sum while ``threshold`` shares remain."""
    fleet, vectors, masked = honest_round()
    liar, victim = fleet.ids[0], fleet.ids[1]
    replies = answer_all(fleet, LABEL, fleet.server.unmask_request(LABEL, masked))
    replies[liar] = forged_complaint(replies[liar], victim, os.urandom(32))
    result = fleet.server.unmask_sum(LABEL, masked, replies, LENGTH)
    np.testing.assert_array_equal(result.total, plain_sum(vectors))
    assert result.culprits == {}


@pytest.mark.parametrize("bad", [lambda holder, blob: tampered(blob), wrong_digests], ids=["tampered", "wrong_digests"])
def test_a_dealer_sending_one_bad_bundle_is_named_on_that_holders_single_complaint(bad) -> None:
    fleet, vectors, masked = honest_round()
    dealer, holder = fleet.ids[4], fleet.ids[2]
    hostile = with_bundles(masked, dealer, lambda w, blob: bad(w, blob) if w == holder else blob)
    replies = answer_all(fleet, LABEL, fleet.server.unmask_request(LABEL, hostile))
    assert {c: list(r.complaints) for c, r in replies.items() if r.complaints} == {holder: [dealer]}
    reason = f"sent {holder} a share bundle that does not open or match"
    assert_only_named_then_exact_without(fleet, vectors, hostile, replies, dealer, reason)


def test_the_evidence_opens_that_one_bundle_only() -> None:
    """The key a complaint reveals opens the bundle complained about and nothing else: not the
    dealer's bundles for its other holders, not the holder's own bundle for the dealer, not the
    same pair's bundle of another label; it is neither the pair's cipher key nor its pair seed,
    and the bundle holds one share of each of the dealer's secrets (``threshold >= 2`` needed)."""
    fleet, _, masked = honest_round()
    holder, dealer = fleet.ids[0], fleet.ids[1]
    key = complaint(fleet, masked, holder, dealer).complaints[dealer]

    def opens(blob: bytes, sender: str, receiver: str, label: bytes = LABEL) -> bool:
        try:
            CommittedBundle.from_bytes(blob).open(key, JOB, label, sender, receiver)
        except SecureAggregationError:
            return False
        return True

    bundle = CommittedBundle.from_bytes(masked[dealer].shares[holder]).open(key, JOB, LABEL, dealer, holder)
    assert len(bundle.pair_seeds) == len(masked[dealer].shares) and fleet.server.threshold >= 2
    assert not any(opens(blob, dealer, w) for w, blob in masked[dealer].shares.items() if w != holder)
    assert not opens(masked[holder].shares[dealer], holder, dealer)
    later = fleet.clients[dealer].mask(b"round-9", np.zeros(LENGTH, np.uint64))
    assert not opens(later.shares[holder], dealer, holder, b"round-9")
    state = fleet.clients[dealer]._joined()
    pair_seed = derive_key(state.pair_secrets[holder], pair_seed_info(JOB, LABEL))
    assert key not in {state.cipher_keys[holder], state.pair_secrets[holder], pair_seed}
