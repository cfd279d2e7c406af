"""PAX, Party-Adaptive XGBoost (Ong, Zhou, Baracaldo & Ludwig 2020, arXiv:2012.06670): the
FedSCS-XGB paper's federated baseline (its Table II and Figs. 3-4), through the same API as the
algorithms (``aggregator.simulate(PAX(...), clients)``).

What the FedSCS-XGB paper says of PAX, and what this module does with it:

* *party-specific histograms* -- every party (gateway) bins its data with its **own** quantile
  cuts: at the start of the job each party sends a weighted quantile summary of its features
  (the sketch request of FedSCS-XGB's paper protocol, at the base score, where every window has
  the same Hessian, so the cuts are count quantiles of the party's data like XGBoost's ``hist``)
  and the server reads that party's ``n_bins``-quantile cuts off it, alone -- never mixed with the
  other parties' (the opposite of FedSCS-XGB's global bin alignment);
* *a surrogate representation built on the server* -- per node the parties send their gradient
  histograms on their own bins; the server cannot line the bins up (party bins straddle each
  other's cuts), so it represents every party bin by one surrogate point -- its upper cut, the
  value all of the bin's windows lie below (XGBoost's own name for a bin) -- and places the
  bin's whole (G, H, count) there. The server's candidate thresholds are the parties' cuts: all
  of them when the union has at most ``n_bins - 1`` values, else the ``n_bins``-quantiles of
  the surrogate points weighted by the windows they stand for (each party bin holds ~1/B of its
  party's windows). Split gains, the split choice and the leaf weights are computed on that
  surrogate histogram: a party bin that straddles the chosen threshold is counted wholly on the
  right, which is PAX's approximation (FedSCS-XGB: "PAX evaluates split candidates with respect
  to the surrogate feature representation");
* *XGBoost's objective otherwise* -- the same gain (Eq. 1), leaf weights, softmax tree groups
  (one tree per class per round), tie-breaks and level-wise growth as FedSCS-XGB
  (``levelwise_growth.grow_round``); the parties route their windows through the chosen
  thresholds on their raw float32 values (they receive each request's thresholds among their
  edges, and the server folds those extra bins back into the party's own before building the
  surrogate), and update their margins with the trees as grown.

The seed paper describes PAX only at this level of detail; the surrogate point (the upper cut)
and the reduction of the candidate set to ``n_bins`` quantiles are this module's reading of
"party-adaptive surrogate histograms". With one party there is nothing to align: PAX is then
exactly histogram XGBoost on that party's cuts (tested against ``xgboost.train``).

Privacy (ARCHITECTURE §5b): a research baseline that reveals what PAX reveals, and more than the
private protocols: every party's quantile cuts (actual feature values of its windows) and, per
depth level, its own (G, H, count) histogram of every requested node -- per-party statistics,
sent plainly (secure aggregation would hide exactly the per-party histograms the surrogate
needs). A node holding a handful of a party's windows exposes their gradients, hence labels.
Never use it to train a deployed model; it is here to reproduce the paper's comparison.

Parameters follow XGBoost's names and meanings (``gamma`` is XGBoost's ``min_split_loss``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import ClassVar, Literal

import numpy as np

from shared.histograms import dequantize
from shared.model import TreeEnsemble
from shared.protocol.messages.fedscs_xgb import (
    LOSS_FRAC_BITS,
    ModelDelta,
    RoundSplits,
    XgbHistogramReply,
    XgbHistogramRequest,
    XgbSketchReply,
    XgbSketchRequest,
    XgbTask,
)
from shared.protocol.schema import to_wire
from shared.sketches import SketchError, finalize_edges, merge_edges_columns, pack_edges, summaries_from_arrays
from shared.sketches.weighted import exact_weighted_quantiles

from ..algorithms.boosted_trees import BoostedTrees
from ..algorithms.fedscs_xgb import base_score_stats
from ..algorithms.fleet_data import FleetData, describe_fleet
from ..algorithms.histogram_growth import GrowthParams
from ..algorithms.levelwise_growth import grow_round
from ..algorithms.private_fleet import frac_bits_for
from ..jobs import FederatedJob, StepProgress, TrainingError

__all__ = ["PAX", "PartyGrid", "global_grid", "slot_maps", "surrogate_histogram"]


# --- the surrogate histogram (pure) ---------------------------------------------------------------
def global_grid(party_cuts: list[np.ndarray], party_windows: list[int], n_bins: int) -> np.ndarray:
    """The server's candidate thresholds for one feature from the parties' own cuts.

    The union of the cuts when it has at most ``n_bins - 1`` values (one party: its own cuts);
    else the weighted ``n_bins``-quantiles of the surrogate points -- every party cut, standing
    for the ~``n_c / (len(cuts_c) + 1)`` windows of the party bin it closes.

    >>> global_grid([np.array([1.0, 2.0], np.float32), np.array([1.5], np.float32)], [30, 20], 4)
    array([1. , 1.5, 2. ], dtype=float32)
    """
    cuts = [np.asarray(c, dtype=np.float32) for c in party_cuts]
    union = np.unique(np.concatenate(cuts)) if cuts else np.empty(0, np.float32)
    if union.size <= n_bins - 1:
        return union
    points = np.concatenate(cuts).astype(np.float64)
    weights = np.concatenate([np.full(c.size, n / (c.size + 1)) for c, n in zip(cuts, party_windows)])
    return finalize_edges(exact_weighted_quantiles(points, weights, np.arange(1, n_bins) / n_bins))


@dataclass(frozen=True)
class PartyGrid:
    """One party's bins for one request: its own ``cuts`` plus the round's thresholds ``extra``
    (so that it routes windows exactly), as the ``edges`` it is sent."""

    cuts: np.ndarray  # float32, the party's own quantile cuts
    edges: np.ndarray  # float32, cuts ∪ the round's thresholds on this feature

    @classmethod
    def with_thresholds(cls, cuts: np.ndarray, thresholds: np.ndarray) -> PartyGrid:
        return cls(cuts, np.union1d(cuts, np.asarray(thresholds, dtype=np.float32)).astype(np.float32))

    def surrogate_slots(self, grid: np.ndarray) -> np.ndarray:
        """Where each present-value slot of this grid (``len(edges) + 1`` of them) lands on the
        server's grid: a slot goes to its party bin (the cuts are among the edges, so each slot
        lies in one), the party bin to the grid bin of its upper cut (``+inf`` for the top bin,
        i.e. the grid's top bin ``len(grid)``). Non-decreasing."""
        party_bin = np.searchsorted(self.cuts, self.edges, side="left")  # the party bin of slot s < len(edges)
        upper = np.append(self.cuts.astype(np.float64), np.inf)[party_bin]
        return np.append(np.searchsorted(grid.astype(np.float64), upper, side="left"), grid.size)


def slot_maps(present: list[np.ndarray], n_slots: int, grid: list[np.ndarray], grid_slots: int) -> np.ndarray:
    """``(d, n_slots)`` grid slot of every slot of a request's histograms: ``present[j]`` (from
    :meth:`PartyGrid.surrogate_slots`) for feature ``j``'s bins, its padding to the grid's top
    bin, the missing slot (last) to the grid's missing slot (last). Non-decreasing per row."""
    maps = np.empty((len(present), n_slots), dtype=np.int64)
    for j, (row, g) in enumerate(zip(present, grid)):
        maps[j, : row.size] = row
        maps[j, row.size :] = g.size
    maps[:, -1] = grid_slots - 1
    return maps


def surrogate_histogram(hist: np.ndarray, slot_maps: np.ndarray, grid_slots: int) -> np.ndarray:
    """One party's ``(R, 3, d, S_party)`` int64 histograms folded onto the server's grid,
    ``(R, 3, d, grid_slots)``: each slot's (G, H, count) added to the grid slot ``slot_maps[j, s]``
    names. Integer sums: exact, and linear (parent - sibling folds to the other child)."""
    R, _, d, S = hist.shape
    keys = (np.arange(d)[:, None] * grid_slots + slot_maps).ravel()  # non-decreasing
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    out = np.zeros((R * 3, d * grid_slots), dtype=np.int64)
    out[:, keys[starts]] = np.add.reduceat(hist.reshape(R * 3, d * S), starts, axis=1)
    return out.reshape(R, 3, d, grid_slots)


# --- the configuration ------------------------------------------------------------------------------
@dataclass(frozen=True)
class PAX:
    """PAX settings (module docstring). Defaults: the FedSCS-XGB paper's experiment, which ran
    PAX with the same hyper-parameters as FedSCS-XGB and XGBoost (10 rounds, depth 4, eta 0.2,
    lambda 1, gamma 0.1 -- taken as XGBoost's number, like ``FedSCSXGB``'s).

    Parameters
    ----------
    n_rounds : int
        Boosting rounds (one tree per class each).
    max_depth, learning_rate, reg_lambda, min_child_weight : XGBoost's meanings.
    gamma : float
        XGBoost's ``min_split_loss`` (``GrowthParams.gamma``): a node splits iff its best loss
        change reaches it. Eq. 1 of the FedSCS-XGB paper subtracts half of it.
    n_bins : int
        Bins per feature of every party's own histogram (at most ``n_bins - 1`` cuts), and the
        size of the server's candidate grid.
    summary_size : int, optional
        Points per feature of the quantile summary each party sends for its cuts (default
        ``4 * n_bins``; a party sends at most half its window count).
    objective : {"softmax", "logistic", "squared_error"}
    classes : tuple of str, optional
        Fix the label vocabulary instead of the union of the parties' labels.

    Examples
    --------
    >>> import numpy as np, aggregator
    >>> from aggregator.baselines import PAX
    >>> rng = np.random.default_rng(0)
    >>> parties = []
    >>> for k in range(3):
    ...     X = rng.normal(loc=0.5 * k, size=(120, 3))
    ...     parties.append((X, (X[:, 0] > 0.5).astype(int)))
    >>> model = aggregator.simulate(PAX(n_rounds=5, n_bins=16), parties, seed=0)
    >>> X, y = parties[0]
    >>> bool((model.predict(X) == y).mean() > 0.9)
    True
    """

    n_rounds: int = 10
    max_depth: int = 4
    n_bins: int = 256
    learning_rate: float = 0.2
    reg_lambda: float = 1.0
    gamma: float = 0.1
    min_child_weight: float = 1.0
    objective: Literal["softmax", "logistic", "squared_error"] = "softmax"
    summary_size: int | None = None
    feature_set_version: str = ""
    classes: tuple[str, ...] | None = None

    name: ClassVar[str] = "pax"

    def __post_init__(self) -> None:
        if not (isinstance(self.n_rounds, int) and self.n_rounds >= 0):
            raise ValueError(f"n_rounds must be an int >= 0, got {self.n_rounds!r}")
        if not (isinstance(self.n_bins, int) and 2 <= self.n_bins <= 65_535):
            raise ValueError(f"n_bins must be an int in 2..65535, got {self.n_bins!r}")
        size = self.summary_size
        if size is not None and not (isinstance(size, int) and 1 <= size <= 1 << 16):
            raise ValueError(f"summary_size must be an int in 1..65536, got {self.summary_size!r}")
        if self.objective not in ("softmax", "logistic", "squared_error"):
            raise ValueError(f"objective must be 'softmax', 'logistic' or 'squared_error', got {self.objective!r}")
        self.growth  # validates the tree settings

    @property
    def growth(self) -> GrowthParams:
        return GrowthParams(
            max_depth=self.max_depth,
            reg_lambda=self.reg_lambda,
            gamma=self.gamma,
            min_child_weight=self.min_child_weight,
            learning_rate=self.learning_rate,
        )

    def fit(self, job: FederatedJob, *, seed: int = 0) -> TreeEnsemble:
        """Train over ``job``'s clients; returns the boosted ensemble. Deterministic: no sampling
        (``seed`` is accepted for the API and unused)."""
        return _Training(self, job).run()


# --- one run ----------------------------------------------------------------------------------------
class _Training(BoostedTrees):
    """One run of ``PAX.fit``: the parties' cuts, the server's grid, the trees so far."""

    def __init__(self, config: PAX, job: FederatedJob) -> None:
        super().__init__()
        self.config = config
        self.job = job
        #: (party, feature, thresholds) -> its grid and slot map: most features gain no threshold in a round
        self._grids: dict[tuple[str, int, bytes], tuple[PartyGrid, np.ndarray]] = {}

    def run(self) -> TreeEnsemble:
        cfg = self.config
        fleet = describe_fleet(
            self.job, cfg.feature_set_version, regression=cfg.objective == "squared_error", classes=cfg.classes
        )
        self._set_fleet(fleet)
        self.parties = list(fleet.clients)
        self.cuts = self._party_cuts()
        self.grid = [
            global_grid([self.cuts[c][j] for c in self.parties], [fleet.n_samples[c] for c in self.parties], cfg.n_bins)
            for j in range(self.n_features)
        ]
        self.grid_slots = max((g.size for g in self.grid), default=0) + 2
        bound = 1.0 if cfg.objective != "squared_error" else 4.0 * max(np.sqrt(fleet.target_sum_squares), 1.0)
        self.frac_bits, self.bound = frac_bits_for(fleet.total_samples, bound), float(bound)
        for t in range(1, cfg.n_rounds + 1):
            started = time.monotonic()
            self.stats: dict[str, float] = {}
            self._grids = {key: value for key, value in self._grids.items() if not key[2]}  # last round's thresholds
            trees = grow_round(self.n_outputs, self.grid, cfg.growth, self._fetch, frac_bits=self.frac_bits)
            for k, tree in enumerate(trees):
                self.trees.append(tree)
                self.tree_output.append(k if self.n_outputs > 1 else 0)
            n = self.stats.get("samples", 0.0)
            loss = self.stats.get("loss_sum", 0.0) / max(n, 1.0)
            if cfg.objective == "squared_error":
                loss = float(np.sqrt(loss))
            progress = StepProgress(
                self.job.job_id,
                cfg.name,
                t,
                cfg.n_rounds,
                len(self.parties),
                len(self.parties),
                {"train_loss": loss, "samples": n},
                time.monotonic() - started,
            )
            self.job.report(progress, model=partial(self.model, len(self.trees)))
            if self.job.stop_here(progress):
                break
        return self.model()

    def _set_fleet(self, fleet: FleetData) -> None:
        cfg = self.config
        self.set_objective(cfg.objective, fleet, who="parties")
        self.base_score = self.objective.base_score(base_score_stats(cfg.objective, fleet), mode="average")
        self.task = XgbTask(cfg.objective, cfg.feature_set_version, self.n_features, self.base_score, self.classes)

    def _party_cuts(self) -> dict[str, list[np.ndarray]]:
        """Each party's own ``n_bins``-quantile cuts per feature, from its summary alone."""
        cfg = self.config
        size = cfg.summary_size or 4 * cfg.n_bins
        request = XgbSketchRequest(self.task, ModelDelta(0, b""), "summary", summary_size=size)
        replies = self._ask_all(request, XgbSketchReply)
        cuts = {}
        for party, reply in replies.items():
            if reply.summary is None or reply.summary.points.shape[0] != self.n_features:
                raise TrainingError(f"{party} sent no summary of its {self.n_features} features")
            try:
                cuts[party] = merge_edges_columns([summaries_from_arrays(to_wire(reply.summary))], cfg.n_bins)
            except SketchError as exc:
                raise TrainingError(f"{party}'s summary gives no cuts: {exc}") from exc
        return cuts

    def _ask_all(self, requests, expect: type) -> dict:
        """Every party must answer: the surrogate is built from all of their histograms."""
        replies = self.job.ask(requests, self.parties, expect)
        missing = sorted(set(self.parties) - set(replies))
        if missing:
            raise TrainingError(f"PAX needs every party's histogram; no usable reply from {missing}")
        for party, reply in replies.items():
            if reply.n_trees != len(self.trees):
                raise TrainingError(f"{party}'s margins include {reply.n_trees} trees, the model has {len(self.trees)}")
            self.known[party] = reply.n_trees
        return replies

    def _fetch(self, splits: RoundSplits, node_tree: np.ndarray, node_id: np.ndarray) -> np.ndarray:
        """One depth level: every party's histograms on its own bins, folded onto the grid, summed."""
        first = not self.stats
        thresholds = [self.grid[j][splits.bin[splits.feature == j]] for j in range(self.n_features)]
        requests, present = {}, {}
        for party in self.parties:
            grids = [self._party_grid(party, j, thresholds[j]) for j in range(self.n_features)]
            present[party] = [m for _, m in grids]
            values, offsets = pack_edges([g.edges for g, _ in grids])
            bins = np.array(
                [
                    np.searchsorted(grids[j][0].edges, self.grid[j][b])
                    for j, b in zip(splits.feature.tolist(), splits.bin.tolist())
                ],
                dtype=np.int64,
            )
            own = RoundSplits(
                splits.tree, splits.node, splits.feature, bins, splits.default_left, splits.left, splits.right
            )
            requests[party] = XgbHistogramRequest(
                self.task,
                self._delta(party),
                values,
                offsets,
                own,
                node_tree,
                node_id,
                self.frac_bits,
                self.bound,
                with_loss=first,
            )
        replies = self._ask_all(requests, XgbHistogramReply)
        total = np.zeros((node_tree.shape[0], 3, self.n_features, self.grid_slots), dtype=np.int64)
        loss = samples = 0.0
        for party, reply in replies.items():
            request = requests[party]
            vector = np.asarray(reply.sums.values).astype(np.uint64).view(np.int64)
            if vector.shape[0] != request.length:
                raise TrainingError(f"{party} sent {vector.shape[0]} histogram entries, expected {request.length}")
            if first:
                loss += float(dequantize(vector[-2], LOSS_FRAC_BITS))
                samples += float(vector[-1])
                vector = vector[:-2]
            hist = vector.reshape(node_tree.shape[0], 3, self.n_features, request.slots)
            maps = slot_maps(present[party], request.slots, self.grid, self.grid_slots)
            total += surrogate_histogram(hist, maps, self.grid_slots)
        if first:
            self.stats = {"loss_sum": loss, "samples": samples}
        return total

    def _party_grid(self, party: str, feature: int, thresholds: np.ndarray) -> tuple[PartyGrid, np.ndarray]:
        key = (party, feature, thresholds.tobytes())
        if key not in self._grids:
            grid = PartyGrid.with_thresholds(self.cuts[party][feature], thresholds)
            self._grids[key] = (grid, grid.surrogate_slots(self.grid[feature]))
        return self._grids[key]

    def model(self, n_trees: int | None = None) -> TreeEnsemble:
        """The ensemble of the first ``n_trees`` trees (all)."""
        cfg = self.config
        n_grown = len(self.trees[:n_trees])
        return self.boosted_model(
            n_trees,
            self.base_score,
            cfg.feature_set_version,
            metadata={
                "algorithm": cfg.name,
                "objective": cfg.objective,
                "n_rounds": n_grown // self.n_outputs,
                "max_depth": cfg.max_depth,
                "n_bins": cfg.n_bins,
                "learning_rate": cfg.learning_rate,
                "reg_lambda": cfg.reg_lambda,
                "gamma": cfg.gamma,
                "protocol": "pax",
            },
        )
