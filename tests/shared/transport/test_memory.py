"""The in-memory transport: same codec, chunking, ACL and session semantics as MQTT."""

from __future__ import annotations

import pytest

from shared.protocol.envelope import Message
from shared.protocol.errors import PayloadTooLarge
from shared.protocol.messages import Ping, Status
from shared.protocol.topics import TopicLayout, topic_matches
from shared.transport.memory import MemoryBroker, MemoryTransport

LAYOUT = TopicLayout()


def collect(transport: MemoryTransport, topic_filter: str) -> list[Message]:
    got: list[Message] = []
    transport.subscribe(topic_filter, lambda _t, m: got.append(m))
    return got


def test_big_message_is_chunked_and_reassembled() -> None:
    broker = MemoryBroker()
    agg = MemoryTransport(broker, "aggregator", max_payload=8192)
    gw = MemoryTransport(broker, "gw-1")
    got = collect(gw, LAYOUT.inbox("gw-1"))
    message = Message.create(Ping(bytes(range(256)) * 400), sender="aggregator")
    agg.publish(LAYOUT.inbox("gw-1"), message)
    assert got == [message]
    assert agg.stats.sent_payloads > 10 and agg.stats.sent_messages == 1
    assert gw.stats.received_messages == 1 and gw.pending_chunked_transfers == 0


def test_gateway_cannot_publish_into_another_namespace() -> None:
    broker = MemoryBroker()
    agg = MemoryTransport(broker, "aggregator")
    got = collect(agg, LAYOUT.all_outboxes)
    evil = MemoryTransport(broker, "gw-evil")
    evil.publish(LAYOUT.outbox("gw-victim"), Message.create(Status(online=True), sender="gw-evil"))
    evil.publish(LAYOUT.inbox("gw-victim"), Message.create(Ping(), sender="gw-evil"))
    assert got == [] and broker.denied == 2
    evil.publish(LAYOUT.outbox("gw-evil"), Message.create(Status(online=True), sender="gw-evil"))
    assert len(got) == 1


def test_gateway_cannot_read_another_gateways_inbox() -> None:
    broker = MemoryBroker()
    agg = MemoryTransport(broker, "aggregator")
    snoop = MemoryTransport(broker, "gw-snoop")
    got = collect(snoop, "wheelfed/v1/#")
    agg.publish(LAYOUT.inbox("gw-victim"), Message.create(Ping(), sender="aggregator"))
    agg.publish(LAYOUT.fleet("models"), Message.create(Ping(), sender="aggregator"))
    assert [m.type for m in got if m.sender != "gw-snoop"] == ["ping"]  # only the fleet broadcast


def test_garbage_is_rejected_counted_and_survived() -> None:
    broker = MemoryBroker()
    gw = MemoryTransport(broker, "gw-1")
    got = collect(gw, LAYOUT.inbox("gw-1"))
    agg = MemoryTransport(broker, "aggregator")
    agg.publish_raw(LAYOUT.inbox("gw-1"), b"\xff\x00garbage")
    agg.publish_raw(LAYOUT.inbox("gw-1"), b"\xa1\x61a\x01")  # CBOR, but no envelope
    agg.publish(LAYOUT.inbox("gw-1"), Message.create(Ping(), sender="aggregator"))
    assert len(got) == 1
    assert gw.stats.rejected == {"MalformedCBOR": 1, "UnsupportedVersion": 1}


def test_handler_exception_does_not_stop_delivery() -> None:
    broker = MemoryBroker()
    gw = MemoryTransport(broker, "gw-1")
    gw.subscribe(LAYOUT.inbox("gw-1"), lambda _t, _m: 1 / 0)
    got = collect(gw, LAYOUT.inbox("gw-1"))
    MemoryTransport(broker, "aggregator").publish(LAYOUT.inbox("gw-1"), Message.create(Ping(), sender="aggregator"))
    assert len(got) == 1 and gw.stats.handler_errors == 1


def test_retained_messages_reach_late_subscribers_and_cannot_be_chunked() -> None:
    broker = MemoryBroker()
    agg = MemoryTransport(broker, "aggregator", max_payload=4096)
    agg.publish(LAYOUT.fleet("models"), Message.create(Ping(b"v1"), sender="aggregator"), retain=True)
    agg.publish(LAYOUT.fleet("models"), Message.create(Ping(b"v2"), sender="aggregator"), retain=True)
    late = collect(MemoryTransport(broker, "gw-late"), LAYOUT.fleet("#"))
    assert [m.body.payload for m in late] == [b"v2"]
    with pytest.raises(PayloadTooLarge, match="retained"):
        agg.publish(LAYOUT.fleet("models"), Message.create(Ping(b"x" * 10_000), sender="aggregator"), retain=True)


def test_presence_is_retained_with_a_last_will() -> None:
    broker = MemoryBroker()
    gw = MemoryTransport(broker, "gw-1")
    agg = MemoryTransport(broker, "aggregator")
    seen = collect(agg, LAYOUT.status("gw-1"))
    assert [m.body.online for m in seen] == [True]  # retained
    gw.drop()
    gw.reconnect()
    gw.close()
    assert [m.body.online for m in seen] == [True, False, True, False]


def test_reconnect_after_close_subscribes_again() -> None:
    broker = MemoryBroker()
    gw = MemoryTransport(broker, "gw-1")
    got = collect(gw, LAYOUT.inbox("gw-1"))
    gw.close()
    gw.reconnect()
    MemoryTransport(broker, "aggregator").publish(LAYOUT.inbox("gw-1"), Message.create(Ping(), sender="aggregator"))
    assert len(got) == 1


def test_offline_queue_is_bounded() -> None:
    broker = MemoryBroker(max_queued=3)
    gw = MemoryTransport(broker, "gw-1")
    got = collect(gw, LAYOUT.inbox("gw-1"))
    gw.drop()
    agg = MemoryTransport(broker, "aggregator")
    for i in range(5):
        agg.publish(LAYOUT.inbox("gw-1"), Message.create(Ping(bytes([i])), sender="aggregator"))
    gw.reconnect()
    assert [m.body.payload for m in got] == [b"\x00", b"\x01", b"\x02"] and broker.dropped == 2


@pytest.mark.parametrize(
    ("flt", "topic", "expected"),
    [
        ("a/+/c", "a/b/c", True),
        ("a/#", "a", True),
        ("a/#", "a/b/c", True),
        ("a/+", "a/b/c", False),
        ("a/b", "a/b", True),
        ("a/b", "a/b/c", False),
        ("+/+/out", "w/gw/out", True),
        ("#", "x/y", True),
    ],
)
def test_topic_matching(flt: str, topic: str, expected: bool) -> None:
    assert topic_matches(flt, topic) is expected


def test_layout_client_of() -> None:
    assert LAYOUT.client_of("wheelfed/v1/c/gw-1/out") == "gw-1"
    assert LAYOUT.client_of(LAYOUT.status("fleet")) == "fleet"  # an account called "fleet" is just a client
    assert LAYOUT.client_of("wheelfed/v1/fleet/models") is None
    assert LAYOUT.client_of("other/c/gw-1/out") is None
    assert LAYOUT.client_of("wheelfed/v1/c/gw-1/out/extra") is None


def test_a_client_named_fleet_cannot_broadcast() -> None:
    broker = MemoryBroker()
    gw = MemoryTransport(broker, "gw-1")
    got = collect(gw, LAYOUT.fleet("#"))
    MemoryTransport(broker, "fleet").publish(LAYOUT.fleet("out"), Message.create(Ping(b"forged"), sender="aggregator"))
    assert got == [] and broker.denied == 1
