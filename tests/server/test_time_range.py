"""A job restricted to a data time range (``since``/``until``) trains on exactly the windows
that start in it: the model is the simulation over only those windows, the held-out score is
theirs, ``min_labelled`` counts them (a gateway with too few in the range sits out and says
why), a gateway's store snapshot holds exactly them, and a bad range is one 422 line."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

import aggregator
from aggregator.algorithms import FedSCSXGB
from aggregator.server.api import create_app
from edge_client.store import WindowRecord, WindowStore
from edge_client.training_data import ClientData, JobSnapshots, StoreTrainingData
from shared.model import TreeEnsemble
from shared.protocol.messages.fleet_sums import TimeRange
from tests.server.fleet_memory import LABELS, announce, running_server, wait_job

CONFIG = {"n_rounds": 3, "max_depth": 2, "n_bins": 16, "protocol": "histogram"}
FS = "wheelfed-tifex-2+abc"
XGB = FedSCSXGB(**CONFIG, feature_set_version=FS)
DAY_US = 86_400 * 10**6
T0 = 1_793_491_200  # 2026-11-01T00:00:00Z
SINCE, UNTIL = T0 + 3 * 86_400, T0 + 7 * 86_400  # days 3..6 of ten


def timed_fleet(seed: int = 0) -> tuple[list[ClientData], list[ClientData]]:
    """Five gateways with 120 windows each spread over ten days (gw-4's and gw-5's mostly before
    day 3),
    and the same gateways holding only their windows that start in [SINCE, UNTIL). They store
    feature set ``FS``, as gateways do -- the survey first learns that version, then asks each
    gateway again whether it meets the job's rules for it -- except gw-1 and gw-5, whose
    unversioned data fit any job (they meet the rules, or not, in the survey's first request)."""
    rng = np.random.default_rng(seed)
    full, inside = [], []
    for k in range(5):
        client, n = f"gw-{k + 1}", 120
        version = "" if client in ("gw-1", "gw-5") else FS
        X = rng.normal(size=(n, 4))
        y = LABELS[(X[:, 0] + 0.8 * X[:, 2] + 0.3 * X[:, 1] * X[:, 3] > 0).astype(int)]
        days = rng.uniform(0, 3.2, n) if client in ("gw-4", "gw-5") else rng.uniform(0, 10, n)
        start = T0 * 10**6 + (days * DAY_US).astype(np.int64)  # held-out windows spread over the days too
        cut = int(0.75 * n)
        full.append(
            ClientData(
                client,
                X[:cut],
                y[:cut],
                feature_set_version=version,
                X_test=X[cut:],
                y_test=y[cut:],
                start_us=start[:cut],
                start_us_test=start[cut:],
            )
        )
        train = TimeRange(SINCE * 10**6, UNTIL * 10**6).contains(start[:cut])
        test = TimeRange(SINCE * 10**6, UNTIL * 10**6).contains(start[cut:])
        inside.append(
            ClientData(
                client,
                X[:cut][train],
                y[:cut][train],
                feature_set_version=version,
                X_test=X[cut:][test],
                y_test=y[cut:][test],
            )
        )
    return full, inside


def test_a_job_trains_on_exactly_the_windows_in_its_time_range(registry_url: str) -> None:
    full, inside = timed_fleet()
    in_range = {c.client_id: c.X.shape[0] + c.X_test.shape[0] for c in inside}
    assert max(in_range["gw-4"], in_range["gw-5"]) < 30 <= min(in_range[g] for g in ("gw-1", "gw-2", "gw-3"))
    with running_server(registry_url, full) as (sim, server):
        announce(sim, {c.client_id: 120 for c in full})  # in total every gateway has enough
        api = TestClient(create_app(server))
        started = api.post(
            "/api/jobs",
            json={
                "model_id": "act",
                "config": CONFIG,
                "min_labelled": 30,
                "since": "2026-11-04T00:00:00Z",
                "until": UNTIL,
            },
        )
        assert started.status_code == 201, started.text
        job = wait_job(server, started.json()["job_id"])
        assert job.state == "completed", job.error
        assert (job.rules.since, job.rules.until) == (SINCE, UNTIL)
        assert job.participants == ["gw-1", "gw-2", "gw-3"] and job.feature_set == FS  # gw-4, gw-5: too few in it
        model = TreeEnsemble.from_cbor(api.get("/api/models/act/1/download").content)
        assert model == aggregator.simulate(XGB, inside[:3])
        assert model != aggregator.simulate(XGB, full[:3])  # the range made a difference
        X = np.vstack([c.X_test for c in inside[:3]])
        y = np.concatenate([c.y_test for c in inside[:3]])
        assert "metrics" in job.evaluation, job.evaluation
        assert job.evaluation["metrics"]["accuracy"] == pytest.approx(float(np.mean(model.predict(X) == y)), abs=1e-12)
        assert sum(map(sum, job.evaluation["confusion"])) == len(y)  # scored on the range's held-out windows

        all_four = api.post(
            "/api/jobs",
            json={
                "model_id": "act",
                "config": CONFIG,
                "min_labelled": 30,
                "min_gateways": 4,
                "since": SINCE,
                "until": UNTIL,
            },
        )
        failed = wait_job(server, all_four.json()["job_id"])
        assert failed.state == "failed"
        assert "the job needs 4" in failed.error and "gw-4: too_few_labelled_windows" in failed.error
        assert "gw-5: too_few_labelled_windows: fewer than 30 labelled windows in the job's time range" in failed.error

        whole = api.post("/api/jobs", json={"model_id": "act", "config": CONFIG, "clients": ["gw-1", "gw-2", "gw-3"]})
        assert wait_job(server, whole.json()["job_id"]).state == "completed"
        assert server.registry.model("act", 2)[1] == aggregator.simulate(XGB, full[:3])


def test_a_gateway_snapshots_only_the_windows_that_start_in_the_range(tmp_path) -> None:
    with WindowStore(tmp_path / "w.db") as store:
        for i in range(40):
            store.add(WindowRecord("s", i * 10, i * 10 + 10, np.array([float(i), 1.0]), "fs"))
            store.label_range("s", i * 10, i * 10 + 10, "sit" if i % 2 else "lie")
        snapshots = JobSnapshots(StoreTrainingData(store, holdout_fraction=0.25))
        assert snapshots.get("j", "fs").X.shape[0] == 29  # no range yet: every training window
        snapshots.restrict("j", TimeRange(since_us=50, until_us=350))
        train, test = snapshots.get("j", "fs"), snapshots.get("j", "fs", split="holdout")
        assert train.X[:, 0].tolist() == list(range(5, 29)) and train.start_us.tolist() == list(range(50, 290, 10))
        assert test.X[:, 0].tolist() == [30, 31, 32, 33, 34]  # the held-out tail is the same windows, cut
        assert snapshots.count("j", "fs") == 24 + 5
        assert snapshots.get("other", "fs").X.shape[0] == 29  # the range is the job's


@pytest.mark.parametrize(
    "body, detail",
    [
        ({"since": UNTIL, "until": SINCE}, "since (2026-11-08T00:00:00Z) must be before until (2026-11-04T00:00:00Z)"),
        ({"since": "2026-11-04T00:00:00"}, "since: '2026-11-04T00:00:00' has no UTC offset"),
        ({"until": "last tuesday"}, "until: 'last tuesday' is neither Unix seconds nor an ISO-8601 time"),
        ({"since": -1}, "since must lie between 1970-01-01 and 9999-12-31 (Unix seconds 0 to 253402300799), got -1"),
        ({"until": 1e300}, "until must lie between 1970-01-01 and 9999-12-31"),
        ({"since": "0001-01-01T00:00:00+01:00"}, "since must lie between 1970-01-01 and 9999-12-31"),
    ],
)
def test_a_bad_time_range_is_one_422_line(tmp_path, body, detail) -> None:
    with running_server(str(tmp_path / "r.db"), timed_fleet()[0][:1]) as (_sim, server):
        api = TestClient(create_app(server))
        response = api.post("/api/jobs", json={"model_id": "act", **body})
        assert response.status_code == 422 and response.json()["detail"].startswith(detail), response.text
        assert server.registry.jobs() == []


def test_the_openapi_document_describes_the_time_range(tmp_path) -> None:
    with running_server(str(tmp_path / "r.db"), timed_fleet()[0][:1]) as (_sim, server):
        schema = TestClient(create_app(server)).get("/openapi.json").json()["components"]["schemas"]["JobIn"]
        since, until = schema["properties"]["since"], schema["properties"]["until"]
        assert {t.get("type") for t in since["anyOf"]} == {"number", "string", "null"}
        assert "ISO-8601" in since["description"] and "before this time" in until["description"]
