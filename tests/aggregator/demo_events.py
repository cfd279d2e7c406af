"""A recorded event sequence of a three-gateway demo run (values as a run with one gateway
killed and a FedGA tree deployed produces them), for the report's tests."""

from __future__ import annotations

from aggregator.demo.decisions import DeploymentDecision, PersonalDecision
from aggregator.demo.events import (
    DemoEvent,
    Evaluation,
    FedGASettings,
    FleetDeployed,
    GatewaysSatOut,
    Note,
    PersonalJob,
    PersonalTrees,
    Phase,
    PrivacySettings,
    Progress,
    Ready,
    ReplayFailed,
    StepDecided,
    Traffic,
    TrainingFailed,
    TreeDeployed,
)

GATEWAYS = ["gw-01", "gw-02", "gw-03"]
PRIVACY = PrivacySettings("private", True, 5, 3, {"fedscs-xgb": 32.0, "fedforest": 32.0})
FIRST = {
    "gw-01": {"n": 21.0, "accuracy": 0.7142857142857143, "macro_f1": 0.5},
    "gw-02": {"n": 19.0, "accuracy": 0.47368421052631576, "macro_f1": 0.4},
    "gw-03": {"n": 12.0, "accuracy": 1.0, "macro_f1": 1.0},
}
FOREST = {
    "gw-01": {"n": 21.0, "accuracy": 0.8095238095238095},
    "gw-02": {"n": 19.0, "accuracy": 0.42105263157894735},
    "gw-03": {"n": 12.0, "accuracy": 0.9166666666666666},
}
LOCAL = {
    "gw-01": {"n": 21.0, "accuracy": 0.38095238095238093},
    "gw-02": {"n": 19.0, "accuracy": 0.5263157894736842},
    "gw-03": {"n": 12.0, "accuracy": 1.0},
}
RETRAINED = {
    "gw-01": {"n": 33.0, "accuracy": 0.8181818181818182},
    "gw-02": {"n": 31.0, "accuracy": 0.6451612903225806},
    "gw-03": {"n": 20.0, "accuracy": 0.95},
}
LOCAL_RETRAINED = {
    "gw-01": {"n": 33.0, "accuracy": 0.42424242424242425},
    "gw-02": {"n": 31.0, "accuracy": 0.5},
    "gw-03": {"n": 20.0, "accuracy": 0.9},
}
NOTE = (
    "re-scored on 84 held-out windows of 3 gateways (was 52 at its first scoring): the held-out set is the last "
    "25% of each gateway's labelled windows, so the carers' later labels grew it and moved it later in each "
    "session; 20 of the first 52 are still held out; the other 32 are not (the tail moved past them)"
)


def _progress(job: str, job_id: str, algorithm: str, total: int, answered: int = 3) -> list[Progress]:
    return [
        Progress(job, job_id, algorithm, step, total, answered, 3, {"epsilon": 4.0 * step}, 0.2, t=100.0 + step)
        for step in range(1, total + 1)
    ]


def recorded() -> list[DemoEvent]:
    """The sequence, in the order a run records it."""
    first = DeploymentDecision(
        "first training",
        "fedscs-xgb",
        "fedscs-xgb: held-out accuracy 0.692 on 52 windows beats the local-only "
        "baseline (0.596: every gateway its own model) and chance (majority-class rate 0.308: always guessing the "
        "most common held-out activity)",
        {"fedscs-xgb": 0.6923076923076923, "fedforest": 0.6923076923076923},
        {},
        0.5961538461538461,
        0.3076923076923077,
        windows=52,
    )
    retraining = DeploymentDecision(
        "retraining",
        "fedscs-xgb (retrained)",
        "the server's promotion rule (held-out accuracy of fedscs-xgb "
        "(retrained) 0.798 vs activity:v1 re-scored on the same windows 0.750, threshold 0): rolled-out -- not below "
        "the deployed version; beside it: fedscs-xgb (retrained) 0.798 on 84 windows beats the local-only baseline "
        "(0.583: every gateway its own model) and chance (majority-class rate 0.286: always guessing the most common "
        "held-out activity)",
        {"fedscs-xgb (retrained)": 0.7976190476190477},
        {},
        0.5833333333333334,
        0.2857142857142857,
        deployed_rescored=0.75,
        windows=84,
    )
    personal = (
        PersonalDecision(
            "gw-01",
            0.7142857142857143,
            0.38095238095238093,
            21,
            False,
            False,
            "keeps the fleet's model: not among the gateways the federated model serves worst",
            "activity.gw-01:v1",
            0.6190476190476191,
            21,
            5,
        ),
        PersonalDecision(
            "gw-02",
            0.47368421052631576,
            0.5263157894736842,
            19,
            True,
            True,
            "served worst; activity.gw-02:v1 (3 decision nodes) 0.579 beats activity:v1: deployed to gw-02 alone",
            "activity.gw-02:v1",
            0.5789473684210527,
            19,
            3,
        ),
        PersonalDecision(
            "gw-03",
            1.0,
            1.0,
            12,
            False,
            False,
            "keeps the fleet's model: the federated model is right on all 12 of its held-out windows",
            "activity.gw-03:v1",
            1.0,
            12,
            2,
        ),
    )
    return [
        Note("importing the bundled recordings", t=1.0),
        Ready(PRIVACY, t=2.0),
        Phase("training fedscs-xgb (first training)", t=3.0),
        *_progress("fedscs-xgb", "j-1", "fedscs-xgb", 4),
        Traffic("training fedscs-xgb (and its held-out scoring)", 4_000_000, t=4.0),
        Evaluation(
            "fedscs-xgb",
            "first training",
            FIRST,
            {"accuracy": 0.6923076923076923, "macro_f1": 0.61, "n": 52.0},
            "activity:v1",
            (16, 12, 10, 8, 6),
            t=5.0,
        ),
        *_progress("fedforest", "j-2", "fedforest", 2),
        Traffic("training fedforest (and its held-out scoring)", 2_500_000, t=6.0),
        Evaluation(
            "fedforest",
            "first training",
            FOREST,
            {"accuracy": 0.6923076923076923, "macro_f1": 0.58, "n": 52.0},
            "activity:v2",
            (16, 12, 10, 8, 6),
            t=7.0,
        ),
        Phase("training the local-only baseline, every gateway alone (first training)", t=8.0),
        GatewaysSatOut(
            "local-only gw-02 (first training)", 3, {"(unnamed)": "not every gateway answered in 1 of 3 rounds"}, t=8.5
        ),
        Traffic("local-only baseline, first training (training and scoring)", 900_000, t=9.0),
        Evaluation("local-only", "first training", LOCAL, t=9.5),
        StepDecided(first, t=10.0),
        Phase("deploying activity:v1 (fedscs-xgb)", t=10.5),
        Traffic("deploying activity:v1", 120_000, t=11.0),
        FleetDeployed("activity:v1", "fedscs-xgb", 1, 0.6923076923076923, 52, GATEWAYS, {}, [], t=11.5),
        Traffic("training fedga-tree (every gateway's own tree, and its held-out scoring)", 300_000, t=12.0),
        PersonalTrees(
            PersonalJob("j-ga", FedGASettings(20, 20, 1.0, 2, 15), "activity:v1 (fedscs-xgb, deployed)", 3.5),
            personal,
            t=12.5,
        ),
        Traffic("activity.gw-02:v1 to gw-02 alone (the signed tree it downloads)", 5_000, t=13.0),
        TreeDeployed("activity.gw-02:v1", "gw-02", ["gw-02"], {}, [], t=13.5),
        Note("killing gw-02 (SIGKILL) to show a gateway that crashes mid-run", t=14.0),
        Phase("training fedscs-xgb (retrained): the schedule's job j-9", t=15.0),
        *_progress("fedscs-xgb (retrained)", "j-9", "fedscs-xgb", 3),
        Traffic(
            "training fedscs-xgb (retrained): the schedule's job (training, scoring, rollout; from the "
            "schedule's creation)",
            3_000_000,
            t=16.0,
        ),
        Evaluation(
            "fedscs-xgb (retrained)",
            "retraining",
            RETRAINED,
            {"accuracy": 0.7976190476190477, "macro_f1": 0.7, "n": 84.0},
            "activity:v3",
            (24, 20, 16, 14, 10),
            t=17.0,
        ),
        Evaluation(
            "activity:v1 (fedscs-xgb, deployed), re-scored",
            "retraining",
            {c: {"n": m["n"]} for c, m in RETRAINED.items()},
            {"accuracy": 0.75, "n": 84.0},
            "activity:v1",
            (24, 20, 16, 14, 10),
            "activity:v1",
            {"gw-01": 21, "gw-02": 19, "gw-03": 12},
            NOTE,
            t=17.5,
        ),
        TrainingFailed("local-only gw-03 (retraining)", "held-out scoring failed: too few windows", t=17.8),
        Evaluation("local-only", "retraining", LOCAL_RETRAINED, t=18.0),
        StepDecided(retraining, t=18.5),
        FleetDeployed(
            "activity:v3", "fedscs-xgb", 3, 0.7976190476190477, 84, ["gw-01", "gw-03"], {}, ["gw-02"], t=19.0
        ),
        ReplayFailed("gw-03", "the reader went away", t=20.0),
        Note("live recognition of the rest of the sessions", t=21.0),
    ]


#: Each gateway's model at the end of that run (the server's ``/api/gateways``).
FINAL_MODELS = {"gw-01": "activity:v3", "gw-02": "activity.gw-02:v1", "gw-03": "activity:v3"}
#: The gateway that run killed and restarted.
KILLED = "gw-02"
