"""Site aggregators: a clinic's gateways answer the cloud through one process that pre-sums them.

The clinic runs its own broker; its gateways connect there as they would to the cloud's. The
site aggregator (:class:`SiteAggregator`) is the local broker's ``aggregator`` and the cloud
broker's ``site_id`` account (confined by :func:`site_acl`): it forwards every request the cloud
sends a member unchanged, holds the replies that carry one :class:`MaskedVector`, and sends each
group of equal replies upstream as one ring sum in a :class:`SiteReplies` message (members that
stayed silent named in it); every other reply is relayed as the gateway sent it. On the cloud,
:class:`SiteAwareTransport` (:func:`site_aware_engine`) hands the round engine each group as one
batch of its members' replies. Ring addition is associative and commutative and no float is
added at the site, so the model is the flat fleet's bit for bit; a site's partial sum stays
masked, and the cloud learns no more than from the flat fleet. The design, the argument, what
is not relayed and the measured bytes are in SCALING.md ("Site aggregators").
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np

from shared.protocol.codec import dumps_value
from shared.protocol.envelope import (
    Envelope,
    Message,
    decode_message,
    encode_message,
    message_type,
    new_message_id,
    type_name_of,
    validate_client_id,
)
from shared.protocol.errors import DecodeError
from shared.protocol.messages import ErrorReply, Status
from shared.protocol.messages.secure_aggregation import MAX_BLOB, MaskedVector, masked_vector_field, narrow
from shared.protocol.schema import ArraySpec, to_wire
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.secure_aggregation import ring_sum
from shared.transport.base import MessageHandler, Transport

from .audit import AuditTrail
from .rounds import RoundEngine

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

log = logging.getLogger(__name__)

__all__ = [
    "MemberReplies",
    "SiteAggregator",
    "SiteAwareTransport",
    "SiteConfig",
    "SiteMember",
    "SiteReplies",
    "SiteStats",
    "SiteSum",
    "site_acl",
    "site_aware_engine",
]

#: Rounds the site remembers as closed (a re-sent request of one is forwarded, its reply relayed).
CLOSED_ROUNDS = 4096


@dataclass(frozen=True)
class SiteMember:
    """One member's part of a site message: who (``client``), which request of the cloud it
    answers (``request_id``), its reply's message id (``reply_id``) and the sealed share
    bundles its masked vector carried (``shares``, neighbour -> bundle; empty in plain mode)."""

    client: str
    request_id: str
    reply_id: str = ""
    shares: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_client_id(self.client)
        if not self.request_id:
            raise ValueError("request_id must not be empty")
        for peer, blob in self.shares.items():
            if not 0 < len(blob) <= MAX_BLOB:
                raise ValueError(f"shares[{peer!r}] must hold 1..{MAX_BLOB} bytes")


@dataclass(frozen=True)
class SiteSum:
    """The ring sum ``total`` of ``members``' vectors, whose replies are otherwise equal to
    ``template``: an encoded reply message whose vector is empty."""

    template: bytes
    total: Annotated[np.ndarray, ArraySpec(("uint16", "uint32", "uint64"), ndim=1)]
    members: tuple[SiteMember, ...]

    def __post_init__(self) -> None:
        if len(self.members) < 2:
            raise ValueError("a site sum has at least two members (a lone reply is relayed as it is)")
        clients = [m.client for m in self.members]
        if len(set(clients)) != len(clients):
            raise ValueError("a site sum lists a member twice")


@message_type("site.replies")
@dataclass(frozen=True)
class SiteReplies:
    """A site's pre-summed answers to one round of the cloud (``request_type``): ``sums``, and
    the members asked that did not answer within the site's ``deadline_s`` (``silent``)."""

    request_type: str
    sums: tuple[SiteSum, ...] = ()
    silent: tuple[SiteMember, ...] = ()
    deadline_s: float = 0.0

    def __post_init__(self) -> None:
        clients = [m.client for s in self.sums for m in s.members] + [m.client for m in self.silent]
        if len(set(clients)) != len(clients):
            raise ValueError("a member appears twice in one site message")


@dataclass(frozen=True)
class SiteConfig:
    """A site aggregator's settings.

    Parameters
    ----------
    site_id
        Its account on the cloud's broker (and the sender of its :class:`SiteReplies`).
    members
        The gateways it answers for; each connects to the local broker under its own id.
    deadline_s
        How long it waits for its members' replies to one round; keep it below the cloud's
        round deadline (``JobSettings.deadline_s``), or the cloud closes the round first.
    gather_s
        A round whose requests are all answered closes once it has been quiet (no request, no
        reply) this long: the cloud sends one round's requests in one burst, and a request
        arriving after the first replies must still find the round open.
    upstream_layout, downstream_layout
        Topic layouts of the cloud's broker and of the local one.

    Examples
    --------
    >>> from aggregator.site_aggregator import SiteConfig
    >>> SiteConfig("site-a", ("gw-1", "gw-2")).deadline_s
    30.0
    >>> SiteConfig("site-a", ("gw-1", "site-a"))
    Traceback (most recent call last):
    ...
    ValueError: members must not include the site itself ('site-a') or the aggregator
    """

    site_id: str
    members: tuple[str, ...]
    deadline_s: float = 30.0
    gather_s: float = 0.05
    upstream_layout: TopicLayout = TopicLayout()
    downstream_layout: TopicLayout = TopicLayout()

    def __post_init__(self) -> None:
        validate_client_id(self.site_id)
        object.__setattr__(self, "members", tuple(self.members))
        if not self.members:
            raise ValueError("members must name at least one gateway")
        for member in self.members:
            validate_client_id(member)
        if len(set(self.members)) != len(self.members):
            raise ValueError("members lists a gateway twice")
        if self.site_id in self.members or AGGREGATOR_ID in self.members:
            raise ValueError(f"members must not include the site itself ({self.site_id!r}) or the aggregator")
        if not (np.isfinite(self.deadline_s) and self.deadline_s > 0):
            raise ValueError(f"deadline_s must be > 0, got {self.deadline_s}")
        if not 0 <= self.gather_s < self.deadline_s:
            raise ValueError(f"gather_s must lie in [0, deadline_s), got {self.gather_s}")


def site_acl(site_id: str, members: Sequence[str], layout: TopicLayout = TopicLayout()) -> str:
    """The mosquitto ACL block that lets ``site_id`` answer for ``members`` on the cloud's
    broker (append it to ``deploy/mosquitto/acl``): read their requests, write their replies
    and presence, write its own outbox -- and nothing of any other gateway.

    >>> from aggregator.site_aggregator import site_acl
    >>> print(site_acl("site-a", ["gw-1"]))
    user site-a
    topic write wheelfed/v1/c/site-a/out
    topic read wheelfed/v1/c/gw-1/in
    topic write wheelfed/v1/c/gw-1/out
    topic readwrite wheelfed/v1/c/gw-1/status
    """
    config = SiteConfig(site_id, tuple(members), upstream_layout=layout)
    lines = [f"user {config.site_id}", f"topic write {layout.outbox(config.site_id)}"]
    for member in config.members:
        lines += [
            f"topic read {layout.inbox(member)}",
            f"topic write {layout.outbox(member)}",
            f"topic readwrite {layout.status(member)}",
        ]
    return "\n".join(lines)


@dataclass
class SiteStats:
    """What a site did: requests forwarded, replies relayed unchanged, replies summed into
    ``sums_sent`` site sums, members reported silent."""

    requests: int = 0
    relayed: int = 0
    summed: int = 0
    sums_sent: int = 0
    silent: int = 0


@dataclass
class _SiteRound:
    """One round of the cloud as the site sees it."""

    job: str
    round: int
    request_type: str
    deadline_at: float
    last_activity: float
    requests: dict[str, str] = field(default_factory=dict)  # member -> id of the cloud's request
    answered: set[str] = field(default_factory=set)
    held: dict[str, Message] = field(default_factory=dict)  # additive replies, by member
    timer: threading.Timer | None = None


class SiteAggregator:
    """Forwards the cloud's requests to a clinic's gateways and pre-sums their additive replies
    (see the module docstring).

    ``upstream``: a connected transport to the cloud's broker (client id ``config.site_id``,
    no presence); ``downstream``: one to the local broker as its aggregator. Call :meth:`start`
    once both are connected, :meth:`close` before closing them.
    """

    def __init__(self, config: SiteConfig, upstream: Transport, downstream: Transport) -> None:
        self.config = config
        self.upstream = upstream
        self.downstream = downstream
        self.up = config.upstream_layout
        self.down = config.downstream_layout
        self.stats = SiteStats()
        self._members = frozenset(config.members)
        self._lock = threading.Lock()
        self._open: dict[tuple[str, int], _SiteRound] = {}
        self._closed: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._stopped = False

    def start(self) -> None:
        """Subscribe: the members' inboxes upstream, their outboxes and presence downstream."""
        self.downstream.subscribe(self.down.all_outboxes, self._on_reply)
        self.downstream.subscribe(self.down.all_statuses, self._on_status)
        for member in self.config.members:
            self.upstream.subscribe(self.up.inbox(member), self._on_request)

    def close(self) -> None:
        """Stop the round timers; open rounds are dropped (the cloud times them out)."""
        with self._lock:
            self._stopped = True
            for state in self._open.values():
                if state.timer is not None:
                    state.timer.cancel()
            self._open.clear()

    # -- requests: cloud -> member ----------------------------------------------------------------
    def _on_request(self, topic: str, message: Message) -> None:
        member = self.up.client_of(topic)
        if member not in self._members or message.sender != self.up.aggregator_id:
            log.warning(
                "ignored a request not from the cloud's aggregator to a member",
                extra={"topic": topic, "sender": message.sender},
            )
            return
        env = message.envelope
        key = (env.job, env.round)
        with self._lock:
            if self._stopped:
                return
            if key not in self._closed:
                state = self._open.get(key)
                now = time.monotonic()
                if state is None:
                    state = self._open[key] = _SiteRound(
                        env.job, env.round, env.type, now + self.config.deadline_s, now
                    )
                    self._schedule(state, self.config.deadline_s)
                state.requests[member] = env.msg_id
                state.last_activity = now
        self.stats.requests += 1
        self.downstream.publish(self.down.inbox(member), message)

    # -- replies: member -> cloud -----------------------------------------------------------------
    def _on_reply(self, topic: str, message: Message) -> None:
        member = self.down.client_of(topic)
        if member not in self._members or message.sender != member:
            log.warning("ignored a reply from outside the site", extra={"topic": topic, "sender": message.sender})
            return
        env = message.envelope
        relay = True
        with self._lock:
            state = self._open.get((env.job, env.round))
            if state is not None and state.requests.get(member) == env.reply_to:
                if member in state.answered:
                    return  # a redelivered reply (QoS 1): the first one counts
                state.answered.add(member)
                state.last_activity = time.monotonic()
                if masked_vector_field(message.body) is not None:
                    state.held[member] = message
                    relay = False
                if self._complete(state):
                    self._schedule(state, self.config.gather_s)
        if relay:
            self._relay(member, message)

    def _on_status(self, topic: str, message: Message) -> None:
        member = self.down.client_of(topic)
        if member in self._members and message.sender == member and isinstance(message.body, Status):
            self.upstream.publish(self.up.status(member), message, retain=True)

    def _relay(self, member: str, message: Message) -> None:
        self.stats.relayed += 1
        self.upstream.publish(self.up.outbox(member), message)

    # -- closing a round ------------------------------------------------------------------------
    @staticmethod
    def _complete(state: _SiteRound) -> bool:
        return state.answered >= set(state.requests)

    def _schedule(self, state: _SiteRound, delay_s: float) -> None:
        """(Re)arm the round's timer, never past its deadline; called with the lock held."""
        if state.timer is not None:
            state.timer.cancel()
        delay_s = max(0.0, min(delay_s, state.deadline_at - time.monotonic()))
        state.timer = threading.Timer(delay_s, self._on_timer, args=(state,))
        state.timer.daemon = True
        state.timer.start()

    def _on_timer(self, state: _SiteRound) -> None:
        """Close the round if it is complete and quiet, or at its deadline; else wait on."""
        with self._lock:
            if self._open.get((state.job, state.round)) is not state:
                return
            now, complete = time.monotonic(), self._complete(state)
            quiet_at = state.last_activity + self.config.gather_s
            if not (complete and now >= quiet_at) and now < state.deadline_at:
                self._schedule(state, quiet_at - now if complete else state.deadline_at - now)
                return
        self._close_round(state, expired=not complete)

    def _close_round(self, state: _SiteRound, *, expired: bool) -> None:
        """Send the round's held replies upstream (once), and name the silent members."""
        key = (state.job, state.round)
        with self._lock:
            if self._open.get(key) is not state:
                return  # closed already (the timer and the last reply raced)
            del self._open[key]
            if state.timer is not None:
                state.timer.cancel()
            self._closed[key] = None
            while len(self._closed) > CLOSED_ROUNDS:
                self._closed.popitem(last=False)
            silent = (
                tuple(SiteMember(m, rid) for m, rid in sorted(state.requests.items()) if m not in state.answered)
                if expired
                else ()
            )
        sums: list[SiteSum] = []
        for group in self._groups(state.held):
            if len(group) == 1:
                self._relay(group[0].sender, group[0])
            else:
                sums.append(self._sum(group))
        if not sums and not silent:
            return
        if silent:
            log.warning(
                "members did not answer within the site's deadline",
                extra={"job": state.job, "round": state.round, "clients": [m.client for m in silent]},
            )
        body = SiteReplies(state.request_type, tuple(sums), silent, self.config.deadline_s)
        reply = Message.create(body, sender=self.config.site_id, job=state.job, round=state.round)
        self.stats.summed += sum(len(s.members) for s in sums)
        self.stats.sums_sent += len(sums)
        self.stats.silent += len(silent)
        self.upstream.publish(self.up.outbox(self.config.site_id), reply)

    @staticmethod
    def _stub(body: DataclassInstance) -> DataclassInstance:
        """The reply without its vector's words and shares: what a group's members share."""
        name = _vector_field(body)
        vector: MaskedVector = getattr(body, name)
        return dataclasses.replace(body, **{name: MaskedVector(vector.values[:0])})

    def _groups(self, held: Mapping[str, Message]) -> list[list[Message]]:
        """The held replies, grouped by type, word width, length and every non-vector field;
        members in id order."""
        groups: dict[tuple[Any, ...], list[Message]] = {}
        for member in sorted(held):
            message = held[member]
            values = getattr(message.body, _vector_field(message.body)).values
            key = (message.type, values.dtype.str, values.shape[0], dumps_value(to_wire(self._stub(message.body))))
            groups.setdefault(key, []).append(message)
        return list(groups.values())

    def _sum(self, group: list[Message]) -> SiteSum:
        name = _vector_field(group[0].body)
        vectors = [getattr(m.body, name) for m in group]
        word_bits = vectors[0].values.dtype.itemsize * 8
        total = narrow(ring_sum([v.values.astype(np.uint64) for v in vectors]), word_bits)
        first = group[0]
        template = encode_message(
            Message.create(
                self._stub(first.body), sender=self.config.site_id, job=first.envelope.job, round=first.envelope.round
            )
        )
        members = tuple(
            SiteMember(m.sender, m.envelope.reply_to, m.envelope.msg_id, dict(v.shares)) for m, v in zip(group, vectors)
        )
        return SiteSum(template, total, members)


@dataclass(frozen=True)
class MemberReplies:
    """A site message read as its members' replies: one batch per sum (the first member's reply
    carries the sum, the others' a zero vector; each with its own share bundles and ids) and a
    ``site_timeout`` error reply per member the site reports silent."""

    batches: tuple[tuple[Message, ...], ...] = ()
    errors: tuple[Message, ...] = ()


def _vector_field(body: object) -> str:
    """The name of a held reply's fleet-sum vector (the site holds only replies that have one)."""
    name = masked_vector_field(body)
    if name is None:
        raise TypeError(f"a {type(body).__name__} holds no fleet-sum vector to add up")
    return name


class SiteAwareTransport:
    """The cloud aggregator's transport, with site aggregators' replies read as their members'.

    Wraps a connected transport; everything but :meth:`subscribe`/:meth:`unsubscribe` (and the
    ``audit`` hook) is the wrapped transport's. Site messages (:class:`SiteReplies`), arriving
    through any subscription, go once to the round engine :meth:`attach`-ed to it -- each sum as
    one batch of its members' replies, taken whole or not at all (``RoundEngine.deliver_batch``:
    a round cannot close between two members of a sum), each silent member as an error reply --
    and to no subscribed handler. A site message naming a gateway that is not that site's
    member, or arriving on any other topic, is refused (logged, counted in ``refused``): the
    site speaks only for its members, as the broker's ACL lets it. :func:`site_aware_engine`
    makes both.

    ``sites``: site id -> its members.

    Examples
    --------
    >>> from aggregator.site_aggregator import SiteAwareTransport
    >>> from shared.transport.memory import MemoryBroker, MemoryTransport
    >>> cloud = SiteAwareTransport(MemoryTransport(MemoryBroker(), "aggregator", presence=False),
    ...                            {"site-a": ["gw-1", "gw-2"]})
    >>> cloud.client_id, cloud.site_of("gw-2")
    ('aggregator', 'site-a')
    """

    # set through object.__setattr__: this class's __setattr__ forwards to the wrapped transport
    _inner: Transport
    _site_of: dict[str, str]
    _sites: tuple[str, ...]
    _wrapped: dict[tuple[str, MessageHandler], MessageHandler]
    _seen: OrderedDict[str, None]
    _seen_lock: threading.Lock
    engine: RoundEngine | None
    refused: int

    def __init__(self, transport: Transport, sites: Mapping[str, Sequence[str]]) -> None:
        members: dict[str, str] = {}
        for site, site_members in sites.items():
            config = SiteConfig(site, tuple(site_members))
            for member in config.members:
                if member in members:
                    raise ValueError(f"sites: {member} is a member of both {members[member]} and {site}")
                members[member] = site
        overlap = sorted(set(sites) & set(members))
        if overlap:
            raise ValueError(f"sites: {overlap} are both sites and members")
        object.__setattr__(self, "_inner", transport)
        object.__setattr__(self, "_site_of", members)
        object.__setattr__(self, "_sites", tuple(sites))
        object.__setattr__(self, "_wrapped", {})
        object.__setattr__(self, "_seen", OrderedDict())  # ids of site messages handled (QoS 1 copies)
        object.__setattr__(self, "_seen_lock", threading.Lock())
        object.__setattr__(self, "engine", None)
        object.__setattr__(self, "refused", 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("refused", "engine"):
            object.__setattr__(self, name, value)
        else:  # e.g. ``audit``: the wrapped transport decodes, so its hook is the one that runs
            setattr(self._inner, name, value)

    def site_of(self, client: str) -> str | None:
        """The site that answers for ``client``, or None for a gateway connected directly."""
        return self._site_of.get(client)

    def attach(self, engine: RoundEngine) -> None:
        """Deliver the sites' messages to ``engine``, a round engine made on this transport."""
        if engine.transport is not self:
            raise ValueError("attach: the engine must be made on this SiteAwareTransport")
        if getattr(engine, "merged", None) is not None:
            raise ValueError(
                "site aggregators cannot feed an engine with merge workers yet: their sums would "
                "bypass the workers' total"
            )
        if self.engine is not None:
            raise ValueError("attach: an engine is attached already")
        self.engine = engine

    def subscribe(self, topic_filter: str, handler: MessageHandler) -> None:
        """Subscribe ``handler`` to ``topic_filter``; site messages are the attached engine's."""

        def without_sites(topic: str, message: Message) -> None:
            if isinstance(message.body, SiteReplies):
                self._on_site(topic, message)
            else:
                handler(topic, message)

        self._wrapped[(topic_filter, handler)] = without_sites
        self._inner.subscribe(topic_filter, without_sites)

    def unsubscribe(self, topic_filter: str, handler: MessageHandler) -> None:
        self._inner.unsubscribe(topic_filter, self._wrapped.pop((topic_filter, handler), handler))

    def _on_site(self, topic: str, message: Message) -> None:
        """Hand a site message to the engine once (several subscriptions, or QoS 1, may bring
        it more than once)."""
        with self._seen_lock:
            if self.engine is None or message.envelope.msg_id in self._seen:
                return
            self._seen[message.envelope.msg_id] = None
            while len(self._seen) > CLOSED_ROUNDS:
                self._seen.popitem(last=False)
        replies = self.expand(topic, message)
        env = message.envelope
        for batch in replies.batches:
            if not self.engine.deliver_batch(env.job, env.round, batch, lambda fresh: set()):
                log.info(
                    "a site sum was not taken whole (its round closed, or a member answered already)",
                    extra={"site": message.sender, "job": env.job, "round": env.round},
                )
        for error in replies.errors:
            self.engine.deliver(self._inner.layout.outbox(error.sender), error)

    def expand(self, topic: str, message: Message) -> MemberReplies:
        """A site message as its members' replies (:class:`MemberReplies`; none if refused)."""
        layout: TopicLayout = self._inner.layout
        site = layout.client_of(topic)
        body: SiteReplies = message.body
        named = [m.client for s in body.sums for m in s.members] + [m.client for m in body.silent]
        if (
            site not in self._sites
            or message.sender != site
            or topic != layout.outbox(site)
            or any(self._site_of.get(c) != site for c in named)
        ):
            self.refused += 1
            log.warning(
                "refused a site message: not from a registered site, or naming a gateway it does not answer for",
                extra={"topic": topic, "sender": message.sender, "clients": named},
            )
            return MemberReplies()
        env = message.envelope
        batches: list[tuple[Message, ...]] = []
        for part in body.sums:
            try:
                template = decode_message(part.template, limits=self._inner.limits).body
            except DecodeError as exc:
                self.refused += 1
                log.warning("refused a site sum with an invalid template", extra={"site": site, "error": str(exc)})
                continue
            name = masked_vector_field(template)
            if name is None:
                self.refused += 1
                log.warning("refused a site sum of a reply type that is not additive", extra={"site": site})
                continue
            zero = np.zeros_like(part.total)
            batch = []
            for i, member in enumerate(part.members):
                reply = dataclasses.replace(
                    template, **{name: MaskedVector(part.total if i == 0 else zero, dict(member.shares))}
                )
                envelope = Envelope(
                    type=type_name_of(template),
                    sender=member.client,
                    job=env.job,
                    round=env.round,
                    msg_id=member.reply_id or new_message_id(),
                    reply_to=member.request_id,
                    ts=env.ts,
                )
                batch.append(Message(envelope, reply))
            batches.append(tuple(batch))
        errors = []
        for member in body.silent:
            error = ErrorReply(
                "site_timeout", f"no answer at site {site} within {body.deadline_s:.3g} s", body.request_type
            )
            errors.append(
                Message(
                    Envelope(
                        type=type_name_of(error),
                        sender=member.client,
                        job=env.job,
                        round=env.round,
                        reply_to=member.request_id,
                        ts=env.ts,
                    ),
                    error,
                )
            )
        return MemberReplies(tuple(batches), tuple(errors))


def site_aware_engine(
    transport: Transport, sites: Mapping[str, Sequence[str]], *, audit: AuditTrail | None = None
) -> RoundEngine:
    """A round engine on ``transport`` that also reads the ``sites``' replies (site id -> its
    members) as their members': pass it, and its ``transport``, where a ``RoundEngine`` goes
    (``train_on_fleet(algorithm, engine.transport, engine=engine)``).

    >>> from aggregator.site_aggregator import site_aware_engine
    >>> from shared.transport.memory import MemoryBroker, MemoryTransport
    >>> engine = site_aware_engine(MemoryTransport(MemoryBroker(), "aggregator", presence=False),
    ...                            {"site-a": ["gw-1", "gw-2"]})
    >>> engine.transport.site_of("gw-1")
    'site-a'
    """
    wrapped = SiteAwareTransport(transport, sites)
    engine = RoundEngine(wrapped, audit=audit)
    wrapped.attach(engine)
    return engine
