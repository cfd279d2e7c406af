"""A FedGA-Tree job on the server: every participant's own tree is registered as a model of its
own (``MODEL_ID.GATEWAY``, targeted at that gateway), equal to the simulation's tree for that
gateway, scored on that gateway's held-out windows alone, and deployable only to its gateway."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

import aggregator
from aggregator.algorithms import FedGATree
from aggregator.server.api import create_app
from shared.model import TreeEnsemble
from tests.server.fleet_memory import announce, fleet_data, running_server, wait_job
from tests.server.test_schedules import Pushes

CONFIG = {"generations": 3, "population_size": 6, "d_max": 4}


def test_a_fedga_job_registers_one_model_per_gateway_deployable_to_that_gateway_only(tmp_path, monkeypatch) -> None:
    clients = fleet_data(flipped=("gw-2",))
    pushes = Pushes(monkeypatch)
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        api = TestClient(create_app(server))
        started = api.post(
            "/api/jobs", json={"model_id": "own", "algorithm": "fedga-tree", "config": CONFIG, "seed": 7}
        )
        assert started.status_code == 201, started.text
        assert started.json()["total"] == 3  # generations
        job = wait_job(server, started.json()["job_id"])
        assert job.state == "completed", job.error
        expected = aggregator.simulate(FedGATree(**CONFIG), clients, seed=7)
        labels = {c.client_id: f"own.{c.client_id}:v1" for c in clients}
        assert job.evaluation["models"] == labels and job.result == ", ".join(labels.values())
        listed = {m["label"]: m for m in api.get("/api/models").json()}
        for client in clients:
            gateway = client.client_id
            shown = listed[labels[gateway]]
            assert shown["target"] == gateway and shown["job_id"] == job.job_id and shown["algorithm"] == "fedga-tree"
            model = TreeEnsemble.from_cbor(api.get(f"/api/models/own.{gateway}/1/download").content)
            assert model == expected[gateway]  # the server adds nothing
            own = float(np.mean(model.predict(client.X_test) == client.y_test))  # its own held-out windows only
            assert job.evaluation["per_client"][gateway]["accuracy"] == pytest.approx(own, abs=1e-12)
            assert shown["metrics"]["accuracy"] == pytest.approx(own, abs=1e-12)
        assert [r["step"] for r in api.get(f"/api/jobs/{job.job_id}").json()["rounds"]] == [1, 2, 3]

        server.signing_key = "key"
        other = api.post("/api/models/own.gw-1/1/deploy", json={"clients": ["gw-2"]})
        assert other.status_code == 409
        assert other.json()["detail"] == "own.gw-1:v1 is gw-1's own model: it deploys to gw-1 only, not to gw-2"
        both = api.post("/api/models/own.gw-1/1/deploy", json={"clients": ["gw-1", "gw-2"]})
        assert both.status_code == 409 and "not to gw-1, gw-2" in both.json()["detail"]
        assert pushes.deployed == []
        default = api.post("/api/models/own.gw-1/1/deploy", json={})  # no clients: its own gateway
        assert default.status_code == 200, default.text
        assert pushes.deployed == [["gw-1"]] and default.json()["active"] == ["gw-1"]


def test_a_fedga_job_takes_no_model_to_continue_from(tmp_path) -> None:
    with running_server(str(tmp_path / "r.db"), fleet_data(n_clients=1)) as (_sim, server):
        api = TestClient(create_app(server))
        server.registry.add("own", aggregator.simulate(FedGATree(**CONFIG), fleet_data(n_clients=1))["gw-1"])
        response = api.post("/api/jobs", json={"model_id": "own", "algorithm": "fedga-tree", "init_model": "own:v1"})
        assert (
            response.status_code == 422
            and response.json()["detail"] == "fedga-tree cannot continue from a model (init_model)"
        )
        bad = api.post("/api/jobs", json={"model_id": "own", "algorithm": "fedga-tree", "config": {"d_max": 40}})
        assert (
            bad.status_code == 422 and "d_min must be an integer with 1 <= d_min <= d_max <= 15" in bad.json()["detail"]
        )
