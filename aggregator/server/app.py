"""The running server: its parts wired together, and the HTTP loop that serves them.

:class:`Server` opens the registry, connects to the broker as the aggregator, and starts the
fleet tracker, the job runner (which first resumes what a previous server left running) and the
scheduler. :func:`serve` runs the FastAPI app under uvicorn on a socket bound before anything is
printed, so the URL it prints is one that answers; SIGTERM and SIGINT end it gracefully --
uvicorn stops taking requests, the running job stops at its next round boundary and stays
``running`` for the next start, the broker connection and the registry are closed.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path

from shared.protocol.topics import AGGREGATOR_ID, TopicLayout

from ..jobs import JobSettings
from ..registry import Registry
from ..rounds import RoundEngine
from .config import ServerConfig
from .service import FleetTracker, JobRunner, LiveMonitor, Scheduler

log = logging.getLogger(__name__)

__all__ = ["Server", "serve"]


class Server:
    """The server's parts; ``start`` connects and starts them, ``stop`` ends them in reverse."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.signing_key = None
        if config.signing_key:
            from shared.signing import load_signing_key

            self.signing_key = load_signing_key(Path(config.signing_key))
        self.registry = Registry(config.registry)

    def connect(self):
        """The aggregator's MQTT connection from the settings (connected; raises
        ``ConnectionError``/``TimeoutError``/``OSError`` if the broker cannot be reached)."""
        from shared.transport.mqtt import MqttTransport

        transport = MqttTransport(AGGREGATOR_ID, self.config.mqtt_config(), presence=False)
        transport.connect(wait=True, timeout_s=15.0)
        return transport

    def start(self, transport=None) -> None:
        """Connect (or take ``transport``, already connected) and start tracking, jobs, schedules."""
        cfg = self.config
        if transport is None:
            try:
                transport = self.connect()
            except (ConnectionError, TimeoutError, OSError):
                self.registry.close()
                raise
        self.transport = transport
        layout = TopicLayout()
        self.engine = RoundEngine(transport, layout)
        self.tracker = FleetTracker(
            transport,
            layout,
            self.registry,
            window_rate=cfg.max_windows_per_s,
            new_gateway_windows=cfg.new_gateway_windows,
        )
        self.live = LiveMonitor(transport, layout)
        settings = JobSettings(deadline_s=cfg.deadline_s, min_fraction=cfg.min_fraction)
        self.runner = JobRunner(
            self.registry,
            self.engine,
            self.tracker,
            settings=settings,
            signing_key=self.signing_key,
            live=self.live,
            privacy_cap=cfg.privacy_cap(),
            local_baseline=cfg.local_baseline,
        )
        self.scheduler = Scheduler(self.registry, self.runner, self.tracker, cfg.schedule_tick_s)
        self.runner.start()
        self.scheduler.start()
        log.info("server started", extra=cfg.public())

    @property
    def broker_connected(self) -> bool:
        """Whether the broker connection is up (an MQTT transport's ``is_connected``, the memory
        transport's ``connected``)."""
        transport = self.transport
        return bool(getattr(transport, "is_connected", getattr(transport, "connected", False)))

    def stop(self) -> None:
        self.tracker.close()
        self.scheduler.stop()
        self.runner.stop(timeout_s=self.config.deadline_s)
        self.transport.close()
        self.registry.close()
        log.info("server stopped")


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (port 0: a free one), bound before the URL is printed. Made with
    ``IPPROTO_TCP`` named: asyncio sets TCP_NODELAY on the connections it accepts only then, and
    without it each answer on a kept-alive connection (the dashboard's polling) waited ~40 ms for
    the client's delayed ACK."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def serve(server: Server, sock: socket.socket, *, on_ready: Callable[[], None] | None = None) -> None:
    """Serve the API and dashboard on ``sock`` until SIGTERM/SIGINT; then stop ``server``."""
    import uvicorn

    from .api import create_app

    @asynccontextmanager
    async def lifespan(_app):
        if on_ready is not None:
            on_ready()
        yield
        server.stop()

    app = create_app(server)
    app.router.lifespan_context = lifespan
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=10)
    uvicorn.Server(config).run(sockets=[sock])
