"""The plaintext a gateway seals for each neighbour when it masks: its Shamir shares for that neighbour.

For one aggregation a gateway v splits (a) its fresh self-mask seed ``b_v`` and (b) each of its
pair seeds ``seed(v, u)`` (one per neighbour u taking part) among those neighbours. Neighbour w
receives one bundle: w's share of ``b_v`` and w's share of every ``seed(v, u)``, the latter
tagged with u's id so that w can later reveal exactly the ones the server needs (u need not be
w's own neighbour, so w could not name it otherwise).

Wire form (big-endian, fixed-width shares)::

    self_mask share (66 bytes) || { len(id) (1 byte) || id (UTF-8) || pair-seed share (66 bytes) } ...

i.e. ``66 + sum(67 + len(id))`` bytes, sealed into 28 more (``sealed_bundle_size``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from .encryption import SEAL_OVERHEAD
from .errors import SecureAggregationError
from .shamir import SHARE_BYTES

__all__ = ["MAX_ID_BYTES", "ShareBundle", "sealed_bundle_size"]

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
    """Bytes of a sealed bundle of a gateway whose taking-part neighbours are ``peers``."""
    return SEAL_OVERHEAD + SHARE_BYTES + sum(1 + len(_encoded_id(p)) + SHARE_BYTES for p in peers)


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
