"""A fleet of mixed protocol versions on the in-memory transport: a gateway one version behind
trains in jobs whose requests its version has (written in its version), is left out of the
others by the survey with the version it needs, and a gateway that lacks a capability the job
needs is left out with what it lacks. (tests/e2e/test_rolling_upgrade.py runs the previous
release's own gateway over mosquitto.)"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from aggregator.algorithms import FedForest
from aggregator.feature_sets import survey_feature_sets
from aggregator.jobs import FederatedJob, JobSettings
from aggregator.simulate import Simulation
from edge_client.training_data import ClientData
from shared.protocol.envelope import PROTOCOL_VERSION, Message

OLD = PROTOCOL_VERSION - 1


def client(name: str, seed: int, n: int = 90) -> ClientData:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = np.array(["lie", "push", "sit"])[np.digitize(X[:, 0] + X[:, 1], [-0.5, 0.6])]
    return ClientData(name, X, y, feature_set_version="fs-a")


def fleet() -> Simulation:
    return Simulation([client("gw-1", 1), client("gw-2", 2), client("gw-3", 3)])


def speak_old(sim: Simulation, gateway: str) -> list[int]:
    """Make ``gateway`` answer in the previous protocol version, as its release does; returns the
    versions of the requests it receives."""
    participant = sim.participants[gateway]
    dispatcher, transport = participant.dispatcher, participant.transport
    received: list[int] = []

    def encode_reply(request: Message, body: object) -> list[bytes]:
        received.append(request.envelope.version)
        env = request.envelope
        reply = Message.create(body, sender=gateway, job=env.job, round=env.round, reply_to=env.msg_id, version=OLD)
        return transport.encode_payloads(reply)

    dispatcher._encode_reply = encode_reply
    return received


PLAIN = dict(n_trees=2, max_depth=3, protocol="histogram", secure_aggregation=False, feature_set_version="fs-a")


def test_a_gateway_one_version_behind_trains_in_a_job_its_version_serves(caplog) -> None:
    caplog.set_level(logging.INFO)
    sim = fleet()
    received = speak_old(sim, "gw-3")
    config = FedForest(**PLAIN)
    choice = survey_feature_sets(sim.engine, "job-1", list(sim.transports), "fs-a", deadline_s=5, algorithm=config)
    assert choice.clients == ("gw-1", "gw-2", "gw-3") and not choice.left_out
    assert sim.engine.peer_versions["gw-3"] == OLD
    job = FederatedJob(sim.engine, choice.clients, job_id="job-1", settings=JobSettings(deadline_s=5))
    model = config.fit(job, seed=2)
    assert model == fleet().run(config, seed=2)  # the same forest as an all-new fleet's
    assert set(received[1:]) == {OLD}  # every request after the survey written in its version
    behind = [r.getMessage() for r in caplog.records if "one behind" in r.getMessage()]
    assert behind == [
        f"gateway gw-3 speaks protocol version {OLD}, one behind this aggregator's {PROTOCOL_VERSION}: "
        f"it gets version-{OLD} requests, and jobs that need newer messages leave it out (update it)"
    ]


def test_a_job_that_needs_the_new_version_leaves_the_old_gateway_out_naming_it(caplog) -> None:
    sim = fleet()
    speak_old(sim, "gw-3")
    private = FedForest(n_trees=2, max_depth=2, feature_set_version="fs-a")
    choice = survey_feature_sets(sim.engine, "job-2", list(sim.transports), "fs-a", deadline_s=5, algorithm=private)
    assert choice.clients == ("gw-1", "gw-2")
    assert choice.left_out == {
        "gw-3": (
            f"protocol_version: it speaks protocol version {OLD}, this job needs {PROTOCOL_VERSION}: "
            f"fedforest.dp_histograms (not in protocol version {OLD}), fedforest.dp_leaves (not in protocol version "
            f"{OLD}), "
            f"secagg.unmask (content changed in protocol version {PROTOCOL_VERSION}) -- update the gateway"
        )
    }
    assert any("gateway gw-3 left out of job job-2: protocol_version" in r.getMessage() for r in caplog.records)
    # without the job's algorithm the survey takes no risk: every gateway behind stays out
    unknown = survey_feature_sets(sim.engine, "job-3", list(sim.transports), "fs-a", deadline_s=5)
    assert "gw-3" in unknown.left_out and unknown.clients == ("gw-1", "gw-2")


@pytest.mark.parametrize("requested", ["fs-a", ""])
def test_a_gateway_without_the_job_s_algorithm_is_left_out_saying_what_it_lacks(requested) -> None:
    sim = fleet()
    del sim.participants["gw-2"].halves["fedforest"]  # a build without FedForest's client half
    choice = survey_feature_sets(
        sim.engine, "job-4", list(sim.transports), requested, deadline_s=5, algorithm=FedForest(**PLAIN)
    )
    assert choice.clients == ("gw-1", "gw-3")
    assert choice.left_out == {
        "gw-2": "missing_capability: gw-2 does not serve fedforest (it serves ping, evaluate, "
        "secure_aggregation, fedscs_xgb, fedga_tree, vertical_forest)"
    }


def test_a_server_job_trains_with_a_gateway_its_version_serves(tmp_path) -> None:
    """``wheelfed server`` names the job's algorithm to the survey: a gateway one version behind
    trains in a job whose requests its version has, and is left out of a private one."""
    from fastapi.testclient import TestClient

    from aggregator.server.api import create_app
    from tests.server.fleet_memory import announce, fleet_data, running_server, wait_job

    clients = fleet_data(n_clients=4)
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        speak_old(sim, "gw-4")
        api = TestClient(create_app(server))
        plain = {"n_trees": 2, "max_depth": 2, "n_bins": 8, "protocol": "histogram", "secure_aggregation": False}
        job = wait_job(
            server,
            api.post("/api/jobs", json={"model_id": "act", "algorithm": "fedforest", "config": plain}).json()["job_id"],
        )
        assert job.state == "completed", job.error
        assert job.participants == ["gw-1", "gw-2", "gw-3", "gw-4"]
        private = wait_job(
            server,
            api.post(
                "/api/jobs", json={"model_id": "dp", "algorithm": "fedforest", "config": {"n_trees": 2, "max_depth": 2}}
            ).json()["job_id"],
        )
        assert private.state == "completed", private.error
        assert private.participants == ["gw-1", "gw-2", "gw-3"]
