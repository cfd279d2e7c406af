"""An embedded MQTT broker (amqtt 0.12) for machines without mosquitto: the zero-setup demo fallback.

``EmbeddedBroker`` has the surface of ``MosquittoBroker`` (``start``/``stop``/``restart``, ``host``,
``port``, context manager) but runs amqtt inside this process, in a thread of its own with its own
asyncio event loop, listening on 127.0.0.1 (loopback only: it has no TLS). Production uses
mosquitto; this is for demos and tests.

**MQTT 3.1.1 only.** amqtt refuses MQTT v5 clients (a paho v5 CONNECT is dropped without CONNACK),
so every client must use ``MqttConfig(protocol=4)``. ``MqttTransport`` then asks for a persistent
session (``clean_session=False``), which keeps the requests for an offline gateway queued.

Authentication (``WheelFedAuthPlugin``, an amqtt auth plugin): the given ``BrokerUser`` list, kept
in memory and compared with ``hmac.compare_digest``; anonymous clients are refused (CONNACK 5, "Not
authorized"). The client id must equal the username (the WheelFed convention; mosquitto's ``%u``
ACL needs it too), so one gateway cannot take over another's session. Authenticating is also what
keeps offline messages at all: amqtt drops them for anonymous sessions. amqtt's stock
``FileAuthPlugin`` (``user:hash`` lines, argon2id through pwdlib, an amqtt dependency) is not used:
each check costs ~0.25 s at pwdlib's default cost, synchronously on the broker's event loop.

Topic ACL (``WheelFedTopicPlugin``, an amqtt topic plugin): exactly ``TopicLayout.may_publish`` /
``may_subscribe`` keyed by username, which amqtt applies to every PUBLISH, every SUBSCRIBE filter
and every delivered message. The aggregator may do anything below the prefix; a gateway may publish
only to its outbox and status and receive only its inbox, its status and ``fleet/#``. As with
mosquitto on 3.1.1 a forbidden publish is acknowledged and silently dropped; a forbidden
subscription gets SUBACK 0x80. A last will on a topic the user may not publish to refuses the
connection (stock amqtt would publish the will unchecked).

Fixes over stock amqtt 0.12.1, made by overriding private methods of ``amqtt.broker.Broker`` (hence
the ``amqtt>=0.12,<0.13`` pin; the tests cover them):

- credentials are checked *before* an existing session with the same client id is deleted, merged
  or taken over. Stock amqtt lets a client with a wrong password kick a connected gateway off, and
  leaves an offline gateway's session marked connected, silently losing what is sent to it;
- stock amqtt replays on every connect the retained messages of *all* subscriptions in the broker
  to the new client, past the ACL (a gateway received the other gateways' retained status); here a
  client gets retained messages only for its own subscriptions and only where it may receive them;
- ``stop`` closes the client sockets before amqtt's shutdown, which otherwise can hang for ever on
  Python 3.11, and sockets that never sent a valid CONNECT are closed (amqtt leaks them).

Known gaps compared with the mosquitto deployment (fine for a demo, not for production):

- no persistence: ``stop``/``restart`` lose sessions, queued offline messages and retained messages
  (amqtt's SQLite session plugin needs the ``amqtt[contrib]`` extras, sqlalchemy and aiosqlite, not
  installed). Clients reconnect by themselves and ``MqttTransport`` re-subscribes, so a restart
  costs only the traffic in flight and what was queued;
- no TLS / client certificates (hence loopback addresses only), no packet-size limit (senders
  enforce ``max_payload``), no bound on a session's offline queue (mosquitto: ``max_queued_messages``);
- queued messages reach a returning client with the retain flag set (``MqttTransport`` ignores it);
  a large message blocks the broker's loop while it is handled (~0.4 s for 20 MB).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import amqtt
import amqtt.plugins.manager
from amqtt.broker import Broker
from amqtt.contexts import Action, BaseContext, BrokerConfig, ListenerConfig, ListenerType
from amqtt.errors import AMQTTError, MQTTError, NoDataError
from amqtt.mqtt.connack import NOT_AUTHORIZED, ConnackPacket
from amqtt.mqtt.protocol.broker_handler import BrokerProtocolHandler
from amqtt.plugins.base import BaseAuthPlugin, BaseTopicPlugin
from amqtt.session import Session
from amqtt.utils import format_client_message, gen_client_id

from shared.protocol.topics import TopicLayout

from .mosquitto import BrokerUser, find_free_port, is_temporary_run_dir, remove_run_dir, require_loopback

log = logging.getLogger(__name__)

#: Sessions of clients that stay away longer are dropped (mosquitto: persistent_client_expiration 14d).
SESSION_EXPIRY_S = 14 * 24 * 3600
#: How long amqtt's own shutdown may take before its remaining tasks are cancelled.
SHUTDOWN_TIMEOUT_S = 5.0

if not amqtt.__version__.startswith("0.12."):
    log.warning("EmbeddedBroker was written against amqtt 0.12; found %s", amqtt.__version__)


class WheelFedAuthPlugin(BaseAuthPlugin):
    """Username/password from an in-memory table; the client id must equal the username."""

    @dataclass
    class Config:
        users: dict[str, str] = field(default_factory=dict)

    async def authenticate(self, *, session: Session) -> bool:
        name = session.username
        expected = self.config.users.get(name) if name else None
        if expected is None or session.client_id != name:
            return False
        return hmac.compare_digest((session.password or "").encode(), expected.encode())


class WheelFedTopicPlugin(BaseTopicPlugin):
    """The WheelFed topic ACL (``TopicLayout.may_publish`` / ``may_subscribe``) keyed by username."""

    @dataclass
    class Config:
        prefix: str = TopicLayout.prefix
        aggregator_id: str = TopicLayout.aggregator_id

    def __init__(self, context: BaseContext) -> None:
        super().__init__(context)
        self.layout = TopicLayout(self.config.prefix, self.config.aggregator_id)

    async def topic_filtering(
        self, *, session: Session | None = None, topic: str | None = None, action: Action | None = None
    ) -> bool:
        user = session.username if session is not None else None
        if not user or not topic:
            return False
        if action == Action.PUBLISH:
            return self.layout.may_publish(user, topic)
        # SUBSCRIBE checks the filter itself, RECEIVE every topic delivered to the client.
        return self.layout.may_subscribe(user, topic)


class _WheelFedBroker(Broker):
    """amqtt's broker with the fixes described in the module docstring, and a bounded shutdown."""

    def __init__(self, config: BrokerConfig) -> None:
        super().__init__(config)
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}

    async def stream_connected(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, listener_name: str
    ) -> None:
        task = asyncio.current_task()
        if task is None:  # asyncio.start_server runs every connection in a task of its own
            raise RuntimeError("a broker connection handled outside an asyncio task")
        self._connections[task] = writer
        try:
            await super().stream_connected(reader, writer, listener_name)
        finally:
            self._connections.pop(task, None)
            # amqtt leaves the socket open when a connection ends before a valid CONNECT. (Not
            # awaiting wait_closed: amqtt may already have cancelled the close future it shares.)
            writer.close()

    async def close(self, timeout_s: float) -> None:
        """Close every client connection, then shut amqtt down.

        Closing the sockets first lets each connection's reader end on EOF. Relying on amqtt's
        ``shutdown`` alone can hang for ever on Python 3.11: it cancels each reader task, and
        3.11's ``asyncio.wait_for`` swallows that cancellation when a packet arrives at the same
        moment (seen with a client publishing its presence while the broker stopped).
        """
        for writer in list(self._connections.values()):
            writer.close()
        try:
            async with asyncio.timeout(timeout_s):
                await self.shutdown()
                if self._connections:  # let the connection tasks finish rather than be cancelled
                    await asyncio.wait(list(self._connections))
        except TimeoutError:
            log.warning("amqtt did not shut down within %ss; cancelling its tasks", timeout_s)

    async def _initialize_client_session(
        self, reader: Any, writer: Any, remote_address: str, remote_port: int
    ) -> tuple[BrokerProtocolHandler, Session]:
        # amqtt 0.12.1's Broker._initialize_client_session with the changes marked "WheelFed": the
        # client is authorised before any existing session of the same client id is touched.
        try:
            handler, client_session = await BrokerProtocolHandler.init_from_connect(
                reader, writer, self.plugins_manager
            )
        except AMQTTError as exc:
            self.logger.warning(
                f"[MQTT-3.1.0-1] {format_client_message(address=remote_address, port=remote_port)}:"
                f" Can't read first packet as CONNECT: {exc}"
            )
            raise AMQTTError(exc) from exc
        except MQTTError as exc:
            self.logger.warning(
                f"Invalid connection from {format_client_message(address=remote_address, port=remote_port)}"
            )
            await writer.close()
            raise MQTTError(exc) from exc
        except NoDataError as exc:
            self.logger.error(f"No data from {format_client_message(address=remote_address, port=remote_port)} : {exc}")
            raise AMQTTError(exc) from exc

        # WheelFed: refuse bad credentials and forbidden last-will topics right here.
        refusal = await self._refusal(client_session)
        if refusal:
            await ConnackPacket.build(0, NOT_AUTHORIZED).to_stream(writer)
            await writer.close()
            raise AMQTTError(f"connection of {client_session.client_id!r} from {remote_address} refused: {refusal}")

        if client_session.clean_session:
            if client_session.client_id is not None and client_session.client_id != "":
                await self._delete_session(client_session.client_id)
            else:
                client_session.client_id = gen_client_id()
            client_session.parent = 0
        elif client_session.client_id in self._sessions:
            existing, _ = self._sessions[client_session.client_id]
            existing.will_flag = client_session.will_flag
            existing.will_message = client_session.will_message
            existing.will_topic = client_session.will_topic
            existing.will_qos = client_session.will_qos
            existing.will_retain = client_session.will_retain  # WheelFed: amqtt 0.12.1 forgets this one
            existing.keep_alive = client_session.keep_alive
            existing.username = client_session.username
            existing.password = client_session.password
            client_session = existing
            client_session.parent = 1
        else:
            client_session.parent = 0

        timeout_disconnect_delay = self.config.get("timeout-disconnect-delay", 0)
        if client_session.keep_alive > 0 and isinstance(timeout_disconnect_delay, int):
            client_session.keep_alive += timeout_disconnect_delay
        return handler, client_session

    async def _refusal(self, session: Session) -> str | None:
        if not await self._authenticate(session, self.listeners_config["default"]):
            return "bad username or password"
        if session.will_flag and not await self._topic_filtering(session, session.will_topic or "", Action.PUBLISH):
            return f"last will on forbidden topic {session.will_topic!r}"
        return None

    async def _publish_retained_messages_for_subscription(
        self, subscription: tuple[str, int], session: Session
    ) -> None:
        # Replaces amqtt's version, which is also called on connect with every subscription filter
        # of every client in the broker and publishes without asking the topic plugins.
        topic_filter, qos = subscription
        if not any(s.client_id == session.client_id for s, _ in self._subscriptions.get(topic_filter, ())):
            return
        handler = self._get_handler(session)
        if handler is None:
            return
        tasks = []
        for topic, retained in list(self._retained_messages.items()):
            if self._matches(topic, topic_filter) and await self._topic_filtering(session, topic, Action.RECEIVE):
                tasks.append(
                    asyncio.ensure_future(
                        handler.mqtt_publish(retained.topic, retained.data, min(qos, retained.qos or qos), retain=True)
                    )
                )
        if tasks:
            await asyncio.wait(tasks)


class EmbeddedBroker:
    """amqtt in a background thread with WheelFed's users and topic ACL; a context manager.

    Clients must speak MQTT 3.1.1: ``MqttTransport(cid, MqttConfig(..., protocol=4))`` with
    ``username == cid``. ``restart()`` keeps the port but, unlike mosquitto, not the sessions.
    ``run_dir`` is accepted for parity with ``MosquittoBroker`` and created; amqtt keeps nothing
    on disk.
    """

    def __init__(
        self,
        run_dir: str | Path,
        *,
        users: Sequence[BrokerUser] = (),
        port: int = 0,
        bind_address: str = "127.0.0.1",
        layout: TopicLayout | None = None,
        remove_on_stop: bool | None = None,
    ) -> None:
        require_loopback(bind_address)  # it has no TLS
        self.run_dir = Path(run_dir).resolve()
        # as MosquittoBroker: a temporary run folder goes when the broker stops cleanly
        self.remove_on_stop = is_temporary_run_dir(self.run_dir) if remove_on_stop is None else remove_on_stop
        self.users = list(users)
        self.bind_address = bind_address
        self.port = port or find_free_port(bind_address)
        self.layout = layout or TopicLayout()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._stop_flag = threading.Event()  # covers a stop() that comes before the loop's event exists
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def host(self) -> str:
        return "127.0.0.1" if self.bind_address in ("0.0.0.0", "") else self.bind_address

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _config(self) -> BrokerConfig:
        return BrokerConfig(
            listeners={"default": ListenerConfig(type=ListenerType.TCP, bind=f"{self.bind_address}:{self.port}")},
            session_expiry_interval=SESSION_EXPIRY_S,
            plugins={
                f"{__name__}.WheelFedAuthPlugin": {"users": {u.name: u.password for u in self.users}},
                f"{__name__}.WheelFedTopicPlugin": {
                    "prefix": self.layout.prefix,
                    "aggregator_id": self.layout.aggregator_id,
                },
            },
        )

    def start(self, timeout_s: float = 10.0) -> "EmbeddedBroker":
        """Start the broker thread and return once it listens (raises if it cannot)."""
        if self.running:
            raise RuntimeError(f"embedded broker on port {self.port} is already running")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._ready.clear()
        self._stop_flag.clear()
        self._stop_requested = None
        self._error = None
        self._thread = threading.Thread(target=self._run, name=f"amqtt-broker-{self.port}", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            self.stop()
            raise TimeoutError(f"embedded broker did not listen on port {self.port} within {timeout_s}s")
        if self._error is not None:
            self._thread.join(timeout_s)
            self._thread = None
            raise RuntimeError(
                f"embedded broker could not start on {self.bind_address}:{self.port}: {self._error}"
            ) from self._error
        log.info("embedded broker started", extra={"port": self.port, "bind": self.bind_address})
        return self

    def _run(self) -> None:
        # asyncio.Runner cancels whatever amqtt leaves running and closes the loop on exit.
        try:
            with asyncio.Runner() as runner:
                self._loop = runner.get_loop()
                runner.run(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to start() or logged, never lost
            if not self._ready.is_set():
                self._error = exc
            else:
                log.exception("embedded broker thread failed")
        finally:
            self._loop = None
            self._ready.set()

    async def _serve(self) -> None:
        self._stop_requested = asyncio.Event()
        broker = _WheelFedBroker(self._config())
        try:
            await broker.start()
            self._ready.set()
            if not self._stop_flag.is_set():
                await self._stop_requested.wait()
        finally:
            if broker.transitions.state == "started":
                await broker.close(SHUTDOWN_TIMEOUT_S)
            # amqtt registers every plugin manager in a module-level dict; drop ours.
            registry = amqtt.plugins.manager.plugins_manager
            for name, manager in list(registry.items()):
                if manager is broker.plugins_manager:
                    del registry[name]

    def stop(self, *, kill: bool = False, timeout_s: float = 10.0) -> None:
        """Close every connection and the listener and end the thread (``kill`` is accepted for
        parity with ``MosquittoBroker``; both lose all state here)."""
        thread = self._thread
        if thread is None:
            return
        self._stop_flag.set()
        loop, stop_requested = self._loop, self._stop_requested
        if loop is not None and stop_requested is not None:
            try:
                loop.call_soon_threadsafe(stop_requested.set)
            except RuntimeError:  # loop already closed: the thread is ending anyway
                pass
        thread.join(timeout_s)
        if thread.is_alive():
            raise TimeoutError(f"embedded broker on port {self.port} did not stop within {timeout_s}s")
        self._thread = None
        log.info("embedded broker stopped", extra={"port": self.port})
        if self.remove_on_stop and not kill and not self._restarting and self.run_dir.exists():
            remove_run_dir(self.run_dir)

    _restarting = False

    def restart(self, *, kill: bool = False) -> None:
        """Stop and start on the same port; sessions, queues and retained messages are lost."""
        self._restarting = True
        try:
            self.stop(kill=kill)
        finally:
            self._restarting = False
        self.start()

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
