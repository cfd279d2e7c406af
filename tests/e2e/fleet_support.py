"""A fleet of real ``wheelfed gateway`` processes behind mosquitto, each with its own prefilled
labelled window store, for the end-to-end training tests (fixture ``fleet`` in conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import pytest

from aggregator.broker import BrokerUser, MosquittoBroker, mosquitto_available
from aggregator.fleet import GatewayProcesses, Presence
from edge_client.store import WindowRecord, WindowStore
from edge_client.training_data import ClientData, StoreTrainingData
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport
from tests.e2e.mqtt_fault_proxy import Faults, MqttFaultProxy

FEATURE_SET = "e2e-fs-1"
GATEWAYS = [f"gw-{i}" for i in range(1, 5)]
PASSWORDS = {"aggregator": "agg-pw", **{g: f"pw-{g}" for g in GATEWAYS}}
LABELS = np.array(["sit", "push", "lie"])


def fill_store(path: Path, seed: int, n: int = 160, d: int = 8) -> None:
    """Windows with features and annotations, as a gateway's pipeline would have stored them."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + 0.2 * seed
    X[rng.random(X.shape) < 0.03] = np.nan
    y = np.digitize(np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) + rng.normal(scale=0.4, size=n), [-0.5, 0.8])
    with WindowStore(path) as store:
        for i in range(n):
            start = i * 1_000_000
            store.add(WindowRecord("s1", start, start + 1_000_000, X[i], FEATURE_SET))
            store.label_range("s1", start, start + 1_000_000, str(LABELS[y[i]]))
        store.add(WindowRecord("s1", n * 1_000_000, (n + 1) * 1_000_000, X[0], FEATURE_SET))  # unlabelled


def client_data(stores: dict[str, Path], holdout_fraction: float = 0.0) -> list[ClientData]:
    """What each gateway trains on (and holds out), read the way the gateway reads it."""
    out = []
    for client, path in stores.items():
        with WindowStore(path) as store:
            source = StoreTrainingData(store, holdout_fraction=holdout_fraction)
            data = source.labelled(FEATURE_SET)
            test = source.holdout(FEATURE_SET) if holdout_fraction else None
        out.append(
            ClientData(
                client, data.X, data.y, X_test=None if test is None else test.X, y_test=None if test is None else test.y
            )
        )
    return out


class FleetBroker(Protocol):
    """A running broker with the users of ``PASSWORDS``, for ``start_fleet(broker=...)``
    (``tests/brokers``: RabbitMQ, one node or a cluster): the MQTT port each client connects to
    and the MQTT version every client speaks (5, or 4 = 3.1.1)."""

    protocol: int

    def port_for(self, client_id: str) -> int: ...


@dataclass(frozen=True)
class Listener:
    """One port for every client: a mosquitto's, or that of a proxy in front of it
    (``tests/e2e/mqtt_fault_proxy.py``)."""

    port: int
    protocol: int = 5

    def port_for(self, client_id: str) -> int:
        return self.port


class _GatewaysOnNodes(GatewayProcesses):
    """Gateway processes, each connected to the port its broker names (a cluster's nodes)."""

    def __init__(self, broker: FleetBroker, log_dir: Path) -> None:
        super().__init__(broker.port_for(GATEWAYS[0]), broker.protocol, PASSWORDS, log_dir)
        self.broker = broker

    def start(self, client_id: str, *extra_args: str) -> None:
        self.port = self.broker.port_for(client_id)
        super().start(client_id, *extra_args)


@dataclass
class Fleet:
    agg: MqttTransport
    processes: GatewayProcesses
    presence: Presence
    stores: dict[str, Path]
    port: int
    gateway_args: tuple[str, ...] = ()

    def restart(self, gateway: str) -> None:
        self.processes.start(gateway, "--store", str(self.stores[gateway]), *self.gateway_args)
        self.presence.wait([gateway], online=True, timeout_s=60)


@dataclass
class GatewaysOnMosquitto:
    """A running mosquitto, gateway processes to start on it, the aggregator's connection and its
    view of who is online (``gateways_on_mosquitto``)."""

    port: int
    processes: GatewayProcesses
    agg: MqttTransport
    presence: Presence


@contextmanager
def gateways_on_mosquitto(tmp_path: Path, passwords: dict[str, str]) -> Iterator[GatewaysOnMosquitto]:
    """Mosquitto with the users of ``passwords`` (``"aggregator"`` among them) and the aggregator
    connected; the test starts its gateways. Gateways and connection are stopped at the end."""
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed: the test command installs it")
    with MosquittoBroker(tmp_path / "broker", users=[BrokerUser(n, p) for n, p in passwords.items()]) as broker:
        processes = GatewayProcesses(broker.port, 5, passwords, tmp_path)
        agg = MqttTransport(
            AGGREGATOR_ID,
            MqttConfig(port=broker.port, username="aggregator", password=passwords["aggregator"]),
            presence=False,
        )
        agg.connect()
        try:
            yield GatewaysOnMosquitto(broker.port, processes, agg, Presence(agg, TopicLayout()))
        finally:
            processes.stop_all()
            agg.close()


def fleet_mosquitto(run_dir: Path, extra_passwords: dict[str, str] | None = None) -> MosquittoBroker:
    """A mosquitto (not started) with the users of ``PASSWORDS`` and ``extra_passwords``."""
    users = {**PASSWORDS, **(extra_passwords or {})}
    return MosquittoBroker(run_dir, users=[BrokerUser(n, p) for n, p in users.items()])


@contextmanager
def start_fleet(tmp_path: Path, *gateway_args: str, broker: FleetBroker | None = None) -> Iterator[Fleet]:
    """Mosquitto (or the running ``broker``), an aggregator connection and one gateway process
    per store, all online."""
    if broker is None and not mosquitto_available():
        pytest.fail("mosquitto is not installed: the test command installs it")
    stores = {g: tmp_path / f"{g}.db" for g in GATEWAYS}
    for i, (g, path) in enumerate(stores.items()):
        fill_store(path, i)
    with ExitStack() as stack:
        if broker is None:
            broker = Listener(stack.enter_context(fleet_mosquitto(tmp_path / "broker")).port)
        processes = _GatewaysOnNodes(broker, tmp_path)
        port = broker.port_for(AGGREGATOR_ID)
        agg = MqttTransport(
            AGGREGATOR_ID,
            MqttConfig(port=port, username="aggregator", password=PASSWORDS["aggregator"], protocol=broker.protocol),
            presence=False,
        )
        agg.connect()
        presence = Presence(agg, TopicLayout())
        try:
            for g in GATEWAYS:
                processes.start(g, "--store", str(stores[g]), *gateway_args)
            presence.wait(GATEWAYS, online=True, timeout_s=60)
            yield Fleet(agg, processes, presence, stores, port, tuple(gateway_args))
        finally:
            processes.stop_all()
            agg.close()


@contextmanager
def start_fleet_behind_proxy(
    tmp_path: Path, faults: Faults = Faults(), *gateway_args: str
) -> Iterator[tuple[Fleet, MqttFaultProxy]]:
    """``start_fleet`` with the aggregator and every gateway connected through an
    ``MqttFaultProxy`` applying ``faults`` (none by default: then only its ``tap`` acts)."""
    with fleet_mosquitto(tmp_path / "broker") as mosquitto, MqttFaultProxy(mosquitto.port, faults) as proxy:
        with start_fleet(tmp_path, *gateway_args, broker=Listener(proxy.port)) as fleet:
            yield fleet, proxy
