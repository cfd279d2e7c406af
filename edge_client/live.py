"""Live recognition on the gateway: every completed window is classified by the active model,
stored, checked against the alert rules, and queued for the aggregator.

Works without a network: predictions and alerts are stored locally as they happen; the queue
of unsent ones is published whenever the gateway is connected (``flush``, called on the
gateway's publishing tick), bounded so an offline week cannot exhaust memory (the oldest queued
ones are dropped from the queue -- they stay in the store).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from shared.model import model_inputs
from shared.protocol.messages.deployment import AlertEvent, PredictionBatch

from .alerts import AlertEngine
from .models import ModelManager
from .store import PredictionRecord, WindowRecord, WindowStore

log = logging.getLogger(__name__)

__all__ = ["LiveConfig", "LivePredictor", "LiveStats"]


@dataclass(frozen=True)
class LiveConfig:
    """``publish_every_s``: how often queued predictions go out; ``max_queue``: bound on unsent
    predictions (and alerts) kept in memory; ``max_batch``: predictions per message."""

    publish_every_s: float = 10.0
    max_queue: int = 100_000
    max_batch: int = 5_000


@dataclass
class LiveStats:
    predicted: int = 0
    skipped_no_model: int = 0
    skipped_feature_set: int = 0
    published: int = 0
    dropped_from_queue: int = 0
    alerts: int = 0
    last_label: str = ""
    last_latency_ms: float = float("nan")  # window complete -> prediction
    last_inference_ms: float = float("nan")  # the model alone


@dataclass
class LivePredictor:
    """Scores windows with ``models.current``; ``on_window`` is the window callback."""

    models: ModelManager
    store: WindowStore
    alerts: AlertEngine = field(default_factory=AlertEngine)
    config: LiveConfig = field(default_factory=LiveConfig)
    clock: Callable[[], float] = time.perf_counter

    def __post_init__(self) -> None:
        self.stats = LiveStats()
        self._queue: deque[tuple[str, tuple[str, ...], PredictionRecord, int]] = deque()
        self._alert_queue: deque[AlertEvent] = deque(maxlen=self.config.max_queue)
        self._session = ""

    def on_window(
        self, record: WindowRecord, window_id: int | None, completed_at: float | None = None
    ) -> PredictionRecord | None:
        """Classify one stored window. ``completed_at`` (``perf_counter`` when the window's last
        sample arrived) makes the recorded latency end to end: features, storage and model;
        without it the latency is the model's alone."""
        if record.session_id != self._session:  # another stream (processing.py): its clock is its own
            self.alerts.reset()
            self._session = record.session_id
        installed = self.models.current
        if installed is None:
            self.stats.skipped_no_model += 1
            return None
        model = installed.model
        if record.feature_set_version != installed.bundle.feature_set_version or not model.is_classifier:
            self.stats.skipped_feature_set += 1
            return None
        started = self.clock()
        X = model_inputs(model, record.features.astype(np.float32)[None, :], installed.client_index)
        proba = model.proba_from_raw(installed.engine.raw(X))[0]
        now = self.clock()
        self.stats.last_inference_ms = (now - started) * 1e3
        latency_ms = (now - (started if completed_at is None else completed_at)) * 1e3
        k = int(np.argmax(proba))
        label = installed.class_names[k]
        prediction = PredictionRecord(
            record.session_id,
            record.end_us,
            installed.label,
            label,
            float(proba[k]),
            proba.astype(np.float32),
            latency_ms,
            window_id,
        )
        self.store.add_prediction(prediction)
        self.stats.predicted += 1
        self.stats.last_label, self.stats.last_latency_ms = label, latency_ms
        self._enqueue((installed.label, installed.class_names, prediction, k))
        for event in self.alerts.observe(record.end_us, label):
            self.store.add_alert(
                record.session_id, event.rule, event.state, event.started_us, event.detected_us, event.message
            )
            self._alert_queue.append(event)
            self.stats.alerts += 1
            log.warning("alert", extra={"rule": event.rule, "state": event.state, "message": event.message})
        return prediction

    def _enqueue(self, item: tuple[str, tuple[str, ...], PredictionRecord, int]) -> None:
        self._queue.append(item)
        while len(self._queue) > self.config.max_queue:
            self._queue.popleft()
            self.stats.dropped_from_queue += 1

    def flush(self, publish: Callable[[object], None]) -> int:
        """Publish queued alerts and predictions (one message per model and ``max_batch``);
        returns how many predictions went out. ``publish`` raises if the link is down -- then
        everything stays queued."""
        while self._alert_queue:
            publish(self._alert_queue[0])
            self._alert_queue.popleft()
        sent = 0
        while self._queue:
            model_label = self._queue[0][0]
            batch: list[tuple[str, tuple[str, ...], PredictionRecord, int]] = []
            while self._queue and self._queue[0][0] == model_label and len(batch) < self.config.max_batch:
                batch.append(self._queue.popleft())
            try:
                publish(self._batch(batch))
            except Exception:
                self._queue.extendleft(reversed(batch))
                raise
            sent += len(batch)
        self.stats.published += sent
        return sent

    @staticmethod
    def _batch(rows: list[tuple[str, tuple[str, ...], PredictionRecord, int]]) -> PredictionBatch:
        model_id, _, version = rows[0][0].rpartition(":v")
        return PredictionBatch(
            model_id=model_id,
            model_version=int(version),
            classes=rows[0][1],
            window_end_us=np.array([r[2].end_us for r in rows], dtype=np.int64),
            predicted=np.array([r[3] for r in rows], dtype=np.int32),
            probability=np.array([r[2].probability for r in rows], dtype=np.float32),
            latency_ms=np.array([r[2].latency_ms for r in rows], dtype=np.float32),
        )
