"""Vertical Federated Forest on the gateways over mosquitto, driven by the
commands an operator types: ``wheelfed vertical keygen``, ``wheelfed gateway --party-key-file
--trust`` for the three gateways of one person, ``wheelfed vertical train`` (trains, signs the
manifest, every party keeps its partial trees), a gateway killed and restarted (it reloads its
signed partial trees from its model directory), ``wheelfed vertical predict`` (live one-round
prediction of every window stored, labelled or not), another restart, and a second run that
finds nothing new. Oracle: every party's stored predictions equal the simulated forest's
prediction of the same windows (the simulation is exact: tests/e2e/test_vertical_forest_mqtt.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
import subprocess
import sys

import numpy as np
import pytest

from aggregator.algorithms.vertical_forest import VerticalFederatedForest
from aggregator.algorithms.vertical_forest_model import VerticalForestModel
from aggregator.fleet import GatewayProcesses, Presence
from aggregator.simulate import Simulation
from edge_client.store import WindowRecord, WindowStore
from edge_client.training_data import PartyData, StoreTrainingData
from shared.signing import load_verify_key
from shared.vertical_party_key import read_party_key
from tests.cli.cli_support import REPO
from tests.e2e.fleet_support import gateways_on_mosquitto

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

# gateway -> (feature set, columns of X, clock offset in us)
PARTIES = {
    "gw-acc": ("e2e-acc", slice(0, 3), 0),
    "gw-ecg": ("e2e-ecg", slice(3, 5), 180_000),
    "gw-gyro": ("e2e-gyro", slice(5, 7), -90_000),
}
PASSWORDS = {"aggregator": "agg-pw", **{g: f"pw-{g}" for g in PARTIES}}
HOP, N_LABELLED, N = 2_000_000, 150, 170
ECG_MISSES = {5, 6, 90}
LABELS = np.array(["sit", "push", "lie"])
TRAIN = (
    "vertical train --parties gw-acc,gw-ecg,gw-gyro --label-holder gw-acc --model-id activity-vf "
    "-o activity-vf.vfm --trees 6 --max-depth 5 --hop-ms 2000 --tolerance-ms 250"
)
PREDICT = "vertical predict --model activity-vf.vfm --trust aggregator.pub"


def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, 7))
    y = np.digitize(X[:, 0] + X[:, 3] - X[:, 6] + 0.3 * rng.normal(size=N), [-0.6, 0.6])
    return X, LABELS[y]


def _fill(stores):
    """Windows 0..169 on every gateway (the ECG one misses three); the first 150 labelled on gw-acc."""
    X, y = _data()
    for g, (version, cols, offset) in PARTIES.items():
        with WindowStore(stores[g]) as store:
            for i in range(N):
                if g == "gw-ecg" and i in ECG_MISSES:
                    continue
                start = i * HOP + offset
                store.add(WindowRecord("walk-1", start, start + HOP, X[i, cols], version))
                if g == "gw-acc" and i < N_LABELLED:
                    store.label_range("walk-1", start, start + HOP, str(y[i]))


def test_the_commands_run_here_are_the_help_examples():
    """The lines this test runs are the ones ``--help`` shows (the README contract test cannot
    run them: its fleet is not one person's gateways)."""
    from edge_client.cli import build_parser

    vertical = build_parser()._subparsers._group_actions[0].choices["vertical"]
    actions = vertical._subparsers._group_actions[0].choices
    assert f"wheelfed {TRAIN}" in actions["train"].epilog and f"wheelfed {PREDICT}" in actions["predict"].epilog


def _wheelfed(cwd, port, line):
    env = dict(
        os.environ, PYTHONPATH=str(REPO), WHEELFED_MQTT_PASSWORD=PASSWORDS["aggregator"], WHEELFED_MQTT_PORT=str(port)
    )
    proc = subprocess.run(
        [sys.executable, "-m", "edge_client.cli", *line.split()],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (line, proc.stdout, proc.stderr)
    return proc.stdout


@dataclass(frozen=True)
class PersonGateways:
    """One person's gateways over a running mosquitto: the broker port, the gateway processes,
    the aggregator's presence view and each gateway's ``wheelfed gateway`` arguments."""

    port: int
    processes: GatewayProcesses
    presence: Presence
    gateway_args: dict[str, tuple[str, ...]]


@contextmanager
def person_gateways(tmp_path) -> Iterator[PersonGateways]:
    """Stores filled (``_fill``), a broker, the aggregator's and the person's keys made with the
    commands; the gateways are not started. Everything is stopped at the end."""
    stores = {g: tmp_path / f"{g}.db" for g in PARTIES}
    _fill(stores)
    with gateways_on_mosquitto(tmp_path, PASSWORDS) as fleet:
        _wheelfed(tmp_path, fleet.port, "keygen -o aggregator.key")
        _wheelfed(tmp_path, fleet.port, "vertical keygen -o person.key")
        gateway_args = {
            g: (
                "--store",
                str(stores[g]),
                "--party-key-file",
                str(tmp_path / "person.key"),
                "--trust",
                str(tmp_path / "aggregator.pub"),
            )
            for g in PARTIES
        }
        yield PersonGateways(fleet.port, fleet.processes, fleet.presence, gateway_args)


def test_train_deploy_restart_and_live_prediction_reach_every_party(tmp_path):
    stores = {g: tmp_path / f"{g}.db" for g in PARTIES}
    with person_gateways(tmp_path) as person:
        port, processes, presence, gateway_args = person.port, person.processes, person.presence, person.gateway_args

        def restart(g):
            processes.kill(g)
            presence.wait([g], online=False, timeout_s=60)
            processes.start(g, *gateway_args[g])
            presence.wait([g], online=True, timeout_s=60)

        for g in PARTIES:
            processes.start(g, *gateway_args[g])
        presence.wait(list(PARTIES), online=True, timeout_s=60)
        trained = _wheelfed(tmp_path, port, TRAIN)
        assert "147 windows aligned" in trained and "deployed to gw-acc, gw-ecg, gw-gyro" in trained, trained
        for g in PARTIES:
            assert (tmp_path / f"{g}-models" / "vertical" / "activity-vf.cbor").is_file()
        restart("gw-ecg")  # its partial trees now come from its model directory only
        first = _wheelfed(tmp_path, port, PREDICT)
        assert "activity-vf:v1: predicted 167 windows aligned" in first, first
        restart("gw-gyro")  # what it predicted is remembered across a restart too
        second = _wheelfed(tmp_path, port, PREDICT)
        assert "predicted 0 windows aligned" in second, second

    # the oracle: the same forest grown in the simulation, predicting the same windows
    key = read_party_key(tmp_path / "person.key")
    parties = []
    for g in PARTIES:
        with WindowStore(stores[g]) as store:
            w = StoreTrainingData(store).party_windows("")
        parties.append(PartyData(g, w.X, w.y, party_key=key, sessions=w.sessions, start_us=w.start_us))
    config = VerticalFederatedForest(n_trees=6, max_depth=5, min_samples_leaf=5, hop_us=HOP, tolerance_us=250_000)
    # the command's defaults (min leaf 5, seed 0) and its job id: the parties' feature codes, hence
    # which columns the master's draws name, are keyed by the job
    job = VerticalForestModel.from_bytes(
        (tmp_path / "activity-vf.vfm").read_bytes(), load_verify_key(tmp_path / "aggregator.pub")
    ).metadata.job
    simulated = config.run_in(Simulation(parties), seed=0, job_id=job)
    X, _ = _data()
    common = np.array([i for i in range(N) if i not in ECG_MISSES])
    expected = simulated.predict([X[common][:, cols] for _, cols, _ in PARTIES.values()])
    expected_proba = simulated.predict_proba([X[common][:, cols] for _, cols, _ in PARTIES.values()])
    for g, (_, _, offset) in PARTIES.items():
        with WindowStore(stores[g]) as store:
            got = sorted(store.predictions(), key=lambda r: r.end_us)
        assert {r.model for r in got} == {"activity-vf:v1"}
        np.testing.assert_array_equal([(r.end_us - offset) // HOP - 1 for r in got], common)
        np.testing.assert_array_equal([r.label for r in got], expected)
        np.testing.assert_allclose(np.stack([r.probabilities for r in got]), expected_proba, rtol=1e-6)
