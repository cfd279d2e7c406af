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
