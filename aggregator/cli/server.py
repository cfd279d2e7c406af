"""``wheelfed server``: the long-running aggregator service -- REST API, dashboard, jobs that
survive a restart, scheduled retraining (aggregator side; ``aggregator.server``).

Settings come from defaults, then ``--config FILE`` (TOML), then ``WHEELFED_*`` variables, then
the options below, each overriding the one before. FastAPI, uvicorn and SQLAlchemy are imported
only when the command runs: the gateway's commands never load them.
"""

from __future__ import annotations

import argparse
import signal
import sys

from edge_client.cli.arguments import add_subcommand, existing_file, fraction, listen_port, port_number, positive_float
from edge_client.cli.errors import CliError, UsageError


def _config(args: argparse.Namespace):
    from aggregator.server.config import ServerConfig

    overrides = dict(
        registry=args.registry,
        listen=args.listen,
        http_port=args.http_port,
        mqtt_host=args.host,
        mqtt_port=args.mqtt_port,
        mqtt_username=args.username,
        mqtt_protocol=args.protocol,
        tls_ca=args.mqtt_tls_ca and str(args.mqtt_tls_ca),
        tls_cert=args.mqtt_tls_cert and str(args.mqtt_tls_cert),
        tls_key=args.mqtt_tls_key and str(args.mqtt_tls_key),
        signing_key=args.key and str(args.key),
        deadline_s=args.deadline,
        min_fraction=args.min_fraction,
        schedule_tick_s=args.schedule_tick,
    )
    try:
        return ServerConfig.load(args.config, **overrides)
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise CliError("wheelfed server needs the server extra: pip install 'wheelfed[server]'") from None
    from aggregator.registry import RegistryError
    from aggregator.server.app import Server, bind, serve
    from edge_client.cli.connection import explain_connect_failure

    config = _config(args)
    try:
        sock = bind(config.listen, config.http_port)
    except OSError as exc:
        raise CliError(f"cannot listen on {config.listen}:{config.http_port}: {exc.strerror or exc}") from None
    try:
        server = Server(config)
    except RegistryError as exc:
        sock.close()
        raise CliError(str(exc)) from None
    try:
        if args.check:
            server.connect().close()
        else:
            server.start()
    except (ConnectionError, TimeoutError, OSError) as exc:
        sock.close()
        server.registry.close()
        raise CliError(explain_connect_failure(exc, config.mqtt_config())) from None
    if args.check:
        return _report(server, sock)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host

    def ready() -> None:
        print(
            f"wheelfed server: dashboard http://{shown}:{port}/  API http://{shown}:{port}/docs  registry "
            f"{server.registry.where}  broker {config.mqtt_host}:{config.mqtt_port}",
            flush=True,
        )

    # uvicorn stops gracefully on SIGTERM/SIGINT (the lifespan's end stops the server's parts),
    # then raises the signal again: end with 128 + its number and one line, not a traceback
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        serve(server, sock, on_ready=ready)
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    except _Terminated:
        code = 128 + signal.SIGTERM
    else:
        code = 0
    finally:
        signal.signal(signal.SIGTERM, previous)
    print("wheelfed server: stopped", file=sys.stderr, flush=True)
    return code


class _Terminated(Exception):
    """SIGTERM, raised again by uvicorn after its graceful shutdown."""


def _terminated(_signum: int, _frame: object) -> None:
    raise _Terminated


def _report(server, sock) -> int:
    """``--check``: what the server would run with, then exit without serving."""
    config, registry = server.config, server.registry
    host, port = sock.getsockname()[:2]
    sock.close()
    running = registry.jobs(state="running") + registry.jobs(state="queued")
    print(
        f"registry {registry.where}: {len(registry.list())} model versions, {len(registry.schedules())} schedules, "
        f"{len(running)} jobs to resume",
        flush=True,
    )
    print(f"broker {config.mqtt_host}:{config.mqtt_port}: connected as {config.mqtt_username}", flush=True)
    print(
        f"http {host}:{port}: free; signing key: {config.signing_key or 'none (no deploys)'}; "
        f"tokens: {'required' if config.read_tokens or config.operator_tokens else 'none (open API)'}",
        flush=True,
    )
    registry.close()
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(
        sub,
        "server",
        "run the aggregator service: REST API, dashboard, jobs, scheduled retraining",
        description="Run the aggregator as a service (aggregator side): it tracks every gateway from its "
        "retained status,\nruns training jobs (they resume after a crash from their last stored "
        "round), evaluates,\npromotes and rolls out retrained models on schedules, and serves the "
        "REST API (/docs)\nand a dashboard (/).\n\n"
        "Settings: defaults < --config FILE (TOML, keys as in aggregator/server/config.py) <\n"
        "WHEELFED_* variables (WHEELFED_REGISTRY, WHEELFED_HTTP_PORT, WHEELFED_MQTT_HOST,\n"
        "WHEELFED_MQTT_PASSWORD, WHEELFED_OPERATOR_TOKENS, ...) < the options below.\n"
        "SIGTERM or Ctrl-C stops it gracefully: a running job stops at a round boundary and "
        "resumes\nat the next start. Run it with the options of an example, without --check; "
        "it prints\nthe dashboard's URL.",
        examples=[
            "WHEELFED_MQTT_PASSWORD=SECRET wheelfed server --registry server.db --http-port 0 --check",
            "WHEELFED_MQTT_PASSWORD=SECRET wheelfed server --registry server.db --key aggregator.key "
            "--http-port 0 --check",
        ],
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="open (and upgrade) the registry, connect to the broker, check the HTTP port, print what "
        "it found and exit",
    )
    p.add_argument(
        "--config",
        type=existing_file,
        metavar="FILE",
        help="TOML file with the settings (overridden by WHEELFED_* variables and by these options)",
    )
    p.add_argument(
        "--registry",
        default=None,
        metavar="DB",
        help="SQLite file or database URL, e.g. postgresql+psycopg://wheelfed@db/wheelfed "
        "(default: wheelfed-registry.db)",
    )
    p.add_argument(
        "--listen", default=None, metavar="ADDRESS", help="address of the API and dashboard (default: 127.0.0.1)"
    )
    p.add_argument(
        "--http-port",
        type=listen_port,
        default=None,
        metavar="PORT",
        help="port of the API and dashboard; 0 picks a free one and prints it (default: 8080)",
    )
    p.add_argument(
        "--key",
        type=existing_file,
        default=None,
        metavar="FILE",
        help="the aggregator's signing key (wheelfed keygen); without it models are trained and "
        "judged but not deployed",
    )
    p.add_argument(
        "--deadline",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="seconds a round waits for replies (default: 120)",
    )
    p.add_argument(
        "--min-fraction",
        type=fraction,
        default=None,
        metavar="SHARE",
        help="share of the selected gateways a round needs (default: 0.5)",
    )
    p.add_argument(
        "--schedule-tick",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="seconds between two looks at the retraining schedules (default: 30)",
    )
    p.add_argument("--host", default=None, help="broker host (default: 127.0.0.1; $WHEELFED_MQTT_HOST)")
    # dest names of their own: the server resolves --port from its config (see ServerConfig.mqtt_port)
    p.add_argument(
        "--port",
        dest="mqtt_port",
        type=port_number,
        default=None,
        metavar="PORT",
        help="broker port (default: 1883, 8883 with --tls-ca; $WHEELFED_MQTT_PORT)",
    )
    p.add_argument(
        "--username", default=None, help="broker user name (default: aggregator); password from $WHEELFED_MQTT_PASSWORD"
    )
    p.add_argument("--protocol", type=int, choices=(4, 5), default=None, help="MQTT 5 (default), or 4 = 3.1.1")
    for name, what in (
        ("ca", "CA certificate: connect with TLS"),
        ("cert", "this side's certificate (CN = aggregator)"),
        ("key", "this side's private key"),
    ):
        p.add_argument(
            f"--tls-{name}", dest=f"mqtt_tls_{name}", type=existing_file, default=None, metavar="FILE", help=what
        )
    p.set_defaults(func=run)
