"""Splitting encoded messages into MQTT-sized chunks and reassembling them safely.

A message whose encoding exceeds the payload limit is cut into pieces; each piece travels as a
``chunk`` message carrying the transfer id, its index, the piece count, the total size and the
SHA-256 of the whole encoding. The receiver tolerates duplicated and reordered chunks, refuses
chunks that contradict their transfer, verifies the hash before decoding the whole, and drops
transfers that stall past a timeout or would exceed its memory budget — freeing their memory.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from .envelope import Message, message_type, new_message_id
from .errors import ChunkError, PayloadTooLarge
from .limits import DEFAULT_LIMITS, DecodeLimits

log = logging.getLogger(__name__)

#: Room left in every chunk for the chunk message's own envelope and fields.
CHUNK_OVERHEAD = 512


@message_type("chunk")
@dataclass(frozen=True)
class Chunk:
    transfer: str
    index: int
    count: int
    total_size: int
    sha256: bytes
    data: bytes

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"chunk index {self.index} outside 0..{self.count - 1}")
        if self.total_size < 0 or len(self.sha256) != 32 or not self.transfer:
            raise ValueError("chunk needs a transfer id, total_size >= 0 and a 32-byte sha256")


def split_payload(encoded: bytes, *, sender: str, max_payload: int, job: str = "", round: int = 0) -> list[Message]:
    """Cut ``encoded`` (one encoded message) into chunk messages each encoding below ``max_payload``."""
    piece = max_payload - CHUNK_OVERHEAD
    if piece <= 0:
        raise PayloadTooLarge(f"max_payload {max_payload} leaves no room for chunk data (needs > {CHUNK_OVERHEAD})")
    digest = hashlib.sha256(encoded).digest()
    transfer = new_message_id()
    count = max(1, -(-len(encoded) // piece))
    return [
        Message.create(
            Chunk(transfer, i, count, len(encoded), digest, encoded[i * piece : (i + 1) * piece]),
            sender=sender, job=job, round=round,
        )
        for i in range(count)
    ]


@dataclass
class _Transfer:
    count: int
    total_size: int
    sha256: bytes
    started: float
    pieces: dict[int, bytes] = field(default_factory=dict)

    @property
    def buffered(self) -> int:
        return sum(len(p) for p in self.pieces.values())


@dataclass
class ReassemblyStats:
    completed: int = 0
    duplicates: int = 0
    expired: int = 0
    rejected: int = 0


class Reassembler:
    """Collects chunks per (sender, transfer) and returns the whole encoding once complete.

    Not thread-safe: one receiving thread owns it. ``clock`` is injectable for tests.
    """

    def __init__(
        self,
        *,
        timeout_s: float = 60.0,
        limits: DecodeLimits = DEFAULT_LIMITS,
        max_buffered_bytes: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout_s = timeout_s
        self.limits = limits
        self.max_buffered_bytes = max_buffered_bytes or 2 * limits.max_message_bytes
        self.clock = clock
        self.stats = ReassemblyStats()
        self._transfers: dict[tuple[str, str], _Transfer] = {}
        # QoS 1 may redeliver a chunk after its transfer completed: remember recent transfers
        # so such a straggler is counted as a duplicate instead of opening a transfer that
        # could never complete.
        self._completed: OrderedDict[tuple[str, str], None] = OrderedDict()

    @property
    def pending(self) -> int:
        return len(self._transfers)

    @property
    def buffered_bytes(self) -> int:
        return sum(t.buffered for t in self._transfers.values())

    def expire(self) -> list[tuple[str, str]]:
        """Drop transfers idle past the timeout; returns their (sender, transfer) keys."""
        now = self.clock()
        stale = [key for key, t in self._transfers.items() if now - t.started > self.timeout_s]
        for key in stale:
            transfer = self._transfers.pop(key)
            self.stats.expired += 1
            log.warning(
                "chunked transfer expired", extra={"sender": key[0], "transfer": key[1],
                "received": len(transfer.pieces), "count": transfer.count},
            )
        return stale

    def add(self, message: Message) -> bytes | None:
        """Feed one chunk message; returns the complete, hash-verified encoding or None."""
        self.expire()
        chunk: Chunk = message.body
        key = (message.sender, chunk.transfer)
        try:
            return self._add(key, chunk)
        except ChunkError:
            self._transfers.pop(key, None)
            self.stats.rejected += 1
            raise

    def _add(self, key: tuple[str, str], chunk: Chunk) -> bytes | None:
        if key in self._completed:
            self.stats.duplicates += 1
            return None
        if chunk.total_size > self.limits.max_message_bytes:
            raise ChunkError(f"chunked message of {chunk.total_size} bytes exceeds the limit of {self.limits.max_message_bytes}")
        transfer = self._transfers.get(key)
        if transfer is None:
            if self.buffered_bytes + len(chunk.data) > self.max_buffered_bytes:
                raise ChunkError("reassembly buffer full: too many unfinished chunked transfers")
            transfer = self._transfers[key] = _Transfer(chunk.count, chunk.total_size, chunk.sha256, self.clock())
        elif (transfer.count, transfer.total_size, transfer.sha256) != (chunk.count, chunk.total_size, chunk.sha256):
            raise ChunkError(f"chunk {chunk.index} of transfer {chunk.transfer} contradicts the earlier chunks")
        if chunk.index in transfer.pieces:
            self.stats.duplicates += 1
            return None
        if transfer.buffered + len(chunk.data) > transfer.total_size:
            raise ChunkError(f"transfer {chunk.transfer} sent more bytes than its declared {transfer.total_size}")
        transfer.pieces[chunk.index] = chunk.data
        if len(transfer.pieces) < transfer.count:
            return None
        del self._transfers[key]
        whole = b"".join(transfer.pieces[i] for i in range(transfer.count))
        if len(whole) != transfer.total_size or hashlib.sha256(whole).digest() != transfer.sha256:
            raise ChunkError(f"transfer {chunk.transfer} failed its integrity check")
        self.stats.completed += 1
        self._completed[key] = None
        if len(self._completed) > 1024:
            self._completed.popitem(last=False)
        return whole
