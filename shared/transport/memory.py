"""An in-process broker and transport for simulations and tests.

Messages go through the very same codec, size limits and chunking as over MQTT; the broker
applies the topic layout's ACL, keeps retained messages, and queues QoS 1 messages for
disconnected clients with persistent sessions; transports announce presence with a retained
status and a last will — so dropouts and rejoins can be simulated faithfully.
Delivery is synchronous and deterministic: a publish returns after every resulting message
(including replies published by handlers) has been delivered, breadth-first.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass, field

from ..protocol.envelope import Message, encode_message
from ..protocol.limits import DEFAULT_LIMITS, DEFAULT_MAX_PAYLOAD, DecodeLimits
from ..protocol.messages import Status
from ..protocol.topics import TopicLayout, topic_matches
from .base import Transport

log = logging.getLogger(__name__)


@dataclass
class _Session:
    transport: "MemoryTransport | None"
    filters: list[str] = field(default_factory=list)
    offline_queue: deque = field(default_factory=deque)


class MemoryBroker:
    """Routes payloads between ``MemoryTransport`` instances; thread-safe, re-entrant."""

    def __init__(
        self, layout: TopicLayout | None = None, *, enforce_acl: bool = True, max_queued: int = 10_000
    ) -> None:
        self.layout = layout or TopicLayout()
        self.enforce_acl = enforce_acl
        self.max_queued = max_queued
        self.denied: int = 0
        self.dropped: int = 0
        self._sessions: dict[str, _Session] = {}
        self._retained: dict[str, bytes] = {}
        self._pending: deque[tuple[str, str, bytes]] = deque()
        self._lock = threading.RLock()
        self._pumping = False

    def connect(self, transport: "MemoryTransport") -> None:
        with self._lock:
            session = self._sessions.setdefault(transport.client_id, _Session(None))
            session.transport = transport
            backlog = list(session.offline_queue)
            session.offline_queue.clear()
            for topic, payload in backlog:
                self._pending.append((transport.client_id, topic, payload))
        self._pump()

    def disconnect(self, client_id: str, *, keep_session: bool = True) -> None:
        with self._lock:
            if keep_session and client_id in self._sessions:
                self._sessions[client_id].transport = None
            else:
                self._sessions.pop(client_id, None)

    def subscribe(self, client_id: str, topic_filter: str) -> None:
        with self._lock:
            session = self._sessions[client_id]
            if topic_filter not in session.filters:
                session.filters.append(topic_filter)
            for topic, payload in self._retained.items():
                if topic_matches(topic_filter, topic) and self._may_receive(client_id, topic):
                    self._pending.append((client_id, topic, payload))
        self._pump()

    def publish(self, sender: str, topic: str, payload: bytes, retain: bool) -> None:
        with self._lock:
            if self.enforce_acl and not self.layout.may_publish(sender, topic):
                self.denied += 1  # like mosquitto: the publisher is not told (MQTT 3.1.1)
                log.warning("memory broker denied publish", extra={"client": sender, "topic": topic})
                return
            if retain:
                self._retained[topic] = payload
            for client_id, session in self._sessions.items():
                if any(topic_matches(f, topic) for f in session.filters) and self._may_receive(client_id, topic):
                    if session.transport is None:
                        if len(session.offline_queue) >= self.max_queued:
                            self.dropped += 1
                            continue
                        session.offline_queue.append((topic, payload))
                    else:
                        self._pending.append((client_id, topic, payload))
        self._pump()

    def _may_receive(self, client_id: str, topic: str) -> bool:
        return not self.enforce_acl or self.layout.may_subscribe(client_id, topic)

    def _pump(self) -> None:
        """Deliver queued payloads; nested publishes from handlers are queued, not recursed into."""
        with self._lock:
            if self._pumping:
                return
            self._pumping = True
        try:
            while True:
                with self._lock:
                    if not self._pending:
                        self._pumping = False
                        return
                    client_id, topic, payload = self._pending.popleft()
                    session = self._sessions.get(client_id)
                    transport = session.transport if session else None
                    if transport is None and session is not None:
                        session.offline_queue.append((topic, payload))
                if transport is not None:
                    transport._receive_payload(topic, payload)
        except BaseException:
            with self._lock:
                self._pumping = False
            raise


class MemoryTransport(Transport):
    """A client of a ``MemoryBroker``; starts connected."""

    def __init__(
        self,
        broker: MemoryBroker,
        client_id: str,
        *,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        limits: DecodeLimits = DEFAULT_LIMITS,
        presence: bool = True,
    ) -> None:
        super().__init__(client_id, max_payload=max_payload, limits=limits, layout=broker.layout)
        self.broker = broker
        self.presence = presence
        self.connected = False
        self.connections = 0
        self.reconnect()

    def _publish_payload(self, topic: str, payload: bytes, retain: bool) -> None:
        if not self.connected:
            raise ConnectionError(f"memory transport {self.client_id!r} is disconnected")
        self.broker.publish(self.client_id, topic, payload, retain)

    def _subscribe_filter(self, topic_filter: str) -> None:
        self.broker.subscribe(self.client_id, topic_filter)

    def publish_raw(self, topic: str, payload: bytes) -> None:
        """Send arbitrary bytes (tests of hostile input)."""
        self.broker.publish(self.client_id, topic, payload, False)

    def _announce(self, online: bool) -> None:
        if self.presence:
            status = encode_message(Message.create(Status(online=online), sender=self.client_id))
            self.broker.publish(self.client_id, self.broker.layout.status(self.client_id), status, True)

    def drop(self) -> None:
        """Simulate a vanished client: the broker keeps its session, queues its messages and
        publishes its last will."""
        self.connected = False
        self.broker.disconnect(self.client_id, keep_session=True)
        self._announce(False)

    @property
    def connection_epoch(self) -> int:
        return self.connections

    def reconnect(self) -> None:
        """(Re)connect: re-subscribe (the session may have been discarded) and announce presence."""
        self.connected = True
        self.broker.connect(self)
        for topic_filter, _handler in self._handlers:
            self.broker.subscribe(self.client_id, topic_filter)
        self._announce(True)
        self.connections += 1

    def close(self) -> None:
        self._announce(False)
        self.connected = False
        self.broker.disconnect(self.client_id, keep_session=False)
