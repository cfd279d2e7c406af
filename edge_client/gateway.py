"""``wheelfed gateway``: the gateway's one long-running process.

serial link -> frame decoder -> streaming pipeline -> features -> labelled window store ->
live recognition with the active model (stored predictions, local alerts), plus (with a broker
configured) the federated participant answering the aggregator's requests, installing pushed
models, and publishing predictions, alerts and its status.
Everything runs without a network: the store fills from the sensors, the stored model is loaded
at start and keeps predicting and alerting whether or not the broker is reachable, and the MQTT
client keeps reconnecting in the background.

What it will not start with (``GatewayError``, one line for the operator): a store that is not a
window store or is written by another gateway, a trust key that is not a key, a model directory
it cannot write, a serial port another process holds or it may not open. A serial device that
is missing or vanishes is not fatal: it is reported (``link=gone``) and reopened when it comes
back, and ``processing.py`` decides whether what then speaks is still the same sensors.

What it survives at runtime: an exception in the serial reader's threads, the frame decoder,
the pipeline, a store write, the live predictor or the publishing tick is caught where it
happened, counted (``faults=`` in the stats line, one log line per kind) and the gateway goes
on. A reader thread that dies anyway (of a ``BaseException``) is restarted by the supervisor
thread with exponential backoff (``restarts=``; ``SupervisionConfig``).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from firmware_bridge.serial_link import Faults, SerialReader
from shared import __version__
from shared.protocol.envelope import Message
from shared.protocol.messages import Describe, Hello, Ping, Pong, Status
from shared.protocol.messages.deployment import ModelPush, ModelRollback, ModelStatus
from shared.signing import InvalidKey, load_verify_key
from shared.transport.mqtt import MqttConfig, MqttTransport
from shared.vertical_party_key import read_party_key

from .algorithms.vertical_forest import PartySetup, VerticalForestClient
from .alerts import DEFAULT_RULES, AlertEngine, AlertRule
from .engines import EnginePreference
from .live import LiveConfig, LivePredictor
from .models import ModelDirError, ModelManager, check_model_dir
from .participant import Participant
from .pipeline import PipelineConfig
from .processing import FrameProcessor
from .store import RetentionPolicy, StoreError, WindowStore
from .training_data import StoreTrainingData

log = logging.getLogger(__name__)

#: A status detail longer than this is cut (a store with hundreds of labels still fits a message).
MAX_DETAIL_CHARS = 2000

#: How long ``start`` waits for the serial port's first open attempt.
_FIRST_OPEN_S = 5.0
#: Serial states a gateway does not start in (waiting would not help), with what to do.
_REFUSED_PORTS = {
    "busy": "is in use by another process (another gateway or wheelfed record?): stop it first",
    "denied": "cannot be opened: permission denied (add the gateway's user to the dialout group)",
}


class GatewayError(Exception):
    """The gateway cannot start as configured; the message says why and what to change."""


@dataclass(frozen=True)
class SupervisionConfig:
    """How the supervisor restarts a dead serial reader thread.

    It checks every ``check_every_s``; a dead thread is restarted ``backoff_initial_s`` after it was
    noticed, and each further death doubles that wait up to ``backoff_max_s`` -- a fault that kills
    the thread with every frame then costs one restart and one log line a minute, not a hot loop.
    A thread that ran ``healthy_after_s`` since its last restart starts over at the initial wait.
    """

    check_every_s: float = 0.5
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    healthy_after_s: float = 60.0

    def __post_init__(self) -> None:
        if not (0 < self.check_every_s and 0 < self.backoff_initial_s <= self.backoff_max_s):
            raise ValueError("check_every_s > 0 and 0 < backoff_initial_s <= backoff_max_s")


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
    model_dir: Path | None = None  # default: beside the store, CLIENT_ID-models/
    trusted_keys: tuple[Path, ...] = ()  # the aggregator's public key file(s); none: pushes are refused
    party_key_file: Path | None = None  # vertical jobs' shared secret; None: $WHEELFED_PARTY_KEY_FILE
    engine: EnginePreference = "auto"
    alert_rules: tuple[AlertRule, ...] = DEFAULT_RULES
    live: LiveConfig = field(default_factory=LiveConfig)
    supervision: SupervisionConfig = field(default_factory=SupervisionConfig)


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
        try:
            keys = [load_verify_key(p) for p in config.trusted_keys]
        except (InvalidKey, OSError) as exc:
            raise GatewayError(f"--trust: {exc} (wheelfed keygen writes the aggregator's .pub file)") from None
        model_dir = config.model_dir or config.store_path.with_name(f"{config.client_id}-models")
        if config.party_key_file is not None:
            try:
                read_party_key(config.party_key_file)
            except ValueError as exc:
                raise GatewayError(f"--party-key-file: {exc}") from None
        try:
            check_model_dir(model_dir)  # before the store is created: a refusal leaves no file behind
            self.store = WindowStore(config.store_path, retention=config.retention, exclusive=True)
        except (ModelDirError, StoreError) as exc:
            raise GatewayError(str(exc)) from None
        self.models = ModelManager(
            model_dir,
            config.client_id,
            keys,
            feature_set_version=lambda: self.processor.feature_set_version or self.store.latest_feature_set_version(),
            engine=config.engine,
        )
        self.predictor = LivePredictor(self.models, self.store, AlertEngine(config.alert_rules), config.live)
        self.faults = Faults()  # everything caught at a thread boundary, shared by reader and processor
        self.restarts = 0  # reader threads restarted by the supervisor
        self.processor = FrameProcessor(
            self.store, self.session_id, config=config.pipeline, on_window=self.predictor.on_window, faults=self.faults
        )
        self.models.load()  # the stored model: recognition works before (and without) any broker
        self.serial = (
            SerialReader(
                config.serial_port, config.baudrate, on_received=self.processor.on_received, faults=self.faults
            )
            if config.serial_port
            else None
        )
        self.transport: MqttTransport | None = None
        if config.mqtt is not None:
            self.transport = MqttTransport(config.client_id, config.mqtt, online_status=self.status)
            training = StoreTrainingData(
                self.store, lambda: tuple(self.processor.feature_names), holdout_fraction=config.holdout_fraction
            )
            self.participant = Participant(self.transport, training)
            vertical = self.participant.halves.get(VerticalForestClient.capability)
            # deployed partial trees live beside the models, under the same keys
            if isinstance(vertical, VerticalForestClient):
                vertical.configure(
                    PartySetup(config.client_id, model_dir, tuple(keys), self.store, config.party_key_file)
                )
            dispatcher = self.participant.dispatcher
            dispatcher.register(Ping, _pong)
            dispatcher.register(Describe, lambda _m: self.hello())
            dispatcher.register(ModelPush, self._on_model_push)
            dispatcher.register(ModelRollback, self._on_rollback)
        self._stop = threading.Event()
        self._supervisor_stop = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._started = False
        self.final_stats: dict[str, object] = {}

    def _on_model_push(self, message: Message) -> ModelStatus:
        status = self.models.install(message.body.bundle)
        self._publish_status()
        return status

    def _on_rollback(self, message: Message) -> ModelStatus:
        status = self.models.rollback(message.body)
        self._publish_status()
        return status

    def status(self) -> Status:
        """The retained presence: online, active model, counts, last prediction."""
        installed = self.models.current
        st = self.store.stats()
        live = self.predictor.stats
        detail = {
            "engine": installed.engine.name if installed else "-",
            "predicted": str(live.predicted),
            "last_prediction": live.last_label or "-",
            "alerts": str(live.alerts),
        }
        if self.serial is not None:
            detail["link"] = self.link_state()
        # What an operator needs before training (wheelfed fleet): which labels the store holds
        # and which feature set it produces -- counts, as n_labelled already is (PRIVACY.md).
        detail["labels"] = ",".join(f"{label}={n}" for label, n in st.by_label.items())[:MAX_DETAIL_CHARS]
        detail["feature_set"] = self.processor.feature_set_version or self.store.latest_feature_set_version()
        if self.models.last_error:
            detail["model_error"] = self.models.last_error[:200]
        return Status(
            online=True,
            active_model=installed.label if installed else "",
            n_windows=st.windows,
            n_labelled=st.labelled,
            detail=detail,
        )

    def _publish_status(self) -> None:
        if self.transport is not None and self.transport.is_connected:
            try:
                self.transport.publish(
                    self.transport.layout.status(self.config.client_id),
                    Message.create(self.status(), sender=self.config.client_id),
                    retain=True,
                )
            except ConnectionError:
                pass  # republished on reconnect (online_status)

    def _publish_live(self) -> None:
        """Queued alerts and predictions to the aggregator, when connected."""
        transport = self.transport
        if transport is None or not transport.is_connected:
            return
        outbox = transport.layout.outbox(self.config.client_id)
        try:
            self.predictor.flush(
                lambda body: transport.publish(outbox, Message.create(body, sender=self.config.client_id))
            )
        except ConnectionError:
            return  # stays queued
        self._publish_status()

    def hello(self) -> Hello:
        return Hello(
            software_version=__version__,
            feature_set_version=self.processor.feature_set_version,
            n_features=len(self.processor.feature_names),
            capabilities=self.participant.capabilities if self.transport is not None else (),
        )

    def link_state(self) -> str:
        """The reader's state, except that a changed device whose sensors have re-announced
        themselves on this connection (a re-enumerated adapter, a new stream) is ``up`` again."""
        if self.serial is None:
            return "-"
        s = self.serial.stats
        settled = self.processor.connection == s.opens and not self.processor.unconfirmed
        return "up" if s.state == "changed" and settled else s.state

    def stats(self) -> dict[str, object]:
        """One line's worth of health: link, pipeline, store, broker."""
        p = self.processor.stats
        out: dict[str, object] = {"session": self.processor.current_session}
        if self.serial is not None:
            s = self.serial.stats
            out.update(
                link=self.link_state(),
                frames=s.link.frames_ok,
                crc_errors=s.link.crc_errors,
                lost_samples=s.link.lost_samples,
                dropped=s.dropped,
                reopens=max(s.opens - 1, 0),
                device_changes=s.device_changes,
            )
        out.update(
            streams=p.streams,
            unattributed=p.unattributed_frames,
            windows=p.windows,
            unknown_frames=p.unknown_sensor_frames,
            mismatched=p.mismatched_frames,
            refused_descriptors=p.refused_descriptors,
            faults=self.faults.total,
            restarts=self.restarts,
        )
        st = self.store.stats()
        out.update(stored=st.windows, labelled=st.labelled)
        if p.pending or p.unstored_windows:  # the disk is (or was) full: see store_backlog.py
            out.update(pending=p.pending, unstored=p.unstored_windows)
        if self.transport is not None:
            out["broker"] = "connected" if self.transport.is_connected else "offline"
        installed = self.models.current
        live = self.predictor.stats
        out.update(
            model=installed.label if installed else "-",
            predicted=live.predicted,
            last=live.last_label or "-",
            latency_ms=round(live.last_latency_ms, 2),
            inference_ms=round(live.last_inference_ms, 2),
            alerts=live.alerts,
        )
        return out

    def start(self) -> None:
        """Connect (in the background) and open the serial port; a port held by another process
        is a ``GatewayError`` (everything opened so far is closed again)."""
        if self._started:
            return
        self._started = True
        if self.transport is not None:
            self.participant.start()
            self.transport.connect(wait=False)
        if self.serial is not None:
            self.serial.start()
            refused = _REFUSED_PORTS.get(self.serial.wait_first_attempt(_FIRST_OPEN_S))
            if refused:
                self.shutdown()
                raise GatewayError(f"serial port {self.config.serial_port} {refused}")
            self._supervisor = threading.Thread(
                target=self._supervise, args=(self.serial,), name="gateway-supervisor", daemon=True
            )
            self._supervisor.start()
        log.info("gateway running", extra={"client": self.config.client_id, "session": self.session_id})

    def run(self, *, stats_every_s: float = 0.0, on_stats=None) -> None:
        """Serve until stopped; ``on_stats(dict)`` is called every ``stats_every_s`` seconds and
        live results are published every ``config.live.publish_every_s``."""
        self.start()
        tick = self.config.live.publish_every_s
        next_stats = time.monotonic() + stats_every_s if stats_every_s else float("inf")
        try:
            while not self._stop.wait(min(tick, stats_every_s or tick)):
                try:
                    self._publish_live()
                except Exception as exc:  # noqa: BLE001 - a broken publish must not stop collection
                    self.faults.record("publishing predictions and status", exc)
                if on_stats is not None and time.monotonic() >= next_stats:
                    next_stats = time.monotonic() + stats_every_s
                    try:
                        on_stats(self.stats())
                    except Exception as exc:  # noqa: BLE001 - nor a stats line that cannot be made
                        self.faults.record("stats line", exc)
        finally:
            self.shutdown()

    def _supervise(self, serial: SerialReader) -> None:
        """Restart serial reader threads that died, with backoff (``SupervisionConfig``)."""
        cfg = self.config.supervision
        wait, last_restart, due = cfg.backoff_initial_s, float("-inf"), None
        while not self._supervisor_stop.wait(cfg.check_every_s):
            try:
                dead = serial.dead_workers()
                now = time.monotonic()
                if not dead:
                    due = None
                    continue
                if due is None:  # noticed now: restart after the current backoff
                    if now - last_restart >= cfg.healthy_after_s:
                        wait = cfg.backoff_initial_s
                    due = now + wait
                if now < due:
                    continue
                restarted = serial.restart(dead)
                self.restarts += len(restarted)
                log.warning(
                    "serial reader threads restarted",
                    extra={"threads": restarted, "restarts": self.restarts, "backoff_s": wait},
                )
                last_restart, due, wait = now, None, min(wait * 2, cfg.backoff_max_s)
            except Exception as exc:  # noqa: BLE001 - the supervisor itself must not die of a fault
                self.faults.record("supervisor", exc)

    def shutdown(self) -> None:
        """Stop reading, finish the windows the data allows, close store and broker connection."""
        self._supervisor_stop.set()
        if self._supervisor is not None:
            self._supervisor.join()
        if self.serial is not None:
            self.serial.stop()
        self.processor.finish()
        self._publish_live()
        self.final_stats = self.stats()
        if self.transport is not None:
            self.transport.flush(5.0)
            self.transport.close()
        self.store.close()
        log.info("gateway stopped", extra={"client": self.config.client_id})

    def stop(self) -> None:
        self._stop.set()

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())
