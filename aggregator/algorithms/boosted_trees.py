"""The server's record of a boosting job's trees, shared by FedSCS-XGB and PAX.

Both grow trees round by round and keep every gateway's margins in step by sending it only the
trees it has not added yet (a ``ModelDelta``); both turn the trees into a ``TreeEnsemble`` for
checkpoints and the final model. What differs between them -- how a round's trees are grown --
stays in their own modules.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shared.model import TreeEnsemble
from shared.objectives import objective_named
from shared.protocol.messages.fedscs_xgb import ModelDelta

from ..jobs import TrainingError
from .fleet_data import FleetData


class BoostedTrees:
    """Trees grown so far, what each gateway's margins include, and the objective they serve."""

    def __init__(self) -> None:
        self.trees: list = []
        self.tree_output: list[int] = []  # per tree: the output it adds to, -1 for a vector leaf
        self.known: dict[str, int] = {}  # trees each gateway's margins include (from its last reply)
        self._deltas: dict[tuple[int, int], bytes] = {}  # most gateways need the same delta: encode it once

    def set_objective(self, objective: str, fleet: FleetData | Any, who: str = "clients") -> None:
        """Features, classes and the objective from the fleet's opening; a class count the
        objective cannot serve fails the job in one line."""
        self.n_features, self.feature_names = fleet.n_features, fleet.feature_names
        self.classes, self.model_classes = fleet.classes, fleet.model_classes
        if objective == "logistic" and len(self.classes) != 2:
            raise TrainingError(f"logistic needs exactly 2 classes, the {who}' labels are {list(self.classes)}")
        if objective == "softmax" and len(self.classes) < 2:
            raise TrainingError(f"softmax needs at least 2 classes, the {who}' labels are {list(self.classes)}")
        self.objective = objective_named(objective, len(self.classes))
        self.n_outputs = self.objective.n_outputs

    def _delta(self, client: str) -> ModelDelta:
        """The trees ``client``'s margins do not include yet."""
        first = self.known.get(client, 0)
        if first >= len(self.trees):
            return ModelDelta(first, b"")
        key = (first, len(self.trees))
        if key not in self._deltas:  # keep only deltas up to today's last tree: older ones are stale
            current = {k: v for k, v in self._deltas.items() if k[1] == len(self.trees)}
            self._deltas = {**current, key: self._ensemble(first).to_cbor()}
        return ModelDelta(first, self._deltas[key])

    def _ensemble(self, first: int = 0) -> TreeEnsemble:
        """Trees ``first..`` as a boosted ensemble with base score 0 (a model delta)."""
        return TreeEnsemble(trees=tuple(self.trees[first:]), kind="boosted", link=self.objective.link,
                            n_outputs=self.n_outputs, feature_names=self.feature_names, classes=self.model_classes,
                            tree_output=np.array(self.tree_output[first:], dtype=np.int32))

    def boosted_model(self, n_trees: int | None, base_score: np.ndarray, feature_set_version: str,
                      metadata: dict[str, Any]) -> TreeEnsemble:
        """The model of the first ``n_trees`` trees (all), with its base score and metadata."""
        return TreeEnsemble(
            trees=tuple(self.trees[:n_trees]), kind="boosted", link=self.objective.link, n_outputs=self.n_outputs,
            feature_names=self.feature_names, tree_output=np.array(self.tree_output[:n_trees], dtype=np.int32),
            base_score=base_score, feature_set_version=feature_set_version, classes=self.model_classes,
            metadata=metadata)
