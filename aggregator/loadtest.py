"""Load and soak: many simulated gateways against one mosquitto and one aggregator, training back
to back, on this machine (loopback only).

A simulated gateway is what a real one is to the aggregator -- its own MQTT connection with its
own broker account, a ``Participant`` answering every algorithm's requests from labelled
windows -- without the serial link, pipeline and store. ``python -m aggregator.loadtest host``
runs a batch of them in one process; :func:`run_soak` starts mosquitto, a few host processes and
trains in this process until the time is up, sampling the aggregator's and the broker's memory
after every job. ``benchmarks/bench_soak.py`` prints the report; ``tests/e2e/test_soak.py`` runs
a short one in CI.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .broker.mosquitto import BrokerUser, MosquittoBroker, die_with_parent
from .fleet import Presence, train_on_fleet
from .jobs import JobSettings, TrainingError
from .rounds import QuorumNotReached, RoundEngine

SECRET_ENV = "WHEELFED_SOAK_SECRET"
LABELS = np.array(["lie", "push", "sit"])


def gateway_ids(n: int) -> list[str]:
    return [f"sim-{i:05d}" for i in range(n)]


def password(secret: str, client_id: str) -> str:
    return f"{secret}-{client_id}"


def windows(client_id: str, n: int = 60, d: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """A gateway's labelled windows: a few features with a label rule, seeded by its id."""
    rng = np.random.default_rng(int(client_id.rsplit("-", 1)[1]))
    X = rng.normal(size=(n, d))
    y = LABELS[np.digitize(X[:, 0] + X[:, 1] + rng.normal(scale=0.3, size=n), [-0.5, 0.6])]
    return X, y


def host(port: int, ids: list[str], secret: str) -> None:
    """Run ``ids`` as simulated gateways until SIGTERM (the child process's main)."""
    from edge_client.participant import Participant
    from edge_client.training_data import ClientData
    from shared.transport.mqtt import MqttConfig, MqttTransport

    transports = []
    for client_id in ids:
        transport = MqttTransport(client_id, MqttConfig(port=port, username=client_id,
                                                        password=password(secret, client_id)))
        participant = Participant(transport, ClientData(client_id, *windows(client_id)))
        participant.start()
        transport.connect(wait=False)
        transports.append(transport)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"hosting {len(ids)} gateways", flush=True)
    stop.wait()
    for transport in transports:
        transport.close()


@dataclass(frozen=True)
class SoakConfig:
    gateways: int = 200
    processes: int = 4
    minutes: float = 2.0
    rounds_per_job: int = 2  # FedSCS-XGB boosting rounds per job (private default: secure aggregation)
    deadline_s: float = 60.0


@dataclass
class SoakReport:
    """What the soak measured; ``rss_mb`` and ``broker_rss_mb`` are sampled after every job."""

    config: SoakConfig
    jobs: int = 0
    boosting_rounds: int = 0
    protocol_rounds: int = 0
    replies_expected: int = 0
    timed_out: int = 0
    errors: int = 0
    failed_jobs: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    rss_mb: list[float] = field(default_factory=list)
    broker_rss_mb: list[float] = field(default_factory=list)

    @property
    def rounds_per_minute(self) -> float:
        return 60.0 * self.boosting_rounds / self.wall_s if self.wall_s else 0.0

    @property
    def lost_replies(self) -> int:
        return self.timed_out + self.errors


def rss_mb(pid: int | str = "self") -> float:
    """Resident memory of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_soak(config: SoakConfig, *, progress=print) -> SoakReport:
    """Mosquitto, ``config.gateways`` simulated gateways in ``config.processes`` host processes,
    and FedSCS-XGB jobs back to back in this process for ``config.minutes``."""
    from aggregator.algorithms import FedSCSXGB
    from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
    from shared.transport.mqtt import MqttConfig, MqttTransport

    secret = os.urandom(8).hex()
    ids = gateway_ids(config.gateways)
    report = SoakReport(config)
    with tempfile.TemporaryDirectory(prefix="wheelfed-soak-") as scratch, \
            MosquittoBroker(Path(scratch) / "broker", users=[BrokerUser(AGGREGATOR_ID, secret)] +
                            [BrokerUser(c, password(secret, c)) for c in ids]) as broker:
        hosts = []
        try:
            for batch in np.array_split(np.array(ids), config.processes):
                hosts.append(subprocess.Popen(
                    [sys.executable, "-m", "aggregator.loadtest", "host", "--port", str(broker.port), *batch.tolist()],
                    env={**os.environ, SECRET_ENV: secret}, stdout=subprocess.DEVNULL, start_new_session=True,
                    preexec_fn=die_with_parent()))
            agg = MqttTransport(AGGREGATOR_ID, MqttConfig(port=broker.port, username=AGGREGATOR_ID, password=secret),
                                presence=False)
            agg.connect()
            try:
                Presence(agg, TopicLayout()).wait(ids, online=True, timeout_s=120)
                progress(f"{len(ids)} gateways online in {len(hosts)} processes")
                algorithm = FedSCSXGB(n_rounds=config.rounds_per_job, max_depth=3, n_bins=16)
                engine = RoundEngine(agg)  # one for every job: the aggregator's connection outlives them
                started = time.monotonic()
                while time.monotonic() - started < config.minutes * 60:
                    _one_job(algorithm, agg, engine, ids, config, report)
                    report.wall_s = time.monotonic() - started
                    report.rss_mb.append(rss_mb())
                    report.broker_rss_mb.append(rss_mb(broker.process.pid))
                    progress(f"job {report.jobs}: {report.boosting_rounds} rounds, {report.rounds_per_minute:.1f}/min,"
                             f" lost replies {report.lost_replies}, aggregator {report.rss_mb[-1]:.0f} MB, "
                             f"broker {report.broker_rss_mb[-1]:.0f} MB")
            finally:
                agg.close()
        finally:
            for proc in hosts:
                proc.terminate()
            for proc in hosts:
                proc.wait(30)
    return report


def _one_job(algorithm, agg, engine, ids: list[str], config: SoakConfig, report: SoakReport) -> None:
    try:
        _, job = train_on_fleet(algorithm, agg, clients=ids, settings=JobSettings(deadline_s=config.deadline_s),
                                discover_s=10.0, engine=engine)
    except (TrainingError, QuorumNotReached) as exc:
        report.failed_jobs.append(str(exc)[:300])
        return
    report.jobs += 1
    report.boosting_rounds += config.rounds_per_job
    report.protocol_rounds += len(job.results)
    for result in job.results:
        report.replies_expected += len(result.selected)
        report.timed_out += len(result.timed_out)
        report.errors += len(result.errors)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aggregator.loadtest")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("host", help="run simulated gateways until SIGTERM (password seed from $WHEELFED_SOAK_SECRET)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("ids", nargs="+")
    args = parser.parse_args(argv)
    host(args.port, args.ids, os.environ[SECRET_ENV])
    return 0


if __name__ == "__main__":
    sys.exit(main())
