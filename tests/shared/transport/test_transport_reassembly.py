"""Transports account every chunk to the topic's verified publisher, not to the envelope's ``from``.

The broker's ACL lets a gateway publish only on its own outbox and status, so the topic names who
really sent a chunk; a gateway claiming another's id in ``from`` must not spend that one's quota.
"""

from __future__ import annotations

import pytest

from shared.protocol.chunking import Chunk, split_payload
from shared.protocol.envelope import Message, encode_message
from shared.protocol.messages import Ping
from shared.protocol.topics import TopicLayout
from shared.transport.base import verified_publisher
from shared.transport.memory import MemoryBroker, MemoryTransport
from shared.transport.mqtt import MqttConfig, MqttTransport

LAYOUT = TopicLayout()


def forged_chunk(claimed: str, transfer: str) -> bytes:
    return encode_message(Message.create(Chunk(transfer, 0, 4, 4, bytes(32), b"x"), sender=claimed))


@pytest.mark.parametrize(
    ("topic", "publisher"),
    [
        (LAYOUT.outbox("gw-2"), "gw-2"),
        (LAYOUT.status("gw-2"), "gw-2"),
        (LAYOUT.inbox("gw-2"), "aggregator"),
        (LAYOUT.fleet("models"), "aggregator"),
        (LAYOUT.outbox("aggregator"), "aggregator"),
        ("wheelfed/v1/c/gw-2/out/extra", "aggregator"),
        ("other/c/gw-2/out", None),
    ],
)
def test_verified_publisher_follows_the_acl(topic: str, publisher: str | None) -> None:
    assert verified_publisher(LAYOUT, topic) == publisher


def test_forged_chunks_through_the_memory_broker_do_not_block_the_real_gateway() -> None:
    broker = MemoryBroker()
    agg = MemoryTransport(broker, "aggregator", presence=False)
    got: list[Message] = []
    agg.subscribe(LAYOUT.all_outboxes, lambda _t, m: got.append(m))
    evil = MemoryTransport(broker, "gw-evil", presence=False)
    for i in range(8):  # the attack, on the only topic the ACL lets gw-evil use
        evil.publish_raw(LAYOUT.outbox("gw-evil"), forged_chunk("gw-2", f"t{i}"))
    for i in range(8):  # and its own quota, filled honestly in its own name
        evil.publish_raw(LAYOUT.outbox("gw-evil"), forged_chunk("gw-evil", f"u{i}"))
    gw2 = MemoryTransport(broker, "gw-2", max_payload=4096, presence=False)
    big = Message.create(Ping(bytes(range(256)) * 200), sender="gw-2")
    gw2.publish(LAYOUT.outbox("gw-2"), big)
    assert got == [big]
    assert agg.stats.rejected["ChunkError"] == 8 and agg._reassembler.stats.forged == 8
    assert agg.pending_chunked_transfers == 8  # gw-evil's own, and only those


def test_a_gateway_reassembles_the_aggregators_chunks_on_the_fleet_topics() -> None:
    broker = MemoryBroker()
    agg = MemoryTransport(broker, "aggregator", max_payload=4096, presence=False)
    gw = MemoryTransport(broker, "gw-1", presence=False)
    got: list[Message] = []
    gw.subscribe(LAYOUT.fleet("#"), lambda _t, m: got.append(m))
    big = Message.create(Ping(bytes(range(256)) * 100), sender="aggregator")
    agg.publish(LAYOUT.fleet("models"), big)
    assert got == [big] and agg.stats.sent_payloads > 5


def test_chunks_outside_the_topic_layout_are_rejected() -> None:
    broker = MemoryBroker(enforce_acl=False)
    receiver = MemoryTransport(broker, "aggregator", presence=False)
    got: list[Message] = []
    receiver.subscribe("other/#", lambda _t, m: got.append(m))
    sender = MemoryTransport(broker, "gw-1", max_payload=4096, presence=False)
    sender.publish("other/x", Message.create(Ping(bytes(20_000)), sender="gw-1"))
    assert got == [] and receiver.pending_chunked_transfers == 0
    assert receiver.stats.rejected["ChunkError"] == receiver.stats.received_payloads


def test_the_mqtt_transport_accounts_chunks_to_the_topic_client() -> None:
    agg = MqttTransport("aggregator", MqttConfig(port=1), presence=False)  # never connected
    got: list[Message] = []
    agg.subscribe(LAYOUT.all_outboxes, lambda _t, m: got.append(m))
    try:
        for i in range(8):
            agg._receive_payload(LAYOUT.outbox("gw-evil"), forged_chunk("gw-2", f"t{i}"))
        big = Message.create(Ping(bytes(10_000)), sender="gw-2")
        for chunk in split_payload(encode_message(big), sender="gw-2", max_payload=2048):
            agg._receive_payload(LAYOUT.outbox("gw-2"), encode_message(chunk))
        assert got == [big] and agg._reassembler.stats.forged == 8 and agg.pending_chunked_transfers == 0
    finally:
        agg.close(timeout_s=1)
