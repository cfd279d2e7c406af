"""The fleet demo's aggregator process: the real training, evaluation and deployment pipeline,
driven step by step by the demo's orchestrator.

    python -m aggregator.demo.aggregator_role CONFIG.json

It speaks JSON lines: commands on stdin (``{"cmd": "train"}``, ``{"cmd": "retrain"}``,
``{"cmd": "stop"}``), events on stdout (``gateways``, ``progress``, ``evaluation``, ``sat_out``,
``training_failed``, ``traffic``, ``decision``, ``deployed``, ``done``, ``error``) -- so the
orchestrator can time the steps to the replayed sessions and render them, and this process stays
an ordinary aggregator: an MQTT client of the broker, a registry file, a signing key.

``train``: FedSCS-XGB and FedForest over the fleet (each gateway trains on the labelled windows
of its store, the tail of each session held out), the local-only baseline (every gateway alone),
federated evaluation of all of them on the held-out windows, and deployment of the better
federated model -- only if it beats the local-only baseline and chance
(``decisions.decide_deployment``). ``retrain``: periodic retraining with the windows labelled
since -- FedSCS-XGB continues boosting from the deployed model, FedForest grows a new forest, both
train afresh when nothing is deployed -- with the local-only baseline retrained on the same
labels; deployed only if it also does not score below the deployed model re-scored on today's
held-out windows. Every step says which gateways sat out and why (``sat_out``), and how many
bytes it moved (``traffic``).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shared.model import TreeEnsemble
from shared.protocol.messages import Status
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.signing import load_signing_key
from shared.transport.mqtt import MqttConfig, MqttTransport

from ..algorithms import FedForest, FedSCSXGB
from ..baselines import LocalLearning
from ..deployment import deploy
from ..evaluation import evaluate_federated
from ..jobs import FederatedJob, JobSettings, RoundProgress, TrainingError
from ..registry import Registry
from ..rounds import QuorumNotReached, RoundEngine
from .decisions import RoundFacts, Score, decide_deployment, sat_out_reasons

log = logging.getLogger(__name__)

__all__ = ["FIRST_TRAINING", "RETRAINING", "RoleConfig", "XGB_BINS", "main"]

MODEL_ID = "activity"

#: FedSCS-XGB's bins in the demo (its histograms are the demo's largest messages).
XGB_BINS = 64

#: The demo's two training steps, as its events and summary name them.
FIRST_TRAINING, RETRAINING = "first training", "retraining"


@dataclass(frozen=True)
class RoleConfig:
    """What the orchestrator tells the aggregator process (written as JSON)."""

    host: str
    port: int
    protocol: int
    password: str
    clients: list[str]
    registry: str
    signing_key: str
    feature_set_version: str
    classes: list[str] = field(default_factory=list)  # the activities the fleet recognises (fixed vocabulary)
    algorithms: list[str] = field(default_factory=lambda: ["fedscs-xgb", "fedforest"])
    rounds: int = 10
    retrain_rounds: int = 5
    trees: int = 30
    max_depth_forest: int = 8
    deadline_s: float = 120.0
    min_fraction: float = 0.5
    seed: int = 0
    secure_aggregation: bool = True  # False below 3 gateways (decisions.secure_aggregation_plan)


@dataclass(frozen=True)
class _Deployed:
    """The model the gateways run: what retraining continues and re-scores, and on which
    held-out windows (per gateway) it was scored when it was deployed."""

    algorithm: str
    version: int
    first_windows: dict[str, int]

    @property
    def label(self) -> str:
        return f"{MODEL_ID}:v{self.version}"


class Events:
    """JSON lines on stdout (one writer lock: training and status threads both emit)."""

    def __init__(self, stream=sys.stdout) -> None:
        self.stream = stream
        self._lock = threading.Lock()

    def emit(self, event: str, **data: Any) -> None:
        with self._lock:
            self.stream.write(json.dumps({"event": event, "t": time.time(), **data}, default=_plain) + "\n")
            self.stream.flush()


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


class Role:
    def __init__(self, config: RoleConfig, events: Events) -> None:
        self.config = config
        self.events = events
        mqtt = MqttConfig(host=config.host, port=config.port, username=AGGREGATOR_ID, password=config.password,
                          protocol=config.protocol)
        self.transport = MqttTransport(AGGREGATOR_ID, mqtt, presence=False)
        self.transport.connect(wait=True, timeout_s=30)
        self.engine = RoundEngine(self.transport)
        self.registry = Registry(config.registry)
        self.key = load_signing_key(config.signing_key)
        self.settings = JobSettings(deadline_s=config.deadline_s, min_fraction=config.min_fraction)
        self.status: dict[str, dict[str, Any]] = {}
        self.transport.subscribe(TopicLayout().all_statuses, self._on_status)
        self.deployed: _Deployed | None = None

    def privacy(self) -> dict[str, Any]:
        """The federated trainings' privacy settings as the algorithms resolved them."""
        xgb = self._algorithm("fedscs-xgb")
        return {"protocol": xgb.protocol, "secure_aggregation": bool(xgb.secure_aggregation),
                "min_crowd": xgb.min_crowd}

    def _on_status(self, _topic: str, message) -> None:
        if isinstance(message.body, Status) and message.sender != AGGREGATOR_ID:
            body: Status = message.body
            self.status[message.sender] = {"online": body.online, "model": body.active_model,
                                           "windows": body.n_windows, "labelled": body.n_labelled,
                                           **body.detail}
            self.events.emit("gateway", client=message.sender, **self.status[message.sender])

    def _job(self, name: str) -> FederatedJob:
        def progress(p: RoundProgress) -> None:
            self.events.emit("progress", job=name, algorithm=p.algorithm, step=p.step, total=p.total,
                             answered=p.answered, selected=p.selected, metrics=p.metrics, elapsed_s=p.elapsed_s)

        return FederatedJob(self.engine, self.config.clients, job_id=f"demo-{name}-{time.time_ns()}",
                            settings=self.settings, progress=progress)

    def _traffic(self) -> dict[str, int]:
        stats = self.transport.stats
        return {"sent_bytes": stats.sent_bytes, "received_bytes": stats.received_bytes}

    @contextmanager
    def _measured(self, phase: str) -> Iterator[None]:
        """Bytes the aggregator sent and received while the block ran, as a ``traffic`` event."""
        before = sum(self._traffic().values())
        try:
            yield
        finally:
            self.events.emit("traffic", phase=phase, bytes=sum(self._traffic().values()) - before)

    def _sat_out(self, job_name: str, job: FederatedJob) -> None:
        """Tell which gateways missed rounds of ``job`` and why (nothing when all answered)."""
        rounds = [RoundFacts(tuple(r.selected), tuple(r.answered),
                             {c: f"{e.code}: {e.message}" for c, e in r.errors.items()}, tuple(r.timed_out))
                  for r in job.results]
        offline = {c for c, s in self.status.items() if not s.get("online", True)}
        reasons = sat_out_reasons(job.clients, rounds, offline=offline, rejected=job.rejected)
        if reasons:
            self.events.emit("sat_out", job=job_name, rounds=len(rounds), gateways=reasons)

    def _evaluate(self, name: str, model: TreeEnsemble, **extra: Any) -> tuple[Score, dict[str, float]]:
        """The model's held-out score as counts (what decisions take) and its pooled metrics."""
        job = self._job(f"eval-{name}")
        try:
            with self._measured("held-out scoring (every model, summed)"):
                evaluation = evaluate_federated(job, model)
        finally:
            self._sat_out(f"scoring {name}", job)
        class_counts = evaluation.confusion.sum(axis=1)
        self.events.emit("evaluation", model=name, metrics=evaluation.metrics, per_client=evaluation.per_client,
                         class_counts=class_counts, **extra)
        return Score.from_metrics(evaluation.per_client, class_counts), evaluation.metrics

    def _algorithm(self, name: str, *, init_model: TreeEnsemble | None = None):
        """The demo's settings; a fixed class vocabulary, so a retrained model can continue the
        deployed one even when a gateway labels an activity nobody had labelled before."""
        cfg = self.config
        classes = tuple(cfg.classes) or None
        if name == "fedscs-xgb":
            rounds = cfg.retrain_rounds if init_model is not None else cfg.rounds
            # 64 bins: a quarter of 256's bytes in every histogram round (dense under secure
            # aggregation), and max_bin 64..512 makes no measurable difference on these recordings
            return FedSCSXGB(n_rounds=rounds, max_depth=4, n_bins=XGB_BINS, feature_set_version=cfg.feature_set_version,
                             classes=classes, init_model=init_model, secure_aggregation=cfg.secure_aggregation)
        return FedForest(n_trees=cfg.trees, max_depth=cfg.max_depth_forest, n_bins=32, min_samples_leaf=3,
                         feature_set_version=cfg.feature_set_version, classes=classes,
                         secure_aggregation=cfg.secure_aggregation)

    def _local_only(self, step: str, seed: int) -> Score:
        """Every gateway alone (a FedForest of its own windows), each scored on its own held-out
        windows: the baseline a federated model must beat to be deployed."""
        self.events.emit("phase", name=f"training the local-only baseline, every gateway alone ({step})")
        job = self._job(f"local-{step}")
        try:
            with self._measured(f"local-only baseline, {step} (training and scoring)"):
                local = LocalLearning(self._algorithm("fedforest")).fit(job, seed=seed)
                per_client = {c: evaluate_federated(self._job(f"eval-local-{c}"), m, clients=[c]).per_client[c]
                              for c, m in local.items()}
        finally:
            self._sat_out("local-only baseline", job)
        self.events.emit("evaluation", model="local-only", step=step, per_client=per_client, metrics={})
        return Score.from_metrics(per_client)

    def _step(self, step: str, algorithms: list[str], init_model: TreeEnsemble | None, seed: int) -> None:
        """Train ``algorithms`` (a training that fails is a failed candidate, not a failed demo),
        score them and the local-only baseline (and the deployed model, re-scored on today's
        held-out windows), decide, and deploy the winner if there is one."""
        suffix = " (retrained)" if step == RETRAINING else ""
        models: dict[str, tuple[str, TreeEnsemble]] = {}
        scores: dict[str, Score] = {}
        metrics: dict[str, dict[str, float]] = {}
        failures: dict[str, str] = {}
        for algorithm in algorithms:
            name = algorithm + suffix
            self.events.emit("phase", name=f"training {name} ({step})")
            job = self._job(name)
            try:
                with self._measured(f"training {name}"):
                    model = self._algorithm(algorithm, init_model=init_model).fit(job, seed=seed)
            except (TrainingError, QuorumNotReached) as exc:
                failures[name] = str(exc)
                self.events.emit("training_failed", model=name, message=str(exc))
                continue
            finally:
                self._sat_out(f"training {name}", job)
            try:
                scores[name], metrics[name] = self._evaluate(name, model, step=step)
            except (TrainingError, QuorumNotReached) as exc:
                failures[name] = f"held-out scoring failed: {exc}"
                self.events.emit("training_failed", model=name, message=failures[name])
                continue
            models[name] = (algorithm, model)
        local = self._local_only(step, seed)
        deployed = None
        if self.deployed is not None:
            current = self.deployed
            _record, model = self.registry.model(MODEL_ID, current.version)
            name = f"{current.label} ({current.algorithm}, deployed), re-scored"
            deployed = (current.label, self._evaluate(name, model, step=step, rescored=current.label,
                                                      first_windows=current.first_windows)[0])
        decision = decide_deployment(step, scores, local_only=local, deployed=deployed, failures=failures)
        self.events.emit("decision", **asdict(decision))
        if decision.deploy is not None:
            algorithm, model = models[decision.deploy]
            score = scores[decision.deploy]
            record = self.registry.add(MODEL_ID, model, metrics=metrics[decision.deploy])
            self._deploy(algorithm, record.version, score)

    def train(self) -> None:
        self._step(FIRST_TRAINING, list(self.config.algorithms), None, self.config.seed)

    def retrain(self) -> None:
        """With a model deployed: retrain its algorithm (FedSCS-XGB continues boosting from it).
        With none: train every algorithm afresh on today's labels."""
        if self.deployed is None:
            self._step(RETRAINING, list(self.config.algorithms), None, self.config.seed + 1)
            return
        _record, model = self.registry.model(MODEL_ID, self.deployed.version)
        init = model if self.deployed.algorithm == "fedscs-xgb" else None
        self._step(RETRAINING, [self.deployed.algorithm], init, self.config.seed + 1)

    def _deploy(self, algorithm: str, version: int, score: Score) -> None:
        label = f"{MODEL_ID}:v{version}"
        self.events.emit("phase", name=f"deploying {label} ({algorithm})")
        with self._measured(f"deploying {label}"):
            result = deploy(self.engine, self.registry, self.key, MODEL_ID, version, self.config.clients,
                            deadline_s=self.config.deadline_s)
        self.deployed = _Deployed(algorithm, version, dict(score.windows))
        self.events.emit("deployed", model=label, algorithm=algorithm, version=version, accuracy=score.accuracy,
                         windows=score.n, active=result.active, rejected=result.rejected, pending=result.pending,
                         traffic=self._traffic())

    def close(self) -> None:
        self.events.emit("done", traffic=self._traffic())
        self.transport.close()
        self.registry.close()


def main(argv: list[str] | None = None) -> int:
    from shared.logs import setup_logging

    args = argv if argv is not None else sys.argv[1:]
    setup_logging("WARNING", json_lines=True)
    config = RoleConfig(**json.loads(Path(args[0]).read_text()))
    events = Events()
    try:
        role = Role(config, events)
    except Exception as exc:  # noqa: BLE001 - reported to the orchestrator, then exit
        events.emit("error", message=f"{type(exc).__name__}: {exc}")
        return 1
    events.emit("ready", clients=config.clients, privacy=role.privacy())
    try:
        for line in sys.stdin:
            command = json.loads(line).get("cmd") if line.strip() else None
            try:
                if command == "train":
                    role.train()
                elif command == "retrain":
                    role.retrain()
                elif command == "stop":
                    break
                events.emit("idle", after=command, traffic=role._traffic())
            except Exception as exc:  # noqa: BLE001 - one failed step is reported; the demo decides
                log.exception("demo step failed")
                events.emit("error", message=f"{command}: {type(exc).__name__}: {exc}")
    finally:
        role.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

