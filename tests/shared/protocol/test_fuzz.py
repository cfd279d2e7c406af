"""10,000+ random and mutated payloads: the decoder only ever raises DecodeError, never crashes."""

from __future__ import annotations

import dataclasses

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shared.protocol.codec import dumps_value
from shared.protocol.envelope import Message, decode_message, encode_message, registered_message_types
from shared.protocol.errors import DecodeError
from shared.protocol.limits import DecodeLimits
from shared.protocol.messages import Hello, ModelAnnouncement, Ping, Status
from shared.transport.memory import MemoryBroker, MemoryTransport

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


# -- structure-aware: well-formed CBOR, hostile values in every field of every body type -------


_arrays = st.sampled_from(["int8", "uint8", "int32", "float32", "float64"]).flatmap(
    lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, max_side=3))
)
hostile_values = st.recursive(
    st.one_of(  # arrays weighted up: numpy's comparison semantics are where decoders trip
        st.none(),
        st.booleans(),
        st.integers(-(2**64) + 1, 2**64 - 1),
        st.floats(),
        st.text(max_size=8),
        st.binary(max_size=40),
        _arrays,
        _arrays,
        _arrays,
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)


def fedscs_xgb_examples() -> list[object]:
    from shared.protocol.messages import DataSummary, DataSummaryRequest
    from shared.protocol.messages import fedscs_xgb as m

    task = m.XgbTask("softmax", "fs-1", 2, np.zeros(3), ("a", "b", "c"))
    delta = m.ModelDelta(0, b"")
    summary = m.SummaryColumns(np.zeros((2, 3)), np.ones(2), np.ones(2, np.int64), np.zeros(2, np.int64), np.zeros(2))
    sketches = m.DDSketchColumns(
        0.01,
        np.array([1], np.int32),
        np.ones(1),
        np.array([0, 1, 1]),
        np.zeros(0, np.int32),
        np.zeros(0),
        np.zeros(3, np.int64),
        np.zeros(2),
        np.ones(2, np.int64),
        np.zeros(2, np.int64),
        np.zeros(2),
    )
    return [
        DataSummaryRequest("fs-1", False),
        DataSummary(5, 2, np.zeros((3, 2)), np.zeros(2), np.ones(2), ("x", "y"), ("a", "b"), np.array([2, 3])),
        m.XgbSketchRequest(task, delta, "summary", 16),
        m.XgbSketchReply(0, summary=summary),
        m.XgbSketchReply(0, ddsketch=sketches),
        m.XgbAtomRequest(task, delta, np.array([0.5, 1.5], np.float32), np.array([0, 1, 2])),
        m.XgbAtomReply(
            0, 3, 2.5, np.zeros((2, 2), np.uint8), np.array([1, 2], np.uint32), np.zeros((2, 3)), np.ones((2, 3))
        ),
    ]


def fedforest_examples() -> list[object]:
    from shared.protocol.messages import fedforest as f

    z = np.zeros(0, np.int64)
    task = f.ForestTask("classification", "gini", "fs-1", 3, 2, 0, np.array([0, 1]), 7, True, ("a", "b"))
    splits = f.SplitDecisions(
        np.array([0]),
        np.array([1]),
        np.array([0]),
        np.array([2]),
        np.array([0.5]),
        np.array([0], np.uint8),
        np.array([1]),
        np.array([2]),
        np.array([0, 0]),
        z,
    )
    return [
        f.ForestLevelRequest(
            task, 1, splits, np.array([1, 1]), np.array([1, 2]), np.array([0, 1, 2]), np.array([0, 2]), 4
        ),
        f.ForestLevelReply(
            np.array([0]),
            np.array([[3, 4]]),
            np.array([0]),
            np.zeros((1, 5)),
            np.ones(1),
            z,
            np.zeros((0, 2, 2), np.int64),
        ),
        f.ForestSplitRequest(task, 1, np.array([0, 2, 3]), np.array([0.1, 0.2, 0.3])),
        f.ForestSplitReply(np.array([0, 2]), np.array([[1, 2], [0, 3]])),
    ]


def private_examples() -> list[object]:
    """The private protocols' bodies: fleet sums, histograms, secure aggregation."""
    from shared.protocol.messages import fedforest as f
    from shared.protocol.messages import fedscs_xgb as m
    from shared.protocol.messages import fleet_sums as s
    from shared.protocol.messages import secure_aggregation as a

    z = np.zeros(0, np.int64)
    keys = a.PublicKeyPair(bytes(32), bytes(range(32)))
    vector = a.MaskedVector(np.arange(4, dtype=np.uint64), {"gw-2": b"sealed"})
    xgb_task = m.XgbTask("softmax", "fs-1", 2, np.zeros(3), ("a", "b", "c"))
    forest_task = f.ForestTask("classification", "gini", "fs-1", 3, 2, 0, np.array([0, 1]), 7, True, ("a", "b"))
    splits = f.SplitDecisions(z, z, z, z, np.zeros(0), np.zeros(0, np.uint8), z, z, np.zeros(1, np.int64), z)
    private_round = m.PrivateRoundFeatures(np.array([0, 1]), np.array([0.5, 1.5], np.float32), np.array([0, 1, 2]))
    lattice = m.PrivateLattice(64, 1.4142, 1.0)
    return [
        s.DataShapeRequest("fs-1", True, s.TimeRange(10, 20), 5),
        s.DataShape(2, ("x", "y"), ("a", "b"), False),
        s.FleetCountsRequest("fs-1", False, ("a", "b"), 0, a.SecureRound(("gw-2",))),
        s.FleetCountsRequest("fs-1", True, (), 16, a.SecureRound(("gw-2",)), shift=1.7e9),
        s.GridCountsRequest(
            "fs-1", np.array([0], np.int32), np.array([0], np.uint32), np.array([0], np.uint8), np.array([8], np.uint8)
        ),
        s.GridCountsRequest(
            "fs-1",
            np.array([0, 1], np.int32),
            np.array([0, 0], np.uint32),
            np.array([0, 0], np.uint8),
            np.array([8, 8], np.uint8),
            word_bits=16,
            target=True,
        ),
        s.FleetSumReply(vector),
        a.SecAggKeysRequest(),
        a.SecAggPublicKeys(keys),
        a.SecAggJoinRequest({"gw-1": keys, "gw-2": keys}, ("gw-2",), 1),
        a.SecAggConfirmations({"gw-2": b"c"}),
        a.SecAggConfirmRequest({"gw-2": b"c"}),
        a.SecAggUnmaskRequest("job/3", ("gw-1", "gw-2"), ("gw-3",), {"gw-2": b"sealed"}),
        a.SecAggUnmaskReply({"gw-2": b"share"}, {"gw-2": {"gw-3": b"share"}}),
        m.XgbHistogramRequest(
            xgb_task,
            m.ModelDelta(),
            np.array([0.5, 1.5], np.float32),
            np.array([0, 1, 2]),
            m.RoundSplits.empty(),
            np.array([0, 1]),
            np.array([0, 0]),
            40,
            1.0,
            True,
        ),
        m.XgbHistogramReply(0, vector),
        m.XgbPrivateLevelRequest(
            xgb_task,
            m.ModelDelta(),
            private_round,
            m.RoundSplits.empty(),
            np.array([0]),
            lattice,
            s.NoiseShare(1e6, 4, 64),
            a.SecureRound(("gw-2",)),
        ),
        m.XgbPrivateLeavesRequest(
            xgb_task, m.ModelDelta(), private_round, m.RoundSplits.empty(), np.array([0]), lattice, s.NoiseShare(1e6, 4)
        ),
        f.ForestHistogramRequest(
            forest_task,
            0,
            splits,
            np.array([0]),
            np.array([0]),
            np.array([0, 2]),
            np.array([0, 2]),
            np.array([0.5, 1.5], np.float32),
            np.array([0, 1, 1, 2]),
        ),
        f.ForestHistogramReply(vector),
        f.PrivateForestHistogramRequest(
            dataclasses.replace(forest_task, bootstrap=False),
            np.array([0, 2]),
            np.array([0.5, 1.5], np.float32),
            np.array([0, 1, 1, 2]),
            s.NoiseShare(1e6, 4, 64),
            a.SecureRound(("gw-2",)),
        ),
        f.PrivateForestLeavesRequest(
            dataclasses.replace(forest_task, bootstrap=False),
            splits,
            np.array([0, 1]),
            np.array([0, 0]),
            s.NoiseShare(1e6, 4, 64),
        ),
    ]


def evaluation_examples() -> list[object]:
    from shared.protocol.messages.evaluation import EvaluateRequest, EvaluationReply, LocalBaselineRequest

    return [
        EvaluateRequest(b"model", "fs-1", "holdout", "label", 2, 10),
        EvaluationReply(5, np.array([[2, 1], [0, 2]]), np.zeros((2, 10, 2), np.int64), 1.5),
        LocalBaselineRequest("fs-1", ("push", "rest"), max_depth=6, cv_folds=3, seed=4),
    ]


def deployment_examples() -> list[object]:
    from shared.protocol.messages import deployment as m

    return [
        m.ModelPush(b"bundle"),
        m.ModelRollback("bad"),
        m.ModelStatus("active", "m", 2, 1, ""),
        m.PredictionBatch(
            "m",
            2,
            ("a", "b"),
            np.array([10, 20]),
            np.array([0, 1], np.int32),
            np.array([0.9, 0.8], np.float32),
            np.array([0.1, 0.2], np.float32),
        ),
        m.AlertEvent("r", "raised", 1, 2, "msg", {"k": "v"}),
    ]


def fedga_tree_examples() -> list[object]:
    """One valid body of every FedGA-Tree message (depth 2: three slots per structure)."""
    from shared.protocol.messages.fedga_tree import (
        GADepthReply,
        GADepthRequest,
        GAFinishReply,
        GAFinishRequest,
        GAGenerationReply,
        GAGenerationRequest,
        GAStructureReply,
        GAStructureRequest,
        GATask,
    )

    task = GATask("classification", "fs-1", 7, classes=("push", "rest"))
    population = np.array([[0, -1, -1], [1, 0, -1]], np.int16)
    return [
        GADepthRequest(task),
        GADepthReply(3, 41.5),
        GAStructureRequest(task, 2),
        GAStructureReply(np.array([0, 1, -1], np.int16), 40.2, vote_full_data=True),
        GAGenerationRequest(task, 2, 5, population, join=True),
        GAGenerationReply(np.array([0.5, 0.75]), np.array([1, -1, -1], np.int16), 0.6, 39.0),
        GAFinishRequest(task, 2, population),
        GAFinishReply(b"\xa0", 1, 0.8),
    ]


def valid_bodies() -> dict[str, object]:
    """One valid body per registered type: the fuzzer breaks one field at a time from these."""
    from shared.protocol.chunking import Chunk
    from aggregator.merge_workers import MergeChunk, MergePartial
    from shared.protocol.messages import Ack, Describe, ErrorReply, Pong
    from tests.aggregator.test_site_aggregator import site_examples
    from tests.aggregator.test_vertical_forest_messages import vertical_forest_examples
    from tests.shared.protocol.test_envelope import ArrayBody

    examples = [
        Hello("0.1.0", "fs-1", 12, ("a",)),
        Status(online=True, detail={"k": "v"}),
        Ping(b"x", 0.5),
        Pong(b"y"),
        Ack("n"),
        Describe(),
        ErrorReply("c", "m", "ping"),
        ModelAnnouncement("m", 1, "x", "fs", bytes(32), 9),
        Chunk("t", 0, 1, 1, bytes(32), b"x"),
        ArrayBody(np.zeros(3, np.float32), [1], {"a": 1.0}, "n"),
        *fedscs_xgb_examples(),
        *fedforest_examples(),
        *private_examples(),
        *evaluation_examples(),
        *deployment_examples(),
        *vertical_forest_examples(),
        *fedga_tree_examples(),
        *site_examples(),
        MergePartial(np.arange(3, dtype=np.uint32), (b"stub",)),
        MergeChunk("gw-1", b"chunk"),
    ]
    return {
        type_name: body
        for body in examples
        for type_name, cls in registered_message_types().items()
        if type(body) is cls
    }


def test_every_message_type_has_a_fuzz_seed() -> None:
    missing = sorted(set(registered_message_types()) - set(valid_bodies()))
    assert not missing, f"add a valid example of {missing} to valid_bodies() so the fuzzer covers it"


def _targets() -> list[tuple[str, str, str]]:
    """(type, "body" or "envelope", key) for every field of every seed, plus an unexpected key."""
    from shared.protocol.schema import to_wire

    out = []
    for name, body in sorted(valid_bodies().items()):
        out += [(name, "body", key) for key in [*sorted(to_wire(body)), "unexpected"]]
    out += [("ping", "envelope", key) for key in ["v", "type", "job", "round", "id", "re", "from", "ts", "body"]]
    return out


@pytest.mark.parametrize(("name", "where", "key"), _targets())
@settings(max_examples=25, deadline=None)  # x ~140 fields: ~3,500 hostile bodies per run
@given(value=hostile_values)
def test_hostile_field_values_are_rejected_never_crash(name: str, where: str, key: str, value) -> None:
    from shared.protocol.schema import to_wire

    body = to_wire(valid_bodies()[name])
    envelope = {
        "v": 1,
        "type": name,
        "job": "j",
        "round": 1,
        "id": "x",
        "re": "",
        "from": "gw-1",
        "ts": 0.0,
        "body": body,
    }
    (body if where == "body" else envelope)[key] = value
    transport = MemoryTransport(MemoryBroker(), "aggregator", presence=False)
    transport._receive_payload("wheelfed/v1/c/gw-1/out", dumps_value(envelope))
    assert transport.stats.rejected["InternalDecodeError"] == 0
    assert transport.stats.received_messages + sum(transport.stats.rejected.values()) == 1


def test_a_survey_without_a_time_range_decodes_as_before() -> None:
    """A ``data_shape`` request of a sender without the time-range fields decodes with the
    defaults (no range, no minimum); a range whose start is not before its end is refused."""
    from shared.protocol.errors import SchemaError
    from shared.protocol.messages.fleet_sums import DataShapeRequest
    from shared.protocol.schema import from_wire

    assert from_wire(DataShapeRequest, {"feature_set_version": "fs", "labels": False}) == DataShapeRequest("fs", False)
    with pytest.raises(SchemaError, match="since_us .* must be before until_us"):
        from_wire(DataShapeRequest, {"feature_set_version": "fs", "time_range": {"since_us": 5, "until_us": 5}})
