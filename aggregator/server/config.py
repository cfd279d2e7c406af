"""``wheelfed server``'s settings: defaults, then a TOML file, then ``WHEELFED_*`` variables, then
the command line -- each later source overrides the earlier ones, field by field.

The file holds the same names as :class:`ServerConfig`'s fields, at top level::

    registry = "postgresql+psycopg://wheelfed@db.clinic.lan/wheelfed"
    http_port = 8080
    mqtt_host = "broker.clinic.lan"
    signing_key = "/etc/wheelfed/aggregator.key"
    operator_tokens = ["..."]

Each field's variable is ``WHEELFED_`` plus its name in capitals (``WHEELFED_REGISTRY``,
``WHEELFED_MQTT_HOST``, ``WHEELFED_MQTT_PASSWORD`` -- the password is read from the environment
or the file, never from the command line, where ``ps`` would show it); lists in a variable are
comma-separated. A misspelt key or a value of the wrong type is one :class:`ValueError` naming it.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared.protocol.messages.generic import MAX_WINDOW_COUNT

from .gateway_input import MAX_WINDOWS_PER_S, NEW_GATEWAY_WINDOWS

if TYPE_CHECKING:
    from shared.transport.mqtt import MqttConfig

__all__ = ["ENV_PREFIX", "LOOPBACK_HOSTS", "ServerConfig"]

ENV_PREFIX = "WHEELFED_"
#: The names a browser on the server's machine uses for it (a ``Host`` header keeps an IPv6
#: literal's brackets).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


@dataclass(frozen=True)
class ServerConfig:
    """Everything ``wheelfed server`` needs to run (see the module docstring for the sources)."""

    #: SQLite file or database URL of the registry (models, jobs, gateways, schedules).
    registry: str = "wheelfed-registry.db"
    #: Address and port of the HTTP API and dashboard (port 0: any free port, printed at start).
    listen: str = "127.0.0.1"
    http_port: int = 8080
    mqtt_host: str = "127.0.0.1"
    #: None: 8883 with ``tls_ca`` (the TLS broker's port), else 1883 -- as every other command.
    mqtt_port: int | None = None
    mqtt_username: str = "aggregator"
    mqtt_password: str | None = None
    mqtt_protocol: int = 5
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    #: The aggregator's Ed25519 key; without it models are trained and judged but not deployed.
    signing_key: str | None = None
    #: Seconds a round waits for replies, and the share of the selected gateways it needs.
    deadline_s: float = 120.0
    min_fraction: float = 0.5
    #: Seconds between two looks at the schedules.
    schedule_tick_s: float = 30.0
    #: Bearer tokens: ``read_tokens`` may read, ``operator_tokens`` may also start, cancel and
    #: deploy. With no token configured the API is open (bind it to loopback only).
    read_tokens: tuple[str, ...] = field(default_factory=tuple)
    operator_tokens: tuple[str, ...] = field(default_factory=tuple)
    #: The most epsilon (at ``privacy_delta``) any window may spend over its lifetime, every
    #: private job that used it together (``aggregator.privacy.ledger``): a job that would take a
    #: window past it is refused.
    privacy_epsilon_cap: float = 10.0
    privacy_delta: float = 1e-6
    #: ``Host`` header names the HTTP API answers (besides ``listen`` when it is a specific
    #: address; ``"*"``: any, ``"*.example.org"``: a domain's): others get a 400, which keeps web
    #: pages from reaching a loopback API through a name of their own (DNS rebinding).
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    #: The largest request body the API reads, in bytes (larger: 413, before it is read).
    max_request_bytes: int = 1024 * 1024
    #: The most windows per second a gateway's reported counts are credited with
    #: (``aggregator.server.gateway_input``).
    max_windows_per_s: float = MAX_WINDOWS_PER_S
    #: The most windows the first status of a gateway the registry has never seen is credited
    #: with (``aggregator.server.gateway_input``); its credit then grows at ``max_windows_per_s``.
    new_gateway_windows: int = NEW_GATEWAY_WINDOWS
    #: After each training, ask every participant for the local-only baseline (a CART on its own
    #: training windows, scored on its held-out ones; PRIVACY.md says what its counts reveal).
    local_baseline: bool = True

    def __post_init__(self) -> None:
        if self.mqtt_port is None:
            object.__setattr__(self, "mqtt_port", self.broker_port)
        for name in ("http_port", "mqtt_port"):
            value = getattr(self, name)
            if not 0 <= value <= 65535 or (name == "mqtt_port" and value == 0):
                raise ValueError(f"{name} must be a TCP port, got {value}")
        if self.mqtt_protocol not in (4, 5):
            raise ValueError(f"mqtt_protocol must be 5 or 4 (MQTT 3.1.1), got {self.mqtt_protocol}")
        if not self.deadline_s > 0 or not self.schedule_tick_s > 0:
            raise ValueError("deadline_s and schedule_tick_s must be > 0")
        if not 0 < self.min_fraction <= 1:
            raise ValueError(f"min_fraction must lie in (0, 1], got {self.min_fraction}")
        if (self.tls_cert or self.tls_key) and not self.tls_ca:
            raise ValueError("tls_cert/tls_key need tls_ca")
        self.privacy_cap()  # validates the cap
        if not self.allowed_hosts:
            raise ValueError("allowed_hosts must name at least one host (\"*\": any)")
        if not 0 < self.max_request_bytes <= 2**31 - 1:
            raise ValueError(f"max_request_bytes must lie in [1, 2**31 - 1], got {self.max_request_bytes}")
        if not 0 < self.max_windows_per_s <= 1e6:
            raise ValueError(f"max_windows_per_s must lie in (0, 1e6], got {self.max_windows_per_s}")
        if not 0 <= self.new_gateway_windows <= MAX_WINDOW_COUNT:
            raise ValueError(f"new_gateway_windows must lie in [0, {MAX_WINDOW_COUNT}], got {self.new_gateway_windows}")

    def privacy_cap(self):
        """The privacy cap these settings describe (``aggregator.privacy.ledger.PrivacyCap``)."""
        from ..privacy.ledger import PrivacyCap

        return PrivacyCap(self.privacy_epsilon_cap, self.privacy_delta)

    @classmethod
    def load(
        cls, path: str | Path | None = None, *, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> ServerConfig:
        """Defaults, then the TOML file at ``path``, then ``environ`` (default ``os.environ``),
        then ``overrides`` whose value is not None (the command line's options)."""
        values: dict[str, Any] = {}
        if path is not None:
            try:
                data = tomllib.loads(Path(path).read_text())
            except tomllib.TOMLDecodeError as exc:
                raise ValueError(f"{path} is not valid TOML: {exc}") from None
            values.update(_typed(data, f"{path}: ", from_text=False))
        env = os.environ if environ is None else environ
        values.update(
            _typed(
                {
                    f.name: env[ENV_PREFIX + f.name.upper()]
                    for f in dataclasses.fields(cls)
                    if ENV_PREFIX + f.name.upper() in env
                },
                "$" + ENV_PREFIX,
                from_text=True,
            )
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def broker_port(self) -> int:
        """``mqtt_port``, else the TLS broker's port (8883) with ``tls_ca``, else 1883."""
        if self.mqtt_port is not None:
            return self.mqtt_port
        return 8883 if self.tls_ca else 1883

    def mqtt_config(self) -> MqttConfig:
        """The broker connection these settings describe (mutual TLS when ``tls_ca`` is set: the
        certificate is then the identity, so no user name or password is sent)."""
        from shared.transport.mqtt import MqttConfig, TlsConfig

        tls = TlsConfig(self.tls_ca, self.tls_cert, self.tls_key) if self.tls_ca else None
        return MqttConfig(
            host=self.mqtt_host,
            port=self.broker_port,
            protocol=4 if self.mqtt_protocol == 4 else 5,  # __post_init__ refuses any other
            tls=tls,
            username=None if tls else self.mqtt_username,
            password=None if tls else self.mqtt_password,
        )

    def public(self) -> dict[str, Any]:
        """The settings without secrets (for the log and ``/api/health``)."""
        hidden = {"mqtt_password", "read_tokens", "operator_tokens"}
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in hidden}


def _typed(data: Mapping[str, Any], where: str, *, from_text: bool) -> dict[str, Any]:
    """``data``'s values converted to the fields' types; unknown names and bad values raise."""
    fields = {f.name: f for f in dataclasses.fields(ServerConfig)}
    out: dict[str, Any] = {}
    for name, value in data.items():
        label = f"{where}{name.upper() if where.startswith('$') else name}"
        if name not in fields:
            raise ValueError(f"{label}: unknown setting (known: {', '.join(fields)})")
        kind = str(fields[name].type).removesuffix(" | None")
        try:
            if kind.startswith("tuple"):
                items = value.split(",") if from_text and isinstance(value, str) else value
                if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
                    raise TypeError("expected a list of strings")
                out[name] = tuple(i.strip() for i in items if i.strip())
            elif kind == "int":
                out[name] = int(value) if from_text else _exact(value, int)
            elif kind == "float":
                out[name] = float(value) if from_text else float(_exact(value, (int, float)))
            elif kind == "bool":
                out[name] = _switch(value) if from_text else _exact_bool(value)
            else:
                out[name] = _exact(value, str)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{label}: {exc} (got {value!r})") from None
    return out


def _switch(text: str) -> bool:
    """An on/off setting written as text (an environment variable)."""
    words = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
    if text.strip().lower() not in words:
        raise ValueError("expected true or false")
    return words[text.strip().lower()]


def _exact_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError("expected true or false")
    return value


def _exact(value: Any, kind: type | tuple[type, ...]) -> Any:
    if isinstance(value, bool) or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise TypeError(f"expected {names}")
    return value
