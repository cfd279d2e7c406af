"""Payload types and the share-bundle wire form: validation on construction, exact sizes, round trips."""

from __future__ import annotations

import numpy as np
import pytest

from shared.secure_aggregation import (
    SHARE_BYTES,
    MaskedInput,
    SecureAggregationError,
    ShareBundle,
    UnmaskRequest,
    UnmaskShares,
    sealed_bundle_size,
)
from shared.secure_aggregation.contexts import (
    bundle_associated_data,
    check_label,
    pair_seed_info,
    self_mask_info,
    share_x,
)

SHARE = b"\x01" * SHARE_BYTES


def test_bundle_round_trip_and_size() -> None:
    bundle = ShareBundle(self_mask=SHARE, pair_seeds={"gw-7": b"\x02" * SHARE_BYTES, "gw-3": b"\x03" * SHARE_BYTES})
    wire = bundle.to_bytes()
    assert len(wire) == 66 + 2 * (1 + 4 + 66)
    assert sealed_bundle_size(["gw-7", "gw-3"]) == 2 + 16 * 3 + len(wire) + 28  # digests, sealed bundle
    assert ShareBundle.from_bytes(wire) == bundle
    assert ShareBundle.from_bytes(SHARE) == ShareBundle(SHARE, {})
    unicode = ShareBundle(SHARE, {"passerelle-é": SHARE})
    assert ShareBundle.from_bytes(unicode.to_bytes()) == unicode


def test_bundle_refuses_malformed_wire_data() -> None:
    wire = ShareBundle(SHARE, {"a": SHARE}).to_bytes()
    with pytest.raises(SecureAggregationError, match="truncated"):
        ShareBundle.from_bytes(wire[:-1])
    with pytest.raises(SecureAggregationError, match="at least 66"):
        ShareBundle.from_bytes(SHARE[:-1])
    with pytest.raises(SecureAggregationError, match="repeats"):
        ShareBundle.from_bytes(wire + wire[SHARE_BYTES:])
    with pytest.raises(SecureAggregationError, match="empty peer id"):
        ShareBundle.from_bytes(SHARE + bytes(1) + SHARE)
    with pytest.raises(SecureAggregationError, match="UTF-8"):
        ShareBundle.from_bytes(SHARE + b"\x01\xff" + SHARE)
    with pytest.raises(SecureAggregationError, match="66 bytes"):
        ShareBundle(self_mask=b"short", pair_seeds={})
    with pytest.raises(SecureAggregationError, match="255"):
        ShareBundle(SHARE, {"x" * 256: SHARE})


def test_masked_input_is_read_only_and_validated() -> None:
    vector = np.arange(4, dtype=np.uint64)
    masked = MaskedInput(masked=vector, shares={"gw-2": b"blob"})
    with pytest.raises(ValueError):
        masked.masked[0] = 1
    vector[0] = 9  # the caller's own array stays writable
    with pytest.raises(SecureAggregationError, match="uint64"):
        MaskedInput(masked=np.arange(4), shares={})
    with pytest.raises(SecureAggregationError, match="uint64"):
        MaskedInput(masked=np.zeros((2, 2), np.uint64), shares={})
    with pytest.raises(SecureAggregationError, match="bytes"):
        MaskedInput(masked=vector, shares={"gw-2": "text"})  # type: ignore[dict-item]


def test_unmask_messages_are_validated() -> None:
    request = UnmaskRequest(survivors=["a", "b"], dropped=[], shares={"b": b"x"})  # type: ignore[arg-type]
    assert request.survivors == ("a", "b") and request.dropped == ()
    with pytest.raises(SecureAggregationError, match="twice"):
        UnmaskRequest(survivors=("a", "a"), dropped=(), shares={})
    with pytest.raises(SecureAggregationError, match="single string"):
        UnmaskRequest(survivors="ab", dropped=(), shares={})  # type: ignore[arg-type]
    shares = UnmaskShares(self_mask={"a": SHARE}, pair_seeds={"a": {"c": SHARE}})
    assert shares.pair_seeds == {"a": {"c": SHARE}}
    with pytest.raises(SecureAggregationError, match="66-byte"):
        UnmaskShares(self_mask={"a": b"short"}, pair_seeds={})
    with pytest.raises(SecureAggregationError, match="66-byte"):
        UnmaskShares(self_mask={}, pair_seeds={"a": {"c": b"short"}})


def test_contexts_are_unambiguous() -> None:
    # Length prefixes: moving a byte from the job into the label changes the context.
    assert pair_seed_info(b"ab", b"c") != pair_seed_info(b"a", b"bc")
    assert pair_seed_info(b"j", b"l") != self_mask_info(b"j", b"l")
    assert bundle_associated_data(b"j", b"l", "a", "b") != bundle_associated_data(b"j", b"l", "b", "a")
    assert check_label(bytearray(b"x"), "label") == b"x"
    for bad in (b"", b"x" * 257, "text"):
        with pytest.raises(SecureAggregationError, match="1 to 256 bytes"):
            check_label(bad, "label")


def test_share_x_is_a_stable_nonzero_64_bit_coordinate() -> None:
    xs = {share_x(f"gw-{i}") for i in range(1000)}
    assert len(xs) == 1000 and all(0 < x <= 2**64 for x in xs)
    assert share_x("gw-1") == share_x("gw-1")
