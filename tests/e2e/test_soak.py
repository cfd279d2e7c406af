"""The CI soak: 200 simulated gateways (own MQTT connections and broker accounts, 4 processes)
against one mosquitto and one aggregator, FedSCS-XGB jobs under secure aggregation back to back
for 2 minutes (``benchmarks/bench_soak.py --minutes 30`` is the long run): every reply arrives,
no job fails, and neither the aggregator's nor the broker's memory grows once warm."""

from __future__ import annotations

import os

import pytest

from aggregator.broker import mosquitto_available
from aggregator.loadtest import SoakConfig, run_soak

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

MINUTES = float(os.environ.get("WHEELFED_SOAK_MINUTES", "2"))


def test_two_hundred_gateways_train_back_to_back_without_loss_or_growth() -> None:
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed (the test command installs it)")
    report = run_soak(SoakConfig(gateways=200, processes=4, minutes=MINUTES), progress=lambda line: None)
    assert not report.failed_jobs, report.failed_jobs
    assert report.jobs >= 3 and report.lost_replies == 0, report
    warm, last = report.rss_mb[1], report.rss_mb[-1]
    assert last - warm < 0.15 * warm + 10, f"aggregator memory grew {warm:.0f} -> {last:.0f} MB: {report.rss_mb}"
    warm_broker, last_broker = report.broker_rss_mb[1], report.broker_rss_mb[-1]
    assert last_broker - warm_broker < 0.15 * warm_broker + 5, report.broker_rss_mb


def test_a_connection_that_runs_job_after_job_keeps_no_handlers_of_finished_jobs(mosquitto) -> None:
    """The soak's finding: every ``train_on_fleet`` left a presence listener on the aggregator's
    connection (and a round engine when none was passed), so each status reached all of them."""
    from aggregator.algorithms import FedSCSXGB
    from aggregator.fleet import Presence, train_on_fleet
    from aggregator.jobs import TrainingError
    from aggregator.rounds import RoundEngine
    from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
    from shared.transport.mqtt import MqttConfig, MqttTransport
    from tests.conftest import PASSWORDS

    agg = MqttTransport(
        AGGREGATOR_ID,
        MqttConfig(port=mosquitto.port, username="aggregator", password=PASSWORDS["aggregator"]),
        presence=False,
    )
    agg.connect()
    try:
        engine = RoundEngine(agg)
        before = len(agg._handlers)
        Presence(agg, TopicLayout()).close()
        for _ in range(3):  # no gateway online: each call fails after discovery, as a job would end
            with pytest.raises(TrainingError):
                train_on_fleet(FedSCSXGB(n_rounds=1), agg, engine=engine, discover_s=0.1)
        assert len(agg._handlers) == before
    finally:
        agg.close()
