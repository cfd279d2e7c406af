"""``aggregator.simulate``: run an algorithm's real server and client halves in one process.

Clients talk to the server through the in-memory broker with the real codec, size limits,
chunking and round engine -- only the network is missing -- so a simulation is the MQTT run's
oracle: the same data and seed give the same model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from edge_client.participant import Participant
from edge_client.training_data import ClientData
from shared.protocol.limits import DEFAULT_MAX_PAYLOAD
from shared.protocol.topics import AGGREGATOR_ID
from shared.transport.memory import MemoryBroker, MemoryTransport

from .audit import AuditTrail, Received
from .jobs import FederatedJob, JobSettings, StepProgress
from .rounds import RoundEngine

__all__ = ["Algorithm", "Simulation", "as_client_data", "simulate"]


class Algorithm(Protocol):
    """An algorithm's configuration (``aggregator.algorithms``): its name and ``fit`` over a job."""

    @property
    def name(self) -> str: ...

    def fit(self, job: FederatedJob, *, seed: int = 0) -> Any: ...


def as_client_data(clients: Sequence[Any]) -> list[ClientData]:
    """``ClientData`` (or any ``TrainingData`` with a ``client_id``) as given; ``(X, y)`` pairs
    become ``client-000``, ``client-001``, ..."""
    out = []
    for i, client in enumerate(clients):
        if isinstance(client, ClientData) or (hasattr(client, "client_id") and hasattr(client, "labelled")):
            out.append(client)
        elif isinstance(client, (tuple, list)) and len(client) == 2:
            out.append(ClientData(f"client-{i:03d}", client[0], client[1]))
        else:
            raise TypeError(f"clients[{i}] must be an (X, y) pair or a ClientData, got {type(client).__name__}")
    ids = [c.client_id for c in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"client ids must be unique, got {ids}")
    return out


class Simulation:
    """A memory broker, one ``Participant`` per client and a round engine for the server.

    Keep one to run several jobs over the same fleet (e.g. training then retraining), or to
    drop and reconnect clients between rounds (``transports[client_id].drop()``).
    ``record_bodies=True`` keeps every body the server receives, for :meth:`server_view`.
    ``reply_cache_bytes`` caps each simulated gateway's cache of its replies (a gateway's own
    default is 64 MiB; in one process the caches of all the gateways add up; the latest reply
    is always kept, so the open round's request is still answered from it).
    """

    def __init__(
        self,
        clients: Sequence[Any],
        *,
        max_payload: int | None = None,
        record_bodies: bool = False,
        reply_cache_bytes: int | None = None,
    ) -> None:
        self.clients = as_client_data(clients)
        self.broker = MemoryBroker()
        payload = DEFAULT_MAX_PAYLOAD if max_payload is None else max_payload
        self.server = MemoryTransport(self.broker, AGGREGATOR_ID, max_payload=payload, presence=False)
        # record_bodies=True keeps every body the server received, for server_view() (the privacy
        # tests); otherwise only sizes are kept (a job's bodies can be gigabytes)
        self.engine = RoundEngine(self.server, audit=AuditTrail(keep_bodies=record_bodies))
        self.transports: dict[str, MemoryTransport] = {}
        self.participants: dict[str, Participant] = {}
        for client in self.clients:
            transport = MemoryTransport(self.broker, client.client_id, max_payload=payload)
            participant = Participant(transport, client)
            if reply_cache_bytes is not None:
                participant.dispatcher.remember_bytes = reply_cache_bytes
            participant.start()
            self.transports[client.client_id] = transport
            self.participants[client.client_id] = participant

    def run(
        self,
        algorithm: Algorithm,
        *,
        seed: int = 0,
        job_id: str | None = None,
        settings: JobSettings | None = None,
        progress: Callable[[StepProgress], None] | None = None,
    ) -> Any:
        job = FederatedJob(
            self.engine,
            list(self.transports),
            job_id=job_id or f"sim-{algorithm.name}-{seed}",
            settings=settings or JobSettings(deadline_s=30.0),
            progress=progress,
        )
        return algorithm.fit(job, seed=seed)

    def server_view(self) -> dict[str, list[Received]]:
        """Every message the server received, per client, in order, with its decoded body: all
        that the aggregator learns (the privacy tests read this, never internals). Needs
        ``Simulation(..., record_bodies=True)``."""
        if not self.engine.audit.keep_bodies:
            raise RuntimeError("this simulation keeps no bodies: make it with Simulation(..., record_bodies=True)")
        return self.engine.audit.view()

    def client_bytes(self) -> int:
        """Bytes all clients have sent so far (replies and presence), as encoded on the wire."""
        return sum(t.stats.sent_bytes for t in self.transports.values())


def simulate(
    algorithm: Algorithm,
    clients: Sequence[Any],
    *,
    seed: int = 0,
    progress: Callable[[StepProgress], None] | None = None,
    settings: JobSettings | None = None,
) -> Any:
    """Train ``algorithm`` (e.g. ``aggregator.algorithms.FedSCSXGB(...)``) on ``clients`` — a list
    of ``(X, y)`` pairs or ``ClientData`` — over the in-memory transport; returns the model.

    An algorithm whose clients are not ``(X, y)`` pairs brings its own ``simulate`` (the
    vertical Federated Forest: ``(X_block, y)`` parties, ``y`` None but for one), used as is."""
    own = getattr(algorithm, "simulate", None)
    if own is not None:
        return own(clients, seed=seed, progress=progress, settings=settings)
    return Simulation(clients).run(algorithm, seed=seed, progress=progress, settings=settings)
