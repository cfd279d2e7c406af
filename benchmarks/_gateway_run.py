"""Helpers for the gateway benchmarks: child processes (gateway, replayer, bare readers) and /proc sampling.

The replayer and the bare reader are this file run as a script, so that each is a process of
its own whose CPU time and memory /proc reports separately:

    python benchmarks/_gateway_run.py replay RECORDING SPEED
        opens a pty, prints ``pty <slave path>``, waits for a reader, prints ``start <monotonic s>``,
        replays (firmware_bridge.replay.replay), prints ``done <monotonic s> <ReplayStats as JSON>``,
        then keeps the pty master open until its stdin closes (so nothing the reader has not read
        yet is lost when the replay ends).
    python benchmarks/_gateway_run.py paced RECORDING SPEED
        no serial link: the gateway's FrameProcessor (scratch store) fed in one thread with the
        frames a replay would send, on the replay's schedule; prints ``start`` and ``done`` likewise.
    python benchmarks/_gateway_run.py read SLAVE
        the gateway's read loop without the gateway: pyserial opened like SerialReader
        (timeout 0.05 s), ``port.read(port.in_waiting or 1)``, bytes counted and discarded;
        SIGTERM ends it and it prints ``bytes <n>``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import select
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

if __name__ == "__main__":  # child mode: only the repo root is needed on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
else:
    import _common  # noqa: F401  (puts the repo root on sys.path)

REPO_ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve()
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- /proc ----------------------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float | None:
    """utime + stime of the whole process (all threads), in seconds; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5)


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """utime + stime per thread id of a process, in seconds (empty once it is gone)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return out
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def memory_kb(pid: int) -> dict[str, int] | None:
    """VmRSS, VmHWM (peak RSS), ... in kB from /proc/<pid>/status; None once it is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return None
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key.startswith(("Vm", "Rss")):
            out[key] = int(value.split()[0])
    return out


@dataclass
class Sample:
    t: float  # time.monotonic()
    cpu_s: float | None
    mem_kb: dict[str, int] | None = None
    threads: dict[int, float] | None = None  # per-thread CPU seconds, for the processes asked for


class Sampler:
    """Samples CPU time (and optionally memory) of some processes every ``interval_s`` on a thread."""

    def __init__(
        self,
        pids: dict[str, int],
        interval_s: float = 0.25,
        memory: bool = False,
        extra: dict[str, object] | None = None,
        threads_of: tuple[str, ...] = (),
    ) -> None:
        self.pids, self.interval_s, self.memory, self.threads_of = dict(pids), interval_s, memory, threads_of
        self.samples: dict[str, list[Sample]] = {name: [] for name in pids}
        self.extra_fn = extra or {}
        self.extra: list[tuple[float, dict[str, object]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def add(self, name: str, pid: int) -> None:
        self.pids[name] = pid
        self.samples.setdefault(name, [])

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def sample_now(self) -> None:
        now = time.monotonic()
        for name, pid in list(self.pids.items()):
            cpu = cpu_seconds(pid)
            if cpu is not None:
                self.samples[name].append(
                    Sample(
                        now,
                        cpu,
                        memory_kb(pid) if self.memory else None,
                        thread_cpu_seconds(pid) if name in self.threads_of else None,
                    )
                )
        if self.extra_fn:
            self.extra.append((now, {k: fn() for k, fn in self.extra_fn.items()}))  # type: ignore[operator]

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample_now()
            self._stop.wait(self.interval_s)

    def _span(self, name: str, t_from: float, t_to: float) -> tuple[Sample, Sample]:
        inside = [s for s in self.samples[name] if t_from <= s.t <= t_to and s.cpu_s is not None]
        if len(inside) < 2:
            raise RuntimeError(f"fewer than 2 samples of {name} between {t_from:.1f} and {t_to:.1f}")
        return inside[0], inside[-1]

    def share(self, name: str, t_from: float, t_to: float) -> tuple[float, float]:
        """(CPU seconds, wall seconds) between the first sample at/after ``t_from`` and the last at/before ``t_to``."""
        a, b = self._span(name, t_from, t_to)
        return b.cpu_s - a.cpu_s, b.t - a.t  # type: ignore[operator]

    def thread_shares(self, name: str, t_from: float, t_to: float) -> tuple[dict[int, float], float]:
        """({tid: CPU seconds}, wall seconds) over the same span as ``share``."""
        a, b = self._span(name, t_from, t_to)
        assert a.threads is not None and b.threads is not None
        return {tid: cpu - a.threads.get(tid, 0.0) for tid, cpu in b.threads.items()}, b.t - a.t


# -- child processes ------------------------------------------------------------------------------
def _python_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class Replayer:
    """``_gateway_run.py replay`` (or ``paced``: no pty, the frames go to an in-process FrameProcessor) as a child."""

    def __init__(self, recording: Path, speed: float, mode: str = "replay") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE), mode, str(recording), repr(speed)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
            env=_python_env(),
        )
        self.pid = self.proc.pid
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, name=f"replayer-{self.pid}", daemon=True).start()
        self.slave = self._expect("pty", 120)[0] if mode == "replay" else ""
        self.started: float | None = None
        self.done: float | None = None
        self.stats: dict[str, object] | None = None

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")  # end of output

    def _expect(self, word: str, timeout_s: float) -> list[str]:
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            line = ""
        parts = line.split(maxsplit=2)
        if not parts or parts[0] != word:
            raise RuntimeError(f"replayer: expected {word!r}, got {line!r} (exit code {self.proc.poll()})")
        return parts[1:]

    def wait_started(self, timeout_s: float) -> float:
        self.started = float(self._expect("start", timeout_s)[0])
        return self.started

    def wait_done(self, timeout_s: float) -> dict[str, object]:
        t, stats = self._expect("done", timeout_s)
        self.done, self.stats = float(t), json.loads(stats)
        return self.stats

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Gateway:
    """``python -m edge_client.cli gateway`` on a serial port, stdout+stderr into a log file."""

    serial: str
    store: Path
    log: Path
    client_id: str = "gw-1"
    extra_args: list[str] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    max_rss_kb: int | None = None  # lifetime peak RSS, known after stop()

    @property
    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "edge_client.cli",
            "gateway",
            "--client-id",
            self.client_id,
            "--serial",
            self.serial,
            "--store",
            str(self.store),
            "--no-broker",
            "--stats-every",
            "0",
            *self.extra_args,
        ]

    def start(self) -> Gateway:
        self._log = open(self.log, "w")
        self.proc = subprocess.Popen(
            self.command, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=_python_env()
        )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, timeout_s: float = 60) -> tuple[int, str, dict[str, str]]:
        """SIGTERM; returns exit code, its output and the final stats line as a dict.

        Until the process has exited, its VmHWM is read every 2 ms, so ``max_rss_kb`` includes the
        shutdown. (Not ``wait4``'s ru_maxrss: Linux folds into it the parent's memory at the
        fork/vfork before exec, i.e. this benchmark's own RSS.)
        """
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            mem = memory_kb(self.pid)
            if not mem or "VmHWM" not in mem:  # gone, or a zombie whose memory is already released
                break
            self.max_rss_kb = max(self.max_rss_kb or 0, mem["VmHWM"])
            time.sleep(0.002)
        try:
            code = self.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._log.close()
        out = self.log.read_text()
        return code, out, final_stats(out)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def final_stats(output: str) -> dict[str, str]:
    """The last ``session=... frames=... dropped=...`` line the gateway printed, as a dict."""
    for line in reversed(output.splitlines()):
        if line.startswith("session="):
            return dict(item.split("=", 1) for item in line.split() if "=" in item)
    return {}


def gateway_failures(
    code: int, out: str, stats: dict[str, str], replay_stats: dict, stored: int, expected: int, *, hint: str = ""
) -> list[str]:
    """What a gateway run got wrong: exit code, drops/CRC errors/lost samples, frames, windows."""
    failures = []
    if code != 0:
        failures.append(f"gateway exit code {code}:\n{out[-2000:]}")
    for key in ("dropped", "crc_errors", "lost_samples"):
        if stats.get(key) != "0":
            failures.append(f"gateway final stats {key}={stats.get(key)} (expected 0){hint}")
    if stats.get("frames") != str(replay_stats.get("frames_sent")):
        failures.append(
            f"gateway decoded {stats.get('frames')} frames, the replay sent {replay_stats.get('frames_sent')}"
        )
    if abs(int(stats.get("stored", -10)) - expected) > 1 or abs(stored - expected) > 1:
        failures.append(f"gateway stored {stats.get('stored')} windows (store: {stored}); batch path: {expected}")
    return failures


class Reader:
    """A bare reader of a pty: ``_gateway_run.py read`` (python + pyserial) or ``cat`` (C)."""

    def __init__(self, slave: str, kind: str, out_dir: Path) -> None:
        self.kind = kind
        self.out_path = out_dir / f"reader-{kind}.out"
        self._out = open(self.out_path, "wb")
        cmd = [sys.executable, str(HERE), "read", slave] if kind == "python" else ["cat", slave]
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=_python_env())
        self.pid = self.proc.pid

    def stop(self) -> int:
        """Bytes the reader read (python: its own count; cat: the size of what it copied)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._out.close()
        if self.kind == "cat":
            return self.out_path.stat().st_size
        words = self.out_path.read_text().split()
        return int(words[-1]) if len(words) >= 2 and words[-2] == "bytes" else -1


def stored_position(db: Path) -> tuple[int, float | None]:
    """(windows stored, end of the latest window in recording seconds) read from another process."""
    if not db.exists():
        return 0, None
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0) as conn:
            n, end = conn.execute("SELECT count(*), max(end_us) FROM windows").fetchone()
        return int(n), None if end is None else end / 1e6
    except sqlite3.Error:
        return 0, None


def wait_windows(db: Path, expected: int, timeout_s: float, settle_s: float = 1.0) -> int:
    """Wait until the store holds ``expected - 1`` windows or more and has stopped growing for ``settle_s``."""
    deadline, last, since = time.monotonic() + timeout_s, -1, time.monotonic()
    while time.monotonic() < deadline:
        n, _ = stored_position(db)
        if n != last:
            last, since = n, time.monotonic()
        elif n >= expected - 1 and time.monotonic() - since >= settle_s:
            break
        time.sleep(0.1)
    return last


# -- child entry points ---------------------------------------------------------------------------
def _child_replay(recording: str, speed: float) -> int:
    from firmware_bridge.recording import Recording
    from firmware_bridge.replay import open_pty, replay

    rec = Recording.load(recording)  # before the pty exists: loading is not part of the replay
    master, slave = open_pty()
    print("pty", slave, flush=True)
    poller = select.poll()
    poller.register(master, select.POLLHUP)  # POLLHUP while no process has the slave open
    deadline = time.monotonic() + 120
    while poller.poll(0):
        if time.monotonic() > deadline:
            print("error no reader opened the pty", flush=True)
            return 1
        time.sleep(0.01)
    print("start", repr(time.monotonic()), flush=True)
    stats = replay(rec, master, speed=speed, wait_for_reader_s=10)
    print("done", repr(time.monotonic()), json.dumps(dataclasses.asdict(stats)), flush=True)
    sys.stdin.read()  # keep the master open until the parent is finished with the reader
    os.close(master)
    return 0


def _child_paced(recording: str, speed: float) -> int:
    """The gateway's FrameProcessor fed in this one thread with the replay's frames on the replay's schedule."""
    import tempfile

    from edge_client.processing import FrameProcessor
    from edge_client.store import WindowStore
    from firmware_bridge.recording import Recording
    from firmware_bridge.replay import schedule

    rec = Recording.load(recording)
    plan = schedule(rec)
    with (
        tempfile.TemporaryDirectory(prefix="wheelfed-paced-") as scratch,
        WindowStore(Path(scratch) / "windows.db") as store,
    ):
        processor = FrameProcessor(store, rec.metadata.session_id)
        t0 = time.monotonic()
        print("start", repr(t0), flush=True)
        first = plan[0].at_us if plan else 0
        for item in plan:
            delay = t0 + (item.at_us - first) / 1e6 / speed - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            processor.on_frame(item.frame)
        done = time.monotonic()
        processor.finish()
        print("done", repr(done), json.dumps({"windows": processor.stats.windows, "completed": True}), flush=True)
    sys.stdin.read()
    return 0


def _child_read(slave: str) -> int:
    import serial

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    port = serial.serial_for_url(slave, 115200, timeout=0.05)
    n = 0
    try:
        while not stop.is_set():
            try:
                data = port.read(port.in_waiting or 1)
            except (serial.SerialException, OSError):
                break
            n += len(data)
    finally:
        port.close()
    print("bytes", n, flush=True)
    return 0


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "replay":
        sys.exit(_child_replay(sys.argv[2], float(sys.argv[3])))
    if mode == "paced":
        sys.exit(_child_paced(sys.argv[2], float(sys.argv[3])))
    if mode == "read":
        sys.exit(_child_read(sys.argv[2]))
    raise SystemExit(f"unknown mode {mode!r}")
