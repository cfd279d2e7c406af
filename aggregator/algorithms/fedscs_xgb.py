"""FedSCS-XGB's configuration and server half.

* ``protocol="private"`` (the default unless secure aggregation is turned off): differential
  privacy under secure aggregation, grown by ``fedscs_xgb_private``; regression's residuals are
  clipped to a public bound from a noisy target range release (or the job's ``target_range``).
* ``protocol="histogram"`` (secure sums without differential privacy): the job opens with fleet sums
  and the edges read off fleet-summed grid counts (``private_fleet``, once per job, count-weighted
  like XGBoost's ``hist``), then every depth level of a boosting round asks for the (G, H, count)
  histograms of the nodes to split, as fixed-point vectors summed by a ``FleetSummer`` -- under
  secure aggregation by default, so the server decodes only fleet sums (``levelwise_growth``).
* ``protocol="atoms"`` (the paper's Alg. 1, for reproduction): per boosting round a sketch phase
  (merged Hessian-weighted sketches -> B bin edges per feature) and an atom phase (merged atoms
  -> one depth-limited tree per class, ``histogram_growth``). It reveals every window's
  quantised feature vector and gradients to the server (PRIVACY.md).

Multiclass (``objective="softmax"``), either protocol: ``multi_strategy="one_output_per_tree"``
(XGBoost's default: a round adds one scalar-leaf tree per class) or ``"multi_output_tree"`` (the
paper's Alg. 1 and XGBoost's option of that name: a round adds one tree whose splits maximise the
gain summed over the classes and whose leaves hold one weight per class). Given the same bins both
equal XGBoost ``hist`` with the same ``multi_strategy`` (tested).

``FedSCSXGB`` is the public configuration object (``aggregator.algorithms.FedSCSXGB``); its
``fit(job)`` drives any fleet through a ``FederatedJob`` -- the in-memory simulation
(``aggregator.simulate``) and real gateways over MQTT run this same code.

Conventions worth knowing:

* ``gamma`` is XGBoost's ``gamma``/``min_split_loss``: the same number given to
  ``xgboost.train`` grows the same trees from the same bins. Eq. 1's penalty is half of it (Eq. 1
  halves the bracket XGBoost compares with ``min_split_loss``).
* ``base_score="average"`` starts from the class priors (softmax), ``logit(mean y)`` (logistic) or
  ``mean y`` (regression) summed from the clients' setup replies, as XGBoost 3.x does; ``"zero"``
  is the paper's ``f <- 0``.
* Determinism: clients are sampled with ``numpy.random.default_rng(seed)``; replies are merged in
  client-id order; ties between equal gains are broken as XGBoost does. The same data and seed
  give bit-identical models in simulation and over MQTT.
* Periodic retraining: ``init_model`` continues boosting from a deployed model (its base score,
  classes and trees are kept; clients receive its trees in their first request).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np

from shared.atoms import merge_atoms
from shared.histograms import dequantize
from shared.model import TreeEnsemble
from shared.protocol.messages.fedscs_xgb import (
    LOSS_FRAC_BITS,
    MultiStrategy,
    RoundSplits,
    XgbAtomReply,
    XgbAtomRequest,
    XgbHistogramReply,
    XgbHistogramRequest,
    XgbSketchReply,
    XgbSketchRequest,
    XgbTask,
)
from shared.sketches import (
    SketchError,
    Standardization,
    bin_dtype,
    ddsketch_edges,
    validate_edges,
    ddsketches_from_columns,
    merge_edges_columns,
    pack_edges,
    summaries_from_arrays,
)
from shared.protocol.messages.secure_aggregation import widen
from shared.protocol.schema import to_wire

from ..fleet_sums import FleetSummer
from ..jobs import FederatedJob, StepProgress, TrainingError
from .boosted_trees import BoostedTrees
from .fleet_data import FleetData, describe_fleet
from .histogram_growth import GrowthParams, grow_trees
from .levelwise_growth import RoundTree, grow_round_with_gains
from .sum_checks import SumViolation, atom_violation, hessian_bound, padding_mask, xgb_histogram_violation
from .fedscs_xgb_private import PrivateBoosting, ReleasePlan
from .private_fleet import (
    PrivateFleet,
    check_privacy_settings,
    checked_target_range,
    describe_fleet_privately,
    frac_bits_for,
    warn_if_not_private,
)

__all__ = ["BoostingResult", "FedSCSXGB"]

log = logging.getLogger(__name__)

T = TypeVar("T")


# --- pure helpers --------------------------------------------------------------------------------
def _resolved(value: T | None, name: str) -> T:
    """A setting ``FedSCSXGB.__post_init__`` resolved (ValueError if it is still None)."""
    if value is None:
        raise ValueError(f"{name} is not resolved: FedSCSXGB sets it in construction")
    return value


def base_score_stats(objective: str, fleet: FleetData | PrivateFleet) -> np.ndarray:
    """The objective's ``base_score_stats`` summed over clients (class counts or ``[Σy, n]``)."""
    if objective == "squared_error":
        return np.array([fleet.target_sum, fleet.total_samples], dtype=np.float64)
    if objective == "logistic":
        return np.array([fleet.label_counts[1], fleet.label_counts.sum()])
    return fleet.label_counts.astype(np.float64)


def gradient_bound(fleet: PrivateFleet, base_score: float) -> float:
    """The bound on squared-error gradients ``prediction - y`` for the fixed point: 4 times the
    reach of the targets from the base score, ``sqrt(V) + |mean - base_score|`` (``V``: the
    fleet's ``target_spread``; every ``|y - mean| <= sqrt(V)``), and at least 4. The factor leaves
    room for predictions that move away from the base score. A spread, not the targets' offset,
    so the same data with ``y + c`` get the same fixed point.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> gradient_bound(SimpleNamespace(target_spread=100.0, target_mean=1e9), 1e9)
    40.0
    """
    return 4.0 * max(float(np.sqrt(fleet.target_spread)) + abs(fleet.target_mean - base_score), 1.0)


def check_atoms(reply: XgbAtomReply, edges: list[np.ndarray], n_outputs: int) -> str | None:
    """Why an atom reply does not fit the round's edges, or None if it does."""
    d = len(edges)
    if reply.keys.shape[1] != d:
        return f"atoms have {reply.keys.shape[1]} bin ids per key, the job has {d} features"
    if reply.grad.shape[1] != n_outputs:
        return f"atoms carry {reply.grad.shape[1]} gradient columns, the job has {n_outputs} outputs"
    if reply.keys.dtype != bin_dtype(edges):
        return f"bin ids are {reply.keys.dtype}, the edges call for {bin_dtype(edges)}"
    limit = np.array([e.shape[0] + 1 for e in edges])
    if reply.keys.shape[0] and (reply.keys.astype(np.int64) > limit).any():
        return "a bin id lies beyond its feature's missing-value id"
    return None


def _vector_violation(
    values: np.ndarray,
    length: int,
    with_loss: bool,
    shape: tuple[int, ...],
    in_range: Callable[[np.ndarray], str | None],
) -> str | None:
    """``in_range`` of one gateway's plain histogram vector (its loss entries dropped), or None
    for a vector the sum already holds without it (merge workers add it up elsewhere)."""
    if values.shape[0] != length:
        return None
    return in_range(widen(values, 64).view(np.int64)[: -2 if with_loss else None].reshape(shape))


#: Bins per feature of the private protocol (coarse: fewer cells, each with more windows than noise).
PRIVATE_BINS = 8
#: Boosting rounds, depth and shrinkage of the private protocol, per kind of objective: each
#: round's tree sees only ``dp_features`` features, so many deep trees of small steps see more of
#: them (classification: 40 rounds at 0.3 measured best of 20 at 0.5, 30 at 0.35 and 40 at 0.3 at
#: 100 gateways x 1,000 windows, BENCHMARKS.md "Accuracy at fleet scale"; regression: 20 at 0.5,
#: as measured in "FedSCS-XGB regression under differential privacy").
PRIVATE_ROUNDS = {"classification": 40, "regression": 20}
PRIVATE_LEARNING_RATE = {"classification": 0.3, "regression": 0.5}
PRIVATE_DEPTH = 6
#: Boosting rounds and depth of the other protocols (the paper's experiment).
DEFAULT_ROUNDS, DEFAULT_DEPTH = 10, 4
#: Bins per feature of the other protocols.
DEFAULT_BINS = 256
#: How often one boosting round is grown again after a client dropped out mid-round.
MAX_COHORT_RESTARTS = 3


@dataclass
class _RoundStats:
    """What a round's first level tells besides its histograms: the clients whose sums went in and
    (without differential privacy) the summed training loss and window count, for progress."""

    contributors: int = 0
    loss_sum: float = 0.0
    samples: float = 0.0


class _CohortChanged(Exception):
    """A level's sum came from fewer clients than the round's first level."""

    def __init__(self, remaining: list[str], dropped: list[str]) -> None:
        super().__init__(f"{dropped} dropped out mid-round")
        self.remaining = remaining


# --- the algorithm -------------------------------------------------------------------------------
@dataclass(frozen=True)
class FedSCSXGB:
    """FedSCS-XGB settings; the paper's experiment: ``n_rounds=10, max_depth=4, n_bins in
    {64..512}, learning_rate=0.2, reg_lambda=1, gamma=0.1``.

    ``gamma``: XGBoost's ``gamma``/``min_split_loss`` (same number, same trees); the paper's
    Eq. 1 subtracts ``gamma / 2`` from its halved gain. (The paper quotes γ = 0.1 for its
    protocol and its xgboost baseline alike, so 0.1 is taken as xgboost's number.)

    ``sketch``: ``"summary"`` (rank-accurate weighted quantile summary with ``summary_size``
    points per feature, default ``n_bins``) or ``"ddsketch"`` (the paper's, relative accuracy
    ``ddsketch_alpha``, features standardised by the fleet's mean and std when
    ``standardize``). ``client_fraction``: share of the clients sampled per round.
    ``classes``: fix the label vocabulary instead of taking the union of the clients' labels.
    ``protocol``: ``"private"`` (the default unless ``secure_aggregation=False``: differential
    privacy, below), ``"histogram"`` (secure sums of exact histograms per depth level, without
    differential privacy) or ``"atoms"`` (the paper's; reveals per-window vectors).
    Both non-DP protocols log a one-line warning. ``secure_aggregation``: mask the vectors so the
    server decodes only fleet sums (default: on except for ``"atoms"``; needs at least 3 clients;
    ``secagg_degree``: SecAgg+ neighbourhood size, default O(log n)). ``min_crowd``: in the
    histogram protocol, no split leaves a child with fewer windows fleet-wide. The histogram
    protocol reads its edges once per job off fleet-summed counts (``sketch`` and
    ``summary_size`` are the atom protocol's). ``n_bins``: default 8 in the private protocol,
    256 otherwise. ``learning_rate``: default 0.2 (the paper's); in the private protocol 0.3
    for classification, 0.5 for regression. ``n_rounds`` and ``max_depth``: default 10 and 4
    (the paper's); in the private protocol 40 and 6 for classification, 20 and 6 for regression.

    The private protocol spends ``dp_epsilon`` per window and training (``(dp_epsilon,
    dp_delta)``-DP for adding or removing one window, accounted by ``aggregator.privacy``): one
    vector-leaf tree per round (softmax), split on ``dp_features`` features drawn per round from
    the public ``seed``, leaf weights clipped to ``dp_leaf_clip`` before shrinkage (regression:
    ``dp_leaf_clip`` times the residual bound), the budget shared between the opening, the splits
    and the leaves by ``release_plan``. Regression (squared error) clips every residual
    ``prediction - y`` to half the width of a public target range -- ``target_range`` ``(low,
    high)`` if given (public knowledge, e.g. a sensor's physical range), else read off a noisy
    count of the targets per octave in the opening (FedForest's private regression) -- or to
    twice the reach of the opening's noisy outer target quantiles from its median when less; the base
    score is the opening's noisy target median inside that range. The model's metadata reports
    what was spent (``dp_epsilon``, ``dp_delta``, ``dp_rho``, ``dp_xi``) and, for regression, the
    range (``dp_target_low``, ``dp_target_high``) and the residual bound (``dp_grad_bound``).
    ``edges``: fixed float32 bin edges per feature; skips the sketch phase (Lemma 1's premise,
    and the oracle tests' way to compare with pooled training on the same bins).
    ``multi_strategy``: softmax's trees, XGBoost's names: ``"one_output_per_tree"`` (one tree per
    class per round) or ``"multi_output_tree"`` (one vector-leaf tree per round, the paper's);
    with one output (logistic, regression) both are the same.
    """

    n_rounds: int | None = None  # None: 10 (the paper's); private: 40, regression 20
    max_depth: int | None = None  # None: 4 (the paper's), 6 in the private protocol
    n_bins: int | None = None
    learning_rate: float | None = None  # None: 0.2 (the paper's); private: 0.3, regression 0.5
    reg_lambda: float = 1.0
    gamma: float = 0.1
    min_child_weight: float = 1.0
    objective: Literal["softmax", "logistic", "squared_error"] = "softmax"
    base_score: Literal["average", "zero"] = "average"
    sketch: Literal["summary", "ddsketch"] = "summary"
    summary_size: int | None = None
    ddsketch_alpha: float = 0.01
    standardize: bool = True
    client_fraction: float = 1.0
    feature_set_version: str = ""
    classes: tuple[str, ...] | None = None
    protocol: Literal["private", "histogram", "atoms"] | None = None  # None: private with secure aggregation
    multi_strategy: Literal["one_output_per_tree", "multi_output_tree"] | None = None
    secure_aggregation: bool | None = None  # None: on unless protocol="atoms"
    secagg_degree: int | None = None
    min_crowd: int = 5
    dp_epsilon: float = 8.0
    dp_delta: float = 1e-6
    dp_features: int = 8
    dp_leaf_clip: float = 1.0
    target_range: tuple[float, float] | None = None
    release_plan: ReleasePlan = ReleasePlan()
    edges: tuple[np.ndarray, ...] | None = field(default=None, compare=False)
    init_model: TreeEnsemble | None = field(default=None, compare=False)

    name: ClassVar[str] = "fedscs_xgb"

    def __post_init__(self) -> None:
        if self.n_bins is not None and not (isinstance(self.n_bins, int) and 2 <= self.n_bins <= 65_535):
            raise ValueError(f"n_bins must be an int in 2..65535, got {self.n_bins!r}")
        if not 0 < self.client_fraction <= 1:
            raise ValueError(f"client_fraction must lie in (0, 1], got {self.client_fraction}")
        if self.summary_size is not None and not 1 <= self.summary_size <= 1 << 16:
            raise ValueError(f"summary_size must lie in 1..65536, got {self.summary_size}")
        check_privacy_settings(self, paper="atoms", dp_possible=True)
        private = self.protocol == "private"
        kind = "regression" if self.objective == "squared_error" else "classification"
        if self.n_rounds is None:
            object.__setattr__(self, "n_rounds", PRIVATE_ROUNDS[kind] if private else DEFAULT_ROUNDS)
        if self.max_depth is None:
            object.__setattr__(self, "max_depth", PRIVATE_DEPTH if private else DEFAULT_DEPTH)
        if not (isinstance(self.n_rounds, int) and self.n_rounds >= 0):
            raise ValueError(f"n_rounds must be an int >= 0, got {self.n_rounds!r}")
        if self.learning_rate is None:
            object.__setattr__(self, "learning_rate", PRIVATE_LEARNING_RATE[kind] if private else 0.2)
        if self.multi_strategy is None:
            object.__setattr__(self, "multi_strategy", "multi_output_tree" if private else "one_output_per_tree")
        if private and self.multi_strategy != "multi_output_tree" and self.objective == "softmax":
            raise ValueError(
                "the private protocol grows one vector-leaf tree per round (multi_strategy="
                "'multi_output_tree'): one tree per class would divide the privacy budget by the classes"
            )
        if private and self.init_model is None and self.edges is not None:
            raise ValueError("fixed edges are not available in the private protocol (its edges are noisy fleet sums)")
        if not (isinstance(self.dp_features, int) and self.dp_features >= 1):
            raise ValueError(f"dp_features must be an int >= 1, got {self.dp_features!r}")
        if not (isinstance(self.dp_leaf_clip, (int, float)) and 0 < self.dp_leaf_clip < 1e6):
            raise ValueError(f"dp_leaf_clip must be a number in (0, 1e6), got {self.dp_leaf_clip!r}")
        if self.target_range is not None:
            object.__setattr__(
                self,
                "target_range",
                checked_target_range(self.target_range, self.objective == "squared_error", self.protocol),
            )
        self.growth  # validates the tree settings

    @property
    def bins(self) -> int:
        """Bins per feature: ``n_bins``, else the protocol's default."""
        return self.n_bins or (PRIVATE_BINS if self.protocol == "private" else DEFAULT_BINS)

    @property
    def rounds(self) -> int:
        """``n_rounds`` as resolved in construction (the protocol's default when None)."""
        return _resolved(self.n_rounds, "n_rounds")

    @property
    def strategy(self) -> MultiStrategy:
        """``multi_strategy`` as resolved in construction."""
        return _resolved(self.multi_strategy, "multi_strategy")

    @property
    def growth(self) -> GrowthParams:
        return GrowthParams(
            max_depth=_resolved(self.max_depth, "max_depth"),
            reg_lambda=self.reg_lambda,
            gamma=self.gamma,
            min_child_weight=self.min_child_weight,
            learning_rate=_resolved(self.learning_rate, "learning_rate"),
            multi_strategy=self.strategy,
        )

    def job_classes(self) -> tuple[str, ...] | None:
        """``classes``, or when continuing a classifier, the classes of ``init_model``.

        Labels keep appearing in a fleet (a carer annotates a new activity); boosting can only
        continue over the outputs the model has, so its classes are kept and windows with other
        labels sit this job out (a model trained afresh learns them).
        """
        init = self.init_model
        if self.classes is not None or init is None or self.objective == "squared_error" or not init.classes:
            return self.classes
        return tuple(str(c) for c in init.classes)

    def task(self, n_features: int, base_score: np.ndarray, classes: tuple[str, ...]) -> XgbTask:
        """The settings every request repeats."""
        return XgbTask(self.objective, self.feature_set_version, n_features, base_score, classes, self.strategy)

    def model_metadata(self, n_rounds: int) -> dict[str, Any]:
        """What a model of ``n_rounds`` boosting rounds records of its training."""
        return {
            "algorithm": self.name,
            "objective": self.objective,
            "n_rounds": n_rounds,
            "multi_strategy": self.multi_strategy,
            "max_depth": self.max_depth,
            "n_bins": self.bins,
            "learning_rate": self.learning_rate,
            "reg_lambda": self.reg_lambda,
            "gamma": self.gamma,
            "sketch": self.sketch,
            "protocol": self.protocol,
            "secure_aggregation": int(bool(self.secure_aggregation)),
            "min_crowd": self.min_crowd,
        }

    def fit(self, job: FederatedJob, *, seed: int = 0) -> TreeEnsemble:
        """Train over ``job``'s clients; returns the boosted ensemble (``init_model``'s trees first).

        Stopped early (``job.stop_here``), it returns the boosting rounds completed so far: each
        round only adds trees, so they are the very model ``n_rounds`` = that many would give.
        """
        return self._training(job, seed).run()

    def _training(self, job: FederatedJob, seed: int) -> _Training | PrivateBoosting:
        warn_if_not_private(self, "atoms", log)
        return PrivateBoosting(self, job, seed) if self.protocol == "private" else _Training(self, job, seed)

    def fit_with_diagnostics(self, job: FederatedJob, *, seed: int = 0) -> BoostingResult:
        """:meth:`fit`, plus the loss change of every split the server chose."""
        training = self._training(job, seed)
        model = training.run()
        return BoostingResult(model, tuple(training.loss_changes[: model.n_trees]))


@dataclass(frozen=True, eq=False)
class BoostingResult:
    """The boosted model plus what the server learnt growing it: per tree, XGBoost's loss change
    of each split (NaN at leaves, and for all of ``init_model``'s nodes: not known here)."""

    model: TreeEnsemble
    loss_changes: tuple[np.ndarray, ...]

    def feature_importances(self) -> np.ndarray:
        """XGBoost's ``importance_type="gain"`` as its scikit-learn ``feature_importances_``: per
        feature the mean loss change of its splits, normalised to sum 1 (zeros without splits)."""
        d = self.model.n_features
        total, splits = np.zeros(d), np.zeros(d)
        for tree, change in zip(self.model.trees, self.loss_changes):
            chosen = (tree.feature >= 0) & np.isfinite(change)
            np.add.at(total, tree.feature[chosen], change[chosen])
            np.add.at(splits, tree.feature[chosen], 1.0)
        mean = np.divide(total, splits, out=np.zeros(d), where=splits > 0)
        return mean / mean.sum() if mean.sum() > 0 else mean


class _Training(BoostedTrees):
    """One run of ``FedSCSXGB.fit``: the server's state between rounds."""

    def __init__(self, config: FedSCSXGB, job: FederatedJob, seed: int) -> None:
        super().__init__()
        self.config = config
        self.job = job
        self.rng = np.random.default_rng(seed)

    # -- phases --------------------------------------------------------------------------------

    def run(self) -> TreeEnsemble:
        if self.config.protocol == "histogram":
            return self._run_histograms()
        cfg = self.config
        self.clients = list(self._setup().clients)
        self._atom_grad_bound = np.inf if cfg.objective == "squared_error" else 1.0
        if cfg.init_model is not None:
            self.continue_from(cfg.init_model, cfg.multi_strategy)
        if cfg.edges is not None:
            if len(cfg.edges) != self.n_features:
                raise TrainingError(f"{len(cfg.edges)} fixed edge arrays for {self.n_features} features")
            self.fixed_edges = [validate_edges(e, feature=j) for j, e in enumerate(cfg.edges)]
        for t in range(1, cfg.rounds + 1):
            started = time.monotonic()
            selected = self._sample()
            if cfg.edges is None:
                sketches = self._ask(selected, self._sketch_request, XgbSketchReply, self._check_sketch)
                if not sketches:
                    raise TrainingError(f"round {t}: no usable sketch replies from {selected}")
                edges, selected = self._edges(sketches), sorted(sketches)
            else:
                edges = self.fixed_edges
            atoms = self._ask(
                selected,
                lambda c: self._atom_request(c, edges),
                XgbAtomReply,
                lambda c, r: (
                    check_atoms(r, edges, self.n_outputs)
                    or self.check_trees(c, r.n_trees)
                    or atom_violation(r.grad, r.hess, r.counts, self._atom_grad_bound, hessian_bound(self.objective))
                ),
            )
            if not atoms:
                raise TrainingError(f"round {t}: no usable atom replies from {selected}")
            self._grow(atoms, edges)
            n = sum(r.n_samples for r in atoms.values())
            loss = sum(r.loss_sum for r in atoms.values()) / max(n, 1)
            if cfg.objective == "squared_error":
                loss = float(np.sqrt(loss))
            progress = StepProgress(
                self.job.job_id,
                cfg.name,
                t,
                cfg.rounds,
                len(selected),
                len(atoms),
                {"train_loss": loss, "samples": float(n)},
                time.monotonic() - started,
            )
            self.job.report(progress, model=partial(self.model, len(self.trees)))
            if self.job.stop_here(progress):
                break
        return self.model()

    def _setup(self) -> FleetData:
        cfg = self.config
        regression = cfg.objective == "squared_error"
        fleet = describe_fleet(
            self.job, cfg.feature_set_version, regression=regression, classes=self.config.job_classes()
        )
        self._set_fleet(fleet)
        self.standardizations = [
            Standardization.from_moments(fleet.moments[:, j]) if cfg.standardize else Standardization()
            for j in range(self.n_features)
        ]
        return fleet

    def _set_fleet(self, fleet: FleetData | PrivateFleet) -> None:
        cfg = self.config
        self.set_objective(cfg.objective, fleet)
        #: one vector-leaf tree per round instead of one tree per output
        self.vector_leaves = cfg.multi_strategy == "multi_output_tree" and self.n_outputs > 1
        self.trees_per_round = 1 if self.vector_leaves else self.n_outputs
        self.base_score = self.objective.base_score(base_score_stats(cfg.objective, fleet), mode=cfg.base_score)

    def _run_histograms(self) -> TreeEnsemble:
        """The private protocol: fleet sums only (module docstring)."""
        cfg = self.config
        summer = FleetSummer(self.job, secure=bool(cfg.secure_aggregation), degree=cfg.secagg_degree)
        summer.start(self.job.clients)
        fleet = describe_fleet_privately(
            self.job,
            summer,
            cfg.feature_set_version,
            regression=cfg.objective == "squared_error",
            n_bins=cfg.bins,
            classes=cfg.job_classes(),
        )
        self._set_fleet(fleet)
        if fleet.total_samples < max(cfg.min_crowd, 1):
            raise TrainingError(
                f"the fleet holds {fleet.total_samples} samples, fewer than the minimum crowd ({cfg.min_crowd})"
            )
        if cfg.init_model is not None:
            self.continue_from(cfg.init_model, cfg.multi_strategy)
        edges = list(fleet.edges)
        if cfg.edges is not None:
            if len(cfg.edges) != self.n_features:
                raise TrainingError(f"{len(cfg.edges)} fixed edge arrays for {self.n_features} features")
            edges = [validate_edges(e, feature=j) for j, e in enumerate(cfg.edges)]
        self.private = fleet
        bound = 1.0 if cfg.objective != "squared_error" else gradient_bound(fleet, float(self.base_score[0]))
        self.frac_bits = frac_bits_for(fleet.total_samples, bound)
        self.gradient_bound = float(bound)
        self.edge_values, self.edge_offsets = pack_edges(edges)
        self.fleet_edges = edges
        for t in range(1, cfg.rounds + 1):
            started = time.monotonic()
            selected = self._sample_from(list(summer.active))
            self.add_round(self._grow_round(summer, selected, t))
            stats = self._first_level()
            n = stats.samples
            loss = stats.loss_sum / max(n, 1.0)
            if cfg.objective == "squared_error":
                loss = float(np.sqrt(loss))
            metrics = {"train_loss": loss, "samples": float(n)}
            progress = StepProgress(
                self.job.job_id,
                cfg.name,
                t,
                cfg.rounds,
                len(selected),
                stats.contributors,
                metrics,
                time.monotonic() - started,
            )
            self.job.report(progress, model=partial(self.model, len(self.trees)))
            if self.job.stop_here(progress):
                break
        return self.model()

    def _first_level(self) -> _RoundStats:
        """What the round's first level told (a round always sums its root level)."""
        if self._round_stats is None:
            raise TrainingError("the round ended without its first level's sums")
        return self._round_stats

    def _grow_round(self, summer: FleetSummer, selected: list[str], t: int) -> list[RoundTree]:
        """One boosting round's trees. Every level sums over the same clients -- the ones that
        answered the first level -- since sibling subtraction and the minimum crowd assume one
        cohort; a client dropping out later restarts the round without it."""
        cohort = list(selected)
        for _ in range(MAX_COHORT_RESTARTS + 1):
            self._round_stats: _RoundStats | None = None  # set by the round's first level
            self._cohort = cohort
            try:
                return grow_round_with_gains(
                    self.n_outputs,
                    self.fleet_edges,
                    self.config.growth,
                    lambda s, nt, ni: self._histograms(summer, s, nt, ni),
                    frac_bits=self.frac_bits,
                    min_crowd=self.config.min_crowd,
                    exact=True,
                )
            except SumViolation as exc:
                raise TrainingError(f"round {t}: the fleet's histograms break a range check: {exc}") from None
            except _CohortChanged as exc:
                cohort = exc.remaining
                log.warning(
                    "client dropped out mid-round: the round is grown again without it",
                    extra={"job": self.job.job_id, "round": t, "reason": str(exc)},
                )
        raise TrainingError(f"round {t}: clients kept dropping out ({MAX_COHORT_RESTARTS} restarts)")

    def _histograms(
        self, summer: FleetSummer, splits: RoundSplits, node_tree: np.ndarray, node_id: np.ndarray
    ) -> np.ndarray:
        """One depth level: the cohort's summed (G, H, count) histograms of the requested nodes."""
        first = self._round_stats is None
        selected = self._cohort
        stats = 2 * self.task.node_columns + 1
        requests = {
            c: XgbHistogramRequest(
                self.task,
                self._delta(c),
                self.edge_values,
                self.edge_offsets,
                splits,
                node_tree,
                node_id,
                self.frac_bits,
                self.gradient_bound,
                with_loss=first,
                secure=summer.secure_round(c, selected),
            )
            for c in selected
        }
        length = next(iter(requests.values())).length
        shape = (node_tree.shape[0], stats, self.n_features, int(np.diff(self.edge_offsets).max(initial=0)) + 2)
        in_range = partial(
            xgb_histogram_violation,
            frac_bits=self.frac_bits,
            grad_bound=self.gradient_bound,
            hess_bound=hessian_bound(self.objective),
            padding=padding_mask(self.edge_offsets),
        )
        visible = not summer.secure  # plain sums: each gateway's vector is checked and a liar left out
        liars: set[str] = set()

        def check(client: str, reply: XgbHistogramReply) -> str | None:
            why = _vector_violation(reply.sums.values, length, first, shape, in_range) if visible else None
            if why:
                liars.add(client)
            return self.check_trees(client, reply.n_trees) or why

        result = summer.ask(requests, XgbHistogramReply, lambda reply: reply.sums, length, check=check)
        summer.leave_out(liars)
        for client in selected:
            if client in result.contributors:
                self.known[client] = result.replies[client].n_trees
            else:
                self.known.pop(client, None)
        if first:
            self._cohort = list(result.contributors)
        elif list(result.contributors) != self._cohort:
            raise _CohortChanged(list(result.contributors), sorted(set(self._cohort) - set(result.contributors)))
        vector = result.total.view(np.int64)
        if first:
            self._round_stats = _RoundStats(len(result.contributors))
            self._round_stats.loss_sum = float(dequantize(vector[-2], LOSS_FRAC_BITS))
            self._round_stats.samples = float(vector[-1])
            vector = vector[:-2]
        why = in_range(vector.reshape(shape))
        if why:
            raise SumViolation(
                f"{why} (in the sum of {len(result.contributors)} gateways: "
                f"{'secure aggregation hides which' if summer.secure else 'none alone shows it'})"
            )
        return vector.reshape(shape)

    def _sample(self) -> list[str]:
        return self._sample_from(self.clients)

    def _sample_from(self, clients: list[str]) -> list[str]:
        if self.config.client_fraction >= 1:
            return list(clients)
        m = max(1, round(self.config.client_fraction * len(clients)))
        return sorted(self.rng.choice(clients, size=m, replace=False).tolist())

    # -- requests ------------------------------------------------------------------------------

    @property
    def task(self) -> XgbTask:
        return self.config.task(self.n_features, self.base_score, self.classes)

    def _sketch_request(self, client: str) -> XgbSketchRequest:
        cfg = self.config
        size = cfg.summary_size or cfg.bins
        if cfg.sketch == "summary":
            return XgbSketchRequest(self.task, self._delta(client), "summary", summary_size=size)
        return XgbSketchRequest(
            self.task,
            self._delta(client),
            "ddsketch",
            summary_size=size,
            ddsketch_alpha=cfg.ddsketch_alpha,
            centers=np.array([s.center for s in self.standardizations]),
            scales=np.array([s.scale for s in self.standardizations]),
        )

    def _atom_request(self, client: str, edges: list[np.ndarray]) -> XgbAtomRequest:
        values, offsets = pack_edges(edges)
        return XgbAtomRequest(self.task, self._delta(client), values, offsets)

    # -- replies -------------------------------------------------------------------------------

    def _ask(self, clients: list[str], build, expect: type, check) -> dict[str, Any]:
        """One round: a request built per client, the replies that pass ``check``. A client that
        failed or did not answer gets the whole model next time (its state is unknown)."""
        replies = self.job.ask({c: build(c) for c in clients}, clients, expect)
        for client in clients:
            if client not in replies:
                self.known.pop(client, None)
        return self._accept(replies, check)

    def _accept(self, replies: dict[str, Any], check) -> dict[str, Any]:
        """The replies that pass ``check(client, reply) -> reason | None``; the others are rejected."""
        out = {}
        for client, reply in replies.items():
            reason = check(client, reply)
            if reason is None:
                out[client] = reply
            else:
                self.job.reject(client, reason)
        for client, reply in out.items():
            if hasattr(reply, "n_trees"):
                self.known[client] = reply.n_trees
        return out

    def _check_sketch(self, client: str, reply: XgbSketchReply) -> str | None:
        wanted = "summary" if self.config.sketch == "summary" else "ddsketch"
        part = getattr(reply, wanted)
        if part is None:
            return f"the reply carries no {wanted} sketch"
        rows = part.points.shape[0] if wanted == "summary" else part.zero_weight.shape[0]
        if rows != self.n_features:
            return f"{rows} sketches for {self.n_features} features"
        return self.check_trees(client, reply.n_trees)

    def _edges(self, sketches: dict[str, XgbSketchReply]) -> list[np.ndarray]:
        """B bin edges per feature from the clients' sketches (client-id order)."""
        B = self.config.bins
        try:
            if self.config.sketch == "summary":
                summaries = [summaries_from_arrays(to_wire(r.summary)) for r in sketches.values()]
                return merge_edges_columns(summaries, B)
            ddsketches = [
                ddsketches_from_columns(to_wire(r.ddsketch), self.standardizations) for r in sketches.values()
            ]
            return [ddsketch_edges([c[j] for c in ddsketches], B) for j in range(self.n_features)]
        except SketchError as exc:
            raise TrainingError(f"the clients' sketches cannot be merged: {exc}") from exc

    def _grow(self, atoms: dict[str, XgbAtomReply], edges: list[np.ndarray]) -> None:
        keys = np.concatenate([r.keys for r in atoms.values()])
        keys, G, H, W = merge_atoms(
            keys,
            np.concatenate([r.grad for r in atoms.values()]),
            np.concatenate([r.hess for r in atoms.values()]),
            np.concatenate([r.counts for r in atoms.values()]),
        )
        self.add_round([RoundTree(g.tree, g.loss_change) for g in grow_trees(keys, G, H, W, edges, self.config.growth)])

    # -- the model -----------------------------------------------------------------------------

    def model(self, n_trees: int | None = None) -> TreeEnsemble:
        """The ensemble of the first ``n_trees`` trees (all): a checkpoint names its round's count."""
        return self.boosted_model(
            n_trees,
            self.base_score,
            self.config.feature_set_version,
            metadata=self.config.model_metadata(len(self.trees[:n_trees]) // self.trees_per_round),
        )
