"""The vertical Federated Forest's messages: every type round-trips the wire codec
bit for bit, and malformed bodies are one clear ``ValueError`` naming the field.
``vertical_forest_examples()`` is also the fuzzer's seed list for these types."""

from __future__ import annotations

import numpy as np
import pytest

from shared.protocol.envelope import Message, decode_message, encode_message, registered_message_types
from shared.protocol.messages.vertical_forest import (
    SealedPartition,
    VerticalAbort,
    VerticalAlignReply,
    VerticalAlignRequest,
    VerticalDeploy,
    VerticalDirectionsReply,
    VerticalDirectionsRequest,
    VerticalFinishReply,
    VerticalFinishRequest,
    VerticalLevelReply,
    VerticalLevelRequest,
    VerticalManifest,
    VerticalPartitionReply,
    VerticalPartitionRequest,
    VerticalResult,
    VerticalRouteReply,
    VerticalRouteRequest,
    VerticalSetupReply,
    VerticalSetupRequest,
    VerticalTask,
)

I64 = np.int64


def _task() -> VerticalTask:
    return VerticalTask(
        "classification",
        "gini",
        party=1,
        n_parties=3,
        n_trees=2,
        n_classes=3,
        min_samples_split=2,
        min_samples_leaf=1,
        feature_set_version="fs-acc",
    )


def vertical_forest_examples() -> list[object]:
    """One valid body of every ``vertical_forest.*`` type."""
    part = SealedPartition(0, np.array([0, 1], I64), np.array([0, 2], I64), b"\x01" * 40)
    return [
        VerticalAlignRequest("fs-acc", 2_000_000, 250_000, "classification"),
        VerticalAlignRequest("fs-acc", 2_000_000, 250_000, "classification", live_model="activity-vf"),
        VerticalAlignReply(np.arange(48, dtype=np.uint8).reshape(3, 16), 1, 4, True, ("lie", "sit")),
        VerticalSetupRequest(_task(), np.array([0, 2, 5], I64), np.ones((2, 3), np.uint8)),
        VerticalSetupReply(3, b"\x02" * 52),
        VerticalLevelRequest(
            _task(),
            1,
            (part,),
            np.array([0, 1], I64),
            np.array([1, 5], I64),
            np.array([0, 2, 3], I64),
            np.array([0, 3, 1], I64),
            b"",
        ),
        VerticalLevelReply(np.array([1, 0], np.uint8), np.array([0.25, 0.0]), np.array([3, -1], I64)),
        VerticalPartitionRequest(_task(), 1, np.array([0], I64), np.array([1], I64)),
        VerticalPartitionReply(b"\x03" * 30),
        VerticalFinishRequest(_task(), 2, (part,)),
        VerticalFinishReply(
            np.array([0, 0], I64),
            np.array([1, 2], I64),
            np.array([[0.5, 0.5], [1.0, 0.0]]),
            np.array([3.0, 4.0]),
            b"\x04" * 32,
        ),
        VerticalDeploy(
            VerticalManifest(
                "activity-vf",
                2,
                "job-1",
                ("gw-a", "gw-b"),
                "gw-a",
                "classification",
                ("lie", "sit"),
                b"\x05" * 32,
                (b"\x06" * 32, b"\x07" * 32),
                17,
                "0123456789abcdef",
                b"\x08" * 64,
            )
        ),
        VerticalAbort("party-002 did not answer"),
        VerticalRouteRequest("job-1", np.array([0, 1, 4], I64)),
        VerticalRouteReply(np.zeros((3, 2), np.uint8), 9),
        VerticalDirectionsRequest(
            "job-1",
            np.array([0, 1], I64),
            np.array([0], I64),
            np.array([2], I64),
            np.array([0, 2], I64),
            np.array([0, 1], I64),
        ),
        VerticalDirectionsReply(np.array([128], np.uint8)),
        VerticalResult(np.array([[0.2, 0.8], [1.0, 0.0]]), ("lie", "sit")),
    ]


def test_every_vertical_type_has_an_example_and_round_trips():
    names = {n for n in registered_message_types() if n.startswith("vertical_forest.")}
    examples = vertical_forest_examples()
    assert {n for n, cls in registered_message_types().items() for b in examples if type(b) is cls} == names
    for body in examples:
        decoded = decode_message(encode_message(Message.create(body, sender="gw-1", job="j", round=1))).body
        assert type(decoded) is type(body)
        assert repr(decoded) == repr(body)


@pytest.mark.parametrize(
    "build,message",
    [
        (lambda: VerticalAlignReply(np.zeros((2, 8), np.uint8), 0, 1, False), "digests must have 16 columns"),
        (
            lambda: VerticalSetupRequest(_task(), np.array([2, 1], I64), np.ones((2, 2), np.uint8)),
            "keep must be strictly increasing",
        ),
        (
            lambda: VerticalSetupRequest(_task(), np.array([0, 1], I64), np.ones((1, 2), np.uint8)),
            r"bootstrap must have shape \(2, 2\)",
        ),
        (
            lambda: VerticalLevelRequest(
                _task(), 0, (), np.array([0], I64), np.array([0], I64), np.array([0, 2], I64), np.array([1], I64)
            ),
            "feature_offsets must rise from 0 to 1",
        ),
        (
            lambda: VerticalLevelReply(np.array([1], np.uint8), np.array([0.1, 0.2]), np.array([0], I64)),
            "arrays must have the same length",
        ),
        (lambda: VerticalRouteReply(np.zeros((2, 1), np.uint8), 9), "leaves must have 2 columns for 9 leaves"),
        (lambda: VerticalTask("classification", "mse", 0, 2, 1, 2, 2, 1), "classification needs n_classes >= 2"),
        (lambda: VerticalTask("regression", "mse", 2, 2, 1, 0, 2, 1), "party must lie in 0..n_parties-1"),
        (lambda: VerticalAlignRequest(hop_us=100, tolerance_us=60), "tolerance_us must lie in 0..hop_us/2"),
    ],
)
def test_malformed_bodies_are_one_clear_error(build, message):
    with pytest.raises(ValueError, match=message):
        build()
