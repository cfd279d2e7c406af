"""The embedded amqtt broker (demo fallback): lifecycle, QoS 1 rounds, offline queues, auth, ACL."""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable, Iterator

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

from aggregator.broker.embedded import EmbeddedBroker
from aggregator.broker.mosquitto import BrokerUser
from aggregator.rounds import RoundEngine
from edge_client.dispatcher import Dispatcher
from shared.protocol.envelope import Message
from shared.protocol.messages.generic import Ping, Pong
from shared.protocol.topics import TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport

LAYOUT = TopicLayout()
PASSWORDS = {"aggregator": "agg-secret", "gw-1": "gw1-secret", "gw-2": "gw2-secret"}
USERS = [BrokerUser(name, password) for name, password in PASSWORDS.items()]

Connect = Callable[..., MqttTransport]


def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def broker_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("amqtt-broker-")]


@pytest.fixture
def broker(tmp_path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "broker", users=USERS) as running:
        yield running


@pytest.fixture
def transport(broker: EmbeddedBroker) -> Iterator[Callable[..., MqttTransport]]:
    """Make an MQTT 3.1.1 transport (username = client id), closed at teardown."""
    made: list[MqttTransport] = []

    def make(
        client_id: str, password: str | None = None, *, username: str | None = None, protocol: int = 4
    ) -> MqttTransport:
        config = MqttConfig(
            host=broker.host,
            port=broker.port,
            username=username or client_id,
            password=PASSWORDS.get(client_id) if password is None else password,
            protocol=protocol,
            reconnect_min_s=1,
            reconnect_max_s=1,
        )
        made.append(MqttTransport(client_id, config))
        return made[-1]

    yield make
    for t in made:
        t.close()


def connected(make: Callable[..., MqttTransport], client_id: str) -> MqttTransport:
    t = make(client_id)
    t.connect(timeout_s=5)
    return t


def pong_dispatcher(t: MqttTransport) -> Dispatcher:
    dispatcher = Dispatcher(t, LAYOUT)
    dispatcher.register(Ping, lambda request: Pong(request.body.payload))
    dispatcher.start()
    return dispatcher


def ping(payload: bytes) -> Message:
    return Message.create(Ping(payload), sender="aggregator")


# -- lifecycle ------------------------------------------------------------------------------------


def test_start_stop_restart_leave_nothing_behind(tmp_path) -> None:
    broker = EmbeddedBroker(tmp_path / "b", users=USERS)
    assert broker.host == "127.0.0.1"
    assert broker.start() is broker
    assert port_open(broker.port) and broker_threads() == [f"amqtt-broker-{broker.port}"]
    with pytest.raises(RuntimeError, match="already running"):
        broker.start()

    client = MqttTransport(
        "gw-1",
        MqttConfig(
            port=broker.port,
            username="gw-1",
            password=PASSWORDS["gw-1"],
            protocol=4,
            reconnect_min_s=1,
            reconnect_max_s=1,
        ),
    )
    client.connect(timeout_s=5)
    broker.stop()  # with a client still connected: its socket is closed by the broker
    assert wait_for(lambda: not client.is_connected)
    client.close()
    assert not port_open(broker.port) and broker_threads() == []
    broker.stop()  # idempotent

    broker.restart()  # same instance, same port, same process
    assert port_open(broker.port)
    broker.stop()

    with EmbeddedBroker(tmp_path / "c", users=USERS) as other:  # a fresh instance works as well
        assert other.port != broker.port and port_open(other.port)
    assert broker_threads() == []


def test_bind_failure_is_reported(tmp_path) -> None:
    with EmbeddedBroker(tmp_path / "a", users=USERS) as first:
        with pytest.raises(RuntimeError, match="could not start"):
            EmbeddedBroker(tmp_path / "b", users=USERS, port=first.port).start()
    assert broker_threads() == []


# -- QoS 1 request/reply through the real round engine and dispatcher ------------------------------


def test_round_trip_through_round_engine_and_dispatcher(transport: Connect) -> None:
    engine = RoundEngine(connected(transport, "aggregator"), LAYOUT)
    gateways = {}
    for gw in ("gw-1", "gw-2"):
        t = transport(gw)
        gateways[gw] = pong_dispatcher(t)
        t.connect(timeout_s=5)

    result = engine.run_round("job-1", 1, {"gw-1": Ping(b"one"), "gw-2": Ping(b"two")}, ["gw-1", "gw-2"], deadline_s=5)

    assert result.answered == ["gw-1", "gw-2"] and not result.timed_out and not result.errors
    assert result.replies["gw-1"].body == Pong(b"one")
    assert result.replies["gw-2"].body == Pong(b"two")
    assert gateways["gw-1"].handled == gateways["gw-2"].handled == 1
    assert engine.misrouted == 0


# -- persistent sessions ---------------------------------------------------------------------------


def test_inbox_message_for_an_offline_gateway_is_delivered_on_reconnect(transport: Connect) -> None:
    aggregator = connected(transport, "aggregator")
    first = transport("gw-1")
    pong_dispatcher(first)
    first.connect(timeout_s=5)  # creates the persistent session with its inbox subscription
    first.close()

    aggregator.publish(LAYOUT.inbox("gw-1"), ping(b"while you were away"))
    assert aggregator.flush(5)

    received: list[Message] = []
    again = transport("gw-1")
    again.subscribe(LAYOUT.inbox("gw-1"), lambda _topic, message: received.append(message))
    again.connect(timeout_s=5)
    assert wait_for(lambda: len(received) == 1)
    assert received[0].body == Ping(b"while you were away")


# -- authentication --------------------------------------------------------------------------------


def test_wrong_password_is_refused(transport: Connect) -> None:
    with pytest.raises(ConnectionError, match="Not authorized"):
        transport("gw-1", "not-the-password").connect(timeout_s=1)


@pytest.mark.parametrize(
    "client_id, password, username, protocol",
    [
        ("gw-9", "whatever", None, 4),  # unknown user
        ("gw-1", "gw2-secret", "gw-2", 4),  # valid credentials of another client id
        ("gw-1", "gw1-secret", None, 5),  # MQTT v5: amqtt speaks 3.1.1 only
    ],
    ids=["unknown-user", "username-not-client-id", "mqtt-v5"],
)
def test_other_refusals(transport: Connect, client_id, password, username, protocol) -> None:
    with pytest.raises(ConnectionError):
        transport(client_id, password, username=username, protocol=protocol).connect(timeout_s=0.5)


@pytest.mark.parametrize(
    "password, username",
    [("guess", None), ("gw2-secret", "gw-2")],
    ids=["wrong-password", "own-credentials-other-client-id"],
)
def test_refused_impersonator_does_not_disturb_the_real_session(transport: Connect, password, username) -> None:
    """Neither a guessed password nor gw-2's valid login under client id gw-1 touches gw-1's session
    (mosquitto gets the same from use_username_as_clientid; see test_mqtt_identity.py)."""
    aggregator = connected(transport, "aggregator")
    received: list[Message] = []
    gateway = transport("gw-1")
    gateway.subscribe(LAYOUT.inbox("gw-1"), lambda _topic, message: received.append(message))
    gateway.connect(timeout_s=5)

    with pytest.raises(ConnectionError):  # while the gateway is online: it is not kicked off
        transport("gw-1", password, username=username).connect(timeout_s=1)
    assert gateway.is_connected and gateway.connections == 1
    gateway.close()

    with pytest.raises(ConnectionError):  # while it is offline: its queue survives
        transport("gw-1", password, username=username).connect(timeout_s=1)
    aggregator.publish(LAYOUT.inbox("gw-1"), ping(b"queued"))
    assert aggregator.flush(5)
    back = transport("gw-1")
    back.subscribe(LAYOUT.inbox("gw-1"), lambda _topic, message: received.append(message))
    back.connect(timeout_s=5)
    assert wait_for(lambda: len(received) == 1)
    assert received[0].body == Ping(b"queued")


# -- topic ACL -------------------------------------------------------------------------------------


def test_gateway_cannot_publish_into_another_gateways_outbox(transport: Connect) -> None:
    seen: list[tuple[str, bytes]] = []
    aggregator = transport("aggregator")
    aggregator.subscribe(LAYOUT.all_outboxes, lambda topic, message: seen.append((topic, message.body.payload)))
    aggregator.connect(timeout_s=5)
    intruder = connected(transport, "gw-2")

    intruder.publish(LAYOUT.outbox("gw-1"), Message.create(Pong(b"forged"), sender="gw-1"))
    intruder.publish(LAYOUT.inbox("gw-1"), Message.create(Ping(b"forged"), sender="aggregator"))
    intruder.publish(LAYOUT.outbox("gw-2"), Message.create(Pong(b"own"), sender="gw-2"))
    assert intruder.flush(5)  # 3.1.1: denied publishes are acknowledged and dropped silently

    # the broker takes one client's publishes in order: once "own" is through, "forged" was dropped
    assert wait_for(lambda: (LAYOUT.outbox("gw-2"), b"own") in seen)
    time.sleep(0.1)
    assert seen == [(LAYOUT.outbox("gw-2"), b"own")]


def test_gateway_receives_only_its_own_topics(transport: Connect) -> None:
    gw1 = connected(transport, "gw-1")  # leaves a retained online status behind
    aggregator = transport("aggregator")
    aggregator.subscribe(LAYOUT.all_statuses, lambda _topic, _message: None)
    aggregator.connect(timeout_s=5)
    assert gw1.flush(5)

    got: list[str] = []
    spy = transport("gw-2")
    for topic_filter in (LAYOUT.inbox("gw-2"), LAYOUT.inbox("gw-1"), LAYOUT.prefix + "/#", LAYOUT.all_statuses):
        spy.subscribe(topic_filter, lambda topic, _message: got.append(topic))
    spy.connect(timeout_s=5)
    time.sleep(0.2)  # let the SUBSCRIBEs (the forbidden ones get SUBACK 0x80) reach the broker

    aggregator.publish(LAYOUT.inbox("gw-1"), ping(b"for gw-1"))
    aggregator.publish(LAYOUT.inbox("gw-2"), ping(b"for gw-2"))
    assert wait_for(lambda: LAYOUT.inbox("gw-2") in got)
    time.sleep(0.1)
    # nothing else: not gw-1's inbox, not the retained statuses of gw-1 and the aggregator
    assert spy.stats.received_payloads == 1  # counted once per message from the broker
    assert set(got) == {LAYOUT.inbox("gw-2")}  # (two local handlers match that topic)


def test_last_will_on_a_forbidden_topic_is_refused(broker: EmbeddedBroker) -> None:
    outcome: list[object] = []
    done = threading.Event()
    client = paho.Client(
        CallbackAPIVersion.VERSION2, client_id="gw-2", clean_session=False, protocol=MQTTProtocolVersion.MQTTv311
    )
    client.username_pw_set("gw-2", PASSWORDS["gw-2"])
    client.will_set(LAYOUT.outbox("gw-1"), b"forged will", qos=1)
    client.on_connect = lambda _c, _u, _f, reason_code, _p: (outcome.append(reason_code), done.set())
    client.connect(broker.host, broker.port)
    client.loop_start()
    try:
        assert done.wait(5)
        assert outcome[0].is_failure and "authorized" in str(outcome[0])
    finally:
        client.disconnect()
        client.loop_stop()
