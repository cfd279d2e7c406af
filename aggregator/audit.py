"""The server's view, recorded: every message the aggregator's transport decoded.

Privacy claims are about what the server *receives*, so the privacy tests and benchmarks read
this record -- never the algorithms' internals. Each received message is logged as one audit
line (type, size, job, round, client) and, when ``keep_bodies`` is set (simulations, tests),
kept with its decoded body in arrival order.

The client is the one the broker's ACL lets publish on the message's topic (a gateway on its
own outbox and status; ``verified_publisher``), not the envelope's ``from``, which is whatever
the sender wrote: a message whose ``from`` names someone else is logged under its topic's
publisher, with the claimed sender beside it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from shared.protocol.envelope import Message
from shared.protocol.topics import TopicLayout
from shared.transport.base import verified_publisher

log = logging.getLogger("aggregator.audit")

__all__ = ["AuditTrail", "Received"]


@dataclass(frozen=True, eq=False)
class Received:
    """One decoded message as the server received it (``size``: its encoded bytes; ``client``:
    its topic's verified publisher, "" outside the topic layout)."""

    client: str
    topic: str
    type: str
    job: str
    round: int
    size: int
    body: Any


class AuditTrail:
    """Record of everything a transport decoded; attach with :meth:`attach`."""

    def __init__(self, *, keep_bodies: bool = False) -> None:
        self.keep_bodies = keep_bodies
        self._layout = TopicLayout()  # the attached transport's, from attach()
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self.bytes_by_client: dict[str, int] = {}

    def attach(self, transport) -> AuditTrail:
        transport.audit = self.record
        self._layout = transport.layout
        return self

    def record(self, topic: str, message: Message, size: int) -> None:
        env = message.envelope
        client = verified_publisher(self._layout, topic) or ""
        extra = {"type": env.type, "size": size, "job": env.job, "round": env.round, "client": client}
        if env.sender != client:
            extra["claimed"] = env.sender[:64]
        log.info("received", extra=extra)
        entry = Received(client, topic, env.type, env.job, env.round, size, message.body if self.keep_bodies else None)
        with self._lock:
            self.bytes_by_client[client] = self.bytes_by_client.get(client, 0) + size
            if self.keep_bodies:
                self._received.append(entry)

    def view(self) -> dict[str, list[Received]]:
        """Per client, the messages received from it, in arrival order (needs ``keep_bodies``)."""
        out: dict[str, list[Received]] = {}
        with self._lock:
            for entry in self._received:
                out.setdefault(entry.client, []).append(entry)
        return out
