"""The ``wheelfed`` command. Subcommands import their modules lazily, so the gateway's
commands work with the edge dependencies alone."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

from . import __version__


def _cmd_broker(args: argparse.Namespace) -> int:
    import signal
    import tempfile
    import threading
    from pathlib import Path

    from aggregator.broker import BrokerUser, MosquittoBroker, mosquitto_available

    users = [BrokerUser.parse(spec) for spec in args.user]
    if not users and not args.tls_cert_dir:
        raise SystemExit("wheelfed broker: give at least one --user NAME:PASSWORD (the aggregator and each gateway)")
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="wheelfed-broker-"))
    if args.embedded or not mosquitto_available():
        if not args.embedded:
            print("mosquitto is not installed; starting the embedded broker (MQTT 3.1.1 only)", file=sys.stderr)
        from aggregator.broker import EmbeddedBroker

        broker = EmbeddedBroker(run_dir, users=users, port=args.port, bind_address=args.bind)
    else:
        broker = MosquittoBroker(run_dir, users=users, port=args.port, bind_address=args.bind,
                                 tls_cert_dir=args.tls_cert_dir)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with broker:
        print(f"broker listening on {broker.host}:{broker.port} (state in {run_dir}); Ctrl-C stops it", flush=True)
        stop.wait()
    return 0


def _exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so ``with``/``finally`` blocks stop what the command started."""
    import signal

    def stop(*_: object) -> None:
        raise SystemExit(143)

    signal.signal(signal.SIGTERM, stop)


def _cmd_gateway(args: argparse.Namespace) -> int:
    from edge_client.gateway import Gateway, GatewayConfig
    from shared.transport.mqtt import MqttConfig, TlsConfig

    password = os.environ.get("WHEELFED_MQTT_PASSWORD")
    tls = TlsConfig(args.tls_ca, args.tls_cert, args.tls_key) if args.tls_ca else None
    if (args.tls_cert or args.tls_key) and not args.tls_ca:
        raise SystemExit("wheelfed gateway: --tls-cert/--tls-key need --tls-ca")
    mqtt = MqttConfig(host=args.host, port=args.port, username=None if tls else (args.username or args.client_id),
                      password=None if tls else password, protocol=args.protocol, tls=tls)
    gateway = Gateway(GatewayConfig(client_id=args.client_id, mqtt=mqtt))
    gateway.install_signal_handlers()
    gateway.run()
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from aggregator.smoke import SmokeConfig, run_smoke

    _exit_on_sigterm()
    print("WheelFed foundation smoke run: broker, aggregator round engine and gateway processes over MQTT.\n"
          "(The full fleet demo on recorded sensor sessions replaces this run when it lands.)\n", flush=True)
    try:
        report = run_smoke(SmokeConfig(n_gateways=args.gateways, broker=args.broker))
    except KeyboardInterrupt:
        print("interrupted: everything the demo started has been stopped", file=sys.stderr)
        return 130
    return 0 if report.rejoined else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wheelfed", description="Federated tree learning for wheelchair sensor gateways.")
    parser.add_argument("--version", action="version", version=f"wheelfed {__version__}")
    parser.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING (default), ERROR")
    parser.add_argument("--log-json", action="store_true", help="one JSON object per log line")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("broker", help="run an MQTT broker configured for WheelFed (mosquitto, else embedded)")
    p.add_argument("--user", action="append", default=[], metavar="NAME:PASSWORD",
                   help="a broker account; the name is the client id (repeat for the aggregator and every gateway)")
    p.add_argument("--port", type=int, default=1883)
    p.add_argument("--bind", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--run-dir", help="where the rendered config, password file and persistence go")
    p.add_argument("--tls-cert-dir", help="directory with ca.crt, broker.crt, broker.key: mutual TLS, CN = client id")
    p.add_argument("--embedded", action="store_true", help="use the embedded amqtt broker even if mosquitto exists")
    p.set_defaults(func=_cmd_broker)

    p = sub.add_parser("gateway", help="run a gateway: connect to the broker and answer the aggregator")
    p.add_argument("--client-id", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=1883)
    p.add_argument("--username", help="broker username (default: the client id); password from $WHEELFED_MQTT_PASSWORD")
    p.add_argument("--protocol", type=int, choices=(4, 5), default=5, help="MQTT 5 (default) or 4 = 3.1.1")
    p.add_argument("--tls-ca", help="CA certificate: connect with TLS (then the client certificate's CN is the identity)")
    p.add_argument("--tls-cert", help="this gateway's certificate (CN = client id)")
    p.add_argument("--tls-key", help="this gateway's private key")
    p.set_defaults(func=_cmd_gateway)

    p = sub.add_parser("demo", help="run the demo (for now: the foundation smoke scenario)")
    p.add_argument("--gateways", type=int, default=3)
    p.add_argument("--broker", choices=("auto", "mosquitto", "embedded"), default="auto")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .logs import setup_logging

    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, json_lines=args.log_json)
    func: Callable[[argparse.Namespace], int] = args.func
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
