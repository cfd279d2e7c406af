"""The demo's events: what happened during a run, one named type per kind.

The orchestrator and its REST-driven training record them in order; the live view tells each
as a line (:mod:`aggregator.demo.view`) and the report folds them into its facts
(:func:`aggregator.demo.report.report_from_events`), each kind with a handler of its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from .decisions import DeploymentDecision, PersonalDecision

__all__ = [
    "LOCAL_ONLY",
    "DemoEvent",
    "Evaluation",
    "FedGASettings",
    "FleetDeployed",
    "GatewaysSatOut",
    "Note",
    "Phase",
    "PersonalJob",
    "PersonalTrees",
    "PrivacySettings",
    "Progress",
    "Ready",
    "ReplayFailed",
    "StepDecided",
    "Traffic",
    "TrainingFailed",
    "TreeDeployed",
]

#: The model name of the local-only baseline's scoring (every gateway its own model).
LOCAL_ONLY = "local-only"


@dataclass(frozen=True)
class DemoEvent:
    """Any event; ``t``: when it was recorded (Unix time)."""

    t: float = field(default_factory=time.time, kw_only=True)


@dataclass(frozen=True)
class Note(DemoEvent):
    """A sentence of the demo's own (what it starts, kills, waits for)."""

    text: str


@dataclass(frozen=True)
class PrivacySettings:
    """The fleet jobs' privacy settings as the server's algorithms resolve the demo's configs
    (``training.privacy_settings``): protocol, secure aggregation, minimum crowd, the gateways,
    and each algorithm's epsilon per window per training (private protocol only)."""

    protocol: str = ""
    secure_aggregation: bool = False
    min_crowd: int = 0
    gateways: int = 0
    dp_epsilon: dict[str, float] = field(default_factory=dict)

    @property
    def epsilons(self) -> dict[str, float]:
        """Algorithm -> epsilon per window per training; empty without the private protocol."""
        return dict(self.dp_epsilon) if self.protocol == "private" else {}


@dataclass(frozen=True)
class Ready(DemoEvent):
    """The server is up; the fleet jobs' privacy settings."""

    privacy: PrivacySettings


@dataclass(frozen=True)
class Phase(DemoEvent):
    """A step the aggregator starts (training, deploying)."""

    name: str


@dataclass(frozen=True)
class Progress(DemoEvent):
    """One round of a server job: how many gateways were asked and answered, its metrics."""

    job: str
    job_id: str
    algorithm: str
    step: int
    total: int
    answered: int
    selected: int
    metrics: dict[str, float]
    elapsed_s: float


@dataclass(frozen=True)
class Evaluation(DemoEvent):
    """A held-out scoring of one model (``model="local-only"``: every gateway's own model).

    ``per_client``: the federated evaluation's metrics per gateway (``n``, ``accuracy``, ...);
    ``metrics``: pooled (empty for the local-only models); ``class_counts``: held-out windows
    per true class; ``rescored``: the deployed model's label when this re-scores it, with
    ``first_windows`` (its held-out windows per gateway at its first scoring) and ``note`` (why
    the windows differ)."""

    model: str
    step: str
    per_client: dict[str, dict[str, float]]
    metrics: dict[str, float] = field(default_factory=dict)
    label: str = ""
    class_counts: tuple[int, ...] = ()
    rescored: str = ""
    first_windows: dict[str, int] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class TrainingFailed(DemoEvent):
    """A job or its held-out scoring that failed, and why."""

    model: str
    message: str


@dataclass(frozen=True)
class GatewaysSatOut(DemoEvent):
    """The gateways that missed (part of) a job: gateway -> why."""

    job: str
    rounds: int
    gateways: dict[str, str]


@dataclass(frozen=True)
class StepDecided(DemoEvent):
    """What a training step decided to deploy, and why."""

    decision: DeploymentDecision


@dataclass(frozen=True)
class FleetDeployed(DemoEvent):
    """A model deployed (or rolled out) to the fleet, as the registry recorded each gateway."""

    model: str
    algorithm: str
    version: int
    accuracy: float
    windows: int
    active: list[str]
    rejected: dict[str, str]
    pending: list[str]


@dataclass(frozen=True)
class FedGASettings:
    """The FedGA-Tree job's settings as the server's algorithm resolves them (Table II's names:
    G generations, population P, epsilon of the noisy counts, depth range)."""

    generations: int
    population_size: int
    epsilon: float
    d_min: int
    d_max: int


@dataclass(frozen=True)
class PersonalJob:
    """The FedGA-Tree step: its job, its settings, the federated model its trees are compared
    with, and how long the job took."""

    job_id: str
    settings: FedGASettings
    federated: str
    elapsed_s: float


@dataclass(frozen=True)
class PersonalTrees(DemoEvent):
    """The third contender's outcome: per gateway, its tree against the federated model."""

    job: PersonalJob
    decisions: tuple[PersonalDecision, ...]


@dataclass(frozen=True)
class TreeDeployed(DemoEvent):
    """A gateway's own FedGA tree deployed to that gateway alone."""

    model: str
    gateway: str
    active: list[str]
    rejected: dict[str, str]
    pending: list[str]


@dataclass(frozen=True)
class Traffic(DemoEvent):
    """The server's MQTT bytes (sent + received) during one step."""

    phase: str
    bytes: int


@dataclass(frozen=True)
class ReplayFailed(DemoEvent):
    """A gateway's session replay that stopped with an error (the demo goes on with the others)."""

    client: str
    message: str
