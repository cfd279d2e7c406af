"""The plaintext a gateway seals for each neighbour when it masks: its Shamir shares for that neighbour.

For one aggregation a gateway v splits (a) its fresh self-mask seed ``b_v`` and (b) each of its
pair seeds ``seed(v, u)`` (one per neighbour u taking part) among those neighbours. Neighbour w
receives one bundle: w's share of ``b_v`` and w's share of every ``seed(v, u)``, the latter
tagged with u's id so that w can later reveal exactly the ones the server needs (u need not be
w's own neighbour, so w could not name it otherwise).

Wire form (big-endian, fixed-width shares)::

    self_mask share (66 bytes) || { len(id) (1 byte) || id (UTF-8) || pair-seed share (66 bytes) } ...

i.e. ``66 + sum(67 + len(id))`` bytes, sealed into 28 more.

Commitments: the holder of a bundle cannot alter a share undetected when it reveals it. With the
sealed bundle the dealer sends, in the clear, a 16-byte digest of each share it holds
(``share_digest``: SHA-256 bound to job, label, dealer, holder and the share's slot), so the
server can check every share revealed to it, and the holder can check the shares it was given
before revealing them (a dealer cannot frame an honest holder with shares that do not match).
The digests hide the shares: each is a hash of a uniformly random 521-bit field element, bound
to a seed of 256 random bits. Wire form of what the dealer addresses to one holder (a
*committed bundle*, ``CommittedBundle``)::

    n (2 bytes) || n digests (16 bytes each: self-mask share, then pair-seed shares by peer id) || sealed bundle

so ``sealed_bundle_size`` is ``2 + 16 (1 + k) + 28 + 66 + sum(67 + len(id))`` for k peers.

Bundle keys: every bundle is sealed under its own key, ``bundle_key`` = HKDF of the pair's
cipher key bound to job, label, dealer and holder, and its 12-byte AES-GCM nonce is a commitment
to that key (``bundle_key_commitment``; the key seals that one blob, so the nonce is never
reused). A holder that complains about a bundle reveals its bundle key as evidence: the server
checks it against the nonce and opens that one bundle (``CommittedBundle.open``), exactly as
the holder did. HKDF is one-way, so the key gives neither the pair's cipher key (the bundles of
other labels, of the other direction, the key confirmations) nor anything of the pair secret,
which comes from the other X25519 key pair (``keys``).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Iterable, Mapping

from .contexts import bundle_associated_data, bundle_key_commitment_info, bundle_key_info, share_commitment_context
from .encryption import NONCE_BYTES, SEAL_OVERHEAD, open_sealed, seal
from .errors import SecureAggregationError
from .keys import derive_key
from .shamir import SHARE_BYTES

__all__ = [
    "DIGEST_BYTES",
    "MAX_ID_BYTES",
    "CommittedBundle",
    "ShareBundle",
    "bundle_key",
    "bundle_key_commitment",
    "sealed_bundle_size",
    "share_digest",
]

#: Bytes of a share's commitment (a truncated SHA-256: 128-bit second-preimage resistance).
DIGEST_BYTES = 16
_COUNT_BYTES = 2

#: Longest client id (UTF-8 bytes) a bundle can name.
MAX_ID_BYTES = 255


def _encoded_id(client: object) -> bytes:
    if not isinstance(client, str) or not client:
        raise SecureAggregationError(f"a bundle names peers by non-empty id strings, got {client!r}")
    encoded = client.encode("utf-8")
    if len(encoded) > MAX_ID_BYTES:
        raise SecureAggregationError(f"client id {client[:40]!r}... exceeds {MAX_ID_BYTES} UTF-8 bytes")
    return encoded


def sealed_bundle_size(peers: Iterable[str]) -> int:
    """Bytes of a committed, sealed bundle of a gateway whose taking-part neighbours are ``peers``.

    >>> sealed_bundle_size(["gw-1", "gw-2"])
    286
    """
    peers = list(peers)
    digests = _COUNT_BYTES + DIGEST_BYTES * (1 + len(peers))
    return digests + SEAL_OVERHEAD + SHARE_BYTES + sum(1 + len(_encoded_id(p)) + SHARE_BYTES for p in peers)


def share_digest(job: bytes, label: bytes, dealer: str, holder: str, peer: str | None, share: bytes) -> bytes:
    """The commitment to one share: ``peer`` None for the dealer's self-mask seed, else its pair seed with ``peer``.

    >>> len(share_digest(b"job", b"round-1", "gw-1", "gw-2", None, bytes(66)))
    16
    """
    context = share_commitment_context(job, label, dealer, holder, peer)
    return hashlib.sha256(context + share).digest()[:DIGEST_BYTES]


def bundle_key(cipher_key: bytes, job: bytes, label: bytes, dealer: str, holder: str) -> bytes:
    """The AES-GCM key of the one bundle ``dealer`` seals for ``holder`` in aggregation ``label``.

    ``cipher_key``: the pair's key from ``agree`` (either end derives the same bundle key).
    """
    return derive_key(cipher_key, bundle_key_info(job, label, dealer, holder))


def bundle_key_commitment(key: bytes) -> bytes:
    """The nonce a bundle sealed under ``key`` carries: a 96-bit commitment to the key.

    >>> len(bundle_key_commitment(bytes(32)))
    12
    """
    return derive_key(key, bundle_key_commitment_info())[:NONCE_BYTES]


@dataclass(frozen=True)
class CommittedBundle:
    """What a dealer addresses to one holder: the digests of its shares and the sealed bundle.

    ``digests``: the self-mask share's digest, then one per pair-seed share in peer-id order.
    """

    digests: tuple[bytes, ...]
    sealed: bytes

    @classmethod
    def seal(
        cls, key: bytes, job: bytes, label: bytes, dealer: str, holder: str, bundle: ShareBundle
    ) -> CommittedBundle:
        """``bundle`` sealed under its bundle ``key`` (nonce: the key's commitment), behind its shares' digests."""
        slots = [(None, bundle.self_mask), *sorted(bundle.pair_seeds.items())]
        digests = [share_digest(job, label, dealer, holder, peer, share) for peer, share in slots]
        associated = bundle_associated_data(job, label, dealer, holder)
        return cls(tuple(digests), seal(key, bundle.to_bytes(), associated, bundle_key_commitment(key)))

    def commits_to(self, key: bytes) -> bool:
        """Whether this bundle's nonce is the commitment to ``key`` (then ``key`` is the one it was sealed under)."""
        return hmac.compare_digest(self.sealed[:NONCE_BYTES], bundle_key_commitment(key))

    def open(self, key: bytes, job: bytes, label: bytes, dealer: str, holder: str) -> ShareBundle:
        """The bundle sealed under ``key``, checked against the digests the dealer committed to.

        The holder opens it with the bundle key it derives, the server with the key a complaint
        reveals: the same check, so both reach the same verdict.

        Raises
        ------
        SecureAggregationError
            It does not open or parse, names a pair seed of the dealer with itself, or a share
            does not match its digest.
        """
        associated = bundle_associated_data(job, label, dealer, holder)
        bundle = ShareBundle.from_bytes(open_sealed(key, self.sealed, associated))
        if dealer in bundle.pair_seeds:
            raise SecureAggregationError(f"{dealer}'s bundle names a pair seed with itself")
        peers = tuple(bundle.pair_seeds)
        slots = [(None, bundle.self_mask), *bundle.pair_seeds.items()]
        if not all(self.matches(job, label, dealer, holder, p, share, peers) for p, share in slots):
            raise SecureAggregationError(f"{dealer}'s bundle does not match the digests it committed to")
        return bundle

    def to_bytes(self) -> bytes:
        return len(self.digests).to_bytes(_COUNT_BYTES, "big") + b"".join(self.digests) + self.sealed

    @classmethod
    def from_bytes(cls, data: bytes) -> CommittedBundle:
        """Parse; SecureAggregationError if the digests are missing or truncated."""
        data = bytes(data)
        if len(data) < _COUNT_BYTES:
            raise SecureAggregationError("a committed bundle is too short to hold its digest count")
        count = int.from_bytes(data[:_COUNT_BYTES], "big")
        end = _COUNT_BYTES + count * DIGEST_BYTES
        if count == 0 or len(data) < end + SEAL_OVERHEAD:
            raise SecureAggregationError("a committed bundle's digests are missing or truncated")
        digests = tuple(data[i : i + DIGEST_BYTES] for i in range(_COUNT_BYTES, end, DIGEST_BYTES))
        return cls(digests=digests, sealed=data[end:])

    def digest_of(self, peer: str | None, peers: Iterable[str]) -> bytes | None:
        """The digest of the share of slot ``peer`` (None: self-mask) among the dealer's sorted ``peers``."""
        order = sorted(peers)
        if len(order) + 1 != len(self.digests) or (peer is not None and peer not in order):
            return None
        return self.digests[0 if peer is None else 1 + order.index(peer)]

    def matches(
        self, job: bytes, label: bytes, dealer: str, holder: str, peer: str | None, share: bytes, peers: Iterable[str]
    ) -> bool:
        """Whether ``share`` is the one the dealer committed to for ``holder`` in slot ``peer``."""
        digest = self.digest_of(peer, peers)
        return digest is not None and hmac.compare_digest(digest, share_digest(job, label, dealer, holder, peer, share))


@dataclass(frozen=True)
class ShareBundle:
    """One neighbour's shares of a gateway's secrets for one aggregation.

    ``self_mask``: the share of the gateway's self-mask seed. ``pair_seeds``: peer id u -> the
    share of the gateway's pair seed with u.
    """

    self_mask: bytes
    pair_seeds: Mapping[str, bytes]

    def __post_init__(self) -> None:
        if not isinstance(self.self_mask, bytes) or len(self.self_mask) != SHARE_BYTES:
            raise SecureAggregationError(f"a self-mask share is {SHARE_BYTES} bytes")
        for peer, share in self.pair_seeds.items():
            _encoded_id(peer)
            if not isinstance(share, bytes) or len(share) != SHARE_BYTES:
                raise SecureAggregationError(f"a pair-seed share is {SHARE_BYTES} bytes")
        object.__setattr__(self, "pair_seeds", dict(self.pair_seeds))

    def to_bytes(self) -> bytes:
        parts = [self.self_mask]
        for peer in sorted(self.pair_seeds):
            encoded = _encoded_id(peer)
            parts += [bytes([len(encoded)]), encoded, self.pair_seeds[peer]]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes) -> ShareBundle:
        """Parse a bundle; SecureAggregationError if truncated, an id is not UTF-8, or a peer repeats."""
        if len(data) < SHARE_BYTES:
            raise SecureAggregationError(f"a share bundle is at least {SHARE_BYTES} bytes, got {len(data)}")
        pair_seeds: dict[str, bytes] = {}
        position = SHARE_BYTES
        while position < len(data):
            size = data[position]
            end = position + 1 + size + SHARE_BYTES
            if size == 0 or end > len(data):
                raise SecureAggregationError("share bundle is truncated or has an empty peer id")
            try:
                peer = bytes(data[position + 1 : position + 1 + size]).decode("utf-8")
            except UnicodeDecodeError:
                raise SecureAggregationError("share bundle names a peer whose id is not UTF-8") from None
            if peer in pair_seeds:
                raise SecureAggregationError(f"share bundle repeats peer {peer!r}")
            pair_seeds[peer] = bytes(data[end - SHARE_BYTES : end])
            position = end
        return cls(self_mask=bytes(data[:SHARE_BYTES]), pair_seeds=pair_seeds)
