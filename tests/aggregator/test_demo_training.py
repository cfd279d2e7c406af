"""The demo's training plan as the server takes it (``aggregator.demo.training``): the configs it
sends through the API are ones the server's own ``build_algorithm`` accepts, with the privacy
settings the summary reports, and each step measured on the server's traffic counter."""

from __future__ import annotations

import dataclasses

from aggregator.demo.events import DemoEvent, FedGASettings, PersonalTrees, Traffic, TreeDeployed
from aggregator.demo.training import (
    DEMO_EPSILON,
    FOREST_BINS,
    FOREST_DEPTH,
    ApiTraining,
    TrainingPlan,
)
from aggregator.server.service import build_algorithm


def plan(secure: bool = True) -> TrainingPlan:
    return TrainingPlan(
        ["gw-01", "gw-02", "gw-03"],
        ["fedscs-xgb", "fedforest"],
        ["PEN", "ROW"],
        secure,
        rounds=10,
        retrain_rounds=5,
        trees=30,
    )


def test_the_server_builds_every_config_the_demo_sends() -> None:
    p = plan()
    xgb = build_algorithm("fedscs-xgb", p.config("fedscs-xgb"))
    assert (xgb.n_rounds, xgb.protocol, xgb.dp_epsilon, list(xgb.classes)) == (
        10,
        "private",
        DEMO_EPSILON,
        ["PEN", "ROW"],
    )
    assert build_algorithm("fedscs-xgb", p.config("fedscs-xgb", continuing=True)).n_rounds == 5
    forest = build_algorithm("fedforest", p.config("fedforest"))
    assert (
        forest.n_trees,
        forest.max_depth,
        forest.n_bins,
        forest.secure_aggregation,
        forest.protocol,
        forest.dp_epsilon,
    ) == (30, FOREST_DEPTH, FOREST_BINS, True, "private", DEMO_EPSILON)


def test_the_local_only_baseline_is_the_fleets_forest_for_one_gateway_in_the_clear() -> None:
    p = plan()
    local = build_algorithm("fedforest", p.local_config())
    fleet = build_algorithm("fedforest", p.config("fedforest"))
    assert not local.secure_aggregation and not local.client_splits
    differing = {f.name for f in dataclasses.fields(local) if getattr(local, f.name) != getattr(fleet, f.name)}
    # client_splits is off in both (as in LocalLearning); the fleet's forest is private at the demo's epsilon, a
    # gateway alone trains in the clear (histogram protocol: a sum over one gateway hides nothing, no epsilon)
    assert differing == {"secure_aggregation", "protocol", "dp_epsilon"}
    assert (local.protocol, fleet.protocol) == ("histogram", "private")


def test_privacy_settings_as_the_server_resolves_them() -> None:
    on = build_algorithm("fedscs-xgb", plan(True).config("fedscs-xgb"))
    assert (on.protocol, bool(on.secure_aggregation), on.dp_epsilon) == ("private", True, DEMO_EPSILON)
    off = build_algorithm("fedscs-xgb", plan(False).config("fedscs-xgb"))
    assert (off.protocol, bool(off.secure_aggregation)) == ("histogram", False)


class _Metrics:
    """A server whose /metrics counter grows by 1000 bytes per read (or is absent)."""

    def __init__(self, exported: bool) -> None:
        self.exported, self.sent = exported, 0

    def get(self, path: str) -> bytes:
        assert path == "/metrics"
        self.sent += 1000
        lines = ["wheelfed_jobs_total 1"]
        if self.exported:
            lines += [
                f'wheelfed_mqtt_bytes_total{{direction="sent"}} {self.sent}',
                'wheelfed_mqtt_bytes_total{direction="received"} 7',
            ]
        return "\n".join(lines).encode()


def test_a_step_is_measured_as_the_growth_of_the_servers_traffic_counter() -> None:
    events: list[DemoEvent] = []
    training = ApiTraining(_Metrics(exported=True), plan(), events.append, lambda: False)
    with training.measured("training x"):
        pass
    [event] = events
    assert isinstance(event, Traffic) and (event.phase, event.bytes) == ("training x", 1000)
    with training.measured("since", since=0):
        pass
    assert events[-1].bytes == 3000 + 7  # the counter read once more, plus the received bytes


def test_no_traffic_event_when_the_server_does_not_export_its_bytes() -> None:
    events: list[DemoEvent] = []
    training = ApiTraining(_Metrics(exported=False), plan(), events.append, lambda: False)
    with training.measured("training x"):
        pass
    assert events == [] and training.traffic() is None


def test_the_fedga_contender_keeps_table_ii_but_the_generations() -> None:
    ga = build_algorithm("fedga-tree", plan().fedga_config())
    assert (ga.generations, ga.size, ga.epsilon, ga.d_min, ga.d_max, ga.train_ratio) == (20, 20, 1.0, 2, 15, 0.8)
    settings = ApiTraining(None, plan(), lambda e: None, lambda: False).fedga_settings()
    assert settings == FedGASettings(generations=20, population_size=20, epsilon=1.0, d_min=2, d_max=15)


class _FedGAServer:
    """The server's answers to the demo's FedGA-Tree step: one completed job with a tree per
    gateway (gw-02's beats the federated model there), its download, and a deploy that records
    its body."""

    def __init__(self, tree: bytes) -> None:
        self.tree, self.posts = tree, []

    def get(self, path: str):
        if path == "/metrics":
            return b""
        if path.endswith("/download"):
            return self.tree
        assert path == "/api/jobs/j-ga", path
        return {
            "job_id": "j-ga",
            "algorithm": "fedga-tree",
            "state": "completed",
            "rounds": [],
            "rules": {},
            "participants": ["gw-01", "gw-02", "gw-03"],
            "evaluation": {
                "models": {g: f"activity.{g}:v1" for g in ("gw-01", "gw-02", "gw-03")},
                "per_client": {
                    "gw-01": {"n": 10.0, "accuracy": 0.5},
                    "gw-02": {"n": 10.0, "accuracy": 0.6},
                    "gw-03": {"n": 10.0, "accuracy": 0.9},
                },
            },
        }

    def post(self, path: str, body):
        self.posts.append((path, body))
        if path == "/api/jobs":
            return {"job_id": "j-ga"}
        return {"active": body["clients"], "rejected": {}, "pending": []}


def test_the_fedga_step_deploys_a_winning_tree_to_its_own_gateway_only() -> None:
    import numpy as np

    import aggregator
    from aggregator.algorithms import FedGATree
    from aggregator.demo.decisions import DeploymentDecision, Score

    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 3))
    tree = aggregator.simulate(FedGATree(generations=1, d_max=3), [(X, (X[:, 0] > 0).astype(int))])["client-000"]
    server, events = _FedGAServer(tree.to_cbor()), []
    training = ApiTraining(server, plan(), events.append, lambda: False)
    windows = {"gw-01": 10, "gw-02": 10, "gw-03": 10}
    training.scores = {"fedforest": ("fedforest", 2, Score(windows, {"gw-01": 9, "gw-02": 5, "gw-03": 8}))}
    training.local_first = Score(windows, {"gw-01": 4, "gw-02": 7, "gw-03": 8})  # gw-02, gw-03 served worst
    decisions = training.personal_trees(DeploymentDecision("first training", "fedforest", "because"))
    assert [(d.gateway, d.worst_served, d.deploy) for d in decisions] == [
        ("gw-01", False, False),
        ("gw-02", True, True),
        ("gw-03", True, True),
    ]
    assert {d.decision_nodes for d in decisions} == {int((tree.trees[0].feature >= 0).sum())}
    job, *deploys = server.posts
    assert job == (
        "/api/jobs",
        {
            "algorithm": "fedga-tree",
            "model_id": "activity",
            "config": {"generations": 20},
            "clients": ["gw-01", "gw-02", "gw-03"],
            "min_gateways": 3,
            "seed": 0,
        },
    )
    assert deploys == [
        ("/api/models/activity.gw-02/1/deploy", {"clients": ["gw-02"]}),
        ("/api/models/activity.gw-03/1/deploy", {"clients": ["gw-03"]}),
    ]
    [told] = [e for e in events if isinstance(e, PersonalTrees)]
    assert told.job.federated == "activity:v2 (fedforest, deployed)" and told.job.settings.generations == 20
    assert told.decisions == tuple(decisions)
    assert [(e.gateway, e.model) for e in events if isinstance(e, TreeDeployed)] == [
        ("gw-02", "activity.gw-02:v1"),
        ("gw-03", "activity.gw-03:v1"),
    ]
