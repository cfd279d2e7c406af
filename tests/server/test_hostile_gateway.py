"""A gateway that lies to the server: counts it cannot decode, counts it inflates, live
confidences out of range, another gateway's name in its envelope, counts too long to parse.
Each test sends what a hostile gateway can send through its own topics and checks what the
server keeps, counts and logs."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import numpy as np
import pytest

from aggregator.audit import AuditTrail
from aggregator.server.gateway_input import Credit, credit_counts
from shared.protocol.envelope import Message, decode_message, encode_message
from shared.protocol.errors import DecodeError
from shared.protocol.messages import Status
from shared.protocol.messages.deployment import PredictionBatch
from shared.protocol.messages.generic import MAX_WINDOW_COUNT
from shared.protocol.topics import TopicLayout
from tests.server.fleet_memory import announce, fleet_data, running_server

LAYOUT = TopicLayout()


def forged(body, **fields) -> bytes:
    """``body`` with ``fields`` set past its own checks, encoded as a gateway would send it."""
    for name, value in fields.items():
        object.__setattr__(body, name, value)
    return encode_message(Message.create(body, sender="gw-1"))


def deliver(sim, topic: str, payload: bytes) -> None:
    """``payload`` as the broker hands it to the server from the gateway of ``topic``."""
    sim.server._receive_payload(topic, payload)


def batch(probability: float, n: int = 3) -> PredictionBatch:
    return PredictionBatch(
        "act",
        1,
        ("push", "rest"),
        np.arange(n, dtype=np.int64),
        np.zeros(n, np.int16),
        np.full(n, 0.5, np.float32),
        np.ones(n, np.float32),
    )


@pytest.mark.parametrize(
    "fields, reason",
    [
        ({"n_labelled": -5}, "n_labelled must lie in [0, n_windows=10]"),
        ({"n_windows": -1, "n_labelled": 0}, "n_windows must lie in [0, 1000000000]"),
        ({"n_windows": MAX_WINDOW_COUNT + 1}, "n_windows must lie in [0, 1000000000]"),
        ({"n_labelled": 11}, "n_labelled must lie in [0, n_windows=10]"),
    ],
)
def test_negative_or_absurd_status_counts_are_refused_at_decode(fields, reason) -> None:
    with pytest.raises(DecodeError) as refused:
        decode_message(forged(Status(online=True, n_windows=10, n_labelled=5), **fields))
    assert reason in str(refused.value)


def test_a_live_confidence_outside_0_1_is_refused_at_decode() -> None:
    for bad in (1e30, -0.1, 1.0001):
        with pytest.raises(DecodeError, match=r"probability must lie in \[0, 1\]"):
            decode_message(forged(batch(0.5), probability=np.full(3, bad, np.float32)))
    assert decode_message(forged(batch(0.5), probability=np.array([0, 0.5, 1], np.float32))).body.probability[2] == 1


def test_lying_counts_neither_start_scheduled_jobs_nor_reach_the_fleet_total(tmp_path) -> None:
    """A gateway's status jumping to 1e9, 2e9 (refused), 3e9 (refused) and -5 (refused)
    labelled windows: the server credits no more than it could have recorded since its last
    status, so a min_new_windows schedule stays idle and /metrics keeps the honest total."""
    from fastapi.testclient import TestClient

    from aggregator.server.api import create_app

    started = time.monotonic()
    with running_server(str(tmp_path / "r.db"), fleet_data(n_clients=2), max_windows_per_s=1.0) as (sim, server):
        api = TestClient(create_app(server))
        body = {"schedule_id": "s", "model_id": "act", "min_new_windows": 100, "config": {"n_rounds": 1}}
        assert api.post("/api/schedules", json=body).status_code == 201
        for n in (10**9, 2 * 10**9, 3 * 10**9, -5):
            deliver(sim, LAYOUT.status("gw-1"), forged(Status(online=True), n_windows=max(n, 0), n_labelled=n))
            assert server.scheduler.tick(time.time()) == []
        assert server.transport.stats.rejected["SchemaError"] == 3  # 2e9 and 3e9 > MAX_WINDOW_COUNT, and -5
        # what two gateways could have recorded since the server started, at one window a second
        bound = 2 * (time.monotonic() - started + 1)
        metrics = api.get("/metrics").text.splitlines()
        [total] = [int(line.split()[1]) for line in metrics if line.startswith("wheelfed_labelled_windows ")]
        assert 0 <= total == server.tracker.labelled_total() <= bound
        [gw1, _] = api.get("/api/gateways").json()
        assert 0 <= gw1["labelled"] <= gw1["windows"] <= bound
        assert server.registry.jobs() == []


def test_credited_windows_grow_with_time_and_fall_at_once() -> None:
    first = credit_counts(None, 100, 80, now=10.0, first=100)
    assert first == Credit(100, 80, 10.0)
    assert credit_counts(first, 10**9, 10**9, now=10.5, rate=1.0) == Credit(100, 100, 10.5)
    assert credit_counts(first, 10**9, 10**9, now=110.0, rate=1.0) == Credit(200, 200, 110.0)
    assert credit_counts(first, 150, 120, now=110.0, rate=1.0) == Credit(150, 120, 110.0)
    assert credit_counts(first, 20, 5, now=11.0) == Credit(20, 5, 11.0)
    # the clock going back credits nothing, never a negative step
    assert credit_counts(first, 500, 500, now=0.0, rate=1.0) == Credit(100, 100, 0.0)
    # oscillating between 0 and a high count never lifts the credit above the time allowance
    credit = first
    for k in range(1, 21):
        credit = credit_counts(credit, 0 if k % 2 else 10**9, 0 if k % 2 else 10**9, now=10.0 + k, rate=1.0)
    assert credit.windows <= 100 + 20


def test_a_new_gateways_first_status_is_not_credited_in_full(tmp_path) -> None:
    """A gateway id the registry has never seen says 10**9 labelled windows in its first status:
    it is credited nothing yet (before: 10**9 at once, enough to start a scheduled job), then
    grows like any other gateway's credit; a configured allowance caps the first credit."""
    from fastapi.testclient import TestClient

    from aggregator.server.api import create_app

    assert credit_counts(None, 10**9, 10**9, now=0.0) == Credit(0, 0, 0.0)
    assert credit_counts(None, 10**9, 10**9, now=0.0, first=500) == Credit(500, 500, 0.0)
    assert credit_counts(None, 20, 10, now=0.0, first=500) == Credit(20, 10, 0.0)
    started = time.monotonic()
    with running_server(str(tmp_path / "r.db"), fleet_data(n_clients=1), max_windows_per_s=1.0) as (sim, server):
        api = TestClient(create_app(server))
        body = {"schedule_id": "s", "model_id": "act", "min_new_windows": 100, "config": {"n_rounds": 1}}
        assert api.post("/api/schedules", json=body).status_code == 201
        before = server.tracker.labelled_total()
        deliver(
            sim,
            LAYOUT.status("gw-new"),
            encode_message(Message.create(Status(online=True, n_windows=10**9, n_labelled=10**9), sender="gw-new")),
        )
        assert server.scheduler.tick(time.time()) == []
        rows = {r.gateway: r for r in server.tracker.snapshot()}
        assert rows["gw-new"].labelled <= time.monotonic() - started + 1
        assert server.tracker.labelled_total() - before <= time.monotonic() - started + 1
        assert server.registry.jobs() == []


def test_the_audit_log_names_the_topics_publisher_not_the_claimed_sender(caplog) -> None:
    audit = AuditTrail(keep_bodies=True).attach(SimpleNamespace(layout=LAYOUT, audit=None))
    message = Message.create(Status(online=True), sender="gw-1")  # sent by gw-2 on its own outbox
    with caplog.at_level(logging.INFO, logger="aggregator.audit"):
        audit.record(LAYOUT.outbox("gw-2"), message, 40)
    [line] = caplog.records
    assert (line.client, line.claimed) == ("gw-2", "gw-1")
    assert list(audit.view()) == ["gw-2"] and audit.bytes_by_client == {"gw-2": 40}


def test_a_count_too_long_to_parse_is_unknown_and_logs_no_traceback(tmp_path, caplog) -> None:
    with running_server(str(tmp_path / "r.db"), fleet_data(n_clients=1)) as (sim, server):
        with caplog.at_level(logging.INFO):
            for _ in range(50):
                detail = {"predicted": "9" * 5000, "alerts": "9" * 11, "labels": "push=" + "9" * 5000}
                deliver(
                    sim,
                    LAYOUT.status("gw-1"),
                    encode_message(
                        Message.create(Status(online=True, n_windows=3, n_labelled=2, detail=detail), sender="gw-1")
                    ),
                )
        [row] = server.tracker.snapshot()
        assert (row.predicted, row.alerts, row.labels, row.labelled) == (None, None, None, 2)
        assert server.transport.stats.handler_errors == 0
        assert not [r for r in caplog.records if r.exc_info]


def test_a_status_fault_is_logged_once_per_kind_and_counted(tmp_path, caplog, monkeypatch) -> None:
    import aggregator.server.service as service

    def broken(*_args):
        raise ValueError("unreadable")

    with running_server(str(tmp_path / "r.db"), fleet_data(n_clients=1)) as (sim, server):
        monkeypatch.setattr(service, "fold_statuses", broken)
        with caplog.at_level(logging.INFO):
            for _ in range(20):
                announce(sim, {"gw-1": 5})
        assert server.tracker.faults.counts == {"status:ValueError": 20}
        faults = [r for r in caplog.records if getattr(r, "fault", None) == "status:ValueError"]
        assert len(faults) == 1 and faults[0].exc_info is None
        assert server.transport.stats.handler_errors == 0
