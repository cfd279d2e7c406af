"""FedForest over mosquitto with real gateway processes: the same forest as the simulation,
evaluated federatedly on the gateways' held-out windows, through ``wheelfed train`` too; a
gateway killed mid-forest is left out of its levels and catches up by replaying the decisions."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedForest
from aggregator.evaluation import evaluate_federated
from aggregator.fleet import PASSWORD_ENV, train_on_fleet
from aggregator.jobs import JobSettings
from shared.model import TreeEnsemble
from tests.e2e.fleet_support import FEATURE_SET, GATEWAYS, PASSWORDS, client_data

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]


def test_mqtt_forest_equals_the_simulation_and_is_evaluated_on_held_out_windows(fleet) -> None:
    config = FedForest(
        n_trees=8,
        max_depth=4,
        n_bins=16,
        min_samples_leaf=3,
        client_splits=True,
        protocol="sketches",
        feature_set_version=FEATURE_SET,
    )
    model, job = train_on_fleet(config, fleet.agg, clients=GATEWAYS, seed=3, settings=JobSettings(deadline_s=60))
    simulated = aggregator.simulate(config, client_data(fleet.stores, 0.2), seed=3)
    assert model == simulated
    assert job.rounds <= 2 * 4 + 1 and not job.rejected
    evaluation = evaluate_federated(job, model)
    assert evaluation.metrics["n"] == sum(c.X_test.shape[0] for c in client_data(fleet.stores, 0.2))
    assert evaluation.metrics["accuracy"] > 0.6 and set(evaluation.per_client) == set(GATEWAYS)


def test_a_gateway_killed_mid_forest_rejoins_by_replaying_decisions(fleet) -> None:
    answered: list[int] = []

    def on_level(progress) -> None:
        answered.append(progress.answered)
        if progress.step == 1:
            fleet.processes.kill("gw-2")
        if progress.step == 2:
            fleet.restart("gw-2")  # lost its bootstrap and node membership: rebuilt from the decisions

    config = FedForest(n_trees=6, max_depth=5, n_bins=16, feature_set_version=FEATURE_SET, protocol="sketches")
    model, job = train_on_fleet(
        config,
        fleet.agg,
        clients=GATEWAYS,
        seed=2,
        settings=JobSettings(deadline_s=4, min_fraction=0.5),
        progress=on_level,
    )
    assert answered[0] == 4 and 3 in answered[1:3] and answered[-1] == 4
    assert not job.rejected
    X = np.concatenate([c.X for c in client_data(fleet.stores, 0.2)])
    assert model.predict_proba(X).shape == (X.shape[0], 3)


def test_private_forest_over_mqtt_equals_the_simulation(fleet) -> None:
    """The default: histogram protocol under secure aggregation, four gateway processes."""
    config = FedForest(n_trees=6, max_depth=5, n_bins=16, feature_set_version=FEATURE_SET, protocol="histogram")
    model, job = train_on_fleet(config, fleet.agg, clients=GATEWAYS, seed=4, settings=JobSettings(deadline_s=60))
    simulated = aggregator.simulate(config, client_data(fleet.stores, 0.2), seed=4)
    assert model == simulated
    assert config.secure_aggregation and not job.rejected
    assert all(len(r.replies) == 4 for r in job.results)


def test_wheelfed_train_cli_trains_and_evaluates(fleet, tmp_path) -> None:
    out = tmp_path / "forest.json"
    env = dict(os.environ, **{PASSWORD_ENV: PASSWORDS["aggregator"]})
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "edge_client.cli",
            "train",
            "--algorithm",
            "fedforest",
            "--trees",
            "5",
            "--max-depth",
            "3",
            "--port",
            str(fleet.port),
            "--feature-set",
            FEATURE_SET,
            "--evaluate",
            "-o",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the private default: two releases after the opening, each answered by every gateway
    assert "fedforest 2/2: 4/4 clients" in proc.stdout and "held-out: n=" in proc.stdout
    model = TreeEnsemble.from_json(out.read_bytes())
    assert model.kind == "forest" and model.n_trees == 5
    assert model.metadata["protocol"] == "private" and 0 < model.metadata["dp_epsilon"] <= 8.0
    assert model.metadata["n_bins"] == 16  # the private protocol's default, not the histogram protocol's 32
