"""Secure aggregation's messages: a job's key setup, the masked vectors inside the algorithms'
replies, and the unmasking round that reveals only the fleet sum (``shared.secure_aggregation``).

Setup, once per job (three rounds):

1. ``secagg.keys`` -> ``secagg.public_keys``: each client's two X25519 public keys;
2. ``secagg.join`` (its own and its neighbours' public keys, the threshold) ->
   ``secagg.confirmations``: one sealed key confirmation per neighbour, which the server routes
   and cannot read;
3. ``secagg.confirm``: each client checks that every neighbour derived the same keys.

Per aggregation: the algorithm's request carries a :class:`SecureRound` (which of the client's
neighbours take part) and its reply a :class:`MaskedVector` (the statistics plus masks, uniform
mod 2^64, and per neighbour a sealed bundle of Shamir shares of this round's self-mask seed and
pair seeds, behind the digests of those shares); then ``secagg.unmask`` names the survivors and
the dropped, and each survivor answers with its shares of the survivors' self-mask seeds and of
the survivors' pair seeds with dropped peers -- never both for the same client -- and names the
survivors whose bundle did not open or match its digests, each with that bundle's key as
evidence. Seeds are per round: nothing revealed about a
dropped client opens any other round. Unmasked requests carry no ``SecureRound`` and the
reply's vector is the plain one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated

import numpy as np

from ..envelope import message_type
from ..schema import ArraySpec

#: A committed, sealed bundle holds 83 bytes + the id per neighbour taking part, plus 112 (~1.5 KB
#: at 16 neighbours, ~7.5 KB at 64 with long ids); confirmations are 60 bytes, plain shares 66.
MAX_BLOB = 1 << 16


WORD_TYPES = {16: (np.uint16, np.int16), 32: (np.uint32, np.int32), 64: (np.uint64, np.int64)}


def word_bits_for(bound: float) -> int:
    """The narrowest ring word (16, 32 or 64 bits) whose signed range holds sums up to
    ``bound`` in magnitude."""
    return next(bits for bits in (16, 32, 64) if bound < 2.0 ** (bits - 1) or bits == 64)


def narrow(words: np.ndarray, word_bits: int) -> np.ndarray:
    """Ring words as sent: their low ``word_bits`` bits (sums mod 2^word_bits)."""
    return np.asarray(words, dtype=np.uint64).astype(WORD_TYPES[word_bits][0])


def widen(total: np.ndarray, word_bits: int) -> np.ndarray:
    """A fleet sum mod 2^word_bits as uint64 words whose int64 view is the signed sum."""
    unsigned, signed = WORD_TYPES[word_bits]
    return np.asarray(total, dtype=np.uint64).astype(unsigned).view(signed).astype(np.int64).view(np.uint64)


def round_label(job: str, round_no: int) -> bytes:
    """The label that binds masks and self-mask shares to one aggregation: the request's job
    and round (both ends know them from the envelope; masks of two rounds never coincide)."""
    return f"{job}/{round_no}".encode()


def _blobs(name: str, blobs: dict[str, bytes]) -> None:
    for peer, blob in blobs.items():
        if not 0 < len(blob) <= MAX_BLOB:
            raise ValueError(f"{name}[{peer!r}] must hold 1..{MAX_BLOB} bytes, got {len(blob)}")


def _distinct(name: str, ids: tuple[str, ...]) -> None:
    if len(set(ids)) != len(ids):
        raise ValueError(f"{name} lists a client twice")


@dataclass(frozen=True)
class PublicKeyPair:
    """A client's X25519 public keys: ``cipher`` seals shares, ``mask`` derives pairwise masks."""

    cipher: bytes
    mask: bytes

    def __post_init__(self) -> None:
        if len(self.cipher) != 32 or len(self.mask) != 32:
            raise ValueError("X25519 public keys are 32 bytes")


@message_type("secagg.keys")
@dataclass(frozen=True)
class SecAggKeysRequest:
    """Opens secure aggregation for the job: make fresh key pairs and send the public halves."""


@message_type("secagg.public_keys")
@dataclass(frozen=True)
class SecAggPublicKeys:
    keys: PublicKeyPair


@message_type("secagg.join")
@dataclass(frozen=True)
class SecAggJoinRequest:
    """Agree keys with ``neighbours`` (``roster``: the client's own and its neighbours' public
    keys; ``threshold`` shares reconstruct a seed) and seal one confirmation for each."""

    roster: dict[str, PublicKeyPair]
    neighbours: tuple[str, ...]
    threshold: int

    def __post_init__(self) -> None:
        _distinct("neighbours", self.neighbours)
        if not 1 <= self.threshold <= len(self.neighbours) + 1:
            raise ValueError(f"threshold must lie in 1..{len(self.neighbours) + 1}")
        unknown = [n for n in self.neighbours if n not in self.roster]
        if unknown:
            raise ValueError(f"neighbours {unknown} are not in the roster")


@message_type("secagg.confirmations")
@dataclass(frozen=True)
class SecAggConfirmations:
    """Sealed key confirmations, one per neighbour (neighbour -> blob)."""

    confirmations: dict[str, bytes]

    def __post_init__(self) -> None:
        _blobs("confirmations", self.confirmations)


@message_type("secagg.confirm")
@dataclass(frozen=True)
class SecAggConfirmRequest:
    """The confirmations the client's neighbours addressed to it (sender -> blob)."""

    confirmations: dict[str, bytes]

    def __post_init__(self) -> None:
        _blobs("confirmations", self.confirmations)


@dataclass(frozen=True)
class SecureRound:
    """Mask this round's vector: ``neighbours`` are the client's neighbours taking part."""

    neighbours: tuple[str, ...]

    def __post_init__(self) -> None:
        _distinct("neighbours", self.neighbours)


@dataclass(frozen=True)
class MaskedVector:
    """A client's statistics as one vector over the ring of integers mod 2^64 (fixed point) --
    or mod 2^32 / 2^16 (``uint32`` / ``uint16`` words) for vectors of counts whose fleet sums
    fit: a half or a quarter of the bytes, and the low bits of a masked word are as uniform as
    the word. Plain, or masked with ``shares`` (neighbour -> sealed bundle of its shares of this
    round's seeds)."""

    values: Annotated[np.ndarray, ArraySpec(("uint16", "uint32", "uint64"), ndim=1)]
    shares: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _blobs("shares", self.shares)


def masked_vector_field(body: object) -> str | None:
    """The name of a reply body's fleet-sum vector (its one :class:`MaskedVector` field), or None
    when the reply is not additive: what a site aggregator or a merge worker may add up.

    >>> import numpy as np
    >>> from shared.protocol.messages import ErrorReply
    >>> from shared.protocol.messages.fleet_sums import FleetSumReply
    >>> masked_vector_field(FleetSumReply(MaskedVector(np.zeros(3, np.uint32))))
    'sums'
    >>> masked_vector_field(ErrorReply("resync", "keys lost")) is None
    True
    """
    if not dataclasses.is_dataclass(body) or isinstance(body, type):
        return None
    names = [f.name for f in dataclasses.fields(body) if isinstance(getattr(body, f.name), MaskedVector)]
    return names[0] if len(names) == 1 else None


@message_type("secagg.unmask")
@dataclass(frozen=True)
class SecAggUnmaskRequest:
    """Round ``label`` closed: reveal shares of the ``survivors``' self-mask seeds and of their
    pair seeds with the ``dropped`` (``shares``: the sealed bundles the surviving neighbours
    addressed to this client)."""

    label: str
    survivors: tuple[str, ...]
    dropped: tuple[str, ...]
    shares: dict[str, bytes]

    def __post_init__(self) -> None:
        _distinct("survivors", self.survivors)
        _distinct("dropped", self.dropped)
        if set(self.survivors) & set(self.dropped):
            raise ValueError("a client cannot both survive and drop out")
        _blobs("shares", self.shares)


@message_type("secagg.unmask_reply")
@dataclass(frozen=True)
class SecAggUnmaskReply:
    """This client's plain shares: of each survivor's self-mask seed (survivor -> share) and of
    each survivor's pair seeds with dropped peers (survivor -> dropped peer -> share);
    ``complaints``: survivor whose sealed bundle for this client did not open or did not match
    the digests it committed to -> the key of that one bundle, the evidence with which the
    server opens it and names whoever lied (no share of it is revealed otherwise). Empty, it
    costs the bytes the empty list of complaints cost before."""

    self_mask: dict[str, bytes]
    pair_seeds: dict[str, dict[str, bytes]]
    complaints: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        dropped = {peer for by_peer in self.pair_seeds.values() for peer in by_peer}
        if set(self.self_mask) & dropped:
            raise ValueError("never both kinds of share for the same client")
        _blobs("complaints", self.complaints)
        if set(self.self_mask) & set(self.complaints):
            raise ValueError("a self-mask share of a client complained about")
        _blobs("self_mask", self.self_mask)
        for survivor, by_peer in self.pair_seeds.items():
            _blobs(f"pair_seeds[{survivor!r}]", by_peer)
