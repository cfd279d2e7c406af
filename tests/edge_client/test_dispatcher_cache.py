"""The dispatcher's reply cache stays within its byte budget (private jobs' replies are MBs)."""

from __future__ import annotations

from edge_client.dispatcher import Dispatcher
from shared.protocol.envelope import Message
from shared.protocol.messages import Ping, Pong
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.transport.memory import MemoryBroker, MemoryTransport


def test_reply_cache_is_bounded_in_bytes_and_keeps_the_latest() -> None:
    broker = MemoryBroker()
    server = MemoryTransport(broker, AGGREGATOR_ID, presence=False)
    replies: list[Message] = []
    server.subscribe(TopicLayout().all_outboxes, lambda topic, m: replies.append(m))
    gateway = MemoryTransport(broker, "gw-1")
    dispatcher = Dispatcher(gateway, remember=100, remember_bytes=5_000)
    calls = []
    dispatcher.register(Ping, lambda m: calls.append(m) or Pong(b"x" * 2_000))
    dispatcher.start()
    requests = [Message.create(Ping(), sender=AGGREGATOR_ID, job="j", round=r) for r in range(5)]
    for request in requests:
        server.send_payloads(TopicLayout().inbox("gw-1"), server.encode_payloads(request))
    assert len(calls) == 5 and len(replies) == 5
    assert dispatcher._cached_bytes <= 5_000 and len(dispatcher._replies) == 2
    server.send_payloads(TopicLayout().inbox("gw-1"), server.encode_payloads(requests[-1]))  # cached: not re-run
    server.send_payloads(TopicLayout().inbox("gw-1"), server.encode_payloads(requests[0]))  # evicted: runs again
    assert len(calls) == 6 and len(replies) == 7
