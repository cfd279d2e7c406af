"""The privacy ledger is written ahead of every private release: a job whose server dies mid-way
is charged (for that attempt) exactly the releases it made plus the one in flight -- recorded
before its request went out, so a crash between the record and the send over-counts, never
under-counts -- and the job resumed after it is charged its own spending on top: the rest of
its plan when it continues the stored model (the job stays within its plan), the whole plan when
it starts over (less than twice the plan in all). An uninterrupted job's entry is its model's
metadata, as before, on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from aggregator.fleet_sums import FleetSummer
from aggregator.jobs import TrainingError
from aggregator.privacy import PrivacyBudget, Release, epsilon_of, rho_for_epsilon, skellam_release
from aggregator.privacy.ledger import LedgerEntry, PrivacyCap
from aggregator.registry import Registry, RegistryError
from aggregator.server.api import create_app
from aggregator.server.service import JobRunner
from tests.server.fleet_memory import announce, fleet_data, running_server, wait_job

EPSILON = 7.0
PLAN_RHO = rho_for_epsilon(EPSILON, 1e-6)
CAP = PrivacyCap(100.0)  # room for both attempts whatever they spend
JOBS = {
    # the opening, then per round 2 split levels and the leaves: killed with round 2's first level
    # in flight, round 1 stored -- the resumed attempt continues its model on the rest of the budget
    "fedscs-xgb": ({"n_rounds": 4, "max_depth": 2, "dp_epsilon": EPSILON, "dp_features": 4}, ("splits", 3)),
    # the opening, the root histograms, the leaves: killed with the root histograms in flight --
    # nothing stored, the resumed attempt makes every release again on the whole plan
    "fedforest": ({"n_trees": 4, "max_depth": 3, "dp_epsilon": EPSILON}, ("histograms", 1)),
}


class Spy:
    """Every release's cost as the strategy's budget has it: ``asked`` (the planned cost of the
    one ``mu`` was last asked for, per budget) and ``spent`` (the decoded ones, actual cost)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.spent: list[Release] = []
        self.asked: Release | None = None
        mu, spend = PrivacyBudget.mu, PrivacyBudget.spend

        def spy_mu(budget: PrivacyBudget, kind: str, l2: float, l1: float) -> float:
            value = mu(budget, kind, l2, l1)
            self.asked = skellam_release(kind, l2, l1, value)
            return value

        def spy_spend(budget: PrivacyBudget, release: Release) -> None:
            spend(budget, release)
            self.spent.append(release)

        monkeypatch.setattr(PrivacyBudget, "mu", spy_mu)
        monkeypatch.setattr(PrivacyBudget, "spend", spy_spend)


@pytest.mark.parametrize("algorithm", sorted(JOBS))
def test_a_job_killed_after_k_releases_is_charged_them_and_the_one_in_flight(
    registry_url: str, monkeypatch: pytest.MonkeyPatch, algorithm: str
) -> None:
    config, (kill_kind, kill_nth) = JOBS[algorithm]
    spy = Spy(monkeypatch)
    sends: list[int] = []
    checked: list[LedgerEntry] = []
    killed: list[LedgerEntry] = []
    ask = FleetSummer.ask

    def send(summer: FleetSummer, *args, **kwargs):
        """Every release's requests go out here: the ledger must already hold it; the
        ``kill_at``-th never goes out -- its server dies with the entry left running."""
        sends.append(1)
        [entry] = [e for e in server.registry.privacy_ledger() if e.basis == "running"]
        assert spy.asked is not None and entry.releases == len(spy.spent) + 1 == len(sends)
        # in flight at its cost from the fewest gateways a round accepts (``min_fraction``)
        worst = 1.0 / server.runner.settings.min_fraction
        assert entry.released_rho == pytest.approx(sum(r.rho for r in spy.spent) + spy.asked.rho * worst, rel=1e-12)
        assert entry.released_xi == pytest.approx(sum(r.xi for r in spy.spent) + spy.asked.xi * worst, rel=1e-12)
        checked.append(entry)
        of_kind = sum(r.kind == kill_kind for r in spy.spent) + (spy.asked.kind == kill_kind)
        if spy.asked.kind == kill_kind and of_kind == kill_nth and not killed:
            killed.append(entry)
            runner = server.runner  # the dying server: it settles nothing on its way out
            runner._shutting_down = True
            runner._stop.set()
            raise TrainingError("the server was killed")
        return ask(summer, *args, **kwargs)

    monkeypatch.setattr(FleetSummer, "ask", send)
    clients = fleet_data(n_clients=3)
    with running_server(registry_url, clients) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        api = TestClient(create_app(server))
        job = api.post("/api/jobs", json={"algorithm": algorithm, "model_id": "act", "config": config}).json()
        while not killed:
            time.sleep(0.01)
        server.runner.stop()
        made, in_flight, kill_at = list(spy.spent), spy.asked, len(sends)
        assert len(made) == kill_at - 1 and in_flight is not None and in_flight.kind == kill_kind
        [cut] = server.registry.privacy_ledger()
        assert (cut.basis, cut.rho, cut.releases) == ("running", PLAN_RHO, kill_at)  # nothing settled it
        assert server.registry.job(job["job_id"]).state == "running"

        spy.spent.clear()
        sends.clear()
        server.runner = JobRunner(
            server.registry,
            server.engine,
            server.tracker,
            settings=server.runner.settings,
            privacy_cap=PrivacyCap(100.0),
        )
        server.runner.start()
        ended = wait_job(server, job["job_id"])
        assert ended.state == "completed" and ended.attempt == 2, ended.error
        first, second = server.registry.privacy_ledger()
        # the interrupted attempt: the k releases it made and the one in flight, not its plan
        assert (first.attempt, first.basis, first.model, first.releases) == (1, "spent", "", kill_at)
        worst = 1.0 / server.runner.settings.min_fraction
        assert first.rho == pytest.approx(sum(r.rho for r in made) + in_flight.rho * worst, rel=1e-12)
        assert first.xi == pytest.approx(sum(r.xi for r in made) + in_flight.xi * worst, rel=1e-12)
        assert first.rho + first.xi < 0.75 * PLAN_RHO
        # the resumed attempt: entered with the rest of the job's plan when it continues the
        # stored model, with the whole plan when it starts over; settled by its model's metadata
        resumed = {e.rho for e in checked if e.attempt == 2}
        if algorithm == "fedscs-xgb":
            rest = epsilon_of(PLAN_RHO - first.rho - first.xi, 0.0, 1e-6)
            assert resumed == {rho_for_epsilon(rest, 1e-6)} and ended.history[-1]["from_step"] == 1
        else:
            assert resumed == {PLAN_RHO} and ended.history[-1]["from_step"] == 0
        meta = server.registry.model("act", 1)[1].metadata
        assert (second.attempt, second.basis, second.model) == (2, "spent", ended.result)
        assert (second.rho, second.xi, second.epsilon) == (meta["dp_rho"], meta["dp_xi"], meta["dp_epsilon"])
        assert second.releases == meta["dp_releases"] == len(spy.spent)
        total = sum(e.rho + e.xi for e in (first, second))
        assert total == pytest.approx(first.rho + first.xi + meta["dp_rho"] + meta["dp_xi"], rel=1e-12)
        assert total < 2 * PLAN_RHO
        if algorithm == "fedscs-xgb":  # the job, and its model, within the epsilon it was admitted with
            assert total <= PLAN_RHO * (1 + 1e-9)
        shown = api.get("/api/privacy?detail=true").json()
        assert [(e["attempt"], e["basis"]) for e in shown["entries"]] == [(1, "spent"), (2, "spent")]
        assert all(g["jobs"] == 2 for g in shown["gateways"])


def test_an_uninterrupted_jobs_entry_is_its_models_metadata(registry_url: str) -> None:
    """Settled as before, by the model's metadata; the write-ahead record agrees with it."""
    clients = fleet_data(n_clients=3)
    config = JOBS["fedscs-xgb"][0]
    with running_server(registry_url, clients) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        api = TestClient(create_app(server))
        job = wait_job(server, api.post("/api/jobs", json={"model_id": "act", "config": config}).json()["job_id"])
        assert job.state == "completed", job.error
        meta = server.registry.model("act", 1)[1].metadata
        [entry] = server.registry.privacy_ledger()
        assert (entry.attempt, entry.basis, entry.model, entry.gateways) == (
            1,
            "spent",
            "act:v1",
            tuple(job.participants),
        )
        assert (entry.rho, entry.xi, entry.delta, entry.epsilon) == (
            meta["dp_rho"],
            meta["dp_xi"],
            meta["dp_delta"],
            meta["dp_epsilon"],
        )
        assert entry.releases == meta["dp_releases"]
        assert entry.released_rho == pytest.approx(meta["dp_rho"], rel=1e-12)
        assert entry.released_xi == pytest.approx(meta["dp_xi"], rel=1e-12)


def test_releases_are_recorded_on_a_running_entry_only(registry_url: str) -> None:
    running = LedgerEntry("job-a", 1, ("gw-1",), None, None, 0.5, 0.0, 1e-6, 6.0, "running", created=1.0)
    with Registry(registry_url) as registry:
        registry.add_privacy(running)
        registry.record_releases("job-a", 1, 0.125, 0.01, 3)
        with pytest.raises(RegistryError, match="no running privacy ledger entry"):
            registry.record_releases("job-a", 2, 0.125, 0.01, 3)
        registry.settle_privacy("job-a", 1, basis="spent", until_us=5)
        with pytest.raises(RegistryError):
            registry.record_releases("job-a", 1, 0.25, 0.01, 4)
    with Registry(registry_url) as registry:
        [got] = registry.privacy_ledger()
        assert (got.basis, got.released_rho, got.released_xi, got.releases) == ("spent", 0.125, 0.01, 3)


def test_a_registry_at_0005_keeps_its_running_entry_which_is_settled_with_its_plan(registry_url: str) -> None:
    """An attempt entered by a server before the write-ahead record has none (``releases``
    None): what it released is unknown, so it is settled with its plan, as before."""
    import sqlalchemy as sa
    from alembic import command
    from alembic.config import Config

    import aggregator
    from aggregator.jobs import JobSettings

    engine = sa.create_engine(registry_url if "://" in registry_url else f"sqlite:///{registry_url}")
    with engine.begin() as connection:
        config = Config()
        config.set_main_option("script_location", str(Path(aggregator.__file__).parent / "server" / "migrations"))
        config.attributes["connection"] = connection
        command.upgrade(config, "0005")
        connection.exec_driver_sql(
            "INSERT INTO privacy_ledger (job_id, attempt, gateways, since_us, until_us, rho, xi, delta, epsilon, "
            f"basis, model, created) VALUES ('job-old', 1, '[\"gw-1\"]', NULL, NULL, {PLAN_RHO!r}, 0.0, 1e-6, 7.0, "
            "'running', '', 1.0)"
        )
    engine.dispose()
    with Registry(registry_url) as registry:
        registry.add_job("job-old", "fedscs-xgb", {"dp_epsilon": EPSILON}, model_id="act", total=4)
        [old] = registry.privacy_ledger()
        assert (old.basis, old.releases, old.released_rho) == ("running", None, None)
        runner = JobRunner(registry, None, None, settings=JobSettings())  # type: ignore[arg-type]
        runner._settle_privacy(registry.job("job-old"))
        [settled] = registry.privacy_ledger()
        assert (settled.basis, settled.rho, settled.xi, settled.epsilon) == ("planned", PLAN_RHO, 0.0, 7.0)
        assert settled.until_us is not None


def test_an_attempt_whose_releases_went_unrecorded_is_charged_its_plan(tmp_path, monkeypatch, caplog) -> None:
    """A budget made outside the attempt's log (the log not installed: here, taken away) leaves
    the record empty; an attempt that stored a step made releases, so it is charged its plan,
    never nothing."""
    import contextlib
    import logging

    from aggregator.server import service

    monkeypatch.setattr(service, "recording_releases", lambda log: contextlib.nullcontext(log))
    clients = fleet_data(n_clients=3)
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        api = TestClient(create_app(server))
        config = {**JOBS["fedscs-xgb"][0], "n_rounds": 40}
        job = api.post("/api/jobs", json={"model_id": "act", "config": config}).json()
        while server.registry.job(job["job_id"]).completed < 1:
            time.sleep(0.01)
        with caplog.at_level(logging.WARNING, logger="aggregator.server.service"):
            api.post(f"/api/jobs/{job['job_id']}/cancel")
            assert wait_job(server, job["job_id"]).state == "cancelled"
        [entry] = server.registry.privacy_ledger()
        assert (entry.basis, entry.rho, entry.xi, entry.releases) == ("planned", PLAN_RHO, 0.0, 0)
        assert any("recorded no release: charged its plan" in r.getMessage() for r in caplog.records)
