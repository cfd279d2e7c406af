"""``deploy/cloud/``: the compose stack validates and holds together, the systemd units pass
``systemd-analyze verify``, the scripts pass shellcheck, the broker config is the TLS template's,
the revocation list revokes, and backup -> wipe -> restore gives the same registry -- every row of
every table, on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import copy
import fnmatch
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from aggregator.fleet_status import GatewayRow
from aggregator.registry import JobRules, Registry, ScheduleRecord
from tests.cli.cli_support import REPO
from tests.deploy.certs_support import certificate_dir
from tests.deploy.test_gateway_install import need, unit_settings, verify_unit
from tests.server.conftest import postgres_cluster  # noqa: F401  (the fixture: a real PostgreSQL)
from tests.server.test_registry_db import small_model

CLOUD = REPO / "deploy" / "cloud"
COMPOSE = CLOUD / "compose.yaml"
BACKUP, RESTORE, CRL = CLOUD / "backup.sh", CLOUD / "restore.sh", CLOUD / "crl.sh"
TLS_TEMPLATE = REPO / "deploy" / "mosquitto" / "wheelfed-tls.conf.in"
#: The only host ports the stack may publish: the broker's TLS port and the server's HTTP port.
ALLOWED_HOST_PORTS = {"8883", "8080"}


# -- compose ------------------------------------------------------------------------------------


def filled_env(tmp_path: Path) -> Path:
    """``.env.example`` with its two required secrets filled in, as an operator would."""
    text = CLOUD.joinpath(".env.example").read_text()
    text = re.sub(r"^POSTGRES_PASSWORD=$", "POSTGRES_PASSWORD=pw", text, flags=re.M)
    text = re.sub(r"^OPERATOR_TOKENS=$", "OPERATOR_TOKENS=tok", text, flags=re.M)
    env = tmp_path / "env"
    env.write_text(text)
    return env


def compose_command() -> list[str]:
    """``docker compose`` (the plugin) if it runs here, else Debian's ``docker-compose`` (1.29)."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30).returncode == 0:
        return [docker, "compose"]
    return [need("docker-compose", "docker-compose")]


def compose_config(compose: Path, env: Path) -> subprocess.CompletedProcess:
    """``compose config`` of ``compose`` as if it were deploy/cloud/compose.yaml (relative paths
    from deploy/cloud/)."""
    return subprocess.run(
        [*compose_command(), "--project-directory", str(CLOUD), "--env-file", str(env), "-f", str(compose), "config"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=CLOUD,
    )


def structure_problems(doc: dict) -> list[str]:
    """What a compose file needs beyond its schema, for this stack: every service has an image or
    a build and a health check, every named volume it mounts is declared, ``depends_on`` names
    services, and no host port is published but the broker's and the server's."""
    problems = []
    services = doc.get("services") or {}
    declared = set(doc.get("volumes") or {})
    for name, service in services.items():
        if "image" not in service and "build" not in service:
            problems.append(f"{name}: neither image nor build")
        if not (service.get("healthcheck") or {}).get("test"):
            problems.append(f"{name}: no healthcheck")
        for volume in service.get("volumes") or []:
            source = volume["source"] if isinstance(volume, dict) else str(volume).split(":")[0]
            if not source.startswith(("/", ".", "$", "~")) and source not in declared:
                problems.append(f"{name}: volume {source} is not declared")
        for dependency in service.get("depends_on") or {}:
            if dependency not in services:
                problems.append(f"{name}: depends on unknown service {dependency}")
        for port in service.get("ports") or []:
            published = str(port["published"]) if isinstance(port, dict) else str(port).split(":")[-2]
            if published not in ALLOWED_HOST_PORTS:
                problems.append(f"{name}: publishes host port {published}")
    return problems


def test_compose_file_passes_docker_compose_config(tmp_path: Path) -> None:
    """The compose tool's own validation (its schema, variables, references): exit 0."""
    run = compose_config(COMPOSE, filled_env(tmp_path))
    assert run.returncode == 0, run.stderr


def test_docker_compose_config_rejects_a_broken_file(tmp_path: Path) -> None:
    """The validator above can fail: a misspelt key is refused."""
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE.read_text().replace("healthcheck:", "healthchek:", 1))
    run = compose_config(broken, filled_env(tmp_path))
    assert run.returncode != 0 and "healthchek" in run.stderr


@pytest.fixture(scope="module")
def resolved(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """compose.yaml as compose reads it, with .env.example filled in (variables substituted,
    short syntax expanded)."""
    run = compose_config(COMPOSE, filled_env(tmp_path_factory.mktemp("env")))
    assert run.returncode == 0, run.stderr
    return yaml.safe_load(run.stdout)


def test_the_stack_holds_together(resolved: dict) -> None:
    """The resolved file: the three services, each with its health check, declared volumes, only
    ports 8883 and 8080 on the host, the server waiting for a healthy database and broker and
    reaching them by service name."""
    doc = resolved
    assert structure_problems(doc) == []
    services = doc["services"]
    assert set(services) == {"broker", "db", "server"}
    assert set(doc["volumes"]) == {"broker-data", "db-data", "backups"}
    server = services["server"]
    assert server["build"]["dockerfile"] == "deploy/cloud/Dockerfile"
    assert Path(server["build"]["context"]).resolve() == REPO
    assert {k: v["condition"] for k, v in server["depends_on"].items()} == {
        "db": "service_healthy",
        "broker": "service_healthy",
    }
    env = server["environment"]
    assert env["WHEELFED_REGISTRY"] == "postgresql+psycopg://wheelfed@db:5432/wheelfed"
    assert (env["WHEELFED_LISTEN"], env["WHEELFED_MQTT_HOST"], env["PGPASSWORD"]) == ("0.0.0.0", "broker", "pw")
    assert env["WHEELFED_OPERATOR_TOKENS"] == "tok"
    # the server's settings are ServerConfig's: every WHEELFED_ variable names one of its fields
    from aggregator.server.config import ServerConfig

    config = ServerConfig.load(environ={k: v for k, v in env.items() if k.startswith("WHEELFED_")})
    assert (config.listen, config.mqtt_port, config.tls_cert) == ("0.0.0.0", 8883, "/etc/wheelfed/certs/aggregator.crt")
    assert services["db"]["environment"]["POSTGRES_PASSWORD"] == "pw"
    assert services["db"]["image"].startswith("postgres:15")  # pg_dump 15 in the server image


@pytest.mark.parametrize(
    "mistake, problem",
    [
        (lambda d: d["services"]["db"].pop("image"), "db: neither image nor build"),
        (lambda d: d["services"]["broker"].pop("healthcheck"), "broker: no healthcheck"),
        (lambda d: d.pop("volumes"), "db: volume db-data is not declared"),
        (lambda d: d["services"]["db"].update(ports=["5432:5432"]), "db: publishes host port 5432"),
        (lambda d: d["services"]["server"].update(depends_on={"database": {}}), "server: depends on unknown service"),
    ],
)
def test_structure_check_catches_real_mistakes(resolved: dict, mistake, problem: str) -> None:
    doc = copy.deepcopy(resolved)
    assert structure_problems(doc) == []
    mistake(doc)
    assert any(p.startswith(problem) for p in structure_problems(doc)), structure_problems(doc)


def test_dockerfile_installs_the_server_extra_and_the_backup_scripts() -> None:
    text = CLOUD.joinpath("Dockerfile").read_text()
    assert re.search(r'^RUN pip install --no-cache-dir "/src\[server\]"', text, re.M)
    assert re.search(
        r"^COPY deploy/cloud/backup.sh deploy/cloud/restore.sh deploy/cloud/registry-lib.sh "
        r"/usr/local/bin/$",
        text,
        re.M,
    )
    assert "postgresql-client-15" in text and re.search(r"^USER wheelfed$", text, re.M)
    # every package setuptools looks for is copied in
    for package in ("shared", "edge_client", "aggregator", "firmware_bridge"):
        assert re.search(rf"^COPY {package} \./{package}$", text, re.M), package


def test_dockerignore_keeps_the_venv_out_of_the_context_and_every_copied_source_in() -> None:
    """The context is the repository root: without .dockerignore a build sends .venv (GBs) to the
    daemon; with a wrong one a COPY fails. Docker's patterns are close enough to fnmatch here."""
    ignored = [p for p in (REPO / ".dockerignore").read_text().splitlines() if p and not p.startswith("#")]
    sources = [
        s
        for line in CLOUD.joinpath("Dockerfile").read_text().splitlines()
        if line.startswith("COPY ")
        for s in line.split()[1:-1]
    ]
    assert {".venv", ".git", "tests"} <= set(ignored)
    for source in sources:
        assert not any(fnmatch.fnmatch(source, p) or source.startswith(p + "/") for p in ignored), source


def mosquitto_settings(text: str) -> dict[str, str]:
    return {
        k: v
        for k, _, v in (line.partition(" ") for line in text.splitlines() if line and line[0] != "#")
        if k != "log_type"
    }


def test_the_compose_broker_config_is_the_tls_template_with_the_revocation_list_on() -> None:
    template = mosquitto_settings(TLS_TEMPLATE.read_text())
    ours = mosquitto_settings(CLOUD.joinpath("mosquitto.conf").read_text())
    paths = {"cafile", "certfile", "keyfile", "acl_file", "persistence_location", "listener", "user", "log_dest"}
    assert set(ours) == set(template) | {"crlfile"}
    assert {k: v for k, v in ours.items() if k not in paths | {"crlfile"}} == {
        k: v for k, v in template.items() if k not in paths
    }
    assert ours["crlfile"] == "/mosquitto/certs/crl.pem" and ours["listener"] == "8883 0.0.0.0"


# -- systemd units and scripts ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["wheelfed-server.service", "wheelfed-broker.service"])
def test_units_pass_systemd_analyze_verify_and_are_hardened(tmp_path: Path, name: str) -> None:
    source = CLOUD / name
    stand_in = tmp_path / "opt" / "wheelfed-server" / "venv" / "bin" / "wheelfed"
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text("#!/bin/sh\n")
    stand_in.chmod(0o755)
    unit = tmp_path / name
    unit.write_text(source.read_text().replace("/opt/wheelfed-server", str(tmp_path / "opt" / "wheelfed-server")))
    verify_unit(unit)
    got = unit_settings(source.read_text())
    state = "/var/lib/" + name.removesuffix(".service")
    for key, value in {
        "Restart": "on-failure",
        "RestartPreventExitStatus": "2",
        "User": "wheelfed",
        "ProtectSystem": "strict",
        "ReadWritePaths": state,
        "StateDirectory": state.split("/")[-1],
        "NoNewPrivileges": "yes",
        "CapabilityBoundingSet": "",
        "PrivateDevices": "yes",
        "SystemCallFilter": "@system-service",
        "ProtectHome": "yes",
    }.items():
        assert got[key] == [value], key


def test_units_run_commands_the_cli_accepts(tmp_path: Path) -> None:
    """Each unit's ExecStart, its files replaced by real ones, parses with wheelfed's own parser
    (a misspelt option or a wrong subcommand would exit 2 here, as under systemd)."""
    from edge_client.cli import build_parser

    config, certs = tmp_path / "server.toml", tmp_path / "certs"
    config.write_text("")
    certs.mkdir()
    (certs / "crl.pem").write_text("")
    for name, command in (("wheelfed-server.service", "server"), ("wheelfed-broker.service", "broker")):
        argv = unit_settings(CLOUD.joinpath(name).read_text())["ExecStart"][0].split()
        assert argv[0] == "/opt/wheelfed-server/venv/bin/wheelfed"
        argv = [
            a.replace("/etc/wheelfed/server.toml", str(config)).replace("/etc/wheelfed/certs", str(certs))
            for a in argv[1:]
        ]
        args = build_parser().parse_args(argv)
        assert args.func.__module__ == f"aggregator.cli.{command}"
        if command == "server":
            assert args.config == config
        else:
            assert (args.tls_cert_dir, args.crl, args.run_dir) == (certs, certs / "crl.pem", "/var/lib/wheelfed-broker")


@pytest.mark.parametrize(
    "script", [BACKUP, RESTORE, CRL, CLOUD / "registry-lib.sh", REPO / "deploy" / "certs", REPO / "deploy" / "run"]
)
def test_scripts_pass_shellcheck(script: Path) -> None:
    """-x: backup.sh and restore.sh are checked with the library they source."""
    run = subprocess.run(
        [need("shellcheck", "shellcheck"), "-x", "--severity=style", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stdout


def run_script(script: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def verify(certs: Path, cert: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            "openssl",
            "verify",
            "-crl_check",
            "-CRLfile",
            str(certs / "crl.pem"),
            "-CAfile",
            str(certs / "ca.crt"),
            str(cert),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_crl_revokes_one_gateway_and_lets_it_be_reissued(tmp_path: Path) -> None:
    certs = certificate_dir(tmp_path / "certs", "gw-1", "gw-2")
    first = run_script(CRL, "-o", str(certs))
    assert first.returncode == 0, first.stderr
    assert verify(certs, certs / "gw-1.crt").returncode == 0  # an empty list revokes nobody
    old = (certs / "gw-1.crt").read_bytes()
    run = run_script(CRL, "-o", str(certs), "--revoke", "gw-1")
    assert run.returncode == 0, run.stderr
    assert re.match(r"revoked gw-1 \(serial [0-9A-F]+\): pair moved to .*/revoked/\n", run.stdout)
    (revoked,) = (certs / "revoked").glob("gw-1-*.crt")
    assert revoked.read_bytes() == old and not (certs / "gw-1.crt").exists()
    refused = verify(certs, revoked)
    assert refused.returncode != 0 and "certificate revoked" in refused.stdout + refused.stderr
    assert verify(certs, certs / "gw-2.crt").returncode == 0
    # rotation: deploy/certs issues gw-1 anew; the new certificate passes, the old stays revoked
    reissue = subprocess.run(
        [str(REPO / "deploy" / "certs"), "-o", str(certs), "gw-1"], capture_output=True, text=True, timeout=60
    )
    assert reissue.returncode == 0, reissue.stderr
    assert verify(certs, certs / "gw-1.crt").returncode == 0
    assert verify(certs, revoked).returncode != 0


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("--revoke", "gw/1"),
            "--revoke gw/1: not a client id (usage: deploy/cloud/crl.sh [-o DIR] [--days N] [--revoke CLIENT_ID]...)",
        ),
        (("--revoke", "gw-9"), "CERTS/gw-9.crt is missing: nothing to revoke for gw-9"),
    ],
)
def test_crl_refuses_bad_input_in_one_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    certs = certificate_dir(tmp_path / "certs", "gw-1")
    run = run_script(CRL, "-o", str(certs), *args)
    assert (
        run.returncode in (1, 2) and run.stderr == "deploy/cloud/crl.sh: " + message.replace("CERTS", str(certs)) + "\n"
    )
    assert not (certs / "crl.pem").exists()


# -- backup and restore -------------------------------------------------------------------------


def populate(url: str) -> None:
    """A registry with a row in every table: two model versions, deployments, gateways, a job
    with rounds (one carrying a checkpoint), a schedule and a promotion."""
    model = small_model()
    with Registry(url) as registry:
        registry.add("act", model, metrics={"accuracy": 0.75})
        registry.add(
            "act", small_model(1), metrics={"accuracy": 0.8}, config={"n_rounds": 3}, parent="act:v1", job_id="job-1"
        )
        registry.set_deployment("act", 1, "gw-1", "active")
        registry.set_deployment("act", 2, "gw-2", "rejected", "feature set")
        registry.save_gateways(
            [GatewayRow("gw-1", True, 5.0, "act:v1", 10, 8, "up", "ort", 3, 0, "PUSH", "", {"PUSH": 8}, "fs1")]
        )
        registry.add_job(
            "job-1", "fedscs_xgb", {"n_rounds": 3}, model_id="act", total=3, rules=JobRules(min_gateways=2)
        )
        registry.update_job("job-1", state="running", participants=["gw-1", "gw-2"])
        registry.complete_round("job-1", 1, 3, 2, 2, {"loss": 0.5}, 1.25, model.to_cbor())
        registry.complete_round("job-1", 2, 3, 2, 1, {"loss": 0.25}, 1.5, None)
        registry.add_schedule(
            ScheduleRecord(
                "nightly", "act", "fedscs_xgb", {"n_rounds": 5}, None, "30 2 * * *", 500, 0.01, 0.25, True, 0.0, 0, 1.0
            )
        )
        registry.add_promotion(
            job_id="job-1",
            model_id="act",
            candidate=2,
            baseline=1,
            metric="accuracy",
            candidate_value=0.8,
            baseline_value=0.75,
            threshold=0.01,
            decision="promoted",
            detail="",
        )


def snapshot(url: str) -> dict[str, list[tuple]]:
    """Every row of every table (the Alembic version included), sorted: the registry's whole
    content, compared bit for bit (floats and model bytes exactly)."""
    import sqlalchemy as sa

    from aggregator.registry import registry_url

    engine = sa.create_engine(registry_url(url))
    try:
        metadata = sa.MetaData()
        metadata.reflect(engine)
        with engine.connect() as connection:
            return {
                name: sorted((tuple(row) for row in connection.execute(table.select())), key=repr)
                for name, table in metadata.tables.items()
            }
    finally:
        engine.dispose()


def registry_view(url: str) -> tuple:
    """What the registry's own API reads back (models with their bytes, deployments, jobs,
    rounds with checkpoints, gateways, schedules, promotions)."""
    with Registry(url) as r:
        return (
            [(m, r.model_bytes(m.model_id, m.version)[1]) for m in r.list()],
            r.deployments(),
            r.jobs(),
            r.rounds("job-1", with_checkpoints=True),
            r.gateways(),
            r.schedules(),
            r.promotions(),
        )


def backup_and_restore(url: str, backup: Path, wipe) -> None:
    before, view = snapshot(url), registry_view(url)
    assert {name for name, rows in before.items() if rows} >= {
        "models",
        "deployments",
        "gateways",
        "jobs",
        "job_rounds",
        "schedules",
        "promotions",
        "alembic_version",
    }
    run = run_script(BACKUP, url, str(backup))
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"backed up {url} to {backup} ({backup.stat().st_size} bytes)\n"
    assert backup.stat().st_mode & 0o077 == 0
    wipe()
    assert all(not rows for name, rows in snapshot(url).items() if name != "alembic_version")
    run = run_script(RESTORE, url, str(backup))
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"restored {url} from {backup}\n"
    assert snapshot(url) == before
    assert registry_view(url) == view
    # a registry that went on after the backup is put back exactly as well (--clean / page copy)
    with Registry(url) as registry:
        registry.add("act", small_model(2))
        registry.set_deployment("act", 3, "gw-3", "active")
        registry.add_promotion(
            job_id="job-2",
            model_id="act",
            candidate=3,
            baseline=2,
            metric="accuracy",
            candidate_value=0.9,
            baseline_value=0.8,
            threshold=0.01,
            decision="promoted",
            detail="",
        )
    assert snapshot(url) != before
    run = run_script(RESTORE, url, str(backup))
    assert run.returncode == 0, run.stderr
    assert snapshot(url) == before
    # and the restored registry keeps working: the next version and promotion id follow on
    with Registry(url) as registry:
        assert registry.add("act", small_model(3)).version == 3
        assert (
            registry.add_promotion(
                job_id="job-3",
                model_id="act",
                candidate=3,
                baseline=2,
                metric="accuracy",
                candidate_value=0.9,
                baseline_value=0.8,
                threshold=0.01,
                decision="rejected",
                detail="",
            ).id
            == 2
        )


def test_sqlite_backup_wipe_restore_gives_the_same_registry(tmp_path: Path) -> None:
    url = str(tmp_path / "registry.db")
    populate(url)

    def wipe() -> None:
        for path in tmp_path.glob("registry.db*"):
            path.unlink()
        Registry(url).close()  # a new, empty registry where the old one was

    backup_and_restore(url, tmp_path / "registry.backup", wipe)


def test_sqlite_backup_is_consistent_while_a_writer_holds_the_wal(tmp_path: Path) -> None:
    """A write transaction in the WAL, not yet checkpointed: the backup has the committed rows."""
    url = str(tmp_path / "registry.db")
    populate(url)
    registry = Registry(url)  # held open: its pages live in registry.db-wal
    registry.add("act", small_model(4))
    try:
        assert (tmp_path / "registry.db-wal").stat().st_size > 0
        run = run_script(BACKUP, url, str(tmp_path / "b.db"))
        assert run.returncode == 0, run.stderr
        with sqlite3.connect(tmp_path / "b.db") as copy:
            assert copy.execute("SELECT max(version) FROM models").fetchone() == (3,)
            assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        registry.close()
    assert not (tmp_path / "b.db-wal").exists()


def test_postgresql_backup_wipe_restore_gives_the_same_registry(postgres_cluster, tmp_path: Path) -> None:  # noqa: F811
    if shutil.which("pg_dump") is None or shutil.which("pg_restore") is None:
        pytest.fail("pg_dump/pg_restore are not installed: apt-get install -y postgresql-client")
    url = postgres_cluster.database()
    populate(url)
    name = url.rsplit("/", 1)[1]

    def wipe() -> None:
        import sqlalchemy as sa

        engine = sa.create_engine(postgres_cluster.admin_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            connection.exec_driver_sql(f"DROP DATABASE {name} WITH (FORCE)")
            connection.exec_driver_sql(f"CREATE DATABASE {name}")
        engine.dispose()

    backup_and_restore(url, tmp_path / "registry.dump", wipe)


def test_restore_refuses_a_backup_of_the_other_kind_and_backup_never_overwrites(
    postgres_cluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    sqlite_url = str(tmp_path / "registry.db")
    populate(sqlite_url)
    backup = tmp_path / "registry.backup"
    assert run_script(BACKUP, sqlite_url, str(backup)).returncode == 0
    again = run_script(BACKUP, sqlite_url, str(backup))
    assert (again.returncode, again.stderr) == (
        1,
        f"deploy/cloud/backup.sh: {backup} exists: give a new file name (backups are never overwritten)\n",
    )
    pg_url = postgres_cluster.database()
    before = snapshot(pg_url)
    run = run_script(RESTORE, pg_url, str(backup))
    assert (run.returncode, run.stderr) == (
        1,
        f"deploy/cloud/restore.sh: {backup} is a SQLite backup; {pg_url} is a PostgreSQL registry\n",
    )
    assert snapshot(pg_url) == before
    junk = tmp_path / "junk"
    junk.write_text("hello")
    run = run_script(RESTORE, sqlite_url, str(junk))
    assert (run.returncode, run.stderr) == (
        1,
        f"deploy/cloud/restore.sh: {junk} is neither a pg_dump custom-format "
        "file nor a SQLite database (not made by backup.sh)\n",
    )
    assert run_script(BACKUP, sqlite_url).returncode == 2
    run = run_script(BACKUP, "mysql://wheelfed@db/wheelfed", str(tmp_path / "m.dump"))
    assert (run.returncode, run.stderr) == (
        1,
        "deploy/cloud/backup.sh: unsupported registry URL mysql://...: give a SQLite file or a postgresql URL\n",
    )
    assert not (tmp_path / "m.dump").exists() and not (tmp_path / "m.dump.partial").exists()


def test_scripts_document_themselves() -> None:
    for script in (BACKUP, RESTORE, CRL):
        run = run_script(script, "--help")
        usage = [line.strip() for line in run.stdout.splitlines() if line.strip().startswith("deploy/cloud/")]
        assert run.returncode == 0 and usage and usage[0].startswith(f"deploy/cloud/{script.name} "), run.stdout
        assert os.access(script, os.X_OK)


@pytest.mark.mosquitto
def test_a_broker_with_the_crl_on_refuses_the_revoked_gateway_and_admits_the_others(tmp_path: Path) -> None:
    """The systemd broker's set-up (deploy/README.md): the TLS template and ACL copied to a deploy
    folder of its own, certificates from deploy/certs, the list from crl.sh given as ``--crl``
    (``crl_file``); real mosquitto, real TLS connections."""
    from aggregator.broker import MosquittoBroker, mosquitto_available
    from shared.transport.mqtt import MqttConfig, MqttTransport, TlsConfig

    if not mosquitto_available():
        pytest.fail("mosquitto is not installed (the test command installs it)")
    certs = certificate_dir(tmp_path / "certs", "gw-1", "gw-2")
    assert run_script(CRL, "-o", str(certs), "--revoke", "gw-1").returncode == 0
    (revoked_crt,) = (certs / "revoked").glob("gw-1-*.crt")
    deploy = tmp_path / "broker" / "mosquitto"
    deploy.mkdir(parents=True)
    shutil.copy(REPO / "deploy" / "mosquitto" / "acl", deploy / "acl")
    shutil.copy(TLS_TEMPLATE, deploy / TLS_TEMPLATE.name)

    def connects(client: str, crt: Path, key: Path, port: int) -> bool:
        tls = TlsConfig(str(certs / "ca.crt"), str(crt), str(key))
        transport = MqttTransport(client, MqttConfig(host="localhost", port=port, tls=tls), presence=False)
        try:
            transport.connect(timeout_s=5)
        except (ConnectionError, TimeoutError, OSError):
            return False
        transport.close()
        return True

    with MosquittoBroker(
        tmp_path / "run",
        tls_cert_dir=certs,
        crl_file=certs / "crl.pem",
        deploy_dir=tmp_path / "broker",
        bind_address="127.0.0.1",
    ) as broker:
        assert re.search(rf"^crlfile {re.escape(str(certs.resolve()))}/crl\.pem$", broker.config_path.read_text(), re.M)
        assert connects("gw-2", certs / "gw-2.crt", certs / "gw-2.key", broker.port)
        assert not connects("gw-1", revoked_crt, revoked_crt.with_suffix(".key"), broker.port)


def test_the_units_settings_file_loads_and_points_where_the_units_allow() -> None:
    """deploy/cloud/server.toml as ServerConfig reads it: TLS to the local broker, PostgreSQL over
    its socket, the API on loopback; and server.env.example holds only ServerConfig variables."""
    from aggregator.server.config import ENV_PREFIX, ServerConfig

    config = ServerConfig.load(CLOUD / "server.toml", environ={})
    assert (config.registry, config.listen, config.mqtt_host, config.mqtt_port) == (
        "postgresql+psycopg://wheelfed@/wheelfed?host=/var/run/postgresql",
        "127.0.0.1",
        "localhost",
        8883,
    )
    assert (config.tls_key, config.signing_key) == (
        "/etc/wheelfed/certs/aggregator.key",
        "/etc/wheelfed/aggregator.key",
    )
    names = re.findall(r"^([A-Z_]+)=", CLOUD.joinpath("server.env.example").read_text(), re.M)
    assert names and ServerConfig.load(environ={n: "t" for n in names}).operator_tokens == ("t",)
    assert all(n.startswith(ENV_PREFIX) for n in names)
    assert "EnvironmentFile=-/etc/wheelfed/server.env" in CLOUD.joinpath("wheelfed-server.service").read_text()


def test_a_socket_url_like_server_toml_s_backs_up_and_restores(postgres_cluster, tmp_path: Path) -> None:  # noqa: F811
    """server.toml's registry form (user@/db?host=SOCKET_DIR, no password) through Registry,
    backup.sh and restore.sh."""
    tcp_url = postgres_cluster.database()
    name = tcp_url.rsplit("/", 1)[1]
    url = f"postgresql+psycopg://postgres@/{name}?host={postgres_cluster.folder}&port={postgres_cluster.port}"
    populate(url)
    before = snapshot(tcp_url)
    assert before["models"]
    assert run_script(BACKUP, url, str(tmp_path / "r.dump")).returncode == 0
    with Registry(url) as registry:
        registry.add("act", small_model(5))
    run = run_script(RESTORE, url, str(tmp_path / "r.dump"))
    assert run.returncode == 0, run.stderr
    assert snapshot(tcp_url) == before


# -- deploy/README.md ---------------------------------------------------------------------------


def cloud_guide_commands() -> list[str]:
    """The ``console`` lines of deploy/README.md's server sections (continuations joined)."""
    text = (REPO / "deploy" / "README.md").read_text()
    guide = text[text.index("\n## The clinic's server") :]
    blocks = re.findall(r"^```console\n(.*?)^```", guide, re.M | re.S)
    return [line.strip() for block in blocks for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def test_the_guide_s_certificate_steps_run_as_written(tmp_path: Path) -> None:
    """Steps 1, 6, 7 and 8 on the CA's machine, in the guide's order, in a fresh folder: each
    exits 0, and at the end gw-1 (rotated) and the aggregator verify under the list while
    gw-2 (retired) and gw-1's old certificate do not."""
    steps = [
        c for c in cloud_guide_commands() if c.startswith(("deploy/certs ", "deploy/cloud/crl.sh ", "wheelfed keygen "))
    ]
    assert len(steps) >= 6
    wheelfed = str(Path(sys.executable).parent / "wheelfed")  # this venv's
    for step in steps:
        argv = step.split()
        argv[0] = wheelfed if argv[0] == "wheelfed" else str(REPO / argv[0])
        run = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert run.returncode == 0, f"{step}: {run.stderr}"
    certs = tmp_path / "certs"
    assert (tmp_path / "aggregator.key").exists() and (tmp_path / "aggregator.pub").exists()
    for good in ("gw-1", "aggregator"):
        assert verify(certs, certs / f"{good}.crt").returncode == 0, good
    revoked = sorted((certs / "revoked").glob("*.crt"))
    assert [p.name[:5] for p in revoked] == ["gw-1-", "gw-2-"]
    assert all(verify(certs, p).returncode != 0 for p in revoked)
    assert (
        "DNS:broker"
        in subprocess.run(
            ["openssl", "x509", "-in", str(certs / "broker.crt"), "-noout", "-ext", "subjectAltName"],
            capture_output=True,
            text=True,
        ).stdout
    )


def test_the_guide_s_wheelfed_lines_parse_and_its_paths_exist(tmp_path: Path) -> None:
    from edge_client.cli import build_parser

    config = tmp_path / "server.toml"
    config.write_text("")
    lines = [c for c in cloud_guide_commands() if re.search(r"(?:^|[ /])wheelfed server ", c)]
    assert lines
    for line in lines:
        argv = line[line.index("wheelfed server") :].split()[1:]
        args = build_parser().parse_args([str(config) if a == "/etc/wheelfed/server.toml" else a for a in argv])
        assert args.check and args.http_port == 0
    guide = (REPO / "deploy" / "README.md").read_text()
    guide = guide[guide.index("\n## The clinic's server") :]
    cited = set(re.findall(r"(?<![\w/])(deploy/[\w.-]+(?:/[\w.-]+)*)", guide))
    assert {"deploy/cloud/crl.sh", "deploy/cloud/backup.sh", "deploy/mosquitto/acl"} <= cited
    assert [p for p in cited if not (REPO / p.rstrip(".")).exists()] == []


# -- the stack's configuration, run without containers ------------------------------------------


@pytest.mark.slow
@pytest.mark.mosquitto
def test_the_compose_configuration_runs_healthy_without_containers(
    resolved: dict,
    postgres_cluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    """What the containers would run, run here: mosquitto with deploy/cloud/mosquitto.conf (its
    container paths pointed at real folders, the revocation list on), and ``wheelfed server``
    with the server service's ``WHEELFED_*`` environment (service names pointed at loopback, a
    real PostgreSQL): the server's own health-check command from compose.yaml passes (status ok,
    broker connected over mutual TLS), the API wants the operator token, and SIGTERM ends it
    gracefully (143)."""
    import getpass
    import json
    import signal
    import time
    import urllib.error
    import urllib.request

    from aggregator.broker.mosquitto import _port_open, find_free_port

    certs = certificate_dir(tmp_path / "certs", "gw-1")
    assert run_script(CRL, "-o", str(certs)).returncode == 0
    broker_port, http_port = find_free_port(), find_free_port()
    conf = CLOUD.joinpath("mosquitto.conf").read_text()
    for container, here in (
        ("/mosquitto/certs", str(certs)),
        ("/mosquitto/config/acl", str(REPO / "deploy" / "mosquitto" / "acl")),
        ("/mosquitto/data/", f"{tmp_path}/data/"),
        ("listener 8883 0.0.0.0", f"listener {broker_port} 127.0.0.1"),
        ("user mosquitto", f"user {getpass.getuser()}"),
    ):
        assert container in conf
        conf = conf.replace(container, here)
    (tmp_path / "data").mkdir()
    (tmp_path / "mosquitto.conf").write_text(conf)
    key = tmp_path / "aggregator.key"
    assert (
        subprocess.run(
            [str(Path(sys.executable).parent / "wheelfed"), "keygen", "-o", str(key)], capture_output=True, timeout=60
        ).returncode
        == 0
    )

    env = dict(resolved["services"]["server"]["environment"])
    pg = postgres_cluster.database()
    assert env["WHEELFED_REGISTRY"].startswith("postgresql+psycopg://wheelfed@db:5432/")
    env.update(
        WHEELFED_REGISTRY=pg,
        WHEELFED_MQTT_HOST="localhost",
        WHEELFED_MQTT_PORT=str(broker_port),
        WHEELFED_HTTP_PORT=str(http_port),
        WHEELFED_SIGNING_KEY=str(key),
    )
    for name in ("WHEELFED_TLS_CA", "WHEELFED_TLS_CERT", "WHEELFED_TLS_KEY"):
        env[name] = env[name].replace("/etc/wheelfed/certs", str(certs))
    health = resolved["services"]["server"]["healthcheck"]["test"]
    assert health[:2] == ["CMD", "python"]
    health = [sys.executable, *(a.replace(":8080/", f":{http_port}/") for a in health[2:])]

    broker = subprocess.Popen(
        ["mosquitto", "-c", str(tmp_path / "mosquitto.conf")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    server = None
    try:
        deadline = time.monotonic() + 10
        while not _port_open("127.0.0.1", broker_port):
            assert broker.poll() is None and time.monotonic() < deadline, "mosquitto did not start"
            time.sleep(0.05)
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "wheelfed"), "--log-level", "INFO", "server"],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=tmp_path,
        )
        deadline = time.monotonic() + 60
        while subprocess.run(health, capture_output=True, timeout=30).returncode != 0:
            assert server.poll() is None, server.stdout.read()
            assert time.monotonic() < deadline, "the server never became healthy"
            time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/api/health", timeout=5) as reply:
            state = json.load(reply)
        assert state["status"] == "ok" and state["broker_connected"] is True
        request = urllib.request.Request(
            f"http://127.0.0.1:{http_port}/api/jobs",
            method="POST",
            data=b'{"model_id": "activity"}',
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 401
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 143
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait()
        broker.terminate()
        broker.wait(10)
