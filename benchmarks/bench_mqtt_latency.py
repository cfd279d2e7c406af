"""QoS-1 request/reply latency through a real mosquitto: the WheelFed stack against bare paho.

    .venv/bin/python benchmarks/bench_mqtt_latency.py [--quick] [--fix VARIANT ...] [--all-variants]

One mosquitto per variant, started by ``aggregator.broker.MosquittoBroker`` with the ``deploy/``
configs (password + ACL). In it, for 1 KB and 1 MB bodies:

- **stack**: ``RoundEngine.run_round(job, r, Ping(payload), ["gw-1"])`` on an aggregator
  ``MqttTransport``; gateway ``gw-1`` is an ``MqttTransport`` + ``Dispatcher`` answering
  ``Pong(payload)``. 1 MB bodies travel as 256 KiB chunks (the transport's ``max_payload``).
- **bare paho**: two plain paho-mqtt 2 clients (MQTT v5, QoS 1, same broker, same kind of
  users/ACL: the aggregator user and gateway user ``gw-2``), the gateway echoing the raw bytes
  from its ``on_message`` callback; 1 MB goes as one publish. No codec, no round engine.
- **bare paho, reply from a worker thread**: the same, but the echo is published from another
  thread after the network thread has handled the message (and so already queued its PUBACK),
  which is the order the WheelFed transport's dispatch thread produces.

Median and p99 (nearest rank) over N round trips after a warm-up; ratio = stack / bare median.
A hop breakdown of the stack (timestamps taken in this one process) shows where the time goes.

Variants (``--fix``; they patch nothing outside this process and this run's temp dir):

- ``as-is``           the code and ``deploy/`` config as they are (always measured first);
- ``client-nodelay``  TCP_NODELAY on every client socket (paho's ``on_socket_open`` hook,
                      installed by wrapping ``MqttTransport._make_client``; bare clients alike);
- ``broker-nodelay``  ``set_tcp_nodelay true`` appended to a copy of deploy/mosquitto's config;
- ``both``            both of the above.

Exit status 1 if any reply is missing or its payload differs from the request's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import _common  # noqa: F401  (puts the repo root on sys.path)
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

from _common import markdown_table, median, percentile, print_machine
from aggregator.broker import BrokerUser, MosquittoBroker
from aggregator.broker.mosquitto import DEPLOY_DIR
from aggregator.rounds import RoundEngine
from edge_client.dispatcher import Dispatcher
from shared.protocol.messages import Ping, Pong
from shared.protocol.topics import TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport

PASSWORDS = {"aggregator": "bench-agg", "gw-1": "bench-gw-1", "gw-2": "bench-gw-2"}
LAYOUT = TopicLayout()
VARIANTS = ("as-is", "client-nodelay", "broker-nodelay", "both")
SIZES = {"1 KB": 1_000, "1 MB": 1_000_000}
REPLY_TIMEOUT_S = 10.0


# -- variants -------------------------------------------------------------------------------------
def set_nodelay(_client: paho.Client, _userdata: object, sock: socket.socket) -> None:
    """paho ``on_socket_open`` hook: disable Nagle on the client's TCP socket."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


@contextlib.contextmanager
def client_nodelay(enabled: bool) -> Iterator[None]:
    """While active, every MqttTransport created gets ``set_nodelay`` as its socket-open hook."""
    if not enabled:
        yield
        return
    original = MqttTransport._make_client

    def make_client(self: MqttTransport) -> paho.Client:
        client = original(self)
        client.on_socket_open = set_nodelay
        return client

    MqttTransport._make_client = make_client  # type: ignore[method-assign]
    try:
        yield
    finally:
        MqttTransport._make_client = original  # type: ignore[method-assign]


def deploy_dir_for(broker_nodelay: bool, scratch: Path) -> Path:
    if not broker_nodelay:
        return DEPLOY_DIR
    target = scratch / "deploy"
    shutil.copytree(DEPLOY_DIR / "mosquitto", target / "mosquitto")
    for name in ("wheelfed.conf.in", "wheelfed-tls.conf.in"):
        conf = target / "mosquitto" / name
        if conf.exists():
            conf.write_text(conf.read_text() + "\n# bench_mqtt_latency --fix broker-nodelay\nset_tcp_nodelay true\n")
    return target


# -- the WheelFed stack ---------------------------------------------------------------------------
@dataclass
class HopLog:
    """perf_counter timestamps of one round, written by the paho and dispatch threads."""

    agg_pub: list[float] = field(default_factory=list)
    gw_recv: list[float] = field(default_factory=list)
    gw_handler: list[float] = field(default_factory=list)
    gw_pub: list[float] = field(default_factory=list)
    agg_recv: list[float] = field(default_factory=list)

    def clear(self) -> None:
        for values in (self.agg_pub, self.gw_recv, self.gw_handler, self.gw_pub, self.agg_recv):
            values.clear()


def instrument(transport: MqttTransport, received: list[float], published: list[float]) -> None:
    """Record when paho hands this transport a payload and when it publishes one."""
    on_message = transport._client.on_message
    publish_payload = transport._publish_payload

    def timed_on_message(client, userdata, msg):  # network thread
        received.append(time.perf_counter())
        on_message(client, userdata, msg)

    def timed_publish(topic: str, payload: bytes, retain: bool) -> None:
        published.append(time.perf_counter())
        publish_payload(topic, payload, retain)

    transport._client.on_message = timed_on_message
    transport._publish_payload = timed_publish  # type: ignore[method-assign]


def mqtt_config(broker: MosquittoBroker, user: str) -> MqttConfig:
    return MqttConfig(host=broker.host, port=broker.port, username=user, password=PASSWORDS[user])


def run_stack(broker: MosquittoBroker, payload: bytes, n: int, warmup: int, job: str, failures: list[str],
              gap_s: float = 0.0) -> tuple[list[float], dict[str, list[float]]]:
    """Round-trip seconds of ``n`` rounds, and the per-round hop breakdown."""
    hops = HopLog()
    gw = MqttTransport("gw-1", mqtt_config(broker, "gw-1"))
    dispatcher = Dispatcher(gw)

    def pong(request):
        hops.gw_handler.append(time.perf_counter())
        return Pong(request.body.payload)

    dispatcher.register(Ping, pong)
    dispatcher.start()
    agg = MqttTransport("aggregator", mqtt_config(broker, "aggregator"))
    engine = RoundEngine(agg)
    try:
        gw.connect()
        agg.connect()
        gw.flush()
        agg.flush()
        instrument(gw, hops.gw_recv, hops.gw_pub)
        instrument(agg, hops.agg_recv, hops.agg_pub)
        samples: list[float] = []
        breakdown: dict[str, list[float]] = {k: [] for k in (
            "aggregator: create + encode + publish call", "request: broker -> gateway (last payload in)",
            "gateway: dispatch queue + decode -> handler", "gateway: handler -> reply publish call",
            "reply: broker -> aggregator (last payload in)", "aggregator: decode + round engine wake-up")}
        for r in range(warmup + n):
            time.sleep(gap_s)
            hops.clear()
            start = time.perf_counter()
            result = engine.run_round(job, r + 1, Ping(payload), ["gw-1"], deadline_s=REPLY_TIMEOUT_S, quorum=0)
            done = time.perf_counter()
            reply = result.replies.get("gw-1")
            if reply is None or not isinstance(reply.body, Pong) or reply.body.payload != payload:
                failures.append(f"stack {job} round {r + 1}: missing or wrong reply "
                                f"(timed out: {result.timed_out}, errors: {result.errors})")
                continue
            if r < warmup:
                continue
            samples.append(done - start)
            b = list(breakdown.values())
            b[0].append(hops.agg_pub[0] - start)
            b[1].append(hops.gw_recv[-1] - hops.agg_pub[0])
            b[2].append(hops.gw_handler[-1] - hops.gw_recv[-1])
            b[3].append(hops.gw_pub[0] - hops.gw_handler[-1])
            b[4].append(hops.agg_recv[-1] - hops.gw_pub[0])
            b[5].append(done - hops.agg_recv[-1])
        if agg.stats.rejected or gw.stats.rejected:
            failures.append(f"stack {job}: rejected payloads {dict(agg.stats.rejected)} {dict(gw.stats.rejected)}")
        return samples, breakdown
    finally:
        gw.close()
        agg.close()


# -- bare paho --------------------------------------------------------------------------------------
def bare_client(broker: MosquittoBroker, client_id: str, user: str, nodelay: bool) -> paho.Client:
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=MQTTProtocolVersion.MQTTv5)
    client.username_pw_set(user, PASSWORDS[user])
    if nodelay:
        client.on_socket_open = set_nodelay
    return client


def connect_and_subscribe(client: paho.Client, broker: MosquittoBroker, topic: str) -> None:
    ready = threading.Event()
    client.on_connect = lambda c, _u, _f, rc, _p: c.subscribe(topic, qos=1) if not rc.is_failure else None
    client.on_subscribe = lambda _c, _u, _mid, _rcs, _p: ready.set()
    client.connect(broker.host, broker.port, keepalive=30)
    client.loop_start()
    if not ready.wait(10):
        raise ConnectionError(f"bare client {client._client_id!r} could not connect and subscribe")


def run_bare(broker: MosquittoBroker, payload: bytes, n: int, warmup: int, *, nodelay: bool, worker: bool,
             failures: list[str], label: str, gap_s: float = 0.0) -> list[float]:
    inbox, outbox = LAYOUT.inbox("gw-2"), LAYOUT.outbox("gw-2")
    gw = bare_client(broker, "bench-bare-gw", "gw-2", nodelay)
    agg = bare_client(broker, "bench-bare-agg", "aggregator", nodelay)
    replies: queue.Queue[bytes] = queue.Queue()
    work: queue.Queue[bytes | None] = queue.Queue()

    def echo_worker() -> None:
        while (item := work.get()) is not None:
            gw.publish(outbox, item, qos=1)

    if worker:
        gw.on_message = lambda _c, _u, msg: work.put(bytes(msg.payload))
        thread = threading.Thread(target=echo_worker, name="bare-echo", daemon=True)
        thread.start()
    else:
        gw.on_message = lambda c, _u, msg: c.publish(outbox, msg.payload, qos=1)
    agg.on_message = lambda _c, _u, msg: replies.put(bytes(msg.payload))
    try:
        connect_and_subscribe(gw, broker, inbox)
        connect_and_subscribe(agg, broker, outbox)
        samples = []
        for r in range(warmup + n):
            time.sleep(gap_s)
            start = time.perf_counter()
            agg.publish(inbox, payload, qos=1)
            try:
                reply = replies.get(timeout=REPLY_TIMEOUT_S)
            except queue.Empty:
                failures.append(f"{label} round {r + 1}: no reply within {REPLY_TIMEOUT_S}s")
                break
            done = time.perf_counter()
            if reply != payload:
                failures.append(f"{label} round {r + 1}: reply differs from the request")
            if r >= warmup:
                samples.append(done - start)
        return samples
    finally:
        if worker:
            work.put(None)
        for client in (agg, gw):
            client.disconnect()
            client.loop_stop()


# -- driver ----------------------------------------------------------------------------------------
def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="40 / 10 round trips, 5 warm-up (smoke run)")
    parser.add_argument("--n-small", type=int, default=None, help="1 KB round trips (default 200)")
    parser.add_argument("--n-large", type=int, default=None, help="1 MB round trips (default 50)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed round trips first (default 20)")
    parser.add_argument("--fix", action="append", choices=VARIANTS[1:], default=[],
                        help="also measure with this fix applied (repeatable)")
    parser.add_argument("--all-variants", action="store_true", help="measure every variant")
    parser.add_argument("--gap-ms", type=float, default=0.0,
                        help="idle time between round trips (default 0: back to back); > 40 ms shows an isolated "
                             "round, whose earlier ACKs have all been flushed")
    parser.add_argument("--no-worker-peer", action="store_true", help="skip the bare worker-thread peer")
    args = parser.parse_args(argv)
    n_small = args.n_small or (40 if args.quick else 200)
    n_large = args.n_large or (10 if args.quick else 50)
    warmup = args.warmup if args.warmup is not None else (5 if args.quick else 20)
    variants = list(VARIANTS) if args.all_variants else ["as-is", *dict.fromkeys(args.fix)]
    counts = {"1 KB": n_small, "1 MB": n_large}

    mosquitto_version = subprocess.run(["mosquitto", "-h"], capture_output=True, text=True).stdout.splitlines()[:1]
    print_machine("bench_mqtt_latency", "python " + " ".join(["benchmarks/bench_mqtt_latency.py", *sys.argv[1:]]), {
        "broker": (mosquitto_version or ["mosquitto ?"])[0] + ", 127.0.0.1, deploy/mosquitto/wheelfed.conf.in",
        "round trips": f"1 KB: {n_small}, 1 MB: {n_large}, after {warmup} warm-up each, "
                       f"{'back to back' if not args.gap_ms else f'{args.gap_ms:g} ms apart'}",
        "kernel delayed-ACK floor": "40 ms on Linux (TCP_DELACK_MIN)" if sys.platform.startswith("linux") else "?",
    })

    gap_s = args.gap_ms / 1e3
    failures: list[str] = []
    rows: list[list[str]] = []
    hop_rows: list[list[str]] = []
    for variant in variants:
        client_fix = variant in ("client-nodelay", "both")
        broker_fix = variant in ("broker-nodelay", "both")
        with tempfile.TemporaryDirectory(prefix="wheelfed-bench-") as scratch, client_nodelay(client_fix):
            deploy = deploy_dir_for(broker_fix, Path(scratch))
            users = [BrokerUser(name, pw) for name, pw in PASSWORDS.items()]
            with MosquittoBroker(Path(scratch) / "broker", users=users, deploy_dir=deploy) as broker:
                # Every bare run first, then the stack: the stack's aggregator keeps a persistent
                # session subscribed to wheelfed/v1/+/out, which would queue the bare replies
                # (raw bytes on gw-2/out) for it and make it reject them.
                payloads = {size_name: os.urandom(size) for size_name, size in SIZES.items()}
                results: dict[str, list[tuple[str, list[float]]]] = {size_name: [] for size_name in SIZES}
                for size_name, payload in payloads.items():
                    for worker in (False, True) if not args.no_worker_peer else (False,):
                        name = "bare paho (reply from worker thread)" if worker else "bare paho (reply in on_message)"
                        results[size_name].append((name, run_bare(
                            broker, payload, counts[size_name], warmup, nodelay=client_fix, worker=worker,
                            failures=failures, label=f"{name} {variant} {size_name}", gap_s=gap_s)))
                for size_name, payload in payloads.items():
                    job = f"bench-{variant}-{size_name.replace(' ', '')}"
                    stack, breakdown = run_stack(broker, payload, counts[size_name], warmup, job, failures, gap_s)
                    results[size_name].append(("WheelFed stack (RoundEngine + Dispatcher)", stack))
                    for hop, values in breakdown.items():
                        if values:
                            hop_rows.append([variant, size_name, hop, ms(median(values)), ms(percentile(values, 99))])
                for size_name, peers in results.items():
                    bare_median = median(peers[0][1]) if peers[0][1] else float("nan")
                    for name, samples in peers:
                        if samples:
                            rows.append([variant, size_name, name, str(len(samples)), ms(median(samples)),
                                         ms(percentile(samples, 99)), f"{median(samples) / bare_median:.2f}"])

    print(markdown_table(["variant", "body", "path", "n", "median ms", "p99 ms", "x bare"], rows))
    print()
    print("x bare = median / median of bare paho (reply in on_message) of the same variant and body size.")
    print()
    print("### Where the stack's time goes (median / p99 per hop, same process clock)\n")
    print(markdown_table(["variant", "body", "hop", "median ms", "p99 ms"], hop_rows))
    print()
    if failures:
        print("CORRECTNESS FAILURES:")
        for failure in failures[:20]:
            print(f"- {failure}")
        return 1
    print("correctness: every reply arrived and carried the request's payload byte for byte.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
