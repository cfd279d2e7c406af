"""FedForest's configuration and server half (paper Alg. 1): a random forest grown level by level
for all trees at once, from fleet statistics only.

One strategy per protocol (``FedForest.protocol``, below): ``fedforest_sketches`` (the paper's two
rounds per level), ``fedforest_histogram`` (one secure fleet sum per level) -- both on the shared
level loop of ``forest_training`` -- and ``fedforest_private`` (two noisy releases). Candidates are
built in ``forest_candidates`` and scored in ``forest_growth``.

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
``candidates="uniform"`` (Kalloori-style fixed-width bins on the fleet's min/max: the
Federated Histogram baseline), fixed ``thresholds`` per feature (the oracle tests' "same
candidates"), ``target="client"`` (predict H from X: the covariate-shift diagnostic).

Protocols (``FedForest.protocol``):

* ``"private"`` (the default): differential privacy under secure aggregation -- a noisy
  opening, one noisy release of the fleet's class counts (regression: window counts and sums of
  the target clipped to a public range) per feature and bin, trees grown from it (random
  splits on the best-scoring features; regression: the splits its marginals call for), one
  noisy release of the leaves' class counts (regression: counts
  and sums) (``fedforest_private``, ``forest_private_growth``);
* ``"histogram"`` (secure sums without differential privacy, with a one-line warning): one
  fleet sum per level of per-bin histograms over fleet-wide edges, the exact pooled gain of every
  edge, no child below ``min_crowd`` windows (``fedforest_histogram``);
* ``"sketches"`` (the paper's, for reproduction, with a one-line warning): two rounds per level,
  per-client summaries and quantile sketches, then left summaries (``fedforest_sketches``).

Determinism: per-tree client subsets come from ``default_rng(seed)``, each node's feature
subsample from ``default_rng([seed, tree, node])``, each client's bootstrap from (seed, tree,
client index); replies are summed in client-id order; gains equal up to rounding noise are ties.

Resuming: every completed level is reported with the server's state (``ForestState``: the split
decisions, the frontier and every pooled summary), which a server stores with the level; a job
restarted with it (``FedForest(resume_state=...)``) grows the next level on, and ends with the
forest an uninterrupted run grows (the draws above depend on nothing a crash loses).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np

from shared.model import TreeEnsemble

from ..jobs import FederatedJob
from .fedforest_histogram import HistogramForestTraining
from .fedforest_private import PRIVATE_REGRESSION_BINS, REGRESSION_RELEASE_PLAN, PrivateForestTraining, ReleasePlan
from .fedforest_sketches import SketchForestTraining
from .forest_training import ForestFleet, ForestResult, ForestState, LevelCounts, forest_importance
from .private_fleet import check_privacy_settings, checked_target_range, warn_if_not_private

__all__ = ["FedForest", "ForestFleet", "ForestResult", "ForestState", "LevelCounts", "forest_importance"]

log = logging.getLogger(__name__)

#: Bins per feature by protocol when ``n_bins`` is not set: coarse under differential privacy
#: (fewer, fuller cells next to the noise), the paper's 32 otherwise. Private regression sizes
#: them to its fleet, at most ``PRIVATE_REGRESSION_BINS`` (``fedforest_private.bins_for_windows``).
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
    the private protocol, 32 otherwise; a private regression without ``n_bins`` sizes its bins
    to the fleet's noisy window count from the opening's first grid round, about 50 windows a
    bin, 16 to 64 (BENCHMARKS.md, FedForest regression under differential privacy).

    The private protocol spends ``dp_epsilon`` per window and training (``(dp_epsilon,
    dp_delta)``-DP for adding or removing one window, accounted by ``aggregator.privacy``),
    shared between the opening, the root histograms and the leaves by ``release_plan`` (default
    ``ReleasePlan()``; regression ``REGRESSION_RELEASE_PLAN``). Every window is in every tree
    once (``bootstrap`` does not apply). Classification trees split at random, from the public
    ``seed``, on the ``dp_features`` features (default sqrt(d)) whose noisy root histograms
    score best; regression trees split where the root histograms' marginals say a split gains
    more than the leaves' noise costs, on ``dp_features`` features (default all)
    (``forest_private_growth.marginal_split``). That structure is a function of the root
    release alone, the same for every tree, and the average of trees with one structure is one
    tree, so a private regression grows one tree (``n_trees`` does not apply; the model and its
    metadata hold one).
    A private regression clips its targets to a public range read off a noisy release of their
    octaves (``private_fleet.release_target_range``), or to ``target_range`` ``(low, high)``
    when the job gives it (public knowledge, e.g. a sensor's physical range; no release then).
    ``max_features``, ``min_samples_*``, ``min_impurity_decrease`` and ``min_crowd`` do not
    apply: no node statistics are released.
    The model's metadata reports what was spent
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
    candidates: Literal["quantiles", "uniform"] = "quantiles"
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
    dp_features: int | None = None  # None: sqrt(n_features); regression: all
    target_range: tuple[float, float] | None = None  # private regression: a public range, else released
    release_plan: ReleasePlan | None = None  # None: the task's default
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
        if self.target_range is not None:
            object.__setattr__(
                self, "target_range", checked_target_range(self.target_range, self.regression, self.protocol)
            )
        if self.protocol != "sketches":
            unsupported = [
                name
                for name, on in (
                    ("client_splits", self.client_splits),
                    ("categorical_features", bool(self.categorical_features)),
                    ("evaluation='avgimp'", self.evaluation != "exact"),
                    ("candidates='uniform'", self.candidates != "quantiles"),
                    ("target='client'", self.target != "label"),
                    ("thresholds", self.protocol == "private" and self.thresholds is not None),
                )
                if on
            ]
            if unsupported:
                raise ValueError(
                    f"protocol={self.protocol!r} does not offer {', '.join(unsupported)} (they need "
                    "per-client statistics or exact sums); use protocol='sketches'"
                )

    @property
    def regression(self) -> bool:
        return self.task == "regression" and self.target == "label"

    @property
    def bins(self) -> int:
        """Bins per feature: ``n_bins``, else the protocol's default."""
        if self.n_bins:
            return self.n_bins
        if self.protocol == "private":
            return PRIVATE_REGRESSION_BINS if self.regression else PRIVATE_BINS
        return DEFAULT_BINS

    @property
    def budget_plan(self) -> ReleasePlan:
        """``release_plan``, else the task's default."""
        return self.release_plan or (REGRESSION_RELEASE_PLAN if self.regression else ReleasePlan())

    @property
    def split_criterion(self) -> Literal["gini", "entropy", "mse"]:
        return self.criterion or ("mse" if self.regression else "gini")

    @property
    def chosen_protocol(self) -> Literal["private", "histogram", "sketches"]:
        """``protocol`` as construction resolved it (``None`` becomes the default there)."""
        if self.protocol is None:
            raise ValueError("FedForest.protocol is unresolved: the configuration bypassed its constructor")
        return self.protocol

    @property
    def secure(self) -> bool:
        """``secure_aggregation`` as construction resolved it (``None`` becomes the default there)."""
        if self.secure_aggregation is None:
            raise ValueError("FedForest.secure_aggregation is unresolved: the configuration bypassed its constructor")
        return self.secure_aggregation

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
            strategy = HistogramForestTraining if self.protocol == "histogram" else SketchForestTraining
            return strategy(self, job, seed).run()
        model, grown = PrivateForestTraining(self, job, seed).run()
        return ForestResult(
            model,
            grown.importance(),
            grown.root_gain(self.split_criterion),
            [LevelCounts(0, 1, int(grown.screening.score.shape[0]), int(np.isfinite(grown.screening.score).sum()))],
        )
