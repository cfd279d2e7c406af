"""Duplicated, delayed and reordered MQTT deliveries between real processes.

``MqttFaultProxy`` sits between mosquitto and every client -- the aggregator's connection and
four ``wheelfed gateway`` processes -- and duplicates (at once, or late) and delays QoS 1
PUBLISH packets in both directions, so requests reach gateways twice, replies reach the
aggregator twice, late copies arrive after their round closed, and replies of different
gateways overtake each other. Oracles: a private FedSCS-XGB job and a private FedForest job
end with exactly the model of ``aggregator.simulate`` on the same data and seed (a sum applied
twice, or a reply of the wrong round, would change it), every round heard all four gateways,
no reply was rejected, and the duplicates really reached the round engine (counted once, or
discarded as late). The proxy itself is checked first: nothing lost, one topic's order kept on
each hop, every injected copy's acknowledgement kept from the other side.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import aggregator
from aggregator.algorithms import FedForest, FedSCSXGB
from aggregator.fleet import train_on_fleet
from aggregator.jobs import FederatedJob, JobSettings
from aggregator.rounds import RoundEngine
from shared.protocol.envelope import Message
from shared.protocol.messages import Status
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport
from tests.e2e.fleet_support import (
    FEATURE_SET,
    GATEWAYS,
    PASSWORDS,
    client_data,
    fleet_mosquitto,
    start_fleet_behind_proxy,
)
from tests.e2e.mqtt_fault_proxy import Faults, MqttFaultProxy

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

LAYOUT = TopicLayout()
FAULTS = Faults(duplicate=0.3, delay=0.3, delay_s=0.15, late_s=0.4, seed=13)


def connect(port: int, user: str, presence: bool = True) -> MqttTransport:
    transport = MqttTransport(user, MqttConfig(port=port, username=user, password=PASSWORDS[user]), presence=presence)
    transport.connect()
    return transport


def assert_both_ways_faulted(proxy: MqttFaultProxy) -> None:
    """Copies and delays happened in both directions, and packets overtook held ones."""
    stats = proxy.stats
    for direction in ("to_broker", "to_client"):
        assert stats.total("duplicated", direction) > 0 and stats.total("delayed", direction) > 0, stats
    assert stats.total("overtook") > 0, stats


def test_the_proxy_loses_nothing_keeps_each_topics_order_and_hides_its_copies_acks(tmp_path: Path) -> None:
    """300 messages from two gateways on two topics each: every one reaches the aggregator,
    copies too; on every hop the proxy wrote each topic's packets in the order it read them and
    each copy after its original, and some packets overtook others; every copy was acknowledged
    by its receiver and that acknowledgement dropped (``acks_dropped == duplicated``): a second
    PUBACK for a packet id would acknowledge whatever its sender sent next under that id."""
    with fleet_mosquitto(tmp_path / "broker") as mosquitto, MqttFaultProxy(mosquitto.port, FAULTS) as proxy:
        agg = connect(proxy.port, AGGREGATOR_ID, presence=False)
        received: list[str] = []
        agg.subscribe(LAYOUT.all_outboxes, lambda _topic, m: received.append(m.envelope.msg_id))
        agg.subscribe(LAYOUT.all_statuses, lambda _topic, m: received.append(m.envelope.msg_id))
        gateways = {g: connect(proxy.port, g) for g in ("gw-1", "gw-2")}
        sent = []
        for i in range(300):
            gateway = ("gw-1", "gw-2")[i % 2]
            topic = (LAYOUT.outbox, LAYOUT.status)[(i // 2) % 2](gateway)
            message = Message.create(Status(online=True), sender=gateway)
            sent.append(message.envelope.msg_id)
            gateways[gateway].publish(topic, message)
        assert all(g.flush(30) for g in gateways.values())
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not set(sent) <= set(received):
            time.sleep(0.1)
        time.sleep(FAULTS.late_s * 1.5)  # the last late copies, and their acknowledgements
        assert set(sent) <= set(received) and len(received) > len(set(received))
        streams: dict[tuple, list[int]] = {}
        written: set[tuple] = set()
        for w in proxy.written:
            stream = (w.client_id, w.direction)
            if w.injected:
                assert (*stream, w.recv_seq) in written  # a copy follows its original
            else:
                streams.setdefault((*stream, w.topic), []).append(w.recv_seq)
                written.add((*stream, w.recv_seq))
        assert all(seqs == sorted(seqs) for seqs in streams.values())
        stats = proxy.stats
        for stream, n in stats.publishes.items():  # every PUBLISH read was written
            assert sum(len(s) for k, s in streams.items() if k[:2] == stream) == n, stream
        assert_both_ways_faulted(proxy)
        assert stats.acks_dropped == stats.duplicated, stats
        for transport in (*gateways.values(), agg):
            transport.close()


def assert_every_round_whole_and_duplicates_counted_once(job: FederatedJob, engine: RoundEngine) -> None:
    assert not job.rejected  # no reply of the wrong round, and no tree count off by a step applied twice
    assert all(sorted(r.replies) == GATEWAYS and not r.errors and not r.timed_out for r in job.results)
    # duplicated replies reached the engine: counted once within their round, or discarded as late
    assert sum(r.duplicates for r in job.results) + engine.late_replies > 0


@pytest.mark.parametrize(
    "config, seed",
    [
        (FedSCSXGB(protocol="histogram", n_rounds=3, max_depth=3, n_bins=32, feature_set_version=FEATURE_SET), 5),
        (FedForest(n_trees=3, max_depth=4, n_bins=16, feature_set_version=FEATURE_SET, protocol="histogram"), 4),
    ],
    ids=["fedscs_xgb", "fedforest"],
)
def test_a_private_job_with_duplicated_and_reordered_deliveries_equals_the_simulation(
    tmp_path: Path, config, seed: int
) -> None:
    with start_fleet_behind_proxy(tmp_path, FAULTS) as (fleet, proxy):
        engine = RoundEngine(fleet.agg)
        model, job = train_on_fleet(
            config, fleet.agg, clients=GATEWAYS, seed=seed, engine=engine, settings=JobSettings(deadline_s=60)
        )
        assert_both_ways_faulted(proxy)
        for gateway in GATEWAYS:  # every gateway got requests twice, and sent replies twice
            assert proxy.stats.total("duplicated", "to_client", gateway) > 0
            assert proxy.stats.total("duplicated", "to_broker", gateway) > 0
    assert config.secure_aggregation
    assert model == aggregator.simulate(config, client_data(fleet.stores), seed=seed)
    assert_every_round_whole_and_duplicates_counted_once(job, engine)
