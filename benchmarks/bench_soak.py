"""Soak: simulated gateways against one mosquitto and one aggregator, training back to back.

    .venv/bin/python benchmarks/bench_soak.py                      # 200 gateways, 30 minutes
    .venv/bin/python benchmarks/bench_soak.py --minutes 2          # the CI length

Each simulated gateway has its own MQTT connection and broker account and answers with the real
client code (``aggregator.loadtest``); jobs are FedSCS-XGB (2 boosting rounds, depth 3, 16 bins)
in the histogram protocol (secure aggregation, no differential privacy), as the load run. Prints the rate, lost replies
and the memory of the aggregator (this process) and of mosquitto, first and last job.
"""

from __future__ import annotations

import argparse
import sys

import _common  # noqa: F401  (puts the repo root on sys.path)
from _common import markdown_table, print_machine

from aggregator.loadtest import SoakConfig, run_soak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gateways", type=int, default=200)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--minutes", type=float, default=30.0)
    args = parser.parse_args()
    print_machine("Soak: simulated gateways training back to back", " ".join(["python", *sys.argv]))
    report = run_soak(
        SoakConfig(gateways=args.gateways, processes=args.processes, minutes=args.minutes),
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    rows = [
        [
            str(args.gateways),
            f"{report.wall_s / 60:.1f}",
            str(report.jobs),
            str(report.boosting_rounds),
            f"{report.rounds_per_minute:.1f}",
            f"{report.replies_expected:,}",
            str(report.lost_replies),
            str(len(report.failed_jobs)),
            f"{report.rss_mb[0]:.0f} -> {report.rss_mb[-1]:.0f}",
            f"{report.broker_rss_mb[0]:.0f} -> {report.broker_rss_mb[-1]:.0f}",
        ]
    ]
    print(
        markdown_table(
            [
                "gateways",
                "minutes",
                "jobs",
                "boosting rounds",
                "rounds/min",
                "replies",
                "lost replies",
                "failed jobs",
                "aggregator MB (first -> last job)",
                "broker MB (first -> last job)",
            ],
            rows,
        )
    )
    return 0 if report.lost_replies == 0 and not report.failed_jobs else 1


if __name__ == "__main__":
    sys.exit(main())
