"""The gateway's request dispatcher: one handler per request type, every request answered.

A handler returns a reply body (or None for a plain ``Ack``). Whatever goes wrong inside a
handler becomes an ``ErrorReply`` to the aggregator — never a dead client. Requests are
deduplicated by message id: a redelivered request (QoS 1, reconnects) gets the cached reply
again instead of being applied twice.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Callable

from shared.protocol.envelope import Message
from shared.protocol.messages import Ack, ErrorReply
from shared.protocol.topics import TopicLayout
from shared.transport.base import Transport

log = logging.getLogger(__name__)

Handler = Callable[[Message], object | None]


class RequestRejected(Exception):
    """Raise from a handler to answer with a specific error ``code`` (e.g. "no_data")."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Dispatcher:
    """Subscribes to a gateway's inbox and the fleet broadcasts and answers on its outbox."""

    def __init__(self, transport: Transport, layout: TopicLayout | None = None, *, remember: int = 256) -> None:
        self.transport = transport
        self.layout = layout or TopicLayout()
        self.client_id = transport.client_id
        self.remember = remember
        self.handled = 0
        self.failed = 0
        self._handlers: dict[type, Handler] = {}
        self._replies: OrderedDict[str, Message] = OrderedDict()

    def register(self, body_type: type, handler: Handler) -> None:
        if body_type in self._handlers:
            raise ValueError(f"a handler for {body_type.__name__} is already registered")
        self._handlers[body_type] = handler

    def start(self) -> None:
        """Subscribe; call after registering the handlers."""
        self.transport.subscribe(self.layout.inbox(self.client_id), self._on_request)
        self.transport.subscribe(self.layout.fleet("#"), self._on_request)

    def _on_request(self, topic: str, request: Message) -> None:
        if request.sender != self.layout.aggregator_id:
            log.warning("ignored request not sent by the aggregator", extra={"sender": request.sender, "topic": topic})
            return
        cached = self._replies.get(request.envelope.msg_id)
        if cached is not None:
            self.transport.publish(self.layout.outbox(self.client_id), cached)
            return
        handler = self._handlers.get(type(request.body))
        if handler is None:
            if topic.startswith(self.layout.fleet("")):
                return  # broadcasts this gateway does not handle are not errors
            body: object = ErrorReply("unsupported", f"{self.client_id} has no handler for {request.type!r}", request.type)
        else:
            body = self._run(handler, request)
        reply = request.reply(body, sender=self.client_id)
        self._replies[request.envelope.msg_id] = reply
        if len(self._replies) > self.remember:
            self._replies.popitem(last=False)
        self.transport.publish(self.layout.outbox(self.client_id), reply)

    def _run(self, handler: Handler, request: Message) -> object:
        try:
            result = handler(request)
            self.handled += 1
            return Ack() if result is None else result
        except RequestRejected as exc:
            self.failed += 1
            return ErrorReply(exc.code, str(exc), request.type)
        except Exception as exc:  # noqa: BLE001 - every failure must become a reply
            self.failed += 1
            log.exception("request handler failed", extra={"type": request.type, "job": request.envelope.job})
            return ErrorReply("handler_failed", f"{type(exc).__name__}: {exc}", request.type)
