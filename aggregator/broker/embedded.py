"""DRAFT"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from amqtt.broker import Broker
from amqtt.contexts import Action
from amqtt.plugins.base import BaseAuthPlugin, BaseTopicPlugin
from amqtt.session import Session

from shared.protocol.topics import TopicLayout

from .mosquitto import BrokerUser, find_free_port

log = logging.getLogger(__name__)


class WheelFedAuthPlugin(BaseAuthPlugin):
    @dataclass
    class Config:
        users: dict[str, str] = field(default_factory=dict)
        require_username_as_client_id: bool = True

    async def authenticate(self, *, session: Session) -> bool | None:
        users: dict[str, str] = self.config.users
        name = session.username
        if not name or name not in users:
            return False
        if self.config.require_username_as_client_id and session.client_id != name:
            return False
        return hmac.compare_digest((session.password or "").encode(), users[name].encode())


class WheelFedTopicPlugin(BaseTopicPlugin):
    @dataclass
    class Config:
        prefix: str = TopicLayout.prefix
        aggregator_id: str = TopicLayout.aggregator_id

    def __init__(self, context) -> None:
        super().__init__(context)
        self.layout = TopicLayout(self.config.prefix, self.config.aggregator_id)

    async def topic_filtering(self, *, session: Session | None = None, topic: str | None = None,
                              action: Action | None = None) -> bool:
        user = session.username if session else None
        if not user or not topic:
            return False
        if action == Action.PUBLISH:
            return self.layout.may_publish(user, topic)
        return self.layout.may_subscribe(user, topic)


class EmbeddedBroker:
    def __init__(self, run_dir, *, users=(), port=0, bind_address="127.0.0.1", layout=None):
        self.run_dir = Path(run_dir).resolve()
        self.users = list(users)
        self.bind_address = bind_address
        self.port = port or find_free_port(bind_address)
        self.layout = layout or TopicLayout()
        self._thread = None
        self._loop = None
        self._stop_event = None
        self._ready = threading.Event()
        self._error = None

    @property
    def host(self) -> str:
        return "127.0.0.1" if self.bind_address in ("0.0.0.0", "") else self.bind_address

    def _config(self) -> dict:
        return {
            "listeners": {"default": {"type": "tcp", "bind": f"{self.bind_address}:{self.port}"}},
            "plugins": {
                f"{__name__}.WheelFedAuthPlugin": {"users": {u.name: u.password for u in self.users}},
                f"{__name__}.WheelFedTopicPlugin": {"prefix": self.layout.prefix,
                                                    "aggregator_id": self.layout.aggregator_id},
            },
        }

    def start(self, timeout_s: float = 10.0) -> "EmbeddedBroker":
        self._ready = threading.Event()
        self._error = None
        self._thread = threading.Thread(target=self._run, name=f"amqtt-{self.port}", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError
        if self._error:
            self._thread.join()
            self._thread = None
            raise RuntimeError(str(self._error)) from self._error
        return self

    def _run(self) -> None:
        with asyncio.Runner() as runner:
            self._loop = runner.get_loop()
            runner.run(self._serve())

    async def _serve(self) -> None:
        self._stop_event = asyncio.Event()
        try:
            broker = Broker(self._config())
            await broker.start()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        await self._stop_event.wait()
        await broker.shutdown()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._stop_event.set)
        self._thread.join(10)
        self._thread = None
