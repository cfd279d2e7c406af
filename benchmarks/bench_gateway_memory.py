"""Peak RSS of ``wheelfed gateway`` over a one-hour replay of the five-sensor chair, accelerated.

    .venv/bin/python benchmarks/bench_gateway_memory.py [--quick] [--minutes M] [--speed S]

One hour (--quick: 10 minutes) of the chair of bench_gateway_cpu.py (three IMUs, ECG, 16-cell
pressure mat; firmware_bridge.importers.synthetic_chair) is replayed through a pty at ``--speed``
(default 60: the hour in a minute) into ``python -m edge_client.cli gateway --client-id gw-1 --serial
<pty> --store <tmp db> --no-broker --stats-every 0``. Every 0.5 s the benchmark reads the
gateway's VmRSS and VmHWM (/proc/<pid>/status) and how far the gateway has got in the recording
(the end of the latest window in its store, read from this process); the table shows RSS by
minute of recording, to see whether memory stays bounded. Peak = VmHWM, read every 2 ms after the
SIGTERM until the process has exited (shutdown included). Goal: < 80 MB.

Peers: the peak RSS of ``python -c "import numpy, serial, sqlite3, paho.mqtt.client, cbor2"``
(the floor: the gateway's third-party imports), of the same plus ``scipy.signal`` (what the
gateway would cost if its pipeline used scipy, as it did before filtering moved to the 20 Hz
grid), and of a bare ``python -c pass``; each reads its own VmHWM at the end.
MB = 10^6 bytes (/proc reports KiB).

Correctness (exit status 1 if any fails, or the goal is missed): the gateway kept up without
dropping frames (final stats dropped=0, crc_errors=0, lost_samples=0, frames = frames sent), it
stored the number of windows the batch path (``extract_recording``) gives for the same recording
+-1, the replay completed, and the gateway exited 0 on SIGTERM.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import numpy as np
from _common import description, markdown_table, print_machine
from _gateway_run import Gateway, Replayer, Sampler, gateway_failures, stored_position, wait_windows

GOAL_MB = 80.0
FLOOR_IMPORTS = "import numpy, serial, sqlite3, paho.mqtt.client, cbor2"
WITH_SCIPY = FLOOR_IMPORTS + ", scipy.signal"
_SELF_STATUS = (
    "; print(*(l.split()[1] for l in open('/proc/self/status') if l.split(':')[0] in ('VmHWM', 'RssAnon', 'RssFile')))"
)


def peak_of_python(code: str) -> tuple[float, float, float]:
    """(VmHWM, RssAnon, RssFile) in MB of ``python -c code``, read by the process itself just before exiting."""
    out = subprocess.run([sys.executable, "-c", code + _SELF_STATUS], capture_output=True, text=True, check=True)
    hwm, anon, file = (int(v) * 1024 / 1e6 for v in out.stdout.split()[-3:])
    return hwm, anon, file


def mb(kb: int) -> float:
    return kb * 1024 / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="10 minutes of recording instead of 60")
    parser.add_argument("--minutes", type=float, help="recording length (default 60; --quick 10)")
    parser.add_argument("--speed", type=float, default=60.0, help="replay speed (default 60 = a minute per hour)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wheelfed-bench-mem-") as tmp_name:
        return run(args, Path(tmp_name))


def run(args: argparse.Namespace, tmp: Path) -> int:
    minutes = args.minutes or (10.0 if args.quick else 60.0)
    seconds = 60.0 * minutes

    import scipy
    import serial

    from edge_client.processing import extract_recording
    from firmware_bridge.importers.synthetic_chair import write_chair
    from firmware_bridge.recording import Recording

    command = " ".join(["python", "benchmarks/bench_gateway_memory.py", *sys.argv[1:]])
    print_machine(
        "Gateway peak memory: one hour of the 5-sensor chair replayed through a pty",
        command,
        {"scipy": scipy.__version__, "pyserial": serial.__version__},
    )

    recording_path = write_chair(tmp / "chair.wfrec", seconds)
    recording = Recording.load(recording_path)
    n_frames = len(recording.frames)
    t0 = time.perf_counter()
    batch, _ = extract_recording(recording_path)
    batch_s = time.perf_counter() - t0
    expected = len(batch.X)
    del batch, recording
    print(
        f"- recording: {minutes:g} min, {n_frames:,} sample frames, {recording_path.stat().st_size / 1e6:.1f} MB; "
        f"batch path: {expected} windows in {batch_s:.1f} s; replay speed x{args.speed:g} "
        f"(~{seconds / args.speed:.0f} s of wall time)"
    )

    floor_name = f'python -c "{FLOOR_IMPORTS}" (the floor: the gateway\'s imports)'
    peers = {
        "python -c pass (the interpreter)": peak_of_python("pass"),
        floor_name: peak_of_python(FLOOR_IMPORTS),
        "the same plus scipy.signal (avoided by the gateway)": peak_of_python(WITH_SCIPY),
    }
    floor = peers[floor_name][0]

    db = tmp / "gw.db"
    replayer = Replayer(recording_path, args.speed)
    gateway = Gateway(replayer.slave, db, tmp / "gateway.log")
    sampler: Sampler | None = None
    try:
        gateway.start()
        sampler = Sampler(
            {"gateway": gateway.pid}, interval_s=0.5, memory=True, extra={"position": lambda: stored_position(db)}
        ).start()
        started = replayer.wait_started(120)
        sampler.sample_now()
        at_start = next(s for s in reversed(sampler.samples["gateway"]) if s.mem_kb)
        replayer.wait_done(seconds / args.speed + 300)
        stored = wait_windows(db, expected, timeout_s=120)
        caught_up = time.monotonic()
        code, out, stats = gateway.stop()
        time.sleep(0.6)  # the sampler has seen the process exit
        sampler.stop()
    finally:
        if sampler is not None and sampler._thread.is_alive():
            sampler.stop()
        gateway.kill()
        replayer.close()

    samples = [s for s in sampler.samples["gateway"] if s.mem_kb]
    sampled_peak_kb = max(s.mem_kb["VmHWM"] for s in samples)  # type: ignore[index]
    peak_kb = max(gateway.max_rss_kb or 0, sampled_peak_kb)  # the last VmHWM read before it exited
    top = max(samples, key=lambda s: s.mem_kb["VmRSS"])  # type: ignore[index]
    end = next(s for s in reversed(samples) if s.t <= caught_up)

    def row(name: str, total: float, anon: float, file: float) -> list[str]:
        return [name, f"{total:.1f}", f"{anon:.1f}", f"{file:.1f}", f"{total / floor:.2f}"]

    def gw(sample, total_key: str) -> tuple[float, float, float]:
        m = sample.mem_kb
        return mb(m[total_key]), mb(m["RssAnon"]), mb(m["RssFile"])

    rows = [row(name, *values) for name, values in peers.items()]
    rows += [
        row("wheelfed gateway after start-up (port open, no data yet; peak so far)", *gw(at_start, "VmHWM")),
        row(
            f"wheelfed gateway, peak over {minutes:g} min at x{args.speed:g} and shutdown (VmHWM; anon/file at "
            "the largest VmRSS sample)",
            mb(peak_kb),
            *gw(top, "VmRSS")[1:],
        ),
        row("wheelfed gateway, RSS after the last window (VmRSS)", *gw(end, "VmRSS")),
    ]
    print()
    print(markdown_table(["process", "peak RSS MB", "anon MB", "file-backed MB", "x floor"], rows))
    print(
        "\n(anon = the process's own heap and stacks; file-backed = mapped shared libraries and files, "
        "shared with any other process mapping them)\n"
    )

    # RSS by minute of recording the gateway had processed (position = end of its latest stored window),
    # up to the SIGTERM; shutdown (flush of the last window, final stats queries) is its own row.
    running = [(t, pos) for t, pos in sampler.extra if t <= caught_up]
    step = 5 if minutes >= 20 else 1
    by_minute = []

    def add_row(label: str, t: float, n_windows: int) -> None:
        s = next((s for s in samples if s.t >= t), samples[-1])
        m_kb = s.mem_kb or {}
        by_minute.append(
            [label, f"{s.t - started:.1f}", f"{n_windows:,}", f"{mb(m_kb['VmRSS']):.1f}", f"{mb(m_kb['VmHWM']):.1f}"]
        )

    settled = []  # (minute, RSS MB) once the store's page cache has filled
    for m in range(0, int(minutes), step):
        hit = next(
            (
                (t, pos)
                for t, pos in running
                if pos["position"][1] is not None  # type: ignore[index]
                and pos["position"][1] >= 60 * m
            ),
            None,
        )  # type: ignore[index]
        if hit is not None:
            add_row(str(m), hit[0], hit[1]["position"][0])  # type: ignore[index]
            if m >= minutes / 4:
                settled.append((m, float(by_minute[-1][3])))
    t_last, last = running[-1]
    n_last, end_last = last["position"]  # type: ignore[misc]
    add_row(f"{end_last / 60:.2f} (replay over, before SIGTERM)", t_last, n_last)
    settled.append((end_last / 60, float(by_minute[-1][3])))
    by_minute.append(
        [
            "shutdown (SIGTERM: last window flushed, final stats)",
            "",
            stats.get("stored", "?"),
            "-",
            f"{mb(peak_kb):.1f}",
        ]
    )
    print(markdown_table(["minute of recording", "wall s", "windows stored", "RSS MB", "peak so far MB"], by_minute))
    print()
    if len(settled) >= 2:
        slope = np.polyfit([m for m, _ in settled], [r for _, r in settled], 1)[0] * 60
        values = [r for _, r in settled]
        print(
            f"RSS from minute {settled[0][0]:g} to the end of the replay: {min(values):.1f} to {max(values):.1f} MB; "
            f"least-squares trend {slope:+.2f} MB per recorded hour ({len(settled)} points)"
        )
    cpu, wall = sampler.share("gateway", started, replayer.done or caught_up)
    rs = replayer.stats or {}
    print(
        f"gateway CPU during the x{args.speed:g} replay: {100 * cpu / wall:.0f} % of one core; replay "
        f"{rs.get('frames_sent')} frames, {rs.get('bytes_sent')} bytes in {rs.get('wall_s', 0):.1f} s, "
        f"max lag behind schedule {1000 * rs.get('max_lag_s', 0):.1f} ms; store caught up "
        f"{caught_up - (replayer.done or caught_up):.1f} s after the replay ended"
    )
    gw_stats = {
        k: stats.get(k) for k in ("frames", "crc_errors", "lost_samples", "dropped", "windows", "stored", "labelled")
    }
    print(f"gateway final stats: {' '.join(f'{k}={v}' for k, v in gw_stats.items())}; exit code {code}")

    failures = gateway_failures(code, out, stats, rs, stored, expected, hint=": lower --speed")
    if not rs.get("completed"):
        failures.append(f"the replay did not complete: {rs}")
    print(
        f"correctness: windows stored {stats.get('stored')} vs batch {expected} (+-1), "
        f"dropped={stats.get('dropped')}: " + ("all checks passed" if not failures else "FAILED")
    )
    for failure in failures:
        print(f"  - {failure}")
    peak = mb(peak_kb)
    print(
        f"\ngoal < {GOAL_MB:g} MB peak RSS: {'met' if peak < GOAL_MB else 'NOT met'} ({peak:.1f} MB = the import "
        f"floor of {floor:.1f} MB + {peak - floor:.1f} MB)"
    )
    return 0 if not failures and peak < GOAL_MB else 1


if __name__ == "__main__":
    raise SystemExit(main())
