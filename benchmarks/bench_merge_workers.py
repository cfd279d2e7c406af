"""Merge workers: the same jobs with the aggregator alone and with 1, 2 and 4 merge workers.

    nice -n 10 .venv/bin/python benchmarks/bench_merge_workers.py                 # 300 gateways
    nice -n 10 .venv/bin/python benchmarks/bench_merge_workers.py --gateways 100 --repeats 1

Simulated gateways (``aggregator.loadtest``: own MQTT connections and broker accounts, the real
client code) in a few host processes, one mosquitto, the leader in this process, the workers
(``wheelfed merge-worker``) as processes. For each setting, FedSCS-XGB (2 boosting
rounds, depth 3, 64 bins) in its private default (secure aggregation) and with
``secure_aggregation=False``; the settings run interleaved, ``--repeats`` times. Per job:

- ``job s``: wall time of the job; ``sum rounds s``: the summed rounds' time (requests out to
  the sum complete: ``fleet_counts``, ``grid_counts``, ``fedscs_xgb.histograms``), total;
- ``leader CPU s``: this process's CPU time during the job (receiving, merging, unmasking,
  growing trees); ``leader receive CPU s``: of it, the aggregator connection's network and
  dispatch threads (reading, decoding, routing and -- with workers -- adding the partials):
  the merge work that workers take over; ``workers CPU s``: the workers' together (from /proc).

The load average (1 min) before and after each job is printed: the machine is shared, so the
numbers are what they were on it then. Every model is compared with the flat one bit for bit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import numpy as np
from _common import markdown_table, print_machine

from aggregator.algorithms import FedSCSXGB
from aggregator.broker import BrokerUser, MosquittoBroker
from aggregator.fleet import Presence, train_on_fleet
from aggregator.jobs import JobSettings
from aggregator.loadtest import gateway_ids, password, start_host
from aggregator.merge_workers import MergeSettings, MergeWorkerProcesses, deploy_dir_with_workers
from aggregator.rounds import RoundEngine
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport

SUM_ROUNDS = {"fleet_counts", "grid_counts", "fedscs_xgb.histograms"}
WORKER_COUNTS = (0, 1, 2, 4)


@dataclass
class Run:
    workers: int
    secure: bool
    job_s: float
    sum_s: float
    leader_cpu_s: float
    receive_cpu_s: float
    workers_cpu_s: float
    load_before: float
    load_after: float
    same_model: bool


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    return cpu_seconds_path(Path(f"/proc/{pid}/stat"))


def receive_threads_cpu(client_id: str) -> float:
    """CPU seconds of this process's MQTT threads of ``client_id`` (paho's network loop and the
    transport's dispatch thread), from /proc/self/task."""
    total = 0.0
    for thread in threading.enumerate():
        if client_id in thread.name and ("paho" in thread.name or "dispatch" in thread.name):
            total += cpu_seconds_path(Path(f"/proc/self/task/{thread.native_id}/stat"))
    return total


def cpu_seconds_path(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def same_model(a, b) -> bool:
    return (
        a.n_trees == b.n_trees
        and np.array_equal(a.base_score, b.base_score)
        and all(
            np.array_equal(getattr(x, n), getattr(y, n))
            for x, y in zip(a.trees, b.trees)
            for n in ("feature", "threshold", "left", "right", "value")
        )
    )


def one_job(port: int, secret: str, ids: list[str], n_workers: int, secure: bool, flat: dict) -> Run:
    algorithm = FedSCSXGB(n_rounds=2, max_depth=3, n_bins=64, secure_aggregation=secure)
    agg = MqttTransport(
        AGGREGATOR_ID,
        MqttConfig(port=port, username=AGGREGATOR_ID, password=secret, session_expiry_s=0),
        presence=False,
    )
    agg.connect()
    workers = (
        MergeWorkerProcesses(n_workers, port=port, password=lambda w: password(secret, w), settings=MergeSettings())
        if n_workers
        else None
    )
    try:
        engine = RoundEngine(agg, merge_workers=workers is not None)
        if workers is not None:
            workers.start()
            engine.merged.wait_workers(n_workers, timeout_s=120)
        load_before = load1()
        cpu0, wall0, recv0 = time.process_time(), time.monotonic(), receive_threads_cpu(AGGREGATOR_ID)
        w0 = sum(cpu_seconds(p.pid) for p in workers.processes.values()) if workers else 0.0
        model, job = train_on_fleet(
            algorithm, agg, clients=ids, discover_s=60, engine=engine, settings=JobSettings(deadline_s=300)
        )
        wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
        receive = receive_threads_cpu(AGGREGATOR_ID) - recv0
        w1 = sum(cpu_seconds(p.pid) for p in workers.processes.values()) if workers else 0.0
    finally:
        if workers is not None:
            workers.stop()
        agg.close()
    flat.setdefault(secure, model)
    sum_s = sum(r.elapsed_s for r in job.results if r.request_type in SUM_ROUNDS)
    return Run(
        n_workers, secure, wall, sum_s, cpu, receive, w1 - w0, load_before, load1(), same_model(model, flat[secure])
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gateways", type=int, default=300)
    parser.add_argument("--processes", type=int, default=3, help="gateway host processes")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if args.gateways < 3 or args.processes < 1 or args.repeats < 1:
        parser.error("--gateways must be >= 3, --processes and --repeats >= 1")
    print_machine("Merge workers: the aggregator alone and with 1, 2, 4 workers", " ".join(["python", *sys.argv]))
    secret = os.urandom(8).hex()
    ids = gateway_ids(args.gateways)
    worker_ids = [f"merge-{i}" for i in range(1, max(WORKER_COUNTS) + 1)]
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="wheelfed-merge-") as scratch:
        users = [BrokerUser(AGGREGATOR_ID, secret)] + [BrokerUser(c, password(secret, c)) for c in ids + worker_ids]
        deploy = deploy_dir_with_workers(Path(scratch) / "deploy", worker_ids)
        with MosquittoBroker(Path(scratch) / "broker", users=users, deploy_dir=deploy) as broker:
            hosts = [
                start_host(broker.port, batch.tolist(), secret)
                for batch in np.array_split(np.array(ids), args.processes)
            ]
            try:
                watcher = MqttTransport(
                    "aggregator",
                    MqttConfig(port=broker.port, username=AGGREGATOR_ID, password=secret, session_expiry_s=0),
                    presence=False,
                )
                watcher.connect()
                Presence(watcher, TopicLayout()).wait(ids, online=True, timeout_s=300)
                watcher.close()
                flat: dict = {}
                for _ in range(args.repeats):
                    for secure in (True, False):
                        for n in WORKER_COUNTS:
                            run = one_job(broker.port, secret, ids, n, secure, flat)
                            runs.append(run)
                            print(run, file=sys.stderr, flush=True)
            finally:
                for proc in hosts:
                    proc.terminate()
                for proc in hosts:
                    proc.wait(30)
    rows = []
    for secure in (True, False):
        base = [r for r in runs if r.secure == secure and r.workers == 0]
        for n in WORKER_COUNTS:
            mine = [r for r in runs if r.secure == secure and r.workers == n]
            med = lambda f, rs=mine: statistics.median(f(r) for r in rs)  # noqa: E731
            speedup = med(lambda r: r.sum_s, base) / med(lambda r: r.sum_s)
            rows.append(
                [
                    "secure" if secure else "plain",
                    "alone" if n == 0 else str(n),
                    str(len(mine)),
                    f"{med(lambda r: r.job_s):.2f}",
                    f"{med(lambda r: r.sum_s):.2f}",
                    f"{speedup:.2f}",
                    f"{med(lambda r: r.leader_cpu_s):.2f}",
                    f"{med(lambda r: r.receive_cpu_s):.2f}",
                    f"{med(lambda r: r.receive_cpu_s, base) / med(lambda r: r.receive_cpu_s):.2f}",
                    f"{med(lambda r: r.workers_cpu_s):.2f}",
                    f"{min(r.load_before for r in mine):.1f}-{max(r.load_after for r in mine):.1f}",
                    "yes" if all(r.same_model for r in mine) else "NO",
                ]
            )
    print(f"{args.gateways} simulated gateways in {args.processes} processes; medians over {args.repeats} jobs")
    print(
        markdown_table(
            [
                "sums",
                "workers",
                "jobs",
                "job s",
                "sum rounds s",
                "speed-up (sum rounds)",
                "leader CPU s",
                "leader receive CPU s",
                "receive CPU alone / this",
                "workers CPU s",
                "load avg (1 min)",
                "flat model",
            ],
            rows,
        )
    )
    return 0 if all(r.same_model for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
