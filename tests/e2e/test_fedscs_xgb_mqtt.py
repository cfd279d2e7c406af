"""FedSCS-XGB over mosquitto with real ``wheelfed gateway`` processes, each with its own labelled
window store: the model equals the in-memory simulation's on the same data and seed; a gateway
killed mid-training is dropped from its rounds (quorum), rejoins after a restart with the whole
model, and no reply ever reports a tree count other than the model's (no tree applied twice)."""

from __future__ import annotations

import time

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedSCSXGB
from aggregator.fleet import train_on_fleet
from aggregator.jobs import JobSettings
from tests.e2e.fleet_support import FEATURE_SET, GATEWAYS, client_data

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

def test_mqtt_training_with_gateway_processes_equals_the_simulation(fleet) -> None:
    config = FedSCSXGB(n_rounds=4, max_depth=3, n_bins=32, feature_set_version=FEATURE_SET)
    model, job = train_on_fleet(config, fleet.agg, clients=GATEWAYS, seed=5, settings=JobSettings(deadline_s=60))
    simulated = aggregator.simulate(config, client_data(fleet.stores, 0.2), seed=5)
    assert model == simulated  # bit-identical: trees, leaves, base score, classes, metadata
    assert model.classes == ("lie", "push", "sit") and model.n_trees == 12
    assert not job.rejected and all(len(r.replies) == 4 for r in job.results)


def test_a_gateway_killed_mid_training_is_dropped_and_rejoins(fleet) -> None:
    """The paper's protocol: a restarted gateway gets the whole model and answers again."""
    answered: list[int] = []

    def on_round(progress) -> None:
        answered.append(progress.answered)
        if progress.step == 2:
            fleet.processes.kill("gw-4")  # SIGKILL: its last will marks it offline
        if progress.step == 4:
            fleet.restart("gw-4")

    config = FedSCSXGB(n_rounds=7, max_depth=3, n_bins=32, feature_set_version=FEATURE_SET, protocol="atoms")
    started = time.monotonic()
    model, job = train_on_fleet(config, fleet.agg, clients=GATEWAYS, seed=1,
                                settings=JobSettings(deadline_s=4, min_fraction=0.5), progress=on_round)
    assert model.n_trees == 21
    assert answered[:2] == [4, 4] and 3 in answered[2:4]
    assert answered[-1] == 4  # back, with the whole model (its restart lost its margins)
    assert not job.rejected  # every reply's tree count matched the model's: nothing applied twice
    assert time.monotonic() - started < 120
    X = np.concatenate([c.X for c in client_data(fleet.stores, 0.2)])
    assert set(model.predict(X.astype(np.float32))) <= {"lie", "push", "sit"}


def test_private_training_goes_on_when_a_gateway_is_killed(fleet) -> None:
    """Secure aggregation over real gateway processes: gw-4 is SIGKILLed after round 2 and
    restarted after round 4. Its masks of the open round are removed with its neighbours' shares;
    restarted, it holds no keys for the job (it answers ``resync``) and stays out until the next
    job -- the model is trained by the other three, on fleet sums only."""
    answered: list[int] = []

    def on_round(progress) -> None:
        answered.append(progress.answered)
        if progress.step == 2:
            fleet.processes.kill("gw-4")
        if progress.step == 4:
            fleet.restart("gw-4")

    config = FedSCSXGB(n_rounds=6, max_depth=3, n_bins=32, feature_set_version=FEATURE_SET)
    model, job = train_on_fleet(config, fleet.agg, clients=GATEWAYS, seed=1,
                                settings=JobSettings(deadline_s=4, min_fraction=0.5), progress=on_round)
    assert config.secure_aggregation and model.n_trees == 18
    assert answered[:2] == [4, 4] and answered[2:] == [3, 3, 3, 3]
    types = {r.request_type for r in job.results}
    assert {"secagg.keys", "secagg.unmask", "fedscs_xgb.histograms"} <= types
