"""Chunking: loss, duplication and reordering; integrity; timeouts free memory."""

from __future__ import annotations

import random

import pytest

from shared.protocol.chunking import Chunk, Reassembler, split_payload
from shared.protocol.envelope import Message, decode_message, encode_message
from shared.protocol.errors import ChunkError, PayloadTooLarge
from shared.protocol.limits import DecodeLimits
from shared.protocol.messages import Ping


def encoded_ping(size: int) -> bytes:
    return encode_message(Message.create(Ping(bytes(random.Random(size).randbytes(size))), sender="gw-1"))


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def feed(r: Reassembler, chunk: Message) -> bytes | None:
    """Honest traffic: every chunk arrives on its own sender's topic (see test_chunking_limits)."""
    return r.add(chunk, sender=chunk.sender)


def wire_round_trip(chunks: list[Message]) -> list[Message]:
    return [decode_message(encode_message(c)) for c in chunks]


def test_chunks_fit_the_payload_limit_and_reassemble() -> None:
    data = encoded_ping(100_000)
    chunks = split_payload(data, sender="gw-1", max_payload=4096)
    assert len(chunks) > 20
    assert all(len(encode_message(c)) <= 4096 for c in chunks)
    r = Reassembler()
    results = [feed(r, c) for c in wire_round_trip(chunks)]
    assert results[:-1] == [None] * (len(chunks) - 1) and results[-1] == data
    assert r.pending == 0 and r.stats.completed == 1


def test_reordered_and_duplicated_chunks() -> None:
    data = encoded_ping(50_000)
    chunks = split_payload(data, sender="gw-1", max_payload=2048)
    shuffled = chunks + chunks[:5]
    random.Random(1).shuffle(shuffled)
    r = Reassembler()
    outputs = [out for c in shuffled if (out := feed(r, c)) is not None]
    assert outputs == [data]
    assert r.stats.duplicates == 5 and r.pending == 0


def test_duplicate_after_completion_does_not_open_a_new_transfer() -> None:
    chunks = split_payload(encoded_ping(10_000), sender="gw-1", max_payload=2048)
    r = Reassembler()
    for c in chunks:
        feed(r, c)
    assert feed(r, chunks[0]) is None and r.pending == 0


def test_missing_chunk_times_out_and_frees_memory() -> None:
    clock = FakeClock()
    chunks = split_payload(encoded_ping(20_000), sender="gw-1", max_payload=2048)
    r = Reassembler(timeout_s=5, clock=clock)
    for c in chunks[:-1]:
        assert feed(r, c) is None
    assert r.pending == 1 and r.buffered_bytes > 15_000
    clock.now = 6.0
    assert r.expire() == [("gw-1", chunks[0].body.transfer)]
    assert r.pending == 0 and r.buffered_bytes == 0 and r.stats.expired == 1


def test_transfers_from_different_senders_do_not_mix() -> None:
    data_a, data_b = encoded_ping(5000), encoded_ping(6000)
    a = split_payload(data_a, sender="gw-1", max_payload=1024)
    b = split_payload(data_b, sender="gw-2", max_payload=1024)
    r = Reassembler()
    done = [out for pair in zip(a, b) for c in pair if (out := feed(r, c)) is not None]
    done += [out for c in (a + b)[min(len(a), len(b)) * 2 :] if (out := feed(r, c)) is not None]
    assert sorted(done, key=len) == [data_a, data_b]


def test_corrupted_chunk_fails_the_integrity_check() -> None:
    chunks = split_payload(encoded_ping(10_000), sender="gw-1", max_payload=2048)
    body = chunks[2].body
    chunks[2] = Message(
        chunks[2].envelope,
        Chunk(
            body.transfer,
            body.index,
            body.count,
            body.total_size,
            body.sha256,
            bytes([body.data[0] ^ 1]) + body.data[1:],
        ),
    )
    r = Reassembler()
    with pytest.raises(ChunkError, match="integrity"):
        for c in chunks:
            feed(r, c)
    assert r.pending == 0 and r.stats.rejected == 1


def test_contradicting_chunk_is_rejected_and_transfer_dropped() -> None:
    chunks = split_payload(encoded_ping(10_000), sender="gw-1", max_payload=2048)
    b = chunks[1].body
    liar = Message(chunks[1].envelope, Chunk(b.transfer, b.index, b.count + 1, b.total_size, b.sha256, b.data))
    r = Reassembler()
    feed(r, chunks[0])
    with pytest.raises(ChunkError, match="contradicts"):
        feed(r, liar)
    assert r.pending == 0


def test_oversize_declared_total_is_rejected() -> None:
    chunks = split_payload(encoded_ping(10_000), sender="gw-1", max_payload=2048)
    with pytest.raises(ChunkError, match="exceeds the limit"):
        feed(Reassembler(limits=DecodeLimits(max_message_bytes=5000)), chunks[0])


def test_more_bytes_than_declared_is_rejected() -> None:
    chunks = split_payload(encoded_ping(10_000), sender="gw-1", max_payload=2048)
    b = chunks[0].body
    r = Reassembler()
    feed(r, chunks[0])
    fat = Message(chunks[1].envelope, Chunk(b.transfer, 1, b.count, b.total_size, b.sha256, b"x" * b.total_size))
    with pytest.raises(ChunkError, match="more bytes"):
        feed(r, fat)


def test_buffer_budget_is_checked_on_every_chunk() -> None:
    r = Reassembler(max_buffered_bytes=5000)
    transfers = [split_payload(encoded_ping(2000 + i), sender=f"gw-{i}", max_payload=512) for i in range(3)]
    for step in range(8):
        for chunks in transfers:
            feed(r, chunks[step])
            assert r.buffered_bytes <= 5000
    assert r.stats.evicted > 0


def test_slow_transfer_completes_when_chunks_keep_coming() -> None:
    clock = FakeClock()
    data = encoded_ping(20_000)
    chunks = split_payload(data, sender="gw-1", max_payload=2048)
    r = Reassembler(timeout_s=5, clock=clock)
    out = None
    for c in chunks:  # one chunk every 4 s: far slower in total than the 5 s timeout
        clock.now += 4
        out = feed(r, c)
    assert out == data and r.stats.expired == 0


def test_late_chunks_of_an_expired_transfer_are_ignored() -> None:
    clock = FakeClock()
    chunks = split_payload(encoded_ping(20_000), sender="gw-1", max_payload=2048)
    r = Reassembler(timeout_s=5, clock=clock)
    feed(r, chunks[0])
    clock.now = 10
    r.expire()
    assert feed(r, chunks[1]) is None and r.pending == 0 and r.stats.late == 1


@pytest.mark.parametrize(
    ("count", "total", "data", "match"),
    [(5, 3, b"x", "cannot carry"), (2, 100, b"", "empty chunk"), (1, 10, b"x", None)],
)
def test_chunk_fields_are_consistent(count, total, data, match) -> None:
    if match is None:
        Chunk("t", 0, count, total, b"\x00" * 32, data)
        return
    with pytest.raises(ValueError, match=match):
        Chunk("t", 0, count, total, b"\x00" * 32, data)


def test_long_job_id_still_fits_the_payload_limit() -> None:
    chunks = split_payload(encoded_ping(20_000), sender="gw-1", max_payload=4096, job="j" * 1500, round=7)
    assert all(len(encode_message(c)) <= 4096 for c in chunks)
    assert feed(Reassembler(), chunks[0]) is None


def test_payload_limit_too_small_for_chunk_overhead() -> None:
    with pytest.raises(PayloadTooLarge, match="no room"):
        split_payload(b"x" * 100, sender="gw-1", max_payload=100)
