"""An in-process fleet for the server's API and schedule tests: ``aggregator.simulate``'s memory
broker with real ``Participant``s, and a started :class:`aggregator.server.app.Server` on it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from aggregator.server.app import Server
from aggregator.server.config import LOOPBACK_HOSTS, ServerConfig
from aggregator.simulate import Simulation
from edge_client.training_data import ClientData
from shared.protocol.envelope import Message
from shared.protocol.messages import Status

LABELS = np.array(["push", "rest"])


def fleet_data(n_clients: int = 4, n: int = 120, seed: int = 0, flipped: tuple[str, ...] = ()) -> list[ClientData]:
    """Labelled windows with held-out ones, labelled by two features (a one-split model gets
    about 3 in 4 right); ``flipped`` gateways label by the other two."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_clients):
        client = f"gw-{k + 1}"
        X = rng.normal(size=(n, 4))
        a, b = (1, 3) if client in flipped else (0, 2)
        y = LABELS[(X[:, a] + 0.8 * X[:, b] > 0).astype(int)]
        cut = int(0.75 * n)
        out.append(ClientData(client, X[:cut], y[:cut], X_test=X[cut:], y_test=y[cut:]))
    return out


def announce(sim: Simulation, labelled: dict[str, int]) -> None:
    """Each gateway's retained status, as a gateway publishes it, with its labelled windows."""
    for client, n in labelled.items():
        transport = sim.transports[client]
        labels = f"push={n // 2},rest={n - n // 2}"
        status = Status(online=True, n_windows=n + 5, n_labelled=n, detail={"labels": labels})
        transport.publish(transport.layout.status(client), Message.create(status, sender=client), retain=True)


@contextmanager
def running_server(registry: str, clients: list[ClientData], **settings) -> Iterator[tuple[Simulation, Server]]:
    """A started server on ``clients``' memory fleet; ``settings`` are ``ServerConfig``'s. The API
    also answers Starlette's test client, whose requests name the host ``testserver``; the
    memory gateways announce windows they never recorded in real time (``announce``), so
    their counts are credited at up to a million windows per second unless a test says less."""
    settings.setdefault("allowed_hosts", (*LOOPBACK_HOSTS, "testserver"))
    settings.setdefault("max_windows_per_s", 1e6)
    sim = Simulation(clients)
    server = Server(ServerConfig(registry=registry, deadline_s=10.0, schedule_tick_s=3600.0, **settings))
    server.start(transport=sim.server)
    try:
        yield sim, server
    finally:
        server.stop()
        for transport in sim.transports.values():
            transport.close()


def wait_job(server: Server, job_id: str, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = server.registry.job(job_id)
        if job.state in ("completed", "failed", "cancelled"):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} still {job.state} after {timeout_s} s")
