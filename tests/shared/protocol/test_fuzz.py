"""10,000+ random and mutated payloads: the decoder only ever raises DecodeError, never crashes."""

from __future__ import annotations

import random

import numpy as np

from shared.protocol.errors import DecodeError
from shared.protocol.envelope import Message, decode_message, encode_message
from shared.protocol.limits import DecodeLimits
from shared.protocol.messages import Hello, ModelAnnouncement, Ping, Status

LIMITS = DecodeLimits(max_message_bytes=1 << 20, max_array_elements=1 << 16)


def seeds() -> list[bytes]:
    from tests.shared.protocol.test_envelope import ArrayBody

    bodies = [
        Hello("0.1.0", "fs-1", 12, ("fedscs", "fedforest")),
        Status(online=True, active_model="m-3", n_windows=10, detail={"link": "ok"}),
        Ping(b"\x00\x01" * 40, 0.5),
        ModelAnnouncement("model", 3, "fedscs_xgb", "fs-1", bytes(range(32)), 1234),
        ArrayBody(np.linspace(-1, 1, 17, dtype=np.float32), [1, 2, 3], {"a": 1.5}, "n"),
    ]
    return [encode_message(Message.create(b, sender="gw-1", job="j", round=2)) for b in bodies]


def mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        pos = rng.randrange(len(buf)) if buf else 0
        if op == 0 and buf:
            buf[pos] ^= 1 << rng.randrange(8)  # bit flip
        elif op == 1 and buf:
            buf[pos] = rng.randrange(256)  # byte replace
        elif op == 2:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))  # insert
        elif op == 3 and buf:
            del buf[pos : pos + rng.randint(1, 8)]  # delete
        elif op == 4:
            buf = buf[: rng.randrange(len(buf) + 1)]  # truncate
        else:
            start = rng.randrange(len(buf) + 1)  # duplicate a slice
            buf[start:start] = buf[start : start + rng.randint(1, 16)]
    return bytes(buf)


def test_decoder_survives_10000_mutated_and_random_messages() -> None:
    rng = random.Random(20261125)
    corpus = seeds()
    outcomes = {"accepted": 0, "rejected": 0}
    for i in range(12_000):
        if i % 6 == 0:
            data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
        else:
            data = mutate(rng, rng.choice(corpus))
        try:
            decode_message(data, limits=LIMITS)
            outcomes["accepted"] += 1
        except DecodeError:
            outcomes["rejected"] += 1
    # anything else (IndexError, KeyError, MemoryError, ...) fails the test by propagating
    assert outcomes["rejected"] > 10_000, outcomes
    assert sum(outcomes.values()) == 12_000
