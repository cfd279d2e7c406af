"""What travels between gateways and the server during one aggregation (the three named payloads).

They are plain frozen values (uint64 arrays, strings and bytes) so that the messaging layer can
encode them with its own codec; every constructor validates types and sizes, so a payload
decoded from the network can be rebuilt through these classes and rejected early.

* ``MaskedInput`` (gateway -> server): the masked vector and one sealed share bundle per neighbour.
* ``UnmaskRequest`` (server -> gateway): who survived, who dropped, and the bundles addressed to it.
* ``UnmaskShares`` (gateway -> server): the plain shares the server needs to remove the masks, and
  the complaints about bundles, each with its bundle's key as evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np

from .errors import SecureAggregationError
from .shamir import SHARE_BYTES

__all__ = ["MaskedInput", "UnmaskRequest", "UnmaskShares"]


def _check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise SecureAggregationError(f"{what} must be a non-empty client id string, got {value!r}")
    return value


def _blob_map(mapping: Mapping[str, bytes], what: str) -> dict[str, bytes]:
    out = {}
    for client, blob in mapping.items():
        _check_id(client, f"{what} key")
        if not isinstance(blob, (bytes, bytearray)):
            raise SecureAggregationError(f"{what}[{client!r}] must be bytes, got {type(blob).__name__}")
        out[client] = bytes(blob)
    return out


def _share_map(mapping: Mapping[str, bytes], what: str) -> dict[str, bytes]:
    out = _blob_map(mapping, what)
    for client, share in out.items():
        if len(share) != SHARE_BYTES:
            raise SecureAggregationError(f"{what}[{client!r}] must be a {SHARE_BYTES}-byte Shamir share")
    return out


def _id_tuple(values: Iterable[object], what: str) -> tuple[str, ...]:
    if isinstance(values, (str, bytes)):
        raise SecureAggregationError(f"{what} must be a sequence of client ids, not a single string")
    ids = tuple(_check_id(v, what) for v in values)
    if len(set(ids)) != len(ids):
        raise SecureAggregationError(f"{what} lists a client twice")
    return ids


@dataclass(frozen=True, eq=False)
class MaskedInput:
    """A gateway's contribution to one aggregation.

    ``masked``: its uint64 vector plus its self-mask and pairwise masks (read-only, 1-D);
    uniform mod 2**64 to anyone without the seeds. ``shares``: neighbour id -> sealed share
    bundle for that neighbour (the server routes them back at unmask time but cannot open them).
    """

    masked: np.ndarray
    shares: Mapping[str, bytes]

    def __post_init__(self) -> None:
        if not isinstance(self.masked, np.ndarray) or self.masked.dtype != np.uint64 or self.masked.ndim != 1:
            raise SecureAggregationError("MaskedInput.masked must be a 1-D numpy uint64 array")
        view = self.masked.view()
        view.flags.writeable = False
        object.__setattr__(self, "masked", view)
        object.__setattr__(self, "shares", _blob_map(self.shares, "MaskedInput.shares"))


@dataclass(frozen=True)
class UnmaskRequest:
    """The server's question to one surviving gateway after the masking round.

    ``survivors``: the gateway's neighbours (and itself) whose masked inputs were accepted.
    ``dropped``: clients selected for this aggregation whose inputs were not, among the
    gateway's neighbours and its surviving neighbours' neighbours (those are the pairs whose
    seeds the gateway holds shares of). ``shares``: surviving neighbour -> the sealed bundle it addressed to this
    gateway.
    """

    survivors: tuple[str, ...]
    dropped: tuple[str, ...]
    shares: Mapping[str, bytes]

    def __post_init__(self) -> None:
        object.__setattr__(self, "survivors", _id_tuple(self.survivors, "UnmaskRequest.survivors"))
        object.__setattr__(self, "dropped", _id_tuple(self.dropped, "UnmaskRequest.dropped"))
        object.__setattr__(self, "shares", _blob_map(self.shares, "UnmaskRequest.shares"))


@dataclass(frozen=True)
class UnmaskShares:
    """A gateway's answer: the shares it holds that the server needs, and nothing else.

    ``self_mask``: surviving neighbour v -> this gateway's share of v's self-mask seed.
    ``pair_seeds``: surviving neighbour v -> {dropped peer u of v -> share of v's pair seed with u}.
    ``complaints``: surviving neighbour v whose bundle for this gateway did not open, parse or
    match its commitments -> the evidence, the key of that one bundle (``bundle.bundle_key``),
    with which the server opens it and decides who lied; none of its shares is revealed
    otherwise. For one aggregation no client ever appears both as a key of ``self_mask`` and as
    a dropped peer.
    """

    self_mask: Mapping[str, bytes]
    pair_seeds: Mapping[str, Mapping[str, bytes]]
    complaints: Mapping[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "self_mask", _share_map(self.self_mask, "UnmaskShares.self_mask"))
        pair_seeds = {}
        for survivor, by_peer in self.pair_seeds.items():
            _check_id(survivor, "UnmaskShares.pair_seeds key")
            pair_seeds[survivor] = _share_map(by_peer, f"UnmaskShares.pair_seeds[{survivor!r}]")
        object.__setattr__(self, "pair_seeds", pair_seeds)
        complaints = _blob_map(self.complaints, "UnmaskShares.complaints")
        if set(complaints) & set(self.self_mask):
            raise SecureAggregationError("UnmaskShares reveals a self-mask share of a client it complains about")
        object.__setattr__(self, "complaints", complaints)
