"""The fleet on one RabbitMQ node (its MQTT plugin, MQTT 3.1.1): FedSCS-XGB and FedForest, both in
their private defaults, trained by four gateway processes give the simulation's model bit for bit
-- the tests of ``tests/e2e``, imported unchanged (``fleet`` comes from ``conftest.py``).
``test_rabbitmq_cluster.py`` runs them, and more, on a two-node cluster."""

from __future__ import annotations

import pytest

from tests.brokers.conftest import running_rabbitmq
from tests.e2e.test_fedforest_mqtt import test_private_forest_over_mqtt_equals_the_simulation  # noqa: F401
from tests.e2e.test_fedscs_xgb_mqtt import test_mqtt_training_with_gateway_processes_equals_the_simulation  # noqa: F401

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory):
    yield from running_rabbitmq(tmp_path_factory, n_nodes=1)
