"""Authenticated encryption of Shamir shares on their way from one gateway to another through the server.

Why: shares are routed by the server (gateways talk only to the cloud), and the server must not
read them, nor swap one share for another unnoticed. AES-256-GCM gives both; the associated
data binds a blob to its job, label, sender and receiver, so a blob replayed into another
aggregation or redirected to another gateway fails to open.

The 96-bit nonce is prefixed to the blob. A key confirmation's is drawn at random (its key, one
per pair of gateways per job, seals one confirmation each way); a share bundle's is a commitment
to its key (``bundle.bundle_key_commitment``), which is safe because every bundle key seals
exactly one blob.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import SecureAggregationError

__all__ = ["NONCE_BYTES", "SEAL_OVERHEAD", "TAG_BYTES", "open_sealed", "seal"]

KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
#: Bytes a sealed blob adds to its plaintext (nonce + GCM tag).
SEAL_OVERHEAD = NONCE_BYTES + TAG_BYTES


def _cipher(key: bytes) -> AESGCM:
    if not isinstance(key, (bytes, bytearray)) or len(key) != KEY_BYTES:
        raise SecureAggregationError(f"an AES-256-GCM key is {KEY_BYTES} bytes")
    return AESGCM(bytes(key))


def seal(key: bytes, plaintext: bytes, associated: bytes, nonce: bytes | None = None) -> bytes:
    """``nonce || AES-256-GCM(key, nonce, plaintext, associated)``; ``None``: a fresh random nonce.

    A given ``nonce`` must never be used with the same key twice (callers pass one only for a
    key that seals a single blob)."""
    if nonce is None:
        nonce = os.urandom(NONCE_BYTES)
    elif len(nonce) != NONCE_BYTES:
        raise SecureAggregationError(f"an AES-GCM nonce is {NONCE_BYTES} bytes")
    return nonce + _cipher(key).encrypt(nonce, bytes(plaintext), bytes(associated))


def open_sealed(key: bytes, blob: bytes, associated: bytes) -> bytes:
    """The plaintext of a ``seal`` blob, or SecureAggregationError (wrong key, data or any altered byte)."""
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise SecureAggregationError(f"a sealed blob must be bytes, got {type(blob).__name__}")
    blob = bytes(blob)
    if len(blob) < SEAL_OVERHEAD:
        raise SecureAggregationError(f"a sealed blob is at least {SEAL_OVERHEAD} bytes, got {len(blob)}")
    try:
        return _cipher(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], bytes(associated))
    except InvalidTag:
        raise SecureAggregationError(
            "sealed blob does not open: it was altered, or sealed for another job, label, sender or receiver"
        ) from None
