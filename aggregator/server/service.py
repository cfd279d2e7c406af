"""The server's work behind its API: the fleet as the broker tells it, jobs, schedules, rollouts.

:class:`FleetTracker` folds every gateway's retained status (``aggregator.fleet_status``) as it
arrives and stores the row in the registry, so the API answers from memory and a restarted
server knows the gateways it saw before.

:class:`JobRunner` runs jobs one at a time on the server's one round engine, on its own thread.
Every completed round is stored with its metrics and what the job resumes from after it -- for
an algorithm whose completed rounds form a model (FedSCS-XGB), that model; for FedForest, its
state after the level (``ForestState``) -- in one transaction (``FederatedJob(on_step=...)``,
``Registry.complete_round``): the API never shows a round as completed whose checkpoint a
restarted server would not find. A job found ``running`` when the server starts -- it was
killed, or stopped mid-job -- resumes from its newest checkpoint: rounds after it are dropped
and grown again, none is applied twice, and continuing the boosting from that model, or the
forest from that level, gives the model an uninterrupted run gives (tests/server/test_resume.py,
test_resume_state.py). A forest whose fleet no longer fits its state (the data changed) starts
over from its first level, its rounds replacing the stored ones; an algorithm that stores
nothing per round (FedGA-Tree) starts again from its first round. Each attempt runs under its own
protocol job id (``JOB-aN``), since gateways keep per-job state. After training the model is
registered and scored by federated evaluation on the participants' held-out windows. A job with
a data time range (``JobRequest.since``/``until``) sends it with its survey; the gateways filter
their own windows for the job (training and held-out alike) and refuse below ``min_labelled``
in the range, and the job needs ``min_gateways`` of those that remain.

A private job (its algorithm's ``protocol`` is ``"private"``) is checked against the privacy cap
(``PrivacyCap``: the most epsilon any window may spend over its lifetime) when it is submitted --
with every private job queued or starting counted as planned -- and again when an attempt starts; one
over the cap is refused with the ledger's one line (``aggregator.privacy.ledger.check_job``). An
attempt is entered in the ledger when it starts (its plan, on every window to come); each of its
releases is committed to the entry before its request goes out (``aggregator.privacy.spending``,
installed around the fit); it is settled when it ends: with what its model's metadata says it
spent (``dp_rho``, ``dp_xi``) on the participants' windows up to then, or, ended without a model,
with what it released (a release in flight counted). An attempt cut short by a stopped or killed
server stays open until the next attempt starts. A resumed attempt that continues the stored
model (FedSCS-XGB) is given, and entered with, the rest of the job's budget -- its ``rho`` less
what the earlier attempts spent -- which it spends on its own opening (the fleet is read again)
and the rounds left, so the job stays within its ``dp_epsilon``; one that starts over (a private
FedForest stores no state; a job killed before its first stored step) makes every release again
and is entered with the whole plan. A schedule whose job the cap refuses because older windows
have spent their budget trains on the windows that have all of it (the refusal's ``since``); one
refused otherwise is skipped: one logged line, and its ``note`` says why until a later run starts.

A job started by a schedule then faces the promotion rule (``policy.judge``): candidate and the
version the fleet runs are scored on the same held-out windows; within the threshold, and with a
signing key, the candidate goes to the canary share of the participants first and then to the
rest unless the canary halts it -- a gateway of the canary refused it, the canary's own
held-out score regressed beyond the threshold, or (a schedule with ``canary_windows``) its live
metrics regressed -- in which case the canary is rolled back. Every decision is stored with its
numbers (``Registry.add_promotion``).

The live metrics are the canary's live predictions (``PredictionBatch``, which every gateway
publishes to the aggregator as it recognises its stream; :class:`LiveMonitor` keeps their
confidences per gateway and model version). After the canary activated the candidate, the
server waits up to ``canary_observe_s`` seconds for ``canary_windows`` live predictions of it
from every canary gateway, then compares their mean confidence with that of the gateway's
newest as many predictions of the version it ran before (``policy.judge_live``): too few
predictions, or a drop beyond ``canary_max_drop``, halts the rollout.

:class:`Scheduler` looks at the schedules every ``schedule_tick_s`` seconds (``policy.is_due``).
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from shared.model import TreeEnsemble
from shared.protocol.envelope import Message
from shared.protocol.messages.deployment import PredictionBatch
from shared.protocol.messages.fleet_sums import TimeRange
from shared.protocol.topics import TopicLayout
from shared.transport.base import Transport

from ..algorithm_table import ALGORITHM_TABLE, algorithm_row
from ..evaluation import Evaluation, NoHeldOutData, evaluate_federated, evaluate_local_only
from ..feature_sets import FeatureSetChoice, survey_feature_sets
from ..fleet_status import GatewayRow, fold_statuses
from ..jobs import Checkpoint, FederatedJob, JobSettings, StepProgress, TrainingError
from ..privacy import Released, ReleaseLog, epsilon_of, recording_releases
from ..privacy.ledger import BudgetExceeded, GatewayBudget, LedgerEntry, PlannedJob, PrivacyCap, budget_of, check_job
from ..registry import JobRecord, JobRules, Registry, RegistryError, ScheduleRecord, iso_utc, micros
from ..rounds import QuorumNotReached, RoundEngine
from .gateway_input import MAX_WINDOWS_PER_S, NEW_GATEWAY_WINDOWS, Credit, FaultLog, credit_counts
from .policy import CanaryCheck, LiveCheck, canary_of, is_due, judge, judge_live, metric_for

log = logging.getLogger(__name__)

__all__ = [
    "ALGORITHMS",
    "FLEET_ALGORITHMS",
    "STALE_AFTER_S",
    "FleetTracker",
    "JobRequest",
    "JobRunner",
    "LiveMonitor",
    "Scheduler",
    "build_algorithm",
    "planned_privacy",
]


#: The API's choices (every row of the algorithm table).
ALGORITHMS = tuple(a.name for a in ALGORITHM_TABLE)
#: Algorithms a schedule may retrain (one model for the fleet).
FLEET_ALGORITHMS = tuple(a.name for a in ALGORITHM_TABLE if not a.personal)


#: Configuration fields a job may not set through the API (objects, not JSON values).
_NOT_CONFIGURABLE = {"init_model", "edges", "feature_set_version", "resume_state"}


def build_algorithm(
    name: str,
    config: dict[str, Any],
    *,
    init_model: TreeEnsemble | None = None,
    feature_set: str = "",
    resume_state: bytes | None = None,
):
    """The configured server half of ``name`` (continuing from ``resume_state``, see
    ``AlgorithmRow.resumes_itself``); a ``ValueError`` names a bad parameter."""
    row = algorithm_row(name)
    cls = row.config_type()
    known = {f.name for f in fields(cls)} - _NOT_CONFIGURABLE
    unknown = sorted(set(config) - known)
    if unknown:
        raise ValueError(f"config: {name} has no parameter {', '.join(unknown)} (it has {', '.join(sorted(known))})")
    extra: dict[str, Any] = {"feature_set_version": feature_set}
    if init_model is not None:
        if not row.continues_from_model():
            raise ValueError(f"{name} cannot continue from a model")
        extra["init_model"] = init_model
    if resume_state is not None:
        if not row.resumes_itself():
            raise ValueError(f"{name} does not resume from a state of its own")
        extra["resume_state"] = resume_state
    try:
        return cls(**config, **extra)
    except TypeError as exc:
        raise ValueError(f"config: {exc}") from None


def planned_privacy(algorithm) -> tuple[float, float] | None:
    """``(dp_epsilon, dp_delta)`` a job of the configured ``algorithm`` plans to spend per window,
    or None when it trains without differential privacy."""
    if getattr(algorithm, "protocol", None) != "private":
        return None
    return float(algorithm.dp_epsilon), float(algorithm.dp_delta)


@dataclass(frozen=True)
class JobRequest:
    """What to train: ``algorithm`` with ``config`` (its parameters) registered as ``model_id``,
    under ``rules`` (:class:`~aggregator.registry.JobRules`: who takes part, on which windows, with
    which seed). ``init_model`` ("MODEL:vN") continues boosting from that version.

    The gateways filter their own windows to the rules' ``[since, until)`` (``TimeRange`` in the
    job's survey; training and held-out scoring alike) and refuse below ``min_labelled``, which
    then counts the labelled windows in the range."""

    algorithm: str
    model_id: str
    config: dict[str, Any] = field(default_factory=dict)
    rules: JobRules = JobRules()
    init_model: str = ""


def time_range(rules: JobRules) -> TimeRange | None:
    """The job's data time range as the gateways take it (microseconds), or None for all data."""
    if rules.since is None and rules.until is None:
        return None
    return TimeRange(rules.since_us, rules.until_us)


#: How old an online gateway's newest status may grow before it counts as stale (a running gateway
#: refreshes it every ``--publish-every`` seconds, 10 by default).
STALE_AFTER_S = 90.0


class FleetTracker:
    """Every gateway's newest status (``GatewayRow``), kept in memory and in the registry.

    A row's ``windows`` and ``labelled`` are the counts the server credits
    (``gateway_input.credit_counts``: they grow no faster than ``window_rate`` windows per
    second; a gateway never seen is credited at most ``new_gateway_windows`` at its first status),
    not the status's own; a status the tracker cannot read is counted in ``faults``.
    """

    def __init__(
        self,
        transport: Transport,
        layout: TopicLayout,
        registry: Registry,
        *,
        window_rate: float = MAX_WINDOWS_PER_S,
        stale_after_s: float = STALE_AFTER_S,
        new_gateway_windows: int = NEW_GATEWAY_WINDOWS,
    ) -> None:
        self._layout, self._registry, self._rate = layout, registry, window_rate
        self._first_credit = new_gateway_windows
        self.stale_after_s = stale_after_s
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.faults = FaultLog(log)
        #: statuses that could not be read, per gateway (its topic's)
        self.gateway_faults: dict[str, int] = {}
        self._stale: set[str] = set()  # online gateways not heard from for longer than stale_after_s
        self._heard: dict[str, float] = {}  # the server's clock when each gateway's newest status arrived
        self._closed = threading.Event()
        self._watch = threading.Thread(target=self._watch_loop, name="wheelfed-stale", daemon=True)
        self.rows: dict[str, GatewayRow] = {row.gateway: row for row in registry.gateways()}
        # credited windows per gateway, kept while it is offline (an offline status reports none);
        # a gateway stored without counts is credited from zero, from now
        now = time.monotonic()
        self._credit = {row.gateway: Credit(row.windows or 0, row.labelled or 0, now) for row in self.rows.values()}
        transport.subscribe(layout.all_statuses, self._on_status)
        self._watch.start()

    def close(self) -> None:
        """Stop watching for stale gateways."""
        self._closed.set()

    def _watch_loop(self) -> None:
        while not self._closed.wait(min(5.0, max(self.stale_after_s / 4, 0.05))):
            try:
                self.check_stale(time.time())
            except Exception:  # never end the watch
                log.exception("stale check failed")

    def silent_s(self, row: GatewayRow, now: float) -> float:
        """Seconds since the server last heard from ``row``'s gateway, on the server's clock (a
        gateway's own clock may be off: a board without a battery clock); for one not heard from
        since the server started, since its stored status's time."""
        heard = self._heard.get(row.gateway)
        return max(0.0, now - heard) if heard is not None else row.age_s(now)

    def is_stale(self, row: GatewayRow, now: float) -> bool:
        """Whether ``row`` says online but the server has not heard from the gateway for longer than
        ``stale_after_s``: it may be gone without its last will, and its counts may be out of date."""
        return row.online and self.silent_s(row, now) > self.stale_after_s

    def check_stale(self, now: float) -> list[str]:
        """Log each gateway that went stale since the last check (once); the stale ones now."""
        with self._lock:
            stale = {g for g, row in self.rows.items() if self.is_stale(row, now)}
            new, self._stale = sorted(stale - self._stale), stale
            ages = {g: self.silent_s(self.rows[g], now) for g in new}
        for gateway in new:
            log.warning(
                "gateway %s went stale: online, but no status for %.0f s (expected at least every %.0f s); "
                "its counts may be out of date",
                gateway,
                ages[gateway],
                self.stale_after_s,
                extra={"gateway": gateway},
            )
        return sorted(stale)

    def _on_status(self, topic: str, message) -> None:
        try:
            rows = fold_statuses([(topic, message)], self._layout)
        except Exception as exc:  # counted and logged once per kind, never a traceback per message
            self.faults.note(f"status:{type(exc).__name__}", str(exc), topic=topic)
            gateway = self._layout.client_of(topic)
            if gateway is not None:
                with self._lock:
                    self.gateway_faults[gateway] = self.gateway_faults.get(gateway, 0) + 1
            return
        if not rows:
            return
        row = rows[0]
        with self._changed:
            if row.windows is not None and row.labelled is not None:
                credit = credit_counts(
                    self._credit.get(row.gateway),
                    row.windows,
                    row.labelled,
                    time.monotonic(),
                    self._rate,
                    self._first_credit,
                )
                self._credit[row.gateway] = credit
                row = replace(row, windows=credit.windows, labelled=credit.labelled)
            self.rows[row.gateway] = row
            self._heard[row.gateway] = time.time()
            back = row.gateway in self._stale
            self._stale.discard(row.gateway)
            self._changed.notify_all()
        if back:
            log.info(
                "gateway %s reports again (%s)",
                row.gateway,
                "online" if row.online else "offline",
                extra={"gateway": row.gateway},
            )
        try:
            self._registry.save_gateways([row])
        except Exception:  # the registry may be briefly unavailable; memory stays right
            log.exception("could not store a gateway's status", extra={"gateway": row.gateway})

    def snapshot(self) -> list[GatewayRow]:
        with self._lock:
            return [self.rows[g] for g in sorted(self.rows)]

    def online(self) -> list[str]:
        with self._lock:
            return sorted(g for g, row in self.rows.items() if row.online)

    def labelled(self, gateway: str) -> int:
        with self._lock:
            credit = self._credit.get(gateway)
            return 0 if credit is None else credit.labelled

    def labelled_total(self) -> int:
        """Labelled windows fleet-wide, each gateway's as credited from its last status (online
        or not)."""
        with self._lock:
            return sum(c.labelled for c in self._credit.values())

    def wait_online(self, gateways: Collection[str], timeout_s: float) -> bool:
        with self._changed:
            return self._changed.wait_for(
                lambda: all(g in self.rows and self.rows[g].online for g in gateways), timeout_s
            )


#: Live confidences kept per gateway and model version: the most a canary check may ask for.
LIVE_KEEP = 1000


class LiveMonitor:
    """The confidence of every gateway's live predictions, per gateway and model version.

    Gateways publish their live predictions to the aggregator (``PredictionBatch`` on their
    outbox: per window the predicted class's probability); the monitor keeps the newest
    ``keep`` confidences of the two model versions each gateway reported last, which is what
    the canary's live check compares (see the module docstring). A batch whose sender is not
    the gateway of its topic is ignored.
    """

    def __init__(self, transport: Transport, layout: TopicLayout, *, keep: int = LIVE_KEEP) -> None:
        self._layout, self.keep = layout, keep
        self._seen: dict[str, dict[str, deque[float]]] = {}
        self._changed = threading.Condition()
        transport.subscribe(layout.all_outboxes, self._on_message)

    def _on_message(self, topic: str, message: Message) -> None:
        body = message.body
        gateway = self._layout.client_of(topic)
        if not isinstance(body, PredictionBatch) or gateway is None or gateway != message.envelope.sender:
            return
        label = f"{body.model_id}:v{body.model_version}"
        with self._changed:
            versions = self._seen.setdefault(gateway, {})
            kept = versions.pop(label, None) or deque(maxlen=self.keep)
            kept.extend(body.probability.astype(np.float64).tolist())
            versions[label] = kept  # the most recently reported version last
            while len(versions) > 2:
                del versions[next(iter(versions))]
            self._changed.notify_all()

    def confidences(self, gateway: str, label: str) -> np.ndarray:
        """The kept confidences of ``gateway``'s live predictions with ``label``, oldest first."""
        with self._changed:
            return np.array(self._seen.get(gateway, {}).get(label, ()), dtype=np.float64)

    def forget(self, gateways: list[str], label: str) -> None:
        """Drop what ``gateways`` reported with ``label`` (before it is deployed to them again)."""
        with self._changed:
            for gateway in gateways:
                self._seen.get(gateway, {}).pop(label, None)

    def wait(self, gateways: list[str], label: str, n: int, timeout_s: float, stop: threading.Event) -> bool:
        """Wait until each of ``gateways`` reported ``n`` predictions with ``label``; False at
        the timeout or when ``stop`` is set."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not all(len(self._seen.get(g, {}).get(label, ())) >= n for g in gateways):
                left = deadline - time.monotonic()
                if left <= 0 or stop.is_set():
                    return False
                self._changed.wait(min(left, 0.25))
            return True


class JobCancelled(Exception):
    """The job was cancelled (through the API) while it ran."""


@dataclass(frozen=True)
class AttemptPlan:
    """Where one attempt of a job starts: ``attempt`` (1 for the first), ``base`` steps already
    stored, ``offset`` added to the algorithm's own step numbers (0 when it resumes from a state of
    its own), ``finished`` when every step is stored (its model is the result), ``init`` the model
    to continue from, ``config`` the algorithm's parameters for the steps that remain and
    ``own_state`` the algorithm's stored state."""

    attempt: int
    base: int
    offset: int
    finished: bool
    init: TreeEnsemble | None
    config: dict[str, Any]
    own_state: bytes | None

    def protocol_id(self, job_id: str) -> str:
        """The attempt's id on the wire (a later attempt's replies never mix with an earlier's)."""
        return f"{job_id}-a{self.attempt}"


class JobRunner:
    """Runs queued jobs one after another on a thread of its own (see the module docstring)."""

    def __init__(
        self,
        registry: Registry,
        engine: RoundEngine,
        tracker: FleetTracker,
        *,
        settings: JobSettings,
        signing_key=None,
        presence_wait_s: float = 30.0,
        live: LiveMonitor | None = None,
        privacy_cap: PrivacyCap = PrivacyCap(),
        local_baseline: bool = True,
    ) -> None:
        self.registry, self.engine, self.tracker, self.live = registry, engine, tracker, live
        self.privacy_cap, self.local_baseline = privacy_cap, local_baseline
        self._submitting = threading.Lock()  # a submission's privacy check and its queueing, one at a time
        self.settings, self.signing_key, self.presence_wait_s = settings, signing_key, presence_wait_s
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._stop = threading.Event()
        self._current: str | None = None
        self._cancelled: set[str] = set()
        self._shutting_down = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="wheelfed-jobs", daemon=True)

    def start(self) -> None:
        """Queue the jobs a previous server left running or queued (oldest first), then run."""
        for state in ("running", "queued"):
            for job in sorted(self.registry.jobs(state=state), key=lambda j: j.created):
                self._queue.put(job.job_id)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop at the running job's next round boundary; it stays ``running`` and resumes when
        the server starts again."""
        self._shutting_down = True
        self._stop.set()
        self._queue.put(None)
        self._thread.join(timeout_s)

    def submit(self, request: JobRequest, *, schedule_id: str = "") -> JobRecord:
        """Check ``request`` and queue it; the stored job record (state ``queued``)."""
        algorithm = build_algorithm(request.algorithm, request.config)
        rules = request.rules
        if request.init_model:
            model_id, _, version = request.init_model.rpartition(":v")
            if not model_id or not version.isdigit():
                raise ValueError(f"init_model must be MODEL_ID:vN, got {request.init_model!r}")
            if not algorithm_row(request.algorithm).continues_from_model():
                raise ValueError(f"{request.algorithm} cannot continue from a model (init_model)")
            self.registry.record(model_id, int(version))
        job_id = f"job-{uuid.uuid4().hex[:12]}"
        plan = planned_privacy(algorithm)
        with self._submitting:
            if plan is not None:
                self.check_privacy(PlannedJob(rules.clients, rules.since_us, rules.until_us, *plan))
            record = self.registry.add_job(
                job_id,
                request.algorithm,
                request.config,
                model_id=request.model_id,
                total=algorithm_row(request.algorithm).total_steps(algorithm),
                rules=rules,
                init_model=request.init_model,
                schedule_id=schedule_id,
            )
        self._queue.put(job_id)
        return record

    # -- the privacy ledger ------------------------------------------------------------------

    def _pending_plans(self, entries: list[LedgerEntry]) -> list[LedgerEntry]:
        """The private jobs queued, or running but not entered yet, as open entries of their plan."""
        entered = {e.job_id for e in entries if e.basis == "running"}
        out = []
        for job in self.registry.jobs(state="queued") + self.registry.jobs(state="running"):
            plan = planned_privacy(build_algorithm(job.algorithm, job.config))
            if plan is not None and job.job_id not in entered:
                clients = job.rules.clients or tuple(self._known_gateways())
                out.append(
                    LedgerEntry(
                        job.job_id,
                        0,
                        clients,
                        job.rules.since_us,
                        job.rules.until_us,
                        PlannedJob(None, None, None, *plan).rho,
                        0.0,
                        plan[1],
                        plan[0],
                        "running",
                    )
                )
        return out

    def _known_gateways(self) -> list[str]:
        return [row.gateway for row in self.tracker.snapshot()]

    def check_privacy(self, job: PlannedJob, *, job_id: str = "") -> None:
        """Raise ``BudgetExceeded`` if ``job`` would take a window past the cap, the ledger and
        the private jobs queued or starting (other than ``job_id``) counted."""
        cap = self.privacy_cap
        entries = self.registry.privacy_ledger()
        pending = [e for e in self._pending_plans(entries) if e.job_id != job_id]
        check_job(entries + pending, job, self._known_gateways(), cap.epsilon, cap.delta)

    def privacy_budgets(self, *, segments: bool = True) -> list[GatewayBudget]:
        """Per gateway (known or in the ledger) its most-used window and what is left there."""
        cap = self.privacy_cap
        return budget_of(
            self.registry.privacy_ledger(), self._known_gateways(), cap.epsilon, cap.delta, segments=segments
        )

    def _enter_privacy(self, job: JobRecord, attempt: AttemptPlan, clients: list[str]) -> None:
        """For a private job: settle an earlier attempt a stopped server left running (with what
        it released), check the cap again (a ``BudgetExceeded`` fails the job) and enter this
        attempt with its plan and an empty record of its releases. An attempt that continues
        the stored model of earlier ones plans the rest of the job's budget
        (:meth:`_rest_of_plan`); one that only registers the model an earlier one grew
        (``finished``) releases nothing: it is not entered, and the earlier attempt is settled
        with the model's metadata when it is registered."""
        plan = planned_privacy(build_algorithm(job.algorithm, job.config))
        if plan is None or attempt.finished:
            return
        self._settle_privacy(job)
        if attempt.init is not None and attempt.base and attempt.own_state is None:
            plan = self._rest_of_plan(job, attempt, *plan)
        since, until = job.rules.since_us, job.rules.until_us
        planned = PlannedJob(tuple(clients), since, until, *plan)
        with self._submitting:
            self.check_privacy(planned, job_id=job.job_id)
            self.registry.add_privacy(
                LedgerEntry(
                    job.job_id,
                    attempt.attempt,
                    tuple(clients),
                    since,
                    until,
                    planned.rho,
                    0.0,
                    plan[1],
                    plan[0],
                    "running",
                    created=time.time(),
                    released_rho=0.0,
                    released_xi=0.0,
                    releases=0,
                )
            )
        log.info(
            "privacy ledger: job %s attempt %d entered (plan: epsilon %g at delta %g on %s)",
            job.job_id,
            attempt.attempt,
            plan[0],
            plan[1],
            ", ".join(clients),
            extra={"job": job.job_id},
        )

    def _rest_of_plan(self, job: JobRecord, attempt: AttemptPlan, epsilon: float, delta: float) -> tuple[float, float]:
        """The plan of an attempt that continues the model earlier attempts grew (boosting
        resumed after round ``base``): the job's ``rho`` less what they spent (``rho + xi``, as
        the budget charges it), as this attempt's ``dp_epsilon`` (set in its config), so that
        the job -- and its model, which depends on every attempt's releases -- stays within the
        ``epsilon`` it was admitted with. Raises ``TrainingError`` when nothing is left."""
        used = sum(e.rho + e.xi for e in self.registry.privacy_ledger(job.job_id) if e.attempt < attempt.attempt)
        rest = PlannedJob(None, None, None, epsilon, delta).rho - used
        if rest <= 0:
            raise TrainingError(
                f"the job's earlier attempts spent its whole privacy budget (epsilon {epsilon:g} at delta "
                f"{delta:g}) before step {attempt.base + 1}: submit it again to train on"
            )
        left = epsilon_of(rest, 0.0, delta)
        attempt.config["dp_epsilon"] = left
        log.warning(
            "job %s: its earlier attempts spent rho %.4g of its plan's %.4g; attempt %d spends the rest, "
            "epsilon %.4g at delta %g, on steps %d to %d",
            job.job_id,
            used,
            used + rest,
            attempt.attempt,
            left,
            delta,
            attempt.base + 1,
            job.total,
            extra={"job": job.job_id},
        )
        return left, delta

    def _settle_privacy(
        self, job: JobRecord, *, model: TreeEnsemble | None = None, label: str = "", gateways: list[str] | None = None
    ) -> None:
        """Settle ``job``'s running entry: on its participants' windows up to now (or its range's
        end), with what ``model``'s metadata says it spent, else with what it released (each
        release recorded before it went out), else (no record: entered by an older server) with
        its plan."""
        until = job.rules.until
        for entry in self.registry.privacy_ledger(job.job_id):
            if entry.basis != "running":
                continue
            values: dict[str, Any] = {
                "until_us": micros(until if until is not None else time.time()),
                "basis": "planned",
            }
            if gateways:
                values["gateways"] = gateways
            meta = model.metadata if model is not None else {}
            if self._recorded(job.job_id, entry):
                rho, xi = entry.released_rho or 0.0, entry.released_xi or 0.0
                values.update(rho=rho, xi=xi, epsilon=epsilon_of(rho, xi, entry.delta), basis="spent")
            if "dp_rho" in meta:
                values.update(
                    rho=float(meta["dp_rho"]),
                    xi=float(meta.get("dp_xi", 0.0)),
                    delta=float(meta["dp_delta"]),
                    epsilon=float(meta["dp_epsilon"]),
                    basis="spent",
                    model=label,
                )
            self.registry.settle_privacy(job.job_id, entry.attempt, **values)
            log.info(
                "privacy ledger: job %s attempt %d settled (%s%s, epsilon %.4g at delta %g)",
                job.job_id,
                entry.attempt,
                values["basis"],
                "" if "model" in values or entry.releases is None else f": {entry.releases} releases",
                values.get("epsilon", entry.epsilon),
                values.get("delta", entry.delta),
                extra={"job": job.job_id},
            )

    def _release_log(self, job_id: str, attempt: int) -> ReleaseLog:
        """The write-ahead log of the attempt's releases: each one is committed to its running
        ledger entry before its request goes out (``aggregator.privacy.spending``). A job that
        makes no private release (or has no entry) never writes."""

        def write(released: Released) -> None:
            self.registry.record_releases(job_id, attempt, released.rho, released.xi, released.releases)

        return ReleaseLog(write, answered_fraction=self.settings.min_fraction)

    def _recorded(self, job_id: str, entry: LedgerEntry) -> bool:
        """Whether ``entry``'s record of its releases can be trusted: it has one, and it is not
        empty for an attempt that stored a step (a step is grown from releases: a private
        budget made outside the attempt's log -- e.g. on another thread -- would leave the
        record empty, and the attempt is then charged its plan, never nothing)."""
        if entry.releases is None or entry.released_rho is None or entry.released_xi is None:
            return False
        if entry.releases:
            return True
        job = self.registry.job(job_id)
        start = next((h.get("from_step", 0) for h in job.history if h.get("attempt") == entry.attempt), 0)
        if job.completed > start:
            log.warning(
                "privacy ledger: job %s attempt %d stored steps but recorded no release: charged its plan",
                job_id,
                entry.attempt,
                extra={"job": job_id},
            )
            return False
        return True

    def cancel(self, job_id: str) -> JobRecord:
        job = self.registry.job(job_id)
        if job.state not in ("queued", "running"):
            raise ValueError(f"job {job_id} is {job.state}; only queued or running jobs can be cancelled")
        with self._lock:
            if self._current == job_id:
                self._cancelled.add(job_id)
                self._stop.set()
            else:
                self.registry.update_job(job_id, state="cancelled", error="cancelled before it started")
        return self.registry.job(job_id)

    def _loop(self) -> None:
        while True:
            job_id = self._queue.get()
            if job_id is None or self._shutting_down:
                return
            with self._lock:
                self._current = job_id
                if not self._shutting_down:
                    self._stop.clear()
            try:
                self._run(job_id)
            except Exception as exc:  # a bug must not end the server: the job records it
                log.exception("job failed unexpectedly", extra={"job": job_id})
                self._settle_privacy(self.registry.job(job_id))
                self.registry.update_job(job_id, state="failed", error=f"{type(exc).__name__}: {exc}")
            finally:
                with self._lock:
                    self._current = None
                    self._cancelled.discard(job_id)

    # -- one job ---------------------------------------------------------------------------

    def _participants(self, job: JobRecord) -> list[str]:
        rules = job.rules
        named = rules.clients
        if named:
            self.tracker.wait_online(named, self.presence_wait_s)
            missing = sorted(set(named) - set(self.tracker.online()))
            if missing:
                raise TrainingError(f"{', '.join(missing)} not online")
            candidates = list(named)
        else:
            candidates = self.tracker.online()
        eligible = [g for g in candidates if self.tracker.labelled(g) >= rules.min_labelled]
        if len(eligible) < rules.min_gateways:
            raise TrainingError(
                f"{len(eligible)} gateways online with at least {rules.min_labelled} "
                f"labelled windows ({', '.join(eligible) or 'none'}); the job needs "
                f"{rules.min_gateways}"
            )
        return sorted(eligible)

    def _run(self, job_id: str) -> None:
        job = self.registry.job(job_id)
        if job.state not in ("queued", "running"):
            return
        if job.result:  # the server stopped after registering the model: the job is done
            if ":v" in job.result:
                model_id, _, version = job.result.rpartition(":v")
                record, model = self.registry.model(model_id, int(version))
                self._settle_privacy(job, model=model, label=record.label, gateways=list(job.participants))
            self.registry.update_job(job_id, state="completed")
            return
        plan = self._plan_attempt(job)
        traffic = self._traffic()
        try:
            self._attempt(job, plan)
        finally:
            self._record_bytes(job_id, plan.attempt, traffic)

    def _plan_attempt(self, job: JobRecord) -> AttemptPlan:
        """Where this attempt starts: after the last stored step (its rounds after it discarded)."""
        resumed = self.registry.last_checkpoint(job.job_id)
        base = resumed.step if resumed is not None else 0
        stored = resumed.checkpoint if resumed is not None else None  # last_checkpoint's has one
        self.registry.discard_rounds_after(job.job_id, base)
        # An algorithm with a state of its own is handed it and reports its steps as numbered
        # from the job's start; one resumed from its model counts them from the model on.
        resumes_itself = algorithm_row(job.algorithm).resumes_itself()
        own_state = stored if resumes_itself else None
        init = None
        if stored is not None and own_state is None:
            init = TreeEnsemble.from_cbor(stored)
        elif job.init_model:
            model_id, _, version = job.init_model.rpartition(":v")
            init = self.registry.model(model_id, int(version))[1]
        config = dict(job.config)
        # every boosting round is stored: its model is the result
        finished = own_state is None and base > 0 and base >= job.total
        if base and own_state is None and not finished:
            config["n_rounds"] = job.total - base
        return AttemptPlan(
            job.attempt + 1, base, 0 if own_state is not None else base, finished, init, config, own_state
        )

    def _traffic(self) -> tuple[int, int] | None:
        stats = getattr(getattr(self.engine, "transport", None), "stats", None)
        return None if stats is None else (stats.sent_bytes, stats.received_bytes)

    def _record_bytes(self, job_id: str, attempt: int, before: tuple[int, int] | None) -> None:
        """Enter the MQTT bytes the aggregator sent and received while the attempt ran (jobs run
        one at a time, so they are the job's, with the fleet's statuses of that time) in its
        ``history`` entry."""
        after = self._traffic()
        if before is None or after is None:
            return
        try:
            history = list(self.registry.job(job_id).history)
            for i, entry in enumerate(history):
                if entry.get("attempt") == attempt:
                    history[i] = {**entry, "sent_bytes": after[0] - before[0], "received_bytes": after[1] - before[1]}
                    self.registry.update_job(job_id, history=history)
        except RegistryError:
            pass

    def _attempt(self, job: JobRecord, plan: AttemptPlan) -> None:
        job_id = job.job_id
        try:
            clients = self._start_attempt(job, plan)
            choice = self._survey(job, plan, clients)
            fed = FederatedJob(
                self.engine,
                choice.clients,
                job_id=plan.protocol_id(job_id),
                settings=self.settings,
                stop=self._stop,
                on_step=lambda p, c: self._round_done(job_id, plan.offset, job.total, p, c),
            )
            model: TreeEnsemble | dict[str, TreeEnsemble]
            if plan.finished:
                if plan.init is None:
                    raise TrainingError("every step is stored but the stored model is missing")
                model = plan.init
            else:
                algorithm = build_algorithm(
                    job.algorithm,
                    plan.config,
                    init_model=plan.init,
                    feature_set=choice.version,
                    resume_state=plan.own_state,
                )
                with recording_releases(self._release_log(job_id, plan.attempt)):
                    model = algorithm.fit(fed, seed=job.rules.seed)
            if self._stop.is_set() and fed.stopped is not None:
                if job_id in self._cancelled:
                    raise JobCancelled
                return  # shutting down: the job stays running and resumes from its stored rounds
            self._finish(job, model, fed)
        except JobCancelled:
            self._settle_privacy(job)  # before the state: who sees the job ended sees its ledger settled
            self.registry.update_job(job_id, state="cancelled", error="cancelled while running")
        except (TrainingError, QuorumNotReached, RegistryError, ValueError) as exc:
            if self._shutting_down:
                return
            self._settle_privacy(job)
            self.registry.update_job(job_id, state="failed", error=str(exc))
            log.warning("job failed", extra={"job": job_id, "error": str(exc)})

    def _start_attempt(self, job: JobRecord, plan: AttemptPlan) -> list[str]:
        """Mark the job running with this attempt in its history, enter its privacy plan and log
        the start (a resume at WARNING); the gateways it asks to take part."""
        job_id, attempt, base = job.job_id, plan.attempt, plan.base
        clients = list(job.participants) if job.participants else self._participants(job)
        if job.participants:
            self.tracker.wait_online(clients, self.presence_wait_s)
        history = [*job.history, {"attempt": attempt, "started": time.time(), "from_step": base}]
        self._enter_privacy(job, plan, clients)  # first: who sees the job running sees its ledger entry
        self.registry.update_job(job_id, state="running", attempt=attempt, participants=clients, history=history)
        if attempt > 1 or base:
            # a warning: shown at the CLI's default level (a stopped or killed server left it running)
            log.warning(
                "job %s resumed (attempt %d) from step %d of %d%s on %s",
                job_id,
                attempt,
                base,
                job.total,
                " (every step was stored: registering its model)"
                if plan.finished
                else f": steps {base + 1} to {job.total} follow"
                if base
                else ": no step was stored, starting over",
                ", ".join(clients),
                extra={"job": job_id, "attempt": attempt, "from_round": base},
            )
        else:
            log.info(
                "job %s started: %s, %d steps, on %s",
                job_id,
                job.algorithm,
                job.total,
                ", ".join(clients),
                extra={"job": job_id, "attempt": attempt, "from_round": base, "clients": clients},
            )
        return clients

    def _survey(self, job: JobRecord, plan: AttemptPlan, clients: list[str]) -> FeatureSetChoice:
        """The feature-set survey of ``clients`` under the job's rules; raises ``TrainingError`` when
        too few can train (or a resumed job's participants or feature set changed)."""
        window = time_range(job.rules)
        choice = survey_feature_sets(
            self.engine,
            plan.protocol_id(job.job_id),
            clients,
            job.feature_set,
            deadline_s=self.settings.deadline_s,
            time_range=window,
            min_labelled=job.rules.min_labelled if window else 0,
            algorithm=build_algorithm(job.algorithm, plan.config),
        )
        if job.feature_set and choice.version != job.feature_set:
            raise TrainingError(f"the participants no longer hold feature set {job.feature_set}")
        if job.participants and list(choice.clients) != list(job.participants):
            raise TrainingError(
                f"resuming needs the job's participants {job.participants}; of them "
                f"{list(choice.clients)} answered ({choice.left_out})"
            )
        if len(choice.clients) < job.rules.min_gateways:
            why = "; ".join(f"{c}: {reason}" for c, reason in choice.left_out.items())
            raise TrainingError(
                f"{len(choice.clients)} gateways can train ({', '.join(choice.clients)}); the job "
                f"needs {job.rules.min_gateways}; left out: {why}"
            )
        for gateway, why in sorted(choice.left_out.items()):
            log.warning(
                "job %s: gateway %s left out by the survey: %s",
                job.job_id,
                gateway,
                why,
                extra={"job": job.job_id, "gateway": gateway},
            )
        log.info(
            "job %s: %d of %d gateways train on feature set %s (%s)",
            job.job_id,
            len(choice.clients),
            len(clients),
            choice.version,
            ", ".join(choice.clients),
            extra={"job": job.job_id},
        )
        self.registry.update_job(job.job_id, participants=list(choice.clients), feature_set=choice.version)
        return choice

    def _round_done(self, job_id: str, offset: int, total: int, p: StepProgress, checkpoint: Checkpoint | None) -> None:
        """Store step ``offset + p.step`` with its checkpoint. A step at or before the stored ones
        comes from an algorithm that could not use its stored state and started over: it
        replaces them (the registry otherwise refuses a step twice)."""
        step = offset + p.step
        if step <= self.registry.job(job_id).completed:
            self.registry.discard_rounds_after(job_id, step - 1)
        state = checkpoint.resume_state() if checkpoint is not None else None
        self.registry.complete_round(
            job_id, step, max(total, offset + p.total), p.selected, p.answered, dict(p.metrics), p.elapsed_s, state
        )

    def _finish(self, job: JobRecord, model: TreeEnsemble | dict[str, TreeEnsemble], fed: FederatedJob) -> None:
        if isinstance(model, dict):
            self._finish_personal(job, model, fed)
            return
        model = self._with_job_spending(job, model)
        record = self.registry.add(job.model_id, model, config=job.config, parent=job.init_model, job_id=job.job_id)
        self._settle_privacy(job, model=model, label=record.label, gateways=list(fed.clients))
        evaluation = self._evaluate(fed, model)
        if "metrics" in evaluation:
            self.registry.set_metrics(record.model_id, record.version, evaluation["metrics"])
            if self.local_baseline:
                evaluation.update(self._local_only(job, fed, model))
        self.registry.update_job(job.job_id, result=record.label, evaluation=evaluation)
        if job.schedule_id:  # the job of a schedule ends with its promotion decision
            schedule = self.registry.schedule(job.schedule_id)
            self._promote(job, record.version, model, fed, evaluation, schedule)
        self.registry.update_job(job.job_id, state="completed")
        log.info("job completed", extra={"job": job.job_id, "model": record.label})

    def _with_job_spending(self, job: JobRecord, model: TreeEnsemble) -> TreeEnsemble:
        """``model`` of a private job that earlier attempts (cut short, then resumed) spent on
        too: its metadata keeps its own attempt's spending (``dp_epsilon``, ``dp_rho``,
        ``dp_xi``: the ledger settles the attempt with them) and gains the job's, every
        attempt's composed (``dp_job_epsilon``, ``dp_job_rho``, ``dp_job_xi``, ``dp_attempts``)."""
        meta = model.metadata
        earlier = [e for e in self.registry.privacy_ledger(job.job_id) if e.basis != "running"]
        if "dp_rho" not in meta or not earlier:
            return model
        rho = float(meta["dp_rho"]) + sum(e.rho for e in earlier)
        xi = float(meta.get("dp_xi", 0.0)) + sum(e.xi for e in earlier)
        delta = float(meta["dp_delta"])
        job_meta = {
            "dp_job_epsilon": epsilon_of(rho, xi, delta),
            "dp_job_rho": rho,
            "dp_job_xi": xi,
            "dp_attempts": len(earlier) + 1,
        }
        return replace(model, metadata={**meta, **job_meta})

    def _finish_personal(self, job: JobRecord, models: dict[str, TreeEnsemble], fed: FederatedJob) -> None:
        """A job that ends with one model per gateway (FedGA-Tree): each is registered as
        ``MODEL_ID.GATEWAY`` for that gateway alone (``target``: a deploy signs it for that gateway
        and refuses any other), and scored on that gateway's held-out windows only."""
        if not models:
            raise TrainingError("no gateway returned its model")
        from ..algorithms.fedga_tree import register_models

        labels, per_client, skipped = {}, {}, {}
        records = register_models(self.registry, job.model_id, models, config=job.config, job_id=job.job_id)
        for gateway, record in records.items():
            labels[gateway] = record.label
            evaluation = self._evaluate(fed, models[gateway], [gateway])
            if "metrics" in evaluation:
                self.registry.set_metrics(record.model_id, record.version, evaluation["metrics"])
                per_client[gateway] = evaluation["metrics"]
            else:
                skipped[gateway] = evaluation.get("skipped") or evaluation.get("failed", "")
        evaluation = {"models": labels, "per_client": per_client, **({"skipped": skipped} if skipped else {})}
        self.registry.update_job(
            job.job_id, result=", ".join(labels.values()), evaluation=evaluation, state="completed"
        )
        log.info("job completed", extra={"job": job.job_id, "models": list(labels.values())})

    def _evaluate(self, fed: FederatedJob, model: TreeEnsemble, clients: list[str] | None = None) -> dict:
        """Federated evaluation on the held-out windows as JSON: pooled metrics, per gateway,
        confusion matrix; or why there is none."""
        try:
            result: Evaluation = evaluate_federated(fed, model, split="holdout", clients=clients)
        except NoHeldOutData as exc:
            return {"skipped": str(exc)}
        except (TrainingError, QuorumNotReached) as exc:
            return {"failed": str(exc)}
        return {
            "metrics": _finite(result.metrics),
            "per_client": {c: _finite(m) for c, m in result.per_client.items()},
            "confusion": None if result.confusion is None else result.confusion.astype(int).tolist(),
            "classes": [str(c) for c in model.classes],
            "left_out": result.left_out,
        }

    def _local_only(self, job: JobRecord, fed: FederatedJob, model: TreeEnsemble) -> dict[str, Any]:
        """The local-only baseline beside a model's evaluation (``evaluate_local_only``), as JSON:
        ``local_only`` (pooled metrics) and ``local_only_per_client``; or why there is none."""
        try:
            result = evaluate_local_only(fed, model, seed=job.rules.seed)
        except (TrainingError, QuorumNotReached, ValueError) as exc:
            log.warning("job %s: local-only baseline not measured: %s", job.job_id, exc, extra={"job": job.job_id})
            return {"local_only_failed": str(exc)}
        return {
            "local_only": _finite(result.metrics),
            "local_only_per_client": {c: _finite(m) for c, m in result.per_client.items()},
        }

    # -- promotion and staged rollout --------------------------------------------------------

    def baseline_version(self, model_id: str, gateways: list[str]) -> int | None:
        """The version of ``model_id`` most of ``gateways`` run (the registry's log)."""
        running = self.registry.running()
        versions = [running[g].version for g in gateways if g in running and running[g].model_id == model_id]
        return max(set(versions), key=versions.count) if versions else None

    def _promote(
        self,
        job: JobRecord,
        version: int,
        model: TreeEnsemble,
        fed: FederatedJob,
        evaluation: dict,
        schedule: ScheduleRecord,
    ) -> None:
        metric, higher = metric_for(model.is_classifier)
        baseline = self.baseline_version(job.model_id, list(fed.clients))
        baseline_score = None
        if baseline is not None:
            scored = self._evaluate(fed, self.registry.model(job.model_id, baseline)[1])
            baseline_score = scored.get("metrics", {}).get(metric)
        verdict = judge(metric, higher, evaluation.get("metrics", {}).get(metric), baseline_score, schedule.threshold)
        numbers = dict(
            job_id=job.job_id,
            model_id=job.model_id,
            candidate=version,
            baseline=baseline,
            metric=metric,
            candidate_value=verdict.candidate,
            baseline_value=verdict.baseline,
            threshold=schedule.threshold,
        )
        if not verdict.promote:
            self.registry.add_promotion(**numbers, decision="rejected", detail=verdict.reason)
            return
        if self.signing_key is None:
            self.registry.add_promotion(
                **numbers, decision="promoted", detail=f"{verdict.reason}; not deployed: the server has no signing key"
            )
            return
        self._roll_out(job, version, model, fed, numbers, verdict.reason, schedule)

    def _roll_out(
        self,
        job: JobRecord,
        version: int,
        model: TreeEnsemble,
        fed: FederatedJob,
        numbers: dict,
        reason: str,
        schedule: ScheduleRecord,
    ) -> None:
        from ..deployment import deploy, rollback

        gateways = list(fed.clients)
        canary = canary_of(gateways, schedule.canary_share)
        running = self.registry.running()
        previous = {g: running[g].label for g in canary if g in running}
        label = f"{job.model_id}:v{version}"
        if self.live is not None:
            self.live.forget(canary, label)
        first = deploy(
            self.engine,
            self.registry,
            self.signing_key,
            job.model_id,
            version,
            canary,
            deadline_s=self.settings.deadline_s,
        )
        halt = f"canary refused it: {first.rejected}" if first.rejected else ""
        if not halt and numbers["baseline"] is not None:
            metric, higher = metric_for(model.is_classifier)
            candidate = self._evaluate(fed, model, canary).get("metrics", {}).get(metric)
            before = self._evaluate(fed, self.registry.model(job.model_id, numbers["baseline"])[1], canary)
            check = judge(metric, higher, candidate, before.get("metrics", {}).get(metric), schedule.threshold)
            if not check.promote:
                halt = f"canary {', '.join(canary)}: {check.reason}"
        live: CanaryCheck | None = None
        if not halt and schedule.canary_windows > 0:
            live = self._watch_canary(canary, label, previous, model, schedule)
            halt = live.halted()
        recorded = live.to_json() if live is not None else {}
        if halt:
            rollback(
                self.engine,
                self.registry,
                self.signing_key,
                first.active,
                reason="canary regression",
                deadline_s=self.settings.deadline_s,
            )
            self.registry.add_promotion(**numbers, decision="halted", detail=f"{reason}; {halt}", canary=recorded)
            return
        rest = [g for g in gateways if g not in canary]
        if rest:
            deploy(
                self.engine,
                self.registry,
                self.signing_key,
                job.model_id,
                version,
                rest,
                deadline_s=self.settings.deadline_s,
            )
        passed = live.passed() if live is not None else ""
        self.registry.add_promotion(
            **numbers,
            decision="rolled-out",
            canary=recorded,
            detail=f"{reason}{passed}; canary {', '.join(canary)} then {', '.join(rest) or 'none'}",
        )

    def _watch_canary(
        self, canary: list[str], label: str, previous: dict[str, str], model: TreeEnsemble, schedule: ScheduleRecord
    ) -> CanaryCheck:
        """The canary's live check (module docstring): per canary gateway its ``LiveCheck``."""
        rule = CanaryCheck(schedule.canary_windows, schedule.canary_observe_s, schedule.canary_max_drop)
        if not model.is_classifier:  # a regressor's live predictions carry no confidence
            return replace(rule, skipped="a regressor's live predictions have no confidence")
        if self.live is None:
            return replace(rule, halt="the server does not follow live predictions")
        started = time.monotonic()
        self.live.wait(canary, label, schedule.canary_windows, schedule.canary_observe_s, self._stop)
        observed = round(time.monotonic() - started, 3)
        if self._stop.is_set():
            return replace(
                rule,
                observed_s=observed,
                halt="the live observation was interrupted (server stopping or job cancelled)",
            )
        checks: dict[str, LiveCheck] = {}
        for gateway in canary:
            before = self.live.confidences(gateway, previous[gateway]) if gateway in previous else np.zeros(0)
            check = judge_live(
                gateway,
                before,
                self.live.confidences(gateway, label),
                min_windows=schedule.canary_windows,
                max_drop=schedule.canary_max_drop,
            )
            checks[gateway] = replace(check, before_model=previous.get(gateway))
        return replace(rule, observed_s=observed, gateways=checks)


def _finite(metrics: dict[str, float]) -> dict[str, float | None]:
    """Metrics as JSON can carry them (NaN -- an AUC with one class -- becomes null)."""
    return {k: (float(v) if math.isfinite(v) else None) for k, v in metrics.items()}


class Scheduler:
    """Starts a schedule's job when it is due (``policy.is_due``), continuing boosting from the
    version the fleet runs where the algorithm can.

    The wall clock can be stepped (NTP correcting a clock that ran ahead or behind, a board
    without a battery clock): a schedule this process started is timed from that start on the
    monotonic clock (its ``last_run`` is re-based onto the wall clock as it reads now), so a
    step neither delays nor hastens an ``every_s`` interval, and cron times are those of the
    clock as it reads after the step. A ``last_run`` from before a restart that lies ahead of
    the clock makes the schedule due at once (``is_due``). Each step is logged once.
    """

    #: How far the wall clock may move against the monotonic clock between two ticks before it
    #: counts as stepped (NTP slewing moves it by at most 0.5 ms per second).
    CLOCK_STEP_S = 1.0

    def __init__(self, registry: Registry, runner: JobRunner, tracker: FleetTracker, tick_s: float) -> None:
        self.registry, self.runner, self.tracker, self.tick_s = registry, runner, tracker, tick_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="wheelfed-schedules", daemon=True)
        # per schedule started by this process: (its stored last_run, the monotonic time then)
        self._started: dict[str, tuple[float, float]] = {}
        self._offset: float | None = None  # wall minus monotonic clock at the last tick

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.tick(time.time(), time.monotonic())
            except Exception:
                log.exception("schedule check failed")

    def tick(self, now: float, monotonic: float | None = None) -> list[JobRecord]:
        """Start every due schedule's job (one at a time per schedule); the jobs started.

        ``now`` is the wall clock, ``monotonic`` the monotonic clock at the same moment
        (``time.monotonic()`` when not given)."""
        monotonic = time.monotonic() if monotonic is None else monotonic
        self._note_clock_step(now, monotonic)
        busy = {j.schedule_id for state in ("queued", "running") for j in self.registry.jobs(state=state)}
        labelled = self.tracker.labelled_total()
        started = []
        for schedule in self.registry.schedules():
            if not schedule.enabled or schedule.schedule_id in busy:
                continue
            last_run = self._last_run(schedule, now, monotonic)
            if not is_due(
                now,
                last_run,
                every_s=schedule.every_s,
                cron=schedule.cron,
                min_new_windows=schedule.min_new_windows,
                labelled_now=labelled,
                labelled_then=schedule.last_windows,
            ):
                continue
            if last_run > now:
                log.warning(
                    "a schedule last ran at %s, after the clock's now (%s): the clock was set back; running it now",
                    iso_utc(last_run),
                    iso_utc(now),
                    extra={"schedule": schedule.schedule_id},
                )
            try:
                started.append(self._submit(schedule))
                note = ""
            except (ValueError, RegistryError) as exc:  # the privacy cap, or a schedule gone stale
                note = f"{iso_utc(now)}: skipped -- {exc}"
                log.warning(
                    "schedule %s skipped: %s", schedule.schedule_id, exc, extra={"schedule": schedule.schedule_id}
                )
            self.registry.update_schedule(schedule.schedule_id, last_run=now, last_windows=labelled, note=note)
            self._started[schedule.schedule_id] = (now, monotonic)
        return started

    def _last_run(self, schedule: ScheduleRecord, now: float, monotonic: float) -> float:
        """``schedule.last_run`` on the wall clock as it reads ``now``: for a run this process
        started, ``now`` minus the monotonic time since; otherwise as stored."""
        started = self._started.get(schedule.schedule_id)
        if started is None or started[0] != schedule.last_run:
            return schedule.last_run
        return now - (monotonic - started[1])

    def _note_clock_step(self, now: float, monotonic: float) -> None:
        offset = now - monotonic
        if self._offset is not None and abs(offset - self._offset) > self.CLOCK_STEP_S:
            log.warning(
                "the wall clock stepped by %+.0f s; schedules this server started keep their "
                "intervals on the monotonic clock",
                offset - self._offset,
            )
        self._offset = offset

    def _submit(self, schedule: ScheduleRecord) -> JobRecord:
        """Submit ``schedule``'s job. A private job the cap refuses because older windows have
        spent their budget trains on the windows that still have all of it (the ``since`` the
        refusal names), if there are any; the job's survey then needs enough of them."""
        request = self._request(schedule)
        try:
            return self.runner.submit(request, schedule_id=schedule.schedule_id)
        except BudgetExceeded as exc:
            if exc.fresh_since_us is None or request.rules.since is not None:
                raise
            since = exc.fresh_since_us / 1e6
            log.info(
                "schedule %s: older windows have spent their privacy budget; training on the windows from %s on",
                schedule.schedule_id,
                iso_utc(since),
                extra={"schedule": schedule.schedule_id},
            )
            fresh = replace(request, rules=replace(request.rules, since=since))
            return self.runner.submit(fresh, schedule_id=schedule.schedule_id)

    def _request(self, schedule: ScheduleRecord) -> JobRequest:
        request = JobRequest(schedule.algorithm, schedule.model_id, dict(schedule.config))
        baseline = self.runner.baseline_version(schedule.model_id, self.tracker.online())
        if baseline is not None and algorithm_row(schedule.algorithm).continues_from_model():
            request = replace(request, init_model=f"{schedule.model_id}:v{baseline}")
        return request
