"""The ``fleet`` fixture: four gateway processes with prefilled stores behind mosquitto."""

from __future__ import annotations

import pytest

from tests.e2e.fleet_support import start_fleet


@pytest.fixture
def fleet(tmp_path):
    with start_fleet(tmp_path, "--holdout-fraction", "0.2") as running:
        yield running
