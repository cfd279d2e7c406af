"""FedForest's server half (paper Alg. 1): a random forest grown level by level for all trees at
once, two synchronised rounds per level, from client summaries only.

Per level: (1) ``fedforest.level`` -- clients apply the previous decisions and return node
summaries and per-(node, feature) quantile sketches; the server pools the summaries, stops nodes
(depth, ``min_samples_split``, purity), and builds candidates: mixture-CDF thresholds for
continuous features, Fisher groupings for categorical features and for the client indicator H
(free: from the per-client node summaries); (2) ``fedforest.split`` -- clients return the left
summaries of the numeric candidates; the server evaluates the exact pooled impurity decrease of
every candidate (Thm. 3.5) and keeps the best per node. A forest of any size takes
``2 * max_depth`` rounds (+ the job's opening ``DataSummary``). The candidates are built in
``forest_candidates`` and scored in ``forest_growth``.

Missing values: every numeric split learns where NaN goes (``default_left`` in the model), as
xgboost does -- the candidate is scored with the node's missing rows on the right and on the
left (their pooled summary comes with the level reply, or from the histograms' missing slot),
and the better side wins (NaN right on a tie, and where the node saw no NaN). AvgImp, which
has no pooled left summaries, sends NaN right.

Regression is centred: clients sum ``y - shift`` with the node's mean as its shift (the server
sends one per node), so target offsets (timestamps, heart rates in ms) change nothing but the
leaf values (``forest_growth``).

Variants (same protocol): ``evaluation="avgimp"`` with ``top_l`` (clients send local gains
and left counts -- the pooled counts enforce ``min_samples_leaf``; homogeneous data),
``candidates="histogram"`` (Kalloori-style fixed-width bins on the fleet's min/max: the
Federated Histogram baseline), fixed ``thresholds`` per feature (the oracle tests' "same
candidates"), ``target="client"`` (predict H from X: the covariate-shift diagnostic).

Protocols (``FedForest.protocol``):

* ``"private"`` (the default): differential privacy under secure aggregation -- a noisy
  opening, one noisy release of the fleet's class counts (regression: window counts and sums of
  the target clipped to a public range) per feature and bin, trees grown by random splits on
  the best-scoring features, one noisy release of the leaves' class counts (regression: counts
  and sums) (``fedforest_private``, ``forest_private_growth``);
* ``"histogram"`` (secure sums without differential privacy, with a one-line warning): the job
  opens with fleet sums and fleet-wide edges read off fleet-summed
  grid counts (``private_fleet``); then each level is one round: per (node, sampled feature)
  pair and per bin of the edges, the summed window counts and weighted summary terms (secure
  aggregation by default). The candidates are the edges; every gain is the exact pooled gain of
  its candidate (left summaries are the histograms' partial sums), so the forest equals the
  centralized forest grown with those candidates, bootstrap and feature draws. No split leaves a
  child with fewer than ``min_crowd`` windows fleet-wide;
* ``"sketches"`` (the paper's, for reproduction, with a one-line warning): the two rounds per
  level above, per-client summaries and quantile sketches.

Determinism: per-tree client subsets come from ``default_rng(seed)``, each node's feature
subsample from ``default_rng([seed, tree, node])``, each client's bootstrap from (seed, tree,
client index); replies are summed in client-id order; gains equal up to rounding noise are ties.

Resuming: every completed level is reported with the server's state (``ForestState``: the split
decisions, the frontier and every pooled summary), which a server stores with the level; a job
restarted with it (``FedForest(resume_state=...)``) grows the next level on, and ends with the
forest an uninterrupted run grows (the draws above depend on nothing a crash loses).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, Literal, NamedTuple

import numpy as np

from shared.model import Tree, TreeBuilder, TreeEnsemble
from shared.model.inputs import CLIENT_FEATURE
from shared.node_statistics import top_per_node
from shared.protocol.codec import dumps_value, loads_value
from shared.protocol.errors import DecodeError
from shared.protocol.messages.fedforest import (
    ForestHistogramReply,
    ForestHistogramRequest,
    ForestLevelReply,
    ForestLevelRequest,
    ForestSplitReply,
    ForestSplitRequest,
    ForestTask,
    SplitDecisions,
)
from shared.protocol.messages.secure_aggregation import widen, word_bits_for
from shared.splitting import impurity, pooled_gain

from ..fleet_sums import FleetSummer
from ..jobs import FederatedJob, RoundProgress, TrainingError
from .fleet_data import FleetData, describe_fleet
from .levelwise_growth import decode
from .sum_checks import forest_histogram_violation, padding_mask
from .fedforest_private import PrivateForestTraining, ReleasePlan
from .private_fleet import check_privacy_settings, describe_fleet_privately, frac_bits_for, warn_if_not_private
from .forest_candidates import (
    CATEGORY,
    CLIENT,
    NUMERIC,
    Candidates,
    Grouping,
    NumericCandidates,
    PairSketches,
    gap_midpoints,
    grouping_candidates_of,
    groupings_table,
    histogram_candidates,
    numeric_candidates,
    with_missing_left,
)
from .forest_growth import child_shift, choose_splits, is_pure, leaf_value, n_sampled_features, node_count

__all__ = ["FedForest", "ForestFleet", "ForestResult", "ForestState", "forest_importance"]

log = logging.getLogger(__name__)

#: The private protocol's fixed point assumes no bootstrap multiplicity exceeds this: n draws
#: with replacement from n rows give one row 17 copies with probability ~1e-15, and a gateway
#: whose terms would exceed the bound declines the level ("value_range") instead of overflowing.
MAX_BOOTSTRAP_WEIGHT = 16
#: Bins per feature by protocol when ``n_bins`` is not set: coarse under differential privacy
#: (fewer, fuller cells next to the noise), the paper's 32 otherwise.
PRIVATE_BINS, DEFAULT_BINS = 16, 32


@dataclass(frozen=True)
class FedForest:
    """FedForest settings. The paper's experiments: ``n_trees=50, max_depth=8, n_bins=32,
    min_samples_leaf=5``, feature subsampling sqrt(d) (classification) / d/3 (regression).

    ``sketch_size``: quantile points per client sketch (M; default ``n_bins``).
    ``client_splits``: also split on the client indicator H (exempt from feature subsampling);
    the model then has one extra input, the client index (``model.metadata["clients"]`` lists
    the clients in index order).
    ``protocol`` (module docstring): ``"private"`` (the default unless
    ``secure_aggregation=False``), ``"histogram"`` (secure sums of exact per-bin sums, no
    differential privacy) or ``"sketches"`` (the paper's; reveals client values). Both non-DP
    protocols log a one-line warning. ``secure_aggregation``,
    ``secagg_degree``, ``min_crowd``: as for ``FedSCSXGB``. The histogram protocol offers exact
    evaluation of the edges' candidates, numeric features and the label target (no H-splits,
    categorical features or AvgImp: they need per-client statistics). ``n_bins``: default 16 in
    the private protocol, 32 otherwise.

    The private protocol spends ``dp_epsilon`` per window and training (``(dp_epsilon,
    dp_delta)``-DP for adding or removing one window, accounted by ``aggregator.privacy``),
    shared between the opening, the root histograms and the leaves by ``release_plan``. Every
    window is in every tree once (``bootstrap`` does not apply); the trees split at random, from
    the public ``seed``, on the ``dp_features`` features (default sqrt(d)) whose noisy root
    histograms score best (``max_features``, ``min_samples_*``, ``min_impurity_decrease`` and ``min_crowd`` do not
    apply: no node statistics are released). The model's metadata reports what was spent
    (``dp_epsilon``, ``dp_delta``, ``dp_rho``, ``dp_xi``).
    ``resume_state``: the ``ForestState`` bytes of a completed level (what a server stores with
    it); the job continues after that level, or starts over (logged) when the fleet no longer
    fits them. Private jobs report no state (two releases; the budget spent is not in a state).
    """

    n_trees: int = 50
    max_depth: int = 8
    n_bins: int | None = None
    sketch_size: int | None = None
    task: Literal["classification", "regression"] = "classification"
    criterion: Literal["gini", "entropy", "mse"] | None = None
    max_features: str | int | float | None = "auto"
    min_samples_split: int = 2
    min_samples_leaf: int = 1
    min_impurity_decrease: float = 0.0
    bootstrap: bool = True
    client_fraction: float = 1.0
    client_splits: bool = False
    evaluation: Literal["exact", "avgimp"] = "exact"
    top_l: int | None = None
    candidates: Literal["quantiles", "histogram"] = "quantiles"
    thresholds: tuple[np.ndarray, ...] | None = field(default=None, compare=False)
    categorical_features: tuple[int, ...] = ()
    n_categories: int = 0
    target: Literal["label", "client"] = "label"
    feature_set_version: str = ""
    classes: tuple[str, ...] | None = None
    protocol: Literal["private", "histogram", "sketches"] | None = None  # None: private
    secure_aggregation: bool | None = None  # None: on unless protocol="sketches"
    secagg_degree: int | None = None
    min_crowd: int = 5
    dp_epsilon: float = 8.0
    dp_delta: float = 1e-6
    dp_features: int | None = None  # None: sqrt(n_features)
    release_plan: ReleasePlan = ReleasePlan()
    resume_state: bytes | None = field(default=None, compare=False, repr=False)

    name: ClassVar[str] = "fedforest"

    def __post_init__(self) -> None:
        for name in ("n_trees", "min_samples_split"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 1):
                raise ValueError(f"{name} must be an int >= 1, got {getattr(self, name)!r}")
        if self.dp_features is not None and not (isinstance(self.dp_features, int) and self.dp_features >= 1):
            raise ValueError(f"dp_features must be an int >= 1 or None, got {self.dp_features!r}")
        if self.n_bins is not None and not (isinstance(self.n_bins, int) and 2 <= self.n_bins <= 65_535):
            raise ValueError(f"n_bins must be an int in 2..65535, got {self.n_bins!r}")
        if not (isinstance(self.max_depth, int) and self.max_depth >= 0):
            raise ValueError(f"max_depth must be an int >= 0, got {self.max_depth!r}")
        if not 0 < self.client_fraction <= 1:
            raise ValueError(f"client_fraction must lie in (0, 1], got {self.client_fraction}")
        if self.categorical_features and self.n_categories < 2:
            raise ValueError("categorical_features need n_categories >= 2 (codes 0..n_categories-1)")
        if self.top_l is not None and self.evaluation != "avgimp":
            raise ValueError("top_l shortlisting goes with evaluation='avgimp'")
        if self.target == "client" and self.client_splits:
            raise ValueError("predicting the client from X cannot also split on the client")
        if self.criterion is not None and (self.criterion == "mse") != self.regression:
            raise ValueError(f"criterion {self.criterion!r} does not fit task {self.task!r}")
        check_privacy_settings(self, paper="sketches", dp_possible=True)
        if self.protocol != "sketches":
            unsupported = [name for name, on in (("client_splits", self.client_splits),
                                                 ("categorical_features", bool(self.categorical_features)),
                                                 ("evaluation='avgimp'", self.evaluation != "exact"),
                                                 ("candidates='histogram'", self.candidates != "quantiles"),
                                                 ("target='client'", self.target != "label"),
                                                 ("thresholds", self.protocol == "private"
                                                  and self.thresholds is not None)) if on]
            if unsupported:
                raise ValueError(f"protocol={self.protocol!r} does not offer {', '.join(unsupported)} (they need "
                                 "per-client statistics or exact sums); use protocol='sketches'")

    @property
    def regression(self) -> bool:
        return self.task == "regression" and self.target == "label"

    @property
    def bins(self) -> int:
        """Bins per feature: ``n_bins``, else the protocol's default."""
        return self.n_bins or (PRIVATE_BINS if self.protocol == "private" else DEFAULT_BINS)

    @property
    def split_criterion(self) -> str:
        return self.criterion or ("mse" if self.regression else "gini")

    def fit(self, job: FederatedJob, *, seed: int = 0) -> TreeEnsemble:
        """Grow the forest over ``job``'s clients; returns a ``kind="forest"`` ensemble.

        Stopped early (``job.stop_here`` after level L), it returns the forest cut at depth L:
        the nodes still open become leaves with the pooled summaries their parents' splits
        already gave them. That is exactly the forest ``max_depth=L`` grows (same draws, same
        splits -- tested), so the model is honest about what it is: its metadata says
        ``max_depth`` L. With ``evaluation="avgimp"`` the open nodes have no summary yet (it
        comes with the next level), so there is no such forest and stopping raises
        ``TrainingError`` instead of saving leaves without values.
        """
        return self.fit_with_diagnostics(job, seed=seed).model

    def fit_with_diagnostics(self, job: FederatedJob, *, seed: int = 0) -> ForestResult:
        """:meth:`fit`, plus what the server learnt growing the forest (:class:`ForestResult`)."""
        warn_if_not_private(self, "sketches", log)
        if self.protocol != "private":
            return _Training(self, job, seed).run()
        model, grown = PrivateForestTraining(self, job, seed).run()
        return ForestResult(model, grown.importance(), grown.root_gain(self.split_criterion),
                            [LevelCounts(0, 1, int(grown.screening.score.shape[0]),
                                         int(np.isfinite(grown.screening.score).sum()))])


def _vector_violation(values: np.ndarray, shape: tuple[int, ...], word_bits: int,
                      in_range: Callable[[np.ndarray], str | None]) -> str | None:
    """``in_range`` of one gateway's plain level vector, or None for a vector the sum already
    holds without it (merge workers add it up elsewhere)."""
    if values.shape[0] != int(np.prod(shape)):
        return None
    return in_range(widen(values, word_bits).view(np.int64).reshape(shape))


def forest_importance(per_tree: np.ndarray) -> np.ndarray:
    """scikit-learn's ``RandomForest*.feature_importances_`` from each tree's summed weighted
    impurity decreases per feature (``per_tree``, shape ``(n_trees, n_features)``): every tree's
    row normalised to sum to 1, the mean over the trees that split, normalised again (zeros when
    no tree splits). Per tree, so that every tree weighs the same whatever its root's weight and
    impurity (a bootstrap draw or a client sample with a larger root would otherwise count more).

    Examples
    --------
    >>> forest_importance(np.array([[3.0, 1.0], [0.0, 0.0], [0.0, 10.0]])).tolist()
    [0.375, 0.625]
    """
    totals = per_tree.sum(axis=1)
    split = totals > 0
    if not split.any():
        return np.zeros(per_tree.shape[1])
    mean = (per_tree[split] / totals[split, None]).mean(axis=0)
    return mean / mean.sum()


@dataclass(frozen=True, eq=False)
class ForestResult:
    """The forest plus what the server learnt growing it: per-feature impurity importance
    (scikit-learn's: per tree the weighted decrease summed over splits and normalised, averaged
    over the trees, :func:`forest_importance`; the client indicator last when used),
    the largest root split gain relative to the root impurity (§F.4's statistic), and the
    number of nodes, pairs and candidates per level."""

    model: TreeEnsemble
    importance: np.ndarray
    root_gain: float
    levels: list[LevelCounts]


@dataclass(frozen=True)
class LevelCounts:
    """One level's work, the counts App. A's cost model is written in (``bench_fedforest_cost``)."""

    level: int
    nodes: int  # frontier nodes grown at this level
    pairs: int  # (node, sampled feature) pairs
    candidates: int  # candidate thresholds evaluated


@dataclass(frozen=True, eq=False)
class ForestFleet:
    """The fleet a forest is grown on, as the job's setup described it: what a stored
    :class:`ForestState` must have been grown on to be resumed. Classes are kept as strings
    (the model's may be ints); ``edges`` are the job's candidate edges of every feature, one after
    the other (float64; empty when the sketches choose them), ``edge_offsets`` where each
    feature's start (int64, ``n_features + 1`` entries, or ``[0]``)."""

    clients: tuple[str, ...]
    n_features: int
    feature_names: tuple[str, ...]
    classes: tuple[str, ...]
    model_classes: tuple[str, ...]
    total_samples: int
    root_shift: float
    edges: np.ndarray
    edge_offsets: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        """The CBOR form (lists for the tuples), as ``ForestState.to_cbor`` stores it."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
                for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ForestFleet:
        """Inverse of :meth:`to_dict` (``KeyError``/``TypeError`` for another layout)."""
        tuples = {name: tuple(values[name]) for name in ("clients", "feature_names", "classes", "model_classes")}
        return cls(**{**values, **tuples})

    def differences(self, other: ForestFleet) -> list[str]:
        """The fields in which ``other`` describes another fleet (compared as stored)."""
        mine, theirs = self.to_dict(), other.to_dict()
        return [name for name in mine if dumps_value(mine[name]) != dumps_value(theirs[name])]


@dataclass(frozen=True, eq=False)
class ForestState:
    """What the server holds after level ``levels_done - 1``: enough to grow the next level on,
    stored as CBOR (``shared.protocol.codec``) with the level it follows.

    ``fleet`` (:class:`ForestFleet`) describes the fleet the state was grown on (clients,
    features, classes, sample count, candidate edges); a resumed job compares it with its own and
    starts over if they differ (the data changed). ``decisions`` are every level's splits (the
    trees are rebuilt by replaying them; one table per level); ``frontier_*`` the open nodes (``frontier_known``: 0
    where AvgImp has no summary yet); ``known_*`` every pooled summary the model's leaves take
    their values from; ``distinct_*`` the private protocol's window counts per node (the crowd
    rule).

    The state holds only what the server already learnt (fleet-level sums and its own
    decisions). A resumed attempt runs with gateways that know nothing of the job yet: the
    first level request hands each of them the decisions of every completed level at once, as
    it does for a gateway that missed levels, so they learn the same split decisions as in an
    uninterrupted run, and the rounds after it ask for exactly what that run asks for.
    """

    levels_done: int
    fleet: ForestFleet
    decisions: tuple[SplitDecisions, ...]  # one per completed level
    frontier_tree: np.ndarray
    frontier_node: np.ndarray
    frontier_known: np.ndarray
    frontier_summary: np.ndarray
    frontier_shift: np.ndarray
    known_tree: np.ndarray
    known_node: np.ndarray
    known_summary: np.ndarray
    known_shift: np.ndarray
    importance: np.ndarray  # (n_trees, n_features + 1): per tree, the weighted impurity decreases
    root_weight: np.ndarray
    root_gains: np.ndarray
    level_counts: np.ndarray  # (levels, 4): level, nodes, pairs, candidates
    distinct_tree: np.ndarray
    distinct_node: np.ndarray
    distinct_count: np.ndarray

    VERSION: ClassVar[int] = 2  # 2: importance per tree (version 1 summed them over the trees)

    def to_cbor(self) -> bytes:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "decisions"}
        values["fleet"] = self.fleet.to_dict()
        return dumps_value({"version": self.VERSION, **values,
                            "decisions": [{f.name: getattr(d, f.name) for f in dataclasses.fields(d)}
                                          for d in self.decisions]})

    @classmethod
    def from_cbor(cls, data: bytes) -> ForestState:
        """The state in ``data``; ``ValueError`` if it is not one this version wrote."""
        try:
            values = loads_value(data, max_bytes=len(data))
        except DecodeError as exc:
            raise ValueError(f"not a forest state: {exc}") from None
        if not isinstance(values, dict) or values.pop("version", None) != cls.VERSION:
            raise ValueError(f"not a version-{cls.VERSION} forest state")
        try:
            values["decisions"] = tuple(SplitDecisions(**d) for d in values["decisions"])
            values["fleet"] = ForestFleet.from_dict(values["fleet"])
            return cls(**values)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a forest state: {exc}") from None


@dataclass
class _Node:
    """A node of the frontier. ``summary`` (pooled; None until known) is centred on ``shift``
    (regression: sums of ``y - shift``; 0 for classification), see ``forest_growth``."""

    tree: int
    node: int
    depth: int
    summary: np.ndarray | None = None
    features: np.ndarray | None = None
    shift: float = 0.0


@dataclass
class _SplitPool:
    """A split round pooled: exact left summaries, or AvgImp's n-weighted local gain sums and left
    counts, per numeric candidate; and the clients whose replies went in."""

    left: np.ndarray
    left_count: np.ndarray
    gain_sum: np.ndarray
    used: set[str]

    @classmethod
    def empty(cls, n: int, S: int, used: set[str]) -> _SplitPool:
        return cls(np.zeros((n, S)), np.zeros(n), np.zeros(n), used)


class _Known(NamedTuple):
    """What the server knows of a node for its model: the pooled summary and its shift."""

    summary: np.ndarray
    shift: float


class _Training:
    def __init__(self, config: FedForest, job: FederatedJob, seed: int) -> None:
        self.config = config
        self.job = job
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.crit = config.split_criterion

    # -- setup ---------------------------------------------------------------------------------

    def _setup(self) -> FleetData:
        cfg = self.config
        fleet = describe_fleet(self.job, cfg.feature_set_version, regression=cfg.regression, classes=cfg.classes)
        self._set_fleet(fleet.clients, fleet.n_features, fleet.feature_names, fleet.classes, fleet.model_classes)
        self.root_shift = fleet.target_sum / fleet.total_samples if cfg.regression and fleet.total_samples else 0.0
        self.total_samples = fleet.total_samples
        if self.categorical.size and self.categorical.max() >= self.d:
            raise TrainingError(f"categorical feature {int(self.categorical.max())} does not exist ({self.d} features)")
        if cfg.thresholds is not None:
            if len(cfg.thresholds) != self.d:
                raise TrainingError(f"{len(cfg.thresholds)} threshold arrays for {self.d} features")
            self.fixed = [np.unique(np.asarray(t, dtype=np.float64)) for t in cfg.thresholds]
        elif cfg.candidates == "histogram":
            self.fixed = [np.linspace(lo, hi, cfg.bins + 1)[1:-1] if hi > lo else np.zeros(0)
                          for lo, hi in zip(fleet.minimum, fleet.maximum)]
        else:
            self.fixed = None
        return fleet

    def _set_fleet(self, clients, n_features, feature_names, classes, model_classes) -> None:
        cfg = self.config
        self.clients = list(clients)
        self.index = {c: i for i, c in enumerate(self.clients)}
        self.d = n_features
        if cfg.target == "client":
            self.classes, self.model_classes = tuple(self.clients), tuple(self.clients)
        else:
            self.classes, self.model_classes = classes, model_classes
        if not cfg.regression and len(self.classes) < 2:
            raise TrainingError(f"classification needs at least 2 classes, the clients have {list(self.classes)}")
        self.S = 3 if cfg.regression else len(self.classes)
        self.feature_names = feature_names
        self.k_features = n_sampled_features(cfg.max_features, self.d, cfg.regression)
        self.categorical = np.array(sorted(set(cfg.categorical_features)), dtype=np.int64)
        m = max(1, math.ceil(cfg.client_fraction * len(self.clients)))
        self.tree_clients = [np.arange(len(self.clients)) if m == len(self.clients)
                             else np.sort(self.rng.choice(len(self.clients), size=m, replace=False))
                             for _ in range(cfg.n_trees)]
        self.trees_of = [np.array([t for t, members in enumerate(self.tree_clients) if k in members], dtype=np.int64)
                         for k in range(len(self.clients))]  # per client index: the trees it takes part in

    def _setup_private(self) -> None:
        """The private opening: shape, fleet sums and fleet-wide edges (``private_fleet``)."""
        cfg = self.config
        self.summer = FleetSummer(self.job, secure=cfg.secure_aggregation, degree=cfg.secagg_degree)
        self.summer.start(self.job.clients)
        fleet = describe_fleet_privately(self.job, self.summer, cfg.feature_set_version, regression=cfg.regression,
                                         n_bins=cfg.bins, classes=cfg.classes)
        self._set_fleet(fleet.clients, fleet.n_features, fleet.feature_names, fleet.classes, fleet.model_classes)
        edges = fleet.edges
        if cfg.thresholds is not None:
            if len(cfg.thresholds) != self.d:
                raise TrainingError(f"{len(cfg.thresholds)} threshold arrays for {self.d} features")
            edges = [np.unique(np.asarray(t, dtype=np.float32)) for t in cfg.thresholds]
        if fleet.total_samples < max(cfg.min_crowd, 1):
            raise TrainingError(f"the fleet holds {fleet.total_samples} samples, fewer than the minimum crowd "
                                f"({cfg.min_crowd})")
        self.edges = [np.asarray(e, dtype=np.float32) for e in edges]
        self.edge_offsets = np.concatenate([[0], np.cumsum([e.size for e in self.edges])]).astype(np.int64)
        self.edge_values = np.concatenate(self.edges) if self.edges else np.zeros(0, np.float32)
        self.root_shift = fleet.target_mean if cfg.regression else 0.0
        self.total_samples = fleet.total_samples
        if cfg.regression:
            # Clients sum w * (y - shift) and w * (y - shift)^2 with node means as shifts, so every
            # term is bounded by the targets' spread, not their size: |y - shift| <= range(y) <=
            # 2 sqrt(V), so (y - shift)^2 <= 4 V, with V = sum (y - mean)^2 (``target_spread``:
            # from the opening's sums around the fleet median, plus their rounding) and w <=
            # MAX_BOOTSTRAP_WEIGHT. The spread, not the offset, sets the fixed point, so an offset
            # leaves the precision alone.
            n = fleet.total_samples
            bound = 4.0 * max(fleet.target_spread, 1.0)
            self.frac_bits = frac_bits_for(MAX_BOOTSTRAP_WEIGHT * n, bound)
            self.value_bound = MAX_BOOTSTRAP_WEIGHT * bound
            self.word_bits = 64
        else:  # a tree's (bootstrap) weights add up to the fleet's windows: every cell is below that
            # (with the grid counts' headroom, private_fleet)
            self.frac_bits, self.value_bound = 0, 1.0
            self.word_bits = word_bits_for(2 * fleet.total_samples + 64)

    def _task(self, client: str) -> ForestTask:
        cfg = self.config
        k = self.index[client]
        return ForestTask(task="regression" if cfg.regression else "classification", criterion=self.crit,
                          feature_set_version=cfg.feature_set_version, n_features=self.d, n_trees=cfg.n_trees,
                          client_index=k, trees=self.trees_of[k], seed=self.seed, bootstrap=cfg.bootstrap,
                          classes=self.classes if cfg.target == "label" else (), target=cfg.target,
                          n_clients=len(self.clients))

    # -- the level loop ------------------------------------------------------------------------

    def run(self) -> ForestResult:
        cfg = self.config
        histogram = cfg.protocol == "histogram"
        self._setup_private() if histogram else self._setup()
        self.depth = cfg.max_depth
        start, frontier = self._resumed() if cfg.resume_state is not None else (0, self._fresh())
        for level in range(start, cfg.max_depth + 1):
            if not frontier:
                break
            started = time.monotonic()
            frontier = self._private_level(level, frontier) if histogram else self._level(level, frontier)
            progress = RoundProgress(self.job.job_id, cfg.name, level + 1, cfg.max_depth + 1, len(self.clients),
                                     self._answered, {"nodes": float(self._n_active), "splits": float(self._n_splits)},
                                     time.monotonic() - started)
            self.job.report(progress, state=lambda: self._state(level + 1, frontier).to_cbor())
            if frontier and self.job.stop_here(progress):
                self._cut(level + 1, frontier)
                break
        return ForestResult(self._model(), self._normalised_importance(), float(max(self.root_gains, default=0.0)),
                            self.levels)

    # -- state for resuming ----------------------------------------------------------------------

    def _fresh(self) -> list[_Node]:
        """Start at the roots: empty trees, nothing known; the first level's frontier."""
        cfg = self.config
        self.builders = [TreeBuilder(np.zeros(1 if cfg.regression else self.S)) for _ in range(cfg.n_trees)]
        self.summary_of: dict[tuple[int, int], _Known] = {}
        self.root_weight = np.zeros(cfg.n_trees)
        self.importance = np.zeros((cfg.n_trees, self.d + 1))  # per tree: weighted impurity decrease
        self.root_gains: list[float] = []
        self.known: dict[str, int] = {}  # client -> last level whose decisions it applied
        self.decisions: list[SplitDecisions] = []  # one per decided level
        self.levels: list[LevelCounts] = []
        self.children_of: dict[tuple[int, int], tuple[int, int]] = {}
        if self.config.protocol == "histogram":
            self.distinct_of: dict[tuple[int, int], int] = {}
        return [_Node(t, 0, 0, shift=self.root_shift) for t in range(cfg.n_trees)]

    def _fleet(self) -> ForestFleet:
        """The fleet as this job's setup described it: what a stored state must have been grown on."""
        if self.config.protocol == "histogram":
            edges, offsets = self.edge_values.astype(np.float64), self.edge_offsets
        elif self.fixed is not None:
            edges = np.concatenate(self.fixed) if self.fixed else np.zeros(0)
            offsets = np.concatenate([[0], np.cumsum([f.size for f in self.fixed])]).astype(np.int64)
        else:
            edges, offsets = np.zeros(0), np.zeros(1, np.int64)
        return ForestFleet(clients=tuple(self.clients), n_features=int(self.d), feature_names=tuple(self.feature_names),
                           classes=tuple(str(c) for c in self.classes),
                           model_classes=tuple(str(c) for c in self.model_classes),
                           total_samples=int(self.total_samples), root_shift=float(self.root_shift),
                           edges=np.asarray(edges, np.float64), edge_offsets=np.asarray(offsets, np.int64))

    def _state(self, levels_done: int, frontier: list[_Node]) -> ForestState:
        S = self.S
        known = sorted(self.summary_of.items())
        distinct = sorted(getattr(self, "distinct_of", {}).items())
        ints = lambda values: np.array(values, dtype=np.int64)  # noqa: E731
        rows = lambda values: np.array(values, dtype=np.float64).reshape(-1, S)  # noqa: E731
        return ForestState(
            levels_done=levels_done, fleet=self._fleet(), decisions=tuple(self.decisions),
            frontier_tree=ints([n.tree for n in frontier]), frontier_node=ints([n.node for n in frontier]),
            frontier_known=np.array([n.summary is not None for n in frontier], dtype=np.uint8),
            frontier_summary=rows([np.zeros(S) if n.summary is None else n.summary for n in frontier]),
            frontier_shift=np.array([n.shift for n in frontier], dtype=np.float64),
            known_tree=ints([k[0] for k, _ in known]), known_node=ints([k[1] for k, _ in known]),
            known_summary=rows([v.summary for _, v in known]),
            known_shift=np.array([v.shift for _, v in known], dtype=np.float64),
            importance=self.importance.copy(), root_weight=self.root_weight.copy(),
            root_gains=np.array(self.root_gains, dtype=np.float64),
            level_counts=ints([[c.level, c.nodes, c.pairs, c.candidates] for c in self.levels]).reshape(-1, 4),
            distinct_tree=ints([k[0] for k, _ in distinct]), distinct_node=ints([k[1] for k, _ in distinct]),
            distinct_count=ints([v for _, v in distinct]))

    def _resumed(self) -> tuple[int, list[_Node]]:
        """The first level to grow and its frontier from ``config.resume_state``, or level 0 from
        the roots (logged) when the state does not fit this job's fleet."""
        try:
            state = ForestState.from_cbor(self.config.resume_state)
        except ValueError as exc:
            reason = str(exc)
        else:
            reason = self._unfit(state)
        if reason is not None:
            log.warning("not resuming the forest: starting over from the first level",
                        extra={"job": self.job.job_id, "reason": reason})
            return 0, self._fresh()
        self._fresh()
        self.decisions = list(state.decisions)
        for decided in self.decisions:  # the trees, split for split in the order they grew
            for i in range(decided.level.shape[0]):
                t, node = int(decided.tree[i]), int(decided.node[i])
                lo, hi = decided.category_offsets[i], decided.category_offsets[i + 1]
                ids = self.builders[t].split(node, int(decided.feature[i]), float(decided.threshold[i]),
                                             default_left=bool(decided.nan_left[i]),
                                             categories=decided.categories[lo:hi].tolist()
                                             if decided.categorical[i] else None)
                if ids != (int(decided.left[i]), int(decided.right[i])):
                    raise TrainingError(f"a stored split of tree {t} node {node} does not rebuild (children {ids})")
                self.children_of[(t, node)] = ids
        self.summary_of = {(int(t), int(n)): _Known(state.known_summary[i], float(state.known_shift[i]))
                           for i, (t, n) in enumerate(zip(state.known_tree, state.known_node))}
        self.importance, self.root_weight = state.importance.copy(), state.root_weight.copy()
        self.root_gains = state.root_gains.tolist()
        self.levels = [LevelCounts(*map(int, row)) for row in state.level_counts]
        if self.config.protocol == "histogram":
            self.distinct_of = {(int(t), int(n)): int(c) for t, n, c in
                                zip(state.distinct_tree, state.distinct_node, state.distinct_count)}
        frontier = [_Node(int(t), int(n), state.levels_done, state.frontier_summary[i] if state.frontier_known[i]
                          else None, shift=float(state.frontier_shift[i]))
                    for i, (t, n) in enumerate(zip(state.frontier_tree, state.frontier_node))]
        log.info("resuming the forest", extra={"job": self.job.job_id, "from_level": state.levels_done})
        return state.levels_done, frontier

    def _unfit(self, state: ForestState) -> str | None:
        """Why ``state`` cannot continue this job (None: it can)."""
        changed = state.fleet.differences(self._fleet())
        if changed:
            return f"the fleet changed since the stored level ({', '.join(changed)})"
        n_trees = self.config.n_trees
        if state.root_weight.shape != (n_trees,) or state.importance.shape != (n_trees, self.d + 1) or \
                state.known_summary.shape[1:] != (self.S,) or not 0 < state.levels_done <= self.config.max_depth + 1:
            return "the stored state does not fit the job's settings"
        return None

    def _level(self, level: int, frontier: list[_Node]) -> list[_Node]:
        cfg = self.config
        splittable_depth = level < cfg.max_depth
        for node in frontier:
            eligible = splittable_depth and (node.summary is None or self._can_split(node.summary))
            node.features = self._features(node) if eligible else np.zeros(0, np.int64)
        request = self._level_request(level, frontier)
        replies = self.job.ask(request, list(request), ForestLevelReply)
        replies = self._accepted_level(replies, level, len(frontier), request)
        self._answered = len(replies)
        if not replies:
            raise TrainingError(f"level {level}: no usable replies")
        A = len(frontier)
        per_client = np.zeros((len(self.clients), A, self.S))
        for client, reply in replies.items():
            per_client[self.index[client], reply.nodes] = reply.summaries
        self._set_summaries(level, frontier, per_client.sum(axis=0))
        can = np.array([node.features.size > 0 and self._can_split(node.summary) for node in frontier], dtype=bool)
        self._n_active = int(can.sum())
        any_request = next(iter(request.values()))
        pair_node = np.repeat(np.arange(A), np.diff(any_request.feature_offsets))
        pair_feature = any_request.features
        eligible = can[pair_node] & ~np.isin(pair_feature, self.categorical)
        if cfg.top_l:
            eligible &= self._shortlist(pair_node, pair_feature, replies)
        numeric = numeric_candidates(pair_node, pair_feature, eligible, cfg.bins, fixed=self.fixed,
                                     sketches=None if self.fixed is not None else self._sketches(replies))
        pool = _SplitPool.empty(numeric.thresholds.shape[0], self.S, set(replies))
        if numeric.thresholds.size:
            split_request = {c: ForestSplitRequest(request[c].task, level, numeric.offsets, numeric.thresholds,
                                                   cfg.evaluation) for c in replies}
            split_replies = self.job.ask(split_request, list(split_request), ForestSplitReply)
            pool = self._pool_split_replies(numeric, split_replies, per_client)
        dropped = [self.index[c] for c in replies if c not in pool.used]
        if dropped:  # their samples are in no left sum: take them out of the level altogether
            per_client[dropped] = 0.0
            self._set_summaries(level, frontier, per_client.sum(axis=0))
            can &= np.array([self._can_split(node.summary) for node in frontier], dtype=bool)
        pooled = per_client.sum(axis=0)
        cands = Candidates.numeric(numeric, pool.left, pool.left_count)
        if cfg.evaluation == "exact":  # NaN-left twins need exact left summaries
            missing = self._pooled_missing(replies, pool.used, numeric.n_pairs)
            cands = with_missing_left(cands, numeric.pair, missing, node_count(missing, self.crit))
        n_numeric = cands.size
        cands = cands.concat(groupings_table(self._groupings(pair_node, pair_feature, can, replies, per_client),
                                             self.S, self.crit))
        gain = None
        if cfg.evaluation == "avgimp":  # numeric: the n-weighted mean of local gains; groupings: exact
            gain = pooled_gain(pooled[cands.node], cands.left, self.crit)
            n_node = node_count(pooled, self.crit)[cands.node[:n_numeric]]
            gain[:n_numeric] = pool.gain_sum / np.where(n_node > 0, n_node, 1.0)
        best, best_gain = choose_splits(
            pooled, cands.node, cands.left, cands.feature, cands.rank, self.crit,
            min_samples_leaf=cfg.min_samples_leaf, min_impurity_decrease=cfg.min_impurity_decrease,
            total_weight=self.root_weight[[n.tree for n in frontier]], cand_gain=gain,
            cand_left_count=cands.left_count,
        )
        best[~can] = -1
        self._n_splits = int((best >= 0).sum())
        self.levels.append(LevelCounts(level, A, numeric.n_pairs, cands.size))
        if self.fixed is None and not cfg.top_l:  # sketch candidates: split in the middle of the gap
            cands = self._centred_in_gaps(cands, best, pair_node, pair_feature, replies)
        return self._apply(level, frontier, best, best_gain, cands)

    def _private_level(self, level: int, frontier: list[_Node]) -> list[_Node]:
        """One level of the private protocol: a single fleet sum of per-bin histograms."""
        cfg = self.config
        crowd = max(cfg.min_crowd, 1)
        for node in frontier:  # a root is always described (its sums come from its pairs), split or not
            eligible = level < cfg.max_depth and (node.summary is None or (  # two children of >= crowd each
                self._can_split(node.summary) and self.distinct_of[(node.tree, node.node)] >= 2 * crowd))
            node.features = self._features(node) if eligible or node.summary is None else np.zeros(0, np.int64)
        offsets = np.concatenate([[0], np.cumsum([n.features.size for n in frontier])]).astype(np.int64)
        features = np.concatenate([n.features for n in frontier]).astype(np.int64)
        A, P = len(frontier), features.shape[0]
        self._answered, self._n_active = len(self.summer.active), int((np.diff(offsets) > 0).sum())
        self._n_splits = 0
        if P == 0:
            return []
        node_tree = np.array([n.tree for n in frontier], dtype=np.int64)
        node_id = np.array([n.node for n in frontier], dtype=np.int64)
        active = list(self.summer.active)
        requests = {c: ForestHistogramRequest(
            self._task(c), level, self._decisions_since(self.known.get(c, -1) + 1), node_tree, node_id, offsets,
            features, self.edge_values, self.edge_offsets, self.frac_bits, self.value_bound,
            self.summer.secure_round(c, active), self.word_bits, None, self._shifts(frontier)) for c in active}
        any_request = next(iter(requests.values()))
        shape = (P, any_request.slots, any_request.terms)
        in_range = partial(forest_histogram_violation, pair_node=np.repeat(np.arange(A), np.diff(offsets)),
                           padding=padding_mask(self.edge_offsets, features), regression=cfg.regression,
                           max_weight=MAX_BOOTSTRAP_WEIGHT)
        visible = not self.summer.secure  # plain sums: each gateway's vector is checked and a liar left out
        liars: set[str] = set()

        def check(client: str, reply: ForestHistogramReply) -> str | None:
            why = _vector_violation(reply.sums.values, shape, any_request.word_bits, in_range) if visible else None
            if why:
                liars.add(client)
            return why

        result = self.summer.ask(requests, ForestHistogramReply, lambda r: r.sums, any_request.length,
                                 word_bits=any_request.word_bits, check=check)
        self.summer.leave_out(liars)
        for client in active:
            if client in result.contributors:
                self.known[client] = level - 1
            else:
                self.known.pop(client, None)
        self._answered = len(result.contributors)
        hist = result.total.view(np.int64).reshape(shape)
        why = in_range(hist) or self._grown_children(frontier, offsets, hist[..., 0])
        if why:
            raise TrainingError(f"level {level}: the fleet's histograms break a range check: {why} (in the sum of "
                                f"{len(result.contributors)} gateways: "
                                f"{'secure aggregation hides which' if self.summer.secure else 'none alone shows it'})")
        windows, sums = hist[..., 0], hist[..., 1:].astype(np.float64)
        if cfg.regression:
            sums[..., 1:] = decode(hist[..., 2:], self.frac_bits)
        pair_node = np.repeat(np.arange(A), np.diff(offsets))
        first_pair = offsets[:-1][np.diff(offsets) > 0]
        # A node's totals: any of its pairs summed over all slots. They equal the parent split's
        # child sums unless a client dropped out since; then this level's cohort is the truth.
        for p in first_pair.tolist():
            node = frontier[pair_node[p]]
            self.distinct_of[(node.tree, node.node)] = int(windows[p].sum())
            node.summary = sums[p].sum(axis=0)
            self.summary_of[(node.tree, node.node)] = _Known(node.summary, node.shift)
            if level == 0:
                self.root_weight[node.tree] = node_count(node.summary, self.crit)
        can = np.array([level < cfg.max_depth and n.features.size > 0 and self._can_split(n.summary)
                        for n in frontier], dtype=bool)
        cands, left_windows = histogram_candidates(sums, windows, features, pair_node, self.edge_values,
                                                   self.edge_offsets, crowd, self.crit)
        pooled = np.stack([n.summary if n.summary is not None else np.zeros(self.S) for n in frontier])
        best, best_gain = choose_splits(pooled, cands.node, cands.left, cands.feature, cands.rank, self.crit,
                                        min_samples_leaf=cfg.min_samples_leaf,
                                        min_impurity_decrease=cfg.min_impurity_decrease,
                                        total_weight=self.root_weight[node_tree])
        best[~can] = -1
        self._n_splits = int((best >= 0).sum())
        self.levels.append(LevelCounts(level, A, P, cands.size))
        children = self._apply(level, frontier, best, best_gain, cands)
        for i in np.flatnonzero(best >= 0).tolist():  # the children's window counts, for the crowd
            node, c = frontier[i], int(best[i])
            left_id, right_id = self.children_of[(node.tree, node.node)]
            total = self.distinct_of[(node.tree, node.node)]
            self.distinct_of[(node.tree, left_id)] = int(left_windows[c])
            self.distinct_of[(node.tree, right_id)] = total - int(left_windows[c])
        return children

    def _grown_children(self, frontier: list[_Node], offsets: np.ndarray, windows: np.ndarray) -> str | None:
        """A node of ``frontier`` holding more windows than its parent's split gave it (clients only
        ever leave a job, so a child's count never grows), or None."""
        for i, node in enumerate(frontier):
            known = self.distinct_of.get((node.tree, node.node))
            if offsets[i + 1] > offsets[i] and known is not None and int(windows[offsets[i]].sum()) > known:
                return (f"node {node.node} of tree {node.tree} holds {int(windows[offsets[i]].sum())} windows, "
                        f"the parent split gave it {known}")
        return None

    def _cut(self, depth: int, frontier: list[_Node]) -> None:
        """Stop at ``depth``: the open ``frontier`` nodes stay leaves (see ``FedForest.fit``)."""
        if any(node.summary is None for node in frontier):
            raise TrainingError(f"stopped after level {depth}: with evaluation='avgimp' the open nodes learn their "
                                "summaries only at the next level, so no forest can be cut here")
        self.depth = depth

    def _features(self, node: _Node) -> np.ndarray:
        """The node's feature subsample, drawn from its own stream (seed, tree, node): it does not
        depend on how other nodes fared, so runs that agree on a node agree on its draw."""
        if self.k_features >= self.d:
            return np.arange(self.d, dtype=np.int64)
        rng = np.random.default_rng([self.seed, node.tree, node.node])
        return np.sort(rng.choice(self.d, size=self.k_features, replace=False)).astype(np.int64)

    def _shifts(self, frontier: list[_Node]) -> np.ndarray:
        """The frontier's shifts for the clients (regression; none for classification)."""
        return np.array([n.shift for n in frontier]) if self.crit == "mse" else np.zeros(0)

    def _can_split(self, summary: np.ndarray) -> bool:
        """scikit-learn's rule: enough weight for ``min_samples_split`` and two leaves, not pure."""
        return bool(
            node_count(summary, self.crit) >= max(self.config.min_samples_split, 2 * self.config.min_samples_leaf)
            and not is_pure(summary, self.crit)
        )

    # -- requests and replies --------------------------------------------------------------------

    def _decisions_since(self, first_level: int) -> SplitDecisions:
        return SplitDecisions.concatenate(self.decisions[first_level:])

    def _level_request(self, level: int, frontier: list[_Node]) -> dict[str, ForestLevelRequest]:
        cfg = self.config
        node_tree = np.array([n.tree for n in frontier], dtype=np.int64)
        node_id = np.array([n.node for n in frontier], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum([n.features.size for n in frontier])]).astype(np.int64)
        features = np.concatenate([n.features for n in frontier]).astype(np.int64)
        out = {}
        for client in self.clients:
            first = self.known.get(client, -1) + 1
            out[client] = ForestLevelRequest(
                task=self._task(client), level=level, splits=self._decisions_since(first), node_tree=node_tree,
                node_id=node_id, feature_offsets=offsets, features=features,
                sketch_size=cfg.sketch_size or cfg.bins, categorical=self.categorical,
                n_categories=cfg.n_categories, top_l=cfg.top_l or 0, node_shift=self._shifts(frontier))
        return out

    def _accepted_level(self, replies: dict[str, ForestLevelReply], level: int, n_nodes: int,
                        request: dict[str, ForestLevelRequest]) -> dict[str, ForestLevelReply]:
        """The replies that fit the request (the others are rejected: their clients sit out)."""
        n_pairs = next(iter(request.values())).features.shape[0]
        for client in self.clients:
            if client not in replies:
                self.known.pop(client, None)  # unknown state: replay every decision next time
        out = {}
        for client, reply in replies.items():
            reason = None
            if reply.nodes.size and reply.nodes.max() >= n_nodes:
                reason = f"node position {int(reply.nodes.max())} beyond the {n_nodes} requested"
            elif reply.summaries.shape[1] != self.S or reply.missing_summaries.shape[1:] not in ((self.S,), (0,)):
                reason = f"summaries have {reply.summaries.shape[1]} columns, the job needs {self.S}"
            elif max(reply.pairs.max(initial=-1), reply.missing_pairs.max(initial=-1)) >= n_pairs:
                reason = f"pair position beyond the {n_pairs} requested"
            if reason:
                self.job.reject(client, reason)
                self.known.pop(client, None)
                continue
            self.known[client] = level - 1
            out[client] = reply
        return out

    def _set_summaries(self, level: int, frontier: list[_Node], pooled: np.ndarray) -> None:
        for i, node in enumerate(frontier):
            node.summary = pooled[i]
            self.summary_of[(node.tree, node.node)] = _Known(pooled[i], node.shift)
            if level == 0:
                self.root_weight[node.tree] = node_count(pooled[i], self.crit)

    def _sketches(self, replies: dict[str, ForestLevelReply]) -> PairSketches:
        """The level replies' quantile sketches, stacked (client-id order)."""
        stacked = list(replies.values())
        return PairSketches(pair=np.concatenate([r.pairs for r in stacked]),
                            points=np.concatenate([r.points for r in stacked]),
                            weight=np.concatenate([r.pair_weight for r in stacked]))

    def _centred_in_gaps(self, cands: Candidates, best: np.ndarray, pair_node: np.ndarray, pair_feature: np.ndarray,
                         replies: dict[str, ForestLevelReply]) -> Candidates:
        """The chosen numeric splits' thresholds moved to the middle of the gap below them where
        the sketches prove the gap empty (``forest_candidates.gap_midpoints``)."""
        chosen = best[best >= 0]
        chosen = chosen[cands.kind[chosen] == NUMERIC]
        if chosen.size == 0:
            return cands
        pair_of = np.full((len(best), self.d + 1), -1, dtype=np.int64)
        pair_of[pair_node, pair_feature] = np.arange(pair_node.shape[0])
        threshold = cands.threshold.copy()
        threshold[chosen] = gap_midpoints(pair_of[cands.node[chosen], cands.feature[chosen]], threshold[chosen],
                                          self._sketches(replies), self.config.sketch_size or self.config.bins)
        return dataclasses.replace(cands, threshold=threshold)

    def _pooled_missing(self, replies: dict[str, ForestLevelReply], used: set[str], n_pairs: int) -> np.ndarray:
        """Per numeric pair, the pooled summary of the node's samples without a value (``(P, S)``),
        over the clients whose left summaries were used."""
        missing = np.zeros((n_pairs, self.S))
        for client, reply in replies.items():
            if client in used and reply.missing_pairs.size:
                missing[reply.missing_pairs] += reply.missing_summaries
        return missing

    def _groupings(self, pair_node: np.ndarray, pair_feature: np.ndarray, can: np.ndarray,
                   replies: dict[str, ForestLevelReply], per_client: np.ndarray) -> list[Grouping]:
        """Categorical features and the client indicator: every contiguous Fisher grouping, from
        the summaries of ``replies`` (the clients still in the level)."""
        out: list[Grouping] = []
        if self.categorical.size:
            sums: dict[int, np.ndarray] = {}
            for client, reply in replies.items():
                if not per_client[self.index[client]].any():
                    continue  # left the level
                for i, p in enumerate(reply.category_pairs.tolist()):
                    sums[p] = sums.get(p, 0) + reply.category_summaries[i].astype(np.float64)
            for p in sorted(sums):
                i = int(pair_node[p])
                if can[i]:
                    out += grouping_candidates_of(sums[p], i, int(pair_feature[p]), CATEGORY, self.crit)
        if self.config.client_splits:
            for i in np.flatnonzero(can).tolist():
                present = np.flatnonzero(per_client[:, i].sum(axis=1) > 0)
                if present.size >= 2:
                    out += grouping_candidates_of(per_client[present, i], i, self.d, CLIENT, self.crit, codes=present)
        return out

    def _shortlist(self, pair_node: np.ndarray, pair_feature: np.ndarray, replies) -> np.ndarray:
        """Top-L: per node, the union of every client's L best features by local gain (a mask
        over the requested pairs)."""
        keep = np.zeros(pair_node.shape[0], dtype=bool)
        for reply in replies.values():
            if reply.local_gain.size:
                keep[reply.pairs[top_per_node(pair_node[reply.pairs], reply.local_gain, self.config.top_l)]] = True
        return keep

    def _pool_split_replies(self, numeric: NumericCandidates, split_replies: dict[str, ForestSplitReply],
                            per_client: np.ndarray) -> _SplitPool:
        """Pooled left summaries of the numeric candidates (exact), or the n-weighted sums of the
        clients' local gains and their left counts (AvgImp), and the clients whose replies were used."""
        cfg = self.config
        n = numeric.thresholds.shape[0]
        pool = _SplitPool.empty(n, self.S, set())
        node = numeric.node
        for client, reply in split_replies.items():
            bad = reply.candidates.size and reply.candidates.max() >= n
            if bad or (cfg.evaluation == "exact" and reply.left.shape[1:] != (self.S,)) or \
                    (cfg.evaluation == "avgimp" and not reply.local_gain.size == reply.left_count.size
                     == reply.candidates.size):
                self.job.reject(client, "split reply does not fit the candidates")
                continue
            pool.used.add(client)
            if cfg.evaluation == "exact":
                pool.left[reply.candidates] += reply.left
            else:
                n_k = node_count(per_client[self.index[client], node[reply.candidates]], self.crit)
                pool.gain_sum[reply.candidates] += n_k * reply.local_gain
                pool.left_count[reply.candidates] += reply.left_count
        if cfg.evaluation == "exact":
            pool.left_count[:] = node_count(pool.left, self.crit)
        return pool

    # -- decisions -----------------------------------------------------------------------------

    def _apply(self, level: int, frontier: list[_Node], best: np.ndarray, best_gain: np.ndarray,
               cands: Candidates) -> list[_Node]:
        cfg = self.config
        chosen = [(i, int(best[i])) for i in range(len(frontier)) if best[i] >= 0]
        children: list[_Node] = []
        child_ids: list[tuple[int, int]] = []
        for i, c in chosen:
            node = frontier[i]
            feature = int(cands.feature[c])
            cats = cands.categories[c]
            lid, rid = self.builders[node.tree].split(
                node.node, feature, float(cands.threshold[c]), default_left=bool(cands.default_left[c]),
                categories=None if cats is None else cats.tolist())
            child_ids.append((lid, rid))
            self.children_of[(node.tree, node.node)] = (lid, rid)
            self.importance[node.tree, feature] += node_count(node.summary, self.crit) * best_gain[i]
            if level == 0:
                root_impurity = float(impurity(node.summary, self.crit))
                self.root_gains.append(best_gain[i] / root_impurity if root_impurity > 0 else 0.0)
            exact = cfg.evaluation == "exact" or cands.kind[c] != NUMERIC
            s_left = cands.left[c] if exact else None
            s_right = node.summary - cands.left[c] if exact else None
            for child, summary in ((lid, s_left), (rid, s_right)):
                shift = node.shift
                if summary is not None:
                    self.summary_of[(node.tree, child)] = _Known(summary, node.shift)
                    if self.crit == "mse":  # the child's clients centre on its mean from now on
                        shift = child_shift(summary, node.shift)
                depth = level + 1
                needs_summary = summary is None
                if needs_summary or (depth < cfg.max_depth and self._can_split(summary)):
                    children.append(_Node(node.tree, child, depth, summary, shift=shift))
        rows = np.array([c for _, c in chosen], dtype=np.int64)
        nodes = [frontier[i] for i, _ in chosen]
        categories = [np.zeros(0, np.int64) if cands.categories[c] is None
                      else np.asarray(cands.categories[c], np.int64) for c in rows.tolist()]
        self.decisions.append(SplitDecisions(
            level=np.full(rows.size, level, dtype=np.int64),
            tree=np.array([n.tree for n in nodes], dtype=np.int64),
            node=np.array([n.node for n in nodes], dtype=np.int64),
            feature=cands.feature[rows].astype(np.int64),
            threshold=cands.threshold[rows].astype(np.float64),
            categorical=np.array([cands.categories[c] is not None for c in rows.tolist()], dtype=np.uint8),
            left=np.array([ids[0] for ids in child_ids], dtype=np.int64),
            right=np.array([ids[1] for ids in child_ids], dtype=np.int64),
            category_offsets=np.concatenate([[0], np.cumsum([c.size for c in categories])]).astype(np.int64),
            categories=np.concatenate(categories).astype(np.int64) if categories else np.zeros(0, np.int64),
            default_left=cands.default_left[rows].astype(np.uint8),
        ))
        return children

    def _model(self) -> TreeEnsemble:
        cfg = self.config
        trees: list[Tree] = []
        for t, builder in enumerate(self.builders):
            for node in range(builder.n_nodes):
                known = self.summary_of.get((t, node))
                if known is None:
                    raise TrainingError(f"tree {t} node {node} has no summary (every client dropped out?)")
                builder.set_value(node, leaf_value(known.summary, self.crit, known.shift),
                                  cover=float(node_count(known.summary, self.crit)))
            trees.append(builder.build())
        names = tuple(self.feature_names) + ((CLIENT_FEATURE,) if cfg.client_splits else ())
        n_outputs = 1 if cfg.regression else self.S
        return TreeEnsemble(
            trees=tuple(trees), kind="forest", link="identity", n_outputs=n_outputs, feature_names=names,
            feature_set_version=cfg.feature_set_version, classes=self.model_classes,
            metadata={"algorithm": cfg.name, "n_trees": cfg.n_trees, "max_depth": self.depth, "n_bins": cfg.bins,
                      "criterion": self.crit, "evaluation": cfg.evaluation, "candidates": cfg.candidates,
                      "client_splits": int(cfg.client_splits), "target": cfg.target, "protocol": cfg.protocol,
                      "secure_aggregation": int(cfg.secure_aggregation), "min_crowd": cfg.min_crowd,

                      # the index -> client map of H inputs and client targets; no other model names clients
                      **({"clients": ",".join(self.clients)} if cfg.client_splits or cfg.target == "client" else {})},
        )

    def _normalised_importance(self) -> np.ndarray:
        return forest_importance(self.importance if self.config.client_splits else self.importance[:, : self.d])
