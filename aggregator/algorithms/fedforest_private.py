"""FedForest's private protocol (``protocol="private"``, the default): a random forest under
distributed differential privacy, the server decoding only noisy fleet sums.

A training spends a budget of ``(dp_epsilon, dp_delta)`` per window (adding or removing one
window), shared by :class:`ReleasePlan` between three kinds of release
(:class:`~aggregator.privacy.PrivacyBudget`):

* ``opening`` -- the fleet's window and class counts and a few grid rounds for coarse bin edges
  (``private_fleet``); regression: the grid rounds with the target as one more column and, in
  place of the fleet's target sums, one release of the target's counts per octave (sensitivity
  1) that gives the public target range (``private_fleet.target_range``);
* ``histograms`` -- one release: per feature and slot of the edges, the fleet's class counts
  (``fedforest.dp_histograms``). One window adds one count to one cell per feature: L2
  sensitivity ``sqrt(d)``, L1 ``d``;
* ``leaves`` -- one release: per leaf of every tree, the fleet's class counts
  (``fedforest.dp_leaves``). Every window is in every tree (no bootstrap) and in one leaf of
  each: L2 sensitivity ``sqrt(n_trees)``, L1 ``n_trees``.

Regression releases, in the same two cells, ``[windows, Σ z]`` with ``z`` the target clipped to
the public range and scaled into ``[-1, 1]`` (``TargetClip``), on the same lattice: one window
adds ``COUNT_SCALE`` to the count and at most ``COUNT_SCALE`` in magnitude to the sum of its
cell, so the sensitivities are those above for two columns: ``sqrt(2 d)`` and ``2 d`` (root
histograms), ``sqrt(2 n_trees)`` and ``2 n_trees`` (leaves), in windows -- with ``n_trees`` 1:
a private regression grows one tree (its trees would all have the one structure the root
release calls for).

Counts travel multiplied by :data:`COUNT_SCALE` (which keeps the Skellam mechanism close to the
Gaussian), plus each gateway's share of the noise, in masked 32-bit ring words. Between the two
releases the server grows the trees (``forest_private_growth``): classification by random splits
from the job's public seed on the ``dp_features`` features (default sqrt(d)) the first release
scores best, regression where the first release's marginals say a split gains more than the
leaves' noise costs (on every feature by default). Everything it keeps is post-processing of
the releases. ``docs/differential_privacy.md`` has the accounting
and PRIVACY.md what each party learns.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from shared.model import TreeEnsemble
from shared.protocol.messages.fedforest import (
    ForestHistogramReply,
    ForestTask,
    PrivateForestHistogramRequest,
    PrivateForestLeavesRequest,
    SplitDecisions,
)
from shared.protocol.messages.fleet_sums import NoiseShare
from shared.protocol.messages.secure_aggregation import word_bits_for
from shared.sketches import pack_edges

from ..fleet_sums import FleetSummer
from ..jobs import FederatedJob, StepProgress, TrainingError
from ..privacy import PrivacyBudget, skellam_release
from .forest_private_growth import NoisyCounts, PrivateForest, PrivateForestPlan, count_violation, grow_private_forest
from .private_fleet import COUNT_SCALE, describe_fleet_privately, opening_releases, public_target_range

if TYPE_CHECKING:
    from .fedforest import FedForest

__all__ = [
    "COUNT_SCALE",
    "PRIVATE_REGRESSION_BINS",
    "PrivateForestTraining",
    "REGRESSION_RELEASE_PLAN",
    "ReleasePlan",
    "release_bounds",
]


@dataclass(frozen=True)
class ReleasePlan:
    """The budget's shares of ``rho`` between the kinds of release (they add up to 1)."""

    opening: float = 0.1
    histograms: float = 0.25
    leaves: float = 0.65

    def budget(self, epsilon: float, delta: float) -> PrivacyBudget:
        """The budget of one private forest training."""
        return PrivacyBudget(
            epsilon,
            delta,
            shares={"opening": self.opening, "histograms": self.histograms, "leaves": self.leaves},
            releases={"opening": opening_releases(), "histograms": 1, "leaves": 1},
        )


#: A private regression without ``n_bins`` sizes its bins to hold about this many windows each,
#: from 16 up to ``PRIVATE_REGRESSION_BINS`` (what its opening starts with): finer steps where
#: the fleet is large, fewer and fuller cells where the noise is large next to them
#: (BENCHMARKS.md, FedForest regression under differential privacy).
WINDOWS_PER_BIN = 50
PRIVATE_REGRESSION_BINS = 64


def bins_for_windows(windows: float, most: int = PRIVATE_REGRESSION_BINS, least: int = 16) -> int:
    """The bins for a fleet of ``windows`` (noisy): the largest power-of-two fraction of
    ``most`` that leaves :data:`WINDOWS_PER_BIN` windows a bin, at least ``least``.

    Examples
    --------
    >>> bins_for_windows(800.0), bins_for_windows(3_300.0), bins_for_windows(40_000.0)
    (16, 64, 64)
    >>> bins_for_windows(2_000.0)
    32
    """
    bins = most
    while bins > least and windows < WINDOWS_PER_BIN * bins:
        bins //= 2
    return bins


#: Regression's shares: its trees' splits are read from the root histograms, so they get more
#: of the budget than classification's (measured in BENCHMARKS.md, FedForest regression under
#: differential privacy).
REGRESSION_RELEASE_PLAN = ReleasePlan(opening=0.1, histograms=0.45, leaves=0.45)


def release_bounds(kind: str, n_features: int, n_trees: int, columns: int = 1) -> tuple[float, float]:
    """The L2 and L1 norms, in lattice units, of what one window adds to a release: a count of
    ``COUNT_SCALE`` in one cell per feature (``"histograms"``) or per tree (``"leaves"``), in
    each of ``columns`` columns (regression: 2, the count and ``round(z COUNT_SCALE)``).

    Examples
    --------
    >>> release_bounds("leaves", n_features=204, n_trees=4)
    (128.0, 256.0)
    >>> release_bounds("leaves", n_features=204, n_trees=2, columns=2)
    (128.0, 256.0)
    """
    cells = {"histograms": n_features, "leaves": n_trees}[kind] * columns
    return COUNT_SCALE * math.sqrt(cells), COUNT_SCALE * float(cells)


class PrivateForestTraining:
    """One run of ``FedForest.fit`` with ``protocol="private"``: the server's I/O and budget."""

    def __init__(self, config: FedForest, job: FederatedJob, seed: int) -> None:
        self.config = config
        self.job = job
        self.seed = seed

    def run(self) -> tuple[TreeEnsemble, PrivateForest]:
        cfg = self.config
        self.summer = FleetSummer(self.job, secure=True, degree=cfg.secagg_degree)
        self.summer.start(self.job.clients)
        self.budget = cfg.budget_plan.budget(cfg.dp_epsilon, cfg.dp_delta)
        fleet = describe_fleet_privately(
            self.job,
            self.summer,
            cfg.feature_set_version,
            regression=cfg.regression,
            n_bins=cfg.bins,
            classes=cfg.classes,
            budget=self.budget,
            bins_for=bins_for_windows if cfg.regression and cfg.n_bins is None else None,
        )
        if not cfg.regression and len(fleet.classes) < 2:
            raise TrainingError(f"classification needs at least 2 classes, the clients have {list(fleet.classes)}")
        self.fleet = fleet
        self.clip = (
            public_target_range(self.summer, self.budget, cfg.feature_set_version, fleet, cfg.target_range, narrow=True)
            if cfg.regression
            else None
        )
        self.columns = 2 if cfg.regression else len(fleet.classes)
        self.edges = [np.asarray(e, dtype=np.float32) for e in fleet.edges]
        if not any(e.shape[0] for e in self.edges):
            raise TrainingError("no feature has two distinct values fleet-wide: nothing to split on")
        self.edge_values, self.edge_offsets = pack_edges(self.edges)
        self.clients = list(fleet.clients)
        # every cell counts at most the fleet's windows (the opening's noisy count, doubled, with
        # a margin far beyond its noise) times the scale, plus the release's noise tail
        self.windows = 2.0 * fleet.total_samples + 10_000.0
        self.step = 0
        self.keep = cfg.dp_features or (fleet.n_features if cfg.regression else max(1, math.isqrt(fleet.n_features)))
        # regression's trees would all have the one structure the root release calls for, and
        # their average is one tree's: it grows one, whose leaves cost one tree's share of noise
        self.n_trees = 1 if cfg.regression else cfg.n_trees
        plan = PrivateForestPlan(
            self.n_trees,
            cfg.max_depth,
            self.keep,
            cfg.split_criterion,
            target=self.clip,
            shrink_to_parent=cfg.regression,
            structure="marginal" if cfg.regression else "random",
            leaf_sigma=math.sqrt(self.budget.planned_mu("leaves", *self._bounds("leaves"))) / COUNT_SCALE,
        )
        grown = grow_private_forest(plan, self.edges, self.seed, self._histograms, self._leaves)
        return self._model(grown), grown

    # -- releases ------------------------------------------------------------------------------

    def _task(self, client: str) -> ForestTask:
        cfg = self.config
        return ForestTask(
            task=cfg.task,
            criterion=cfg.split_criterion,
            feature_set_version=cfg.feature_set_version,
            n_features=self.fleet.n_features,
            n_trees=self.n_trees,
            client_index=self.clients.index(client),
            trees=np.arange(self.n_trees, dtype=np.int64),
            seed=self.seed,
            bootstrap=False,
            classes=self.fleet.classes,
            n_clients=len(self.clients),
        )

    def _release(self, kind: str, l2: float, l1: float, build) -> NoisyCounts:
        """One release: every active gateway's request from ``build(client, noise, secure,
        word_bits)``, the noisy fleet sum in windows, its cost accounted, progress reported."""
        started = time.monotonic()
        cohort = list(self.summer.active)
        mu = self.budget.mu(kind, l2, l1)
        bits = max(32, word_bits_for(2.0 * (self.windows * COUNT_SCALE + 10.0 * math.sqrt(mu))))
        requests = {
            c: build(c, NoiseShare(mu, len(cohort), COUNT_SCALE), self.summer.secure_round(c, cohort), bits)
            for c in cohort
        }
        length = next(iter(requests.values())).length
        result = self.summer.ask(requests, ForestHistogramReply, lambda r: r.sums, length, word_bits=bits)
        answered = len(result.contributors)
        self.budget.spend(skellam_release(kind, l2, l1, mu, answered=answered, asked=len(cohort)))
        self.step += 1
        self.job.report(
            StepProgress(
                self.job.job_id,
                self.config.name,
                self.step,
                2,
                len(cohort),
                answered,
                {"epsilon": self.budget.spent().epsilon},
                time.monotonic() - started,
            )
        )
        counts = result.total.view(np.int64).astype(np.float64) / COUNT_SCALE
        return NoisyCounts(counts, math.sqrt(mu * answered / len(cohort)) / COUNT_SCALE)

    def _bounds(self, kind: str) -> tuple[float, float]:
        return release_bounds(kind, self.fleet.n_features, self.n_trees, 2 if self.config.regression else 1)

    def _histograms(self) -> NoisyCounts:
        d, C = self.fleet.n_features, self.columns
        features = np.arange(d, dtype=np.int64)
        released = self._release(
            "histograms",
            *self._bounds("histograms"),
            lambda c, noise, secure, bits: PrivateForestHistogramRequest(
                self._task(c), features, self.edge_values, self.edge_offsets, noise, secure, bits, target_clip=self.clip
            ),
        )
        slots = int(np.diff(self.edge_offsets).max(initial=0)) + 2
        self._check("root histograms", released, np.repeat(np.arange(d), slots))
        return NoisyCounts(released.counts.reshape(d, slots, C), released.sigma)

    def _leaves(self, splits: SplitDecisions, leaf_tree: np.ndarray, leaf_id: np.ndarray) -> NoisyCounts:
        released = self._release(
            "leaves",
            *self._bounds("leaves"),
            lambda c, noise, secure, bits: PrivateForestLeavesRequest(
                self._task(c), splits, leaf_tree, leaf_id, noise, secure, bits, target_clip=self.clip
            ),
        )
        self._check("leaf counts", released, leaf_tree)
        return NoisyCounts(released.counts.reshape(leaf_tree.shape[0], self.columns), released.sigma)

    def _check(self, what: str, released: NoisyCounts, group: np.ndarray) -> None:
        """Stop the job in one line when a release breaks what honest counts make true."""
        violation = count_violation(
            released.counts.reshape(-1, self.columns), group, released.sigma, self.config.split_criterion
        )
        if violation is not None:
            raise TrainingError(
                f"the fleet's {what} break the protocol's bounds ({violation}): a gateway sent "
                "counts no set of windows gives; the job stops"
            )

    # -- the model -----------------------------------------------------------------------------

    def _model(self, grown: PrivateForest) -> TreeEnsemble:
        cfg = self.config
        clip = (
            {}
            if self.clip is None
            else {
                "dp_target_low": self.clip.centre - self.clip.half_width,
                "dp_target_high": self.clip.centre + self.clip.half_width,
            }
        )
        return TreeEnsemble(
            trees=grown.trees,
            kind="forest",
            link="identity",
            n_outputs=1 if cfg.regression else self.columns,
            feature_names=tuple(self.fleet.feature_names),
            feature_set_version=cfg.feature_set_version,
            classes=self.fleet.model_classes,
            metadata={
                "algorithm": cfg.name,
                "n_trees": self.n_trees,
                "max_depth": cfg.max_depth,
                "n_bins": self.fleet.n_bins,
                "criterion": cfg.split_criterion,
                "protocol": cfg.chosen_protocol,
                "secure_aggregation": 1,
                "dp_features": self.keep,
                **clip,
                **self.budget.spent().metadata(),
            },
        )
