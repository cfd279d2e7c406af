"""The vertical Federated Forest as a model: the master's trees and, where deployed, each party's
partial trees; prediction in one round (Alg. 3-4) or node by node (the classical protocol).

The master's tree (:class:`MasterTree`) knows every split's owner and the encoded feature id
(the owner's code of the column, ``shared.vertical_splits.feature_codes`` -- a permutation keyed
by the party key and the job -- offset by the widths of the parties before it), and the leaf values
the label holder computed -- never a threshold. Thresholds live only in the owners'
``shared.vertical_trees.PartialTree``s. A :class:`VerticalForestModel` returned by
``aggregator.simulate`` carries both, because the simulation holds every party; ``predict``
then plays the parties' part (each block through its own partial trees) and the master's
(intersection and vote/average), exactly the computation the protocol distributes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

import numpy as np

from shared.protocol.codec import dumps_value, loads_value
from shared.protocol.errors import DecodeError
from shared.protocol.messages.vertical_forest import VerticalManifest
from shared.protocol.schema import from_wire, to_wire
from shared.signing import VerifyKey
from shared.vertical_alignment import AlignmentReport
from shared.vertical_manifest import forest_digest, verify_manifest
from shared.vertical_trees import PartialTree, classical_leaves, intersect_leaves, owned_directions, reachable_leaves

__all__ = ["MasterTree", "VerticalForestMetadata", "VerticalForestModel"]


@dataclass(frozen=True)
class VerticalForestMetadata:
    """How a model was trained: the training ``job`` (whose partial trees the parties keep, and
    whose id keys their feature codes), the ``label_holder``, the settings that shaped the trees
    (``max_depth`` is the depth grown) and the window grid a prediction must align on
    (``hop_us``, ``tolerance_us``, ``feature_set_version``)."""

    job: str
    label_holder: str
    n_trees: int = 0
    max_depth: int = 0
    criterion: str = ""
    hop_us: int = 0
    tolerance_us: int = 0
    feature_set_version: str = ""
    algorithm: str = "vertical_forest"

    def settings(self) -> dict[str, str | int]:
        """Everything but ``job`` and ``label_holder`` (which the signed manifest carries): the
        model file's ``metadata`` map."""
        return {k: v for k, v in asdict(self).items() if k not in ("job", "label_holder")}

    @classmethod
    def from_settings(cls, settings: dict[str, object], *, job: str, label_holder: str) -> VerticalForestMetadata:
        """The inverse of :meth:`settings` (unknown keys ignored, missing ones default: files
        written before a field existed still load)."""
        known = {f.name: f.type for f in fields(cls)}
        kept: dict[str, Any] = {  # each value checked against its field's type (str or int)
            k: v
            for k, v in settings.items()
            if k in known
            and k not in ("job", "label_holder")
            and isinstance(v, str if known[k] == "str" else int)
            and not isinstance(v, bool)
        }
        return cls(job=job, label_holder=label_holder, **kept)


@dataclass(frozen=True, eq=False)
class MasterTree:
    """One tree as the master keeps it: internal nodes (ascending heap ids) with their owning
    party, encoded feature and gain; leaves (ascending) with values ``(n_leaves, K)`` and cover."""

    split_nodes: np.ndarray
    owner: np.ndarray
    feature: np.ndarray
    gain: np.ndarray
    leaves: np.ndarray
    values: np.ndarray
    cover: np.ndarray


@dataclass(frozen=True, eq=False)
class VerticalForestModel:
    """A trained vertical Federated Forest.

    ``parties``: the party ids in block order; ``n_features``: each party's width;
    ``partial``: per party its partial trees (None on a master that holds only its own part);
    ``alignment``: which windows the job trained on and which it dropped; ``party_digests``:
    each party's digest of its partial trees (reported at the finish); ``manifest``: the signed
    manifest once deployed (``deploy_to_parties``).
    ``predict(blocks)`` / ``predict_proba(blocks)`` take one feature block per party, in order.

    Examples
    --------
    >>> import numpy as np
    >>> from aggregator import simulate
    >>> from aggregator.algorithms import VerticalFederatedForest
    >>> X = np.random.default_rng(1).normal(size=(80, 3)); y = (X[:, 2] > 0).astype(int)
    >>> model = simulate(VerticalFederatedForest(n_trees=2, max_depth=2), [(X[:, :1], y), (X[:, 1:], None)])
    >>> model.parties
    ('party-000', 'party-001')
    >>> bool((model.predict([X[:, :1], X[:, 1:]]) == model.predict([X[:, :1], X[:, 1:]], method="classical")).all())
    True
    """

    trees: tuple[MasterTree, ...]
    task: Literal["classification", "regression"]
    classes: tuple[str, ...]
    parties: tuple[str, ...]
    n_features: tuple[int, ...]
    partial: tuple[tuple[PartialTree, ...], ...] | None = None
    integer_labels: bool = False
    metadata: VerticalForestMetadata = VerticalForestMetadata("", "")
    alignment: AlignmentReport | None = None
    party_digests: tuple[bytes, ...] = ()
    manifest: VerticalManifest | None = None

    # -- the master's model file -------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The deployed master model as a file (CBOR): the signed manifest and the master's trees
        -- no partial tree, no threshold. Read back with :meth:`from_bytes`."""
        if self.manifest is None:
            raise ValueError("only a deployed model (with its signed manifest) is written: deploy it first")
        return dumps_value(
            {
                "manifest": to_wire(self.manifest),
                "n_features": list(self.n_features),
                "integer_labels": self.integer_labels,
                "metadata": self.metadata.settings(),
                "trees": [{f.name: getattr(t, f.name) for f in fields(MasterTree)} for t in self.trees],
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes, trusted_keys: VerifyKey | Sequence[VerifyKey]) -> VerticalForestModel:
        """A model file written by :meth:`to_bytes`, checked: the manifest's signature and the
        trees' digest (``ValueError`` / ``BadSignature`` with one line otherwise)."""
        try:
            raw = loads_value(data, max_bytes=256 << 20)
            manifest = from_wire(VerticalManifest, raw["manifest"])
            trees = tuple(
                MasterTree(**{f.name: np.asarray(t[f.name]) for f in fields(MasterTree)}) for t in raw["trees"]
            )
            n_features = tuple(int(d) for d in raw["n_features"])
            settings = {str(k): v for k, v in dict(raw["metadata"]).items()}
        except (DecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a vertical forest model file ({str(exc)[:200]})") from None
        verify_manifest(manifest, trusted_keys)
        if forest_digest(trees, n_features) != manifest.forest_digest:
            raise ValueError("the model file's trees do not match its signed manifest (altered after signing)")
        return cls(
            trees,
            manifest.task,
            manifest.classes,
            manifest.parties,
            n_features,
            None,
            bool(raw.get("integer_labels", False)),
            VerticalForestMetadata.from_settings(settings, job=manifest.job, label_holder=manifest.label_holder),
            None,
            manifest.party_digests,
            manifest,
        )

    # -- checks ------------------------------------------------------------------------------------

    def _partial_trees(self) -> tuple[tuple[PartialTree, ...], ...]:
        if self.partial is None:
            raise ValueError("this model holds no partial trees: predict through the parties (one-round protocol)")
        return self.partial

    def _blocks(self, blocks: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        self._partial_trees()
        if not isinstance(blocks, (list, tuple)):
            raise TypeError("blocks must be a list with one feature block per party")
        if len(blocks) != len(self.parties):
            raise ValueError(
                f"blocks: {len(blocks)} feature blocks for {len(self.parties)} parties ({', '.join(self.parties)})"
            )
        out = []
        for name, d, block in zip(self.parties, self.n_features, blocks):
            if block is None:
                raise ValueError(f"blocks: party {name} is missing: every party must take part in a prediction")
            X = np.asarray(block, dtype=np.float64)
            if X.ndim != 2 or X.shape[1] != d:
                raise ValueError(f"blocks: party {name} needs a 2-D block with {d} columns, got shape {X.shape}")
            out.append(X)
        if len({X.shape[0] for X in out}) != 1:
            raise ValueError(f"blocks: the parties' blocks have different row counts {[X.shape[0] for X in out]}")
        return out

    # -- prediction --------------------------------------------------------------------------------

    def leaf_positions(
        self, blocks: Sequence[np.ndarray], *, method: Literal["one_round", "classical"] = "one_round"
    ) -> np.ndarray:
        """``(n_samples, n_trees)``: each sample's leaf position per tree."""
        X = self._blocks(blocks)
        partial = self._partial_trees()
        n = X[0].shape[0]
        out = np.zeros((n, len(self.trees)), dtype=np.int64)
        for t, tree in enumerate(self.trees):
            if method == "one_round":
                out[:, t] = intersect_leaves([reachable_leaves(p[t], x) for p, x in zip(partial, X)])
            elif method == "classical":

                def ask(party: int, node: int, rows: np.ndarray, t: int = t) -> np.ndarray:
                    return owned_directions(partial[party][t], X[party][rows], node)

                out[:, t] = classical_leaves(tree.split_nodes, tree.owner, n, ask)
            else:
                raise ValueError(f"method must be 'one_round' or 'classical', got {method!r}")
        return out

    def leaf_values(self, positions: np.ndarray) -> np.ndarray:
        """``(n_samples, K)``: the trees' leaf values averaged -- the master's part of Alg. 4."""
        total = np.zeros((positions.shape[0], self.trees[0].values.shape[1]))
        for t, tree in enumerate(self.trees):
            total += tree.values[positions[:, t]]
        return total / len(self.trees)

    def predict_proba(
        self, blocks: Sequence[np.ndarray], *, method: Literal["one_round", "classical"] = "one_round"
    ) -> np.ndarray:
        """Class probabilities ``(n_samples, n_classes)``, columns in ``classes`` order
        (classification: the mean of the trees' leaf class distributions, as scikit-learn)."""
        if self.task != "classification":
            raise ValueError("predict_proba is for classification; use predict")
        return self.leaf_values(self.leaf_positions(blocks, method=method))

    def predict(
        self, blocks: Sequence[np.ndarray], *, method: Literal["one_round", "classical"] = "one_round"
    ) -> np.ndarray:
        """Class labels (the most probable; ints if the labels were ints) or regression means."""
        return self.labels_of(self.leaf_values(self.leaf_positions(blocks, method=method)))

    def labels_of(self, values: np.ndarray) -> np.ndarray:
        """Predictions from averaged leaf values: the most probable class, or the mean."""
        if self.task == "regression":
            return values[:, 0]
        labels = np.asarray(self.classes)[np.argmax(values, axis=1)]
        return labels.astype(np.int64) if self.integer_labels else labels
