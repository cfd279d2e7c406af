"""Mask expansion: the AES-CTR keystream as little-endian uint64, label separation, cancellation, speed."""

from __future__ import annotations

import time

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from shared.secure_aggregation import SecureAggregationError, derive_key, expand_mask, pairwise_mask


def test_mask_is_the_aes_ctr_keystream_read_little_endian() -> None:
    seed, label = bytes(range(32)), b"self-mask"
    encryptor = Cipher(algorithms.AES(derive_key(seed, label)), modes.CTR(bytes(16))).encryptor()
    expected = np.frombuffer(encryptor.update(bytes(8 * 37)), dtype="<u8")
    mask = expand_mask(seed, 37, label)
    assert mask.dtype == np.uint64 and mask.flags.writeable
    np.testing.assert_array_equal(mask, expected)


def test_masks_are_deterministic_and_separated() -> None:
    seed = b"s" * 32
    np.testing.assert_array_equal(expand_mask(seed, 100, b"a"), expand_mask(seed, 100, b"a"))
    assert not np.array_equal(expand_mask(seed, 100, b"a"), expand_mask(seed, 100, b"b"))
    assert not np.array_equal(expand_mask(seed, 100, b"a"), expand_mask(b"t" * 32, 100, b"a"))
    np.testing.assert_array_equal(expand_mask(seed, 10, b"a"), expand_mask(seed, 100, b"a")[:10])  # prefix property
    assert expand_mask(seed, 0, b"a").shape == (0,)


def test_pairwise_masks_cancel() -> None:
    secret = b"k" * 32
    a_side = pairwise_mask(secret, "gw-a", "gw-b", b"round-1", 1000)
    b_side = pairwise_mask(secret, "gw-b", "gw-a", b"round-1", 1000)
    assert np.all(a_side + b_side == 0)
    np.testing.assert_array_equal(a_side, expand_mask(secret, 1000, b"round-1"))  # smaller id adds +m
    with pytest.raises(SecureAggregationError, match="itself"):
        pairwise_mask(secret, "gw-a", "gw-a", b"round-1", 10)


def test_invalid_arguments_are_refused() -> None:
    with pytest.raises(SecureAggregationError, match="at least 16"):
        expand_mask(b"short", 10, b"l")
    with pytest.raises(SecureAggregationError, match="non-negative"):
        expand_mask(b"s" * 32, -1, b"l")


def test_a_million_elements_in_well_under_a_tenth_of_a_second() -> None:
    best = min(_timed(lambda: expand_mask(b"s" * 32, 10**6, b"speed")) for _ in range(3))
    assert best < 0.05, f"expand_mask took {best:.3f} s for 10**6 elements"


def _timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start
