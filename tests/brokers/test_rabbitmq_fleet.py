"""The fleet on one RabbitMQ node (its MQTT plugin, MQTT 3.1.1): FedSCS-XGB and FedForest, both in
their private defaults, trained by four gateway processes give the simulation's model bit for bit
-- the tests of ``tests/e2e``, imported unchanged (``fleet`` comes from ``conftest.py``); and a
gateway can neither read another's inbox nor take its session, as under the mosquitto ACL; and
on the mutual-TLS listener a gateway logs in with its certificate alone (CN = username), as with
``deploy/cloud/brokers/rabbitmq/rabbitmq.conf``.
``test_rabbitmq_cluster.py`` runs them, and more, on a two-node cluster."""

from __future__ import annotations

import threading
import time

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

from aggregator.fleet import Presence
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport, TlsConfig
from tests.brokers.broker_support import forget_sessions, running_rabbitmq
from tests.e2e.fleet_support import PASSWORDS
from tests.e2e.test_fedforest_mqtt import test_private_forest_over_mqtt_equals_the_simulation  # noqa: F401
from tests.e2e.test_fedscs_xgb_mqtt import test_mqtt_training_with_gateway_processes_equals_the_simulation  # noqa: F401
from tests.rabbitmq_support import RabbitMQCluster

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory):
    yield from running_rabbitmq(tmp_path_factory, n_nodes=1, tls=True)


def subscription_outcome(port: int, user: str, client_id: str, topic_filter: str) -> str:
    """Log in as ``user`` with ``client_id`` (a persistent session) and subscribe: "granted", or
    "closed" (RabbitMQ answers a denial in MQTT 3.1.1 by closing the connection)."""
    outcome: list[str] = []
    done = threading.Event()
    client = paho.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=False,
        protocol=MQTTProtocolVersion.MQTTv311,
        reconnect_on_failure=False,
    )
    client.username_pw_set(user, PASSWORDS[user])
    client.on_connect = lambda c, _u, _f, reason, _p: None if reason.is_failure else c.subscribe(topic_filter, qos=1)

    def on_subscribe(_c, _u, _mid, codes, _p) -> None:
        outcome.append("granted" if not codes[0].is_failure else "refused")
        done.set()

    def on_disconnect(*_args) -> None:
        outcome.append("closed")
        done.set()

    client.on_subscribe, client.on_disconnect = on_subscribe, on_disconnect
    client.connect("127.0.0.1", port, keepalive=10)
    client.loop_start()
    try:
        assert done.wait(10), f"no answer to {user} subscribing to {topic_filter}"
        return outcome[0]
    finally:
        client.disconnect()
        client.loop_stop()


def test_a_gateway_can_neither_read_another_gateways_inbox_nor_take_its_session(rabbitmq: RabbitMQCluster) -> None:
    """The isolation of ``deploy/mosquitto/acl`` under RabbitMQ's rights (``definitions``): gw-1
    may subscribe to its own inbox; subscribing to gw-2's is refused (the connection is closed);
    logged in as gw-1 but calling itself gw-2 -- mosquitto forces the client id to the username --
    it cannot open gw-2's session queue, so the requests queued for gw-2 stay gw-2's."""
    forget_sessions(rabbitmq)
    layout = TopicLayout()
    port = rabbitmq.port_for("gw-1")
    assert subscription_outcome(port, "gw-1", "gw-1", layout.inbox("gw-1")) == "granted"
    assert subscription_outcome(port, "gw-1", "gw-1", layout.inbox("gw-2")) == "closed"
    assert subscription_outcome(port, "gw-1", "gw-2", layout.inbox("gw-1")) == "closed"
    assert subscription_outcome(port, "gw-2", "gw-2", layout.inbox("gw-2")) == "granted"


def test_another_user_taking_a_gateways_client_id_disconnects_it(rabbitmq: RabbitMQCluster) -> None:
    """What RabbitMQ does not prevent (documented in deploy/cloud/brokers/rabbitmq/README.md):
    client ids are unique in the cluster whoever logs in with them, so gw-1 connecting as client id
    gw-2 closes gw-2's connection (mosquitto's ``use_username_as_clientid`` makes it gw-1's own)."""
    forget_sessions(rabbitmq)
    gw2 = MqttTransport(
        "gw-2",
        MqttConfig(
            port=rabbitmq.port_for("gw-2"),
            username="gw-2",
            password=PASSWORDS["gw-2"],
            protocol=4,
            reconnect_min_s=60,
            reconnect_max_s=60,
        ),
    )
    gw2.connect()
    try:
        intruder = paho.Client(CallbackAPIVersion.VERSION2, client_id="gw-2", protocol=MQTTProtocolVersion.MQTTv311)
        intruder.username_pw_set("gw-1", PASSWORDS["gw-1"])
        intruder.connect("127.0.0.1", rabbitmq.port_for("gw-1"), keepalive=10)
        intruder.loop_start()
        deadline = time.monotonic() + 10
        while gw2.is_connected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not gw2.is_connected
        intruder.disconnect()
        intruder.loop_stop()
    finally:
        gw2.close()


def test_a_gateway_logs_in_with_its_certificate_alone(rabbitmq: RabbitMQCluster) -> None:
    """Certificate login (``mqtt.ssl_cert_login``, CN = username, from ``deploy/certs``): gw-1
    connects over TLS 1.3 without a password and its status, published under gw-1's rights,
    reaches the aggregator on the password listener; without a client certificate the TLS
    handshake is refused."""
    forget_sessions(rabbitmq)
    certs = rabbitmq.tls_cert_dir
    port = rabbitmq.node_of("gw-1").mqtt_tls_port
    agg = MqttTransport(
        AGGREGATOR_ID,
        MqttConfig(
            port=rabbitmq.port_for(AGGREGATOR_ID), username=AGGREGATOR_ID, password=PASSWORDS[AGGREGATOR_ID], protocol=4
        ),
        presence=False,
    )
    agg.connect()
    presence = Presence(agg, TopicLayout())
    tls = TlsConfig(str(certs / "ca.crt"), str(certs / "gw-1.crt"), str(certs / "gw-1.key"))
    gw = MqttTransport("gw-1", MqttConfig(port=port, protocol=4, tls=tls))
    try:
        gw.connect()
        presence.wait(["gw-1"], online=True, timeout_s=30)
        anonymous = MqttTransport("gw-1", MqttConfig(port=port, protocol=4, tls=TlsConfig(str(certs / "ca.crt"))))
        with pytest.raises(ConnectionError):
            anonymous.connect(timeout_s=2)
    finally:
        gw.close()
        agg.close()
