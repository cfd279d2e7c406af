"""RabbitMQ's rights for WheelFed (``tests.rabbitmq_support.definitions``) grant exactly what
``TopicLayout.may_publish`` / ``may_subscribe`` (= ``deploy/mosquitto/acl``) grant, topic by
topic; a user's AMQP rights cover its own MQTT session queues only; and the production
``deploy/cloud/brokers/rabbitmq/rabbitmq.conf`` carries the MQTT settings the tests run with."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aggregator.broker import BrokerUser
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from tests.rabbitmq_support import RabbitNode, definitions, render_config

PRODUCTION_CONF = Path(__file__).resolve().parents[2] / "deploy" / "cloud" / "brokers" / "rabbitmq" / "rabbitmq.conf"
CLIENTS = [AGGREGATOR_ID, "gw-1", "gw-2", "gw.3", "fleet"]


def routing_key(topic: str) -> str:
    """The MQTT plugin's translation of a topic into an AMQP routing key: ``/`` and ``.`` swap."""
    return topic.translate(str.maketrans({"/": ".", ".": "/"}))


def topics(layout: TopicLayout) -> list[str]:
    per_client = [f(c) for c in CLIENTS for f in (layout.inbox, layout.outbox, layout.status)]
    return per_client + [layout.fleet("models"), layout.fleet("x/y"), "wheelfed/v2/c/gw-1/in", "other/topic"]


@pytest.mark.parametrize("client", CLIENTS)
def test_topic_permissions_grant_what_the_mosquitto_acl_grants(client: str) -> None:
    layout = TopicLayout()
    defs = definitions([BrokerUser(c, "pw") for c in CLIENTS])
    (rights,) = [t for t in defs["topic_permissions"] if t["user"] == client]
    assert rights["exchange"] == "amq.topic" and rights["vhost"] == "/"
    for topic in topics(layout):
        key = routing_key(topic)
        assert bool(re.match(rights["write"], key)) == layout.may_publish(client, topic), (client, topic)
        assert bool(re.match(rights["read"], key)) == layout.may_subscribe(client, topic), (client, topic)


def test_each_user_may_open_only_its_own_session_queues() -> None:
    defs = definitions([BrokerUser(c, "pw") for c in CLIENTS])
    for rights in defs["permissions"]:
        for other in CLIENTS:
            for queue in (f"mqtt-subscription-{other}qos0", f"mqtt-subscription-{other}qos1"):
                for kind in ("configure", "write", "read"):
                    assert bool(re.match(rights[kind], queue)) == (other == rights["user"]), (rights, queue)
        assert not re.match(rights["configure"], f"mqtt-subscription-{rights['user']}qos1x")
        assert not re.match(rights["configure"], "amq.topic")  # nobody redeclares the exchange
        assert re.match(rights["write"], "amq.topic") and re.match(rights["read"], "amq.topic")


def test_passwords_are_stored_hashed_only() -> None:
    defs = definitions([BrokerUser("gw-1", "secret-pw")])
    assert "secret-pw" not in repr(defs)
    assert defs["users"][0]["hashing_algorithm"] == "rabbit_password_hashing_sha256"


def parse_conf(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def test_production_config_has_the_tested_mqtt_and_tls_settings() -> None:
    node = RabbitNode("n@localhost", 1, 2, 3, Path("/x"), 4)
    tested = parse_conf(render_config(node, definitions_file=None, seed=None, tls_cert_dir=Path("/certs")))
    production = parse_conf(PRODUCTION_CONF.read_text())
    shared = {
        k: v
        for k, v in tested.items()
        if not k.startswith(("listeners.", "mqtt.listeners.", "log.")) and not k.endswith("file")
    }
    assert len(shared) >= 12 and "mqtt.ssl_cert_login" in shared
    assert {k: production.get(k) for k in shared} == shared
    assert production["mqtt.allow_anonymous"] == "false" and production["mqtt.listeners.tcp"] == "none"
