"""Merge workers: the aggregator's summing of fleet-sum replies spread over several processes
through an MQTT 5 shared subscription (``$share/<group>/<prefix>/c/+/out``).

The leader -- the process running the jobs, a :class:`~aggregator.rounds.RoundEngine` made with
``merge_workers=True`` -- sends requests as always but does not read the gateways' outboxes. The
workers (``wheelfed merge-worker --port ... --worker-id merge-1``, each its own
process and broker account) share one subscription to them, so the broker hands each reply to
one worker. A worker decodes and checks a reply as the leader would (hostile-input decoding,
sender == outbox); a reply holding a fleet-sum vector (a body with a
:class:`~shared.protocol.messages.secure_aggregation.MaskedVector`: ``fleet_sum``,
``fedscs_xgb.histogram_reply``, ``fedforest.histogram_reply``) goes into a running partial sum
per job, round, type and vector shape, and everything else (errors, key exchanges, unmasking
shares) is forwarded to the leader byte for byte under ``<prefix>/merged/``; so are the chunks
of messages larger than one payload, which a shared subscription scatters over the workers,
each wrapped (:class:`MergeChunk`) so that the leader reassembles them per gateway. A partial
is published (:class:`MergePartial`) when it holds ``max_batch`` replies, would no longer fit in one
payload, or ``linger_s`` after its first reply: the sum, and each reply without its vector (its
envelope, its bookkeeping fields such as ``n_trees``, its sealed shares). The leader admits a
partial whole -- every reply answers this round's request and is new, the vector length and word
width are the round's, the algorithm's ``check`` passes -- adds its sum, and hands the replies to
the round as if they had come directly (:meth:`~aggregator.rounds.RoundEngine.deliver_batch`);
:class:`~aggregator.fleet_sums.FleetSummer` then uses the summed total instead of summing.

**The same model bit for bit.** Every vector summed here is a fixed-point integer vector (the
histogram protocol quantises on the gateway; plain or masked, ``FleetSummer`` sums in the ring
of integers mod 2^64; narrower words are sums mod 2^16 or 2^32, whose low bits are all the sum
keeps, so partials stay in the replies' word width). Addition there is associative and
commutative, so any split of the replies into partials, summed in any order, gives exactly the
one-process sum -- no float is
ever added, so no order-independent float summation (or sorting of per-client vectors) is
needed. Under secure aggregation a partial sum is still masked (each client's self-mask is
removed only from the complete sum, at unmasking); the leader unmasks as before, adding the
workers' masked total to the sum of the mask corrections.

**A worker killed mid-round loses no reply.** A worker acknowledges a reply (PUBACK) once it is
in its partial, before the partial is published; mosquitto 2.0 does not hand a dead session's
unacknowledged messages of a shared subscription to another member (eclipse-mosquitto issue
2662), so a worker's death can lose replies at the broker and in the worker. Workers therefore
connect with session expiry 0 (a dead worker's session, and its share of the subscription, end
with its connection; a persistent one would keep receiving its share while down) and a last
will; when the leader sees a worker's presence change it asks every client it has no reply from
again (:meth:`~aggregator.rounds.RoundEngine.resend_unanswered`), with the same request id, and
the gateway answers from its reply cache. A reply can thus reach the workers twice; a partial
holding a client the round already has is not admitted and its other clients are asked again,
so no client is ever counted twice. The leader counts a client only when a partial holding it
has arrived, so what a dead worker took with it is exactly what the leader asks again for.

What the leader still does per reply: decode a small stub, route it, and -- under secure
aggregation -- expand each survivor's self-mask (AES-CTR over the vector), which needs the
seeds only the unmasking reveals. Replies larger than one MQTT payload (256 KiB by default) are
chunked and reassembled by the leader, so they are summed there, as in one process.

Broker accounts: each worker needs read access to ``<prefix>/c/+/out`` and write access to
``<prefix>/merged/#`` and ``<prefix>/merge/#`` (besides its own status topic), and may
publish payloads ``PAYLOAD_HEADROOM`` bytes over the gateways' limit; see
:func:`worker_acl`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np

from shared.protocol.chunking import Chunk, Reassembler
from shared.protocol.envelope import Message, decode_message, encode_message, message_type
from shared.protocol.errors import ChunkError, DecodeError
from shared.protocol.messages import Status
from shared.protocol.schema import ArraySpec
from shared.protocol.topics import TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport

from .fleet_sums import without_vector

if TYPE_CHECKING:
    from .rounds import RoundEngine

log = logging.getLogger(__name__)

__all__ = [
    "MergeChunk",
    "MergeLeader",
    "MergePartial",
    "MergeSettings",
    "MergeWorker",
    "MergeWorkerProcesses",
    "SharedSubscriptionTransport",
    "SumExpectation",
    "MergedSum",
    "deploy_dir_with_workers",
    "merged_layout",
    "partials_topic",
    "worker_acl",
]

#: Client ids of merge workers start with this (the leader watches their presence).
WORKER_PREFIX = "merge-"
#: The shared subscription's group name.
DEFAULT_GROUP = "wheelfed-merge"
#: Bytes a worker's payload may exceed the gateways' ``max_payload``: a forwarded chunk's wrapper
#: and a one-reply partial's envelope (far below mosquitto's ``max_packet_size``).
PAYLOAD_HEADROOM = 16 * 1024


def merged_layout(layout: TopicLayout) -> TopicLayout:
    """Where workers forward what they do not sum: ``<prefix>/merged/c/<client>/out``."""
    return TopicLayout(prefix=f"{layout.prefix}/merged", aggregator_id=layout.aggregator_id)


def partials_topic(layout: TopicLayout) -> str:
    """Where workers publish their partial sums."""
    return f"{layout.prefix}/merge/partials"


def chunks_topic(layout: TopicLayout) -> str:
    """Where workers forward the chunks of large messages (wrapped: :class:`MergeChunk`)."""
    return f"{layout.prefix}/merge/chunks"


def worker_acl(worker_ids: Sequence[str], layout: TopicLayout | None = None) -> str:
    """mosquitto ``acl_file`` lines granting merge workers what they need (append to the
    deployment's ACL; the gateways' ``pattern`` lines give each its status topic)."""
    prefix = (layout or TopicLayout()).prefix
    return "".join(
        f"\nuser {w}\ntopic read {prefix}/c/+/out\ntopic write {prefix}/merged/#\ntopic write {prefix}/merge/#\n"
        for w in worker_ids
    )


def deploy_dir_with_workers(
    target: str | os.PathLike, worker_ids: Sequence[str], *, deploy_dir: str | os.PathLike | None = None
) -> Path:
    """A copy of the deployment's ``mosquitto/`` configs under ``target`` whose ACL also lets
    ``worker_ids`` work (for ``MosquittoBroker(..., deploy_dir=...)``: tests, benchmarks)."""
    from .broker.mosquitto import DEPLOY_DIR

    source = Path(deploy_dir or DEPLOY_DIR) / "mosquitto"
    out = Path(target) / "mosquitto"
    shutil.copytree(source, out, dirs_exist_ok=True)
    (out / "acl").write_text((source / "acl").read_text() + worker_acl(worker_ids))
    return Path(target)


@message_type("merge.partial")
@dataclass(frozen=True)
class MergePartial:
    """A worker's sum over some replies of one round: ``total``, the sum of their vectors in
    their word width (mod 2^16, 2^32 or 2^64), and each reply encoded without its vector."""

    total: Annotated[np.ndarray, ArraySpec(("uint16", "uint32", "uint64"), ndim=1)]
    stubs: tuple[bytes, ...]

    def __post_init__(self) -> None:
        if not self.stubs:
            raise ValueError("a partial covers at least one reply")


@message_type("merge.chunk")
@dataclass(frozen=True)
class MergeChunk:
    """One chunk (``payload``, the encoded ``chunk`` message) that ``client`` published on its
    outbox, forwarded by a worker; the leader reassembles it with the client's other chunks."""

    client: str
    payload: bytes


def split_vector(message: Message) -> tuple[Message, np.ndarray] | None:
    """``(stub, values)``: the reply with its vector's values emptied (same dtype, shares kept),
    and the values; None for a message that holds no fleet-sum vector."""
    split = without_vector(message.body)
    if split is None:
        return None
    stub, values = split
    return Message(message.envelope, stub), values


# -- the worker ------------------------------------------------------------------------------------


class SharedSubscriptionTransport(MqttTransport):
    """An MQTT connection that subscribes through ``$share/<group>/`` and hands each received
    payload, undecoded, to ``on_payload(topic, payload)`` (acknowledged after it returns)."""

    def __init__(
        self,
        client_id: str,
        config: MqttConfig,
        *,
        group: str,
        on_payload: Callable[[str, bytes], None],
        layout: TopicLayout | None = None,
    ) -> None:
        if config.protocol != 5:
            raise ValueError("merge workers need MQTT 5 (protocol=5) for shared subscriptions with session expiry")
        if not group or any(ch in group for ch in "/+#"):
            raise ValueError(f"group must be a non-empty name without '/', '+' or '#', got {group!r}")
        self.group = group
        self._on_payload = on_payload
        super().__init__(client_id, config, layout=layout)

    def share(self, topic_filter: str) -> None:
        """Join the group's shared subscription to ``topic_filter`` (kept across reconnects)."""
        self._subscribe_filter(f"$share/{self.group}/{topic_filter}")

    def _receive_payload(self, topic: str, payload: bytes) -> None:
        self.stats.received_payloads += 1
        self.stats.received_bytes += len(payload)
        try:
            self._on_payload(topic, payload)
        except Exception:  # a bug must not kill the dispatch thread
            self.stats.handler_errors += 1
            log.exception("merge worker failed on a payload", extra={"topic": topic, "size": len(payload)})


@dataclass(frozen=True)
class MergeSettings:
    """When a worker publishes a partial: at ``max_batch`` replies, or ``linger_s`` after its first."""

    max_batch: int = 256
    linger_s: float = 0.02

    def __post_init__(self) -> None:
        if not (isinstance(self.max_batch, int) and self.max_batch >= 1):
            raise ValueError(f"max_batch must be an int >= 1, got {self.max_batch!r}")
        if not self.linger_s > 0:
            raise ValueError(f"linger_s must be > 0, got {self.linger_s!r}")


@dataclass(frozen=True)
class _BatchKey:
    job: str
    round: int
    type: str
    dtype: str
    length: int


@dataclass
class _Batch:
    total: np.ndarray
    stubs: list[bytes]
    clients: set[str]
    started: float

    @property
    def size(self) -> int:
        """Bytes of its encoding, but for the envelope and CBOR headers."""
        return self.total.nbytes + sum(len(s) for s in self.stubs)


@dataclass
class WorkerStats:
    """What a worker did: replies summed, messages forwarded, partials published, payloads
    rejected (undecodable, or not from the outbox's owner), replies dropped because the partial
    being filled already held one from that client (a redelivery; across partials the leader
    sorts duplicates out, see :meth:`~aggregator.rounds.RoundEngine.deliver_batch`)."""

    summed: int = 0
    forwarded: int = 0
    partials: int = 0
    rejected: int = 0
    duplicates: int = 0


class MergeWorker:
    """One worker process's logic over its shared-subscription connection (module docstring)."""

    def __init__(
        self,
        worker_id: str,
        config: MqttConfig,
        *,
        group: str = DEFAULT_GROUP,
        layout: TopicLayout | None = None,
        settings: MergeSettings | None = None,
    ) -> None:
        self.layout = layout or TopicLayout()
        self.forward = merged_layout(self.layout)
        self.settings = settings or MergeSettings()
        self.stats = WorkerStats()
        #: A partial holding more than this would be chunked, and chunks are the leader's to check.
        self.max_partial = config.max_payload
        # session expiry 0: a dead worker's session (and its share of the subscription) ends with it
        own = dataclasses.replace(config, session_expiry_s=0, max_payload=config.max_payload + PAYLOAD_HEADROOM)
        self.transport = SharedSubscriptionTransport(
            worker_id, own, group=group, on_payload=self.on_payload, layout=self.layout
        )
        self._lock = threading.Lock()
        self._batches: dict[_BatchKey, _Batch] = {}
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, name=f"merge-flush-{worker_id}", daemon=True)

    def start(self, *, timeout_s: float = 10.0) -> None:
        """Subscribe (before the online presence goes out: the leader may send requests then) and connect."""
        self.transport.share(self.layout.all_outboxes)
        self._flusher.start()
        self.transport.connect(timeout_s=timeout_s)

    def close(self) -> None:
        self._stop.set()
        self._flusher.join(5.0)
        self.flush(force=True)
        self.transport.close()

    def on_payload(self, topic: str, payload: bytes) -> None:
        """One payload from a gateway's outbox: summed into a partial, or forwarded unchanged."""
        client = self.layout.client_of(topic)
        if client is None or topic != self.layout.outbox(client):
            self.stats.rejected += 1
            return
        try:
            message = decode_message(payload, limits=self.transport.limits)
        except DecodeError as exc:
            self.stats.rejected += 1
            log.warning("rejected message", extra={"topic": topic, "reason": type(exc).__name__})
            return
        if isinstance(message.body, Chunk):  # its siblings went to other workers: the leader reassembles
            self._publish_to(
                chunks_topic(self.layout), MergeChunk(client, payload), message.envelope.job, message.envelope.round
            )
            self.stats.forwarded += 1
            return
        if message.sender.startswith(WORKER_PREFIX) or message.sender != client:
            self.stats.rejected += 1
            log.warning("reply sender does not match its topic", extra={"topic": topic, "sender": message.sender})
            return
        split = split_vector(message)
        if split is None:
            self._forward(client, payload)
            return
        stub, values = split
        encoded = encode_message(stub)
        env = message.envelope
        key = _BatchKey(env.job, env.round, env.type, values.dtype.str, values.shape[0])
        ready = []
        with self._lock:
            batch = self._batches.get(key)
            if batch is not None and client in batch.clients:
                self.stats.duplicates += 1
                return
            if batch is not None and batch.size + len(encoded) > self.max_partial:
                ready.append(self._batches.pop(key))
                batch = None
            if batch is None:
                batch = self._batches[key] = _Batch(values.copy(), [], set(), time.monotonic())
            else:
                np.add(batch.total, values, out=batch.total)  # wraps mod 2^word_bits
            batch.clients.add(client)
            batch.stubs.append(encoded)
            self.stats.summed += 1
            if len(batch.stubs) >= self.settings.max_batch:
                ready.append(self._batches.pop(key))
        for done in ready:
            self._publish(key, done)

    def flush(self, *, force: bool = False) -> None:
        """Publish the partials older than ``linger_s`` (all with ``force``)."""
        now = time.monotonic()
        with self._lock:
            due = [k for k, b in self._batches.items() if force or now - b.started >= self.settings.linger_s]
            batches = [(k, self._batches.pop(k)) for k in due]
        for key, batch in batches:
            self._publish(key, batch)

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.settings.linger_s / 2):
            self.flush()

    def _publish(self, key: _BatchKey, batch: _Batch) -> None:
        self._publish_to(partials_topic(self.layout), MergePartial(batch.total, tuple(batch.stubs)), key.job, key.round)
        self.stats.partials += 1

    def _publish_to(self, topic: str, body: object, job: str, round_no: int) -> None:
        message = Message.create(body, sender=self.transport.client_id, job=job, round=round_no)
        try:
            self.transport.publish(topic, message)
        except ConnectionError as exc:  # the leader re-asks these clients when it sees us go
            log.warning("not sent to the leader", extra={"job": job, "round": round_no, "error": str(exc)})

    def _forward(self, client: str, payload: bytes) -> None:
        self.transport.send_payloads(self.forward.outbox(client), [payload])
        self.stats.forwarded += 1


# -- the leader ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SumExpectation:
    """What a fleet-sum round accepts: reply types, vector ``length`` and ``word_bits``, and the
    algorithm's ``check(client, reply) -> reason | None`` (as
    :meth:`~aggregator.fleet_sums.FleetSummer.ask` takes it)."""

    types: tuple[type, ...]
    length: int
    word_bits: int
    check: Callable[[str, Any], str | None] | None = None

    def reason(self, message: Message, length: int, word_bits: int) -> str | None:
        if length != self.length:
            return f"a vector of {length} entries, the round needs {self.length}"
        if word_bits != self.word_bits:
            return f"{word_bits}-bit words, the round needs {self.word_bits}"
        return self.check(message.sender, message.body) if self.check else None


@dataclass
class MergedSum:
    """A round's sum as the workers delivered it: ``total`` (uint64, mod 2^64; None when no
    reply was kept) over ``contributors``, and the clients ``rejected`` with the reason."""

    expectation: SumExpectation
    total: np.ndarray | None = None
    contributors: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)


@dataclass
class LeaderStats:
    """Partials admitted whole and refused (their clients asked again), worker presence changes."""

    partials: int = 0
    refused: int = 0
    merged_replies: int = 0
    worker_changes: int = 0


class MergeLeader:
    """The leader's side: admits the workers' partials into its round engine's rounds.

    Made by ``RoundEngine(..., merge_workers=True)`` (``engine.merged``). Gives
    :class:`~aggregator.fleet_sums.FleetSummer` the summed totals (:meth:`open_sum`,
    :meth:`close_sum`).
    """

    def __init__(self, engine: RoundEngine, *, worker_prefix: str = WORKER_PREFIX) -> None:
        self.engine = engine
        self.layout = engine.layout
        self.forward = merged_layout(self.layout)
        self.worker_prefix = worker_prefix
        self.stats = LeaderStats()
        self.workers: dict[str, bool] = {}  # worker id -> online
        self._sums: dict[tuple[str, int], MergedSum] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        transport = engine.transport
        # the gateways' chunks, reassembled per gateway as the transport would (same limits)
        self._reassembler = Reassembler(limits=transport.limits)
        transport.subscribe(self.forward.all_outboxes, self._on_forwarded)
        transport.subscribe(partials_topic(self.layout), self._on_partial)
        transport.subscribe(chunks_topic(self.layout), self._on_chunk)
        transport.subscribe(self.layout.all_statuses, self._on_status)

    # -- FleetSummer's interface
    def open_sum(self, job: str, round_no: int, expectation: SumExpectation) -> None:
        """Collect round ``round_no`` of ``job`` as a fleet sum (before its requests go out)."""
        with self._lock:
            self._sums[(job, round_no)] = MergedSum(expectation)

    def close_sum(self, job: str, round_no: int) -> MergedSum:
        """What the round collected (after it closed: nothing more can be added)."""
        with self._lock:
            return self._sums.pop((job, round_no))

    def wait_workers(self, n: int, timeout_s: float = 30.0) -> list[str]:
        """Block until ``n`` workers are online; returns them (raises TimeoutError)."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.online_workers()) >= n, timeout_s):
                raise TimeoutError(f"{len(self.online_workers())} of {n} merge workers online after {timeout_s} s")
            return self.online_workers()

    def online_workers(self) -> list[str]:
        return sorted(w for w, up in self.workers.items() if up)

    # -- handlers (the transport's dispatch thread)
    def _on_status(self, topic: str, message: Message) -> None:
        worker = self.layout.client_of(topic)
        if (
            worker is None
            or not worker.startswith(self.worker_prefix)
            or message.sender != worker
            or not isinstance(message.body, Status)
        ):
            return
        with self._changed:
            before = self.workers.get(worker)
            self.workers[worker] = message.body.online
            self._changed.notify_all()
        if before is not None and before != message.body.online:
            # a worker died (what it held is lost) or came back (replies may have found no worker)
            self.stats.worker_changes += 1
            log.warning(
                "merge worker presence changed; re-asking unanswered clients",
                extra={"worker": worker, "online": message.body.online},
            )
            self.engine.resend_unanswered()

    def _on_forwarded(self, topic: str, message: Message) -> None:
        client = self.forward.client_of(topic)
        if client is not None:
            self._route(client, message)

    def _route(self, client: str, message: Message) -> None:
        """A gateway's message that no worker summed: a fleet-sum reply reassembled here is a
        partial of one; anything else goes to the round engine as if read from the outbox."""
        split = split_vector(message)
        if split is None or message.sender != client:
            self.engine.deliver(self.layout.outbox(client), message)
            return
        stub, values = split
        self._admit(stub.envelope.job, stub.envelope.round, [stub], values.copy())

    def _on_chunk(self, topic: str, message: Message) -> None:
        body = message.body
        if not isinstance(body, MergeChunk) or not message.sender.startswith(self.worker_prefix):
            return
        limits = self.engine.transport.limits
        try:
            chunk = decode_message(body.payload, limits=limits)
            if not isinstance(chunk.body, Chunk):
                raise ChunkError(f"a forwarded chunk of {body.client!r} holds a {chunk.type!r} message")
            whole = self._reassembler.add(chunk, sender=body.client)  # accounted to the gateway
            if whole is None:
                return
            inner = decode_message(whole, limits=limits)
            if inner.sender != chunk.sender:
                raise ChunkError(f"chunks from {chunk.sender!r} carried a message from {inner.sender!r}")
        except DecodeError as exc:
            log.warning(
                "rejected a forwarded chunk",
                extra={"client": body.client, "reason": type(exc).__name__, "detail": str(exc)[:200]},
            )
            return
        self._route(body.client, inner)

    def _on_partial(self, topic: str, message: Message) -> None:
        body = message.body
        if not isinstance(body, MergePartial) or not message.sender.startswith(self.worker_prefix):
            return
        env = message.envelope
        try:
            stubs = [decode_message(s, limits=self.engine.transport.limits) for s in body.stubs]
        except DecodeError as exc:
            log.warning("rejected a merge partial", extra={"worker": message.sender, "detail": str(exc)[:200]})
            return
        senders = [s.sender for s in stubs]
        if len(set(senders)) != len(senders) or any(
            s.envelope.job != env.job or s.envelope.round != env.round for s in stubs
        ):
            log.warning("rejected an inconsistent merge partial", extra={"worker": message.sender})
            return
        self._admit(env.job, env.round, stubs, body.total)

    def _admit(self, job: str, round_no: int, stubs: list[Message], total: np.ndarray) -> None:
        """Hand ``stubs`` to their round with ``total``, the sum of their vectors, all or none."""
        length, word_bits = total.shape[0], total.dtype.itemsize * 8

        def judge(fresh: list[Message]) -> set[str]:
            with self._lock:
                merged = self._sums.get((job, round_no))
                if merged is None:  # not a fleet-sum round: the engine files them (unexpected type)
                    return set()
                want = merged.expectation
                wrong_type = {m.sender for m in fresh if not isinstance(m.body, want.types)}
                reasons = {
                    m.sender: r
                    for m in fresh
                    if m.sender not in wrong_type and (r := want.reason(m, length, word_bits)) is not None
                }
                good = {m.sender for m in fresh} - wrong_type - set(reasons)
                merged.rejected.update(reasons)
                if good and (wrong_type or reasons):
                    return good  # their sum holds vectors the round refuses: ask the good ones again
                if good:
                    if merged.total is None:
                        merged.total = total.copy()
                    else:
                        np.add(merged.total, total, out=merged.total)
                    merged.contributors.extend(sorted(good))
                return set()

        kept = self.engine.deliver_batch(job, round_no, stubs, judge)
        self.stats.partials += kept
        self.stats.refused += not kept
        self.stats.merged_replies += len(stubs) if kept else 0


# -- processes --------------------------------------------------------------------------------------


class MergeWorkerProcesses:
    """``n`` worker processes (``merge-1`` .. ``merge-n``) against a broker; a context manager.

    ``password(worker_id)`` gives each account's password (passed in the environment)."""

    def __init__(
        self,
        n: int,
        *,
        port: int,
        host: str = "127.0.0.1",
        password: Callable[[str], str] | None = None,
        group: str = DEFAULT_GROUP,
        settings: MergeSettings | None = None,
    ) -> None:
        if not (isinstance(n, int) and n >= 1):
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        self.ids = [f"{WORKER_PREFIX}{i}" for i in range(1, n + 1)]
        self.port, self.host, self.group = port, host, group
        self.password = password
        self.settings = settings or MergeSettings()
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self) -> MergeWorkerProcesses:
        from .broker.mosquitto import die_with_parent

        for worker in self.ids:
            env = dict(os.environ)
            if self.password is not None:
                env["WHEELFED_MQTT_PASSWORD"] = self.password(worker)
            self.processes[worker] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "edge_client.cli",
                    "merge-worker",
                    "--host",
                    self.host,
                    "--port",
                    str(self.port),
                    "--worker-id",
                    worker,
                    "--group",
                    self.group,
                    "--max-batch",
                    str(self.settings.max_batch),
                    "--linger-ms",
                    str(self.settings.linger_s * 1000),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        return self

    def kill(self, worker: str) -> None:
        """SIGKILL one worker (no clean disconnect: the broker publishes its last will)."""
        self.processes[worker].kill()
        self.processes[worker].wait(10)

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

    def __enter__(self) -> MergeWorkerProcesses:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
