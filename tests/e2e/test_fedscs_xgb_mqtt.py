"""FedSCS-XGB over mosquitto with real ``wheelfed gateway`` processes, each with its own labelled
window store: the model equals the in-memory simulation's on the same data and seed; a gateway
killed mid-training is dropped from its rounds (quorum), rejoins after a restart with the whole
model, and no reply ever reports a tree count other than the model's (no tree applied twice).
With a gateway killed, the model equals a simulation in which the same gateway vanishes at the
same point and comes back where the process was restarted: the kill is made exact --
at a step boundary, or (private) by a proxy that drops the gateway's reply of a given round and
SIGKILLs it -- so the comparison is bit for bit. A gateway left out of a private job for the
rest of it takes part in the next job again."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

import aggregator
from aggregator.algorithms import FedSCSXGB
from aggregator.fleet import train_on_fleet
from aggregator.jobs import JobSettings
from aggregator.simulate import Simulation
from edge_client.participant import Participant
from shared.protocol.envelope import decode_message
from shared.protocol.messages.fedscs_xgb import XgbHistogramRequest
from shared.protocol.topics import TopicLayout
from shared.transport.memory import MemoryTransport
from tests.aggregator.test_private_training import vanish_after
from tests.e2e.fleet_support import FEATURE_SET, GATEWAYS, Fleet, client_data, start_fleet_behind_proxy
from tests.e2e.mqtt_fault_proxy import Faults, Publish

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

#: The simulations' round deadline: only the vanished gateway ever waits for it.
SIM_DEADLINE_S = 2.0


def restart_in_simulation(sim: Simulation, client: str) -> None:
    """What restarting a gateway process is in the simulation: a fresh participant (no keys,
    no margins, no reply cache) on the client's broker session, which kept what was queued."""
    data = next(c for c in sim.clients if c.client_id == client)
    transport = MemoryTransport(sim.broker, client)
    Participant(transport, data).start()
    sim.transports[client] = transport


def test_mqtt_training_with_gateway_processes_equals_the_simulation(fleet) -> None:
    config = FedSCSXGB(protocol="histogram", n_rounds=4, max_depth=3, n_bins=32, feature_set_version=FEATURE_SET)
    model, job = train_on_fleet(config, fleet.agg, clients=GATEWAYS, seed=5, settings=JobSettings(deadline_s=60))
    simulated = aggregator.simulate(config, client_data(fleet.stores, 0.2), seed=5)
    assert model == simulated  # bit-identical: trees, leaves, base score, classes, metadata
    assert model.classes == ("lie", "push", "sit") and model.n_trees == 12
    assert not job.rejected and all(len(r.replies) == 4 for r in job.results)


def test_a_gateway_killed_mid_training_is_dropped_and_rejoins(fleet) -> None:
    """The paper's protocol: a restarted gateway gets the whole model and answers again. gw-4 is
    SIGKILLed after step 2 (the kill returns before step 3's first request goes out) and
    restarted after step 4; the simulation drops gw-4 and restarts it at the same steps."""
    answered: list[int] = []

    def on_round(progress) -> None:
        answered.append(progress.answered)
        if progress.step == 2:
            fleet.processes.kill("gw-4")  # SIGKILL: its last will marks it offline
        if progress.step == 4:
            fleet.restart("gw-4")

    config = FedSCSXGB(n_rounds=7, max_depth=3, n_bins=32, feature_set_version=FEATURE_SET, protocol="atoms")
    started = time.monotonic()
    model, job = train_on_fleet(
        config,
        fleet.agg,
        clients=GATEWAYS,
        seed=1,
        settings=JobSettings(deadline_s=4, min_fraction=0.5),
        progress=on_round,
    )
    assert model.n_trees == 21
    assert answered[:2] == [4, 4] and 3 in answered[2:4]
    assert answered[-1] == 4  # back, with the whole model (its restart lost its margins)
    assert not job.rejected  # every reply's tree count matched the model's: nothing applied twice
    assert time.monotonic() - started < 120

    sim = Simulation(client_data(fleet.stores, 0.2))

    def in_simulation(progress) -> None:
        if progress.step == 2:
            sim.transports["gw-4"].drop()
        if progress.step == 4:
            restart_in_simulation(sim, "gw-4")

    simulated = sim.run(
        config,
        seed=1,
        job_id=job.job_id,
        progress=in_simulation,
        settings=JobSettings(deadline_s=SIM_DEADLINE_S, min_fraction=0.5),
    )
    assert model == simulated


def kill_at_reply(fleet: Fleet, gateway: str, reply_type: str, n: int) -> Callable[[Publish], bool]:
    """A proxy tap: when ``gateway``'s ``n``-th reply of ``reply_type`` reaches the proxy, the
    gateway is SIGKILLed and the reply dropped -- it died mid-round, its reply computed and
    never delivered, whatever the timing of the processes."""
    outbox, seen = TopicLayout().outbox(gateway), []

    def tap(publish: Publish) -> bool:
        if (
            publish.direction != "to_broker"
            or publish.topic != outbox
            or decode_message(publish.payload).type != reply_type
        ):
            return True
        seen.append(publish)
        if len(seen) != n:
            return True
        fleet.processes.kill(gateway)
        return False

    return tap


def test_private_training_goes_on_when_a_gateway_is_killed_and_it_rejoins_the_next_job(tmp_path: Path) -> None:
    """Secure aggregation over real gateway processes: gw-4 is SIGKILLed as its 8th histogram
    reply (the second level of boosting step 3) leaves it, and restarted after step 4. The
    open round goes on without it (its masks removed with its neighbours' shares); restarted,
    it holds no keys for the job (it answers ``resync``) and stays out until the job ends --
    the model is bit for bit that of a simulation in which gw-4 vanishes on its 8th histogram
    request and restarts after step 4. The next job has all four again and equals its
    simulation."""
    answered: list[int] = []
    with start_fleet_behind_proxy(tmp_path, Faults(), "--holdout-fraction", "0.2") as (fleet, proxy):
        proxy.tap = kill_at_reply(fleet, "gw-4", "fedscs_xgb.histogram_reply", 8)

        def on_round(progress) -> None:
            answered.append(progress.answered)
            if progress.step == 4:
                fleet.restart("gw-4")

        config = FedSCSXGB(protocol="histogram", n_rounds=6, max_depth=3, n_bins=32, feature_set_version=FEATURE_SET)
        model, job = train_on_fleet(
            config,
            fleet.agg,
            clients=GATEWAYS,
            seed=1,
            settings=JobSettings(deadline_s=4, min_fraction=0.5),
            progress=on_round,
        )
        assert proxy.stats.total("tapped") == 1
        # the next job: gw-4 is back in every round
        again = FedSCSXGB(protocol="histogram", n_rounds=2, max_depth=3, n_bins=32, feature_set_version=FEATURE_SET)
        next_model, next_job = train_on_fleet(
            again, fleet.agg, clients=GATEWAYS, seed=2, settings=JobSettings(deadline_s=60)
        )
    assert config.secure_aggregation and model.n_trees == 18
    assert answered[:2] == [4, 4] and answered[2:] == [3, 3, 3, 3]
    types = {r.request_type for r in job.results}
    assert {"secagg.keys", "secagg.unmask", "fedscs_xgb.histograms"} <= types
    assert any(e.code == "resync" for r in job.results for e in r.errors.values())  # restarted: no keys

    data = client_data(fleet.stores, 0.2)
    sim = Simulation(data)
    vanish_after(sim, "gw-4", XgbHistogramRequest, 7)
    simulated = sim.run(
        config,
        seed=1,
        job_id=job.job_id,
        settings=JobSettings(deadline_s=SIM_DEADLINE_S, min_fraction=0.5),
        progress=lambda p: p.step == 4 and restart_in_simulation(sim, "gw-4"),
    )
    assert model == simulated

    assert all(sorted(r.replies) == GATEWAYS for r in next_job.results) and not next_job.rejected
    assert next_model == aggregator.simulate(again, data, seed=2)
