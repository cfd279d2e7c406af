"""The demo's report: what federating bought, what it cost, and that live equals offline --
with the facts a reader needs not to be misled (``Scoring``, ``SatOut``, the decisions).

:func:`report_from_events` folds the run's events (:mod:`aggregator.demo.events`) into it, a
handler per kind; :func:`build_report` adds what the demo measures at the end
(:mod:`aggregator.demo.measurements`) and what the server's REST API says it did
(``ServerFacts``: jobs, schedule, promotions, deployments, its privacy ledger). The terminal
gets a one-screen summary of it (:mod:`aggregator.demo.summary`) that points to the server's
dashboard; ``--report`` writes all of it as JSON, with the full summary text.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from .decisions import DeploymentDecision, PersonalDecision
from .events import (
    LOCAL_ONLY,
    DemoEvent,
    Evaluation,
    FleetDeployed,
    GatewaysSatOut,
    PersonalJob,
    PersonalTrees,
    PrivacySettings,
    Progress,
    Ready,
    StepDecided,
    Traffic,
    TreeDeployed,
)
from .summary import detail_lines, summary_lines
from .training import END_OF_RUN, FIRST_TRAINING

if TYPE_CHECKING:
    from .orchestrator import Demo

__all__ = [
    "DemoReport",
    "GatewayFacts",
    "PrivacyFacts",
    "SatOut",
    "Scoring",
    "ServerFacts",
    "SpentJob",
    "StoreSnapshot",
    "build_report",
    "held_out_keys",
    "report_from_events",
    "scoring_of",
    "store_snapshot",
]


@dataclass(frozen=True)
class StoreSnapshot:
    """Read-only counters of a gateway's store (never a write: the gateway owns the file)."""

    windows: int = 0
    labelled: int = 0
    predictions: int = 0
    newest_end_s: float = 0.0
    last_prediction: str = "-"
    alerts: int = 0


def store_snapshot(path: Path) -> StoreSnapshot:
    if not path.exists():
        return StoreSnapshot()
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2.0) as db:
            counts = db.execute(
                "SELECT coalesce(sum(n), 0), coalesce(sum(CASE WHEN label <> '' THEN n END), 0) FROM window_counts"
            ).fetchone()
            newest = db.execute("SELECT coalesce(max(end_us), 0) FROM windows").fetchone()[0]
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            predictions, last, alerts = 0, "-", 0
            if "predictions" in tables:
                predictions = db.execute("SELECT count(*) FROM predictions").fetchone()[0]
                row = db.execute("SELECT label FROM predictions ORDER BY id DESC LIMIT 1").fetchone()
                last = row[0] if row else "-"
                alerts = db.execute("SELECT count(*) FROM alerts").fetchone()[0]
    except sqlite3.Error:
        return StoreSnapshot()
    return StoreSnapshot(int(counts[0]), int(counts[1]), int(predictions), newest / 1e6, last, int(alerts))


def held_out_keys(path: Path, feature_set_version: str, holdout_fraction: float) -> frozenset[tuple[str, int]]:
    """The windows (session, end in us) a gateway holds out right now: its labelled windows in
    store order, split by the gateway's own rule (``edge_client.training_data.tail_split``,
    one-window gap). Read-only, like ``store_snapshot``."""
    from edge_client.training_data import tail_split

    if not path.exists():
        return frozenset()
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2.0) as db:
            rows = db.execute(
                "SELECT session_id, end_us FROM windows WHERE feature_set_version = ? AND label IS NOT "
                "NULL ORDER BY start_us, id",
                (feature_set_version,),
            ).fetchall()
    except sqlite3.Error:
        return frozenset()
    if not rows:
        return frozenset()
    _train, test = tail_split(np.array([r[0] for r in rows]), holdout_fraction, 1)
    return frozenset((rows[i][0], int(rows[i][1])) for i in test)


@dataclass(frozen=True)
class Scoring:
    """One scoring on held-out windows: of which model, in which training step, on how many
    windows of which gateways, with chance (the majority-class rate) on those windows; a
    re-scored model carries the note saying why its windows differ from its first scoring."""

    step: str
    model: str
    accuracy: float
    macro_f1: float
    windows: int
    windows_per_gateway: dict[str, int] = field(default_factory=dict)
    accuracy_per_gateway: dict[str, float] = field(default_factory=dict)
    majority_rate: float = float("nan")
    note: str = ""
    short: str = ""  # the name on the one-screen summary ("": ``model``)

    @property
    def is_local_only(self) -> bool:
        """The local-only baseline's scoring (every gateway its own model)."""
        return self.model.startswith(LOCAL_ONLY)


@dataclass(frozen=True)
class SatOut:
    """A gateway that missed rounds of one of the aggregator's jobs, and why."""

    job: str
    gateway: str
    reason: str


@dataclass(frozen=True)
class SpentJob:
    """One private training's entry in the server's ledger: its own epsilon per window (at its
    delta), and whether that is what its model spent or, without a model, its plan."""

    job_id: str
    model: str
    epsilon: float
    basis: str  # "spent" | "planned" | "running"


@dataclass(frozen=True)
class PrivacyFacts:
    """The server's privacy ledger at the end of the run (``GET /api/privacy``): the cap, each
    private training, the most-used window's lifetime epsilon and where, and the least a new
    private job may still spend on some gateway's most-used window, and where."""

    epsilon_cap: float = 0.0
    delta: float = 0.0
    jobs: tuple[SpentJob, ...] = ()
    spent_epsilon: float = 0.0
    spent_gateway: str = ""
    remaining_epsilon: float = 0.0
    remaining_gateway: str = ""

    @classmethod
    def from_api(cls, privacy: dict[str, Any]) -> PrivacyFacts:
        """From ``/api/privacy``'s answer.

        Examples
        --------
        >>> facts = PrivacyFacts.from_api({"epsilon_cap": 10.0, "delta": 1e-6, "entries": [], "gateways": [
        ...     {"gateway": "gw-1", "spent_epsilon": 0.0, "remaining_epsilon": 10.0}]})
        >>> print(*facts.lines())
        privacy budget: no private training spent anything (cap: epsilon 10 per window over its lifetime, delta 1e-06)
        """
        gateways = privacy["gateways"]
        worst = max(gateways, key=lambda g: g["spent_epsilon"], default=None)
        least = min(gateways, key=lambda g: g["remaining_epsilon"], default=None)
        return cls(
            float(privacy["epsilon_cap"]),
            float(privacy["delta"]),
            tuple(SpentJob(e["job_id"], e["model"], float(e["epsilon"]), e["basis"]) for e in privacy["entries"]),
            float(worst["spent_epsilon"]) if worst else 0.0,
            worst["gateway"] if worst else "",
            float(least["remaining_epsilon"]) if least else float(privacy["epsilon_cap"]),
            least["gateway"] if least else "",
        )

    def lines(self) -> list[str]:
        cap = f"epsilon {self.epsilon_cap:g} per window over its lifetime, delta {self.delta:g}"
        if not self.jobs:
            return [f"privacy budget: no private training spent anything (cap: {cap})"]
        each = ", ".join(
            f"{j.epsilon:.3g} ({j.model or j.job_id}{'' if j.basis == 'spent' else ', ' + j.basis})" for j in self.jobs
        )
        return [
            f"privacy budget: the private trainings spent epsilon {each} per window they used; composed, the "
            f"most-used window ({self.spent_gateway}) is at epsilon {self.spent_epsilon:.3g} of the cap ({cap}); a "
            f"new private job may still spend epsilon {self.remaining_epsilon:.3g} on {self.remaining_gateway}'s "
            "most-used window (the least left), and windows recorded from now on have the full budget"
        ]


@dataclass
class ServerFacts:
    """What the server did, as its REST API tells it at the end of the run: its URL, the jobs it
    ran (with their held-out scoring), the retraining schedule the demo created and the jobs it
    started, the server's promotion decisions, the model versions it registered, every gateway's
    deployment states."""

    url: str = ""
    jobs: list[dict[str, Any]] = field(default_factory=list)  # job_id, algorithm, ..., evaluation (as the API has them)
    schedule: dict[str, Any] = field(default_factory=dict)  # as created (POST /api/schedules)
    promotions: list[dict[str, Any]] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    deployments: list[dict[str, Any]] = field(default_factory=list)  # model_id, version, client, state, detail
    privacy: PrivacyFacts = field(default_factory=PrivacyFacts)

    @classmethod
    def read(cls, server, schedule: dict[str, Any]) -> ServerFacts:
        """From a running :class:`aggregator.demo.service.DemoServer`."""
        keep = (
            "job_id",
            "algorithm",
            "model_id",
            "state",
            "schedule_id",
            "result",
            "participants",
            "error",
            "evaluation",
        )
        jobs = [{k: j[k] for k in keep} for j in server.get("/api/jobs?limit=1000")]
        return cls(
            server.url,
            jobs,
            dict(schedule),
            server.get("/api/promotions"),
            [m["label"] for m in server.get("/api/models?limit=1000")],
            server.get("/api/deployments?limit=1000"),
            PrivacyFacts.from_api(server.get("/api/privacy?detail=true")),
        )

    @property
    def fired(self) -> list[dict[str, Any]]:
        """The jobs the schedule started."""
        return [j for j in self.jobs if self.schedule and j["schedule_id"] == self.schedule["schedule_id"]]

    def lines(self) -> list[str]:
        if not self.url:
            return []
        completed = sum(j["state"] == "completed" for j in self.jobs)
        out = [
            f"server: dashboard {self.url}/, API {self.url}/docs: {len(self.jobs)} jobs through the API "
            f"({completed} completed), {len(self.models)} model versions registered"
        ]
        if self.schedule:
            s = self.schedule
            fired = f"fired: job {', '.join(j['job_id'] for j in self.fired)}" if self.fired else "did not fire"
            out.append(
                f"schedule {s['schedule_id']}: retrain {s['algorithm']} once >= {s['min_new_windows']} new "
                f"labelled windows fleet-wide (it had {s['last_windows']} at its creation); {fired}"
            )
        for p in self.promotions:
            out.append(f"promotion of {p['model_id']}:v{p['candidate']} (server): {p['decision']} -- {p['detail']}")
        return out + self.privacy.lines()


@dataclass
class GatewayFacts:
    """One gateway at the end of the run: its held-out windows per step, the best federated
    model's accuracy there in the first training (NaN: none scored), its store's counters and
    the model it runs (as the server has it)."""

    held_out: dict[str, int] = field(default_factory=dict)
    federated_accuracy: float = math.nan
    windows: int = 0
    labelled: int = 0
    predictions: int = 0
    model: str = "-"


@dataclass
class DemoReport:
    """Everything the demo measured and decided (``--report`` writes it as JSON, with the full
    text as ``details``); :meth:`print` shows the one-screen summary."""

    gateways: int = 0
    elapsed_s: float = 0.0
    broker: str = ""
    holdout_fraction: float = 0.0
    local_only: dict[str, float] = field(default_factory=dict)  # gateway -> its own model's accuracy (first step)
    scorings: list[Scoring] = field(default_factory=list)
    decisions: list[DeploymentDecision] = field(default_factory=list)  # per step
    sat_out: list[SatOut] = field(default_factory=list)
    per_gateway: dict[str, GatewayFacts] = field(default_factory=dict)
    deployed: list[str] = field(default_factory=list)
    privacy: PrivacySettings = field(default_factory=PrivacySettings)
    secure_aggregation_note: str = ""
    server: ServerFacts = field(default_factory=lambda: ServerFacts())
    dashboard_url: str = ""  # the server's dashboard, the operator token in its #token= part
    keep_running: bool = False  # the server (its dashboard) runs on after the summary
    report_path: str = ""  # where --report writes this report ("" when it is not written)
    traffic_bytes: int = 0  # the server's MQTT bytes over the run (0: it does not export them)
    traffic_by_step: dict[str, int] = field(default_factory=dict)
    raw_sensor_bytes: int = 0
    raw_samples: int = 0
    raw_channels: int = 0
    raw_feature_bytes: int = 0
    live_windows: int = 0
    live_agreement: float = float("nan")
    live_max_probability_diff: float = float("nan")
    killed: str = ""
    killed_rejoined: bool = False
    personal_job: PersonalJob | None = None  # the FedGA-Tree step (None: not run)
    personal: list[PersonalDecision] = field(default_factory=list)  # per gateway
    personal_deployed: dict[str, str] = field(default_factory=dict)  # gateway -> its FedGA tree, deployed
    expected_models: dict[str, str] = field(default_factory=dict)  # gateway -> the model last deployed to it
    all_received_model: bool = False  # a model was deployed and every gateway runs the one last deployed to it
    personal_active: bool = True  # every FedGA tree deployed was activated on its gateway
    succeeded: bool = False  # every deployment reached every gateway, or nothing was deployed by decision

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data, with its full text (``details``: every table and explanation)."""
        return {**asdict(self), "details": detail_lines(self)}

    def print(self, out: TextIO) -> None:
        """The one-screen summary."""
        out.write("\n" + "\n".join(summary_lines(self)) + "\n")

    def settle(self, models: dict[str, str]) -> None:
        """Whether every gateway runs the model last deployed to it (``models``: each gateway's
        model as the server has it at the end) and so whether the run succeeded."""
        for client, facts in self.per_gateway.items():
            facts.model = models.get(client, "-")
        self.all_received_model = bool(self.deployed) and all(
            models.get(c) == self.expected_models.get(c) for c in self.per_gateway
        )
        self.succeeded = (self.all_received_model or not self.deployed) and self.personal_active


@dataclass
class _Fold:
    """The report being built from the events, and what the fold needs beyond it: how many
    gateways answered each round of the scheduled retraining."""

    report: DemoReport
    retrain_answered: list[int] = field(default_factory=list)


#: Event type -> its handler; the kinds without one are the live view's only.
_HANDLERS: dict[type, Callable[[_Fold, Any], None]] = {}


def _handles(kind: type) -> Callable[[Callable[[_Fold, Any], None]], Callable[[_Fold, Any], None]]:
    """Register the decorated function as the handler of ``kind``."""

    def register(handler: Callable[[_Fold, Any], None]) -> Callable[[_Fold, Any], None]:
        _HANDLERS[kind] = handler
        return handler

    return register


@_handles(Ready)
def _ready(fold: _Fold, e: Ready) -> None:
    fold.report.privacy = e.privacy


@_handles(Evaluation)
def _evaluation(fold: _Fold, e: Evaluation) -> None:
    report = fold.report
    report.scorings.append(scoring_of(e))
    for client, m in e.per_client.items():
        report.per_gateway.setdefault(client, GatewayFacts()).held_out[e.step] = int(m.get("n", 0))
    if e.step != FIRST_TRAINING:
        return
    if e.model == LOCAL_ONLY:
        report.local_only = {c: m.get("accuracy", math.nan) for c, m in e.per_client.items()}
        return
    for client, m in e.per_client.items():
        facts = report.per_gateway[client]
        best = 0.0 if math.isnan(facts.federated_accuracy) else facts.federated_accuracy
        facts.federated_accuracy = max(best, m.get("accuracy", 0.0))


@_handles(StepDecided)
def _decided(fold: _Fold, e: StepDecided) -> None:
    fold.report.decisions.append(e.decision)


@_handles(FleetDeployed)
def _deployed(fold: _Fold, e: FleetDeployed) -> None:
    report = fold.report
    report.deployed.append(f"{e.model} ({e.algorithm}, held-out accuracy {e.accuracy:.3f} on {e.windows} windows)")
    if report.decisions:
        report.decisions[-1] = replace(report.decisions[-1], deployed_as=e.model)
    report.expected_models = dict.fromkeys(report.per_gateway, e.model)


@_handles(GatewaysSatOut)
def _sat_out(fold: _Fold, e: GatewaysSatOut) -> None:
    fold.report.sat_out += [SatOut(e.job, c, why) for c, why in e.gateways.items()]


@_handles(PersonalTrees)
def _personal(fold: _Fold, e: PersonalTrees) -> None:
    fold.report.personal_job, fold.report.personal = e.job, list(e.decisions)


@_handles(TreeDeployed)
def _tree_deployed(fold: _Fold, e: TreeDeployed) -> None:
    report = fold.report
    report.personal_deployed[e.gateway] = report.expected_models[e.gateway] = e.model
    report.personal_active &= e.gateway in e.active


@_handles(Traffic)
def _traffic(fold: _Fold, e: Traffic) -> None:
    fold.report.traffic_by_step[e.phase] = fold.report.traffic_by_step.get(e.phase, 0) + e.bytes


@_handles(Progress)
def _progress(fold: _Fold, e: Progress) -> None:
    if e.job.endswith("(retrained)"):
        fold.retrain_answered.append(e.answered)


def scoring_of(e: Evaluation) -> Scoring:
    """One held-out scoring as the report keeps it (the local-only models' pooled over the
    gateways, each its own model)."""
    local = e.model == LOCAL_ONLY
    pooled = _pooled(e.per_client) if local else e.metrics
    counts = sum(e.class_counts)
    return Scoring(
        e.step,
        "local-only (each gateway its own model)" if local else e.model,
        pooled.get("accuracy", math.nan),
        pooled.get("macro_f1", math.nan),
        int(sum(m.get("n", 0) for m in e.per_client.values())),
        {c: int(m.get("n", 0)) for c, m in e.per_client.items()},
        {c: m.get("accuracy", math.nan) for c, m in e.per_client.items()},
        max(e.class_counts) / counts if counts else math.nan,
        e.note,
    )


def report_from_events(
    events: Iterable[DemoEvent], gateways: Iterable[str], *, killed: str = "", **facts: Any
) -> DemoReport:
    """The report's facts that the events tell, each kind by its handler (others are the live
    view's only): scorings, decisions, deployments, who sat out, the FedGA step, bytes by step,
    and whether the ``killed`` gateway answered every round of the retraining. ``facts``: the
    run's own (broker, holdout fraction, ...), as :class:`DemoReport` fields."""
    gateways = list(gateways)
    report = DemoReport(
        gateways=len(gateways), killed=killed, per_gateway={c: GatewayFacts() for c in gateways}, **facts
    )
    fold = _Fold(report)
    for event in events:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(fold, event)
    report.killed_rejoined = (
        bool(killed) and bool(fold.retrain_answered) and all(n == len(gateways) for n in fold.retrain_answered)
    )
    return report


def build_report(demo: Demo) -> DemoReport:
    """The run's report: the events' facts (:func:`report_from_events`), then what this process
    measures at the end -- centralized training on the pooled stores, live vs offline
    predictions, the stores' counters and the raw data that never left the gateways, the
    server's jobs and ledger and its MQTT bytes."""
    from .measurements import centralized, live_vs_offline, raw_sensor_data

    cfg = demo.config
    killed = next((c for c, g in demo.gateways.items() if g.restarts), "")
    report = report_from_events(
        list(demo.events),
        demo.gateways,
        killed=killed,
        broker=demo.broker_name,
        holdout_fraction=cfg.holdout_fraction,
        keep_running=cfg.keep_running,
        secure_aggregation_note="" if demo.secure_plan.on else demo.secure_plan.reason,
        dashboard_url=demo.server.dashboard_url,
        report_path=str(cfg.report_path or ""),
    )
    for algorithm, (metrics, windows) in centralized(demo, demo.algorithms).items():
        report.scorings.append(
            Scoring(
                END_OF_RUN,
                f"{algorithm}, centralized on the pooled data, all labels (report only)",
                metrics["accuracy"],
                metrics["macro_f1"],
                windows,
                short=f"{algorithm}, centralized (report only)",
            )
        )
    report.live_windows, report.live_agreement, report.live_max_probability_diff = live_vs_offline(demo)
    for client, facts in report.per_gateway.items():
        snap = store_snapshot(demo.run_dir / f"{client}.db")
        facts.windows, facts.labelled, facts.predictions = snap.windows, snap.labelled, snap.predictions
    raw = [raw_sensor_data(gw.session.recording) for gw in demo.gateways.values()]
    report.raw_sensor_bytes, report.raw_samples = sum(r.nbytes for r in raw), sum(r.samples for r in raw)
    report.raw_channels = max([0, *(r.channels for r in raw)])
    report.raw_feature_bytes = sum(f.windows for f in report.per_gateway.values()) * demo.n_features * 4
    report.server = ServerFacts.read(demo.server, demo.training.schedule)
    report.traffic_bytes = demo.training.traffic() or 0
    report.settle({c: demo.gateway_status.get(c, {}).get("model", "-") for c in demo.gateways})
    report.elapsed_s = time.monotonic() - demo.started
    return report


def _pooled(per_client: dict[str, dict[str, float]]) -> dict[str, float]:
    """Pooled accuracy of per-gateway scorings (each gateway its own model: correct / windows)."""
    from .decisions import Score

    score = Score.from_metrics(per_client)
    return {"accuracy": score.accuracy, "n": float(score.n)}
