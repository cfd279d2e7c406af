"""Vertical Federated Forest's messages (Liu et al., Federated Forest, Alg. 1-2): one person's
gateways each hold some sensors' features of the same windows; one of them holds the labels.

A job runs

1. ``vertical_forest.align``: each party sends keyed-hash digests of its window ids (never the
   ids) and how many features it has; the label holder also names its classes;
2. ``vertical_forest.setup``: which of its digests are common (the job's rows), and the master's
   bootstrap draws; the label holder answers with the labels of the common windows sealed under
   the parties' key (``shared.vertical_party_key``) -- the master relays, cannot read;
3. per tree level, for all trees at once, ``vertical_forest.level``: the sealed partitions of the
   previous level's splits (relayed from their owners), the open nodes and this party's own
   sampled features for each -- the reply is the party's best gain per node, and the encoded id
   of the feature (a permutation of its columns keyed by the party key and the job,
   ``shared.vertical_splits.feature_codes``), never the threshold; then
   ``vertical_forest.partition`` to the owners of the winning splits only: the node's samples
   left/right, packed bits sealed under the parties' key;
4. ``vertical_forest.finish``: the last partitions; every party keeps its partial trees, the
   label holder answers with the leaf values (the model the master keeps);
   ``vertical_forest.abort`` tells the parties to drop a failed job.
5. ``vertical_forest.deploy``: the aggregator's signed manifest (``VerticalManifest``): every
   party keeps its partial trees of the job as that model id and version.

Nodes are heap indices (root 0, children ``2i+1``/``2i+2``) -- the same names on every party.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np

from ..envelope import message_type
from ..schema import ArraySpec

INT_1D = ArraySpec(("int32", "int64"), ndim=1)
F64_1D = ArraySpec(("float64",), ndim=1, finite=True)


def _same_length(**arrays: np.ndarray) -> int:
    lengths = {name: a.shape[0] for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"arrays must have the same length: {lengths}")
    return next(iter(lengths.values()), 0)


def _nonnegative(name: str, a: np.ndarray) -> None:
    if a.size and a.min() < 0:
        raise ValueError(f"{name} must be >= 0")


@dataclass(frozen=True)
class VerticalTask:
    """The job's fixed settings for one party (``party``: its position among the parties,
    ``n_classes`` 0 for regression), repeated in every request."""

    task: Literal["classification", "regression"]
    criterion: Literal["gini", "entropy", "mse"]
    party: int
    n_parties: int
    n_trees: int
    n_classes: int
    min_samples_split: int
    min_samples_leaf: int
    feature_set_version: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.party < self.n_parties:
            raise ValueError("party must lie in 0..n_parties-1")
        if self.n_trees < 1 or self.min_samples_split < 2 or self.min_samples_leaf < 1:
            raise ValueError("n_trees >= 1, min_samples_split >= 2 and min_samples_leaf >= 1")
        if (self.task == "classification") != (self.n_classes >= 2) or (self.criterion == "mse") != (
            self.task == "regression"
        ):
            raise ValueError("classification needs n_classes >= 2 and gini/entropy, regression mse")


@message_type("vertical_forest.align")
@dataclass(frozen=True)
class VerticalAlignRequest:
    """Send the digests of your windows (start times snapped to ``hop_us`` within
    ``tolerance_us``; ``hop_us`` 0: the ids as stored). ``live_model``: a live prediction with
    the deployed model of that id -- offer every window stored since that model's last
    prediction on this party, labelled or not."""

    feature_set_version: str = ""
    hop_us: int = 0
    tolerance_us: int = 0
    task: Literal["classification", "regression"] = "classification"
    live_model: str = ""

    def __post_init__(self) -> None:
        if self.hop_us < 0 or not 0 <= 2 * self.tolerance_us <= self.hop_us:
            raise ValueError("tolerance_us must lie in 0..hop_us/2")


@message_type("vertical_forest.align_reply")
@dataclass(frozen=True)
class VerticalAlignReply:
    """``digests`` (n, 16): keyed hashes of the party's window ids; ``off_grid``: windows it could
    not offer; ``n_features``: its width; ``has_labels``/``classes``: the label holder's flag and
    (classification) its class names."""

    digests: Annotated[np.ndarray, ArraySpec(("uint8",), ndim=2)]
    off_grid: int
    n_features: int
    has_labels: bool
    classes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.digests.ndim != 2 or self.digests.shape[1] != 16:
            raise ValueError("digests must have 16 columns")
        if self.off_grid < 0 or self.n_features < 0:
            raise ValueError("off_grid and n_features must be >= 0")


@message_type("vertical_forest.setup")
@dataclass(frozen=True)
class VerticalSetupRequest:
    """``keep``: positions (ascending) of your digests that every party holds -- the job's rows,
    in start order; ``bootstrap`` (n_trees, n_rows): the master's row draws
    (multiplicities)."""

    task: VerticalTask
    keep: Annotated[np.ndarray, INT_1D]
    bootstrap: Annotated[np.ndarray, ArraySpec(("uint8", "uint16", "uint32"), ndim=2)]

    def __post_init__(self) -> None:
        _nonnegative("keep", self.keep)
        if self.keep.size > 1 and (np.diff(self.keep) <= 0).any():
            raise ValueError("keep must be strictly increasing")
        if self.bootstrap.shape != (self.task.n_trees, self.keep.shape[0]):
            raise ValueError(f"bootstrap must have shape ({self.task.n_trees}, {self.keep.shape[0]})")


@message_type("vertical_forest.setup_reply")
@dataclass(frozen=True)
class VerticalSetupReply:
    """``n_rows``: the common windows the party found; ``sealed_labels``: the label holder's
    labels of them, sealed (empty from the other parties)."""

    n_rows: int
    sealed_labels: bytes = b""


@dataclass(frozen=True)
class SealedPartition:
    """The owner's partition of nodes ``(tree[i], node[i])``: per node, one bit per row of the
    node (ascending row order; 1 = left), packed, sealed. The master sees only the lengths."""

    owner: int
    tree: Annotated[np.ndarray, INT_1D]
    node: Annotated[np.ndarray, INT_1D]
    sealed: bytes

    def __post_init__(self) -> None:
        _same_length(tree=self.tree, node=self.node)
        _nonnegative("tree", self.tree)
        _nonnegative("node", self.node)


@message_type("vertical_forest.level")
@dataclass(frozen=True)
class VerticalLevelRequest:
    """Apply ``partitions`` (the previous level's splits), then find your best split of every open
    node ``(node_tree[i], node_id[i])`` over your features ``features[feature_offsets[i]:
    feature_offsets[i+1]]`` (your encoded feature ids; empty: none of yours was drawn).
    ``sealed_labels``: the label holder's sealed labels, relayed with the first level."""

    task: VerticalTask
    level: int
    partitions: tuple[SealedPartition, ...]
    node_tree: Annotated[np.ndarray, INT_1D]
    node_id: Annotated[np.ndarray, INT_1D]
    feature_offsets: Annotated[np.ndarray, INT_1D]
    features: Annotated[np.ndarray, INT_1D]
    sealed_labels: bytes = b""

    def __post_init__(self) -> None:
        n = _same_length(node_tree=self.node_tree, node_id=self.node_id)
        o = self.feature_offsets
        if o.shape != (n + 1,) or o[0] != 0 or o[-1] != self.features.shape[0] or (np.diff(o) < 0).any():
            raise ValueError(f"feature_offsets must rise from 0 to {self.features.shape[0]} in {n + 1} entries")
        _nonnegative("features", self.features)
        if self.level < 0:
            raise ValueError("level must be >= 0")


@message_type("vertical_forest.level_reply")
@dataclass(frozen=True)
class VerticalLevelReply:
    """Per open node: ``has_split`` (0/1), the best ``gain`` (the weighted impurity decrease; 0
    without a split) and the encoded ``feature`` (-1 without a split)."""

    has_split: Annotated[np.ndarray, ArraySpec(("uint8",), ndim=1)]
    gain: Annotated[np.ndarray, F64_1D]
    feature: Annotated[np.ndarray, INT_1D]

    def __post_init__(self) -> None:
        _same_length(has_split=self.has_split, gain=self.gain, feature=self.feature)


@message_type("vertical_forest.partition")
@dataclass(frozen=True)
class VerticalPartitionRequest:
    """Your splits won at nodes ``(node_tree[i], node_id[i])``: partition their rows."""

    task: VerticalTask
    level: int
    node_tree: Annotated[np.ndarray, INT_1D]
    node_id: Annotated[np.ndarray, INT_1D]

    def __post_init__(self) -> None:
        _same_length(node_tree=self.node_tree, node_id=self.node_id)


@message_type("vertical_forest.partition_reply")
@dataclass(frozen=True)
class VerticalPartitionReply:
    sealed: bytes


@message_type("vertical_forest.finish")
@dataclass(frozen=True)
class VerticalFinishRequest:
    """Apply the last ``partitions`` and keep your partial trees; the label holder answers with
    the leaf values."""

    task: VerticalTask
    level: int
    partitions: tuple[SealedPartition, ...]


@message_type("vertical_forest.finish_reply")
@dataclass(frozen=True)
class VerticalFinishReply:
    """Leaves ``(leaf_tree[i], leaf_node[i])`` with their ``values`` (class distribution, or the
    mean) and ``cover`` (weighted rows); empty from parties without labels. ``digest``: every
    party's SHA-256 of its partial trees (``shared.vertical_manifest.partial_digest``), which
    the signed manifest of a deployment repeats so that the party can tell its trees are the
    ones the aggregator signed for."""

    leaf_tree: Annotated[np.ndarray, INT_1D]
    leaf_node: Annotated[np.ndarray, INT_1D]
    values: Annotated[np.ndarray, ArraySpec(("float64",), ndim=2, finite=True)]
    cover: Annotated[np.ndarray, F64_1D]
    digest: bytes = b""

    def __post_init__(self) -> None:
        _same_length(leaf_tree=self.leaf_tree, leaf_node=self.leaf_node, values=self.values, cover=self.cover)


@message_type("vertical_forest.abort")
@dataclass(frozen=True)
class VerticalAbort:
    """The job failed: drop its state and keep no partial trees of it."""

    reason: str


@message_type("vertical_forest.route")
@dataclass(frozen=True)
class VerticalRouteRequest:
    """One-round prediction (Alg. 3): route your windows ``keep`` (positions of the digests you
    sent in this job's alignment, ascending; rows in start order) through your
    partial trees of the model trained by job ``model_job``."""

    model_job: str
    keep: Annotated[np.ndarray, INT_1D]

    def __post_init__(self) -> None:
        _nonnegative("keep", self.keep)
        if self.keep.size > 1 and (np.diff(self.keep) <= 0).any():
            raise ValueError("keep must be strictly increasing")


@message_type("vertical_forest.route_reply")
@dataclass(frozen=True)
class VerticalRouteReply:
    """``leaves`` (rows, ceil(L/8)) packed bits: per window, the leaves (all trees' leaves in tree
    order, ascending heap ids; L in all) it may reach given this party's splits."""

    leaves: Annotated[np.ndarray, ArraySpec(("uint8",), ndim=2)]
    n_leaves: int

    def __post_init__(self) -> None:
        if self.leaves.shape[1] != (self.n_leaves + 7) // 8:
            raise ValueError(f"leaves must have {(self.n_leaves + 7) // 8} columns for {self.n_leaves} leaves")


@message_type("vertical_forest.directions")
@dataclass(frozen=True)
class VerticalDirectionsRequest:
    """Classical prediction, one tree level: for each of your splits ``(tree[i], node[i])`` of
    the model of job ``model_job``, say which of the windows ``rows[offsets[i]:offsets[i+1]]``
    (positions among this job's aligned windows; ``keep`` as in ``vertical_forest.route``) go left."""

    model_job: str
    keep: Annotated[np.ndarray, INT_1D]
    tree: Annotated[np.ndarray, INT_1D]
    node: Annotated[np.ndarray, INT_1D]
    offsets: Annotated[np.ndarray, INT_1D]
    rows: Annotated[np.ndarray, INT_1D]

    def __post_init__(self) -> None:
        n = _same_length(tree=self.tree, node=self.node)
        o = self.offsets
        if o.shape != (n + 1,) or o[0] != 0 or o[-1] != self.rows.shape[0] or (np.diff(o) < 0).any():
            raise ValueError(f"offsets must rise from 0 to {self.rows.shape[0]} in {n + 1} entries")
        _nonnegative("rows", self.rows)
        _nonnegative("keep", self.keep)


@message_type("vertical_forest.directions_reply")
@dataclass(frozen=True)
class VerticalDirectionsReply:
    """Packed bits, one per requested row in request order: 1 = left."""

    go_left: Annotated[np.ndarray, ArraySpec(("uint8",), ndim=1)]


@message_type("vertical_forest.result")
@dataclass(frozen=True)
class VerticalResult:
    """The prediction of this job's aligned windows (rows as in ``vertical_forest.route``):
    ``values`` (rows, K) -- class probabilities in ``classes`` order, or the mean -- for every
    party of the person."""

    values: Annotated[np.ndarray, ArraySpec(("float64",), ndim=2, finite=True)]
    classes: tuple[str, ...] = ()


@dataclass(frozen=True)
class VerticalManifest:
    """What the aggregator signs when it deploys a vertical forest (``shared.vertical_manifest``):
    the model's id and ``version`` (monotonic per id on every party), the training ``job`` (whose
    partial trees the parties keep), the ``parties`` in block order and the label holder, the
    task and classes, ``forest_digest`` (SHA-256 of the master's trees: structure, owners,
    encoded features, leaf values) and, per party, the digest that party reported of its own
    partial trees. No threshold: the aggregator never had one to sign."""

    model_id: str
    version: int
    job: str
    parties: tuple[str, ...]
    label_holder: str
    task: Literal["classification", "regression"]
    classes: tuple[str, ...]
    forest_digest: bytes
    party_digests: tuple[bytes, ...]
    issued_ns: int
    key_id: str
    signature: bytes = b""

    def __post_init__(self) -> None:
        if not self.model_id or self.version < 1:
            raise ValueError("a manifest needs a model_id and a version >= 1")
        if len(self.party_digests) != len(self.parties) or self.label_holder not in self.parties:
            raise ValueError("a manifest names one digest per party and a label holder among them")


@message_type("vertical_forest.deploy")
@dataclass(frozen=True)
class VerticalDeploy:
    """Keep your partial trees of ``manifest.job`` as model ``manifest.model_id`` v``version``:
    verify the signature, check your digest, store them (answered with ``Ack``: ``deployed`` or
    ``unchanged``)."""

    manifest: VerticalManifest
