"""Splitting encoded messages into MQTT-sized chunks and reassembling them safely.

A message whose encoding exceeds the payload limit is cut into pieces; each piece travels as a
``chunk`` message carrying the transfer id, its index, the piece count, the total size and the
SHA-256 of the whole encoding. The receiver tolerates duplicated and reordered chunks, refuses
chunks that contradict their transfer, verifies the hash before decoding the whole, and bounds
what a sender can make it hold: a transfer idle past the timeout is dropped (and its late
chunks ignored), the bytes buffered over all transfers and the open transfers per sender are
capped, and the accounting is O(1) per chunk.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Callable

from .envelope import Message, encode_message, message_type, new_message_id
from .errors import ChunkError, PayloadTooLarge
from .limits import DEFAULT_LIMITS, DecodeLimits

log = logging.getLogger(__name__)

#: Bytes a chunk's index/count/length headers can grow beyond those of the probe chunk that
#: ``split_payload`` measures (CBOR integers and byte-string lengths take up to 9 bytes).
_HEADER_SLACK = 32


@message_type("chunk")
@dataclass(frozen=True)
class Chunk:
    """One piece of a message too large for one MQTT payload (see the module docstring)."""

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
        if self.count > max(1, self.total_size):
            raise ValueError(f"{self.count} chunks cannot carry {self.total_size} bytes")
        if not self.data and self.total_size:
            raise ValueError("empty chunk of a non-empty transfer")


def split_payload(encoded: bytes, *, sender: str, max_payload: int, job: str = "", round: int = 0) -> list[Message]:
    """Cut ``encoded`` (one encoded message) into chunk messages each encoding within ``max_payload``.

    The per-chunk overhead is measured on a probe chunk with the real envelope (a long job id
    costs room), not assumed.
    """
    digest = hashlib.sha256(encoded).digest()
    transfer = new_message_id()
    probe = Message.create(Chunk(transfer, 0, 1, len(encoded), digest, b"x"), sender=sender, job=job, round=round)
    piece = max_payload - len(encode_message(probe)) - _HEADER_SLACK
    if piece <= 0:
        raise PayloadTooLarge(f"max_payload {max_payload} leaves no room for chunk data next to the chunk envelope")
    count = max(1, -(-len(encoded) // piece))
    chunks = []
    for i in range(count):
        body = Chunk(transfer, i, count, len(encoded), digest, encoded[i * piece : (i + 1) * piece])
        chunks.append(Message(replace(probe.envelope, msg_id=new_message_id()), body))
    return chunks


@dataclass
class _Transfer:
    count: int
    total_size: int
    sha256: bytes
    last_seen: float
    buffered: int = 0
    pieces: dict[int, bytes] = field(default_factory=dict)


@dataclass
class ReassemblyStats:
    completed: int = 0
    duplicates: int = 0
    expired: int = 0
    rejected: int = 0
    late: int = 0


class Reassembler:
    """Collects chunks per (sender, transfer) and returns the whole encoding once complete.

    Not thread-safe: one receiving thread owns it. ``clock`` is injectable for tests.
    The default budget (twice the largest message) lets one maximal transfer complete while
    another starts.
    """

    def __init__(
        self,
        *,
        timeout_s: float = 60.0,
        limits: DecodeLimits = DEFAULT_LIMITS,
        max_buffered_bytes: int | None = None,
        max_transfers_per_sender: int = 8,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout_s = timeout_s
        self.limits = limits
        self.max_buffered_bytes = max_buffered_bytes or 2 * limits.max_message_bytes
        self.max_transfers_per_sender = max_transfers_per_sender
        self.clock = clock
        self.stats = ReassemblyStats()
        self.buffered_bytes = 0
        self._transfers: dict[tuple[str, str], _Transfer] = {}
        self._per_sender: dict[str, int] = {}
        # Transfers that completed or expired: QoS 1 may redeliver their chunks later, and such a
        # straggler must not open a transfer that can never complete.
        self._closed: OrderedDict[tuple[str, str], bool] = OrderedDict()

    @property
    def pending(self) -> int:
        return len(self._transfers)

    def expire(self) -> list[tuple[str, str]]:
        """Drop transfers idle (no chunk) past the timeout; returns their (sender, transfer) keys."""
        now = self.clock()
        stale = [key for key, t in self._transfers.items() if now - t.last_seen > self.timeout_s]
        for key in stale:
            transfer = self._drop(key, completed=False)
            self.stats.expired += 1
            log.warning("chunked transfer expired", extra={"sender": key[0], "transfer": key[1],
                        "received": len(transfer.pieces), "count": transfer.count})
        return stale

    def add(self, message: Message) -> bytes | None:
        """Feed one chunk message; returns the complete, hash-verified encoding or None."""
        self.expire()
        chunk: Chunk = message.body
        key = (message.sender, chunk.transfer)
        try:
            return self._add(key, chunk)
        except ChunkError:
            if key in self._transfers:
                self._drop(key, completed=False)
            self.stats.rejected += 1
            raise

    def _drop(self, key: tuple[str, str], *, completed: bool) -> _Transfer:
        transfer = self._transfers.pop(key)
        self.buffered_bytes -= transfer.buffered
        self._per_sender[key[0]] -= 1
        if not self._per_sender[key[0]]:
            del self._per_sender[key[0]]
        self._closed[key] = completed
        if len(self._closed) > 4096:
            self._closed.popitem(last=False)
        return transfer

    def _add(self, key: tuple[str, str], chunk: Chunk) -> bytes | None:
        if key in self._closed:
            if self._closed[key]:
                self.stats.duplicates += 1
            else:
                self.stats.late += 1
            return None
        if chunk.total_size > self.limits.max_message_bytes:
            raise ChunkError(f"chunked message of {chunk.total_size} bytes exceeds the limit of {self.limits.max_message_bytes}")
        transfer = self._transfers.get(key)
        if transfer is None:
            if self._per_sender.get(key[0], 0) >= self.max_transfers_per_sender:
                raise ChunkError(f"{key[0]} has {self.max_transfers_per_sender} unfinished chunked transfers already")
            transfer = self._transfers[key] = _Transfer(chunk.count, chunk.total_size, chunk.sha256, self.clock())
            self._per_sender[key[0]] = self._per_sender.get(key[0], 0) + 1
        elif (transfer.count, transfer.total_size, transfer.sha256) != (chunk.count, chunk.total_size, chunk.sha256):
            raise ChunkError(f"chunk {chunk.index} of transfer {chunk.transfer} contradicts the earlier chunks")
        transfer.last_seen = self.clock()
        if chunk.index in transfer.pieces:
            self.stats.duplicates += 1
            return None
        if transfer.buffered + len(chunk.data) > transfer.total_size:
            raise ChunkError(f"transfer {chunk.transfer} sent more bytes than its declared {transfer.total_size}")
        if self.buffered_bytes + len(chunk.data) > self.max_buffered_bytes:
            raise ChunkError(f"reassembly buffer full ({self.buffered_bytes} bytes of unfinished chunked transfers)")
        transfer.pieces[chunk.index] = chunk.data
        transfer.buffered += len(chunk.data)
        self.buffered_bytes += len(chunk.data)
        if len(transfer.pieces) < transfer.count:
            return None
        self._drop(key, completed=True)
        whole = b"".join(transfer.pieces[i] for i in range(transfer.count))
        if len(whole) != transfer.total_size or hashlib.sha256(whole).digest() != transfer.sha256:
            raise ChunkError(f"transfer {chunk.transfer} failed its integrity check")
        self.stats.completed += 1
        return whole
