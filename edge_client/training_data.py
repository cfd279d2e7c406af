"""Where a client half gets its labelled training data: arrays (simulation) or the window store.

The algorithms' client halves ask a ``TrainingData`` for a snapshot when a job starts and keep it
for the job, so windows that arrive mid-job do not change a round's statistics (a new job --
periodic retraining -- sees them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike

from .store import WindowStore

__all__ = ["ClientData", "LabelledData", "NoTrainingData", "StoreTrainingData", "TrainingData"]


class NoTrainingData(Exception):
    """The client has nothing to train on for the requested feature set (an actionable message)."""


@dataclass(frozen=True, eq=False)
class LabelledData:
    """``X`` (n, d) features (NaN = missing), ``y`` (n,) labels: ints, strings or real targets."""

    X: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        X = np.asarray(self.X)
        y = np.asarray(self.y)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (samples, features), got shape {X.shape}")
        if X.dtype.kind not in "iuf":
            raise ValueError(f"X must be numeric, got dtype {X.dtype}")
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {y.shape}")
        if self.feature_names and len(self.feature_names) != X.shape[1]:
            raise ValueError(f"{len(self.feature_names)} feature names for {X.shape[1]} columns")
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "feature_names", tuple(self.feature_names))


class TrainingData(Protocol):
    def labelled(self, feature_set_version: str) -> LabelledData:
        """A snapshot of the labelled windows of ``feature_set_version``."""
        ...


@dataclass(frozen=True, eq=False)
class ClientData:
    """One simulated client: an id and its arrays (``aggregator.simulate`` takes a list of these).

    ``feature_set_version=""`` accepts every job; otherwise a job for another version is refused,
    as a gateway refuses one.
    """

    client_id: str
    X: ArrayLike
    y: ArrayLike
    feature_names: tuple[str, ...] = ()
    feature_set_version: str = ""
    _data: LabelledData = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_data", LabelledData(np.asarray(self.X), np.asarray(self.y), self.feature_names))

    def labelled(self, feature_set_version: str) -> LabelledData:
        if self.feature_set_version and feature_set_version and feature_set_version != self.feature_set_version:
            raise NoTrainingData(f"{self.client_id} holds feature set {self.feature_set_version!r}, "
                                 f"the job asks for {feature_set_version!r}")
        return self._data


@dataclass(frozen=True, eq=False)
class StoreTrainingData:
    """The gateway's labelled windows (``WindowStore.query``), in (start time, id) order."""

    store: WindowStore
    feature_names: tuple[str, ...] = ()

    def labelled(self, feature_set_version: str) -> LabelledData:
        X, y, _ = self.store.query(feature_set_version, labelled_only=True)
        if X.shape[0] == 0:
            raise NoTrainingData(f"no labelled windows of feature set {feature_set_version!r} in the store")
        names = self.feature_names if len(self.feature_names) == X.shape[1] else ()
        return LabelledData(X, y, names)
