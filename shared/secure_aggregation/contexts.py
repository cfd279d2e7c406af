"""What every party derives identically: HKDF ``info`` strings, AES-GCM associated data, Shamir x-coordinates.

Why one module: the same X25519 secrets and seeds feed several derivations (the AES-GCM key of
a pair of gateways, their per-job pair secret, each aggregation's pair seed, self-mask and
pairwise-mask keystreams, the associated data of sealed shares). HKDF makes outputs with
distinct ``info`` independent, so revealing one (an aggregation's pair seed, when a gateway
drops) reveals nothing about any other (the next aggregation's pair seed). Every variable part
is length-prefixed, so no two (job, label, ...) tuples can produce the same bytes.

A client's Shamir x-coordinate is a 64-bit hash of its id (``share_x``), not its position in a roster:
a gateway then needs the public keys of its neighbours only (O(degree) setup messages instead of
O(n)), and the server and every holder agree on x without agreeing on a full roster.

Job and label are opaque bytes chosen by the caller: the job once per key setup (e.g.
``b"wheelfed/job-7"``), the label once per aggregation within that job (e.g.
``b"round-12/level-3/gradients"``). Each must be 1 to 256 bytes; a label must never be reused
within a job (gateways refuse to mask or unmask a label twice).
"""

from __future__ import annotations

import hashlib

from .errors import SecureAggregationError

__all__ = [
    "MAX_LABEL_BYTES",
    "bundle_associated_data",
    "bundle_key_commitment_info",
    "bundle_key_info",
    "check_label",
    "cipher_key_info",
    "confirmation_associated_data",
    "key_confirmation_info",
    "pair_mask_info",
    "pair_secret_info",
    "pair_seed_info",
    "self_mask_info",
    "share_commitment_context",
    "share_x",
]

MAX_LABEL_BYTES = 256
_PREFIX = b"wheelfed/secagg/v1/"


def check_label(value: object, what: str) -> bytes:
    """``value`` as bytes if it is a valid job or label (1 to 256 bytes), else SecureAggregationError."""
    if not isinstance(value, (bytes, bytearray)) or not 1 <= len(value) <= MAX_LABEL_BYTES:
        raise SecureAggregationError(f"{what} must be 1 to {MAX_LABEL_BYTES} bytes, got {value!r:.80}")
    return bytes(value)


def _context(purpose: bytes, *parts: bytes) -> bytes:
    out = bytearray(_PREFIX + purpose)
    for part in parts:
        out += len(part).to_bytes(4, "big") + part
    return bytes(out)


def cipher_key_info(job: bytes) -> bytes:
    """AES-GCM key of a pair of gateways for a job (from their cipher keys)."""
    return _context(b"cipher-key", job)


def pair_secret_info(job: bytes) -> bytes:
    """Per-job pair secret of two gateways (from their mask keys); never revealed."""
    return _context(b"pair-secret", job)


def pair_seed_info(job: bytes, label: bytes) -> bytes:
    """One aggregation's pair seed, derived from the pair secret; revealed (via shares) if one of the two drops."""
    return _context(b"pair-seed", job, label)


def self_mask_info(job: bytes, label: bytes) -> bytes:
    """Keystream of a gateway's self-mask for one aggregation."""
    return _context(b"self-mask", job, label)


def pair_mask_info(job: bytes, label: bytes) -> bytes:
    """Keystream of a pairwise mask for one aggregation (the same for both ends of the pair)."""
    return _context(b"pair-mask", job, label)


def bundle_associated_data(job: bytes, label: bytes, sender: str, receiver: str) -> bytes:
    """Associated data of a sealed share bundle: binds it to job, label, sender and receiver."""
    return _context(b"share-bundle", job, label, sender.encode("utf-8"), receiver.encode("utf-8"))


def bundle_key_info(job: bytes, label: bytes, dealer: str, holder: str) -> bytes:
    """AES-GCM key of one sealed share bundle, derived from the pair's cipher key: revealing it
    (a holder's evidence for a complaint) opens that bundle only."""
    return _context(b"bundle-key", job, label, dealer.encode("utf-8"), holder.encode("utf-8"))


def bundle_key_commitment_info() -> bytes:
    """A bundle key's commitment (the nonce its bundle is sealed with); the key is already bound
    to its job, label, dealer and holder."""
    return _context(b"bundle-key-commitment")


def share_commitment_context(job: bytes, label: bytes, dealer: str, holder: str, peer: str | None) -> bytes:
    """Prefix hashed with a share into its commitment: its job, label, dealer, holder and slot
    (``peer`` None: the self-mask seed's share; a peer id: the share of the pair seed with it)."""
    slot = b"self" if peer is None else b"pair" + peer.encode("utf-8")
    return _context(b"share-commitment", job, label, dealer.encode("utf-8"), holder.encode("utf-8"), slot)


def key_confirmation_info(job: bytes) -> bytes:
    """Key-confirmation value of a pair of gateways (from their pair secret): proves both hold the same keys."""
    return _context(b"key-confirmation", job)


def confirmation_associated_data(job: bytes, sender: str, receiver: str) -> bytes:
    """Associated data of a sealed key confirmation: binds it to job, sender and receiver."""
    return _context(b"key-confirmation-blob", job, sender.encode("utf-8"), receiver.encode("utf-8"))


def share_x(client_id: str) -> int:
    """The Shamir x-coordinate of a client: 1 + the first 64 bits of a SHA-256 of its id.

    Nonzero and far below p. 64 bits keep share arithmetic cheap; two of n ids collide with
    probability about n**2 / 2**65 (3e-10 for 10**5 gateways), and the server refuses a roster
    with a collision at setup rather than mixing up shares.
    """
    digest = hashlib.sha256(_context(b"shamir-x", client_id.encode("utf-8"))).digest()
    return 1 + int.from_bytes(digest[:8], "big")
