"""Merge workers: fleet-sum replies summed by worker processes on an MQTT 5 shared
subscription give the one-process model bit for bit, and a worker SIGKILLed mid-round loses no
reply. Real mosquitto, real worker processes, simulated gateways (``aggregator.loadtest``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from aggregator.algorithms import FedForest, FedSCSXGB
from aggregator.broker import BrokerUser, MosquittoBroker, mosquitto_available
from aggregator.fleet import train_on_fleet
from aggregator.jobs import JobSettings
from aggregator.loadtest import gateway_ids, password, windows
from aggregator.merge_workers import (
    MergePartial,
    MergeSettings,
    MergeWorker,
    MergeWorkerProcesses,
    deploy_dir_with_workers,
    split_vector,
)
from aggregator.rounds import RoundEngine
from edge_client.participant import Participant
from edge_client.training_data import ClientData
from shared.model import TreeEnsemble
from shared.protocol.envelope import Message, decode_message, encode_message
from shared.protocol.messages import ErrorReply, Ping, Pong
from shared.protocol.messages.fleet_sums import FleetSumReply
from shared.protocol.messages.secure_aggregation import MaskedVector
from shared.protocol.topics import TopicLayout
from shared.secure_aggregation import ring_sum
from shared.transport.memory import MemoryBroker, MemoryTransport
from shared.transport.mqtt import MqttConfig, MqttTransport

SECRET = "merge-test"
GATEWAYS = gateway_ids(8)
WORKERS = [f"merge-{i}" for i in range(1, 5)]
ALGORITHMS = {
    "fedscs_xgb": lambda: FedSCSXGB(n_rounds=2, max_depth=3, n_bins=16, protocol="histogram"),
    "fedforest": lambda: FedForest(n_trees=2, max_depth=3, n_bins=16, protocol="histogram"),
}


def assert_same_model(got: TreeEnsemble, want: TreeEnsemble) -> None:
    """Bit for bit: every tree's arrays, the base score, the tree outputs."""
    assert (got.n_trees, got.classes, got.kind, got.link) == (want.n_trees, want.classes, want.kind, want.link)
    np.testing.assert_array_equal(got.tree_output, want.tree_output)
    np.testing.assert_array_equal(got.base_score, want.base_score)
    for a, b in zip(got.trees, want.trees):
        for name in ("feature", "threshold", "left", "right", "default_left", "value", "cover"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


# -- the worker's arithmetic, without a broker -----------------------------------------------------


def test_a_worker_sums_exactly_and_forwards_each_reply_without_its_vector(monkeypatch) -> None:
    """Replies of 32-bit words, in any order, in partials of at most 3: the partials' sum is
    the ring sum of the vectors; each stub is the reply's envelope and shares, empty values;
    a redelivered reply is not counted twice; an error reply is forwarded byte for byte."""
    layout = TopicLayout()
    worker = MergeWorker("merge-1", MqttConfig(port=1), settings=MergeSettings(max_batch=3, linger_s=60))
    published: list[Message] = []
    forwarded: list[tuple[str, bytes]] = []
    monkeypatch.setattr(worker.transport, "publish", lambda topic, message: published.append(message))
    monkeypatch.setattr(
        worker.transport, "send_payloads", lambda topic, payloads: forwarded.append((topic, payloads[0]))
    )
    rng = np.random.default_rng(1)
    vectors = {f"gw-{i}": rng.integers(0, 2**32, size=40, dtype=np.uint64).astype(np.uint32) for i in range(7)}
    replies = {
        c: Message.create(
            FleetSumReply(MaskedVector(v, {"n": bytes([i])})), sender=c, job="j", round=3, reply_to=f"req-{c}"
        )
        for i, (c, v) in enumerate(vectors.items())
    }
    order = list(rng.permutation(sorted(vectors)))
    for client in order + order[-1:]:  # the last one is a redelivery into the open partial
        worker.on_payload(layout.outbox(client), encode_message(replies[client]))
    forged = encode_message(Message.create(FleetSumReply(MaskedVector(np.zeros(40, np.uint32))), sender="gw-0"))
    worker.on_payload(layout.outbox("gw-1"), forged)  # not the sender's own outbox: dropped
    error = encode_message(Message.create(ErrorReply("bad_request", "no", "fleet_sum"), sender="gw-2"))
    worker.on_payload(layout.outbox("gw-2"), error)
    worker.flush(force=True)
    assert forwarded == [(TopicLayout(prefix="wheelfed/v1/merged").outbox("gw-2"), error)]
    bodies = [m.body for m in published]
    assert [len(b.stubs) for b in bodies] == [3, 3, 1] and all(isinstance(b, MergePartial) for b in bodies)
    assert all(b.total.dtype == np.uint32 for b in bodies)  # sums mod 2^32: the words' width
    total = ring_sum([b.total.astype(np.uint64) for b in bodies]).astype(np.uint32)
    np.testing.assert_array_equal(total, ring_sum([v.astype(np.uint64) for v in vectors.values()]).astype(np.uint32))
    stubs = [decode_message(s) for b in bodies for s in b.stubs]
    assert sorted(s.sender for s in stubs) == sorted(vectors)
    for stub in stubs:
        assert stub.envelope == replies[stub.sender].envelope
        assert stub.body.sums.values.shape == (0,) and stub.body.sums.values.dtype == np.uint32
        assert stub.body.sums.shares == replies[stub.sender].body.sums.shares
    assert (worker.stats.summed, worker.stats.duplicates, worker.stats.rejected) == (7, 1, 1)
    assert split_vector(Message.create(MergePartial(np.zeros(1, np.uint64), (b"x",)), sender="m")) is None
    # a chunk of a large reply is forwarded whole, wrapped, for the leader to reassemble per gateway
    big = Message.create(FleetSumReply(MaskedVector(np.arange(40_000, dtype=np.uint64))), sender="gw-3")
    chunk = worker.transport.encode_payloads(big)[0]
    published.clear()
    worker.on_payload(layout.outbox("gw-3"), chunk)
    assert [(m.type, m.body.client, m.body.payload) for m in published] == [("merge.chunk", "gw-3", chunk)]


# -- the engine admits a worker's batch whole, or asks its clients again ---------------------------


def test_a_batch_is_delivered_whole_or_its_clients_are_asked_again() -> None:
    """A batch holding a client the round already has is refused whole (else that client would
    be counted twice in the sum) and its new clients are asked again with the same request; so
    is a batch the judge refuses; the round ends with every client once."""
    broker = MemoryBroker()
    engine = RoundEngine(MemoryTransport(broker, "aggregator"))
    clients = ["gw-1", "gw-2", "gw-3"]
    inbox: dict[str, list[Message]] = {c: [] for c in clients}
    for c in clients:
        MemoryTransport(broker, c).subscribe(TopicLayout().inbox(c), lambda _t, m, c=c: inbox[c].append(m))
    result: list = []
    thread = threading.Thread(
        target=lambda: result.append(engine.run_round("j", 1, Ping(b"x"), clients, deadline_s=10))
    )
    thread.start()
    while not all(inbox.values()):
        time.sleep(0.01)
    reply = {c: inbox[c][0].reply(Pong(b"x"), sender=c) for c in clients}
    judged: list[list[str]] = []

    def judge(verdict: set[str]):
        return lambda fresh: judged.append(sorted(m.sender for m in fresh)) or verdict

    def asked(n: int) -> bool:
        deadline = time.monotonic() + 5
        while len(inbox["gw-3"]) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(inbox["gw-3"]) == n

    assert engine.deliver_batch("j", 1, [reply["gw-1"], reply["gw-2"]], judge(set()))
    assert not engine.deliver_batch("j", 1, [reply["gw-2"], reply["gw-3"]], judge(set()))  # gw-2 again
    assert asked(2)
    assert not engine.deliver_batch("j", 1, [reply["gw-3"]], judge({"gw-3"}))
    assert asked(3)
    assert {m.envelope.msg_id for m in inbox["gw-3"]} == {inbox["gw-3"][0].envelope.msg_id}  # the same request
    assert len(inbox["gw-1"]) == len(inbox["gw-2"]) == 1
    assert engine.deliver_batch("j", 1, [reply["gw-3"]], judge(set()))
    thread.join(5)
    assert judged == [["gw-1", "gw-2"], ["gw-3"], ["gw-3"]]  # the batch with a duplicate is not judged
    assert result[0].answered == clients and result[0].duplicates == 1
    assert not engine.deliver_batch("j", 1, [reply["gw-1"]], judge(set())) and engine.late_replies == 1


# -- against mosquitto ----------------------------------------------------------------------------


@dataclass
class MergeFleet:
    broker: MosquittoBroker

    def aggregator(self) -> MqttTransport:
        # session expiry 0: a flat run's subscription to the outboxes must not outlive it
        agg = MqttTransport(
            "aggregator",
            MqttConfig(port=self.broker.port, username="aggregator", password=SECRET, session_expiry_s=0),
            presence=False,
        )
        agg.connect()
        return agg

    def workers(self, n: int, settings: MergeSettings | None = None) -> MergeWorkerProcesses:
        return MergeWorkerProcesses(n, port=self.broker.port, password=lambda w: password(SECRET, w), settings=settings)

    def train(
        self, algorithm: str, workers: MergeWorkerProcesses | None = None, during=None
    ) -> tuple[TreeEnsemble, RoundEngine]:
        agg = self.aggregator()
        try:
            engine = RoundEngine(agg, merge_workers=workers is not None)
            if workers is not None:
                engine.merged.wait_workers(len(workers.ids), timeout_s=60)
            if during is not None:
                threading.Thread(target=during, args=(engine,), daemon=True).start()
            model, _ = train_on_fleet(
                ALGORITHMS[algorithm](),
                agg,
                clients=GATEWAYS,
                discover_s=20,
                engine=engine,
                settings=JobSettings(deadline_s=30),
            )
            return model, engine
        finally:
            agg.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[MergeFleet]:
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed: the test command installs it (`apt-get install -y mosquitto`)")
    root = tmp_path_factory.mktemp("merge")
    users = [BrokerUser("aggregator", SECRET)] + [BrokerUser(c, password(SECRET, c)) for c in GATEWAYS + WORKERS]
    with MosquittoBroker(
        root / "broker", users=users, deploy_dir=deploy_dir_with_workers(root / "deploy", WORKERS)
    ) as broker:
        gateways = []
        try:
            for client in GATEWAYS:
                transport = MqttTransport(
                    client, MqttConfig(port=broker.port, username=client, password=password(SECRET, client))
                )
                Participant(transport, ClientData(client, *windows(client))).start()
                transport.connect()
                gateways.append(transport)
            yield MergeFleet(broker)
        finally:
            for transport in gateways:
                transport.close()


@pytest.fixture(scope="module")
def flat_models(fleet: MergeFleet) -> dict[str, TreeEnsemble]:
    """The one-process models (the oracle), trained once per algorithm."""
    return {name: fleet.train(name)[0] for name in ALGORITHMS}


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
@pytest.mark.parametrize("n_workers", [1, 2, 4])
def test_merge_workers_give_the_flat_model(fleet: MergeFleet, flat_models, algorithm: str, n_workers: int) -> None:
    """Private defaults (histogram protocol, secure aggregation): partial sums over the workers'
    shares of the replies, summed by the leader, give the one-process model bit for bit."""
    with fleet.workers(n_workers, MergeSettings(max_batch=3, linger_s=0.02)) as workers:
        model, engine = fleet.train(algorithm, workers)
    assert_same_model(model, flat_models[algorithm])
    stats = engine.merged.stats
    assert stats.merged_replies > 0 and stats.partials > 0  # the sums did go through the workers
    assert engine.late_replies == 0


@pytest.mark.slow
def test_a_worker_killed_mid_round_loses_no_reply(fleet: MergeFleet, flat_models) -> None:
    """Workers hold each partial 0.4 s; merge-1 is SIGKILLed while holding replies of a round
    (after the first partials arrived). The leader sees its last will, asks the clients it has
    no reply from again, and the job ends with the flat model."""
    settings = MergeSettings(max_batch=1000, linger_s=0.4)
    with fleet.workers(2, settings) as workers:
        killed = threading.Event()

        def kill_mid_round(engine: RoundEngine) -> None:
            deadline = time.monotonic() + 60
            while engine.merged.stats.partials < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.15)  # the next round's replies sit in the workers' partials now
            workers.kill("merge-1")
            killed.set()

        model, engine = fleet.train("fedscs_xgb", workers, during=kill_mid_round)
    assert killed.is_set()
    assert_same_model(model, flat_models["fedscs_xgb"])
    assert engine.merged.stats.worker_changes >= 1 and engine.resent > 0
