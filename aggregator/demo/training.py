"""The demo's training, deployment and retraining, driven through the server's REST API.

The server (``wheelfed server``, started by :mod:`aggregator.demo.service`) runs every job: it
surveys the gateways' feature sets, trains, registers the model and scores it by federated
evaluation on the participants' held-out windows. The demo reads the jobs back and turns them
into the events its live view and report tell (:mod:`aggregator.demo.events`):

* **first training** -- one job per algorithm over the whole fleet, then the local-only baseline
  as one FedForest job per gateway (``clients=[gateway]``, registered as ``local-<gateway>``);
  the demo's rule (``decisions.decide_deployment``) picks the model to deploy, if any, and the
  demo deploys it with ``POST /api/models/{id}/{version}/deploy``;
* **FedGA-Tree, the third contender** -- one ``fedga-tree`` job over the fleet (every gateway
  takes part: the genetic algorithm needs the fleet's fitness votes); the server registers each
  gateway's tree as ``activity.<gateway>`` and scores it on that gateway's held-out windows; on
  the gateways the chosen federated model serves worst, a tree that beats it there is deployed
  to its own gateway (``decisions.decide_personal_trees``);
* **retraining** -- a schedule (``POST /api/schedules``) that fires once the fleet has at least
  ``min_new_windows`` new labelled windows; the server trains (continuing the boosting from the
  deployed FedSCS-XGB model), scores the candidate and the deployed version on the same held-out
  windows, and decides by its promotion rule (threshold 0: deployed only if it does not score
  below) with a staged rollout: a canary share of the gateways first, then the rest. The demo
  reads the decision from ``/api/promotions`` and the rollout from ``/api/deployments``, and
  scores the retrained local-only baseline for comparison.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .decisions import (
    DeploymentDecision,
    PersonalDecision,
    PersonalTree,
    Score,
    class_counts,
    decide_deployment,
    decide_personal_trees,
    promotion_decision,
    sat_out_reasons,
)
from .epsilon import DEMO_EPSILON, DEMO_LEARNING_RATE
from .events import (
    LOCAL_ONLY,
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
    StepDecided,
    Traffic,
    TrainingFailed,
    TreeDeployed,
)
from .service import DemoServer

__all__ = [
    "DEMO_EPSILON",
    "END_OF_RUN",
    "FEDGA",
    "FIRST_TRAINING",
    "FOREST_BINS",
    "FOREST_DEPTH",
    "MODEL_ID",
    "RETRAINING",
    "SCHEDULE_ID",
    "TRAFFIC_METRIC",
    "XGB_BINS",
    "ApiTraining",
    "TrainingPlan",
    "mqtt_bytes",
    "privacy_settings",
]

MODEL_ID = "activity"
SCHEDULE_ID = "retrain-on-new-labels"

#: FedSCS-XGB's bins in the demo without secure aggregation (its histograms are the demo's largest
#: messages there).
XGB_BINS = 64
#: FedForest's depth and bins in the demo (the fleet's forest and every gateway's local-only one).
#: The private forest grows every tree to full depth by random splits, so its depth sets its size,
#: and every held-out scoring, deployment and rollout sends the model to every gateway: at depth 5
#: the model is 0.19 MB (depth 8: 1.45 MB), and 16 bins halve the local-only baseline's
#: histograms, which keeps the whole demo under 60 MB through the aggregator. The price: over 20
#: split seeds of the demo's fleet the private forest scored about 0.05 lower at depth 5 than at
#: depth 8 and 32 bins (0.63 vs 0.68 at epsilon 32), the better of the demo's two models about
#: 0.02 lower (BENCHMARKS.md, "The fleet demo's bytes through the aggregator").
FOREST_DEPTH, FOREST_BINS = 5, 16

#: The third contender's algorithm (``POST /api/jobs``), one tree per gateway.
FEDGA = "fedga-tree"

#: The demo's two training steps, as its events and summary name them, and the report's own
#: scoring at the end of the run (centralized training on the pooled stores).
FIRST_TRAINING, RETRAINING, END_OF_RUN = "first training", "retraining", "end of the run"

#: The server's MQTT traffic counter in ``/metrics`` (labels ``direction="sent"|"received"``).
TRAFFIC_METRIC = "wheelfed_mqtt_bytes_total"


def mqtt_bytes(metrics: str) -> int | None:
    """Bytes the server sent plus received over MQTT, summed over the ``TRAFFIC_METRIC`` lines
    of its Prometheus text; None when it exports no such line.

    Examples
    --------
    >>> sent = 'wheelfed_mqtt_bytes_total{direction="sent"} 120'
    >>> mqtt_bytes(sent + '\\nwheelfed_mqtt_bytes_total{direction="received"} 80')
    200
    >>> mqtt_bytes("wheelfed_jobs_total 3") is None
    True
    """
    values = [
        float(line.rpartition(" ")[2])
        for line in metrics.splitlines()
        if line.startswith(TRAFFIC_METRIC + "{") or line.startswith(TRAFFIC_METRIC + " ")
    ]
    return int(sum(values)) if values else None


@dataclass(frozen=True)
class TrainingPlan:
    """What the demo trains: algorithms and their sizes, the fleet's fixed class vocabulary (so
    a retrained model continues the deployed one even when a gateway labels an activity nobody
    had labelled before), and whether secure aggregation is on (``decisions.secure_aggregation_plan``)."""

    gateways: list[str]
    algorithms: list[str]
    classes: list[str]
    secure_aggregation: bool
    rounds: int = 10
    retrain_rounds: int = 5
    trees: int = 30
    seed: int = 0
    canary_share: float = 0.25
    #: FedGA-Tree generations (0: no third contender). Table II's G is 100; the demo runs fewer
    #: so the step stays within seconds, and keeps Table II's other settings (P = 20, epsilon =
    #: 1, depth range 2..15, r = 0.8).
    fedga_generations: int = 20

    def config(self, algorithm: str, *, continuing: bool = False) -> dict[str, Any]:
        """The algorithm's parameters as the API takes them (``continuing``: boosting on from
        the deployed model, so fewer rounds)."""
        if algorithm == "fedscs-xgb":
            rounds = {
                "n_rounds": self.retrain_rounds if continuing else self.rounds,
                "max_depth": 4,
                "classes": self.classes,
                "secure_aggregation": self.secure_aggregation,
            }
            if self.secure_aggregation:  # differential privacy at the demo's epsilon, with the step
                # size its epsilon-accuracy curve was measured at (epsilon.py, BENCHMARKS.md)
                return {
                    **rounds,
                    "protocol": "private",
                    "dp_epsilon": DEMO_EPSILON,
                    "learning_rate": DEMO_LEARNING_RATE,
                }
            # two gateways cannot hide from each other: plain sums without DP, on 64 bins (a quarter
            # of 256's bytes; max_bin 64..512 makes no measurable difference on these recordings)
            return {**rounds, "protocol": "histogram", "n_bins": XGB_BINS}
        forest = {
            "n_trees": self.trees,
            "max_depth": FOREST_DEPTH,
            "n_bins": FOREST_BINS,
            "min_samples_leaf": 3,
            "classes": self.classes,
            "secure_aggregation": self.secure_aggregation,
        }
        # private (differential privacy at the demo's epsilon) with secure aggregation, else the histogram protocol
        return {**forest, "dp_epsilon": DEMO_EPSILON} if self.secure_aggregation else forest

    def fedga_config(self) -> dict[str, Any]:
        """FedGA-Tree's parameters: ``fedga_generations``, everything else Table II's defaults."""
        return {"generations": self.fedga_generations}

    def local_config(self) -> dict[str, Any]:
        """A gateway alone: the FedForest of its own windows (``baselines.LocalLearning``'s
        settings). A sum over one gateway is that gateway's own statistics, so secure
        aggregation could hide nothing and is off."""
        forest = {k: v for k, v in self.config("fedforest").items() if k != "dp_epsilon"}
        return {**forest, "secure_aggregation": False, "client_splits": False}


def privacy_settings(plan: TrainingPlan) -> PrivacySettings:
    """The fleet jobs' privacy settings as the server's algorithm resolves the plan's configs
    (what the report's privacy lines state)."""
    from aggregator.server.service import build_algorithm

    xgb = build_algorithm("fedscs-xgb", plan.config("fedscs-xgb"))
    forest = build_algorithm("fedforest", plan.config("fedforest"))
    epsilons = {"fedscs-xgb": float(xgb.dp_epsilon), "fedforest": float(forest.dp_epsilon)}
    return PrivacySettings(
        xgb.protocol,
        bool(xgb.secure_aggregation),
        int(xgb.min_crowd),
        len(plan.gateways),
        epsilons if xgb.protocol == "private" else {},
    )


@dataclass(frozen=True)
class Deployed:
    """The model the gateways run: what retraining continues and re-scores, and on which
    held-out windows (per gateway) it was scored when it was deployed."""

    algorithm: str
    version: int
    first_windows: dict[str, int] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{MODEL_ID}:v{self.version}"


class ApiTraining:
    """The demo's side of the server: jobs started, followed and told as events (module docstring)."""

    def __init__(
        self, server: DemoServer, plan: TrainingPlan, emit: Callable[[DemoEvent], None], stopped: Callable[[], bool]
    ) -> None:
        self.server, self.plan, self.emit, self._stopped = server, plan, emit, stopped
        self.deployed: Deployed | None = None
        self.schedule: dict[str, Any] = {}  # the retraining schedule as the server stored it
        self._since_schedule: int | None = None  # the server's MQTT bytes when the schedule was created
        self.scores: dict[str, tuple[str, int, Score]] = {}  # name -> algorithm, version, score (first training)
        self.local_first: Score | None = None  # the local-only baseline of the first training

    def traffic(self) -> int | None:
        """The server's MQTT bytes so far (sent + received), from ``/metrics``; None when the
        server does not export them (the summary then says so)."""
        return mqtt_bytes(self.server.get("/metrics").decode())

    @contextmanager
    def measured(self, phase: str, since: int | None = None) -> Iterator[None]:
        """The server's MQTT bytes while the block ran (or since ``since``), as a ``traffic``
        event. Jobs run one at a time, so a step's bytes are the counter's growth over it."""
        before = self.traffic() if since is None else since
        try:
            yield
        finally:
            after = self.traffic()
            if before is not None and after is not None:
                self.emit(Traffic(phase, after - before))

    # -- jobs ------------------------------------------------------------------------------

    def start_job(
        self, algorithm: str, config: dict[str, Any], *, clients: list[str] | None = None, model_id: str = MODEL_ID
    ) -> str:
        clients = clients or self.plan.gateways
        job = self.server.post(
            "/api/jobs",
            {
                "algorithm": algorithm,
                "model_id": model_id,
                "config": config,
                "clients": clients,
                "min_gateways": len(clients),
                "seed": self.plan.seed,
            },
        )
        return job["job_id"]

    def follow(self, job_id: str, name: str, timeout_s: float = 1800.0) -> dict[str, Any]:
        """Poll the job until it ends, each new round told as a ``progress`` event; its sat-out
        gateways told as a ``sat_out`` event. The final record (``state``: completed or failed)."""
        deadline = time.monotonic() + timeout_s
        shown = 0
        while True:
            job = self.server.get(f"/api/jobs/{job_id}")
            for r in job["rounds"][shown:]:
                self.emit(
                    Progress(
                        name,
                        job_id,
                        job["algorithm"],
                        r["step"],
                        r["total"],
                        r["answered"],
                        r["selected"],
                        r["metrics"],
                        r["elapsed_s"],
                    )
                )
            shown = len(job["rounds"])
            if job["state"] in ("completed", "failed", "cancelled"):
                break
            if self._stopped():
                raise KeyboardInterrupt
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for the server's job {name} ({job_id})")
            time.sleep(0.5)
        reasons = sat_out_reasons(job, job["rules"].get("clients") or self.plan.gateways)
        if reasons:
            self.emit(GatewaysSatOut(name, len(job["rounds"]), reasons))
        return job

    def run_job(
        self,
        name: str,
        algorithm: str,
        config: dict[str, Any],
        *,
        clients: list[str] | None = None,
        model_id: str = MODEL_ID,
    ) -> dict[str, Any]:
        return self.follow(self.start_job(algorithm, config, clients=clients, model_id=model_id), name)

    def _scored(self, name: str, job: dict[str, Any], step: str, failures: dict[str, str]) -> Score | None:
        """The job's held-out scoring as an ``evaluation`` event and a :class:`Score`; None (and
        the reason in ``failures``) when the job or its scoring failed."""
        evaluation = job.get("evaluation") or {}
        if job["state"] != "completed" or "metrics" not in evaluation:
            why = job.get("error") or evaluation.get("failed") or evaluation.get("skipped") or job["state"]
            failures[name] = why if job["state"] != "completed" else f"held-out scoring failed: {why}"
            self.emit(TrainingFailed(name, failures[name]))
            return None
        counts = class_counts(evaluation)
        self.emit(Evaluation(name, step, evaluation["per_client"], evaluation["metrics"], job["result"], tuple(counts)))
        return Score.from_metrics(evaluation["per_client"], counts)

    def local_only(self, step: str) -> Score:
        """Every gateway alone, each scored on its own held-out windows: the baseline a federated
        model must beat to be deployed (one server job per gateway)."""
        self.emit(Phase(f"training the local-only baseline, every gateway alone ({step})"))
        per_client: dict[str, dict[str, float]] = {}
        with self.measured(f"local-only baseline, {step} (training and scoring)"):
            for client in self.plan.gateways:
                job = self.run_job(
                    f"local-only {client} ({step})",
                    "fedforest",
                    self.plan.local_config(),
                    clients=[client],
                    model_id=f"local-{client}",
                )
                scored = (job.get("evaluation") or {}).get("per_client", {})
                if job["state"] == "completed" and client in scored:
                    per_client[client] = scored[client]
        self.emit(Evaluation(LOCAL_ONLY, step, per_client))
        return Score.from_metrics(per_client)

    # -- the first training ----------------------------------------------------------------

    def first_training(self) -> DeploymentDecision:
        """Every algorithm over the fleet, the local-only baseline, the demo's decision, and the
        deployment of the winner (if any) through the API."""
        scores: dict[str, Score] = {}
        failures: dict[str, str] = {}
        for algorithm in self.plan.algorithms:
            self.emit(Phase(f"training {algorithm} ({FIRST_TRAINING})"))
            with self.measured(f"training {algorithm} (and its held-out scoring)"):
                job = self.run_job(algorithm, algorithm, self.plan.config(algorithm))
            score = self._scored(algorithm, job, FIRST_TRAINING, failures)
            if score is not None:
                scores[algorithm] = score
                self.scores[algorithm] = (algorithm, int(job["result"].rpartition(":v")[2]), score)
        local = self.local_first = self.local_only(FIRST_TRAINING)
        decision = decide_deployment(FIRST_TRAINING, scores, local_only=local, failures=failures)
        self.emit(StepDecided(decision))
        if decision.deploy is not None:
            algorithm, version, score = self.scores[decision.deploy]
            self._deploy(algorithm, version, score)
        return decision

    def _deploy(self, algorithm: str, version: int, score: Score) -> None:
        label = f"{MODEL_ID}:v{version}"
        self.emit(Phase(f"deploying {label} ({algorithm}): POST /api/models/{MODEL_ID}/{version}/deploy"))
        with self.measured(f"deploying {label}"):
            result = self.server.post(f"/api/models/{MODEL_ID}/{version}/deploy", {"clients": self.plan.gateways})
        self.deployed = Deployed(algorithm, version, dict(score.windows))
        self.emit(
            FleetDeployed(
                label,
                algorithm,
                version,
                score.accuracy,
                score.n,
                result["active"],
                result["rejected"],
                result["pending"],
            )
        )

    # -- the third contender -------------------------------------------------------------

    def personal_trees(self, decision: DeploymentDecision) -> list[PersonalDecision]:
        """One FedGA-Tree job over the fleet; per gateway, the chosen federated model (the one
        deployed, else the best-scoring one) vs the gateway's local-only model vs its FedGA tree;
        the trees that win on the worst-served gateways deployed, each to its own gateway."""
        if not self.plan.fedga_generations or not self.scores or self.local_first is None:
            return []
        name = decision.deploy or max(
            self.scores, key=lambda n: (not math.isnan(self.scores[n][2].accuracy), self.scores[n][2].accuracy)
        )
        algorithm, version, federated = self.scores[name]
        label = f"{MODEL_ID}:v{version} ({algorithm}, {'deployed' if decision.deploy else 'the best, not deployed'})"
        generations = self.plan.fedga_generations
        self.emit(
            Phase(
                f"training {FEDGA}: every gateway's own tree, evolved with the fleet's help ({generations} generations)"
            )
        )
        started = time.monotonic()
        with self.measured(f"training {FEDGA} (every gateway's own tree, and its held-out scoring)"):
            job = self.run_job(FEDGA, FEDGA, self.plan.fedga_config())
        elapsed_s = time.monotonic() - started
        evaluation = job.get("evaluation") or {}
        trees: dict[str, PersonalTree] = {}
        for gateway, tree_label in (evaluation.get("models") or {}).items() if job["state"] == "completed" else ():
            metrics = (evaluation.get("per_client") or {}).get(gateway)
            if metrics is not None:
                trees[gateway] = PersonalTree(
                    tree_label, metrics["accuracy"], int(metrics["n"]), self._decision_nodes(tree_label)
                )
        failure = "" if job["state"] == "completed" else f"the {FEDGA} job {job['state']}: {job.get('error') or ''}"
        decisions = decide_personal_trees(label, federated, self.local_first, trees, failure=failure)
        self.emit(PersonalTrees(PersonalJob(job["job_id"], self.fedga_settings(), label, elapsed_s), tuple(decisions)))
        for d in decisions:
            if d.deploy:
                self._deploy_personal(d)
        return decisions

    def fedga_settings(self) -> FedGASettings:
        """The FedGA-Tree job's settings as the server's algorithm resolves ``fedga_config``."""
        from aggregator.server.service import build_algorithm

        ga = build_algorithm(FEDGA, self.plan.fedga_config())
        return FedGASettings(ga.generations, ga.size, ga.epsilon, ga.d_min, ga.d_max)

    def _decision_nodes(self, label: str) -> int:
        """The decision nodes of a registered single-tree model (downloaded through the API)."""
        from shared.model import TreeEnsemble

        model_id, _, version = label.rpartition(":v")
        model = TreeEnsemble.from_cbor(self.server.get(f"/api/models/{model_id}/{version}/download"))
        return int(sum((tree.feature >= 0).sum() for tree in model.trees))

    def _deploy_personal(self, decision: PersonalDecision) -> None:
        model_id, _, version = decision.tree.rpartition(":v")
        self.emit(
            Phase(
                f"deploying {decision.tree} to {decision.gateway} alone: POST /api/models/{model_id}/{version}/deploy"
            )
        )
        with self.measured(f"{decision.tree} to {decision.gateway} alone (the signed tree it downloads)"):
            result = self.server.post(f"/api/models/{model_id}/{version}/deploy", {"clients": [decision.gateway]})
        self.emit(
            TreeDeployed(decision.tree, decision.gateway, result["active"], result["rejected"], result["pending"])
        )

    # -- the retraining ----------------------------------------------------------------------

    def retraining_algorithm(self) -> tuple[str, dict[str, Any]]:
        """The deployed model's algorithm (FedSCS-XGB continues boosting from it: fewer rounds);
        with none deployed, the first training's best-scoring algorithm, trained afresh."""
        if self.deployed is not None:
            algorithm = self.deployed.algorithm
            return algorithm, self.plan.config(algorithm, continuing=algorithm == "fedscs-xgb")
        ranked = sorted(self.scores.values(), key=lambda s: -s[2].accuracy if not math.isnan(s[2].accuracy) else 0)
        algorithm = ranked[0][0] if ranked else self.plan.algorithms[0]
        return algorithm, self.plan.config(algorithm)

    def add_schedule(self, min_new_windows: int) -> dict[str, Any]:
        """The retraining schedule: once ``min_new_windows`` labelled windows were added
        fleet-wide; promoted unless it scores below the deployed version (threshold 0)."""
        algorithm, config = self.retraining_algorithm()
        self._since_schedule = self.traffic()
        self.schedule = schedule = self.server.post(
            "/api/schedules",
            {
                "schedule_id": SCHEDULE_ID,
                "model_id": MODEL_ID,
                "algorithm": algorithm,
                "config": config,
                "min_new_windows": min_new_windows,
                "threshold": 0.0,
                "canary_share": self.plan.canary_share,
            },
        )
        self.emit(
            Note(
                f"schedule {SCHEDULE_ID} (POST /api/schedules): the server retrains {algorithm} once the "
                f"fleet has >= {min_new_windows} new labelled windows (it has {schedule['last_windows']} "
                "now), and deploys the result only if it does not score below the deployed model, canary "
                f"gateways ({self.plan.canary_share:.0%}) first"
            )
        )
        return schedule

    def remove_schedule(self) -> None:
        """``DELETE /api/schedules/{id}``: the demo shows one scheduled retraining; left in place,
        the schedule would fire again on the labels that arrive while the sessions play out."""
        self.server.call("DELETE", f"/api/schedules/{SCHEDULE_ID}")
        self.emit(
            Note(
                f"schedule {SCHEDULE_ID} deleted (DELETE /api/schedules/{SCHEDULE_ID}): the demo shows one "
                "scheduled retraining; a clinic keeps its schedules"
            )
        )

    def scheduled_job(self) -> dict[str, Any] | None:
        """The job the schedule started, once it has."""
        jobs = self.server.get("/api/jobs?limit=1000")
        return next((j for j in jobs if j["schedule_id"] == SCHEDULE_ID), None)

    def retraining(self, job_id: str) -> DeploymentDecision:
        """Follow the scheduled job to its promotion decision, re-score the deployed version
        (the server did, on the candidate's held-out windows), score the retrained local-only
        baseline, and tell the server's decision with the demo's bars beside it."""
        first = self.server.get(f"/api/jobs/{job_id}")
        name = f"{first['algorithm']} (retrained)"
        self.emit(Phase(f"training {name}: the schedule's job {job_id}"))
        phase = f"training {name}: the schedule's job (training, scoring, rollout; from the schedule's creation)"
        with self.measured(phase, since=self._since_schedule):
            job = self.follow(job_id, name)
        failures: dict[str, str] = {}
        candidate = self._scored(name, job, RETRAINING, failures)
        promotion = next(
            (p for p in self.server.get(f"/api/promotions?model_id={MODEL_ID}") if p["job_id"] == job_id), None
        )
        if candidate is not None and promotion is not None and promotion["baseline"] is not None:
            self._tell_rescored(promotion, candidate)
        local = self.local_only(RETRAINING)
        deployed = self.deployed.label if self.deployed is not None else ""
        decision = promotion_decision(
            RETRAINING, name, candidate, promotion, local_only=local, deployed=deployed, failures=failures
        )
        self.emit(StepDecided(decision))
        if decision.deploy is not None and candidate is not None and promotion is not None:  # deploy implies both
            self._rolled_out(job["algorithm"], promotion["candidate"], candidate)
        return decision

    def _tell_rescored(self, promotion: dict[str, Any], candidate: Score) -> None:
        """The deployed version as the server's promotion re-scored it: on the candidate's
        held-out windows (the same job), pooled accuracy only (that is what the record keeps)."""
        label = f"{MODEL_ID}:v{promotion['baseline']}"
        deployed = self.deployed if self.deployed is not None and self.deployed.label == label else None
        name = f"{label} ({deployed.algorithm if deployed else 'deployed'}, deployed), re-scored"
        accuracy = promotion["baseline_value"]
        per_client = {c: {"n": float(n)} for c, n in candidate.windows.items()}
        self.emit(
            Evaluation(
                name,
                RETRAINING,
                per_client,
                {"accuracy": accuracy, "n": float(candidate.n)},
                label,
                candidate.class_counts,
                label,
                dict(deployed.first_windows) if deployed else {},
            )
        )

    def _rolled_out(self, algorithm: str, version: int, score: Score) -> None:
        """The staged rollout as the registry recorded it (``/api/deployments``)."""
        rows = self.server.get(f"/api/deployments?model_id={MODEL_ID}&limit=1000")
        mine: dict[str, dict[str, Any]] = {}
        for row in rows:  # newest first: each gateway's latest state for this version
            if row["version"] == version:
                mine.setdefault(row["client"], row)
        active = sorted(c for c, r in mine.items() if r["state"] == "active")
        rejected = {c: r["detail"] for c, r in mine.items() if r["state"] == "rejected"}
        pending = sorted(c for c in self.plan.gateways if c not in mine or mine[c]["state"] == "pending")
        label = f"{MODEL_ID}:v{version}"
        self.deployed = Deployed(algorithm, version, dict(score.windows))
        self.emit(FleetDeployed(label, algorithm, version, score.accuracy, score.n, active, rejected, pending))
