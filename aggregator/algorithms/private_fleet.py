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
so the fixed point is bounded by the targets' spread, not their offset,
and a job whose targets spread beyond ``TARGET_BOUND`` is refused in one line
(:class:`TargetRangeError`).

Everything the server reads here is a sum over the participating gateways (secure aggregation
when the job's :class:`~aggregator.fleet_sums.FleetSummer` is secure), except the shape.
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shared.differential_privacy import consistent_children
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
from shared.protocol.messages.fedforest import TargetClip
from shared.sketches import GridPlan, GridRefinement, SketchError, key_values

from ..fleet_sums import FleetSummer
from ..privacy import PrivacyBudget, skellam_release
from ..jobs import FederatedJob, TrainingError
from ..rounds import QuorumNotReached
from .fleet_data import fleet_vocabulary, keep_majority_width

__all__ = [
    "OPENING_GRID_ROUNDS",
    "RANGE_BITS",
    "RANGE_SIGMAS",
    "RESIDUAL_SPREAD",
    "PrivateFleet",
    "TargetRangeError",
    "TargetRangeUnreadable",
    "TARGET_RANGE_WIDTH",
    "check_privacy_settings",
    "checked_target_range",
    "describe_fleet_privately",
    "frac_bits_for",
    "opening_releases",
    "public_target_range",
    "release_target_range",
    "residual_bound",
    "spread_clip",
    "target_pair",
    "target_range",
]

#: How often the grid rounds start over after a client dropped out of them.
MAX_GRID_RESTARTS = 3
#: Grid rounds of a differentially private opening (each costs one release): the first reads
#: every feature's sign and exponent, the next two 4 bits of mantissa each where the quantiles lie
#: (edges to within 1/256 of an octave).
OPENING_GRID_ROUNDS = 3
#: Lattice steps per window of a differentially private opening's counts (``NoiseShare.scale``).
COUNT_SCALE = 64
#: Headroom of a fixed-point sum: every sum stays below 2**SUM_BITS in magnitude.
SUM_BITS = 61


def frac_bits_for(n_total: int, bound: float) -> int:
    """Fraction bits such that ``n_total`` values of magnitude ``<= bound`` sum below 2**61:
    as many as the range allows, at most 52 (float64's precision)."""
    bits = SUM_BITS - math.ceil(math.log2(n_total + 1)) - max(0, math.ceil(math.log2(bound)))
    if bits < 8:
        raise TrainingError(
            f"{n_total} samples with values up to {bound:.3g} leave only {bits} fixed-point "
            "fraction bits; rescale the targets"
        )
    return min(bits, 52)


class TargetRangeError(TrainingError, ValueError):
    """The regression targets spread too far for the private opening's fixed point: a user's
    data problem (``ValueError``, one line) that also ends the job (``TrainingError``)."""

    def __init__(self) -> None:
        super().__init__(
            f"private regression needs targets within 2**20 ({TARGET_BOUND:.0f}) of their fleet "
            "median, and these spread further: rescale them (e.g. other units)"
        )


class TargetRangeUnreadable(TrainingError, ValueError):
    """The target range release shows no octave clearly above its noise: the budget is too
    small for the fleet's windows to say where the targets lie (one line; ends the job)."""

    def __init__(self, fullest: float, needed: float) -> None:
        super().__init__(
            f"the targets' counts per octave show nothing above their noise (the fullest holds "
            f"{fullest:.0f} windows; more than {needed:.0f} next to an octave of half that, or twice it "
            "alone, are needed at this budget), so their range cannot be read privately: raise "
            "dp_epsilon, train on more windows, or give it (target_range)"
        )


#: The widest public target range a job may give (the engines' fixed point bound).
TARGET_RANGE_WIDTH = 2e30


def target_pair(value: Any) -> tuple[float, float] | None:
    """``value`` as a target range ``(low, high)`` of floats -- two finite real numbers (a tuple,
    or a list as JSON gives it), ``low < high``, at most :data:`TARGET_RANGE_WIDTH` apart -- or
    None.

    Examples
    --------
    >>> target_pair([0, 300]), target_pair((1.0, 1.0)), target_pair((0.0, float("inf")))
    ((0.0, 300.0), None, None)
    """
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        return None
    if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in value):
        return None
    low, high = float(value[0]), float(value[1])
    return (low, high) if low < high and high - low <= TARGET_RANGE_WIDTH else None


def checked_target_range(target_range: Any, regression: bool, protocol: str | None) -> tuple[float, float]:
    """A job's public ``target_range`` as :func:`target_pair` reads it, for a private regression
    only; a ``ValueError`` (one line) otherwise.

    Examples
    --------
    >>> checked_target_range([0, 300], True, "private")
    (0.0, 300.0)
    >>> checked_target_range((1.0, 1.0), True, "private")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ValueError: target_range must be two finite numbers low < high, at most 2e30 apart, got (1.0, 1.0)
    """
    if not regression or protocol != "private":
        raise ValueError(
            "target_range bounds a private regression's targets: it needs a regression (FedSCS-XGB: "
            "objective='squared_error'; FedForest: task='regression') and protocol='private'"
        )
    pair = target_pair(target_range)
    if pair is None:
        raise ValueError(
            f"target_range must be two finite numbers low < high, at most 2e30 apart, got {target_range!r}"
        )
    return pair


def opening_releases() -> int:
    """Releases of a differentially private opening: the fleet counts and the grid rounds."""
    return 1 + OPENING_GRID_ROUNDS


def check_privacy_settings(config, *, paper: str, dp_possible: bool) -> None:
    """Validate (and resolve) the privacy settings the algorithms' configurations share:
    ``protocol`` (``None``: "private" when ``dp_possible`` and secure aggregation is not turned
    off, else "histogram"; or the paper's
    ``paper``), ``secure_aggregation`` (``None``: on unless the paper's protocol; the private
    protocol needs it), ``min_crowd``, ``dp_epsilon``/``dp_delta`` and ``client_fraction``."""
    if config.protocol is None:  # private when it can be: a classifier, secure aggregation not turned off
        private = dp_possible and config.secure_aggregation is not False
        object.__setattr__(config, "protocol", "private" if private else "histogram")
    if config.protocol not in ("private", "histogram", paper):
        raise ValueError(f"protocol must be 'private', 'histogram' or {paper!r}, got {config.protocol!r}")
    if config.protocol == "private" and not dp_possible:
        raise ValueError(
            "the private protocol (differential privacy) trains classifiers; for regression choose "
            "protocol='histogram' (secure sums without differential privacy)"
        )
    if config.secure_aggregation is None:
        object.__setattr__(config, "secure_aggregation", config.protocol != paper)
    if config.secure_aggregation and config.protocol == paper:
        raise ValueError(
            f"secure aggregation sums histograms: protocol={paper!r} sends per-client data that "
            "cannot be summed; it needs secure_aggregation=False"
        )
    if config.protocol == "private" and not config.secure_aggregation:
        raise ValueError(
            "the private protocol adds its noise in shares under secure aggregation: without it the "
            "server would see each gateway's lightly noised vector"
        )
    if not (isinstance(config.min_crowd, int) and config.min_crowd >= 0):
        raise ValueError(f"min_crowd must be an int >= 0, got {config.min_crowd!r}")
    if not (
        isinstance(config.dp_epsilon, (int, float)) and 0 < config.dp_epsilon <= 1000 and np.isfinite(config.dp_epsilon)
    ):
        raise ValueError(f"dp_epsilon must be a number in (0, 1000], got {config.dp_epsilon!r}")
    if not (isinstance(config.dp_delta, float) and 0 < config.dp_delta < 1e-3):
        raise ValueError(f"dp_delta must be a float in (0, 1e-3), got {config.dp_delta!r}")
    if config.secure_aggregation and config.client_fraction < 1:
        raise ValueError(
            "secure aggregation with client_fraction < 1 would release sums over changing cohorts "
            "of clients, whose differences isolate clients: use client_fraction=1"
        )


def warn_if_not_private(config, paper: str, log: logging.Logger) -> None:
    """One line when a job runs without differential privacy (chosen for research or
    reproduction): what the aggregator can then learn."""
    if config.protocol == paper:
        log.warning(
            f"protocol={paper!r} (the paper's, for reproduction) reveals per-window data to the aggregator; "
            "the default protocol='private' does not"
        )
    elif config.protocol == "histogram":
        log.warning(
            "protocol='histogram' (secure sums without differential privacy): sums over few windows, "
            "such as single-window histogram cells, reveal those windows to the aggregator"
        )


@dataclass(frozen=True, eq=False)
class PrivateFleet:
    """What a private job learns before growing trees: the shape, the fleet sums, the edges.

    Regression: ``shifted_sum`` and ``shifted_sum_squares`` are the fleet's Σ(y - target_shift)
    and Σ(y - target_shift)² as the opening decoded them (fixed point: Σ(y - shift) to within
    ``n 2**-(TARGET_FRAC_BITS+1)``, the squares to within ``n/2``); all 0 for classification and
    under differential privacy (then ``target_shift`` is the noisy median and ``total_samples``
    the target column's noisy grid count).
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
    #: The bins the edges were read for (``n_bins``, or what ``bins_for`` chose).
    n_bins: int
    #: Regression: the target's edges (its fleet quantiles at ranks ``b / n_bins``, noisy under
    #: differential privacy) that the shift was read off; empty for classification.
    target_edges: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float32))

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
        centred = self.shifted_sum_squares - self.shifted_sum**2 / n
        rounding = n * (1.0 + abs(self.shifted_sum / n) * 2.0 ** (1 - TARGET_FRAC_BITS))
        return max(centred, 0.0) + rounding


def describe_fleet_privately(
    job: FederatedJob,
    summer: FleetSummer,
    feature_set_version: str,
    *,
    regression: bool,
    n_bins: int,
    classes: tuple[str, ...] | None = None,
    budget: PrivacyBudget | None = None,
    bins_for: Callable[[float], int] | None = None,
) -> PrivateFleet:
    """Run the private opening over ``summer.active`` clients (see the module docstring).
    With ``budget`` every sum is released with distributed Skellam noise from its ``"opening"``
    share: one window changes ``n`` and one class count by 1 (L2 sensitivity sqrt 2), one grid
    cell per feature and round by 1 (sqrt d), in at most ``OPENING_GRID_ROUNDS`` grid rounds.
    Regression learns the target's grid counts too (one more column; the shift, the fleet
    median, is read off them); with ``budget`` it releases nothing else (no target
    sums), and ``bins_for`` may size its bins to the fleet (:func:`_grid_edges`)."""
    shapes = job.ask(
        DataShapeRequest(feature_set_version, labels=classes is None and not regression), list(summer.active), DataShape
    )
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
        mu = budget.mu("opening", np.sqrt(2.0) * COUNT_SCALE, 2.0 * COUNT_SCALE) if budget else 0.0
        share = NoiseShare(mu, asked, COUNT_SCALE) if budget else None
        requests = {
            c: FleetCountsRequest(
                feature_set_version, regression, vocabulary, TARGET_FRAC_BITS, secure(c), share, shift
            )
            for c in summer.active
        }
        example = next(iter(requests.values()))
        try:
            result = summer.ask(requests, FleetSumReply, lambda r: r.sums, example.length, word_bits=example.word_bits)
        except QuorumNotReached as exc:  # one line, not every gateway's refusal
            if any(e.code == TARGET_RANGE for e in exc.result.errors.values()):
                raise TargetRangeError() from None
            raise
        sums = result.total.view(np.int64)
        if budget:
            budget.spend(
                skellam_release(
                    "opening",
                    np.sqrt(2.0) * COUNT_SCALE,
                    2.0 * COUNT_SCALE,
                    mu,
                    answered=len(result.contributors),
                    asked=asked,
                )
            )
            sums = np.clip(np.rint(sums / COUNT_SCALE).astype(np.int64), 0, None)
        return sums

    target_edges = np.empty(0, dtype=np.float32)
    if regression:  # the target's grid first: its fleet median is the shift of the sums
        refinement = _grid_edges(
            summer, feature_set_version, d + 1, n_bins, budget, total=None, target=True, bins_for=bins_for
        )
        edges = refinement.edges(include_min_point=True)
        target_edges = edges.pop()
        # under differential privacy the target's sums are not released (their noise would need
        # the target's range): the window count is the target column's noisy grid total, and the
        # range check is skipped (noise alone can put an outermost edge far out; nothing is summed)
        if budget is None:
            shift = target_shift(target_edges)
            sums = fleet_counts(shift)
        else:
            shift = float(target_edges[target_edges.size // 2]) if target_edges.size else 0.0
            sums = np.array([int(refinement.totals[-1]), 0, 0])
    else:
        shift = 0.0
        sums = fleet_counts(shift)
    total = int(sums[0])
    if total == 0:
        raise TrainingError("the fleet holds no labelled samples")
    if not regression:
        refinement = _grid_edges(summer, feature_set_version, d, n_bins, budget, total=total)
        edges = refinement.edges(include_min_point=True)
    return PrivateFleet(
        clients=tuple(summer.active),
        n_features=d,
        feature_names=named[0] if named else tuple(f"f{j}" for j in range(d)),
        classes=vocabulary,
        model_classes=model_classes,
        total_samples=total,
        label_counts=np.zeros(0) if regression else sums[1:].astype(np.float64),
        target_shift=shift,
        shifted_sum=float(np.ldexp(float(sums[1]), -TARGET_FRAC_BITS)) if regression else 0.0,
        shifted_sum_squares=float(sums[2]) if regression else 0.0,
        edges=edges,
        grid_rounds=refinement.rounds,
        grid_cells=refinement.cells_sent,
        n_bins=refinement.n_bins,
        target_edges=target_edges,
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


def _grid_edges(
    summer: FleetSummer,
    feature_set_version: str,
    d: int,
    n_bins: int,
    budget: PrivacyBudget | None,
    *,
    total: int | None,
    target: bool = False,
    bins_for: Callable[[float], int] | None = None,
) -> GridRefinement:
    """The grid rounds over ``d`` columns (``target``: the last is the regression target);
    refinement needs the same clients in every round, so a client dropping out restarts them
    with the rest (at most ``MAX_GRID_RESTARTS`` times). Noisy counts are clipped and made
    consistent with their parents (post-processing). ``bins_for(windows)``: the bins to refine
    for, from round 1's noisy window count (the median over the columns of their unclipped
    totals) instead of ``n_bins``."""
    for _ in range(MAX_GRID_RESTARTS + 1):
        refinement = GridRefinement(d, n_bins, max_rounds=OPENING_GRID_ROUNDS if budget else None)
        plan: GridPlan | None = refinement.first_plan()
        cohort = summer.active
        while plan is not None and summer.active == cohort:
            arrays = plan.to_arrays()
            # a cell counts at most a column's windows: the fleet's (``total``, else the largest
            # column total of the first round); DP noise needs 32 bits of headroom
            known = total if total is not None else (int(refinement.totals.max()) if refinement.rounds else None)
            bits = 32 if budget or known is None else word_bits_for(2 * known + 64)
            mu = budget.mu("opening", np.sqrt(d) * COUNT_SCALE, float(d) * COUNT_SCALE) if budget else 0.0
            share = NoiseShare(mu, len(cohort), COUNT_SCALE) if budget else None
            requests = {
                c: GridCountsRequest(
                    feature_set_version,
                    **arrays,
                    secure=summer.secure_round(c, cohort),
                    noise=share,
                    word_bits=bits,
                    target=target,
                )
                for c in cohort
            }
            result = summer.ask(requests, FleetSumReply, lambda r: r.sums, plan.n_cells, word_bits=bits)
            counts = result.total.view(np.int64)
            if budget:
                budget.spend(
                    skellam_release(
                        "opening",
                        np.sqrt(d) * COUNT_SCALE,
                        float(d) * COUNT_SCALE,
                        mu,
                        answered=len(result.contributors),
                        asked=len(cohort),
                    )
                )
                counts = np.rint(counts / COUNT_SCALE).astype(np.int64)
                if bins_for is not None and refinement.rounds == 0:
                    windows = float(np.median(np.add.reduceat(counts, plan.offsets[:-1])))
                    refinement.choose_bins(bins_for(windows))
                parents = refinement.parent_counts
                counts = (
                    np.clip(counts, 0, None) if parents is None else consistent_children(counts, parents, plan.offsets)
                )
            if result.contributors != cohort:
                summer.active = tuple(c for c in summer.active if c in result.contributors)
                break
            try:
                plan = refinement.add(plan, counts)
            except SketchError as exc:  # gateways answer from one snapshot per job; a restarted one does not
                raise TrainingError(
                    f"the bin edges could not be read: {exc} (a gateway restarted during the job? start the job again)"
                ) from None
        if plan is None:
            return refinement
    raise TrainingError(f"clients kept dropping out while the bin edges were being read ({MAX_GRID_RESTARTS} restarts)")


#: Key bits of the target range release's cells: the sign and the exponent of the float32
#: target, so every cell is one octave ``[2^e, 2^(e+1))`` of either sign (512 cells).
RANGE_BITS = 9
#: Noise standard deviations a target cell's count must exceed to count for the public range:
#: among the 512 cells, a cell of noise alone does so with probability ~2e-5.
RANGE_SIGMAS = 4.0
#: A run of full target cells away from the others joins the public range if it lies within
#: this many times the range's width of it ...
RANGE_NEAR = 4.0
#: ... or holds more than this many times the cell threshold per square root of its cells (two
#: adjacent noise cells reach that with probability below 1e-12).
RANGE_RUN = 2.0


#: A private regression's residuals (and FedForest's targets) are bounded by at most this many
#: times the reach of the target's outermost opening edges from its median
#: (:func:`residual_bound`; measured in BENCHMARKS.md, FedSCS-XGB private regression: on
#: randhie's skewed counts the octave range alone left the model at the mean's RMSE).
RESIDUAL_SPREAD = 2.0
#: :func:`spread_clip` keeps the octave range when more than this share of the windows in full
#: octaves lies in octaves wholly outside the narrowed range (the opening's edges were noise).
SPREAD_OUTSIDE = 0.02


def _full_cells(counts: np.ndarray, min_count: float) -> np.ndarray:
    """Which cells of the target range release count (:func:`target_range`): more than
    ``min_count`` windows next to a cell of more than half that, or more than
    :data:`RANGE_RUN` times ``min_count`` alone; never the two outermost cells, whose octaves
    reach float32's infinities."""
    half = np.pad(counts > min_count / 2, 1)
    neighbour = half[:-2] | half[2:]
    full = ((counts > min_count) & neighbour) | (counts > RANGE_RUN * min_count)
    full[[0, -1]] = False
    return full


def _cell_bounds(cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The float64 values where target range cells start and where the next ones start (the
    last cell's end at most ``FLT_MAX``; the two outermost cells' outer bounds are not finite)."""
    shift = 32 - RANGE_BITS
    cells = np.asarray(cells, dtype=np.int64)
    starts = key_values((cells << shift).astype(np.uint32)).astype(np.float64)
    ends = key_values(np.minimum((cells + 1) << shift, 0xFF7FFFFF).astype(np.uint32)).astype(np.float64)
    return starts, ends


def target_range(counts: np.ndarray, min_count: float) -> TargetClip:
    """The public target range from the noisy counts of the target range release (one per
    octave cell of the float32 keys, ``RANGE_BITS`` key bits, in key order). A cell is full if
    it holds more than ``min_count`` windows next to a cell holding more than half that, or more
    than :data:`RANGE_RUN` times ``min_count`` alone (a lone cell just above the threshold is far
    likelier noise). Runs of adjacent full
    cells join the range, starting with the run holding the most windows, while a run lies
    within :data:`RANGE_NEAR` times the range's width of it or holds more than
    :data:`RANGE_RUN` times ``min_count`` per square root of its cells (a pair of noise cells
    far from the targets -- octaves of 1e28 -- would otherwise stretch the range over them).
    The range runs from the lowest to the highest cell joined. Post-processing: outliers in
    near-empty or distant sparse octaves are clipped, not ranged over.

    Raises
    ------
    TargetRangeUnreadable
        When no cell is full: the fullest is then as likely noise as targets.

    Examples
    --------
    >>> counts = np.zeros(512)
    >>> counts[[0x100 + 126, 0x100 + 127, 0x100 + 128, 0x100 + 130]] = [50.0, 40.0, 80.0, 3.0]
    >>> counts[0x100 + 150] = 15.0  # alone, under twice the threshold: noise, not targets near 2**23
    >>> target_range(counts, min_count=10.0)  # [0.5, 1), [1, 2), [2, 4); 10 in [8, 16) is clipped
    TargetClip(centre=2.25, half_width=1.75)
    >>> counts[[0x100 + 200, 0x100 + 201]] = [12.0, 6.0]  # a far pair, barely above the noise
    >>> target_range(counts, min_count=10.0)
    TargetClip(centre=2.25, half_width=1.75)
    """
    counts = np.asarray(counts, dtype=np.float64)
    full = np.flatnonzero(_full_cells(counts, min_count))
    if full.size == 0:
        raise TargetRangeUnreadable(float(counts[1:-1].max(initial=0.0)), min_count)
    runs = np.split(full, np.flatnonzero(np.diff(full) > 1) + 1)
    starts = _cell_bounds(np.array([r[0] for r in runs]))[0]
    ends = _cell_bounds(np.array([r[-1] for r in runs]))[1]
    mass = np.array([counts[r].sum() for r in runs])
    strong = mass > RANGE_RUN * min_count * np.sqrt([r.size for r in runs])
    joined = np.arange(len(runs)) == np.argmax(mass)
    while True:  # each pass joins a run or ends
        low, high = starts[joined].min(), ends[joined].max()
        reach = RANGE_NEAR * (high - low)
        grown = joined | strong | ((starts <= high + reach) & (ends >= low - reach))
        if (grown == joined).all():
            break
        joined = grown
    return TargetClip(float((low + high) / 2), float(max((high - low) / 2, 2.0**-20)))


def residual_bound(clip: TargetClip, edges: np.ndarray, median: float) -> float:
    """Regression's public bound on ``|g| = |prediction - y|``: the target range's half width,
    or :data:`RESIDUAL_SPREAD` times the reach of the opening's outermost target edges (its noisy
    quantiles at ranks ``1 / n_bins`` and ``1 - 1 / n_bins``) from its noisy ``median`` when that
    is less. Post-processing of releases already made: a skewed target's octave range (counts of
    zero to 77 visits: ``[0, 128)``) is far wider than its residuals, and the noise on G grows
    with the bound; the few residuals beyond it are clipped (a Huber step).

    Examples
    --------
    >>> residual_bound(TargetClip(64.0, 64.0), np.array([0.0, 1.0, 2.0, 4.0, 9.0], np.float32), 2.0)
    14.0
    >>> residual_bound(TargetClip(64.0, 64.0), np.empty(0, np.float32), 2.0)  # no edges: the range's
    64.0
    """
    if edges.size == 0:
        return clip.half_width
    reach = max(float(edges[-1]) - median, median - float(edges[0]))
    return min(clip.half_width, max(RESIDUAL_SPREAD * reach, 2.0**-20))


def spread_clip(clip: TargetClip, counts: np.ndarray, min_count: float, edges: np.ndarray, median: float) -> TargetClip:
    """The public target range ``clip`` narrowed to the opening's noisy ``median`` plus or minus
    :func:`residual_bound` (post-processing of releases already made), so that the noise on a sum
    of targets scales with the fleet's spread rather than with its octaves -- unless more than
    :data:`SPREAD_OUTSIDE` of the windows the range release ``counts`` shows in full octaves
    within ``clip`` lie in octaves wholly outside the narrowed range (at a small budget the opening's edges can be
    noise while the octave counts still hold): then ``clip`` as it is.

    Examples
    --------
    >>> counts = np.zeros(512)
    >>> counts[[0x100 + 128, 0x100 + 129, 0x100 + 130]] = [200.0, 500.0, 300.0]  # [2, 4) .. [8, 16)
    >>> clip = target_range(counts, 10.0)
    >>> spread_clip(clip, counts, 10.0, np.array([4.0, 6.0, 8.0], np.float32), 6.0)
    TargetClip(centre=6.0, half_width=4.0)
    >>> spread_clip(clip, counts, 10.0, np.array([2.0, 2.5, 3.0], np.float32), 2.5)  # noise: kept
    TargetClip(centre=9.0, half_width=7.0)
    """
    if edges.size == 0:  # no edges to read a spread off
        return clip
    bound = residual_bound(clip, edges, median)
    low = max(clip.centre - clip.half_width, median - bound)
    high = min(clip.centre + clip.half_width, median + bound)
    if not high > low:
        return clip
    counts = np.asarray(counts, dtype=np.float64)
    starts, ends = _cell_bounds(np.arange(counts.size))
    in_clip = (starts >= clip.centre - clip.half_width) & (ends <= clip.centre + clip.half_width)
    full = _full_cells(counts, min_count) & in_clip  # the runs target_range joined
    outside = full & ((ends <= low) | (starts >= high))
    if counts[outside].sum() > SPREAD_OUTSIDE * counts[full].sum():
        return clip
    return TargetClip((low + high) / 2, (high - low) / 2)


def release_target_range(
    summer: FleetSummer,
    budget: PrivacyBudget,
    feature_set_version: str,
    n_features: int,
    spread: PrivateFleet | None = None,
) -> TargetClip:
    """The target range release of a private regression: the fleet's target counts per octave
    cell (``RANGE_BITS`` key bits of the float32 target; one cell per window: L2 and L1
    sensitivity 1 window) from the budget's ``"opening"`` share -- the release a regression
    opening under a budget leaves unmade (it sums no targets) -- and the public range read off
    it (:func:`target_range`), narrowed to the ``spread`` fleet's target edges where they hold
    (:func:`spread_clip`).

    Raises
    ------
    TargetRangeUnreadable
        When the release shows no octave clearly above its noise (the job stops in one line;
        the release is charged).
    """
    cohort = list(summer.active)
    plan = GridPlan(  # one bucket, the target column's whole key space, in octave cells
        n_features + 1,
        feature=np.array([n_features], np.int64),
        prefix=np.zeros(1, np.int64),
        bits=np.zeros(1, np.int64),
        step=np.array([RANGE_BITS], np.int64),
    )
    mu = budget.mu("opening", COUNT_SCALE, COUNT_SCALE)
    noise = NoiseShare(mu, len(cohort), COUNT_SCALE)
    requests = {
        c: GridCountsRequest(
            feature_set_version,
            **plan.to_arrays(),
            secure=summer.secure_round(c, cohort),
            noise=noise,
            word_bits=32,  # ring words with room for the noise (as every noisy opening count)
            target=True,
        )
        for c in cohort
    }
    result = summer.ask(requests, FleetSumReply, lambda r: r.sums, plan.n_cells, word_bits=32)
    answered = len(result.contributors)
    budget.spend(skellam_release("opening", COUNT_SCALE, COUNT_SCALE, mu, answered=answered, asked=len(cohort)))
    sigma = math.sqrt(mu * answered / len(cohort)) / COUNT_SCALE
    counts = result.total.view(np.int64) / COUNT_SCALE
    clip = target_range(counts, RANGE_SIGMAS * sigma)
    if spread is None:
        return clip
    return spread_clip(clip, counts, RANGE_SIGMAS * sigma, spread.target_edges, spread.target_shift)


def public_target_range(
    summer: FleetSummer,
    budget: PrivacyBudget,
    feature_set_version: str,
    fleet: PrivateFleet,
    given: tuple[float, float] | None,
    *,
    narrow: bool = False,
) -> TargetClip:
    """A private regression's public target range: the job's ``given`` range as it is (public
    knowledge; no release, that part of the opening's share stays unspent), else read off
    :func:`release_target_range` (``narrow``: narrowed to the ``fleet``'s target edges where
    they hold)."""
    if given is not None:
        low, high = given
        return TargetClip((low + high) / 2, (high - low) / 2)
    return release_target_range(summer, budget, feature_set_version, fleet.n_features, spread=fleet if narrow else None)
