"""Per-chunk cost of ``Reassembler.add`` with many chunked transfers open.

    .venv/bin/python benchmarks/bench_reassembly.py [--quick] [--repeats N]

The reassembler used to scan every open transfer for expiry on every chunk (3.8 ms per chunk at
16,700 open transfers, the issue's figure); it now keeps them ordered by deadline and pops only
the expired ones. For 100, 1,000 and 16,700 open transfers (one 1-byte chunk each, 8 per sender
as the per-sender cap allows) the script times ``add`` on 200 further chunks of 1 KiB of a probe
transfer, best of N repeats (the run least disturbed by other load on the machine), for the
current ``Reassembler`` and, in the same run, for ``_ReferenceReassembler``: the accounting part
of the previous implementation, kept here only to measure against. Chunk messages are decoded
beforehand: only ``add`` is timed. Opening 16,700 transfers in the reference takes most of the
run's minute (each opening scans all the others).
The script exits 1 if the current per-chunk cost at the largest count exceeds 3 times that at 100.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import _common  # noqa: F401  (puts the repo root on sys.path)
from _common import description, markdown_table, print_machine

from shared.protocol.chunking import Chunk, Reassembler
from shared.protocol.envelope import Message

OPEN_TRANSFERS = (100, 1_000, 16_700)
PROBE_CHUNKS = 200
PIECE = 1024


@dataclass
class _ReferenceTransfer:
    count: int
    total_size: int
    sha256: bytes
    last_seen: float
    buffered: int = 0
    pieces: dict[int, bytes] = field(default_factory=dict)


class _ReferenceReassembler:
    """The previous ``Reassembler.add`` (commit a479ef2) minus logging and the integrity check of
    a completed whole, which the probe never reaches: an expiry scan of every open transfer on
    every chunk, caps keyed on the claimed sender."""

    def __init__(
        self,
        *,
        timeout_s: float = 60.0,
        max_buffered_bytes: int = 128 << 20,
        max_transfers_per_sender: int = 8,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout_s = timeout_s
        self.max_buffered_bytes = max_buffered_bytes
        self.max_transfers_per_sender = max_transfers_per_sender
        self.clock = clock
        self.buffered_bytes = 0
        self._transfers: dict[tuple[str, str], _ReferenceTransfer] = {}
        self._per_sender: dict[str, int] = {}

    def add(self, message: Message, *, sender: str) -> None:
        now = self.clock()
        for key in [key for key, t in self._transfers.items() if now - t.last_seen > self.timeout_s]:
            transfer = self._transfers.pop(key)
            self.buffered_bytes -= transfer.buffered
            self._per_sender[key[0]] -= 1
        chunk: Chunk = message.body
        key = (message.sender, chunk.transfer)
        transfer = self._transfers.get(key)
        if transfer is None:
            if self._per_sender.get(key[0], 0) >= self.max_transfers_per_sender:
                raise ValueError("too many unfinished transfers")
            transfer = self._transfers[key] = _ReferenceTransfer(chunk.count, chunk.total_size, chunk.sha256, now)
            self._per_sender[key[0]] = self._per_sender.get(key[0], 0) + 1
        transfer.last_seen = self.clock()
        if chunk.index in transfer.pieces or self.buffered_bytes + len(chunk.data) > self.max_buffered_bytes:
            return
        transfer.pieces[chunk.index] = chunk.data
        transfer.buffered += len(chunk.data)
        self.buffered_bytes += len(chunk.data)


def _chunk(sender: str, transfer: str, index: int, count: int, data: bytes) -> Message:
    return Message.create(Chunk(transfer, index, count, count * len(data), bytes(32), data), sender=sender)


def per_chunk_seconds(make: Callable[[], object], open_transfers: int, repeats: int) -> float:
    """Best over ``repeats`` of the mean time of one ``add`` among PROBE_CHUNKS of a new transfer."""
    reassembler = make()
    for i in range(open_transfers):
        sender = f"gw-{i // 8}"
        reassembler.add(_chunk(sender, f"t{i}", 0, 4, b"x"), sender=sender)
    samples = []
    for attempt in range(repeats):
        sender = f"probe-{attempt}"  # a new sender each time: the caps never come into play
        probe = [_chunk(sender, "p", i, PROBE_CHUNKS + 1, bytes(PIECE)) for i in range(PROBE_CHUNKS)]
        start = time.perf_counter()
        for message in probe:
            reassembler.add(message, sender=sender)
        samples.append((time.perf_counter() - start) / PROBE_CHUNKS)
    return min(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 9")
    parser.add_argument("--repeats", type=int, help="timed repeats per cell (default 9; --quick 3)")
    args = parser.parse_args()
    repeats = args.repeats or (3 if args.quick else 9)
    command = (
        "python benchmarks/bench_reassembly.py"
        + (" --quick" if args.quick else "")
        + (f" --repeats {args.repeats}" if args.repeats else "")
    )
    print_machine(
        "Chunk reassembly: per-chunk cost with many transfers open",
        command,
        {"probe": f"{PROBE_CHUNKS} chunks of {PIECE} B, best of {repeats} repeats"},
    )
    budget = {"max_buffered_bytes": 1 << 40, "max_bytes_per_sender": 1 << 30}
    rows, after = [], {}
    for n in OPEN_TRANSFERS:
        before_s = per_chunk_seconds(lambda: _ReferenceReassembler(max_buffered_bytes=1 << 40), n, repeats)
        after[n] = per_chunk_seconds(lambda: Reassembler(**budget), n, repeats)
        rows.append([f"{n:,}", f"{before_s * 1e6:,.1f}", f"{after[n] * 1e6:,.2f}", f"{before_s / after[n]:,.0f}x"])
    print(markdown_table(["open transfers", "before: µs/chunk", "after: µs/chunk", "speed-up"], rows))
    ratio = after[OPEN_TRANSFERS[-1]] / after[OPEN_TRANSFERS[0]]
    print(f"\nafter: cost at {OPEN_TRANSFERS[-1]:,} open transfers / cost at {OPEN_TRANSFERS[0]:,} = {ratio:.2f}")
    return 0 if ratio <= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
