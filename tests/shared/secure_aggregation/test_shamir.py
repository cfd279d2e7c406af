"""Shamir sharing over GF(2**521 - 1): any threshold subset rebuilds; fewer reveal nothing."""

from __future__ import annotations

import itertools
import secrets

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.secure_aggregation import PRIME, SHARE_BYTES, SecureAggregationError, combine_shares, split_secret
from shared.secure_aggregation.shamir import lagrange_weights_at_zero


def test_every_threshold_subset_reconstructs() -> None:
    secret = secrets.token_bytes(32)
    shares = split_secret(secret, [1, 2, 3, 5, 8, 13], threshold=3)
    assert all(len(share) == SHARE_BYTES for share in shares.values())
    for size in (3, 4, 6):
        for subset in itertools.combinations(shares, size):
            assert combine_shares({x: shares[x] for x in subset}, 32) == secret


@settings(max_examples=150, deadline=None)
@given(
    secret=st.binary(min_size=1, max_size=64),
    n_holders=st.integers(1, 12),
    data=st.data(),
)
def test_random_secrets_round_trip(secret: bytes, n_holders: int, data: st.DataObject) -> None:
    holders = data.draw(st.lists(st.integers(1, 10**6), min_size=n_holders, max_size=n_holders, unique=True))
    threshold = data.draw(st.integers(1, n_holders))
    shares = split_secret(secret, holders, threshold)
    subset = data.draw(st.permutations(holders))[:threshold]
    assert combine_shares({x: shares[x] for x in subset}, len(secret)) == secret  # leading zero bytes kept


def test_fewer_than_threshold_shares_are_consistent_with_every_secret() -> None:
    """Information-theoretic hiding: for t - 1 shares and ANY candidate secret there is a
    polynomial of degree t - 1 through both, so the shares cannot single out the real one."""
    secret, threshold = secrets.token_bytes(32), 4
    shares = split_secret(secret, [1, 2, 3, 4, 5], threshold)
    seen = {x: shares[x] for x in (1, 2, 3)}  # t - 1 shares
    for candidate in (bytes(32), b"\xff" * 32, secrets.token_bytes(32)):
        # Interpolate through (0, candidate) and the seen shares, evaluate at x = 4: a share that
        # completes the seen ones to a valid sharing of the candidate.
        points = {0: int.from_bytes(candidate, "big"), **{x: int.from_bytes(y, "big") for x, y in seen.items()}}
        forged_y = sum(y * _basis(points, x, at=4) for x, y in points.items()) % PRIME
        completed = {**seen, 4: forged_y.to_bytes(SHARE_BYTES, "big")}
        assert combine_shares(completed, 32) == candidate


def _basis(points: dict[int, int], x_i: int, at: int) -> int:
    value = 1
    for x_j in points:
        if x_j != x_i:
            value = value * (at - x_j) * pow(x_i - x_j, -1, PRIME) % PRIME
    return value


def test_too_few_shares_do_not_give_the_secret() -> None:
    secret = secrets.token_bytes(32)
    shares = split_secret(secret, [1, 2, 3, 4], threshold=3)
    with pytest.raises(SecureAggregationError, match="too few shares"):
        combine_shares({1: shares[1], 2: shares[2]}, 32)  # a random field element: not 32 bytes


def test_threshold_one_is_the_secret_itself() -> None:
    shares = split_secret(b"\x00\x01", [7, 9], threshold=1)
    assert combine_shares({9: shares[9]}, 2) == b"\x00\x01"
    assert int.from_bytes(shares[7], "big") == 1


def test_lagrange_weights_sum_to_one() -> None:
    # f = 1 is a constant polynomial: f(0) = sum(w_i * 1) = 1.
    assert sum(lagrange_weights_at_zero([2, 5, 11, 12])) % PRIME == 1


def test_invalid_inputs_are_refused() -> None:
    with pytest.raises(SecureAggregationError, match="1 to 64"):
        split_secret(b"", [1, 2], 1)
    with pytest.raises(SecureAggregationError, match="1 to 64"):
        split_secret(b"x" * 65, [1, 2], 1)
    with pytest.raises(SecureAggregationError, match="distinct"):
        split_secret(b"x", [1, 1], 1)
    with pytest.raises(SecureAggregationError, match="x-coordinate"):
        split_secret(b"x", [0, 1], 1)
    with pytest.raises(SecureAggregationError, match="threshold"):
        split_secret(b"x", [1, 2], 3)
    shares = split_secret(b"x" * 32, [1, 2], 2)
    with pytest.raises(SecureAggregationError, match="no shares"):
        combine_shares({}, 32)
    with pytest.raises(SecureAggregationError, match="66 bytes"):
        combine_shares({1: shares[1][:-1], 2: shares[2]}, 32)
    with pytest.raises(SecureAggregationError, match="field element"):
        combine_shares({1: b"\xff" * SHARE_BYTES, 2: shares[2]}, 32)
    with pytest.raises(SecureAggregationError, match="x-coordinate"):
        combine_shares({-1: shares[1], 2: shares[2]}, 32)
    with pytest.raises(SecureAggregationError, match="secret_len"):
        combine_shares(shares, 0)
