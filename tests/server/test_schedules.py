"""Scheduled retraining end to end in one process: new labelled windows trigger a schedule, its
version is promoted or rejected by the rule with the numbers recorded, a promoted version goes
to the canary first, and a regression on the canary halts the rollout (and rolls the canary
back). Deploy and rollback are recorded stand-ins here: the memory fleet's participants install
no models (real pushes: tests/e2e/test_model_push.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

import aggregator
import aggregator.deployment
from aggregator.algorithms import FedForest, FedSCSXGB
from aggregator.deployment import DeploymentResult
from aggregator.server.api import create_app
from shared.protocol.envelope import Message
from shared.protocol.messages.deployment import ModelStatus, PredictionBatch
from tests.server.fleet_memory import announce, fleet_data, running_server, wait_job

GATEWAYS = ["gw-1", "gw-2", "gw-3", "gw-4"]
FOREST = {"n_trees": 5, "max_depth": 4, "n_bins": 16, "protocol": "histogram"}


class Pushes:
    """Stand-ins for ``deploy``/``rollback`` that record who was asked and answer ``active``;
    ``on_deploy(model_id, version, clients)`` runs after each deployment (the gateways' live
    predictions with the new version)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, on_deploy=None) -> None:
        self.deployed: list[list[str]] = []
        self.rolled_back: list[list[str]] = []
        self.on_deploy = on_deploy
        monkeypatch.setattr(aggregator.deployment, "deploy", self.deploy)
        monkeypatch.setattr(aggregator.deployment, "rollback", self.rollback)

    def deploy(self, _engine, registry, _key, model_id, version, clients, *, deadline_s):
        self.deployed.append(list(clients))
        if self.on_deploy is not None:
            self.on_deploy(model_id, version, clients)
        for client in clients:
            registry.set_deployment(model_id, version, client, "active")
        answers = {c: ModelStatus("active", model_id, version) for c in clients}
        return DeploymentResult(f"{model_id}:v{version}", answers)

    def rollback(self, _engine, _registry, _key, clients, *, reason, deadline_s):
        self.rolled_back.append(list(clients))
        return DeploymentResult("rollback")


def baseline(server, model, metrics=None) -> None:
    """``model`` registered as act:v1 and confirmed running on every gateway."""
    server.registry.add("act", model, metrics=metrics)
    for gateway in GATEWAYS:
        server.registry.set_deployment("act", 1, gateway, "active")


def run_due(server) -> object:
    """One scheduler tick that must start a job; the finished job."""
    started = server.scheduler.tick(time.time())
    assert len(started) == 1
    return wait_job(server, started[0].job_id)


def test_new_windows_trigger_a_retraining_that_the_rule_rejects_or_promotes(tmp_path) -> None:
    clients = fleet_data()
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        api = TestClient(create_app(server))
        announce(sim, {g: 50 for g in GATEWAYS})
        strong = aggregator.simulate(FedSCSXGB(n_rounds=10, max_depth=3, n_bins=16, protocol="histogram"), clients)
        baseline(server, strong)
        body = {
            "schedule_id": "stump",
            "model_id": "act",
            "algorithm": "fedforest",
            "min_new_windows": 40,
            "threshold": 0.0,
            "config": {"n_trees": 1, "max_depth": 1, "n_bins": 16, "protocol": "histogram"},
        }
        assert api.post("/api/schedules", json=body).status_code == 201
        assert server.scheduler.tick(time.time()) == []  # no new windows yet
        announce(sim, {g: 60 for g in GATEWAYS})  # +40 fleet-wide
        job = run_due(server)
        assert job.state == "completed" and job.schedule_id == "stump" and job.result == "act:v2"
        [decision] = api.get("/api/promotions").json()
        assert (decision["decision"], decision["candidate"], decision["baseline"], decision["metric"]) == (
            "rejected",
            2,
            1,
            "accuracy",
        )
        assert decision["candidate_value"] < decision["baseline_value"]  # a stump against boosting
        assert decision["candidate_value"] == pytest.approx(job.evaluation["metrics"]["accuracy"])
        assert server.scheduler.tick(time.time()) == []  # the trigger counts from the last run
        api.delete("/api/schedules/stump")

        more = {
            "schedule_id": "boost",
            "model_id": "act",
            "algorithm": "fedscs-xgb",
            "every_s": 1e-3,
            "threshold": 0.05,
            "config": {"n_rounds": 2, "max_depth": 3, "n_bins": 16, "protocol": "histogram"},
        }
        assert api.post("/api/schedules", json=more).status_code == 201
        job = run_due(server)
        assert job.state == "completed" and job.init_model == "act:v1"  # continues from what runs
        record = server.registry.record("act", 3)
        assert record.parent == "act:v1" and record.n_trees == strong.n_trees + 2 * strong.n_outputs
        decision = api.get("/api/promotions").json()[0]
        assert decision["decision"] == "promoted" and "no signing key" in decision["detail"]
        assert decision["baseline"] == 1 and decision["candidate"] == 3


def test_a_regression_on_the_canary_halts_the_rollout_and_rolls_the_canary_back(tmp_path, monkeypatch) -> None:
    clients = fleet_data(flipped=("gw-1",))  # gw-1 labels differently: the fleet's model fails it
    pushes = Pushes(monkeypatch)
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        server.runner.signing_key = "key"
        announce(sim, {g: 90 for g in GATEWAYS})
        only_gw1 = aggregator.simulate(
            FedSCSXGB(n_rounds=5, max_depth=3, n_bins=16, secure_aggregation=False), clients[:1]
        )
        baseline(server, only_gw1)
        TestClient(create_app(server)).post(
            "/api/schedules",
            json={
                "schedule_id": "s",
                "model_id": "act",
                "algorithm": "fedforest",
                "every_s": 1e-3,
                "threshold": 0.05,
                "canary_share": 0.25,
                "config": FOREST,
            },
        )
        job = run_due(server)
        decision = server.registry.promotions()[0]
        assert decision.decision == "halted", decision
        assert decision.candidate_value > decision.baseline_value  # fleet-wide it was better...
        assert "canary gw-1" in decision.detail and "regressed" in decision.detail  # ...but not on the canary
        assert pushes.deployed == [["gw-1"]] and pushes.rolled_back == [["gw-1"]]
        assert job.result == "act:v2"


def test_a_version_that_holds_on_the_canary_goes_to_the_rest(tmp_path, monkeypatch) -> None:
    clients = fleet_data()
    pushes = Pushes(monkeypatch)
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        server.runner.signing_key = "key"
        announce(sim, {g: 90 for g in GATEWAYS})
        baseline(server, aggregator.simulate(FedForest(**FOREST), clients))  # what the job grows again
        TestClient(create_app(server)).post(
            "/api/schedules",
            json={
                "schedule_id": "s",
                "model_id": "act",
                "algorithm": "fedforest",
                "every_s": 1e-3,
                "threshold": 0.0,
                "canary_share": 0.5,
                "config": FOREST,
            },
        )
        run_due(server)
        decision = server.registry.promotions()[0]
        assert decision.decision == "rolled-out" and decision.candidate_value == decision.baseline_value
        assert pushes.deployed == [["gw-1", "gw-2"], ["gw-3", "gw-4"]] and pushes.rolled_back == []
        assert {d.label for d in server.registry.running().values()} == {"act:v2"}


def live_predictions(sim, gateway: str, label: str, confidence: float, n: int) -> None:
    """``n`` live predictions of ``label`` by ``gateway``, each with ``confidence``, as its live
    predictor publishes them."""
    model_id, _, version = label.rpartition(":v")
    batch = PredictionBatch(
        model_id,
        int(version),
        ("push", "rest"),
        np.arange(n, dtype=np.int64) * 10**6,
        np.zeros(n, np.int16),
        np.full(n, confidence, np.float32),
        np.ones(n, np.float32),
    )
    transport = sim.transports[gateway]
    transport.publish(transport.layout.outbox(gateway), Message.create(batch, sender=gateway))


@pytest.mark.parametrize(
    "after, n_after, decision, detail",
    [
        (0.6, 25, "halted", "gw-1: live mean confidence 0.6 over 20 windows vs 0.9 before: dropped by 0.3 > 0.1"),
        (0.6, 5, "halted", "gw-1: 5 live predictions of the candidate, fewer than the 20 the check needs"),
        (
            0.85,
            25,
            "rolled-out",
            "gw-1: live mean confidence 0.85 over 20 windows vs 0.9 before: dropped by 0.05 <= 0.1",
        ),
    ],
)
def test_the_canary_is_judged_on_its_live_predictions(tmp_path, monkeypatch, after, n_after, decision, detail) -> None:
    clients = fleet_data()

    def predict_live(model_id, version, gateways):  # the canary recognises its stream with the candidate
        if gateways == ["gw-1"]:
            live_predictions(sim, "gw-1", f"{model_id}:v{version}", after, n_after)

    pushes = Pushes(monkeypatch, on_deploy=predict_live)
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        server.runner.signing_key = "key"
        announce(sim, {g: 90 for g in GATEWAYS})
        baseline(server, aggregator.simulate(FedForest(**FOREST), clients))
        live_predictions(sim, "gw-1", "act:v1", 0.5, 30)  # older ones: only the newest 20 count
        live_predictions(sim, "gw-1", "act:v1", 0.9, 20)
        api = TestClient(create_app(server))
        assert (
            api.post(
                "/api/schedules",
                json={
                    "schedule_id": "s",
                    "model_id": "act",
                    "algorithm": "fedforest",
                    "every_s": 1e-3,
                    "threshold": 1.0,
                    "canary_share": 0.25,
                    "canary_windows": 20,
                    "canary_observe_s": 2.0,
                    "canary_max_drop": 0.1,
                    "config": FOREST,
                },
            ).status_code
            == 201
        )
        run_due(server)
        [shown] = api.get("/api/promotions").json()
        assert shown["decision"] == decision and detail in shown["detail"], shown
        live = shown["canary"]
        assert (live["metric"], live["windows"], live["max_drop"]) == ("live mean confidence", 20, 0.1)
        check = live["gateways"]["gw-1"]
        assert check["before_model"] == "act:v1" and check["before"] == pytest.approx(0.9, abs=1e-6)
        if n_after >= 20:
            assert check["after"] == pytest.approx(after, abs=1e-6) and check["windows"] == 20
        if decision == "halted":
            assert pushes.deployed == [["gw-1"]] and pushes.rolled_back == [["gw-1"]]
        else:
            assert pushes.deployed == [["gw-1"], ["gw-2", "gw-3", "gw-4"]] and pushes.rolled_back == []
