"""``wheelfed gateway``: serial -> pipeline -> window store, live recognition, and the aggregator's rounds.

Settings come from the command line, the environment and ``--config FILE`` (TOML,
``edge_client/gateway_config.py``), in that order of precedence, then the defaults.
``--check`` validates them and the machine (store folder, serial device, certificates, trust
keys, TFLite, disk space, the broker) and exits. Under systemd (``Type=notify``,
``deploy/gateway/wheelfed-gateway.service``) the gateway says when it is ready and pings the
watchdog from its main loop.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from edge_client.cli.arguments import (
    add_subcommand,
    existing_file,
    gateway_id,
    holdout_share,
    non_negative_float,
    port_number,
    positive_float,
    positive_int,
    serial_port,
)
from edge_client.cli.connection import HOST_VARIABLE, PASSWORD_VARIABLE, PORT_VARIABLE, add_broker_options, mqtt_config
from edge_client.cli.errors import CliError, UsageError

# A module import, its names looked up at call time: gateway_config uses this package's validators
# (edge_client.cli.arguments), so it may still be initialising when this module is imported.
from edge_client import gateway_config as config

if TYPE_CHECKING:
    from shared.transport.mqtt import MqttConfig

log = logging.getLogger(__name__)


class _NotGiven:
    """``--port``'s default: not None, so that ``settle_broker_port`` leaves the port for the
    config file to set (it would otherwise pick 1883/8883 before the file is read)."""

    def __repr__(self) -> str:
        return "unset"


NOT_GIVEN = _NotGiven()


def store_file(text: str) -> Path:
    """A window store to open or create: its folder exists, and an existing file is an SQLite
    database (a CSV or a recording is refused here, before anything is written next to it)."""
    path = Path(text)
    try:
        problem = config.store_problem(path)
    except OSError as exc:
        problem = f"cannot use {text} ({(exc.strerror or str(exc)).lower()})"
    if problem:
        hint = (
            ": point --store at the gateway's .db file, or a new name to create one"
            if "window store" in problem
            else ""
        )
        raise argparse.ArgumentTypeError(problem + hint)
    return path


store_file.__name__ = "window store"


def alert_rules_file(text: str) -> Path:
    """An alert rules file, read and checked while parsing: a broken rule is one line at start,
    not a gateway that silently never alerts."""
    from edge_client.alerts import AlertRulesError, load_rules

    path = existing_file(text)
    if not path.is_file():  # /dev/zero would be read forever
        raise argparse.ArgumentTypeError(f"{text} is not a regular file")
    try:
        load_rules(path)
    except AlertRulesError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return path


alert_rules_file.__name__ = "alert rules"


def settings_of(args: argparse.Namespace, environ: Mapping[str, str]) -> config.GatewaySettings:
    """The command line over the environment over ``--config`` over the defaults."""
    from_file = config.load_config(args.config) if args.config else {}
    from_env: dict[str, object] = {}
    if environ.get(HOST_VARIABLE):
        from_env["host"] = environ[HOST_VARIABLE]
    if environ.get(PORT_VARIABLE):
        try:
            from_env["port"] = port_number(environ[PORT_VARIABLE])
        except argparse.ArgumentTypeError as exc:
            raise config.ConfigError([f"${PORT_VARIABLE}: {exc}"]) from None
    given = {
        f.name: getattr(args, f.name)
        for f in fields(config.GatewaySettings)
        if getattr(args, f.name, None) not in (None, NOT_GIVEN)
    }
    if args.no_broker:  # the command line can only turn the broker off
        given["broker"] = False
    if "trust" in given:
        given["trust"] = tuple(given["trust"])
    return config.GatewaySettings.resolve(from_file, from_env, given)


def _print_stats(stats: dict[str, object]) -> None:
    print(" ".join(f"{k}={v}" for k, v in stats.items()), flush=True)


def sd_notify(state: str) -> None:
    """Tell systemd ``state`` (``READY=1``, ``WATCHDOG=1``) over ``$NOTIFY_SOCKET``, the protocol of
    sd_notify(3): one datagram on a unix socket ('@' = the abstract namespace). Not under
    systemd (no variable), nothing happens; a failure is logged, never fatal."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError as exc:
        log.warning("cannot notify systemd", extra={"state": state, "error": str(exc)})


def watchdog_interval_s() -> float | None:
    """Half of systemd's ``WatchdogSec`` (``$WATCHDOG_USEC``) when the watchdog is meant for this
    process, else None: pinging twice per period tolerates one late tick."""
    usec, pid = os.environ.get("WATCHDOG_USEC"), os.environ.get("WATCHDOG_PID")
    if not usec or not usec.isdigit() or int(usec) == 0 or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2e6


class Heartbeat:
    """The main loop's periodic callback: a status line every ``stats_every_s`` (0: none) and a
    watchdog ping every ``watchdog_s`` -- from the loop itself, so a hung loop misses its pings
    and systemd restarts the gateway."""

    def __init__(self, stats_every_s: float, watchdog_s: float | None) -> None:
        self.stats_every_s, self.watchdog_s = stats_every_s, watchdog_s
        periods = [x for x in (stats_every_s, watchdog_s) if x]
        self.every_s = min(periods) if periods else 0.0  # how often the loop must call (0: never)
        self._next_line = time.monotonic() + stats_every_s

    def __call__(self, stats: dict[str, object]) -> None:
        if self.watchdog_s:
            sd_notify("WATCHDOG=1")
        if self.stats_every_s and time.monotonic() >= self._next_line:
            self._next_line = time.monotonic() + self.stats_every_s
            _print_stats(stats)


def check(settings: config.GatewaySettings) -> int:
    """``--check``: each problem as one line on stderr (exit 1), else a short summary (exit 0)."""
    report = config.check_environment(settings)
    if report.problems:
        return report_problems(report.problems)
    print(f"OK: gateway {settings.client_id}: " + "; ".join(report.notes), flush=True)
    return 0


def _broker_config(settings: config.GatewaySettings, client_id: str) -> MqttConfig:
    """The MqttConfig (``connection.mqtt_config`` from the settings); the password from
    ``$WHEELFED_MQTT_PASSWORD``, else ``password_file``."""
    import dataclasses

    options = argparse.Namespace(
        host=settings.host,
        port=config.broker_port(settings),
        username=settings.username,
        protocol=settings.protocol,
        tls_ca=settings.tls_ca,
        tls_cert=settings.tls_cert,
        tls_key=settings.tls_key,
    )
    mqtt = mqtt_config(options, client_id)
    if mqtt.tls is None and mqtt.password is None and settings.password_file is not None:
        try:
            password = settings.password_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"password_file {settings.password_file}: cannot read it ({exc})") from None
        mqtt = dataclasses.replace(mqtt, password=password)
    return mqtt


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_of(args, os.environ)
    except config.ConfigError as exc:
        if args.check:
            return report_problems(exc.problems)
        raise _config_usage_error(exc.problems) from None
    if args.check:
        return check(settings)
    problems = settings.problems()
    if problems:
        raise _config_usage_error(problems)
    return serve(settings)


def report_problems(problems: tuple[str, ...] | list[str]) -> int:
    """``--check``'s failure: each problem as one line on stderr, exit 1."""
    for problem in problems:
        print(f"wheelfed gateway --check: {problem}", file=sys.stderr, flush=True)
    return 1


def _config_usage_error(problems: tuple[str, ...] | list[str]) -> UsageError:
    """All problems on stderr, the last one as the command's failure line (exit 2)."""
    for problem in problems[:-1]:
        print(f"wheelfed gateway: {problem}", file=sys.stderr, flush=True)
    return UsageError(problems[-1])


def serve(settings: config.GatewaySettings) -> int:
    from edge_client.alerts import DEFAULT_RULES, load_rules
    from edge_client.gateway import Gateway, GatewayConfig, GatewayError
    from edge_client.live import LiveConfig
    from edge_client.store import RetentionPolicy

    client_id = settings.client_id
    if client_id is None:  # run() serves only settings without problems(), which name a missing id
        raise _config_usage_error(settings.problems())
    try:
        store = store_file(str(settings.store or f"{client_id}-windows.db"))
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"store{'' if settings.store else ' (default)'}: {exc}") from None
    retention = RetentionPolicy(
        max_windows=settings.max_windows, max_age_s=settings.max_age_days * 86400 if settings.max_age_days else None
    )
    mqtt = _broker_config(settings, client_id) if settings.broker else None
    try:
        gateway = Gateway(
            GatewayConfig(
                client_id=client_id,
                store_path=store,
                serial_port=settings.serial,
                baudrate=settings.baud,
                mqtt=mqtt,
                session_id=settings.session,
                retention=retention,
                holdout_fraction=settings.holdout_fraction,
                model_dir=settings.model_dir,
                trusted_keys=settings.trust,
                party_key_file=settings.party_key_file,
                engine=settings.engine,
                alert_rules=load_rules(settings.alerts) if settings.alerts else DEFAULT_RULES,
                live=LiveConfig(publish_every_s=settings.publish_every),
            )
        )
        gateway.install_signal_handlers()
        gateway.start()
    except GatewayError as exc:
        raise CliError(str(exc)) from None
    broker = f"{settings.host}:{config.broker_port(settings)}" if settings.broker else "-"
    print(
        f"gateway {settings.client_id}: session {gateway.session_id}, store {store}, serial {settings.serial or '-'}, "
        f"broker {broker}",
        flush=True,
    )
    sd_notify(f"READY=1\nSTATUS=session {gateway.session_id}, broker {broker}")
    heartbeat = Heartbeat(settings.stats_every, watchdog_interval_s())
    gateway.run(stats_every_s=heartbeat.every_s, on_stats=heartbeat if heartbeat.every_s else None)
    _print_stats(gateway.final_stats)
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    defaults = config.GatewaySettings()
    p = add_subcommand(
        sub,
        "gateway",
        "run a gateway: serial -> pipeline -> window store, and answer the aggregator",
        examples=[
            "WHEELFED_MQTT_PASSWORD=PW1 wheelfed gateway --client-id gw-1 --serial /dev/ttyUSB0 --trust aggregator.pub",
            "wheelfed gateway --client-id gw-1 --serial /dev/pts/3 --store gw-1.db --no-broker",
        ],
        description="Run a gateway: serial -> pipeline -> window store, and answer the aggregator.\n\n"
        "Every option can also be set in --config FILE (TOML; keys as the options, e.g. "
        "client_id,\n[serial] device/baud, [retention], [broker]: see deploy/gateway/"
        "gateway.toml).\nPrecedence: command line > environment > config file > default.\n"
        "wheelfed gateway --config FILE --check checks the settings and this machine.",
    )
    p.add_argument("--config", type=existing_file, metavar="FILE", help="settings file (TOML); the command line wins")
    p.add_argument(
        "--check",
        action="store_true",
        help="check the settings and this machine (store, serial device, certificates, trust keys, TFLite, "
        "disk space, broker), print each problem on one line and exit (1 if any)",
    )
    p.add_argument(
        "--client-id", type=gateway_id, help="this gateway's id (= its broker user); required here or in --config"
    )
    p.add_argument(
        "--serial",
        type=serial_port,
        help="sensor link: device path, pty path or pyserial URL (default: none, no sensors)",
    )
    p.add_argument("--baud", type=positive_int, help=f"serial baud rate (default: {defaults.baud})")
    p.add_argument("--store", type=store_file, help="window store (SQLite); default CLIENT_ID-windows.db")
    p.add_argument(
        "--session",
        help="session id for the stored windows (default: client id + start time; vertical "
        "jobs match windows by start time, so a person's gateways need no common session)",
    )
    p.add_argument("--max-windows", type=positive_int, help="retention: keep at most this many windows")
    p.add_argument("--max-age-days", type=positive_float, help="retention: drop windows stored longer ago")
    p.add_argument(
        "--holdout-fraction",
        type=holdout_share,
        help="keep the last share of each session's labelled windows out of training, for evaluation "
        f"(default: {defaults.holdout_fraction})",
    )
    p.add_argument(
        "--model-dir", type=Path, help="where the active and previous model live (default: CLIENT_ID-models/)"
    )
    p.add_argument(
        "--trust",
        action="append",
        type=existing_file,
        metavar="PUBKEY",
        help="the aggregator's public key file (wheelfed keygen); repeat during a key rotation",
    )
    p.add_argument(
        "--party-key-file",
        type=existing_file,
        metavar="FILE",
        help="vertical jobs: the hex key this person's gateways share (wheelfed vertical keygen; one "
        "key per person, on each of its gateways): windows are matched by their start time "
        "under it; the aggregator never sees it (default: $WHEELFED_PARTY_KEY_FILE)",
    )
    p.add_argument(
        "--engine",
        choices=config.ENGINES,
        help=f"inference engine (default: {defaults.engine}: TFLite when installed and faster)",
    )
    p.add_argument(
        "--alerts", type=alert_rules_file, help="JSON file of alert rules (default: pressure relief 30 min, lying 2 h)"
    )
    p.add_argument(
        "--publish-every",
        type=positive_float,
        help=f"seconds between prediction batches (default: {defaults.publish_every:g})",
    )
    p.add_argument(
        "--stats-every",
        type=non_negative_float,
        help=f"seconds between status lines, 0: none (default: {defaults.stats_every:g})",
    )
    p.add_argument("--no-broker", action="store_true", help="collect only; do not connect to an MQTT broker")
    add_broker_options(
        p,
        username_help="broker user name (default: the client id); password from "
        f"${PASSWORD_VARIABLE}, else password_file in --config",
    )
    p.set_defaults(func=run, host=None, port=NOT_GIVEN, protocol=None)
    for action in p._actions:  # the shared options' help says where their defaults come from
        if action.dest == "host":
            action.help = f"broker host (default: {defaults.host}; ${HOST_VARIABLE} sets it)"
        elif action.dest == "protocol":
            action.help = f"MQTT 5, or 4 = 3.1.1 (default: {defaults.protocol})"
