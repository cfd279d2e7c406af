"""RabbitMQ with its MQTT plugin as WheelFed's broker in tests: one node, or a cluster of nodes on
loopback, started unprivileged by the test itself (Debian's ``rabbitmq-server``).

Nothing here touches a system RabbitMQ the package may have started: every node gets its own
name, data and log directories, config, Erlang cookie (``$HOME/.erlang.cookie`` of a private
``HOME``), distribution port and epmd (a private ``epmd`` on a free port, ``$ERL_EPMD_PORT``,
so the system's port 4369 is neither needed nor touched). Every listener is on 127.0.0.1.

The users and their rights are loaded at boot from a definitions file (``load_definitions``),
so a node is ready the moment its MQTT listener accepts connections -- no ``rabbitmqctl`` round
trips (half a second each). What the definitions grant, and how that compares with
``deploy/mosquitto/acl``, is documented in ``deploy/cloud/brokers/rabbitmq/README.md``:

* every broker user gets AMQP rights to its own MQTT session queues only
  (``mqtt-subscription-<user>qos0|1``), so a session (and its queued requests) can only be
  opened under the client id equal to the username -- mosquitto's ``use_username_as_clientid``;
* topic permissions on ``amq.topic`` (MQTT ``/`` becomes AMQP ``.`` in routing keys) mirror the
  ACL: a gateway writes its ``out`` and ``status``, reads its ``in``, ``status`` and ``fleet/#``.

A second node joins the first at its first boot (peer discovery ``classic_config``, the
documented way to form a cluster from a config file); ``RabbitMQCluster.running_nodes`` asks
the cluster who is in it, so a node that booted on its own instead is noticed.
"""

from __future__ import annotations

import base64
import hashlib
import dataclasses
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

from aggregator.broker import BrokerUser, find_free_port
from aggregator.broker.mosquitto import die_with_parent, port_free
from shared.protocol.topics import AGGREGATOR_ID

#: Debian's scripts; the ``/usr/sbin`` wrappers would switch to user ``rabbitmq`` and drop our
#: environment, so the ones they wrap are called directly, as the current user.
RABBITMQ_BIN = Path(os.environ.get("WHEELFED_RABBITMQ_BIN", "/usr/lib/rabbitmq/bin"))

#: Days a persistent session (and the requests queued for it) outlives its client: mosquitto's
#: ``persistent_client_expiration 14d`` (MqttConfig.session_expiry_s).
SESSION_TTL_MS = 14 * 24 * 3600 * 1000


def rabbitmq_available() -> bool:
    return (RABBITMQ_BIN / "rabbitmq-server").exists() and shutil.which("epmd") is not None


def rabbit_password_hash(password: str) -> str:
    """A ``password_hash`` for RabbitMQ's definitions (``rabbit_password_hashing_sha256``):
    base64 of a 4-byte salt followed by SHA-256(salt + password). No password in a file or
    on a command line."""
    salt = os.urandom(4)
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def _routing_key_level(client_id: str) -> str:
    """A client id as one level of an AMQP routing key in a permission regex: the MQTT plugin
    swaps ``/`` and ``.`` between MQTT topics and routing keys, so ``gw.1`` appears as ``gw/1``."""
    return re.escape(client_id.replace(".", "/"))


def definitions(users: list[BrokerUser], prefix: str = "wheelfed/v1") -> dict:
    """RabbitMQ definitions (users, permissions, topic permissions) equivalent to
    ``deploy/mosquitto/acl`` for these users; the aggregator is ``AGGREGATOR_ID``."""
    root = re.escape(prefix.replace("/", "."))
    out: dict = {"vhosts": [{"name": "/"}], "users": [], "permissions": [], "topic_permissions": []}
    for user in users:
        own_queues = f"mqtt-subscription-{re.escape(user.name)}qos[01]"
        out["users"].append(
            {
                "name": user.name,
                "password_hash": rabbit_password_hash(user.password),
                "hashing_algorithm": "rabbit_password_hashing_sha256",
                "tags": [],
            }
        )
        out["permissions"].append(
            {
                "user": user.name,
                "vhost": "/",
                "configure": f"^{own_queues}$",
                "write": f"^(amq\\.topic|{own_queues})$",
                "read": f"^(amq\\.topic|{own_queues})$",
            }
        )
        if user.name == AGGREGATOR_ID:
            write = read = f"^{root}\\..+"
        else:
            me = f"{root}\\.c\\.{_routing_key_level(user.name)}"
            write = f"^{me}\\.(out|status)$"
            read = f"^({me}\\.(in|status)|{root}\\.fleet\\..+)$"
        out["topic_permissions"].append(
            {"user": user.name, "vhost": "/", "exchange": "amq.topic", "write": write, "read": read}
        )
    return out


@dataclass(frozen=True)
class RabbitNode:
    """One node's name and ports; its files live in ``directory``."""

    name: str
    mqtt_port: int
    amqp_port: int
    dist_port: int
    directory: Path
    mqtt_tls_port: int = 0  # 0: no TLS listener


def unused_port() -> int:
    """A free loopback port below the kernel's ephemeral range. A node binds its ports seconds
    after they are chosen; a port from that range (``find_free_port``) may meanwhile become the
    local end of any outgoing connection on the machine."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randrange(20000, low) if low > 20001 else find_free_port()
        if port_free("127.0.0.1", port):
            return port
    return find_free_port()


class PortTaken(RuntimeError):
    """A node could not bind a port chosen for it (another program took it in the meantime)."""


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def mqtt_login(port: int, user: BrokerUser, timeout_s: float = 5.0) -> str:
    """The broker's answer to an MQTT 3.1.1 clean-session CONNECT as ``user`` ("Success", or why
    not). The node is ready when its first user logs in: the listener opens a moment before the
    plugin's client-id tracking (a Raft cluster of its own) accepts sessions. A clean session
    also discards the one the user had: ``forget_session``."""
    client = paho.Client(
        CallbackAPIVersion.VERSION2, client_id=user.name, clean_session=True, protocol=MQTTProtocolVersion.MQTTv311
    )
    client.username_pw_set(user.name, user.password)
    answers: list[str] = []
    client.on_connect = lambda _c, _u, _f, reason, _p: answers.append(str(reason))
    try:
        client.connect("127.0.0.1", port, keepalive=10)
        deadline = time.monotonic() + timeout_s
        while not answers and time.monotonic() < deadline:
            client.loop(0.05)
        if answers:
            client.disconnect()
    except OSError as exc:
        return f"connection failed: {exc}"
    return answers[0] if answers else f"no CONNACK within {timeout_s:.0f}s"


def forget_session(port: int, user: BrokerUser) -> None:
    """Discard ``user``'s persistent session (its queue and what waits in it)."""
    answer = mqtt_login(port, user)
    if answer != "Success":
        raise ConnectionError(f"{user.name} could not log in to RabbitMQ on port {port}: {answer}")


class RabbitMQCluster:
    """``n_nodes`` RabbitMQ nodes with the MQTT plugin on loopback; a context manager.

    ``port_for(client_id)`` is the MQTT port a client connects to: the aggregator on the first
    node, the other users spread over the nodes in turn (with two nodes, gw-1 and gw-3 on the
    second), so a cluster's traffic crosses nodes. ``protocol`` is 4: RabbitMQ 3.10 speaks
    MQTT 3.1 and 3.1.1 only (MQTT 5 came with 3.13).
    """

    protocol = 4

    def __init__(
        self, run_dir: str | Path, users: list[BrokerUser], *, n_nodes: int = 1, tls_cert_dir: str | Path | None = None
    ) -> None:
        if not rabbitmq_available():
            raise FileNotFoundError(
                "rabbitmq-server is not installed: `apt-get install -y --no-install-recommends "
                "rabbitmq-server` (the test command installs it)"
            )
        if n_nodes < 1:
            raise ValueError(f"n_nodes must be at least 1, got {n_nodes}")
        self.run_dir = Path(run_dir).resolve()
        self.users = list(users)
        self.home = self.run_dir / "home"
        self.epmd_port = unused_port()
        tag = secrets.token_hex(3)
        self.tls_cert_dir = Path(tls_cert_dir).resolve() if tls_cert_dir else None
        self.nodes = [
            self._with_new_ports(RabbitNode(f"wf{tag}n{i}@localhost", 0, 0, 0, self.run_dir / f"node{i}"))
            for i in range(1, n_nodes + 1)
        ]
        self._epmd: subprocess.Popen | None = None
        self._servers: list[subprocess.Popen] = []

    def _with_new_ports(self, node: RabbitNode) -> RabbitNode:
        return dataclasses.replace(
            node,
            mqtt_port=unused_port(),
            amqp_port=unused_port(),
            dist_port=unused_port(),
            mqtt_tls_port=unused_port() if self.tls_cert_dir else 0,
        )

    # -- placement --------------------------------------------------------------------------
    def node_of(self, client_id: str) -> RabbitNode:
        names = [u.name for u in self.users]
        if client_id not in names:
            raise ValueError(f"client_id {client_id!r} is not a broker user here ({names})")
        index = 0 if client_id == AGGREGATOR_ID else names.index(client_id) % len(self.nodes)
        return self.nodes[index]

    def port_for(self, client_id: str) -> int:
        return self.node_of(client_id).mqtt_port

    @property
    def port(self) -> int:
        """The first node's MQTT port (where the aggregator connects)."""
        return self.nodes[0].mqtt_port

    # -- files and environment --------------------------------------------------------------
    def _env(self, node: RabbitNode) -> dict[str, str]:
        only_loopback = "-kernel inet_dist_use_interface {127,0,0,1}"
        return dict(
            os.environ,
            HOME=str(self.home),  # its .erlang.cookie: ours, not the system's
            ERL_EPMD_PORT=str(self.epmd_port),
            ERL_EPMD_ADDRESS="127.0.0.1",
            RABBITMQ_NODENAME=node.name,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(node.amqp_port),
            RABBITMQ_DIST_PORT=str(node.dist_port),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=only_loopback,
            RABBITMQ_CTL_ERL_ARGS=only_loopback,
            RABBITMQ_MNESIA_BASE=str(node.directory / "mnesia"),
            RABBITMQ_LOG_BASE=str(node.directory / "log"),
            RABBITMQ_CONFIG_FILE=str(node.directory / "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(node.directory / "advanced.config"),
            RABBITMQ_CONF_ENV_FILE=str(node.directory / "rabbitmq-env.conf"),  # not /etc/rabbitmq's
            RABBITMQ_ENABLED_PLUGINS_FILE=str(node.directory / "enabled_plugins"),
            RABBITMQ_PID_FILE=str(node.directory / "rabbitmq.pid"),
        )

    def _write_files(self) -> None:
        self.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.home.mkdir(mode=0o700, exist_ok=True)
        cookie = self.home / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(16).upper())
        cookie.chmod(0o400)  # Erlang refuses a cookie others can read
        defs = self.run_dir / "definitions.json"
        fd = os.open(defs, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(definitions(self.users), out, indent=1)
        for i, node in enumerate(self.nodes):
            node.directory.mkdir(mode=0o700, exist_ok=True)
            (node.directory / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")
            (node.directory / "rabbitmq-env.conf").write_text("")
            self._write_config(i)

    def _write_config(self, i: int) -> None:
        node = self.nodes[i]
        (node.directory / "rabbitmq.conf").write_text(
            render_config(
                node,
                definitions_file=self.run_dir / "definitions.json" if i == 0 else None,
                seed=self.nodes[0] if i else None,
                tls_cert_dir=self.tls_cert_dir,
            )
        )

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> "RabbitMQCluster":
        """Start epmd and the nodes one after the other; each is ready when its MQTT listener
        accepts connections (it opens last, after the users are loaded and the cluster joined)."""
        self._write_files()
        try:
            self._epmd = subprocess.Popen(
                ["epmd", "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
            for i in range(len(self.nodes)):
                for attempt in range(3):
                    try:
                        self._start_node(self.nodes[i], timeout_s)
                        break
                    except PortTaken:
                        if attempt == 2:
                            raise
                        self.nodes[i] = self._with_new_ports(self.nodes[i])
                        self._write_config(i)
            if len(self.nodes) > 1:
                running = self.running_nodes()
                if sorted(running) != sorted(n.name for n in self.nodes):
                    raise RuntimeError(f"the nodes did not form one cluster: {self.nodes[0].name} runs with {running}")
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, node: RabbitNode, timeout_s: float) -> None:
        stdout_path = node.directory / "stdout.log"
        offset = stdout_path.stat().st_size if stdout_path.exists() else 0
        stdout = open(stdout_path, "ab")
        server = subprocess.Popen(
            [str(RABBITMQ_BIN / "rabbitmq-server")],
            env=self._env(node),
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        stdout.close()
        self._servers.append(server)
        deadline = time.monotonic() + timeout_s
        first = self.users[0]
        answer = "no MQTT listener"
        while answer != "Success":
            if server.poll() is not None:
                with open(stdout_path, "rb") as out:
                    out.seek(offset)
                    if b"eaddrinuse" in out.read():
                        raise PortTaken(f"RabbitMQ node {node.name}: a port was taken before it could bind it")
                raise RuntimeError(f"RabbitMQ node {node.name} exited with {server.returncode}:\n{self.log_tail(node)}")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"RabbitMQ node {node.name} did not accept {first.name}'s MQTT login on port "
                    f"{node.mqtt_port} within {timeout_s:.0f}s ({answer}):\n{self.log_tail(node)}"
                )
            time.sleep(0.2)
            if _port_open(node.mqtt_port):
                answer = mqtt_login(node.mqtt_port, first)

    def ctl(self, node: RabbitNode, *args: str, timeout_s: float = 60.0) -> str:
        """``rabbitmqctl -n NODE ARGS`` with this cluster's cookie and epmd; its output."""
        proc = subprocess.run(
            [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", node.name, *args],
            env=self._env(node),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if proc.returncode:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed ({proc.returncode}): {proc.stderr or proc.stdout}")
        return proc.stdout

    def running_nodes(self) -> list[str]:
        """The cluster's running nodes, as the first node sees them."""
        status = json.loads(self.ctl(self.nodes[0], "cluster_status", "--formatter", "json"))
        return list(status["running_nodes"])

    def vm_pid(self, node: RabbitNode) -> int:
        """The OS process id of the node's Erlang VM (from its ``RABBITMQ_PID_FILE``)."""
        return int((node.directory / "rabbitmq.pid").read_text().split()[0])

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM every node (the script stops RabbitMQ cleanly), then our epmd."""
        for server in reversed(self._servers):
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGTERM)
        for server in self._servers:
            try:
                server.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        self._servers.clear()
        if self._epmd is not None and self._epmd.poll() is None:
            self._epmd.terminate()
            self._epmd.wait()

    def log_tail(self, node: RabbitNode, lines: int = 30) -> str:
        logs = sorted((node.directory / "log").glob("*.log")) if (node.directory / "log").exists() else []
        texts = [p.read_text(errors="replace") for p in [node.directory / "stdout.log", *logs] if p.exists()]
        return "\n".join("\n".join(text.splitlines()[-lines:]) for text in texts) or "(no log)"

    def __enter__(self) -> "RabbitMQCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def render_config(
    node: RabbitNode, *, definitions_file: Path | None, seed: RabbitNode | None, tls_cert_dir: Path | None = None
) -> str:
    """A node's ``rabbitmq.conf``: the settings of ``deploy/cloud/brokers/rabbitmq/rabbitmq.conf``
    with loopback listeners on the node's ports and its files under the test's directory; with
    ``tls_cert_dir`` (``deploy/certs``' layout) also its mutual-TLS listener and certificate
    login, beside the password listener."""
    lines = [
        f"listeners.tcp.default = 127.0.0.1:{node.amqp_port}",
        f"mqtt.listeners.tcp.default = 127.0.0.1:{node.mqtt_port}",
        "mqtt.allow_anonymous = false",
        "mqtt.vhost = /",
        "mqtt.exchange = amq.topic",
        f"mqtt.subscription_ttl = {SESSION_TTL_MS}",
        # mosquitto's max_inflight_messages: the gateways acknowledge a request after handling it
        "mqtt.prefetch = 20",
        "mqtt.tcp_listen_options.nodelay = true",  # mosquitto's set_tcp_nodelay
        "loopback_users = none",
        "log.console = false",
        "log.file.level = info",
    ]
    if tls_cert_dir is not None:
        lines += [
            f"mqtt.listeners.ssl.default = 127.0.0.1:{node.mqtt_tls_port}",
            f"ssl_options.cacertfile = {tls_cert_dir / 'ca.crt'}",
            f"ssl_options.certfile = {tls_cert_dir / 'broker.crt'}",
            f"ssl_options.keyfile = {tls_cert_dir / 'broker.key'}",
            "ssl_options.verify = verify_peer",
            "ssl_options.fail_if_no_peer_cert = true",
            "ssl_options.versions.1 = tlsv1.3",
            # the certificate's CN is the username (mosquitto: use_identity_as_username)
            "mqtt.ssl_cert_login = true",
            "ssl_cert_login_from = common_name",
        ]
    if definitions_file is not None:
        lines.append(f"load_definitions = {definitions_file}")
    if seed is not None:
        lines += [
            "cluster_formation.peer_discovery_backend = classic_config",
            f"cluster_formation.classic_config.nodes.1 = {seed.name}",
            f"cluster_formation.classic_config.nodes.2 = {node.name}",
        ]
    return "\n".join(lines) + "\n"
