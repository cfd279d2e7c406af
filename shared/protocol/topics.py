"""MQTT topic layout, namespaced per client so a broker ACL can confine each gateway::

    {prefix}/c/{client}/in      aggregator -> one gateway (requests)        gateway: read
    {prefix}/c/{client}/out     one gateway -> aggregator (replies, events) gateway: write
    {prefix}/c/{client}/status  retained presence + last will               gateway: read/write
    {prefix}/fleet/{channel}    aggregator -> every gateway (broadcasts,    gateway: read
                                retained model announcements)

Clients live one level below ``c/`` so that no client id, whatever it is, can name a fleet
topic: an account called "fleet" gets ``{prefix}/c/fleet/...`` like any other.

The aggregator reads and writes everything below the prefix. ``deploy/mosquitto/acl`` encodes
exactly these rules for mosquitto (username = client id, or the certificate CN under TLS), and
``may_publish`` / ``may_subscribe`` encode them for the in-memory broker, so simulations obey
the same confinement as the real fleet.
"""

from __future__ import annotations

from dataclasses import dataclass

AGGREGATOR_ID = "aggregator"
FLEET = "fleet"
CLIENTS = "c"


def topic_matches(topic_filter: str, topic: str) -> bool:
    """MQTT filter matching with '+' (one level) and '#' (this level and below)."""
    filter_levels = topic_filter.split("/")
    topic_levels = topic.split("/")
    for i, level in enumerate(filter_levels):
        if level == "#":
            return True
        if i >= len(topic_levels):
            return False
        if level != "+" and level != topic_levels[i]:
            return False
    return len(filter_levels) == len(topic_levels)


@dataclass(frozen=True)
class TopicLayout:
    """Topic names of one WheelFed deployment; ``prefix`` lets several share a broker.

    ``deploy/mosquitto/acl`` hard-codes the default prefix and aggregator id; a test checks
    that it grants exactly what ``may_publish`` / ``may_subscribe`` allow.
    """

    prefix: str = "wheelfed/v1"
    aggregator_id: str = AGGREGATOR_ID

    def _client(self, client_id: str, leaf: str) -> str:
        return f"{self.prefix}/{CLIENTS}/{client_id}/{leaf}"

    def inbox(self, client_id: str) -> str:
        return self._client(client_id, "in")

    def outbox(self, client_id: str) -> str:
        return self._client(client_id, "out")

    def status(self, client_id: str) -> str:
        return self._client(client_id, "status")

    def fleet(self, channel: str) -> str:
        return f"{self.prefix}/{FLEET}/{channel}"

    @property
    def all_outboxes(self) -> str:
        return self._client("+", "out")

    @property
    def all_statuses(self) -> str:
        return self._client("+", "status")

    def client_of(self, topic: str) -> str | None:
        """The client id a per-client topic belongs to, or None for fleet and foreign topics."""
        head = f"{self.prefix}/{CLIENTS}/"
        if not topic.startswith(head):
            return None
        parts = topic[len(head) :].split("/")
        return parts[0] if len(parts) == 2 and parts[0] else None

    def may_publish(self, client_id: str, topic: str) -> bool:
        if client_id == self.aggregator_id:
            return topic.startswith(self.prefix + "/")
        return topic in (self.outbox(client_id), self.status(client_id))

    def may_subscribe(self, client_id: str, topic: str) -> bool:
        """Whether ``client_id`` may receive messages on ``topic`` (checked per delivered topic)."""
        if client_id == self.aggregator_id:
            return topic.startswith(self.prefix + "/")
        return topic in (self.inbox(client_id), self.status(client_id)) or topic.startswith(self.fleet(""))
