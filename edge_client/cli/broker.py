"""``wheelfed broker``: mosquitto configured for WheelFed (the embedded broker without it)."""

from __future__ import annotations

import argparse
import sys

from edge_client.cli.arguments import add_subcommand, existing_dir, listen_port
from edge_client.cli.errors import CliError, UsageError


def broker_user(text: str):
    from aggregator.broker import BrokerUser

    try:
        return BrokerUser.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


broker_user.__name__ = "NAME:PASSWORD"


def run(args: argparse.Namespace) -> int:
    import signal
    import tempfile
    import threading
    from pathlib import Path

    from aggregator.broker import MosquittoBroker, mosquitto_available

    if not args.user and not args.tls_cert_dir:
        raise UsageError("give at least one --user NAME:PASSWORD (the aggregator and each gateway), "
                         "or --tls-cert-dir")
    if args.tls_cert_dir:
        missing = [name for name in ("ca.crt", "broker.crt", "broker.key") if not (args.tls_cert_dir / name).is_file()]
        if missing:
            raise UsageError(f"--tls-cert-dir {args.tls_cert_dir} lacks {', '.join(missing)}")
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="wheelfed-broker-"))
    if args.embedded or not mosquitto_available():
        if args.tls_cert_dir:
            raise CliError("the embedded broker has no TLS: install mosquitto (apt-get install mosquitto)")
        if not args.embedded:
            print("mosquitto is not installed; starting the embedded broker (MQTT 3.1.1 only)", file=sys.stderr)
        from aggregator.broker import EmbeddedBroker

        broker = EmbeddedBroker(run_dir, users=args.user, port=args.port, bind_address=args.bind)
    else:
        broker = MosquittoBroker(run_dir, users=args.user, port=args.port, bind_address=args.bind,
                                 tls_cert_dir=args.tls_cert_dir)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        broker.start()
    except (RuntimeError, TimeoutError) as exc:
        raise CliError(f"the broker did not start: {str(exc).splitlines()[0]} (log in {run_dir})") from None
    try:
        print(f"broker listening on {broker.host}:{broker.port} (state in {run_dir}); Ctrl-C stops it", flush=True)
        while not stop.wait(0.5):
            if not broker.running:
                raise CliError(f"the broker stopped unexpectedly (log in {run_dir})")
    finally:
        broker.stop()
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, "broker", "run an MQTT broker configured for WheelFed (mosquitto, else embedded)",
                       examples=["wheelfed broker --port 1883 --user aggregator:SECRET --user gw-1:PW1",
                                 "wheelfed broker --port 8883 --tls-cert-dir /etc/wheelfed/certs"])
    p.add_argument("--user", action="append", default=[], type=broker_user, metavar="NAME:PASSWORD",
                   help="a broker account; the name is the client id (repeat for the aggregator and every gateway)")
    p.add_argument("--port", type=listen_port, default=1883, help="listen port (0: any free port)")
    p.add_argument("--bind", default="127.0.0.1", help="listen address")
    p.add_argument("--run-dir", help="where the rendered config, password file and persistence go "
                                     "(default: a new temporary folder)")
    p.add_argument("--tls-cert-dir", type=existing_dir,
                   help="directory with ca.crt, broker.crt, broker.key: mutual TLS, CN = client id")
    p.add_argument("--embedded", action="store_true", help="use the embedded amqtt broker even if mosquitto exists")
    p.set_defaults(func=run)
