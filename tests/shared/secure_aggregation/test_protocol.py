"""The protocol end to end, in process: exact sums with and without dropouts, uniform masked
vectors, refusals of malformed or malicious requests, and a 100-gateway fleet."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pytest
from scipy import stats

from shared.histograms import quantize
from shared.secure_aggregation import (
    ClientKeyPairs,
    MaliciousGateway,
    MaskedInput,
    PublicKeys,
    SecAggClient,
    SecAggConfig,
    SecAggServer,
    SecureAggregationError,
    UnmaskShares,
    combine_shares,
    derive_key,
    expand_mask,
    pairwise_mask,
    ring_sum,
    share_x,
)
from shared.secure_aggregation import protocol as protocol_module
from shared.secure_aggregation.contexts import pair_mask_info, pair_seed_info, self_mask_info

JOB = b"wheelfed/job-7"
LENGTH = 1000


@dataclass
class Fleet:
    server: SecAggServer
    clients: dict[str, SecAggClient]

    @property
    def ids(self) -> list[str]:
        return sorted(self.clients)


def make_fleet(
    n: int, degree: int | None = None, threshold: int | None = None, without_keys: Iterable[str] = ()
) -> Fleet:
    """The whole setup as the messaging layer runs it: keys, partial rosters, key confirmations."""
    ids = [f"gw-{i:03d}" for i in range(n)]
    clients = {c: SecAggClient(c) for c in ids}
    server = SecAggServer(SecAggConfig(degree=degree, threshold=threshold), ids, JOB, seed=b"graph-seed")
    missing = set(without_keys)
    server.set_public_keys({c: client.public_keys() for c, client in clients.items() if c not in missing})
    confirmations = {
        c: clients[c].join(server.roster_for(c), server.neighbours[c], server.threshold, JOB) for c in server.clients
    }
    for receiver, blobs in server.route(confirmations).items():
        clients[receiver].confirm_keys(blobs)
    return Fleet(server, {c: clients[c] for c in server.clients})


def random_vectors(ids: Iterable[str], length: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {c: rng.integers(0, 2**64, size=length, dtype=np.uint64, endpoint=False) for c in ids}


def mask_all(
    fleet: Fleet, label: bytes, vectors: dict[str, np.ndarray], drop_before: Iterable[str] = ()
) -> dict[str, MaskedInput]:
    gone = set(drop_before)
    return {c: fleet.clients[c].mask(label, v) for c, v in vectors.items() if c not in gone}


def answer_all(fleet: Fleet, label: bytes, requests, drop_after: Iterable[str] = ()) -> dict[str, UnmaskShares]:
    gone = set(drop_after)
    return {
        c: fleet.clients[c].unmask(label, r.survivors, r.dropped, r.shares)
        for c, r in requests.items()
        if c not in gone
    }


def aggregate(fleet: Fleet, label: bytes, vectors, drop_before=(), drop_after=()) -> np.ndarray:
    masked = mask_all(fleet, label, vectors, drop_before)
    requests = fleet.server.unmask_request(label, masked)
    replies = answer_all(fleet, label, requests, drop_after)
    length = next(iter(vectors.values())).size
    return fleet.server.aggregate(label, masked, replies, length)


def plain_sum(vectors: dict[str, np.ndarray], without: Iterable[str] = ()) -> np.ndarray:
    gone = set(without)
    return ring_sum([v for c, v in sorted(vectors.items()) if c not in gone])


def recoverable(fleet: Fleet, drop_before: set[str], drop_after: set[str]) -> bool:
    """Every survivor keeps ``threshold`` surviving neighbours, and ``threshold`` answering ones."""
    survivors = set(fleet.ids) - drop_before
    for client in survivors:
        linked = fleet.server.neighbours[client]
        if sum(v in survivors for v in linked) < fleet.server.threshold:
            return False
        if sum(v in survivors - drop_after for v in linked) < fleet.server.threshold:
            return False
    return True


# --- exact sums ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("degree", "expected_degree", "expected_threshold"), [(None, 9, 5), (4, 4, 3)])
def test_no_dropouts_gives_the_plain_sum_bit_for_bit(degree, expected_degree: int, expected_threshold: int) -> None:
    fleet = make_fleet(10, degree)
    assert (fleet.server.degree, fleet.server.threshold) == (expected_degree, expected_threshold)
    vectors = random_vectors(fleet.ids, LENGTH)
    total = aggregate(fleet, b"round-1", vectors)
    assert total.dtype == np.uint64
    np.testing.assert_array_equal(total, plain_sum(vectors))


@pytest.mark.parametrize("n_dropped", [1, 2, 3])
@pytest.mark.parametrize("degree", [None, 6])
def test_dropouts_before_masking(degree: int | None, n_dropped: int) -> None:
    fleet = make_fleet(10, degree)
    vectors = random_vectors(fleet.ids, LENGTH, seed=n_dropped)
    dropped = set(fleet.ids[1 : 1 + 3 * n_dropped : 3])
    if recoverable(fleet, dropped, set()):
        np.testing.assert_array_equal(aggregate(fleet, b"r", vectors, drop_before=dropped), plain_sum(vectors, dropped))
    else:  # a sparse neighbourhood lost too many: a clear refusal, never a wrong sum
        with pytest.raises(SecureAggregationError, match="too many clients dropped"):
            aggregate(fleet, b"r", vectors, drop_before=dropped)
    if degree is None or n_dropped < 3:
        assert recoverable(fleet, dropped, set())  # the cases that must succeed did


@pytest.mark.parametrize("degree", [None, 6])
def test_dropout_after_masking_and_before_unmasking(degree: int | None) -> None:
    fleet = make_fleet(10, degree)
    vectors = random_vectors(fleet.ids, LENGTH, seed=5)
    late = {fleet.ids[4]}  # its masked vector is in the sum; its self-mask comes from others' shares
    np.testing.assert_array_equal(aggregate(fleet, b"r", vectors, drop_after=late), plain_sum(vectors))
    early = {fleet.ids[0]}
    assert recoverable(fleet, early, late)
    total = aggregate(fleet, b"r2", vectors, drop_before=early, drop_after=late)
    np.testing.assert_array_equal(total, plain_sum(vectors, early))


def test_too_many_dropouts_before_masking_are_refused() -> None:
    fleet = make_fleet(10)  # complete graph, threshold 5
    vectors = random_vectors(fleet.ids, 10)
    masked = mask_all(fleet, b"r", vectors, drop_before=fleet.ids[:5])
    with pytest.raises(SecureAggregationError, match="too many clients dropped: survivor gw-005 has 4 surviving"):
        fleet.server.unmask_request(b"r", masked)


def test_too_many_dropouts_during_unmasking_are_refused_until_enough_replies_arrive() -> None:
    fleet = make_fleet(10)
    vectors = random_vectors(fleet.ids, 10)
    masked = mask_all(fleet, b"r", vectors)
    requests = fleet.server.unmask_request(b"r", masked)
    replies = answer_all(fleet, b"r", requests)
    few = {c: replies[c] for c in fleet.ids[:5]}  # gw-000 gets 4 shares of its seed, 5 needed
    with pytest.raises(SecureAggregationError, match="cannot rebuild .* 4 of the 5 needed shares"):
        fleet.server.aggregate(b"r", masked, few, 10)
    # The label stays pending: a late reply completes it.
    few[fleet.ids[9]] = replies[fleet.ids[9]]
    np.testing.assert_array_equal(fleet.server.aggregate(b"r", masked, few, 10), plain_sum(vectors))


def test_changing_one_vector_changes_the_sum_by_exactly_that_difference() -> None:
    fleet = make_fleet(10, degree=4)
    vectors = random_vectors(fleet.ids, LENGTH, seed=2)
    first_masked = mask_all(fleet, b"a", vectors)
    first_total = _finish(fleet, b"a", first_masked)
    delta = quantize(np.random.default_rng(3).normal(size=LENGTH), 20, bound=10.0).view(np.uint64)
    changed = dict(vectors)
    changed["gw-006"] = vectors["gw-006"] + delta
    second_masked = mask_all(fleet, b"b", changed)
    second_total = _finish(fleet, b"b", second_masked)
    np.testing.assert_array_equal(second_total - first_total, delta)
    for client in fleet.ids:  # every masked vector changed (fresh masks per label), not just gw-006's
        assert np.mean(first_masked[client].masked == second_masked[client].masked) < 0.01


def _finish(fleet: Fleet, label: bytes, masked: dict[str, MaskedInput]) -> np.ndarray:
    replies = answer_all(fleet, label, fleet.server.unmask_request(label, masked))
    return fleet.server.aggregate(label, masked, replies, LENGTH)


def test_clients_without_public_keys_are_out_of_the_job() -> None:
    fleet = make_fleet(10, degree=4, without_keys=["gw-003", "gw-007"])
    assert fleet.ids == [c for c in (f"gw-{i:03d}" for i in range(10)) if c not in ("gw-003", "gw-007")]
    assert all("gw-003" not in linked for linked in fleet.server.neighbours.values())
    vectors = random_vectors(fleet.ids, LENGTH)
    np.testing.assert_array_equal(aggregate(fleet, b"r", vectors), plain_sum(vectors))


def test_an_aggregation_over_selected_clients_only() -> None:
    """Clients not selected mask with nobody and nobody masks with them; they are not "dropped"."""
    fleet = make_fleet(16, degree=8)  # threshold 5: at most 3 of 8 neighbours may be lost, 3 are here
    selected = [c for c in fleet.ids if c != "gw-004"]
    vectors = random_vectors(selected, LENGTH, seed=4)
    late, early = {"gw-001"}, {"gw-007"}
    masked = {
        c: fleet.clients[c].mask(b"subset", vectors[c], fleet.server.participants(c, selected))
        for c in selected
        if c not in early
    }
    requests = fleet.server.unmask_request(b"subset", masked, selected)
    assert all("gw-004" not in r.dropped for r in requests.values())
    assert any("gw-007" in r.dropped for r in requests.values())
    replies = answer_all(fleet, b"subset", requests, drop_after=late)
    total = fleet.server.aggregate(b"subset", masked, replies, LENGTH)
    np.testing.assert_array_equal(total, plain_sum(vectors, early))
    # gw-004 was merely not selected and gw-007 dropped: both take part in the next aggregation.
    everyone = random_vectors(fleet.ids, LENGTH, seed=5)
    np.testing.assert_array_equal(aggregate(fleet, b"next", everyone), plain_sum(everyone))


def test_selection_rules_are_enforced() -> None:
    fleet = make_fleet(12, degree=6)
    client, server = fleet.clients["gw-000"], fleet.server
    with pytest.raises(SecureAggregationError, match="3 neighbours taking part, 4 needed"):
        client.mask(b"r", np.zeros(4, np.uint64), server.neighbours["gw-000"][:3])
    with pytest.raises(SecureAggregationError, match="cannot mask with"):
        client.mask(b"r", np.zeros(4, np.uint64), [*server.neighbours["gw-000"][:4], _stranger(fleet, "gw-000")])
    selected = fleet.ids[:8]
    masked = {c: fleet.clients[c].mask(b"r", np.zeros(4, np.uint64)) for c in selected}  # masked with everyone
    with pytest.raises(SecureAggregationError, match="neighbours taking part"):
        server.unmask_request(b"r", masked, selected)
    with pytest.raises(SecureAggregationError, match="not selected"):
        server.unmask_request(b"r", masked, selected[:-1])
    with pytest.raises(SecureAggregationError, match="not in the job"):
        server.unmask_request(b"r", masked, [*selected, "gw-404"])


def _stranger(fleet: Fleet, client: str) -> str:
    return next(c for c in fleet.ids if c != client and c not in fleet.server.neighbours[client])


def test_key_confirmation_catches_inconsistent_rosters_and_misrouted_blobs() -> None:
    ids = [f"gw-{i}" for i in range(5)]
    clients = {c: SecAggClient(c) for c in ids}
    server = SecAggServer(SecAggConfig(), ids, JOB)
    server.set_public_keys({c: client.public_keys() for c, client in clients.items()})
    impostor = SecAggClient("gw-1")
    lied_to = {**server.roster_for("gw-0"), "gw-1": impostor.public_keys()}  # gw-0 gets wrong keys for gw-1
    blobs = {
        c: clients[c].join(
            lied_to if c == "gw-0" else server.roster_for(c), server.neighbours[c], server.threshold, JOB
        )
        for c in ids
    }
    routed = server.route(blobs)
    with pytest.raises(SecureAggregationError, match="does not open"):
        clients["gw-1"].confirm_keys(routed["gw-1"])  # gw-0 sealed for the impostor's cipher key
    with pytest.raises(SecureAggregationError, match="does not open"):
        clients["gw-2"].confirm_keys({"gw-3": routed["gw-4"]["gw-3"]})  # addressed to someone else
    with pytest.raises(SecureAggregationError, match="does not open"):
        clients["gw-2"].confirm_keys({"gw-3": blobs["gw-2"]["gw-3"]})  # its own blob reflected
    clients["gw-2"].confirm_keys(routed["gw-2"])
    assert clients["gw-2"].confirmed_neighbours == ("gw-0", "gw-1", "gw-3", "gw-4")
    with pytest.raises(SecureAggregationError, match="gw-0 cannot mask with \\['gw-1', "):
        clients["gw-0"].mask(b"r", np.zeros(3, np.uint64))  # gw-0 confirmed nobody yet
    with pytest.raises(SecureAggregationError, match="not its neighbours"):
        server.route({"gw-0": {"gw-0": b"x"}})
    with pytest.raises(SecureAggregationError, match="not in the job"):
        server.route({"gw-404": {}})


def test_a_cipher_key_that_matches_but_a_mask_key_that_does_not_is_caught() -> None:
    ids = ["a", "b", "c"]
    clients = {c: SecAggClient(c) for c in ids}
    server = SecAggServer(SecAggConfig(), ids, JOB)
    server.set_public_keys({c: client.public_keys() for c, client in clients.items()})
    real = server.roster_for("a")
    wrong_mask = PublicKeys(cipher=real["b"].cipher, mask=SecAggClient("b").public_keys().mask)
    blobs = {
        c: clients[c].join(
            {**real, "b": wrong_mask} if c == "a" else server.roster_for(c), server.neighbours[c], server.threshold, JOB
        )
        for c in ids
    }
    with pytest.raises(SecureAggregationError, match="roster is inconsistent"):
        clients["b"].confirm_keys(server.route(blobs)["b"])


# --- what one masked vector reveals ---------------------------------------------------------------
def uniformity_p_values(ring: np.ndarray) -> tuple[float, float]:
    """Chi-square p-values of the top byte's histogram and of the 64 bits' one-frequencies."""
    top = (ring >> np.uint64(56)).astype(np.int64)
    p_top = stats.chisquare(np.bincount(top, minlength=256)).pvalue
    ones = ((ring[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).sum(axis=0)
    n = ring.size
    chi2 = float(np.sum((ones - n / 2) ** 2 / (n / 4)))
    return float(p_top), float(stats.chi2.sf(chi2, df=64))


def looks_uniform(ring: np.ndarray) -> bool:
    # 1e-6: a false alarm once in a million runs; unmasked data scores p ~ 0.
    return min(uniformity_p_values(ring)) > 1e-6


def test_a_masked_vector_looks_uniform_and_the_test_detects_unmasked_data(monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = make_fleet(5)
    vector = quantize(np.random.default_rng(0).normal(size=10**5), 16, bound=10.0).view(np.uint64)  # top byte 0 or 255
    assert not looks_uniform(vector)
    masked = fleet.clients["gw-000"].mask(b"r", vector).masked
    assert looks_uniform(masked)
    # With the masks switched off, the very same check fails: it cannot pass trivially.
    monkeypatch.setattr(protocol_module, "expand_mask", lambda seed, length, label: np.zeros(length, np.uint64))
    monkeypatch.setattr(protocol_module, "pairwise_mask", lambda *args: np.zeros(args[-1], np.uint64))
    unmasked = fleet.clients["gw-001"].mask(b"r", vector).masked
    np.testing.assert_array_equal(unmasked, vector)
    assert not looks_uniform(unmasked)


def test_what_one_label_reveals_does_not_unmask_another() -> None:
    """Regression guard for one key setup per job: gw-002 drops in label a (the server rebuilds
    its neighbours' pair seeds with it) and survives label b (the server rebuilds its self-mask
    seed). With both, gw-002's masked vector of label b must still look uniform; only label b's
    pair seeds, which nobody revealed, would unmask it."""
    fleet = make_fleet(6)
    target, length = "gw-002", 10**4
    vectors = random_vectors(fleet.ids, length)
    vectors[target] = quantize(np.linspace(-1, 1, length), 10, bound=1.0).view(np.uint64)

    masked_a = mask_all(fleet, b"a", vectors, drop_before=[target])
    replies_a = answer_all(fleet, b"a", fleet.server.unmask_request(b"a", masked_a))
    fleet.server.aggregate(b"a", masked_a, replies_a, length)
    seeds_a = {}
    for owner in fleet.server.neighbours[target]:
        revealed = {
            w: r.pair_seeds[owner][target] for w, r in replies_a.items() if target in r.pair_seeds.get(owner, {})
        }
        seeds_a[owner] = combine_shares({share_x(w): share for w, share in revealed.items()}, 32)

    masked_b = mask_all(fleet, b"b", vectors)
    replies_b = answer_all(fleet, b"b", fleet.server.unmask_request(b"b", masked_b))
    assert not any(r.pair_seeds for r in replies_b.values())  # nobody dropped: no pair seed revealed
    revealed = {w: r.self_mask[target] for w, r in replies_b.items() if target in r.self_mask}
    self_seed = combine_shares({share_x(w): share for w, share in revealed.items()}, 32)

    def strip(pair_seeds: dict[str, bytes]) -> np.ndarray:
        attempt = masked_b[target].masked - expand_mask(self_seed, length, self_mask_info(JOB, b"b"))
        for owner, seed in pair_seeds.items():
            attempt -= pairwise_mask(seed, target, owner, pair_mask_info(JOB, b"b"), length)
        return attempt

    assert looks_uniform(strip(seeds_a))
    # The attack itself is sound: label b's own pair seeds (known only to the pairs) would expose the vector.
    seeds_b = {
        owner: derive_key(fleet.clients[target]._joined().pair_secrets[owner], pair_seed_info(JOB, b"b"))
        for owner in fleet.server.neighbours[target]
    }
    np.testing.assert_array_equal(strip(seeds_b), vectors[target])


# --- refusals ------------------------------------------------------------------------------------
@pytest.fixture
def sparse_round() -> tuple[Fleet, dict[str, MaskedInput]]:
    """8 gateways, degree 4, threshold 3, label b"r" masked by everyone but gw-000."""
    fleet = make_fleet(8, degree=4)
    vectors = random_vectors(fleet.ids, 16)
    return fleet, mask_all(fleet, b"r", vectors, drop_before=["gw-000"])


def test_client_refuses_malicious_unmask_requests(sparse_round) -> None:
    fleet, masked = sparse_round
    requests = fleet.server.unmask_request(b"r", masked)
    me = next(c for c in fleet.ids if "gw-000" in fleet.server.neighbours[c])
    client, honest = fleet.clients[me], requests[me]
    linked = fleet.server.neighbours[me]
    stranger = next(c for c in fleet.ids if c != me and c not in linked)
    survivor = next(v for v in honest.survivors if v != me)

    def refuses(match: str, survivors=honest.survivors, dropped=honest.dropped, shares=honest.shares) -> None:
        with pytest.raises(SecureAggregationError, match=match):
            client.unmask(b"r", survivors, dropped, shares)

    refuses("both as survivors and as dropped", dropped=(*honest.dropped, survivor))
    refuses("not neighbours", survivors=(*honest.survivors, stranger))
    refuses("neighbours neither", dropped=(*honest.dropped, "gw-999"))
    few = (me, survivor)
    refuses("only 2 survivors .* at least 3", survivors=few, shares={survivor: honest.shares[survivor]})
    refuses("no bundle from surviving neighbours", shares={k: v for k, v in honest.shares.items() if k != survivor})
    refuses("not surviving neighbours", shares={**honest.shares, "gw-000": masked[survivor].shares[me]})

    # None of the refusals consumed the label: the honest request is still answered, once.
    reply = client.unmask(b"r", honest.survivors, honest.dropped, honest.shares)
    assert set(reply.self_mask) == set(honest.survivors) - {me}
    assert "gw-000" in {peer for by_peer in reply.pair_seeds.values() for peer in by_peer}
    refuses("already answered an unmask request")


def test_client_refuses_to_reveal_pair_seeds_with_a_client_outside_its_two_hops() -> None:
    fleet = make_fleet(12, degree=2)  # a ring: neighbours +-1, their neighbours +-2
    vectors = random_vectors(fleet.ids, 8)
    masked = mask_all(fleet, b"r", vectors)
    me = fleet.ids[0]
    request = fleet.server.unmask_request(b"r", masked)[me]
    linked = fleet.server.neighbours[me]
    remote = next(
        c for c in fleet.ids if c not in {me, *linked} and all(c not in fleet.server.neighbours[v] for v in linked)
    )
    with pytest.raises(SecureAggregationError, match="neighbours neither"):
        fleet.clients[me].unmask(b"r", request.survivors, (remote,), request.shares)


def _tampered(blob: bytes) -> bytes:
    flipped = bytearray(blob)
    flipped[-1] ^= 1
    return bytes(flipped)


@pytest.mark.parametrize("how", ["tampered", "for another receiver", "relabelled", "of another label"])
def test_a_bundle_that_does_not_open_is_complained_about_and_nothing_of_it_is_revealed(sparse_round, how) -> None:
    fleet, masked = sparse_round
    requests = fleet.server.unmask_request(b"r", masked)
    me = next(c for c in fleet.ids if "gw-000" in fleet.server.neighbours[c])
    honest = requests[me]
    first, second = sorted(honest.shares)[:2]
    if how == "tampered":
        bad = {first: _tampered(honest.shares[first])}
    elif how == "for another receiver":
        bad = {first: masked[first].shares[next(w for w in fleet.server.neighbours[first] if w != me)]}
    elif how == "relabelled":
        bad = {first: honest.shares[second], second: honest.shares[first]}
    else:
        bad = {v: fleet.clients[v].mask(b"other", np.zeros(16, np.uint64)).shares[me] for v in (first, second)}
    reply = fleet.clients[me].unmask(b"r", honest.survivors, honest.dropped, {**honest.shares, **bad})
    assert sorted(reply.complaints) == sorted(bad)
    assert all(len(key) == 32 for key in reply.complaints.values())  # each bundle's key, the evidence
    assert set(reply.self_mask) == set(honest.shares) - set(bad)
    assert not set(reply.pair_seeds) & set(bad)


def test_client_refuses_bad_setup_and_masking() -> None:
    fleet = make_fleet(5)
    server = fleet.server
    keys = ClientKeyPairs.generate()
    fresh = SecAggClient("gw-000", keys=keys)
    with pytest.raises(SecureAggregationError, match="not joined"):
        fresh.mask(b"r", np.zeros(3, np.uint64))
    with pytest.raises(SecureAggregationError, match="own public keys"):
        fresh.join(server.roster, server.neighbours["gw-000"], server.threshold, JOB)
    client = fleet.clients["gw-000"]
    with pytest.raises(SecureAggregationError, match="already joined"):
        client.join(server.roster, server.neighbours["gw-000"], server.threshold, JOB)

    roster = {**server.roster, "gw-000": fresh.public_keys()}
    linked = list(server.neighbours["gw-000"])
    for neighbours, threshold, match in (
        ([*linked, "gw-000"], 2, "its own neighbour"),
        ([*linked, "gw-404"], 2, "no public keys"),
        ([*linked, linked[0]], 2, "twice"),
        (linked, 1, "threshold must be in \\[2, 4\\]"),
        (linked, 5, "threshold must be in \\[2, 4\\]"),
    ):
        with pytest.raises(SecureAggregationError, match=match):
            SecAggClient("gw-000", keys=keys).join(roster, neighbours, threshold, JOB)

    client.mask(b"r", np.zeros(3, np.uint64))
    with pytest.raises(SecureAggregationError, match="already masked"):
        client.mask(b"r", np.zeros(3, np.uint64))
    with pytest.raises(SecureAggregationError, match="uint64 ring vector"):
        client.mask(b"r2", np.zeros(3))
    with pytest.raises(SecureAggregationError, match="label"):
        client.mask(b"", np.zeros(3, np.uint64))


def test_server_refuses_inconsistent_rounds(sparse_round) -> None:
    fleet, masked = sparse_round
    server = fleet.server
    with pytest.raises(SecureAggregationError, match="not selected \\(or not in the job\\): \\['gw-404'\\]"):
        server.unmask_request(b"r", {**masked, "gw-404": masked["gw-001"]})
    short = MaskedInput(masked=masked["gw-001"].masked[:3].copy(), shares=masked["gw-001"].shares)
    with pytest.raises(SecureAggregationError, match="length"):
        server.unmask_request(b"r", {**masked, "gw-001": short})
    partial = MaskedInput(masked=masked["gw-001"].masked, shares=dict(list(masked["gw-001"].shares.items())[:-1]))
    with pytest.raises(SecureAggregationError, match="exactly its neighbours"):
        server.unmask_request(b"r", {**masked, "gw-001": partial})
    with pytest.raises(SecureAggregationError, match="no unmask request"):
        server.aggregate(b"r", masked, {}, 16)

    requests = server.unmask_request(b"r", masked)
    assert server.unmask_request(b"r", masked) == requests  # resending is fine
    fewer = {c: m for c, m in masked.items() if c != "gw-001"}
    with pytest.raises(SecureAggregationError, match="other survivors"):
        server.unmask_request(b"r", fewer)
    replies = answer_all(fleet, b"r", requests)
    with pytest.raises(SecureAggregationError, match="differ from the survivors"):
        server.aggregate(b"r", fewer, replies, 16)
    with pytest.raises(SecureAggregationError, match="length 17"):
        server.aggregate(b"r", masked, replies, 17)
    with pytest.raises(SecureAggregationError, match="was not asked"):
        server.aggregate(b"r", masked, {**replies, "gw-000": replies["gw-001"]}, 16)
    liar = next(c for c in replies if replies[c].pair_seeds)
    owner, by_peer = next(iter(replies[liar].pair_seeds.items()))
    survivor_peer = next(v for v in server.neighbours[owner] if v in masked)
    forged = UnmaskShares(
        self_mask=replies[liar].self_mask, pair_seeds={owner: {survivor_peer: next(iter(by_peer.values()))}}
    )
    # the forged reply is discarded whole, and the seeds it was needed for make the label fail naming it
    with pytest.raises(MaliciousGateway, match=f"{liar} revealed pair seeds of {owner} with peers that did not drop"):
        server.aggregate(b"r", masked, {**replies, liar: forged}, 16)
    with pytest.raises(SecureAggregationError, match="already aggregated"):
        server.unmask_request(b"r", masked)
    with pytest.raises(SecureAggregationError, match="cannot rebuild"):  # too few replies: the label stays pending
        server.aggregate(b"r2", *_answered_without(fleet, b"r2", liar))


def _answered_without(fleet: Fleet, label: bytes, silent: str):
    masked = mask_all(fleet, label, random_vectors(fleet.ids, 16), drop_before=["gw-000"])
    replies = answer_all(fleet, label, fleet.server.unmask_request(label, masked), drop_after=[silent])
    return masked, replies, 16


def test_server_setup_is_validated() -> None:
    ids = ["a", "b", "c", "d"]
    with pytest.raises(SecureAggregationError, match="at least 3 clients"):
        SecAggServer(SecAggConfig(), ["a", "b"], JOB, seed=0)
    with pytest.raises(SecureAggregationError, match="twice"):
        SecAggServer(SecAggConfig(), ["a", "a", "b"], JOB, seed=0)
    with pytest.raises(SecureAggregationError, match="exceeds"):
        SecAggServer(SecAggConfig(threshold=4), ids, JOB, seed=0)
    with pytest.raises(SecureAggregationError, match="degree"):
        SecAggConfig(degree=1)
    with pytest.raises(SecureAggregationError, match="threshold"):
        SecAggConfig(threshold=1)
    server = SecAggServer(SecAggConfig(), ids, JOB, seed=0)
    with pytest.raises(SecureAggregationError, match="set_public_keys first"):
        server.roster
    keys = {c: SecAggClient(c).public_keys() for c in ids}
    with pytest.raises(SecureAggregationError, match="not invited"):
        server.set_public_keys({**keys, "e": keys["a"]})
    with pytest.raises(SecureAggregationError, match="at least 3 clients"):
        server.set_public_keys({"a": keys["a"], "b": keys["b"]})
    server.set_public_keys(keys)
    with pytest.raises(SecureAggregationError, match="already set"):
        server.set_public_keys(keys)


# --- scale ---------------------------------------------------------------------------------------
def test_a_hundred_gateways_with_ten_percent_dropping(capsys: pytest.CaptureFixture[str]) -> None:
    start = time.perf_counter()
    fleet = make_fleet(100)
    assert (fleet.server.degree, fleet.server.threshold) == (16, 9)
    vectors = random_vectors(fleet.ids, 10**4, seed=11)
    dropped = set(fleet.ids[::10])
    late = {fleet.ids[5]}
    assert recoverable(fleet, dropped, late)
    total = aggregate(fleet, b"big", vectors, drop_before=dropped, drop_after=late)
    np.testing.assert_array_equal(total, plain_sum(vectors, dropped))
    assert time.perf_counter() - start < 10
    assert capsys.readouterr() == ("", "")
