"""The registry on SQLAlchemy: the same behaviour on SQLite and on a real PostgreSQL, the server's
tables, and the upgrade of a registry file written before migrations existed."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

import aggregator
from aggregator.algorithms import FedForest
from aggregator.fleet_status import GatewayRow
from aggregator.registry import HEAD_REVISION, JobRules, Registry, RegistryError, ScheduleRecord

# The schema aggregator/registry.py created before the server (commit 7c2b1ad), verbatim.
LEGACY_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS models (
        model_id TEXT NOT NULL, version INTEGER NOT NULL, algorithm TEXT NOT NULL,
        feature_set_version TEXT NOT NULL, kind TEXT NOT NULL, target TEXT NOT NULL DEFAULT '',
        n_trees INTEGER NOT NULL, classes TEXT NOT NULL, metrics TEXT NOT NULL DEFAULT '{}',
        model BLOB NOT NULL, created REAL NOT NULL, PRIMARY KEY (model_id, version))""",
    """CREATE TABLE IF NOT EXISTS deployments (
        model_id TEXT NOT NULL, version INTEGER NOT NULL, client TEXT NOT NULL, state TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '', updated REAL NOT NULL, PRIMARY KEY (model_id, version, client))""",
)


def small_model(seed: int = 0):
    rng = np.random.default_rng(seed)
    X, y = rng.normal(size=(60, 3)), rng.integers(0, 2, 60)
    return aggregator.simulate(FedForest(n_trees=1, max_depth=2, secure_aggregation=False), [(X, y)])


def test_models_and_deployments_behave_alike_on_both_databases(registry_url: str) -> None:
    model = small_model()
    with Registry(registry_url) as registry:
        assert registry.add("act", model).version == 1
        second = registry.add(
            "act", model, metrics={"accuracy": 0.9}, config={"n_rounds": 3}, parent="act:v1", job_id="job-1"
        )
        assert (second.label, second.parent, second.config, second.job_id) == (
            "act:v2",
            "act:v1",
            {"n_rounds": 3},
            "job-1",
        )
        registry.set_deployment("act", 1, "gw-1", "active")
        registry.set_deployment("act", 2, "gw-1", "pending")
        registry.set_deployment("act", 2, "gw-1", "active")
        registry.set_deployment("act", 2, "gw-2", "rejected", "feature set")
    with Registry(registry_url) as registry:  # reopened: already at the head revision
        assert [r.label for r in registry.list()] == ["act:v1", "act:v2"]
        assert [r.label for r in registry.list(offset=1, limit=1)] == ["act:v2"]
        record, back = registry.model("act")
        assert record.version == 2 and back == model and record.metrics == {"accuracy": 0.9}
        assert registry.model_bytes("act", 1)[1] == model.to_cbor()
        assert registry.deployments()[0] == ("act", 2, "gw-2", "rejected", "feature set")
        assert {c: d.label for c, d in registry.running().items()} == {"gw-1": "act:v2"}
        with pytest.raises(RegistryError, match="no version 7 of act in .*; it has act:v1, act:v2"):
            registry.model("act", 7)


def test_writers_in_parallel_never_share_a_version(registry_url: str) -> None:
    """Two registries (two connections) adding at once: versions 1..N, none twice."""
    model = small_model()
    registries = [Registry(registry_url), Registry(registry_url)]

    def add(registry: Registry) -> None:
        for _ in range(5):
            registry.add("act", model)

    threads = [threading.Thread(target=add, args=(r,)) for r in registries]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.version for r in registries[0].list()] == list(range(1, 11))
    for r in registries:
        r.close()


def test_job_rules_stored_before_a_rule_existed_take_its_default(registry_url: str) -> None:
    with Registry(registry_url) as registry:
        registry.add_job("job-old", "fedscs-xgb", {}, model_id="act", total=1)
        registry.update_job("job-old", rules={"min_gateways": 3, "retired_rule": True})  # as an older server wrote it
        assert registry.job("job-old").rules == JobRules(min_gateways=3)


def test_jobs_rounds_gateways_schedules_and_promotions(registry_url: str) -> None:
    with Registry(registry_url) as registry:
        rules = JobRules(("gw-1", "gw-2"), min_gateways=2, since=10.0)
        job = registry.add_job("job-a", "fedscs-xgb", {"n_rounds": 3}, model_id="act", total=3, rules=rules)
        assert (job.state, job.completed, job.rules) == ("queued", 0, rules)
        registry.update_job("job-a", state="running", participants=["gw-1", "gw-2"])
        registry.complete_round("job-a", 1, 3, 2, 2, {"train_loss": 0.5}, 0.1, b"model-1")
        with pytest.raises(RegistryError, match="round 1 follows round 1"):  # never applied twice
            registry.complete_round("job-a", 1, 3, 2, 2, {"train_loss": 0.5}, 0.1, b"model-1")
        with pytest.raises(RegistryError, match="round 3 follows round 1"):  # never one lost
            registry.complete_round("job-a", 3, 3, 2, 2, {}, 0.1, None)
        registry.complete_round("job-a", 2, 3, 2, 1, {"train_loss": 0.4}, 0.1, b"model-2")
        job = registry.job("job-a")
        assert (job.state, job.completed, job.participants) == ("running", 2, ["gw-1", "gw-2"])
        assert [r.metrics["train_loss"] for r in registry.rounds("job-a")] == [0.5, 0.4]
        assert registry.last_checkpoint("job-a").checkpoint == b"model-2"
        assert [j.job_id for j in registry.jobs(state="running")] == ["job-a"]
        with pytest.raises(RegistryError, match="no job 'job-b'"):
            registry.job("job-b")

        rows = [
            GatewayRow("gw-1", True, 5.0, "act:v1", 10, 8, None, "ort", 3, 0, "PUSH", "", {"PUSH": 8}, "fs1"),
            GatewayRow("gw-2", False, 4.0, None, None, None, None, None, None, None, None, ""),
        ]
        registry.save_gateways(rows)
        registry.save_gateways([rows[0]])
        assert registry.gateways() == rows

        schedule = ScheduleRecord(
            "nightly", "act", "fedscs-xgb", {"n_rounds": 2}, 3600.0, "", None, 0.01, 0.25, True, 0.0, 0, 1.0
        )
        assert registry.add_schedule(schedule) == schedule
        registry.update_schedule("nightly", last_run=10.0, last_windows=40)
        assert (registry.schedule("nightly").last_run, registry.schedules()[0].last_windows) == (10.0, 40)
        decision = registry.add_promotion(
            job_id="job-a",
            model_id="act",
            candidate=2,
            baseline=1,
            metric="accuracy",
            candidate_value=0.8,
            baseline_value=0.9,
            threshold=0.05,
            decision="rejected",
            detail="regressed by 0.1 > 0.05",
        )
        assert registry.promotions("act") == [decision] and decision.decision == "rejected"
        registry.delete_schedule("nightly")
        assert registry.schedules() == []


def test_a_registry_file_from_before_the_server_is_upgraded_in_place(tmp_path: Path) -> None:
    model = small_model()
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    for statement in LEGACY_SCHEMA:
        db.execute(statement)
    db.execute(
        "INSERT INTO models VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            "act",
            1,
            "fedforest",
            model.feature_set_version,
            model.kind,
            "",
            model.n_trees,
            json.dumps(list(model.classes)),
            json.dumps({"accuracy": 0.7}),
            model.to_cbor(),
            100.0,
        ),
    )
    db.execute("INSERT INTO deployments VALUES ('act', 1, 'gw-1', 'active', '', 101.0)")
    db.commit()
    db.close()
    with Registry(path) as registry:
        record, back = registry.model("act", 1)
        assert back == model and record.metrics == {"accuracy": 0.7} and record.created == 100.0
        assert (record.config, record.parent, record.job_id) == ({}, "", "")
        assert registry.running()["gw-1"].label == "act:v1"
        assert registry.add("act", model).version == 2
        assert registry.jobs() == [] and registry.schedules() == []
    db = sqlite3.connect(path)
    assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(HEAD_REVISION,)]
    db.close()


def test_head_revision_is_the_migration_scripts_head() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(Path(aggregator.__file__).parent / "server" / "migrations"))
    assert ScriptDirectory.from_config(config).get_heads() == [HEAD_REVISION]


def test_an_unreachable_database_is_one_clear_error() -> None:
    with pytest.raises(RegistryError, match=r"postgresql\+psycopg://wf:\*\*\*@127.0.0.1:1/x is not a usable"):
        Registry("postgresql+psycopg://wf:secret@127.0.0.1:1/x")


def test_a_registry_at_revision_0002_gains_the_canary_columns_and_keeps_its_rows(registry_url: str) -> None:
    """Revision 0003: a schedule stored before it gets the defaults that keep its behaviour (no
    live check); a promotion stored before it has no live numbers."""
    import sqlalchemy as sa
    from alembic import command
    from alembic.config import Config

    engine = sa.create_engine(registry_url if "://" in registry_url else f"sqlite:///{registry_url}")
    with engine.begin() as connection:
        config = Config()
        config.set_main_option("script_location", str(Path(aggregator.__file__).parent / "server" / "migrations"))
        config.attributes["connection"] = connection
        command.upgrade(config, "0002")
        connection.exec_driver_sql(
            "INSERT INTO schedules (schedule_id, model_id, algorithm, config, every_s, cron, min_new_windows, "
            "threshold, canary_share, enabled, last_run, last_windows, created) "
            "VALUES ('nightly', 'act', 'fedforest', '{}', 60.0, '', NULL, 0.01, 0.25, TRUE, 0.0, 0, 1.0)"
        )
        connection.exec_driver_sql(
            "INSERT INTO promotions (job_id, model_id, candidate, baseline, metric, candidate_value, baseline_value, "
            "threshold, decision, detail, created) "
            "VALUES ('job-a', 'act', 2, 1, 'accuracy', 0.8, 0.9, 0.05, 'rejected', 'regressed', 2.0)"
        )
    engine.dispose()
    with Registry(registry_url) as registry:
        schedule = registry.schedule("nightly")
        assert (schedule.every_s, schedule.threshold, schedule.canary_share) == (60.0, 0.01, 0.25)
        assert (schedule.canary_windows, schedule.canary_observe_s, schedule.canary_max_drop) == (0, 900.0, 0.05)
        [old] = registry.promotions()
        assert (old.decision, old.detail, old.canary) == ("rejected", "regressed", {})
        new = registry.add_promotion(
            job_id="job-b",
            model_id="act",
            candidate=3,
            baseline=1,
            metric="accuracy",
            candidate_value=0.9,
            baseline_value=0.9,
            threshold=0.05,
            decision="halted",
            detail="gw-1: dropped",
            canary={"gateways": {"gw-1": {"before": 0.9}}},
        )
        assert registry.promotions()[0] == new and new.canary == {"gateways": {"gw-1": {"before": 0.9}}}
