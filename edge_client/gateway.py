"""``wheelfed gateway``: the gateway's one long-running process.

Today it is the federated participant: it connects to the broker with a persistent session,
announces its presence, and answers the aggregator's requests through the dispatcher. The
edge-pipeline issue adds the serial path and window store to this same process.
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass, field

from shared import __version__
from shared.protocol.envelope import Message
from shared.protocol.messages import Describe, Hello, Ping, Pong
from shared.transport.mqtt import MqttConfig, MqttTransport

from .dispatcher import Dispatcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GatewayConfig:
    client_id: str
    mqtt: MqttConfig = field(default_factory=MqttConfig)
    feature_set_version: str = ""


def _pong(request: Message) -> Pong:
    body: Ping = request.body
    if body.delay_s > 0:  # lets tests and the smoke run simulate slow computation
        threading.Event().wait(min(body.delay_s, 60.0))
    return Pong(body.payload)


class Gateway:
    """Owns the transport and dispatcher; ``run()`` blocks until ``stop()`` or a signal."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.transport = MqttTransport(config.client_id, config.mqtt)
        self.dispatcher = Dispatcher(self.transport)
        self.dispatcher.register(Ping, _pong)
        self.dispatcher.register(Describe, lambda _m: self.hello())
        self._stop = threading.Event()

    def hello(self) -> Hello:
        return Hello(software_version=__version__, feature_set_version=self.config.feature_set_version,
                     capabilities=("ping",))

    def run(self, *, connect_timeout_s: float | None = None) -> None:
        """Serve until stopped. Without a timeout the gateway also starts while the broker is down."""
        self.dispatcher.start()
        self.transport.connect(wait=connect_timeout_s is not None, timeout_s=connect_timeout_s or 0)
        log.info("gateway running", extra={"client": self.config.client_id})
        try:
            self._stop.wait()
        finally:
            self.transport.close()
            log.info("gateway stopped", extra={"client": self.config.client_id})

    def stop(self) -> None:
        self._stop.set()

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())
