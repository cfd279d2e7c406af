"""Site aggregators over in-memory brokers (one per clinic, one for the cloud): the cloud's model
equals the flat fleet's bit for bit (FedSCS-XGB under secure aggregation, FedForest in plain
mode), the cloud never receives one gateway's vector from a site, a silent member is reported
by its site and dropped exactly as a flat fleet drops it, an unreachable site ends in the
usual one-line quorum error, and site messages that speak for foreign gateways are refused.
The same over real mosquitto: tests/e2e/test_site_aggregator.py."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pytest

from aggregator.algorithms import FedForest, FedSCSXGB
from aggregator.jobs import FederatedJob, JobSettings
from aggregator.rounds import QuorumNotReached, RoundEngine
from aggregator.site_aggregator import (
    MemberReplies,
    SiteAggregator,
    SiteAwareTransport,
    SiteConfig,
    SiteMember,
    SiteReplies,
    SiteSum,
    site_acl,
    site_aware_engine,
)
from edge_client.participant import Participant
from edge_client.training_data import ClientData
from shared.model.ensemble import TreeEnsemble
from shared.protocol.envelope import Message, decode_message, encode_message
from shared.protocol.messages import Ping
from shared.protocol.messages.fleet_sums import FleetSumReply
from shared.protocol.messages.secure_aggregation import MaskedVector
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.transport.memory import MemoryBroker, MemoryTransport

GATEWAYS = [f"gw-{i}" for i in range(1, 7)]
SITES = {"site-a": GATEWAYS[:3], "site-b": GATEWAYS[3:]}


def fleet_data(n: int = 90, d: int = 5) -> list[ClientData]:
    """Six gateways with shifted, unequal data and a few missing values."""
    out = []
    for i, client in enumerate(GATEWAYS):
        rng = np.random.default_rng(100 + i)
        m = n + 13 * i
        X = rng.normal(size=(m, d)) + 0.3 * i
        X[rng.random(X.shape) < 0.03] = np.nan
        score = np.nan_to_num(X[:, 0]) - np.nan_to_num(X[:, 2]) + rng.normal(scale=0.5, size=m)
        y = np.array(["sit", "push", "lie"])[np.digitize(score, [-0.4, 0.7])]
        out.append(ClientData(client, X, y))
    return out


def assert_same_ensemble(a: TreeEnsemble, b: TreeEnsemble) -> None:
    """Every field of the ensembles and of each tree, arrays element for element."""
    for f in dataclasses.fields(TreeEnsemble):
        if f.name == "trees":
            assert len(a.trees) == len(b.trees)
            for ta, tb in zip(a.trees, b.trees):
                for tf in dataclasses.fields(ta):
                    va, vb = getattr(ta, tf.name), getattr(tb, tf.name)
                    assert (va is None) == (vb is None), tf.name
                    if va is not None:
                        np.testing.assert_array_equal(va, vb, err_msg=tf.name)
                        assert np.asarray(va).dtype == np.asarray(vb).dtype, tf.name
        elif isinstance(getattr(a, f.name), np.ndarray):
            np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name), err_msg=f.name)
        else:
            assert getattr(a, f.name) == getattr(b, f.name), f.name
    assert a == b


@dataclass
class MemoryFleet:
    """A cloud broker with the aggregator, and either the gateways on it (flat) or one clinic
    broker per site with its gateways and a site aggregator."""

    cloud: MemoryTransport
    engine: RoundEngine
    gateways: dict[str, MemoryTransport] = field(default_factory=dict)
    sites: dict[str, SiteAggregator] = field(default_factory=dict)

    def train(
        self, algorithm, *, deadline_s: float = 20.0, min_fraction: float = 1.0, progress: Callable | None = None
    ) -> tuple[TreeEnsemble, FederatedJob]:
        job = FederatedJob(
            self.engine,
            GATEWAYS,
            job_id="site-test",
            progress=progress,
            settings=JobSettings(deadline_s=deadline_s, min_fraction=min_fraction),
        )
        return algorithm.fit(job, seed=3), job


@contextmanager
def memory_fleet(
    data: list[ClientData], sites: dict[str, list[str]] | None, *, site_deadline_s: float = 10.0
) -> Iterator[MemoryFleet]:
    # The cloud broker's ACL would need site_acl's rules for the site accounts; the memory
    # broker enforces only the default layout's, so it runs open here (mosquitto enforces them
    # in the e2e test).
    cloud_broker = MemoryBroker(enforce_acl=sites is None)
    cloud = MemoryTransport(cloud_broker, AGGREGATOR_ID, presence=False)
    fleet = MemoryFleet(cloud, site_aware_engine(cloud, sites) if sites else RoundEngine(cloud))
    by_client = {c.client_id: c for c in data}
    brokers = {None: cloud_broker}
    for site, members in (sites or {}).items():
        brokers[site] = MemoryBroker()
        up = MemoryTransport(cloud_broker, site, presence=False)
        down = MemoryTransport(brokers[site], AGGREGATOR_ID, presence=False)
        fleet.sites[site] = SiteAggregator(SiteConfig(site, tuple(members), deadline_s=site_deadline_s), up, down)
        fleet.sites[site].start()
    home = {m: s for s, members in (sites or {}).items() for m in members}
    for client in GATEWAYS:
        transport = MemoryTransport(brokers[home.get(client)], client)
        Participant(transport, by_client[client]).start()
        fleet.gateways[client] = transport
    try:
        yield fleet
    finally:
        for site in fleet.sites.values():
            site.close()


def received(fleet: MemoryFleet, sender: str) -> list[str]:
    """Types of the messages the cloud's transport decoded from ``sender``."""
    return [r.type for r in fleet.engine.audit.view().get(sender, [])]


@pytest.mark.parametrize(
    "algorithm",
    [
        FedSCSXGB(n_rounds=3, max_depth=3, n_bins=16, protocol="histogram"),  # secure aggregation on
        FedForest(n_trees=4, max_depth=4, n_bins=16, secure_aggregation=False),  # private, plain sums
    ],
    ids=["fedscs_xgb-secure", "fedforest-plain"],
)
def test_sites_give_the_flat_fleets_model_bit_for_bit(algorithm) -> None:
    data = fleet_data()
    with memory_fleet(data, None) as flat:
        flat.engine.audit.keep_bodies = True
        flat_model, flat_job = flat.train(algorithm)
    with memory_fleet(data, SITES) as sited:
        sited.engine.audit.keep_bodies = True
        site_model, site_job = sited.train(algorithm)
    assert_same_ensemble(site_model, flat_model)
    assert not site_job.rejected and all(len(r.replies) == len(r.selected) for r in site_job.results)
    assert sited.engine.late_replies == 0 and not any(r.duplicates for r in site_job.results)
    # Every fleet-sum reply reached the cloud inside a site sum, never one gateway's alone.
    additive = {"fleet_sum", "fedscs_xgb.histogram_reply", "fedforest.histogram_reply"}
    assert additive & {t for g in GATEWAYS for t in received(flat, g)}
    assert not additive & {t for g in GATEWAYS for t in received(sited, g)}
    n_sums = sum(
        1
        for r in flat_job.results
        if r.request_type in {"fleet_counts", "grid_counts", "fedscs_xgb.histograms", "fedforest.histograms"}
    )
    for name, site in sited.sites.items():
        assert site.stats.sums_sent == n_sums and site.stats.summed == 3 * n_sums and site.stats.silent == 0
        assert received(sited, name) == ["site.replies"] * n_sums
    # ... and less crossed the WAN.
    up_flat = sum(flat.engine.audit.bytes_by_client.values())
    up_sites = sum(sited.engine.audit.bytes_by_client.values())
    assert up_sites < up_flat


def test_a_silent_member_is_reported_by_its_site_and_dropped_as_in_a_flat_fleet() -> None:
    """gw-2 vanishes after the second progress step: its site names it silent after 0.3 s
    (the cloud closes each round then, not at its own deadline), and the cloud's model equals
    the flat fleet's, where gw-2 vanishes at the same step and times out."""
    data = fleet_data()
    algorithm = FedSCSXGB(n_rounds=3, max_depth=2, n_bins=8, protocol="histogram")

    def dropping(fleet: MemoryFleet) -> Callable:
        def on_round(progress) -> None:
            if progress.step == 2:
                fleet.gateways["gw-2"].drop()

        return on_round

    with memory_fleet(data, None) as flat:
        flat_model, flat_job = flat.train(algorithm, deadline_s=1.0, min_fraction=0.5, progress=dropping(flat))
    with memory_fleet(data, SITES, site_deadline_s=0.3) as sited:
        site_model, site_job = sited.train(algorithm, deadline_s=20.0, min_fraction=0.5, progress=dropping(sited))
    assert_same_ensemble(site_model, flat_model)
    flat_missing = [r for r in flat_job.results if "gw-2" in r.timed_out]
    site_missing = [r for r in site_job.results if "gw-2" in r.errors]
    assert flat_missing and len(site_missing) == len(flat_missing)
    assert all(r.errors["gw-2"].code == "site_timeout" and not r.timed_out for r in site_missing)
    assert max(r.elapsed_s for r in site_missing) < 5.0  # the site's 0.3 s, not the cloud's 20 s
    assert "no answer at site site-a within 0.3 s" in site_missing[0].failures()["gw-2"]
    assert sited.sites["site-a"].stats.silent == len(site_missing)


def test_an_unreachable_site_is_the_usual_quorum_error_in_one_line() -> None:
    with memory_fleet(fleet_data(), SITES) as sited:
        sited.sites["site-b"].upstream.drop()  # the clinic's uplink is gone
        with pytest.raises(QuorumNotReached) as caught:
            sited.train(FedForest(n_trees=2, max_depth=2, n_bins=8), deadline_s=0.5)
    text = str(caught.value)
    assert "\n" not in text and "3 of 6 clients answered, quorum is 6" in text
    assert all(f"{g}: no answer within" in text for g in GATEWAYS[3:])


def _site_message(members: list[str], sender: str = "site-a") -> Message:
    template = encode_message(Message.create(FleetSumReply(MaskedVector(np.zeros(0, np.uint32))), sender=sender))
    part = SiteSum(template, np.array([5, 7], np.uint32), tuple(SiteMember(m, f"req-{m}", f"rep-{m}") for m in members))
    return Message.create(SiteReplies("grid_counts", (part,)), sender=sender, job="j", round=4)


def test_the_cloud_reads_a_site_sum_as_its_members_replies() -> None:
    cloud = SiteAwareTransport(MemoryTransport(MemoryBroker(), AGGREGATOR_ID, presence=False), SITES)
    out = cloud.expand(TopicLayout().outbox("site-a"), _site_message(["gw-1", "gw-3"]))
    assert len(out.batches) == 1 and not out.errors
    first, second = out.batches[0]
    assert (first.sender, first.envelope.reply_to, first.envelope.msg_id, first.envelope.round) == (
        "gw-1",
        "req-gw-1",
        "rep-gw-1",
        4,
    )
    np.testing.assert_array_equal(first.body.sums.values, np.array([5, 7], np.uint32))
    np.testing.assert_array_equal(second.body.sums.values, np.zeros(2, np.uint32))
    assert second.body.sums.values.dtype == np.uint32 and cloud.refused == 0


@pytest.mark.parametrize(
    "topic_client, members, sender",
    [
        ("site-a", ["gw-1", "gw-4"], "site-a"),  # gw-4 is site-b's
        ("site-b", ["gw-1", "gw-2"], "site-b"),  # site-b speaking for site-a's members
        ("gw-1", ["gw-1", "gw-2"], "gw-1"),  # a gateway posing as a site
    ],
    ids=["foreign-member", "other-site", "not-a-site"],
)
def test_site_messages_for_gateways_the_site_does_not_answer_for_are_refused(topic_client, members, sender) -> None:
    cloud = SiteAwareTransport(MemoryTransport(MemoryBroker(), AGGREGATOR_ID, presence=False), SITES)
    assert cloud.expand(TopicLayout().outbox(topic_client), _site_message(members, sender)) == MemberReplies()
    assert cloud.refused == 1


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"site_id": "site-a", "members": ()}, "members must name at least one gateway"),
        ({"site_id": "site-a", "members": ("gw-1", "gw-1")}, "members lists a gateway twice"),
        ({"site_id": "site a", "members": ("gw-1",)}, "invalid client id 'site a'"),
        ({"site_id": "site-a", "members": ("gw-1",), "deadline_s": 0.0}, "deadline_s must be > 0"),
    ],
)
def test_bad_site_settings_are_one_clear_error(kwargs, error) -> None:
    with pytest.raises(ValueError, match=error):
        SiteConfig(**kwargs)


def test_a_gateway_in_two_sites_is_refused() -> None:
    with pytest.raises(ValueError, match="gw-1 is a member of both site-a and site-b"):
        SiteAwareTransport(
            MemoryTransport(MemoryBroker(), AGGREGATOR_ID, presence=False), {"site-a": ["gw-1"], "site-b": ["gw-1"]}
        )


def test_site_acl_confines_the_site_to_its_members() -> None:
    acl = site_acl("site-a", ["gw-1", "gw-2"])
    assert "topic read wheelfed/v1/c/gw-2/in" in acl and "gw-3" not in acl and "#" not in acl


class _Cloud:
    """A cloud engine reading site-a's replies, and site-a's end of the cloud broker (it sees
    the requests to gw-1 and gw-2 and publishes what the test says)."""

    def __init__(self) -> None:
        broker = MemoryBroker(enforce_acl=False)
        self.engine = site_aware_engine(
            MemoryTransport(broker, AGGREGATOR_ID, presence=False), {"site-a": ["gw-1", "gw-2"]}
        )
        self.site = MemoryTransport(broker, "site-a", presence=False)
        self.requests: list[tuple[str, Message]] = []  # (member, request) as they arrive, re-sends too
        for member in ("gw-1", "gw-2"):
            self.site.subscribe(
                TopicLayout().inbox(member), lambda _t, m, member=member: self.requests.append((member, m))
            )
        self.result = None

    def request(self, member: str) -> Message:
        return next(m for c, m in self.requests if c == member)

    def open_round(self) -> threading.Thread:
        def run() -> None:
            self.result = self.engine.run_round("j", 1, Ping(), ["gw-1", "gw-2"], deadline_s=3.0, min_replies=0)

        thread = threading.Thread(target=run)
        thread.start()
        for _ in range(200):
            if len(self.requests) == 2:
                break
            time.sleep(0.01)
        return thread

    def site_sum(self) -> Message:
        template = encode_message(Message.create(FleetSumReply(MaskedVector(np.zeros(0, np.uint64))), sender="site-a"))
        members = tuple(SiteMember(m, self.request(m).envelope.msg_id, f"rep-{m}") for m in ("gw-1", "gw-2"))
        part = SiteSum(template, np.array([3, 4], np.uint64), members)
        return Message.create(SiteReplies("ping", (part,)), sender="site-a", job="j", round=1)


def test_a_site_sum_is_taken_whole_by_the_cloud() -> None:
    cloud = _Cloud()
    thread = cloud.open_round()
    message = cloud.site_sum()
    cloud.site.publish(TopicLayout().outbox("site-a"), message)
    cloud.site.publish(TopicLayout().outbox("site-a"), message)  # a QoS 1 copy: handled once
    thread.join()
    replies = cloud.result.replies
    assert sorted(replies) == ["gw-1", "gw-2"] and cloud.result.duplicates == 0
    np.testing.assert_array_equal(replies["gw-1"].body.sums.values, [3, 4])
    np.testing.assert_array_equal(replies["gw-2"].body.sums.values, [0, 0])
    assert cloud.engine.late_replies == 0


def test_a_site_sum_with_a_member_answered_already_is_not_taken_and_the_rest_are_asked_again() -> None:
    """gw-1's reply reached the cloud on its own; a sum holding gw-1 again must not be added
    (gw-1 would count twice): none of it is taken, and gw-2 is asked again."""
    cloud = _Cloud()
    thread = cloud.open_round()
    gw1_request = cloud.request("gw-1")
    cloud.site.publish(
        TopicLayout().outbox("gw-1"),
        gw1_request.reply(FleetSumReply(MaskedVector(np.array([1, 1], np.uint64))), sender="gw-1"),
    )
    cloud.site.publish(TopicLayout().outbox("site-a"), cloud.site_sum())
    thread.join()
    assert sorted(cloud.result.replies) == ["gw-1"] and cloud.result.timed_out == ["gw-2"]
    np.testing.assert_array_equal(cloud.result.replies["gw-1"].body.sums.values, [1, 1])
    assert [c for c, _ in cloud.requests].count("gw-2") >= 2  # asked again (same request id)
    assert {m.envelope.msg_id for c, m in cloud.requests if c == "gw-2"} == {cloud.request("gw-2").envelope.msg_id}


def site_examples() -> list[SiteReplies]:
    """A valid site message (a sum of two members with sealed bundles, a silent member): the
    protocol fuzzer's seed for ``site.replies`` (tests/shared/protocol/test_fuzz.py)."""
    template = encode_message(Message.create(FleetSumReply(MaskedVector(np.zeros(0, np.uint32))), sender="site-a"))
    part = SiteSum(
        template,
        np.array([5, 7], np.uint32),
        (SiteMember("gw-1", "req-1", "rep-1", {"gw-2": b"\x01" * 67}), SiteMember("gw-2", "req-2", "rep-2")),
    )
    return [SiteReplies("grid_counts", (part,), (SiteMember("gw-3", "req-3"),), 2.5)]


def test_the_site_message_example_round_trips() -> None:
    (body,) = site_examples()
    message = Message.create(body, sender="site-a", job="j", round=2)
    decoded = decode_message(encode_message(message)).body
    assert decoded.silent == body.silent and decoded.sums[0].members == body.sums[0].members
    np.testing.assert_array_equal(decoded.sums[0].total, body.sums[0].total)
