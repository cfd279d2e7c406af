"""``merge-worker``, ``site-aggregator`` and ``load-test``: the aggregator's helper processes
past one machine (SCALING.md).

``wheelfed merge-worker`` sums fleet-sum replies for the aggregator on an MQTT 5 shared
subscription (``aggregator.merge_workers``); ``wheelfed site-aggregator`` forwards the cloud's
requests to a clinic's gateways and sends their replies upstream pre-summed
(``aggregator.site_aggregator``); ``wheelfed load-test host`` runs a batch of simulated gateways,
the host processes of the load and soak runs (``aggregator.loadtest``). Each runs until SIGTERM
or Ctrl-C and exits 0.

Those modules are too heavy to import for every ``wheelfed`` command (numpy, paho), so the
options below name their defaults in words and the commands read them when they run;
``tests/cli/test_scaling_cli.py`` checks the words against the modules.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading

from edge_client.cli.arguments import (
    add_subcommand,
    existing_file,
    gateway_id,
    gateway_ids,
    port_number,
    positive_float,
    positive_int,
)
from edge_client.cli.connection import HOST_VARIABLE, PASSWORD_VARIABLE, PLAIN_PORT, PORT_VARIABLE
from edge_client.cli.errors import CliError, UsageError
from shared.protocol.topics import AGGREGATOR_ID

#: Environment variables holding a site aggregator's broker passwords (never on the command line).
UPSTREAM_PASSWORD_ENV = "WHEELFED_SITE_UPSTREAM_PASSWORD"
DOWNSTREAM_PASSWORD_ENV = "WHEELFED_SITE_DOWNSTREAM_PASSWORD"


def _wait_for_stop() -> None:
    """Block until SIGTERM or SIGINT (Ctrl-C), then restore their handlers: a service's clean end."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        stop.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# -- merge-worker --------------------------------------------------------------------------------
def _merge_worker(args: argparse.Namespace) -> int:
    from aggregator.merge_workers import DEFAULT_GROUP, WORKER_PREFIX, MergeSettings, MergeWorker
    from shared.transport.mqtt import MqttConfig

    worker_id = args.worker_id or f"{WORKER_PREFIX}1"
    if not worker_id.startswith(WORKER_PREFIX):
        raise UsageError(f"--worker-id must start with {WORKER_PREFIX!r}, got {worker_id!r}")
    defaults = MergeSettings()
    settings = MergeSettings(
        args.max_batch or defaults.max_batch, defaults.linger_s if args.linger_ms is None else args.linger_ms / 1000
    )
    password = os.environ.get(PASSWORD_VARIABLE)
    config = MqttConfig(host=args.host, port=args.port, username=worker_id if password else None, password=password)
    worker = MergeWorker(worker_id, config, group=args.group or DEFAULT_GROUP, settings=settings)
    try:
        worker.start()
    except ConnectionError as exc:
        raise CliError(str(exc)) from None
    try:
        _wait_for_stop()
    finally:
        worker.close()
    return 0


def _add_merge_worker(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(
        sub,
        "merge-worker",
        "sum fleet-sum replies for the aggregator on an MQTT 5 shared subscription, until SIGTERM",
        examples=["WHEELFED_MQTT_PASSWORD=PW wheelfed merge-worker --port 1883 --worker-id merge-1"],
    )
    p.add_argument(
        "--host",
        default=os.environ.get(HOST_VARIABLE, "127.0.0.1"),
        help=f"broker host (default: %(default)s; ${HOST_VARIABLE} sets it)",
    )
    p.add_argument(
        "--port",
        type=port_number,
        default=os.environ.get(PORT_VARIABLE) or PLAIN_PORT,
        help=f"broker port (default: %(default)s; ${PORT_VARIABLE} sets it)",
    )
    p.add_argument(
        "--worker-id",
        help=f"client id and broker user, starting with merge- (default: merge-1); password from ${PASSWORD_VARIABLE}",
    )
    p.add_argument("--group", help="shared subscription group (default: wheelfed-merge)")
    p.add_argument("--max-batch", type=positive_int, help="replies in one partial sum at most (default: 256)")
    p.add_argument(
        "--linger-ms", type=positive_float, help="publish a partial this long after its first reply (default: 20)"
    )
    p.set_defaults(func=_merge_worker)


# -- site-aggregator -----------------------------------------------------------------------------
def _add_site_broker(p: argparse.ArgumentParser, side: str, user_help: str) -> None:
    p.add_argument(f"--{side}-host", default="127.0.0.1", help=f"{side} broker host")
    p.add_argument(f"--{side}-port", type=port_number, default=PLAIN_PORT, help=f"{side} broker port")
    p.add_argument(f"--{side}-username", help=user_help)
    p.add_argument(f"--{side}-tls-ca", type=existing_file, help=f"CA certificate: TLS to the {side} broker")
    p.add_argument(f"--{side}-tls-cert", type=existing_file, help="this side's certificate (CN = its id)")
    p.add_argument(f"--{side}-tls-key", type=existing_file, help="this side's private key")


def _site_mqtt_config(args: argparse.Namespace, side: str, username: str, password_env: str):
    """One side's MqttConfig; its password comes from ``password_env``."""
    from shared.transport.mqtt import MqttConfig, TlsConfig

    ca, cert, key = (getattr(args, f"{side}_tls_{n}") for n in ("ca", "cert", "key"))
    if (cert or key) and not (ca and cert and key):
        raise UsageError(f"--{side}-tls-cert and --{side}-tls-key go together, with --{side}-tls-ca")
    tls = TlsConfig(str(ca), cert and str(cert), key and str(key)) if ca else None
    return MqttConfig(
        host=getattr(args, f"{side}_host"),
        port=getattr(args, f"{side}_port"),
        username=None if tls else (getattr(args, f"{side}_username") or username),
        password=None if tls else os.environ.get(password_env),
        protocol=args.protocol,
        tls=tls,
    )


def _site_aggregator(args: argparse.Namespace) -> int:
    from aggregator.site_aggregator import SiteAggregator, SiteConfig
    from shared.transport.mqtt import MqttTransport

    try:
        config = SiteConfig(args.site_id, tuple(args.members), deadline_s=args.deadline_s)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    up_config = _site_mqtt_config(args, "upstream", config.site_id, UPSTREAM_PASSWORD_ENV)
    down_config = _site_mqtt_config(args, "downstream", AGGREGATOR_ID, DOWNSTREAM_PASSWORD_ENV)
    upstream = MqttTransport(config.site_id, up_config, layout=config.upstream_layout, presence=False)
    downstream = MqttTransport(AGGREGATOR_ID, down_config, layout=config.downstream_layout, presence=False)
    site = SiteAggregator(config, upstream, downstream)
    try:
        for name, transport in (("upstream", upstream), ("downstream", downstream)):
            try:
                transport.connect()
            except ConnectionError as exc:
                raise CliError(f"{name}: {exc}") from None
        site.start()
        print(
            f"site {config.site_id}: answering for {', '.join(config.members)} "
            f"(cloud {up_config.host}:{up_config.port}, clinic {down_config.host}:{down_config.port})",
            flush=True,
        )
        _wait_for_stop()
        return 0
    finally:
        site.close()
        downstream.close()
        upstream.close()


def _add_site_aggregator(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(
        sub,
        "site-aggregator",
        "a clinic's site aggregator: relay the cloud's requests to the "
        "clinic's gateways, send their sums upstream pre-summed",
        description="A clinic's site aggregator: forwards the cloud's requests to the clinic's "
        "gateways on the local\n(downstream) broker and sends their fleet sums upstream "
        "pre-summed, until SIGTERM or Ctrl-C.\n"
        f"Passwords: ${UPSTREAM_PASSWORD_ENV}, ${DOWNSTREAM_PASSWORD_ENV}.",
        examples=[
            "wheelfed site-aggregator --site-id site-a --members gw-1,gw-2,gw-3 "
            "--upstream-host cloud.example --upstream-port 1883 --downstream-port 1884"
        ],
    )
    p.add_argument("--site-id", type=gateway_id, required=True, help="the site's account on the cloud's broker")
    p.add_argument("--members", type=gateway_ids, required=True, help="the gateways it answers for: gw-1,gw-2")
    p.add_argument(
        "--deadline-s",
        type=positive_float,
        default=30.0,
        help="wait for members' replies this long per round; below the cloud's deadline",
    )
    p.add_argument("--protocol", type=int, choices=(4, 5), default=5, help="MQTT 5, or 4 = 3.1.1 (both sides)")
    _add_site_broker(p, "upstream", "username on the cloud's broker (default: the site id)")
    _add_site_broker(p, "downstream", f"username on the local broker (default: {AGGREGATOR_ID})")
    p.set_defaults(func=_site_aggregator)


# -- load-test -----------------------------------------------------------------------------------
def _host(args: argparse.Namespace) -> int:
    from aggregator.loadtest import SECRET_ENV, host

    secret = os.environ.get(SECRET_ENV)
    if not secret:
        raise UsageError(f"${SECRET_ENV} is not set: the gateways' passwords derive from it")
    host(args.port, args.ids, secret)
    return 0


def _add_load_test(sub: argparse._SubParsersAction) -> None:
    example = "WHEELFED_SOAK_SECRET=S wheelfed load-test host --port 1883 sim-00000 sim-00001"
    group = add_subcommand(
        sub,
        "load-test",
        "simulated gateways for the load and soak runs (aggregator.loadtest starts them)",
        examples=[example],
    )
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = add_subcommand(
        actions,
        "host",
        "run the named simulated gateways in this process until SIGTERM (their "
        "passwords derive from $WHEELFED_SOAK_SECRET)",
        examples=[example],
    )
    p.add_argument("--port", type=port_number, required=True, help="the broker's port on this machine")
    p.add_argument("ids", nargs="+", type=gateway_id, metavar="ID", help="gateway ids (sim-NNNNN)")
    p.set_defaults(func=_host)


def add(sub: argparse._SubParsersAction) -> None:
    _add_merge_worker(sub)
    _add_site_aggregator(sub)
    _add_load_test(sub)
