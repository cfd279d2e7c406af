"""X25519 key pairs and agreement: symmetric, label-separated, low-order keys refused."""

from __future__ import annotations

import pickle

import pytest

from shared.secure_aggregation import ClientKeyPairs, PublicKeys, SecureAggregationError, agree, derive_key


def test_agreement_is_symmetric_and_separated_by_label() -> None:
    alice, bob = ClientKeyPairs.generate(), ClientKeyPairs.generate()
    a_pub, b_pub = alice.public_keys(), bob.public_keys()
    key = agree(alice.cipher_key, b_pub.cipher, b"label-1")
    assert len(key) == 32
    assert key == agree(bob.cipher_key, a_pub.cipher, b"label-1")
    assert key != agree(alice.cipher_key, b_pub.cipher, b"label-2")
    assert key != agree(alice.mask_key, b_pub.mask, b"label-1")  # the two key pairs are independent
    assert agree(alice.mask_key, b_pub.mask, b"x") == agree(bob.mask_key, a_pub.mask, b"x")


def test_fresh_keys_differ_and_are_not_leaked() -> None:
    first, second = ClientKeyPairs.generate(), ClientKeyPairs.generate()
    assert first.public_keys() != second.public_keys()
    assert first.public_keys().cipher != first.public_keys().mask
    assert "ClientKeyPairs(public=" in repr(first)
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(first)


def test_low_order_and_malformed_peer_keys_are_refused() -> None:
    keys = ClientKeyPairs.generate()
    with pytest.raises(SecureAggregationError, match="low-order"):
        agree(keys.cipher_key, bytes(32), b"l")  # the all-zero point: the shared secret would be 0
    with pytest.raises(SecureAggregationError, match="32 bytes"):
        agree(keys.cipher_key, bytes(31), b"l")


def test_public_keys_wire_form_and_validation() -> None:
    public = ClientKeyPairs.generate().public_keys()
    wire = public.to_bytes()
    assert len(wire) == 64 and PublicKeys.from_bytes(wire) == public
    assert PublicKeys(cipher=bytearray(public.cipher), mask=public.mask) == public
    with pytest.raises(SecureAggregationError, match="32-byte"):
        PublicKeys(cipher=b"x" * 33, mask=public.mask)
    with pytest.raises(SecureAggregationError, match="bytes"):
        PublicKeys(cipher="not bytes", mask=public.mask)  # type: ignore[arg-type]
    with pytest.raises(SecureAggregationError, match="64 bytes"):
        PublicKeys.from_bytes(wire[:-1])


def test_derive_key_matches_rfc5869_structure() -> None:
    # RFC 5869 test case 3 (SHA-256, empty salt and info), truncated to our 32-byte output.
    ikm = bytes.fromhex("0b" * 22)
    okm = bytes.fromhex("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d")
    assert derive_key(ikm, b"") == okm
