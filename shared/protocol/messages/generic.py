"""Messages every participant speaks, whatever the algorithm.

Algorithm-specific bodies live beside this module, one module per algorithm, named after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..envelope import message_type


@message_type("hello")
@dataclass(frozen=True)
class Hello:
    """A gateway introduces itself: what it runs and which features it produces."""

    software_version: str
    feature_set_version: str = ""
    n_features: int = 0
    capabilities: tuple[str, ...] = ()


@message_type("describe")
@dataclass(frozen=True)
class Describe:
    """Asks a gateway to answer with its ``Hello``."""


@message_type("status")
@dataclass(frozen=True)
class Status:
    """Presence and health; published retained (and as the MQTT last will with online=False)."""

    online: bool
    active_model: str = ""
    n_windows: int = 0
    n_labelled: int = 0
    detail: dict[str, str] = field(default_factory=dict)


@message_type("error")
@dataclass(frozen=True)
class ErrorReply:
    """The request named by ``re`` failed on the receiver; ``code`` is machine-readable."""

    code: str
    message: str
    request_type: str = ""


@message_type("ack")
@dataclass(frozen=True)
class Ack:
    """The request named by ``re`` was received and applied (for requests with no data reply)."""

    note: str = ""


@message_type("ping")
@dataclass(frozen=True)
class Ping:
    """Asks a participant to answer with a ``Pong``; used for liveness and latency checks."""

    payload: bytes = b""
    delay_s: float = 0.0


@message_type("pong")
@dataclass(frozen=True)
class Pong:
    payload: bytes = b""


@message_type("model_announcement")
@dataclass(frozen=True)
class ModelAnnouncement:
    """A model version is available: what it is, and how to check the bytes that follow."""

    model_id: str
    version: int
    algorithm: str
    feature_set_version: str
    sha256: bytes
    size: int
    kind: Literal["boosted", "forest", "single"] = "boosted"
    target: str = ""  # a client id for a personalised model, "" for the whole fleet

    def __post_init__(self) -> None:
        if len(self.sha256) != 32:
            raise ValueError(f"sha256 must be 32 bytes, got {len(self.sha256)}")
        if self.size < 0 or self.version < 0:
            raise ValueError("size and version must be >= 0")
