"""``wheelfed gateway``: the gateway's one long-running process.

serial link -> frame decoder -> streaming pipeline -> features -> labelled window store, plus
(with a broker configured) the federated participant answering the aggregator's requests.
Everything runs without a network: the store fills from the sensors whether or not the broker
is reachable, and the MQTT client keeps reconnecting in the background.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from firmware_bridge.serial_link import SerialReader
from shared import __version__
from shared.protocol.envelope import Message
from shared.protocol.messages import Describe, Hello, Ping, Pong
from shared.transport.mqtt import MqttConfig, MqttTransport

from .participant import Participant
from .pipeline import PipelineConfig
from .processing import FrameProcessor
from .store import RetentionPolicy, WindowStore
from .training_data import StoreTrainingData

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GatewayConfig:
    client_id: str
    store_path: Path
    serial_port: str | None = None  # a device, a pty path or a pyserial URL; None: no sensors
    baudrate: int = 115200
    mqtt: MqttConfig | None = None  # None: an offline gateway (collects, does not federate)
    session_id: str | None = None  # default: client id + start time
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    holdout_fraction: float = 0.0  # the tail of each session's labelled windows kept for evaluation


def _pong(request: Message) -> Pong:
    body: Ping = request.body
    if body.delay_s > 0:  # lets tests and the smoke run simulate slow computation
        threading.Event().wait(min(body.delay_s, 60.0))
    return Pong(body.payload)


class Gateway:
    """Owns the serial reader, the processing chain, the store and the transport.

    ``run()`` blocks until ``stop()`` (or a signal after ``install_signal_handlers``).
    """

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.session_id = config.session_id or f"{config.client_id}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
        self.store = WindowStore(config.store_path, retention=config.retention)
        self.processor = FrameProcessor(self.store, self.session_id, config=config.pipeline)
        self.serial = (SerialReader(config.serial_port, config.baudrate, on_frame=self.processor.on_frame)
                       if config.serial_port else None)
        self.transport: MqttTransport | None = None
        if config.mqtt is not None:
            self.transport = MqttTransport(config.client_id, config.mqtt)
            training = StoreTrainingData(self.store, tuple(self.processor.feature_names),
                                         holdout_fraction=config.holdout_fraction)
            self.participant = Participant(self.transport, training)
            self.participant.dispatcher.register(Ping, _pong)
            self.participant.dispatcher.register(Describe, lambda _m: self.hello())
        self._stop = threading.Event()
        self.final_stats: dict[str, object] = {}

    def hello(self) -> Hello:
        return Hello(software_version=__version__, feature_set_version=self.processor.feature_set_version,
                     n_features=len(self.processor.feature_names),
                     capabilities=self.participant.capabilities if self.transport is not None else ())

    def stats(self) -> dict[str, object]:
        """One line's worth of health: link, pipeline, store, broker."""
        out: dict[str, object] = {"session": self.session_id}
        if self.serial is not None:
            s = self.serial.stats
            out.update(link="up" if s.connected else "down", frames=s.link.frames_ok, crc_errors=s.link.crc_errors,
                       lost_samples=s.link.lost_samples, dropped=s.dropped)
        p = self.processor.stats
        out.update(windows=p.windows, unknown_frames=p.unknown_sensor_frames)
        st = self.store.stats()
        out.update(stored=st.windows, labelled=st.labelled)
        if self.transport is not None:
            out["broker"] = "connected" if self.transport.is_connected else "offline"
        return out

    def run(self, *, stats_every_s: float = 0.0, on_stats=None) -> None:
        """Serve until stopped; ``on_stats(dict)`` is called every ``stats_every_s`` seconds."""
        if self.transport is not None:
            self.participant.start()
            self.transport.connect(wait=False)
        if self.serial is not None:
            self.serial.start()
        log.info("gateway running", extra={"client": self.config.client_id, "session": self.session_id})
        try:
            while not self._stop.wait(stats_every_s or None):
                if on_stats is not None:
                    on_stats(self.stats())
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Stop reading, finish the windows the data allows, close store and broker connection."""
        if self.serial is not None:
            self.serial.stop()
        self.processor.finish()
        self.final_stats = self.stats()
        if self.transport is not None:
            self.transport.close()
        self.store.close()
        log.info("gateway stopped", extra={"client": self.config.client_id})

    def stop(self) -> None:
        self._stop.set()

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())
