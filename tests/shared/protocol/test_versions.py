"""Protocol versions: the wire cannot change without a version bump, and a peer one version
behind gets what it reads or a refusal that names the version it needs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest

from shared.protocol import wire
from shared.protocol.codec import dumps_value, loads_value
from shared.protocol.envelope import (
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    Message,
    NewerVersion,
    decode_message,
    encode_message,
)
from shared.protocol.errors import UnsupportedVersion
from shared.protocol.messages import Status
from shared.protocol.messages.fleet_sums import (
    DataShapeRequest,
    FleetCountsRequest,
    NoiseShare,
)
from shared.protocol.messages.secure_aggregation import SecAggUnmaskRequest
from shared.protocol.topics import TopicLayout


def _differences(recorded: dict, current: dict) -> list[str]:
    out = []
    for name in sorted(set(recorded) | set(current)):
        if name not in recorded:
            out.append(f"{name}: new")
        elif name not in current:
            out.append(f"{name}: removed")
        elif recorded[name] != current[name]:
            old, new = recorded[name]["fields"], current[name]["fields"]
            fields = sorted(f for f in set(old) | set(new) if old.get(f) != new.get(f))
            out.append(f"{name}: {', '.join(fields) or 'content revision'}")
    return out


def test_the_wire_matches_the_recorded_fingerprint_of_the_current_version() -> None:
    """Fails on any change of a message type's wire fields (added, removed, re-typed, default
    added or dropped), a new or removed type, or a content revision, unless PROTOCOL_VERSION was
    bumped and the new version recorded (docs/protocol.md, "Versions")."""
    history = wire.wire_history()
    assert PROTOCOL_VERSION in history, (
        f"protocol version {PROTOCOL_VERSION} has no recorded wire: run `python -m shared.protocol.wire`"
    )
    changed = _differences(history[PROTOCOL_VERSION], wire.wire_fingerprint())
    assert not changed, (
        f"the wire changed without a protocol version bump ({'; '.join(changed)}): bump PROTOCOL_VERSION "
        "in shared/protocol/envelope.py, then run `python -m shared.protocol.wire` to record the new version"
    )


def test_the_version_before_is_recorded_and_supported() -> None:
    history = wire.wire_history()
    assert max(history) == PROTOCOL_VERSION
    assert PROTOCOL_VERSION - 1 in history, "N-1 compatibility needs the previous version's wire"
    assert SUPPORTED_VERSIONS == {PROTOCOL_VERSION - 1, PROTOCOL_VERSION}


def test_a_field_change_changes_the_fingerprint() -> None:
    @dataclass(frozen=True)
    class Before:
        a: int
        b: str = ""

    @dataclass(frozen=True)
    class Added:
        a: int
        b: str = ""
        c: float = 0.0

    @dataclass(frozen=True)
    class Retyped:
        a: float
        b: str = ""

    @dataclass(frozen=True)
    class NoDefault:
        a: int
        b: str

    prints = {cls.__name__: wire.type_fingerprint(cls, "x") for cls in (Before, Added, Retyped, NoDefault)}
    assert len({repr(p) for p in prints.values()}) == 4


def test_recording_refuses_a_changed_wire_under_the_same_version(tmp_path, monkeypatch) -> None:
    current = wire.wire_fingerprint()
    current["status"] = {"fields": {**current["status"]["fields"], "battery": "float = default"}, "revision": 1}
    monkeypatch.setattr(wire, "wire_history", lambda: {PROTOCOL_VERSION: current})
    with pytest.raises(SystemExit, match="bump PROTOCOL_VERSION"):
        wire.record_current()


def test_the_previous_version_reads_an_unchanged_request_and_a_changed_one_at_its_default() -> None:
    old = PROTOCOL_VERSION - 1
    survey = DataShapeRequest("fs-1", labels=False)
    assert wire.writable_version(survey) == old  # every peer reads the survey
    message = Message.create(survey, sender="aggregator", version=old)
    received = decode_message(encode_message(message))
    assert received.envelope.version == old and received.body == survey
    # fleet_counts' noise share changed shape (sigma -> mu, scale): without noise it still goes
    plain = FleetCountsRequest("fs-1", False, classes=("a", "b"))
    assert wire.writable_version(plain) == old
    decode_message(encode_message(Message.create(plain, sender="aggregator", version=old)))
    # ... with noise it needs the current version, and says so
    noisy = dataclasses.replace(plain, noise=NoiseShare(mu=4.0, shares=3))
    assert wire.writable_version(noisy) == PROTOCOL_VERSION
    with pytest.raises(wire.NeedsVersion, match=f"fleet_counts needs protocol version {PROTOCOL_VERSION}.*'noise'"):
        encode_message(Message.create(noisy, sender="aggregator", version=old))


def test_a_type_the_previous_version_lacks_is_refused_naming_the_version() -> None:
    from shared.protocol.messages.fedforest import (
        PrivateForestHistogramRequest,  # new in version 2
    )

    assert wire.version_needed("fedforest.dp_histograms", 1) == "not in protocol version 1"
    assert wire.version_needed("secagg.unmask", 1) == "content changed in protocol version 2"
    assert wire.version_needed("data_shape", 1) == ""
    unmask = SecAggUnmaskRequest(label="r1", survivors=("gw-1", "gw-2"), dropped=(), shares={})
    with pytest.raises(wire.NeedsVersion, match="secagg.unmask needs protocol version 2.*the peer speaks 1"):
        encode_message(Message.create(unmask, sender="aggregator", version=1))
    assert "fedforest.dp_histograms" not in wire.wire_history()[1]
    assert wire.wire_fingerprint()["fedforest.dp_histograms"] == wire.type_fingerprint(
        PrivateForestHistogramRequest, "fedforest.dp_histograms"
    )


def test_a_peer_s_version_is_what_it_is_written_in() -> None:
    survey = DataShapeRequest("fs-1")
    assert wire.writable_version(survey, PROTOCOL_VERSION - 1) == PROTOCOL_VERSION - 1
    assert wire.writable_version(survey, PROTOCOL_VERSION) == PROTOCOL_VERSION
    assert wire.writable_version(survey, PROTOCOL_VERSION + 1) == PROTOCOL_VERSION  # a newer peer reads ours


@pytest.mark.parametrize("version", [PROTOCOL_VERSION - 2, PROTOCOL_VERSION + 2])
def test_versions_outside_n_minus_one_and_n_are_refused_with_what_this_build_speaks(version) -> None:
    raw = loads_value(encode_message(Message.create(Status(online=True), sender="gw-1")))
    raw["v"] = version
    with pytest.raises(
        UnsupportedVersion,
        match=rf"protocol version {version} is not supported .*\[{PROTOCOL_VERSION - 1}, "
        rf"{PROTOCOL_VERSION}\]",
    ):
        decode_message(dumps_value(raw))
    with pytest.raises(ValueError, match="not one this build writes"):
        Message.create(Status(online=True), sender="gw-1", version=version)


def test_chunks_are_written_in_the_oldest_version() -> None:
    from shared.protocol.chunking import split_payload

    big = encode_message(Message.create(Status(online=True, detail={"x": "y" * 5000}), sender="gw-1"))
    chunks = split_payload(big, sender="gw-1", max_payload=1024)
    assert {c.envelope.version for c in chunks} == {min(SUPPORTED_VERSIONS)}
    assert np.all([decode_message(encode_message(c)).type == "chunk" for c in chunks])


def _newer(message: Message) -> bytes:
    raw = loads_value(encode_message(message))
    raw["v"] = PROTOCOL_VERSION + 1
    raw["body"] = {"a field this build does not know": 1}
    return dumps_value(raw)


def test_a_message_of_the_next_version_is_read_as_far_as_its_envelope() -> None:
    received = decode_message(_newer(Message.create(DataShapeRequest("fs-1"), sender="aggregator", job="j", round=3)))
    assert received.envelope.version == PROTOCOL_VERSION + 1 and received.envelope.job == "j"
    assert received.body == NewerVersion(PROTOCOL_VERSION + 1, "data_shape")


def test_a_gateway_refuses_a_request_of_the_next_version_naming_the_version_it_needs() -> None:
    """A gateway one version behind an aggregator that sends it a newer request answers at once
    (no timeout), and the round files the refusal as that gateway's error."""
    from aggregator.rounds import RoundEngine
    from edge_client.dispatcher import Dispatcher
    from shared.protocol.messages import ErrorReply
    from shared.transport.memory import MemoryBroker, MemoryTransport

    broker = MemoryBroker()
    gateway = MemoryTransport(broker, "gw-1")
    Dispatcher(gateway).start()
    agg = MemoryTransport(broker, "aggregator")
    replies: list[Message] = []
    agg.subscribe(TopicLayout().outbox("gw-1"), lambda topic, m: replies.append(m))
    agg.publish_raw(TopicLayout().inbox("gw-1"), _newer(Message.create(DataShapeRequest("fs-1"), sender="aggregator")))
    assert len(replies) == 1 and isinstance(replies[0].body, ErrorReply)
    error = replies[0].body
    assert error.code == "protocol_version" and error.request_type == "data_shape"
    assert error.message == (
        f"gw-1 speaks protocol version {PROTOCOL_VERSION} (and {PROTOCOL_VERSION - 1}); this "
        f"'data_shape' message is version {PROTOCOL_VERSION + 1}: update gw-1 to protocol "
        f"version {PROTOCOL_VERSION + 1}"
    )
    # an aggregator that hears from a gateway of the next version writes to it in its own version
    engine = RoundEngine(agg)
    status = Message.create(Status(online=True), sender="gw-1")
    engine._on_status(
        TopicLayout().status("gw-1"),
        Message(dataclasses.replace(status.envelope, version=PROTOCOL_VERSION + 1), status.body),
    )
    assert engine.peer_versions["gw-1"] == PROTOCOL_VERSION + 1
    assert wire.writable_version(DataShapeRequest("fs-1"), engine.peer_versions["gw-1"]) == PROTOCOL_VERSION


def test_a_chunk_of_the_next_version_is_refused_by_the_reassembler_in_one_line() -> None:
    """A chunk read only as far as its envelope (its body a ``NewerVersion``) is a ``ChunkError``,
    not an AttributeError deep in the reassembler (found by the chunks fuzz target)."""
    from shared.protocol.chunking import Reassembler, split_payload
    from shared.protocol.errors import ChunkError

    [chunk, *_] = split_payload(b"x" * 5000, sender="gw-1", max_payload=2048)
    received = decode_message(_newer(chunk))
    assert received.envelope.type == "chunk" and isinstance(received.body, NewerVersion)
    reassembler = Reassembler()
    with pytest.raises(ChunkError, match="not a chunk this build reads"):
        reassembler.add(received, sender="gw-1")
    assert reassembler.stats.rejected == 1
