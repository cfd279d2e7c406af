"""FedSCS-XGB's messages (paper Alg. 1 server / Alg. 2 client), one request/reply pair per phase.

Two protocols. ``atoms`` (the paper's, for reproduction -- it reveals every window's quantised
feature vector and its gradients): a job opens with the generic ``DataSummaryRequest`` (sizes,
labels, moments), then runs per boosting round ``sketch`` (Hessian-weighted quantile sketches ->
the server's bin edges) and ``atoms`` (bin-id vectors with count, G and H sums).
``histogram`` (private): the job opens with fleet sums and the fleet-summed grid counts the edges
are read from (``shared.protocol.messages.fleet_sums``), then every depth level of a boosting
round is one ``histograms`` request: per requested node and feature, the (G, H, count) sums per
bin, as one fixed-point vector that secure aggregation masks (:class:`MaskedVector`).

Requests are self-contained so a client's state is a cache, not a contract: every request
carries the job's fixed settings (:class:`XgbTask`) and the trees the client may not have yet
(:class:`ModelDelta`). Replies state how many trees the client's margins include (``n_trees``),
so the server knows what to send next time and a tree is never applied twice.

The ``__post_init__`` checks make the schema reject malformed replies *before* they reach the
server's maths: shapes that do not match each other, negative counts or Hessians, non-finite
statistics. Checks that need the job's context (the number of features, classes) are the
server's (``aggregator.algorithms.fedscs_xgb``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np

from ..envelope import message_type
from ..schema import ArraySpec
from .fleet_sums import NoiseShare
from .secure_aggregation import MaskedVector, SecureRound

#: Fixed point of the progress loss sum in the histogram protocol (a progress metric, not maths).
LOSS_FRAC_BITS = 20
LOSS_BOUND = float(1 << 40)

Objective = Literal["softmax", "logistic", "squared_error"]
SketchKind = Literal["summary", "ddsketch"]
#: XGBoost's names: one scalar-leaf tree per output, or one tree with vector leaves per round.
MultiStrategy = Literal["one_output_per_tree", "multi_output_tree"]

F64_1D = ArraySpec(("float64",), ndim=1, finite=True)
F64_2D = ArraySpec(("float64",), ndim=2, finite=True)
COUNTS_1D = ArraySpec(("uint8", "uint16", "uint32", "int32", "int64"), ndim=1)
BIN_IDS = ArraySpec(("uint8", "uint16"), ndim=2)


def _nonnegative(name: str, array: np.ndarray) -> None:
    if array.size and array.min() < 0:
        raise ValueError(f"{name} must be >= 0")


def _length(name: str, array: np.ndarray, n: int) -> None:
    if array.shape[0] != n:
        raise ValueError(f"{name} has {array.shape[0]} entries, expected {n}")


@dataclass(frozen=True)
class XgbTask:
    """The job's fixed settings, repeated in every request (stateless clients, restarts).
    ``multi_strategy``: a boosting round's trees are one per output, or one with vector leaves
    (so a histogram request's node carries every output's G and H)."""

    objective: Objective
    feature_set_version: str
    n_features: int
    base_score: Annotated[np.ndarray, F64_1D]
    classes: tuple[str, ...] = ()  # label vocabulary; class id = index (classification only)
    multi_strategy: MultiStrategy = "one_output_per_tree"

    @property
    def n_outputs(self) -> int:
        return len(self.classes) if self.objective == "softmax" else 1

    @property
    def vector_leaves(self) -> bool:
        """One tree per round with ``n_outputs``-wide leaves (only meaningful for several outputs)."""
        return self.multi_strategy == "multi_output_tree" and self.n_outputs > 1

    @property
    def trees_per_round(self) -> int:
        return 1 if self.vector_leaves else self.n_outputs

    @property
    def node_columns(self) -> int:
        """``m``: outputs whose G and H a requested node's histogram carries."""
        return self.n_outputs if self.vector_leaves else 1

    @property
    def unit_hessian(self) -> bool:
        """Every window's Hessian is 1 (squared error): a private level release's count is its H."""
        return self.objective == "squared_error"

    def __post_init__(self) -> None:
        if self.n_features < 1:
            raise ValueError("n_features must be >= 1")
        n_outputs = self.n_outputs
        if self.objective == "softmax" and len(self.classes) < 2:
            raise ValueError("softmax needs at least two classes")
        if self.objective == "logistic" and len(self.classes) != 2:
            raise ValueError("logistic needs exactly two classes")
        if self.base_score.shape != (n_outputs,):
            raise ValueError(f"base_score must have shape ({n_outputs},), got {self.base_score.shape}")


@dataclass(frozen=True)
class ModelDelta:
    """Trees ``first_tree, first_tree + 1, ...`` of the job's model that the client may lack.

    ``trees`` is a ``TreeEnsemble.to_cbor()`` (kind "boosted", base score 0) or ``b""`` for none.
    """

    first_tree: int = 0
    trees: bytes = b""

    def __post_init__(self) -> None:
        if self.first_tree < 0:
            raise ValueError("first_tree must be >= 0")


@message_type("fedscs_xgb.sketch")
@dataclass(frozen=True)
class XgbSketchRequest:
    """Phase 1: update margins with ``model``, then sketch every feature weighted by the
    per-sample Hessian sum. ``summary_size`` is M of the weighted quantile summary; DDSketch
    uses ``ddsketch_alpha`` and the server's per-feature ``centers``/``scales``."""

    task: XgbTask
    model: ModelDelta
    sketch: SketchKind = "summary"
    summary_size: int = 256
    ddsketch_alpha: float = 0.01
    centers: Annotated[np.ndarray, F64_1D] | None = None
    scales: Annotated[np.ndarray, F64_1D] | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.summary_size <= 1 << 16:
            raise ValueError("summary_size must lie in 1..65536")
        if not 0 < self.ddsketch_alpha < 1:
            raise ValueError("ddsketch_alpha must lie in (0, 1)")
        if self.sketch == "ddsketch":
            d = self.task.n_features
            if self.centers is None or self.scales is None:
                raise ValueError("a ddsketch request needs centers and scales")
            _length("centers", self.centers, d)
            _length("scales", self.scales, d)
            if self.scales.size and self.scales.min() <= 0:
                raise ValueError("scales must be > 0")


@dataclass(frozen=True)
class SummaryColumns:
    """``shared.sketches.summaries_to_arrays`` on the wire: one row per feature (points float32
    when they are values of float32 features, as FedSCS-XGB's are)."""

    points: Annotated[np.ndarray, ArraySpec(("float32", "float64"), ndim=2, finite=True)]
    total_weight: Annotated[np.ndarray, F64_1D]
    count: Annotated[np.ndarray, COUNTS_1D]
    n_missing: Annotated[np.ndarray, COUNTS_1D]
    missing_weight: Annotated[np.ndarray, F64_1D]

    def __post_init__(self) -> None:
        d = self.points.shape[0]
        for name in ("total_weight", "count", "n_missing", "missing_weight"):
            _length(name, getattr(self, name), d)
            _nonnegative(name, getattr(self, name))


@dataclass(frozen=True)
class DDSketchColumns:
    """Per-feature DDSketch stores, concatenated; feature ``j``'s positive store is
    ``pos_keys[pos_offsets[j]:pos_offsets[j+1]]`` (same for the negative store)."""

    alpha: float
    pos_keys: Annotated[np.ndarray, ArraySpec(("int32",), ndim=1)]
    pos_weights: Annotated[np.ndarray, F64_1D]
    pos_offsets: Annotated[np.ndarray, ArraySpec(("int64",), ndim=1)]
    neg_keys: Annotated[np.ndarray, ArraySpec(("int32",), ndim=1)]
    neg_weights: Annotated[np.ndarray, F64_1D]
    neg_offsets: Annotated[np.ndarray, ArraySpec(("int64",), ndim=1)]
    zero_weight: Annotated[np.ndarray, F64_1D]
    count: Annotated[np.ndarray, COUNTS_1D]
    n_missing: Annotated[np.ndarray, COUNTS_1D]
    missing_weight: Annotated[np.ndarray, F64_1D]

    def __post_init__(self) -> None:
        d = self.zero_weight.shape[0]
        for side in ("pos", "neg"):
            keys, weights, offsets = (getattr(self, f"{side}_{n}") for n in ("keys", "weights", "offsets"))
            _length(f"{side}_weights", weights, keys.shape[0])
            _length(f"{side}_offsets", offsets, d + 1)
            if offsets[0] != 0 or offsets[-1] != keys.shape[0] or (np.diff(offsets) < 0).any():
                raise ValueError(f"{side}_offsets must rise from 0 to the number of keys")
            _nonnegative(f"{side}_weights", weights)
        for name in ("count", "n_missing", "missing_weight", "zero_weight"):
            _length(name, getattr(self, name), d)
            _nonnegative(name, getattr(self, name))


@message_type("fedscs_xgb.sketch_reply")
@dataclass(frozen=True)
class XgbSketchReply:
    """One sketch per feature: exactly one of ``summary`` and ``ddsketch``."""

    n_trees: int
    summary: SummaryColumns | None = None
    ddsketch: DDSketchColumns | None = None

    def __post_init__(self) -> None:
        if self.n_trees < 0:
            raise ValueError("n_trees must be >= 0")
        if (self.summary is None) == (self.ddsketch is None):
            raise ValueError("exactly one of summary and ddsketch must be present")


@message_type("fedscs_xgb.atoms")
@dataclass(frozen=True)
class XgbAtomRequest:
    """Phase 2: bin every sample with the broadcast edges (feature ``j``:
    ``edge_values[edge_offsets[j]:edge_offsets[j+1]]``, float32) and send the atoms."""

    task: XgbTask
    model: ModelDelta
    edge_values: Annotated[np.ndarray, ArraySpec(("float32",), ndim=1, finite=True)]
    edge_offsets: Annotated[np.ndarray, ArraySpec(("int64",), ndim=1)]

    def __post_init__(self) -> None:
        offsets = self.edge_offsets
        _length("edge_offsets", offsets, self.task.n_features + 1)
        if offsets[0] != 0 or offsets[-1] != self.edge_values.shape[0] or (np.diff(offsets) < 0).any():
            raise ValueError("edge_offsets must rise from 0 to the number of edge values")

    def edges(self) -> list[np.ndarray]:
        o = self.edge_offsets
        return [self.edge_values[o[j] : o[j + 1]] for j in range(self.task.n_features)]


@message_type("fedscs_xgb.atom_reply")
@dataclass(frozen=True)
class XgbAtomReply:
    """Atoms: distinct bin-id vectors ``keys`` (A, d), their sample ``counts`` (A,) and per-class
    sums ``grad``/``hess`` (A, K), float64 so the server's sums are exact enough for Lemma 1.
    ``loss_sum`` over ``n_samples``: the training loss at the client's margins (progress output;
    log-loss summed, or the sum of squared errors for regression)."""

    n_trees: int
    n_samples: int
    loss_sum: float
    keys: Annotated[np.ndarray, BIN_IDS]
    counts: Annotated[np.ndarray, COUNTS_1D]
    grad: Annotated[np.ndarray, F64_2D]
    hess: Annotated[np.ndarray, F64_2D]

    def __post_init__(self) -> None:
        if self.n_trees < 0 or self.n_samples < 0:
            raise ValueError("n_trees and n_samples must be >= 0")
        if self.loss_sum < 0:
            raise ValueError("loss_sum must be >= 0")
        a = self.keys.shape[0]
        _length("counts", self.counts, a)
        _length("grad", self.grad, a)
        if self.hess.shape != self.grad.shape:
            raise ValueError(f"hess has shape {self.hess.shape}, grad {self.grad.shape}")
        if self.counts.size and self.counts.min() < 1:
            raise ValueError("every atom must count at least one sample")
        if int(self.counts.sum()) != self.n_samples:
            raise ValueError(f"the atoms count {int(self.counts.sum())} samples, n_samples is {self.n_samples}")
        _nonnegative("hess", self.hess)


@dataclass(frozen=True)
class RoundSplits:
    """Splits decided so far in the current boosting round's trees, in level order: node ``node``
    of the round's tree ``tree`` (its output) sends bins ``<= bin`` of ``feature`` to ``left``
    (missing values to ``left`` iff ``default_left``), the rest to ``right``."""

    tree: Annotated[np.ndarray, ArraySpec(("int32", "int64"), ndim=1)]
    node: Annotated[np.ndarray, ArraySpec(("int32", "int64"), ndim=1)]
    feature: Annotated[np.ndarray, ArraySpec(("int32", "int64"), ndim=1)]
    bin: Annotated[np.ndarray, ArraySpec(("int32", "int64"), ndim=1)]
    default_left: Annotated[np.ndarray, ArraySpec(("uint8",), ndim=1)]
    left: Annotated[np.ndarray, ArraySpec(("int32", "int64"), ndim=1)]
    right: Annotated[np.ndarray, ArraySpec(("int32", "int64"), ndim=1)]

    def __post_init__(self) -> None:
        n = self.tree.shape[0]
        for name in ("node", "feature", "bin", "default_left", "left", "right"):
            _length(name, getattr(self, name), n)
        for name in ("tree", "node", "feature", "bin", "left", "right"):
            _nonnegative(name, getattr(self, name))

    @classmethod
    def empty(cls) -> RoundSplits:
        z = np.zeros(0, np.int64)
        return cls(z, z, z, z, np.zeros(0, np.uint8), z, z)


@message_type("fedscs_xgb.histograms")
@dataclass(frozen=True)
class XgbHistogramRequest:
    """One depth level of the round's trees: update margins with ``model``, bin with the edges,
    route the samples through ``splits``, then sum, for each requested node ``(node_tree[i],
    node_id[i])``, per feature and bin: G and H of the node's tree's output -- of every output
    for vector leaves -- (fixed point with ``frac_bits``) and the sample count. ``with_loss``:
    append the training loss sum (fixed point) and the sample count (progress output).
    ``noise``: add this gateway's share of DP noise."""

    task: XgbTask
    model: ModelDelta
    edge_values: Annotated[np.ndarray, ArraySpec(("float32",), ndim=1, finite=True)]
    edge_offsets: Annotated[np.ndarray, ArraySpec(("int64",), ndim=1)]
    splits: RoundSplits
    node_tree: Annotated[np.ndarray, ArraySpec(("int32", "int64"), ndim=1)]
    node_id: Annotated[np.ndarray, ArraySpec(("int32", "int64"), ndim=1)]
    frac_bits: int
    gradient_bound: float
    with_loss: bool = False
    secure: SecureRound | None = None
    noise: NoiseShare | None = None

    def __post_init__(self) -> None:
        offsets = self.edge_offsets
        _length("edge_offsets", offsets, self.task.n_features + 1)
        if offsets[0] != 0 or offsets[-1] != self.edge_values.shape[0] or (np.diff(offsets) < 0).any():
            raise ValueError("edge_offsets must rise from 0 to the number of edge values")
        _length("node_id", self.node_id, self.node_tree.shape[0])
        if self.node_tree.size and (self.node_tree.min() < 0 or self.node_tree.max() >= self.task.trees_per_round):
            raise ValueError("node_tree must name one of the round's trees")
        if not 0 <= self.frac_bits <= 60:
            raise ValueError("frac_bits must lie in 0..60")
        if not (np.isfinite(self.gradient_bound) and self.gradient_bound > 0):
            raise ValueError("gradient_bound must be finite and > 0")

    def edges(self) -> list[np.ndarray]:
        o = self.edge_offsets
        return [self.edge_values[o[j] : o[j + 1]] for j in range(self.task.n_features)]

    @property
    def slots(self) -> int:
        """Histogram slots per feature: every bin of the feature with the most edges, then missing."""
        return int(np.diff(self.edge_offsets).max(initial=0)) + 2

    #: G and H in fixed point need the whole 64-bit ring.
    word_bits = 64

    @property
    def stats(self) -> int:
        """Statistics per node and bin: ``G_0..G_{m-1}, H_0..H_{m-1}``, count (``XgbTask.node_columns``)."""
        return 2 * self.task.node_columns + 1

    @property
    def length(self) -> int:
        """Entries of the reply's vector: (nodes, stats, features, slots), then 2 if ``with_loss``."""
        return self.node_tree.shape[0] * self.stats * self.task.n_features * self.slots + 2 * self.with_loss


@message_type("fedscs_xgb.histogram_reply")
@dataclass(frozen=True)
class XgbHistogramReply:
    """The request's sums as one vector (plain or masked), and the trees the margins include."""

    n_trees: int
    sums: MaskedVector

    def __post_init__(self) -> None:
        if self.n_trees < 0:
            raise ValueError("n_trees must be >= 0")


#: Lattice steps one window's clipped gradient may span (keeps the noisy sums' ring words small).
MAX_LATTICE_STEPS = float(1 << 36)


@dataclass(frozen=True)
class PrivateLattice:
    """How a private release puts one window's statistics on integers (public, in every
    request): the gradient vector is clipped to L2 norm ``grad_bound``, the Hessian vector to
    ``hess_bound``; the gradient is multiplied by ``grad_scale`` (``None``: ``scale``), the
    Hessian by ``scale``, both rounded stochastically, and a window counts ``scale``. Regression
    sets ``grad_scale = scale / grad_bound``, so a clipped residual in target units weighs at
    most one window on the lattice. The aggregator derives the release's sensitivity from these
    bounds alone."""

    scale: int
    grad_bound: float
    hess_bound: float
    grad_scale: float | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.scale <= 1 << 16:
            raise ValueError("scale must lie in 1..65536")
        if not (np.isfinite(self.hess_bound) and 0 < self.hess_bound <= 1e6):
            raise ValueError("hess_bound must be finite and in (0, 1e6]")
        if not (np.isfinite(self.grad_bound) and 0 < self.grad_bound <= 1e30):
            raise ValueError("grad_bound must be finite and in (0, 1e30]")
        if self.grad_scale is not None and not (np.isfinite(self.grad_scale) and self.grad_scale > 0):
            raise ValueError("grad_scale must be finite and > 0")
        if not self.gradient_scale * self.grad_bound <= MAX_LATTICE_STEPS:
            raise ValueError("a window's clipped gradient must span at most 2**36 lattice steps")

    @property
    def gradient_scale(self) -> float:
        """Lattice steps per unit of gradient."""
        return float(self.scale if self.grad_scale is None else self.grad_scale)


@dataclass(frozen=True)
class PrivateRoundFeatures:
    """The round's tree may split only on ``features`` (ascending; drawn by the server from a
    public seed): their float32 edges, feature ``features[i]``'s being
    ``edge_values[edge_offsets[i]:edge_offsets[i+1]]``."""

    features: Annotated[np.ndarray, ArraySpec(("int32", "int64"), ndim=1)]
    edge_values: Annotated[np.ndarray, ArraySpec(("float32",), ndim=1, finite=True)]
    edge_offsets: Annotated[np.ndarray, ArraySpec(("int64",), ndim=1)]

    def __post_init__(self) -> None:
        k = self.features.shape[0]
        if k < 1 or (np.diff(self.features) <= 0).any() or self.features.min() < 0:
            raise ValueError("features must be distinct, ascending and >= 0")
        offsets = self.edge_offsets
        _length("edge_offsets", offsets, k + 1)
        if offsets[0] != 0 or offsets[-1] != self.edge_values.shape[0] or (np.diff(offsets) < 0).any():
            raise ValueError("edge_offsets must rise from 0 to the number of edge values")

    def edges(self) -> list[np.ndarray]:
        o = self.edge_offsets
        return [self.edge_values[o[i] : o[i + 1]] for i in range(self.features.shape[0])]

    @property
    def slots(self) -> int:
        """Histogram slots per feature: every bin of the feature with the most edges, then missing."""
        return int(np.diff(self.edge_offsets).max(initial=0)) + 2


def _check_private_round(round_: PrivateRoundFeatures, splits: RoundSplits, word_bits: int) -> None:
    """What both private requests must hold: a ring word the sums fit, splits on round features."""
    if word_bits not in (32, 64):
        raise ValueError("word_bits must be 32 or 64")
    if splits.feature.size and not np.isin(splits.feature, round_.features).all():
        raise ValueError("a split's feature is not one of the round's features")


@message_type("fedscs_xgb.private_level")
@dataclass(frozen=True)
class XgbPrivateLevelRequest:
    """One depth level of the private protocol: update margins with ``model``, route the windows
    through ``splits`` (their ``feature`` is a column of the job, one of ``round.features``), and
    sum, for each requested node, per round feature and slot, the lattice statistics of
    :class:`PrivateLattice` -- ``G_0..G_{m-1}, H_0..H_{m-1}, count``, without the H when
    ``task.unit_hessian`` (the count is the H) -- then add this gateway's share of the ``noise``.
    The vector is (nodes, stats, features, slots) in ``word_bits`` ring words, masked when
    ``secure`` says so."""

    task: XgbTask
    model: ModelDelta
    round: PrivateRoundFeatures
    splits: RoundSplits
    node_id: Annotated[np.ndarray, ArraySpec(("int32", "int64"), ndim=1)]
    lattice: PrivateLattice
    noise: NoiseShare
    secure: SecureRound | None = None
    word_bits: int = 32

    def __post_init__(self) -> None:
        if not self.node_id.shape[0]:
            raise ValueError("a level request names at least one node")
        _check_private_round(self.round, self.splits, self.word_bits)

    @property
    def stats(self) -> int:
        """Statistics per cell: G and H per output and the count (G and the count for a unit Hessian)."""
        m = self.task.node_columns
        return m + 1 if self.task.unit_hessian else 2 * m + 1

    @property
    def length(self) -> int:
        return self.node_id.shape[0] * self.stats * self.round.features.shape[0] * self.round.slots


@message_type("fedscs_xgb.private_leaves")
@dataclass(frozen=True)
class XgbPrivateLeavesRequest:
    """The round's tree is grown: per leaf in ``leaves``, the lattice sums ``G_0..G_{m-1},
    H_0..H_{m-1}`` of the windows that end in it, plus this gateway's share of the ``noise``
    (a vector (leaves, 2m))."""

    task: XgbTask
    model: ModelDelta
    round: PrivateRoundFeatures
    splits: RoundSplits
    leaves: Annotated[np.ndarray, ArraySpec(("int32", "int64"), ndim=1)]
    lattice: PrivateLattice
    noise: NoiseShare
    secure: SecureRound | None = None
    word_bits: int = 32

    def __post_init__(self) -> None:
        if not self.leaves.shape[0] or (np.diff(self.leaves) <= 0).any() or self.leaves.min() < 0:
            raise ValueError("a leaves request names at least one leaf, ascending and distinct")
        _check_private_round(self.round, self.splits, self.word_bits)

    @property
    def length(self) -> int:
        return self.leaves.shape[0] * 2 * self.task.node_columns
