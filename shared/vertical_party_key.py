"""The secret a person's gateways share in a vertical job, and what it protects from the master.

The gateways of one person (the *parties* of a vertical Federated Forest) are provisioned with
one random key the aggregator never sees. From it they derive, with HKDF-SHA256, one key per
use: a keyed hash of window identities (``shared.vertical_alignment``), so that the master
aligns windows it cannot name, and an AES-256-GCM key that seals what the parties must tell
each other through the master (the labels, the sample partitions): the master relays the
ciphertext and learns only its length.

Why a shared key rather than per-pair keys: every party needs the same labels and the same
partitions (paper §3: "the labels were copied to the master and clients in encrypted forms"),
and the parties of one person trust each other; what the master must not read is the same for
all of them. ``associated`` data binds a sealed blob to its job and step, so the master cannot
replay one job's partitions into another.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["KEY_BYTES", "PartyKey", "SealError", "new_party_key", "read_party_key"]

KEY_BYTES = 32
_NONCE_BYTES = 12


class SealError(ValueError):
    """A sealed blob did not open: wrong key, wrong job/step, or tampered with on the way."""


def new_party_key() -> bytes:
    """A fresh random party secret (to be provisioned on every gateway of one person)."""
    return os.urandom(KEY_BYTES)


def read_party_key(path: Path) -> bytes:
    """The secret in a party key file (one line of hex, as ``new_party_key().hex()`` writes);
    ``ValueError`` with one line naming the file otherwise."""
    try:
        secret = bytes.fromhex(Path(path).read_text(encoding="utf-8").strip())
    except OSError as exc:
        raise ValueError(f"party key file {path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError:
        raise ValueError(f"party key file {path}: not a hex key (one line of hex digits)") from None
    if len(secret) < 16:
        raise ValueError(f"party key file {path}: the key must be at least 16 random bytes (32 hex digits)")
    return secret


def _derive(secret: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


@dataclass(frozen=True, repr=False)
class PartyKey:
    """The derived keys of one party secret (``repr`` shows no key material).

    Examples
    --------
    >>> key = PartyKey.from_secret(bytes(32))
    >>> blob = key.seal(b"labels", associated=b"job-1/labels")
    >>> key.open(blob, associated=b"job-1/labels")
    b'labels'
    """

    id_key: bytes
    seal_key: bytes

    @classmethod
    def from_secret(cls, secret: bytes) -> PartyKey:
        if not isinstance(secret, bytes) or len(secret) < 16:
            raise ValueError("party_key must be at least 16 random bytes shared by the parties")
        return cls(
            _derive(secret, b"wheelfed vertical window ids v1"), _derive(secret, b"wheelfed vertical sealing v1")
        )

    def __repr__(self) -> str:
        return "PartyKey(<secret>)"

    def seal(self, data: bytes, *, associated: bytes) -> bytes:
        """``nonce || AES-GCM(data)``, authenticated together with ``associated``."""
        nonce = os.urandom(_NONCE_BYTES)
        return nonce + AESGCM(self.seal_key).encrypt(nonce, data, associated)

    def open(self, blob: bytes, *, associated: bytes) -> bytes:
        if len(blob) < _NONCE_BYTES + 16:
            raise SealError("sealed blob too short")
        try:
            return AESGCM(self.seal_key).decrypt(blob[:_NONCE_BYTES], blob[_NONCE_BYTES:], associated)
        except InvalidTag:
            raise SealError(
                "sealed blob does not open with this party key (another person's gateways, "
                "another job, or altered in transit)"
            ) from None
