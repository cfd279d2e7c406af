"""The opening of a private job, shared by the algorithms' histogram protocols: what the fleet's
data looks like and the bin edges, from fleet sums only (``shared.protocol.messages.fleet_sums``).

1. ``data_shape``: each client's number of features, feature names and -- unless the job fixes
   its ``classes`` -- the set of labels it holds (no counts); clients whose shape differs from
   the majority's are left out, as in :func:`~aggregator.algorithms.fleet_data.describe_fleet`.
2. ``fleet_counts``: one summed vector -- the sample count and the count per class (or the
   target sums, fixed point) -- for the base score and the job's fixed-point range.
3. ``grid_counts`` (a few rounds): per feature, summed counts on the hierarchical float32 grid
   of ``shared.sketches.grid``, refined where the quantiles lie; the edges are read off them.

Regression runs the grid rounds first, with the target as one more column, and takes the
fleet median off its counts as the ``shift`` of ``fleet_counts``: the clients sum ``y - shift``,
so the fixed point is bounded by the targets' spread, not their offset (issue 14, finding 1),
and a job whose targets spread beyond ``TARGET_BOUND`` is refused in one line
(:class:`TargetRangeError`).

Everything the server reads here is a sum over the participating gateways (secure aggregation
when the job's :class:`~aggregator.fleet_sums.FleetSummer` is secure), except the shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shared.differential_privacy import ZCDPAccountant, consistent_children
from shared.protocol.messages.fleet_sums import (
    TARGET_BOUND,
    TARGET_FRAC_BITS,
    TARGET_RANGE,
    NoiseShare,
    DataShape,
    DataShapeRequest,
    FleetCountsRequest,
    FleetSumReply,
    GridCountsRequest,
)
from shared.protocol.messages.secure_aggregation import word_bits_for
from shared.sketches import GridPlan, GridRefinement, SketchError

from ..fleet_sums import FleetSummer
from ..jobs import FederatedJob, TrainingError
from ..rounds import QuorumNotReached
from .fleet_data import fleet_vocabulary, keep_majority_width

__all__ = ["NoiseBudget", "PrivateFleet", "TargetRangeError", "check_privacy_settings", "describe_fleet_privately",
           "dp_metadata", "frac_bits_for"]

#: How often the grid rounds start over after a client dropped out of them.
MAX_GRID_RESTARTS = 3
#: Headroom of a fixed-point sum: every sum stays below 2**SUM_BITS in magnitude.
SUM_BITS = 61


def frac_bits_for(n_total: int, bound: float) -> int:
    """Fraction bits such that ``n_total`` values of magnitude ``<= bound`` sum below 2**61:
    as many as the range allows, at most 52 (float64's precision)."""
    bits = SUM_BITS - math.ceil(math.log2(n_total + 1)) - max(0, math.ceil(math.log2(bound)))
    if bits < 8:
        raise TrainingError(f"{n_total} samples with values up to {bound:.3g} leave only {bits} fixed-point "
                            "fraction bits; rescale the targets")
    return min(bits, 52)


class TargetRangeError(TrainingError, ValueError):
    """The regression targets spread too far for the private opening's fixed point: a user's
    data problem (``ValueError``, one line) that also ends the job (``TrainingError``)."""

    def __init__(self) -> None:
        super().__init__(f"private regression needs targets within 2**20 ({TARGET_BOUND:.0f}) of their fleet "
                         "median, and these spread further: rescale them (e.g. other units)")


@dataclass
class NoiseBudget:
    """Differential privacy of a private job: every release gets Gaussian noise of standard
    deviation ``multiplier`` times its L2 sensitivity, and the ``accountant`` adds up the cost."""

    multiplier: float
    accountant: ZCDPAccountant

    def share(self, sensitivity: float, asked: int) -> NoiseShare:
        return NoiseShare(self.multiplier * sensitivity, asked)

    def spend(self, kind: str, sensitivity: float, answered: int, asked: int) -> None:
        self.accountant.spend(kind, sensitivity, self.multiplier * sensitivity, answered, asked)


def check_privacy_settings(config, *, paper: str, dp_requirement: str, dp_possible: bool) -> None:
    """Validate (and resolve) the privacy settings both algorithms' configurations share:
    ``protocol`` ("histogram" or the paper's ``paper``), ``secure_aggregation`` (``None``: on
    for the histogram protocol), ``min_crowd``, ``dp_noise_multiplier``/``dp_delta`` (possible
    when ``dp_possible``; ``dp_requirement`` says what else DP needs) and ``client_fraction``."""
    if config.protocol not in ("histogram", paper):
        raise ValueError(f"protocol must be 'histogram' or {paper!r}, got {config.protocol!r}")
    if config.secure_aggregation is None:
        object.__setattr__(config, "secure_aggregation", config.protocol == "histogram")
    if config.secure_aggregation and config.protocol != "histogram":
        raise ValueError(f"secure aggregation sums histograms: protocol={paper!r} sends per-client data that "
                         "cannot be summed; it needs secure_aggregation=False")
    if not (isinstance(config.min_crowd, int) and config.min_crowd >= 0):
        raise ValueError(f"min_crowd must be an int >= 0, got {config.min_crowd!r}")
    if config.dp_noise_multiplier is not None:
        if not (config.dp_noise_multiplier > 0 and np.isfinite(config.dp_noise_multiplier)):
            raise ValueError(f"dp_noise_multiplier must be > 0, got {config.dp_noise_multiplier!r}")
        if not (config.secure_aggregation and dp_possible):
            raise ValueError(f"differential privacy needs the histogram protocol with secure aggregation, "
                             f"{dp_requirement}")
        if not 0 < config.dp_delta < 1:
            raise ValueError(f"dp_delta must lie in (0, 1), got {config.dp_delta!r}")
    if config.secure_aggregation and config.client_fraction < 1:
        raise ValueError("secure aggregation with client_fraction < 1 would release sums over changing cohorts "
                         "of clients, whose differences isolate clients: use client_fraction=1")


def dp_metadata(noise: NoiseBudget | None) -> dict[str, float]:
    """What a model records of the differential privacy its training spent (nothing without)."""
    if noise is None:
        return {}
    acc = noise.accountant
    return {"dp_noise_multiplier": noise.multiplier, "dp_epsilon": acc.epsilon, "dp_delta": acc.delta,
            "dp_rho": acc.rho, "dp_releases": acc.releases}


@dataclass(frozen=True, eq=False)
class PrivateFleet:
    """What a private job learns before growing trees: the shape, the fleet sums, the edges.

    Regression: ``shifted_sum`` and ``shifted_sum_squares`` are the fleet's Σ(y - target_shift)
    and Σ(y - target_shift)² as the opening decoded them (fixed point: Σ(y - shift) to within
    ``n 2**-(TARGET_FRAC_BITS+1)``, the squares to within ``n/2``); all 0 for classification.
    """

    clients: tuple[str, ...]
    n_features: int
    feature_names: tuple[str, ...]
    classes: tuple[str, ...]
    model_classes: tuple
    total_samples: int
    label_counts: np.ndarray  # (K,) classification; empty for regression
    target_shift: float
    shifted_sum: float
    shifted_sum_squares: float
    edges: list[np.ndarray]
    grid_rounds: int
    grid_cells: int

    @property
    def target_mean(self) -> float:
        """The fleet's mean target (0 without samples)."""
        n = self.total_samples
        return self.target_shift + self.shifted_sum / n if n else 0.0

    @property
    def target_sum(self) -> float:
        """The fleet's Σy (``FleetData.target_sum``'s counterpart, for the base score)."""
        return self.target_mean * self.total_samples

    @property
    def target_spread(self) -> float:
        """An upper bound on ``Σ (y - mean)²``: the centred sums plus their fixed-point rounding
        (``n/2`` from the squares; ``n |mean - shift| 2**-TARGET_FRAC_BITS`` from the sum, doubled
        for margin). It depends on the targets' spread, not on their offset, so it sets
        offset-free fixed points for the histograms that follow."""
        n = self.total_samples
        if not n:
            return 0.0
        centred = self.shifted_sum_squares - self.shifted_sum ** 2 / n
        rounding = n * (1.0 + abs(self.shifted_sum / n) * 2.0 ** (1 - TARGET_FRAC_BITS))
        return max(centred, 0.0) + rounding


def describe_fleet_privately(job: FederatedJob, summer: FleetSummer, feature_set_version: str, *,
                             regression: bool, n_bins: int, classes: tuple[str, ...] | None = None,
                             noise: NoiseBudget | None = None) -> PrivateFleet:
    """Run the private opening over ``summer.active`` clients (see the module docstring).
    With ``noise`` every sum is released with Gaussian noise (classification only): one window
    changes ``n`` and one class count by 1 (sensitivity sqrt 2), one grid cell per feature and
    round by 1 (sqrt d). Regression learns the target's grid counts too (one more column; the
    shift is read off them)."""
    shapes = job.ask(DataShapeRequest(feature_set_version, labels=classes is None and not regression),
                     list(summer.active), DataShape)
    if not shapes:
        raise TrainingError("no client described its data")
    d = keep_majority_width(job, shapes)
    summer.active = tuple(c for c in summer.active if c in shapes)
    named = [r.feature_names for r in shapes.values() if r.feature_names]
    vocabulary, model_classes = fleet_vocabulary(shapes, classes, regression)

    def secure(c: str):
        return summer.secure_round(c, summer.active)

    def fleet_counts(shift: float) -> np.ndarray:
        """The summed ``fleet_counts`` vector (int64) of ``summer.active``."""
        asked = len(summer.active)
        share = noise.share(np.sqrt(2.0), asked) if noise else None
        requests = {c: FleetCountsRequest(feature_set_version, regression, vocabulary, TARGET_FRAC_BITS, secure(c),
                                          share, shift) for c in summer.active}
        example = next(iter(requests.values()))
        try:
            result = summer.ask(requests, FleetSumReply, lambda r: r.sums, example.length,
                                word_bits=example.word_bits)
        except QuorumNotReached as exc:  # one line, not every gateway's refusal
            if any(e.code == TARGET_RANGE for e in exc.result.errors.values()):
                raise TargetRangeError() from None
            raise
        sums = result.total.view(np.int64)
        if noise:
            noise.spend("fleet_counts", np.sqrt(2.0), len(result.contributors), asked)
            sums = np.clip(sums, 0, None)
        return sums

    if regression:  # the target's grid first: its fleet median is the shift of the sums
        refinement = _grid_edges(summer, feature_set_version, d + 1, n_bins, noise, total=None, target=True)
        edges = refinement.edges(include_min_point=True)
        shift = target_shift(edges.pop())
        sums = fleet_counts(shift)
    else:
        shift = 0.0
        sums = fleet_counts(shift)
    total = int(sums[0])
    if total == 0:
        raise TrainingError("the fleet holds no labelled samples")
    if not regression:
        refinement = _grid_edges(summer, feature_set_version, d, n_bins, noise, total=total)
        edges = refinement.edges(include_min_point=True)
    return PrivateFleet(
        clients=tuple(summer.active), n_features=d,
        feature_names=named[0] if named else tuple(f"f{j}" for j in range(d)),
        classes=vocabulary, model_classes=model_classes, total_samples=total,
        label_counts=np.zeros(0) if regression else sums[1:].astype(np.float64),
        target_shift=shift,
        shifted_sum=float(np.ldexp(float(sums[1]), -TARGET_FRAC_BITS)) if regression else 0.0,
        shifted_sum_squares=float(sums[2]) if regression else 0.0,
        edges=edges, grid_rounds=refinement.rounds, grid_cells=refinement.cells_sent,
    )


def target_shift(edges: np.ndarray) -> float:
    """The fleet's target median off the target's grid edges (``edges`` at ranks ``b/B``: the
    middle one), after checking that the targets cannot all lie within ``TARGET_BOUND`` of it.

    Every edge ``e`` of ``GridRefinement.edges`` has a fleet value at or above it and one at or
    below it, so a last edge ``>= shift + TARGET_BOUND`` proves that some target is too far
    above, a first edge ``<= shift - TARGET_BOUND`` that one is too far below: refused here in
    one line (:class:`TargetRangeError`). Targets beyond the outermost edges are known only to
    their gateways, which refuse the sums (``TARGET_RANGE``); that becomes the same error.

    Examples
    --------
    >>> target_shift(np.array([1.0, 2.0, 3.0], np.float32))
    2.0
    >>> target_shift(np.array([0.0, 3e6], np.float32))  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    TargetRangeError: private regression needs targets within 2**20 (1048576) of their fleet median ...
    """
    if edges.size == 0:  # a constant target without min point, or none: its value is unknown
        return 0.0
    shift = float(edges[edges.size // 2])
    if float(edges[-1]) - shift >= TARGET_BOUND or shift - float(edges[0]) >= TARGET_BOUND:
        raise TargetRangeError()
    return shift


def _grid_edges(summer: FleetSummer, feature_set_version: str, d: int, n_bins: int,
                noise: NoiseBudget | None, *, total: int | None, target: bool = False) -> GridRefinement:
    """The grid rounds over ``d`` columns (``target``: the last is the regression target);
    refinement needs the same clients in every round, so a client dropping out restarts them
    with the rest (at most ``MAX_GRID_RESTARTS`` times). Noisy counts are clipped and made
    consistent with their parents (post-processing)."""
    for _ in range(MAX_GRID_RESTARTS + 1):
        refinement = GridRefinement(d, n_bins)
        plan: GridPlan | None = refinement.first_plan()
        cohort = summer.active
        while plan is not None and summer.active == cohort:
            arrays = plan.to_arrays()
            # a cell counts at most a column's windows: the fleet's (``total``, else the largest
            # column total of the first round); DP noise needs 32 bits of headroom
            known = total if total is not None else (int(refinement.totals.max()) if refinement.rounds else None)
            bits = 32 if noise or known is None else word_bits_for(2 * known + 64)
            share = noise.share(np.sqrt(d), len(cohort)) if noise else None
            requests = {c: GridCountsRequest(feature_set_version, **arrays, secure=summer.secure_round(c, cohort),
                                             noise=share, word_bits=bits, target=target) for c in cohort}
            result = summer.ask(requests, FleetSumReply, lambda r: r.sums, plan.n_cells, word_bits=bits)
            counts = result.total.view(np.int64)
            if noise:
                noise.spend("grid_counts", np.sqrt(d), len(result.contributors), len(cohort))
                parents = refinement.parent_counts
                counts = (np.clip(counts, 0, None) if parents is None
                          else consistent_children(counts, parents, plan.offsets))
            if result.contributors != cohort:
                summer.active = tuple(c for c in summer.active if c in result.contributors)
                break
            try:
                plan = refinement.add(plan, counts)
            except SketchError as exc:  # gateways answer from one snapshot per job; a restarted one does not
                raise TrainingError(f"the bin edges could not be read: {exc} (a gateway restarted during the "
                                    "job? start the job again)") from None
        if plan is None:
            return refinement
    raise TrainingError(f"clients kept dropping out while the bin edges were being read ({MAX_GRID_RESTARTS} "
                        "restarts)")
