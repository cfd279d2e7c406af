"""Bin edges from fleet-summed count histograms only: a hierarchical grid on float32 bit patterns.

A gateway answers only "how many of my values fall in each of these cells" (``grid_counts``), one
dense int64 vector per round in a layout the server fixed (``GridPlan``), so the vectors can be
secure-aggregated; the server (``GridRefinement``) refines the buckets that hold a target rank,
round by round, and reads bin edges (FedSCS-XGB) or split candidates (FedForest) from the sums.
Every finite float32 maps to an order-preserving uint32 key (``float32_keys``); a bucket is a key
prefix, so coarse levels are a log-scale grid and refinement resolves narrow features down to
single values. Counts are integers, so federated == pooled bit for bit. The protocol, the rank
error guarantee (``1/(2 refine_factor B)`` when refinement completes), the cell layout and the
measured cost are in docs/algorithms/bin_edges.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._inputs import FLOAT32_MAX, as_count
from .edges import finalize_edges
from .errors import SketchError

#: Bits of a key (a float32's bit pattern).
KEY_BITS = 32
#: Default cap on the cells of one plan (one count vector: 32 MiB of int64).
MAX_CELLS = 1 << 22
#: Largest ``first_bits`` / ``step``: at most 65,536 children per refined bucket.
MAX_STEP = 16

_SIGN = np.uint32(0x80000000)
_FLOAT32_MAX32 = np.float32(FLOAT32_MAX)
_PLAN_FIELDS = ("feature", "prefix", "bits", "step")
#: Bound on the server's int64 arithmetic: ``B * W`` per feature and the sum of all ``W``.
_MAX_SCALED = 1 << 62
#: Values a gateway processes at once in ``grid_counts`` (bounds its temporaries to ~50 MB).
_CHUNK_VALUES = 1 << 20
#: Largest total weight a gateway counts exactly with a float64 ``bincount``.
_MAX_EXACT_WEIGHT = 1 << 52


# --- keys ----------------------------------------------------------------------------------------
def float32_keys(X: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Order-preserving uint32 keys of ``X`` rounded to float32, and its missing mask.

    ``x < y`` (as float32) iff ``key(x) < key(y)`` for non-missing values; ``-0.0`` and ``+0.0``
    share a key; ``±inf`` and float64 values beyond float32's range get ``±FLT_MAX``'s key; NaN is
    missing (its key is 0 and must be ignored). Works on any shape (1-D, or ``(n, d)``).

    Parameters
    ----------
    X : array_like of real numbers
        Feature values; NaN means missing.

    Returns
    -------
    keys : numpy.ndarray of uint32, same shape as ``X``
    missing : numpy.ndarray of bool, same shape as ``X``

    Examples
    --------
    >>> keys, missing = float32_keys([-1.0, -0.0, 0.0, 1.0, np.nan])
    >>> [hex(k) for k in keys[:4]]
    ['0x407fffff', '0x80000000', '0x80000000', '0xbf800000']
    >>> missing.tolist()
    [False, False, False, False, True]
    """
    array = np.asarray(X)
    if array.dtype.kind not in "biuf":
        raise SketchError(f"X must hold real numbers (NaN for missing), got dtype {array.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        if array.dtype == np.float32:
            values = np.clip(array, -_FLOAT32_MAX32, _FLOAT32_MAX32)
        else:  # clip in float64 first, like _inputs.as_values, so 1e39 becomes FLT_MAX, not inf
            values = np.clip(array.astype(np.float64), -FLOAT32_MAX, FLOAT32_MAX).astype(np.float32)
    values += np.float32(0.0)  # -0.0 + 0.0 == +0.0 (round to nearest): one key for both zeros
    values = np.ascontiguousarray(values)
    bits = values.view(np.uint32)
    flip = (bits.view(np.int32) >> 31).view(np.uint32) | _SIGN  # negatives: all bits; else the sign
    keys = bits ^ flip
    missing = np.isnan(values)
    keys[missing] = 0
    return keys, missing


def key_values(keys: ArrayLike) -> np.ndarray:
    """The float32 values of uint32 keys: the inverse of ``float32_keys`` on finite values.

    Keys below ``float32_keys(-FLT_MAX)`` or above ``float32_keys(FLT_MAX)`` decode to ``-inf``,
    ``+inf`` or NaN; key ``0x7fffffff`` (which ``float32_keys`` never produces) decodes to ``-0.0``.

    Examples
    --------
    >>> key_values(np.array([0x407FFFFF, 0x80000000, 0xBF800000], dtype=np.uint32)).tolist()
    [-1.0, 0.0, 1.0]
    """
    k = np.asarray(keys)
    if k.dtype.kind not in "iu":
        raise SketchError(f"keys must be integers, got dtype {k.dtype}")
    if k.size and (int(k.min()) < 0 or int(k.max()) > 0xFFFFFFFF):
        raise SketchError("keys must lie in [0, 2**32)")
    k = np.ascontiguousarray(k, dtype=np.uint32)
    flip = (~(k.view(np.int32) >> 31)).view(np.uint32) | _SIGN
    return (k ^ flip).view(np.float32)


# --- the plan ------------------------------------------------------------------------------------
def _int_field(value: Any, name: str) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise SketchError(
            f"plan field {name!r} must be a 1-D integer array, got shape {array.shape} dtype {array.dtype}"
        )
    return array


def _bounded(array: np.ndarray, name: str, low: int, high: int) -> np.ndarray:
    """``array`` as int64 after checking ``low <= array <= high`` in its own dtype (no wrap-around)."""
    if array.size and (int(array.min()) < low or int(array.max()) > high):
        bad = array[(array < low) | (array > high)][0]
        raise SketchError(f"plan field {name!r} must lie in [{low}, {high}], got {int(bad)}")
    return array.astype(np.int64)


@dataclass(frozen=True, eq=False)
class GridPlan:
    """One round's request: the buckets every gateway must count, child by child.

    Listed bucket ``i`` is the level-``bits[i]`` bucket ``prefix[i]`` of feature ``feature[i]``
    (level 0, prefix 0: the whole key space, the first round's root); gateways count their values
    in each of its ``2**step[i]`` children (level ``bits[i] + step[i]``). The reply is a dense int64
    vector of length ``n_cells``, ordered by listed bucket then child (``offsets``; module
    docstring). Buckets are sorted by (feature, key range) and never overlap, so every value falls
    in at most one cell. Immutable and validated on construction (plans arrive from the network);
    the arrays are read-only int64 copies. ``eq=False``: compare ``to_arrays()`` if needed.

    Attributes
    ----------
    n_features : int
        Features of the job (``feature < n_features``).
    feature, prefix, bits, step : numpy.ndarray of int64, one entry per listed bucket
        ``0 <= bits <= 31``, ``0 <= prefix < 2**bits``, ``1 <= step <= 32 - bits``.

    Examples
    --------
    >>> plan = GridPlan(2, feature=[0, 1], prefix=[0, 5], bits=[0, 4], step=[2, 3])
    >>> plan.n_cells, plan.offsets.tolist()
    (12, [0, 4, 12])
    >>> GridPlan.from_arrays(plan.to_arrays(), n_features=2).n_cells
    12
    """

    n_features: int
    feature: np.ndarray
    prefix: np.ndarray
    bits: np.ndarray
    step: np.ndarray
    _offsets: np.ndarray = field(init=False, repr=False)  # set by __post_init__

    def __post_init__(self) -> None:
        n_features = as_count(self.n_features, name="n_features", low=1, high=(1 << 31) - 1)
        raw = {name: _int_field(getattr(self, name), name) for name in _PLAN_FIELDS}
        sizes = {a.size for a in raw.values()}
        if len(sizes) != 1:
            raise SketchError(
                "plan fields feature, prefix, bits and step must have one entry per bucket, got "
                f"lengths {[raw[n].size for n in _PLAN_FIELDS]}"
            )
        feature = _bounded(raw["feature"], "feature", 0, n_features - 1)
        bits = _bounded(raw["bits"], "bits", 0, KEY_BITS - 1)
        step = _bounded(raw["step"], "step", 1, KEY_BITS)
        prefix = _bounded(raw["prefix"], "prefix", 0, 0xFFFFFFFF)
        if np.any(bits + step > KEY_BITS):
            i = int(np.flatnonzero(bits + step > KEY_BITS)[0])
            raise SketchError(f"bucket {i}: level {bits[i]} + step {step[i]} exceeds {KEY_BITS} bits")
        if np.any(prefix >= (1 << bits)):
            i = int(np.flatnonzero(prefix >= (1 << bits))[0])
            raise SketchError(f"bucket {i}: prefix {prefix[i]} does not fit in {bits[i]} bits")
        start = (feature << KEY_BITS) + (prefix << (KEY_BITS - bits))
        end = start + (1 << (KEY_BITS - bits))
        if np.any(start[1:] < end[:-1]):
            i = int(np.flatnonzero(start[1:] < end[:-1])[0]) + 1
            raise SketchError(
                f"bucket {i} is out of order or overlaps bucket {i - 1}: buckets must be sorted "
                "by (feature, key) and disjoint"
            )
        for name, array in (("feature", feature), ("prefix", prefix), ("bits", bits), ("step", step)):
            array.setflags(write=False)
            object.__setattr__(self, name, array)
        object.__setattr__(self, "n_features", n_features)
        offsets = np.concatenate(([0], np.cumsum(np.int64(1) << step))).astype(np.int64)
        offsets.setflags(write=False)
        object.__setattr__(self, "_offsets", offsets)

    @property
    def n_buckets(self) -> int:
        """Number of listed buckets."""
        return int(self.feature.size)

    @property
    def n_cells(self) -> int:
        """Length of the count vector: ``sum(2**step)``."""
        return int(self._offsets[-1])

    @property
    def offsets(self) -> np.ndarray:
        """int64 ``(n_buckets + 1,)``: bucket ``i``'s cells are ``offsets[i]:offsets[i + 1]``."""
        return self._offsets

    @property
    def low(self) -> np.ndarray:
        """int64 first key of each listed bucket (``prefix << (32 - bits)``)."""
        return self.prefix << (KEY_BITS - self.bits)

    @property
    def child_shift(self) -> np.ndarray:
        """int64 log2 of a child's key width: ``32 - bits - step``."""
        return KEY_BITS - self.bits - self.step

    @property
    def cells_per_feature(self) -> np.ndarray:
        """int64 ``(n_features,)``: the cells of each feature in this plan."""
        cells = np.diff(self._offsets)
        return np.bincount(self.feature, weights=cells, minlength=self.n_features).astype(np.int64)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Wire form: ``feature`` int32, ``prefix`` uint32, ``bits`` and ``step`` uint8 arrays.

        ``n_features`` is not sent: a gateway knows its job's feature count and passes it to
        ``from_arrays``.
        """
        return {
            "feature": self.feature.astype(np.int32),
            "prefix": self.prefix.astype(np.uint32),
            "bits": self.bits.astype(np.uint8),
            "step": self.step.astype(np.uint8),
        }

    @classmethod
    def from_arrays(cls, data: Mapping[str, Any], *, n_features: int, max_cells: int = MAX_CELLS) -> GridPlan:
        """Inverse of ``to_arrays``; validates everything (the data come from the network).

        Raises ``SketchError`` (a ``ValueError``) for missing fields, non-integer or ragged arrays,
        levels outside 0..31, steps beyond 32 bits, prefixes that do not fit their level, features
        outside ``0..n_features-1``, unsorted or overlapping buckets, or more than ``max_cells``
        cells (checked before anything of that size is allocated).
        """
        max_cells = as_count(max_cells, name="max_cells", low=1)
        if not isinstance(data, Mapping):
            raise SketchError(f"a plan must be a mapping of arrays, got {type(data).__name__}")
        try:
            fields = {name: _int_field(data[name], name) for name in _PLAN_FIELDS}
        except KeyError as exc:
            raise SketchError(f"plan is missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, SketchError):
                raise
            raise SketchError(f"malformed plan: {exc}") from None
        if any(a.size > max_cells for a in fields.values()):  # every bucket has >= 2 cells
            raise SketchError(f"plan lists more buckets than the {max_cells}-cell cap allows")
        step = fields["step"]
        if step.size and (int(step.min()) < 1 or int(step.max()) > KEY_BITS):
            raise SketchError(f"plan field 'step' must lie in [1, {KEY_BITS}]")
        cells = int(np.sum(np.left_shift(1, step.astype(np.int64)), dtype=np.int64)) if step.size else 0
        if cells > max_cells:
            raise SketchError(f"plan asks for {cells} cells, more than the cap of {max_cells}")
        return cls(n_features, **fields)


def initial_plan(n_features: int, first_bits: int = 8) -> GridPlan:
    """The first round's plan: every level-``first_bits`` bucket of every feature.

    One root bucket (level 0) per feature with ``step = first_bits``: ``n_features *
    2**first_bits`` cells, feature ``j``'s bucket ``p`` at cell ``j * 2**first_bits + p``.

    Examples
    --------
    >>> initial_plan(3, first_bits=8).n_cells
    768
    """
    n_features = as_count(n_features, name="n_features", low=1, high=(1 << 31) - 1)
    first_bits = as_count(first_bits, name="first_bits", low=1, high=MAX_STEP)
    zeros = np.zeros(n_features, dtype=np.int64)
    return GridPlan(n_features, np.arange(n_features), zeros, zeros, np.full(n_features, first_bits))


# --- the client ----------------------------------------------------------------------------------
def _as_int_weights(weights: ArrayLike | None, n: int) -> np.ndarray | None:
    if weights is None:
        return None
    w = np.asarray(weights)
    if w.dtype.kind not in "iu":
        raise SketchError(
            f"weights must be integer counts (window counts, bootstrap multiplicities), got dtype {w.dtype}"
        )
    if w.shape != (n,):
        raise SketchError(f"weights must have shape ({n},) — one per row — got {w.shape}")
    if w.size and int(w.min()) < 0:
        raise SketchError("weights must be >= 0")
    if w.size and float(np.sum(w, dtype=np.float64)) > _MAX_EXACT_WEIGHT:
        raise SketchError("weights sum beyond 2**52: counts would not be exact")
    return w.astype(np.float64)  # exact: every partial sum stays below 2**53


def grid_counts(keys: ArrayLike, missing: ArrayLike, plan: GridPlan, weights: ArrayLike | None = None) -> np.ndarray:
    """A gateway's reply to ``plan``: its (weighted) count in every cell, int64 ``(plan.n_cells,)``.

    Parameters
    ----------
    keys, missing : array_like, shape ``(n, n_features)`` (or ``(n,)`` for one feature)
        From ``float32_keys`` (compute them once per job and reuse them every round).
    plan : GridPlan
        The round's plan; ``plan.n_features`` must match the columns.
    weights : array_like of int, shape ``(n,)``, optional
        Non-negative integer multiplicity of each row; ``None`` counts each row once.

    Returns
    -------
    numpy.ndarray of int64
        Dense counts in the plan's layout; missing values and values outside every listed bucket
        are not counted.

    Examples
    --------
    >>> keys, missing = float32_keys(np.array([[-1.0], [0.5], [2.0], [np.nan]]))
    >>> grid_counts(keys, missing, initial_plan(1, first_bits=1)).tolist()  # negatives, non-negatives
    [1, 2]
    >>> grid_counts(keys, missing, initial_plan(1, first_bits=1), weights=[3, 1, 1, 5]).tolist()
    [3, 2]
    """
    if not isinstance(plan, GridPlan):
        raise SketchError(f"plan must be a GridPlan, got {type(plan).__name__}")
    K = np.asarray(keys)
    M = np.asarray(missing)
    if K.ndim == 1:
        K, M = K[:, None], (M.reshape(-1, 1) if M.ndim == 1 else M)
    if K.ndim != 2 or K.dtype.kind not in "iu":
        raise SketchError(f"keys must be a 2-D integer array from float32_keys, got shape {K.shape} dtype {K.dtype}")
    if M.shape != K.shape or M.dtype != np.bool_:
        raise SketchError(f"missing must be a bool array of the keys' shape {K.shape}, got {M.shape} {M.dtype}")
    n, d = K.shape
    if d != plan.n_features:
        raise SketchError(f"the plan is for {plan.n_features} features, the keys have {d} columns")
    if K.dtype != np.uint32 and K.size and (int(K.min()) < 0 or int(K.max()) > 0xFFFFFFFF):
        raise SketchError("keys must lie in [0, 2**32)")
    w = _as_int_weights(weights, n)
    n_cells = plan.n_cells
    if plan.n_buckets == 0 or n == 0:
        return np.zeros(n_cells, dtype=np.int64)
    start = (plan.feature << KEY_BITS) + plan.low
    width = np.int64(1) << (KEY_BITS - plan.bits)
    counts = np.zeros(n_cells, dtype=np.int64)
    columns = np.unique(plan.feature)  # only the features the plan asks about
    per_chunk = max(1, _CHUNK_VALUES // n)  # bounds the temporaries (~50 bytes per value)
    for first in range(0, columns.size, per_chunk):  # a loop over chunks of features, not samples
        cols = columns[first : first + per_chunk]
        present = ~M[:, cols]
        g = K[:, cols][present].astype(np.int64)  # (feature << 32) + key of every present value
        g += np.broadcast_to(cols.astype(np.int64) << KEY_BITS, present.shape)[present]
        i = np.searchsorted(start, g, side="right") - 1
        np.maximum(i, 0, out=i)
        rel = g - start[i]
        inside = (rel >= 0) & (rel < width[i])  # rel < 0 only below the first bucket (i clipped)
        cell = plan.offsets[i] + (rel >> plan.child_shift[i])
        if w is None:
            counts += np.bincount(cell[inside], minlength=n_cells)
        else:
            row_weights = np.broadcast_to(w[:, None], present.shape)[present]
            counts += np.bincount(cell[inside], weights=row_weights[inside], minlength=n_cells).astype(np.int64)
    return counts


# --- the server ----------------------------------------------------------------------------------
def _as_fleet_counts(counts: ArrayLike, n_cells: int) -> np.ndarray:
    c = np.asarray(counts)
    if c.ndim != 1 or c.dtype.kind not in "iu":
        raise SketchError(f"fleet counts must be a 1-D integer vector, got shape {c.shape} dtype {c.dtype}")
    if c.size != n_cells:
        raise SketchError(f"fleet counts have {c.size} cells, the plan has {n_cells}")
    if c.size and (int(c.min()) < 0 or int(c.max()) >= _MAX_SCALED):
        raise SketchError(f"fleet counts must lie in [0, 2**62), got {int(c.min())}..{int(c.max())}")
    return c.astype(np.int64)


def _same_plan(a: GridPlan, b: GridPlan) -> bool:
    return a is b or (
        a.n_features == b.n_features and all(np.array_equal(getattr(a, f), getattr(b, f)) for f in _PLAN_FIELDS)
    )


class GridRefinement:
    """The server's state across rounds: the fleet's count tree, the next plan, the edges.

    Parameters
    ----------
    n_features : int
    n_bins : int
        ``B``; the targets are the ranks ``b/B``, ``b = 1..B-1`` (2 <= B <= 65,535).
    first_bits : int, default 8
        Level of the first round's buckets (``2**first_bits`` cells per feature), 1..16.
    step : int, default 4
        Levels added per refinement (``2**step`` children per refined bucket), 1..16.
    refine_factor : float, default 2.0
        A leaf holding a target is refined while its count exceeds ``W / (refine_factor B)``;
        the final rank error is at most ``1 / (2 refine_factor B)`` (module docstring).
    max_rounds : int, optional
        Rounds including the first; default ``1 + ceil((max_bits - first_bits) / step)``.
    max_cells : int, default ``MAX_CELLS``
        Cap on one plan's cells (heaviest buckets first when it binds). Must admit the first
        plan (``n_features * 2**first_bits``).
    max_bits : int, default 32
        Finest level; 32 resolves single float32 values.

    Attributes
    ----------
    rounds : int
        Count vectors received so far.
    cells_sent : int
        Cells of those vectors (each gateway sent ``8 * cells_sent`` bytes as int64).
    cells_per_feature : numpy.ndarray of int64
        ``cells_sent`` split by feature.
    capped_rounds : int
        Plans that the cell cap trimmed.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> clients = [float32_keys(rng.normal(size=(500, 2))) for _ in range(3)]
    >>> server = GridRefinement(n_features=2, n_bins=16)
    >>> plan = server.first_plan()
    >>> while plan is not None:
    ...     fleet = sum(grid_counts(k, m, plan) for k, m in clients)  # secure aggregation
    ...     plan = server.add(plan, fleet)
    >>> [e.size for e in server.edges()]
    [15, 15]
    """

    def __init__(
        self,
        n_features: int,
        n_bins: int,
        *,
        first_bits: int = 8,
        step: int = 4,
        refine_factor: float = 2.0,
        max_rounds: int | None = None,
        max_cells: int = MAX_CELLS,
        max_bits: int = KEY_BITS,
    ) -> None:
        self.n_features = as_count(n_features, name="n_features", low=1, high=(1 << 31) - 1)
        self.n_bins = as_count(n_bins, name="n_bins", low=2, high=65_535)
        self.max_bits = as_count(max_bits, name="max_bits", low=1, high=KEY_BITS)
        self.first_bits = as_count(first_bits, name="first_bits", low=1, high=min(MAX_STEP, self.max_bits))
        self.step = as_count(step, name="step", low=1, high=MAX_STEP)
        try:
            factor = float(refine_factor)
        except (TypeError, ValueError):
            raise SketchError(f"refine_factor must be a real number, got {refine_factor!r}") from None
        if not (math.isfinite(factor) and factor > 0):
            raise SketchError(f"refine_factor must be finite and > 0, got {refine_factor!r}")
        self.refine_factor = factor
        default_rounds = 1 + math.ceil((self.max_bits - self.first_bits) / self.step)
        self.max_rounds = default_rounds if max_rounds is None else as_count(max_rounds, name="max_rounds", low=1)
        self.max_cells = as_count(max_cells, name="max_cells", low=1)
        needed = max(self.n_features << self.first_bits, 1 << self.step)
        if self.max_cells < needed:
            raise SketchError(
                f"max_cells = {self.max_cells} cannot hold the first plan or one refined bucket ({needed} cells)"
            )
        self.rounds = 0
        self.cells_sent = 0
        self.cells_per_feature = np.zeros(self.n_features, dtype=np.int64)
        self.capped_rounds = 0
        self._total = np.zeros(self.n_features, dtype=np.int64)
        # Non-empty leaves, sorted by (feature, low): feature, first key, level, fleet count.
        self._feature = np.empty(0, dtype=np.int64)
        self._low = np.empty(0, dtype=np.int64)
        self._bits = np.empty(0, dtype=np.int64)
        self._count = np.empty(0, dtype=np.int64)
        self._pending: GridPlan | None = None
        self._parents: np.ndarray | None = None  # leaf indices the pending plan refines (None: roots)
        self._done = False

    def choose_bins(self, n_bins: int) -> None:
        """Set ``n_bins`` from round 1's counts, before ``add`` takes them: round 1's plan does
        not depend on it, every later plan and the edges do (a caller that learns the fleet's
        size from round 1 can size the bins to it)."""
        if self.rounds:
            raise SketchError("n_bins is fixed once round 1's counts are added")
        self.n_bins = as_count(n_bins, name="n_bins", low=2, high=65_535)

    @property
    def done(self) -> bool:
        """True once ``add`` has returned ``None``."""
        return self._done

    @property
    def totals(self) -> np.ndarray:
        """int64 ``(n_features,)``: the fleet's non-missing (weighted) count per feature."""
        return self._total.copy()

    @property
    def parent_counts(self) -> np.ndarray | None:
        """The counts of the buckets the pending plan refines (``None`` for the first plan):
        what noisy children must add up to (``shared.differential_privacy.consistent_children``)."""
        return None if self._parents is None else self._count[self._parents].copy()

    @property
    def n_leaves(self) -> int:
        """Non-empty leaves currently held (all features)."""
        return int(self._count.size)

    def first_plan(self) -> GridPlan:
        """Round 1's plan (``initial_plan``); the loop starts here."""
        if self.rounds or self._done:
            raise SketchError("the refinement has already started; first_plan() belongs to round 1")
        plan = initial_plan(self.n_features, self.first_bits)
        self._pending, self._parents = plan, None
        return plan

    def add(self, plan: GridPlan, fleet_counts: ArrayLike) -> GridPlan | None:
        """Take the fleet's summed counts for ``plan``; return the next plan, or ``None`` when done.

        ``plan`` must be the pending plan (``first_plan`` or the last ``add``'s answer). Raises
        ``SketchError`` for another plan, a vector of the wrong length, negative or non-integer
        counts, or children that do not add up to their parent's count (the fleet's data or its
        membership changed between rounds: restart the loop with a fixed cohort).
        """
        if self._done:
            raise SketchError("the refinement is done; no further counts are expected")
        if self._pending is None:
            raise SketchError("no plan is pending: call first_plan() first")
        if not isinstance(plan, GridPlan) or not _same_plan(plan, self._pending):
            raise SketchError("these counts answer a different plan than the pending one")
        counts = _as_fleet_counts(fleet_counts, plan.n_cells)
        offsets = plan.offsets
        bucket_sums = np.add.reduceat(counts, offsets[:-1]) if plan.n_buckets else np.zeros(0, np.int64)
        if self._parents is None:
            totals = [int(v) for v in bucket_sums]
            if sum(totals) >= _MAX_SCALED or max(totals) * self.n_bins >= _MAX_SCALED:
                raise SketchError(
                    "the fleet counts are too large for exact int64 rank arithmetic "
                    "(n_bins * count and the sum over features must stay below 2**62)"
                )
            self._total = bucket_sums.astype(np.int64)
        elif not np.array_equal(bucket_sums, self._count[self._parents]):
            i = int(np.flatnonzero(bucket_sums != self._count[self._parents])[0])
            raise SketchError(
                f"the children of bucket {i} sum to {int(bucket_sums[i])}, its count was "
                f"{int(self._count[self._parents[i]])}: the fleet changed between rounds"
            )
        # The non-empty children become leaves, replacing their parents.
        nz = np.flatnonzero(counts)
        b = np.searchsorted(offsets, nz, side="right") - 1
        shift = plan.child_shift[b]
        child_low = plan.low[b] + ((nz - offsets[b]) << shift)
        keep = np.ones(self._count.size, dtype=bool)
        if self._parents is not None:
            keep[self._parents] = False
        feature = np.concatenate((self._feature[keep], plan.feature[b]))
        low = np.concatenate((self._low[keep], child_low))
        order = np.argsort((feature << KEY_BITS) + low, kind="stable")
        self._feature = feature[order]
        self._low = low[order]
        self._bits = np.concatenate((self._bits[keep], KEY_BITS - shift))[order]
        self._count = np.concatenate((self._count[keep], counts[nz]))[order]
        self.rounds += 1
        self.cells_sent += plan.n_cells
        self.cells_per_feature += plan.cells_per_feature
        self._pending, self._parents = None, None
        following = self._next_plan() if self.rounds < self.max_rounds else None
        if following is None:
            self._done = True
        return following

    def _cumulative(self) -> tuple[np.ndarray, np.ndarray]:
        """Per leaf: fleet count through it within its feature, and its feature's total."""
        before_feature = np.concatenate(([0], np.cumsum(self._total)[:-1]))
        through = np.cumsum(self._count) - before_feature[self._feature]
        return through, self._total[self._feature]

    def _next_plan(self) -> GridPlan | None:
        if self._count.size == 0:
            return None
        B = self.n_bins
        through, W = self._cumulative()
        before = through - self._count
        heavy = self._count * (self.refine_factor * B) > W
        first_target = before * B // W + 1  # the first b with b W / B > before
        holds_target = (first_target <= B - 1) & (first_target * W < through * B)
        need = np.flatnonzero(heavy & holds_target & (self._bits < self.max_bits))
        if need.size == 0:
            return None
        step = np.minimum(self.step, self.max_bits - self._bits[need])
        cells = np.int64(1) << step
        if int(cells.sum()) > self.max_cells:  # heaviest first, then feature and key: deterministic
            order = np.lexsort((self._low[need], self._feature[need], -self._count[need]))
            fits = order[np.cumsum(cells[order]) <= self.max_cells]
            chosen = np.sort(fits)
            need, step = need[chosen], step[chosen]
            self.capped_rounds += 1
        bits = self._bits[need]
        plan = GridPlan(self.n_features, self._feature[need], self._low[need] >> (KEY_BITS - bits), bits, step)
        self._pending, self._parents = plan, need
        return plan

    def edges(self, *, include_min_point: bool = False) -> list[np.ndarray]:
        """Float32 bin edges per feature from the current leaves (module docstring, step 4).

        At most ``n_bins - 1`` strictly increasing finite edges per feature, each separating two
        non-empty leaves; empty for a feature with no value or a single value. With
        ``include_min_point`` the minimum is also offered when it is a single value (see the
        module docstring): then a constant feature gets ``[c]`` like ``merge_edges``.
        Available after the first ``add`` (coarser before the loop is done).
        """
        if self.rounds == 0:
            raise SketchError("no counts yet: add() the first round's fleet counts before asking for edges")
        B = self.n_bins
        b = np.arange(1, B, dtype=np.int64)
        starts = np.searchsorted(self._feature, np.arange(self.n_features + 1), side="left")
        out: list[np.ndarray] = []
        for j in range(self.n_features):  # the loop is over features; each body is vectorised
            s, e = starts[j], starts[j + 1]
            count, low, bits = self._count[s:e], self._low[s:e], self._bits[s:e]
            C = np.cumsum(count)
            single = bits[1:] >= KEY_BITS  # the next leaf is one value: the edge's bracket spans it
            lo = C[:-1]
            hi = lo + np.where(single, count[1:], 0)
            key = low[1:]
            if include_min_point and count.size and bits[0] >= KEY_BITS:
                lo, hi, key = np.r_[0, lo], np.r_[count[0], hi], np.r_[low[0], key]
            if key.size == 0:
                out.append(np.empty(0, dtype=np.float32))
                continue
            t = b * C[-1]  # targets, scaled by B like the brackets below
            L, H = lo * B, hi * B
            k = np.searchsorted(H, t, side="left")  # brackets are disjoint and ordered
            upper = np.minimum(k, key.size - 1)
            lower = np.maximum(k - 1, 0)
            d_up = np.maximum(np.maximum(L[upper] - t, t - H[upper]), 0)
            d_low = np.maximum(np.maximum(L[lower] - t, t - H[lower]), 0)
            chosen = np.unique(key[np.where(d_low <= d_up, lower, upper)])  # ties: the lower
            # A point mass holding a target becomes its own bin: its targets took the edge at its
            # value (bracket distance 0); add the boundary after it too, heaviest first, within B-1.
            W = C[-1]
            first_target = (C - count) * B // W + 1
            point = np.flatnonzero((bits >= KEY_BITS) & (first_target <= B - 1) & (first_target * W < C * B))
            point = point[point < count.size - 1]  # the last leaf has no boundary after it
            if point.size:
                extra = low[point[np.lexsort((point, -count[point]))] + 1]
                extra = extra[~np.isin(extra, chosen)][: max(B - 1 - chosen.size, 0)]
                chosen = np.union1d(chosen, extra)
            values = key_values(chosen)  # bit patterns past +-inf (reachable only with noisy counts) are NaN
            out.append(finalize_edges(values[~np.isnan(values)]))
        return out


# --- one dataset ---------------------------------------------------------------------------------
def grid_refine(X: ArrayLike, n_bins: int, weights: ArrayLike | None = None, **kw: Any) -> GridRefinement:
    """Run the whole loop on one dataset (one gateway, or the pooled rows) and return the server.

    ``kw`` goes to ``GridRefinement``. Useful for its ``rounds`` / ``cells_per_feature``.

    Examples
    --------
    >>> server = grid_refine(np.arange(100.0)[:, None], n_bins=4)
    >>> server.rounds, server.edges()[0].tolist()
    (2, [24.0, 48.0, 72.0])
    """
    data = np.asarray(X)
    if data.ndim != 2:
        raise SketchError(f"X must be 2-D (n_samples, n_features), got shape {data.shape}")
    keys, missing = float32_keys(data)
    server = GridRefinement(data.shape[1], n_bins, **kw)
    plan: GridPlan | None = server.first_plan()
    while plan is not None:
        plan = server.add(plan, grid_counts(keys, missing, plan, weights))
    return server


def grid_edges(
    X: ArrayLike, n_bins: int, weights: ArrayLike | None = None, *, include_min_point: bool = False, **kw: Any
) -> list[np.ndarray]:
    """Float32 edges per column of ``X`` from the grid loop run on ``X`` alone: the pooled oracle.

    The federated loop over any split of ``X``'s rows among gateways gives exactly these edges.
    ``kw`` goes to ``GridRefinement``; ``weights`` are integer row multiplicities.

    Examples
    --------
    >>> X = np.column_stack([np.arange(8.0), np.full(8, 3.0)])
    >>> [e.tolist() for e in grid_edges(X, n_bins=4)]
    [[2.0, 4.0, 6.0], []]
    """
    server = grid_refine(X, n_bins, weights, **kw)
    return server.edges(include_min_point=include_min_point)
