"""The demo's summary: what federating bought, what it cost, and that live equals offline --
with the facts a reader needs not to be misled (``Scoring``, ``SatOut``, the decisions).

* accuracy / macro-F1 on every gateway's held-out windows (the tail of its labelled windows when
  the step ran) of each federated model, of the local-only models (each gateway's own), of the
  deployed model re-scored at retraining (with how its windows differ), of chance (the
  majority-class rate), and of centralized training on the pooled data (computed here, for the
  report only: the orchestrator can read every store, the aggregator cannot);
* each deployment decision and its reason, and which gateways sat out which step and why;
* bytes the server exchanged over MQTT, by step (from its ``/metrics``, when it exports them),
  vs the raw sensor samples and the feature matrix, which never left the gateways;
* what the server did: its jobs, the retraining schedule and when it fired, its promotion
  decision and rollout (read back from its REST API);
* the privacy budget: what each private training spent per window, and what the server's ledger
  says is spent and left under its cap (``/api/privacy``, :class:`PrivacyFacts`);
* live predictions (stored by the gateways) vs offline predictions of the same windows by the
  same registered model;
* the third contender: every gateway's FedGA tree (accuracy on its own held-out windows, decision
  nodes) beside the federated and local-only models there, and where it was deployed and why;
* whether every gateway ran the model last deployed to it and the killed gateway rejoined.
"""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from firmware_bridge.frames import SampleFrame

if TYPE_CHECKING:
    from .orchestrator import Demo

__all__ = [
    "DemoReport",
    "PrivacyFacts",
    "SatOut",
    "Scoring",
    "ServerFacts",
    "SpentJob",
    "StoreSnapshot",
    "build_report",
    "epsilon_lines",
    "held_out_keys",
    "privacy_line",
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
            counts = db.execute("SELECT coalesce(sum(n), 0), coalesce(sum(CASE WHEN label <> '' THEN n END), 0) "
                                "FROM window_counts").fetchone()
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
            rows = db.execute("SELECT session_id, end_us FROM windows WHERE feature_set_version = ? AND label IS NOT "
                              "NULL ORDER BY start_us, id", (feature_set_version,)).fetchall()
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
        each = ", ".join(f"{j.epsilon:.3g} ({j.model or j.job_id}{'' if j.basis == 'spent' else ', ' + j.basis})"
                         for j in self.jobs)
        return [f"privacy budget: the private trainings spent epsilon {each} per window they used; composed, the "
                f"most-used window ({self.spent_gateway}) is at epsilon {self.spent_epsilon:.3g} of the cap ({cap}); a "
                f"new private job may still spend epsilon {self.remaining_epsilon:.3g} on {self.remaining_gateway}'s "
                "most-used window (the least left), and windows recorded from now on have the full budget"]


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
        keep = ("job_id", "algorithm", "model_id", "state", "schedule_id", "result", "participants", "error",
                "evaluation")
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
        out = [f"server: dashboard {self.url}/, API {self.url}/docs: {len(self.jobs)} jobs through the API "
               f"({completed} completed), {len(self.models)} model versions registered"]
        if self.schedule:
            s = self.schedule
            fired = f"fired: job {', '.join(j['job_id'] for j in self.fired)}" if self.fired else "did not fire"
            out.append(f"schedule {s['schedule_id']}: retrain {s['algorithm']} once >= {s['min_new_windows']} new "
                       f"labelled windows fleet-wide (it had {s['last_windows']} at its creation); {fired}")
        for p in self.promotions:
            out.append(f"promotion of {p['model_id']}:v{p['candidate']} (server): {p['decision']} -- {p['detail']}")
        return out + self.privacy.lines()


@dataclass
class DemoReport:
    gateways: int = 0
    elapsed_s: float = 0.0
    broker: str = ""
    holdout_fraction: float = 0.0
    local_only: dict[str, float] = field(default_factory=dict)  # gateway -> its own model's accuracy (first step)
    scorings: list[Scoring] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)  # decisions.DeploymentDecision, per step
    sat_out: list[SatOut] = field(default_factory=list)
    per_gateway: dict[str, dict[str, Any]] = field(default_factory=dict)
    deployed: list[str] = field(default_factory=list)
    privacy: dict[str, Any] = field(default_factory=dict)  # the jobs' settings, as the server's algorithm resolves them
    secure_aggregation_note: str = ""
    server: ServerFacts = field(default_factory=lambda: ServerFacts())
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
    #: the FedGA-Tree step: job_id, settings (as the server's algorithm resolves them), federated (the
    #: label of the model it is compared with)
    personal_job: dict[str, Any] = field(default_factory=dict)
    personal: list[dict[str, Any]] = field(default_factory=list)  # decisions.PersonalDecision, per gateway
    personal_deployed: dict[str, str] = field(default_factory=dict)  # gateway -> its FedGA tree, deployed
    all_received_model: bool = False  # a model was deployed and every gateway runs the one last deployed to it
    succeeded: bool = False  # every deployment reached every gateway, or nothing was deployed by decision

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def print(self, out: TextIO) -> None:
        out.write("\n=== WheelFed fleet demo: summary ===\n\n")
        out.write(f"{self.gateways} gateways (real seglearn sessions, labelled only at the start), "
                  f"broker {self.broker}, {self.elapsed_s:.0f} s in all\n\n")
        out.write(f"Every score is on held-out windows: the last {self.holdout_fraction:.0%} of each gateway's "
                  "labelled windows when the step ran. Chance is the majority-class rate (always guessing the most "
                  "common held-out activity).\n\n")
        out.write(_row(["model", "step", "held-out windows", "accuracy (pooled)", "macro-F1 (pooled)",
                       "accuracy (mean over gateways)", "chance"]) + "\n")
        out.write(_row(["---", "---", "---:", "---:", "---:", "---:", "---:"]) + "\n")
        for sc in self.scorings:
            per = list(sc.accuracy_per_gateway.values())
            out.write(_row([sc.model, sc.step, str(sc.windows), _f(sc.accuracy), _f(sc.macro_f1),
                           _f(float(np.mean(per))) if per else "-", _f(sc.majority_rate)]) + "\n")
        out.write("\n")
        out.write(_row(["gateway", "windows", "labelled", "held-out windows (per step)", "live predictions",
                       "local-only acc.", "federated acc. (first training)", "model"]) + "\n")
        out.write(_row(["---", "---:", "---:", "---:", "---:", "---:", "---:", "---"]) + "\n")
        for client, g in self.per_gateway.items():
            held = " / ".join(str(n) for n in g.get("held_out", {}).values()) or "-"
            out.write(_row([client, str(g.get("windows", 0)), str(g.get("labelled", 0)), held,
                           str(g.get("predictions", 0)), _f(self.local_only.get(client, float("nan"))),
                           _f(g.get("federated_accuracy", float("nan"))), str(g.get("model") or "-")]) + "\n")
        out.write("\ndecisions (first training: the demo deploys only above the local-only baseline and chance; "
                  "retraining: the server's promotion rule, beside the same bars):\n")
        for d in self.decisions:
            outcome = f"deployed {d['deployed_as']}" if d.get("deployed_as") else "nothing deployed"
            out.write(f"  {d['step']}: {outcome} -- {d['reason']}\n")
        for sc in self.scorings:
            if sc.note:
                out.write(f"  {sc.model}: {sc.note}\n")
        for line in self.personal_lines():
            out.write(line + "\n")
        if self.sat_out:
            out.write("gateways that sat out:\n")
            for s in self.sat_out:
                out.write(f"  {s.job}: {s.gateway} {s.reason}\n")
        else:
            out.write("gateways that sat out: none (every gateway answered every round of every training and "
                      "scoring)\n")
        if self.traffic_bytes:
            from .decisions import bytes_explanation

            for line in bytes_explanation(self.traffic_by_step, total=self.traffic_bytes,
                                          raw_sensor_bytes=self.raw_sensor_bytes, raw_samples=self.raw_samples,
                                          channels=self.raw_channels, gateways=self.gateways,
                                          secure=bool(self.privacy.get("secure_aggregation"))):
                out.write(line + "\n")
            out.write(f"(the windows' feature matrix would be {self.raw_feature_bytes / 1e6:.1f} MB as float32)\n")
        else:
            out.write(f"raw sensor data: {self.raw_sensor_bytes / 1e6:.1f} MB ({self.raw_samples:,} samples x "
                      f"{self.raw_channels} channels as recorded, every gateway's whole session) and the windows' "
                      f"feature matrix ({self.raw_feature_bytes / 1e6:.1f} MB as float32) never left the gateways; "
                      "the bytes the server exchanged are not broken down here (its /metrics has no "
                      "wheelfed_mqtt_bytes_total)\n")
        for line in self.server.lines():
            out.write(line + "\n")
        out.write(f"privacy: {privacy_line(self.privacy, self.secure_aggregation_note)}\n")
        for line in epsilon_lines(self.privacy):
            out.write(line + "\n")
        if self.personal_job:
            out.write(f"privacy of FedGA-Tree: each gateway sent the aggregator, in the clear, its sample count with "
                      f"Laplace noise (epsilon {self.personal_job['settings']['epsilon']}), its cross-validated depth, "
                      "its local tree's shape without thresholds or leaf values, and its fitness of every candidate "
                      "shape per generation; the thresholds and leaf values fitted to its windows stayed on the "
                      "gateway until the end, when it sent its one chosen tree (the model the server registers for "
                      "it)\n")
        if self.live_windows:
            out.write(f"live recognition: {self.live_windows} windows; live == offline prediction on "
                      f"{self.live_agreement:.1%} (max probability difference {self.live_max_probability_diff:.1e})\n")
        else:
            out.write("live recognition: none (no model was deployed)\n")
        if self.killed:
            out.write(f"{self.killed} was killed and restarted: "
                      f"{'rejoined and trained in the next round' if self.killed_rejoined else 'did NOT rejoin'}\n")
        if self.deployed:
            received = "yes" if self.all_received_model else "NO"
            out.write(f"every gateway runs the model last deployed to it: {received}\n")
        else:
            out.write("no model was deployed (see the decisions): the gateways ran without one\n")


    def personal_lines(self) -> list[str]:
        """The third contender per gateway: FedGA tree vs the federated and local-only models,
        each on that gateway's held-out windows, and what was deployed where."""
        if not self.personal_job:
            return []
        job = self.personal_job
        st = job["settings"]
        lines = [f"\nthird contender: FedGA-Tree (job {job['job_id']}, every gateway taking part: {st['generations']} "
                 f"generations -- the paper's Table II uses 100 --, population {st['population_size']}, epsilon "
                 f"{st['epsilon']}, depth range {st['d_min']}..{st['d_max']}), every gateway its own tree, vs "
                 f"{job['federated']} and the gateway's local-only model, on that gateway's held-out windows "
                 f"(the job took {job['elapsed_s']:.0f} s):",
                 _row(["gateway", "held-out windows", "federated acc.", "local-only acc.", "FedGA tree acc.",
                      "FedGA decision nodes", "served worst", "FedGA tree deployed"]),
                 _row(["---", "---:", "---:", "---:", "---:", "---:", "---", "---"])]
        for d in self.personal:
            lines.append(_row([d["gateway"], str(d["windows"]), _f(d["federated"]), _f(d["local_only"]),
                              _f(d["tree_accuracy"]), str(d["decision_nodes"]) if d["tree"] else "-",
                              "yes" if d["worst_served"] else "no", d["tree"] if d["deploy"] else "no"]))
        lines += [f"  {d['gateway']}: {d['reason']}" for d in self.personal if d["worst_served"]]
        if not any(d["worst_served"] for d in self.personal):
            lines.append("  the federated model beats every gateway's local-only model there: no gateway needs its "
                         "own tree")
        for gateway, tree in self.personal_deployed.items():
            running = self.per_gateway.get(gateway, {}).get("model") or "-"
            lines.append(f"  {gateway} runs {running} at the end" + (
                "" if running == tree else f" (not {tree}: a later fleet-wide rollout replaced it)"))
        return lines


def _row(cells: list[str]) -> str:
    """A Markdown table row."""
    return "| " + " | ".join(cells) + " |"


def _f(value: float) -> str:
    return "-" if value is None or np.isnan(value) else f"{value:.3f}"


def privacy_line(privacy: dict[str, Any], secure_note: str) -> str:
    """What the demo's trainings and scorings revealed to the aggregator, from the settings the
    server's algorithm resolves for the demo's jobs (not the algorithms' defaults)."""
    scoring = ("held-out scoring is per gateway, in the clear (each gateway's confusion counts); the local-only "
               "baseline runs one job per gateway, whose sums are that gateway's own (a research comparison; "
               "PRIVACY.md)")
    crowd = (f"private protocol: {_dp_statement(privacy)}" if privacy.get("protocol") == "private" else
             f"{privacy.get('protocol', '?')} protocol, minimum crowd {privacy.get('min_crowd', '?')} windows")
    if not privacy.get("secure_aggregation"):
        return f"secure aggregation OFF -- {secure_note or 'disabled'}: the aggregator saw each gateway's " \
               f"histograms ({crowd}); {scoring}"
    return f"FedSCS-XGB and FedForest trained on fleet sums only ({crowd}, secure aggregation); {scoring}"


def _epsilons(privacy: dict[str, Any]) -> dict[str, float]:
    return dict(privacy.get("dp_epsilon") or {}) if privacy.get("protocol") == "private" else {}


def _dp_statement(privacy: dict[str, Any]) -> str:
    """The fleet jobs' differential privacy in a few words (the epsilon per window per training)."""
    values = sorted(set(_epsilons(privacy).values()))
    if len(values) == 1:
        return f"differential privacy at epsilon {values[0]:g} per window per training, its budget above"
    if values:
        return "differential privacy at epsilon " + ", ".join(f"{e:g} ({name})" for name, e in
                                                             _epsilons(privacy).items()) + " per window per training"
    return "differential privacy, its budget above"


def epsilon_lines(privacy: dict[str, Any]) -> list[str]:
    """The summary's statement of the demo's epsilon and why (``epsilon.statement``), from the
    epsilons the server's algorithms resolved for the demo's jobs; none without the private protocol."""
    from .epsilon import statement

    eps = _epsilons(privacy)
    gateways = int(privacy.get("gateways", 0))
    if len(set(eps.values())) == 1:
        return [f"the demo's {statement(next(iter(eps.values())), gateways)}"]
    return [f"{name}'s {statement(e, gateways)}" for name, e in eps.items()]


def _labelled_split(path: Path, feature_set_version: str, holdout: float):
    from edge_client.store import WindowStore
    from edge_client.training_data import StoreTrainingData

    with WindowStore(path) as store:
        source = StoreTrainingData(store, holdout_fraction=holdout)
        return source.labelled(feature_set_version), source.holdout(feature_set_version)


def _scores(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """Accuracy and macro-F1 by the federated evaluation's own formulas (``metrics_of``)."""
    from aggregator.evaluation import metrics_of
    from shared.protocol.messages.evaluation import EvaluationReply

    labels = sorted(set(y_true) | set(y_pred))
    index = {c: k for k, c in enumerate(labels)}
    t = np.array([index[v] for v in y_true])
    p = np.array([index[v] for v in y_pred])
    confusion = np.bincount(t * len(labels) + p, minlength=len(labels) ** 2).reshape(len(labels), -1)
    metrics = metrics_of(EvaluationReply(len(t), confusion=confusion.astype(np.int64)), classifier=True)
    return {"accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"]}


def _centralized(demo: Demo, algorithms: list[str]) -> dict[str, tuple[dict[str, float], int]]:
    """Each algorithm trained on every gateway's training windows pooled, scored on every
    gateway's held-out windows as the stores hold them at the end (the retraining's split)."""
    import aggregator
    from aggregator.algorithms import FedForest, FedSCSXGB
    from aggregator.demo.training import FOREST_BINS, FOREST_DEPTH, XGB_BINS
    from shared.model import model_inputs

    cfg = demo.config
    splits = [_labelled_split(demo.run_dir / f"{c}.db", demo.feature_set_version, cfg.holdout_fraction)
              for c in sorted(demo.gateways)]
    X = np.concatenate([s[0].X for s in splits])
    y = np.concatenate([np.array([str(v) for v in s[0].y]) for s in splits])
    Xt = np.concatenate([s[1].X for s in splits])
    yt = np.concatenate([np.array([str(v) for v in s[1].y]) for s in splits])
    out = {}
    for name in algorithms:
        # one "client" holding everything: nothing to hide from the aggregator, nothing to mask
        config = (FedSCSXGB(n_rounds=cfg.rounds, max_depth=4, n_bins=XGB_BINS, protocol="histogram",
                            secure_aggregation=False)
                  if name == "fedscs-xgb" else
                  FedForest(n_trees=cfg.trees, max_depth=FOREST_DEPTH, n_bins=FOREST_BINS, min_samples_leaf=3,
                            protocol="histogram", secure_aggregation=False))
        model = aggregator.simulate(config, [(X, y)])
        predicted = np.array([str(v) for v in model.predict(model_inputs(model, Xt.astype(np.float32)))])
        out[f"{name}, centralized on the pooled data, all labels (report only)"] = (_scores(yt, predicted), len(yt))
    return out


def _live_vs_offline(demo: Demo) -> tuple[int, float, float]:
    from aggregator.registry import Registry
    from edge_client.store import WindowStore
    from shared.model import model_inputs

    models = {}
    with Registry(demo.run_dir / "registry.db") as registry:
        for record in registry.list():
            models[record.label] = registry.model(record.model_id, record.version)[1]
    n, agree, max_diff = 0, 0, 0.0
    for client in sorted(demo.gateways):
        with WindowStore(demo.run_dir / f"{client}.db") as store:
            live = store.predictions()
            windows = store.query(demo.feature_set_version, labelled_only=False)
        index = {(s, int(e)): i for i, (s, e) in enumerate(zip(windows.meta.session_ids, windows.meta.end_us))}
        for label, model in models.items():
            rows = [p for p in live if p.model == label and (p.session_id, p.end_us) in index]
            if not rows:
                continue
            X = windows.X[[index[(p.session_id, p.end_us)] for p in rows]].astype(np.float32)
            offline = model.predict_proba(model_inputs(model, X))
            got = np.array([p.probabilities for p in rows])
            classes = [str(c) for c in model.classes]
            live_index = np.array([classes.index(p.label) for p in rows])
            n += len(rows)
            # the live label is the offline argmax (a tie within float32 storage precision counts as equal)
            agree += int(np.sum(offline[np.arange(len(rows)), live_index] >= offline.max(axis=1) - 1e-6))
            max_diff = max(max_diff, float(np.abs(offline - got).max()))
    return n, agree / n if n else float("nan"), max_diff


def build_report(demo: Demo) -> DemoReport:
    import time

    from .training import FIRST_TRAINING

    report = DemoReport(gateways=len(demo.gateways), broker=demo.broker_name,
                        holdout_fraction=demo.config.holdout_fraction,
                        secure_aggregation_note="" if demo.secure_plan.on else demo.secure_plan.reason)
    events = list(demo.events)
    expected: dict[str, str] = {}  # gateway -> the model last deployed to it
    personal_active = True  # every FedGA tree deployed was activated on its gateway
    for e in events:
        kind = e.get("event")
        if kind == "ready":
            report.privacy = e.get("privacy", {})
        elif kind == "evaluation":
            step, per = e["step"], e["per_client"]
            local = e["model"] == "local-only"
            name = "local-only (each gateway its own model)" if local else e["model"]
            counts = e.get("class_counts") or []
            pooled = _pooled(per) if local else e["metrics"]
            report.scorings.append(Scoring(
                step, name, pooled.get("accuracy", float("nan")), pooled.get("macro_f1", float("nan")),
                int(sum(m.get("n", 0) for m in per.values())), {c: int(m.get("n", 0)) for c, m in per.items()},
                {c: m.get("accuracy", float("nan")) for c, m in per.items()},
                max(counts) / sum(counts) if sum(counts) else float("nan"), e.get("note", "")))
            for client, m in per.items():
                report.per_gateway.setdefault(client, {}).setdefault("held_out", {})[step] = int(m.get("n", 0))
            if local:
                if step == FIRST_TRAINING:
                    report.local_only = {c: m.get("accuracy", float("nan")) for c, m in per.items()}
                continue
            if step == FIRST_TRAINING:
                for client, m in per.items():
                    best = report.per_gateway.setdefault(client, {})
                    best["federated_accuracy"] = max(best.get("federated_accuracy", 0.0), m.get("accuracy", 0.0))
        elif kind == "decision":
            report.decisions.append({k: v for k, v in e.items() if k not in ("event", "t")})
        elif kind == "deployed":
            report.deployed.append(f"{e['model']} ({e['algorithm']}, held-out accuracy {e['accuracy']:.3f} on "
                                   f"{e['windows']} windows)")
            if report.decisions:
                report.decisions[-1]["deployed_as"] = e["model"]
            expected = dict.fromkeys(demo.gateways, e["model"])
        elif kind == "sat_out":
            report.sat_out += [SatOut(e["job"], c, why) for c, why in e["gateways"].items()]
        elif kind == "personal":
            report.personal_job = {k: e[k] for k in ("job_id", "settings", "federated", "elapsed_s")}
            report.personal = e["decisions"]
        elif kind == "personal_deployed":
            report.personal_deployed[e["gateway"]] = e["model"]
            expected[e["gateway"]] = e["model"]
            personal_active &= e["gateway"] in e["active"]
        elif kind == "traffic":
            report.traffic_by_step[e["phase"]] = report.traffic_by_step.get(e["phase"], 0) + int(e["bytes"])
    for name, (metrics, windows) in _centralized(demo, demo.algorithms).items():
        report.scorings.append(Scoring("end of the run", name, metrics["accuracy"], metrics["macro_f1"], windows))
    report.live_windows, report.live_agreement, report.live_max_probability_diff = _live_vs_offline(demo)
    for client, gw in demo.gateways.items():
        snap = store_snapshot(demo.run_dir / f"{client}.db")
        entry = report.per_gateway.setdefault(client, {})
        entry.update(windows=snap.windows, labelled=snap.labelled, predictions=snap.predictions,
                     model=demo.gateway_status.get(client, {}).get("model", "-"))
        frames = [f.samples for f in gw.session.recording.frames if isinstance(f, SampleFrame)]
        report.raw_sensor_bytes += sum(f.nbytes for f in frames)
        report.raw_samples += sum(f.shape[0] for f in frames)
        report.raw_channels = max([report.raw_channels, *(f.shape[1] for f in frames)])
    report.server = ServerFacts.read(demo.server, demo.training.schedule)
    report.traffic_bytes = demo.training.traffic() or 0
    report.raw_feature_bytes = sum(e["windows"] for e in report.per_gateway.values()) * demo.n_features * 4
    killed = [c for c, g in demo.gateways.items() if g.restarts]
    if killed:
        report.killed = killed[0]
        retrain_steps = [e for e in events if e.get("event") == "progress" and
                         str(e.get("job", "")).endswith("(retrained)")]
        report.killed_rejoined = bool(retrain_steps) and all(e["answered"] == report.gateways for e in retrain_steps)
    report.all_received_model = bool(demo.deployed_label()) and all(
        demo.gateway_status.get(c, {}).get("model") == expected.get(c) for c in demo.gateways)
    report.succeeded = (report.all_received_model or not report.deployed) and personal_active
    report.elapsed_s = time.monotonic() - demo.started
    return report


def _pooled(per_client: dict[str, dict[str, float]]) -> dict[str, float]:
    """Pooled accuracy of per-gateway scorings (each gateway its own model: correct / windows)."""
    from .decisions import Score

    score = Score.from_metrics(per_client)
    return {"accuracy": score.accuracy, "n": float(score.n)}
