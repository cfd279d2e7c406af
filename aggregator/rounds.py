"""The round engine: one request out to a set of clients, their replies back, with a deadline.

Rounds are idempotent and partial participation is normal: a client that vanishes is reported
as timed out (the round still closes with a quorum); duplicated replies (QoS 1 redelivery) are
counted once; replies arriving after their round closed are discarded; a client's error reply
is recorded, not fatal. Replies are matched on job, round, the request's message id and the
sender, and a reply must arrive on the sender's own outbox topic.

Requests are re-sent to the clients that have not answered yet whenever the aggregator's own
connection was re-established or such a client announces itself online again: a broker crash
can lose queued messages (mosquitto saves sessions once a second), and a gateway answers a
repeated request id from its reply cache, so re-sending is always safe.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from shared.protocol.envelope import Message
from shared.protocol.messages import ErrorReply, Status
from shared.protocol.topics import TopicLayout
from shared.transport.base import Transport

log = logging.getLogger(__name__)


class QuorumNotReached(RuntimeError):
    """The deadline passed before enough clients answered; ``result`` says who did what."""

    def __init__(self, result: "RoundResult", quorum: int) -> None:
        super().__init__(
            f"round {result.round} of job {result.job!r}: {len(result.replies)} of {len(result.selected)} "
            f"clients answered, quorum is {quorum} (timed out: {result.timed_out}, errors: {sorted(result.errors)})"
        )
        self.result = result
        self.quorum = quorum


@dataclass
class RoundResult:
    job: str
    round: int
    request_type: str
    selected: list[str]
    replies: dict[str, Message] = field(default_factory=dict)
    errors: dict[str, ErrorReply] = field(default_factory=dict)
    timed_out: list[str] = field(default_factory=list)
    duplicates: int = 0
    elapsed_s: float = 0.0

    @property
    def answered(self) -> list[str]:
        return sorted(self.replies)


@dataclass
class _OpenRound:
    result: RoundResult
    request_ids: dict[str, str]  # client -> message id of the request sent to it
    done: threading.Condition
    resend_to: set[str] = field(default_factory=set)  # clients that came back online


def resolve_quorum(quorum: int | float, n_selected: int) -> int:
    """An int is a client count; a float in (0, 1] is a fraction of the selected clients."""
    if isinstance(quorum, float):
        if not 0.0 < quorum <= 1.0:
            raise ValueError(f"a fractional quorum must lie in (0, 1], got {quorum}")
        return max(1, math.ceil(quorum * n_selected))
    if not 0 <= quorum <= n_selected:
        raise ValueError(f"quorum {quorum} is not between 0 and the {n_selected} selected clients")
    return quorum


class RoundEngine:
    """Runs rounds over a transport; thread-safe (rounds of different jobs may overlap)."""

    def __init__(self, transport: Transport, layout: TopicLayout | None = None) -> None:
        self.transport = transport
        self.layout = layout or TopicLayout()
        self.late_replies = 0
        self.misrouted = 0
        self.resent = 0
        self._lock = threading.Lock()
        self._open: dict[tuple[str, int], _OpenRound] = {}
        transport.subscribe(self.layout.all_outboxes, self._on_reply)
        transport.subscribe(self.layout.all_statuses, self._on_status)

    def run_round(
        self,
        job: str,
        round: int,
        request: object | Mapping[str, object],
        clients: Sequence[str],
        *,
        deadline_s: float,
        quorum: int | float = 1.0,
    ) -> RoundResult:
        """Send ``request`` (one body for all, or a body per client) and collect the replies.

        Returns when every selected client answered (reply or error) or at the deadline with at
        least ``quorum`` replies; raises ``QuorumNotReached`` otherwise.
        """
        selected = list(dict.fromkeys(clients))
        needed = resolve_quorum(quorum, len(selected))
        bodies = request if isinstance(request, Mapping) else {c: request for c in selected}
        missing = [c for c in selected if c not in bodies]
        if missing:
            raise ValueError(f"no request body for clients {missing}")
        messages = {
            c: Message.create(bodies[c], sender=self.transport.client_id, job=job, round=round) for c in selected
        }
        request_type = messages[selected[0]].type if selected else ""
        key = (job, round)
        state = _OpenRound(
            RoundResult(job, round, request_type, selected),
            {c: m.envelope.msg_id for c, m in messages.items()},
            threading.Condition(self._lock),
        )
        with self._lock:
            if key in self._open:
                raise RuntimeError(f"round {round} of job {job!r} is already open")
            self._open[key] = state
        started = time.monotonic()
        try:
            epoch = self.transport.connection_epoch
            self._send(messages, selected)
            deadline = started + deadline_s
            while True:
                with self._lock:
                    remaining = deadline - time.monotonic()
                    if self._complete(state) or remaining <= 0:
                        break
                    if not state.resend_to:
                        state.done.wait(min(remaining, self.RESEND_CHECK_S))
                    unanswered = [c for c in selected if c not in state.result.replies and c not in state.result.errors]
                    if self.transport.connection_epoch != epoch:
                        targets = unanswered
                    else:
                        targets = [c for c in unanswered if c in state.resend_to]
                    state.resend_to.clear()
                epoch = self.transport.connection_epoch
                if targets:
                    self.resent += len(targets)
                    log.info("re-sending round requests", extra={"job": job, "round": round, "clients": targets})
                    self._send(messages, targets)
        finally:
            with self._lock:
                self._open.pop(key, None)
        result = state.result
        result.elapsed_s = time.monotonic() - started
        result.timed_out = [c for c in selected if c not in result.replies and c not in result.errors]
        log.info(
            "round closed",
            extra={"job": job, "round": round, "answered": len(result.replies), "errors": len(result.errors),
                   "timed_out": len(result.timed_out), "elapsed_s": round_(result.elapsed_s)},
        )
        if len(result.replies) < needed:
            raise QuorumNotReached(result, needed)
        return result

    RESEND_CHECK_S = 0.25

    def _send(self, messages: Mapping[str, Message], clients: Sequence[str]) -> None:
        for client in clients:
            try:
                self.transport.publish(self.layout.inbox(client), messages[client])
            except ConnectionError as exc:  # re-sent after the reconnection
                log.warning("request not sent", extra={"client": client, "error": str(exc)})

    def _on_status(self, topic: str, message: Message) -> None:
        if not isinstance(message.body, Status) or not message.body.online:
            return
        if self.layout.client_of(topic) != message.sender:
            return
        with self._lock:
            for state in self._open.values():
                if message.sender in state.request_ids:
                    state.resend_to.add(message.sender)
                    state.done.notify_all()

    @staticmethod
    def _complete(state: _OpenRound) -> bool:
        result = state.result
        return len(result.replies) + len(result.errors) == len(result.selected)

    def _on_reply(self, topic: str, message: Message) -> None:
        env = message.envelope
        if self.layout.client_of(topic) != env.sender:
            self.misrouted += 1
            log.warning("reply sender does not match its topic", extra={"topic": topic, "sender": env.sender})
            return
        with self._lock:
            state = self._open.get((env.job, env.round))
            if state is None or state.request_ids.get(env.sender) != env.reply_to:
                self.late_replies += 1
                log.info("discarded reply of a closed or unknown round",
                         extra={"job": env.job, "round": env.round, "sender": env.sender})
                return
            result = state.result
            if env.sender in result.replies or env.sender in result.errors:
                result.duplicates += 1
                return
            if isinstance(message.body, ErrorReply):
                result.errors[env.sender] = message.body
            else:
                result.replies[env.sender] = message
            state.done.notify_all()


def round_(value: float) -> float:
    return float(f"{value:.4f}")
