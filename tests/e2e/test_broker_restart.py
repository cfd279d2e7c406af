"""mosquitto SIGKILLed and restarted (persistence on, same port) in the middle of a private
FedSCS-XGB job over four ``wheelfed gateway`` processes.

The kill comes from the aggregator's own connection the moment the first reply of a histogram
round arrives, so the broker dies with that round open and three of its replies outstanding
(in flight, queued, or not yet computed). Oracles: the job ends with exactly the model of
``aggregator.simulate`` on the same data and seed, every round heard all four gateways and no
reply was rejected (a sum applied twice or a stale reply would change the model); and a model
push queued for an offline gateway before the crash (QoS 1, its persistent session, saved by
the broker's autosave) reaches it after the restart exactly once: one ``ModelStatus`` answer,
the model active.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import aggregator
from aggregator.algorithms import FedSCSXGB
from aggregator.fleet import GatewayProcesses, train_on_fleet
from aggregator.jobs import JobSettings
from aggregator.rounds import RoundEngine
from shared.model.bundle import ModelBundle
from shared.protocol.envelope import Message
from shared.protocol.messages.deployment import ModelPush, ModelStatus
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.signing import SigningKey
from tests.e2e.fleet_support import (
    FEATURE_SET,
    GATEWAYS,
    PASSWORDS,
    Listener,
    client_data,
    fill_store,
    fleet_mosquitto,
    start_fleet,
)

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

LAYOUT = TopicLayout()
SPARE = {"gw-5": "pw-gw-5"}  # the gateway that is offline while its model push waits


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def test_broker_sigkilled_mid_round_the_job_equals_the_simulation_and_a_queued_push_arrives_once(
    tmp_path: Path,
) -> None:
    key = SigningKey.generate()
    key.verify_key.save(tmp_path / "aggregator.pub")
    fill_store(tmp_path / "gw-5.db", 5)
    spare_args = (
        "--store",
        str(tmp_path / "gw-5.db"),
        "--model-dir",
        str(tmp_path / "gw-5-models"),
        "--trust",
        str(tmp_path / "aggregator.pub"),
    )
    config = FedSCSXGB(protocol="histogram", n_rounds=4, max_depth=3, n_bins=32, feature_set_version=FEATURE_SET)
    with (
        fleet_mosquitto(tmp_path / "broker", SPARE) as mosquitto,
        start_fleet(tmp_path, broker=Listener(mosquitto.port)) as fleet,
    ):
        answers: list[Message] = []
        # (the engine's filter: an overlapping one would make mosquitto send each message twice)
        fleet.agg.subscribe(LAYOUT.all_outboxes, lambda _t, m: m.sender == "gw-5" and answers.append(m))

        # gw-5 has run before (its persistent session holds its subscriptions), and is offline
        spare = GatewayProcesses(mosquitto.port, 5, {**PASSWORDS, **SPARE}, tmp_path)
        spare.start("gw-5", *spare_args)
        fleet.presence.wait(["gw-5"], online=True, timeout_s=60)
        spare.stop_all()
        fleet.presence.wait(["gw-5"], online=False, timeout_s=30)

        pushed = aggregator.simulate(
            FedSCSXGB(
                protocol="histogram", n_rounds=1, n_bins=32, feature_set_version=FEATURE_SET, secure_aggregation=False
            ),
            client_data(fleet.stores),
        )
        bundle = ModelBundle.create(pushed, model_id="activity", version=1, signing_key=key).to_bytes()
        push = Message.create(ModelPush(bundle), sender=AGGREGATOR_ID, job="deploy-before-the-crash", round=1)
        queued_at = time.time()
        fleet.agg.publish(LAYOUT.inbox("gw-5"), push)
        assert fleet.agg.flush(10)
        # mosquitto saves its state every second (autosave_interval 1): a push younger than the
        # last save is lost with a SIGKILL (then only a re-send helps); this one is saved
        saved = tmp_path / "broker" / "mosquitto.db"  # written at the first autosave, not before
        wait_for(
            lambda: saved.exists() and saved.stat().st_mtime > queued_at + 0.01,
            10,
            "mosquitto did not save its state",
        )

        histogram_rounds: list[int] = []
        killed: list[tuple[int, int]] = []  # (round cut, the dead broker's pid)
        restarter: list[threading.Thread] = []

        def on_reply(_topic: str, message: Message) -> None:
            if message.type != "fedscs_xgb.histogram_reply" or message.envelope.round in histogram_rounds:
                return
            histogram_rounds.append(message.envelope.round)
            if len(histogram_rounds) == 3:  # the first reply of the third histogram round: kill now
                pid = mosquitto.process.pid
                mosquitto.stop(kill=True)
                killed.append((message.envelope.round, pid))
                restarter.append(threading.Thread(target=mosquitto.start))
                restarter[0].start()

        engine = RoundEngine(fleet.agg)
        fleet.agg.subscribe(LAYOUT.all_outboxes, on_reply)  # after the engine's: the reply is recorded first
        model, job = train_on_fleet(
            config, fleet.agg, clients=GATEWAYS, seed=7, engine=engine, settings=JobSettings(deadline_s=60)
        )
        restarter[0].join()
        ((cut_round, dead_pid),) = killed
        assert mosquitto.running and mosquitto.process.pid != dead_pid
        assert fleet.agg.connections >= 2  # the aggregator really lost its connection and came back
        assert cut_round < job.rounds  # rounds ran after the restart

        # gw-5 comes back: the push queued before the crash is there, once
        spare.start("gw-5", *spare_args)
        try:
            wait_for(lambda: answers, 60, "gw-5 never answered the model push queued before the restart")
            time.sleep(3)  # a second delivery would be answered (from the reply cache) by now
            assert [m.envelope.reply_to for m in answers] == [push.envelope.msg_id]
            status = answers[0].body
            assert isinstance(status, ModelStatus) and status.state == "active", status
            assert (status.active_model_id, status.active_version) == ("activity", 1)
        finally:
            spare.stop_all()

    assert config.secure_aggregation and model.n_trees == 12
    assert model == aggregator.simulate(config, client_data(fleet.stores), seed=7)
    assert not job.rejected  # no reply of another round, no tree count off by one applied twice
    assert all(sorted(r.replies) == GATEWAYS and not r.errors for r in job.results)
