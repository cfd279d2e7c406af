"""Broker memory per 1,000 gateway connections, RabbitMQ (one node, MQTT plugin) and mosquitto.

Each simulated gateway does what a ``wheelfed gateway`` does on the wire: an MQTT 3.1.1 CONNECT
with its own user and password, clean_session=0 (a persistent session), a retained last will on
its status topic, then a QoS 1 SUBSCRIBE to its inbox and to ``fleet/#``, and a retained online
status -- over a raw socket (no paho thread per connection), so thousands fit in one process.
The broker's resident memory (``/proc/PID/status`` VmRSS of the Erlang VM / mosquitto) is read
before any gateway connects and after each step.

Run (a few minutes; loopback only; ``ulimit -n`` must exceed the largest count)::

    .venv/bin/python -m tests.brokers.rabbitmq_memory --counts 1000 2000

Not a test (nothing asserts): the numbers go to SCALING.md with the command and the machine.
"""

from __future__ import annotations

import argparse
import socket
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from aggregator.broker import BrokerUser, MosquittoBroker
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from tests.rabbitmq_support import RabbitMQCluster


def _string(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("!H", len(data)) + data


def _remaining_length(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _packet(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + _remaining_length(len(body)) + body


def connect_packet(user: BrokerUser, will_topic: str, keepalive_s: int = 600) -> bytes:
    """CONNECT: MQTT 3.1.1, username + password, retained QoS 1 will, clean_session=0."""
    flags = 0x80 | 0x40 | 0x20 | 0x08 | 0x04  # username, password, will retain, will QoS 1, will
    variable = _string("MQTT") + bytes([4, flags]) + struct.pack("!H", keepalive_s)
    payload = b"".join(_string(field) for field in (user.name, will_topic, b"offline", user.name, user.password))
    return _packet(0x10, variable + payload)


def subscribe_packet(packet_id: int, *filters: str) -> bytes:
    return _packet(0x82, struct.pack("!H", packet_id) + b"".join(_string(f) + b"\x01" for f in filters))


def publish_retained_packet(packet_id: int, topic: str, payload: bytes) -> bytes:
    return _packet(0x30 | 0x02 | 0x01, _string(topic) + struct.pack("!H", packet_id) + payload)  # QoS 1, retain


def _read_packet(sock: socket.socket) -> tuple[int, bytes]:
    head = sock.recv(1)
    if not head:
        raise ConnectionError("broker closed the connection")
    length, shift = 0, 0
    while True:
        byte = sock.recv(1)[0]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    body = b""
    while len(body) < length:
        body += sock.recv(length - len(body))
    return head[0] & 0xF0, body


def connect_gateway(port: int, user: BrokerUser, layout: TopicLayout) -> socket.socket:
    """A gateway's session as the wire sees it; raises if the broker refuses any step."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(connect_packet(user, layout.status(user.name)))
    kind, body = _read_packet(sock)
    if kind != 0x20 or body[1] != 0:
        raise ConnectionError(f"{user.name}: CONNACK {body.hex()}")
    sock.sendall(subscribe_packet(1, layout.inbox(user.name), layout.fleet("#")))
    kind, body = _read_packet(sock)
    if kind != 0x90 or any(code == 0x80 for code in body[2:]):
        raise ConnectionError(f"{user.name}: SUBACK {body.hex()}")
    sock.sendall(publish_retained_packet(2, layout.status(user.name), b"online"))
    kind, _ = _read_packet(sock)
    if kind != 0x40:
        raise ConnectionError(f"{user.name}: no PUBACK")
    return sock


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass(frozen=True)
class Step:
    broker: str
    connections: int
    rss_mib: float
    seconds: float


def measure(broker: str, pid: int, port: int, users: list[BrokerUser], counts: list[int]) -> list[Step]:
    layout = TopicLayout()
    time.sleep(3.0)  # let a freshly started broker settle
    steps = [Step(broker, 0, rss_bytes(pid) / 2**20, 0.0)]
    sockets: list[socket.socket] = []
    try:
        for count in counts:
            started = time.monotonic()
            while len(sockets) < count:
                try:
                    sockets.append(connect_gateway(port, users[len(sockets)], layout))
                except OSError as exc:
                    raise ConnectionError(f"{broker}: gateway {len(sockets) + 1} of {count}: {exc}") from None
            elapsed = time.monotonic() - started
            time.sleep(3.0)
            steps.append(Step(broker, count, rss_bytes(pid) / 2**20, elapsed))
    finally:
        for sock in sockets:
            sock.close()
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 2000], help="connections after each step")
    parser.add_argument("--brokers", nargs="+", choices=("rabbitmq", "mosquitto"), default=["rabbitmq", "mosquitto"])
    args = parser.parse_args()
    gateways = [BrokerUser(f"gw-{i:05d}", f"pw-{i}") for i in range(max(args.counts))]
    users = [BrokerUser(AGGREGATOR_ID, "agg-pw"), *gateways]
    steps: list[Step] = []
    with tempfile.TemporaryDirectory(prefix="wf-broker-memory-") as tmp:
        if "rabbitmq" in args.brokers:
            with RabbitMQCluster(Path(tmp) / "rabbitmq", users) as rabbit:
                steps += measure("rabbitmq", rabbit.vm_pid(rabbit.nodes[0]), rabbit.port, users[1:], args.counts)
        if "mosquitto" in args.brokers:
            with MosquittoBroker(Path(tmp) / "mosquitto", users=users) as mosquitto:
                steps += measure("mosquitto", mosquitto.process.pid, mosquitto.port, users[1:], args.counts)
    print("broker      connections  RSS MiB  connect s  MiB per 1,000 (vs 0)")
    for step in steps:
        base = next(s for s in steps if s.broker == step.broker and s.connections == 0)
        per = (step.rss_mib - base.rss_mib) / step.connections * 1000 if step.connections else float("nan")
        print(f"{step.broker:10s}  {step.connections:11d}  {step.rss_mib:7.1f}  {step.seconds:9.1f}  {per:8.1f}")


if __name__ == "__main__":
    main()
