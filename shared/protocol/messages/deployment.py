"""Model deployment and live recognition: what moves between the aggregator and the gateways
once a model exists.

* ``ModelPush`` (aggregator -> one gateway's inbox, chunked, queued by the broker while the
  gateway is offline): a signed ``shared.model.bundle`` to verify, persist and activate; the
  gateway answers ``ModelStatus``.
* ``ModelRollback``: a signed instruction to one gateway to go back from the model it runs to its
  previous one, naming both (``shared.model.bundle.sign_rollback``); the gateway refuses it with
  a reason if it is unsigned, not for it, replayed, or its models are no longer the named ones.
* ``ModelAnnouncement`` (generic, retained on the fleet topic) says which version is current --
  for dashboards and operators; the bundle itself travels as ``ModelPush`` (a retained message
  cannot be chunked), which the broker queues for a gateway that is offline (persistent session,
  14 days).
* ``PredictionBatch`` and ``AlertEvent`` (gateway -> aggregator, unsolicited on its outbox): live
  recognition results, sent at a configurable rate; alerts also work offline (sent later).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np

from ..envelope import message_type
from ..schema import ArraySpec


@message_type("model_push")
@dataclass(frozen=True)
class ModelPush:
    """A signed model bundle (``ModelBundle.to_bytes()``) for this gateway."""

    bundle: bytes

    def __post_init__(self) -> None:
        if not self.bundle:
            raise ValueError("bundle must not be empty")


@message_type("model_rollback")
@dataclass(frozen=True)
class ModelRollback:
    """ "``client``: replace ``replaces_model_id:v{replaces_version}`` (the model you run) with
    ``model_id:v{version}`` (your previous one)", signed by the aggregator's key over every other
    field (``shared.model.bundle.rollback_payload``). ``issued_ns`` (the aggregator's clock) orders
    rollbacks, so a gateway can refuse one older than the last it applied. Every field has a
    default so that an unsigned rollback -- ``{reason}`` only, as WheelFed sent them before they
    were signed -- still decodes and is refused with that reason rather than as garbage."""

    reason: str = ""
    model_id: str = ""
    version: int = -1
    replaces_model_id: str = ""
    replaces_version: int = -1
    client: str = ""
    issued_ns: int = 0
    key_id: str = ""
    signature: bytes = b""

    def __post_init__(self) -> None:
        # The signed framing packs these as int64: a larger number must fail here, at decoding.
        for name in ("version", "replaces_version", "issued_ns"):
            if not -1 <= getattr(self, name) < 2**63:
                raise ValueError(f"{name} must be in [-1, 2**63), got {getattr(self, name)}")


#: ``ModelStatus.state``: the outcome of a push or rollback.
ModelState = Literal["active", "rejected", "unchanged"]


@message_type("model_status")
@dataclass(frozen=True)
class ModelStatus:
    """A gateway's models after a push or rollback: ``state`` of the request ("active": the
    pushed model now runs; "rejected": it failed a check named in ``reason``, the previous
    model keeps running; "unchanged": nothing to do)."""

    state: ModelState
    active_model_id: str = ""
    active_version: int = -1
    previous_version: int = -1
    reason: str = ""


@message_type("predictions")
@dataclass(frozen=True)
class PredictionBatch:
    """Live predictions since the last batch: per window its end time, the predicted class
    index (into ``classes``), its probability (in [0, 1]; a batch with another is refused at
    decode) and the model latency."""

    model_id: str
    model_version: int
    classes: tuple[str, ...]
    window_end_us: Annotated[np.ndarray, ArraySpec(("int64",), ndim=1)]
    predicted: Annotated[np.ndarray, ArraySpec(("int16", "int32"), ndim=1)]
    probability: Annotated[np.ndarray, ArraySpec(("float32",), ndim=1, finite=True)]
    latency_ms: Annotated[np.ndarray, ArraySpec(("float32",), ndim=1, finite=True)]

    def __post_init__(self) -> None:
        n = self.window_end_us.shape[0]
        for name in ("predicted", "probability", "latency_ms"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"{name} must have one entry per window ({n})")
        if n and (self.predicted.min() < 0 or self.predicted.max() >= max(len(self.classes), 1)):
            raise ValueError("predicted class index out of range")
        if n and not (self.probability.min() >= 0 and self.probability.max() <= 1):
            raise ValueError("probability must lie in [0, 1]")


@message_type("alert")
@dataclass(frozen=True)
class AlertEvent:
    """A local alert rule fired (``started_us``/``detected_us``: sensor time) or cleared."""

    rule: str
    state: Literal["raised", "cleared"]
    started_us: int
    detected_us: int
    message: str
    detail: dict[str, str] = field(default_factory=dict)
