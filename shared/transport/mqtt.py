"""The MQTT transport over paho-mqtt 2.x: QoS 1, persistent sessions, presence, reconnects.

- MQTT v5 by default (session expiry, reason codes; an ACL denial comes back as a PUBACK reason
  and is counted in ``denied``), v3.1.1 supported (``protocol=4``).
- Persistent sessions (v5: clean_start=False + SessionExpiryInterval; v3.1.1: clean_session=False)
  so requests published while a gateway is offline reach it when it reconnects.
- ``connect()`` returns once the broker acknowledged the subscriptions made before it (SUBACK),
  not at CONNACK: a request another client sends right after would otherwise beat the
  subscription and be dropped by the broker (nobody subscribed yet).
- TLS 1.3 at least (``TlsConfig``); the deploy/ broker listeners take nothing older.
- paho's network thread reconnects with backoff and re-sends unacknowledged QoS 1 messages;
  publishes made while disconnected are queued by paho and go out after reconnecting.
- Presence: a retained ``Status(online=True)`` on connect and a retained ``Status(online=False)``
  as last will (and on clean close).
- Received payloads are handed to a dispatch thread so handlers never stall the network loop
  (keep-alives keep flowing while a gateway computes a reply). They are acknowledged (PUBACK)
  only after their handlers ran, so a crash loses nothing the broker counts as delivered, and
  the broker's inflight window (20) bounds the queue.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from ..protocol.envelope import Message, encode_message
from ..protocol.errors import PayloadTooLarge
from ..protocol.limits import DEFAULT_LIMITS, DEFAULT_MAX_PAYLOAD, DecodeLimits
from ..protocol.messages import Status
from ..protocol.topics import TopicLayout
from .base import Transport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TlsConfig:
    """Client-certificate TLS; under ``use_identity_as_username`` the CN is the client id.

    The client speaks TLS 1.3 only (as the deploy/ broker does): under 1.2 its certificate,
    which names the gateway, crosses the network in clear, and a server offering only 1.2 is
    a downgrade."""

    ca_file: str
    cert_file: str | None = None
    key_file: str | None = None

    def context(self) -> ssl.SSLContext:
        """The client's SSL context: verifies the broker against ``ca_file`` and its host name,
        presents ``cert_file`` when given, TLS 1.3 or nothing."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and host name checks
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.load_verify_locations(self.ca_file)
        if self.cert_file is not None:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


@dataclass(frozen=True)
class MqttConfig:
    host: str = "127.0.0.1"
    port: int = 1883
    username: str | None = None
    password: str | None = None
    protocol: Literal[4, 5] = 5
    tls: TlsConfig | None = None
    keepalive_s: int = 30
    session_expiry_s: int = 14 * 24 * 3600  # = persistent_client_expiration in deploy/mosquitto
    reconnect_min_s: int = 1
    reconnect_max_s: int = 8
    max_payload: int = DEFAULT_MAX_PAYLOAD
    limits: DecodeLimits = field(default_factory=lambda: DEFAULT_LIMITS)


def _disable_nagle(_client: paho.Client, _userdata: object, sock: paho.SocketLike) -> None:
    """QoS 1 puts a 4-byte PUBACK on the socket right before our next PUBLISH; with Nagle that
    PUBLISH waits for the peer's delayed ACK (40 ms on Linux): 44-88 ms per request/reply. A
    websocket connection's wrapper has no socket options."""
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class MqttTransport(Transport):
    """A WheelFed participant's connection to the broker."""

    def __init__(
        self,
        client_id: str,
        config: MqttConfig = MqttConfig(),
        *,
        layout: TopicLayout | None = None,
        presence: bool = True,
        online_status: Callable[[], Status] | None = None,
    ) -> None:
        super().__init__(client_id, max_payload=config.max_payload, limits=config.limits, layout=layout)
        self.config = config
        self.presence = presence
        # the retained presence published on every (re)connect; a gateway passes one that includes
        # its active model and counters
        self.online_status: Callable[[], Status] = online_status or (lambda: Status(online=True))
        self.denied = 0
        self.connections = 0
        self._filters: list[str] = []
        self._connected = threading.Event()
        self._answered = threading.Event()  # the broker answered a CONNECT (accepted or refused)
        self._connect_error: str | None = None
        self._last_failure: str | None = None  # why the newest connection attempt failed (socket, TLS)
        self._subacks_due: set[int] = set()  # mids of this connection's initial subscriptions not acknowledged
        self._pending_mids: set[int] = set()
        self._acked_early: set[int] = set()
        self._pending_lock = threading.Condition()
        self._inbound: queue.Queue[tuple[str, bytes, int, int] | None] = queue.Queue()
        self._client = self._make_client()
        self._dispatch_thread = threading.Thread(
            target=self._dispatch_loop, name=f"mqtt-dispatch-{client_id}", daemon=True
        )
        self._dispatch_thread.start()
        self._closed = False

    # -- setup --------------------------------------------------------------------------------
    def _make_client(self) -> paho.Client:
        cfg = self.config
        if cfg.protocol == 5:
            client = paho.Client(
                CallbackAPIVersion.VERSION2, client_id=self.client_id, protocol=MQTTProtocolVersion.MQTTv5
            )
        elif cfg.protocol == 4:
            client = paho.Client(
                CallbackAPIVersion.VERSION2,
                client_id=self.client_id,
                clean_session=False,
                protocol=MQTTProtocolVersion.MQTTv311,
            )
        else:
            raise ValueError(f"MQTT protocol must be 5 or 4 (3.1.1), got {cfg.protocol}")
        if cfg.username is not None:
            client.username_pw_set(cfg.username, cfg.password)
        if cfg.tls is not None:
            client.tls_set_context(cfg.tls.context())
        client.reconnect_delay_set(cfg.reconnect_min_s, cfg.reconnect_max_s)
        client.manual_ack_set(True)
        client.max_queued_messages_set(0)  # unlimited: nothing a caller published is dropped locally
        if self.presence:
            will = encode_message(Message.create(Status(online=False), sender=self.client_id))
            client.will_set(self.layout.status(self.client_id), will, qos=1, retain=True)
        client.on_socket_open = _disable_nagle
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_subscribe = self._on_subscribe
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        client.on_publish = self._on_publish
        return client

    def connect(self, *, wait: bool = True, timeout_s: float = 10.0) -> None:
        """Start the network thread; with ``wait``, block until the broker accepted us and
        acknowledged the subscriptions made so far (within ``timeout_s`` in all), so that a
        request sent to us from now on is delivered.

        Without ``wait`` (a gateway starting offline) the thread keeps retrying in the background.

        Raises
        ------
        ConnectionError
            With ``wait``: the broker is unreachable, refused us, or did not answer (or did not
            acknowledge the subscriptions) within ``timeout_s``; the reason is in the message.
        """
        cfg = self.config
        if wait:
            _check_reachable(cfg.host, cfg.port, min(timeout_s, 5.0))
        if cfg.protocol == 5:
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = cfg.session_expiry_s
            self._client.connect_async(cfg.host, cfg.port, cfg.keepalive_s, clean_start=False, properties=props)
        else:
            self._client.connect_async(cfg.host, cfg.port, cfg.keepalive_s)
        self._client.loop_start()
        if not wait:
            return
        deadline = time.monotonic() + timeout_s
        detail = None
        if not (self._answered.wait(timeout_s) and self.wait_connected(0.05)):
            detail = self._connect_error or (f"no answer ({self._last_failure})" if self._last_failure else "no answer")
        else:
            with self._pending_lock:
                if not self._pending_lock.wait_for(
                    lambda: not self._subacks_due, max(0.0, deadline - time.monotonic())
                ):
                    n = len(self._subacks_due)
                    detail = f"no SUBACK for {n} subscription{'s' if n != 1 else ''}"
        if detail is not None:
            self.close()
            raise ConnectionError(
                f"could not connect to MQTT broker {cfg.host}:{cfg.port} as {self.client_id!r}: {detail}"
            )

    def wait_connected(self, timeout_s: float) -> bool:
        return self._connected.wait(timeout_s)

    @property
    def connection_epoch(self) -> int:
        return self.connections

    @property
    def is_connected(self) -> bool:
        return self._connected.is_set()

    # -- paho callbacks (network thread) ----------------------------------------------------
    def _on_connect(self, client, _userdata, flags, reason_code, _props) -> None:
        if reason_code.is_failure:
            self._connect_error = str(reason_code)
            log.error("broker refused connection", extra={"client": self.client_id, "reason": str(reason_code)})
            self._answered.set()
            return
        log.info("connected to broker", extra={"client": self.client_id, "session_present": flags.session_present})
        # SUBACKs are handled on this (the network) thread, after this callback: none is missed
        sent = [client.subscribe(topic_filter, qos=1) for topic_filter in self._filters]
        mids = {mid for rc, mid in sent if rc == MQTTErrorCode.MQTT_ERR_SUCCESS}
        with self._pending_lock:
            self._subacks_due = mids
            self._pending_lock.notify_all()
        if self.presence:
            status = encode_message(Message.create(self.online_status(), sender=self.client_id))
            self._publish_payload(self.layout.status(self.client_id), status, True)
        self.connections += 1  # last: a new epoch means subscriptions and presence are in place
        self._connected.set()
        self._answered.set()

    def _on_connect_fail(self, _client, _userdata) -> None:
        # paho calls this inside its ``except OSError`` around the attempt: the error is at hand
        error = sys.exc_info()[1]
        self._last_failure = f"{type(error).__name__}: {error}" if error is not None else None

    def _on_subscribe(self, _client, _userdata, mid, reason_codes, _props) -> None:
        refused = [str(code) for code in reason_codes if code.is_failure]
        if refused:
            log.warning("broker refused a subscription", extra={"client": self.client_id, "reason": ", ".join(refused)})
        with self._pending_lock:
            self._subacks_due.discard(mid)
            self._pending_lock.notify_all()

    def _on_disconnect(self, _client, _userdata, _flags, reason_code, _props) -> None:
        self._connected.clear()
        if not self._closed:
            log.warning(
                "disconnected from broker; reconnecting", extra={"client": self.client_id, "reason": str(reason_code)}
            )

    def _on_message(self, _client, _userdata, msg: paho.MQTTMessage) -> None:
        self._inbound.put((msg.topic, bytes(msg.payload), msg.mid, msg.qos))

    def _on_publish(self, _client, _userdata, mid, reason_code, _props) -> None:
        if reason_code.is_failure:
            self.denied += 1
            log.warning("broker refused a publish", extra={"client": self.client_id, "reason": str(reason_code)})
        with self._pending_lock:
            if mid in self._pending_mids:
                self._pending_mids.discard(mid)
            else:
                self._acked_early.add(mid)
            self._pending_lock.notify_all()

    #: How often an idle dispatch thread frees stalled chunked transfers.
    EXPIRE_EVERY_S = 1.0

    def _dispatch_loop(self) -> None:
        while True:
            try:
                item = self._inbound.get(timeout=self.EXPIRE_EVERY_S)
            except queue.Empty:
                self.expire_chunks()
                continue
            if item is None:
                return
            topic, payload, mid, qos = item
            try:
                self._receive_payload(topic, payload)
            except Exception:  # _receive_payload never raises; this guards the thread itself
                log.exception("dispatch failed", extra={"client": self.client_id, "topic": topic})
            if qos:
                self._client.ack(mid, qos)

    # -- Transport hooks ----------------------------------------------------------------------
    def _publish_payload(self, topic: str, payload: bytes, retain: bool) -> None:
        if len(payload) > self.max_payload:
            raise PayloadTooLarge(f"payload of {len(payload)} bytes exceeds max_payload {self.max_payload}")
        # paho calls on_publish holding its own lock, so never call into paho holding ours:
        # an acknowledgement may overtake the registration below, hence ``_acked_early``.
        info = self._client.publish(topic, payload, qos=1, retain=retain)
        if info.rc not in (MQTTErrorCode.MQTT_ERR_SUCCESS, MQTTErrorCode.MQTT_ERR_NO_CONN):
            raise ConnectionError(f"publish to {topic} failed: {paho.error_string(info.rc)}")
        with self._pending_lock:
            if info.mid in self._acked_early:
                self._acked_early.discard(info.mid)
            else:
                self._pending_mids.add(info.mid)

    def _subscribe_filter(self, topic_filter: str) -> None:
        if topic_filter not in self._filters:
            self._filters.append(topic_filter)
        if self.is_connected:
            self._client.subscribe(topic_filter, qos=1)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until the broker acknowledged every QoS 1 publish made so far."""
        with self._pending_lock:
            return self._pending_lock.wait_for(lambda: not self._pending_mids, timeout_s)

    def close(self, *, timeout_s: float = 5.0) -> None:
        """Announce offline presence, deliver what is pending, disconnect, stop the threads."""
        if self._closed:
            return
        if self.presence and self.is_connected:
            try:
                self.publish(
                    self.layout.status(self.client_id),
                    Message.create(Status(online=False), sender=self.client_id),
                    retain=True,
                )
            except ConnectionError:
                pass
        if self.is_connected:
            self.flush(timeout_s)
        self._closed = True
        self._client.disconnect()
        self._client.loop_stop()
        self._inbound.put(None)
        self._dispatch_thread.join(timeout_s)


def _check_reachable(host: str, port: int, timeout_s: float) -> None:
    """Fail at once with the socket's reason (refused, unknown host) instead of a silent wait.

    paho's background loop swallows connection errors and retries, so without this a broker
    that is not running looks like one that does not answer.
    """
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except socket.gaierror as exc:
        raise ConnectionError(
            f"could not connect to MQTT broker {host}:{port}: unknown host ({exc.strerror})"
        ) from None
    except ConnectionRefusedError:
        raise ConnectionError(
            f"could not connect to MQTT broker {host}:{port}: connection refused (is the broker running on that port?)"
        ) from None
    except OSError as exc:
        raise ConnectionError(f"could not connect to MQTT broker {host}:{port}: {exc.strerror or exc}") from None
