"""The survey that picks a job's feature set, the reasons gateways give for staying out, and a
job stopped at a round boundary -- on the in-memory fleet (the CLI tests run them over MQTT)."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedForest, FedSCSXGB
from aggregator.evaluation import NoHeldOutData, evaluate_federated
from aggregator.feature_sets import choose_feature_set, survey_feature_sets
from aggregator.jobs import FederatedJob, JobSettings, TrainingError
from aggregator.rounds import QuorumNotReached
from aggregator.simulate import Simulation
from edge_client.training_data import ClientData


def client(name: str, seed: int, version: str = "", n: int = 90, holdout: bool = False) -> ClientData:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = np.array(["lie", "push", "sit"])[np.digitize(X[:, 0] + X[:, 1], [-0.5, 0.6])]
    test = dict(X_test=X[:20], y_test=y[:20]) if holdout else {}
    return ClientData(name, X, y, feature_set_version=version, **test)


def test_the_majority_version_wins_and_the_others_are_named() -> None:
    choice = choose_feature_set(
        {"gw-1": ("fs-a",), "gw-2": ("fs-a", "fs-b"), "gw-3": ("fs-b",), "gw-4": ("fs-a",)},
        left_out={"gw-5": "no_labelled_windows: none yet"},
    )
    assert choice.version == "fs-a" and choice.clients == ("gw-1", "gw-2", "gw-4") and not choice.tied_with
    assert choice.left_out == {
        "gw-3": "feature_set_mismatch: it stores fs-b, not fs-a",
        "gw-5": "no_labelled_windows: none yet",
    }
    assert choice.stored == {"fs-a": ("gw-1", "gw-2", "gw-4"), "fs-b": ("gw-2", "gw-3")}
    lines = choice.describe()
    assert lines[0].startswith("feature set fs-a (the majority's): 3 gateways (gw-1, gw-2, gw-4)")
    assert lines[1:] == [
        "  gw-3 left out: feature_set_mismatch: it stores fs-b, not fs-a",
        "  gw-5 left out: no_labelled_windows: none yet",
    ]


def test_a_tie_goes_to_the_first_version_by_name_and_says_so() -> None:
    choice = choose_feature_set({"gw-2": ("fs-b",), "gw-1": ("fs-a",)})
    assert choice.version == "fs-a" and choice.tied_with == ("fs-b",) and choice.clients == ("gw-1",)
    assert "fs-b has as many gateways, the tie goes to the first by name" in choice.describe()[0]


def test_a_requested_version_nobody_stores_lists_what_the_fleet_has() -> None:
    with pytest.raises(TrainingError) as info:
        choose_feature_set(
            {"gw-1": ("fs-a",), "gw-2": ("fs-a",), "gw-3": ("fs-b",)},
            requested="fs-c",
            left_out={"gw-4": "no answer within 5 s"},
        )
    assert str(info.value) == (
        "no gateway stores feature set 'fs-c': gw-1, gw-2 store fs-a; gw-3 stores fs-b; "
        "gw-4: no answer within 5 s (omit --feature-set to train on the version most "
        "gateways store)"
    )
    requested = choose_feature_set({"gw-1": ("fs-a",), "gw-3": ("fs-b",)}, requested="fs-b")
    assert requested.version == "fs-b" and requested.clients == ("gw-3",) and requested.requested


def test_no_labelled_windows_anywhere_is_one_error_with_every_reason() -> None:
    with pytest.raises(TrainingError, match="no gateway can train: gw-1: no_labelled_windows: x; gw-2: no answer"):
        choose_feature_set({}, left_out={"gw-2": "no answer within 5 s", "gw-1": "no_labelled_windows: x"})


def test_the_survey_asks_the_clients_and_reads_their_refusals() -> None:
    sim = Simulation(
        [
            client("gw-1", 1, "fs-a"),
            client("gw-2", 2, "fs-a"),
            client("gw-3", 3, "fs-b"),
            ClientData("gw-4", np.zeros((0, 4)), np.zeros(0), feature_set_version=""),
        ]
    )
    choice = survey_feature_sets(sim.engine, "job-s", list(sim.transports), deadline_s=5)
    assert choice.version == "fs-a" and choice.clients == ("gw-1", "gw-2")
    assert choice.left_out == {
        "gw-3": "feature_set_mismatch: it stores fs-b, not fs-a",
        "gw-4": "no_labelled_windows: no labelled samples",
    }
    asked = survey_feature_sets(sim.engine, "job-t", ["gw-1", "gw-3"], "fs-b", deadline_s=5)
    assert asked.clients == ("gw-3",) and asked.left_out == {"gw-1": "feature_set_mismatch: it stores fs-a, not fs-b"}


def test_quorum_errors_name_every_gateway_and_its_reason() -> None:
    sim = Simulation([client("gw-1", 1, "fs-a"), client("gw-2", 2, "fs-b"), client("gw-3", 3, "fs-b")])
    job = FederatedJob(sim.engine, list(sim.transports), job_id="q", settings=JobSettings(deadline_s=5))
    with pytest.raises(QuorumNotReached) as info:
        FedSCSXGB(n_rounds=1, protocol="histogram", secure_aggregation=False, feature_set_version="fs-a").fit(job)
    message = str(info.value)
    assert "1 of 3 clients answered, quorum is 3" in message
    assert "gw-2: feature_set_mismatch: no labelled windows of 'fs-a': this gateway stores fs-b" in message
    assert "gw-3: feature_set_mismatch" in message and "\n" not in message


def test_evaluation_without_held_out_windows_says_so() -> None:
    sim = Simulation([client("gw-1", 1), client("gw-2", 2), client("gw-3", 3)])
    model = sim.run(FedSCSXGB(n_rounds=2, n_bins=16))
    job = FederatedJob(sim.engine, list(sim.transports), job_id="e", settings=JobSettings(deadline_s=5))
    with pytest.raises(NoHeldOutData, match="no held-out windows on any gateway .*--holdout-fraction 0.2"):
        evaluate_federated(job, model)


def test_evaluation_names_the_gateways_it_left_out() -> None:
    sim = Simulation([client("gw-1", 1, holdout=True), client("gw-2", 2, holdout=True), client("gw-3", 3)])
    model = sim.run(FedSCSXGB(n_rounds=2, n_bins=16))
    job = FederatedJob(
        sim.engine, list(sim.transports), job_id="e", settings=JobSettings(deadline_s=5, min_fraction=0.5)
    )
    evaluation = evaluate_federated(job, model)
    assert set(evaluation.per_client) == {"gw-1", "gw-2"} and evaluation.metrics["n"] == 40
    assert evaluation.left_out == {"gw-3": "no_holdout_windows: gw-3 has no held-out windows"}


def stopped_job(sim: Simulation, after_step: int) -> FederatedJob:
    """A job over ``sim`` whose stop is asked for while step ``after_step`` is being reported."""
    stop = threading.Event()

    def on_step(progress) -> None:
        if progress.step == after_step:
            stop.set()

    return FederatedJob(
        sim.engine,
        list(sim.transports),
        job_id=f"stop-{after_step}",
        settings=JobSettings(deadline_s=10),
        progress=on_step,
        stop=stop,
    )


CLIENTS = [client(f"gw-{k}", k) for k in range(1, 5)]


@pytest.mark.parametrize("protocol", ["histogram", "atoms"])
def test_stopped_boosting_keeps_the_completed_rounds(protocol: str) -> None:
    config = FedSCSXGB(n_rounds=6, max_depth=3, n_bins=16, protocol=protocol)
    job = stopped_job(Simulation(CLIENTS), after_step=2)
    model = config.fit(job, seed=1)
    assert job.stopped is not None and (job.stopped.step, job.stopped.total) == (2, 6)
    assert model == aggregator.simulate(
        FedSCSXGB(n_rounds=2, max_depth=3, n_bins=16, protocol=protocol), CLIENTS, seed=1
    )


@pytest.mark.parametrize("protocol", ["histogram", "sketches"])
def test_a_stopped_forest_is_the_forest_of_the_depth_it_reached(protocol: str) -> None:
    config = FedForest(n_trees=6, max_depth=6, n_bins=16, protocol=protocol)
    job = stopped_job(Simulation(CLIENTS), after_step=2)
    model = config.fit(job, seed=3)
    assert job.stopped is not None and job.stopped.step == 2
    shallow = aggregator.simulate(FedForest(n_trees=6, max_depth=2, n_bins=16, protocol=protocol), CLIENTS, seed=3)
    assert model == shallow and model.metadata["max_depth"] == 2


def test_a_stop_during_the_last_step_changes_nothing() -> None:
    config = FedSCSXGB(n_rounds=3, max_depth=2, n_bins=16, protocol="histogram")
    job = stopped_job(Simulation(CLIENTS), after_step=3)
    assert config.fit(job) == aggregator.simulate(config, CLIENTS) and job.stopped is None


def test_an_avgimp_forest_cannot_be_cut_and_says_why() -> None:
    config = FedForest(n_trees=4, max_depth=5, n_bins=16, protocol="sketches", evaluation="avgimp")
    with pytest.raises(TrainingError, match="stopped after level 2: with evaluation='avgimp'"):
        config.fit(stopped_job(Simulation(CLIENTS), after_step=2))


@pytest.mark.parametrize("protocol", ["histogram", "atoms"])
def test_a_boosting_job_that_fails_keeps_a_checkpoint_of_its_completed_rounds(protocol: str) -> None:
    config = FedSCSXGB(n_rounds=6, max_depth=2, n_bins=8, protocol=protocol, secure_aggregation=False)
    sim = Simulation(CLIENTS)

    def drop_after_round_3(progress) -> None:
        if progress.step == 3:
            sim.transports["gw-2"].drop()  # gone for good: the next round lacks its quorum

    job = FederatedJob(
        sim.engine,
        list(sim.transports),
        job_id="fails",
        progress=drop_after_round_3,
        settings=JobSettings(deadline_s=1.0, min_fraction=1.0),
    )
    with pytest.raises((QuorumNotReached, TrainingError)):
        config.fit(job)
    assert job.checkpoint is not None and job.checkpoint.progress.step == 3
    assert job.checkpoint.model() == aggregator.simulate(dataclasses.replace(config, n_rounds=3), CLIENTS)
