"""What a refused request costs the server: the rise of its peak memory while it answers one
9 MB JSON ``POST /api/jobs`` that it refuses (no token, an unknown token, an operator token but
a body over ``max_request_bytes``).

    .venv/bin/python benchmarks/bench_http_edge.py [--mb 9]

Each case runs in a fresh process: a server (operator token configured) on an in-memory fleet
of one gateway, served by uvicorn on a loopback socket; ``curl`` (another process) sends the
body; the rise is the process's ``VmHWM`` after the answer minus its ``VmRSS`` before the
request (reset first through ``/proc/self/clear_refs``). The body, written by the parent process,
is a valid job whose ``clients`` list is padded to the size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from _common import markdown_table, print_machine  # also puts the repo root on sys.path

CASES = {
    "no token": [],
    "unknown token": ["-H", "Authorization: Bearer nope"],
    "operator token, body over the limit": ["-H", "Authorization: Bearer op"],
}


def memory_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def one_case(name: str, body_path: str) -> dict:
    import uvicorn

    from aggregator.server.api import create_app
    from aggregator.server.app import Server, bind
    from aggregator.server.config import ServerConfig
    from aggregator.simulate import Simulation
    from tests.server.fleet_memory import fleet_data

    folder = tempfile.mkdtemp()
    sim = Simulation(fleet_data(n_clients=1))
    server = Server(
        ServerConfig(registry=os.path.join(folder, "r.db"), operator_tokens=("op",), schedule_tick_s=3600.0)
    )
    server.start(transport=sim.server)
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(server), log_level="error", access_log=False)
    web = uvicorn.Server(config)
    threading.Thread(target=web.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not web.started:
        time.sleep(0.02)
    size = os.path.getsize(body_path)
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # VmHWM starts again from the current RSS
    before = memory_kib("VmRSS")
    started = time.perf_counter()
    answer = subprocess.run(
        [
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            *CASES[name],
            "--data-binary",
            f"@{body_path}",
            f"http://127.0.0.1:{port}/api/jobs",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    elapsed = time.perf_counter() - started
    peak = memory_kib("VmHWM")
    web.should_exit = True
    server.stop()
    return {
        "case": name,
        "body_mb": round(size / 2**20, 1),
        "status": answer.stdout,
        "peak_rise_mb": round(max(0, peak - before) / 1024, 1),
        "answer_s": round(elapsed, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=9.0, help="body size in MiB (default 9)")
    parser.add_argument("--case", choices=list(CASES), help=argparse.SUPPRESS)
    parser.add_argument("--body", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(one_case(args.case, args.body)))
        return
    rows = []
    with tempfile.NamedTemporaryFile("w", suffix=".json") as body:
        json.dump({"model_id": "act", "clients": ["gw-1"] * int(args.mb * 2**20 / 8)}, body)
        body.flush()
        for name in CASES:
            run = subprocess.run(
                [sys.executable, __file__, "--case", name, "--body", body.name],
                capture_output=True,
                text=True,
                check=True,
            )
            rows.append(json.loads(run.stdout.strip().splitlines()[-1]))
    print_machine("HTTP edge: what a refused request costs", f"benchmarks/bench_http_edge.py --mb {args.mb:g}")
    print(
        markdown_table(
            ["case", "body MiB", "HTTP status", "peak memory rise MiB", "answer s"],
            [[str(r[k]) for k in ("case", "body_mb", "status", "peak_rise_mb", "answer_s")] for r in rows],
        )
    )


if __name__ == "__main__":
    main()
