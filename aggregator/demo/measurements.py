"""What the demo's report measures itself at the end of a run, beside what the server did.

Centralized training on every gateway's windows pooled (the orchestrator can read every store;
the aggregator cannot, so this is for the report only), live predictions vs offline ones of the
same windows by the same registered model, and the raw sensor data that never left the gateways.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from firmware_bridge.frames import SampleFrame

if TYPE_CHECKING:
    from firmware_bridge.recording import Recording

    from .orchestrator import Demo

__all__ = ["RawSensorData", "centralized", "live_vs_offline", "raw_sensor_data"]


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


def centralized(demo: Demo, algorithms: list[str]) -> dict[str, tuple[dict[str, float], int]]:
    """Each algorithm trained on every gateway's training windows pooled, scored on every
    gateway's held-out windows as the stores hold them at the end (the retraining's split):
    algorithm -> (accuracy and macro-F1, held-out windows)."""
    from aggregator.algorithms import FedForest, FedSCSXGB
    from aggregator.demo.training import FOREST_BINS, FOREST_DEPTH, XGB_BINS
    from aggregator.simulate import simulate
    from shared.model import model_inputs

    cfg = demo.config
    splits = [
        _labelled_split(demo.run_dir / f"{c}.db", demo.feature_set_version, cfg.holdout_fraction)
        for c in sorted(demo.gateways)
    ]
    X = np.concatenate([s[0].X for s in splits])
    y = np.concatenate([np.array([str(v) for v in s[0].y]) for s in splits])
    Xt = np.concatenate([s[1].X for s in splits])
    yt = np.concatenate([np.array([str(v) for v in s[1].y]) for s in splits])
    out = {}
    for name in algorithms:
        # one "client" holding everything: nothing to hide from the aggregator, nothing to mask
        config = (
            FedSCSXGB(n_rounds=cfg.rounds, max_depth=4, n_bins=XGB_BINS, protocol="histogram", secure_aggregation=False)
            if name == "fedscs-xgb"
            else FedForest(
                n_trees=cfg.trees,
                max_depth=FOREST_DEPTH,
                n_bins=FOREST_BINS,
                min_samples_leaf=3,
                protocol="histogram",
                secure_aggregation=False,
            )
        )
        model = simulate(config, [(X, y)])
        predicted = np.array([str(v) for v in model.predict(model_inputs(model, Xt.astype(np.float32)))])
        out[name] = (_scores(yt, predicted), len(yt))
    return out


def live_vs_offline(demo: Demo) -> tuple[int, float, float]:
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


@dataclass(frozen=True)
class RawSensorData:
    """A gateway's whole recorded session as recorded (what never left it)."""

    nbytes: int
    samples: int
    channels: int


def raw_sensor_data(recording: Recording) -> RawSensorData:
    """The sensor samples of a recorded session: their bytes, samples and channels."""
    frames = [f.samples for f in recording.frames if isinstance(f, SampleFrame)]
    return RawSensorData(
        sum(f.nbytes for f in frames), sum(f.shape[0] for f in frames), max([0, *(f.shape[1] for f in frames)])
    )
