"""``demo`` and ``smoke``: the fleet on this machine, end to end."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from edge_client.cli.arguments import add_subcommand, int_at_least, non_negative_float, output_file, positive_int
from edge_client.cli.errors import CliError

DEMO_HELP = """\
The WheelFed fleet on real recorded sessions, end to end, on this machine.

One `wheelfed gateway` process per subject of the bundled seglearn smartwatch recordings (10
subjects doing 7 shoulder exercises), each fed its session through a pseudo-terminal exactly as
a wheelchair's sensor link would (serial framing -> filtering -> resampling -> windows ->
features -> labelled store). The first 40% of each session is labelled (as when a carer
annotates the first minutes); labels for the next 20% arrive later in the stream.

The aggregator is `wheelfed server`, started by the demo on a free port with its registry in
the run directory; the demo prints its dashboard URL (with the operator token after #token=)
and drives everything through its REST API. The server trains FedSCS-XGB and FedForest over
the fleet with the private defaults: each gateway sends counts and histograms of its labelled
windows, masked under secure aggregation, so the aggregator decodes only the fleet's sums; no
raw data leaves a gateway. Secure aggregation needs at least 3 gateways: with --subjects 1 or 2
the demo trains on the gateways' histograms sent unmasked, and says so. Each model is scored on
every gateway's held-out windows (the last 25% of its labelled windows; scores are reported per
gateway) against gateways learning alone (the local-only baseline, one job per gateway) and
chance (the majority-class rate, always guessing the most common held-out activity). The demo
deploys the better model, signed, only if it beats both; otherwise nothing is deployed and the
gateways keep recording without a model. A third contender: FedGA-Tree gives every gateway its
own small tree, evolved with the fleet's help (a gateway sends noisy counts, depths, tree shapes
without thresholds, and fitness scores, never its windows); on the gateways the federated model
serves worst (it does not beat their local-only model), a tree that beats the federated model
there is deployed to that gateway alone. Gateways with a model recognise their live stream.
One gateway is killed and restarted. A retraining schedule on the server fires once the carers'
later labels have added enough labelled windows fleet-wide; the server retrains (FedSCS-XGB
continues from the deployed model) and rolls the new version out -- a canary gateway first --
only if it does not score below the deployed model on the same held-out windows.

The demo ends with a one-screen summary: each model's held-out accuracy beside its window count,
chance and local-only, the decision of each step, what every gateway runs, the privacy budget
spent and why that epsilon, and the bytes per gateway; it points to the server's dashboard for
the rest. --report writes the full report (every table and explanation, the server's jobs,
schedule and promotions) as JSON. Exit status 0 when the run completed and every deployment reached
every gateway (also when nothing was deployed), 1 otherwise.
"""


def _subjects(text: str) -> int:
    value = positive_int(text)
    if value > 10:
        raise argparse.ArgumentTypeError(f"the bundled recordings have 10 subjects, got {value}")
    return value


_subjects.__name__ = "subjects"


def _demo(args: argparse.Namespace) -> int:
    from aggregator.demo.orchestrator import DemoConfig, run_demo

    config = DemoConfig(
        subjects=args.subjects,
        speed=args.speed,
        rounds=args.rounds,
        trees=args.trees,
        algorithm=args.algorithm,
        fedga_generations=args.fedga_generations,
        kill_gateway=not args.no_kill,
        keep_running=args.keep_running,
        broker=args.broker,
        run_dir=Path(args.run_dir) if args.run_dir else None,
        report_path=args.report,
    )
    print(DEMO_HELP.splitlines()[0] + f" ({config.subjects} gateways; details: wheelfed demo --help)\n", flush=True)
    # SIGTERM stops the demo as Ctrl-C does: the server first, while the gateways still answer its
    # round (it stops at the round's end), then the gateways and the broker
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        report = run_demo(config)
    except KeyboardInterrupt as exc:
        print("\ninterrupted: everything the demo started has been stopped", file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(exc, _Terminated) else signal.SIGINT)
    except (TimeoutError, RuntimeError) as exc:
        raise CliError(f"{exc} (logs in the run directory; --run-dir keeps them)") from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0 if report.succeeded else 1


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is."""


def _terminated(_signum: int, _frame: object) -> None:
    raise _Terminated


def _smoke(args: argparse.Namespace) -> int:
    from aggregator.smoke import SmokeConfig, run_smoke

    print(
        "WheelFed foundation smoke run: broker, aggregator round engine and gateway processes over MQTT.\n", flush=True
    )
    try:
        report = run_smoke(SmokeConfig(n_gateways=args.gateways, broker=args.broker))
    except KeyboardInterrupt:
        print("interrupted: everything the smoke run started has been stopped", file=sys.stderr)
        return 130
    return 0 if report.rejoined else 1


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="the fleet on real recorded sessions: train, deploy, recognise live",
        description=DEMO_HELP,
        epilog="examples:\n  wheelfed demo\n  wheelfed demo --subjects 3",
    )
    p.add_argument(
        "--subjects",
        type=_subjects,
        default=10,
        help="gateways, one per recorded subject (1-10; below 3 without secure aggregation)",
    )
    p.add_argument("--speed", type=non_negative_float, default=20.0, help="replay speed of the live part, x real time")
    p.add_argument("--rounds", type=positive_int, default=10, help="FedSCS-XGB boosting rounds")
    p.add_argument("--trees", type=positive_int, default=30, help="FedForest trees")
    p.add_argument(
        "--algorithm",
        choices=("both", "fedscs-xgb", "fedforest"),
        default="both",
        help="train both and deploy the better, or one",
    )
    p.add_argument(
        "--fedga-generations",
        type=int_at_least(0),
        default=20,
        help="FedGA-Tree generations of the third contender, every gateway's own tree (0: skip it; "
        "the paper's Table II uses 100)",
    )
    p.add_argument(
        "--keep-running",
        action="store_true",
        help="keep the fleet and the server (its dashboard) running after the summary",
    )
    p.add_argument("--no-kill", action="store_true", help="do not kill and restart a gateway midway")
    p.add_argument("--broker", choices=("auto", "mosquitto", "embedded"), default="auto", help="which MQTT broker")
    p.add_argument("--run-dir", help="keep recordings, stores, models and logs here (default: a temporary dir)")
    p.add_argument(
        "--report",
        type=output_file(".json", what="report"),
        help="write the full report (every table and explanation) as JSON here",
    )
    p.set_defaults(func=_demo)

    p = add_subcommand(
        sub,
        "smoke",
        "the foundation smoke run: broker, round engine, gateway processes, a kill",
        examples=["wheelfed smoke --gateways 3"],
    )
    p.add_argument("--gateways", type=int_at_least(2), default=3, help="gateway processes to start")
    p.add_argument("--broker", choices=("auto", "mosquitto", "embedded"), default="auto", help="which MQTT broker")
    p.set_defaults(func=_smoke)
