"""Splitting encoded messages into MQTT-sized chunks and reassembling them safely.

A message whose encoding exceeds the payload limit is cut into pieces; each piece travels as a
``chunk`` message carrying the transfer id, its index, the piece count, the total size and the
SHA-256 of the whole encoding. The receiver tolerates duplicated and reordered chunks, refuses
chunks that contradict their transfer, verifies the hash before decoding the whole, and bounds
what any one sender can make it hold (see ``Reassembler``). Every per-sender limit is keyed on
the *verified* sender, the client id the broker's ACL vouches for, which the transport passes in:
the envelope's ``from`` is only a claim, and a chunk whose claim differs is refused before it
can create or touch any state.
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
from .wire import first_version_for

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
    # Chunks are written in the oldest version that has them: every peer reads them, and the
    # message inside keeps its own version.
    probe = Message.create(
        Chunk(transfer, 0, 1, len(encoded), digest, b"x"),
        sender=sender,
        job=job,
        round=round,
        version=first_version_for("chunk"),
    )
    piece = max_payload - len(encode_message(probe)) - _HEADER_SLACK
    if piece <= 0:
        raise PayloadTooLarge(f"max_payload {max_payload} leaves no room for chunk data next to the chunk envelope")
    count = max(1, -(-len(encoded) // piece))
    chunks = []
    for i in range(count):
        body = Chunk(transfer, i, count, len(encoded), digest, encoded[i * piece : (i + 1) * piece])
        chunks.append(Message(replace(probe.envelope, msg_id=new_message_id()), body))
    return chunks


#: Bytes of Python objects one buffered piece costs beyond its data: its int key, the bytes
#: object's header and its dict slot (118 measured on CPython 3.11). Charged against the budgets,
#: so a transfer cut into 1-byte pieces cannot hold 100 times the memory it is charged for.
PIECE_OVERHEAD = 128

#: Closed transfer ids remembered per sender. QoS 1 redelivers at most the broker's inflight
#: window (20 messages) of one sender, so a straggler from an older transfer cannot arrive; being
#: per sender, no other sender's traffic can push a sender's ids out and have a whole redelivered
#: transfer delivered twice.
_CLOSED_PER_SENDER = 64

#: A transfer's longest life however steadily it progresses: 64 MiB at 0.9 Mbit/s.
DEFAULT_MAX_LIFETIME_S = 600.0


@dataclass(eq=False)
class _Transfer:
    """One unfinished transfer; ``held`` is what it is charged (its data + PIECE_OVERHEAD a piece)."""

    sender: str
    transfer: str
    count: int
    total_size: int
    sha256: bytes
    started: float
    progressed: float
    received: int = 0
    held: int = 0
    pieces: dict[int, bytes] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return self.sender, self.transfer


@dataclass(eq=False)
class _Sender:
    """One verified sender's open transfers (oldest first), what they hold, and its recently closed
    transfer ids (True: completed) so that redelivered chunks of those are recognised."""

    transfers: OrderedDict[str, _Transfer] = field(default_factory=OrderedDict)
    held: int = 0
    closed: OrderedDict[str, bool] = field(default_factory=OrderedDict)


@dataclass
class ReassemblyStats:
    """Counters. ``forged``: chunks whose ``from`` was not the verified sender (also counted in
    ``rejected``); ``evicted``: open transfers dropped to keep a budget; ``expired``: dropped idle
    or past their lifetime; ``late``: chunks of transfers already dropped."""

    completed: int = 0
    duplicates: int = 0
    expired: int = 0
    rejected: int = 0
    late: int = 0
    forged: int = 0
    evicted: int = 0


class Reassembler:
    """Collects chunks per (verified sender, transfer) and returns the whole encoding once complete.

    What a sender can make the receiver hold is bounded per *verified* sender, so that no sender's
    traffic, honest or not, can keep another's out:

    - ``max_bytes_per_sender`` (default: the largest message plus 1/128 for the overhead of pieces
      of 16 KiB or more, i.e. one maximal message; never more than the total). Above it the
      sender's *oldest* transfer is dropped rather than the new one refused: a stalled transfer
      (a lost chunk) then makes room for the sender's next message at once instead of blocking it
      until the timeout. A transfer that could never fit (declared size plus its pieces' overhead)
      is refused at its first chunk.
    - ``max_transfers_per_sender`` open transfers, with the same policy.
    - ``max_buffered_bytes`` over all senders (default: two per-sender budgets, so one sender holds
      at most half). When a piece does not fit, the sender holding the most gives way (its oldest
      transfer is dropped), so a sender within its fair share (the total divided by the senders
      holding bytes) is never evicted by the others.
    - A transfer is dropped ``timeout_s`` after its last *progress* (a new piece; duplicates do
      not count, so a trickle of them cannot keep it alive) and ``max_lifetime_s`` after its first
      chunk, whichever comes first.

    Every budget counts ``PIECE_OVERHEAD`` per piece on top of the data. Expiry keeps the open
    transfers in two ordered dicts, by last progress and by start, and pops from their fronts: O(1)
    amortised per chunk however many transfers are open. Not thread-safe: one receiving thread
    owns it. ``clock`` must be monotonic (it orders the deadlines); injectable for tests.
    """

    def __init__(
        self,
        *,
        timeout_s: float = 60.0,
        max_lifetime_s: float = DEFAULT_MAX_LIFETIME_S,
        limits: DecodeLimits = DEFAULT_LIMITS,
        max_buffered_bytes: int | None = None,
        max_bytes_per_sender: int | None = None,
        max_transfers_per_sender: int = 8,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout_s = timeout_s
        self.max_lifetime_s = max_lifetime_s
        self.limits = limits
        per_sender = max_bytes_per_sender or limits.max_message_bytes * 129 // 128
        self.max_buffered_bytes = max_buffered_bytes or 2 * per_sender
        self.max_bytes_per_sender = min(per_sender, self.max_buffered_bytes)
        self.max_transfers_per_sender = max_transfers_per_sender
        self.clock = clock
        self.stats = ReassemblyStats()
        self.buffered_bytes = 0
        self._senders: dict[str, _Sender] = {}
        self._by_progress: OrderedDict[tuple[str, str], _Transfer] = OrderedDict()  # least recent progress first
        self._by_start: OrderedDict[tuple[str, str], _Transfer] = OrderedDict()  # oldest first
        self._warned: set[tuple[str, str]] = set()

    @property
    def pending(self) -> int:
        return len(self._by_start)

    def sender_bytes(self, sender: str) -> int:
        """What ``sender``'s open transfers are charged against its budget."""
        state = self._senders.get(sender)
        return state.held if state else 0

    def expire(self) -> list[tuple[str, str]]:
        """Drop transfers idle past the timeout or alive past their lifetime; returns their
        (sender, transfer) keys."""
        return self._expire(self.clock())

    def _expire(self, now: float) -> list[tuple[str, str]]:
        expired = []
        for queue, since, limit in (
            (self._by_progress, "progressed", self.timeout_s),
            (self._by_start, "started", self.max_lifetime_s),
        ):
            while queue:
                transfer = next(iter(queue.values()))
                if now - getattr(transfer, since) <= limit:
                    break
                self._drop(transfer, completed=False)
                expired.append(transfer)
        for transfer in expired:
            self.stats.expired += 1
            log.warning(
                "chunked transfer expired",
                extra={
                    "sender": transfer.sender,
                    "transfer": transfer.transfer,
                    "received": len(transfer.pieces),
                    "count": transfer.count,
                },
            )
        return [transfer.key for transfer in expired]

    def add(self, message: Message, *, sender: str) -> bytes | None:
        """Feed one chunk message the broker vouches came from ``sender`` (the client allowed to
        publish on the topic it arrived on); returns the complete, hash-verified encoding or None."""
        now = self.clock()
        self._expire(now)
        chunk = message.body
        if not isinstance(chunk, Chunk):  # e.g. a chunk of a newer protocol version, read as far as its envelope
            self.stats.rejected += 1
            raise ChunkError(
                f"a {message.envelope.type!r} message of protocol version {message.envelope.version} is "
                "not a chunk this build reads"
            )
        if message.sender != sender:
            self.stats.forged += 1
            self.stats.rejected += 1
            raise ChunkError(f"chunk on {sender!r}'s topic claims to come from {message.sender!r}")
        try:
            return self._add(sender, chunk, now)
        except ChunkError:
            state = self._senders.get(sender)
            if state is not None and chunk.transfer in state.transfers:
                self._drop(state.transfers[chunk.transfer], completed=False)
            self.stats.rejected += 1
            raise

    def _add(self, sender: str, chunk: Chunk, now: float) -> bytes | None:
        state = self._senders.get(sender)
        if state is not None and chunk.transfer in state.closed:
            if state.closed[chunk.transfer]:
                self.stats.duplicates += 1
            else:
                self.stats.late += 1
            return None
        if chunk.total_size > self.limits.max_message_bytes:
            raise ChunkError(
                f"chunked message of {chunk.total_size} bytes exceeds the limit of {self.limits.max_message_bytes}"
            )
        transfer = state.transfers.get(chunk.transfer) if state is not None else None
        if transfer is None:
            transfer = self._open(sender, chunk, now)
        elif (transfer.count, transfer.total_size, transfer.sha256) != (chunk.count, chunk.total_size, chunk.sha256):
            raise ChunkError(f"chunk {chunk.index} of transfer {chunk.transfer} contradicts the earlier chunks")
        if chunk.index in transfer.pieces:
            self.stats.duplicates += 1  # no progress: the idle timer is left alone
            return None
        if transfer.received + len(chunk.data) > transfer.total_size:
            raise ChunkError(f"transfer {chunk.transfer} sent more bytes than its declared {transfer.total_size}")
        cost = len(chunk.data) + PIECE_OVERHEAD
        self._make_room(transfer, cost)
        transfer.pieces[chunk.index] = chunk.data
        transfer.received += len(chunk.data)
        transfer.held += cost
        self._senders[sender].held += cost
        self.buffered_bytes += cost
        transfer.progressed = now
        self._by_progress.move_to_end(transfer.key)
        if len(transfer.pieces) < transfer.count:
            return None
        self._drop(transfer, completed=True)
        whole = b"".join(transfer.pieces[i] for i in range(transfer.count))
        if len(whole) != transfer.total_size or hashlib.sha256(whole).digest() != transfer.sha256:
            raise ChunkError(f"transfer {chunk.transfer} failed its integrity check")
        self.stats.completed += 1
        return whole

    def _open(self, sender: str, chunk: Chunk, now: float) -> _Transfer:
        need = chunk.total_size + chunk.count * PIECE_OVERHEAD
        if need > self.max_bytes_per_sender:
            raise ChunkError(
                f"transfer {chunk.transfer} would hold {need} bytes in {chunk.count} pieces, "
                f"more than a sender's budget of {self.max_bytes_per_sender}"
            )
        state = self._senders.setdefault(sender, _Sender())
        while len(state.transfers) >= self.max_transfers_per_sender:
            self._evict(next(iter(state.transfers.values())), "had too many open transfers")
        transfer = _Transfer(sender, chunk.transfer, chunk.count, chunk.total_size, chunk.sha256, now, now)
        state.transfers[chunk.transfer] = transfer
        self._by_start[transfer.key] = self._by_progress[transfer.key] = transfer
        return transfer

    def _make_room(self, transfer: _Transfer, cost: int) -> None:
        """Evict until a piece costing ``cost`` fits both budgets; raises if ``transfer`` itself had
        to go. Within its own budget a transfer always fits alone (``_open`` checked its worst case),
        so the sender's loop only ever drops its other transfers."""
        state = self._senders[transfer.sender]
        while state.held + cost > self.max_bytes_per_sender:
            self._evict(next(t for t in state.transfers.values() if t is not transfer), "was over its byte budget")
        while self.buffered_bytes + cost > self.max_buffered_bytes:
            # the biggest holder gives way; on a tie, another sender rather than this one
            victim = max((s for s in self._senders.values() if s.transfers), key=lambda s: (s.held, s is not state))
            oldest = next(iter(victim.transfers.values()))
            self._evict(oldest, "held the most of a full buffer")
            if oldest is transfer:
                raise ChunkError(
                    f"reassembly buffer full ({self.buffered_bytes} bytes of unfinished chunked transfers)"
                )

    def _evict(self, transfer: _Transfer, why: str) -> None:
        """Drop an open transfer to keep a budget: counted always, logged as a warning once per
        (sender, reason) so a hostile sender cannot flood the log, then at debug level."""
        self._drop(transfer, completed=False)
        self.stats.evicted += 1
        first = (transfer.sender, why) not in self._warned
        self._warned.add((transfer.sender, why))
        log.log(
            logging.WARNING if first else logging.DEBUG,
            "chunked transfer dropped: its sender %s (counted in stats.evicted%s)",
            why,
            "; further drops for this reason are logged at debug level" if first else "",
            extra={
                "sender": transfer.sender,
                "transfer": transfer.transfer,
                "received": len(transfer.pieces),
                "count": transfer.count,
            },
        )

    def _drop(self, transfer: _Transfer, *, completed: bool) -> None:
        state = self._senders[transfer.sender]
        del state.transfers[transfer.transfer]
        del self._by_start[transfer.key], self._by_progress[transfer.key]
        state.held -= transfer.held
        self.buffered_bytes -= transfer.held
        state.closed[transfer.transfer] = completed
        if len(state.closed) > _CLOSED_PER_SENDER:
            state.closed.popitem(last=False)
