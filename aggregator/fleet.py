"""Training on a real fleet: the aggregator's MQTT connection, gateway discovery, one job.

``train_on_fleet`` is what ``wheelfed train`` runs: connect as the aggregator, find the online
gateways (their retained presence) unless a list is given, and run an algorithm's server half
through a ``FederatedJob`` -- the very code ``aggregator.simulate`` runs over the memory broker.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import Any

from shared.protocol.messages import Status
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.transport.base import Transport

from .broker.mosquitto import die_with_parent
from .jobs import FederatedJob, JobSettings, RoundProgress, TrainingError
from .rounds import RoundEngine
from .simulate import Algorithm

log = logging.getLogger(__name__)

__all__ = ["GatewayProcesses", "PASSWORD_ENV", "Presence", "discover_gateways", "train_on_fleet"]

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
            [sys.executable, "-m", "edge_client.cli", "gateway", "--client-id", client_id, "--port", str(self.port),
             "--protocol", str(self.protocol), *store, "--stats-every", "0", *extra_args],
            env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent(),
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
        transport.subscribe(layout.all_statuses, self._on_status)

    def _on_status(self, _topic: str, message) -> None:
        if isinstance(message.body, Status):
            with self._changed:
                self.online[message.sender] = message.body.online
                self._changed.notify_all()

    def online_clients(self) -> list[str]:
        with self._changed:
            return sorted(c for c, up in self.online.items() if up and c != AGGREGATOR_ID)

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


def train_on_fleet(
    algorithm: Algorithm,
    transport: Transport,
    *,
    clients: Sequence[str] | None = None,
    seed: int = 0,
    job_id: str | None = None,
    settings: JobSettings | None = None,
    progress: Callable[[RoundProgress], None] | None = None,
    discover_s: float = 2.0,
) -> tuple[Any, FederatedJob]:
    """Run ``algorithm`` on the gateways reachable through the aggregator's connected
    ``transport`` (``clients``, or every gateway online); returns (model, job)."""
    engine = RoundEngine(transport)
    selected = list(clients) if clients else discover_gateways(transport, wait_s=discover_s)
    if not selected:
        raise TrainingError(f"no gateway is online (waited {discover_s} s for presence); start gateways or "
                            "name them with --clients")
    log.info("training on fleet", extra={"algorithm": algorithm.name, "clients": selected})
    job = FederatedJob(engine, selected, job_id=job_id, settings=settings, progress=progress)
    return algorithm.fit(job, seed=seed), job
