"""The gateway's labelled window store: one feature vector per window, plus its activity label.

The gateway's pipeline emits a window every 2 s; the federated client halves later read them
back as ``(X, y)``. Labels come from annotation intervals (a caregiver app, a button, or a
replayed label track) that usually arrive *after* the windows they describe -- an activity's
annotation is only complete when it closes -- and occasionally before.

A window gets label ``L`` if and only if it lies entirely inside an annotation of its session
labelled ``L`` and overlaps no annotation of its session with another label (intervals are
half-open, ``[start_us, end_us)``); otherwise it stays unlabelled. The label is recomputed
whenever a window or an overlapping annotation is added, so it does not depend on arrival order.
A window is identified by ``(session_id, start_us, feature_set_version)``: adding it again is
ignored. ``max_windows`` and ``max_age_s`` bound what is kept.

Why SQLite in WAL mode with ``synchronous=NORMAL``, float64 feature blobs, how retention runs on
a clock NTP may step, how threads and a second process share the file, and how the schema
migrates: ``docs/gateway.md``.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import operator
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, SupportsIndex

import numpy as np

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3
FEATURE_DTYPE = np.dtype("<f8")

#: Upgrade steps: ``MIGRATIONS[v](conn)`` turns a version-v database into version v+1. It runs
#: inside the opening transaction; the version row is updated by the caller.
#: v2 adds the live-recognition tables (predictions, alerts).
_LIVE_SCHEMA: tuple[str, ...] = (
    """CREATE TABLE predictions (
        id INTEGER PRIMARY KEY,
        window_id INTEGER,
        session_id TEXT NOT NULL,
        end_us INTEGER NOT NULL,
        model TEXT NOT NULL,
        label TEXT NOT NULL,
        probability REAL NOT NULL,
        probabilities BLOB NOT NULL,
        latency_ms REAL NOT NULL,
        inserted_at REAL NOT NULL)""",
    "CREATE INDEX predictions_by_session_end ON predictions (session_id, end_us)",
    """CREATE TABLE alerts (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        rule TEXT NOT NULL,
        state TEXT NOT NULL,
        started_us INTEGER NOT NULL,
        detected_us INTEGER NOT NULL,
        message TEXT NOT NULL,
        inserted_at REAL NOT NULL)""",
)
#: v3 adds ``prediction_marks``: per name (a vertical model id) the start of the last window it
#: predicted, written in the same transaction as those predictions (``add_predictions``).
_MARKS_SCHEMA: tuple[str, ...] = ("CREATE TABLE prediction_marks (name TEXT PRIMARY KEY, until_us INTEGER NOT NULL)",)


def _executing(statements: tuple[str, ...]) -> Callable[[sqlite3.Connection], None]:
    """A migration step that runs ``statements`` in order."""

    def step(conn: sqlite3.Connection) -> None:
        for statement in statements:
            conn.execute(statement)

    return step


MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: _executing(_LIVE_SCHEMA),
    2: _executing(_MARKS_SCHEMA),
}

_BUSY_TIMEOUT_S = 10.0
#: Below this much free space an SQLite I/O error is taken for a full disk (a WAL index page or a
#: WAL frame of a large window does not fit); with more room it is a real I/O error.
_NEARLY_FULL = 1 << 20
_JOURNAL_SIZE_LIMIT = 16 * 1024 * 1024  # truncate the -wal file back to this after a checkpoint

_SCHEMA: tuple[str, ...] = (
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    """CREATE TABLE windows (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        start_us INTEGER NOT NULL,
        end_us INTEGER NOT NULL,
        feature_set_version TEXT NOT NULL,
        n_features INTEGER NOT NULL,
        features BLOB NOT NULL,
        label TEXT,
        inserted_at REAL NOT NULL,
        CHECK (end_us > start_us),
        CHECK (n_features > 0 AND length(features) = 8 * n_features),
        UNIQUE (session_id, start_us, feature_set_version))""",
    # label_range: the windows overlapping an annotation are found from its start forward.
    "CREATE INDEX windows_by_session_end ON windows (session_id, end_us)",
    # query/count: range on start_us; label included so count() never reads the feature rows.
    "CREATE INDEX windows_by_version_start ON windows (feature_set_version, start_us, label)",
    "CREATE INDEX windows_by_inserted_at ON windows (inserted_at)",
    """CREATE TABLE annotations (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        label TEXT NOT NULL,
        start_us INTEGER NOT NULL,
        end_us INTEGER NOT NULL,
        inserted_at REAL NOT NULL,
        CHECK (end_us > start_us),
        CHECK (label <> ''),
        -- end first: a window's overlapping annotations are found among those ending after it starts
        UNIQUE (session_id, end_us, start_us, label))""",
    # Window counts per (feature set, label; '' = unlabelled), kept by triggers so that stats()
    # and retention's size check are O(number of labels), not O(windows).
    """CREATE TABLE window_counts (
        feature_set_version TEXT NOT NULL,
        label TEXT NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (feature_set_version, label)) WITHOUT ROWID""",
    """CREATE TRIGGER windows_counted_on_insert AFTER INSERT ON windows BEGIN
        INSERT INTO window_counts VALUES (NEW.feature_set_version, coalesce(NEW.label, ''), 1)
            ON CONFLICT (feature_set_version, label) DO UPDATE SET n = n + 1;
    END""",
    """CREATE TRIGGER windows_counted_on_delete AFTER DELETE ON windows BEGIN
        UPDATE window_counts SET n = n - 1
            WHERE feature_set_version = OLD.feature_set_version AND label = coalesce(OLD.label, '');
        DELETE FROM window_counts
            WHERE feature_set_version = OLD.feature_set_version AND label = coalesce(OLD.label, '') AND n = 0;
    END""",
    """CREATE TRIGGER windows_counted_on_relabel AFTER UPDATE OF label ON windows
        WHEN OLD.label IS NOT NEW.label BEGIN
        UPDATE window_counts SET n = n - 1
            WHERE feature_set_version = OLD.feature_set_version AND label = coalesce(OLD.label, '');
        DELETE FROM window_counts
            WHERE feature_set_version = OLD.feature_set_version AND label = coalesce(OLD.label, '') AND n = 0;
        INSERT INTO window_counts VALUES (NEW.feature_set_version, coalesce(NEW.label, ''), 1)
            ON CONFLICT (feature_set_version, label) DO UPDATE SET n = n + 1;
    END""",
)

# The labelling rule as one SQL expression over the annotations overlapping a window.
_LABEL_OF = """(SELECT CASE WHEN count(DISTINCT a.label) = 1
                             AND max(a.start_us <= {start} AND a.end_us >= {end}) THEN min(a.label) END
                FROM annotations AS a
                WHERE a.session_id = {session} AND a.end_us > {start} AND a.start_us < {end})"""

_INSERT_WINDOW = f"""
    INSERT INTO windows (session_id, start_us, end_us, feature_set_version, n_features, features, label, inserted_at)
    VALUES (:session_id, :start_us, :end_us, :feature_set_version, :n_features, :features,
            {_LABEL_OF.format(start=":start_us", end=":end_us", session=":session_id")}, :inserted_at)
    ON CONFLICT (session_id, start_us, feature_set_version) DO NOTHING"""

_RELABEL_OVERLAPPING = f"""
    UPDATE windows SET label = {
    _LABEL_OF.format(start="windows.start_us", end="windows.end_us", session="windows.session_id")
}
    WHERE session_id = :session_id AND end_us > :start_us AND start_us < :end_us"""

_FORGET_ANNOTATIONS = """
    DELETE FROM annotations
    WHERE end_us <= (SELECT min(w.start_us) FROM windows AS w WHERE w.session_id = annotations.session_id)
       OR (NOT EXISTS (SELECT 1 FROM windows AS w WHERE w.session_id = annotations.session_id)
           AND inserted_at < (SELECT min(inserted_at) FROM windows))"""


class StoreError(Exception):
    """The store cannot do what was asked (wrong file, schema, closed, inconsistent feature lengths)."""


class StoreFull(StoreError):
    """The disk under the store is full: the write was rolled back, everything acknowledged
    before it is intact, and the same store works again once there is room."""


def _full_disk(path: Path, exc: BaseException) -> StoreFull | None:
    """``exc`` as a ``StoreFull`` if it is SQLite's or the kernel's "disk is full" (else None)."""
    try:
        free: int | None = shutil.disk_usage(path.parent).free
    except OSError:
        free = None
    code = getattr(exc, "sqlite_errorcode", None) if isinstance(exc, sqlite3.Error) else None
    if code == sqlite3.SQLITE_FULL or (isinstance(exc, OSError) and exc.errno == errno.ENOSPC):
        pass
    elif code is not None and code & 0xFF == sqlite3.SQLITE_IOERR and free is not None and free < _NEARLY_FULL:
        pass  # SQLite reports a WAL index (-shm) that cannot grow as an I/O error, not as SQLITE_FULL
    else:
        return None
    room = "free space unknown" if free is None else f"{free:,} bytes free"
    return StoreFull(f"{path}: the disk is full ({room}); nothing was written -- make room and the store carries on")


@dataclass(frozen=True)
class RetentionPolicy:
    """How much the gateway keeps. ``None`` means no bound of that kind."""

    max_windows: int | None = None
    max_age_s: float | None = None
    check_every: int = 256  # inserted windows between automatic retention passes

    def __post_init__(self) -> None:
        if self.max_windows is not None and self.max_windows < 1:
            raise ValueError(f"RetentionPolicy.max_windows must be >= 1 or None, got {self.max_windows}")
        if self.max_age_s is not None and not self.max_age_s > 0:
            raise ValueError(f"RetentionPolicy.max_age_s must be > 0 or None, got {self.max_age_s}")
        if self.check_every < 1:
            raise ValueError(f"RetentionPolicy.check_every must be >= 1, got {self.check_every}")

    @property
    def active(self) -> bool:
        return self.max_windows is not None or self.max_age_s is not None


@dataclass(frozen=True, eq=False)
class WindowRecord:
    """One window's feature vector, validated and normalised on construction.

    ``features`` becomes a read-only little-endian float64 vector; times become Python ints.
    """

    session_id: str
    start_us: int
    end_us: int
    features: np.ndarray
    feature_set_version: str

    def __post_init__(self) -> None:
        _require_name("session_id", self.session_id)
        _require_name("feature_set_version", self.feature_set_version)
        start, end = _as_int("start_us", self.start_us), _as_int("end_us", self.end_us)
        if end <= start:
            raise ValueError(f"window end_us ({end}) must be after start_us ({start}); windows are [start, end)")
        vec = np.asarray(self.features)
        if vec.ndim != 1 or vec.size == 0 or vec.dtype.kind not in "fiu":
            raise ValueError(f"features must be a non-empty 1-D real vector, got shape {vec.shape} dtype {vec.dtype}")
        vec = vec.astype(FEATURE_DTYPE, copy=True)
        vec.flags.writeable = False
        object.__setattr__(self, "start_us", start)
        object.__setattr__(self, "end_us", end)
        object.__setattr__(self, "features", vec)


@dataclass(frozen=True, eq=False)
class WindowMeta:
    """Per-row identity of a query result, aligned with its rows (for per-session splits, alignment)."""

    ids: np.ndarray  # int64 row ids (insertion order)
    session_ids: np.ndarray  # object array of str
    start_us: np.ndarray  # int64
    end_us: np.ndarray  # int64


class QueryResult(NamedTuple):
    X: np.ndarray  # (n, d) float64, writable
    y: np.ndarray  # (n,) object array: label str, or None for unlabelled windows
    meta: WindowMeta


@dataclass(frozen=True, eq=False)
class PredictionRecord:
    """One live prediction: the window it scored (row id, may be None), when it ended, which
    model (``model_id:vN``), the predicted label with its probability, all class probabilities
    (float32, the model's class order) and the inference latency."""

    session_id: str
    end_us: int
    model: str
    label: str
    probability: float
    probabilities: np.ndarray
    latency_ms: float
    window_id: int | None = None


@dataclass(frozen=True, eq=False)
class PredictionBatch:
    """Predictions of many windows by one model, column by column (rows aligned): the windows'
    sessions, ends and row ids, the predicted labels with their probability, all class
    probabilities ``(n, K)`` (stored as float32) and one inference latency for the batch."""

    model: str
    session_ids: Sequence[str]
    end_us: np.ndarray
    window_ids: np.ndarray
    labels: Sequence[str]
    probability: np.ndarray
    probabilities: np.ndarray
    latency_ms: float = 0.0

    def __post_init__(self) -> None:
        n = len(self.session_ids)
        if not (
            len(self.labels) == n
            and np.shape(self.end_us) == np.shape(self.window_ids) == np.shape(self.probability) == (n,)
            and np.ndim(self.probabilities) == 2
            and np.shape(self.probabilities)[0] == n
        ):
            raise ValueError(f"a prediction batch needs {n} of every column (probabilities (n, K))")


@dataclass(frozen=True)
class PredictionMark:
    """How far a named predictor got: the start of the last window it predicted."""

    name: str
    until_us: int


@dataclass(frozen=True)
class StoreStats:
    windows: int
    labelled: int
    by_label: dict[str, int]
    by_feature_set: dict[str, int]
    annotations: int
    db_bytes: int
    wal_bytes: int


class SteadyClock:
    """Wall time that a step of the wall clock cannot move: read the wall clock once (no earlier
    than ``floor``), then advance by the monotonic clock."""

    def __init__(self, wall: Callable[[], float], monotonic: Callable[[], float], floor: float = 0.0) -> None:
        self._base = max(wall(), floor)
        self._monotonic = monotonic
        self._start = monotonic()

    def __call__(self) -> float:
        return self._base + (self._monotonic() - self._start)


class WindowStore:
    """Windows and labels of one gateway in one SQLite file (see the module docstring).

    ``clock`` and ``monotonic`` are the wall and monotonic clocks (tests pass fakes); the store
    times its rows with a ``SteadyClock`` made of both.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        retention: RetentionPolicy = RetentionPolicy(),
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        exclusive: bool = False,
    ) -> None:
        self.path = Path(path)
        self.retention = retention
        self._clock: Callable[[], float] = clock  # until the file is open: then steady from its latest row
        self._lock = threading.Lock()
        self._n_features: dict[str, int] = {}  # per feature-set version, learned from the file or first insert
        self._since_retention = 0
        self._closed = False
        self._lock_fd = self._lock_file() if exclusive else None
        try:
            self._writer = sqlite3.connect(
                self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as e:
            self._unlock_file()
            raise StoreError(f"cannot open window store {self.path}: {e}") from e
        try:
            self._configure()
            self._open_schema()
        except BaseException as exc:
            self._writer.close()
            self._unlock_file()
            full = _full_disk(self.path, exc)
            if full is not None:
                raise full from exc
            raise
        self._clock = SteadyClock(clock, monotonic, self._latest_insert())
        try:
            self.enforce_retention()
        except StoreFull as exc:  # deleting needs room in the WAL too: the next insert retries
            log.warning("window store retention deferred: the disk is full", extra={"reason": str(exc)})
        log.info("window store open", extra={"path": str(self.path), "windows": self.stats().windows})

    # -- writing ---------------------------------------------------------------------------

    def add(self, record: WindowRecord) -> int | None:
        """Store one window (one transaction). Returns its row id, or None if it was a duplicate."""
        with self._write() as c:
            self._check_lengths(c, [record])
            cur = c.execute(_INSERT_WINDOW, self._row(record))
        self._remember_lengths([record])
        self._inserted(cur.rowcount)
        return cur.lastrowid if cur.rowcount else None

    def add_many(self, records: Iterable[WindowRecord]) -> int:
        """Store windows in one transaction (all or none). Returns how many were new."""
        batch = list(records)
        if not batch:
            return 0
        with self._write() as c:
            self._check_lengths(c, batch)
            inserted = c.executemany(_INSERT_WINDOW, [self._row(r) for r in batch]).rowcount
        self._remember_lengths(batch)
        self._inserted(inserted)
        return inserted

    def label_range(self, session_id: str, start_us: int, end_us: int, label: str) -> int:
        """Record the annotation ``label`` over ``[start_us, end_us)`` of a session and relabel.

        Returns how many of the session's windows inside the interval now carry ``label``
        (fewer than all of them where another annotation disagrees). Repeating an identical
        annotation changes nothing.
        """
        _require_name("session_id", session_id)
        _require_name("label", label)
        start, end = _as_int("start_us", start_us), _as_int("end_us", end_us)
        if end <= start:
            raise ValueError(f"annotation end_us ({end}) must be after start_us ({start}); intervals are [start, end)")
        span = {"session_id": session_id, "start_us": start, "end_us": end}
        with self._write() as c:
            c.execute(
                """INSERT INTO annotations (session_id, label, start_us, end_us, inserted_at)
                         VALUES (:session_id, :label, :start_us, :end_us, :now)
                         ON CONFLICT (session_id, end_us, start_us, label) DO NOTHING""",
                {**span, "label": label, "now": self._clock()},
            )
            c.execute(_RELABEL_OVERLAPPING, span)
            (labelled,) = c.execute(
                """SELECT count(*) FROM windows WHERE session_id = :session_id
                                       AND start_us >= :start_us AND end_us <= :end_us AND label = :label""",
                {**span, "label": label},
            ).fetchone()
        log.debug(
            "annotation stored",
            extra={"session": session_id, "label": label, "start_us": start, "end_us": end, "labelled": labelled},
        )
        return labelled

    def enforce_retention(self) -> int:
        """Apply the retention policy now. Returns the number of windows deleted."""
        self._since_retention = 0
        if not self.retention.active:
            return 0
        with self._write() as c:
            deleted = 0
            if self.retention.max_age_s is not None:
                cutoff = self._clock() - self.retention.max_age_s
                deleted += c.execute("DELETE FROM windows WHERE inserted_at < ?", (cutoff,)).rowcount
            if self.retention.max_windows is not None:
                (total,) = c.execute("SELECT coalesce(sum(n), 0) FROM window_counts").fetchone()
                excess = total - self.retention.max_windows
                if excess > 0:
                    deleted += c.execute(
                        "DELETE FROM windows WHERE id IN (SELECT id FROM windows ORDER BY id LIMIT ?)", (excess,)
                    ).rowcount
            forgotten = c.execute(_FORGET_ANNOTATIONS).rowcount if deleted else 0
        if deleted:
            log.info(
                "retention deleted windows",
                extra={"path": str(self.path), "deleted": deleted, "annotations_forgotten": forgotten},
            )
        return deleted

    # -- reading (any thread) ----------------------------------------------------------------

    def query(
        self,
        feature_set_version: str,
        start_us: int | None = None,
        end_us: int | None = None,
        labelled_only: bool = True,
    ) -> QueryResult:
        """The windows of one feature set whose start lies in ``[start_us, end_us)``, as ``(X, y, meta)``.

        Half-open on the start time so that consecutive ranges partition the windows. Rows are
        in ``(start_us, id)`` order. With no matching rows X has shape ``(0, d)`` where d is
        the feature set's known length (0 if the store has never seen it).
        """
        where, params = _filters(feature_set_version, start_us, end_us, labelled_only, None)
        with self._read() as c:
            rows = c.execute(
                f"SELECT id, session_id, start_us, end_us, n_features, features, label FROM windows "
                f"WHERE {where} ORDER BY start_us, id",
                params,
            ).fetchall()
            if rows:
                lengths = {r[4] for r in rows}
                if len(lengths) > 1:
                    raise StoreError(
                        f"windows of feature set {feature_set_version!r} have different lengths {sorted(lengths)}: "
                        "the feature code changed its vector without a new FEATURE_SET_VERSION; query a single "
                        "version or delete the stale windows"
                    )
                d = lengths.pop()
            else:
                found = c.execute(
                    "SELECT n_features FROM windows WHERE feature_set_version = ? LIMIT 1", (feature_set_version,)
                ).fetchone()
                d = found[0] if found else 0
        X = np.frombuffer(bytearray().join(r[5] for r in rows), dtype=FEATURE_DTYPE).reshape(len(rows), d)
        y = np.empty(len(rows), dtype=object)
        y[:] = [r[6] for r in rows]
        session_ids = np.empty(len(rows), dtype=object)
        session_ids[:] = [r[1] for r in rows]
        meta = WindowMeta(
            ids=np.array([r[0] for r in rows], dtype=np.int64),
            session_ids=session_ids,
            start_us=np.array([r[2] for r in rows], dtype=np.int64),
            end_us=np.array([r[3] for r in rows], dtype=np.int64),
        )
        return QueryResult(X.astype(np.float64, copy=False), y, meta)

    def count(
        self,
        feature_set_version: str | None = None,
        start_us: int | None = None,
        end_us: int | None = None,
        labelled_only: bool = False,
        session_id: str | None = None,
    ) -> int:
        """How many windows match (same filters as ``query``; ``None`` = any)."""
        where, params = _filters(feature_set_version, start_us, end_us, labelled_only, session_id)
        with self._read() as c:
            return c.execute(f"SELECT count(*) FROM windows WHERE {where}", params).fetchone()[0]

    def stats(self) -> StoreStats:
        """Counts and file sizes for the console; O(number of labels), never a table scan."""
        with self._read() as c:
            rows = c.execute("SELECT feature_set_version, label, n FROM window_counts").fetchall()
            (annotations,) = c.execute("SELECT count(*) FROM annotations").fetchone()
        by_label: dict[str, int] = {}
        by_feature_set: dict[str, int] = {}
        for version, label, n in rows:
            by_feature_set[version] = by_feature_set.get(version, 0) + n
            if label:
                by_label[label] = by_label.get(label, 0) + n
        return StoreStats(
            windows=sum(by_feature_set.values()),
            labelled=sum(by_label.values()),
            by_label=dict(sorted(by_label.items())),
            by_feature_set=dict(sorted(by_feature_set.items())),
            annotations=annotations,
            db_bytes=_file_size(self.path),
            wal_bytes=_file_size(self.path.with_name(self.path.name + "-wal")),
        )

    def latest_feature_set_version(self) -> str:
        """The feature set of the most recently stored window ("" for an empty store): what a
        gateway produces when its sensors are quiet."""
        with self._read() as c:
            row = c.execute("SELECT feature_set_version FROM windows ORDER BY id DESC LIMIT 1").fetchone()
        return row[0] if row else ""

    # -- live recognition ------------------------------------------------------------------

    def add_prediction(self, p: PredictionRecord) -> None:
        with self._write() as c:
            c.execute(
                """INSERT INTO predictions (window_id, session_id, end_us, model, label, probability,
                                                  probabilities, latency_ms, inserted_at)
                         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (
                    p.window_id,
                    p.session_id,
                    int(p.end_us),
                    p.model,
                    p.label,
                    float(p.probability),
                    np.asarray(p.probabilities, dtype="<f4").tobytes(),
                    float(p.latency_ms),
                    self._clock(),
                ),
            )

    def add_predictions(self, batch: PredictionBatch, mark: PredictionMark | None = None) -> None:
        """Store a batch of predictions and move ``mark`` (never backwards) in one transaction:
        a failure part-way keeps neither, so whoever re-predicts from the mark stores every
        window once -- one transaction per window would keep some and repeat them.

        Examples
        --------
        >>> import tempfile, numpy as np
        >>> with WindowStore(tempfile.mkdtemp() + "/w.db") as store:
        ...     store.add_predictions(PredictionBatch("m:v1", ["s1", "s1"], np.array([4, 6]), np.array([1, 2]),
        ...                                           ["sit", "push"], np.array([0.9, 0.6]),
        ...                                           np.array([[0.9, 0.1], [0.4, 0.6]])), PredictionMark("m", 2))
        ...     [p.label for p in store.predictions()], store.prediction_mark("m")
        (['sit', 'push'], 2)
        """
        blobs = np.ascontiguousarray(batch.probabilities, dtype="<f4")
        now = self._clock()
        rows = zip(
            np.asarray(batch.window_ids, dtype=np.int64).tolist(),
            list(batch.session_ids),
            np.asarray(batch.end_us, dtype=np.int64).tolist(),
            [batch.model] * len(batch.labels),
            [str(v) for v in batch.labels],
            np.asarray(batch.probability, dtype=np.float64).tolist(),
            [row.tobytes() for row in blobs],
            [float(batch.latency_ms)] * len(batch.labels),
            [now] * len(batch.labels),
        )
        with self._write() as c:
            c.executemany(
                """INSERT INTO predictions (window_id, session_id, end_us, model, label, probability,
                                                      probabilities, latency_ms, inserted_at)
                             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                rows,
            )
            if mark is not None:
                c.execute(
                    """INSERT INTO prediction_marks (name, until_us) VALUES (?, ?)
                             ON CONFLICT (name) DO UPDATE SET until_us = max(until_us, excluded.until_us)""",
                    (mark.name, int(mark.until_us)),
                )

    def prediction_mark(self, name: str) -> int | None:
        """The mark ``add_predictions`` last moved for ``name`` (None: never)."""
        with self._read() as c:
            row = c.execute("SELECT until_us FROM prediction_marks WHERE name = ?", (name,)).fetchone()
        return None if row is None else int(row[0])

    def predictions(self, session_id: str | None = None) -> list[PredictionRecord]:
        """Stored predictions in time order (of one session, or all)."""
        where, params = ("WHERE session_id = ?", (session_id,)) if session_id else ("", ())
        with self._read() as c:
            rows = c.execute(
                f"""SELECT session_id, end_us, model, label, probability, probabilities, latency_ms,
                                        window_id FROM predictions {where} ORDER BY end_us, id""",
                params,
            ).fetchall()
        return [
            PredictionRecord(r[0], r[1], r[2], r[3], r[4], np.frombuffer(r[5], dtype="<f4"), r[6], r[7]) for r in rows
        ]

    def add_alert(
        self, session_id: str, rule: str, state: str, started_us: int, detected_us: int, message: str
    ) -> None:
        with self._write() as c:
            c.execute(
                """INSERT INTO alerts (session_id, rule, state, started_us, detected_us, message, inserted_at)
                         VALUES (?, ?, ?, ?, ?, ?, ?)""",
                (session_id, rule, state, int(started_us), int(detected_us), message, self._clock()),
            )

    def alerts(self) -> list[tuple[str, str, str, int, int, str]]:
        """(session, rule, state, started_us, detected_us, message) in the order they happened."""
        with self._read() as c:
            return [
                tuple(r)
                for r in c.execute(
                    "SELECT session_id, rule, state, started_us, detected_us, message FROM alerts ORDER BY id"
                )
            ]

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the writer (checkpoints the WAL). Idempotent; later calls raise StoreError."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._writer.close()
                self._unlock_file()

    def __enter__(self) -> WindowStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _lock_file(self) -> int:
        """The exclusive writer's ``flock`` (see Threads in the module docstring)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StoreError(f"cannot open window store {self.path}: {(e.strerror or str(e)).lower()}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreError(
                f"{self.path} is in use by another gateway process (a store has one writer): stop "
                "that gateway, or give this one its own --store"
            ) from None
        return fd

    def _unlock_file(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _configure(self) -> None:
        try:
            tables = {r[0] for r in self._writer.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} is not an SQLite database ({e}); point the store at another path") from e
        if tables and "schema_version" not in tables:  # before WAL mode: another application's file stays as it was
            raise StoreError(
                f"{self.path} is an SQLite database but not a WheelFed window store "
                f"(tables {sorted(tables)}); point the store at another path"
            )
        (mode,) = self._writer.execute("PRAGMA journal_mode=WAL").fetchone()
        if mode.lower() != "wal":
            raise StoreError(
                f"{self.path}: SQLite refused WAL mode (got {mode!r}); network and some FUSE file "
                "systems do not support it — put the store on a local disk"
            )
        self._writer.execute("PRAGMA synchronous=NORMAL")
        self._writer.execute(f"PRAGMA journal_size_limit={_JOURNAL_SIZE_LIMIT}")

    def _open_schema(self) -> None:
        with self._write() as c:
            tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables:
                for statement in _SCHEMA + _LIVE_SCHEMA + _MARKS_SCHEMA:
                    c.execute(statement)
                c.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
                log.info("window store created", extra={"path": str(self.path), "schema_version": SCHEMA_VERSION})
                return
            (version,) = c.execute("SELECT version FROM schema_version").fetchone()
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has window-store schema v{version}, newer than this software's "
                    f"v{SCHEMA_VERSION}; upgrade wheelfed or use another path"
                )
            while version < SCHEMA_VERSION:
                if version not in MIGRATIONS:
                    raise StoreError(f"no migration from window-store schema v{version} to v{version + 1}")
                MIGRATIONS[version](c)
                version += 1
                c.execute("UPDATE schema_version SET version = ?", (version,))
                log.info("window store migrated", extra={"path": str(self.path), "schema_version": version})

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._require_open()
            try:
                self._writer.execute("BEGIN IMMEDIATE")
                yield self._writer
                self._writer.execute("COMMIT")
            except BaseException as exc:
                # A COMMIT that failed (a full disk) leaves its transaction open: roll it back too.
                if self._writer.in_transaction:
                    self._writer.execute("ROLLBACK")
                full = _full_disk(self.path, exc)
                if full is not None:
                    raise full from exc
                raise

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        self._require_open()
        conn = sqlite3.connect(
            f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=_BUSY_TIMEOUT_S, isolation_level=None
        )
        try:
            conn.execute("BEGIN")  # one snapshot for all statements of this read
            yield conn
        finally:
            conn.close()

    def _latest_insert(self) -> float:
        with self._read() as c:
            (latest,) = c.execute("SELECT max(inserted_at) FROM windows").fetchone()
        return float(latest or 0.0)

    def _require_open(self) -> None:
        if self._closed:
            raise StoreError(f"window store {self.path} is closed")

    def _row(self, record: WindowRecord) -> dict[str, object]:
        return {
            "session_id": record.session_id,
            "start_us": record.start_us,
            "end_us": record.end_us,
            "feature_set_version": record.feature_set_version,
            "n_features": record.features.size,
            "features": record.features.tobytes(),
            "inserted_at": self._clock(),
        }

    def _check_lengths(self, c: sqlite3.Connection, records: list[WindowRecord]) -> None:
        """Refuse a vector whose length differs from the feature set's: X must stay rectangular."""
        expected: dict[str, int] = {}
        for r in records:
            version = r.feature_set_version
            if version not in expected:
                known = self._n_features.get(version)
                if known is None:
                    found = c.execute(
                        "SELECT n_features FROM windows WHERE feature_set_version = ? LIMIT 1", (version,)
                    ).fetchone()
                    known = found[0] if found else r.features.size
                expected[version] = known
            if r.features.size != expected[version]:
                raise StoreError(
                    f"window of feature set {version!r} has {r.features.size} features, the store "
                    f"holds {expected[version]} for that version: bump FEATURE_SET_VERSION when the "
                    "feature vector changes"
                )

    def _remember_lengths(self, records: list[WindowRecord]) -> None:
        for r in records:
            self._n_features.setdefault(r.feature_set_version, r.features.size)

    def _inserted(self, n: int) -> None:
        self._since_retention += n
        if self.retention.active and self._since_retention >= self.retention.check_every:
            self.enforce_retention()


def _filters(
    feature_set_version: str | None,
    start_us: int | None,
    end_us: int | None,
    labelled_only: bool,
    session_id: str | None,
) -> tuple[str, dict[str, object]]:
    clauses = ["1"]
    params: dict[str, object] = {}
    if feature_set_version is not None:
        clauses.append("feature_set_version = :version")
        params["version"] = feature_set_version
    if start_us is not None:
        clauses.append("start_us >= :start_us")
        params["start_us"] = _as_int("start_us", start_us)
    if end_us is not None:
        clauses.append("start_us < :end_us")
        params["end_us"] = _as_int("end_us", end_us)
    if labelled_only:
        clauses.append("label IS NOT NULL")
    if session_id is not None:
        clauses.append("session_id = :session_id")
        params["session_id"] = session_id
    return " AND ".join(clauses), params


def _require_name(what: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")


def _as_int(what: str, value: object) -> int:
    """Microsecond times are integers; a float here is a unit bug, so it is refused rather than rounded."""
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        raise ValueError(f"{what} must be an integer number of microseconds, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:  # an __index__ that refuses
        raise ValueError(f"{what} must be an integer number of microseconds, got {value!r}") from None


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
