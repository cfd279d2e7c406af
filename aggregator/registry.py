"""The aggregator's registry: models, deployments, and the server's gateways, jobs and schedules.

One database through SQLAlchemy 2: a SQLite file by default (``--registry``, default
``wheelfed-registry.db``) or PostgreSQL by URL (``postgresql+psycopg://user@host/db``). Opening
it runs the Alembic migrations in ``aggregator/server/migrations`` up to the newest revision, so
a registry file written before the server existed (tables ``models`` and ``deployments``, no
``alembic_version``) is upgraded in place and keeps every row.

``models`` holds each version (the model's CBOR, algorithm, feature set, metrics, the
configuration it was trained with, the version it continued from, the job that made it);
``deployments`` the state of each (model version, gateway) pair as reported by the gateways
(``active``, ``rejected``, ``pending`` until the gateway answers). Versions count up per model id.

A gateway runs one model at a time, but its ``active`` rows are never demoted: which version it
runs *now* is its most recently confirmed ``active`` row (:meth:`Registry.running`). That keeps
the table a faithful log of what each gateway said, and a deploy, rollback or re-deploy only
has to record the gateway's answer -- no row has to be rewritten to stay consistent.

The server's tables: ``gateways`` (each gateway's newest folded status), ``jobs`` (algorithm,
configuration, participation rules, state, participants, errors), ``job_rounds`` (per completed
round: progress, metrics and the model grown so far -- what a restarted server resumes from),
``schedules`` and ``promotions`` (each promotion decision with its numbers), and
``privacy_ledger``: per attempt of a private job, what it spent per window on which gateways and
window start times (``aggregator.privacy.ledger``), entered when the attempt starts, its releases
recorded as they go out, and settled when it ends.

Writes are serialised: SQLite transactions start ``BEGIN IMMEDIATE`` (one writer at a time;
other processes' readers are not blocked in WAL mode, while one ``Registry`` object answers its
reads and writes in turn); on PostgreSQL a transaction-scoped advisory lock does the
same, so two processes never hand out one version number twice.
"""

from __future__ import annotations

import builtins
import dataclasses

import json
import math
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from shared.model import TreeEnsemble

if TYPE_CHECKING:
    from .fleet_status import GatewayRow
    from .privacy.ledger import LedgerEntry

__all__ = [
    "Deployment",
    "HEAD_REVISION",
    "JobRecord",
    "JobRules",
    "MAX_TIME_S",
    "ModelRecord",
    "PromotionRecord",
    "Registry",
    "RegistryError",
    "StepRecord",
    "ScheduleRecord",
    "iso_utc",
    "micros",
    "registry_url",
]

#: The newest Alembic revision (``aggregator/server/migrations/versions``); a database already
#: there is opened without loading the migration scripts.
HEAD_REVISION = "0006"
#: Key of the PostgreSQL advisory lock that serialises the registry's writers.
_PG_WRITE_LOCK = 0x77_66_65_64  # "wfed"


class RegistryError(Exception):
    """An unknown model, version or job, or an unusable registry file or database."""


@dataclass(frozen=True)
class ModelRecord:
    model_id: str
    version: int
    algorithm: str
    feature_set_version: str
    kind: str
    target: str
    n_trees: int
    classes: list
    metrics: dict
    created: float
    config: dict = field(default_factory=dict)  # the training configuration (server jobs)
    parent: str = ""  # "MODEL_ID:vN" it continued boosting from; "" if trained afresh
    job_id: str = ""

    @property
    def label(self) -> str:
        return f"{self.model_id}:v{self.version}"


class Deployment(NamedTuple):
    """One (model version, gateway) pair as the gateway last reported it (a tuple, so older
    callers that unpack five fields keep working)."""

    model_id: str
    version: int
    client: str
    state: str  # "active" | "rejected" | "pending"
    detail: str

    @property
    def label(self) -> str:
        return f"{self.model_id}:v{self.version}"


@dataclass(frozen=True)
class JobRecord:
    """A server job as stored: ``state`` is queued, running, completed, failed or cancelled;
    ``completed`` of ``total`` rounds are persisted in ``job_rounds``."""

    job_id: str
    algorithm: str
    config: dict
    rules: JobRules
    model_id: str
    state: str
    total: int
    completed: int
    attempt: int
    participants: list
    feature_set: str
    init_model: str
    schedule_id: str
    result: str
    evaluation: dict
    error: str
    created: float
    updated: float
    #: one entry per attempt: ``{"attempt": N, "started": unix seconds, "from_step": steps already
    #: stored when it started}`` (a resumed attempt has ``from_step`` > 0 or ``attempt`` > 1)
    history: list = field(default_factory=list)


#: The last second of 9999-12-31 UTC: the latest time a job's range may name.
MAX_TIME_S = 253_402_300_799.0


@dataclass(frozen=True)
class JobRules:
    """Who takes part in a job and on which windows, as the API takes them and the registry keeps
    them: ``clients`` (None: every online gateway), at least ``min_gateways`` of them, each with at
    least ``min_labelled`` labelled windows; ``seed`` the training's public seed; ``since``/``until``
    (Unix seconds, UTC; None: unbounded) the windows whose start lies in ``[since, until)``.

    Examples
    --------
    >>> JobRules(min_gateways=3).to_json()["min_gateways"]
    3
    >>> JobRules.from_json({"min_gateways": 2}) == JobRules(min_gateways=2)
    True
    >>> JobRules(since=20.0, until=10.0)
    Traceback (most recent call last):
    ...
    ValueError: since (1970-01-01T00:00:20Z) must be before until (1970-01-01T00:00:10Z)
    """

    clients: tuple[str, ...] | None = None
    min_gateways: int = 1
    min_labelled: int = 0
    seed: int = 0
    since: float | None = None
    until: float | None = None

    def __post_init__(self) -> None:
        if self.min_gateways < 1 or self.min_labelled < 0:
            raise ValueError("min_gateways must be >= 1 and min_labelled >= 0")
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and 0 <= value <= MAX_TIME_S):
                raise ValueError(
                    f"{name} must lie between 1970-01-01 and 9999-12-31 (Unix seconds 0 to "
                    f"{MAX_TIME_S:.0f}), got {value:.0f}"
                )
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ValueError(f"since ({iso_utc(self.since)}) must be before until ({iso_utc(self.until)})")

    @property
    def since_us(self) -> int | None:
        """``since`` in microseconds (the gateways' window times), or None."""
        return micros(self.since)

    @property
    def until_us(self) -> int | None:
        """``until`` in microseconds, or None."""
        return micros(self.until)

    def to_json(self) -> dict[str, Any]:
        """The rules as the registry stores them (and the API shows them)."""
        return {**asdict(self), "clients": None if self.clients is None else list(self.clients)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobRules:
        """The stored rules; a rule a registry row lacks takes its default."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if known.get("clients") is not None:
            known["clients"] = tuple(known["clients"])
        return cls(**known)


def iso_utc(t: float) -> str:
    """Unix seconds as an ISO-8601 UTC time to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def micros(t: float | None) -> int | None:
    """Unix seconds as whole microseconds (None stays None)."""
    return None if t is None else round(t * 1e6)


@dataclass(frozen=True)
class StepRecord:
    """One completed step of a job (a boosting round, a forest level, a generation: the
    algorithm's unit, not an engine round); ``checkpoint`` is the model grown so far (CBOR), if
    the algorithm keeps one (FedSCS-XGB does after every boosting round). Stored in the
    ``job_rounds`` table and shown as a job's ``rounds`` by the API, names kept for the stored
    registries and the API's users."""

    job_id: str
    step: int
    total: int
    selected: int
    answered: int
    metrics: dict
    elapsed_s: float
    checkpoint: bytes | None
    created: float


@dataclass(frozen=True)
class ScheduleRecord:
    """Retrain ``model_id`` with ``algorithm``/``config`` every ``every_s`` seconds, at ``cron``
    times, or once ``min_new_windows`` labelled windows were added fleet-wide since the last run;
    promote if validation regresses by at most ``threshold``; deploy to ``canary_share`` first.
    With ``canary_windows`` > 0 the canary is also judged live: each canary gateway must report
    that many live predictions of the candidate within ``canary_observe_s`` seconds, and their
    mean confidence may fall at most ``canary_max_drop`` below the version's before it
    (``policy.judge_live``)."""

    schedule_id: str
    model_id: str
    algorithm: str
    config: dict
    every_s: float | None
    cron: str
    min_new_windows: int | None
    threshold: float
    canary_share: float
    enabled: bool
    last_run: float
    last_windows: int
    created: float
    canary_windows: int = 0
    canary_observe_s: float = 900.0
    canary_max_drop: float = 0.05
    note: str = ""  # why its last due run did not start ("" when it did)


@dataclass(frozen=True)
class PromotionRecord:
    """A promotion decision and its numbers: the candidate's and the baseline's federated
    validation ``metric``, the allowed regression ``threshold``, what was decided, and
    ``canary``: the canary's live check if one ran (per gateway its live predictions of the
    candidate and their mean confidence against the version's before; ``{}`` if none ran)."""

    id: int
    job_id: str
    model_id: str
    candidate: int
    baseline: int | None
    metric: str
    candidate_value: float | None
    baseline_value: float | None
    threshold: float
    decision: str  # "promoted" | "rejected" | "halted" | "rolled-out"
    detail: str
    created: float
    canary: dict = field(default_factory=dict)


def registry_url(path: str | Path) -> str:
    """A database URL as is; anything else is a SQLite file path."""
    text = str(path)
    return text if "://" in text else f"sqlite:///{text}"


def _tables():
    """The SQLAlchemy Core tables (built when a registry opens: SQLAlchemy is imported lazily so
    that parsing a command line does not pay for it)."""
    import sqlalchemy as sa

    md = sa.MetaData()
    text = lambda name, **kw: sa.Column(name, sa.Text, nullable=False, **kw)  # noqa: E731
    models = sa.Table(
        "models",
        md,
        text("model_id"),
        sa.Column("version", sa.Integer),
        text("algorithm"),
        text("feature_set_version"),
        text("kind"),
        text("target"),
        sa.Column("n_trees", sa.Integer),
        text("classes"),
        text("metrics"),
        sa.Column("model", sa.LargeBinary),
        sa.Column("created", sa.Float),
        text("config"),
        text("parent"),
        text("job_id"),
    )
    deployments = sa.Table(
        "deployments",
        md,
        text("model_id"),
        sa.Column("version", sa.Integer),
        text("client"),
        text("state"),
        text("detail"),
        sa.Column("updated", sa.Float),
    )
    gateways = sa.Table(
        "gateways",
        md,
        text("gateway"),
        sa.Column("online", sa.Boolean),
        sa.Column("seen", sa.Float),
        text("status"),
        sa.Column("updated", sa.Float),
    )
    jobs = sa.Table(
        "jobs",
        md,
        *(text(c) for c in ("job_id", "algorithm", "config", "rules", "model_id", "state")),
        *(sa.Column(c, sa.Integer) for c in ("total", "completed", "attempt")),
        *(
            text(c)
            for c in ("participants", "feature_set", "init_model", "schedule_id", "result", "evaluation", "error")
        ),
        sa.Column("created", sa.Float),
        sa.Column("updated", sa.Float),
        text("history"),
    )
    rounds = sa.Table(
        "job_rounds",
        md,
        text("job_id"),
        *(sa.Column(c, sa.Integer) for c in ("step", "total", "selected", "answered")),
        text("metrics"),
        sa.Column("elapsed_s", sa.Float),
        sa.Column("checkpoint", sa.LargeBinary),
        sa.Column("created", sa.Float),
    )
    schedules = sa.Table(
        "schedules",
        md,
        text("schedule_id"),
        text("model_id"),
        text("algorithm"),
        text("config"),
        sa.Column("every_s", sa.Float),
        text("cron"),
        sa.Column("min_new_windows", sa.Integer),
        sa.Column("threshold", sa.Float),
        sa.Column("canary_share", sa.Float),
        sa.Column("enabled", sa.Boolean),
        sa.Column("last_run", sa.Float),
        sa.Column("last_windows", sa.Integer),
        sa.Column("created", sa.Float),
        sa.Column("canary_windows", sa.Integer),
        sa.Column("canary_observe_s", sa.Float),
        sa.Column("canary_max_drop", sa.Float),
        text("note"),
    )
    promotions = sa.Table(
        "promotions",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        text("job_id"),
        text("model_id"),
        sa.Column("candidate", sa.Integer),
        sa.Column("baseline", sa.Integer),
        text("metric"),
        sa.Column("candidate_value", sa.Float),
        sa.Column("baseline_value", sa.Float),
        sa.Column("threshold", sa.Float),
        text("decision"),
        text("detail"),
        sa.Column("created", sa.Float),
        text("canary"),
    )
    ledger = sa.Table(
        "privacy_ledger",
        md,
        text("job_id"),
        sa.Column("attempt", sa.Integer),
        text("gateways"),
        sa.Column("since_us", sa.BigInteger),
        sa.Column("until_us", sa.BigInteger),
        *(sa.Column(c, sa.Float) for c in ("rho", "xi", "delta", "epsilon")),
        text("basis"),
        text("model"),
        sa.Column("created", sa.Float),
        sa.Column("released_rho", sa.Float),
        sa.Column("released_xi", sa.Float),
        sa.Column("releases", sa.Integer),
    )
    return models, deployments, gateways, jobs, rounds, schedules, promotions, ledger


_JSON_FIELDS = {"config", "rules", "participants", "evaluation", "metrics", "classes", "canary", "history"}


def _decode(row: Mapping[str, Any], cls: type) -> Any:
    """A table row as ``cls``, JSON text columns parsed."""
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: json.loads(v) if k in _JSON_FIELDS else v for k, v in row.items() if k in names}
    if "rules" in values:
        values["rules"] = JobRules.from_json(values["rules"])
    return cls(**values)


def _encode(values: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: json.dumps(v.to_json() if isinstance(v, JobRules) else v) if k in _JSON_FIELDS else v
        for k, v in values.items()
    }


class Registry:
    """The registry database at ``path`` (a SQLite file) or a database URL; see the module doc."""

    def __init__(self, path: str | Path) -> None:
        try:
            import sqlalchemy as sa
        except ImportError:  # pragma: no cover - the server extra is part of dev
            raise RegistryError("the registry needs SQLAlchemy: pip install 'wheelfed[server]'") from None
        self._sa = sa
        self.url = registry_url(path)
        self.path = Path(path) if "://" not in str(path) else None
        self._lock = threading.RLock()
        (
            self._models,
            self._deployments,
            self._gateways,
            self._jobs,
            self._rounds,
            self._schedules,
            self._promotions,
            self._ledger,
        ) = _tables()
        try:
            self._engine = sa.create_engine(self.url, **self._engine_options())
        except (sa.exc.ArgumentError, ImportError) as exc:
            raise RegistryError(f"cannot use {self.where} as a registry: {exc}") from None
        self.sqlite = self._engine.dialect.name == "sqlite"
        if self.sqlite:
            self._tune_sqlite()
        try:
            self._migrate()
        except sa.exc.DBAPIError as exc:
            self._engine.dispose()
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise RegistryError(
                f"{self.where} is not a usable registry ({reason}); use another --registry path"
            ) from None

    @property
    def where(self) -> str:
        """The registry as messages name it: the file, or the URL without its password."""
        if self.path is not None:
            return str(self.path)
        from sqlalchemy.engine import make_url

        return make_url(self.url).render_as_string(hide_password=True)

    def _engine_options(self) -> dict[str, Any]:
        if self.url.startswith("sqlite"):
            return {"connect_args": {"check_same_thread": False, "timeout": 10.0}}
        # an unreachable host fails in seconds, not after the system's TCP timeout
        return {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}

    def _tune_sqlite(self) -> None:
        """WAL, and transactions that take the write lock when they start (``BEGIN IMMEDIATE``):
        pysqlite would otherwise begin lazily and two writers could deadlock on the upgrade."""
        from sqlalchemy import event

        @event.listens_for(self._engine, "connect")
        def _connect(dbapi_connection, _record) -> None:
            dbapi_connection.isolation_level = None  # SQLAlchemy's "begin" event emits BEGIN itself
            dbapi_connection.execute("PRAGMA journal_mode=WAL")
            dbapi_connection.execute("PRAGMA busy_timeout=10000")

        @event.listens_for(self._engine, "begin")
        def _begin(connection) -> None:
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    def _migrate(self) -> None:
        """Upgrade the database to ``HEAD_REVISION`` (nothing to do when it is there already)."""
        from alembic.runtime.migration import MigrationContext

        with self._engine.begin() as connection:
            if self._engine.dialect.name == "postgresql":
                connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_WRITE_LOCK})")
            if MigrationContext.configure(connection).get_current_revision() == HEAD_REVISION:
                return
            from alembic import command
            from alembic.config import Config

            config = Config()
            config.set_main_option("script_location", str(Path(__file__).parent / "server" / "migrations"))
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        """A write transaction (serialised across threads and processes, see the module doc)."""
        with self._lock, self._engine.begin() as connection:
            if not self.sqlite:
                connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_WRITE_LOCK})")
            yield connection

    def _read(self, statement) -> list[Mapping[str, Any]]:
        with self._lock, self._engine.connect() as connection:
            return [dict(row._mapping) for row in connection.execute(statement)]

    # -- models and deployments --------------------------------------------------------------

    def add(
        self,
        model_id: str,
        model: TreeEnsemble,
        *,
        metrics: dict | None = None,
        target: str = "",
        config: dict | None = None,
        parent: str = "",
        job_id: str = "",
    ) -> ModelRecord:
        """Register ``model`` as the next version of ``model_id``."""
        sa, t = self._sa, self._models
        with self._tx() as c:
            latest = c.execute(
                sa.select(sa.func.coalesce(sa.func.max(t.c.version), 0)).where(t.c.model_id == model_id)
            ).scalar_one()
            version = latest + 1
            c.execute(
                t.insert().values(
                    model_id=model_id,
                    version=version,
                    algorithm=str(model.metadata.get("algorithm", model.kind)),
                    feature_set_version=model.feature_set_version,
                    kind=model.kind,
                    target=target,
                    n_trees=model.n_trees,
                    classes=json.dumps(list(model.classes)),
                    metrics=json.dumps(metrics or {}),
                    model=model.to_cbor(),
                    created=time.time(),
                    config=json.dumps(config or {}),
                    parent=parent,
                    job_id=job_id,
                )
            )
        return self.record(model_id, version)

    def _row(self, model_id: str, version: int | None, *, with_model: bool = False) -> Mapping[str, Any]:
        sa, t = self._sa, self._models
        columns = [c for c in t.c if with_model or c.name != "model"]
        query = sa.select(*columns).where(t.c.model_id == model_id)
        query = (
            query.where(t.c.version == version) if version is not None else query.order_by(t.c.version.desc()).limit(1)
        )
        rows = self._read(query)
        if not rows:
            raise RegistryError(self._missing(model_id, version))
        return rows[0]

    def _missing(self, model_id: str, version: int | None) -> str:
        """Why ``model_id[:vN]`` is not here, naming what is (the operator's next command)."""
        versions: dict[str, list[int]] = {}
        for m, v in self._keys():
            versions.setdefault(m, []).append(v)
        if not versions:
            return (
                f"{self.where} holds no models yet (wheelfed model register FILE or wheelfed train --registry adds one)"
            )
        if model_id in versions:
            return (
                f"no version {version} of {model_id} in {self.where}; it has "
                f"{', '.join(f'{model_id}:v{v}' for v in versions[model_id])}"
            )
        known = ", ".join(f"{m} (v{'/v'.join(map(str, vs))})" for m, vs in versions.items())
        return f"no model {model_id!r} in {self.where}; it has {known}"

    def _keys(self) -> list[tuple[str, int]]:
        t = self._models
        return [
            (r["model_id"], r["version"])
            for r in self._read(self._sa.select(t.c.model_id, t.c.version).order_by(t.c.model_id, t.c.version))
        ]

    def record(self, model_id: str, version: int | None = None) -> ModelRecord:
        return _decode(self._row(model_id, version), ModelRecord)

    def model(self, model_id: str, version: int | None = None) -> tuple[ModelRecord, TreeEnsemble]:
        row = self._row(model_id, version, with_model=True)
        return _decode(row, ModelRecord), TreeEnsemble.from_cbor(row["model"])

    def model_bytes(self, model_id: str, version: int | None = None) -> tuple[ModelRecord, bytes]:
        """The record and the stored CBOR as is (a download needs no decoding)."""
        row = self._row(model_id, version, with_model=True)
        return _decode(row, ModelRecord), bytes(row["model"])

    def list(self, *, offset: int = 0, limit: int | None = None) -> builtins.list[ModelRecord]:
        """Every version, ordered by model id and version (a page of them with offset/limit)."""
        t = self._models
        query = (
            self._sa.select(*(c for c in t.c if c.name != "model"))
            .order_by(t.c.model_id, t.c.version)
            .offset(offset)
            .limit(limit)
        )
        return [_decode(r, ModelRecord) for r in self._read(query)]

    def set_metrics(self, model_id: str, version: int, metrics: dict) -> None:
        t = self._models
        with self._tx() as c:
            c.execute(
                t.update().where(t.c.model_id == model_id, t.c.version == version).values(metrics=json.dumps(metrics))
            )

    def set_deployment(self, model_id: str, version: int, client: str, state: str, detail: str = "") -> None:
        """Record a gateway's answer; each one is stamped later than every earlier one, so the
        newest report wins even when the clock does not move between two of them."""
        sa, t = self._sa, self._deployments
        with self._tx() as c:
            latest = c.execute(sa.select(sa.func.coalesce(sa.func.max(t.c.updated), 0.0))).scalar_one()
            stamp = max(time.time(), float(latest) + 1e-6)
            key = (t.c.model_id == model_id) & (t.c.version == version) & (t.c.client == client)
            if c.execute(t.update().where(key).values(state=state, detail=detail, updated=stamp)).rowcount == 0:
                c.execute(
                    t.insert().values(
                        model_id=model_id, version=version, client=client, state=state, detail=detail, updated=stamp
                    )
                )

    def deployments(self, model_id: str | None = None) -> builtins.list[Deployment]:
        """Every recorded (model version, gateway) state, newest first."""
        t = self._deployments
        query = self._sa.select(t.c.model_id, t.c.version, t.c.client, t.c.state, t.c.detail).order_by(
            t.c.updated.desc()
        )
        if model_id:
            query = query.where(t.c.model_id == model_id)
        return [Deployment(**r) for r in self._read(query)]

    def running(self) -> dict[str, Deployment]:
        """Per gateway, the model version it last confirmed running (its newest ``active`` row)."""
        out: dict[str, Deployment] = {}
        for row in self.deployments():
            if row.state == "active":
                out.setdefault(row.client, row)
        return out

    # -- gateways ----------------------------------------------------------------------------

    def save_gateways(self, rows: builtins.list[GatewayRow]) -> None:
        """Store ``aggregator.fleet_status.GatewayRow`` rows (one per gateway, newest wins)."""
        t = self._gateways
        now = time.time()
        with self._tx() as c:
            for row in rows:
                values = dict(online=row.online, seen=row.seen, status=json.dumps(asdict(row)), updated=now)
                if c.execute(t.update().where(t.c.gateway == row.gateway).values(**values)).rowcount == 0:
                    c.execute(t.insert().values(gateway=row.gateway, **values))

    def gateways(self) -> builtins.list[GatewayRow]:
        """The stored gateway rows (``GatewayRow``), ordered by id."""
        from .fleet_status import GatewayRow

        t = self._gateways
        return [
            GatewayRow(**json.loads(r["status"])) for r in self._read(self._sa.select(t.c.status).order_by(t.c.gateway))
        ]

    # -- jobs --------------------------------------------------------------------------------

    def add_job(
        self,
        job_id: str,
        algorithm: str,
        config: dict,
        *,
        model_id: str,
        total: int,
        rules: JobRules | None = None,
        init_model: str = "",
        schedule_id: str = "",
    ) -> JobRecord:
        now = time.time()
        with self._tx() as c:
            c.execute(
                self._jobs.insert().values(
                    **_encode(
                        dict(
                            job_id=job_id,
                            algorithm=algorithm,
                            config=config,
                            rules=rules or JobRules(),
                            model_id=model_id,
                            state="queued",
                            total=total,
                            completed=0,
                            attempt=0,
                            participants=[],
                            feature_set="",
                            init_model=init_model,
                            schedule_id=schedule_id,
                            result="",
                            evaluation={},
                            error="",
                            created=now,
                            updated=now,
                            history=[],
                        )
                    )
                )
            )
        return self.job(job_id)

    def update_job(self, job_id: str, **values: Any) -> None:
        """Set columns of a job (``state``, ``error``, ``participants``...)."""
        t = self._jobs
        with self._tx() as c:
            c.execute(t.update().where(t.c.job_id == job_id).values(**_encode(values), updated=time.time()))

    def job(self, job_id: str) -> JobRecord:
        rows = self._read(self._jobs.select().where(self._jobs.c.job_id == job_id))
        if not rows:
            raise RegistryError(f"no job {job_id!r} in {self.where}")
        return _decode(rows[0], JobRecord)

    def jobs(self, *, state: str | None = None, offset: int = 0, limit: int | None = None) -> builtins.list[JobRecord]:
        """Jobs, newest first (only those in ``state`` if given)."""
        t = self._jobs
        query = t.select().order_by(t.c.created.desc(), t.c.job_id).offset(offset).limit(limit)
        if state is not None:
            query = query.where(t.c.state == state)
        return [_decode(r, JobRecord) for r in self._read(query)]

    def job_counts(self) -> dict[str, int]:
        """How many jobs are in each state (for ``/metrics``: one query, however many jobs)."""
        sa, t = self._sa, self._jobs
        rows = self._read(sa.select(t.c.state, sa.func.count().label("n")).group_by(t.c.state))
        return {r["state"]: r["n"] for r in rows}

    def complete_round(
        self,
        job_id: str,
        step: int,
        total: int,
        selected: int,
        answered: int,
        metrics: dict,
        elapsed_s: float,
        checkpoint: bytes | None,
    ) -> None:
        """Persist round ``step`` with ``checkpoint`` (the model grown so far, CBOR, or None for an
        algorithm that keeps none) and advance the job's ``completed`` to it (and its ``total`` to the
        round's, so that the job and its rounds say the same), in one transaction:
        after a crash the job is at exactly the last round stored here, and that round's model is
        there to resume from. A step already stored
        (a resumed attempt reporting it again) is refused, so no round is applied twice."""
        t, r = self._jobs, self._rounds
        with self._tx() as c:
            done = c.execute(self._sa.select(t.c.completed).where(t.c.job_id == job_id)).scalar_one()
            if step != done + 1:
                raise RegistryError(f"job {job_id}: round {step} follows round {done}, not {step - 1}")
            c.execute(
                r.insert().values(
                    job_id=job_id,
                    step=step,
                    total=total,
                    selected=selected,
                    answered=answered,
                    metrics=json.dumps(metrics),
                    elapsed_s=elapsed_s,
                    checkpoint=checkpoint,
                    created=time.time(),
                )
            )
            c.execute(t.update().where(t.c.job_id == job_id).values(completed=step, total=total, updated=time.time()))

    def rounds(self, job_id: str, *, with_checkpoints: bool = False) -> builtins.list[StepRecord]:
        r = self._rounds
        columns = [c for c in r.c if with_checkpoints or c.name != "checkpoint"]
        rows = self._read(self._sa.select(*columns).where(r.c.job_id == job_id).order_by(r.c.step))
        return [_decode({"checkpoint": None, **row}, StepRecord) for row in rows]

    def last_checkpoint(self, job_id: str) -> StepRecord | None:
        """The newest round of ``job_id`` stored with its model (what a resumed job continues
        from), or None if there is none."""
        r = self._rounds
        rows = self._read(
            r.select().where(r.c.job_id == job_id, r.c.checkpoint.is_not(None)).order_by(r.c.step.desc()).limit(1)
        )
        return _decode(rows[0], StepRecord) if rows else None

    def discard_rounds_after(self, job_id: str, step: int) -> None:
        """Forget the rounds after ``step`` (grown again by a resumed job) and set the job's
        ``completed`` to ``step``."""
        t, r = self._jobs, self._rounds
        with self._tx() as c:
            c.execute(r.delete().where(r.c.job_id == job_id, r.c.step > step))
            c.execute(t.update().where(t.c.job_id == job_id).values(completed=step, updated=time.time()))

    # -- schedules and promotions ------------------------------------------------------------

    def add_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        with self._tx() as c:
            c.execute(self._schedules.insert().values(**_encode(asdict(schedule))))
        return self.schedule(schedule.schedule_id)

    def update_schedule(self, schedule_id: str, **values: Any) -> None:
        t = self._schedules
        with self._tx() as c:
            c.execute(t.update().where(t.c.schedule_id == schedule_id).values(**_encode(values)))

    def delete_schedule(self, schedule_id: str) -> None:
        self.schedule(schedule_id)
        t = self._schedules
        with self._tx() as c:
            c.execute(t.delete().where(t.c.schedule_id == schedule_id))

    def schedule(self, schedule_id: str) -> ScheduleRecord:
        rows = self._read(self._schedules.select().where(self._schedules.c.schedule_id == schedule_id))
        if not rows:
            raise RegistryError(f"no schedule {schedule_id!r} in {self.where}")
        return _decode(rows[0], ScheduleRecord)

    def schedules(self) -> builtins.list[ScheduleRecord]:
        t = self._schedules
        return [_decode(r, ScheduleRecord) for r in self._read(t.select().order_by(t.c.created, t.c.schedule_id))]

    def add_promotion(self, **values: Any) -> PromotionRecord:
        t = self._promotions
        with self._tx() as c:
            key = c.execute(
                t.insert().values(**_encode({"canary": {}, **values}), created=time.time())
            ).inserted_primary_key[0]
        return _decode(self._read(t.select().where(t.c.id == key))[0], PromotionRecord)

    def promotions(self, model_id: str | None = None) -> builtins.list[PromotionRecord]:
        t = self._promotions
        query = t.select().order_by(t.c.id.desc())
        if model_id:
            query = query.where(t.c.model_id == model_id)
        return [_decode(r, PromotionRecord) for r in self._read(query)]

    # -- the privacy ledger ------------------------------------------------------------------

    def add_privacy(self, entry: LedgerEntry) -> None:
        """Enter one attempt of a private job (a second entry for the same attempt is refused)."""
        with self._tx() as c:
            c.execute(
                self._ledger.insert().values(
                    **{
                        **asdict(entry),
                        "gateways": json.dumps(list(entry.gateways)),
                        "created": entry.created or time.time(),
                    }
                )
            )

    def settle_privacy(self, job_id: str, attempt: int, **values: Any) -> None:
        """Set columns of an attempt's entry (``until_us``, ``rho``, ``basis``, ``gateways``...)."""
        if "gateways" in values:
            values["gateways"] = json.dumps(list(values["gateways"]))
        t = self._ledger
        with self._tx() as c:
            c.execute(t.update().where(t.c.job_id == job_id, t.c.attempt == attempt).values(**values))

    def record_releases(self, job_id: str, attempt: int, rho: float, xi: float, releases: int) -> None:
        """Record what a running attempt has released so far (committed before this returns, so
        before the release it announces goes out); refused (``RegistryError``) when the attempt
        has no running entry."""
        t = self._ledger
        with self._tx() as c:
            done = c.execute(
                t.update()
                .where(t.c.job_id == job_id, t.c.attempt == attempt, t.c.basis == "running")
                .values(released_rho=rho, released_xi=xi, releases=releases)
            )
            if done.rowcount != 1:
                raise RegistryError(f"job {job_id} attempt {attempt} has no running privacy ledger entry")

    def privacy_ledger(self, job_id: str | None = None) -> builtins.list[LedgerEntry]:
        """Every entry (of ``job_id`` if given), oldest first."""
        from .privacy.ledger import LedgerEntry

        t = self._ledger
        query = t.select().order_by(t.c.created, t.c.job_id, t.c.attempt)
        if job_id is not None:
            query = query.where(t.c.job_id == job_id)
        return [LedgerEntry(**{**row, "gateways": tuple(json.loads(row["gateways"]))}) for row in self._read(query)]

    def close(self) -> None:
        with self._lock:
            self._engine.dispose()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
