"""The demo summary's third-contender section (``DemoReport.personal_lines``): one row per
gateway with the three accuracies and the tree's decision nodes, the reasons for the
worst-served gateways, and where a deployed tree still runs at the end."""

from __future__ import annotations

from dataclasses import asdict

from aggregator.demo.decisions import PersonalTree, Score, decide_personal_trees
from aggregator.demo.report import DemoReport


def test_the_summary_shows_the_three_contenders_per_gateway_and_where_a_tree_runs() -> None:
    windows = {"gw-01": 10, "gw-02": 10}
    decisions = decide_personal_trees("activity:v1 (fedforest, deployed)", Score(windows, {"gw-01": 9, "gw-02": 5}),
                                      Score(windows, {"gw-01": 4, "gw-02": 7}),
                                      {"gw-01": PersonalTree("activity.gw-01:v1", 0.3, 10, 2),
                                       "gw-02": PersonalTree("activity.gw-02:v1", 0.6, 10, 3)})
    report = DemoReport(personal_job={"job_id": "j-ga", "federated": "activity:v1 (fedforest, deployed)",
                                      "elapsed_s": 1.4, "settings": {"generations": 20, "population_size": 20,
                                                                     "epsilon": 1.0, "d_min": 2, "d_max": 15}},
                        personal=[asdict(d) for d in decisions], personal_deployed={"gw-02": "activity.gw-02:v1"},
                        per_gateway={"gw-02": {"model": "activity:v3"}})
    lines = report.personal_lines()
    assert lines[0].startswith("\nthird contender: FedGA-Tree (job j-ga, every gateway taking part: 20 generations -- "
                               "the paper's Table II uses 100 --, population 20, epsilon 1.0, depth range 2..15)")
    assert "| gw-01 | 10 | 0.900 | 0.400 | 0.300 | 2 | no | no |" in lines
    assert "| gw-02 | 10 | 0.500 | 0.700 | 0.600 | 3 | yes | activity.gw-02:v1 |" in lines
    assert f"  gw-02: {decisions[1].reason}" in lines and not any(line.startswith("  gw-01:") for line in lines)
    assert lines[-1] == ("  gw-02 runs activity:v3 at the end (not activity.gw-02:v1: a later fleet-wide rollout "
                         "replaced it)")
    assert DemoReport().personal_lines() == []  # no FedGA step (--fedga-generations 0)


def test_the_summary_tells_the_privacy_budget_from_the_servers_ledger() -> None:
    from aggregator.demo.report import PrivacyFacts, ServerFacts, privacy_line

    answer = {"epsilon_cap": 10.0, "delta": 1e-6,
              "entries": [{"job_id": "job-1", "model": "activity:v1", "epsilon": 7.91, "basis": "spent"},
                          {"job_id": "job-2", "model": "", "epsilon": 2.0, "basis": "planned"}],
              "gateways": [{"gateway": "gw-01", "spent_epsilon": 8.9, "remaining_epsilon": 3.2},
                           {"gateway": "gw-02", "spent_epsilon": 7.91, "remaining_epsilon": 4.4}]}
    facts = PrivacyFacts.from_api(answer)
    assert (facts.spent_gateway, facts.remaining_gateway) == ("gw-01", "gw-01")
    [line] = facts.lines()
    assert line == ("privacy budget: the private trainings spent epsilon 7.91 (activity:v1), 2 (job-2, planned) per "
                    "window they used; composed, the most-used window (gw-01) is at epsilon 8.9 of the cap (epsilon 10 "
                    "per window over its lifetime, delta 1e-06); a new private job may still spend epsilon 3.2 on "
                    "gw-01's most-used window (the least left), and windows recorded from now on have the full budget")
    assert ServerFacts(url="http://x", privacy=facts).lines()[-1] == line
    assert "private protocol: differential privacy" in privacy_line({"protocol": "private", "secure_aggregation": True},
                                                                    "")
