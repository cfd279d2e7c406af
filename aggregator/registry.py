"""The aggregator's model registry: every trained model version, its metrics, and where it runs.

One SQLite file (``--registry``, default ``wheelfed-registry.db``): ``models`` holds each version
(the model's CBOR, algorithm, feature set, metrics as JSON), ``deployments`` the state of each
(model version, gateway) pair as reported by the gateways (``active``, ``rejected``, ``pending``
until the gateway answers). Versions count up per model id.

A gateway runs one model at a time, but its ``active`` rows are never demoted: which version it
runs *now* is its most recently confirmed ``active`` row (:meth:`Registry.running`). That keeps
the table a faithful log of what each gateway said, and a deploy, rollback or re-deploy only
has to record the gateway's answer -- no row has to be rewritten to stay consistent.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, NamedTuple

from shared.model import TreeEnsemble

__all__ = ["Deployment", "ModelRecord", "Registry", "RegistryError"]

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS models (
        model_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        algorithm TEXT NOT NULL,
        feature_set_version TEXT NOT NULL,
        kind TEXT NOT NULL,
        target TEXT NOT NULL DEFAULT '',
        n_trees INTEGER NOT NULL,
        classes TEXT NOT NULL,
        metrics TEXT NOT NULL DEFAULT '{}',
        model BLOB NOT NULL,
        created REAL NOT NULL,
        PRIMARY KEY (model_id, version))""",
    """CREATE TABLE IF NOT EXISTS deployments (
        model_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        client TEXT NOT NULL,
        state TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '',
        updated REAL NOT NULL,
        PRIMARY KEY (model_id, version, client))""",
)


class RegistryError(Exception):
    """An unknown model or version, or an unusable registry file."""


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


class Registry:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            for statement in _SCHEMA:
                self._db.execute(statement)
        except sqlite3.DatabaseError as exc:
            raise RegistryError(f"{self.path} is not a usable registry ({exc}); use another --registry path") from exc

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def add(self, model_id: str, model: TreeEnsemble, *, metrics: dict | None = None, target: str = "") -> ModelRecord:
        """Register ``model`` as the next version of ``model_id``."""
        with self._tx() as c:
            (latest,) = c.execute("SELECT coalesce(max(version), 0) FROM models WHERE model_id = ?",
                                  (model_id,)).fetchone()
            version = latest + 1
            c.execute("INSERT INTO models VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      (model_id, version, str(model.metadata.get("algorithm", model.kind)), model.feature_set_version,
                       model.kind, target, model.n_trees, json.dumps(list(model.classes)),
                       json.dumps(metrics or {}), model.to_cbor(), time.time()))
        return self.record(model_id, version)

    def _row(self, model_id: str, version: int | None) -> tuple:
        query = ("SELECT model_id, version, algorithm, feature_set_version, kind, target, n_trees, classes, metrics, "
                 "created, model FROM models WHERE model_id = ?")
        params: tuple = (model_id,)
        query += " AND version = ?" if version is not None else " ORDER BY version DESC LIMIT 1"
        params += (version,) if version is not None else ()
        with self._lock:
            row = self._db.execute(query, params).fetchone()
        if row is None:
            raise RegistryError(self._missing(model_id, version))
        return row

    def _missing(self, model_id: str, version: int | None) -> str:
        """Why ``model_id[:vN]`` is not here, naming what is (the operator's next command)."""
        with self._lock:
            rows = self._db.execute("SELECT model_id, version FROM models ORDER BY model_id, version").fetchall()
        versions: dict[str, list[int]] = {}
        for m, v in rows:
            versions.setdefault(m, []).append(v)
        if not versions:
            return (f"{self.path} holds no models yet (wheelfed model register FILE or wheelfed train "
                    "--registry adds one)")
        if model_id in versions:
            return (f"no version {version} of {model_id} in {self.path}; it has "
                    f"{', '.join(f'{model_id}:v{v}' for v in versions[model_id])}")
        known = ", ".join(f"{m} (v{'/v'.join(map(str, vs))})" for m, vs in versions.items())
        return f"no model {model_id!r} in {self.path}; it has {known}"

    def record(self, model_id: str, version: int | None = None) -> ModelRecord:
        r = self._row(model_id, version)
        return ModelRecord(r[0], r[1], r[2], r[3], r[4], r[5], r[6], json.loads(r[7]), json.loads(r[8]), r[9])

    def model(self, model_id: str, version: int | None = None) -> tuple[ModelRecord, TreeEnsemble]:
        r = self._row(model_id, version)
        return self.record(r[0], r[1]), TreeEnsemble.from_cbor(r[10])

    def list(self) -> list[ModelRecord]:
        with self._lock:
            keys = self._db.execute("SELECT model_id, version FROM models ORDER BY model_id, version").fetchall()
        return [self.record(m, v) for m, v in keys]

    def set_metrics(self, model_id: str, version: int, metrics: dict) -> None:
        with self._tx() as c:
            c.execute("UPDATE models SET metrics = ? WHERE model_id = ? AND version = ?",
                      (json.dumps(metrics), model_id, version))

    def set_deployment(self, model_id: str, version: int, client: str, state: str, detail: str = "") -> None:
        """Record a gateway's answer; each one is stamped later than every earlier one, so the
        newest report wins even when the clock does not move between two of them."""
        with self._tx() as c:
            (latest,) = c.execute("SELECT coalesce(max(updated), 0) FROM deployments").fetchone()
            c.execute("INSERT INTO deployments VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (model_id, version, client) "
                      "DO UPDATE SET state = excluded.state, detail = excluded.detail, updated = excluded.updated",
                      (model_id, version, client, state, detail, max(time.time(), latest + 1e-6)))

    def deployments(self, model_id: str | None = None) -> list[Deployment]:
        """Every recorded (model version, gateway) state, newest first."""
        where, params = ("WHERE model_id = ?", (model_id,)) if model_id else ("", ())
        with self._lock:
            return [Deployment(*r) for r in self._db.execute(
                f"SELECT model_id, version, client, state, detail FROM deployments {where} "
                "ORDER BY updated DESC", params)]

    def running(self) -> dict[str, Deployment]:
        """Per gateway, the model version it last confirmed running (its newest ``active`` row)."""
        out: dict[str, Deployment] = {}
        for row in self.deployments():
            if row.state == "active":
                out.setdefault(row.client, row)
        return out

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
