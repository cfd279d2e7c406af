"""Where a client half gets its labelled training data: arrays (simulation) or the window store.

Every request of a job reads the same snapshot (``JobSnapshots``, taken at the job's first
request), so windows stored or labelled while the job runs change none of its statistics -- the
opening's counts, the grid rounds, the algorithm's rounds and the job's scoring describe one set
of windows -- and a new job (periodic retraining) sees them. A job may be restricted to the
windows that start in a time range (``JobSnapshots.restrict``, set by the job's survey).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from shared.protocol.messages import DataSummary
from shared.protocol.messages.fleet_sums import TimeRange
from shared.sketches import weighted_moments

from .dispatcher import RequestRejected
from .store import WindowStore

log = logging.getLogger(__name__)

__all__ = [
    "ClientData",
    "JobSnapshots",
    "LabelledData",
    "NoTrainingData",
    "PartyData",
    "PartyWindows",
    "StoreTrainingData",
    "TrainingData",
    "class_ids",
    "data_summary",
    "label_strings",
    "snapshot",
    "tail_split",
]


class NoTrainingData(Exception):
    """The client has nothing to train (or evaluate) on for the requested feature set.

    ``code`` names the reason for the aggregator -- ``feature_set_mismatch`` (``feature_sets``:
    the versions the client does hold), ``no_labelled_windows`` or ``no_holdout_windows`` -- and
    the message says what to do, quoting no data.
    """

    def __init__(self, code: str, message: str, feature_sets: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.feature_sets = tuple(feature_sets)


def _mismatch(asked: str, held: Sequence[str]) -> NoTrainingData:
    """The refusal of a job for a feature set this client holds no labelled windows of."""
    stored = f"this gateway stores {', '.join(held)}"
    message = f"no labelled windows of {asked!r}: {stored}" if asked else f"the job names no feature set; {stored}"
    return NoTrainingData("feature_set_mismatch", message, held)


@dataclass(frozen=True, eq=False)
class LabelledData:
    """``X`` (n, d) features (NaN = missing), ``y`` (n,) labels: ints, strings or real targets;
    ``start_us`` (n,) each window's start time, if the source keeps them (a job restricted to a
    time range needs them)."""

    X: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...] = ()
    start_us: np.ndarray | None = None

    def __post_init__(self) -> None:
        X = np.asarray(self.X)
        y = np.asarray(self.y)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (samples, features), got shape {X.shape}")
        if X.dtype.kind not in "iuf":
            raise ValueError(f"X must be numeric, got dtype {X.dtype}")
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {y.shape}")
        if self.feature_names and len(self.feature_names) != X.shape[1]:
            raise ValueError(f"{len(self.feature_names)} feature names for {X.shape[1]} columns")
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "feature_names", tuple(self.feature_names))
        if self.start_us is not None:
            start = np.asarray(self.start_us)
            if start.shape != (X.shape[0],) or start.dtype.kind not in "iu":
                raise ValueError(
                    f"start_us must be integers of shape ({X.shape[0]},) to match X, got {start.dtype} {start.shape}"
                )
            object.__setattr__(self, "start_us", start.astype(np.int64))

    def within(self, time_range: TimeRange) -> LabelledData:
        """The windows starting in ``time_range`` (``NoTrainingData`` ``no_window_times`` when
        this data has no start times)."""
        if self.start_us is None:
            raise NoTrainingData(
                "no_window_times", "this client keeps no window start times, so it cannot train on a time range"
            )
        rows = time_range.contains(self.start_us)
        return LabelledData(self.X[rows], self.y[rows], self.feature_names, self.start_us[rows])


class TrainingData(Protocol):
    def labelled(self, feature_set_version: str) -> LabelledData:
        """A snapshot of the labelled windows of ``feature_set_version`` to train on."""
        ...

    def holdout(self, feature_set_version: str) -> LabelledData:
        """Labelled windows kept out of training, for federated evaluation (``NoTrainingData``
        when the client keeps none)."""
        ...


@runtime_checkable
class PartySource(Protocol):
    """A data source that can be a vertical party (``PartyData``, ``StoreTrainingData``)."""

    def party_windows(self, feature_set_version: str) -> PartyWindows:
        """The windows of ``feature_set_version`` this party holds, labelled or not."""
        ...


@dataclass(frozen=True, eq=False)
class ClientData:
    """One simulated client: an id and its arrays (``aggregator.simulate`` takes a list of these).

    ``feature_set_version=""`` accepts every job; otherwise a job for another version (or for
    none) is refused, as a gateway refuses one. ``start_us``/``start_us_test``: the windows'
    start times (microseconds), for jobs restricted to a time range.
    """

    client_id: str
    X: ArrayLike
    y: ArrayLike
    feature_names: tuple[str, ...] = ()
    feature_set_version: str = ""
    X_test: ArrayLike | None = None
    y_test: ArrayLike | None = None
    start_us: ArrayLike | None = None
    start_us_test: ArrayLike | None = None
    _data: LabelledData = field(init=False, repr=False)
    _test: LabelledData | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "_data",
            LabelledData(
                np.asarray(self.X),
                np.asarray(self.y),
                self.feature_names,
                None if self.start_us is None else np.asarray(self.start_us),
            ),
        )
        test = None
        if self.X_test is not None and self.y_test is not None:
            test = LabelledData(
                np.asarray(self.X_test),
                np.asarray(self.y_test),
                self.feature_names,
                None if self.start_us_test is None else np.asarray(self.start_us_test),
            )
        object.__setattr__(self, "_test", test)

    def feature_sets(self) -> tuple[str, ...]:
        """The feature sets this client holds labelled windows of (``()``: unversioned, any job)."""
        return (self.feature_set_version,) if self.feature_set_version else ()

    def _check(self, feature_set_version: str) -> None:
        if self.feature_set_version and feature_set_version != self.feature_set_version:
            raise _mismatch(feature_set_version, self.feature_sets())

    def labelled(self, feature_set_version: str) -> LabelledData:
        self._check(feature_set_version)
        return self._data

    def holdout(self, feature_set_version: str) -> LabelledData:
        self._check(feature_set_version)
        if self._test is None:
            raise NoTrainingData("no_holdout_windows", f"{self.client_id} has no held-out windows")
        return self._test


@dataclass(frozen=True, eq=False)
class PartyWindows:
    """A vertical party's windows: its features ``X``, the labels ``y`` (None: this party does not
    hold the labels), each window's start (``start_us``: on the sensors' common clock, the id that
    aligns it with the person's other gateways) and its session (``sessions``: where it is stored,
    which differs between gateways)."""

    X: np.ndarray
    y: np.ndarray | None
    sessions: tuple[str, ...]
    start_us: np.ndarray

    def __post_init__(self) -> None:
        X = np.asarray(self.X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (windows, features), got shape {X.shape}")
        n = X.shape[0]
        if self.y is not None and np.asarray(self.y).shape != (n,):
            raise ValueError(f"y must have shape ({n},) to match X, got {np.asarray(self.y).shape}")
        if len(self.sessions) != n or np.asarray(self.start_us).shape != (n,):
            raise ValueError(f"sessions and start_us must have one entry per window ({n})")
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", None if self.y is None else np.asarray(self.y))
        object.__setattr__(self, "sessions", tuple(str(s) for s in self.sessions))
        object.__setattr__(self, "start_us", np.asarray(self.start_us, dtype=np.int64))


@dataclass(frozen=True, eq=False)
class PartyData:
    """One simulated party of a vertical job: an id, its feature block, the labels if it holds
    them (else ``None``), the secret the person's parties share (``party_key``), and window ids
    (default: the row position, ``start_us = row``, one session) -- rows aligned by position;
    a job aligning on a window grid (``hop_us``) needs the real start times.

    A party without labels has nothing for horizontal jobs: ``labelled`` refuses them with
    ``no_labelled_windows``, as a gateway without annotations does.
    """

    client_id: str
    X: ArrayLike
    y: ArrayLike | None
    party_key: bytes = field(repr=False, default=b"")
    sessions: tuple[str, ...] | None = None
    start_us: ArrayLike | None = None
    _windows: PartyWindows = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n = np.asarray(self.X).shape[0] if np.ndim(self.X) == 2 else 0
        sessions = self.sessions if self.sessions is not None else ("rows",) * n
        starts = np.arange(n) if self.start_us is None else self.start_us
        object.__setattr__(
            self,
            "_windows",
            PartyWindows(
                np.asarray(self.X), None if self.y is None else np.asarray(self.y), tuple(sessions), np.asarray(starts)
            ),
        )

    def party_windows(self, feature_set_version: str) -> PartyWindows:
        return self._windows

    def labelled(self, feature_set_version: str) -> LabelledData:
        if self._windows.y is None:
            raise NoTrainingData("no_labelled_windows", f"{self.client_id} holds no labels (a vertical party)")
        return LabelledData(self._windows.X, self._windows.y)

    def holdout(self, feature_set_version: str) -> LabelledData:
        raise NoTrainingData("no_holdout_windows", f"{self.client_id} has no held-out windows")


@dataclass(frozen=True, eq=False)
class StoreTrainingData:
    """The gateway's labelled windows (``WindowStore.query``), in (start time, id) order.

    ``holdout_fraction`` > 0 keeps the *last* windows of every session out of training (after a
    gap of ``gap_windows`` windows, since windows overlap): a time-tail split, leakage-free where
    a random split of overlapping windows is not (ARCHITECTURE §7).
    """

    store: WindowStore
    feature_names: tuple[str, ...] | Callable[[], Sequence[str]] = ()  # a callable: read at each job
    holdout_fraction: float = 0.0
    gap_windows: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.holdout_fraction < 1.0:
            raise ValueError(f"holdout_fraction must lie in [0, 1), got {self.holdout_fraction}")

    def feature_sets(self) -> tuple[str, ...]:
        """The versions with labelled windows: one indexed count per version the store has seen."""
        seen = self.store.stats().by_feature_set
        return tuple(v for v in seen if self.store.count(v, labelled_only=True))

    def _split(self, feature_set_version: str) -> tuple[LabelledData, LabelledData | None]:
        X, y, meta = self.store.query(feature_set_version, labelled_only=True)
        if X.shape[0] == 0:
            held = self.feature_sets()
            if held:
                raise _mismatch(feature_set_version, held)
            raise NoTrainingData(
                "no_labelled_windows",
                "this gateway holds no labelled windows yet (windows are "
                "labelled by the annotations recorded with them)",
            )
        names = tuple(self.feature_names() if callable(self.feature_names) else self.feature_names)
        names = names if len(names) == X.shape[1] else ()
        start = meta.start_us
        if self.holdout_fraction == 0:
            return LabelledData(X, y, names, start), None
        train, test = tail_split(meta.session_ids, self.holdout_fraction, self.gap_windows)
        return LabelledData(X[train], y[train], names, start[train]), LabelledData(X[test], y[test], names, start[test])

    def labelled(self, feature_set_version: str) -> LabelledData:
        return self._split(feature_set_version)[0]

    def party_windows(self, feature_set_version: str) -> PartyWindows:
        """This gateway's windows for a vertical job (training part, as ``labelled``): all of
        them if none is labelled (a party without labels), else the labelled ones with labels."""
        if not feature_set_version:  # a party stores one sensor layout: its own feature set
            held = tuple(self.store.stats().by_feature_set)
            if len(held) != 1:
                raise NoTrainingData(
                    "feature_set_mismatch", f"the job names no feature set and this gateway stores {len(held)}", held
                )
            feature_set_version = held[0]
        X, y, meta = self.store.query(feature_set_version, labelled_only=False)
        labelled = np.array([v is not None for v in y], dtype=bool)
        rows = np.flatnonzero(labelled) if labelled.any() else np.arange(X.shape[0])
        if self.holdout_fraction > 0 and rows.size:
            rows = rows[tail_split(meta.session_ids[rows], self.holdout_fraction, self.gap_windows)[0]]
        return PartyWindows(
            X[rows], y[rows] if labelled.any() else None, tuple(meta.session_ids[rows]), meta.start_us[rows]
        )

    def holdout(self, feature_set_version: str) -> LabelledData:
        test = self._split(feature_set_version)[1]
        if test is None or test.X.shape[0] == 0:
            raise NoTrainingData(
                "no_holdout_windows",
                "this gateway keeps no held-out windows (start it with "
                "--holdout-fraction 0.2 to hold out the last fifth of every "
                "session)",
            )
        return test


def tail_split(sessions: np.ndarray, fraction: float, gap: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (train, test) of rows in time order: per session, the last ``fraction`` of its
    rows test, the ``gap`` rows before them dropped, the rest train."""
    train, test = [], []
    for session in dict.fromkeys(sessions.tolist()):
        rows = np.flatnonzero(sessions == session)
        n_test = int(round(fraction * rows.size))
        if n_test == 0:
            train.append(rows)
            continue
        test.append(rows[rows.size - n_test :])
        train.append(rows[: max(rows.size - n_test - gap, 0)])
    cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int64)  # noqa: E731
    return cat(train), cat(test)


def snapshot(
    source: TrainingData, feature_set_version: str, *, split: str = "train", time_range: TimeRange | None = None
) -> LabelledData:
    """The labelled data a job trains on (``split="holdout"``: evaluates on), only the windows
    starting in ``time_range`` if one is given, or a ``RequestRejected`` whose code says why not
    (``NoTrainingData``'s, or ``no_labelled_windows`` for an empty snapshot)."""
    try:
        data = source.holdout(feature_set_version) if split == "holdout" else source.labelled(feature_set_version)
        if time_range is not None:
            data = data.within(time_range)
    except NoTrainingData as exc:
        raise RequestRejected(exc.code, str(exc), exc.feature_sets) from None
    if data.X.shape[0] == 0:
        raise RequestRejected(
            "no_holdout_windows" if split == "holdout" else "no_labelled_windows",
            "no labelled samples" + (" in the job's time range" if time_range is not None else ""),
        )
    infinite = np.isinf(data.X)
    if infinite.any():  # summaries and sketches must be finite: an infinite feature is "missing"
        log.warning("infinite feature values treated as missing", extra={"values": int(infinite.sum())})
        data = LabelledData(np.where(infinite, np.nan, data.X), data.y, data.feature_names, data.start_us)
    return data


class JobSnapshots:
    """One snapshot per (job, feature set, split), taken at the job's first request and kept.

    A gateway keeps storing and labelling windows while a job runs. The private opening counts
    the fleet's windows over several rounds and checks that they add up; the algorithm's rounds
    must describe the windows the bin edges were read from. Reading the store afresh at every
    request broke both (``the fleet changed between rounds``). Only the last ``max_jobs`` jobs
    are kept (a job older than that started again from a fresh snapshot, as after a restart).
    A refusal (``RequestRejected``) is not kept: the next request reads again.

    ``restrict`` limits a job's snapshots to the windows starting in a time range (the server's
    survey sets it with the job's first request). It is kept with the job's snapshots, in
    memory: a gateway restarted in the middle of a job forgets it, and would answer that job's
    later requests from all its windows -- as it answers them from a fresh snapshot.
    """

    def __init__(self, source: TrainingData, *, max_jobs: int = 4) -> None:
        self.source = source
        self.max_jobs = max_jobs
        self._snapshots: OrderedDict[str, dict[tuple[str, str], LabelledData]] = OrderedDict()
        self._ranges: dict[str, TimeRange] = {}
        self._lock = threading.Lock()  # the dispatcher may answer two requests of a job at once

    def _job(self, job: str) -> dict[tuple[str, str], LabelledData]:
        per_job = self._snapshots.setdefault(job, {})
        self._snapshots.move_to_end(job)
        while len(self._snapshots) > self.max_jobs:
            self._ranges.pop(self._snapshots.popitem(last=False)[0], None)
        return per_job

    def restrict(self, job: str, time_range: TimeRange) -> None:
        """From now on, ``job`` reads only the windows starting in ``time_range`` (a snapshot of
        it taken before is dropped, so that every statistic describes the same windows)."""
        with self._lock:
            per_job = self._job(job)
            if self._ranges.get(job) != time_range:
                per_job.clear()
                self._ranges[job] = time_range

    def get(self, job: str, feature_set_version: str, *, split: str = "train") -> LabelledData:
        with self._lock:
            per_job = self._job(job)
            key = (feature_set_version, split)
            if key not in per_job:
                per_job[key] = snapshot(self.source, feature_set_version, split=split, time_range=self._ranges.get(job))
            return per_job[key]

    def count(self, job: str, feature_set_version: str) -> int:
        """The job's labelled windows, training and held-out ones together (zero where a split
        is refused): what a participation rule on labelled windows counts."""
        total = 0
        for split in ("train", "holdout"):
            try:
                total += self.get(job, feature_set_version, split=split).X.shape[0]
            except RequestRejected:
                pass
        return total


def label_strings(y: np.ndarray) -> tuple[np.ndarray, bool]:
    """Labels as strings (the wire's vocabulary) and whether all of them are integers."""
    if y.dtype.kind in "iub":
        return y.astype(np.int64).astype(str), True
    if y.dtype.kind == "f":
        integral = bool(np.isfinite(y).all() and (y == np.floor(y)).all())
        return (y.astype(np.int64).astype(str) if integral else y.astype(str)), integral
    return np.array([str(v) for v in y], dtype=object), False


def class_ids(y: np.ndarray, classes: tuple[str, ...]) -> np.ndarray:
    """Class index of every label under the job's vocabulary; -1 for a label the job lacks."""
    labels, _ = label_strings(y)
    lookup = {c: i for i, c in enumerate(classes)}
    return np.array([lookup.get(str(v), -1) for v in labels], dtype=np.int64)


def data_summary(data: LabelledData, *, regression: bool) -> DataSummary:
    """Additive description of a snapshot (``DataSummary``): sizes, moments, value range, and the
    label counts or the target sums."""
    X = np.asarray(data.X, dtype=np.float64)
    present = ~np.isnan(X)
    any_value = present.any(axis=0)
    minimum = np.where(any_value, np.nanmin(np.where(present, X, np.inf), axis=0, initial=np.inf), 0.0)
    maximum = np.where(any_value, np.nanmax(np.where(present, X, -np.inf), axis=0, initial=-np.inf), 0.0)
    common = dict(
        n_samples=X.shape[0],
        n_features=X.shape[1],
        moments=weighted_moments(X),
        minimum=minimum,
        maximum=maximum,
        feature_names=data.feature_names,
    )
    if regression:
        y = np.asarray(data.y, dtype=np.float64)
        if not np.isfinite(y).all():
            raise RequestRejected("bad_data", "regression targets must be finite")
        return DataSummary(**common, target_sum=float(y.sum()), target_sum_squares=float((y * y).sum()))
    labels, integral = label_strings(data.y)
    names, counts = np.unique(labels.astype(str), return_counts=True)
    return DataSummary(
        **common, labels=tuple(names.tolist()), label_counts=counts.astype(np.int64), integer_labels=integral
    )
