"""Mutual TLS with certificates from ``deploy/certs``: the certificate's CN is the client id.

Under ``use_identity_as_username`` alone the CN is the username for the ACL, but the session is
still keyed by the client id the client sends: gw-1's certificate connecting as client id gw-2
kicked gw-2 off and took its persistent session with the QoS 1 messages queued for it.
``use_username_as_clientid`` makes the CN the client id as well.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aggregator.broker import MosquittoBroker
from aggregator.rounds import RoundEngine
from edge_client.dispatcher import Dispatcher
from shared.protocol.envelope import Message
from shared.protocol.messages import Ping, Pong
from shared.protocol.topics import TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport, TlsConfig
from tests.deploy.certs_support import certificate_dir
from tests.shared.transport.test_mqtt import wait_until

pytestmark = pytest.mark.mosquitto
LAYOUT = TopicLayout()


@pytest.fixture
def tls_broker(tmp_path: Path):
    """mosquitto with the TLS config and a certificate folder made by deploy/certs for gw-1, gw-2."""
    certs = certificate_dir(tmp_path / "certs", "gw-1", "gw-2")
    with MosquittoBroker(tmp_path / "broker", tls_cert_dir=certs) as broker:
        yield broker, certs


@pytest.fixture
def clients():
    """Make TLS transports (client id, certificate of ``as_cn``), all closed at teardown."""
    made: list[MqttTransport] = []

    def make(
        broker: MosquittoBroker, certs: Path, client_id: str, *, as_cn: str | None = None, presence: bool = False
    ) -> MqttTransport:
        cn = as_cn or client_id
        tls = TlsConfig(str(certs / "ca.crt"), str(certs / f"{cn}.crt"), str(certs / f"{cn}.key"))
        config = MqttConfig(host="localhost", port=broker.port, tls=tls, reconnect_min_s=1, reconnect_max_s=1)
        made.append(MqttTransport(client_id, config, presence=presence))
        return made[-1]

    yield make
    for t in made:
        t.close(timeout_s=1)


def test_a_round_over_tls_with_the_scripts_certificates(tls_broker, clients) -> None:
    """The script's broker certificate is valid for localhost, its client certificates authenticate."""
    broker, certs = tls_broker
    aggregator = clients(broker, certs, "aggregator")
    aggregator.connect()
    gateway = clients(broker, certs, "gw-1", presence=True)
    dispatcher = Dispatcher(gateway)
    dispatcher.register(Ping, lambda m: Pong(m.body.payload))
    dispatcher.start()
    gateway.connect()
    result = RoundEngine(aggregator).run_round("job", 1, Ping(b"over tls"), ["gw-1"], deadline_s=10)
    assert result.answered == ["gw-1"] and result.replies["gw-1"].body == Pong(b"over tls")


def test_gw1_certificate_with_client_id_gw2_does_not_kick_gw2_off(tls_broker, clients) -> None:
    broker, certs = tls_broker
    victim = clients(broker, certs, "gw-2")
    victim.connect()
    impostor = clients(broker, certs, "gw-2", as_cn="gw-1")
    impostor.connect()
    time.sleep(3)  # long enough for several rounds of kicking off and reconnecting (1 s backoff)
    assert (victim.connections, impostor.connections) == (1, 1), "they kicked each other off"
    assert victim.is_connected and impostor.is_connected


def test_gw1_certificate_with_client_id_gw2_cannot_take_its_queued_messages(tls_broker, clients) -> None:
    broker, certs = tls_broker
    received: list[Message] = []
    first = clients(broker, certs, "gw-2")
    first.subscribe(LAYOUT.inbox("gw-2"), lambda _t, m: received.append(m))
    first.connect()  # gw-2's persistent session with its inbox subscription
    first.close()

    aggregator = clients(broker, certs, "aggregator")
    aggregator.connect()
    aggregator.publish(LAYOUT.inbox("gw-2"), Message.create(Ping(b"model push"), sender="aggregator"))
    assert aggregator.flush(5)

    stolen: list[Message] = []
    impostor = clients(broker, certs, "gw-2", as_cn="gw-1")
    impostor.subscribe(LAYOUT.inbox("gw-2"), lambda _t, m: stolen.append(m))
    impostor.connect()
    time.sleep(0.5)  # a taken-over session would deliver (or drop) the queued message now
    impostor.close()

    back = clients(broker, certs, "gw-2")
    back.subscribe(LAYOUT.inbox("gw-2"), lambda _t, m: received.append(m))
    back.connect()
    assert wait_until(lambda: len(received) == 1, timeout_s=5), "gw-2's queued message was lost"
    assert received[0].body == Ping(b"model push") and stolen == []
