"""The versioned envelope every WheelFed message travels in, and the registry of body types.

Wire form: one CBOR map ``{"v", "type", "job", "round", "id", "re", "from", "ts", "body"}``.
``id`` makes rounds idempotent (receivers drop duplicates), ``re`` ties a reply to its request,
``job``/``round`` let the aggregator discard late replies of closed rounds. Body classes register
under their type name with ``@message_type("name")``; decoding an unregistered type is an error.

``v`` is the protocol version the message is written in: this build's or the one before (see
``PROTOCOL_VERSION``). A message of the version after this build's decodes to its envelope with
a :class:`NewerVersion` body, so that a gateway one version behind can refuse it naming the
version it needs; any other version is refused at decode.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from .codec import dumps_value, loads_value
from .errors import SchemaError, UnknownMessageType, UnsupportedVersion
from .limits import DEFAULT_LIMITS, DecodeLimits
from .schema import from_wire, to_wire

#: The version this build speaks. Bumped on every wire change: a message type added, removed or
#: renamed, a field added, removed or re-typed, or the meaning of a field's bytes changed
#: (``shared/protocol/wire.py`` fingerprints every type; ``wire_versions.json`` holds each
#: released version's fingerprint and a test fails when they disagree). Version 2: the private
#: protocols (``fedscs_xgb.private_*``, ``fedforest.dp_*``, Skellam noise shares) and committed
#: secure-aggregation bundles.
PROTOCOL_VERSION = 2
#: What this build decodes and can write: its own version and the one before it, so that an
#: aggregator of version N trains with gateways of N-1 and N (docs/protocol.md, "Versions").
SUPPORTED_VERSIONS = frozenset({PROTOCOL_VERSION - 1, PROTOCOL_VERSION})

#: Client ids become MQTT topic levels and broker usernames: no '/', '+', '#', no spaces.
CLIENT_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

_BODY_TYPES: dict[str, type] = {}
_TYPE_NAMES: dict[type, str] = {}

B = TypeVar("B")


def message_type(name: str) -> Callable[[type[B]], type[B]]:
    """Class decorator registering a body dataclass under the wire type ``name``."""

    def register(cls: type[B]) -> type[B]:
        if name in _BODY_TYPES and _BODY_TYPES[name] is not cls:
            raise ValueError(f"message type {name!r} is already registered to {_BODY_TYPES[name].__name__}")
        _BODY_TYPES[name] = cls
        _TYPE_NAMES[cls] = name
        return cls

    return register


def type_name_of(body: object) -> str:
    """Wire type name of a registered body instance."""
    try:
        return _TYPE_NAMES[type(body)]
    except KeyError:
        raise TypeError(f"{type(body).__name__} is not a registered message body (use @message_type)") from None


def registered_message_types() -> dict[str, type]:
    """Every registered wire type name and its body class (for docs, fuzzing, introspection)."""
    return dict(_BODY_TYPES)


def body_class(name: str) -> type:
    """The body class registered under ``name``; an unknown name is a decoding error."""
    try:
        return _BODY_TYPES[name]
    except KeyError:
        raise UnknownMessageType(f"unknown message type {name!r}") from None


def new_message_id() -> str:
    """128 random bits as hex: unique without coordination between gateways."""
    return secrets.token_hex(16)


def validate_client_id(client_id: str) -> str:
    """Client ids become MQTT topic levels and broker usernames, so they are restricted."""
    if not isinstance(client_id, str) or not CLIENT_ID_PATTERN.match(client_id):
        raise ValueError(
            f"invalid client id {client_id!r}: use 1-64 characters from A-Z a-z 0-9 _ . - "
            "starting with a letter or digit (it becomes an MQTT topic level and broker username)"
        )
    return client_id


@dataclass(frozen=True)
class Envelope:
    """Routing and idempotency metadata of one message."""

    type: str
    sender: str
    job: str = ""
    round: int = 0
    msg_id: str = field(default_factory=new_message_id)
    reply_to: str = ""
    ts: float = field(default_factory=time.time)
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class Message:
    """An envelope with its typed body."""

    envelope: Envelope
    body: Any

    @classmethod
    def create(
        cls,
        body: object,
        *,
        sender: str,
        job: str = "",
        round: int = 0,
        reply_to: str = "",
        version: int = PROTOCOL_VERSION,
    ) -> "Message":
        """``version``: the protocol version to write the message in (a peer's older one:
        ``encode_message`` leaves out what that version does not know, or refuses)."""
        if version not in SUPPORTED_VERSIONS:
            raise ValueError(f"protocol version {version} is not one this build writes ({sorted(SUPPORTED_VERSIONS)})")
        envelope = Envelope(
            type=type_name_of(body), sender=sender, job=job, round=round, reply_to=reply_to, version=version
        )
        return cls(envelope, body)

    def reply(self, body: object, *, sender: str) -> "Message":
        """A reply in the same job and round, pointing back at this message."""
        return Message.create(
            body, sender=sender, job=self.envelope.job, round=self.envelope.round, reply_to=self.envelope.msg_id
        )

    @property
    def type(self) -> str:
        return self.envelope.type

    @property
    def sender(self) -> str:
        return self.envelope.sender


def encode_message(message: Message) -> bytes:
    """The wire form: one CBOR map (see the module docstring); arrays as RFC 8746 typed arrays.

    An envelope of an older version gets the body as that version reads it
    (:func:`shared.protocol.wire.downgrade_body`): fields it does not know are left out when they
    hold their defaults, and a body that needs more raises :class:`~shared.protocol.wire.NeedsVersion`."""
    env = message.envelope
    body = to_wire(message.body)
    if env.version != PROTOCOL_VERSION:
        from .wire import downgrade_body

        body = downgrade_body(env.type, message.body, env.version, body)
    wire = {
        "v": env.version,
        "type": env.type,
        "job": env.job,
        "round": env.round,
        "id": env.msg_id,
        "re": env.reply_to,
        "from": env.sender,
        "ts": env.ts,
        "body": body,
    }
    return dumps_value(wire)


@dataclass(frozen=True)
class NewerVersion:
    """The body of a message written in the protocol version after this build's: its envelope
    is read (so that the receiver can answer it), its body is not. A gateway answers such a
    request with an ``error`` of code ``protocol_version`` that names both versions; no message
    of this kind is ever sent (it is not a registered type). Versions further ahead are refused
    at decode like any unsupported version."""

    version: int
    type: str

    def refusal(self, receiver: str) -> str:
        """What the receiver answers: which version it speaks and which the message needs."""
        return (
            f"{receiver} speaks protocol version {PROTOCOL_VERSION} (and {PROTOCOL_VERSION - 1}); this "
            f"{self.type!r} message is version {self.version}: update {receiver} to protocol version "
            f"{self.version}"
        )


@dataclass(frozen=True)
class _WireEnvelope:
    v: int
    type: str
    job: str
    round: int
    id: str
    re: str
    ts: float
    body: dict[str, Any]
    # "from" is a Python keyword; it is checked by hand in decode_message.


def decode_message(data: bytes, *, limits: DecodeLimits = DEFAULT_LIMITS, max_bytes: int | None = None) -> Message:
    """Decode and fully validate one message from untrusted bytes."""
    raw = loads_value(data, limits=limits, max_bytes=max_bytes)
    if not isinstance(raw, dict):
        raise SchemaError("message", f"expected a map, got {type(raw).__name__}")
    version = raw.get("v")
    newer = type(version) is int and version == PROTOCOL_VERSION + 1
    if type(version) is not int or (version not in SUPPORTED_VERSIONS and not newer):
        raise UnsupportedVersion(
            f"protocol version {version!r} is not supported (this build speaks "
            f"{sorted(SUPPORTED_VERSIONS)}: update the older side)"
        )
    fields = dict(raw)
    sender = fields.pop("from", None)
    if not isinstance(sender, str):
        raise SchemaError("message.from", "required text field is missing")
    try:
        validate_client_id(sender)
    except ValueError as exc:
        raise SchemaError("message.from", str(exc)) from None
    wire = from_wire(_WireEnvelope, fields, "message")
    if wire.round < 0:
        raise SchemaError("message.round", "must be >= 0")
    if not wire.id:
        raise SchemaError("message.id", "must not be empty")
    if newer:  # its body is not read: the receiver answers that it needs the newer version
        body: Any = NewerVersion(wire.v, wire.type)
    else:
        body = from_wire(body_class(wire.type), wire.body, "body")
    envelope = Envelope(
        type=wire.type,
        sender=sender,
        job=wire.job,
        round=wire.round,
        msg_id=wire.id,
        reply_to=wire.re,
        ts=wire.ts,
        version=wire.v,
    )
    return Message(envelope, body)
