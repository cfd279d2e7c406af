"""The ``wheelfed`` command.

Its subcommands come in groups, one module per group, each with an ``add(subparsers)``. The
groups are the ``wheelfed.commands`` entry points of ``pyproject.toml``: the gateway's own
(``gateway``, ``recordings``) here in ``edge_client/cli/``, the aggregator's in
``aggregator/cli/``. Finding them through the package metadata means this module imports
neither side up front, and a gateway installed without the aggregator package simply has no
server commands. The groups import their heavy modules lazily, so the gateway's commands work
with the edge dependencies alone (``tests/edge_client/test_edge_dependencies.py``).

Every expected failure ends in one line and exit code 2 (usage) or 1 (runtime): arguments are
checked while they are parsed (``arguments.py``), commands raise ``CliError``/``UsageError``
(``errors.py``), and ``main`` prints them. ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from shared import __version__

from edge_client.cli.arguments import Parser
from edge_client.cli.connection import settle_broker_port
from edge_client.cli.errors import INTERRUPTED, CliError, describe_os_error

#: The entry-point group whose entries add the command groups (pyproject.toml).
COMMAND_GROUPS = "wheelfed.commands"


def command_groups() -> list[Callable[[argparse._SubParsersAction], None]]:
    """The installed command groups' ``add`` functions, ordered by their entry points' names.

    A group whose module's package is not installed (the aggregator's, on a gateway) is left
    out; any other import error is a bug and propagates.
    """
    from importlib.metadata import entry_points

    adds = []
    for entry in sorted(entry_points(group=COMMAND_GROUPS), key=lambda e: e.name):
        try:
            adds.append(entry.load())
        except ModuleNotFoundError as exc:
            if not exc.name or not (entry.module == exc.name or entry.module.startswith(exc.name + ".")):
                raise
    return adds


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="wheelfed",
        description="Federated tree learning for wheelchair sensor gateways.",
        epilog="wheelfed COMMAND --help explains a command and shows examples.",
    )
    parser.add_argument("--version", action="version", version=f"wheelfed {__version__}")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        type=str.upper,
        help="log level",
    )
    parser.add_argument("--log-json", action="store_true", help="one JSON object per log line")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks of failures")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in command_groups():
        add(sub)
    if not sub.choices:
        parser.error(
            "no commands are installed: install wheelfed (pip install -e .) rather than running it "
            "from a bare source tree"
        )
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
