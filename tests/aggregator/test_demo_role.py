"""The demo's aggregator process, without a broker: what it tells the orchestrator about gateways
that sat out a job (from the job's real round records), and the privacy settings it trains with."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

from aggregator.demo.aggregator_role import Events, Role, RoleConfig
from aggregator.rounds import RoundResult
from shared.protocol.messages import ErrorReply


def _role(secure: bool = True) -> tuple[Role, io.StringIO]:
    """A Role that never connected: the parts under test need its config, events and status."""
    out = io.StringIO()
    role = Role.__new__(Role)
    role.config = RoleConfig(host="localhost", port=1, protocol=5, password="x", clients=["gw-01", "gw-02", "gw-03"],
                             registry="r.db", signing_key="k", feature_set_version="v1", secure_aggregation=secure)
    role.events = Events(out)
    role.status = {"gw-03": {"online": False}}
    return role, out


def _events(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_sat_out_event_names_each_gateway_and_why_from_the_jobs_round_records() -> None:
    role, out = _role()
    no_data = ErrorReply("no_data", "no labelled windows of feature set 'v1' in the store")
    first = RoundResult("job", 1, "x", ["gw-01", "gw-02", "gw-03"], replies={"gw-01": None},
                        errors={"gw-02": no_data}, timed_out=["gw-03"])
    later = RoundResult("job", 2, "x", ["gw-01"], replies={"gw-01": None})
    job = SimpleNamespace(clients=["gw-01", "gw-02", "gw-03"], results=[first, later], rejected={})
    role._sat_out("training fedforest", job)
    [event] = _events(out)
    assert event["event"] == "sat_out" and event["job"] == "training fedforest" and event["rounds"] == 2
    assert event["gateways"] == {
        "gw-02": "refused (no_data: no labelled windows of feature set 'v1' in the store); left out of 1 later round",
        "gw-03": "did not answer by the deadline (offline); left out of 1 later round",
    }


def test_no_sat_out_event_when_every_gateway_answered_every_round() -> None:
    role, out = _role()
    everyone = RoundResult("job", 1, "x", ["gw-01", "gw-02"], replies={"gw-01": None, "gw-02": None})
    role._sat_out("training fedforest", SimpleNamespace(clients=["gw-01", "gw-02"], results=[everyone], rejected={}))
    assert _events(out) == []


def test_privacy_reports_the_settings_the_algorithms_resolved() -> None:
    assert _role(secure=True)[0].privacy() == {"protocol": "histogram", "secure_aggregation": True, "min_crowd": 5}
    assert _role(secure=False)[0].privacy()["secure_aggregation"] is False
