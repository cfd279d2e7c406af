"""FedForest's messages (paper Alg. 1): two synchronised rounds per depth level, for all trees.

After the job's ``DataSummary``, every level runs

1. ``fedforest.level``: the split decisions of the previous level (clients move their samples
   to the children) and the level's active nodes with their sampled features; the reply holds,
   for every active node where the client has samples, the node summary and, per sampled
   continuous feature, M+1 weighted quantiles (per categorical feature: exact per-category
   summaries);
2. ``fedforest.split``: candidate thresholds per (node, feature) pair; the reply holds the
   left-child summary of each candidate (exact evaluation), or, with ``avgimp``, the client's
   local impurity decrease per candidate.

Nodes and pairs are addressed by position in the request (CSR layouts), so a reply only lists
positions where the client has data. These per-client sketches and summaries are the paper's
protocol, kept for reproduction: quantile points are actual feature values of the client.

The histogram protocol (secure sums without differential privacy) replaces both rounds with one
per level, ``fedforest.histograms``: per requested (node, feature) pair and per bin of the job's
fleet-wide edges, the sums of the window count, the bootstrap weight and the weighted summary
terms, as one fixed-point vector for secure aggregation (:class:`ForestHistogramRequest`).
Counts are integers (bootstrap multiplicities) and travel as integers; regression sums are
float64.

The private protocol (differential privacy) asks two fleet sums after the opening, each an
integer vector of class counts with the gateways' shares of Skellam noise added before masking:
``fedforest.dp_histograms`` -- per feature and slot of the edges, the class counts of all the
gateway's windows (:class:`PrivateForestHistogramRequest`) -- and ``fedforest.dp_leaves`` --
after the forest's split decisions, per leaf the class counts (:class:`PrivateForestLeavesRequest`).
Both are answered with :class:`ForestHistogramReply`. For regression both carry the job's
public :class:`TargetClip` and every cell holds ``[windows, Σ z]`` of the clipped, centred and
scaled target instead of class counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np

from ..envelope import message_type
from ..schema import ArraySpec
from .fleet_sums import NoiseShare
from .secure_aggregation import MaskedVector, SecureRound

INT_1D = ArraySpec(("int32", "int64"), ndim=1)
F64_1D = ArraySpec(("float64",), ndim=1, finite=True)
F64_2D = ArraySpec(("float64",), ndim=2, finite=True)
COUNT_DTYPES = ("uint8", "uint16", "uint32", "int32", "int64")
SUMMARIES = ArraySpec((*COUNT_DTYPES, "float64"), ndim=2, finite=True)


def _csr(name: str, offsets: np.ndarray, values_len: int, rows: int) -> None:
    if offsets.shape != (rows + 1,):
        raise ValueError(f"{name} must have {rows + 1} entries, got {offsets.shape[0]}")
    if offsets[0] != 0 or offsets[-1] != values_len or (np.diff(offsets) < 0).any():
        raise ValueError(f"{name} must rise from 0 to {values_len}")


def _same_length(**arrays: np.ndarray) -> int:
    lengths = {name: a.shape[0] for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"arrays must have the same length: {lengths}")
    return next(iter(lengths.values()), 0)


def _positions(name: str, index: np.ndarray, bound: int) -> None:
    if index.size and (index.min() < 0 or index.max() >= bound):
        raise ValueError(f"{name} must index 0..{bound - 1}")
    if index.size > 1 and (np.diff(index) <= 0).any():
        raise ValueError(f"{name} must be strictly increasing")


def _check_pairs(request) -> None:
    """A level request's nodes and their (node, feature) pairs: same-length node arrays, CSR
    feature offsets, features of the job, one shift per node or none."""
    n = _same_length(node_tree=request.node_tree, node_id=request.node_id)
    if request.node_shift.size not in (0, n):
        raise ValueError(f"node_shift must have 0 or {n} entries, got {request.node_shift.size}")
    _csr("feature_offsets", request.feature_offsets, request.features.shape[0], n)
    if request.features.size and (request.features.min() < 0 or request.features.max() >= request.task.n_features):
        raise ValueError(f"features must lie in 0..{request.task.n_features - 1}")


@dataclass(frozen=True)
class ForestTask:
    """The job's fixed settings for one client (``client_index`` = its H value, ``trees``: the
    trees it takes part in, after client subsampling), repeated in every request."""

    task: Literal["classification", "regression"]
    criterion: Literal["gini", "entropy", "mse"]
    feature_set_version: str
    n_features: int
    n_trees: int
    client_index: int
    trees: Annotated[np.ndarray, INT_1D]
    seed: int
    bootstrap: bool = True
    classes: tuple[str, ...] = ()
    target: Literal["label", "client"] = "label"  # "client": predict H (covariate-shift diagnostic)
    n_clients: int = 0

    def __post_init__(self) -> None:
        if self.n_features < 1 or self.n_trees < 1 or self.client_index < 0:
            raise ValueError("n_features and n_trees must be >= 1, client_index >= 0")
        _positions("trees", self.trees, self.n_trees)
        if self.task == "classification" and len(self.classes) < 2 and self.target == "label":
            raise ValueError("classification needs at least two classes")
        if (self.criterion == "mse") != (self.task == "regression" and self.target == "label"):
            raise ValueError(f"criterion {self.criterion!r} does not fit a {self.task} task")
        if self.target == "client" and self.n_clients < 2:
            raise ValueError("predicting the client needs n_clients >= 2")

    @property
    def n_outputs(self) -> int:
        if self.target == "client":
            return self.n_clients
        return len(self.classes) if self.task == "classification" else 0


@dataclass(frozen=True)
class SplitDecisions:
    """Splits chosen at earlier levels (rows in level order), one row each: node ``node`` of tree
    ``tree``, decided at ``level``, sends its samples to ``left``/``right`` by ``feature`` <
    ``threshold`` (numeric; NaN left iff ``default_left``, empty: all right) or, if
    ``categorical``, by membership of the code in ``categories[offsets[i]:offsets[i+1]]`` (left;
    NaN right). Feature ``n_features`` is the client indicator H (a categorical split on the
    client index)."""

    level: Annotated[np.ndarray, INT_1D]
    tree: Annotated[np.ndarray, INT_1D]
    node: Annotated[np.ndarray, INT_1D]
    feature: Annotated[np.ndarray, INT_1D]
    threshold: Annotated[np.ndarray, F64_1D]
    categorical: Annotated[np.ndarray, ArraySpec(("uint8",), ndim=1)]  # 1: categorical split
    left: Annotated[np.ndarray, INT_1D]
    right: Annotated[np.ndarray, INT_1D]
    category_offsets: Annotated[np.ndarray, INT_1D]
    categories: Annotated[np.ndarray, INT_1D]
    default_left: Annotated[np.ndarray, ArraySpec(("uint8",), ndim=1)] = field(
        default_factory=lambda: np.zeros(0, np.uint8)
    )

    def __post_init__(self) -> None:
        n = _same_length(
            level=self.level,
            tree=self.tree,
            node=self.node,
            feature=self.feature,
            threshold=self.threshold,
            categorical=self.categorical,
            left=self.left,
            right=self.right,
        )
        _csr("category_offsets", self.category_offsets, self.categories.shape[0], n)
        if self.categorical.size and self.categorical.max() > 1:
            raise ValueError("categorical flags must be 0 or 1")
        if self.default_left.size not in (0, n) or (self.default_left.size and self.default_left.max() > 1):
            raise ValueError(f"default_left must be {n} flags of 0 or 1 (or none)")
        if n > 1 and (np.diff(self.level) < 0).any():
            raise ValueError("rows must be in level order")

    @property
    def nan_left(self) -> np.ndarray:
        """Per row, whether NaN goes left (``default_left``, all False when empty)."""
        return self.default_left.astype(bool) if self.default_left.size else np.zeros(self.level.shape[0], bool)

    @classmethod
    def concatenate(cls, parts: list[SplitDecisions]) -> SplitDecisions:
        """The rows of ``parts`` (in level order) as one table; no part: no rows."""
        z = np.zeros(0, np.int64)
        if not parts:
            return cls(z, z, z, z, np.zeros(0), np.zeros(0, np.uint8), z, z, np.zeros(1, np.int64), z)
        counts = [np.diff(p.category_offsets) for p in parts]
        return cls(
            **{
                name: np.concatenate([getattr(p, name) for p in parts])
                for name in (
                    "level",
                    "tree",
                    "node",
                    "feature",
                    "threshold",
                    "categorical",
                    "left",
                    "right",
                    "categories",
                )
            },
            category_offsets=np.concatenate([[0], np.cumsum(np.concatenate(counts))]).astype(np.int64),
            default_left=np.concatenate([p.nan_left for p in parts]).astype(np.uint8),
        )


@message_type("fedforest.level")
@dataclass(frozen=True)
class ForestLevelRequest:
    """Apply ``splits``, then describe the active nodes ``(node_tree[i], node_id[i])``: their
    summaries and, for the features ``features[feature_offsets[i]:feature_offsets[i+1]]`` of
    node ``i`` (sorted; the pairs are numbered in this order), quantiles at ``b/sketch_size``.
    Regression sums are of ``y - node_shift[i]`` (the node's mean as the server knows it; empty:
    0), which keeps the variance ``Q/n - mean^2`` free of cancellation for offset targets."""

    task: ForestTask
    level: int
    splits: SplitDecisions
    node_tree: Annotated[np.ndarray, INT_1D]
    node_id: Annotated[np.ndarray, INT_1D]
    feature_offsets: Annotated[np.ndarray, INT_1D]
    features: Annotated[np.ndarray, INT_1D]
    sketch_size: int = 32
    categorical: Annotated[np.ndarray, INT_1D] = field(default_factory=lambda: np.zeros(0, np.int64))
    n_categories: int = 0
    top_l: int = 0  # > 0: also report the client's best local gain per pair (AvgImp/Top-L)
    node_shift: Annotated[np.ndarray, F64_1D] = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        _check_pairs(self)
        if not 1 <= self.sketch_size <= 4096:
            raise ValueError("sketch_size must lie in 1..4096")
        if self.level < 0 or self.n_categories < 0 or self.top_l < 0:
            raise ValueError("level, n_categories and top_l must be >= 0")
        if self.categorical.size and (self.n_categories < 2 or self.categorical.max() >= self.task.n_features):
            raise ValueError("categorical features need n_categories >= 2 and valid feature indices")


@message_type("fedforest.level_reply")
@dataclass(frozen=True)
class ForestLevelReply:
    """``nodes``: positions (in the request) of the active nodes where this client has samples,
    with their ``summaries`` (S columns). ``pairs``: positions of the continuous (node, feature)
    pairs of those nodes with values, ``points`` (M+1 quantiles each) and ``pair_weight`` (the
    non-missing weight: the pair's mixture weight). ``category_pairs``/``category_summaries``
    (pairs x n_categories x S): the categorical pairs. ``local_gain``: the client's best local
    impurity decrease per pair in ``pairs`` (Top-L; empty otherwise). ``missing_pairs`` /
    ``missing_summaries``: the continuous pairs where some of the node's samples have no value
    (NaN), and those samples' summary -- the server adds it to a candidate's left side to score
    "NaN goes left" (the learnt default direction)."""

    nodes: Annotated[np.ndarray, INT_1D]
    summaries: Annotated[np.ndarray, SUMMARIES]
    pairs: Annotated[np.ndarray, INT_1D]
    points: Annotated[np.ndarray, F64_2D]
    pair_weight: Annotated[np.ndarray, F64_1D]
    category_pairs: Annotated[np.ndarray, INT_1D]
    category_summaries: Annotated[np.ndarray, ArraySpec((*COUNT_DTYPES, "float64"), ndim=3, finite=True)]
    local_gain: Annotated[np.ndarray, F64_1D] = field(default_factory=lambda: np.zeros(0))
    missing_pairs: Annotated[np.ndarray, INT_1D] = field(default_factory=lambda: np.zeros(0, np.int64))
    missing_summaries: Annotated[np.ndarray, SUMMARIES] = field(default_factory=lambda: np.zeros((0, 0)))

    def __post_init__(self) -> None:
        if self.summaries.shape[0] != self.nodes.shape[0]:
            raise ValueError(f"{self.summaries.shape[0]} summaries for {self.nodes.shape[0]} nodes")
        _positions("nodes", self.nodes, 1 << 31)
        _positions("pairs", self.pairs, 1 << 31)
        _positions("category_pairs", self.category_pairs, 1 << 31)
        if self.summaries.size and self.summaries.min() < 0 and self.summaries.dtype.kind in "iu":
            raise ValueError("class counts must be >= 0")
        _same_length(pairs=self.pairs, points=self.points, pair_weight=self.pair_weight)
        if self.pair_weight.size and self.pair_weight.min() <= 0:
            raise ValueError("pair_weight must be > 0")
        if self.points.size and (np.diff(self.points, axis=1) < 0).any():
            raise ValueError("quantile points must be non-decreasing")
        if self.category_summaries.shape[0] != self.category_pairs.shape[0]:
            raise ValueError("one category summary block per categorical pair")
        if self.local_gain.size not in (0, self.pairs.shape[0]):
            raise ValueError("local_gain must have one entry per pair")
        _positions("missing_pairs", self.missing_pairs, 1 << 31)
        if self.missing_summaries.shape[0] != self.missing_pairs.shape[0]:
            raise ValueError(
                f"{self.missing_summaries.shape[0]} missing summaries for {self.missing_pairs.shape[0]} pairs"
            )
        if (
            self.missing_summaries.size
            and self.missing_summaries.dtype.kind in "iu"
            and self.missing_summaries.min() < 0
        ):
            raise ValueError("class counts must be >= 0")


@message_type("fedforest.split")
@dataclass(frozen=True)
class ForestSplitRequest:
    """Candidate thresholds: pair ``p`` (a position in the level request's pairs) has the
    thresholds ``thresholds[offsets[p]:offsets[p+1]]``; reply with the left summary of each
    (``evaluation="exact"``) or the local impurity decrease (``"avgimp"``)."""

    task: ForestTask
    level: int
    offsets: Annotated[np.ndarray, INT_1D]
    thresholds: Annotated[np.ndarray, F64_1D]
    evaluation: Literal["exact", "avgimp"] = "exact"

    def __post_init__(self) -> None:
        if self.offsets.shape[0] < 1:
            raise ValueError("offsets needs at least one entry")
        _csr("offsets", self.offsets, self.thresholds.shape[0], self.offsets.shape[0] - 1)


@message_type("fedforest.split_reply")
@dataclass(frozen=True)
class ForestSplitReply:
    """``candidates``: positions (in the request's thresholds) of the candidates of nodes where the
    client has samples; ``left``: their left summaries (S columns) -- or, with avgimp,
    ``local_gain`` and ``left_count`` (the client's weight going left: the pooled counts enforce
    ``min_samples_leaf``)."""

    candidates: Annotated[np.ndarray, INT_1D]
    left: Annotated[np.ndarray, SUMMARIES]
    # AvgImp's gains: float32 is plenty for an approximate criterion, and half the bytes
    local_gain: Annotated[np.ndarray, ArraySpec(("float32", "float64"), ndim=1, finite=True)] = field(
        default_factory=lambda: np.zeros(0)
    )
    left_count: Annotated[np.ndarray, ArraySpec((*COUNT_DTYPES, "float64"), ndim=1, finite=True)] = field(
        default_factory=lambda: np.zeros(0)
    )

    def __post_init__(self) -> None:
        _positions("candidates", self.candidates, 1 << 31)
        if self.left.shape[0] not in (0, self.candidates.shape[0]):
            raise ValueError(f"{self.left.shape[0]} left summaries for {self.candidates.shape[0]} candidates")
        if self.local_gain.size not in (0, self.candidates.shape[0]):
            raise ValueError("local_gain must have one entry per candidate")
        n = self.candidates.shape[0]
        if self.left_count.size not in (0, n) or (self.left_count.size and self.left_count.min() < 0):
            raise ValueError("left_count must have one entry >= 0 per candidate")
        if self.left.size and self.left.dtype.kind in "iu" and self.left.min() < 0:
            raise ValueError("class counts must be >= 0")


@message_type("fedforest.histograms")
@dataclass(frozen=True)
class ForestHistogramRequest:
    """Private level round: apply ``splits``, then for every pair ``p`` (node ``i`` with the
    features ``features[feature_offsets[i]:feature_offsets[i+1]]``), per slot of the pair's
    feature (slot ``b``: ``edges[b-1] <= x < edges[b]``; the last slot: missing) the integer
    sums of ``[windows, weighted summary terms]`` -- class counts, or ``[n, Σy, Σy²]`` with y in
    fixed point (``frac_bits``), centred on ``node_shift`` as in :class:`ForestLevelRequest`.
    Layout ``(pairs, slots, 1 + S)``."""

    task: ForestTask
    level: int
    splits: SplitDecisions
    node_tree: Annotated[np.ndarray, INT_1D]
    node_id: Annotated[np.ndarray, INT_1D]
    feature_offsets: Annotated[np.ndarray, INT_1D]
    features: Annotated[np.ndarray, INT_1D]
    edge_values: Annotated[np.ndarray, ArraySpec(("float32",), ndim=1, finite=True)]
    edge_offsets: Annotated[np.ndarray, INT_1D]
    frac_bits: int = 0
    value_bound: float = 1.0
    secure: SecureRound | None = None
    word_bits: int = 64  # classification: the narrowest ring word holding the fleet's counts
    noise: NoiseShare | None = None  # differential privacy: this gateway's share of the noise
    node_shift: Annotated[np.ndarray, F64_1D] = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        _check_pairs(self)
        if self.word_bits not in (16, 32, 64):
            raise ValueError("word_bits must be 16, 32 or 64")
        _csr("edge_offsets", self.edge_offsets, self.edge_values.shape[0], self.task.n_features)
        if self.level < 0 or not 0 <= self.frac_bits <= 60:
            raise ValueError("level must be >= 0 and frac_bits in 0..60")
        if not (np.isfinite(self.value_bound) and self.value_bound > 0):
            raise ValueError("value_bound must be finite and > 0")

    @property
    def slots(self) -> int:
        return int(np.diff(self.edge_offsets).max(initial=0)) + 2

    @property
    def terms(self) -> int:
        return 1 + (self.task.n_outputs or 3)

    @property
    def length(self) -> int:
        return self.features.shape[0] * self.slots * self.terms


@message_type("fedforest.histogram_reply")
@dataclass(frozen=True)
class ForestHistogramReply:
    sums: MaskedVector


def _check_edges(edge_values: np.ndarray, edge_offsets: np.ndarray, n_features: int) -> None:
    _csr("edge_offsets", edge_offsets, edge_values.shape[0], n_features)


@dataclass(frozen=True)
class TargetClip:
    """The private protocol's public target range for regression: a window's target ``y``
    enters the sums as ``z = (clip(y, centre - half_width, centre + half_width) - centre) /
    half_width``, in ``[-1, 1]``, rounded to the noise's lattice (``round(z * noise.scale)``)."""

    centre: float
    half_width: float

    def __post_init__(self) -> None:
        if not (np.isfinite(self.centre) and np.isfinite(self.half_width) and self.half_width > 0):
            raise ValueError("a target clip needs a finite centre and a finite half_width > 0")


def _check_private_vector(request) -> None:
    if request.word_bits not in (32, 64):
        raise ValueError("word_bits must be 32 or 64 (noisy sums need the headroom)")
    if request.task.target != "label" or request.task.bootstrap:
        raise ValueError("the private protocol counts every window once (the label target, bootstrap off)")
    if (request.task.task == "regression") != (request.target_clip is not None):
        raise ValueError("the private protocol needs a target_clip for regression, and only there")
    if request.task.trees.shape[0] != request.task.n_trees:
        raise ValueError("in the private protocol every window is in every tree")


def _private_columns(request) -> int:
    """Columns of a private release's cells: the class counts, or ``[windows, Σ z]``."""
    return 2 if request.target_clip is not None else len(request.task.classes)


@message_type("fedforest.dp_histograms")
@dataclass(frozen=True)
class PrivateForestHistogramRequest:
    """Private protocol, the root release: for each feature ``features[i]`` and each slot of its
    edges (slot ``b``: ``edges[b-1] <= x < edges[b]``; the last slot: missing) the number of the
    gateway's labelled windows of each class. Layout ``(features, slots, K)``; the gateway
    multiplies the counts by ``noise.scale``, adds its share of the noise and masks the vector.
    One window adds ``noise.scale`` to one cell per feature. Regression (``target_clip``):
    layout ``(features, slots, 2)``, per cell the windows times ``noise.scale`` and the sum of
    their ``round(z * noise.scale)`` (:class:`TargetClip`), so one window adds at most
    ``noise.scale`` to each of two cells per feature."""

    task: ForestTask
    features: Annotated[np.ndarray, INT_1D]
    edge_values: Annotated[np.ndarray, ArraySpec(("float32",), ndim=1, finite=True)]
    edge_offsets: Annotated[np.ndarray, INT_1D]
    noise: NoiseShare
    secure: SecureRound | None = None
    word_bits: int = 32
    target_clip: TargetClip | None = None

    def __post_init__(self) -> None:
        _check_private_vector(self)
        _check_edges(self.edge_values, self.edge_offsets, self.task.n_features)
        _positions("features", self.features, self.task.n_features)

    @property
    def slots(self) -> int:
        return int(np.diff(self.edge_offsets).max(initial=0)) + 2

    @property
    def length(self) -> int:
        return self.features.shape[0] * self.slots * _private_columns(self)


@message_type("fedforest.dp_leaves")
@dataclass(frozen=True)
class PrivateForestLeavesRequest:
    """Private protocol, the leaves release: apply ``splits`` (every split of the forest, level
    by level), then per leaf ``(leaf_tree[i], leaf_id[i])`` the number of the gateway's labelled
    windows of each class there. Layout ``(leaves, K)``, or ``(leaves, 2)`` for regression,
    scaled and noised as in :class:`PrivateForestHistogramRequest`. Every window sits in one
    leaf of every tree."""

    task: ForestTask
    splits: SplitDecisions
    leaf_tree: Annotated[np.ndarray, INT_1D]
    leaf_id: Annotated[np.ndarray, INT_1D]
    noise: NoiseShare
    secure: SecureRound | None = None
    word_bits: int = 32
    target_clip: TargetClip | None = None

    def __post_init__(self) -> None:
        _check_private_vector(self)
        _same_length(leaf_tree=self.leaf_tree, leaf_id=self.leaf_id)
        if self.leaf_tree.size and (self.leaf_tree.min() < 0 or self.leaf_tree.max() >= self.task.n_trees):
            raise ValueError(f"leaf_tree must lie in 0..{self.task.n_trees - 1}")
        if self.leaf_id.size and self.leaf_id.min() < 0:
            raise ValueError("leaf_id must be >= 0")

    @property
    def length(self) -> int:
        return self.leaf_tree.shape[0] * _private_columns(self)
