"""The server's HTTP face: the REST API (OpenAPI at ``/openapi.json``, browsable at ``/docs``),
Prometheus ``/metrics`` and the dashboard (``/``).

Every answer comes from the fleet tracker's memory or the registry; starting a job or a schedule
only queues work for the job runner, and the call returns at once. Deploying and rolling back
wait for the gateways' answers (up to the round deadline), like ``wheelfed model deploy``.

Bad input is a 4xx with a ``detail`` line naming the problem: 422 for a value FastAPI or the
algorithm refuses (``config: fedscs-xgb has no parameter n_trees``), 404 for an unknown model,
job or schedule, 409 for a request the state does not allow (cancelling a finished job, deploying
without a signing key, deploying a gateway's own model to another gateway, a private job that
would take a window past the privacy cap). ``/api/privacy`` shows the privacy ledger: per gateway
the lifetime epsilon of its most-used window and what is left under the cap. With tokens
configured, reading needs a read or operator token (``Authorization: Bearer TOKEN``), changing
anything an operator token; that, the ``Host`` allow-list and the body-size limit are checked
before a route runs or a body is read (:mod:`aggregator.server.guards`): 400 for a host not
allowed, 401 with ``WWW-Authenticate`` for a missing or unknown token, 403 for a read token
that tries to change something, 413 for a body over ``max_request_bytes``.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, overload

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi import Path as PathParameter
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPBearer
from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, WithJsonSchema

from shared import __version__

from ..privacy.ledger import BudgetExceeded
from ..algorithm_table import user_name
from ..registry import JobRules, RegistryError, ScheduleRecord
from .guards import install_guards
from .job_bounds import check_config, config_schema
from .policy import CronSpec
from .service import ALGORITHMS, FLEET_ALGORITHMS, LIVE_KEEP, JobRequest

if TYPE_CHECKING:
    from .app import Server

__all__ = ["create_app"]

STATIC = Path(__file__).parent / "static"
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
Page = tuple[int, int]
#: Versions are stored as 32-bit integers on every database; a larger number is a 422, not a 500.
MAX_VERSION = 2**31 - 1
#: A version as users write it: ``2``, ``v2`` or ``MODEL_ID:v2`` (what the CLI, the job's result
#: and the dashboard show); read by :func:`version_number`.
Version = Annotated[
    str,
    PathParameter(
        max_length=80, description="N, vN or MODEL_ID:vN, e.g. 1, v1, activity:v1", examples=["v1", "1", "activity:v1"]
    ),
]


def version_number(model_id: str, text: str) -> int:
    """The version number ``text`` names for ``model_id``: ``2``, ``v2`` and ``MODEL_ID:v2`` (or
    ``MODEL_ID:2``) all name version 2; anything else is a ``ValueError`` (a 422) saying so.

    >>> [version_number("activity", t) for t in ("1", "v1", "V1", "activity:v1", "activity:1")]
    [1, 1, 1, 1, 1]
    """
    raw = text.strip()
    if ":" in raw:
        named, _, raw = raw.rpartition(":")
        if named != model_id:
            raise ValueError(f"version {text[:80]!r} names model {named[:64]!r}, not {model_id!r}")
    digits = raw[1:] if raw[:1] in ("v", "V") else raw
    if not digits.isdigit() or not 1 <= int(digits) <= MAX_VERSION:
        raise ValueError(
            f"version: {text[:80]!r} is not a version of {model_id}; give N, vN or {model_id}:vN "
            f"(N from 1 to {MAX_VERSION}), e.g. {model_id}:v1"
        )
    return int(digits)


def algorithm_name(name: Any) -> Any:
    """An algorithm's name as the API, the CLI and the dashboard spell it (``fedscs-xgb``, not the
    wire's ``fedscs_xgb``; ``algorithm_table.user_name``); anything but a string is left to the
    schema to refuse."""
    return user_name(name) if isinstance(name, str) else name


#: An algorithm name as given: either spelling (``fedscs_xgb`` or ``fedscs-xgb``) is read as the API's.
_AnySpelling = BeforeValidator(algorithm_name)
#: An algorithm's settings, each in its bounds (``job_bounds``; shown in the OpenAPI schema).
Settings = Annotated[
    dict[str, Any], AfterValidator(check_config), WithJsonSchema({"type": "object", **config_schema()})
]
#: The most gateways a request may name (as many as min_gateways may ask for).
MAX_GATEWAYS = 100_000


class JobIn(BaseModel):
    """A training job: what to train and the participation rules. A FedGA-Tree job registers one
    model per participant, MODEL_ID.GATEWAY, deployable to that gateway only."""

    algorithm: Annotated[Literal[ALGORITHMS], _AnySpelling] = "fedscs-xgb"  # type: ignore[valid-type]
    model_id: str = Field(pattern=ID_PATTERN, description="the registered model's name")
    config: Settings = Field(default_factory=dict, description="the algorithm's parameters, e.g. n_rounds")
    clients: list[str] | None = Field(
        None, min_length=1, max_length=MAX_GATEWAYS, description="gateway ids (default: every online one)"
    )
    min_gateways: int = Field(1, ge=1, le=MAX_GATEWAYS)
    min_labelled: int = Field(0, ge=0, le=10**9, description="labelled windows each participant needs")
    init_model: str = Field("", max_length=80, description="MODEL_ID:vN to continue boosting from")
    seed: int = Field(0, ge=0, le=2**32 - 1)
    since: float | str | None = Field(
        None,
        description="train only on windows that start at or after this time: Unix seconds (UTC) or "
        "ISO-8601 with its offset, e.g. 2026-11-01T00:00:00Z; held-out scoring and min_labelled "
        "use the same windows",
        examples=["2026-11-01T00:00:00Z", 1793491200],
    )
    until: float | str | None = Field(
        None,
        description="train only on windows that start before this time (same forms as since)",
        examples=["2026-11-15T00:00:00+01:00"],
    )


class ScheduleIn(BaseModel):
    """A retraining schedule: at least one of every_s, cron, min_new_windows."""

    schedule_id: str = Field(pattern=ID_PATTERN)
    model_id: str = Field(pattern=ID_PATTERN)
    algorithm: Annotated[Literal[FLEET_ALGORITHMS], _AnySpelling] = "fedscs-xgb"  # type: ignore[valid-type]
    config: Settings = Field(default_factory=dict)
    every_s: float | None = Field(None, gt=0, le=10**9)
    cron: str = Field("", max_length=100, description="five fields, UTC: minute hour day month weekday")
    min_new_windows: int | None = Field(None, ge=1, le=10**9)
    threshold: float = Field(0.01, ge=0, le=1e6, description="allowed regression of the validation metric")
    canary_share: float = Field(0.25, gt=0, le=1)
    canary_windows: int = Field(
        0,
        ge=0,
        le=LIVE_KEEP,
        description="live predictions of the candidate each canary "
        "gateway must report before the rest get it (0: no live check)",
    )
    canary_observe_s: float = Field(900.0, gt=0, le=86_400, description="how long to wait for them, seconds")
    canary_max_drop: float = Field(
        0.05,
        ge=0,
        le=1,
        description="how far their mean confidence may fall below "
        "that of as many predictions of the version the canary ran before",
    )
    enabled: bool = True


class DeployIn(BaseModel):
    clients: list[str] | None = Field(
        None, min_length=1, max_length=MAX_GATEWAYS, description="default: every online gateway"
    )


class RollbackIn(BaseModel):
    clients: list[str] = Field(min_length=1, max_length=MAX_GATEWAYS)


class SegmentOut(BaseModel):
    """Windows of one gateway starting in ``[since_us, until_us)`` (null: open), all covered by the
    same ``jobs`` private jobs: their lifetime zCDP ``rho`` and ``xi``."""

    since_us: int | None
    until_us: int | None
    rho: float
    xi: float
    jobs: int


class GatewayBudgetOut(BaseModel):
    """One gateway's privacy budget: the lifetime epsilon of its most-used window, the most
    epsilon a new job may still spend there, from when its windows are untouched (null: all are,
    or a job still runs on it), the jobs still running on it, how many ledger entries cover some
    of its windows, and (``detail``) its segments."""

    gateway: str
    spent_epsilon: float
    remaining_epsilon: float
    fresh_since_us: int | None
    running: list[str]
    jobs: int
    segments: list[SegmentOut]


class LedgerEntryOut(BaseModel):
    """One attempt of a private job: what it spent per window (``rho``, ``xi``; its own
    ``epsilon`` at its ``delta``) on ``gateways`` x window starts in ``[since_us, until_us)``;
    ``basis``: running, spent (its model's metadata; with no ``model``, what it released before
    it ended without one) or planned (ended without a model or a record of its releases)."""

    job_id: str
    attempt: int
    model: str
    gateways: list[str]
    since_us: int | None
    until_us: int | None
    rho: float
    xi: float
    delta: float
    epsilon: float
    basis: Literal["running", "spent", "planned"]
    created: float


class PrivacyOut(BaseModel):
    """The privacy ledger: the cap (lifetime epsilon per window, at ``delta``), per gateway its
    budget, and (``detail``) every entry and every gateway's segments."""

    epsilon_cap: float
    delta: float
    gateways: list[GatewayBudgetOut]
    entries: list[LedgerEntryOut]


@overload
def _gateway_ids(clients: list[str]) -> list[str]: ...
@overload
def _gateway_ids(clients: list[str] | None) -> list[str] | None: ...
def _gateway_ids(clients: list[str] | None) -> list[str] | None:
    """Gateway ids as the topics need them (a ``ValueError`` -> 422 names the bad one)."""
    from shared.protocol.envelope import validate_client_id
    from shared.protocol.topics import AGGREGATOR_ID

    for client in clients or ():
        if validate_client_id(client) == AGGREGATOR_ID:
            raise ValueError(f"{AGGREGATOR_ID!r} is the aggregator's id, not a gateway's")
    return clients


def _instant(name: str, value: float | str | None) -> float | None:
    """A time of the API (Unix seconds, or ISO-8601 text with a UTC offset) as Unix seconds; a
    ``ValueError`` (-> 422) names the field and the forms it takes."""
    if value is None or not isinstance(value, str):
        return value
    from datetime import datetime

    try:
        return float(value)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(
            f"{name}: {value[:40]!r} is neither Unix seconds nor an ISO-8601 time (e.g. 2026-11-01T00:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise ValueError(f"{name}: {value[:40]!r} has no UTC offset; add Z for UTC or +HH:MM")
    return moment.timestamp()


def _page(offset: int = Query(0, ge=0, le=10**9), limit: int = Query(100, ge=1, le=1000)) -> Page:
    return offset, limit


def create_app(server: Server) -> FastAPI:
    """The FastAPI application of a started :class:`aggregator.server.app.Server`."""
    config = server.config
    app = _application(
        title="WheelFed server",
        version=__version__,
        description="Fleet, training jobs, models, deployments and retraining schedules.",
    )

    install_guards(app, config)  # Host allow-list, tokens and body size, before any body is read
    # the roles as the OpenAPI document shows them; aggregator.server.guards checks them
    read = Depends(HTTPBearer(scheme_name="read", auto_error=False, description="a read or operator token"))
    operate = Depends(HTTPBearer(scheme_name="operator", auto_error=False, description="an operator token"))

    @app.exception_handler(RegistryError)
    async def _missing(_request: Request, exc: RegistryError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(ValueError)
    async def _bad_value(_request: Request, exc: ValueError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)

    # -- the dashboard ---------------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(STATIC / "dashboard.html", media_type="text/html")

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: Literal["dashboard.js", "dashboard.css"]) -> FileResponse:
        return FileResponse(STATIC / name)

    # -- health and metrics ----------------------------------------------------------------
    @app.get("/api/health")
    def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "version": __version__,
            "broker_connected": server.broker_connected,
            "registry": server.registry.where,
            "gateways_online": len(server.tracker.online()),
        }

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> str:
        rows = server.tracker.snapshot()
        jobs = server.registry.job_counts()
        lines = [
            "# TYPE wheelfed_gateways gauge",
            f'wheelfed_gateways{{state="online"}} {sum(r.online for r in rows)}',
            f'wheelfed_gateways{{state="offline"}} {sum(not r.online for r in rows)}',
            "# TYPE wheelfed_labelled_windows gauge",
            f"wheelfed_labelled_windows {server.tracker.labelled_total()}",
            "# TYPE wheelfed_jobs gauge",
        ]
        for state in ("queued", "running", "completed", "failed", "cancelled"):
            lines.append(f'wheelfed_jobs{{state="{state}"}} {jobs.get(state, 0)}')
        traffic = server.transport.stats
        lines += [
            "# TYPE wheelfed_broker_connected gauge",
            f"wheelfed_broker_connected {int(server.broker_connected)}",
            "# TYPE wheelfed_mqtt_bytes_total counter",
            f'wheelfed_mqtt_bytes_total{{direction="sent"}} {traffic.sent_bytes}',
            f'wheelfed_mqtt_bytes_total{{direction="received"}} {traffic.received_bytes}',
            "# TYPE wheelfed_rejected_messages_total counter",
        ]
        lines += [f'wheelfed_rejected_messages_total{{reason="{r}"}} {n}' for r, n in sorted(traffic.rejected.items())]
        lines.append("# TYPE wheelfed_gateway_faults_total counter")
        lines += [
            f'wheelfed_gateway_faults_total{{kind="{k}"}} {n}' for k, n in sorted(server.tracker.faults.counts.items())
        ]
        return "\n".join(lines) + "\n"

    # -- fleet -----------------------------------------------------------------------------
    def gateway_json(row, now: float) -> dict[str, Any]:
        """A gateway's row with its health: ``silent_s`` (seconds since the server last heard from
        it, on the server's clock), ``stale`` (online, but silent for longer than the tracker's
        ``stale_after_s``: its counts may be out of date) and ``faults`` (statuses of it the server
        could not read)."""
        tracker = server.tracker
        return {
            **row.to_json(now),
            "silent_s": round(tracker.silent_s(row, now), 3),
            "stale": tracker.is_stale(row, now),
            "stale_after_s": tracker.stale_after_s,
            "faults": tracker.gateway_faults.get(row.gateway, 0),
        }

    @app.get("/api/gateways", dependencies=[read])
    def gateways(page: Page = Depends(_page)) -> list[dict[str, Any]]:
        offset, limit = page
        now = time.time()
        return [gateway_json(row, now) for row in server.tracker.snapshot()[offset : offset + limit]]

    @app.get("/api/gateways/{gateway}", dependencies=[read])
    def gateway(gateway: str) -> dict[str, Any]:
        for row in server.tracker.snapshot():
            if row.gateway == gateway:
                return gateway_json(row, time.time())
        raise HTTPException(404, f"no gateway {gateway!r} has announced itself")

    # -- jobs ------------------------------------------------------------------------------
    @app.get("/api/jobs", dependencies=[read])
    def jobs(
        page: Page = Depends(_page),
        state: Literal["queued", "running", "completed", "failed", "cancelled"] | None = None,
    ) -> list[dict]:
        return [_job_json(j) for j in server.registry.jobs(state=state, offset=page[0], limit=page[1])]

    @app.post(
        "/api/jobs",
        status_code=201,
        dependencies=[operate],
        responses={
            409: {
                "description": "a private job that would take a window past the privacy cap; "
                "detail: the one-line refusal (what is left, and the since from "
                "which windows have the full budget)"
            }
        },
    )
    def start_job(body: JobIn) -> dict[str, Any]:
        clients = _gateway_ids(body.clients)
        rules = JobRules(
            None if clients is None else tuple(clients),
            body.min_gateways,
            body.min_labelled,
            body.seed,
            since=_instant("since", body.since),
            until=_instant("until", body.until),
        )
        request = JobRequest(body.algorithm, body.model_id, body.config, rules, body.init_model)
        try:
            return _job_json(server.runner.submit(request))
        except BudgetExceeded as exc:
            raise HTTPException(409, str(exc)) from None

    @app.get("/api/jobs/{job_id}", dependencies=[read])
    def job(job_id: str) -> dict[str, Any]:
        return {
            **_job_json(server.registry.job(job_id)),
            "rounds": [
                {k: v for k, v in asdict(r).items() if k != "checkpoint"} for r in server.registry.rounds(job_id)
            ],
        }

    @app.post("/api/jobs/{job_id}/cancel", dependencies=[operate])
    def cancel_job(job_id: str) -> dict[str, Any]:
        try:
            return _job_json(server.runner.cancel(job_id))
        except ValueError as exc:
            raise HTTPException(409, str(exc)) from None

    # -- models and deployments ------------------------------------------------------------
    @app.get("/api/models", dependencies=[read])
    def models(page: Page = Depends(_page)) -> list[dict[str, Any]]:
        return [_model_json(server, r) for r in server.registry.list(offset=page[0], limit=page[1])]

    @app.get("/api/models/{model_id}/compare", dependencies=[read])
    def compare(
        model_id: str,
        a: str = Query(max_length=80, description="N, vN or MODEL_ID:vN"),
        b: str = Query(max_length=80, description="N, vN or MODEL_ID:vN"),
    ) -> dict[str, Any]:
        first = server.registry.record(model_id, version_number(model_id, a))
        second = server.registry.record(model_id, version_number(model_id, b))
        keys = sorted(set(first.metrics) | set(second.metrics))
        return {
            "a": first.label,
            "b": second.label,
            "metrics": {k: {"a": first.metrics.get(k), "b": second.metrics.get(k)} for k in keys},
        }

    @app.get("/api/models/{model_id}/{version}", dependencies=[read])
    def model(model_id: str, version: Version) -> dict[str, Any]:
        record = server.registry.record(model_id, version_number(model_id, version))
        running = [
            d.client
            for d in server.registry.running().values()
            if (d.model_id, d.version) == (model_id, record.version)
        ]
        return {
            **_model_json(server, record),
            "running_on": sorted(running),
            "privacy": _model_privacy(server, record.job_id),
        }

    @app.get(
        "/api/models/{model_id}/{version}/download",
        dependencies=[read],
        response_class=Response,
        responses={200: {"content": {"application/cbor": {}}}},
    )
    def download(model_id: str, version: Version) -> Response:
        record, data = server.registry.model_bytes(model_id, version_number(model_id, version))
        return Response(
            data,
            media_type="application/cbor",
            headers={"Content-Disposition": f'attachment; filename="{record.model_id}-v{record.version}.cbor"'},
        )

    @app.post("/api/models/{model_id}/{version}/deploy", dependencies=[operate])
    def deploy_model(model_id: str, version: Version, body: DeployIn) -> dict[str, Any]:
        from ..deployment import deploy

        number = version_number(model_id, version)
        record = server.registry.record(model_id, number)
        key = _signing_key(server)
        clients = _gateway_ids(body.clients) or ([record.target] if record.target else server.tracker.online())
        if record.target and clients != [record.target]:
            raise HTTPException(
                409,
                f"{record.label} is {record.target}'s own model: it deploys to {record.target} "
                f"only, not to {', '.join(clients)}",
            )
        if not clients:
            raise HTTPException(409, "no gateway is online to deploy to")
        result = deploy(server.engine, server.registry, key, model_id, number, clients, deadline_s=config.deadline_s)
        return {"label": result.label, "active": result.active, "rejected": result.rejected, "pending": result.pending}

    @app.post("/api/rollback", dependencies=[operate])
    def roll_back(body: RollbackIn) -> dict[str, Any]:
        from ..deployment import rollback

        result = rollback(
            server.engine,
            server.registry,
            _signing_key(server),
            _gateway_ids(body.clients),
            reason="operator rollback",
            deadline_s=config.deadline_s,
        )
        return {
            "active": result.active,
            "rejected": result.rejected,
            "pending": result.pending,
            "skipped": result.skipped,
        }

    @app.get("/api/deployments", dependencies=[read])
    def deployments(model_id: str | None = None, page: Page = Depends(_page)) -> list[dict[str, Any]]:
        rows = server.registry.deployments(model_id)[page[0] : page[0] + page[1]]
        return [row._asdict() for row in rows]

    @app.get("/api/promotions", dependencies=[read])
    def promotions(model_id: str | None = None) -> list[dict[str, Any]]:
        return [asdict(p) for p in server.registry.promotions(model_id)]

    # -- privacy -------------------------------------------------------------------------
    @app.get("/api/privacy", dependencies=[read], response_model=PrivacyOut)
    def privacy(
        detail: bool = Query(
            False, description="add every ledger entry and every gateway's segments (a long ledger makes this large)"
        ),
    ) -> PrivacyOut:
        cap = server.runner.privacy_cap
        budgets = server.runner.privacy_budgets(segments=detail)
        entries = server.registry.privacy_ledger() if detail else []
        return PrivacyOut(
            epsilon_cap=cap.epsilon,
            delta=cap.delta,
            gateways=[GatewayBudgetOut(**asdict(b)) for b in budgets],
            entries=[LedgerEntryOut(**asdict(e)) for e in entries],
        )

    # -- schedules -------------------------------------------------------------------------
    @app.get("/api/schedules", dependencies=[read])
    def schedules() -> list[dict[str, Any]]:
        return [asdict(s) for s in server.registry.schedules()]

    @app.post("/api/schedules", status_code=201, dependencies=[operate])
    def add_schedule(body: ScheduleIn) -> dict[str, Any]:
        if body.every_s is None and not body.cron and body.min_new_windows is None:
            raise ValueError("a schedule needs every_s, cron or min_new_windows")
        if body.cron:
            CronSpec.parse(body.cron)
        from .service import build_algorithm

        build_algorithm(body.algorithm, body.config)
        try:
            server.registry.schedule(body.schedule_id)
        except RegistryError:
            pass  # a new id
        else:
            raise HTTPException(409, f"a schedule {body.schedule_id!r} exists already")
        now = time.time()
        record = ScheduleRecord(
            body.schedule_id,
            body.model_id,
            body.algorithm,
            body.config,
            body.every_s,
            body.cron,
            body.min_new_windows,
            body.threshold,
            body.canary_share,
            body.enabled,
            now,
            server.tracker.labelled_total(),
            now,
            canary_windows=body.canary_windows,
            canary_observe_s=body.canary_observe_s,
            canary_max_drop=body.canary_max_drop,
        )
        return asdict(server.registry.add_schedule(record))

    @app.delete("/api/schedules/{schedule_id}", status_code=204, dependencies=[operate])
    def delete_schedule(schedule_id: str) -> Response:
        server.registry.delete_schedule(schedule_id)
        return Response(status_code=204)

    return app


def _application(**kwargs: Any) -> FastAPI:
    """The FastAPI app with Swagger UI at ``/docs`` and ReDoc at ``/redoc`` whose scripts and
    styles come from the installed ``fastapi-offline`` package (``/static-offline-docs/``), not
    from a CDN: a clinic's network without internet shows them all the same. Without that package
    (an install without the ``server`` extra) the two pages are left out; ``/openapi.json`` stays."""
    try:
        from fastapi_offline import FastAPIOffline
    except ImportError:
        return FastAPI(docs_url=None, redoc_url=None, **kwargs)
    return FastAPIOffline(**kwargs)


def _job_json(job) -> dict[str, Any]:
    """A job as the API shows it: its record, the algorithm as users spell it, and what its
    attempts say: ``started`` (its first attempt, Unix seconds; null while queued), ``resumes``
    (attempts after the first), ``resumed_from`` (the step each later attempt continued after) and
    ``duration_s`` (from its first start to its end, or to now while it runs), and ``bytes``: the
    MQTT bytes the aggregator sent and received while its attempts ran (null if none recorded)."""
    data = asdict(job)
    history = job.history or []
    started = history[0]["started"] if history else None
    end = time.time() if job.state == "running" else job.updated
    counted = [h for h in history if "sent_bytes" in h]
    data.update(
        algorithm=algorithm_name(job.algorithm),
        started=started,
        resumes=max(job.attempt - 1, 0),
        resumed_from=[h.get("from_step", 0) for h in history if h.get("attempt", 1) > 1],
        duration_s=None if started is None else round(max(end - started, 0.0), 3),
        bytes=sum(h["sent_bytes"] + h["received_bytes"] for h in counted) if counted else None,
    )
    return data


def held_out_summary(evaluation: dict[str, Any]) -> dict[str, Any] | None:
    """What a model's score was measured on, from its job's evaluation: ``windows`` (held-out
    windows scored), ``chance`` (the majority class's share of them: what always answering that
    class scores), per gateway its accuracy, windows and local-only accuracy, and ``local_only``
    (the accuracy of every gateway learning alone, pooled over the same windows: the job's
    local-only baseline) when the job recorded it; None when it was not evaluated.

    >>> held_out_summary({"metrics": {"accuracy": 0.8, "n": 10.0}, "confusion": [[6, 1], [1, 2]],
    ...                   "per_client": {"gw-1": {"accuracy": 0.8, "n": 10.0}}})["chance"]
    0.7
    """
    metrics = evaluation.get("metrics") if isinstance(evaluation, dict) else None
    if not metrics:
        return None
    confusion = evaluation.get("confusion")
    rows = [sum(row) for row in confusion] if confusion else []
    windows = sum(rows) if rows else metrics.get("n")
    chance = max(rows) / sum(rows) if rows and sum(rows) else None
    alone = evaluation.get("local_only_per_client") or {}
    per_gateway = {
        g: {
            "accuracy": m.get("accuracy"),
            "windows": m.get("n"),
            **({"rmse": m["rmse"]} if "rmse" in m else {}),
            "local_only": (alone.get(g) or {}).get("accuracy"),
        }
        for g, m in (evaluation.get("per_client") or {}).items()
    }
    local = evaluation.get("local_only")
    if isinstance(local, dict):
        local = local.get("accuracy")
    return {
        "windows": None if windows is None else int(windows),
        "chance": chance,
        "local_only": local,
        "per_gateway": per_gateway,
    }


def _model_json(server: Server, record) -> dict[str, Any]:
    """A model version as the API shows it: its record, its label, the algorithm as users spell
    it, and ``held_out`` (``held_out_summary`` of its job's evaluation: windows, chance, local-only,
    per gateway). A personal model (one gateway's) is summarised from its own gateway's row."""
    held_out = None
    if record.job_id:
        try:
            evaluation = server.registry.job(record.job_id).evaluation
        except RegistryError:
            evaluation = {}
        if record.target and "models" in evaluation:
            mine = (evaluation.get("per_client") or {}).get(record.target)
            evaluation = {"metrics": mine, "per_client": {record.target: mine}} if mine else {}
        held_out = held_out_summary(evaluation)
    return {
        **asdict(record),
        "algorithm": algorithm_name(record.algorithm),
        "label": record.label,
        "held_out": held_out,
    }


def _model_privacy(server: Server, job_id: str) -> dict[str, Any]:
    """What the job that made a model spent (its ledger entries: nothing for a model trained
    without differential privacy) and the least a new private job may still spend on the most-used
    window of one of its gateways, and which."""
    spent = server.registry.privacy_ledger(job_id) if job_id else []
    gateways = {g for e in spent for g in e.gateways}
    budgets = [b for b in server.runner.privacy_budgets(segments=False) if b.gateway in gateways]
    least = min(budgets, key=lambda b: b.remaining_epsilon, default=None)
    return {
        "spent": [asdict(e) for e in spent],
        "remaining_epsilon": least.remaining_epsilon if least else None,
        "remaining_gateway": least.gateway if least else None,
    }


def _signing_key(server: Server):
    if server.signing_key is None:
        raise HTTPException(409, "the server has no signing key (signing_key in its config, or --key)")
    return server.signing_key
