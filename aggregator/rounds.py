"""The round engine: one request out to a set of clients, their replies back, with a deadline.

Rounds are idempotent and partial participation is normal: a client that vanishes is reported
as timed out (the round still closes with a quorum); duplicated replies (QoS 1 redelivery) are
counted once; replies arriving after their round closed are discarded; a client's error reply
is recorded, not fatal. Replies are matched on job, round, the request's message id and the
sender, must arrive on the sender's own outbox topic, and must have an expected body type.

Requests are re-sent to the clients that have not answered yet whenever the aggregator's own
connection was re-established or such a client announces itself online again (at most every
``RESEND_MIN_INTERVAL_S`` per client, so a chatty client cannot make the aggregator re-send
megabytes at will): a broker crash can lose queued messages (mosquitto saves sessions once a
second), and a gateway answers a repeated request id from its reply cache.

With merge workers (``merge_workers=True``, :mod:`aggregator.merge_workers`) the engine does not
subscribe to the gateways' outboxes: the workers read them through an MQTT 5 shared
subscription, sum the vectors of the fleet-sum replies and hand the engine their replies in
batches (:meth:`RoundEngine.deliver_batch`), each delivered whole or not at all; a client whose
reply was lost with a worker is asked again (:meth:`RoundEngine.resend_unanswered`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from shared.protocol.envelope import PROTOCOL_VERSION, Message, NewerVersion
from shared.protocol.messages import ErrorReply, Status
from shared.protocol.topics import TopicLayout
from shared.protocol.wire import NeedsVersion, writable_version
from shared.protocol.limits import DecodeLimits
from shared.transport.base import MessageHandler, TransportStats

from .audit import AuditTrail

if TYPE_CHECKING:
    from .merge_workers import MergeLeader

log = logging.getLogger(__name__)


class EngineTransport(Protocol):
    """What a :class:`RoundEngine` uses of its transport: a ``shared.transport.base.Transport``,
    or a wrapper that delegates to one (``aggregator.site_aggregator.SiteAwareTransport``)."""

    client_id: str
    layout: TopicLayout
    limits: DecodeLimits
    stats: TransportStats
    audit: Callable[[str, Message, int], None] | None

    @property
    def in_handler(self) -> bool: ...

    @property
    def connection_epoch(self) -> int: ...

    def encode_payloads(self, message: Message, *, retain: bool = False) -> list[bytes]: ...

    def send_payloads(self, topic: str, payloads: list[bytes], *, retain: bool = False) -> None: ...

    def publish(self, topic: str, message: Message, *, retain: bool = False) -> None: ...

    def subscribe(self, topic_filter: str, handler: MessageHandler) -> None: ...


class QuorumNotReached(RuntimeError):
    """The deadline passed before enough clients answered; ``result`` says who did what, and so
    does the message: every missing client with its reason (the gateway's refusal, or silence),
    so that one line tells the operator what to fix."""

    def __init__(self, result: "RoundResult", quorum: int) -> None:
        reasons = "; ".join(f"{client}: {why}" for client, why in result.failures().items())
        super().__init__(
            f"round {result.round} of job {result.job!r}: {len(result.replies)} of {len(result.selected)} "
            f"clients answered, quorum is {quorum} ({reasons})"
        )
        self.result = result
        self.quorum = quorum


@dataclass
class RoundResult:
    """Who answered what: ``replies`` (valid answers), ``errors`` (error replies, and replies of
    an unexpected type), ``timed_out`` (no answer by the deadline)."""

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

    def failures(self) -> dict[str, str]:
        """Why each client without a valid reply has none, by client id: its error reply's
        ``code: message`` (one line), or that it did not answer."""
        out = {c: " ".join(f"{e.code}: {e.message}".split()) for c, e in self.errors.items()}
        out.update((c, f"no answer within {self.elapsed_s:.3g} s") for c in self.timed_out)
        return dict(sorted(out.items()))

    def without_bodies(self) -> RoundResult:
        """A copy whose replies keep their envelopes only: what a job keeps of a round after the
        algorithm consumed it (a private job's replies are megabytes each)."""
        light = {c: Message(m.envelope, None) for c, m in self.replies.items()}
        return RoundResult(
            self.job,
            self.round,
            self.request_type,
            self.selected,
            light,
            dict(self.errors),
            list(self.timed_out),
            self.duplicates,
            self.elapsed_s,
        )


@dataclass
class _OpenRound:
    result: RoundResult
    request_ids: dict[str, str]  # client -> message id of the request sent to it
    expect: tuple[type, ...] | None
    done: threading.Condition
    resend_to: set[str] = field(default_factory=set)  # clients that came back online
    resend_now: set[str] = field(default_factory=set)  # clients whose reply was lost on the server's side
    last_resent: dict[str, float] = field(default_factory=dict)
    fold: Callable[[str, Any], Any] | None = None  # takes each reply's body in as it is filed


def needed_replies(n_selected: int, *, min_replies: int | None, min_fraction: float) -> int:
    """Replies a round needs: ``min_replies`` when given, else ``ceil(min_fraction * n)`` (>= 1)."""
    if min_replies is not None:
        if not 0 <= min_replies <= n_selected:
            raise ValueError(f"min_replies {min_replies} is not between 0 and the {n_selected} selected clients")
        return min_replies
    if not 0.0 < min_fraction <= 1.0:
        raise ValueError(f"min_fraction must lie in (0, 1], got {min_fraction}")
    return min(n_selected, max(1, math.ceil(min_fraction * n_selected)))


class RoundEngine:
    """Runs rounds over a transport; thread-safe (rounds of different jobs may overlap).

    With ``merge_workers=True`` the replies come through merge workers (``self.merged``, see
    the module docstring); the transport's broker session must then not hold a subscription to
    the gateways' outboxes from an earlier run, or every reply reaches this process too.
    """

    #: How often the waiting round checks for reconnections and returning clients.
    RESEND_CHECK_S = 0.25
    #: Minimum time between two sends of the same request to the same client.
    RESEND_MIN_INTERVAL_S = 2.0

    def __init__(
        self,
        transport: EngineTransport,
        layout: TopicLayout | None = None,
        *,
        audit: AuditTrail | None = None,
        merge_workers: bool = False,
    ) -> None:
        self.transport = transport
        #: Every message the server's transport decodes, logged (and kept, for simulations).
        self.audit = (audit or AuditTrail()).attach(transport)
        self.layout = layout or TopicLayout()
        self.late_replies = 0
        self.misrouted = 0
        self.resent = 0
        self._lock = threading.Lock()
        self._open: dict[tuple[str, int], _OpenRound] = {}
        self._online: dict[str, bool] = {}  # last presence seen per client
        #: The protocol version each client last wrote (its presence and replies): requests to a
        #: client one version behind are written in its version (``shared.protocol.wire``).
        self.peer_versions: dict[str, int] = {}
        #: The leader's side of the merge workers (``merge_workers=True``), else None.
        self.merged: MergeLeader | None = None
        if merge_workers:
            from .merge_workers import MergeLeader

            self.merged = MergeLeader(self)
        else:
            transport.subscribe(self.layout.all_outboxes, self.deliver)
        transport.subscribe(self.layout.all_statuses, self._on_status)

    def run_round(
        self,
        job: str,
        round_no: int,
        request: object | Mapping[str, object],
        clients: Sequence[str],
        *,
        deadline_s: float,
        min_replies: int | None = None,
        min_fraction: float = 1.0,
        expect: type | tuple[type, ...] | None = None,
        fold: Callable[[str, Any], Any] | None = None,
        refusals_expected: bool = False,
    ) -> RoundResult:
        """Send ``request`` (one body for all, or a body per client) and collect the replies.

        Returns when every selected client answered (reply or error) or at the deadline with at
        least the needed replies (``min_replies``, else ``min_fraction`` of the clients); raises
        ``QuorumNotReached`` otherwise. ``expect`` restricts the accepted reply body types.
        ``fold(client, body)``, if given, takes each valid reply in as it arrives (once per
        client, under the engine's lock, on the transport's thread) and returns the body the round
        keeps -- e.g. the reply without its vector once the vector is added to a running sum.
        """
        if self.transport.in_handler:
            raise RuntimeError(
                "run_round called from a message handler: its replies would arrive on this "
                "same thread and the round could only time out; run rounds from another thread"
            )
        selected = list(dict.fromkeys(clients))
        needed = needed_replies(len(selected), min_replies=min_replies, min_fraction=min_fraction)
        bodies = request if isinstance(request, Mapping) else {c: request for c in selected}
        missing = [c for c in selected if c not in bodies]
        if missing:
            raise ValueError(f"no request body for clients {missing}")
        messages = {
            c: Message.create(
                bodies[c],
                sender=self.transport.client_id,
                job=job,
                round=round_no,
                version=writable_version(bodies[c], self.peer_versions.get(c)),
            )
            for c in selected
        }
        # Encode everything first: an unencodable request must fail before any client got one.
        payloads = {}
        for c, m in messages.items():
            try:
                payloads[c] = self.transport.encode_payloads(m)
            except NeedsVersion as exc:  # the job's survey leaves such gateways out: this is a bug guard
                raise NeedsVersion(
                    exc.type_name, exc.needed, exc.peer_version, f"{exc.why}; gateway {c} must be updated"
                ) from exc
        expected = (expect,) if isinstance(expect, type) else expect
        state = _OpenRound(
            RoundResult(job, round_no, messages[selected[0]].type if selected else "", selected),
            {c: m.envelope.msg_id for c, m in messages.items()},
            expected,
            threading.Condition(self._lock),
            fold=fold,
        )
        key = (job, round_no)
        with self._lock:
            if key in self._open:
                raise RuntimeError(f"round {round_no} of job {job!r} is already open")
            self._open[key] = state
        started = time.monotonic()
        try:
            epoch = self.transport.connection_epoch
            self._send(payloads, selected)
            self._wait(state, payloads, started + deadline_s, epoch)
        finally:
            with self._lock:
                self._open.pop(key, None)
        result = state.result
        result.elapsed_s = time.monotonic() - started
        result.timed_out = [c for c in selected if c not in result.replies and c not in result.errors]
        if refusals_expected:  # a survey: a refusal is an answer (its caller logs what it means)
            log.debug(
                "survey closed",
                extra={
                    "job": job,
                    "round": round_no,
                    "answered": len(result.replies),
                    "refused": len(result.errors),
                    "timed_out": len(result.timed_out),
                    "elapsed_ms": int(result.elapsed_s * 1000),
                },
            )
        else:
            log.info(
                "round closed",
                extra={
                    "job": job,
                    "round": round_no,
                    "answered": len(result.replies),
                    "errors": len(result.errors),
                    "timed_out": len(result.timed_out),
                    "elapsed_ms": int(result.elapsed_s * 1000),
                },
            )
        if len(result.replies) < needed:
            raise QuorumNotReached(result, needed)
        return result

    def _wait(self, state: _OpenRound, payloads: Mapping[str, list[bytes]], deadline: float, epoch: int) -> None:
        """Block until the round is complete or the deadline passes, re-sending where useful."""
        result = state.result
        while True:
            with self._lock:
                remaining = deadline - time.monotonic()
                if self._complete(state) or remaining <= 0:
                    return
                if not (state.resend_to or state.resend_now):
                    state.done.wait(min(remaining, self.RESEND_CHECK_S))
                now_epoch = self.transport.connection_epoch
                reconnected, epoch = now_epoch != epoch, now_epoch
                now_set = state.resend_now
                # Only the clients named for a re-send are looked at (every client only after a
                # reconnection): this runs on every reply, and a scan of all the round's clients
                # here made a round quadratic in the fleet (35 % of the aggregator's CPU at 3,000).
                named = result.selected if reconnected else sorted(state.resend_to | now_set)
                candidates = [c for c in named if c not in result.replies and c not in result.errors]
                state.resend_to.clear()
                state.resend_now = set()
                now = time.monotonic()
                targets = [
                    c
                    for c in candidates
                    if reconnected
                    or c in now_set
                    or now - state.last_resent.get(c, -math.inf) >= self.RESEND_MIN_INTERVAL_S
                ]
                state.last_resent.update((c, now) for c in targets)
            if targets:
                self.resent += len(targets)
                log.info(
                    "re-sending round requests", extra={"job": result.job, "round": result.round, "clients": targets}
                )
                self._send(payloads, targets)

    def _send(self, payloads: Mapping[str, list[bytes]], clients: Sequence[str]) -> None:
        for client in clients:
            try:
                self.transport.send_payloads(self.layout.inbox(client), payloads[client])
            except ConnectionError as exc:  # re-sent after the reconnection
                log.warning("request not sent", extra={"client": client, "error": str(exc)})

    def _on_status(self, topic: str, message: Message) -> None:
        """A client that was seen offline and is online again may have lost queued requests."""
        if not isinstance(message.body, Status) or self.layout.client_of(topic) != message.sender:
            return
        with self._lock:
            self._note_version(message.sender, message.envelope.version)
            was_online = self._online.get(message.sender)
            self._online[message.sender] = message.body.online
            if not (message.body.online and was_online is False):
                return
            for state in self._open.values():
                if message.sender in state.request_ids:
                    state.resend_to.add(message.sender)
                    state.done.notify_all()

    def _note_version(self, client: str, version: int) -> None:
        """Keep the protocol version ``client`` wrote; one log line when it is seen behind this
        aggregator (or changes version), so that an operator knows which gateways to update.
        The caller holds the lock."""
        previous = self.peer_versions.get(client)
        self.peer_versions[client] = version
        if version != previous and version < PROTOCOL_VERSION:
            log.warning(
                f"gateway {client} speaks protocol version {version}, one behind this aggregator's "
                f"{PROTOCOL_VERSION}: it gets version-{version} requests, and jobs that need newer "
                "messages leave it out (update it)",
                extra={"client": client, "protocol_version": version, "aggregator_protocol": PROTOCOL_VERSION},
            )
        elif previous is not None and version != previous:
            log.info(
                f"gateway {client} now speaks protocol version {version}",
                extra={"client": client, "protocol_version": version},
            )

    @staticmethod
    def _complete(state: _OpenRound) -> bool:
        result = state.result
        return len(result.replies) + len(result.errors) == len(result.selected)

    def resend_unanswered(self) -> None:
        """Ask every open round's clients without an answer again, now (the merge worker that held
        their replies died, or one came back after none was online); a gateway answers a repeated
        request from its reply cache, so nothing is computed twice."""
        with self._lock:
            for state in self._open.values():
                result = state.result
                state.resend_now.update(
                    c for c in result.selected if c not in result.replies and c not in result.errors
                )
                state.done.notify_all()

    def deliver_batch(
        self, job: str, round_no: int, replies: Sequence[Message], judge: Callable[[list[Message]], set[str]]
    ) -> bool:
        """Deliver replies of round ``round_no`` of ``job`` (from distinct clients, already checked
        against their outbox topics) all together or not at all, atomically with ``judge``.

        A merge worker's batch carries one sum over its clients' vectors, which the leader can
        add only whole. So if any reply is a duplicate of one already delivered, or does not
        answer this round's request, none is delivered, and the others' clients are asked again.
        Otherwise ``judge(replies)`` runs under the engine's lock (so the round cannot close
        half-way); it adds what it keeps and returns the clients to ask again instead of
        delivering their replies. Returns whether the batch's sum was kept (nothing re-asked).
        """
        with self._lock:
            state = self._open.get((job, round_no))
            if state is None:
                self.late_replies += len(replies)
                log.info(
                    "discarded a merged batch of a closed or unknown round",
                    extra={"job": job, "round": round_no, "replies": len(replies)},
                )
                return False
            result = state.result
            fresh = [
                m
                for m in replies
                if state.request_ids.get(m.sender) == m.envelope.reply_to
                and m.sender not in result.replies
                and m.sender not in result.errors
            ]
            if len(fresh) < len(replies):
                result.duplicates += len(replies) - len(fresh)
                redo = {m.sender for m in fresh}
            else:
                redo = judge(fresh)
            for message in fresh:
                self._note_version(message.sender, message.envelope.version)
                if message.sender not in redo:
                    self._record(state, message)
            if redo:
                log.info(
                    "re-asking clients of a merged batch that could not be kept whole",
                    extra={"job": job, "round": round_no, "clients": sorted(redo)},
                )
                state.resend_now.update(redo)
            state.done.notify_all()
            return not redo

    def deliver(self, topic: str, message: Message) -> None:
        """Take one reply that arrived on ``topic`` (the outbox it was published on)."""
        env = message.envelope
        if self.layout.client_of(topic) != env.sender:
            self.misrouted += 1
            log.warning("reply sender does not match its topic", extra={"topic": topic, "sender": env.sender})
            return
        with self._lock:
            state = self._open.get((env.job, env.round))
            if state is None or state.request_ids.get(env.sender) != env.reply_to:
                self.late_replies += 1
                log.info(
                    "discarded reply of a closed or unknown round",
                    extra={"job": env.job, "round": env.round, "sender": env.sender},
                )
                return
            self._note_version(env.sender, env.version)
            result = state.result
            if env.sender in result.replies or env.sender in result.errors:
                result.duplicates += 1
                return
            self._record(state, message)
            state.done.notify_all()

    @staticmethod
    def _record(state: _OpenRound, message: Message) -> None:
        """File a reply of an open round (its sender has no answer yet); the caller holds the lock."""
        env, result = message.envelope, state.result
        if isinstance(message.body, ErrorReply):
            result.errors[env.sender] = message.body
        elif isinstance(message.body, NewerVersion):
            result.errors[env.sender] = ErrorReply(
                "protocol_version",
                f"{env.sender} writes protocol version {env.version}, newer than this "
                f"aggregator's {PROTOCOL_VERSION}: update the aggregator first",
                result.request_type,
            )
        elif state.expect is not None and not isinstance(message.body, state.expect):
            result.errors[env.sender] = ErrorReply(
                "unexpected_reply",
                f"expected {[t.__name__ for t in state.expect]}, got {message.type!r}",
                result.request_type,
            )
        else:
            if state.fold is not None:
                message = Message(env, state.fold(env.sender, message.body))
            result.replies[env.sender] = message
