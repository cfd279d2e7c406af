"""The fleet demo's decisions and explanations, as pure functions of measured counts
(``aggregator.demo.decisions``): deploy or not, the server's promotion decision told beside the
demo's bars, why a model was re-scored on other windows, who sat out a server job and why,
secure aggregation by fleet size, the bytes in context, and the third contender (FedGA-Tree) on
the gateways the federated model serves worst."""

from __future__ import annotations

import pytest

from aggregator.demo.decisions import (
    PersonalTree,
    Score,
    bytes_explanation,
    class_counts,
    decide_deployment,
    decide_personal_trees,
    promotion_decision,
    rescoring_note,
    sat_out_reasons,
    secure_aggregation_plan,
    worst_served,
)


def score(windows: dict[str, int], correct: dict[str, int], class_counts=(10, 10, 10)) -> Score:
    return Score(windows=windows, correct=correct, class_counts=tuple(class_counts))


# -- Score -------------------------------------------------------------------------------------------


def test_score_pools_counts_and_takes_the_majority_class_rate_as_chance() -> None:
    s = score({"a": 30, "b": 10}, {"a": 15, "b": 10}, class_counts=(20, 12, 8))
    assert s.n == 40 and s.accuracy == pytest.approx(25 / 40)
    assert s.majority_rate == pytest.approx(20 / 40)
    assert s.accuracy_on(["b"]) == (1.0, 10)


def test_score_from_per_client_metrics_recovers_exact_counts() -> None:
    s = Score.from_metrics(
        {"a": {"n": 26.0, "accuracy": 3 / 26}, "b": {"n": 11.0, "accuracy": 1 / 11}}, class_counts=[5, 32]
    )
    assert s.windows == {"a": 26, "b": 11} and s.correct == {"a": 3, "b": 1}
    assert s.majority_rate == pytest.approx(32 / 37)


# -- deploy or not -----------------------------------------------------------------------------------


def test_deploys_the_most_accurate_candidate_that_beats_local_only_and_chance() -> None:
    local = score({"a": 50, "b": 50}, {"a": 25, "b": 25})  # 0.50
    candidates = {
        "fedscs-xgb": score({"a": 50, "b": 50}, {"a": 40, "b": 40}),  # 0.80
        "fedforest": score({"a": 50, "b": 50}, {"a": 45, "b": 44}),
    }  # 0.89
    decision = decide_deployment("first training", candidates, local_only=local)
    assert decision.deploy == "fedforest"
    assert decision.local_only == pytest.approx(0.5) and decision.chance == pytest.approx(1 / 3)
    assert decision.windows == 100
    assert "fedforest" in decision.reason and "0.890" in decision.reason and "0.500" in decision.reason
    assert "majority-class rate" in decision.reason


def test_deploys_nothing_when_no_candidate_beats_the_local_only_baseline() -> None:
    # the user's 3-gateway run: 0.317 and 0.283 against gateways that scored 27/60 alone
    local = score({"gw-01": 26, "gw-02": 11, "gw-03": 23}, {"gw-01": 3, "gw-02": 1, "gw-03": 23})
    candidates = {
        "fedscs-xgb": score({"gw-01": 26, "gw-02": 11, "gw-03": 23}, {"gw-01": 3, "gw-02": 4, "gw-03": 12}),
        "fedforest": score({"gw-01": 26, "gw-02": 11, "gw-03": 23}, {"gw-01": 3, "gw-02": 1, "gw-03": 13}),
    }
    decision = decide_deployment("first training", candidates, local_only=local)
    assert decision.deploy is None
    assert "no model deployed" in decision.reason and "0.450" in decision.reason
    assert "without a model" in decision.reason


def test_deploys_nothing_below_chance_even_above_a_weak_baseline() -> None:
    # 0.60 beats gateways alone (0.40) but not always guessing the most common activity (0.70)
    local = score({"a": 100}, {"a": 40}, class_counts=(70, 30))
    candidates = {"fedforest": score({"a": 100}, {"a": 60}, class_counts=(70, 30))}
    decision = decide_deployment("first training", candidates, local_only=local)
    assert decision.deploy is None and decision.chance == pytest.approx(0.7)
    assert "majority-class rate 0.700" in decision.reason


def test_a_tie_with_a_bar_does_not_beat_it() -> None:
    local = score({"a": 10}, {"a": 6}, class_counts=(5, 5))
    decision = decide_deployment("first training", {"fedforest": score({"a": 10}, {"a": 6}, (5, 5))}, local_only=local)
    assert decision.deploy is None


def test_the_bars_are_compared_on_the_gateways_both_were_scored_on() -> None:
    # gw "b" sat out the local-only baseline: the comparison uses "a"'s windows only
    local = score({"a": 10}, {"a": 9})
    candidate = score({"a": 10, "b": 90}, {"a": 8, "b": 90})  # 0.98 pooled, 0.8 on "a"
    decision = decide_deployment("first training", {"fedforest": candidate}, local_only=local)
    assert decision.deploy is None and decision.windows == 10


def test_failed_trainings_are_named_and_never_deployed() -> None:
    local = score({"a": 10}, {"a": 5})
    decision = decide_deployment(
        "first training", {}, local_only=local, failures={"fedscs-xgb": "secure aggregation needs at least 3 clients"}
    )
    assert decision.deploy is None
    assert "fedscs-xgb: training failed (secure aggregation needs at least 3 clients)" in decision.reason
    assert decision.failures == {"fedscs-xgb": "secure aggregation needs at least 3 clients"}


# -- the server's promotion decision ----------------------------------------------------------------


def promotion(decision: str, candidate: float | None, baseline: float | None, detail: str = "d") -> dict:
    return {
        "job_id": "job-1",
        "model_id": "activity",
        "candidate": 3,
        "baseline": 1 if baseline is not None else None,
        "metric": "accuracy",
        "candidate_value": candidate,
        "baseline_value": baseline,
        "threshold": 0.0,
        "decision": decision,
        "detail": detail,
    }


def test_a_rolled_out_promotion_is_the_deployment_with_the_demos_bars_beside_it() -> None:
    candidate = score({"a": 60, "b": 40}, {"a": 48, "b": 32})  # 0.8
    local = score({"a": 60, "b": 40}, {"a": 30, "b": 20})  # 0.5
    d = promotion_decision(
        "retraining",
        "fedforest (retrained)",
        candidate,
        promotion("rolled-out", 0.8, 0.75, "canary a then b"),
        local_only=local,
        deployed="activity:v1",
    )
    assert d.deploy == "fedforest (retrained)" and d.kept == ""
    assert d.deployed_rescored == pytest.approx(0.75) and d.local_only == pytest.approx(0.5) and d.windows == 100
    assert d.chance == pytest.approx(10 / 30)
    assert "vs activity:v1 re-scored on the same windows 0.750, threshold 0" in d.reason
    assert "rolled-out -- canary a then b" in d.reason and "0.800 on 100 windows beats" in d.reason


def test_the_server_may_roll_out_what_does_not_beat_the_bars_and_the_decision_says_so() -> None:
    candidate = score({"a": 100}, {"a": 30})  # 0.3, below chance 1/3 and the local-only 0.4
    d = promotion_decision(
        "retraining",
        "x (retrained)",
        candidate,
        promotion("rolled-out", 0.3, None, "no baseline to compare with"),
        local_only=score({"a": 100}, {"a": 40}),
    )
    assert d.deploy == "x (retrained)" and d.deployed_rescored is None
    assert "no deployed model to compare with" in d.reason and "does NOT beat" in d.reason


def test_a_rejected_or_halted_promotion_deploys_nothing_and_the_gateways_keep_theirs() -> None:
    candidate = score({"a": 100}, {"a": 70})
    local = score({"a": 100}, {"a": 40})
    for decision in ("rejected", "halted"):
        d = promotion_decision(
            "retraining",
            "x (retrained)",
            candidate,
            promotion(decision, 0.7, 0.9),
            local_only=local,
            deployed="activity:v2",
        )
        assert d.deploy is None and d.kept == "activity:v2"
        assert d.reason.startswith("no model deployed: the server's promotion rule") and "keep activity:v2" in d.reason


def test_a_failed_scheduled_job_is_no_deployment_and_says_why() -> None:
    d = promotion_decision(
        "retraining",
        "x (retrained)",
        None,
        None,
        local_only=score({"a": 1}, {"a": 1}),
        failures={"x (retrained)": "2 gateways online; the job needs 3"},
    )
    assert d.deploy is None and "x (retrained): 2 gateways online; the job needs 3" in d.reason


# -- re-scoring ---------------------------------------------------------------------------------------


def test_rescoring_note_says_how_many_windows_from_which_gateways_and_why() -> None:
    note = rescoring_note(
        {"gw-01": 20, "gw-02": 40}, {"gw-01": 30, "gw-02": 65}, still_held_out=12, holdout_fraction=0.25
    )
    assert note.startswith("re-scored on 95 held-out windows of 2 gateways (was 60 at its first scoring)")
    assert "last 25% of each gateway's labelled windows" in note
    assert "12 of the first 60 are still held out; the other 48 are not (the tail moved past them)" in note


def test_rescoring_note_when_the_first_windows_are_all_still_held_out() -> None:
    note = rescoring_note({"a": 310}, {"a": 1240}, still_held_out=310, holdout_fraction=0.25)
    assert "all 310 of the first are still held out; the later labels added 930" in note


def test_rescoring_note_without_a_measured_overlap_and_with_a_gateway_missing() -> None:
    note = rescoring_note({"a": 10, "b": 10}, {"a": 20}, still_held_out=None, holdout_fraction=0.25)
    assert "re-scored on 20 held-out windows of 1 gateway (was 20 of 2 at its first scoring)" in note
    assert "not scored this time: b" in note and "still held out" not in note


# -- who sat out ---------------------------------------------------------------------------------------


def job(state="completed", participants=("a", "b", "c"), rounds=(), left_out=None) -> dict:
    return {
        "state": state,
        "participants": list(participants),
        "rounds": [{"step": k + 1, "selected": sel, "answered": ans} for k, (sel, ans) in enumerate(rounds)],
        "evaluation": {"left_out": left_out or {}},
    }


def test_sat_out_reasons_name_who_the_survey_and_the_scoring_left_out() -> None:
    reasons = sat_out_reasons(job(participants=("a", "c"), left_out={"c": "no held-out windows"}), ["a", "b", "c"])
    assert reasons == {
        "b": "left out of the job by the feature-set survey (no answer, or another feature set)",
        "c": "left out of the held-out scoring: no held-out windows",
    }


def test_sat_out_reasons_count_the_rounds_fewer_gateways_answered_without_naming_anyone() -> None:
    reasons = sat_out_reasons(job(rounds=[(3, 3), (3, 2), (3, 3)]), ["a", "b", "c"])
    assert list(reasons) == ["(unnamed)"]
    assert reasons["(unnamed)"].startswith("not every gateway answered in 1 of 3 rounds (round 2: 2 of 3;")


def test_no_sat_out_when_everyone_answered_every_round_and_a_failed_job_names_no_survey() -> None:
    assert sat_out_reasons(job(rounds=[(3, 3), (3, 3)]), ["a", "b", "c"]) == {}
    assert sat_out_reasons(job(state="failed", participants=()), ["a", "b"]) == {}


def test_class_counts_are_the_confusion_matrix_row_sums() -> None:
    assert class_counts({"confusion": [[5, 1], [2, 7]]}) == [6, 9]
    assert class_counts({}) == []


# -- secure aggregation by fleet size ------------------------------------------------------------------


def test_secure_aggregation_needs_three_gateways() -> None:
    assert secure_aggregation_plan(3).on and secure_aggregation_plan(10).on
    two = secure_aggregation_plan(2)
    assert not two.on and "at least 3 gateways" in two.reason and "unmasked" in two.reason


# -- bytes in context ------------------------------------------------------------------------------------


def test_bytes_explanation_says_what_the_multiple_is_of_and_where_the_bytes_went() -> None:
    phases = {
        "training fedscs-xgb": 300_000_000,
        "training fedforest": 50_000_000,
        "local-only baseline": 4_000_000,
        "held-out scoring": 1_000_000,
        "deploying activity:v1": 500_000,
    }
    lines = bytes_explanation(
        phases, total=360_000_000, raw_sensor_bytes=1_800_000, raw_samples=75_000, channels=6, gateways=3, secure=True
    )
    text = "\n".join(lines)
    assert "200.0x the raw sensor data" in text
    assert "75,000 samples x 6 channels" in text
    assert "training fedscs-xgb: 300.0 MB (83%)" in text
    assert "deploying activity:v1: 0.5 MB = 167 kB per gateway" in text
    assert "one child of every sibling pair" in text and "masked" in text
    assert "every held-out scoring and deployment sends the model to every gateway" in text
    assert "other (status messages" in text
    plain = "\n".join(
        bytes_explanation(
            phases,
            total=360_000_000,
            raw_sensor_bytes=1_800_000,
            raw_samples=75_000,
            channels=6,
            gateways=2,
            secure=False,
        )
    )
    assert "masked" not in plain and "in the clear" in plain


# -- the third contender: FedGA-Tree on the gateways the federated model serves worst ----------------

FLEET = {"a": 20, "b": 20, "c": 20, "d": 20}


def test_worst_served_are_the_gateways_where_the_federated_model_does_not_beat_their_own_model() -> None:
    federated = score(FLEET, {"a": 18, "b": 9, "c": 12, "d": 14})
    own = score(FLEET, {"a": 15, "b": 16, "c": 12, "d": 15})
    # b: 7 windows short, d: 1 short, c: a tie (a tie does not beat a bar); a is served well
    assert worst_served(federated, own) == ["b", "d", "c"]
    # a gateway whose local-only model was scored on other windows (or not at all) is not judged
    assert worst_served(federated, score({"a": 20, "b": 19, "c": 20}, {"a": 15, "b": 16, "c": 12})) == ["c"]
    # nor one the federated model gets all right (a tie with a perfect local-only model)
    perfect = score(FLEET, {"a": 20, "b": 9, "c": 12, "d": 14})
    assert worst_served(perfect, score(FLEET, {"a": 20, "b": 16, "c": 12, "d": 15})) == ["b", "d", "c"]
    [a] = [
        d
        for d in decide_personal_trees("m:v1", perfect, score(FLEET, {"a": 20, "b": 0, "c": 0, "d": 0}), {})
        if d.gateway == "a"
    ]
    assert not a.worst_served and a.reason == (
        "keeps the fleet's model: the federated model is right on all 20 of its "
        "held-out windows (m:v1 1.000, its local-only model 1.000)"
    )


def test_a_fedga_tree_is_deployed_only_on_a_worst_served_gateway_and_only_if_it_beats_the_federated_model() -> None:
    federated = score(FLEET, {"a": 18, "b": 9, "c": 12, "d": 14})
    own = score(FLEET, {"a": 15, "b": 16, "c": 12, "d": 15})
    trees = {
        "a": PersonalTree("m.a:v1", 0.95, 20, 3),  # beats everything, but a is served well
        "b": PersonalTree("m.b:v1", 10 / 20, 20, 5),  # beats the federated 9/20 on b
        "c": PersonalTree("m.c:v1", 12 / 20, 20, 4),  # ties the federated 12/20: not deployed
        "d": PersonalTree("m.d:v1", 0.9, 19, 2),
    }  # other windows than the federated score: not comparable
    decisions = {d.gateway: d for d in decide_personal_trees("m:v1 (fedforest)", federated, own, trees)}
    assert {g: d.deploy for g, d in decisions.items()} == {"a": False, "b": True, "c": False, "d": False}
    assert {g: d.worst_served for g, d in decisions.items()} == {"a": False, "b": True, "c": True, "d": True}
    b = decisions["b"]
    assert (b.federated, b.local_only, b.tree_accuracy, b.windows, b.decision_nodes) == (9 / 20, 16 / 20, 0.5, 20, 5)
    assert b.reason == (
        "served worst (m:v1 (fedforest) 0.450, its local-only model 0.800); m.b:v1 (5 decision nodes) "
        "0.500 beats m:v1 (fedforest) on the same 20 held-out windows: deployed to b alone"
    )
    assert decisions["a"].reason.startswith(
        "keeps the fleet's model: not among the gateways the federated model "
        "serves worst (m:v1 (fedforest) 0.900, its local-only model 0.750"
    )
    assert decisions["c"].reason.endswith(
        "m.c:v1 (4 decision nodes) 0.600 does not beat m:v1 (fedforest) on the same 20 held-out windows: not deployed"
    )
    assert "scored on 19 held-out windows, the federated model on 20: not comparable" in decisions["d"].reason


def test_without_trees_the_worst_served_gateways_are_told_why() -> None:
    federated = score({"a": 10, "b": 10}, {"a": 9, "b": 3})
    own = score({"a": 10, "b": 10}, {"a": 5, "b": 6})
    [a, b] = decide_personal_trees("m:v1", federated, own, {}, failure="the fedga-tree job failed: timeout")
    assert not a.deploy and not a.worst_served and a.tree == ""
    assert (
        not b.deploy
        and b.reason
        == "served worst (m:v1 0.300, its local-only model 0.600), no FedGA tree: the fedga-tree job failed: timeout"
    )
