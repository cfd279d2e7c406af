"""Site aggregators over real mosquitto: a cloud broker (deploy/ config, its ACL extended by
``site_acl`` for the sites' accounts) and one clinic broker per site (the unchanged deploy/
config), six in-process gateways (``Participant`` over MQTT), two sites of three. The cloud's
FedSCS-XGB (secure aggregation) and FedForest (plain sums) models equal the flat fleet's --
the same six gateways on the cloud broker -- on every field; fewer bytes reach the cloud; a
site whose process is killed ends the cloud's job with the usual one-line quorum error."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from aggregator.algorithms import FedForest, FedSCSXGB
from aggregator.broker import BrokerUser, MosquittoBroker, mosquitto_available
from aggregator.broker.mosquitto import DEPLOY_DIR, die_with_parent
from aggregator.fleet import train_on_fleet
from aggregator.jobs import JobSettings, TrainingError
from aggregator.rounds import QuorumNotReached, RoundEngine
from aggregator.cli.scaling import DOWNSTREAM_PASSWORD_ENV, UPSTREAM_PASSWORD_ENV
from aggregator.site_aggregator import (
    SiteAggregator,
    SiteConfig,
    site_acl,
    site_aware_engine,
)
from edge_client.participant import Participant
from edge_client.training_data import ClientData
from shared.protocol.topics import AGGREGATOR_ID
from shared.transport.mqtt import MqttConfig, MqttTransport
from tests.aggregator.test_site_aggregator import GATEWAYS, SITES, assert_same_ensemble, fleet_data

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]


def password(user: str) -> str:
    return f"pw-{user}"


def broker(stack: ExitStack, run_dir: Path, users: list[str], extra_acl: str = "") -> MosquittoBroker:
    """A mosquitto with the deploy/ config; ``extra_acl`` appended to its ACL."""
    deploy = run_dir / "deploy"
    shutil.copytree(DEPLOY_DIR / "mosquitto", deploy / "mosquitto")
    acl = deploy / "mosquitto" / "acl"
    acl.write_text(acl.read_text() + extra_acl)
    return stack.enter_context(
        MosquittoBroker(run_dir, users=[BrokerUser(u, password(u)) for u in users], deploy_dir=deploy)
    )


def connected(stack: ExitStack, client_id: str, port: int, *, presence: bool) -> MqttTransport:
    transport = MqttTransport(
        client_id, MqttConfig(port=port, username=client_id, password=password(client_id)), presence=presence
    )
    stack.callback(transport.close)
    return transport


@dataclass
class MqttFleet:
    cloud: MqttTransport
    engine: RoundEngine
    cloud_port: int
    clinic_ports: dict[str, int] = field(default_factory=dict)
    gateways: dict[str, MqttTransport] = field(default_factory=dict)
    sites: dict[str, SiteAggregator] = field(default_factory=dict)

    def train(self, algorithm, *, deadline_s: float = 30.0, min_fraction: float = 1.0, progress=None):
        return train_on_fleet(
            algorithm,
            self.engine.transport,
            clients=GATEWAYS,
            seed=3,
            job_id=f"site-e2e-{algorithm.name}",
            settings=JobSettings(deadline_s=deadline_s, min_fraction=min_fraction),
            engine=self.engine,
            discover_s=20,
            progress=progress,
        )


@contextmanager
def mqtt_fleet(
    tmp_path: Path,
    sites: dict[str, list[str]] | None,
    *,
    in_process_sites: bool = True,
    site_deadline_s: float = 15.0,
    data: list[ClientData] | None = None,
) -> Iterator[MqttFleet]:
    """The six gateways (``data``: theirs, default ``fleet_data()``) behind the cloud's broker
    (``sites`` None), or behind their clinics'."""
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed: the test command installs it")
    data = {c.client_id: c for c in data or fleet_data()}
    tag = "sites" if sites else "flat"
    with ExitStack() as stack:
        acl = "".join(f"\n{site_acl(s, m)}\n" for s, m in (sites or {}).items())
        cloud_broker = broker(stack, tmp_path / f"{tag}-cloud", [AGGREGATOR_ID, *(sites or GATEWAYS)], acl)
        homes = {None: cloud_broker.port}
        for site, members in (sites or {}).items():
            homes[site] = broker(stack, tmp_path / f"{tag}-{site}", [AGGREGATOR_ID, *members]).port
        cloud = connected(stack, AGGREGATOR_ID, cloud_broker.port, presence=False)
        cloud.connect()
        engine = site_aware_engine(cloud, sites) if sites else RoundEngine(cloud)
        fleet = MqttFleet(cloud, engine, cloud_broker.port, {s: homes[s] for s in sites or {}})
        for site, members in (sites or {}).items() if in_process_sites else ():
            up = connected(stack, site, cloud_broker.port, presence=False)
            down = connected(stack, AGGREGATOR_ID, homes[site], presence=False)
            up.connect()
            down.connect()
            fleet.sites[site] = SiteAggregator(SiteConfig(site, tuple(members), deadline_s=site_deadline_s), up, down)
            fleet.sites[site].start()
            stack.callback(fleet.sites[site].close)
        home = {m: s for s, members in (sites or {}).items() for m in members}
        for client in GATEWAYS:
            transport = connected(stack, client, homes[home.get(client)], presence=True)
            Participant(transport, data[client]).start()
            transport.connect()
            fleet.gateways[client] = transport
        yield fleet


def test_sites_give_the_flat_fleets_model_over_mosquitto(tmp_path: Path) -> None:
    algorithms = [
        FedSCSXGB(protocol="histogram", n_rounds=2, max_depth=3, n_bins=16),  # secure aggregation
        FedForest(n_trees=3, max_depth=3, n_bins=16, secure_aggregation=False),
    ]  # plain sums
    models, upstream = {}, {}
    for sites in (None, SITES):
        with mqtt_fleet(tmp_path, sites) as fleet:
            for algorithm in algorithms:
                before = fleet.cloud.stats.received_bytes
                model, job = fleet.train(algorithm)
                models[(sites is None, algorithm.name)] = model
                upstream[(sites is None, algorithm.name)] = (fleet.cloud.stats.received_bytes - before, job.rounds)
                assert not job.rejected and all(len(r.replies) == 6 and not r.duplicates for r in job.results)
            assert fleet.engine.late_replies == 0
            if sites:
                assert all(s.stats.sums_sent > 0 and s.stats.silent == 0 for s in fleet.sites.values())
    for algorithm in algorithms:
        assert_same_ensemble(models[(False, algorithm.name)], models[(True, algorithm.name)])
        (flat_bytes, rounds), (site_bytes, _) = upstream[(True, algorithm.name)], upstream[(False, algorithm.name)]
        assert site_bytes < flat_bytes
        print(
            f"\n{algorithm.name}: bytes into the cloud per round, flat {flat_bytes / rounds:.0f}, "
            f"2 sites of 3 {site_bytes / rounds:.0f} ({rounds} rounds)"
        )


def test_a_gateway_that_times_out_at_its_site_is_dropped_as_in_the_flat_fleet(tmp_path: Path) -> None:
    """gw-2 disconnects after the first boosting round. Its site names it silent after 1 s -- the
    cloud closes those rounds then, with gw-2's ``site_timeout``, instead of at its own 30 s --
    and the secure-aggregation model equals the flat fleet's, where gw-2 vanishes at the same
    step and times out at the cloud (1.5 s deadline there)."""
    algorithm = FedSCSXGB(protocol="histogram", n_rounds=3, max_depth=2, n_bins=8)
    models, jobs = {}, {}
    for sites, deadline in ((None, 1.5), (SITES, 30.0)):
        with mqtt_fleet(tmp_path / ("sites" if sites else "flat"), sites, site_deadline_s=1.0) as fleet:

            def drop_gw2(progress, fleet=fleet) -> None:
                if progress.step == 1:
                    fleet.gateways["gw-2"].close()

            models[sites is None], jobs[sites is None] = fleet.train(
                algorithm, deadline_s=deadline, min_fraction=0.5, progress=drop_gw2
            )
    assert_same_ensemble(models[False], models[True])
    flat_missing = [r for r in jobs[True].results if "gw-2" in r.timed_out]
    site_missing = [r for r in jobs[False].results if "gw-2" in r.errors]
    assert flat_missing and len(site_missing) == len(flat_missing)
    assert all(r.errors["gw-2"].code == "site_timeout" and r.elapsed_s < 10 for r in site_missing)


def test_a_site_killed_mid_job_ends_it_with_the_usual_quorum_error(tmp_path: Path) -> None:
    """Both sites run as ``wheelfed site-aggregator``; site-b is SIGKILLed after the
    job's first step. Its members' presence upstream stays as it was, and the cloud's next round
    times out for them: the flat fleet's error when three gateways vanish, one line naming each."""
    with mqtt_fleet(tmp_path, SITES, in_process_sites=False) as fleet, ExitStack() as stack:
        processes = {}
        for site, members in SITES.items():
            env = dict(
                os.environ, **{UPSTREAM_PASSWORD_ENV: password(site), DOWNSTREAM_PASSWORD_ENV: password(AGGREGATOR_ID)}
            )
            processes[site] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "edge_client.cli",
                    "site-aggregator",
                    "--site-id",
                    site,
                    "--members",
                    ",".join(members),
                    "--upstream-port",
                    str(fleet.cloud_port),
                    "--downstream-port",
                    str(fleet.clinic_ports[site]),
                    "--deadline-s",
                    "2",
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                preexec_fn=die_with_parent(),
            )
            stack.callback(processes[site].kill)
        line = processes["site-b"].stdout.readline()
        assert line.startswith("site site-b: answering for gw-4, gw-5, gw-6"), line

        def kill_site_b(progress) -> None:
            if processes["site-b"].poll() is None:
                processes["site-b"].send_signal(signal.SIGKILL)
                processes["site-b"].wait()

        started = time.monotonic()
        with pytest.raises((QuorumNotReached, TrainingError)) as caught:  # TrainingFailed when it kept a checkpoint
            fleet.train(FedForest(n_trees=2, max_depth=3, n_bins=8), deadline_s=3.0, progress=kill_site_b)
    text = str(caught.value)
    assert isinstance(caught.value, QuorumNotReached) or isinstance(caught.value.__cause__, QuorumNotReached)
    assert "\n" not in text and "3 of 6 clients answered, quorum is 6" in text, text
    assert all(f"{g}: no answer within" in text for g in GATEWAYS[3:]), text
    assert time.monotonic() - started < 30
