"""deploy/mosquitto/acl grants exactly what TopicLayout allows (the in-memory broker's rules)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.protocol.topics import TopicLayout, topic_matches

ACL = Path(__file__).resolve().parents[3] / "deploy" / "mosquitto" / "acl"
LAYOUT = TopicLayout()


def mosquitto_allows(username: str, topic: str, access: str) -> bool:
    """mosquitto's acl_file semantics for the rules we use: user topic lines + pattern lines (%u)."""
    current_user = None
    for raw in ACL.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if words[0] == "user":
            current_user = words[1]
            continue
        kind, rights, pattern = words[0], words[1], words[2]
        if kind == "topic" and current_user != username:
            continue
        if kind == "pattern":
            pattern = pattern.replace("%u", username)
        if (rights == "readwrite" or rights == access) and topic_matches(pattern, topic):
            return True
    return False


CLIENTS = ["aggregator", "gw-1", "gw-2", "fleet"]
TOPICS = sorted(
    {t for c in CLIENTS for t in (LAYOUT.inbox(c), LAYOUT.outbox(c), LAYOUT.status(c))}
    | {LAYOUT.fleet("models"), LAYOUT.fleet("out"), LAYOUT.fleet("in"), "wheelfed/v1/x", "other/topic"}
)


@pytest.mark.parametrize("client", CLIENTS)
def test_acl_file_and_topic_layout_agree(client: str) -> None:
    for topic in TOPICS:
        assert mosquitto_allows(client, topic, "write") == LAYOUT.may_publish(client, topic), (client, topic, "write")
        assert mosquitto_allows(client, topic, "read") == LAYOUT.may_subscribe(client, topic), (client, topic, "read")


def test_a_gateway_can_use_its_own_topics_only() -> None:
    assert LAYOUT.may_publish("gw-1", LAYOUT.outbox("gw-1")) and not LAYOUT.may_publish("gw-1", LAYOUT.outbox("gw-2"))
    assert LAYOUT.may_subscribe("gw-1", LAYOUT.inbox("gw-1")) and not LAYOUT.may_subscribe("gw-1", LAYOUT.inbox("gw-2"))
    assert not LAYOUT.may_publish("gw-1", LAYOUT.fleet("models"))
