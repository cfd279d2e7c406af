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
from .levelwise_growth import RoundTree


class BoostedTrees:
    """Trees grown so far, what each gateway's margins include, and the objective they serve."""

    def __init__(self) -> None:
        self.trees: list = []
        self.tree_output: list[int] = []  # per tree: the output it adds to, -1 for a vector leaf
        self.known: dict[str, int] = {}  # trees each gateway's margins include (from its last reply)
        self._deltas: dict[tuple[int, int], bytes] = {}  # most gateways need the same delta: encode it once
        self.loss_changes: list[np.ndarray] = []  # per tree, XGBoost's loss change of each split (NaN: unknown)
        self.vector_leaves = False  # one tree with a leaf vector per round, instead of one tree per output

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
        return TreeEnsemble(
            trees=tuple(self.trees[first:]),
            kind="boosted",
            link=self.objective.link,
            n_outputs=self.n_outputs,
            feature_names=self.feature_names,
            classes=self.model_classes,
            tree_output=np.array(self.tree_output[first:], dtype=np.int32),
        )

    def boosted_model(
        self, n_trees: int | None, base_score: np.ndarray, feature_set_version: str, metadata: dict[str, Any]
    ) -> TreeEnsemble:
        """The model of the first ``n_trees`` trees (all), with its base score and metadata."""
        return TreeEnsemble(
            trees=tuple(self.trees[:n_trees]),
            kind="boosted",
            link=self.objective.link,
            n_outputs=self.n_outputs,
            feature_names=self.feature_names,
            tree_output=np.array(self.tree_output[:n_trees], dtype=np.int32),
            base_score=base_score,
            feature_set_version=feature_set_version,
            classes=self.model_classes,
            metadata=metadata,
        )

    def continue_from(self, model: TreeEnsemble, multi_strategy: str | None) -> None:
        """Start from ``model``'s trees and base score (periodic retraining); a model that does not
        fit the job fails it in one line."""
        if model.kind != "boosted" or model.n_outputs != self.n_outputs or model.n_features != self.n_features:
            raise TrainingError(
                f"init_model ({model.kind}, {model.n_outputs} outputs, {model.n_features} features)"
                f" does not fit this job ({self.n_outputs} outputs, {self.n_features} features)"
            )
        if model.link != self.objective.link or (self.model_classes and tuple(model.classes) != self.model_classes):
            raise TrainingError(
                f"init_model predicts {list(model.classes)} with link {model.link!r}; the job has "
                f"classes {list(self.model_classes)} and link {self.objective.link!r}"
            )
        if model.n_trees and bool((model.tree_output == -1).all() and self.n_outputs > 1) != self.vector_leaves:
            raise TrainingError(f"init_model's trees do not follow multi_strategy={multi_strategy!r}")
        self.base_score = np.asarray(model.base_score, dtype=np.float64)
        self.trees = list(model.trees)
        self.tree_output = [int(k) for k in model.tree_output]
        self.loss_changes = [np.full(tree.n_nodes, np.nan) for tree in model.trees]

    def add_round(self, trees: list[RoundTree]) -> None:
        """A boosting round's trees: tree ``k`` adds to output ``k``, a vector-leaf tree to all (-1)."""
        for k, grown in enumerate(trees):
            self.trees.append(grown.tree)
            self.loss_changes.append(grown.loss_change)
            self.tree_output.append(-1 if self.vector_leaves else k if self.n_outputs > 1 else 0)
        self._deltas.clear()

    def check_trees(self, client: str, n_trees: int) -> str | None:
        """Why a reply whose margins include ``n_trees`` trees is stale, or None (a stale client
        gets the whole model next time)."""
        if n_trees != len(self.trees):
            self.known.pop(client, None)
            return f"margins include {n_trees} trees, the model has {len(self.trees)}"
        return None
