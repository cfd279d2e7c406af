"""A gateway cannot take over another gateway's MQTT session on the password listener.

Without ``use_username_as_clientid`` mosquitto keys sessions by the client id the client chooses,
so gw-1, logging in with its own valid password but client id gw-2, disconnected gw-2 (both then
reconnect and kick each other off in turn) and took over gw-2's persistent session, losing the
QoS 1 messages queued for gw-2 while it was offline (a model push, say). With the option the
broker replaces the client id by the authenticated username: the impostor gets gw-1's session.
"""

from __future__ import annotations

import time

import pytest

from aggregator.broker import MosquittoBroker
from shared.protocol.envelope import Message
from shared.protocol.messages import Ping
from shared.protocol.topics import TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport
from tests.conftest import PASSWORDS
from tests.shared.transport.test_mqtt import wait_until

pytestmark = pytest.mark.mosquitto
LAYOUT = TopicLayout()


@pytest.fixture
def clients():
    """Make transports (reconnecting after 1 s) that are all closed at teardown."""
    made: list[MqttTransport] = []

    def make(broker: MosquittoBroker, client_id: str, *, as_user: str | None = None) -> MqttTransport:
        user = as_user or client_id
        config = MqttConfig(
            port=broker.port, username=user, password=PASSWORDS[user], reconnect_min_s=1, reconnect_max_s=1
        )
        made.append(MqttTransport(client_id, config, presence=False))
        return made[-1]

    yield make
    for t in made:
        t.close(timeout_s=1)


def test_own_credentials_with_another_client_id_do_not_kick_the_other_off(mosquitto, clients) -> None:
    """The flapping of the issue: two clients on one client id disconnect each other in turn."""
    victim = clients(mosquitto, "gw-2")
    victim.connect()
    impostor = clients(mosquitto, "gw-2", as_user="gw-1")
    impostor.connect()
    time.sleep(3)  # long enough for several rounds of kicking off and reconnecting (1 s backoff)
    assert (victim.connections, impostor.connections) == (1, 1), "they kicked each other off"
    assert victim.is_connected and impostor.is_connected


def test_own_credentials_with_another_client_id_cannot_take_its_queued_messages(mosquitto, clients) -> None:
    """A QoS 1 message queued for offline gw-2 survives gw-1 connecting as gw-2, and reaches gw-2."""
    received: list[Message] = []
    first = clients(mosquitto, "gw-2")
    first.subscribe(LAYOUT.inbox("gw-2"), lambda _t, m: received.append(m))
    first.connect()  # creates gw-2's persistent session with its inbox subscription
    first.close()

    aggregator = clients(mosquitto, "aggregator")
    aggregator.connect()
    aggregator.publish(LAYOUT.inbox("gw-2"), Message.create(Ping(b"model push"), sender="aggregator"))
    assert aggregator.flush(5)

    stolen: list[Message] = []
    impostor = clients(mosquitto, "gw-2", as_user="gw-1")
    impostor.subscribe(LAYOUT.inbox("gw-2"), lambda _t, m: stolen.append(m))
    impostor.connect()
    time.sleep(0.5)  # a taken-over session would deliver (or drop) the queued message now
    impostor.close()

    back = clients(mosquitto, "gw-2")
    back.subscribe(LAYOUT.inbox("gw-2"), lambda _t, m: received.append(m))
    back.connect()
    assert wait_until(lambda: len(received) == 1, timeout_s=5), "gw-2's queued message was lost"
    assert received[0].body == Ping(b"model push") and stolen == []
