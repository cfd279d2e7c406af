"""A training job's handle on the fleet: the algorithms' server halves talk to clients only here.

``FederatedJob.ask`` numbers the job's rounds, runs them on the round engine, and hands back the
typed reply bodies in client-id order -- the order in which the server sums statistics, so a
run is deterministic whatever order the replies arrived in. Clients that time out or answer with
an error are logged and left out of that round (partial participation); a reply that is
well-formed on the wire but does not fit the job (wrong number of features, a bin id out of
range...) is rejected by the algorithm through :meth:`FederatedJob.reject`, with the same effect.
Progress (one ``StepProgress`` per boosting round / forest level) goes to the job's callback
and to the log.

A job can be asked to stop early (``stop``, an event set e.g. by Ctrl-C): the algorithms check
:meth:`FederatedJob.stop_here` after every step they report, that is at a round boundary, where
what they have grown is a whole model (FedSCS-XGB: the completed boosting rounds; FedForest:
the forest cut at its last completed level), and ``stopped`` records the step.

A job can also fail part way (a quorum lost at round 7). An algorithm whose completed steps form a
model on their own (FedSCS-XGB: every boosting round only adds trees) reports each step with
that model (``report(progress, model=...)``, kept as a :class:`Checkpoint`), and
``aggregator.fleet`` turns the failure into :class:`TrainingFailed` carrying it, so the rounds
already paid for are saved. A long-running server hears of each step together with its
checkpoint (``on_step``) and stores both in one transaction, so that a job whose server died
resumes from exactly the last step it shows as completed. An algorithm whose steps do not form a
model (FedForest: a level of half-grown trees) reports its own resumable state instead
(``report(progress, state=...)``: bytes it can continue from).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .rounds import QuorumNotReached, RoundEngine, RoundResult

log = logging.getLogger(__name__)

__all__ = ["Checkpoint", "FederatedJob", "JobSettings", "StepProgress", "TrainingError", "TrainingFailed", "new_job_id"]


class TrainingError(RuntimeError):
    """Training cannot go on (no usable replies, inconsistent clients); the message says why."""


@dataclass(frozen=True)
class JobSettings:
    """How patient a job is: per-round ``deadline_s`` and the ``min_fraction`` of the selected
    clients whose replies a round needs (1.0: all; the engine raises ``QuorumNotReached`` below)."""

    deadline_s: float = 120.0
    min_fraction: float = 1.0

    def __post_init__(self) -> None:
        if not self.deadline_s > 0:
            raise ValueError(f"deadline_s must be > 0, got {self.deadline_s}")
        if not 0 < self.min_fraction <= 1:
            raise ValueError(f"min_fraction must lie in (0, 1], got {self.min_fraction}")


@dataclass(frozen=True)
class StepProgress:
    """One step of an algorithm, for progress output: ``step`` of ``total`` (e.g. boosting
    round 3 of 10, a forest's level), who answered, and the algorithm's metrics (e.g.
    ``train_loss``). A step may take several engine rounds (``RoundEngine``: one request and
    its replies)."""

    job: str
    algorithm: str
    step: int
    total: int
    selected: int
    answered: int
    metrics: dict[str, float] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def detail(self) -> str:
        """Who answered, the step's metrics and its duration."""
        metrics = " ".join(f"{k}={v:.5g}" for k, v in self.metrics.items())
        return f"{self.answered}/{self.selected} clients {metrics} ({self.elapsed_s:.2f} s)"

    def line(self) -> str:
        return f"{self.algorithm} {self.step}/{self.total}: {self.detail()}"


@dataclass(frozen=True)
class Checkpoint:
    """A job's last completed step: the model it grew (built on demand: ``model()``; None for an
    algorithm whose steps form no model) and the bytes the algorithm resumes from (``state()``;
    None: the model's CBOR)."""

    model: Callable[[], Any] | None
    progress: StepProgress
    state: Callable[[], bytes] | None = None

    def resume_state(self) -> bytes:
        """What a resumed job continues from: the algorithm's own state, else the model's CBOR."""
        if self.state is not None:
            return self.state()
        if self.model is None:
            raise TrainingError("a checkpoint needs a model or a state")
        return self.model().to_cbor()


class TrainingFailed(TrainingError):
    """Training failed after ``checkpoint.progress.step`` steps; ``checkpoint.model()`` is the
    model those steps grew (the same as a job asked for that many steps would give)."""

    def __init__(self, message: str, checkpoint: Checkpoint) -> None:
        super().__init__(message)
        self.checkpoint = checkpoint


def new_job_id() -> str:
    """A fresh job id (the rounds' topic-independent key; gateways keep per-job state under it)."""
    return f"job-{uuid.uuid4().hex[:12]}"


class FederatedJob:
    """Rounds of one job over a fixed set of known clients."""

    def __init__(
        self,
        engine: RoundEngine,
        clients: Sequence[str],
        *,
        job_id: str | None = None,
        settings: JobSettings | None = None,
        progress: Callable[[StepProgress], None] | None = None,
        stop: threading.Event | None = None,
        on_step: Callable[[StepProgress, Checkpoint | None], None] | None = None,
    ) -> None:
        if not clients:
            raise TrainingError("a job needs at least one client")
        self.engine = engine
        self.clients = sorted(dict.fromkeys(clients))
        self.job_id = job_id or new_job_id()
        self.settings = settings or JobSettings()
        self._progress = progress
        self._stop = stop
        self._on_step = on_step
        #: The step after which the algorithm stopped on request (None: it ran to the end).
        self.stopped: StepProgress | None = None
        #: The last completed step's model, if the algorithm reports one (``report(..., model=...)``).
        self.checkpoint: Checkpoint | None = None
        self.rounds = 0
        self.rejected: dict[str, int] = {}
        self.results: list[RoundResult] = []  # per round: who answered what (envelopes, errors, timeouts)

    def ask(
        self,
        request: object | Mapping[str, object],
        clients: Sequence[str],
        expect: type,
        *,
        fold: Callable[[str, Any], Any] | None = None,
    ) -> dict[str, Any]:
        """Send ``request`` (one body, or one per client) to ``clients``; the valid reply bodies,
        keyed and ordered by client id. Raises ``QuorumNotReached`` below the job's quorum.
        ``fold(client, body)`` takes each reply in as it arrives and returns the body kept
        (:meth:`~aggregator.rounds.RoundEngine.run_round`)."""
        self.rounds += 1
        try:
            result = self.engine.run_round(
                self.job_id,
                self.rounds,
                request,
                sorted(clients),
                deadline_s=self.settings.deadline_s,
                min_fraction=self.settings.min_fraction,
                expect=expect,
                fold=fold,
            )
        except QuorumNotReached as exc:
            self.results.append(exc.result.without_bodies())  # who failed and why stays inspectable
            raise
        self.results.append(result.without_bodies())  # bodies go to the algorithm, not the record
        for client, error in sorted(result.errors.items()):
            log.warning(
                "client left out of the round",
                extra={
                    "job": self.job_id,
                    "round": self.rounds,
                    "client": client,
                    "code": error.code,
                    "error": error.message,
                },
            )
        if result.timed_out:
            log.warning(
                "clients timed out", extra={"job": self.job_id, "round": self.rounds, "clients": result.timed_out}
            )
        return {c: result.replies[c].body for c in sorted(result.replies)}

    def reject(self, client: str, reason: str) -> None:
        """Record that ``client``'s reply was unusable; the caller leaves it out of the round."""
        self.rejected[client] = self.rejected.get(client, 0) + 1
        log.warning(
            "reply rejected", extra={"job": self.job_id, "round": self.rounds, "client": client, "reason": reason}
        )

    def report(
        self,
        progress: StepProgress,
        *,
        model: Callable[[], Any] | None = None,
        state: Callable[[], bytes] | None = None,
    ) -> None:
        """Record that the step ``progress`` completed; ``model()``, if given, builds what it grew
        (kept as ``checkpoint``); ``state()``, if given, the bytes the algorithm resumes from
        after this step. The progress callback, then ``on_step`` with the step and its
        checkpoint (None when the algorithm keeps neither), hear of it -- together, so that
        whoever stores them never shows a completed step without what it resumes from."""
        log.info(
            "progress",
            extra={
                "job": progress.job,
                "algorithm": progress.algorithm,
                "step": progress.step,
                "total": progress.total,
                "answered": progress.answered,
                **progress.metrics,
            },
        )
        point = Checkpoint(model, progress, state) if model is not None or state is not None else None
        if model is not None:
            self.checkpoint = point
        if self._progress is not None:
            self._progress(progress)
        if self._on_step is not None:
            self._on_step(progress, point)

    def stop_here(self, progress: StepProgress) -> bool:
        """Whether the algorithm should stop after the step it just reported: a stop was asked
        for and steps remain (a request during the last step changes nothing). Records the step
        in ``stopped``; the algorithm then returns the model grown so far."""
        if self._stop is None or not self._stop.is_set() or progress.step >= progress.total:
            return False
        self.stopped = progress
        log.warning(
            "stopping at a round boundary on request",
            extra={"job": self.job_id, "step": progress.step, "total": progress.total},
        )
        return True
