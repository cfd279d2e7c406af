"""The one transport interface: publish typed messages to topics, receive them through handlers.

Concrete transports (MQTT, in-memory) only move bytes. Everything else is shared here so both
behave identically: encoding, payload-size enforcement and chunking on the way out; hostile-input
decoding, chunk reassembly, rejection counting and handler isolation on the way in.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from ..protocol.chunking import Chunk, Reassembler, split_payload
from ..protocol.envelope import Message, decode_message, encode_message, validate_client_id
from ..protocol.errors import ChunkError, DecodeError, PayloadTooLarge
from ..protocol.limits import DEFAULT_LIMITS, DEFAULT_MAX_PAYLOAD, DecodeLimits
from ..protocol.topics import TopicLayout, topic_matches

log = logging.getLogger(__name__)

MessageHandler = Callable[[str, Message], None]


def verified_publisher(layout: TopicLayout, topic: str) -> str | None:
    """The client the broker's ACL lets publish on ``topic`` besides the aggregator, which may
    publish anywhere: a gateway on its own outbox and status, else (its inbox, the fleet topics)
    only the aggregator. None outside the layout, where the ACL vouches for no one.

    This, not the envelope's ``from``, is who a chunk is accounted to: the reassembler's limits
    are per sender, and a claimed sender would let one gateway spend another's quota.
    """
    client = layout.client_of(topic)
    if client is not None and layout.may_publish(client, topic):
        return client
    if topic.startswith(layout.prefix + "/"):
        return layout.aggregator_id
    return None


@dataclass
class TransportStats:
    """Counters a transport keeps; ``rejected`` is keyed by the exception class name."""

    sent_messages: int = 0
    sent_payloads: int = 0
    sent_bytes: int = 0
    received_messages: int = 0
    received_payloads: int = 0
    received_bytes: int = 0
    rejected: Counter = field(default_factory=Counter)
    handler_errors: int = 0


class Transport(ABC):
    """Base class of every transport; subclasses implement the four byte-level hooks."""

    def __init__(
        self,
        client_id: str,
        *,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        limits: DecodeLimits = DEFAULT_LIMITS,
        chunk_timeout_s: float = 60.0,
        layout: TopicLayout | None = None,
    ) -> None:
        self.client_id = validate_client_id(client_id)
        #: The topic layout the broker's ACL enforces: it names the verified sender of each topic.
        self.layout = layout or TopicLayout()
        self.max_payload = max_payload
        self.limits = limits
        self.stats = TransportStats()
        self._reassembler = Reassembler(timeout_s=chunk_timeout_s, limits=limits)
        self._handlers: list[tuple[str, MessageHandler]] = []
        self._receive_lock = threading.Lock()
        self._local = threading.local()  # marks the thread while it runs message handlers
        #: Called with (topic, message, size in bytes) for every message decoded (an audit trail).
        self.audit: Callable[[str, Message, int], None] | None = None

    # -- byte-level hooks -------------------------------------------------------------------
    @abstractmethod
    def _publish_payload(self, topic: str, payload: bytes, retain: bool) -> None:
        """Hand one payload (already within ``max_payload``) to the wire, QoS 1."""

    @abstractmethod
    def _subscribe_filter(self, topic_filter: str) -> None:
        """Ask the broker for messages matching ``topic_filter``."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection; pending QoS 1 messages stay with the broker session."""

    @property
    def connection_epoch(self) -> int:
        """Increases on every (re)connection; a change means messages in flight may be lost."""
        return 0

    # -- sending ----------------------------------------------------------------------------
    def publish(self, topic: str, message: Message, *, retain: bool = False) -> None:
        """Encode ``message`` and send it, split into chunks when it exceeds ``max_payload``."""
        self.send_payloads(topic, self.encode_payloads(message, retain=retain), retain=retain)

    def encode_payloads(self, message: Message, *, retain: bool = False) -> list[bytes]:
        """The payloads ``publish`` would send; lets a caller encode a batch before sending any."""
        encoded = encode_message(message)
        if len(encoded) <= self.max_payload:
            payloads = [encoded]
        elif retain:
            raise PayloadTooLarge(
                f"retained message of {len(encoded)} bytes exceeds max_payload {self.max_payload}: "
                "a broker keeps one retained payload per topic, so retained messages cannot be chunked"
            )
        else:
            env = message.envelope
            chunks = split_payload(
                encoded, sender=env.sender, max_payload=self.max_payload, job=env.job, round=env.round
            )
            payloads = [encode_message(chunk) for chunk in chunks]
        for payload in payloads:
            if len(payload) > self.max_payload:  # guards the chunk overhead estimate
                raise PayloadTooLarge(f"payload of {len(payload)} bytes exceeds max_payload {self.max_payload}")
        return payloads

    def send_payloads(self, topic: str, payloads: list[bytes], *, retain: bool = False) -> None:
        for payload in payloads:
            self._publish_payload(topic, payload, retain)
            self.stats.sent_payloads += 1
            self.stats.sent_bytes += len(payload)
        self.stats.sent_messages += 1

    # -- receiving --------------------------------------------------------------------------
    def subscribe(self, topic_filter: str, handler: MessageHandler) -> None:
        """Call ``handler(topic, message)`` for every valid message on topics matching the filter."""
        self._handlers.append((topic_filter, handler))
        self._subscribe_filter(topic_filter)

    def unsubscribe(self, topic_filter: str, handler: MessageHandler) -> None:
        """Stop calling ``handler`` for ``topic_filter`` (the broker subscription stays: other
        handlers may share the filter). Long-lived connections that run job after job -- the
        aggregator -- must remove per-job handlers, or every message reaches all of them."""
        with contextlib.suppress(ValueError):
            self._handlers.remove((topic_filter, handler))

    @property
    def in_handler(self) -> bool:
        """True in the thread that is running this transport's message handlers right now.

        Code running there must not wait for further messages: they arrive on this same thread.
        """
        return getattr(self._local, "active", False)

    def _receive_payload(self, topic: str, payload: bytes) -> None:
        """Entry point for subclasses: decode, reassemble, dispatch; never raises."""
        with self._receive_lock:
            self.stats.received_payloads += 1
            self.stats.received_bytes += len(payload)
            decoded = self._decode(topic, payload)
            if decoded is None:
                return
            message, size = decoded
            self.stats.received_messages += 1
            if self.audit is not None:
                try:
                    self.audit(topic, message, size)
                except Exception:  # an audit bug must not kill the receive loop either
                    log.exception("audit hook failed", extra={"topic": topic, "type": message.type})
            self._local.active = True
            try:
                for topic_filter, handler in list(self._handlers):
                    if topic_matches(topic_filter, topic):
                        try:
                            handler(topic, message)
                        except Exception:  # a handler bug must not kill the receive loop
                            self.stats.handler_errors += 1
                            log.exception("message handler failed", extra={"topic": topic, "type": message.type})
            finally:
                self._local.active = False

    def _decode(self, topic: str, payload: bytes) -> tuple[Message, int] | None:
        try:
            message = decode_message(payload, limits=self.limits)
            size = len(payload)
            if isinstance(message.body, Chunk):
                sender = verified_publisher(self.layout, topic)
                if sender is None:
                    raise ChunkError(
                        f"chunk on {topic!r}, outside the topic layout: no verified sender to account it to"
                    )
                whole = self._reassembler.add(message, sender=sender)
                if whole is None:
                    return None
                inner = decode_message(whole, limits=self.limits)
                if inner.sender != message.sender:
                    raise ChunkError(f"chunks from {message.sender!r} carried a message from {inner.sender!r}")
                message, size = inner, len(whole)
            return message, size
        except DecodeError as exc:
            self.stats.rejected[type(exc).__name__] += 1
            log.warning(
                "rejected message", extra={"topic": topic, "reason": type(exc).__name__, "detail": str(exc)[:200]}
            )
            return None
        except Exception:  # a decoder bug: still a rejection, never a dead receive thread
            self.stats.rejected["InternalDecodeError"] += 1
            log.exception("decoder failed on a payload", extra={"topic": topic, "size": len(payload)})
            return None

    def expire_chunks(self) -> None:
        """Free stalled chunked transfers (also done on every received chunk)."""
        with self._receive_lock:
            self._reassembler.expire()

    @property
    def pending_chunked_transfers(self) -> int:
        return self._reassembler.pending
