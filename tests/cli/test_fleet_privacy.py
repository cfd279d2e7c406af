"""``wheelfed fleet --server URL``: each gateway's privacy budget from the server's
``/api/privacy`` beside its status row (spent on its most-used window / what a new private job may
still spend), with the server's cap; the broker half is replaced by fixed rows."""

from __future__ import annotations

import json

import pytest

from aggregator.cli import fleet
from aggregator.fleet_status import GatewayRow, PrivacyCell
from edge_client.cli import main
from tests.server.fleet_memory import announce, fleet_data, running_server
from tests.server.test_privacy_budget_dashboard import serving, two_jobs

ROWS = [GatewayRow(g, True, 0.0, "act:v1", 10, 9, None, None, None, None, None, "") for g in ("gw-1", "gw-2", "gw-9")]


@pytest.mark.parametrize("as_json", [False, True])
def test_fleet_shows_each_gateways_budget_from_the_server(tmp_path, monkeypatch, capsys, as_json) -> None:
    monkeypatch.setattr(fleet, "_collect", lambda args: ROWS)
    token = tmp_path / "token"
    token.write_text("r-token\n")
    clients = fleet_data(n_clients=2)
    with running_server(str(tmp_path / "r.db"), clients, read_tokens=("r-token",)) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        two_jobs(server.registry)
        expected = {b.gateway: b for b in server.runner.privacy_budgets()}
        with serving(server) as url:
            assert main(["fleet", "--server", url, "--token-file", str(token), *(["--json"] if as_json else [])]) == 0
    out = capsys.readouterr().out
    if as_json:
        shown = {row["gateway"]: row.get("privacy") for row in json.loads(out)}
        assert shown["gw-1"] == {
            "spent_epsilon": expected["gw-1"].spent_epsilon,
            "remaining_epsilon": expected["gw-1"].remaining_epsilon,
            "running": [],
        }
        assert shown["gw-9"] is None  # the server has never seen it
        return
    lines = out.splitlines()
    assert lines[1].split()[-1] == "EPSILON"
    cells = {line.split()[0]: line.split()[-1] for line in lines[2:5]}
    for gateway in ("gw-1", "gw-2"):
        budget = expected[gateway]
        assert cells[gateway] == f"{budget.spent_epsilon:.2f}/{budget.remaining_epsilon:.2f}"
    assert cells["gw-9"] == "-"
    assert lines[-1].startswith("privacy: cap epsilon 10 per window over its lifetime (delta 1e-06)")


def test_without_a_server_fleet_has_no_budget_column(monkeypatch, capsys) -> None:
    monkeypatch.setattr(fleet, "_collect", lambda args: ROWS)
    monkeypatch.delenv("WHEELFED_SERVER", raising=False)
    assert main(["fleet"]) == 0
    out = capsys.readouterr().out
    assert "EPSILON" not in out and "privacy:" not in out


def test_a_running_job_is_marked() -> None:
    assert PrivacyCell(1.0, 9.0, ("job-a",)).text() == "1.00/9.00+running"
