"""FedGA-Tree's messages (paper Alg. 1): structures and fitness go round, never thresholds.

A job opens with ``data_shape`` (feature count, names, label set -- no counts), then

1. ``fedga_tree.depth`` (steps 5-8): the client's depth chosen by K-fold cross-validation and
   its sample count plus Laplace noise;
2. ``fedga_tree.structure`` (steps 11-19): given the server's median depth, the client's own
   CART structure (feature ids per slot, ``shared.tree_encoding``; no thresholds), its noisy
   count again (the same value: the noise is drawn once per job), and for regression its two
   votes (Eq. 1: fitness on all data; Eq. 2: elitism);
3. ``fedga_tree.generation`` (steps 26-35), once per generation to that generation's active
   clients: the population's strings; the reply is ONE fitness vector (F1 or MSE per
   candidate) -- plus, from a client that joins late (``join``), its structure, that
   structure's fitness and its noisy count;
4. ``fedga_tree.finish`` (steps 44-49): the final population; each client fits it, keeps the
   candidate that scores best on its own data and sends that tree back as a WheelFed model, so
   that the aggregator can register it and sign it for that gateway only.

Everything before ``finish`` is coarse by construction (PRIVACY.md, "FedGA-Tree").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np

from ..envelope import message_type
from ..schema import ArraySpec

STRINGS = ArraySpec(("int8", "int16", "int32", "int64"), ndim=2)
STRING = ArraySpec(("int8", "int16", "int32", "int64"), ndim=1)
FITNESS = ArraySpec(("float64",), ndim=1, finite=True)


def _slots(depth: int) -> int:
    if not 1 <= depth <= 15:
        raise ValueError(f"depth must lie in 1..15, got {depth}")
    return (1 << depth) - 1


def _check_population(population: np.ndarray, depth: int) -> None:
    if population.shape[1:] != (_slots(depth),) or population.shape[0] < 1:
        raise ValueError(f"population must be (P >= 1, {_slots(depth)}), got {population.shape}")


@dataclass(frozen=True)
class GATask:
    """The job's fixed settings, repeated in every request (a gateway that restarted needs no
        other state). ``classes``: the fleet's label vocabulary (classification; ``integer_classes``:
    the models' classes are its ints); ``epsilon``: the
        Laplace budget of the noisy count (``None``: exact, for experiments); ``train_ratio``: the
        paper's r (share of the local data that fits a structure, the rest scores it);
        ``phi_star``/``theta_star``/``mu_star``: the thresholds of the regression votes (Eq. 1-2)."""

    task: Literal["classification", "regression"]
    feature_set_version: str
    seed: int
    classes: tuple[str, ...] = ()
    integer_classes: bool = False
    cv_folds: int = 5
    d_min: int = 2
    d_max: int = 15
    train_ratio: float = 0.8
    epsilon: float | None = 1.0
    phi_star: float = 0.25
    theta_star: float = 0.02
    mu_star: float = 80.0

    def __post_init__(self) -> None:
        if self.task not in ("classification", "regression"):
            raise ValueError(f"task must be 'classification' or 'regression', got {self.task!r}")
        if not 1 <= self.d_min <= self.d_max <= 15:
            raise ValueError(f"need 1 <= d_min <= d_max <= 15, got {self.d_min}, {self.d_max}")
        if self.cv_folds < 2:
            raise ValueError(f"cv_folds must be >= 2, got {self.cv_folds}")
        if not 0 < self.train_ratio <= 1:
            raise ValueError(f"train_ratio must lie in (0, 1], got {self.train_ratio}")
        if self.epsilon is not None and not self.epsilon > 0:
            raise ValueError(f"epsilon must be > 0 or None, got {self.epsilon}")


@message_type("fedga_tree.depth")
@dataclass(frozen=True)
class GADepthRequest:
    task: GATask


@message_type("fedga_tree.depth_reply")
@dataclass(frozen=True)
class GADepthReply:
    """The depth in ``[d_min, d_max]`` with the best mean cross-validated score (F1 or R²) and
    the sample count plus ``Laplace(1/epsilon)``."""

    depth: int
    noisy_count: float

    def __post_init__(self) -> None:
        if not 1 <= self.depth <= 15 or not np.isfinite(self.noisy_count):
            raise ValueError("depth must lie in 1..15 and noisy_count be finite")


@message_type("fedga_tree.structure")
@dataclass(frozen=True)
class GAStructureRequest:
    task: GATask
    depth: int

    def __post_init__(self) -> None:
        _slots(self.depth)


@message_type("fedga_tree.structure_reply")
@dataclass(frozen=True)
class GAStructureReply:
    """The client's CART structure at the job's depth (``2^depth - 1`` slots), its noisy count
    and, for regression, its votes for fitness on all data (Eq. 1) and for elitism (Eq. 2)."""

    structure: Annotated[np.ndarray, STRING]
    noisy_count: float
    vote_full_data: bool = False
    vote_elitism: bool = False

    def __post_init__(self) -> None:
        if not np.isfinite(self.noisy_count):
            raise ValueError("noisy_count must be finite")


@message_type("fedga_tree.generation")
@dataclass(frozen=True)
class GAGenerationRequest:
    """Score every row of ``population`` (``(P, 2^depth - 1)`` strings). ``full_data``: fit and
    score on all local data (the regression vote's outcome) instead of the r / 1-r split.
    ``join``: this client has not contributed its structure yet (a late joiner)."""

    task: GATask
    depth: int
    generation: int
    population: Annotated[np.ndarray, STRINGS]
    full_data: bool = False
    join: bool = False

    def __post_init__(self) -> None:
        _check_population(self.population, self.depth)


@message_type("fedga_tree.generation_reply")
@dataclass(frozen=True)
class GAGenerationReply:
    """One fitness per candidate (F1 or MSE on the client's validation part). A joiner adds its
    ``structure``, that structure's ``structure_fitness`` and its ``noisy_count``."""

    fitness: Annotated[np.ndarray, FITNESS]
    structure: Annotated[np.ndarray, STRING] = field(default_factory=lambda: np.zeros(0, np.int64))
    structure_fitness: float = 0.0
    noisy_count: float = 0.0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.structure_fitness) and np.isfinite(self.noisy_count)):
            raise ValueError("structure_fitness and noisy_count must be finite")


@message_type("fedga_tree.finish")
@dataclass(frozen=True)
class GAFinishRequest:
    """Fit every row of ``population``, keep the best on local data and return it."""

    task: GATask
    depth: int
    population: Annotated[np.ndarray, STRINGS]
    full_data: bool = False

    def __post_init__(self) -> None:
        _check_population(self.population, self.depth)


@message_type("fedga_tree.finish_reply")
@dataclass(frozen=True)
class GAFinishReply:
    """The client's chosen tree (``TreeEnsemble.to_cbor()``, ``kind="single"``), which row of
    the population it fits and that row's local fitness."""

    model: bytes
    chosen: int
    fitness: float

    def __post_init__(self) -> None:
        if self.chosen < 0 or not np.isfinite(self.fitness):
            raise ValueError("chosen must be >= 0 and fitness finite")
