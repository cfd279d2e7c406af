"""Training on a real fleet: the aggregator's MQTT connection, gateway discovery, one job.

``train_on_fleet`` is what ``wheelfed train`` runs: find the online gateways (their retained
presence), or check that the named ones are online; ask them which feature sets they hold
(``aggregator.feature_sets``) and run an algorithm's server half on those that hold the chosen
one through a ``FederatedJob`` -- the very code ``aggregator.simulate`` runs over the memory
broker.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from shared.protocol.messages import Status
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.transport.base import Transport

from .broker.mosquitto import die_with_parent
from .feature_sets import FeatureSetChoice, survey_feature_sets
from .jobs import FederatedJob, JobSettings, StepProgress, TrainingError, TrainingFailed, new_job_id
from .rounds import QuorumNotReached, RoundEngine
from .simulate import Algorithm

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    class FleetAlgorithm(Algorithm, DataclassInstance, Protocol):
        """An algorithm configuration (a dataclass) that names the feature set it trains on
        (``""``: the one most gateways store); :func:`train_on_fleet` fills it in."""

        @property
        def feature_set_version(self) -> str: ...


log = logging.getLogger(__name__)

__all__ = ["GatewayProcesses", "PASSWORD_ENV", "Presence", "discover_gateways", "online_gateways", "train_on_fleet"]

PASSWORD_ENV = "WHEELFED_MQTT_PASSWORD"


class GatewayProcesses:
    """``wheelfed gateway`` processes, started, killed and stopped like a supervisor would
    (the demo and the end-to-end tests). Each gets its password in ``$WHEELFED_MQTT_PASSWORD``,
    its log in ``log_dir/ID.log`` and, unless ``extra_args`` says otherwise, ``log_dir/ID.db``."""

    def __init__(self, port: int, protocol: int, passwords: dict[str, str], log_dir: Path) -> None:
        self.port, self.protocol, self.passwords, self.log_dir = port, protocol, passwords, log_dir
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, client_id: str, *extra_args: str) -> None:
        log_file = open(self.log_dir / f"{client_id}.log", "ab")
        env = dict(os.environ, **{PASSWORD_ENV: self.passwords[client_id]})
        store = [] if "--store" in extra_args else ["--store", str(self.log_dir / f"{client_id}.db")]
        self.processes[client_id] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "edge_client.cli",
                "gateway",
                "--client-id",
                client_id,
                "--port",
                str(self.port),
                "--protocol",
                str(self.protocol),
                *store,
                "--stats-every",
                "0",
                *extra_args,
            ],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        log_file.close()

    def kill(self, client_id: str) -> None:
        proc = self.processes.pop(client_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.processes.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.processes.clear()


class Presence:
    """The fleet's retained presence as seen by one transport; ``wait`` blocks until clients
    are online (or offline)."""

    def __init__(self, transport: Transport, layout: TopicLayout) -> None:
        self.online: dict[str, bool] = {}
        self._changed = threading.Condition()
        self._transport, self._filter = transport, layout.all_statuses
        transport.subscribe(self._filter, self._on_status)

    def close(self) -> None:
        """Stop listening (a connection that outlives this presence keeps no handler of it)."""
        self._transport.unsubscribe(self._filter, self._on_status)

    def _on_status(self, _topic: str, message) -> None:
        if isinstance(message.body, Status):
            with self._changed:
                self.online[message.sender] = message.body.online
                self._changed.notify_all()

    def online_clients(self) -> list[str]:
        with self._changed:
            return sorted(c for c, up in self.online.items() if up and c != AGGREGATOR_ID)

    def missing(self, clients: Sequence[str], timeout_s: float) -> list[str]:
        """Those of ``clients`` not online after waiting up to ``timeout_s`` for all of them
        (returns as soon as all are: retained presence arrives right after subscribing)."""
        with self._changed:
            self._changed.wait_for(lambda: all(self.online.get(c) for c in clients), timeout_s)
            return [c for c in clients if not self.online.get(c)]

    def wait(self, clients: list[str], online: bool, timeout_s: float = 30.0) -> None:
        with self._changed:
            ok = self._changed.wait_for(lambda: all(self.online.get(c) is online for c in clients), timeout_s)
        if not ok:
            state = {c: self.online.get(c) for c in clients}
            raise TimeoutError(f"gateways did not become {'online' if online else 'offline'} in {timeout_s}s: {state}")


def discover_gateways(transport: Transport, *, wait_s: float = 2.0, layout: TopicLayout | None = None) -> list[str]:
    """The clients whose retained presence says online, collected for ``wait_s`` seconds."""
    presence = Presence(transport, layout or TopicLayout())
    time.sleep(wait_s)
    return presence.online_clients()


def online_gateways(presence: Presence, clients: Sequence[str] | None, wait_s: float) -> list[str]:
    """``clients`` once their presence says online, or every gateway online after ``wait_s``.

    A named gateway that is not online fails at once -- ``TrainingError`` naming it and the ones
    that are -- rather than after a round deadline."""
    if not clients:
        time.sleep(wait_s)
        online = presence.online_clients()
        if not online:
            raise TrainingError(
                f"no gateway is online (waited {wait_s} s for presence); start gateways or name them with --clients"
            )
        return online
    missing = presence.missing(clients, wait_s)
    if missing:
        online = presence.online_clients()
        seen = f"online: {', '.join(online)}" if online else "no gateway is online"
        raise TrainingError(f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not online ({seen})")
    return list(clients)


def train_on_fleet(
    algorithm: FleetAlgorithm,
    transport: Transport,
    *,
    clients: Sequence[str] | None = None,
    seed: int = 0,
    job_id: str | None = None,
    settings: JobSettings | None = None,
    progress: Callable[[StepProgress], None] | None = None,
    discover_s: float = 2.0,
    stop: threading.Event | None = None,
    on_feature_set: Callable[[FeatureSetChoice], None] | None = None,
    engine: RoundEngine | None = None,
) -> tuple[Any, FederatedJob]:
    """Run ``algorithm`` (a configuration with a ``feature_set_version`` field) on the gateways
    reachable through the aggregator's connected ``transport``; returns (model, job).

    The gateways are ``clients`` (each must be online within ``discover_s``) or every one online.
    The feature set is surveyed (``aggregator.feature_sets``): the algorithm's, or the majority's
    when it names none; the job runs on the gateways holding it, and ``on_feature_set`` hears
    the choice (who is left out and why) before the first round. Setting ``stop`` ends the job
    at the next round boundary with the model grown so far (``job.stopped`` says where).
    A process that trains job after job on one connection passes its one ``engine`` (a new
    engine per job would leave its handlers on the connection).
    """
    settings = settings or JobSettings()
    engine = engine or RoundEngine(transport)
    presence = Presence(transport, engine.layout)
    try:
        selected = online_gateways(presence, clients, discover_s)
    finally:
        presence.close()
    job_id = job_id or new_job_id()
    choice = survey_feature_sets(
        engine, job_id, selected, algorithm.feature_set_version, deadline_s=settings.deadline_s, algorithm=algorithm
    )
    log.info(
        "training on fleet",
        extra={
            "algorithm": algorithm.name,
            "clients": list(choice.clients),
            "feature_set": choice.version,
            "left_out": choice.left_out,
        },
    )
    if on_feature_set is not None:
        on_feature_set(choice)
    if choice.version != algorithm.feature_set_version:
        algorithm = dataclasses.replace(algorithm, feature_set_version=choice.version)
    job = FederatedJob(engine, choice.clients, job_id=job_id, settings=settings, progress=progress, stop=stop)
    try:
        return algorithm.fit(job, seed=seed), job
    except (TrainingError, QuorumNotReached) as exc:
        if job.checkpoint is None or isinstance(exc, TrainingFailed):
            raise
        raise TrainingFailed(str(exc), job.checkpoint) from exc
