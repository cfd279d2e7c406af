"""The gateway's request dispatcher: one handler per request type, every request answered.

A handler returns a reply body (or None for a plain ``Ack``). Whatever goes wrong — in the
handler, or in building and encoding its reply — becomes an ``ErrorReply`` to the aggregator,
never a dead client or a silent timeout. An unexpected exception's reply names its type only:
its text may quote sensor values, which must not leave the gateway (it goes to the local log). A
handler refuses on purpose with :class:`RequestRejected`, whose code and text are written to
name the reason -- a feature set the gateway does not hold, no labelled or held-out windows --
without quoting data, so the operator learns why a gateway stayed out of a job.

Requests are deduplicated by message id: a redelivered request (QoS 1, reconnects, the round
engine's re-sends) gets the cached reply again instead of being applied twice. The cache lives
in memory (at most ``remember`` replies and ``remember_bytes`` bytes, the latest reply always
kept), so after a gateway restart or an eviction a request may run again: handlers must be
idempotent for a given (job, round) — the algorithms' client halves compute replies from their
state and the request, never by mutating state per call. (Secure aggregation masks a round
once: a request run again for an evicted masked reply is refused, and the round counts the
gateway as dropped.)
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Callable

from shared.protocol.envelope import Message, NewerVersion
from shared.protocol.messages import Ack, ErrorReply
from shared.protocol.topics import TopicLayout
from shared.transport.base import Transport

log = logging.getLogger(__name__)

Handler = Callable[[Message], object | None]


class RequestRejected(Exception):
    """Raise from a handler to answer with a specific error ``code`` (e.g. "no_labelled_windows")
    and text; ``feature_sets`` go into the reply of a ``feature_set_mismatch`` (``ErrorReply``)."""

    def __init__(self, code: str, message: str, feature_sets: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.feature_sets = tuple(feature_sets)


class Dispatcher:
    """Subscribes to a gateway's inbox and the fleet broadcasts and answers on its outbox.

    Requests are accepted only from the aggregator on those two topics (which the broker ACL
    lets only the aggregator write).
    """

    def __init__(
        self,
        transport: Transport,
        layout: TopicLayout | None = None,
        *,
        remember: int = 256,
        remember_bytes: int = 64 << 20,
    ) -> None:
        self.transport = transport
        self.layout = layout or TopicLayout()
        self.client_id = transport.client_id
        self.remember = remember
        #: The cache also stays below this many bytes: a private job's histogram replies are
        #: megabytes each, and a gateway has 1-4 GB of memory.
        self.remember_bytes = remember_bytes
        self._cached_bytes = 0
        self.handled = 0
        self.failed = 0
        self._handlers: dict[type, Handler] = {}
        self._replies: OrderedDict[str, list[bytes]] = OrderedDict()

    def register(self, body_type: type, handler: Handler) -> None:
        if body_type in self._handlers:
            raise ValueError(f"a handler for {body_type.__name__} is already registered")
        self._handlers[body_type] = handler

    def start(self) -> None:
        """Subscribe; call after registering the handlers."""
        self.transport.subscribe(self.layout.inbox(self.client_id), self._on_request)
        self.transport.subscribe(self.layout.fleet("#"), self._on_request)

    def _on_request(self, topic: str, request: Message) -> None:
        broadcast = topic.startswith(self.layout.fleet(""))
        if request.sender != self.layout.aggregator_id or not (broadcast or topic == self.layout.inbox(self.client_id)):
            log.warning("ignored request not sent by the aggregator", extra={"sender": request.sender, "topic": topic})
            return
        outbox = self.layout.outbox(self.client_id)
        cached = self._replies.get(request.envelope.msg_id)
        if cached is not None:
            self.transport.send_payloads(outbox, cached)
            return
        handler = self._handlers.get(type(request.body))
        body: object  # the reply
        if isinstance(request.body, NewerVersion):  # written for a newer gateway: say which version
            if broadcast:
                return
            log.warning(
                "request of a newer protocol version refused",
                extra={"type": request.type, "version": request.body.version},
            )
            body = ErrorReply("protocol_version", request.body.refusal(self.client_id), request.type)
        elif handler is None:
            if broadcast:
                return  # broadcasts this gateway does not handle are not errors
            body = ErrorReply("unsupported", f"{self.client_id} has no handler for {request.type!r}", request.type)
        else:
            body = self._run(handler, request)
        payloads = self._encode_reply(request, body)
        self._replies[request.envelope.msg_id] = payloads
        self._cached_bytes += sum(len(p) for p in payloads)
        while len(self._replies) > 1 and (
            len(self._replies) > self.remember or self._cached_bytes > self.remember_bytes
        ):
            _, dropped = self._replies.popitem(last=False)
            self._cached_bytes -= sum(len(p) for p in dropped)
        self.transport.send_payloads(outbox, payloads)

    def _run(self, handler: Handler, request: Message) -> object:
        try:
            result = handler(request)
            self.handled += 1
            return Ack() if result is None else result
        except RequestRejected as exc:
            self.failed += 1
            return ErrorReply(exc.code, str(exc), request.type, exc.feature_sets)
        except Exception as exc:  # noqa: BLE001 - every failure must become a reply
            self.failed += 1
            log.exception("request handler failed", extra={"type": request.type, "job": request.envelope.job})
            return ErrorReply("handler_failed", f"{type(exc).__name__} (details in the gateway log)", request.type)

    def _encode_reply(self, request: Message, body: object) -> list[bytes]:
        """The reply's payloads; a body that cannot be sent becomes an ``ErrorReply`` instead."""
        try:
            return self.transport.encode_payloads(request.reply(body, sender=self.client_id))
        except Exception as exc:  # noqa: BLE001 - unregistered body type, bad dtype, too large...
            self.handled -= not isinstance(body, ErrorReply)
            self.failed += 1
            log.exception("reply could not be encoded", extra={"type": request.type, "body": type(body).__name__})
            error = ErrorReply(
                "reply_invalid", f"{type(exc).__name__} building the {type(body).__name__} reply", request.type
            )
            return self.transport.encode_payloads(request.reply(error, sender=self.client_id))
