"""FedSCS-XGB's private protocol (``protocol="private"``, the default): boosting under
distributed differential privacy, the server decoding only noisy fleet sums.

A training spends a budget of ``(dp_epsilon, dp_delta)`` per window, shared between three kinds
of release (:class:`~aggregator.privacy.PrivacyBudget`):

* ``opening`` -- the fleet's window and class counts and a few grid rounds for coarse bin edges
  (``private_fleet``);
* ``splits`` -- per depth level of a round's tree, the lattice histograms (G, H, count) of the
  nodes to split, over the round's ``dp_features`` features only (drawn from a public seed), one
  child per sibling pair (``private_growth``);
* ``leaves`` -- per round, the (G, H) sums of the tree's leaves.

Softmax grows one vector-leaf tree per round (``multi_output_tree``): a window's gradient vector
has L2 norm at most sqrt 2 whatever the number of classes, so the budget is not divided by them.
Squared error (regression) has no such bound of its own: the opening's last release is the
target range release of FedForest's private regression (``private_fleet.release_target_range``,
one noisy count per octave of the targets) unless the job gives ``target_range``; half its width,
or less for a skewed target (:func:`residual_bound`), bounds ``|g|``, a residual ``prediction -
y`` clipped to it, and ``h = 1``, so a level release sends G and the count (the count is the
H). The gateways clip and stochastically round G and H onto the lattice of
:data:`LATTICE_SCALE` steps per window (per unit of G for classifiers, per residual bound for
regression), add their share of Skellam noise and mask the vector (secure aggregation); the
sensitivity of every release follows from these public bounds.
``docs/differential_privacy.md`` has the argument and PRIVACY.md what each party learns.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from functools import partial

import numpy as np

from shared.differential_privacy import lattice_norm_bound
from shared.model import TreeEnsemble
from shared.protocol.messages.fedscs_xgb import (
    PrivateLattice,
    PrivateRoundFeatures,
    RoundSplits,
    XgbHistogramReply,
    XgbPrivateLeavesRequest,
    XgbPrivateLevelRequest,
    XgbTask,
)
from shared.protocol.messages.fleet_sums import NoiseShare
from shared.protocol.messages.secure_aggregation import word_bits_for
from shared.sketches import pack_edges

from ..fleet_sums import FleetSummer
from ..jobs import FederatedJob, StepProgress, TrainingError
from ..privacy import PrivacyBudget, skellam_release
from .boosted_trees import BoostedTrees
from .private_fleet import (
    PrivateFleet,
    describe_fleet_privately,
    opening_releases,
    public_target_range,
    residual_bound,
)
from .private_growth import PrivateGrowth, grow_private_tree, level_violation

__all__ = [
    "LATTICE_SCALE",
    "PrivateBoosting",
    "ReleasePlan",
    "objective_lattice",
    "round_features",
]

log = logging.getLogger(__name__)

#: Lattice steps per unit of G and H (and per window of the counts): far finer than the noise.
LATTICE_SCALE = 64
#: Per objective, public bounds on a window's gradient and Hessian vectors (L2): softmax's
#: ``p - onehot`` has norm <= sqrt 2 and its Hessian ``2 p (1 - p)`` norm <= 1; logistic's
#: ``p - y`` lies in [-1, 1] and ``p (1 - p)`` in [0, 1/4].
BOUNDS = {"softmax": (math.sqrt(2.0), 1.0), "logistic": (1.0, 0.25)}
#: The largest residual bound a lattice takes (``PrivateLattice.grad_bound``).
MAX_RESIDUAL_BOUND = 1e30
#: Squared error's Hessian bound: every window's h is 1 (its level releases send the count instead).
UNIT_HESSIAN = 1.0
#: Noise standard deviations a child's noisy count must reach for a split (see ``private_growth``).
MIN_COUNT_SIGMAS = 2.0


@dataclass(frozen=True)
class ReleasePlan:
    """The budget's shares of ``rho`` between the kinds of release (they add up to 1)."""

    opening: float = 0.05
    splits: float = 0.75
    leaves: float = 0.2

    def budget(self, epsilon: float, delta: float, n_rounds: int, max_depth: int) -> PrivacyBudget:
        """The budget of a training of ``n_rounds`` trees of depth ``max_depth``."""
        return PrivacyBudget(
            epsilon,
            delta,
            shares={"opening": self.opening, "splits": self.splits, "leaves": self.leaves},
            releases={
                "opening": opening_releases(),
                "splits": max(n_rounds * max_depth, 1),
                "leaves": max(n_rounds, 1),
            },
        )


def round_features(n_features: int, usable: np.ndarray, k: int, seed: int, round_no: int) -> np.ndarray:
    """The ``k`` features round ``round_no``'s tree may split on, drawn without replacement
    among the ``usable`` ones (those with edges) from the public seed ``(seed, round_no)``;
    ascending.

    Examples
    --------
    >>> round_features(10, np.ones(10, bool), 3, seed=0, round_no=1)
    array([4, 8, 9])
    """
    candidates = np.flatnonzero(np.asarray(usable, dtype=bool)[:n_features])
    rng = np.random.default_rng([seed, round_no])
    return np.sort(rng.choice(candidates, size=min(k, candidates.size), replace=False)).astype(np.int64)


class PrivateBoosting(BoostedTrees):
    """One run of ``FedSCSXGB.fit`` with ``protocol="private"``: the server's state."""

    def __init__(self, config, job: FederatedJob, seed: int) -> None:
        super().__init__()
        self.config = config
        self.job = job
        self.seed = seed
        self._root_mu: float | None = None  # the next level release's noise, asked for ahead

    def run(self) -> TreeEnsemble:
        cfg = self.config
        self.regression = cfg.objective == "squared_error"
        summer = FleetSummer(self.job, secure=True, degree=cfg.secagg_degree)
        summer.start(self.job.clients)
        self.budget = cfg.release_plan.budget(cfg.dp_epsilon, cfg.dp_delta, cfg.n_rounds, cfg.max_depth)
        fleet = describe_fleet_privately(
            self.job,
            summer,
            cfg.feature_set_version,
            regression=self.regression,
            n_bins=cfg.bins,
            classes=cfg.job_classes(),
            budget=self.budget,
        )
        self.clip = (
            public_target_range(summer, self.budget, cfg.feature_set_version, fleet, cfg.target_range)
            if self.regression
            else None
        )
        self._set_fleet(fleet)
        if cfg.init_model is not None:
            self.continue_from(cfg.init_model, cfg.multi_strategy)
        self.edges = list(fleet.edges)
        usable = np.array([e.shape[0] > 0 for e in self.edges])
        if not usable.any():
            raise TrainingError("no feature has two distinct values fleet-wide: nothing to split on")
        self.lattice = objective_lattice(
            cfg.objective,
            None if self.clip is None else residual_bound(self.clip, fleet.target_edges, fleet.target_shift),
        )
        m = self.n_outputs
        self.split_l2, self.split_l1 = _cell_bounds(self.lattice, m, with_count=True, unit_hessian=self.regression)
        self.leaf_l2, self.leaf_l1 = _cell_bounds(self.lattice, m, with_count=False)
        # a leaf weight is a mean of -g (bounded by grad_bound) before the noise: regression's
        # clip is in units of its residual bound, a classifier's in margins
        self.leaf_clip = cfg.dp_leaf_clip * (self.lattice.grad_bound if self.regression else 1.0)
        # every |sum| stays below the fleet's windows times the scale, plus the noise's tail: the
        # noisy count, doubled, and a margin far beyond its noise
        self.windows = 2.0 * fleet.total_samples + 10_000.0
        self.min_counts: list[float] = []  # per round, the noise-aware minimum child count
        for t in range(1, cfg.n_rounds + 1):
            started = time.monotonic()
            self._cohort = tuple(summer.active)
            self._answered = len(self._cohort)
            features = round_features(self.n_features, usable, cfg.dp_features, self.seed, t)
            round_ = PrivateRoundFeatures(features, *pack_edges([self.edges[j] for j in features]))
            # the round's first release is its root level: its noise sets the minimum child count
            self._root_mu = self.budget.mu("splits", *self._split_bounds(features.shape[0]))
            self.min_counts.append(self._min_count(round_, self._root_mu))
            growth = PrivateGrowth(cfg.growth, features, round_.edges(), self.min_counts[-1], self.leaf_clip)
            self.add_round(
                [
                    grow_private_tree(
                        growth, m, partial(self._level, summer, round_), partial(self._leaves, summer, round_)
                    )
                ]
            )
            spent = self.budget.spent()
            progress = StepProgress(
                self.job.job_id,
                cfg.name,
                t,
                cfg.n_rounds,
                len(self._cohort),
                self._answered,
                {"epsilon": spent.epsilon},
                time.monotonic() - started,
            )
            self.job.report(progress, model=partial(self.model, len(self.trees)))
            if self.job.stop_here(progress):
                break
        return self.model()

    def _set_fleet(self, fleet: PrivateFleet) -> None:
        self.set_objective(self.config.objective, fleet)
        self.vector_leaves = self.n_outputs > 1
        if self.clip is not None:  # the opening's noisy target median, inside the public range
            low, high = self.clip.centre - self.clip.half_width, self.clip.centre + self.clip.half_width
            stats = np.array([min(max(fleet.target_shift, low), high), 1.0])
        else:
            counts = np.maximum(fleet.label_counts, 1.0)  # noisy class counts, clipped (post-processing)
            stats = counts if self.config.objective == "softmax" else np.array([counts[1], counts.sum()])
        self.base_score = self.objective.base_score(stats, mode=self.config.base_score)

    def _split_bounds(self, k: int) -> tuple[float, float]:
        """L2 and L1 sensitivity of a level release over ``k`` round features (one cell each)."""
        return self.split_l2 * math.sqrt(k), self.split_l1 * k

    def _min_count(self, round_: PrivateRoundFeatures, mu: float) -> float:
        """A few noise standard deviations (Skellam variance ``mu`` per cell) of a candidate
        child's count (a cumulative sum over up to half the slots of one feature), in windows."""
        return MIN_COUNT_SIGMAS * math.sqrt(mu) * math.sqrt(round_.slots / 2) / self.lattice.scale

    def _word_bits(self, mu: float) -> int:
        return max(32, word_bits_for(2.0 * (self.windows * self.lattice.scale + 10.0 * math.sqrt(mu))))

    def _sum(self, summer: FleetSummer, kind: str, l2: float, l1: float, build) -> np.ndarray:
        """One release: every cohort gateway's request from ``build(client, noise, secure,
        word_bits)``, the noisy fleet sum in lattice steps, and its cost accounted."""
        cohort = list(summer.active)
        mu = self._root_mu if kind == "splits" and self._root_mu is not None else self.budget.mu(kind, l2, l1)
        self._root_mu = None
        self._mu = mu
        bits = self._word_bits(mu)
        requests = {c: build(c, NoiseShare(mu, len(cohort)), summer.secure_round(c, cohort), bits) for c in cohort}
        length = next(iter(requests.values())).length
        result = summer.ask(
            requests,
            XgbHistogramReply,
            lambda r: r.sums,
            length,
            word_bits=bits,
            check=lambda c, r: self.check_trees(c, r.n_trees),
        )
        for client in cohort:
            if client in result.contributors:
                self.known[client] = result.replies[client].n_trees
            else:
                self.known.pop(client, None)
        self._answered = min(self._answered, len(result.contributors))
        self.budget.spend(skellam_release(kind, l2, l1, mu, answered=len(result.contributors), asked=len(cohort)))
        return result.total.view(np.int64).astype(np.float64)

    def _natural(self, sums: np.ndarray, axis: int) -> np.ndarray:
        """Lattice sums ``(..., G_0..G_{m-1}, rest, ...)`` along ``axis`` in natural units: G per
        ``gradient_scale``, the H and counts per ``scale``."""
        steps = np.full(sums.shape[axis], float(self.lattice.scale))
        steps[: self.n_outputs] = self.lattice.gradient_scale
        return sums / steps.reshape((-1,) + (1,) * (sums.ndim - axis - 1))

    def _level(
        self, summer: FleetSummer, round_: PrivateRoundFeatures, splits: RoundSplits, node_ids: np.ndarray
    ) -> np.ndarray:
        k = round_.features.shape[0]
        sums = self._sum(
            summer,
            "splits",
            *self._split_bounds(k),
            lambda c, noise, secure, bits: XgbPrivateLevelRequest(
                self.task, self._delta(c), round_, splits, node_ids, self.lattice, noise, secure, bits
            ),
        )
        m = self.n_outputs
        hist = self._natural(sums.reshape(node_ids.shape[0], -1, k, round_.slots), axis=1)
        if self.regression:  # the count is the H: (G, count) -> (G, H, count)
            hist = np.concatenate([hist[:, :m], hist[:, -1:], hist[:, -1:]], axis=1)
        self._check("level", hist)
        return hist

    def _check(self, what: str, hist: np.ndarray) -> None:
        """Stop the job in one line when a decoded release ``(R, 2m + 1, k, S)`` breaks what
        clipped values give (:func:`~aggregator.algorithms.private_growth.level_violation`)."""
        lattice = self.lattice
        sigma = math.sqrt(self._mu) / lattice.scale
        violation = level_violation(
            hist, sigma, lattice.grad_bound, lattice.hess_bound, lattice.scale, lattice.gradient_scale
        )
        if violation is not None:
            raise TrainingError(
                f"the fleet's {what} sums break the protocol's bounds ({violation}): a gateway sent "
                "values outside the private protocol's clipping; the job stops"
            )

    def _leaves(
        self, summer: FleetSummer, round_: PrivateRoundFeatures, splits: RoundSplits, leaves: np.ndarray
    ) -> np.ndarray:
        sums = self._sum(
            summer,
            "leaves",
            self.leaf_l2,
            self.leaf_l1,
            lambda c, noise, secure, bits: XgbPrivateLeavesRequest(
                self.task, self._delta(c), round_, splits, leaves, self.lattice, noise, secure, bits
            ),
        )
        sums = self._natural(sums.reshape(leaves.shape[0], 2 * self.n_outputs), axis=1)
        if self.regression:  # every window's H is 1: the leaf's H is its count, which bounds its G
            self._check("leaf", np.concatenate([sums, sums[:, 1:]], axis=1)[:, :, None, None])
        return sums

    @property
    def task(self) -> XgbTask:
        return self.config.task(self.n_features, self.base_score, self.classes)

    def _target_metadata(self) -> dict[str, float]:
        """Regression: the public target range and the residual bound it gave."""
        if self.clip is None:
            return {}
        return {
            "dp_target_low": self.clip.centre - self.clip.half_width,
            "dp_target_high": self.clip.centre + self.clip.half_width,
            "dp_grad_bound": self.lattice.grad_bound,
        }

    def model(self, n_trees: int | None = None) -> TreeEnsemble:
        """The ensemble of the first ``n_trees`` trees (all), with what the training spent so far."""
        cfg = self.config
        return self.boosted_model(
            n_trees,
            self.base_score,
            cfg.feature_set_version,
            metadata={
                **cfg.model_metadata(len(self.trees[:n_trees])),
                "dp_features": cfg.dp_features,
                "dp_leaf_clip": cfg.dp_leaf_clip,
                **self._target_metadata(),
                **self.budget.spent().metadata(),
            },
        )


def objective_lattice(objective: str, bound: float | None) -> PrivateLattice:
    """The lattice of ``objective``'s releases: its own public bounds (classifiers) or, for
    squared error, ``|g| <= bound`` (:func:`residual_bound`), ``h = 1``, and G on
    ``LATTICE_SCALE`` steps per bound (a clipped residual weighs at most one window).

    Examples
    --------
    >>> objective_lattice("squared_error", 250.0)
    PrivateLattice(scale=64, grad_bound=250.0, hess_bound=1.0, grad_scale=0.256)
    """
    if objective in BOUNDS:
        return PrivateLattice(LATTICE_SCALE, *BOUNDS[objective])
    if objective != "squared_error" or bound is None:
        raise TrainingError(f"the private protocol has no public gradient bound for {objective!r}")
    if not bound <= MAX_RESIDUAL_BOUND:
        raise TrainingError(
            f"the targets' public range gives a residual bound of {bound:.3g}, beyond {MAX_RESIDUAL_BOUND:.0e}: "
            "rescale the targets (e.g. other units)"
        )
    return PrivateLattice(LATTICE_SCALE, bound, UNIT_HESSIAN, LATTICE_SCALE / bound)


def _cell_bounds(
    lattice: PrivateLattice, m: int, *, with_count: bool, unit_hessian: bool = False
) -> tuple[float, float]:
    """L2 and L1 bounds of one window's lattice statistics in one cell: G (``m`` values), H
    (``m``; not in a histogram of a ``unit_hessian``, whose count is the H) and, for histograms,
    its count (``scale``)."""
    g2, g1 = lattice_norm_bound(lattice.grad_bound, lattice.gradient_scale, m)
    h2, h1 = (0.0, 0.0) if with_count and unit_hessian else lattice_norm_bound(lattice.hess_bound, lattice.scale, m)
    c = float(lattice.scale) if with_count else 0.0
    return math.sqrt(g2 * g2 + h2 * h2 + c * c), g1 + h1 + c
