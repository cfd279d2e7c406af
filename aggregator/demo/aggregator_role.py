"""The fleet demo's aggregator process: the real training, evaluation and deployment pipeline,
driven step by step by the demo's orchestrator.

    python -m aggregator.demo.aggregator_role CONFIG.json

It speaks JSON lines: commands on stdin (``{"cmd": "train"}``, ``{"cmd": "retrain"}``,
``{"cmd": "stop"}``), events on stdout (``gateways``, ``progress``, ``evaluation``, ``deployed``,
``done``, ``error``) -- so the orchestrator can time the steps to the replayed sessions and
render them, and this process stays an ordinary aggregator: an MQTT client of the broker, a
registry file, a signing key.

``train``: FedSCS-XGB and FedForest over the fleet (each gateway trains on the labelled windows
of its store, the tail of each session held out), the local-only baseline (every gateway alone),
federated evaluation of all of them on the held-out windows, registration, and deployment of the
better federated model. ``retrain``: periodic retraining with the windows labelled since --
FedSCS-XGB continues boosting from the deployed model, FedForest grows a new forest -- deployed
only if its held-out accuracy does not drop.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.model import TreeEnsemble
from shared.protocol.messages import Status
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.signing import load_signing_key
from shared.transport.mqtt import MqttConfig, MqttTransport

from ..algorithms import FedForest, FedSCSXGB

#: FedSCS-XGB's bins in the demo (its histograms are the demo's largest messages).
XGB_BINS = 64
from ..baselines import LocalLearning
from ..deployment import deploy
from ..evaluation import evaluate_federated
from ..jobs import FederatedJob, JobSettings, RoundProgress
from ..registry import Registry
from ..rounds import RoundEngine

log = logging.getLogger(__name__)

__all__ = ["RoleConfig", "main"]

MODEL_ID = "activity"


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
        self.deployed: tuple[str, int, float] | None = None  # (algorithm, version, held-out accuracy)
        self.models: dict[str, TreeEnsemble] = {}

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

    def _evaluate(self, name: str, model: TreeEnsemble) -> dict[str, Any]:
        evaluation = evaluate_federated(self._job(f"eval-{name}"), model)
        self.events.emit("evaluation", model=name, metrics=evaluation.metrics, per_client=evaluation.per_client)
        return evaluation.metrics

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
                             classes=classes, init_model=init_model)
        return FedForest(n_trees=cfg.trees, max_depth=cfg.max_depth_forest, n_bins=32, min_samples_leaf=3,
                         feature_set_version=cfg.feature_set_version, classes=classes)

    def train(self) -> None:
        results: dict[str, dict[str, Any]] = {}
        for name in self.config.algorithms:
            self.events.emit("phase", name=f"training {name}")
            started = time.monotonic()
            model = self._algorithm(name).fit(self._job(name), seed=self.config.seed)
            self.models[name] = model
            results[name] = {**self._evaluate(name, model), "train_s": time.monotonic() - started}
        self.events.emit("phase", name="training the local-only baseline (every gateway alone)")
        local = LocalLearning(self._algorithm("fedforest")).fit(self._job("local"), seed=self.config.seed)
        per_client = {}
        for client, model in local.items():
            evaluation = evaluate_federated(self._job(f"eval-local-{client}"), model, clients=[client])
            per_client[client] = evaluation.metrics
        self.events.emit("evaluation", model="local-only", per_client=per_client, metrics={})
        best = max(results, key=lambda n: results[n].get("accuracy", 0.0))
        record = self.registry.add(MODEL_ID, self.models[best], metrics={k: v for k, v in results[best].items()
                                                                        if isinstance(v, float)})
        self._deploy(best, record.version, results[best]["accuracy"])

    def _deploy(self, algorithm: str, version: int, accuracy: float) -> None:
        self.events.emit("phase", name=f"deploying {MODEL_ID}:v{version} ({algorithm})")
        result = deploy(self.engine, self.registry, self.key, MODEL_ID, version, self.config.clients,
                        deadline_s=self.config.deadline_s)
        self.deployed = (algorithm, version, accuracy)
        self.events.emit("deployed", model=f"{MODEL_ID}:v{version}", algorithm=algorithm, version=version,
                         accuracy=accuracy, active=result.active, rejected=result.rejected, pending=result.pending,
                         traffic=self._traffic())

    def retrain(self) -> None:
        assert self.deployed is not None, "retrain needs a deployed model"
        algorithm, version, accuracy = self.deployed
        _record, deployed_model = self.registry.model(MODEL_ID, version)
        self.events.emit("phase", name=f"retraining {algorithm} with the windows labelled since")
        init = deployed_model if algorithm == "fedscs-xgb" else None
        model = self._algorithm(algorithm, init_model=init).fit(self._job(f"retrain-{algorithm}"),
                                                                seed=self.config.seed + 1)
        retrained = self._evaluate(f"{algorithm} (retrained)", model)
        previous = self._evaluate(f"{algorithm} v{version} (deployed), re-scored on today's held-out windows",
                                  deployed_model)
        if retrained.get("accuracy", 0.0) >= previous.get("accuracy", 0.0):
            record = self.registry.add(MODEL_ID, model, metrics={k: v for k, v in retrained.items()
                                                                 if isinstance(v, float)})
            self._deploy(algorithm, record.version, retrained["accuracy"])
        else:
            self.events.emit("kept", model=f"{MODEL_ID}:v{version}", retrained=retrained, deployed=previous)

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
    events.emit("ready", clients=config.clients)
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

