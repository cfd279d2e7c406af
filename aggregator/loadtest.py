"""Load and soak: many simulated gateways against one mosquitto and one aggregator, on this
machine (loopback only).

A simulated gateway is what a real one is to the aggregator -- its own MQTT connection with its
own broker account, a ``Participant`` answering every algorithm's requests from labelled
windows (:func:`windows`, seeded by its id, so :func:`client_data` rebuilds the fleet's data for
``aggregator.simulate``) -- without the serial link, pipeline and store.

``wheelfed load-test host`` runs a batch of them in one process on two threads
(:class:`Multiplexer`: one epoll loop over all their sockets, one thread running their
handlers) rather than two paho threads per gateway, so that thousands fit in a few processes.
:func:`run_load` starts mosquitto, the host processes and the aggregator (this process) and
trains each algorithm once, timing every round by phase and measuring CPU and peak memory of
the aggregator, the broker and the hosts (``benchmarks/bench_scale_load.py``,
``tests/e2e/test_scale_load.py``). :func:`run_soak` trains FedSCS-XGB jobs back to back for a
while, sampling memory after every job (``benchmarks/bench_soak.py``, ``tests/e2e/test_soak.py``).
"""

from __future__ import annotations

import dataclasses
import contextlib
import math
import os
import queue
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport, _disable_nagle

from .algorithm_table import algorithm_row
from .broker.mosquitto import BrokerUser, MosquittoBroker, die_with_parent
from .fleet import Presence, train_on_fleet
from .jobs import JobSettings, TrainingError
from .rounds import QuorumNotReached, RoundEngine

SECRET_ENV = "WHEELFED_SOAK_SECRET"
LABELS = np.array(["lie", "push", "sit"])
#: Gateways per host process when ``processes`` is not given.
GATEWAYS_PER_PROCESS = 1000


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


def client_data(ids: Sequence[str]) -> list:
    """The simulated gateways' data as ``ClientData``: ``aggregator.simulate`` on these is the
    load run's oracle (same data, same seed, same model)."""
    from edge_client.training_data import ClientData

    return [ClientData(client_id, *windows(client_id)) for client_id in ids]


# -- many gateways per process ----------------------------------------------------------------


class Multiplexer:
    """Drives many paho clients from two threads: a network thread polling all their sockets
    (epoll; paho's external-loop API: ``loop_read``/``loop_write``/``loop_misc``) and a dispatch
    thread running their transports' handlers in arrival order.

    ``MqttTransport`` gives each connection a paho network thread and a dispatch thread; 5,000
    gateways would be 10,000 threads waking up every second on two cores. Here a process holds
    a thousand gateways with the same client code on the wire. A dropped connection is
    reconnected on the next tick and counted in ``disconnects``.
    """

    #: Keep-alive checks, reconnections and a sweep of unsent packets happen once per tick.
    TICK_S = 0.25

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self.inbound: queue.Queue[tuple[MultiplexedTransport, str, bytes, int, int]] = queue.Queue()
        self.transports: list[MultiplexedTransport] = []
        self.disconnects = 0
        self._lock = threading.Lock()  # the selector's registrations (paho calls back from any thread)
        for target in (self._network, self._dispatch):
            threading.Thread(target=target, name=f"mux-{target.__name__.strip('_')}", daemon=True).start()

    # paho's socket callbacks: (client, userdata, socket)
    def opened(self, client, userdata, sock) -> None:
        _disable_nagle(client, userdata, sock)
        with self._lock:
            self.selector.register(sock, selectors.EVENT_READ, client)

    def closed(self, _client, _userdata, sock) -> None:
        with self._lock, contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(sock)
        self.disconnects += 1

    def want_write(self, client, _userdata, sock) -> None:
        with self._lock, contextlib.suppress(KeyError, ValueError):
            self.selector.modify(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, client)

    def written(self, client, _userdata, sock) -> None:
        with self._lock, contextlib.suppress(KeyError, ValueError):
            self.selector.modify(sock, selectors.EVENT_READ, client)

    def _network(self) -> None:
        next_tick = time.monotonic()
        while True:
            with self._lock:
                empty = not self.selector.get_map()
            if empty:  # epoll needs no fd, but some selectors do
                time.sleep(self.TICK_S)
            for key, mask in [] if empty else self.selector.select(self.TICK_S):
                if mask & selectors.EVENT_READ:
                    key.data.loop_read()
                if mask & selectors.EVENT_WRITE:
                    key.data.loop_write()
            if time.monotonic() >= next_tick:
                next_tick = time.monotonic() + self.TICK_S
                for transport in list(self.transports):
                    transport.tick()

    def _dispatch(self) -> None:
        while True:
            transport, topic, payload, mid, qos = self.inbound.get()
            transport._receive_payload(topic, payload)  # never raises
            if qos:
                transport._client.ack(mid, qos)  # after the handlers, as MqttTransport does


class MultiplexedTransport(MqttTransport):
    """``MqttTransport`` on a :class:`Multiplexer`'s threads instead of its own two: same
    sessions, presence, QoS 1 and acknowledgement after the handlers."""

    def __init__(self, client_id: str, config: MqttConfig, mux: Multiplexer) -> None:
        self._mux = mux  # before super().__init__, which builds the paho client
        super().__init__(client_id, config)
        self._next_reconnect = 0.0

    def _make_client(self):
        client = super()._make_client()
        client.on_socket_open = self._mux.opened
        client.on_socket_close = self._mux.closed
        client.on_socket_register_write = self._mux.want_write
        client.on_socket_unregister_write = self._mux.written
        # no network thread of its own: paho's loop_start replaced on this instance (mypy does
        # not let a method be assigned to, so it is set as an attribute)
        setattr(client, "loop_start", self._join_multiplexer)
        return client

    def _dispatch_loop(self) -> None:
        """The multiplexer's dispatch thread runs the handlers (this thread ends at once)."""

    def _on_message(self, _client, _userdata, msg) -> None:
        self._mux.inbound.put((self, msg.topic, bytes(msg.payload), msg.mid, msg.qos))

    def _join_multiplexer(self) -> None:
        """Stands in for paho's ``loop_start`` (``MqttTransport.connect`` calls it after
        ``connect_async``): open the connection now, CONNECT sent; the broker's answer arrives on
        the multiplexer's network thread, which ticks this transport from now on."""
        self._client.reconnect()
        self._drop_wakeup_pair()
        self._mux.transports.append(self)

    def _drop_wakeup_pair(self) -> None:
        # paho opens a socket pair per connection to wake its own loop thread; nothing reads it
        # here, so it would fill with a byte per packet (and hold two more descriptors).
        self._client._reset_sockets(sockpair_only=True)

    def tick(self) -> None:
        """Keep-alive, a packet left unsent by a callback race, reconnection after a drop."""
        client = self._client
        if client.socket() is None:
            if not self._closed and time.monotonic() >= self._next_reconnect:
                self._next_reconnect = time.monotonic() + self.config.reconnect_min_s
                with contextlib.suppress(OSError):
                    client.reconnect()
                    self._drop_wakeup_pair()
            return
        client.loop_misc()
        if client.want_write():
            client.loop_write()


def host(port: int, ids: list[str], secret: str) -> None:
    """Run ``ids`` as simulated gateways until SIGTERM (the child process's main)."""
    from edge_client.participant import Participant
    from edge_client.training_data import ClientData

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    mux = Multiplexer()
    for client_id in ids:
        transport = MultiplexedTransport(
            client_id, MqttConfig(port=port, username=client_id, password=password(secret, client_id)), mux
        )
        Participant(transport, ClientData(client_id, *windows(client_id))).start()
        transport.connect(wait=False)
    print(f"hosting {len(ids)} gateways", flush=True)
    stop.wait()  # exits without a clean disconnect: the broker publishes every gateway's will


# -- the fleet: broker, host processes, aggregator connection ---------------------------------


def start_host(port: int, ids: list[str], secret: str) -> subprocess.Popen:
    """``wheelfed load-test host`` for ``ids`` on the broker at ``port``, as a child process that
    dies with this one (the broker accounts' passwords derive from ``secret``)."""
    return subprocess.Popen(
        [sys.executable, "-m", "edge_client.cli", "load-test", "host", "--port", str(port), *ids],
        env={**os.environ, SECRET_ENV: secret},
        stdout=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=die_with_parent(),
    )


def raise_open_file_limit(needed: int) -> int:
    """Raise this process's soft limit on open files to ``needed`` (children inherit it: the
    broker holds one socket per gateway); returns the limit. Fails with one line when the hard
    limit is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            raise OSError(
                f"{needed} open files are needed (one socket per simulated gateway in mosquitto), but "
                f"the hard limit is {hard}: raise it (ulimit -Hn, LimitNOFILE=) or simulate fewer gateways"
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        soft = needed
    return soft


@dataclass
class SimulatedFleet:
    """A running fleet: ``broker``, the ``hosts`` processes, the aggregator's connection ``agg``."""

    ids: list[str]
    broker: MosquittoBroker
    hosts: list[subprocess.Popen]
    agg: MqttTransport
    online_s: float  # from starting the hosts until every gateway's presence said online


@contextlib.contextmanager
def simulated_fleet(
    gateways: int,
    processes: int | None = None,
    *,
    online_timeout_s: float = 300.0,
    progress: Callable[[str], None] = print,
) -> Iterator[SimulatedFleet]:
    """Mosquitto (the deploy/ config), ``gateways`` simulated gateways in ``processes`` host
    processes (default: one per ``GATEWAYS_PER_PROCESS``, at least 2) and the aggregator's
    connection, once every gateway is online."""
    if isinstance(gateways, bool) or not isinstance(gateways, int) or gateways < 3:
        raise ValueError(f"gateways must be an int >= 3 (secure aggregation needs 3), got {gateways!r}")
    processes = processes or max(2, math.ceil(gateways / GATEWAYS_PER_PROCESS))
    if isinstance(processes, bool) or not isinstance(processes, int) or not 1 <= processes <= gateways:
        raise ValueError(f"processes must be an int in 1..gateways, got {processes!r}")
    raise_open_file_limit(gateways + 1024)
    secret = os.urandom(8).hex()
    ids = gateway_ids(gateways)
    with (
        tempfile.TemporaryDirectory(prefix="wheelfed-load-") as scratch,
        MosquittoBroker(
            Path(scratch) / "broker",
            users=[BrokerUser(AGGREGATOR_ID, secret)] + [BrokerUser(c, password(secret, c)) for c in ids],
        ) as broker,
    ):
        hosts: list[subprocess.Popen] = []
        try:
            agg = MqttTransport(
                AGGREGATOR_ID, MqttConfig(port=broker.port, username=AGGREGATOR_ID, password=secret), presence=False
            )
            agg.connect()
            presence = Presence(agg, TopicLayout())
            started = time.monotonic()
            for batch in np.array_split(np.array(ids), processes):
                hosts.append(start_host(broker.port, batch.tolist(), secret))
            try:
                missing = presence.missing(ids, online_timeout_s)
                if missing:
                    raise TimeoutError(
                        f"{len(missing)} of {gateways} simulated gateways were not online after "
                        f"{online_timeout_s:.0f} s (first: {', '.join(missing[:5])}); the host "
                        "processes' stderr says why"
                    )
                online_s = time.monotonic() - started
                presence.close()
                progress(f"{gateways} gateways online in {processes} processes after {online_s:.1f} s")
                yield SimulatedFleet(ids, broker, hosts, agg, online_s)
            finally:
                agg.close()
        finally:
            for proc in hosts:
                proc.terminate()
            for proc in hosts:
                proc.wait(30)


# -- /proc readings --------------------------------------------------------------------------


def _status_mb(pid: int | str, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb(pid: int | str = "self") -> float:
    """Resident memory of a process, from /proc (Linux)."""
    return _status_mb(pid, "VmRSS")


def peak_rss_mb(pid: int | str = "self") -> float:
    """Peak resident memory since the process started or :func:`reset_peak_rss`."""
    return _status_mb(pid, "VmHWM")


def reset_peak_rss(pid: int | str = "self") -> None:
    """Start a new peak (Linux >= 4.0: ``5`` to ``/proc/PID/clear_refs``)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU time a process used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- timing rounds by phase ------------------------------------------------------------------


@dataclass(frozen=True)
class RoundTiming:
    """One protocol round as the aggregator saw it: ``phase`` is the request's message type;
    ``seconds`` from encoding the requests to the last reply; bytes are MQTT payload bytes the
    aggregator published (``bytes_down``, requests) and received (``bytes_up``: replies, and
    any presence message that arrived meanwhile)."""

    phase: str
    round: int
    seconds: float
    clients: int
    answered: int
    bytes_down: int
    bytes_up: int


class TimedRoundEngine(RoundEngine):
    """A ``RoundEngine`` that records a :class:`RoundTiming` for every round it runs."""

    def __init__(self, transport, **kwargs) -> None:
        super().__init__(transport, **kwargs)
        self.timings: list[RoundTiming] = []

    def run_round(self, job, round_no, request, clients, **kwargs):
        stats = self.transport.stats
        started, down, up = time.monotonic(), stats.sent_bytes, stats.received_bytes
        result = None
        try:
            result = super().run_round(job, round_no, request, clients, **kwargs)
            return result
        except QuorumNotReached as exc:
            result = exc.result
            raise
        finally:
            if result is not None:
                self.timings.append(
                    RoundTiming(
                        result.request_type,
                        round_no,
                        time.monotonic() - started,
                        len(result.selected),
                        len(result.replies),
                        stats.sent_bytes - down,
                        stats.received_bytes - up,
                    )
                )


@dataclass(frozen=True)
class PhaseSummary:
    """The rounds of one phase (request type) of a job: count, time, bytes per gateway."""

    phase: str
    rounds: int
    seconds: float
    max_round_s: float
    bytes_down_per_gateway: float
    bytes_up_per_gateway: float


def phases(timings: Sequence[RoundTiming]) -> list[PhaseSummary]:
    """``timings`` grouped by phase, in order of first appearance."""
    groups: dict[str, list[RoundTiming]] = {}
    for t in timings:
        groups.setdefault(t.phase, []).append(t)
    return [
        PhaseSummary(
            phase,
            len(ts),
            sum(t.seconds for t in ts),
            max(t.seconds for t in ts),
            sum(t.bytes_down / t.clients for t in ts),
            sum(t.bytes_up / t.clients for t in ts),
        )
        for phase, ts in groups.items()
    ]


# -- one job per algorithm, measured ---------------------------------------------------------


#: The load run's model per algorithm of the table (its size fields): small, so that thousands of
#: gateways finish on two cores, in the histogram protocol on 16 bins.
LOAD_SIZES: dict[str, dict[str, int]] = {
    "fedscs-xgb": {"n_rounds": 2, "max_depth": 3},
    "fedforest": {"n_trees": 4, "max_depth": 3},
}
LOAD_ALGORITHMS = tuple(LOAD_SIZES)


def load_algorithm(name: str):
    """The configuration the load run trains for ``name`` (the algorithm table's class): the
    histogram protocol (secure aggregation on, ``min_crowd`` 5, no differential privacy: its
    models equal the simulation's bit for bit, which the load test checks) at ``LOAD_SIZES``."""
    try:
        row = algorithm_row(name)
    except ValueError:
        row = None
    if row is None or row.name not in LOAD_SIZES:
        raise ValueError(f"the load run trains {', '.join(LOAD_ALGORITHMS)}, not {name!r}")
    return row.config_type()(**LOAD_SIZES[row.name], n_bins=16, protocol="histogram")


@dataclass(frozen=True)
class LoadConfig:
    """``gateways`` in ``processes`` host processes (None: one per thousand, at least 2);
    each of ``algorithms`` trains once with ``seed``, rounds waiting up to ``deadline_s``."""

    gateways: int = 200
    processes: int | None = None
    algorithms: tuple[str, ...] = LOAD_ALGORITHMS
    deadline_s: float = 900.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in self.algorithms:
            load_algorithm(name)  # validates the name
        if not self.deadline_s > 0:
            raise ValueError(f"deadline_s must be > 0, got {self.deadline_s}")


@dataclass(frozen=True, eq=False)
class LoadRun:
    """One algorithm's job over the simulated fleet. CPU seconds and peak memory are the job's
    own (peaks reset before it): the aggregator is this process, ``hosts`` all host processes
    together (the gateways' work, which real gateways do on their own CPUs)."""

    algorithm: str
    gateways: int
    processes: int
    online_s: float
    job_s: float
    timings: tuple[RoundTiming, ...]
    aggregator_cpu_s: float
    aggregator_start_mb: float  # its resident memory before the job (earlier jobs' leftovers included)
    aggregator_peak_mb: float
    broker_cpu_s: float
    broker_peak_mb: float
    hosts_cpu_s: float
    hosts_rss_mb: float
    load_average: tuple[float, float, float]  # 1-minute load average before and after the job, and its max
    timed_out: int
    errors: int
    model: Any

    @property
    def phases(self) -> list[PhaseSummary]:
        return phases(self.timings)

    @property
    def rounds_s(self) -> float:
        return sum(t.seconds for t in self.timings)

    @property
    def between_rounds_s(self) -> float:
        """Job time outside rounds: the aggregator's own work between them (sums, splits)."""
        return self.job_s - self.rounds_s

    @property
    def bytes_up_per_gateway(self) -> float:
        return sum(t.bytes_up for t in self.timings) / self.gateways

    @property
    def bytes_down_per_gateway(self) -> float:
        return sum(t.bytes_down for t in self.timings) / self.gateways


def run_load(
    config: LoadConfig, *, progress: Callable[[str], None] = print, on_run: Callable[[LoadRun], None] | None = None
) -> list[LoadRun]:
    """Start the fleet once and train each of ``config.algorithms`` on it, measured;
    ``on_run`` hears each run as soon as it is done (a long benchmark saves it)."""
    runs = []
    with simulated_fleet(config.gateways, config.processes, progress=progress) as fleet:
        engine = TimedRoundEngine(fleet.agg)
        for name in config.algorithms:
            runs.append(_measured_job(name, fleet, engine, config))
            run = runs[-1]
            if on_run is not None:
                on_run(run)
            progress(
                f"{name}: {run.job_s:.1f} s, {len(run.timings)} rounds, aggregator {run.aggregator_cpu_s:.1f} "
                f"CPU s / {run.aggregator_peak_mb:.0f} MB, broker {run.broker_peak_mb:.0f} MB, "
                f"timed out {run.timed_out}"
            )
    return runs


def _measured_job(name: str, fleet: SimulatedFleet, engine: TimedRoundEngine, config: LoadConfig) -> LoadRun:
    broker, hosts = fleet.broker.pid, [p.pid for p in fleet.hosts]
    for pid in ("self", broker):
        reset_peak_rss(pid)
    start_mb = rss_mb()
    load = [os.getloadavg()[0]]
    sampling = threading.Event()

    def sample_load() -> None:
        while not sampling.wait(5.0):
            load.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample_load, daemon=True)
    sampler.start()
    engine.timings = []
    cpu = (cpu_seconds(), cpu_seconds(broker), sum(cpu_seconds(p) for p in hosts))
    started = time.monotonic()
    try:
        model, job = train_on_fleet(
            load_algorithm(name),
            fleet.agg,
            clients=fleet.ids,
            seed=config.seed,
            settings=JobSettings(deadline_s=config.deadline_s),
            discover_s=30.0,
            engine=engine,
        )
    finally:
        sampling.set()
        sampler.join()
    job_s = time.monotonic() - started
    load.append(os.getloadavg()[0])
    return LoadRun(
        algorithm=name,
        gateways=len(fleet.ids),
        processes=len(hosts),
        online_s=fleet.online_s,
        job_s=job_s,
        timings=tuple(engine.timings),
        aggregator_cpu_s=cpu_seconds() - cpu[0],
        aggregator_start_mb=start_mb,
        aggregator_peak_mb=peak_rss_mb(),
        broker_cpu_s=cpu_seconds(broker) - cpu[1],
        broker_peak_mb=peak_rss_mb(broker),
        hosts_cpu_s=sum(cpu_seconds(p) for p in hosts) - cpu[2],
        hosts_rss_mb=sum(rss_mb(p) for p in hosts),
        load_average=(load[0], load[-1], max(load)),
        timed_out=sum(len(r.timed_out) for r in job.results),
        errors=sum(len(r.errors) for r in job.results),
        model=model,
    )


# -- soak: jobs back to back -----------------------------------------------------------------


@dataclass(frozen=True)
class SoakConfig:
    gateways: int = 200
    processes: int = 4
    minutes: float = 2.0
    rounds_per_job: int = 2  # FedSCS-XGB boosting rounds per job
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


def run_soak(config: SoakConfig, *, progress=print) -> SoakReport:
    """Mosquitto, ``config.gateways`` simulated gateways in ``config.processes`` host processes,
    and FedSCS-XGB jobs back to back in this process for ``config.minutes``."""
    report = SoakReport(config)
    with simulated_fleet(config.gateways, config.processes, progress=progress) as fleet:
        algorithm = dataclasses.replace(load_algorithm("fedscs-xgb"), n_rounds=config.rounds_per_job)
        engine = RoundEngine(fleet.agg)  # one for every job: the aggregator's connection outlives them
        started = time.monotonic()
        while time.monotonic() - started < config.minutes * 60:
            _one_job(algorithm, fleet.agg, engine, fleet.ids, config, report)
            report.wall_s = time.monotonic() - started
            report.rss_mb.append(rss_mb())
            report.broker_rss_mb.append(rss_mb(fleet.broker.pid))
            progress(
                f"job {report.jobs}: {report.boosting_rounds} rounds, {report.rounds_per_minute:.1f}/min,"
                f" lost replies {report.lost_replies}, aggregator {report.rss_mb[-1]:.0f} MB, "
                f"broker {report.broker_rss_mb[-1]:.0f} MB"
            )
    return report


def _one_job(algorithm, agg, engine, ids: list[str], config: SoakConfig, report: SoakReport) -> None:
    try:
        _, job = train_on_fleet(
            algorithm,
            agg,
            clients=ids,
            settings=JobSettings(deadline_s=config.deadline_s),
            discover_s=10.0,
            engine=engine,
        )
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
