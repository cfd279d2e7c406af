"""The fleet on a two-node RabbitMQ cluster on loopback (the MQTT plugin, MQTT 3.1.1): the
aggregator on the first node, gw-1 and gw-3 on the second, gw-2 and gw-4 on the first, so every
round crosses the nodes. The end-to-end tests of ``tests/e2e`` run unchanged on it (imported
below; ``fleet`` comes from ``conftest.py``), among them a gateway killed mid-training, whose
last will is published on its node and reaches the aggregator on the other; a signed model
pushed across the nodes predicts the replayed recording on the gateway exactly as offline; and
retained statuses behave as RabbitMQ 3.10 documents (exact topic filters only, on the node that
received them). ``test_rabbitmq_fleet.py`` runs the trainings on one node."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

import aggregator
from aggregator.algorithms import FedSCSXGB
from aggregator.deployment import deploy
from aggregator.fleet import Presence
from aggregator.registry import Registry
from aggregator.rounds import RoundEngine
from edge_client.store import WindowRecord, WindowStore
from firmware_bridge.recording import Recording
from shared.protocol.messages.deployment import PredictionBatch
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.signing import SigningKey
from shared.transport.mqtt import MqttConfig, MqttTransport
from tests.brokers.broker_support import forget_sessions, running_rabbitmq
from tests.e2e.fleet_support import PASSWORDS
from tests.e2e.test_fedforest_mqtt import test_private_forest_over_mqtt_equals_the_simulation  # noqa: F401
from tests.e2e.test_fedscs_xgb_mqtt import (  # noqa: F401
    test_a_gateway_killed_mid_training_is_dropped_and_rejoins,
    test_mqtt_training_with_gateway_processes_equals_the_simulation,
)
from tests.e2e.test_model_push import (
    assert_live_equals_offline,
    recording_and_clients,
    replay_into_gateway,
    start_gateway,
    stop,
    wait_for_live_predictions,
)
from tests.rabbitmq_support import RabbitMQCluster

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory):
    yield from running_rabbitmq(tmp_path_factory, n_nodes=2)


MQTT_3_1_1 = ("--protocol", "4")


def aggregator_connection(broker: RabbitMQCluster) -> MqttTransport:
    agg = MqttTransport(
        AGGREGATOR_ID,
        MqttConfig(
            port=broker.port_for(AGGREGATOR_ID), username=AGGREGATOR_ID, password=PASSWORDS[AGGREGATOR_ID], protocol=4
        ),
        presence=False,
    )
    agg.connect()
    return agg


def test_a_model_pushed_through_rabbitmq_predicts_live_on_the_gateway(
    rabbitmq: RabbitMQCluster, tmp_path: Path
) -> None:
    """As ``tests/e2e/test_model_push.py`` (whose gateway helpers it uses): trained on a real
    recording, signed, pushed from the aggregator's node to gw-1 on the other node,
    activated; the replayed recording is recognised live, the predictions reach the aggregator,
    and they equal the same model's offline predictions of the same windows."""
    assert rabbitmq.node_of("gw-1") != rabbitmq.node_of(AGGREGATOR_ID)
    forget_sessions(rabbitmq)
    recording_path, batch, clients = recording_and_clients(tmp_path)
    recording = Recording.load(recording_path)
    fsv = batch.feature_set_version
    model = aggregator.simulate(
        FedSCSXGB(n_rounds=3, n_bins=32, feature_set_version=fsv, secure_aggregation=False), clients
    )
    key = SigningKey.generate()
    key.verify_key.save(tmp_path / "aggregator.pub")
    registry = Registry(tmp_path / "registry.db")
    registry.add("activity", model)
    with WindowStore(tmp_path / "gw-1.db") as store:  # a gateway that has run before knows its feature set
        store.add(WindowRecord("earlier", 0, 1, batch.X[0], fsv))

    port, password = rabbitmq.port_for("gw-1"), PASSWORDS["gw-1"]
    agg = aggregator_connection(rabbitmq)
    received: list[PredictionBatch] = []
    lock = threading.Lock()

    def on_outbox(_topic, message) -> None:
        if isinstance(message.body, PredictionBatch):
            with lock:
                received.append(message.body)

    gateway = None
    try:
        presence = Presence(agg, TopicLayout())
        agg.subscribe(TopicLayout().all_outboxes, on_outbox)
        gateway = start_gateway(tmp_path, port, password, *MQTT_3_1_1)
        presence.wait(["gw-1"], online=True, timeout_s=60)
        result = deploy(RoundEngine(agg), registry, key, "activity", 1, ["gw-1"])
        assert result.active == ["gw-1"] and result.statuses["gw-1"].active_version == 1
        stop(gateway)
        out = replay_into_gateway(tmp_path, recording, port, password, len(batch.X), *MQTT_3_1_1)
        assert "model=activity:v1" in out
        wait_for_live_predictions(received, lock, len(batch.X), 1)
    finally:
        if gateway is not None:
            gateway.kill()
        agg.close()

    assert_live_equals_offline(tmp_path / "gw-1.db", recording.metadata.session_id, fsv, model, len(batch.X))


def retained_seen(port: int, *topic_filters: str, wait_s: float = 1.5) -> list[list[str]]:
    """Per filter, subscribed one after the other on one fresh connection (as the aggregator): the
    topics of the retained messages that arrived within ``wait_s`` of the subscription's SUBACK."""
    seen: list[list[str]] = []
    acked = threading.Event()
    client = paho.Client(
        CallbackAPIVersion.VERSION2, client_id=AGGREGATOR_ID, clean_session=True, protocol=MQTTProtocolVersion.MQTTv311
    )
    client.username_pw_set(AGGREGATOR_ID, PASSWORDS[AGGREGATOR_ID])
    client.on_message = lambda _c, _u, msg: seen[-1].append(msg.topic) if msg.retain else None
    client.on_subscribe = lambda *_args: acked.set()
    client.connect("127.0.0.1", port, keepalive=10)
    client.loop_start()
    try:
        for topic_filter in topic_filters:
            acked.clear()
            seen.append([])
            client.subscribe(topic_filter, qos=1)
            assert acked.wait(10), f"no SUBACK for {topic_filter}"
            time.sleep(wait_s)
        return seen
    finally:
        client.disconnect()
        client.loop_stop()


def test_retained_status_reaches_exact_topic_filters_on_the_publishers_node_only(rabbitmq: RabbitMQCluster) -> None:
    """RabbitMQ 3.10 (rabbitmq.com/mqtt.html, "Retained Messages and Stores"): a retained message
    is stored on the node that received it and sent only to subscriptions whose filter is the
    exact topic. So the aggregator's ``c/+/status`` gets no retained status (mosquitto sends
    them all): it learns who is online from the gateways' live status re-publications
    (``--publish-every``), which cross the cluster like every other message."""
    forget_sessions(rabbitmq)
    layout = TopicLayout()
    gw = MqttTransport(
        "gw-1", MqttConfig(port=rabbitmq.port_for("gw-1"), username="gw-1", password=PASSWORDS["gw-1"], protocol=4)
    )
    gw.connect()  # publishes its retained online status
    try:
        assert gw.flush(10)
        own_node = rabbitmq.port_for("gw-1")
        # the wildcard gets nothing; the exact topic, asked next on the same connection, gets it
        assert retained_seen(own_node, layout.all_statuses, layout.status("gw-1")) == [[], [layout.status("gw-1")]]
        for node in rabbitmq.nodes:
            if node.mqtt_port != own_node:  # another node of the cluster holds no copy
                assert retained_seen(node.mqtt_port, layout.status("gw-1")) == [[]]
    finally:
        gw.close()
