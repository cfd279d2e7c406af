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
alike.

``rollback`` signs one instruction per gateway (``shared.model.bundle.sign_rollback``): "replace
the model you run with your previous one", naming both. The operator names neither: they come
from the registry's log of what each gateway confirmed running -- its newest ``active`` row is
what it runs, the one before is its previous model (the file a gateway keeps for rollback is the
model its current one replaced, which the log saw in that order). A gateway whose log holds only
one model is not asked. If the registry is behind (a deploy the gateway installed while nobody
listened), the gateway refuses the instruction as stale and its answer brings the registry up to
date, so asking again works. Gateways do the checking (``edge_client.models``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Literal

from shared.model.bundle import ModelBundle, sign_rollback
from shared.protocol.envelope import Message
from shared.protocol.messages import ModelAnnouncement
from shared.protocol.messages.deployment import ModelPush, ModelRollback, ModelStatus
from shared.protocol.topics import AGGREGATOR_ID
from shared.signing import SigningKey

from .registry import Deployment, Registry
from .rounds import RoundEngine

log = logging.getLogger(__name__)

__all__ = ["DeploymentResult", "deploy", "rollback", "rollback_plan"]

MODELS_CHANNEL = "models"
#: The model kinds (``shared.model.KINDS``) as an announcement's ``kind`` field spells them.
_ANNOUNCED_KINDS: dict[str, Literal["boosted", "forest", "single"]] = {
    "boosted": "boosted",
    "forest": "forest",
    "single": "single",
}


@dataclass
class DeploymentResult:
    """Per gateway: the ``ModelStatus`` it answered, ``pending`` (no answer yet), or ``skipped``
    (not asked, with the reason: a rollback with no previous model known)."""

    label: str
    statuses: dict[str, ModelStatus] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

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
            detail = (
                f"kept: {pushed[0]}:v{pushed[1]} was rejected"
                if pushed is not None and runs != pushed
                else status.reason
            )
            registry.set_deployment(*runs, client, "active", detail)
    if pushed is not None:
        for client in result.pending:
            registry.set_deployment(*pushed, client, "pending", "queued by the broker until the gateway is back")


def deploy(
    engine: RoundEngine,
    registry: Registry,
    signing_key: SigningKey,
    model_id: str,
    version: int | None,
    clients: list[str],
    *,
    target: str = "",
    deadline_s: float = 30.0,
) -> DeploymentResult:
    """Sign and push ``model_id`` (``version`` None: the latest) to ``clients``. A personalised
    model (``target``, by default the one it was registered for) goes to that gateway only."""
    record, model = registry.model(model_id, version)
    target = target or record.target
    if target and clients != [target]:
        raise ValueError(f"a model personalised for {target!r} goes to that gateway only, not to {clients}")
    bundle = ModelBundle.create(
        model, model_id=record.model_id, version=record.version, signing_key=signing_key, target=target
    )
    data = bundle.to_bytes()
    transport = engine.transport
    if not target:
        kind = _ANNOUNCED_KINDS.get(record.kind)
        if kind is None:
            raise ValueError(f"{record.label}: kind {record.kind!r} is not one of {tuple(_ANNOUNCED_KINDS)}")
        announcement = ModelAnnouncement(
            record.model_id,
            record.version,
            record.algorithm,
            record.feature_set_version,
            bundle.sha256,
            len(data),
            kind,
            target,
        )
        transport.publish(
            engine.layout.fleet(MODELS_CHANNEL), Message.create(announcement, sender=AGGREGATOR_ID), retain=True
        )
    result = _push(
        engine, f"deploy-{record.model_id}-v{record.version}", ModelPush(data), clients, deadline_s, record.label
    )
    _record(registry, result, (record.model_id, record.version))
    log.info(
        "model deployed",
        extra={"model": record.label, "active": result.active, "rejected": result.rejected, "pending": result.pending},
    )
    return result


def rollback_plan(
    registry: Registry, clients: list[str]
) -> tuple[dict[str, tuple[Deployment, Deployment]], dict[str, str]]:
    """Per gateway (what it runs, its previous model) from the registry's log, and the gateways
    that cannot be asked, with why."""
    history: dict[str, list[Deployment]] = {}
    for row in registry.deployments():  # newest first
        if row.state == "active":
            history.setdefault(row.client, []).append(row)
    plans, skipped = {}, {}
    for client in clients:
        rows = history.get(client, [])
        if len(rows) >= 2:
            plans[client] = (rows[0], rows[1])
        elif rows:
            skipped[client] = f"no previous model to roll back to: the registry has seen it run only {rows[0].label}"
        else:
            skipped[client] = (
                "no previous model to roll back to: the registry has no model confirmed running "
                "on it (deploy with this registry first)"
            )
    return plans, skipped


def rollback(
    engine: RoundEngine,
    registry: Registry,
    signing_key: SigningKey,
    clients: list[str],
    *,
    reason: str = "",
    deadline_s: float = 30.0,
) -> DeploymentResult:
    """Ask each of ``clients`` with a signed instruction to go from the model it runs back to
    its previous one (``rollback_plan``); the registry records where each ended up."""
    plans, skipped = rollback_plan(registry, clients)
    requests = {
        client: sign_rollback(
            signing_key,
            client=client,
            model_id=previous.model_id,
            version=previous.version,
            replaces_model_id=runs.model_id,
            replaces_version=runs.version,
            reason=reason,
        )
        for client, (runs, previous) in plans.items()
    }
    result = (
        _push(engine, "rollback", requests, list(requests), deadline_s, "rollback")
        if requests
        else DeploymentResult("rollback")
    )
    result.skipped = skipped
    _record(registry, result)
    log.info(
        "model rollback",
        extra={
            "active": result.active,
            "rejected": result.rejected,
            "pending": result.pending,
            "skipped": sorted(skipped),
        },
    )
    return result


def _push(
    engine: RoundEngine,
    job: str,
    body: ModelPush | dict[str, ModelRollback],
    clients: list[str],
    deadline_s: float,
    label: str,
) -> DeploymentResult:
    result = engine.run_round(
        f"{job}-{time.time_ns()}", 1, body, clients, deadline_s=deadline_s, min_replies=0, expect=ModelStatus
    )
    out = DeploymentResult(label)
    for client, message in result.replies.items():
        out.statuses[client] = message.body
    for client, error in result.errors.items():
        out.statuses[client] = ModelStatus("rejected", reason=f"{error.code}: {error.message}")
    out.pending = sorted(result.timed_out)
    return out
