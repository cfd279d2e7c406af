"""The full default fleet demo: wall time and peak memory of everything it runs.

    .venv/bin/python benchmarks/bench_demo.py [DEMO ARGS...]

Runs ``wheelfed demo`` (default settings unless arguments are given) as a subprocess, samples
the resident memory of its whole process tree (orchestrator, ``wheelfed server``, gateway
processes, mosquitto) from /proc every 0.5 s, and prints the wall time, the peak of the summed
RSS, the largest single process, the bytes through the aggregator by step (the server's MQTT
traffic, sent + received, from the demo's report), and the demo's own summary. Goals: under 5
minutes end to end, at most 60 MB through the aggregator. Exit status: the demo's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
from _common import markdown_table, print_machine


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def tree_rss_kb(root: int) -> dict[int, int]:
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo += _children(pid)
    rss = {}
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss[pid] = int(line.split()[1])
        except OSError:
            continue
    return rss


def main() -> int:
    args = sys.argv[1:]
    print_machine("The fleet demo: wall time and peak memory", "benchmarks/bench_demo.py " + " ".join(args))
    with tempfile.TemporaryDirectory(prefix="wheelfed-bench-demo-") as tmp:
        report = Path(tmp) / "report.json"
        command = [sys.executable, "-m", "edge_client.cli", "demo", "--report", str(report), *args]
        started = time.monotonic()
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
            env=dict(os.environ),
        )
        peak_total, peak_single, samples = 0, 0, 0
        done = threading.Event()

        def sample() -> None:
            nonlocal peak_total, peak_single, samples
            while not done.wait(0.5):
                rss = tree_rss_kb(proc.pid)
                if rss:
                    peak_total = max(peak_total, sum(rss.values()))
                    peak_single = max(peak_single, max(rss.values()))
                    samples += 1

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        output = proc.communicate()[0]
        wall = time.monotonic() - started
        done.set()
        sampler.join()
        facts = json.loads(report.read_text()) if report.exists() else {}
    summary = (
        output[output.find("=== WheelFed fleet demo: summary ===") :] if "summary ===" in output else output[-3000:]
    )
    print(
        markdown_table(
            ["demo", "exit", "wall s", "peak RSS, all processes (MB)", "largest process (MB)", "under 5 min"],
            [
                [
                    " ".join(args) or "defaults",
                    str(proc.returncode),
                    f"{wall:.0f}",
                    f"{peak_total / 1024:.0f}",
                    f"{peak_single / 1024:.0f}",
                    "yes" if wall < 300 else "no",
                ]
            ],
        )
    )
    print()
    total = int(facts.get("traffic_bytes") or 0)
    if total:
        steps = dict(facts.get("traffic_by_step") or {})
        steps["other (status messages, waiting between steps)"] = max(total - sum(steps.values()), 0)
        print(
            markdown_table(
                ["step (bytes through the aggregator, sent + received)", "MB", "share"],
                [[name, f"{value / 1e6:.1f}", f"{value / total:.0%}"] for name, value in steps.items()]
                + [["total", f"{total / 1e6:.1f}", "100%"]],
            )
        )
        print(
            f"\ntotal {total / 1e6:.1f} MB through the aggregator: {'within' if total <= 60e6 else 'OVER'} the 60 MB "
            "goal\n"
        )
    print(summary)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
