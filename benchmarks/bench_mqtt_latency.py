"""QoS-1 request/reply latency through a real mosquitto: the WheelFed stack against bare paho.

    .venv/bin/python benchmarks/bench_mqtt_latency.py [--quick] [--gap-ms MS] [--no-worker-peer]

One mosquitto, started by ``aggregator.broker.MosquittoBroker`` with the ``deploy/`` config
(password + ACL, ``set_tcp_nodelay true``). In it, for 1 KB and 1 MB bodies:

- **stack**: ``RoundEngine.run_round(job, r, Ping(payload), ["gw-1"])`` on an aggregator
  ``MqttTransport``; gateway ``gw-1`` is an ``MqttTransport`` + ``Dispatcher`` answering
  ``Pong(payload)``. 1 MB bodies travel as 256 KiB chunks (the transport's ``max_payload``).
- **bare paho**: two plain paho-mqtt 2 clients (MQTT v5, QoS 1, the aggregator user and gateway
  user ``gw-2`` under the same ACL), the gateway echoing the raw bytes from ``on_message``, or
  from a worker thread as the transport's dispatch thread does; 1 MB goes as one publish.

Before the TCP_NODELAY fix a 1 KB round trip took ~88 ms: a QoS-1 PUBACK left on the socket made
Nagle hold the next PUBLISH for the peer's 40 ms delayed ACK, on the broker and on the client side.
The bare peers therefore disable Nagle too (``_disable_nagle``, the transport's socket-open hook),
and the script checks every client socket and the broker config for it.

Median and p99 (nearest rank) over N round trips after a warm-up; x bare = stack / bare median.
A hop breakdown of the stack's 1 KB rounds (one process clock) shows where the time goes.
Exit status 1 if a reply is missing or differs from the request, or if Nagle is on anywhere.
"""

from __future__ import annotations

import argparse
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import _common  # noqa: F401  (puts the repo root on sys.path)
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

from _common import description, markdown_table, median, percentile, print_machine
from aggregator.broker import BrokerUser, MosquittoBroker
from aggregator.rounds import RoundEngine
from edge_client.dispatcher import Dispatcher
from shared.protocol.messages import Ping, Pong
from shared.protocol.topics import TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport, _disable_nagle

PASSWORDS = {"aggregator": "bench-agg", "gw-1": "bench-gw-1", "gw-2": "bench-gw-2"}
LAYOUT = TopicLayout()
SIZES = {"1 KB": 1_000, "1 MB": 1_000_000}
REPLY_TIMEOUT_S = 10.0
ROUND_TRIP = "round trip"
HOPS = (
    "aggregator: create + encode + publish call",
    "request: broker -> gateway (last payload in)",
    "gateway: dispatch queue + decode -> handler",
    "gateway: handler -> reply publish call",
    "reply: broker -> aggregator (last payload in)",
    "aggregator: decode + round engine wake-up",
)

#: Round trip number r -> its timings in seconds (``ROUND_TRIP``, maybe hops), or None if it failed.
RoundTrip = Callable[[int], dict[str, float] | None]


def timed_rounds(round_trip: RoundTrip, n: int, warmup: int, gap_s: float) -> dict[str, list[float]]:
    """Run ``warmup + n`` round trips, ``gap_s`` apart; keep the last ``n``'s timings. Stops at a failure."""
    samples: dict[str, list[float]] = {}
    for r in range(warmup + n):
        time.sleep(gap_s)
        timings = round_trip(r + 1)
        if timings is None:
            break
        if r >= warmup:
            for key, seconds in timings.items():
                samples.setdefault(key, []).append(seconds)
    return samples


def check_nodelay(label: str, client: paho.Client, failures: list[str]) -> None:
    sock = client.socket()
    if sock is None or not sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY):
        failures.append(f"{label}: TCP_NODELAY is off on its socket")


# -- the WheelFed stack ---------------------------------------------------------------------------
def instrument(transport: MqttTransport, received: list[float], published: list[float]) -> None:
    """Record when paho hands this transport a payload and when the transport publishes one."""
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


def run_stack(
    broker: MosquittoBroker, payload: bytes, n: int, warmup: int, gap_s: float, job: str, failures: list[str]
) -> dict[str, list[float]]:
    """``ROUND_TRIP`` seconds of ``n`` rounds and, per ``HOPS`` entry, each round's time in that hop."""
    # perf_counter stamps of the current round, appended by the paho and dispatch threads
    agg_pub, gw_recv, gw_handler, gw_pub, agg_recv = stamps = [[] for _ in range(5)]
    gw = MqttTransport("gw-1", mqtt_config(broker, "gw-1"))
    dispatcher = Dispatcher(gw)

    def pong(request):
        gw_handler.append(time.perf_counter())
        return Pong(request.body.payload)

    dispatcher.register(Ping, pong)
    dispatcher.start()
    agg = MqttTransport("aggregator", mqtt_config(broker, "aggregator"))
    engine = RoundEngine(agg)

    def round_trip(r: int) -> dict[str, float] | None:
        for values in stamps:
            values.clear()
        start = time.perf_counter()
        result = engine.run_round(job, r, Ping(payload), ["gw-1"], deadline_s=REPLY_TIMEOUT_S, min_replies=0)
        done = time.perf_counter()
        reply = result.replies.get("gw-1")
        if reply is None or not isinstance(reply.body, Pong) or reply.body.payload != payload:
            failures.append(
                f"stack {job} round {r}: missing or wrong reply "
                f"(timed out: {result.timed_out}, errors: {result.errors})"
            )
            return None
        edges = (start, agg_pub[0], gw_recv[-1], gw_handler[-1], gw_pub[0], agg_recv[-1], done)
        return {ROUND_TRIP: done - start, **{hop: b - a for hop, a, b in zip(HOPS, edges, edges[1:])}}

    try:
        for transport in (gw, agg):
            transport.connect()
            transport.flush()
            check_nodelay(f"stack {job}, {transport.client_id}", transport._client, failures)
        instrument(gw, gw_recv, gw_pub)
        instrument(agg, agg_recv, agg_pub)
        samples = timed_rounds(round_trip, n, warmup, gap_s)
        if agg.stats.rejected or gw.stats.rejected:
            failures.append(f"stack {job}: rejected payloads {dict(agg.stats.rejected)} {dict(gw.stats.rejected)}")
        return samples
    finally:
        gw.close()
        agg.close()


# -- bare paho --------------------------------------------------------------------------------------
def bare_client(broker: MosquittoBroker, user: str, topic: str, on_message: Callable) -> paho.Client:
    """A connected paho client subscribed to ``topic``, Nagle off like the transport's."""
    client = paho.Client(
        CallbackAPIVersion.VERSION2, client_id=f"bench-bare-{user}", protocol=MQTTProtocolVersion.MQTTv5
    )
    client.username_pw_set(user, PASSWORDS[user])
    client.on_socket_open = _disable_nagle
    client.on_message = on_message
    ready = threading.Event()
    client.on_connect = lambda c, _u, _f, rc, _p: c.subscribe(topic, qos=1) if not rc.is_failure else None
    client.on_subscribe = lambda _c, _u, _mid, _rcs, _p: ready.set()
    client.connect(broker.host, broker.port, keepalive=30)
    client.loop_start()
    if not ready.wait(10):
        client.loop_stop()
        raise ConnectionError(f"bare client {user!r} could not connect and subscribe")
    return client


def run_bare(
    broker: MosquittoBroker,
    payload: bytes,
    n: int,
    warmup: int,
    gap_s: float,
    *,
    worker: bool,
    label: str,
    failures: list[str],
) -> dict[str, list[float]]:
    inbox, outbox = LAYOUT.inbox("gw-2"), LAYOUT.outbox("gw-2")
    replies: queue.Queue[bytes] = queue.Queue()
    work: queue.Queue[bytes | None] = queue.Queue()

    def echo_worker() -> None:
        while (item := work.get()) is not None:
            gw.publish(outbox, item, qos=1)

    def round_trip(r: int) -> dict[str, float] | None:
        start = time.perf_counter()
        agg.publish(inbox, payload, qos=1)
        try:
            reply = replies.get(timeout=REPLY_TIMEOUT_S)
        except queue.Empty:
            failures.append(f"{label} round {r}: no reply within {REPLY_TIMEOUT_S}s")
            return None
        done = time.perf_counter()
        if reply != payload:
            failures.append(f"{label} round {r}: reply differs from the request")
            return None
        return {ROUND_TRIP: done - start}

    if worker:
        echo = lambda _c, _u, msg: work.put(bytes(msg.payload))  # noqa: E731
        threading.Thread(target=echo_worker, name="bare-echo", daemon=True).start()
    else:
        echo = lambda c, _u, msg: c.publish(outbox, msg.payload, qos=1)  # noqa: E731
    gw = agg = None
    try:
        gw = bare_client(broker, "gw-2", inbox, echo)
        agg = bare_client(broker, "aggregator", outbox, lambda _c, _u, msg: replies.put(bytes(msg.payload)))
        check_nodelay(f"{label}, gateway", gw, failures)
        check_nodelay(f"{label}, aggregator", agg, failures)
        return timed_rounds(round_trip, n, warmup, gap_s)
    finally:
        work.put(None)
        for client in (agg, gw):
            if client is not None:
                client.disconnect()
                client.loop_stop()


# -- driver ----------------------------------------------------------------------------------------
def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def stats_row(values: list[float]) -> list[str]:
    return [ms(median(values)), ms(percentile(values, 99))]


def broker_nodelay(broker: MosquittoBroker) -> bool:
    return "set_tcp_nodelay true" in (line.strip() for line in broker.config_path.read_text().splitlines())


def measure(
    broker: MosquittoBroker, counts: dict[str, int], warmup: int, gap_s: float, worker_peer: bool, failures: list[str]
) -> tuple[list[list[str]], list[list[str]]]:
    """Rows of the results table and of the 1 KB hop breakdown."""
    payloads = {size_name: os.urandom(size) for size_name, size in SIZES.items()}
    results: dict[str, list[tuple[str, list[float]]]] = {size_name: [] for size_name in SIZES}
    # Every bare run first, then the stack: the stack's aggregator keeps a persistent session
    # subscribed to every client outbox, which would queue the bare replies (raw bytes on gw-2/out)
    # for it and make it reject them.
    for size_name, payload in payloads.items():
        for worker in (False, True) if worker_peer else (False,):
            name = "bare paho (reply from worker thread)" if worker else "bare paho (reply in on_message)"
            samples = run_bare(
                broker,
                payload,
                counts[size_name],
                warmup,
                gap_s,
                worker=worker,
                label=f"{name} {size_name}",
                failures=failures,
            )
            results[size_name].append((name, samples.get(ROUND_TRIP, [])))
    hop_rows: list[list[str]] = []
    for size_name, payload in payloads.items():
        samples = run_stack(
            broker, payload, counts[size_name], warmup, gap_s, f"bench-{size_name.replace(' ', '')}", failures
        )
        results[size_name].append(("WheelFed stack (RoundEngine + Dispatcher)", samples.get(ROUND_TRIP, [])))
        if size_name == "1 KB":
            hop_rows += [[hop, *stats_row(samples[hop])] for hop in HOPS if samples.get(hop)]
    rows: list[list[str]] = []
    for size_name, peers in results.items():
        bare = peers[0][1]
        for name, values in peers:
            if values:
                ratio = f"{median(values) / median(bare):.2f}" if bare else "-"
                rows.append([size_name, name, str(len(values)), *stats_row(values), ratio])
    return rows, hop_rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="40 / 10 round trips, 5 warm-up (smoke run)")
    parser.add_argument("--n-small", type=int, default=None, help="1 KB round trips (default 200)")
    parser.add_argument("--n-large", type=int, default=None, help="1 MB round trips (default 50)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed round trips first (default 20)")
    parser.add_argument(
        "--gap-ms",
        type=float,
        default=0.0,
        help="idle time between round trips (default 0: back to back); with a gap each round "
        "starts from idle threads and sockets",
    )
    parser.add_argument("--no-worker-peer", action="store_true", help="skip the bare worker-thread peer")
    args = parser.parse_args(argv)
    counts = {"1 KB": args.n_small or (40 if args.quick else 200), "1 MB": args.n_large or (10 if args.quick else 50)}
    warmup = args.warmup if args.warmup is not None else (5 if args.quick else 20)

    failures: list[str] = []
    mosquitto_version = subprocess.run(["mosquitto", "-h"], capture_output=True, text=True).stdout.splitlines()[:1]
    users = [BrokerUser(name, pw) for name, pw in PASSWORDS.items()]
    with (
        tempfile.TemporaryDirectory(prefix="wheelfed-bench-") as scratch,
        MosquittoBroker(Path(scratch) / "broker", users=users) as broker,
    ):
        broker_fixed = broker_nodelay(broker)
        if not broker_fixed:
            failures.append("broker: the rendered deploy/ config lacks `set_tcp_nodelay true`")
        print_machine(
            "bench_mqtt_latency",
            "python " + " ".join(["benchmarks/bench_mqtt_latency.py", *argv]),
            {
                "broker": (mosquitto_version or ["mosquitto ?"])[0] + ", 127.0.0.1, deploy/mosquitto/wheelfed.conf.in",
                "TCP_NODELAY": f"broker config {'on' if broker_fixed else 'OFF'}; every client socket "
                "(stack and bare) checked after connecting",
                "round trips": f"1 KB: {counts['1 KB']}, 1 MB: {counts['1 MB']}, after {warmup} warm-up each, "
                f"{f'{args.gap_ms:g} ms apart' if args.gap_ms else 'back to back'}",
            },
        )
        rows, hop_rows = measure(broker, counts, warmup, args.gap_ms / 1e3, not args.no_worker_peer, failures)

    print(markdown_table(["body", "path", "n", "median ms", "p99 ms", "x bare"], rows))
    print()
    print("x bare = median / median of bare paho (reply in on_message) for the same body size.")
    print()
    print("### Where the stack's 1 KB round trip goes (median / p99 per hop, same process clock)\n")
    print(markdown_table(["hop", "median ms", "p99 ms"], hop_rows))
    print()
    if failures:
        print("CORRECTNESS FAILURES:")
        for failure in failures[:20]:
            print(f"- {failure}")
        return 1
    print(
        "correctness: every reply arrived and carried the request's payload byte for byte; "
        "Nagle was off on every socket."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
