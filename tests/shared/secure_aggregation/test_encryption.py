"""AES-GCM sealing: round trip; any change of key, data, associated data or size is refused."""

from __future__ import annotations

import os

import pytest

from shared.secure_aggregation import SEAL_OVERHEAD, SecureAggregationError, open_sealed, seal


def test_round_trip_and_fresh_nonces() -> None:
    key = os.urandom(32)
    first, second = seal(key, b"share", b"ad"), seal(key, b"share", b"ad")
    assert len(first) == 5 + SEAL_OVERHEAD
    assert first != second  # random nonce per blob
    assert open_sealed(key, first, b"ad") == open_sealed(key, second, b"ad") == b"share"
    assert open_sealed(key, seal(key, b"", b""), b"") == b""


def test_any_alteration_is_refused() -> None:
    key = os.urandom(32)
    blob = seal(key, b"share of a seed", b"job|label|alice|bob")
    with pytest.raises(SecureAggregationError, match="does not open"):
        open_sealed(os.urandom(32), blob, b"job|label|alice|bob")
    with pytest.raises(SecureAggregationError, match="does not open"):
        open_sealed(key, blob, b"job|label|alice|carol")  # redirected to another receiver
    for position in (0, 12, len(blob) - 1):  # nonce, ciphertext, tag
        altered = bytearray(blob)
        altered[position] ^= 1
        with pytest.raises(SecureAggregationError, match="does not open"):
            open_sealed(key, bytes(altered), b"job|label|alice|bob")
    with pytest.raises(SecureAggregationError, match="at least"):
        open_sealed(key, blob[: SEAL_OVERHEAD - 1], b"job|label|alice|bob")
    with pytest.raises(SecureAggregationError, match="32 bytes"):
        open_sealed(key[:16], blob, b"job|label|alice|bob")
    with pytest.raises(SecureAggregationError, match="must be bytes"):
        open_sealed(key, "text", b"")  # type: ignore[arg-type]
