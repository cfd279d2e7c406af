"""Property: whatever hostile gateways interleave with an honest one's chunks, the honest
sender's messages are each delivered exactly once and the reassembler stays within its budgets.

Two hostile gateways (each with its own verified id, as the ACL gives it) send forged ``from``s,
replays of the honest chunks (as they are and re-signed in their own name), transfers claiming
oversize totals or thousands of pieces, contradicting chunks and trickles of duplicates. The
honest gateway's chunks arrive reordered and duplicated, with QoS 1 redeliveries of its earlier
transfers. The honest transfers fit the fair share (total budget / 3 senders): within that share
the reassembler promises that nobody else's traffic evicts them (see ``Reassembler``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import event, given, settings
from hypothesis import strategies as st

from shared.protocol.chunking import PIECE_OVERHEAD, Chunk, Reassembler, split_payload
from shared.protocol.envelope import Message, encode_message
from shared.protocol.errors import ChunkError
from shared.protocol.limits import DecodeLimits
from shared.protocol.messages import Ping

HONEST = "gw-h"
HOSTILE = ("gw-e1", "gw-e2")
LIMITS = DecodeLimits(max_message_bytes=8000)
PER_SENDER = 9000
TOTAL = 21_500  # below 3 x PER_SENDER: two hoarding hostile senders and the honest one overflow it
MAX_PAYLOAD = 1024


@dataclass(frozen=True)
class Arrival:
    """One chunk as the reassembler sees it: the verified sender (its topic) and the message."""

    sender: str
    message: Message


def honest_transfer(size: int, seed: int) -> tuple[bytes, list[Message]]:
    data = encode_message(Message.create(Ping(random.Random(seed).randbytes(size)), sender=HONEST))
    chunks = split_payload(data, sender=HONEST, max_payload=MAX_PAYLOAD)
    assert len(data) + len(chunks) * PIECE_OVERHEAD <= TOTAL // 3  # within the fair share
    return data, chunks


def hostile_chunk(draw, claimed: str) -> Message:
    """Own transfers with arbitrary, often absurd, headers: oversize totals, 1-byte pieces,
    contradicting counts for a shared transfer id, zero hashes."""
    total = draw(st.sampled_from([1, 40, 900, 5000, 7900, 8001, 10**9]))
    count = draw(st.integers(1, min(total, 3000)))
    index = draw(st.integers(0, count - 1))
    data = b"e" * draw(st.integers(1, 2000))
    transfer = draw(st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h", "i"]))
    return Message.create(Chunk(transfer, index, count, total, bytes(32), data), sender=claimed)


def hoard(draw, evil: str, transfer: str) -> list[Message]:
    """A well-formed transfer sent but for its last piece: it holds memory until evicted."""
    total = draw(st.integers(4000, 7900))
    count = draw(st.integers(2, 8))
    piece = -(-total // count)
    return [
        Message.create(Chunk(transfer, i, count, total, bytes(32), b"h" * piece), sender=evil) for i in range(count - 1)
    ]


@st.composite
def scenarios(draw) -> tuple[list[bytes], list[Arrival], list[float]]:
    sizes = st.integers(1, 6000) | st.integers(5000, 6000)  # large ones often: they pressure the budgets
    transfers = [honest_transfer(draw(sizes), seed) for seed in range(draw(st.integers(1, 3)))]
    honest: list[Arrival] = []
    for k, (_data, chunks) in enumerate(transfers):
        resent = [c for _d, earlier in transfers[:k] for c in earlier]  # QoS 1 redeliveries
        extra = draw(st.lists(st.sampled_from(chunks + resent), max_size=4))
        honest += [Arrival(HONEST, c) for c in draw(st.permutations(chunks + extra))]
    everything = [c for _d, chunks in transfers for c in chunks]
    hostile: list[Arrival] = []
    for _ in range(draw(st.integers(0, 60))):
        evil = draw(st.sampled_from(HOSTILE))
        kind = draw(st.sampled_from(["forged", "replay", "re-signed", "own", "trickle", "hoard"]))
        if kind == "hoard":
            hostile += [Arrival(evil, c) for c in hoard(draw, evil, f"hoard-{len(hostile)}")]
            continue
        if kind == "forged":
            message = hostile_chunk(draw, claimed=draw(st.sampled_from([HONEST, *HOSTILE])))
        elif kind in ("replay", "re-signed"):
            original = draw(st.sampled_from(everything))
            claimed = HONEST if kind == "replay" else evil
            message = Message.create(original.body, sender=claimed)
        else:
            message = hostile_chunk(draw, claimed=evil)
        repeats = draw(st.integers(2, 20)) if kind == "trickle" else 1
        hostile += [Arrival(evil, message)] * repeats
    # an arbitrary interleaving that keeps each stream's own order
    picks = draw(st.permutations([True] * len(honest) + [False] * len(hostile)))
    streams = {True: iter(honest), False: iter(hostile)}
    arrivals = [next(streams[pick]) for pick in picks]
    gaps = draw(st.lists(st.floats(0, 0.2), min_size=len(arrivals), max_size=len(arrivals)))
    return [data for data, _c in transfers], arrivals, gaps


@settings(max_examples=300, deadline=None)
@given(scenario=scenarios())
def test_honest_transfers_survive_any_hostile_interleaving(scenario) -> None:
    expected, arrivals, gaps = scenario
    now = [0.0]
    r = Reassembler(limits=LIMITS, max_bytes_per_sender=PER_SENDER, max_buffered_bytes=TOTAL, clock=lambda: now[0])
    delivered = []
    for arrival, gap in zip(arrivals, gaps):
        now[0] += gap  # 0.2 s at most per chunk: the whole run stays within the 60 s idle timeout
        try:
            whole = r.add(arrival.message, sender=arrival.sender)
        except ChunkError:
            assert arrival.sender != HONEST
            whole = None
        if arrival.sender == HONEST and whole is not None:
            delivered.append(whole)
        assert r.buffered_bytes <= TOTAL
        assert all(r.sender_bytes(s) <= PER_SENDER for s in (HONEST, *HOSTILE))
        assert r.buffered_bytes == sum(r.sender_bytes(s) for s in (HONEST, *HOSTILE))
    assert delivered == expected
    event(f"hostile transfers evicted: {min(r.stats.evicted, 3)}{'+' if r.stats.evicted >= 3 else ''}")
    assert r.stats.forged == sum(a.message.sender != a.sender for a in arrivals)
