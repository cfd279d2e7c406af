"""The fleet's RabbitMQ for the tests of ``tests/brokers``: a module-scoped fixture's broker with
the users of ``tests/e2e/fleet_support.py`` (and certificates for them), and the reset between
tests that share it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aggregator.broker import BrokerUser
from tests.deploy.certs_support import certificate_dir
from tests.e2e.fleet_support import GATEWAYS, PASSWORDS
from tests.rabbitmq_support import RabbitMQCluster, forget_session, rabbitmq_available

#: Seconds between a gateway's status re-publications (``--publish-every``). RabbitMQ 3.10 sends
#: no retained message to a wildcard subscription (``c/+/status``), so an aggregator that starts
#: listening learns who is online from these live re-publications, not from the retained status:
#: they must come faster than its discovery wait (``train_on_fleet(discover_s=2)``).
STATUS_EVERY_S = 0.5


def running_rabbitmq(
    tmp_path_factory: pytest.TempPathFactory, n_nodes: int, *, tls: bool = False
) -> Iterator[RabbitMQCluster]:
    """RabbitMQ with the fleet's users (``PASSWORDS``), for a module-scoped fixture; with ``tls``
    also a mutual-TLS listener per node, with ``deploy/certs``' certificates for the fleet's users
    in ``cluster.tls_cert_dir``."""
    if not rabbitmq_available():
        pytest.fail(
            "rabbitmq-server is not installed: the test command installs it "
            "(`apt-get install -y --no-install-recommends rabbitmq-server`)"
        )
    run_dir = tmp_path_factory.mktemp(f"rabbitmq-{n_nodes}")
    certs = certificate_dir(run_dir / "certs", *GATEWAYS) if tls else None
    with RabbitMQCluster(
        run_dir / "broker", [BrokerUser(n, p) for n, p in PASSWORDS.items()], n_nodes=n_nodes, tls_cert_dir=certs
    ) as cluster:
        yield cluster


def forget_sessions(broker: RabbitMQCluster) -> None:
    """Discard every user's persistent session, so a test does not receive requests or replies
    queued for the previous test's clients (mosquitto fixtures start a fresh broker instead)."""
    for user in broker.users:
        forget_session(broker.port_for(user.name), user)
