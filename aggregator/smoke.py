"""The foundation smoke scenario (``wheelfed demo`` until the fleet demo lands).

It runs the real parts end to end: a broker (mosquitto with the deploy/ config, or the embedded
one), the aggregator's round engine, and one ``wheelfed gateway`` *process* per gateway. It then
shows what the protocol guarantees: every gateway answers, large bodies are chunked, a killed
gateway's last will marks it offline and the round still closes by quorum, and the restarted
gateway is back in the next round.
"""

from __future__ import annotations

import secrets
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TextIO

from shared.protocol.messages import Describe, Ping
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport

from .broker import BrokerUser, MosquittoBroker, mosquitto_available
from .fleet import GatewayProcesses, Presence
from .rounds import RoundEngine, RoundResult


@dataclass(frozen=True)
class SmokeConfig:
    n_gateways: int = 3
    broker: Literal["auto", "mosquitto", "embedded"] = "auto"
    ping_sizes: tuple[int, ...] = (1024, 1024 * 1024)
    run_dir: Path | None = None


@dataclass
class SmokeReport:
    broker: str
    rounds: list[tuple[str, RoundResult]] = field(default_factory=list)
    bytes_sent: int = 0
    bytes_received: int = 0
    rejoined: bool = False
    elapsed_s: float = 0.0


def start_broker(kind: str, run_dir: Path, users: list[BrokerUser]):
    """The broker and the MQTT protocol version its clients must speak."""
    if kind == "mosquitto" or (kind == "auto" and mosquitto_available()):
        return MosquittoBroker(run_dir / "broker", users=users).start(), 5, "mosquitto"
    from .broker import EmbeddedBroker  # needs the optional amqtt dependency

    return EmbeddedBroker(run_dir / "broker", users=users).start(), 4, "embedded amqtt (MQTT 3.1.1)"


def run_smoke(config: SmokeConfig, out: TextIO = sys.stdout) -> SmokeReport:
    started = time.monotonic()
    clients = [f"gw-{i + 1}" for i in range(config.n_gateways)]
    passwords = {c: secrets.token_urlsafe(12) for c in [AGGREGATOR_ID, *clients]}
    users = [BrokerUser(n, p) for n, p in passwords.items()]
    layout = TopicLayout()
    with ExitStack() as stack:
        run_dir = config.run_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="wheelfed-smoke-")))
        broker, protocol, broker_name = start_broker(config.broker, Path(run_dir), users)
        stack.callback(broker.stop)
        report = SmokeReport(broker=broker_name)
        print(f"[1/5] broker: {broker_name} on {broker.host}:{broker.port} (password auth + per-gateway ACL)", file=out)

        agg = MqttTransport(
            AGGREGATOR_ID,
            MqttConfig(port=broker.port, username=AGGREGATOR_ID, password=passwords[AGGREGATOR_ID], protocol=protocol),
        )
        presence = Presence(agg, layout)
        engine = RoundEngine(agg, layout)
        agg.connect()
        stack.callback(agg.close)

        fleet = GatewayProcesses(broker.port, protocol, passwords, Path(run_dir))
        stack.callback(fleet.stop_all)
        for client in clients:
            fleet.start(client)
        presence.wait(clients, True)
        print(f"[2/5] {len(clients)} gateway processes online: {', '.join(clients)}", file=out)

        def run(label: str, rnd: int, body, **kw) -> RoundResult:
            result = engine.run_round("smoke", rnd, body, clients, **kw)
            report.rounds.append((label, result))
            return result

        hellos = run("describe", 1, Describe(), deadline_s=15)
        versions = {c: m.body.software_version for c, m in hellos.replies.items()}
        print(
            f"[3/5] describe round: {len(hellos.replies)} hellos, versions {sorted(set(versions.values()))}", file=out
        )

        rnd = 2
        for size in config.ping_sizes:
            result = run(f"ping {_size(size)}", rnd, Ping(secrets.token_bytes(size)), deadline_s=30)
            print(
                f"      ping {_size(size):>8}: {len(result.replies)}/{len(clients)} answered in "
                f"{result.elapsed_s * 1000:.1f} ms",
                file=out,
            )
            rnd += 1

        victim = clients[-1]
        fleet.kill(victim)
        presence.wait([victim], False)
        result = run("ping after kill", rnd, Ping(b"still there?"), deadline_s=2, min_fraction=0.5)
        print(
            f"[4/5] killed {victim} (SIGKILL): last will marked it offline; round closed by quorum with "
            f"{len(result.replies)}/{len(clients)} answered, timed out: {result.timed_out}",
            file=out,
        )
        fleet.start(victim)
        presence.wait([victim], True)
        result = run("ping after restart", rnd + 1, Ping(b"welcome back"), deadline_s=15)
        report.rejoined = victim in result.replies
        print(f"[5/5] restarted {victim}: next round answered by {len(result.replies)}/{len(clients)}", file=out)

        report.bytes_sent, report.bytes_received = agg.stats.sent_bytes, agg.stats.received_bytes
        report.elapsed_s = time.monotonic() - started
        _print_table(report, out)
    return report


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n >= 1024 * 1024 else f"{n // 1024} KiB" if n >= 1024 else f"{n} B"


def _print_table(report: SmokeReport, out: TextIO) -> None:
    print("\n| round | request | answered | timed out | errors | elapsed |", file=out)
    print("|---|---|---|---|---|---|", file=out)
    for label, r in report.rounds:
        print(
            f"| {r.round} | {label} | {len(r.replies)}/{len(r.selected)} | {', '.join(r.timed_out) or '-'} | "
            f"{len(r.errors)} | {r.elapsed_s * 1000:.1f} ms |",
            file=out,
        )
    print(
        f"\naggregator sent {_size(report.bytes_sent)}, received {_size(report.bytes_received)}; "
        f"broker: {report.broker}; total {report.elapsed_s:.1f} s",
        file=out,
    )
