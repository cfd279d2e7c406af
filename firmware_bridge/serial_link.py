"""Reading frames from a serial port (or pty, or any pyserial URL) that may vanish and come back.

Two threads, so that a slow consumer can never make the gateway miss bytes: the *read* thread
only reads, decodes and enqueues — it never waits for the consumer; when the bounded queue is
full it drops the oldest frame and counts it (old samples are the least useful to a live
recogniser, and a full queue means the consumer is behind anyway). The *delivery* thread calls
the callbacks. A pulled USB cable shows up as SerialException/OSError: the port is closed and
reopened with exponential backoff (a udev ``/dev/serial/by-id/...`` path makes the same path come
back); sequence tracking carries on across the reconnect, so frames lost meanwhile are counted.

A path is not a device, though: when a replay ends its pty number is freed and the next process
to open a pty gets the same ``/dev/pts/N``; a USB adapter that re-enumerates comes back as a new
device node under the same name. So the reader tells the states apart -- ``up``, ``down`` (open
or read failed), ``gone`` (the path does not exist), ``busy`` (another process holds the port),
``denied`` (no permission to open it), ``ended`` (a pty's own path vanished: never reopened, see
``PTY_PATHS``) and ``changed`` (open again after the path had vanished
-- whatever comes back is a new node -- or on a node whose device number, inode or creation
time differ; the creation time alone is too coarse to tell a pty re-used within milliseconds
apart, which is why a path seen missing counts as changed) -- logs one warning line when
it enters any state but ``up`` (not one per retry), and numbers its connections: every
delivered frame carries the connection it was read on, so a consumer knows which frames came
after a reopen and must not assume they continue the stream it knew (``edge_client.processing``
decides that from descriptors and sequence numbers). The reader locks the port (``flock``, as
pyserial's ``exclusive``): two readers on one port would each get a random half of the bytes.

Neither thread may die of what it reads or whom it calls: an exception in the decoder, in the
port or in a callback is caught at the thread's loop, counted in ``faults`` (``Faults``: logged
once per kind) and the loop goes on -- a decoder fault drops the bytes it choked on, a port
fault reopens the port with backoff. What no loop can catch (a ``BaseException`` such as
``SystemExit`` from a callback) ends the thread with one logged line; ``dead_workers`` then
names it and ``restart`` starts it again (the gateway's supervisor does both, with backoff).
"""

from __future__ import annotations

import errno
import fcntl
import io
import logging
import os
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable

import serial

from .clock import wall_clock_us
from .descriptors import SensorDescriptor
from .frames import MAX_PAYLOAD, Frame, FrameDecoder, LinkStats

log = logging.getLogger(__name__)


#: A pty's own path (``replay --pty`` prints one): freed when its other end closes and handed to the
#: next process that opens a pty, so the reader never reopens it once it vanished (``ended``); a
#: stable name leading to a pty or adapter (a symlink, ``/dev/serial/by-id/...``) is reopened.
PTY_PATHS = ("/dev/pts/",)

#: The reader's threads, by the names ``dead_workers`` and ``restart`` use.
_WORKERS = ("read", "deliver")

#: What ``SerialReader.state`` reports.
UP, DOWN, GONE, BUSY, DENIED, CHANGED, ENDED = "up", "down", "gone", "busy", "denied", "changed", "ended"


class Faults:
    """Exceptions caught where a thread would otherwise die: counted by kind, logged once per kind.

    A kind is where it happened plus the exception's type. The first of a kind is logged with its
    traceback -- it is a bug or a broken dependency, and the traceback is what gets it fixed; the
    rest are only counted: a fault that recurs with every frame (a store on a full disk, a model
    that rejects its input) would otherwise write a traceback per frame, many a second, and bury
    everything else in the log. Thread-safe: one instance may be shared by several threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def record(self, where: str, exc: BaseException, **extra: object) -> None:
        kind = f"{where}: {type(exc).__name__}"
        with self._lock:
            count = self._counts[kind] = self._counts.get(kind, 0) + 1
        if count == 1:
            log.error(
                "%s failed and was skipped; later faults of this kind are only counted",
                where,
                exc_info=exc,
                extra={"kind": kind, **extra},
            )

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def by_kind(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


@dataclass(frozen=True)
class ReceivedFrame:
    frame: Frame
    raw: bytes  # the frame's exact bytes, for recording
    received_us: int  # gateway clock when its last byte was read
    connection: int = 1  # which opening of the port it was read on (1 = the first)


@dataclass(frozen=True)
class _Device:
    """What identifies the device node behind an open port: a re-used pty has the same device
    number and inode but a new node (creation time); a re-enumerated USB adapter a new node."""

    dev: int
    ino: int
    rdev: int
    ctime_ns: int


@dataclass(frozen=True)
class ReaderStats:
    link: LinkStats
    delivered: int
    dropped: int  # oldest frames dropped because the consumer fell behind
    queued: int
    opens: int
    open_failures: int
    disconnects: int
    callback_errors: int  # callbacks that raised (also in ``SerialReader.faults``)
    connected: bool
    state: str  # up, down, gone, busy, denied, changed or ended (see the module docstring)
    device_changes: int  # reopens that found another device under the path


class SerialReader:
    """Decodes frames from ``port`` (a device path, pty path or pyserial URL such as ``loop://``).

    ``on_frame(frame)`` and/or ``on_received(ReceivedFrame)`` run on the delivery thread, in
    arrival order. A callback that raises is counted in ``faults`` (logged once per kind);
    delivery goes on. ``faults`` may be shared with the consumer, to count everything in one place.

    ``read_timeout_s`` only bounds how long an idle read waits (a read returns as soon as a
    byte arrives): 0.5 s costs nothing in latency, while 0.05 s woke the thread 20 times a
    second for 0.4 % of a core on an idle link (measured), a fifth of the gateway's budget.
    """

    def __init__(
        self,
        port: str,
        baudrate: int = 115200,
        on_frame: Callable[[Frame], None] | None = None,
        *,
        on_received: Callable[[ReceivedFrame], None] | None = None,
        descriptors: Iterable[SensorDescriptor] = (),
        queue_size: int = 4096,
        read_timeout_s: float = 0.5,
        backoff_initial_s: float = 0.1,
        backoff_max_s: float = 5.0,
        max_payload: int = MAX_PAYLOAD,
        clock_us: Callable[[], int] = wall_clock_us,
        faults: Faults | None = None,
    ) -> None:
        if on_frame is None and on_received is None:
            raise ValueError("SerialReader needs on_frame or on_received: decoded frames must go somewhere")
        if queue_size < 1 or read_timeout_s <= 0 or not 0 < backoff_initial_s <= backoff_max_s:
            raise ValueError("queue_size >= 1, read_timeout_s > 0 and 0 < backoff_initial_s <= backoff_max_s")
        self.port = port
        self.baudrate = baudrate
        self._on_frame = on_frame
        self._on_received = on_received
        self._queue_size = queue_size
        self._read_timeout = read_timeout_s
        self._backoff = (backoff_initial_s, backoff_max_s)
        self._clock = clock_us
        self._decoder = FrameDecoder(descriptors, max_payload=max_payload)
        self._serial: serial.SerialBase | None = None
        self._queue: deque[ReceivedFrame] = deque()
        self._cond = threading.Condition()
        self._lock = threading.Lock()  # guards the decoder and counters read by `stats`
        self._stop = threading.Event()
        self._connected = threading.Event()
        self._reading_done = False
        self._threads: dict[str, threading.Thread] = {}
        self._life = threading.Lock()  # start, restart and stop of the threads, one at a time
        self.faults = faults if faults is not None else Faults()
        self._delivered = self._dropped = self._opens = self._open_failures = self._disconnects = 0
        self._callback_errors = self._device_changes = 0
        self._state = ""  # nothing tried yet (reported as down)
        self._device: _Device | None = None  # the node of the last connection (None: a URL, or never open)
        self._vanished = False  # the path was seen missing since the last connection
        self._first_attempt = threading.Event()
        self.error: Exception | None = None  # set when the port URL itself is invalid (reading stopped)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> SerialReader:
        with self._life:
            if self._threads:
                raise RuntimeError("SerialReader already started")
            for name in _WORKERS:
                self._spawn(name)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop reading, deliver what is already queued, close the port."""
        with self._life:
            self._stop.set()
            threads = list(self._threads.values())
        for t in threads:
            t.join(timeout)
        if any(t.is_alive() for t in threads):
            log.error("serial reader threads did not stop in time", extra={"port": self.port, "timeout_s": timeout})

    def dead_workers(self) -> list[str]:
        """The threads (``read``, ``deliver``) that ended although the reader was not stopped."""
        with self._life:
            if self._stop.is_set():
                return []
            return [name for name, t in self._threads.items() if not t.is_alive()]

    def restart(self, names: Iterable[str]) -> list[str]:
        """Start the named threads again if they are dead; returns those restarted.

        A dead read thread closed the port on its way out, and its decoder may hold part of a
        frame: the port is opened anew (a new connection, so ``processing`` asks the sensors to
        re-announce themselves) and the partial frame is dropped, as after a disconnect.
        """
        restarted = []
        with self._life:
            for name in _WORKERS:
                if name not in names or self._stop.is_set() or self._threads[name].is_alive():
                    continue
                if name == "read":
                    with self._lock:
                        self._decoder.reset()
                    with self._cond:
                        self._reading_done = False
                self._spawn(name)
                restarted.append(name)
        return restarted

    def _spawn(self, name: str) -> None:
        target = self._read_loop if name == "read" else self._deliver_loop
        thread = threading.Thread(
            target=self._worker, args=(name, target), name=f"serial-{name}:{self.port}", daemon=True
        )
        self._threads[name] = thread
        thread.start()

    def _worker(self, name: str, target: Callable[[], None]) -> None:
        """A thread's outermost frame: what ends it is logged once, for the supervisor to act on."""
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - the thread ends either way; say why, once
            log.error(
                "serial %s thread died; it is restarted by the gateway's supervisor",
                name,
                exc_info=exc,
                extra={"port": self.port},
            )

    def __enter__(self) -> SerialReader:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def wait_connected(self, timeout: float) -> bool:
        """Block until the port is open (its input buffer already flushed by pyserial)."""
        return self._connected.wait(timeout)

    @property
    def state(self) -> str:
        return self._state or DOWN

    def wait_first_attempt(self, timeout: float) -> str:
        """Block until the first open attempt is over; returns the state it left (a gateway
        refuses to start on a ``busy`` or ``denied`` port, while a ``gone`` one may still be
        plugged in)."""
        self._first_attempt.wait(timeout)
        return self.state

    @property
    def stats(self) -> ReaderStats:
        with self._lock, self._cond:
            return ReaderStats(
                link=self._decoder.stats.copy(),
                delivered=self._delivered,
                dropped=self._dropped,
                queued=len(self._queue),
                opens=self._opens,
                open_failures=self._open_failures,
                disconnects=self._disconnects,
                callback_errors=self._callback_errors,
                connected=self.connected,
                state=self.state,
                device_changes=self._device_changes,
            )

    # -- read thread -----------------------------------------------------------------------
    def _set_state(self, state: str, message: str, **extra: object) -> None:
        """Enter ``state``; one warning line per entry into a bad state, not per retry."""
        if state == self._state:
            return
        self._state = state
        level = logging.INFO if state == UP else logging.WARNING
        log.log(level, message, extra={"port": self.port, **extra})

    def _open(self) -> serial.SerialBase | None:
        """Open and lock the port: the open port, or None when it cannot be opened (now)."""
        try:
            port = self._serial = serial.serial_for_url(self.port, self.baudrate, timeout=self._read_timeout)
            device = self._lock_port(port)
        except ValueError as exc:  # unknown URL scheme or bad settings: retrying cannot help
            self.error = exc
            log.error(
                "serial port cannot be opened: check the port URL and baud rate",
                extra={"port": self.port, "error": str(exc)},
            )
            self._stop.set()
            self._first_attempt.set()
            return None
        except (serial.SerialException, OSError) as exc:
            self._close()
            with self._lock:
                self._open_failures += 1
            self._failed(exc)
            self._first_attempt.set()
            return None
        changed = self._device is not None and (self._vanished or (device is not None and device != self._device))
        self._device, self._vanished = device or self._device, False
        with self._lock:
            self._opens += 1
            self._device_changes += changed
        self._connected.set()
        if changed:
            self._set_state(
                CHANGED,
                "serial device changed: the path now leads to another device (a re-used pty "
                "or a re-enumerated adapter); its frames count as the known sensors only once "
                "they announce identical descriptors and continue their sequence",
            )
        else:
            self._set_state(UP, "serial port open", baudrate=self.baudrate)
        self._first_attempt.set()
        return port

    def _failed(self, exc: Exception) -> None:
        """Name why the port cannot be opened: missing, held by another process, or else."""
        if self._path_gone():
            return
        code = getattr(exc, "errno", None)
        if isinstance(exc, BlockingIOError) or code == errno.EBUSY:
            self._set_state(
                BUSY, "serial port busy: another process holds it (another gateway or wheelfed record?); retrying"
            )
        elif code in (errno.EACCES, errno.EPERM):
            self._set_state(
                DENIED,
                "serial port not accessible: permission denied (is the gateway's user in the dialout group?); retrying",
            )
        else:
            self._set_state(DOWN, "serial port cannot be opened; retrying", error=str(exc))

    def _path_gone(self) -> bool:
        """Enter ``gone`` if the port is a path that does not exist (URLs never are), or ``ended``
        for a pty's own path that vanished after it was open: stop reading then."""
        if "://" in self.port or os.path.exists(self.port):
            return False
        if self.port.startswith(PTY_PATHS) and self._device is not None:
            self._set_state(
                ENDED,
                "serial link ended: the pty's other end closed (the replay ended). A pty never "
                "comes back, and the next one with this number belongs to someone else, so it is "
                "not reopened; restart the gateway with the new path (stored windows are kept)",
            )
            self._stop.set()
            return True
        self._vanished = True
        self._set_state(
            GONE,
            "serial device gone: the path does not exist (unplugged, or the replay feeding "
            "the pty ended); reopening when it comes back",
        )
        return True

    def _lock_port(self, port: serial.SerialBase) -> _Device | None:
        """Lock the open port against other readers; the identity of its device node (None for URLs)."""
        try:
            fd = port.fileno()
        except (AttributeError, io.UnsupportedOperation):
            return None  # loop://, socket://...: no device node
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: held by another process
        st = os.fstat(fd)
        return _Device(st.st_dev, st.st_ino, st.st_rdev, st.st_ctime_ns)

    def _close(self) -> None:
        self._connected.clear()
        if self._serial is not None:
            try:
                self._serial.close()
            except (serial.SerialException, OSError):
                pass  # the device is already gone; closing is best effort
            self._serial = None

    def _read_loop(self) -> None:
        backoff = self._backoff[0]
        try:
            while not self._stop.is_set():
                try:
                    port = self._serial
                    if port is None:
                        port = self._open()
                        if port is None:
                            self._stop.wait(backoff)
                            backoff = min(backoff * 2, self._backoff[1])
                            continue
                        backoff = self._backoff[0]
                    try:
                        data = port.read(port.in_waiting or 1)
                    except (serial.SerialException, OSError) as exc:
                        self._close()
                        if not self._path_gone():  # a pty's path vanishes with its last reader
                            self._set_state(DOWN, "serial link lost; reconnecting", error=str(exc))
                        with self._lock:
                            self._disconnects += 1
                            self._decoder.reset()
                        continue
                    if data:
                        self._ingest(data)
                except Exception as exc:  # noqa: BLE001 - pyserial or a bug: start over from a closed port
                    self.faults.record("serial read", exc, port=self.port)
                    self._close()
                    with self._lock:
                        self._decoder.reset()
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, self._backoff[1])
        finally:
            self._close()
            with self._cond:  # let the delivery thread drain the queue and end, even without stop()
                self._reading_done = True
                self._cond.notify_all()

    def _ingest(self, data: bytes) -> None:
        received, connection = self._clock(), self._opens
        with self._lock:
            try:
                decoded = self._decoder.feed_with_bytes(data)
            except Exception as exc:  # noqa: BLE001 - bad frames are counted errors (frames.py); this is a bug
                self.faults.record("frame decoder", exc, port=self.port)
                self._decoder.reset()  # drop the bytes it choked on, or the next read chokes on them again
                return
        if not decoded:
            return
        with self._cond:
            for frame, raw in decoded:
                if len(self._queue) >= self._queue_size:
                    self._queue.popleft()
                    self._dropped += 1
                    if self._dropped == 1 or self._dropped % 1000 == 0:
                        log.warning(
                            "consumer too slow: dropping oldest frames",
                            extra={"port": self.port, "dropped": self._dropped},
                        )
                self._queue.append(ReceivedFrame(frame, raw, received, connection))
            self._cond.notify()

    # -- delivery thread -------------------------------------------------------------------
    def _deliver_loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._reading_done:
                    self._cond.wait()
                if not self._queue:
                    return
                item = self._queue.popleft()
            try:
                if self._on_received is not None:
                    self._on_received(item)
                if self._on_frame is not None:
                    self._on_frame(item.frame)
            except Exception as exc:  # noqa: BLE001 - a consumer's fault must not end delivery
                self.faults.record("frame delivery", exc, port=self.port, sensor_id=item.frame.sensor_id)
                with self._lock:
                    self._callback_errors += 1
            with self._lock:
                self._delivered += 1
