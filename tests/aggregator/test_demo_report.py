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
