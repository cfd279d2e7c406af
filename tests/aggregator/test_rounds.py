"""The round engine over the in-memory transport: silent, duplicate, late and failing clients."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from aggregator.rounds import QuorumNotReached, RoundEngine, needed_replies
from edge_client.dispatcher import Dispatcher, RequestRejected
from shared.protocol.envelope import Message
from shared.protocol.errors import DisallowedDtype
from shared.protocol.messages import ErrorReply, Ping, Pong, Status
from shared.protocol.topics import TopicLayout
from shared.transport.memory import MemoryBroker, MemoryTransport

LAYOUT = TopicLayout()


@pytest.fixture
def broker() -> MemoryBroker:
    return MemoryBroker()


@pytest.fixture
def engine(broker: MemoryBroker) -> RoundEngine:
    return RoundEngine(MemoryTransport(broker, "aggregator"))


def gateway(broker: MemoryBroker, name: str, handler=lambda m: Pong(m.body.payload)) -> Dispatcher:
    d = Dispatcher(MemoryTransport(broker, name))
    d.register(Ping, handler)
    d.start()
    return d


class RawClient:
    """A misbehaving client that answers by hand (twice, late, from a foreign topic...)."""

    def __init__(self, broker: MemoryBroker, name: str) -> None:
        self.transport = MemoryTransport(broker, name)
        self.requests: list[Message] = []
        self.transport.subscribe(LAYOUT.inbox(name), lambda _t, m: self.requests.append(m))

    def answer(self, request: Message, body=None, topic: str | None = None) -> None:
        reply = request.reply(body or Pong(request.body.payload), sender=self.transport.client_id)
        self.transport.publish(topic or LAYOUT.outbox(self.transport.client_id), reply)


def test_all_clients_answer(broker, engine) -> None:
    for i in range(4):
        gateway(broker, f"gw-{i}")
    result = engine.run_round("job", 1, Ping(b"hi"), [f"gw-{i}" for i in range(4)], deadline_s=5)
    assert result.answered == ["gw-0", "gw-1", "gw-2", "gw-3"]
    assert all(m.body == Pong(b"hi") for m in result.replies.values())
    assert result.timed_out == [] and result.errors == {} and result.elapsed_s < 1


def test_per_client_bodies(broker, engine) -> None:
    gateway(broker, "gw-0")
    gateway(broker, "gw-1")
    result = engine.run_round("job", 1, {"gw-0": Ping(b"a"), "gw-1": Ping(b"b")}, ["gw-0", "gw-1"], deadline_s=5)
    assert result.replies["gw-0"].body.payload == b"a" and result.replies["gw-1"].body.payload == b"b"


def test_silent_client_times_out_and_quorum_closes_the_round(broker, engine) -> None:
    gateway(broker, "gw-0")
    gateway(broker, "gw-1")
    RawClient(broker, "gw-silent")
    started = time.monotonic()
    result = engine.run_round("job", 1, Ping(), ["gw-0", "gw-1", "gw-silent"], deadline_s=0.3, min_replies=2)
    assert 0.3 <= time.monotonic() - started < 2
    assert result.answered == ["gw-0", "gw-1"] and result.timed_out == ["gw-silent"]


def test_quorum_not_reached_raises_with_the_report(broker, engine) -> None:
    gateway(broker, "gw-0")
    RawClient(broker, "gw-silent")
    with pytest.raises(QuorumNotReached, match="1 of 2 clients answered, quorum is 2") as info:
        engine.run_round("job", 1, Ping(), ["gw-0", "gw-silent"], deadline_s=0.2)
    assert info.value.result.timed_out == ["gw-silent"]


def test_duplicate_replies_count_once(broker, engine) -> None:
    raw = RawClient(broker, "gw-dup")

    def answer_twice() -> None:
        while not raw.requests:
            time.sleep(0.005)
        raw.answer(raw.requests[0])
        raw.answer(raw.requests[0])

    threading.Thread(target=answer_twice).start()
    RawClient(broker, "gw-silent")  # keeps the round open until the deadline: both replies land in it
    result = engine.run_round("job", 1, Ping(b"x"), ["gw-dup", "gw-silent"], deadline_s=0.5, min_replies=1)
    assert result.answered == ["gw-dup"] and result.duplicates == 1 and engine.late_replies == 0


def test_late_reply_of_a_closed_round_is_discarded(broker, engine) -> None:
    gateway(broker, "gw-0")
    raw = RawClient(broker, "gw-late")
    result = engine.run_round("job", 1, Ping(), ["gw-0", "gw-late"], deadline_s=0.1, min_replies=1)
    assert result.timed_out == ["gw-late"]
    raw.answer(raw.requests[0])  # round 1 is closed now
    assert engine.late_replies == 1
    # ... and it does not leak into the next round of the same job
    result2 = engine.run_round("job", 2, Ping(), ["gw-0", "gw-late"], deadline_s=0.1, min_replies=1)
    assert result2.timed_out == ["gw-late"] and engine.late_replies == 1


def test_reply_to_a_different_request_id_is_not_accepted(broker, engine) -> None:
    raw = RawClient(broker, "gw-x")
    threading.Timer(
        0.05,
        lambda: raw.transport.publish(
            LAYOUT.outbox("gw-x"),
            Message.create(Pong(), sender="gw-x", job="job", round=1, reply_to="not-the-request"),
        ),
    ).start()
    with pytest.raises(QuorumNotReached):
        engine.run_round("job", 1, Ping(), ["gw-x"], deadline_s=0.3)
    assert engine.late_replies == 1


def test_error_replies_are_recorded_not_fatal(broker, engine) -> None:
    gateway(broker, "gw-ok")

    def broken(_m):
        raise ZeroDivisionError("boom")

    def refuses(_m):
        raise RequestRejected("no_data", "no labelled windows yet")

    gateway(broker, "gw-broken", broken)
    gateway(broker, "gw-empty", refuses)
    result = engine.run_round("job", 1, Ping(), ["gw-ok", "gw-broken", "gw-empty"], deadline_s=5, min_replies=1)
    assert result.answered == ["gw-ok"] and result.timed_out == []
    assert result.errors["gw-broken"] == ErrorReply(
        "handler_failed", "ZeroDivisionError (details in the gateway log)", "ping"
    )
    assert result.errors["gw-empty"].code == "no_data"
    assert result.elapsed_s < 1  # errors count as answers: no waiting for the deadline


def test_reply_published_on_a_foreign_topic_is_ignored() -> None:
    broker = MemoryBroker(enforce_acl=False)  # even without the broker's ACL the engine checks
    engine = RoundEngine(MemoryTransport(broker, "aggregator"))
    raw = RawClient(broker, "gw-evil")
    RawClient(broker, "gw-victim")
    threading.Timer(0.05, lambda: raw.answer(raw.requests[0], topic=LAYOUT.outbox("gw-victim"))).start()
    with pytest.raises(QuorumNotReached):
        engine.run_round("job", 1, Ping(), ["gw-evil"], deadline_s=0.3)
    assert engine.misrouted == 1


def test_dropped_client_gets_the_request_when_it_reconnects(broker, engine) -> None:
    d = gateway(broker, "gw-flaky")
    gateway(broker, "gw-0")
    d.transport.drop()
    result = engine.run_round("job", 1, Ping(), ["gw-0", "gw-flaky"], deadline_s=0.1, min_replies=1)
    assert result.timed_out == ["gw-flaky"]
    d.transport.reconnect()  # the queued request arrives; its reply is late and discarded
    assert engine.late_replies == 1 and d.handled == 1
    result = engine.run_round("job", 2, Ping(), ["gw-0", "gw-flaky"], deadline_s=1)
    assert result.answered == ["gw-0", "gw-flaky"]


def test_redelivered_request_is_answered_from_cache_not_reapplied(broker) -> None:
    calls = []
    d = gateway(broker, "gw-0", lambda m: calls.append(m) or Pong())
    agg = MemoryTransport(broker, "aggregator")
    replies = []
    agg.subscribe(LAYOUT.outbox("gw-0"), lambda _t, m: replies.append(m))
    request = Message.create(Ping(), sender="aggregator", job="j", round=1)
    agg.publish(LAYOUT.inbox("gw-0"), request)
    agg.publish(LAYOUT.inbox("gw-0"), request)
    assert len(calls) == 1 and len(replies) == 2 and replies[0] == replies[1]
    assert d.handled == 1


def test_requests_not_from_the_aggregator_are_ignored() -> None:
    broker = MemoryBroker(enforce_acl=False)
    calls = []
    gateway(broker, "gw-0", lambda m: calls.append(m) or Pong())
    MemoryTransport(broker, "gw-evil").publish(LAYOUT.inbox("gw-0"), Message.create(Ping(), sender="gw-evil"))
    assert calls == []


def test_unsupported_request_type_gets_an_error_reply(broker, engine) -> None:
    d = Dispatcher(MemoryTransport(broker, "gw-0"))
    d.start()
    result = engine.run_round("job", 1, Ping(), ["gw-0"], deadline_s=1, min_replies=0)
    assert result.errors["gw-0"].code == "unsupported"


def test_round_cannot_be_opened_twice(broker, engine) -> None:
    raw = RawClient(broker, "gw-0")
    errors: list[Exception] = []

    def second() -> None:
        while not raw.requests:
            time.sleep(0.005)
        try:
            engine.run_round("job", 1, Ping(), ["gw-0"], deadline_s=0.1)
        except RuntimeError as exc:
            errors.append(exc)

    threading.Thread(target=second).start()
    with pytest.raises(QuorumNotReached):
        engine.run_round("job", 1, Ping(), ["gw-0"], deadline_s=0.3)
    assert errors and "already open" in str(errors[0])


@pytest.mark.parametrize(
    ("kw", "n", "expected"),
    [
        ({}, 10, 10),
        ({"min_fraction": 0.5}, 10, 5),
        ({"min_fraction": 0.51}, 10, 6),
        ({"min_fraction": 0.01}, 3, 1),
        ({"min_replies": 3}, 5, 3),
        ({"min_replies": 0}, 5, 0),
        ({}, 0, 0),
    ],
)
def test_needed_replies(kw, n, expected) -> None:
    assert needed_replies(n, min_replies=kw.get("min_replies"), min_fraction=kw.get("min_fraction", 1.0)) == expected


@pytest.mark.parametrize(
    ("kw", "n"),
    [({"min_fraction": 0.0}, 3), ({"min_fraction": 1.5}, 3), ({"min_replies": 4}, 3), ({"min_replies": -1}, 3)],
)
def test_needed_replies_rejects_nonsense(kw, n) -> None:
    with pytest.raises(ValueError):
        needed_replies(n, min_replies=kw.get("min_replies"), min_fraction=kw.get("min_fraction", 1.0))


def test_request_is_resent_when_a_client_that_lost_its_session_comes_back(broker, engine) -> None:
    gone = gateway(broker, "gw-gone")
    gone.transport.close()  # session discarded: requests sent now are lost for it

    threading.Timer(0.2, lambda: gateway(broker, "gw-gone")).start()  # announces itself online
    result = engine.run_round("job", 1, Ping(b"again"), ["gw-gone"], deadline_s=5)
    assert result.answered == ["gw-gone"] and engine.resent == 1 and result.elapsed_s < 2


def test_requests_are_resent_after_the_aggregator_reconnects(broker) -> None:
    agg = MemoryTransport(broker, "aggregator")
    engine = RoundEngine(agg)
    gateway(broker, "gw-0")
    agg.drop()  # its publishes fail until it reconnects
    threading.Timer(0.2, agg.reconnect).start()
    result = engine.run_round("job", 1, Ping(b"x"), ["gw-0"], deadline_s=5)
    assert result.answered == ["gw-0"] and engine.resent == 1


def test_online_clients_are_not_sent_requests_twice(broker, engine) -> None:
    d = gateway(broker, "gw-0")
    engine.run_round("job", 1, Ping(), ["gw-0"], deadline_s=1)
    assert engine.resent == 0 and d.handled == 1


def test_reply_of_an_unexpected_type_is_an_error(broker, engine) -> None:
    gateway(broker, "gw-0", lambda m: Status(online=True))
    result = engine.run_round("job", 1, Ping(), ["gw-0"], deadline_s=1, min_replies=0, expect=Pong)
    assert result.errors["gw-0"].code == "unexpected_reply" and result.replies == {}


def test_run_round_from_a_handler_is_refused(broker) -> None:
    agg = MemoryTransport(broker, "aggregator")
    engine = RoundEngine(agg)
    gateway(broker, "gw-0")
    failures: list[Exception] = []

    def nested(_topic, _message) -> None:
        try:
            engine.run_round("inner", 1, Ping(), ["gw-0"], deadline_s=1)
        except RuntimeError as exc:
            failures.append(exc)

    agg.subscribe(LAYOUT.outbox("gw-0"), nested)
    engine.run_round("outer", 1, Ping(), ["gw-0"], deadline_s=1)
    assert failures and "from a message handler" in str(failures[0])


def test_unencodable_request_reaches_no_client(broker, engine) -> None:
    d0, d1 = gateway(broker, "gw-0"), gateway(broker, "gw-1")
    with pytest.raises(DisallowedDtype):  # a bool array cannot be encoded
        engine.run_round("job", 1, {"gw-0": Ping(), "gw-1": Ping(np.zeros(3, bool))}, ["gw-0", "gw-1"], deadline_s=1)
    assert d0.handled == d1.handled == 0


def test_a_chatty_client_cannot_trigger_resends_at_will(broker, engine) -> None:
    raw = RawClient(broker, "gw-chatty")

    def chatter() -> None:
        for i in range(20):
            status = Status(online=i % 2 == 1)  # offline, online, offline, ...
            raw.transport.publish(LAYOUT.status("gw-chatty"), Message.create(status, sender="gw-chatty"))
            time.sleep(0.02)

    threading.Thread(target=chatter).start()
    with pytest.raises(QuorumNotReached):
        engine.run_round("job", 1, Ping(), ["gw-chatty"], deadline_s=0.6)
    assert engine.resent == 1 and len(raw.requests) == 2  # 10 comebacks, one re-send


@pytest.mark.parametrize("bad_reply", [{"not": "a body"}, Pong(np.zeros(2, bool))], ids=["unregistered", "bool-array"])
def test_a_reply_that_cannot_be_sent_becomes_an_error_reply(broker, engine, bad_reply) -> None:
    d = gateway(broker, "gw-0", lambda m: bad_reply)
    result = engine.run_round("job", 1, Ping(), ["gw-0"], deadline_s=1, min_replies=0)
    assert result.errors["gw-0"].code == "reply_invalid" and d.failed == 1 and d.handled == 0
