"""Envelope and schema validation: every field checked, the bad one named."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import cbor2
import numpy as np
import pytest

from shared.protocol import errors
from shared.protocol.envelope import Message, decode_message, encode_message, message_type
from shared.protocol.messages import ErrorReply, Hello, ModelAnnouncement, Status
from shared.protocol.schema import ArraySpec


@message_type("test_arrays")
@dataclass(frozen=True)
class ArrayBody:
    edges: Annotated[np.ndarray, ArraySpec(dtypes=("float32", "float64"), ndim=1, finite=True)]
    counts: list[int]
    by_class: dict[str, float]
    note: str | None = None


def wire(message: Message) -> dict:
    return cbor2.loads(encode_message(message))


def hello() -> Message:
    return Message.create(Hello("0.1.0", "fs-1", 42, ("fedscs",)), sender="gw-1", job="job-7", round=3)


def test_round_trip_keeps_envelope_and_body() -> None:
    m = hello()
    assert decode_message(encode_message(m)) == m


def test_arrays_in_bodies_round_trip_bit_exactly() -> None:
    body = ArrayBody(np.linspace(0, 1, 7, dtype=np.float32), [1, 2], {"a": 0.5}, None)
    back = decode_message(encode_message(Message.create(body, sender="aggregator"))).body
    assert back.edges.dtype == np.float32 and back.edges.tobytes() == body.edges.tobytes()
    assert back.counts == [1, 2] and back.by_class == {"a": 0.5} and back.note is None


def test_reply_points_back_at_its_request() -> None:
    request = hello()
    reply = request.reply(Status(online=True), sender="aggregator")
    assert (reply.envelope.job, reply.envelope.round, reply.envelope.reply_to) == ("job-7", 3, request.envelope.msg_id)


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda w: w["body"].update(n_features="42"), "body.n_features: expected int, got str"),
        (lambda w: w["body"].update(n_features=True), "body.n_features: expected int, got bool"),
        (lambda w: w["body"].pop("software_version"), "body.software_version: required field is missing"),
        (lambda w: w["body"].update(extra=1), "body.extra: unexpected field"),
        (lambda w: w["body"].update(capabilities=["a", 3]), r"body.capabilities\[1\]: expected str, got int"),
        (lambda w: w.update(round=-1), "message.round: must be >= 0"),
        (lambda w: w.update(round="1"), "message.round: expected int"),
        (lambda w: w.update(id=""), "message.id: must not be empty"),
        (lambda w: w.pop("ts"), "message.ts: required field is missing"),
        (lambda w: w.update(body=[1]), "body: expected a map, got list"),
        (lambda w: w.update(extra="x"), "message.extra: unexpected field"),
        (lambda w: w.update({"from": "gw/2"}), "message.from: invalid client id"),
        (lambda w: w.pop("from"), "message.from: required text field is missing"),
    ],
)
def test_schema_errors_name_the_bad_field(mutate, path: str) -> None:
    w = wire(hello())
    mutate(w)
    with pytest.raises(errors.SchemaError, match=path):
        decode_message(cbor2.dumps(w))


def test_array_spec_is_enforced() -> None:
    good = ArrayBody(np.zeros(3, np.float32), [], {})
    w = wire(Message.create(good, sender="aggregator"))
    w["body"]["edges"] = cbor2.CBORTag(40, [[3], cbor2.CBORTag(78, b"\x00" * 12)])  # int32
    with pytest.raises(errors.SchemaError, match=r"body.edges: expected dtype in \['float32', 'float64'\], got int32"):
        decode_message(cbor2.dumps(w))
    w["body"]["edges"] = cbor2.CBORTag(40, [[1, 3], cbor2.CBORTag(85, b"\x00" * 12)])
    with pytest.raises(errors.SchemaError, match="expected a 1-d array"):
        decode_message(cbor2.dumps(w))
    w["body"]["edges"] = cbor2.CBORTag(40, [[1], cbor2.CBORTag(85, np.float32([np.nan]).tobytes())])
    with pytest.raises(errors.SchemaError, match="NaN"):
        decode_message(cbor2.dumps(w))


def test_cross_field_checks_become_schema_errors() -> None:
    ann = ModelAnnouncement("m", 1, "fedscs_xgb", "fs-1", b"\x00" * 32, 10)
    w = wire(Message.create(ann, sender="aggregator"))
    w["body"]["sha256"] = b"short"
    with pytest.raises(errors.SchemaError, match="sha256 must be 32 bytes"):
        decode_message(cbor2.dumps(w))


def test_unknown_type_and_version() -> None:
    w = wire(hello())
    w["type"] = "no_such_type"
    with pytest.raises(errors.UnknownMessageType, match="no_such_type"):
        decode_message(cbor2.dumps(w))
    w = wire(hello())
    w["v"] = 99
    with pytest.raises(errors.UnsupportedVersion, match="99"):
        decode_message(cbor2.dumps(w))


def test_literal_fields() -> None:
    ann = ModelAnnouncement("m", 1, "fedforest", "fs-1", b"\x00" * 32, 10, kind="forest")
    w = wire(Message.create(ann, sender="aggregator"))
    w["body"]["kind"] = "bagged"
    with pytest.raises(errors.SchemaError, match="body.kind: expected one of"):
        decode_message(cbor2.dumps(w))


def test_unregistered_body_cannot_be_sent() -> None:
    @dataclass
    class Unregistered:
        x: int

    with pytest.raises(TypeError, match="not a registered message body"):
        Message.create(Unregistered(1), sender="gw-1")


def test_error_reply_round_trip() -> None:
    m = Message.create(ErrorReply("no_data", "nothing labelled yet", "hello"), sender="gw-1")
    assert decode_message(encode_message(m)).body == m.body
