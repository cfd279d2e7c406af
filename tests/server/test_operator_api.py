"""What an operator reads from the API and the log: models named as users see them (``v1``,
``1``, ``activity:v1``), one spelling of each algorithm, a job's total that its rounds agree with,
held-out counts and chance beside a score, attempts and resumes, Swagger UI and ReDoc without a
CDN, and log lines at INFO for a resumed job, a gateway the survey left out and a stale gateway
(the survey's expected refusals no longer read as a failed round)."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import numpy as np
import pytest
from fastapi.testclient import TestClient

import aggregator
from aggregator.algorithms import FedSCSXGB
from aggregator.registry import Registry
from aggregator.server.api import create_app
from edge_client.training_data import ClientData
from tests.server.fleet_memory import (
    LABELS,
    announce,
    fleet_data,
    running_server,
    wait_job,
)

CONFIG = {"n_rounds": 2, "max_depth": 2, "n_bins": 16, "protocol": "histogram"}
FOREST = {"n_trees": 2, "max_depth": 3, "n_bins": 8, "protocol": "histogram"}


def _messages(caplog, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level]


def test_a_server_set_not_to_ask_for_the_local_only_baseline_records_none(tmp_path) -> None:
    clients = fleet_data(n_clients=3)
    with running_server(str(tmp_path / "r.db"), clients, local_baseline=False) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        api = TestClient(create_app(server))
        job = wait_job(server, api.post("/api/jobs", json={"model_id": "act", "config": CONFIG}).json()["job_id"])
        assert job.state == "completed" and "metrics" in job.evaluation, job.error
        assert not any(k.startswith("local_only") for k in job.evaluation)
        assert api.get("/api/models/act/1").json()["held_out"]["local_only"] is None


def test_models_are_named_as_users_see_them_and_algorithms_spelt_once(tmp_path) -> None:
    clients = fleet_data(n_clients=3)
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        api = TestClient(create_app(server))
        started = api.post("/api/jobs", json={"model_id": "act", "algorithm": "fedscs_xgb", "config": CONFIG})
        assert started.status_code == 201, started.text
        assert started.json()["algorithm"] == "fedscs-xgb"  # the wire's spelling accepted, the API's shown
        job = wait_job(server, started.json()["job_id"])
        assert job.state == "completed" and job.result == "act:v1", job.error
        expected = aggregator.simulate(FedSCSXGB(**CONFIG), clients).to_cbor()
        for name in ("1", "v1", "V1", "act:v1", "act:1"):
            download = api.get(f"/api/models/act/{name}/download")
            assert download.status_code == 200, (name, download.text)
            assert download.content == expected
            assert 'filename="act-v1.cbor"' in download.headers["content-disposition"]
            assert api.get(f"/api/models/act/{name}").json()["label"] == "act:v1"
        for bad, detail in (
            ("v0", "give N, vN or act:vN"),
            ("latest", "give N, vN or act:vN"),
            ("other:v1", "names model 'other', not 'act'"),
            ("v99999999999", "not a version"),
        ):
            response = api.get(f"/api/models/act/{bad}/download")
            assert response.status_code == 422 and detail in response.json()["detail"], (bad, response.text)
        assert api.get("/api/models/act/v2").status_code == 404
        assert api.get("/api/models/act/compare?a=v1&b=act:v1").json()["a"] == "act:v1"

        models = api.get("/api/models").json()
        assert [m["algorithm"] for m in models] == ["fedscs-xgb"]  # not the model metadata's fedscs_xgb
        assert {j["algorithm"] for j in api.get("/api/jobs").json()} == {"fedscs-xgb"}
        assert (
            api.post(
                "/api/schedules",
                json={"schedule_id": "s", "model_id": "act", "algorithm": "fedscs_xgb", "every_s": 3600},
            ).json()["algorithm"]
            == "fedscs-xgb"
        )

        held_out = models[0]["held_out"]
        y = np.concatenate([c.y_test for c in clients])
        assert held_out["windows"] == len(y)
        majority = max(np.mean(y == label) for label in LABELS)
        assert held_out["chance"] == pytest.approx(majority, abs=1e-12)
        assert set(held_out["per_gateway"]) == {"gw-1", "gw-2", "gw-3"}
        assert [g["windows"] for g in held_out["per_gateway"].values()] == [len(c.y_test) for c in clients]
        alone = api.get(f"/api/jobs/{job.job_id}").json()["evaluation"]["local_only"]  # each gateway alone
        assert 0 <= held_out["local_only"] == alone["accuracy"] <= 1 and alone["n"] == len(y)

        shown = api.get(f"/api/jobs/{job.job_id}").json()
        assert shown["started"] is not None and shown["duration_s"] >= 0 and shown["resumes"] == 0
        assert shown["history"][0]["sent_bytes"] > 0 and shown["bytes"] == (
            shown["history"][0]["sent_bytes"] + shown["history"][0]["received_bytes"]
        )


def test_a_forests_job_total_is_what_its_rounds_say(tmp_path) -> None:
    clients = fleet_data(n_clients=3)
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        api = TestClient(create_app(server))
        started = api.post("/api/jobs", json={"model_id": "forest", "algorithm": "fedforest", "config": FOREST})
        assert started.json()["total"] == FOREST["max_depth"] + 1  # the root's level to the leaves'
        job = wait_job(server, started.json()["job_id"])
        assert job.state == "completed", job.error
        shown = api.get(f"/api/jobs/{job.job_id}").json()
        assert {r["total"] for r in shown["rounds"]} == {shown["total"]} == {FOREST["max_depth"] + 1}
        assert [r["step"] for r in shown["rounds"]] == list(range(1, shown["completed"] + 1))  # may end early
        assert [m["algorithm"] for m in api.get("/api/models").json()] == ["fedforest"]


def test_swagger_ui_and_redoc_load_nothing_from_a_cdn(tmp_path) -> None:
    with running_server(str(tmp_path / "r.db"), fleet_data(n_clients=1), read_tokens=("r",)) as (_sim, server):
        api = TestClient(create_app(server))
        for page, assets in (
            ("/docs", ("swagger-ui-bundle.js", "swagger-ui.css")),
            ("/redoc", ("redoc.standalone.js",)),
        ):
            html = api.get(page)
            assert html.status_code == 200, page
            assert "cdn" not in html.text.lower() and "https://" not in html.text.replace("https://fonts", "")
            for asset in assets:
                assert f"/static-offline-docs/{asset}" in html.text
                served = api.get(f"/static-offline-docs/{asset}")
                assert served.status_code == 200 and len(served.content) > 10_000, asset
        assert api.get("/openapi.json").status_code == 200


def test_a_resumed_job_says_so_and_the_api_counts_its_attempts(tmp_path, caplog) -> None:
    clients = fleet_data(n_clients=3)
    path = str(tmp_path / "r.db")
    with Registry(path) as registry:  # a server killed after storing round 1 of 3
        registry.add_job("job-k", "fedscs-xgb", {**CONFIG, "n_rounds": 3}, model_id="act", total=3)
        registry.update_job(
            "job-k",
            state="running",
            attempt=1,
            participants=["gw-1", "gw-2", "gw-3"],
            history=[{"attempt": 1, "started": time.time() - 60, "from_step": 0}],
        )
        first = aggregator.simulate(FedSCSXGB(**{**CONFIG, "n_rounds": 1}), clients)
        registry.complete_round("job-k", 1, 3, 3, 3, {"train_loss": 0.6}, 0.1, first.to_cbor())
    caplog.set_level(logging.INFO)
    with running_server(path, clients) as (_sim, server):
        job = wait_job(server, "job-k")
        assert job.state == "completed", job.error
        shown = TestClient(create_app(server)).get("/api/jobs/job-k").json()
    assert shown["attempt"] == 2 and shown["resumes"] == 1 and shown["resumed_from"] == [1]
    assert shown["duration_s"] >= 60
    lines = _messages(caplog, logging.WARNING)  # the CLI's default level shows it
    assert any(
        line.startswith("job job-k resumed (attempt 2) from step 1 of 3: steps 2 to 3 follow on gw-1, gw-2, gw-3")
        for line in lines
    ), lines


def test_the_survey_names_who_it_left_out_and_its_refusals_are_no_failed_round(tmp_path, caplog) -> None:
    rng = np.random.default_rng(0)
    clients = []
    for k, version in enumerate(("fs-a", "fs-a", "fs-a", "fs-b")):
        X = rng.normal(size=(80, 4))
        y = LABELS[(X[:, 0] > 0).astype(int)]
        clients.append(
            ClientData(f"gw-{k + 1}", X[:60], y[:60], feature_set_version=version, X_test=X[60:], y_test=y[60:])
        )
    caplog.set_level(logging.INFO)
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        announce(sim, {c.client_id: 60 for c in clients})
        job = TestClient(create_app(server)).post("/api/jobs", json={"model_id": "act", "config": CONFIG}).json()
        done = wait_job(server, job["job_id"])
        assert done.state == "completed" and done.participants == ["gw-1", "gw-2", "gw-3"], done.error
    lines = _messages(caplog)
    left = [line for line in _messages(caplog, logging.WARNING) if "left out by the survey" in line]
    assert len(left) == 1 and left[0].startswith(f"job {job['job_id']}: gateway gw-4 left out by the survey: ")
    assert "fs-b" in left[0] or "feature set" in left[0], left[0]
    assert any(f"job {job['job_id']}: 3 of 4 gateways train on feature set fs-a" in line for line in lines), lines
    survey_rounds = [r for r in caplog.records if r.getMessage() == "round closed" and getattr(r, "round", None) == 0]
    assert survey_rounds == []  # the survey's refusals are answers, not a failed round at INFO


def test_a_gateway_that_goes_quiet_is_flagged_stale_once(tmp_path, caplog) -> None:
    clients = fleet_data(n_clients=2)
    caplog.set_level(logging.INFO)
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        announce(sim, {c.client_id: 40 for c in clients})
        api = TestClient(create_app(server))
        assert [g["stale"] for g in api.get("/api/gateways").json()] == [False, False]
        # a gateway whose clock runs ten minutes behind is not stale: silence is on the server's clock
        server.tracker.rows["gw-1"] = replace(server.tracker.rows["gw-1"], seen=time.time() - 600)
        assert server.tracker.check_stale(time.time()) == []
        shown = api.get("/api/gateways/gw-1").json()
        assert shown["age_s"] >= 600 and shown["silent_s"] < 60 and not shown["stale"]
        server.tracker.stale_after_s = 0.05
        time.sleep(0.2)
        assert server.tracker.check_stale(time.time()) == ["gw-1", "gw-2"]
        assert server.tracker.check_stale(time.time()) == ["gw-1", "gw-2"]  # logged once
        rows = api.get("/api/gateways").json()
        assert [g["stale"] for g in rows] == [True, True] and rows[0]["faults"] == 0
        announce(sim, {"gw-1": 41})
        server.tracker.stale_after_s = 60.0
        assert server.tracker.check_stale(time.time()) == []
    lines = _messages(caplog)
    stale = [line for line in _messages(caplog, logging.WARNING) if "went stale" in line]
    assert sorted(line.split()[1] for line in stale) == ["gw-1", "gw-2"], stale
    assert stale[0].endswith("its counts may be out of date")
    assert "gateway gw-1 reports again (online)" in lines
