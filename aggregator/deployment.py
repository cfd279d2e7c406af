"""Deploying a registered model version to gateways, and rolling it back.

``deploy`` signs the model into a bundle (``shared.model.bundle``, the aggregator's Ed25519
key), publishes a retained ``ModelAnnouncement`` on the fleet topic (what is current, for
dashboards -- personalised models are announced to nobody else), and sends the bundle as a
``ModelPush`` to each target gateway's inbox: chunked, QoS 1, queued by the broker for gateways
that are offline. Gateways answer ``ModelStatus`` (active / rejected with the reason); a gateway
that has not answered by the deadline stays ``pending`` in the registry and installs the model
when it comes back.

Every answer also says which model the gateway runs afterwards (``active_model_id`` /
``active_version``), whether the request took effect or not; the registry records that as the
gateway's ``active`` version, so ``wheelfed model list`` follows deploys, refusals and rollbacks
alike (a rollback names no model: only the answers know where each gateway ended up).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from shared.model.bundle import ModelBundle
from shared.protocol.envelope import Message
from shared.protocol.messages import ModelAnnouncement
from shared.protocol.messages.deployment import ModelPush, ModelRollback, ModelStatus
from shared.protocol.topics import AGGREGATOR_ID
from shared.signing import SigningKey

from .registry import Registry
from .rounds import RoundEngine

log = logging.getLogger(__name__)

__all__ = ["DeploymentResult", "deploy", "rollback"]

MODELS_CHANNEL = "models"


@dataclass
class DeploymentResult:
    """Per gateway: the ``ModelStatus`` it answered, or ``pending`` (no answer yet)."""

    label: str
    statuses: dict[str, ModelStatus] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)

    @property
    def active(self) -> list[str]:
        return sorted(c for c, s in self.statuses.items() if s.state in ("active", "unchanged"))

    @property
    def rejected(self) -> dict[str, str]:
        return {c: s.reason for c, s in self.statuses.items() if s.state == "rejected"}


def _record(registry: Registry, result: DeploymentResult, pushed: tuple[str, int] | None = None) -> None:
    """The gateways' answers: the version each one runs now, and (for a deploy of ``pushed``)
    which gateways refused it or have not answered yet."""
    for client, status in sorted(result.statuses.items()):
        runs = (status.active_model_id, status.active_version) if status.active_model_id else None
        if pushed is not None and status.state == "rejected":
            registry.set_deployment(*pushed, client, "rejected", status.reason)
        if runs is not None:
            detail = (f"kept: {pushed[0]}:v{pushed[1]} was rejected" if pushed is not None and runs != pushed
                      else status.reason)
            registry.set_deployment(*runs, client, "active", detail)
    for client in result.pending if pushed is not None else ():
        registry.set_deployment(*pushed, client, "pending", "queued by the broker until the gateway is back")


def deploy(engine: RoundEngine, registry: Registry, signing_key: SigningKey, model_id: str, version: int | None,
           clients: list[str], *, target: str = "", deadline_s: float = 30.0) -> DeploymentResult:
    """Sign and push ``model_id`` (``version`` None: the latest) to ``clients``. A personalised
    model (``target``, by default the one it was registered for) goes to that gateway only."""
    record, model = registry.model(model_id, version)
    target = target or record.target
    if target and clients != [target]:
        raise ValueError(f"a model personalised for {target!r} goes to that gateway only, not to {clients}")
    bundle = ModelBundle.create(model, model_id=record.model_id, version=record.version, signing_key=signing_key,
                                target=target)
    data = bundle.to_bytes()
    transport = engine.transport
    if not target:
        announcement = ModelAnnouncement(record.model_id, record.version, record.algorithm, record.feature_set_version,
                                         bundle.sha256, len(data), record.kind, target)
        transport.publish(engine.layout.fleet(MODELS_CHANNEL), Message.create(announcement, sender=AGGREGATOR_ID),
                          retain=True)
    result = _push(engine, f"deploy-{record.model_id}-v{record.version}", ModelPush(data), clients, deadline_s,
                   record.label)
    _record(registry, result, (record.model_id, record.version))
    log.info("model deployed", extra={"model": record.label, "active": result.active, "rejected": result.rejected,
                                      "pending": result.pending})
    return result


def rollback(engine: RoundEngine, clients: list[str], *, registry: Registry | None = None, reason: str = "",
             deadline_s: float = 30.0) -> DeploymentResult:
    """Ask ``clients`` to go back to their previous model; ``registry`` records where each ended up."""
    result = _push(engine, "rollback", ModelRollback(reason), clients, deadline_s, "rollback")
    if registry is not None:
        _record(registry, result)
    log.info("model rollback", extra={"active": result.active, "rejected": result.rejected, "pending": result.pending})
    return result


def _push(engine: RoundEngine, job: str, body: object, clients: list[str], deadline_s: float,
          label: str) -> DeploymentResult:
    result = engine.run_round(f"{job}-{time.time_ns()}", 1, body, clients, deadline_s=deadline_s, min_replies=0,
                              expect=ModelStatus)
    out = DeploymentResult(label)
    for client, message in result.replies.items():
        out.statuses[client] = message.body
    for client, error in result.errors.items():
        out.statuses[client] = ModelStatus("rejected", reason=f"{error.code}: {error.message}")
    out.pending = sorted(result.timed_out)
    return out
