"""``wheelfed server`` under load: API latency of the fleet and model endpoints with
1,000 registered gateways and 500 model versions, on SQLite and on PostgreSQL; and the server's
CPU and memory while a training job runs over 50 gateway processes behind mosquitto.

    .venv/bin/python benchmarks/bench_server_api.py [--quick] [--skip-postgres] [--gateways 50]

Latency: a real ``wheelfed server`` process (uvicorn, bearer tokens on; the test suite's
``ServerProcess``) over a registry prefilled with 1,000 gateway rows (the server loads them into
its fleet tracker at start, as after a restart) and 500 versions of one FedSCS-XGB model (30 trees,
depth 4). One client in this process sends sequential requests -- on one keep-alive connection, and
with a new connection per request -- 20 warm-up requests, then ``--requests`` timed ones per
endpoint and kind (time to the last byte of the answer). PostgreSQL is a throwaway cluster
started with the server tests' own ``tests.server.conftest.PostgresCluster`` (Debian's
``initdb``/``pg_ctl``; fsync off, as there).

Load: ``--gateways`` real ``wheelfed gateway`` processes with 160 labelled windows each (the
end-to-end tests' stores), a fresh SQLite registry, one job ``POST /api/jobs`` (FedSCS-XGB,
10 rounds, depth 4, 64 bins, secure aggregation on: the defaults a server job runs with) from
submission to ``completed`` (federated evaluation included). The server's CPU seconds are its
process's user + system time over that span (``/proc/PID/stat``), its RSS (``VmRSS``) is sampled
every 0.2 s; peak RSS over its whole life is the kernel's ``VmHWM``. ``GET /api/gateways`` is timed during the job too.

Every process shares the machine: the numbers include the client, mosquitto and the gateways
competing for the same cores; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import description, markdown_table, percentile, print_machine  # also puts the repo root on sys.path

TOKEN = "bench-read-token"
OPERATOR = "bench-operator-token"
MODEL_ID = "act"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sample_model():
    """A model of the size a clinic's job produces: FedSCS-XGB, 10 rounds x 3 classes, depth 4."""
    import numpy as np

    import aggregator
    from aggregator.algorithms import FedSCSXGB

    rng = np.random.default_rng(0)
    clients = []
    for _ in range(4):
        X = rng.normal(size=(300, 12))
        clients.append((X, np.digitize(X[:, 0] + X[:, 1], [-0.5, 0.5])))
    return aggregator.simulate(FedSCSXGB(n_rounds=10, max_depth=4, n_bins=32), clients, seed=0)


def fill_registry(url: str, n_gateways: int, n_versions: int, model) -> None:
    """``n_versions`` versions of one model and ``n_gateways`` gateway rows, as a server that ran
    for a while leaves them."""
    from aggregator.fleet_status import GatewayRow
    from aggregator.registry import Registry

    now = time.time()
    with Registry(url) as registry:
        for v in range(1, n_versions + 1):
            registry.add(MODEL_ID, model, metrics={"accuracy": 0.9, "f1": 0.88, "n": 120.0})
        registry.save_gateways(
            [
                GatewayRow(
                    f"gw-{i:04d}",
                    i % 4 != 0,
                    now - i,
                    f"{MODEL_ID}:v{1 + i % n_versions}",
                    500 + i,
                    400,
                    "up",
                    "numpy",
                    1000 + i,
                    i % 3,
                    "sit",
                    "",
                    {"sit": 200, "push": 150, "lie": 50},
                    "wheelfed-tifex-2+abc",
                )
                for i in range(n_gateways)
            ]
        )


class Client:
    """Sequential requests, each timed to its last byte: on one keep-alive connection (as a
    browser polls the dashboard's API), or ``fresh`` -- a new connection per request, as
    ``wheelfed train/model --server`` (urllib) makes them."""

    def __init__(self, port: int, token: str = TOKEN, *, fresh: bool = False) -> None:
        self.port, self.fresh = port, fresh
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def request(self, method: str, path: str, body: object | None = None) -> tuple[float, int, bytes]:
        started = time.perf_counter()
        if self.fresh:
            self.connection.close()
            self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        self.connection.request(method, path, body=None if body is None else json.dumps(body), headers=self.headers)
        response = self.connection.getresponse()
        data = response.read()
        return time.perf_counter() - started, response.status, data

    def get(self, path: str) -> object:
        _, status, data = self.request("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {data[:200]!r}")
        return json.loads(data)

    def time(self, path: str, n: int, warmup: int = 20) -> tuple[list[float], int]:
        self.connection.close()  # uvicorn closes a connection idle for 5 s: open a new one (warm-up pays for it)
        for _ in range(warmup):
            self.request("GET", path)
        seconds, size = [], 0
        for _ in range(n):
            elapsed, status, data = self.request("GET", path)
            if status != 200:
                raise RuntimeError(f"GET {path}: {status} {data[:200]!r}")
            seconds.append(elapsed)
            size = len(data)
        return seconds, size

    def close(self) -> None:
        self.connection.close()


def endpoints(n_gateways: int, n_versions: int) -> list[tuple[str, str]]:
    mid = n_versions // 2
    return [
        ("GET /api/gateways (first page of 100)", "/api/gateways?offset=0&limit=100"),
        ("GET /api/gateways (last page of 100)", f"/api/gateways?offset={n_gateways - 100}&limit=100"),
        (f"GET /api/gateways (all {n_gateways})", f"/api/gateways?offset=0&limit={n_gateways}"),
        ("GET /api/models (first page of 100)", "/api/models?offset=0&limit=100"),
        ("GET /api/models (last page of 100)", f"/api/models?offset={n_versions - 100}&limit=100"),
        (f"GET /api/models/{MODEL_ID}/{mid} (one version)", f"/api/models/{MODEL_ID}/{mid}"),
        (f"GET /api/models/{MODEL_ID}/{mid}/download", f"/api/models/{MODEL_ID}/{mid}/download"),
    ]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def latency(backend: str, url: str, args, model, broker, password: str, folder: Path) -> list[list[str]]:
    """One server over a filled registry at ``url``: a row per endpoint."""
    from tests.server.server_support import ServerProcess

    log(f"{backend}: filling the registry ({args.n_gateways} gateways, {args.versions} versions)")
    started = time.perf_counter()
    fill_registry(url, args.n_gateways, args.versions, model)
    log(f"{backend}: filled in {time.perf_counter() - started:.1f} s; starting the server")
    server = ServerProcess(url, broker.port, password, folder / f"server-{backend}.log")
    rows = []
    try:
        kept, fresh = Client(server.port), Client(server.port, fresh=True)
        for name, path in endpoints(args.n_gateways, args.versions):
            seconds, size = kept.time(path, args.requests)
            new, _ = fresh.time(path, args.requests)
            rows.append(
                [
                    backend,
                    name,
                    f"{size:,}",
                    ms(percentile(seconds, 50)),
                    ms(percentile(seconds, 99)),
                    ms(percentile(new, 50)),
                    ms(percentile(new, 99)),
                ]
            )
            log(f"  {rows[-1]}")
        kept.close()
        fresh.close()
    finally:
        server.terminate()
    return rows


def load_average() -> str:
    return " / ".join(f"{v:.1f}" for v in os.getloadavg())


def memory_bytes(pid: int, field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak over the process's life) from ``/proc/PID/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for process {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (``/proc/PID/stat`` fields 14 and 15, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def under_load(args, folder: Path) -> tuple[list[list[str]], list[str]]:
    """The server's CPU and memory over one job with ``args.gateways`` gateway processes."""
    from aggregator.broker import BrokerUser, MosquittoBroker
    from aggregator.fleet import GatewayProcesses
    from tests.e2e.fleet_support import fill_store
    from tests.server.server_support import ServerProcess

    gateways = [f"gw-{i:02d}" for i in range(args.gateways)]
    passwords = {"aggregator": "bench-agg", **{g: f"pw-{g}" for g in gateways}}
    stores = {g: folder / f"{g}.db" for g in gateways}
    for i, path in enumerate(stores.values()):
        fill_store(path, i % 8)
    with MosquittoBroker(folder / "broker-load", users=[BrokerUser(n, p) for n, p in passwords.items()]) as broker:
        processes = GatewayProcesses(broker.port, 5, passwords, folder)
        server = None
        try:
            log(f"starting {len(gateways)} gateway processes (load average {load_average()})")
            started = time.perf_counter()
            for g in gateways:
                processes.start(
                    g,
                    "--store",
                    str(stores[g]),
                    "--holdout-fraction",
                    "0.2",
                    "--model-dir",
                    str(folder / f"{g}-models"),
                )
            server = ServerProcess(
                str(folder / "load.db"), broker.port, passwords["aggregator"], folder / "server-load.log"
            )
            client = Client(server.port, OPERATOR, fresh=True)
            deadline = time.monotonic() + 900
            while sum(row["online"] for row in client.get(f"/api/gateways?limit={len(gateways)}")) < len(gateways):
                if time.monotonic() > deadline:
                    raise RuntimeError("the gateways did not all come online within 900 s")
                time.sleep(1)
            log(f"all {len(gateways)} online after {time.perf_counter() - started:.0f} s")
            time.sleep(2)
            pid = server.process.pid
            idle_rss = memory_bytes(pid, "VmRSS")
            cpu_before = cpu_seconds(pid)
            load_before = load_average()
            config = {"n_rounds": 10, "max_depth": 4, "n_bins": 64}
            t0 = time.perf_counter()
            _, status, data = client.request(
                "POST", "/api/jobs", {"algorithm": "fedscs-xgb", "model_id": "load", "config": config}
            )
            if status != 201:
                raise RuntimeError(f"POST /api/jobs: {status} {data!r}")
            job_id = json.loads(data)["job_id"]
            peak, during = idle_rss, []
            while True:
                elapsed, _, data = client.request("GET", "/api/gateways?offset=0&limit=100")
                during.append(elapsed)
                job = client.get(f"/api/jobs/{job_id}")
                peak = max(peak, memory_bytes(pid, "VmRSS"))
                if job["state"] in ("completed", "failed", "cancelled"):
                    break
                time.sleep(0.2)
            wall = time.perf_counter() - t0
            cpu = cpu_seconds(pid) - cpu_before
            if job["state"] != "completed":
                raise RuntimeError(f"the job ended {job['state']}: {job['error']}")
            hwm = memory_bytes(pid, "VmHWM")
            load_after = load_average()
            client.close()
        finally:
            if server is not None:
                server.terminate()
            processes.stop_all()
    answered = f"{job['rounds'][-1]['answered']}/{job['rounds'][-1]['selected']}" if job["rounds"] else "-"
    rows = [
        [
            str(len(gateways)),
            f"FedSCS-XGB {config['n_rounds']} rounds, depth {config['max_depth']}, "
            f"B = {config['n_bins']}, secure aggregation",
            answered,
            f"{wall:.1f}",
            f"{cpu:.1f}",
            f"{100 * cpu / wall:.0f}",
            f"{idle_rss / 2**20:.0f}",
            f"{peak / 2**20:.0f}",
            f"{hwm / 2**20:.0f}",
            ms(percentile(during, 50)),
            ms(percentile(during, 99)),
        ]
    ]
    notes = [
        f"load average (1/5/15 min) before the job {load_before}, after {load_after}; "
        f"{len(during)} GET /api/gateways requests during the job"
    ]
    return rows, notes


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument(
        "--quick", action="store_true", help="100 gateways rows, 120 versions, 50 requests, 10 gateway processes"
    )
    parser.add_argument("--skip-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--skip-load", action="store_true", help="latency only")
    parser.add_argument("--requests", type=int, default=300, help="timed requests per endpoint")
    parser.add_argument("--gateways", type=int, default=50, help="gateway processes during the job")
    args = parser.parse_args()
    args.n_gateways, args.versions = (1000, 500) if not args.quick else (200, 120)
    if args.quick:
        args.requests, args.gateways = min(args.requests, 50), min(args.gateways, 10)

    from aggregator.broker import BrokerUser, MosquittoBroker
    from tests.server.conftest import PostgresCluster, _pg_bin

    folder = Path(tempfile.mkdtemp(prefix="wheelfed-bench-server-"))
    command = "nice -n 10 .venv/bin/python benchmarks/bench_server_api.py " + " ".join(sys.argv[1:])
    print_machine(
        "Server API latency and load", command.strip(), {"load average at start (1/5/15 min)": load_average()}
    )
    model = sample_model()
    log(f"model: {model.n_trees} trees, {len(model.to_cbor()):,} bytes CBOR")
    os.environ["WHEELFED_READ_TOKENS"] = TOKEN  # the ServerProcess inherits them: auth is on, as in a clinic
    os.environ["WHEELFED_OPERATOR_TOKENS"] = OPERATOR
    rows: list[list[str]] = []
    try:
        password = "bench-agg"
        with MosquittoBroker(folder / "broker", users=[BrokerUser("aggregator", password)]) as broker:
            rows += latency("SQLite", str(folder / "latency.db"), args, model, broker, password, folder)
            if args.skip_postgres:
                log("PostgreSQL skipped (--skip-postgres)")
            elif _pg_bin("initdb") is None:
                log("PostgreSQL skipped: initdb/pg_ctl are not installed (apt-get install postgresql)")
            else:
                pg_folder = Path(tempfile.mkdtemp(prefix="wheelfed-pg-"))  # owned by postgres when run as root
                cluster = PostgresCluster(pg_folder)
                cluster.start()
                try:
                    rows += latency("PostgreSQL", cluster.database(), args, model, broker, password, folder)
                finally:
                    cluster.stop()
                    shutil.rmtree(pg_folder, ignore_errors=True)
        print(
            f"API latency, {args.n_gateways:,} registered gateways and {args.versions} versions of one model "
            f"({model.n_trees} trees, {len(model.to_cbor()):,} bytes CBOR); {args.requests} sequential requests "
            "per endpoint and client kind, bearer token checked; milliseconds to the last byte:\n"
        )
        print(
            markdown_table(
                [
                    "registry",
                    "endpoint",
                    "answer bytes",
                    "keep-alive p50",
                    "keep-alive p99",
                    "new connection p50",
                    "new connection p99",
                ],
                rows,
            )
        )
        print(f"\nload average after the latency runs (1/5/15 min): {load_average()}\n")
        if not args.skip_load:
            load_rows, notes = under_load(args, folder)
            print("Server process during one job (submission to completed, federated evaluation included):\n")
            print(
                markdown_table(
                    [
                        "gateway processes",
                        "job",
                        "answered (last round)",
                        "wall s",
                        "server CPU s",
                        "server CPU %",
                        "RSS idle MiB",
                        "RSS peak in job MiB",
                        "VmHWM MiB",
                        "GET /api/gateways p50 ms (new connection)",
                        "p99 ms",
                    ],
                    load_rows,
                )
            )
            print()
            print("\n".join(notes))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
