"""``wheelfed broker``: mosquitto configured for WheelFed (the embedded broker without it).

Two ways to serve, from the two configs in ``deploy/mosquitto/``:

- ``--tls-cert-dir DIR`` (made by ``deploy/certs``): mutual TLS on 8883, every interface by default;
  a client certificate's CN is its client id. The production setting.
- ``--password-file FILE`` (or ``--user NAME:PASSWORD``): plain TCP on 1883, loopback only, with a
  warning: passwords and model pushes would cross a network in clear. For tests, the demo and
  everything on one machine.
"""

from __future__ import annotations

import argparse
import sys

from edge_client.cli.arguments import add_subcommand, existing_dir, existing_file, listen_port
from edge_client.cli.connection import PLAIN_PORT, TLS_PORT
from edge_client.cli.errors import CliError, UsageError

PLAIN_TCP_WARNING = (
    "wheelfed broker: WARNING: plain TCP without TLS on {where}: passwords and model pushes "
    "travel in clear; loopback only (tests, the demo): give --tls-cert-dir DIR (deploy/certs "
    "makes one) for anything else"
)
USER_PASSWORD_WARNING = (
    "wheelfed broker: warning: --user NAME:PASSWORD leaves the password visible to every "
    "local user in ps; put the accounts in a --password-file (mode 0600) instead"
)


def broker_user(text: str):
    from aggregator.broker import BrokerUser

    try:
        return BrokerUser.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"user {text.partition(':')[0]!r}: {exc}") from None


broker_user.__name__ = "NAME:PASSWORD"


def _users(args: argparse.Namespace) -> list:
    """The accounts of --password-file and --user (each name once)."""
    from aggregator.broker import read_password_file

    if args.user:
        print(USER_PASSWORD_WARNING, file=sys.stderr, flush=True)
    users = list(args.user)
    if args.password_file:
        try:
            users += read_password_file(args.password_file)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    names = [u.name for u in users]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"user {', '.join(twice)} given more than once (--user and --password-file)")
    return users


def run(args: argparse.Namespace) -> int:
    import signal
    import tempfile
    import threading
    from pathlib import Path

    from aggregator.broker import MosquittoBroker, mosquitto_available

    users = _users(args)
    tls = args.tls_cert_dir is not None
    if tls:
        if users:
            raise UsageError(
                "--user/--password-file do not go with --tls-cert-dir: under TLS the client "
                "certificate's CN is the identity (deploy/certs makes one per client)"
            )
        missing = [name for name in ("ca.crt", "broker.crt", "broker.key") if not (args.tls_cert_dir / name).is_file()]
        if missing:
            raise UsageError(f"--tls-cert-dir {args.tls_cert_dir} lacks {', '.join(missing)} (deploy/certs makes them)")
    if args.crl is not None and not tls:
        raise UsageError("--crl goes with --tls-cert-dir: revocation is of TLS client certificates")
    if not tls and not users:
        raise UsageError(
            "give --tls-cert-dir DIR (mutual TLS; deploy/certs makes DIR), or for plain TCP on "
            "loopback the aggregator's and each gateway's account: --password-file FILE (or --user "
            "NAME:PASSWORD, visible in ps)"
        )
    port = TLS_PORT if tls and args.port is None else PLAIN_PORT if args.port is None else args.port
    bind = args.bind or ("0.0.0.0" if tls else "127.0.0.1")
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="wheelfed-broker-"))
    try:
        if args.embedded or not mosquitto_available():
            if tls:
                raise CliError("the embedded broker has no TLS: install mosquitto (apt-get install mosquitto)")
            if not args.embedded:
                print("mosquitto is not installed; starting the embedded broker (MQTT 3.1.1 only)", file=sys.stderr)
            from aggregator.broker import EmbeddedBroker

            broker = EmbeddedBroker(run_dir, users=users, port=port, bind_address=bind)
        else:
            broker = MosquittoBroker(
                run_dir, users=users, port=port, bind_address=bind, tls_cert_dir=args.tls_cert_dir, crl_file=args.crl
            )
    except ValueError as exc:  # plain TCP off loopback
        raise UsageError(str(exc)) from None
    if not tls:
        print(PLAIN_TCP_WARNING.format(where=f"{bind}:{broker.port}"), file=sys.stderr, flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        broker.start()
    except (RuntimeError, TimeoutError) as exc:
        raise CliError(f"the broker did not start: {str(exc).splitlines()[0]} (log in {run_dir})") from None
    try:
        print(
            f"broker listening on {broker.host}:{broker.port} ({'mutual TLS' if tls else 'plain TCP'}; state in "
            f"{run_dir}); Ctrl-C stops it",
            flush=True,
        )
        while not stop.wait(0.5):
            if not broker.running:
                raise CliError(f"the broker stopped unexpectedly (log in {run_dir})")
    finally:
        broker.stop()
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(
        sub,
        "broker",
        "run an MQTT broker configured for WheelFed (mosquitto, else embedded)",
        examples=[
            "wheelfed broker --port 8883 --tls-cert-dir /etc/wheelfed/certs",
            "wheelfed broker --port 1883 --user aggregator:SECRET --user gw-1:PW1",
        ],
    )
    p.add_argument(
        "--tls-cert-dir",
        type=existing_dir,
        help="directory with ca.crt, broker.crt, broker.key (deploy/certs makes it): mutual TLS, CN = client id",
    )
    p.add_argument(
        "--crl",
        type=existing_file,
        metavar="FILE",
        help="with --tls-cert-dir: refuse the certificates this revocation list names "
        "(deploy/cloud/crl.sh writes crl.pem; restart the broker after it changes)",
    )
    p.add_argument(
        "--password-file",
        type=existing_file,
        metavar="FILE",
        help="plain TCP on loopback: lines NAME:PASSWORD, the name being the client id (the aggregator "
        "and every gateway); mode 0600",
    )
    p.add_argument(
        "--user",
        action="append",
        default=[],
        type=broker_user,
        metavar="NAME:PASSWORD",
        help="an account on the command line (visible in ps: prefer --password-file)",
    )
    p.add_argument(
        "--port",
        type=listen_port,
        help=f"listen port (default: {TLS_PORT} with TLS, else {PLAIN_PORT}; 0: any free port)",
    )
    p.add_argument(
        "--bind", help="listen address (default: 0.0.0.0 with TLS, else 127.0.0.1; plain TCP only on loopback)"
    )
    p.add_argument(
        "--run-dir",
        help="where the rendered config, password hashes and persistence go, mode 0700 "
        "(default: a new temporary folder)",
    )
    p.add_argument(
        "--embedded", action="store_true", help="use the embedded amqtt broker even if mosquitto exists (plain TCP)"
    )
    p.set_defaults(func=run)
