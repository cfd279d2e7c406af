"""X25519 key pairs of a gateway and the key agreement that turns two of them into a shared key.

Why two key pairs (Bonawitz et al. 2017, §4): the *cipher* key pair ``c`` yields the AES-GCM keys
that protect Shamir shares on their way through the server; the *mask* key pair ``s`` yields the
pair secrets from which pairwise masks are derived. Keeping them apart means no use of one can
ever weaken the other. Both are generated fresh for each training job and never leave the
gateway: what the server learns are the 32-byte public keys.

``agree`` never returns the raw X25519 output: it feeds it through HKDF-SHA256 with a label
(``info``), so the same pair of keys gives independent keys for independent purposes.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import SecureAggregationError

__all__ = ["DERIVED_KEY_BYTES", "PUBLIC_KEY_BYTES", "ClientKeyPairs", "PublicKeys", "agree", "derive_key"]

PUBLIC_KEY_BYTES = 32
DERIVED_KEY_BYTES = 32


def _public_bytes(private: X25519PrivateKey) -> bytes:
    return private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@dataclass(frozen=True)
class PublicKeys:
    """What a gateway advertises for a job: its two raw X25519 public keys (32 bytes each).

    ``to_bytes``/``from_bytes`` give the 64-byte wire form ``cipher || mask``.
    """

    cipher: bytes
    mask: bytes

    def __post_init__(self) -> None:
        for name in ("cipher", "mask"):
            value = getattr(self, name)
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise SecureAggregationError(f"PublicKeys.{name} must be bytes, got {type(value).__name__}")
            value = bytes(value)
            if len(value) != PUBLIC_KEY_BYTES:
                raise SecureAggregationError(
                    f"PublicKeys.{name} must be a raw {PUBLIC_KEY_BYTES}-byte X25519 key, got {len(value)} bytes"
                )
            object.__setattr__(self, name, value)

    def to_bytes(self) -> bytes:
        return self.cipher + self.mask

    @classmethod
    def from_bytes(cls, data: bytes) -> PublicKeys:
        if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) != 2 * PUBLIC_KEY_BYTES:
            size = len(data) if isinstance(data, (bytes, bytearray, memoryview)) else type(data).__name__
            raise SecureAggregationError(f"PublicKeys wire form is {2 * PUBLIC_KEY_BYTES} bytes, got {size}")
        data = bytes(data)
        return cls(cipher=data[:PUBLIC_KEY_BYTES], mask=data[PUBLIC_KEY_BYTES:])


@dataclass(frozen=True, repr=False)
class ClientKeyPairs:
    """A gateway's two X25519 private keys for one job: ``cipher_key`` (c) and ``mask_key`` (s)."""

    cipher_key: X25519PrivateKey
    mask_key: X25519PrivateKey

    @classmethod
    def generate(cls) -> ClientKeyPairs:
        """Fresh keys from the operating system's CSPRNG (via OpenSSL)."""
        return cls(cipher_key=X25519PrivateKey.generate(), mask_key=X25519PrivateKey.generate())

    def public_keys(self) -> PublicKeys:
        return PublicKeys(cipher=_public_bytes(self.cipher_key), mask=_public_bytes(self.mask_key))

    def __repr__(self) -> str:  # never shows the secrets
        return f"ClientKeyPairs(public={self.public_keys().to_bytes().hex()[:16]}...)"

    def __reduce__(self) -> tuple:
        raise TypeError("ClientKeyPairs is not picklable (it would copy the private keys)")


def derive_key(secret: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 (RFC 5869, no salt) of ``secret`` to 32 bytes, bound to ``info``.

    Why no salt: every input here is already a uniformly random or Diffie-Hellman secret, and
    domain separation comes from ``info``; RFC 5869 §3.1 allows an absent salt.
    """
    return HKDF(algorithm=hashes.SHA256(), length=DERIVED_KEY_BYTES, salt=None, info=info).derive(secret)


def agree(private: X25519PrivateKey, peer_public: bytes, label: bytes) -> bytes:
    """The 32-byte key both ends of a pair derive: HKDF-SHA256(X25519(private, peer), info=label).

    Symmetric: ``agree(a, B, l) == agree(b, A, l)``. ``label`` separates purposes (and jobs).

    Raises
    ------
    SecureAggregationError
        If ``peer_public`` is not 32 bytes or is a low-order point (the exchange would give the
        all-zero secret, which an attacker could predict; OpenSSL refuses it).
    """
    if not isinstance(peer_public, (bytes, bytearray, memoryview)) or len(peer_public) != PUBLIC_KEY_BYTES:
        raise SecureAggregationError(f"a peer's X25519 public key must be {PUBLIC_KEY_BYTES} bytes")
    try:
        shared = private.exchange(X25519PublicKey.from_public_bytes(bytes(peer_public)))
    except ValueError as exc:
        raise SecureAggregationError(f"X25519 key agreement failed (low-order or invalid public key): {exc}") from None
    return derive_key(shared, label)
