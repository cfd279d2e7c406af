"""Scale: thousands of simulated gateways against one mosquitto and one aggregator.

    .venv/bin/python benchmarks/bench_scale_load.py                          # 200 gateways, both algorithms
    nice -n 5 .venv/bin/python benchmarks/bench_scale_load.py --gateways 1000 5000
    .venv/bin/python benchmarks/bench_scale_load.py --gateways 500 --algorithms fedforest --json out.json
    .venv/bin/python benchmarks/bench_scale_load.py --from-json scale_1000.json scale_5000.json   # reprint

For every gateway count: mosquitto with the deploy/ config, the simulated gateways
(``aggregator.loadtest``: each its own MQTT connection and broker account and the real client
code, a thousand per host process on two threads), the aggregator in this process; then one job per
algorithm (``aggregator.loadtest.load_algorithm``: the histogram protocol with secure aggregation,
no differential privacy -- with a small model). Prints, per job, the time per phase (a phase is a
request type; a histogram round is one depth level, each secure sum is followed by a
``secagg.unmask`` round), the aggregator's, broker's and hosts' CPU seconds and memory, and the
MQTT payload bytes per gateway in each direction.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import _common  # noqa: F401  (puts the repo root on sys.path)
from _common import markdown_table, print_machine

from aggregator.loadtest import LOAD_ALGORITHMS, LoadConfig, LoadRun, RoundTiming, run_load


def summary_rows(runs: list[LoadRun]) -> list[list[str]]:
    return [
        [
            r.algorithm,
            f"{r.gateways:,}",
            str(r.processes),
            f"{r.online_s:.0f}",
            f"{r.job_s:.1f}",
            str(len(r.timings)),
            f"{r.between_rounds_s:.1f}",
            f"{r.aggregator_cpu_s:.1f}",
            f"{r.aggregator_start_mb:.0f} -> {r.aggregator_peak_mb:.0f}",
            f"{r.broker_cpu_s:.1f}",
            f"{r.broker_peak_mb:.0f}",
            f"{r.hosts_cpu_s:.0f}",
            f"{r.hosts_rss_mb:.0f}",
            f"{r.bytes_down_per_gateway / 1024:.1f}",
            f"{r.bytes_up_per_gateway / 1024:.1f}",
            str(r.timed_out + r.errors),
            "{:.1f} / {:.1f} / {:.1f}".format(*r.load_average),
        ]
        for r in runs
    ]


SUMMARY_HEADERS = [
    "algorithm",
    "gateways",
    "host procs",
    "online s",
    "job s",
    "rounds",
    "between rounds s",
    "aggregator CPU s",
    "aggregator MB (start -> peak)",
    "broker CPU s",
    "broker peak MB",
    "hosts CPU s",
    "hosts MB",
    "KiB down / gw",
    "KiB up / gw",
    "lost replies",
    "load avg (start / end / max)",
]


def phase_rows(runs: list[LoadRun]) -> list[list[str]]:
    return [
        [
            r.algorithm,
            f"{r.gateways:,}",
            p.phase,
            str(p.rounds),
            f"{p.seconds:.1f}",
            f"{p.seconds / p.rounds:.2f}",
            f"{p.max_round_s:.2f}",
            f"{p.bytes_down_per_gateway / 1024:.1f}",
            f"{p.bytes_up_per_gateway / 1024:.1f}",
        ]
        for r in runs
        for p in r.phases
    ]


PHASE_HEADERS = [
    "algorithm",
    "gateways",
    "phase (request)",
    "rounds",
    "s",
    "s / round",
    "max round s",
    "KiB down / gw",
    "KiB up / gw",
]


def as_json(run: LoadRun) -> dict:
    out = {f.name: getattr(run, f.name) for f in dataclasses.fields(run) if f.name not in ("model", "timings")}
    out["timings"] = [dataclasses.asdict(t) for t in run.timings]
    out["phases"] = [dataclasses.asdict(p) for p in run.phases]
    return out


def from_json(run: dict) -> LoadRun:
    """A run written by ``--json`` (without its model)."""
    fields = {k: v for k, v in run.items() if k not in ("phases", "timings")}
    fields["load_average"] = tuple(fields["load_average"])
    return LoadRun(**fields, timings=tuple(RoundTiming(**t) for t in run["timings"]), model=None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gateways", type=int, nargs="+", default=[200], help="fleet sizes (default: 200)")
    parser.add_argument("--algorithms", nargs="+", choices=LOAD_ALGORITHMS, default=list(LOAD_ALGORITHMS))
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        help="host processes per fleet (default: one per 1,000 gateways, at least 2)",
    )
    parser.add_argument("--deadline", type=float, default=900.0, help="round deadline in seconds (default: 900)")
    parser.add_argument("--json", help="also write every run, with its rounds, to this JSON file")
    parser.add_argument(
        "--from-json", nargs="+", metavar="FILE", help="print the tables of runs saved with --json instead of running"
    )
    args = parser.parse_args()
    if args.from_json:
        runs = []
        for path in args.from_json:
            with open(path) as saved:
                runs += [from_json(r) for r in json.load(saved)]
        print(markdown_table(SUMMARY_HEADERS, summary_rows(runs)))
        print()
        print(markdown_table(PHASE_HEADERS, phase_rows(runs)))
        return 0
    for n in args.gateways:
        if n < 3:
            parser.error(f"--gateways: each fleet needs at least 3 gateways (secure aggregation), got {n}")
    print_machine(
        "Scale: simulated gateways, one mosquitto, one aggregator",
        " ".join(["python", *sys.argv]),
        {"load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg())},
    )
    runs: list[LoadRun] = []

    def save(run: LoadRun) -> None:  # after every job: a later one that fails keeps the earlier ones
        runs.append(run)
        if args.json:
            with open(args.json, "w") as out:
                json.dump([as_json(r) for r in runs], out, indent=1)

    for n in args.gateways:
        run_load(
            LoadConfig(
                gateways=n, processes=args.processes, algorithms=tuple(args.algorithms), deadline_s=args.deadline
            ),
            progress=lambda line: print(line, file=sys.stderr, flush=True),
            on_run=save,
        )
    print(markdown_table(SUMMARY_HEADERS, summary_rows(runs)))
    print()
    print(markdown_table(PHASE_HEADERS, phase_rows(runs)))
    return 0 if all(r.timed_out + r.errors == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
