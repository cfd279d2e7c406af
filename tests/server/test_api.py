"""The REST API on SQLite and PostgreSQL: a job started through it grows the model the
simulation grows, its evaluation is the pooled held-out score, bad input is a 4xx naming the
problem, tokens and roles hold, and the OpenAPI document describes it."""

from __future__ import annotations

import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

import aggregator
from aggregator.algorithms import FedSCSXGB
from aggregator.demo.training import mqtt_bytes
from aggregator.server.api import create_app
from edge_client.local_baseline import local_model
from edge_client.training_data import LabelledData
from shared.model import TreeEnsemble
from shared.protocol.messages.evaluation import LocalBaselineRequest
from tests.server.fleet_memory import announce, fleet_data, running_server, wait_job

CONFIG = {"n_rounds": 3, "max_depth": 2, "n_bins": 16, "protocol": "histogram"}


def test_a_job_through_the_api_is_the_simulation_and_is_evaluated(registry_url: str) -> None:
    clients = fleet_data()
    with running_server(registry_url, clients) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        api = TestClient(create_app(server))
        gateways = api.get("/api/gateways").json()
        assert [g["gateway"] for g in gateways] == ["gw-1", "gw-2", "gw-3", "gw-4"]
        assert (
            gateways[0]["online"]
            and gateways[0]["labelled"] == 90
            and gateways[0]["labels"] == {"push": 45, "rest": 45}
        )
        assert [g["gateway"] for g in api.get("/api/gateways?offset=1&limit=2").json()] == ["gw-2", "gw-3"]

        started = api.post("/api/jobs", json={"model_id": "act", "config": CONFIG, "min_labelled": 50})
        assert started.status_code == 201, started.text
        job = wait_job(server, started.json()["job_id"])
        assert job.state == "completed", job.error
        shown = api.get(f"/api/jobs/{job.job_id}").json()
        assert [r["step"] for r in shown["rounds"]] == [1, 2, 3] and shown["participants"] == [
            "gw-1",
            "gw-2",
            "gw-3",
            "gw-4",
        ]
        data = api.get("/api/models/act/1/download")
        assert data.headers["content-type"] == "application/cbor"
        model = TreeEnsemble.from_cbor(data.content)
        assert model == aggregator.simulate(FedSCSXGB(**CONFIG), clients)  # the server adds nothing
        X = np.vstack([c.X_test for c in clients])
        y = np.concatenate([c.y_test for c in clients])
        pooled = float(np.mean(model.predict(X) == y))
        assert shown["evaluation"]["metrics"]["accuracy"] == pytest.approx(pooled, abs=1e-12)
        assert api.get("/api/models/act/1").json()["metrics"]["accuracy"] == pytest.approx(pooled, abs=1e-12)
        assert sum(map(sum, shown["evaluation"]["confusion"])) == len(y)
        # the local-only baseline beside it: each gateway's own CART (the gateway's code, run here on
        # its windows), scored on its held-out windows and pooled
        right, per_gateway = 0, {}
        for c in clients:
            alone = local_model(LabelledData(c.X, c.y), LocalBaselineRequest("", tuple(model.classes)))
            hits = alone.predict(c.X_test) == c.y_test
            per_gateway[c.client_id], right = float(hits.mean()), right + int(hits.sum())
        alone = shown["evaluation"]["local_only"]
        assert alone["accuracy"] == pytest.approx(right / len(y), abs=1e-12) and alone["n"] == len(y)
        held_out = api.get("/api/models/act/1").json()["held_out"]
        assert held_out["local_only"] == alone["accuracy"]
        assert {g: r["local_only"] for g, r in held_out["per_gateway"].items()} == pytest.approx(per_gateway, abs=1e-12)
        assert 'wheelfed_gateways{state="online"} 4' in api.get("/metrics").text
        assert 'wheelfed_jobs{state="completed"} 1' in api.get("/metrics").text
        traffic = server.transport.stats  # the job's MQTT payloads, as the demo reads them
        assert mqtt_bytes(api.get("/metrics").text) == traffic.sent_bytes + traffic.received_bytes > 0

        too_many = api.post("/api/jobs", json={"model_id": "act", "config": CONFIG, "min_labelled": 100})
        failed = wait_job(server, too_many.json()["job_id"])
        assert failed.state == "failed" and "with at least 100 labelled windows" in failed.error


@pytest.mark.parametrize(
    "method, path, body, status, detail",
    [
        ("post", "/api/jobs", {"model_id": "act", "algorithm": "xgboost"}, 422, "fedscs-xgb"),
        ("post", "/api/jobs", {"model_id": "act", "config": {"n_trees": 5}}, 422, "has no parameter n_trees"),
        ("post", "/api/jobs", {"model_id": "act", "config": {"n_rounds": -1}}, 422, "n_rounds"),
        ("post", "/api/jobs", {"model_id": "a/b"}, 422, "pattern"),
        ("post", "/api/jobs", {"model_id": "act", "init_model": "act"}, 422, "MODEL_ID:vN"),
        ("post", "/api/jobs", {"model_id": "act", "init_model": "act:v9"}, 404, "holds no models yet"),
        ("post", "/api/jobs", {"model_id": "act", "clients": ["gw/1"]}, 422, "invalid client id 'gw/1'"),
        ("post", "/api/jobs", {"model_id": "act", "clients": ["aggregator"]}, 422, "the aggregator's id"),
        ("get", "/api/jobs/job-nope", None, 404, "no job 'job-nope'"),
        ("post", "/api/jobs/job-nope/cancel", None, 404, "no job"),
        ("get", "/api/models/act/1", None, 404, "holds no models"),
        ("get", "/api/gateways?limit=0", None, 422, "limit"),
        ("get", "/api/gateways/gw-99", None, 404, "gw-99"),
        ("post", "/api/schedules", {"schedule_id": "s", "model_id": "act"}, 422, "every_s, cron or min_new_windows"),
        ("post", "/api/schedules", {"schedule_id": "s", "model_id": "act", "cron": "70 * * * *"}, 422, "0-59"),
        ("delete", "/api/schedules/nope", None, 404, "no schedule 'nope'"),
        ("post", "/api/rollback", {"clients": ["gw-1"]}, 409, "no signing key"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_problem(tmp_path, method, path, body, status, detail) -> None:
    with running_server(str(tmp_path / "r.db"), fleet_data(n_clients=1)) as (_sim, server):
        api = TestClient(create_app(server))
        response = getattr(api, method)(path, **({"json": body} if body is not None else {}))
        assert response.status_code == status, response.text
        assert detail in response.text


def test_cancel_stops_a_running_job_at_a_round_boundary_and_keeps_no_model(tmp_path) -> None:
    with running_server(str(tmp_path / "r.db"), fleet_data(n_clients=3)) as (_sim, server):
        api = TestClient(create_app(server))
        job = api.post(
            "/api/jobs", json={"model_id": "act", "config": {"n_rounds": 200, "max_depth": 2, "protocol": "histogram"}}
        ).json()
        while server.registry.job(job["job_id"]).completed < 1:
            time.sleep(0.02)
        assert api.post(f"/api/jobs/{job['job_id']}/cancel").json()["job_id"] == job["job_id"]
        cancelled = wait_job(server, job["job_id"])
        assert cancelled.state == "cancelled" and cancelled.completed < 200
        assert api.get("/api/models").json() == []


def test_cancelling_a_finished_job_is_a_conflict(tmp_path) -> None:
    with running_server(str(tmp_path / "r.db"), fleet_data(n_clients=3)) as (_sim, server):
        api = TestClient(create_app(server))
        job = api.post(
            "/api/jobs", json={"model_id": "act", "config": {"n_rounds": 1, "max_depth": 1, "protocol": "histogram"}}
        ).json()
        finished = wait_job(server, job["job_id"])
        assert finished.state == "completed", finished.error
        response = api.post(f"/api/jobs/{job['job_id']}/cancel")
        assert response.status_code == 409 and "completed" in response.json()["detail"]


def test_tokens_and_roles(tmp_path) -> None:
    with running_server(
        str(tmp_path / "r.db"), fleet_data(n_clients=1), read_tokens=("r-token",), operator_tokens=("o-token",)
    ) as (_sim, server):
        api = TestClient(create_app(server))
        assert api.get("/api/jobs").status_code == 401
        unknown = api.get("/api/jobs", headers={"Authorization": "Bearer wrong"})
        assert unknown.status_code == 401 and unknown.headers["WWW-Authenticate"].startswith("Bearer")
        assert api.get("/api/jobs", headers={"Authorization": "Bearer r-token"}).status_code == 200
        body = {"schedule_id": "s", "model_id": "act", "every_s": 60}
        assert api.post("/api/schedules", json=body, headers={"Authorization": "Bearer r-token"}).status_code == 403
        assert api.post("/api/schedules", json=body, headers={"Authorization": "Bearer o-token"}).status_code == 201
        assert api.get("/api/health").status_code == 200  # for load balancers: no token
        assert api.get("/").status_code == 200


def test_the_openapi_document_lists_every_endpoint(tmp_path) -> None:
    with running_server(str(tmp_path / "r.db"), fleet_data(n_clients=1)) as (_sim, server):
        paths = TestClient(create_app(server)).get("/openapi.json").json()["paths"]
    assert {
        "/api/gateways",
        "/api/jobs",
        "/api/jobs/{job_id}/cancel",
        "/api/models",
        "/api/models/{model_id}/compare",
        "/api/models/{model_id}/{version}/download",
        "/api/models/{model_id}/{version}/deploy",
        "/api/rollback",
        "/api/schedules",
        "/api/promotions",
        "/api/deployments",
        "/api/health",
        "/metrics",
    } <= set(paths)


def test_the_listening_socket_is_tcp_so_connections_get_nodelay() -> None:
    """asyncio sets TCP_NODELAY on accepted connections only for a socket made with IPPROTO_TCP
    (without it, each answer on a kept-alive connection waited ~40 ms for a delayed ACK)."""
    import socket

    from aggregator.server.app import bind

    with bind("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP
