"""The opening rounds of a private job, shared by every algorithm: only fleet sums.

The ``atoms``/per-client-sketch protocols open with ``DataSummary`` (per-client sizes, moments,
minimum and maximum -- two actual values per feature). A private job opens instead with

1. ``data_shape`` -> ``data_shape_reply``: the number of features, their names and the set of
   labels the client holds (no counts; empty when the job fixes its classes);
2. ``fleet_counts`` -> ``fleet_sum``: one vector per client -- its sample count, its count per
   class (or its target sums around the job's ``shift``, fixed point) -- that secure aggregation
   adds up;
3. ``grid_counts`` -> ``fleet_sum`` (a few rounds): per feature, how many of the client's
   values fall in each bucket of a hierarchical float32 grid (``shared.sketches.grid``); the
   server reads bin edges and candidate thresholds off the summed counts and refines the
   buckets where the quantiles lie.

A regression job runs the grid rounds before ``fleet_counts``, with the target as one more
column: the fleet median read off its summed counts becomes the ``shift`` of ``fleet_counts``,
so that the fixed-point target sums are bounded by the targets' spread, not their size
(timestamps near 1.7e9 sum as well as values near 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np

from ..envelope import message_type
from ..schema import ArraySpec
from .secure_aggregation import MaskedVector, SecureRound

_INTS = ArraySpec(("uint8", "int32", "int64", "uint32"), ndim=1)

#: Fixed point of regression targets in ``fleet_counts`` (Σy); Σy² is summed in whole units.
TARGET_FRAC_BITS = 16
#: Private regression needs targets within this distance of the job's shift (the fleet median),
#: so that the fleet's target sums cannot overflow.
TARGET_BOUND = float(1 << 20)
#: ``ErrorReply`` code of a gateway whose targets lie ``TARGET_BOUND`` or further from the shift.
TARGET_RANGE = "target_range"


@dataclass(frozen=True)
class NoiseShare:
    """Distributed differential privacy: multiply the integer vector by ``scale`` and add
    ``Skellam(mu / shares)`` to every cell, so that the fleet sum of ``shares`` gateways carries
    ``Skellam(mu)`` (``shared.differential_privacy.skellam_share``). The scale makes the noise
    fine next to one window's contribution, which keeps the Skellam mechanism close to the
    Gaussian (its extra cost shrinks as ``1 / scale``)."""

    mu: float
    shares: int
    scale: int = 1

    def __post_init__(self) -> None:
        if not (np.isfinite(self.mu) and self.mu > 0) or self.shares < 1:
            raise ValueError("noise needs mu > 0 and shares >= 1")
        if not 1 <= self.scale <= 1 << 16:
            raise ValueError("scale must lie in 1..65536")


@dataclass(frozen=True)
class TimeRange:
    """The windows a job trains on: those whose start time lies in ``[since_us, until_us)``
    (microseconds on the windows' clock, the store's ``start_us``; ``None``: unbounded).

    Half-open like ``WindowStore.query``, so that consecutive ranges partition the windows.

    Examples
    --------
    >>> import numpy as np
    >>> TimeRange(since_us=10, until_us=30).contains(np.array([5, 10, 29, 30]))
    array([False,  True,  True, False])
    """

    since_us: int | None = None
    until_us: int | None = None

    def __post_init__(self) -> None:
        if self.since_us is not None and self.until_us is not None and self.since_us >= self.until_us:
            raise ValueError(f"since_us ({self.since_us}) must be before until_us ({self.until_us})")

    def contains(self, start_us: np.ndarray) -> np.ndarray:
        """Which of the windows starting at ``start_us`` lie in the range (a boolean mask)."""
        start = np.asarray(start_us, dtype=np.int64)
        inside = np.ones(start.shape, dtype=bool)
        if self.since_us is not None:
            inside &= start >= self.since_us
        if self.until_us is not None:
            inside &= start < self.until_us
        return inside


@message_type("data_shape")
@dataclass(frozen=True)
class DataShapeRequest:
    """What the job's snapshot looks like (``labels``: also list the label set).

    The first request of a server job (the feature-set survey) may also set the job's data rules,
    which the client keeps for every later request of the job: ``time_range`` restricts the job's
    snapshots (training and held-out) to the windows starting in it, and ``min_labelled`` makes
    the client refuse (``too_few_labelled_windows``) when it holds fewer labelled windows there --
    a refusal rather than a count, so that the aggregator learns one bit, not how many.

    ``capabilities`` (protocol version 2): what the job needs the client to serve (its
    algorithm's client half, ``secure_aggregation``); a client that lacks one refuses with
    ``missing_capability``, naming what it lacks and what it serves, so the survey leaves it out
    before the job starts. (Capability names are those of ``Hello.capabilities``.)
    """

    feature_set_version: str
    labels: bool = True
    time_range: TimeRange | None = None
    min_labelled: int = 0
    capabilities: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.min_labelled < 0:
            raise ValueError("min_labelled must be >= 0")


@message_type("data_shape_reply")
@dataclass(frozen=True)
class DataShape:
    n_features: int
    feature_names: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    integer_labels: bool = False

    def __post_init__(self) -> None:
        if self.n_features < 0:
            raise ValueError("n_features must be >= 0")
        if self.feature_names and len(self.feature_names) != self.n_features:
            raise ValueError(f"{len(self.feature_names)} feature names for {self.n_features} features")


@message_type("fleet_counts")
@dataclass(frozen=True)
class FleetCountsRequest:
    """Sum vector ``[n, count of classes[0], ..., count of classes[K-1]]`` (classification) or
    ``[n, Σ(y - shift), Σ(y - shift)²]`` (regression: Σ round((y - shift) * 2**frac_bits),
    Σ round((y - shift)²); every target must lie within ``TARGET_BOUND`` of ``shift``, else the
    gateway answers ``TARGET_RANGE``). ``shift`` (the fleet's target median, 0 for
    classification and for senders that predate it) keeps the sums bounded by the targets'
    spread whatever their offset."""

    feature_set_version: str
    regression: bool
    classes: tuple[str, ...] = ()
    frac_bits: int = 0
    secure: SecureRound | None = None
    noise: NoiseShare | None = None
    shift: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.frac_bits <= 60:
            raise ValueError("frac_bits must lie in 0..60")
        if not np.isfinite(self.shift):
            raise ValueError("shift must be finite")

    @property
    def length(self) -> int:
        return 3 if self.regression else 1 + len(self.classes)

    @property
    def word_bits(self) -> int:
        """Counts travel in 32-bit words; the regression target sums need 64."""
        return 64 if self.regression else 32


@message_type("grid_counts")
@dataclass(frozen=True)
class GridCountsRequest:
    """Count the snapshot's values in the grid buckets of ``shared.sketches.grid.GridPlan``
    (its arrays). ``target``: the regression target is one more column, after the features (the
    plan has ``n_features + 1`` columns), so that the server reads the fleet's target quantiles
    off the sums as it reads the features'."""

    feature_set_version: str
    feature: Annotated[np.ndarray, _INTS]
    prefix: Annotated[np.ndarray, _INTS]
    bits: Annotated[np.ndarray, _INTS]
    step: Annotated[np.ndarray, _INTS]
    secure: SecureRound | None = None
    noise: NoiseShare | None = None
    word_bits: int = 32  # the narrowest ring word holding the fleet's counts
    target: bool = False

    def __post_init__(self) -> None:
        if self.word_bits not in (16, 32, 64):
            raise ValueError("word_bits must be 16, 32 or 64")


@message_type("fleet_sum")
@dataclass(frozen=True)
class FleetSumReply:
    """A client's vector for a fleet sum (plain or masked)."""

    sums: MaskedVector
