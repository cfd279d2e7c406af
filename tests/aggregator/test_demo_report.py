"""The demo's report (``aggregator.demo.report``) and its text (``aggregator.demo.summary``):
the typed events fold into the same JSON report the dict-based fold made from a recorded run,
the terminal gets one screen that names the dashboard, and nothing the screen leaves out is
missing from the JSON report (``details`` and the fields)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from aggregator.demo.decisions import PersonalTree, Score, decide_personal_trees
from aggregator.demo.events import FedGASettings, PersonalJob, PrivacySettings
from aggregator.demo.report import DemoReport, GatewayFacts, PrivacyFacts, ServerFacts, report_from_events
from aggregator.demo.summary import SCREEN_COLUMNS, SCREEN_LINES, personal_lines, privacy_line, summary_lines
from aggregator.demo.view import describe
from tests.aggregator import demo_events as recorded

GOLDEN = Path(__file__).with_name("demo_report_golden.json")
DASHBOARD = "http://127.0.0.1:8080/#token=abc"
LEDGER = {
    "epsilon_cap": 69.0,
    "delta": 1e-6,
    "entries": [
        {"job_id": "j-1", "model": "activity:v1", "epsilon": 31.5, "basis": "spent"},
        {"job_id": "j-9", "model": "activity:v3", "epsilon": 31.7, "basis": "spent"},
    ],
    "gateways": [{"gateway": "gw-01", "spent_epsilon": 55.1, "remaining_epsilon": 13.9}],
}


def recorded_report(**facts: Any) -> DemoReport:
    report = report_from_events(
        recorded.recorded(),
        recorded.GATEWAYS,
        killed=recorded.KILLED,
        broker="mosquitto",
        holdout_fraction=0.25,
        **facts,
    )
    report.settle(recorded.FINAL_MODELS)
    return report


def _contains(expected: Any, got: Any, where: str = "") -> None:
    """``got`` holds everything ``expected`` does (NaN equals NaN); it may hold more keys."""
    if isinstance(expected, dict):
        for key, value in expected.items():
            assert key in got, f"{where}/{key} is missing"
            _contains(value, got[key], f"{where}/{key}")
    elif isinstance(expected, list):
        assert len(expected) == len(got), where
        for i, (e, g) in enumerate(zip(expected, got)):
            _contains(e, g, f"{where}[{i}]")
    elif isinstance(expected, float) and math.isnan(expected):
        assert isinstance(got, float) and math.isnan(got), where
    else:
        assert expected == got, (where, expected, got)


def test_the_typed_events_make_the_report_the_dict_events_made() -> None:
    # the golden file is the JSON report the dict-event fold built from the same recorded run
    # (with nothing measured at the end: no stores, server or traffic counter)
    got = json.loads(json.dumps(recorded_report().to_dict(), default=str))
    _contains(json.loads(GOLDEN.read_text()), got)
    assert got["decisions"][0]["deployed_as"] == "activity:v1" and got["killed_rejoined"]
    assert got["personal_deployed"] == {"gw-02": "activity.gw-02:v1"} and not got["all_received_model"]


def test_the_summary_fits_one_screen_and_names_the_dashboard() -> None:
    report = recorded_report(
        dashboard_url=DASHBOARD,
        report_path="/tmp/report.json",
        server=ServerFacts(url="http://127.0.0.1:8080", privacy=PrivacyFacts.from_api(LEDGER)),
    )
    lines = summary_lines(report)
    assert len(lines) <= SCREEN_LINES and max(map(len, lines)) <= SCREEN_COLUMNS, "\n".join(lines)
    text = "\n".join(lines)
    assert lines[0] == "=== WheelFed fleet demo: summary ==="
    assert f"--keep-running keeps it up): {DASHBOARD}" in text.replace("\n  ", " ")
    assert "full report (every table, reason and byte count): /tmp/report.json" in text
    # each trained model's accuracy on its held-out windows, chance and local-only beside it
    row = next(line for line in lines if line.startswith("fedscs-xgb (retrained)"))
    assert row.split()[-5:] == ["retraining", "84", "0.798", "0.286", "0.571"]
    assert next(line for line in lines if line.startswith("FedGA-Tree, each")).split()[-4:] == [
        "52",
        "0.692",
        "0.308",
        "0.577",
    ]
    # the decisions, the budget and why that epsilon
    assert "first training: deployed activity:v1 -- fedscs-xgb 0.692 vs local-only 0.596, chance 0.308" in lines
    assert "FedGA-Tree: own tree deployed to gw-02 (0.579 vs 0.474)" in lines
    assert "privacy: epsilon 32 per window per training (delta 1e-06; differential privacy under secure" in lines
    assert "has spent epsilon 55.1 of the server's cap 69" in text and "  why epsilon 32: the smallest" in text
    assert "gw-02 killed, rejoined" in text and "sat out (part of) 1 job(s): gateways the server did not name" in text
    running = recorded_report(dashboard_url=DASHBOARD, keep_running=True)
    assert "running until Ctrl-C" in " ".join(summary_lines(running)).replace("   ", " ")
    assert "--report PATH writes it as JSON" in "\n".join(summary_lines(recorded_report()))


def test_what_the_screen_leaves_out_stays_in_the_json_report() -> None:
    report = recorded_report(dashboard_url=DASHBOARD, traffic_bytes=12_000_000, raw_sensor_bytes=1_000_000)
    data = report.to_dict()
    details = "\n".join(data["details"])
    for d in report.decisions:
        assert d.reason in details
    assert recorded.NOTE in details
    assert "| gw-02 | 19 | 0.474 | 0.526 | 0.579 | 3 | yes | activity.gw-02:v1 |" in details
    assert "| local-only (each gateway its own model) | first training | 52 | 0.577 |" in details
    assert "gateways that sat out:\n  local-only gw-02 (first training): (unnamed) not every gateway" in details
    assert "  deploying activity:v1: 0.1 MB = 40 kB per gateway" in details
    assert "the demo's epsilon 32 per window per training (delta 1e-06): whether any one window" in details
    assert "privacy of FedGA-Tree: each gateway sent the aggregator" in details
    assert data["traffic_by_step"]["deploying activity:v1"] == 120_000 and data["dashboard_url"] == DASHBOARD
    assert (
        "bytes per gateway: 4.0 MB through the aggregator, 12.0x the raw sensor data (kept on the gateways)"
        in summary_lines(report)
    )


def test_the_summary_without_secure_aggregation_or_a_deployment_says_so() -> None:
    report = recorded_report()
    report.privacy = PrivacySettings("histogram", False)
    report.secure_aggregation_note = "secure aggregation needs at least 3 gateways"
    report.deployed, report.decisions = [], [replace(d, deploy=None, deployed_as="") for d in report.decisions]
    text = "\n".join(summary_lines(report))
    assert "privacy: secure aggregation OFF -- secure aggregation needs at least 3 gateways" in text
    assert "first training: nothing deployed -- fedscs-xgb 0.692 vs local-only 0.596" in text
    assert "at the end: no model deployed" in text


def test_the_live_view_tells_every_event_kind_it_shows() -> None:
    lines = {type(e).__name__: describe(e) for e in recorded.recorded()}
    assert lines["Ready"] is None and lines["Traffic"] is None
    assert lines["Phase"].startswith("aggregator: ") and lines["ReplayFailed"] == "ERROR gw-03: the reader went away"
    assert lines["StepDecided"].startswith("aggregator decides (retraining): deploy fedscs-xgb (retrained) -- ")
    assert lines["FleetDeployed"] == "aggregator: activity:v3 active on 2 gateways, no answer from gw-02"
    assert lines["TreeDeployed"] == "aggregator: activity.gw-02:v1 active on gw-02 alone"
    assert lines["Evaluation"].startswith("  local-only models: accuracy 0.424 .. 0.900")
    assert (
        lines["TrainingFailed"] == "  local-only gw-03 (retraining): training failed -- held-out scoring failed: "
        "too few windows"
    )
    rescored = next(e for e in recorded.recorded() if getattr(e, "rescored", ""))
    assert describe(rescored).endswith(f"\n    {recorded.NOTE}")


def test_the_report_shows_the_three_contenders_per_gateway_and_where_a_tree_runs() -> None:
    windows = {"gw-01": 10, "gw-02": 10}
    decisions = decide_personal_trees(
        "activity:v1 (fedforest, deployed)",
        Score(windows, {"gw-01": 9, "gw-02": 5}),
        Score(windows, {"gw-01": 4, "gw-02": 7}),
        {
            "gw-01": PersonalTree("activity.gw-01:v1", 0.3, 10, 2),
            "gw-02": PersonalTree("activity.gw-02:v1", 0.6, 10, 3),
        },
    )
    report = DemoReport(
        personal_job=PersonalJob("j-ga", FedGASettings(20, 20, 1.0, 2, 15), "activity:v1 (fedforest, deployed)", 1.4),
        personal=decisions,
        personal_deployed={"gw-02": "activity.gw-02:v1"},
        per_gateway={"gw-02": GatewayFacts(model="activity:v3")},
    )
    lines = personal_lines(report)
    assert lines[0].startswith(
        "\nthird contender: FedGA-Tree (job j-ga, every gateway taking part: 20 generations -- "
        "the paper's Table II uses 100 --, population 20, epsilon 1.0, depth range 2..15)"
    )
    assert "| gw-01 | 10 | 0.900 | 0.400 | 0.300 | 2 | no | no |" in lines
    assert "| gw-02 | 10 | 0.500 | 0.700 | 0.600 | 3 | yes | activity.gw-02:v1 |" in lines
    assert f"  gw-02: {decisions[1].reason}" in lines and not any(line.startswith("  gw-01:") for line in lines)
    assert lines[-1] == (
        "  gw-02 runs activity:v3 at the end (not activity.gw-02:v1: a later fleet-wide rollout replaced it)"
    )
    assert personal_lines(DemoReport()) == []  # no FedGA step (--fedga-generations 0)


def test_the_report_tells_the_privacy_budget_from_the_servers_ledger() -> None:
    answer = {
        "epsilon_cap": 10.0,
        "delta": 1e-6,
        "entries": [
            {"job_id": "job-1", "model": "activity:v1", "epsilon": 7.91, "basis": "spent"},
            {"job_id": "job-2", "model": "", "epsilon": 2.0, "basis": "planned"},
        ],
        "gateways": [
            {"gateway": "gw-01", "spent_epsilon": 8.9, "remaining_epsilon": 3.2},
            {"gateway": "gw-02", "spent_epsilon": 7.91, "remaining_epsilon": 4.4},
        ],
    }
    facts = PrivacyFacts.from_api(answer)
    assert (facts.spent_gateway, facts.remaining_gateway) == ("gw-01", "gw-01")
    [line] = facts.lines()
    assert line == (
        "privacy budget: the private trainings spent epsilon 7.91 (activity:v1), 2 (job-2, planned) per "
        "window they used; composed, the most-used window (gw-01) is at epsilon 8.9 of the cap (epsilon 10 "
        "per window over its lifetime, delta 1e-06); a new private job may still spend epsilon 3.2 on "
        "gw-01's most-used window (the least left), and windows recorded from now on have the full budget"
    )
    assert ServerFacts(url="http://x", privacy=facts).lines()[-1] == line
    assert "private protocol: differential privacy" in privacy_line(PrivacySettings("private", True), "")


@pytest.mark.parametrize("gateways", [1, 10])
def test_the_summary_stays_on_one_screen_however_many_gateways_sat_out_or_got_a_tree(gateways: int) -> None:
    from aggregator.demo.decisions import PersonalDecision
    from aggregator.demo.report import SatOut, Scoring

    report = recorded_report(dashboard_url=DASHBOARD, report_path="/tmp/a/long/path/to/the/report.json")
    names = [f"gw-{g + 1:02d}" for g in range(gateways)]
    report.sat_out = [SatOut(f"job {j}", name, "no answer") for j in range(5) for name in names]
    report.personal = [
        PersonalDecision(
            name,
            0.5,
            0.6,
            20,
            True,
            deploy=g % 2 == 0,
            reason="",
            tree=f"t.{name}:v1",
            tree_accuracy=0.7,
            tree_windows=20,
        )
        for g, name in enumerate(names)
    ]
    report.per_gateway = {name: GatewayFacts(model=f"t.{name}:v1") for name in names}  # every gateway its own tree
    report.scorings += [
        Scoring("end of the run", f"{a}, centralized", 0.8, 0.8, 84, short=f"{a}, centralized")
        for a in ("fedscs-xgb", "fedforest")
    ]
    lines = summary_lines(report)
    assert len(lines) <= SCREEN_LINES and max(map(len, lines)) <= SCREEN_COLUMNS, "\n".join(lines)
