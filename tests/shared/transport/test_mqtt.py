"""The MQTT transport against a real mosquitto started with the deploy/ configs."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from typing import Callable

import pytest
from paho.mqtt.client import SUBSCRIBE
from paho.mqtt.enums import MQTTErrorCode

from aggregator.broker import MosquittoBroker
from aggregator.rounds import RoundEngine
from edge_client.dispatcher import Dispatcher
from shared.protocol.envelope import Message
from shared.protocol.errors import PayloadTooLarge
from shared.protocol.envelope import encode_message
from shared.protocol.messages import ModelAnnouncement, Ping, Pong, Status
from shared.protocol.topics import TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport, TlsConfig
from tests.conftest import PASSWORDS
from tests.deploy.certs_support import certificate_dir

pytestmark = pytest.mark.mosquitto
LAYOUT = TopicLayout()
_OPEN: list[MqttTransport] = []


@pytest.fixture(autouse=True)
def close_transports():
    """Every transport a test makes is closed, so none keeps reconnecting into later tests."""
    yield
    while _OPEN:
        _OPEN.pop().close(timeout_s=1)


def transport(
    broker: MosquittoBroker, name: str, *, protocol: int = 5, connect: bool = True, presence: bool = True, **kw
) -> MqttTransport:
    cfg = MqttConfig(port=broker.port, username=name, password=PASSWORDS[name], protocol=protocol, **kw)
    t = MqttTransport(name, cfg, presence=presence)
    _OPEN.append(t)
    if connect:
        t.connect()
    return t


def gateway(broker: MosquittoBroker, name: str, handler: Callable = lambda m: Pong(m.body.payload), **kw) -> Dispatcher:
    t = transport(broker, name, connect=False, **kw)
    d = Dispatcher(t)
    d.register(Ping, handler)
    d.start()
    t.connect()
    return d


def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.mark.parametrize("protocol", [5, 4])
def test_round_trip_through_mosquitto(mosquitto: MosquittoBroker, protocol: int) -> None:
    agg = transport(mosquitto, "aggregator", protocol=protocol)
    engine = RoundEngine(agg)
    gws = [gateway(mosquitto, n, protocol=protocol) for n in ("gw-1", "gw-2")]
    big = bytes(range(256)) * 4096  # 1 MiB: chunked into 256 KiB payloads
    result = engine.run_round("job", 1, Ping(big), ["gw-1", "gw-2"], deadline_s=20)
    assert result.answered == ["gw-1", "gw-2"]
    assert all(r.body.payload == big for r in result.replies.values())
    assert agg.stats.sent_payloads >= 2 * 5 and agg.stats.rejected == {}
    for d in gws:
        d.transport.close()
    agg.close()


def test_gateway_cannot_publish_into_another_namespace(mosquitto: MosquittoBroker) -> None:
    agg = transport(mosquitto, "aggregator")
    seen: list[tuple[str, Message]] = []
    agg.subscribe("wheelfed/#", lambda t, m: seen.append((t, m)))
    evil = transport(mosquitto, "gw-1", presence=False)
    victim = transport(mosquitto, "gw-2", presence=False)
    victim_inbox: list[Message] = []
    victim.subscribe(LAYOUT.inbox("gw-2"), lambda _t, m: victim_inbox.append(m))
    evil.publish(LAYOUT.outbox("gw-2"), Message.create(Pong(b"forged"), sender="gw-2"))
    evil.publish(LAYOUT.inbox("gw-2"), Message.create(Ping(b"forged"), sender="aggregator"))
    evil.publish(LAYOUT.status("gw-2"), Message.create(Status(online=False), sender="gw-2"))
    evil.publish(LAYOUT.outbox("gw-1"), Message.create(Pong(b"legit"), sender="gw-1"))
    assert wait_until(lambda: any(t == LAYOUT.outbox("gw-1") for t, _ in seen))
    time.sleep(0.3)
    assert [t for t, _ in seen if "gw-2" in t] == [] and victim_inbox == []
    assert evil.denied == 3  # MQTT v5 tells the publisher
    for t in (agg, evil, victim):
        t.close()


def test_gateway_cannot_subscribe_to_another_inbox(mosquitto: MosquittoBroker) -> None:
    agg = transport(mosquitto, "aggregator")
    snoop = transport(mosquitto, "gw-1", presence=False)
    got: list[Message] = []
    snoop.subscribe("wheelfed/v1/#", lambda _t, m: got.append(m))
    time.sleep(0.2)
    agg.publish(LAYOUT.inbox("gw-2"), Message.create(Ping(b"secret"), sender="aggregator"))
    agg.publish(LAYOUT.fleet("models"), Message.create(Ping(b"broadcast"), sender="aggregator"))
    assert wait_until(lambda: len(got) >= 1)
    time.sleep(0.3)
    assert [m.body.payload for m in got] == [b"broadcast"]
    snoop.close()
    agg.close()


def test_wrong_password_is_refused(mosquitto: MosquittoBroker) -> None:
    t = MqttTransport("gw-1", MqttConfig(port=mosquitto.port, username="gw-1", password="wrong"))
    with pytest.raises(ConnectionError, match="Not authorized|Bad user name or password"):
        t.connect(timeout_s=3)


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_broker_restart_mid_round_still_completes(mosquitto: MosquittoBroker, kill: bool) -> None:
    agg = transport(mosquitto, "aggregator")
    engine = RoundEngine(agg)
    started = threading.Event()

    def slow(m: Message) -> Pong:
        started.set()
        time.sleep(1.5)  # the broker restarts while the gateway computes its reply
        return Pong(m.body.payload)

    gateway(mosquitto, "gw-1")
    gateway(mosquitto, "gw-2", slow)
    restarter = threading.Thread(target=lambda: (started.wait(10), mosquitto.restart(kill=kill)))
    restarter.start()
    result = engine.run_round("job", 1, Ping(b"payload"), ["gw-1", "gw-2"], deadline_s=30)
    restarter.join()
    assert result.answered == ["gw-1", "gw-2"] and result.replies["gw-2"].body.payload == b"payload"
    assert agg.connections >= 2  # it really reconnected
    agg.close()


@pytest.mark.parametrize("protocol", [5, 4])
def test_request_sent_while_offline_arrives_on_reconnect(mosquitto: MosquittoBroker, protocol: int) -> None:
    first = gateway(mosquitto, "gw-1", protocol=protocol)  # creates the persistent session
    first.transport.close()
    agg = transport(mosquitto, "aggregator")
    request = Message.create(Ping(b"while you were away"), sender="aggregator", job="j", round=7)
    agg.publish(LAYOUT.inbox("gw-1"), request)
    assert agg.flush(5)
    replies: list[Message] = []
    agg.subscribe(LAYOUT.outbox("gw-1"), lambda _t, m: replies.append(m))
    time.sleep(0.2)
    second = gateway(mosquitto, "gw-1", protocol=protocol)
    assert wait_until(lambda: len(replies) == 1)
    assert replies[0].envelope.reply_to == request.envelope.msg_id and replies[0].body.payload == b"while you were away"
    second.transport.close()
    agg.close()


def test_presence_status_and_last_will(mosquitto: MosquittoBroker, tmp_path) -> None:
    agg = transport(mosquitto, "aggregator")
    statuses: list[tuple[str, bool]] = []
    agg.subscribe(LAYOUT.all_statuses, lambda _t, m: statuses.append((m.sender, m.body.online)))
    script = (
        "import sys, time\n"
        "from shared.transport.mqtt import MqttConfig, MqttTransport\n"
        f"t = MqttTransport('gw-3', MqttConfig(port={mosquitto.port}, username='gw-3', "
        f"password='{PASSWORDS['gw-3']}'))\n"
        "t.connect(); print('up', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=os.getcwd())
    try:
        assert proc.stdout.readline().strip() == b"up"
        assert wait_until(lambda: ("gw-3", True) in statuses)
        proc.send_signal(signal.SIGKILL)  # no goodbye: the broker publishes the last will
        proc.wait()
        assert wait_until(lambda: statuses[-1] == ("gw-3", False), timeout_s=10)
    finally:
        proc.kill()
    # retained: a newcomer learns the last known presence at once (the first connection closes
    # first: the newcomer has the same client id, and two would take the session from each other)
    agg.close()
    late = transport(mosquitto, "aggregator")
    late_seen: list[tuple[str, bool]] = []
    late.subscribe(LAYOUT.status("gw-3"), lambda _t, m: late_seen.append((m.sender, m.body.online)))
    assert wait_until(lambda: late_seen == [("gw-3", False)])
    late.close()


def test_payload_limit_is_enforced_before_publish(mosquitto: MosquittoBroker) -> None:
    agg = transport(mosquitto, "aggregator", max_payload=2048)
    sizes: list[int] = []
    real = agg._publish_payload
    agg._publish_payload = lambda topic, payload, retain: (sizes.append(len(payload)), real(topic, payload, retain))
    with pytest.raises(PayloadTooLarge, match="retained"):
        agg.publish(LAYOUT.fleet("models"), Message.create(Ping(b"x" * 5000), sender="aggregator"), retain=True)
    assert sizes == []
    agg.publish(LAYOUT.inbox("gw-1"), Message.create(Ping(b"x" * 5000), sender="aggregator"))
    assert len(sizes) >= 3 and max(sizes) <= 2048
    with pytest.raises(PayloadTooLarge):
        agg._publish_payload(LAYOUT.inbox("gw-1"), b"x" * 2049, False)  # the last line of defence
    assert agg.flush(5)


def test_tls_client_certificate_cn_is_the_identity(tmp_path) -> None:
    certs = certificate_dir(tmp_path / "certs", "gw-1")
    ca = str(certs / "ca.crt")
    with MosquittoBroker(tmp_path / "tls-broker", tls_cert_dir=certs) as broker:

        def tls_transport(name: str, cn: str | None) -> MqttTransport:
            tls = TlsConfig(ca, str(certs / f"{cn}.crt"), str(certs / f"{cn}.key")) if cn else TlsConfig(ca)
            t = MqttTransport(name, MqttConfig(host="localhost", port=broker.port, tls=tls))
            _OPEN.append(t)
            return t

        agg = tls_transport("aggregator", "aggregator")
        agg.connect()
        engine = RoundEngine(agg)
        d = Dispatcher(tls_transport("gw-1", "gw-1"))
        d.register(Ping, lambda m: Pong(m.body.payload))
        d.start()
        d.transport.connect()  # returns once its inbox subscription is acknowledged: no sleep needed
        assert engine.run_round("job", 1, Ping(b"tls"), ["gw-1"], deadline_s=10).answered == ["gw-1"]
        # the CN confines it like a username: no publishing as gw-2
        d.transport.publish(LAYOUT.outbox("gw-2"), Message.create(Pong(), sender="gw-2"))
        assert wait_until(lambda: d.transport.denied == 1)
        # no certificate, no connection
        with pytest.raises(ConnectionError):
            tls_transport("gw-2", None).connect(timeout_s=2)


def test_the_client_refuses_a_tls_1_2_server(tmp_path) -> None:
    """The broker takes TLS 1.3 only; the client must too, or a server (or a man in the middle)
    offering 1.2 gets the gateway's certificate -- its name -- in clear."""
    certs = certificate_dir(tmp_path / "certs", "gw-1")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.maximum_version = ssl.TLSVersion.TLSv1_2
    server.load_cert_chain(certs / "broker.crt", certs / "broker.key")
    handshakes: list[str] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.2)

        def serve() -> None:
            while not done.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                with conn:
                    try:
                        with server.wrap_socket(conn, server_side=True) as tls:
                            handshakes.append(tls.version())
                    except (ssl.SSLError, OSError) as exc:
                        handshakes.append(type(exc).__name__)

        done = threading.Event()
        thread = threading.Thread(target=serve)
        thread.start()
        try:
            tls = TlsConfig(str(certs / "ca.crt"), str(certs / "gw-1.crt"), str(certs / "gw-1.key"))
            client = MqttTransport("gw-1", MqttConfig(host="localhost", port=listener.getsockname()[1], tls=tls))
            with pytest.raises(ConnectionError, match="TLSV1_ALERT_PROTOCOL_VERSION|UNSUPPORTED_PROTOCOL|version"):
                client.connect(timeout_s=2)
        finally:
            done.set()
            thread.join()
    assert handshakes and "TLSv1.2" not in handshakes, handshakes


class DelayedSubscribe:
    """Holds every SUBSCRIBE a paho client queues for ``delay_s`` -- a broker slow to take it --
    while CONNECT, PUBLISH and the rest go out at once."""

    def __init__(self, transport: MqttTransport, delay_s: float) -> None:
        client = transport._client
        real = client._packet_queue  # paho's one way onto the socket

        def queue(command, packet, mid, qos, *args):
            if command & 0xF0 == SUBSCRIBE:
                later = threading.Timer(delay_s, real, (command, packet, mid, qos, *args))
                later.daemon = True
                later.start()
                return MQTTErrorCode.MQTT_ERR_SUCCESS
            return real(command, packet, mid, qos, *args)

        client._packet_queue = queue


def echo_gateway(broker: MosquittoBroker, **kw) -> Dispatcher:
    """gw-1 answering pings, without presence, not connected, with no session kept after it closes."""
    d = Dispatcher(transport(broker, "gw-1", connect=False, presence=False, session_expiry_s=0, **kw))
    d.register(Ping, lambda m: Pong(m.body.payload))
    d.start()
    return d


def test_connect_returns_only_once_the_subscriptions_are_acknowledged(mosquitto: MosquittoBroker) -> None:
    agg = transport(mosquitto, "aggregator")
    replies: list[Message] = []
    agg.subscribe(LAYOUT.outbox("gw-1"), lambda _t, m: replies.append(m))
    gw = echo_gateway(mosquitto)
    DelayedSubscribe(gw.transport, 0.5)
    gw.transport.connect(timeout_s=5)
    agg.publish(LAYOUT.inbox("gw-1"), Message.create(Ping(b"right away"), sender="aggregator"))
    # before: connect returned at CONNACK and the broker dropped the request (nobody subscribed yet)
    assert wait_until(lambda: len(replies) == 1, timeout_s=3), "the request beat the subscription"
    gw.transport.close(timeout_s=1)

    slow = echo_gateway(mosquitto)
    DelayedSubscribe(slow.transport, 3.0)
    started = time.monotonic()
    with pytest.raises(ConnectionError, match=r"no SUBACK for \d+ subscriptions"):
        slow.transport.connect(timeout_s=1)
    assert time.monotonic() - started < 2.5  # the same timeout covers CONNACK and SUBACKs


def test_a_request_sent_right_after_connect_is_answered_every_time(mosquitto: MosquittoBroker) -> None:
    agg = transport(mosquitto, "aggregator")
    replies: list[bytes] = []
    agg.subscribe(LAYOUT.outbox("gw-1"), lambda _t, m: replies.append(m.body.payload))
    for loop in range(50):  # a fresh session each time: nothing is queued for gw-1 while it is away
        gw = echo_gateway(mosquitto)
        gw.transport.connect()
        agg.publish(LAYOUT.inbox("gw-1"), Message.create(Ping(b"%d" % loop), sender="aggregator"))
        assert wait_until(lambda: b"%d" % loop in replies, timeout_s=5), f"loop {loop}: the request was lost"
        gw.transport.close(timeout_s=1)
        _OPEN.remove(gw.transport)


def test_nagle_is_off_on_both_ends(mosquitto: MosquittoBroker) -> None:
    """QoS 1 PUBACKs followed by a PUBLISH stall 40 ms on a delayed ACK when Nagle is on."""
    import socket

    agg = transport(mosquitto, "aggregator")
    sock = agg._client.socket()
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    assert "set_tcp_nodelay true" in mosquitto.config_path.read_text()
    agg.close()


def test_stalled_chunked_transfer_is_freed_without_further_traffic() -> None:
    from shared.protocol.chunking import split_payload
    from shared.protocol.envelope import encode_message

    t = MqttTransport("gw-1", MqttConfig(port=1))  # never connected: only the dispatch thread runs
    t._reassembler.timeout_s = 0.2
    big = encode_message(Message.create(Ping(b"x" * 10_000), sender="aggregator"))
    first = split_payload(big, sender="aggregator", max_payload=2048)[0]
    t._receive_payload(LAYOUT.inbox("gw-1"), encode_message(first))
    assert t.pending_chunked_transfers == 1
    assert wait_until(lambda: t.pending_chunked_transfers == 0, timeout_s=5)
    t.close(timeout_s=1)


def test_hostile_body_values_never_kill_the_receive_thread(mosquitto: MosquittoBroker) -> None:
    """A typed array where a Literal is expected used to raise numpy's ValueError in the decoder."""
    import cbor2
    import numpy as np

    from shared.protocol.codec import dumps_value

    agg = transport(mosquitto, "aggregator")
    engine = RoundEngine(agg)
    gateway(mosquitto, "gw-2")
    evil = transport(mosquitto, "gw-1", presence=False)
    announcement = Message.create(ModelAnnouncement("m", 1, "x", "fs", b"\x00" * 32, 1), sender="gw-1")
    wire = cbor2.loads(encode_message(announcement))
    wire["body"]["kind"] = np.array([1, 2], np.int8)
    evil.send_payloads(LAYOUT.outbox("gw-1"), [dumps_value(wire)])
    assert wait_until(lambda: sum(agg.stats.rejected.values()) == 1)
    assert engine.run_round("job", 1, Ping(b"still alive"), ["gw-2"], deadline_s=10).answered == ["gw-2"]
