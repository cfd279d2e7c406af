"""``wheelfed fleet``: the gateways as the broker knows them, one row each (aggregator side).

Connects as the aggregator, listens to the retained status topics for ``--wait`` seconds and
prints what ``aggregator.fleet_status`` folds them into; it sends the gateways nothing, so it is
safe to run at any time, even during a training job. With a server (``--server`` or
``$WHEELFED_SERVER``) it adds each gateway's privacy budget from the server's ``/api/privacy``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from dataclasses import asdict

from aggregator.cli.server_client import add_server_options, server_client
from edge_client.cli.arguments import add_subcommand, positive_float
from edge_client.cli.connection import add_broker_options, aggregator_transport

COLUMNS = ("GATEWAY", "STATE", "SEEN", "MODEL", "LABELLED/WINDOWS", "LINK", "PREDICTED", "ALERTS", "LAST", "ENGINE")


def _collect(args: argparse.Namespace) -> list:
    from aggregator.fleet_status import fold_statuses
    from shared.protocol.topics import TopicLayout

    layout = TopicLayout()
    received: list = []
    lock = threading.Lock()

    def keep(topic: str, message) -> None:
        with lock:
            received.append((topic, message))

    transport = aggregator_transport(args)
    try:
        transport.subscribe(layout.all_statuses, keep)
        time.sleep(args.wait)  # the broker sends every retained status at once; live ones may follow
    finally:
        transport.close()
    with lock:
        return fold_statuses(received, layout)


def _privacy(args: argparse.Namespace):
    """The cap's line and per gateway its ``PrivacyCell``, from the configured server; None without one."""
    from aggregator.fleet_status import privacy_cells

    client = server_client(args)
    return None if client is None else privacy_cells(client.get("/api/privacy"))


def _cells(row, now: float) -> tuple[str, ...]:
    from aggregator.fleet_status import format_age

    def shown(value: object) -> str:
        return "-" if value is None else str(value)

    age = format_age(row.age_s(now))
    model = {None: "-", "": "no model"}.get(row.model, row.model)
    windows = "-" if row.windows is None else f"{row.labelled}/{row.windows}"
    return (
        row.gateway,
        "online" if row.online else "offline",
        age if age == "now" else f"{age} ago",
        model,
        windows,
        *(shown(v) for v in (row.link, row.predicted, row.alerts, row.last_prediction, row.engine)),
    )


def run(args: argparse.Namespace) -> int:
    privacy = _privacy(args)
    rows = _collect(args)
    now = time.time()
    cells = privacy[1] if privacy else {}
    if args.json:
        print(
            json.dumps(
                [
                    {**row.to_json(now), **({"privacy": asdict(cells[row.gateway])} if row.gateway in cells else {})}
                    for row in rows
                ],
                indent=1,
            )
        )
        return 0
    where = f"{args.host}:{args.port}"
    if not rows:
        print(
            f"no gateway has announced itself on {where} (none within {args.wait:g} s; start one with wheelfed gateway)"
        )
        return 0
    online = sum(row.online for row in rows)
    print(f"{len(rows)} gateway{'s' if len(rows) != 1 else ''} on {where}, {online} online")
    columns = COLUMNS + (("EPSILON",) if privacy else ())
    table = [
        columns,
        *(
            _cells(row, now) + ((cells[row.gateway].text() if row.gateway in cells else "-",) if privacy else ())
            for row in rows
        ),
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    for row in rows:
        if row.labels is not None or row.feature_set:
            labels = " ".join(f"{label}={n}" for label, n in (row.labels or {}).items()) or "none"
            print(f"{row.gateway}: labelled windows {labels}; feature set {row.feature_set or '-'}")
        if row.model_error:
            print(f"{row.gateway}: model refused: {row.model_error}")
    if privacy:
        print(privacy[0])
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(
        sub,
        "fleet",
        "list the gateways from their retained status: online, model, windows",
        description="List the gateways from the status each one keeps on the broker: online "
        "or offline,\nthe model it runs, its labelled (per label) and stored windows, "
        "its feature set,\nits sensor link, live predictions and alerts. Asks the "
        "gateways nothing.\n\n"
        "SEEN is when a gateway last sent its status (every --publish-every seconds "
        "while\nonline); for one that vanished without stopping, the broker's last "
        "will dates from\nwhen it connected.\n\n"
        "With --server URL (or $WHEELFED_SERVER), EPSILON is each gateway's privacy budget "
        "from the server:\nthe lifetime epsilon of its most-used window / the most a "
        "new private job may still\nspend there under the server's cap.",
        examples=["wheelfed fleet", "wheelfed fleet --json --wait 5"],
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON list of rows (null: the status did not say; always so for offline gateways)",
    )
    p.add_argument("--wait", type=positive_float, default=2.0, help="seconds to collect the retained status messages")
    add_broker_options(p, username_help="broker user name (default: aggregator); password from $WHEELFED_MQTT_PASSWORD")
    add_server_options(p)
    p.set_defaults(func=run)
