"""Fixtures of the server tests: a real PostgreSQL cluster on a free port, and registry URLs.

The cluster is made once per test session with Debian's ``initdb`` in a temporary folder and
``pg_ctl start`` on a free loopback port (as the ``postgres`` user when the tests run as root,
which PostgreSQL refuses to run as); every test that asks for it gets a database of its own.
The test command (``deploy/run tests``) installs the ``postgresql`` package; without its
binaries the PostgreSQL half of the tests is skipped with that reason.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def _pg_bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresCluster:
    """A throwaway cluster: ``database()`` makes a fresh database and returns its URL."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.data, self.port = folder, folder / "data", _free_port()
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(folder, "postgres", "postgres")

    def _run(self, *argv: str) -> subprocess.CompletedProcess:
        command = ["runuser", "-u", "postgres", "--", *argv] if self.as_postgres else list(argv)
        return subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        self._run(_pg_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.folder} -c fsync=off"
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.folder / "log"), "-w", "start")

    def stop(self) -> None:
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def database(self) -> str:
        import sqlalchemy as sa

        name = f"t_{uuid.uuid4().hex[:10]}"
        engine = sa.create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            connection.exec_driver_sql(f"CREATE DATABASE {name}")
        engine.dispose()
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    if _pg_bin("initdb") is None or _pg_bin("pg_ctl") is None:
        pytest.skip("PostgreSQL's initdb/pg_ctl are not installed (deploy/run tests installs Debian's postgresql)")
    folder = Path(tempfile.mkdtemp(prefix="wheelfed-pg-"))
    cluster = PostgresCluster(folder)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def registry_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh registry: a SQLite file, then a database of the session's PostgreSQL cluster."""
    if request.param == "sqlite":
        return str(tmp_path / "registry.db")
    return request.getfixturevalue("postgres_cluster").database()
