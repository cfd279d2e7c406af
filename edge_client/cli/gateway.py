"""``wheelfed gateway``: serial -> pipeline -> window store, live recognition, and the aggregator's rounds."""

from __future__ import annotations

import argparse
from pathlib import Path

from edge_client.cli.arguments import (add_subcommand, existing_file, gateway_id, holdout_share, non_negative_float,
                                       positive_float, positive_int, serial_port)
from edge_client.cli.connection import add_broker_options, mqtt_config
from edge_client.cli.errors import CliError, UsageError

_SQLITE_HEADER = b"SQLite format 3\x00"


def store_file(text: str) -> Path:
    """A window store to open or create: its folder exists, and an existing file is an SQLite
    database (a CSV or a recording is refused here, before anything is written next to it)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give the store's file name (e.g. gw-1.db)")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"the folder {folder} does not exist (create it first)")
    if path.exists():
        try:
            with path.open("rb") as fh:
                head = fh.read(len(_SQLITE_HEADER))
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {text} ({(exc.strerror or str(exc)).lower()})") from None
        if head and head != _SQLITE_HEADER:
            raise argparse.ArgumentTypeError(f"{text} is not a window store (not an SQLite database): point --store "
                                             "at the gateway's .db file, or a new name to create one")
    return path


store_file.__name__ = "window store"


def alert_rules_file(text: str) -> tuple:
    """An alert rules file, read and checked while parsing: a broken rule is one line at start,
    not a gateway that silently never alerts."""
    from edge_client.alerts import AlertRulesError, load_rules

    path = existing_file(text)
    try:
        return load_rules(path)
    except AlertRulesError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


alert_rules_file.__name__ = "alert rules"


def _print_stats(stats: dict[str, object]) -> None:
    print(" ".join(f"{k}={v}" for k, v in stats.items()), flush=True)


def run(args: argparse.Namespace) -> int:
    from edge_client.alerts import DEFAULT_RULES
    from edge_client.gateway import Gateway, GatewayConfig, GatewayError
    from edge_client.live import LiveConfig
    from edge_client.store import RetentionPolicy

    try:
        store = args.store or store_file(f"{args.client_id}-windows.db")
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"argument --store (default): {exc}") from None
    retention = RetentionPolicy(max_windows=args.max_windows,
                                max_age_s=args.max_age_days * 86400 if args.max_age_days else None)
    mqtt = None if args.no_broker else mqtt_config(args, args.client_id)
    try:
        gateway = Gateway(GatewayConfig(client_id=args.client_id, store_path=store, serial_port=args.serial,
                                        baudrate=args.baud, mqtt=mqtt, session_id=args.session,
                                        retention=retention, holdout_fraction=args.holdout_fraction,
                                        model_dir=Path(args.model_dir) if args.model_dir else None,
                                        trusted_keys=tuple(args.trust), engine=args.engine,
                                        alert_rules=args.alerts or DEFAULT_RULES,
                                        live=LiveConfig(publish_every_s=args.publish_every)))
        gateway.install_signal_handlers()
        gateway.start()
    except GatewayError as exc:
        raise CliError(str(exc)) from None
    print(f"gateway {args.client_id}: session {gateway.session_id}, store {store}, serial {args.serial or '-'}, "
          f"broker {'-' if args.no_broker else f'{args.host}:{args.port}'}", flush=True)
    gateway.run(stats_every_s=args.stats_every, on_stats=_print_stats if args.stats_every else None)
    _print_stats(gateway.final_stats)
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, "gateway", "run a gateway: serial -> pipeline -> window store, and answer the aggregator",
                       examples=["WHEELFED_MQTT_PASSWORD=PW1 wheelfed gateway --client-id gw-1 --serial /dev/ttyUSB0 "
                                 "--trust aggregator.pub",
                                 "wheelfed gateway --client-id gw-1 --serial /dev/pts/3 --store gw-1.db --no-broker"])
    p.add_argument("--client-id", required=True, type=gateway_id, help="this gateway's id (= its broker user)")
    p.add_argument("--serial", type=serial_port,
                   help="sensor link: device path, pty path or pyserial URL (none: no sensors)")
    p.add_argument("--baud", type=positive_int, default=115200, help="serial baud rate")
    p.add_argument("--store", type=store_file, help="window store (SQLite); default CLIENT_ID-windows.db")
    p.add_argument("--session", help="session id for the stored windows (default: client id + start time)")
    p.add_argument("--max-windows", type=positive_int, help="retention: keep at most this many windows")
    p.add_argument("--max-age-days", type=positive_float, help="retention: drop windows stored longer ago")
    p.add_argument("--holdout-fraction", type=holdout_share, default=0.0,
                   help="keep the last share of each session's labelled windows out of training, for evaluation")
    p.add_argument("--model-dir", help="where the active and previous model live (default: CLIENT_ID-models/)")
    p.add_argument("--trust", action="append", default=[], type=existing_file, metavar="PUBKEY",
                   help="the aggregator's public key file (wheelfed keygen); repeat during a key rotation")
    p.add_argument("--engine", choices=("auto", "numpy", "tflite"), default="auto",
                   help="inference engine (auto: TFLite when installed and faster)")
    p.add_argument("--alerts", type=alert_rules_file,
                   help="JSON file of alert rules (default: pressure relief 30 min, lying 2 h)")
    p.add_argument("--publish-every", type=positive_float, default=10.0, help="seconds between prediction batches")
    p.add_argument("--stats-every", type=non_negative_float, default=10.0,
                   help="seconds between status lines (0: none)")
    p.add_argument("--no-broker", action="store_true", help="collect only; do not connect to an MQTT broker")
    add_broker_options(p, username_help="broker user name (default: the client id); password from "
                                        "$WHEELFED_MQTT_PASSWORD")
    p.set_defaults(func=run)
