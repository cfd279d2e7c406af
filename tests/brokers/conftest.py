"""Fixtures for the fleet tests on RabbitMQ's MQTT plugin.

Each test module defines a module-scoped ``rabbitmq`` fixture (one node, or a cluster; started
once, as RabbitMQ takes seconds to boot) with ``broker_support.running_rabbitmq``; ``fleet`` here
is then the fixture of ``tests/e2e`` -- four gateway processes with prefilled stores -- on that
broker, so the existing end-to-end tests run unchanged against it (the test modules import them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.brokers.broker_support import STATUS_EVERY_S, forget_sessions
from tests.e2e.fleet_support import start_fleet
from tests.rabbitmq_support import RabbitMQCluster


@pytest.fixture
def fleet(rabbitmq: RabbitMQCluster, tmp_path: Path):
    forget_sessions(rabbitmq)
    with start_fleet(
        tmp_path, "--holdout-fraction", "0.2", "--publish-every", str(STATUS_EVERY_S), broker=rabbitmq
    ) as running:
        yield running
