"""A TCP proxy between MQTT clients and a real broker that duplicates, delays and reorders
PUBLISH packets in both directions, deterministically by seed (the end-to-end fault tests).

Each accepted connection gets its own connection to the broker. The proxy reads whole MQTT
packets (fixed header and remaining length, the same in 3.1.1 and 5) and passes every packet
on, except that QoS 1 PUBLISH packets may be

* **duplicated** -- a second copy with the DUP flag, right behind the first or (a *late*
  duplicate) up to ``late_s`` after it: what a broker's redelivery after a reconnection, a
  client's retransmission, or the round engine's own re-sends put on the wire;
* **delayed** by up to ``delay_s``, so that later packets on *other* topics overtake it.

What a real broker or client could never do is avoided: packets on one topic keep their
order (MQTT's ordered topics; a late duplicate is the one exception, as a redelivery is),
nothing is held before CONNECT / CONNACK, a DISCONNECT waits for every held packet, and an
injected copy's PUBACK never reaches the side that did not send the copy. A QoS 1 packet id
means "this publication, until acknowledged": the receiver acknowledges the copy too, and a
second PUBACK for an id the sender may already have reused would acknowledge the wrong
message. So the proxy remembers, per direction and packet id, which of the PUBLISH packets it
wrote were its own copies, and drops exactly their PUBACKs (receivers acknowledge QoS 1 in the
order they receive: mosquitto at once, ``MqttTransport`` after its FIFO of handlers).
mosquitto (2.0.11) itself does not always keep one topic's order towards a subscriber whose
acknowledgements lag behind its inflight window (seen in these tests): what the proxy keeps is
the order of each hop it carries.

The decisions for a connection come from a ``random.Random`` seeded with (seed, client id,
connection number of that client id, direction) and the packet's position in its stream; the
timing of the processes around them is not the proxy's to fix. ``tap`` sees every PUBLISH
before the faults and may drop it (a test that kills a gateway at an exact point).
"""

from __future__ import annotations

import heapq
import itertools
import random
import socket
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

Direction = Literal["to_broker", "to_client"]

PUBLISH, PUBACK, CONNECT, DISCONNECT = 3, 4, 1, 14


@dataclass(frozen=True)
class Faults:
    """What the proxy does to QoS 1 PUBLISH packets: each is duplicated with probability
    ``duplicate`` (half of the copies late, up to ``late_s`` behind), and delayed by up to
    ``delay_s`` with probability ``delay``."""

    duplicate: float = 0.0
    delay: float = 0.0
    delay_s: float = 0.2
    late_s: float = 0.5
    seed: int = 0


@dataclass(frozen=True)
class Publish:
    """A PUBLISH as the proxy saw it (what ``tap`` gets)."""

    direction: Direction
    client_id: str
    topic: str
    payload: bytes
    qos: int


@dataclass
class ProxyStats:
    """Counts per (client id, direction): PUBLISH packets seen, copies injected, packets
    delayed, packets written ahead of an earlier-received PUBLISH still held (``overtook``),
    injected copies' PUBACKs dropped, and PUBLISH packets a tap dropped; connections per
    client id."""

    publishes: Counter = field(default_factory=Counter)
    duplicated: Counter = field(default_factory=Counter)
    delayed: Counter = field(default_factory=Counter)
    overtook: Counter = field(default_factory=Counter)
    acks_dropped: Counter = field(default_factory=Counter)
    tapped: Counter = field(default_factory=Counter)
    connections: Counter = field(default_factory=Counter)

    def total(self, what: str, direction: Direction | None = None, client: str | None = None) -> int:
        """The sum of counter ``what`` over the clients and directions matching the filters."""
        return sum(n for (c, d), n in getattr(self, what).items() if direction in (None, d) and client in (None, c))


@dataclass(frozen=True)
class Written:
    """A PUBLISH the proxy wrote: on the connection of ``client_id``, ``direction``, ``topic``,
    the ``recv_seq``-th packet read on that side (a copy: ``injected``)."""

    client_id: str
    direction: Direction
    topic: str
    recv_seq: int
    injected: bool


@dataclass(frozen=True)
class _Packet:
    raw: bytes
    kind: int
    recv_seq: int  # position in the direction's input (for the overtaking count)
    publish: bool = False  # a QoS 1 PUBLISH: its PUBACK is accounted
    packet_id: int | None = None
    injected: bool = False
    topic: str = ""


def _remaining_length(read: Callable[[int], bytes]) -> tuple[int, bytes]:
    value, shift, encoded = 0, 0, b""
    for _ in range(4):
        byte = read(1)
        encoded += byte
        value += (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return value, encoded
        shift += 7
    raise ValueError("malformed remaining length")


def _after_properties(body: bytes, pos: int) -> int:
    """Where an MQTT 5 property block starting at ``pos`` (a variable byte integer length, then
    the properties) ends."""
    length, shift = 0, 0
    while True:
        byte = body[pos]
        pos += 1
        length += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return pos + length


def _connect_fields(body: bytes) -> tuple[str, int]:
    """The client identifier and protocol level (4 = 3.1.1, 5) of a CONNECT packet's ``body``
    (after the fixed header)."""
    name_len = int.from_bytes(body[0:2], "big")
    pos = 2 + name_len
    level = body[pos]
    pos += 1 + 1 + 2  # level, flags, keep-alive
    if level == 5:
        pos = _after_properties(body, pos)
    id_len = int.from_bytes(body[pos : pos + 2], "big")
    return body[pos + 2 : pos + 2 + id_len].decode("utf-8", "replace"), level


class _Outbound:
    """One direction of one connection: the packets waiting to be written, by release time."""

    def __init__(self, link: "_Link", direction: Direction, sock: socket.socket) -> None:
        self.link, self.direction, self.sock = link, direction, sock
        self.heap: list[tuple[float, int, _Packet]] = []
        self.cond = threading.Condition()
        self.order = itertools.count()
        self.last_on_topic: dict[str, float] = {}
        self.latest = 0.0
        self.held_publishes: set[int] = set()  # recv_seq of PUBLISH packets queued, not written
        self.draining = False
        self.thread = threading.Thread(target=self.run, name=f"proxy-{direction}", daemon=True)

    def put(self, packet: _Packet, release_at: float, topic: str | None = None, ordered: bool = True) -> float:
        """Queue ``packet`` for ``release_at`` (later if an earlier packet on ``topic`` is held and
        ``ordered``); returns when it will be written."""
        with self.cond:
            if topic is not None and ordered:
                release_at = max(release_at, self.last_on_topic.get(topic, 0.0))
                self.last_on_topic[topic] = release_at
            if packet.kind == DISCONNECT:
                release_at = max(release_at, self.latest)
            self.latest = max(self.latest, release_at)
            if packet.kind == PUBLISH and not packet.injected:
                self.held_publishes.add(packet.recv_seq)
            heapq.heappush(self.heap, (release_at, next(self.order), packet))
            self.cond.notify()
            return release_at

    def drain(self) -> None:
        """Write everything queued now, in order, then stop (the reading side hit end of file:
        what was sent before reached the wire)."""
        with self.cond:
            self.draining = True
            self.cond.notify()

    def run(self) -> None:
        try:
            while True:
                with self.cond:
                    while True:
                        if self.link.closed:
                            return
                        if self.heap and (self.draining or self.heap[0][0] <= time.monotonic()):
                            _, _, packet = heapq.heappop(self.heap)
                            break
                        if self.draining:
                            return
                        timeout = self.heap[0][0] - time.monotonic() if self.heap else None
                        self.cond.wait(timeout)
                    if packet.kind == PUBLISH and not packet.injected:
                        self.held_publishes.discard(packet.recv_seq)
                        if self.held_publishes and min(self.held_publishes) < packet.recv_seq:
                            self.link.count("overtook", self.direction)
                if packet.publish:  # before the write: its PUBACK may come back at once
                    self.link.sent(self.direction, packet.packet_id, packet.injected)
                self.sock.sendall(packet.raw)
                if packet.kind == PUBLISH:
                    self.link.proxy.written.append(
                        Written(self.link.client_id, self.direction, packet.topic, packet.recv_seq, packet.injected)
                    )
        except OSError:
            pass
        finally:
            self.link.close()


class _Link:
    """One client connection and its connection to the broker."""

    def __init__(self, proxy: "MqttFaultProxy", client: socket.socket, broker: socket.socket) -> None:
        self.proxy, self.client, self.broker = proxy, client, broker
        self.closed = False
        self.client_id = ""
        self.level = 4  # the MQTT protocol level of the CONNECT
        self.rng: dict[Direction, random.Random] = {}
        self.lock = threading.Lock()
        # per direction of the PUBLISH: packet id -> whether each one written was an injected copy
        self.unacked: dict[Direction, dict[int, deque[bool]]] = {
            "to_broker": defaultdict(deque),
            "to_client": defaultdict(deque),
        }
        self.out: dict[Direction, _Outbound] = {
            "to_broker": _Outbound(self, "to_broker", broker),
            "to_client": _Outbound(self, "to_client", client),
        }
        self.ready = threading.Event()  # CONNECT seen: the client id (and so the decisions) known

    def start(self) -> None:
        for out in self.out.values():
            out.thread.start()
        for direction, sock in (("to_broker", self.client), ("to_client", self.broker)):
            threading.Thread(
                target=self.pump, args=(direction, sock), name=f"proxy-read-{direction}", daemon=True
            ).start()

    def count(self, what: str, direction: Direction) -> None:
        with self.proxy.lock:
            getattr(self.proxy.stats, what)[self.client_id, direction] += 1

    def sent(self, direction: Direction, packet_id: int, injected: bool) -> None:
        with self.lock:
            self.unacked[direction][packet_id].append(injected)

    def acked_copy(self, direction: Direction, packet_id: int) -> bool:
        """A PUBACK for ``packet_id`` of a PUBLISH written ``direction``: whether it answers an
        injected copy (and so must not reach the other side)."""
        with self.lock:
            waiting = self.unacked[direction].get(packet_id)
            if not waiting:
                return False  # answers a PUBLISH of an earlier connection (redelivered): pass it on
            injected = waiting.popleft()
            if not waiting:
                del self.unacked[direction][packet_id]
            return injected

    def pump(self, direction: Direction, sock: socket.socket) -> None:
        out = self.out[direction]
        opposite: Direction = "to_client" if direction == "to_broker" else "to_broker"

        def read(n: int) -> bytes:
            data = b""
            while len(data) < n:
                chunk = sock.recv(n - len(data))
                if not chunk:
                    raise EOFError
                data += chunk
            return data

        try:
            for seq in itertools.count():
                first = read(1)
                length, encoded = _remaining_length(read)
                body = read(length)
                raw = first + encoded + body
                kind = first[0] >> 4
                if kind == CONNECT and direction == "to_broker":
                    self.identify(*_connect_fields(body))
                if direction == "to_client":
                    self.ready.wait(10)
                if kind == PUBACK and self.acked_copy(opposite, int.from_bytes(body[:2], "big")):
                    self.count("acks_dropped", opposite)
                    continue
                if kind != PUBLISH:
                    out.put(_Packet(raw, kind, seq), time.monotonic())
                    continue
                self.publish(direction, out, first[0], raw, body, seq)
        except (EOFError, OSError, ValueError, IndexError):
            pass  # end of file, a reset, or bytes that are not MQTT
        finally:  # (a tap's exception still shows in the test run)
            out.drain()  # what was read reaches the other side, then the link closes

    def identify(self, client_id: str, level: int) -> None:
        with self.proxy.lock:
            number = self.proxy.stats.connections[client_id]
            self.proxy.stats.connections[client_id] += 1
        self.client_id, self.level = client_id, level
        seed = self.proxy.faults.seed
        self.rng = {d: random.Random(f"{seed}/{client_id}/{number}/{d}") for d in ("to_broker", "to_client")}
        self.ready.set()

    def publish(self, direction: Direction, out: _Outbound, header: int, raw: bytes, body: bytes, seq: int) -> None:
        qos = (header >> 1) & 3
        topic_len = int.from_bytes(body[:2], "big")
        topic = body[2 : 2 + topic_len].decode("utf-8", "replace")
        packet_id = int.from_bytes(body[2 + topic_len : 4 + topic_len], "big") if qos else None
        self.count("publishes", direction)
        faults = self.proxy.faults
        rng = self.rng.get(direction) or random.Random(f"{faults.seed}/unidentified/{direction}")
        # four draws per PUBLISH, whatever is decided: the decisions of the n-th depend on n only
        dup, late, delay, how_long = (rng.random() for _ in range(4))
        tap = self.proxy.tap
        if tap is not None:
            start = 2 + topic_len + (2 if qos else 0)
            if self.level == 5:
                start = _after_properties(body, start)
            if not tap(Publish(direction, self.client_id, topic, body[start:], qos)):
                self.count("tapped", direction)
                if packet_id is not None:  # its sender gets the PUBACK it waits for, as if delivered
                    opposite: Direction = "to_client" if direction == "to_broker" else "to_broker"
                    puback = bytes([PUBACK << 4, 2]) + packet_id.to_bytes(2, "big")
                    self.out[opposite].put(_Packet(puback, PUBACK, -1), time.monotonic())
                return
        now = time.monotonic()
        faulty = qos == 1 and topic != ""  # (an MQTT 5 topic alias has no name: left alone)
        release = now
        if faulty and delay < faults.delay:
            release = now + faults.delay_s * (0.25 + 0.75 * how_long)
            self.count("delayed", direction)
        release = out.put(_Packet(raw, PUBLISH, seq, qos == 1, packet_id, topic=topic), release, topic)
        if faulty and dup < faults.duplicate:
            copy = bytes([raw[0] | 0x08]) + raw[1:]  # DUP flag: "this may have been sent before"
            is_late = late < 0.5
            at = (release + faults.late_s * (0.2 + late)) if is_late else release
            out.put(_Packet(copy, PUBLISH, seq, True, packet_id, True, topic), at, topic, ordered=not is_late)
            self.count("duplicated", direction)

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for out in self.out.values():
            with out.cond:
                out.cond.notify_all()
        for sock in (self.client, self.broker):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self.ready.set()


class MqttFaultProxy:
    """Listens on ``port`` (a free one by default) of 127.0.0.1 and forwards each connection to
    the broker at ``broker_port``, applying ``faults``; a context manager.

    ``tap(publish) -> bool`` is called for every PUBLISH (in the reading thread of its
    direction) and drops it by returning False; the dropped packet's sender still gets its
    PUBACK, as if the broker had taken it. ``stats`` counts what was done; ``written`` lists
    every PUBLISH written, in order.

    Examples
    --------
    >>> with MqttFaultProxy(1883, Faults(duplicate=0.2, delay=0.2, seed=7)) as proxy:  # doctest: +SKIP
    ...     MqttTransport("gw-1", MqttConfig(port=proxy.port, ...)).connect()
    """

    def __init__(
        self,
        broker_port: int,
        faults: Faults = Faults(),
        *,
        port: int = 0,
        tap: Callable[[Publish], bool] | None = None,
        broker_host: str = "127.0.0.1",
    ) -> None:
        self.broker_address = (broker_host, broker_port)
        self.faults = faults
        self.tap = tap
        self.stats = ProxyStats()
        #: Every PUBLISH written, in order (what the proxy's own checks compare with what it read).
        self.written: list[Written] = []
        self.lock = threading.Lock()
        self._links: list[_Link] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._stopped = False
        self._thread = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                broker = socket.create_connection(self.broker_address, timeout=5)
            except OSError:  # the broker is down: the client sees its connection refused-ish
                client.close()
                continue
            broker.settimeout(None)
            for sock in (client, broker):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(self, client, broker)
            with self.lock:
                self._links = [k for k in self._links if not k.closed] + [link]
            link.start()

    def start(self) -> "MqttFaultProxy":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self.lock:
            links = list(self._links)
        for link in links:
            link.close()
        self._thread.join(5)

    def __enter__(self) -> "MqttFaultProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
