"""The demo's summary: what federating bought, what it cost, and that live equals offline.

* accuracy / macro-F1 on every gateway's held-out windows (the tail of its labelled start) of
  each federated model, of the local-only models (each gateway's own), and of centralized
  training on the pooled data (computed here, for the report only: the orchestrator can read
  every store, the aggregator cannot);
* bytes the aggregator exchanged vs the raw sensor data and the raw feature matrix;
* live predictions (stored by the gateways) vs offline predictions of the same windows by the
  same registered model;
* whether every gateway ran the deployed model and the killed gateway rejoined.
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

__all__ = ["DemoReport", "StoreSnapshot", "build_report", "store_snapshot"]


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


@dataclass
class DemoReport:
    gateways: int = 0
    elapsed_s: float = 0.0
    broker: str = ""
    models: dict[str, dict[str, float]] = field(default_factory=dict)  # name -> pooled held-out metrics
    gateway_accuracy: dict[str, dict[str, float]] = field(default_factory=dict)  # name -> gateway -> accuracy
    local_only: dict[str, float] = field(default_factory=dict)  # gateway -> its own model's accuracy
    per_gateway: dict[str, dict[str, Any]] = field(default_factory=dict)
    deployed: list[str] = field(default_factory=list)
    retraining: str = ""
    traffic_bytes: int = 0
    raw_sensor_bytes: int = 0
    raw_feature_bytes: int = 0
    live_windows: int = 0
    live_agreement: float = float("nan")
    live_max_probability_diff: float = float("nan")
    killed: str = ""
    killed_rejoined: bool = False
    all_received_model: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def print(self, out: TextIO) -> None:
        def row(cells: list[str]) -> str:
            return "| " + " | ".join(cells) + " |"

        out.write("\n=== WheelFed fleet demo: summary ===\n\n")
        out.write(f"{self.gateways} gateways (real seglearn sessions, labelled only at the start), broker {self.broker}, "
                  f"{self.elapsed_s:.0f} s in all\n\n")
        out.write(row(["model (held-out windows of every gateway)", "accuracy (pooled)", "macro-F1 (pooled)",
                       "accuracy (mean over gateways)"]) + "\n")
        out.write(row(["---", "---:", "---:", "---:"]) + "\n")
        for name, m in self.models.items():
            per = self.gateway_accuracy.get(name)
            out.write(row([name, f"{m.get('accuracy', float('nan')):.3f}", f"{m.get('macro_f1', float('nan')):.3f}",
                           f"{np.mean(list(per.values())):.3f}" if per else "-"]) + "\n")
        if self.local_only:
            values = list(self.local_only.values())
            out.write(row(["local-only (each gateway its own model)", "-", "-", f"{np.mean(values):.3f}"]) + "\n")
        out.write("\n")
        out.write(row(["gateway", "windows", "labelled", "live predictions", "local-only acc.",
                       "federated acc. (first training)", "model"]) + "\n")
        out.write(row(["---", "---:", "---:", "---:", "---:", "---:", "---"]) + "\n")
        for client, g in self.per_gateway.items():
            out.write(row([client, str(g.get("windows", 0)), str(g.get("labelled", 0)), str(g.get("predictions", 0)),
                           f"{self.local_only.get(client, float('nan')):.3f}",
                           f"{g.get('federated_accuracy', float('nan')):.3f}", str(g.get("model", "-"))]) + "\n")
        out.write(f"\ndeployed: {', '.join(self.deployed) or 'nothing'}; retraining: {self.retraining or '-'}\n")
        ratio = self.traffic_bytes / self.raw_sensor_bytes if self.raw_sensor_bytes else float("nan")
        out.write(f"bytes through the aggregator: {self.traffic_bytes / 1e6:.1f} MB = {ratio:.2f}x the raw sensor data "
                  f"({self.raw_sensor_bytes / 1e6:.1f} MB; feature matrix {self.raw_feature_bytes / 1e6:.1f} MB as "
                  "float32) -- the raw data never left the gateways\n")
        out.write(f"privacy: {privacy_line()}\n")
        out.write(f"live recognition: {self.live_windows} windows; live == offline prediction on "
                  f"{self.live_agreement:.1%} (max probability difference {self.live_max_probability_diff:.1e})\n")
        if self.killed:
            out.write(f"{self.killed} was killed and restarted: "
                      f"{'rejoined and trained in the next round' if self.killed_rejoined else 'did NOT rejoin'}\n")
        out.write(f"every gateway received the deployed model: {'yes' if self.all_received_model else 'NO'}\n")


def privacy_line() -> str:
    """What the demo's federated trainings revealed to the aggregator (their settings are the
    algorithms' defaults)."""
    from aggregator.algorithms import FedForest, FedSCSXGB

    xgb, forest = FedSCSXGB(), FedForest()
    if not (xgb.secure_aggregation and forest.secure_aggregation):
        return "secure aggregation is OFF: the aggregator saw each gateway's histograms"
    return (f"FedSCS-XGB and FedForest trained on fleet sums only ({xgb.protocol} protocol, secure aggregation, "
            f"minimum crowd {xgb.min_crowd} windows); the local-only baseline runs one sub-job per gateway, "
            "whose sums are that gateway's own (a research comparison; PRIVACY.md)")


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


def _centralized(demo: Demo, algorithms: list[str]) -> dict[str, dict[str, float]]:
    import aggregator
    from aggregator.demo.aggregator_role import XGB_BINS
    from aggregator.algorithms import FedForest, FedSCSXGB
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
        config = (FedSCSXGB(n_rounds=cfg.rounds, max_depth=4, n_bins=XGB_BINS, secure_aggregation=False)
                  if name == "fedscs-xgb" else
                  FedForest(n_trees=cfg.trees, max_depth=8, n_bins=32, min_samples_leaf=3, secure_aggregation=False))
        model = aggregator.simulate(config, [(X, y)])
        predicted = np.array([str(v) for v in model.predict(model_inputs(model, Xt.astype(np.float32)))])
        out[f"{name}, centralized on the pooled data, all labels (report only)"] = _scores(yt, predicted)
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

    report = DemoReport(gateways=len(demo.gateways), broker=demo.broker_name)
    events = list(demo.events)
    algorithms: list[str] = []
    for e in events:
        if e.get("event") == "evaluation" and e["model"] != "local-only":
            report.models[e["model"]] = e["metrics"]
            report.gateway_accuracy[e["model"]] = {c: m.get("accuracy", float("nan")) for c, m in
                                                   e["per_client"].items()}
            if "(" not in e["model"]:
                algorithms.append(e["model"])
                for client, m in e["per_client"].items():
                    best = report.per_gateway.setdefault(client, {})
                    best["federated_accuracy"] = max(best.get("federated_accuracy", 0.0), m.get("accuracy", 0.0))
        elif e.get("event") == "evaluation":
            report.local_only = {c: m.get("accuracy", float("nan")) for c, m in e["per_client"].items()}
        elif e.get("event") == "deployed":
            report.deployed.append(f"{e['model']} ({e['algorithm']}, held-out accuracy {e['accuracy']:.3f})")
        elif e.get("event") == "kept":
            report.retraining = f"retrained model not deployed (held-out accuracy would drop); kept {e['model']}"
        elif e.get("event") in ("idle", "done") and "traffic" in e:
            report.traffic_bytes = e["traffic"]["sent_bytes"] + e["traffic"]["received_bytes"]
    if len(report.deployed) > 1:
        report.retraining = f"deployed {report.deployed[-1]}"
    report.models.update(_centralized(demo, algorithms))
    report.live_windows, report.live_agreement, report.live_max_probability_diff = _live_vs_offline(demo)
    for client, gw in demo.gateways.items():
        snap = store_snapshot(demo.run_dir / f"{client}.db")
        entry = report.per_gateway.setdefault(client, {})
        entry.update(windows=snap.windows, labelled=snap.labelled, predictions=snap.predictions,
                     model=demo.gateway_status.get(client, {}).get("model", "-"))
        report.raw_sensor_bytes += sum(f.samples.nbytes for f in gw.session.recording.frames
                                       if isinstance(f, SampleFrame))
    report.raw_feature_bytes = sum(e["windows"] for e in report.per_gateway.values()) * demo.n_features * 4
    killed = [c for c, g in demo.gateways.items() if g.restarts]
    if killed:
        report.killed = killed[0]
        retrain_steps = [e for e in events if e.get("event") == "progress" and str(e.get("job", "")).startswith("retrain")]
        report.killed_rejoined = bool(retrain_steps) and all(e["answered"] == report.gateways for e in retrain_steps)
    final = demo.deployed_label()
    report.all_received_model = bool(final) and all(
        demo.gateway_status.get(c, {}).get("model") == final for c in demo.gateways)
    report.elapsed_s = time.monotonic() - demo.started
    return report
