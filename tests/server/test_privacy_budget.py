"""The privacy ledger on the server: a private job's model is entered with what its metadata says
it spent, on its participants' windows; ``/api/privacy`` shows per gateway the lifetime epsilon
of the most-used window and what is left; a job that would take a window past the cap is refused
in one line (409), and one on the windows the line names starts; a failed private job is charged
what it released; a schedule over the cap is skipped with a note; the ledger persists on SQLite and
PostgreSQL and an older registry gains it."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import aggregator
from aggregator.privacy import epsilon_of, rho_for_epsilon
from aggregator.privacy.ledger import LedgerEntry, PrivacyCap, iso_us
from aggregator.registry import HEAD_REVISION, Registry, ScheduleRecord
from aggregator.server.api import create_app
from aggregator.server.service import Scheduler
from tests.server.fleet_memory import announce, fleet_data, running_server, wait_job


def second_after(t_us: int) -> str:
    """The refusal's suggested start: the whole second at or after ``t_us``."""
    return iso_us(-(-t_us // 1_000_000) * 1_000_000)


PRIVATE = {"n_rounds": 2, "max_depth": 2, "dp_epsilon": 7.0, "dp_features": 4}


def test_a_private_job_is_entered_shown_and_a_second_one_on_its_windows_refused(tmp_path) -> None:
    clients = fleet_data()
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        api = TestClient(create_app(server))
        started = api.post("/api/jobs", json={"model_id": "act", "config": PRIVATE})
        assert started.status_code == 201, started.text
        job = wait_job(server, started.json()["job_id"])
        assert job.state == "completed", job.error
        _, model = server.registry.model("act", 1)
        meta = model.metadata
        [entry] = server.registry.privacy_ledger()
        assert (entry.job_id, entry.basis, entry.model, entry.gateways) == (
            job.job_id,
            "spent",
            "act:v1",
            ("gw-1", "gw-2", "gw-3", "gw-4"),
        )
        assert (entry.rho, entry.xi, entry.epsilon, entry.delta) == (
            meta["dp_rho"],
            meta["dp_xi"],
            meta["dp_epsilon"],
            meta["dp_delta"],
        )
        assert entry.since_us is None and job.updated * 1e6 >= entry.until_us >= job.created * 1e6
        assert not any(key.startswith("dp_job_") for key in meta)  # one attempt: its own spending is the job's

        assert api.get("/api/privacy").json()["entries"] == []  # the detail only when asked
        shown = api.get("/api/privacy?detail=true").json()
        assert [e["job_id"] for e in shown["entries"]] == [job.job_id]
        assert (shown["epsilon_cap"], shown["delta"]) == (10.0, 1e-6)
        spent = epsilon_of(meta["dp_rho"], meta["dp_xi"], 1e-6)
        assert [g["gateway"] for g in shown["gateways"]] == ["gw-1", "gw-2", "gw-3", "gw-4"]
        for g in shown["gateways"]:
            assert g["spent_epsilon"] == pytest.approx(spent, rel=1e-12) and 0 < g["remaining_epsilon"] < 10 - spent + 5
            assert g["fresh_since_us"] == entry.until_us and g["running"] == [] and g["jobs"] == 1
            assert g["segments"] == [
                {"since_us": None, "until_us": entry.until_us, "rho": entry.rho, "xi": entry.xi, "jobs": 1}
            ]
        shown_model = api.get("/api/models/act/1").json()["privacy"]
        assert shown_model["spent"][0]["epsilon"] == meta["dp_epsilon"]
        assert shown_model["remaining_epsilon"] == shown["gateways"][0]["remaining_epsilon"]

        again = api.post("/api/jobs", json={"model_id": "act", "config": PRIVATE})
        assert again.status_code == 409
        line = again.json()["detail"]
        assert "\n" not in line and line.startswith("refused: a job of epsilon 7 (delta 1e-06)")
        assert f"give the job since={second_after(entry.until_us)}" in line and "above the cap of 10" in line
        # a job on the windows that have the full budget is taken (and a non-private one always is)
        later = api.post(
            "/api/jobs", json={"model_id": "act", "config": PRIVATE, "since": second_after(entry.until_us)}
        )
        assert later.status_code == 201, later.text
        plain = api.post("/api/jobs", json={"model_id": "act", "config": {**PRIVATE, "protocol": "histogram"}})
        assert plain.status_code == 201, plain.text
        for j in (later.json(), plain.json()):
            wait_job(server, j["job_id"])
        assert len(server.registry.privacy_ledger()) == 2  # the histogram job spent nothing


def test_queued_private_jobs_count_and_a_cap_change_refuses_at_start(tmp_path) -> None:
    clients = fleet_data(n_clients=3)
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        api = TestClient(create_app(server))
        long = api.post("/api/jobs", json={"model_id": "act", "config": {**PRIVATE, "n_rounds": 200}}).json()
        # while it runs or waits, its plan holds every window of every gateway
        refused = api.post("/api/jobs", json={"model_id": "b", "config": PRIVATE, "clients": ["gw-2"]})
        assert refused.status_code == 409 and "gw-2" in refused.json()["detail"]
        while server.registry.job(long["job_id"]).state != "running":
            time.sleep(0.02)
        [running] = server.registry.privacy_ledger()
        assert running.basis == "running" and running.until_us is None
        assert (
            "held by the running job"
            in api.post("/api/jobs", json={"model_id": "b", "config": PRIVATE, "since": time.time() + 3600}).json()[
                "detail"
            ]
        )
        api.post(f"/api/jobs/{long['job_id']}/cancel")
        assert wait_job(server, long["job_id"]).state == "cancelled"
        # the cancelled job is charged what it released (each release recorded before it went
        # out), not its whole plan
        [charged] = server.registry.privacy_ledger()
        assert (charged.basis, charged.model) == ("spent", "") and charged.until_us and charged.releases
        assert (charged.rho, charged.xi) == (charged.released_rho, charged.released_xi)
        assert 0 < charged.rho + charged.xi < rho_for_epsilon(7.0, 1e-6)
        # a job queued under a cap that a restarted server lowered is refused when it starts
        busy = api.post(
            "/api/jobs", json={"model_id": "h", "config": {**PRIVATE, "n_rounds": 200, "protocol": "histogram"}}
        ).json()
        server.runner.privacy_cap = PrivacyCap(100.0)
        queued = api.post("/api/jobs", json={"model_id": "c", "config": PRIVATE}).json()
        server.runner.privacy_cap = PrivacyCap(7.0)  # room for 7 alone, not with what the cancelled job spent
        api.post(f"/api/jobs/{busy['job_id']}/cancel")
        failed = wait_job(server, queued["job_id"])
        assert failed.state == "failed" and failed.error.startswith("refused: a job of epsilon 7")
        assert [e.job_id for e in server.registry.privacy_ledger()] == [long["job_id"]]


def test_a_schedule_over_the_cap_is_skipped_with_a_note(tmp_path, caplog) -> None:
    clients = fleet_data(n_clients=3)
    with running_server(str(tmp_path / "r.db"), clients, privacy_epsilon_cap=4.0) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        now = time.time()
        server.registry.add_schedule(
            ScheduleRecord("nightly", "act", "fedscs-xgb", PRIVATE, 60.0, "", None, 0.01, 0.25, True, 0.0, 0, now)
        )
        scheduler = Scheduler(server.registry, server.runner, server.tracker, 3600.0)
        with caplog.at_level(logging.WARNING, logger="aggregator.server.service"):
            assert scheduler.tick(now) == []
        schedule = server.registry.schedule("nightly")
        assert "skipped -- refused: a job of epsilon 7" in schedule.note and "on its own" in schedule.note
        assert schedule.last_run == now and server.registry.jobs() == []
        assert any("schedule nightly skipped: refused" in r.getMessage() for r in caplog.records)
        shown = TestClient(create_app(server)).get("/api/schedules").json()
        assert shown[0]["note"] == schedule.note


def test_a_schedule_whose_windows_spent_their_budget_trains_on_the_fresh_ones(tmp_path, caplog) -> None:
    """Retraining for a lifetime: once a private job has used the windows, the next scheduled
    private job is not skipped but given the ``since`` from which every window has its full
    budget (the refusal's suggestion), and says so in one log line."""
    clients = fleet_data(n_clients=3)
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        api = TestClient(create_app(server))
        first = wait_job(server, api.post("/api/jobs", json={"model_id": "act", "config": PRIVATE}).json()["job_id"])
        assert first.state == "completed", first.error
        [entry] = server.registry.privacy_ledger()
        now = time.time()
        server.registry.add_schedule(
            ScheduleRecord("nightly", "act", "fedscs-xgb", PRIVATE, 60.0, "", None, 0.01, 0.25, True, 0.0, 0, now)
        )
        scheduler = Scheduler(server.registry, server.runner, server.tracker, 3600.0)
        with caplog.at_level(logging.INFO, logger="aggregator.server.service"):
            [job] = scheduler.tick(now)
        assert job.rules.since * 1e6 == -(-entry.until_us // 1_000_000) * 1_000_000
        assert server.registry.schedule("nightly").note == ""
        assert any(
            "older windows have spent their privacy budget; training on the windows from "
            f"{second_after(entry.until_us)} on" in r.getMessage()
            for r in caplog.records
        )
        wait_job(server, job.job_id)


def test_the_privacy_route_needs_a_read_token_and_is_typed_in_openapi(tmp_path) -> None:
    with running_server(str(tmp_path / "r.db"), fleet_data(n_clients=1), read_tokens=("r-token",)) as (_sim, server):
        api = TestClient(create_app(server))
        assert api.get("/api/privacy").status_code == 401
        assert api.get("/api/privacy", headers={"Authorization": "Bearer wrong"}).status_code in (401, 403)
        ok = api.get("/api/privacy", headers={"Authorization": "Bearer r-token"})
        shown = ok.json()
        assert ok.status_code == 200 and (shown["epsilon_cap"], shown["delta"], shown["entries"]) == (10.0, 1e-6, [])
        assert [(g["gateway"], g["spent_epsilon"], g["segments"]) for g in shown["gateways"]] == [("gw-1", 0.0, [])]
        document = api.get("/openapi.json").json()
    schema = document["paths"]["/api/privacy"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/PrivacyOut"}
    parts = document["components"]["schemas"]
    assert {"epsilon_cap", "delta", "gateways", "entries"} <= set(parts["PrivacyOut"]["properties"])
    assert {"spent_epsilon", "remaining_epsilon", "fresh_since_us"} <= set(parts["GatewayBudgetOut"]["properties"])
    assert "privacy cap" in document["paths"]["/api/jobs"]["post"]["responses"]["409"]["description"]


def test_the_cap_setting_is_checked() -> None:
    from aggregator.server.config import ServerConfig

    assert ServerConfig.load(environ={"WHEELFED_PRIVACY_EPSILON_CAP": "4"}).privacy_cap() == PrivacyCap(4.0)
    with pytest.raises(ValueError, match="privacy_epsilon_cap must be a number > 0"):
        ServerConfig(privacy_epsilon_cap=-1.0)
    with pytest.raises(ValueError, match=r"privacy_delta must be a float in \(0, 1e-3\)"):
        ServerConfig(privacy_delta=0.5)


def test_the_ledger_persists_on_both_databases(registry_url: str) -> None:
    first = LedgerEntry("job-a", 1, ("gw-1", "gw-2"), None, None, 0.5, 0.01, 1e-6, 6.0, "running", created=1.0)
    second = LedgerEntry(
        "job-b",
        2,
        ("gw-3",),
        1_795_000_000_000_000,
        9_000_000_000_000_000,
        0.25,
        0.0,
        1e-5,
        3.0,
        "spent",
        model="act:v2",
        created=2.0,
    )
    with Registry(registry_url) as registry:
        registry.add_privacy(first)
        registry.add_privacy(second)
        registry.settle_privacy(
            "job-a", 1, until_us=1_795_000_000_000_001, basis="spent", model="act:v1", gateways=["gw-1"]
        )
    with Registry(registry_url) as registry:
        got = registry.privacy_ledger()
        assert got == [
            LedgerEntry(
                "job-a",
                1,
                ("gw-1",),
                None,
                1_795_000_000_000_001,
                0.5,
                0.01,
                1e-6,
                6.0,
                "spent",
                model="act:v1",
                created=1.0,
            ),
            second,
        ]
        assert registry.privacy_ledger("job-b") == [second]
        with pytest.raises(Exception):  # one entry per attempt
            registry.add_privacy(second)


def test_a_registry_at_revision_0003_gains_the_ledger_and_keeps_its_schedules(registry_url: str) -> None:
    import sqlalchemy as sa
    from alembic import command
    from alembic.config import Config

    engine = sa.create_engine(registry_url if "://" in registry_url else f"sqlite:///{registry_url}")
    with engine.begin() as connection:
        config = Config()
        config.set_main_option("script_location", str(Path(aggregator.__file__).parent / "server" / "migrations"))
        config.attributes["connection"] = connection
        command.upgrade(config, "0003")
        connection.exec_driver_sql(
            "INSERT INTO schedules (schedule_id, model_id, algorithm, config, every_s, cron, min_new_windows, "
            "threshold, canary_share, enabled, last_run, last_windows, created, canary_windows, canary_observe_s, "
            "canary_max_drop) VALUES ('nightly', 'act', 'fedforest', '{}', 60.0, '', NULL, 0.01, 0.25, TRUE, 0.0, 0, "
            "1.0, 0, 900.0, 0.05)"
        )
    engine.dispose()
    assert HEAD_REVISION >= "0004"
    with Registry(registry_url) as registry:
        assert registry.schedule("nightly").note == "" and registry.privacy_ledger() == []


def test_an_attempt_cut_short_by_a_stopped_server_is_charged_what_it_released(tmp_path) -> None:
    """The server stops mid-job (the job stays running) and a new one resumes it: the first
    attempt is settled with the releases it recorded before they went out -- far less than its
    plan -- before the second is entered with the rest of the job's plan: under a cap of 7 the
    job of epsilon 7 resumes and ends within it."""
    from aggregator.server.service import JobRunner

    clients = fleet_data(n_clients=3)
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        api = TestClient(create_app(server))
        job = api.post("/api/jobs", json={"model_id": "act", "config": {**PRIVATE, "n_rounds": 40}}).json()
        while server.registry.job(job["job_id"]).completed < 1:
            time.sleep(0.01)
        server.runner.stop()
        assert server.registry.job(job["job_id"]).state == "running"
        [first] = server.registry.privacy_ledger()
        assert (first.attempt, first.basis, first.until_us) == (1, "running", None)
        assert first.rho == rho_for_epsilon(7.0, 1e-6) and first.releases and first.released_rho
        stopped = time.time()
        server.runner = JobRunner(
            server.registry, server.engine, server.tracker, settings=server.runner.settings, privacy_cap=PrivacyCap(7.0)
        )
        server.runner.start()
        ended = wait_job(server, job["job_id"])
        assert ended.state == "completed", ended.error
        entries = server.registry.privacy_ledger()
        assert [(e.attempt, e.basis, e.model) for e in entries] == [(1, "spent", ""), (2, "spent", ended.result)]
        assert entries[0].until_us >= stopped * 1e6
        assert (entries[0].rho, entries[0].xi, entries[0].releases) == (
            first.released_rho,
            first.released_xi,
            first.releases,
        )
        assert entries[0].epsilon == epsilon_of(first.released_rho, first.released_xi, 1e-6) < 7.0
        assert sum(e.rho + e.xi for e in entries) <= rho_for_epsilon(7.0, 1e-6) * (1 + 1e-9)
        # the model says what its own attempt spent and what the whole job did
        model_id, _, version = ended.result.rpartition(":v")
        meta = server.registry.model(model_id, int(version))[1].metadata
        assert (meta["dp_rho"], meta["dp_xi"]) == (entries[1].rho, entries[1].xi)
        assert meta["dp_attempts"] == 2
        assert meta["dp_job_rho"] == pytest.approx(entries[0].rho + entries[1].rho, rel=1e-12)
        assert meta["dp_job_xi"] == pytest.approx(entries[0].xi + entries[1].xi, rel=1e-12)
        assert meta["dp_job_epsilon"] == pytest.approx(
            epsilon_of(sum(e.rho for e in entries), sum(e.xi for e in entries), 1e-6), rel=1e-9
        )
        assert meta["dp_epsilon"] < meta["dp_job_epsilon"] <= 7.0 + 1e-9
