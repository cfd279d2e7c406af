"""How commands reach the broker: the shared options and the connection with a clear failure."""

from __future__ import annotations

import argparse
import os

from edge_client.cli.arguments import existing_file, port_number
from edge_client.cli.errors import CliError, UsageError

PASSWORD_VARIABLE = "WHEELFED_MQTT_PASSWORD"
HOST_VARIABLE = "WHEELFED_MQTT_HOST"
PORT_VARIABLE = "WHEELFED_MQTT_PORT"
PLAIN_PORT, TLS_PORT = 1883, 8883


def add_broker_options(p: argparse.ArgumentParser, *, username_help: str) -> None:
    """``--host``/``--port``/``--username``/``--protocol``/``--tls-*``: the same spelling on every command."""
    p.add_argument(
        "--host",
        default=os.environ.get(HOST_VARIABLE, "127.0.0.1"),
        help=f"broker host (default: %(default)s; ${HOST_VARIABLE} sets it)",
    )
    p.add_argument(
        "--port",
        type=port_number,
        default=os.environ.get(PORT_VARIABLE),
        help=f"broker port (default: {PLAIN_PORT}, or {TLS_PORT} with --tls-ca; ${PORT_VARIABLE} sets it)",
    )
    p.add_argument("--username", help=username_help)
    p.add_argument("--protocol", type=int, choices=(4, 5), default=5, help="MQTT 5, or 4 = 3.1.1")
    p.add_argument(
        "--tls-ca",
        type=existing_file,
        help="CA certificate: connect with TLS (the certificate's CN is then the identity)",
    )
    p.add_argument("--tls-cert", type=existing_file, help="this side's certificate (CN = its id)")
    p.add_argument("--tls-key", type=existing_file, help="this side's private key")


def settle_broker_port(args: argparse.Namespace) -> None:
    """A command with broker options and no --port (nor $WHEELFED_MQTT_PORT) talks to the port
    its transport implies: 8883 with --tls-ca (the TLS broker's default), else 1883."""
    if hasattr(args, "tls_ca") and getattr(args, "port", None) is None:
        args.port = TLS_PORT if args.tls_ca else PLAIN_PORT


def mqtt_config(args: argparse.Namespace, default_username: str):
    """The MqttConfig of the broker options; the password comes from the environment."""
    from shared.transport.mqtt import MqttConfig, TlsConfig

    if (args.tls_cert or args.tls_key) and not args.tls_ca:
        raise UsageError("--tls-cert/--tls-key need --tls-ca")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    tls = (
        TlsConfig(str(args.tls_ca), args.tls_cert and str(args.tls_cert), args.tls_key and str(args.tls_key))
        if args.tls_ca
        else None
    )
    return MqttConfig(
        host=args.host,
        port=args.port,
        username=None if tls else (args.username or default_username),
        password=None if tls else os.environ.get(PASSWORD_VARIABLE),
        protocol=args.protocol,
        tls=tls,
    )


def explain_connect_failure(exc: Exception, config) -> str:
    """The transport's reason plus what to check: refused, not authorised, no answer."""
    text = str(exc)
    lowered = text.lower()
    if "not authorized" in lowered or "bad user name or password" in lowered:
        if config.tls is None and not os.environ.get(PASSWORD_VARIABLE):
            return f"{text} ({PASSWORD_VARIABLE} is not set: export the password of user {config.username!r})"
        return (
            f"{text} (check the user name {config.username!r} and {PASSWORD_VARIABLE})"
            if config.tls is None
            else f"{text} (check that the broker trusts this certificate and its CN)"
        )
    if "no answer" in lowered:
        return (
            f"{text} (something listens on {config.host}:{config.port}, but it does not speak MQTT"
            f"{'' if config.tls else ', or the broker expects TLS'})"
        )
    return text


def aggregator_transport(args: argparse.Namespace, *, timeout_s: float = 15.0):
    """The aggregator's MQTT connection from the common broker options (connected)."""
    from shared.protocol.topics import AGGREGATOR_ID
    from shared.transport.mqtt import MqttTransport

    config = mqtt_config(args, AGGREGATOR_ID)
    transport = MqttTransport(AGGREGATOR_ID, config, presence=False)
    try:
        transport.connect(wait=True, timeout_s=timeout_s)
    except (ConnectionError, TimeoutError, OSError) as exc:
        raise CliError(explain_connect_failure(exc, config)) from None
    return transport
