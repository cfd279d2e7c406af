"""The ``wheelfed`` command.

One module per group of subcommands (``broker``, ``gateway``, ``recordings``, ``train``,
``models``, ``demo``), each with an ``add(subparsers)``; they import their heavy modules lazily,
so the gateway's commands work with the edge dependencies alone. It lives with the gateway's
package because the gateway is where it must stay lightest
(``tests/edge_client/test_edge_dependencies.py``); ``shared/`` imports nothing above it.

Every expected failure ends in one line and exit code 2 (usage) or 1 (runtime): arguments are
checked while they are parsed (``arguments.py``), commands raise ``CliError``/``UsageError``
(``errors.py``), and ``main`` prints them. ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import sys

from shared import __version__

from edge_client.cli import broker, demo, fleet, gateway, models, recordings, server, train, vertical
from edge_client.cli.arguments import Parser
from edge_client.cli.connection import settle_broker_port
from edge_client.cli.errors import INTERRUPTED, CliError, describe_os_error

COMMAND_GROUPS = (broker, gateway, recordings, fleet, train, vertical, models, server, demo)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="wheelfed", description="Federated tree learning for wheelchair sensor gateways.",
                    epilog="wheelfed COMMAND --help explains a command and shows examples.")
    parser.add_argument("--version", action="version", version=f"wheelfed {__version__}")
    parser.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                        type=str.upper, help="log level")
    parser.add_argument("--log-json", action="store_true", help="one JSON object per log line")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks of failures")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in COMMAND_GROUPS:
        group.add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from shared.logs import setup_logging

    args = build_parser().parse_args(argv)
    settle_broker_port(args)
    setup_logging(args.log_level, json_lines=args.log_json)
    try:
        return args.func(args)
    except CliError as exc:
        if args.debug:
            raise
        print(f"wheelfed {args.command}: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"\nwheelfed {args.command}: interrupted", file=sys.stderr, flush=True)
        return INTERRUPTED
    except OSError as exc:  # a file or socket the command needed: expected in the field, not a bug
        if args.debug:
            raise
        print(f"wheelfed {args.command}: {describe_os_error(exc)}", file=sys.stderr, flush=True)
        return 1
